"""The default int8 compilation for the accelerator is as accurate as onnxruntime's own int8
quantization of the same model (QDQ, per-tensor MinMax, the same calibration inputs): the
oracle is onnxruntime, not a recorded number."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    quantize_static,
)

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import mobilenet_v2_block

SHAPE = (1, 16, 14, 14)


class _Batches(CalibrationDataReader):
    def __init__(self, name: str, xs: list[np.ndarray]) -> None:
        self._batches = iter([{name: x} for x in xs])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def _run(session: ort.InferenceSession, name: str, xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([session.run(None, {name: x})[0] for x in xs])


def _relative_error(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    model = mobilenet_v2_block(SHAPE[2])  # 1x1 convs on the accelerator, depthwise in float
    name = model.graph.input[0].name
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4)]
    test = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4)]
    folder = tmp_path_factory.mktemp("ort_int8")
    onnx.save(model, folder / "float.onnx")
    quantize_static(folder / "float.onnx", folder / "int8.onnx", _Batches(name, calib),
                    quant_format=QuantFormat.QDQ, per_channel=False,
                    calibrate_method=CalibrationMethod.MinMax)  # fmt: skip
    ref = _run(ort.InferenceSession(str(folder / "float.onnx")), name, test)
    ort_int8 = _run(ort.InferenceSession(str(folder / "int8.onnx")), name, test)
    return model, name, calib, test, ref, _relative_error(ort_int8, ref)


def test_default_mode_on_pynq_is_mul_and_as_accurate_as_onnxruntime_int8(case) -> None:
    model, name, calib, test, ref, ort_error = case
    module = tensorforge.compile(
        model, "vta -config=pynq", calibration=[{name: x} for x in calib], progress=False
    )
    assert module.stats["requant_mode"] == "mul"
    assert module.stats["accelerator_kernels"] > 0
    out = np.concatenate([module.run({name: x})[module.outputs[0]] for x in test])
    error = _relative_error(out, ref)
    assert 0 < ort_error < 0.2  # onnxruntime's int8 is a meaningful yardstick here
    assert error <= 1.5 * ort_error, (error, ort_error)
