"""int8 accuracy on the accelerator next to onnxruntime's own int8 quantization of the same model.

For each model, the same calibration inputs and the same test inputs (batch 1 each):

- float: the float model under onnxruntime (the reference);
- ORT int8: ``onnxruntime.quantization.quantize_static`` (QDQ format, per-tensor, MinMax
  calibration, its default int8 activations and weights) on the calibration inputs, run by
  onnxruntime; ORT sym: the same with ``ActivationSymmetric`` (zero point 0, as TensorForge);
- TF shift / TF mul/tensor / TF mul/channel: ``tensorforge.compile(model, target="vta
  -config=pynq -mode=... -weights=...")`` calibrated on the same inputs (abs-max observer,
  symmetric per-tensor activation scales; shift: power-of-two scales; mul: any scales, with one
  weight scale per layer or per output channel, the default on configs with the ALU MUL), run
  with the accelerator layers on the ``sim`` device (bit-exact with the cycle model and the
  RTL).

Printed per model: the share of conv/dense/matmul MACs on the accelerator, each int8 version's
relative error against float over all test outputs (``||y - y_float|| / ||y_float||``), the
ratio of the default's (TF mul/channel) error to onnxruntime's, and (for classifiers) the share
of test inputs whose top-1 class equals float's. What differs by design: onnxruntime quantizes
every op (depthwise convs, Clip, pooling, adds) with asymmetric activations, TensorForge only
what the accelerator runs (conv/dense with their ReLU, residual adds, max pooling) with
symmetric ones, so e.g. depthwise convs and ReLU6 stay float and ReLU outputs use half the int8
range.

Models: the shipped digits CNN (trained, its own test images) and, from
compiler/frontend/onnx_builders.py with fixed random weights and standard-normal inputs,
ResNet-18, MobileNetV2 (width 0.5) and two MobileNetV2 inverted-residual blocks.

Usage:
    python benchmarks/int8_accuracy.py [--models digits,resnet18,mobilenet_v2,mbv2_block]
                                       [--size 64] [--calib 16] [--test N] [--json]

``--test`` defaults to the whole test split (450 images) for digits and 32 inputs for the
others: on 16 digits images onnxruntime's int8 error was 0.0075, on all 450 it is 0.017, so a
small test set decides the ratio more than the quantization does.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from machine import describe

MODELS = ("digits", "resnet18", "mobilenet_v2", "mbv2_block")
# column -> the target's options: power-of-two scales; multiply+shift with one weight scale per
# layer; multiply+shift with per-channel weight scales (the default on configs with the ALU MUL)
MODES = {
    "shift": "-mode=shift",
    "mul_tensor": "-mode=mul -weights=per-tensor",
    "mul": "-mode=mul -weights=per-channel",
}


def _model(name: str, size: int) -> tuple[Any, tuple[int, ...]]:
    """(ONNX model with a batch of 1, its input shape)."""
    from tensorforge.compiler.frontend import onnx_builders as zoo

    if name == "digits":
        import onnx

        from tensorforge.digits import load_digits_assets

        model = onnx.load(str(load_digits_assets()[0]))
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # symbolic in the file
        return model, (1, 1, 8, 8)
    if name == "resnet18":
        return zoo.resnet18(size, classes=100), (1, 3, size, size)
    if name == "mobilenet_v2":
        return zoo.mobilenet_v2(size, classes=100, width=0.5), (1, 3, size, size)
    if name == "mbv2_block":
        return zoo.mobilenet_v2_block(size // 2), (1, 16, size // 2, size // 2)
    raise ValueError(f"model must be one of {', '.join(MODELS)}, not {name!r}")


def _inputs(name: str, shape: tuple[int, ...], n_calib: int, n_test: int):
    """(calibration inputs, test inputs): lists of arrays of `shape`."""
    if name == "digits":
        from tensorforge.digits import load_digits_assets

        split = load_digits_assets()[1]
        return list(split["calib_images"][:n_calib, None]), list(split["images"][:n_test, None])
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(n_calib + n_test)]
    return xs[:n_calib], xs[n_calib:]


def _ort_int8(model: Any, name: str, calib: list[np.ndarray], folder: Path, symmetric: bool) -> Any:
    """onnxruntime's static int8 quantization (QDQ, per-tensor MinMax) as a session;
    `symmetric`: activations with zero point 0 too (TensorForge's scheme)."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        quantize_static,
    )

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{name: x} for x in calib])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    onnx.save(model, folder / "float.onnx")  # quantize_static rewrites the proto it is given
    quantize_static(folder / "float.onnx", folder / "int8.onnx", Batches(),
                    quant_format=QuantFormat.QDQ, per_channel=False,
                    calibrate_method=CalibrationMethod.MinMax,
                    extra_options={"ActivationSymmetric": symmetric})  # fmt: skip
    return ort.InferenceSession(str(folder / "int8.onnx"))


