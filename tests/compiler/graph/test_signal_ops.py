"""DFT (products with cosine and sine matrices), STFT, the signal windows and MelWeightMatrix,
compiled, against onnxruntime (numpy's FFT for the inverse of a one-sided spectrum)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError


def _model(node, inputs, consts, opset=20):  # noqa: ANN001, ANN202
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _compare(model, feed: dict, atol: float = 1e-4) -> None:  # noqa: ANN001
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)


DFTS = [
    ((2, 12, 1), {}, None, -2),  # real in, complex out
    ((2, 12, 2), {"inverse": 1}, None, 1),  # complex inverse
    ((3, 10, 4, 1), {"onesided": 1}, 16, 1),  # zero-padded to 16, one-sided
    ((3, 10, 4, 2), {}, 7, 1),  # cut to 7
    ((2, 5, 9, 2), {"inverse": 1}, 12, -2),
]


@pytest.mark.parametrize(("shape", "attrs", "length", "axis"), DFTS)
def test_dft_matches_onnxruntime(shape: tuple, attrs: dict, length: int | None, axis: int) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    consts = {"axis": np.array(axis, np.int64)}
    if length is not None:
        consts["n"] = np.array(length, np.int64)
    node = oh.make_node("DFT", ["x", "n" if length else "", "axis"], ["y"], **attrs)
    _compare(_model(node, [("x", shape)], consts), {"x": x})


def test_dft_of_opset_17_takes_its_axis_attribute() -> None:
    x = np.random.default_rng(1).standard_normal((4, 6, 1)).astype(np.float32)
    node = oh.make_node("DFT", ["x"], ["y"], axis=0)  # opset 17's default axis is 1
    _compare(_model(node, [("x", (4, 6, 1))], {}, opset=17), {"x": x})


@pytest.mark.parametrize("length", [None, 9])
def test_inverse_of_a_one_sided_spectrum_is_a_real_signal(length: int | None) -> None:
    x = np.random.default_rng(2).standard_normal((3, 5, 2)).astype(np.float32)
    consts = {"axis": np.array(1, np.int64)}
    if length:
        consts["n"] = np.array(length, np.int64)
    node = oh.make_node("DFT", ["x", "n" if length else "", "axis"], ["y"], inverse=1, onesided=1)
    got = tensorforge.compile(_model(node, [("x", (3, 5, 2))], consts)).run({"x": x})["y"]
    want = np.fft.irfft(x[..., 0] + 1j * x[..., 1], n=length or 8, axis=1)[..., None]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_with_a_run_time_window_matches_onnxruntime(onesided: int) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 50, 1)).astype(np.float32)
    window = rng.random(12).astype(np.float32)
    node = oh.make_node("STFT", ["x", "step", "w", "len"], ["y"], onesided=onesided)
    consts = {"step": np.array(5, np.int64), "len": np.array(12, np.int64)}
    model = _model(node, [("x", (2, 50, 1)), ("w", (12,))], consts, opset=17)
    _compare(model, {"x": x, "w": window})


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [70, 1])  # 70: past import folding; 1 symmetric: 0 / 0, NaN
def test_windows_match_onnxruntime(op: str, periodic: int, size: int) -> None:
    node = oh.make_node(op, ["size"], ["y"], periodic=periodic)
    model = _model(node, [], {"size": np.array(size, np.int64)}, opset=17)
    _compare(model, {}, atol=1e-6)


def test_mel_weight_matrix_matches_onnxruntime() -> None:
    consts = {
        "bins": np.array(8, np.int64),
        "n": np.array(64, np.int64),
        "rate": np.array(8000, np.int64),
        "low": np.array(20.0, np.float32),
        "high": np.array(3900.0, np.float32),
    }
    node = oh.make_node("MelWeightMatrix", list(consts), ["y"])
    _compare(_model(node, [], consts, opset=17), {}, atol=1e-6)


def test_dft_along_the_parts_axis_is_refused_by_name() -> None:
    node = oh.make_node("DFT", ["x", "", "axis"], ["y"], name="spectrum")
    model = _model(node, [("x", (2, 8, 2))], {"axis": np.array(-1, np.int64)})
    with pytest.raises(OnnxImportError, match=r"DFT node 'spectrum'.*axis must .*not be the last"):
        tensorforge.compile(model)
