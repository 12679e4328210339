"""int8 accuracy on the accelerator next to onnxruntime's own int8 quantization of the same model.

For each model, the same calibration inputs and the same test inputs (batch 1 each):

- float: the float model under onnxruntime (the reference);
- ORT int8: ``onnxruntime.quantization.quantize_static`` (QDQ, per-tensor, MinMax
  calibration, its default int8 activations and weights) on the calibration inputs, run by
  onnxruntime; ORT sym: the same with ``ActivationSymmetric`` (zero point 0, as TensorForge);
- TF shift / TF mul/tensor / TF mul/channel: the int8 graph the ``vta -config=pynq -mode=...
  -weights=...`` target compiles (``compile_vta.quantize_for``: abs-max observer, symmetric
  per-tensor activation scales; shift: power-of-two scales; mul: any scales, with one weight
  scale per layer or per output channel, the default on configs with the ALU MUL), partitioned
  for ``pynq`` and run as native CPU code (``compile_graph``). The int8 graph on the CPU equals
  the accelerator's module on the ``sim`` device bit for bit (tests/e2e/test_e2e_vta_models.py),
  and runs a 224x224 model in tens of milliseconds, fast enough for the whole zoo.

Printed per model: the share of conv/dense/matmul MACs placed on the accelerator, each int8
version's relative error against float over all test outputs (``||y - y_float|| /
||y_float||``), the ratio of the default's (TF mul/channel) error to onnxruntime's, and the
share of test inputs (pixels, for a segmentation model) whose top-1 class equals float's. What
differs by design: onnxruntime quantizes every op (depthwise convs, Clip, pooling, adds) with
asymmetric activations, TensorForge only what the accelerator runs (conv/dense with their
ReLU, residual adds, max pooling) with symmetric ones, so e.g. depthwise convs and ReLU6 stay
float and ReLU outputs use half the int8 range.

Models:

- small: the shipped digits CNN (trained, its own test images) and, from
  compiler/frontend/onnx_builders.py with fixed random weights and standard-normal inputs,
  ResNet-18 and MobileNetV2 (width 0.5) at 64x64 (``resnet18_64``, ``mobilenet_v2_64``) and two
  MobileNetV2 inverted-residual blocks at 32x32 (``mbv2_block``);
- zoo: the 16 torchvision models of benchmarks/zoo.py (random weights, batch norm statistics
  set from random batches, exported at opset 17; read from ``--cache``, exported there by
  zoo.py when missing), standard-normal inputs at the export's size (224x224; Inception-v3
  299x299, the LR-ASPP segmentation model 256x256, whose top-1 is per pixel).

The inputs are seeded (``numpy.random.default_rng(0)``): the first ``--calib`` are the
calibration set of both quantizers, the next ``--test`` the test set.

Usage:
    python benchmarks/int8_accuracy.py [--models small,zoo | digits,resnet50,...]
        [--columns ort,ort_sym,shift,mul_tensor,mul] [--size 64] [--calib 16] [--test N]
        [--cache build/zoo] [--json]

``--test`` defaults to the whole test split (450 images) for digits and 32 inputs for the
others: on 16 digits images onnxruntime's int8 error was 0.0075, on all 450 it is 0.017, so a
small test set decides the ratio more than the quantization does.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import zoo
from machine import describe

SMALL = ("digits", "resnet18_64", "mobilenet_v2_64", "mbv2_block")
GROUPS = {"small": SMALL, "zoo": tuple(zoo.MODELS)}
# column -> the vta target's options: power-of-two scales; multiply+shift with one weight scale
# per layer; multiply+shift with per-channel weight scales (the default on configs with the MUL)
MODES = {"shift": ("shift", "per-tensor"), "mul_tensor": ("mul", "per-tensor"),
         "mul": ("mul", "per-channel")}  # fmt: skip
COLUMNS = ("ort", "ort_sym", *MODES)
HEADS = {"ort": "ORT int8", "ort_sym": "ORT sym", "shift": "TF shift",
         "mul_tensor": "TF mul/tensor", "mul": "TF mul/channel"}  # fmt: skip


def _model(name: str, size: int, cache: Path) -> Any:
    """The ONNX model `name` with a batch of 1."""
    import onnx

    from tensorforge.compiler.frontend import onnx_builders as builders

    if name == "digits":
        from tensorforge.digits import load_digits_assets

        model = onnx.load(str(load_digits_assets()[0]))
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # symbolic in the file
        return model
    if name == "resnet18_64":
        return builders.resnet18(size, classes=100)
    if name == "mobilenet_v2_64":
        return builders.mobilenet_v2(size, classes=100, width=0.5)
    if name == "mbv2_block":
        return builders.mobilenet_v2_block(size // 2)
    if name in zoo.MODELS:
        path = cache / f"{name}.onnx"
        if not path.exists():
            zoo.CACHE = cache
            path = zoo.ensure_exported(name)
        return onnx.load(str(path))
    known = ", ".join((*SMALL, *zoo.MODELS))
    raise ValueError(f"model must be one of {known} (or small, zoo), not {name!r}")


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
    return ort.InferenceSession(str(folder / "int8.onnx"), providers=["CPUExecutionProvider"])


def _tf_int8(graph: Any, key: str, calib: list[np.ndarray], column: str) -> tuple[Any, float]:
    """(the int8 graph of the vta target's `column` options compiled for this CPU, the share of
    conv/dense MACs placed on the accelerator)."""
    from tensorforge.compiler.graph.compile import compile_graph
    from tensorforge.compiler.graph.compile_vta import quantize_for
    from tensorforge.compiler.graph.passes.partition import is_offloaded, layer_summary
    from tensorforge.hw.config import HWConfig

    mode, weights = MODES[column]
    q = quantize_for(graph, HWConfig.preset("pynq"), [{key: x} for x in calib], mode, weights)
    return compile_graph(q, progress=False), layer_summary(q, is_offloaded)[2]


def _scores(y: np.ndarray, ref: np.ndarray, classes: bool) -> dict[str, float | None]:
    """Relative error of `y` against `ref` and, for a model whose axis 1 holds `classes` (a
    classifier's, or a segmentation map's per pixel), the share of equal top-1 classes."""
    error = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    top1 = float(np.mean(y.argmax(1) == ref.argmax(1))) if classes else None
    return {"error": error, "top1": top1}


def _progress(message: str) -> None:
    print(f"[int8 {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_model(name: str, args: argparse.Namespace, n_test: int) -> dict[str, Any]:
    """One row: every column's scores (a failing column is its error's first line)."""
    import onnxruntime as ort

    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph.passes import optimize

    start = time.perf_counter()
    model = _model(name, args.size, Path(args.cache))
    key = model.graph.input[0].name
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    calib, test = _inputs(name, shape, args.calib, n_test)
    ref_session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    ref = np.concatenate([ref_session.run(None, {key: x})[0] for x in test])
    graph = optimize(from_onnx(model))
    row: dict[str, Any] = {"model": name, "input": list(shape), "offloaded_macs": None}
    for column in args.columns:
        _progress(f"{name}: {column}")
        try:
            if column in MODES:
                module, row["offloaded_macs"] = _tf_int8(graph, key, calib, column)
                out = np.concatenate([module.run({key: x})[module.outputs[0]] for x in test])
            else:
                with tempfile.TemporaryDirectory() as folder:
                    session = _ort_int8(model, key, calib, Path(folder), column == "ort_sym")
                    out = np.concatenate([session.run(None, {key: x})[0] for x in test])
            row[column] = _scores(out, ref, ref.ndim == 2 or name in zoo.MODELS)
        except Exception as exc:  # noqa: BLE001 - a failing column is reported, not fatal
            row[column] = {"failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
    row["seconds"] = time.perf_counter() - start
    return row


def _cell(score: dict[str, Any] | None) -> str:
    if score is None:
        return f"{'':>16}"
    if "failed" in score:
        return f"{'failed':>16}"
    top1 = "-" if score["top1"] is None else f"{score['top1']:.0%}"
    return f"{score['error']:>9.4f} ({top1:>4})"


def _ratio(row: dict[str, Any]) -> float | None:
    ours, theirs = row.get("mul") or {}, row.get("ort") or {}
    if "error" not in ours or "error" not in theirs:
        return None
    return ours["error"] / theirs["error"]


def _names(spec: str) -> list[str]:
    names = []
    for part in spec.split(","):
        names.extend(GROUPS.get(part, (part,)))
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="small,zoo", help="names or groups: small, zoo")
    ap.add_argument("--columns", default=",".join(COLUMNS), help=f"of {', '.join(COLUMNS)}")
    ap.add_argument("--size", type=int, default=64, help="input size of the generated models")
    ap.add_argument("--calib", type=int, default=16, help="calibration inputs")
    what = "test inputs (default: digits' whole test split, 32 for the others)"
    ap.add_argument("--test", type=int, default=None, help=what)
    ap.add_argument("--cache", default=str(zoo.CACHE), help="the zoo's exported .onnx files")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's advice on pre-processing
    args.columns = args.columns.split(",")
    unknown = [c for c in args.columns if c not in COLUMNS]
    if unknown:
        ap.error(f"--columns must be of {', '.join(COLUMNS)}, not {', '.join(unknown)}")
    tests = {m: args.test or (450 if m == "digits" else 32) for m in _names(args.models)}
    rows = []
    for m, n in tests.items():
        rows.append(run_model(m, args, n))
        _progress(f"{m}: done {json.dumps(rows[-1])}")  # a partial run keeps its rows
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"machine: {describe()}")
    counts = ", ".join(f"{m} {n}" for m, n in tests.items())
    print(f"{args.calib} calibration inputs per model; test inputs: {counts}; config pynq")
    print("relative error against float (top-1 equal to float's)")
    print(f"{'model':<26}{'MACs on':>8}" + "".join(f"{HEADS[c]:>16}" for c in args.columns)
          + f"{'mul/ORT':>9}{'s':>6}")  # fmt: skip
    for r in rows:
        share = "-" if r["offloaded_macs"] is None else f"{r['offloaded_macs']:.1%}"
        ratio = _ratio(r)
        cells = "".join(_cell(r.get(c)) for c in args.columns)
        print(f"{r['model']:<26}{share:>8}{cells}{'-' if ratio is None else f'{ratio:.2f}':>9}"
              f"{r['seconds']:>6.0f}")  # fmt: skip
    for r in rows:
        for c in args.columns:
            if "failed" in r.get(c, {}):
                print(f"{r['model']} {c}: {r[c]['failed']}")


if __name__ == "__main__":
    main()