def _scores(y: np.ndarray, ref: np.ndarray) -> dict[str, float | None]:
    error = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    top1 = float(np.mean(y.argmax(-1) == ref.argmax(-1))) if ref.ndim == 2 else None
    return {"error": error, "top1": top1}


def run_model(name: str, size: int, n_calib: int, n_test: int) -> dict[str, Any]:
    import onnxruntime as ort

    import tensorforge

    start = time.perf_counter()
    model, shape = _model(name, size)
    key = model.graph.input[0].name
    calib, test = _inputs(name, shape, n_calib, n_test)
    ref_session = ort.InferenceSession(model.SerializeToString())
    ref = np.concatenate([ref_session.run(None, {key: x})[0] for x in test])
    row: dict[str, Any] = {"model": name}
    for column, symmetric in (("ort", False), ("ort_sym", True)):
        with tempfile.TemporaryDirectory() as folder:
            session = _ort_int8(model, key, calib, Path(folder), symmetric)
            out = np.concatenate([session.run(None, {key: x})[0] for x in test])
        row[column] = _scores(out, ref)
    for mode, options in MODES.items():
        module = tensorforge.compile(model, f"vta -config=pynq {options}", progress=False,
                                     calibration=[{key: x} for x in calib])  # fmt: skip
        out = np.concatenate([module.run({key: x})[module.outputs[0]] for x in test])
        row[mode] = _scores(out, ref)
        row["offloaded_macs"] = module.stats["offloaded_macs"]
    row["seconds"] = time.perf_counter() - start
    return row


def _top1(score: dict[str, Any]) -> str:
    return "-" if score["top1"] is None else f"{score['top1']:.0%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--size", type=int, default=64, help="input size of the generated models")
    ap.add_argument("--calib", type=int, default=16, help="calibration inputs")
    what = "test inputs (default: digits' whole test split, 32 for the others)"
    ap.add_argument("--test", type=int, default=None, help=what)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tests = {m: args.test or (450 if m == "digits" else 32) for m in args.models.split(",")}
    rows = [run_model(m, args.size, args.calib, n) for m, n in tests.items()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"machine: {describe()}")
    counts = ", ".join(f"{m} {n}" for m, n in tests.items())
    print(f"{args.calib} calibration inputs per model; test inputs: {counts}; config pynq")
    print("relative error against float (top-1 equal to float's)")
    print(f"{'model':<14}{'MACs on':>8}{'ORT int8':>16}{'ORT sym':>16}{'TF shift':>16}"
          f"{'TF mul/tensor':>16}{'TF mul/channel':>16}{'mul/ORT':>9}{'s':>6}")  # fmt: skip
    for r in rows:
        cells = "".join(
            f"{r[k]['error']:>9.4f} ({_top1(r[k]):>4})"
            for k in ("ort", "ort_sym", "shift", "mul_tensor", "mul")
        )
        ratio = r["mul"]["error"] / r["ort"]["error"]
        print(f"{r['model']:<14}{r['offloaded_macs']:>8.1%}{cells}{ratio:>9.2f}"
              f"{r['seconds']:>6.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
