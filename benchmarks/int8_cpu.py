"""ONNX's integer convolutions and matmuls on the CPU: TensorForge's integer kernels, before and
after the dot-product ones, against onnxruntime, one thread, in paired rounds.

Rows:

- layers: QLinearConv on ResNet-18's conv shapes (benchmarks/cpu_ops.py's C1-C12: the 7x7 RGB
  stem, 3x3 and 1x1 layers, 64-512 channels, 56x56 down to 7x7), uint8 input, int8 weights,
  per-tensor scales, an int32 bias: onnxruntime's QOperator form for x86 (MLAS's U8S8);
- matmuls: QLinearMatMul and MatMulInteger of transformer sizes (ViT-B's 196 tokens);
- models: the builder's ResNet-18 at 224x224 (compiler/frontend/onnx_builders.py, batch norms
  calibrated as benchmarks/ab_modules.py does, then folded by onnxruntime's
  ``quant_pre_process``) quantized by onnxruntime's ``quantize_static`` in the QOperator
  format (MinMax calibration on 4 seeded random inputs, per-tensor): ``qop_u8`` with uint8
  activations (the form onnxruntime's x86 kernels are built for), ``qop_s8`` with its
  default int8 activations (MLAS has no fast S8S8 path on x86: its numbers show what
  onnxruntime's defaults cost there), and ``dynamic``: ``quantize_dynamic`` of the convs
  (DynamicQuantizeLinear + ConvInteger).

Columns: one per TensorForge integer kernel (``--kernels``; TF_INT8_KERNEL forces each at
compile time, strategy/qlinear.py): ``centered``, the kernel before (int32 x int16 products,
vpmulld), and ``auto``, what the compile picks for this CPU (``quads``: vpdpbusd on words of 4
channels with AVX-512 VNNI / AVX-VNNI; ``pairs``: pmaddwd on words of 2 elsewhere on x86-64);
each cell is the median ms and, in parentheses, the paired ratio to onnxruntime
(`zoo.interleaved_paired`: blocks of calls of the two in alternating order, the median of the
per-round ratios, so that load on a shared machine slows both alike). Every kernel's output
equals the first's bit for bit (checked), and each row's largest difference to onnxruntime's
output is printed (0 for the layers and matmuls and the QOperator models: bit-exact; the
dynamic model's float rescaling after ConvInteger may round differently).

Usage:
    python benchmarks/int8_cpu.py [--rows layers,matmuls,models] [--layers C2,C3,...]
        [--models qop_u8,qop_s8,dynamic] [--kernels centered,auto] [--rounds 8]
        [--target 'llvm -mattr=...'] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from cpu_ops import LAYERS
from machine import describe
from zoo import interleaved_paired

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "int8"
DEFAULT_LAYERS = ("C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9", "C11", "C12")
MATMULS = {  # name: (M, K, N, op)
    "qmm_768": (196, 768, 768, "QLinearMatMul"),
    "mmi_3072": (196, 768, 3072, "MatMulInteger"),
    "qmm_fc": (1, 512, 1000, "QLinearMatMul"),
}
MODELS = ("qop_u8", "qop_s8", "dynamic")


def _progress(message: str) -> None:
    print(f"[int8_cpu {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the models ------------------------------------------------------------------------------


def _onnx_model(nodes: list, inputs: list, output_type: int, inits: dict) -> Any:
    from onnx import helper, numpy_helper

    graph = helper.make_graph(
        nodes, "bench", inputs, [helper.make_tensor_value_info("y", output_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 9
    return model


def layer_model(name: str) -> tuple[Any, dict[str, np.ndarray]]:
    """QLinearConv of ResNet-18 layer `name` (uint8 x int8, per tensor, bias) and its input."""
    from onnx import TensorProto, helper

    hw, c, k, ks, stride = LAYERS[name]
    rng = np.random.default_rng(hash(name) % 2**32)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(118), "w": rng.integers(-127, 128,
             (k, c, ks, ks)).astype(np.int8), "ws": np.float32(0.003), "wz": np.int8(0),
             "ys": np.float32(0.02 * 0.003 * 40 * np.sqrt(c * ks * ks)), "yz": np.uint8(128),
             "b": rng.integers(-5000, 5000, k).astype(np.int32)}  # fmt: skip
    node = helper.make_node(
        "QLinearConv", ["x", *inits], ["y"], kernel_shape=[ks, ks], strides=[stride] * 2,
        pads=[ks // 2] * 4,
    )  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, hw, hw])
    feed = {"x": rng.integers(0, 256, (1, c, hw, hw)).astype(np.uint8)}
    return _onnx_model([node], [x], TensorProto.UINT8, inits), feed


def matmul_model(name: str) -> tuple[Any, dict[str, np.ndarray]]:
    from onnx import TensorProto, helper

    m, k, n, op = MATMULS[name]
    rng = np.random.default_rng(k * n)
    b = rng.integers(-127, 128, (k, n)).astype(np.int8)
    if op == "QLinearMatMul":
        inits = {"as": np.float32(0.02), "az": np.uint8(120), "b": b, "bs": np.float32(0.003),
                 "bz": np.int8(0), "ys": np.float32(0.02 * 0.003 * 40 * np.sqrt(k)),
                 "yz": np.uint8(128)}  # fmt: skip
        out = TensorProto.UINT8
    else:
        inits, out = {"b": b, "az": np.uint8(120), "bz": np.int8(0)}, TensorProto.INT32
    names = (
        ["as", "az", "b", "bs", "bz", "ys", "yz"] if op == "QLinearMatMul" else ["b", "az", "bz"]
    )
    node = helper.make_node(op, ["a", *names], ["y"])
    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])
    feed = {"a": rng.integers(0, 256, (m, k)).astype(np.uint8)}
    return _onnx_model([node], [a], out, inits), feed


def resnet18_quantized(kind: str) -> tuple[Any, dict[str, np.ndarray]]:
    """The quantized ResNet-18 of `kind` (cached in build/int8/) and a seeded input."""
    import onnx

    path = CACHE / f"resnet18_{kind}.onnx"
    if not path.exists():
        _quantize(path, kind)
    feed = {"x": np.random.default_rng(9).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    return onnx.load(str(path)), feed


def _quantize(path: Path, kind: str) -> None:
    from ab_modules import model_path
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's advice on pre-processing
    CACHE.mkdir(parents=True, exist_ok=True)
    folded = CACHE / "resnet18_folded.onnx"
    if not folded.exists():
        quant_pre_process(str(model_path("resnet18")), str(folded))  # batch norms folded
    if kind == "dynamic":
        quantize_dynamic(folded, path, weight_type=QuantType.QInt8, op_types_to_quantize=["Conv"])
        return

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.left = [{"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
                         for _ in range(4)]  # fmt: skip

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    activations = QuantType.QUInt8 if kind == "qop_u8" else QuantType.QInt8
    quantize_static(folded, path, Batches(), quant_format=QuantFormat.QOperator,
                    activation_type=activations, weight_type=QuantType.QInt8)  # fmt: skip


# ---- timing ----------------------------------------------------------------------------------


def _compile(model: Any, kernel: str, target: str) -> Any:
    import tensorforge

    saved = os.environ.get("TF_INT8_KERNEL")
    os.environ["TF_INT8_KERNEL"] = kernel
    try:
        return tensorforge.compile(model, target)
    finally:
        if saved is None:
            del os.environ["TF_INT8_KERNEL"]
        else:
            os.environ["TF_INT8_KERNEL"] = saved


def bench(
    model: Any, feed: dict, kernels: list[str], rounds: int, repeat: int, target: str
) -> dict[str, Any]:
    """One row: per kernel (ms, paired ratio to onnxruntime, compile s), onnxruntime's ms, the
    largest difference to onnxruntime's output."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    want = session.run(None, feed)[0]
    row: dict[str, Any] = {"kernels": {}}
    first = None
    ort_ms = []
    for kernel in kernels:
        start = time.perf_counter()
        module = _compile(model, kernel, target)
        seconds = time.perf_counter() - start
        got = next(iter(module.run(feed).values()))
        if first is None:
            first = got
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64)).max()
            row["max_diff_vs_ort"] = float(diff)
        elif not np.array_equal(got, first):
            raise SystemExit(f"kernel {kernel} differs from kernel {kernels[0]}")

        def ours(m: Any = module) -> Any:
            return m.run(feed)

        ms, theirs, ratio = interleaved_paired(ours, lambda: session.run(None, feed), repeat,
                                               rounds)  # fmt: skip
        ort_ms.append(theirs)
        row["kernels"][kernel] = {"ms": ms, "ratio": ratio, "compile_s": seconds}
    row["ort_ms"] = float(np.median(ort_ms))
    return row


def _shape(name: str) -> str:
    if name in LAYERS:
        hw, c, k, ks, stride = LAYERS[name]
        return f"{c}->{k} {ks}x{ks}/{stride} {hw}x{hw}"
    if name in MATMULS:
        m, k, n, op = MATMULS[name]
        return f"{op} {m}x{k}x{n}"
    return {"qop_u8": "QOperator, u8 activations", "qop_s8": "QOperator, s8 (ORT default)",
            "dynamic": "dynamic: ConvInteger"}[name]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="layers,matmuls,models")
    parser.add_argument("--layers", default=",".join(DEFAULT_LAYERS), help="of cpu_ops's C1-C12")
    parser.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    parser.add_argument("--kernels", default="centered,auto",
                        help="TF_INT8_KERNEL values: auto, quads, pairs, centered")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--target", default="llvm",
                        help="e.g. 'llvm -mcpu=skylake-avx512 -mattr=+avx512f,+avx512bw' for "
                        "the pmaddwd kernel of a CPU without VNNI")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from tensorforge.compiler.graph.strategy.int8_dot import int8_kernel
    from tensorforge.runtime.device import cpu

    cpu.set_num_threads(1)
    rows = args.rows.split(",")
    kernels = args.kernels.split(",")
    todo: list[tuple[str, str]] = []
    if "layers" in rows:
        todo += [("layer", n) for n in args.layers.split(",")]
    if "matmuls" in rows:
        todo += [("matmul", n) for n in MATMULS]
    if "models" in rows:
        todo += [("model", n) for n in args.models.split(",")]
    results = {}
    for kind, name in todo:
        _progress(name)
        if kind == "layer":
            model, feed = layer_model(name)
        elif kind == "matmul":
            model, feed = matmul_model(name)
        else:
            model, feed = resnet18_quantized(name)
        repeat = 40 if kind != "model" else 24
        results[name] = bench(model, feed, kernels, args.rounds, repeat, args.target)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    auto = int8_kernel(args.target)
    heads = [f"{k} ({auto})" if k == "auto" else k for k in kernels]
    print(f"machine: {describe()}; 1 thread; target {args.target!r}: auto = {auto}")
    print("median ms (paired ratio to onnxruntime); max |TF - ORT| of the outputs")
    print(f"{'row':<10}{'':<32}" + "".join(f"{h:>20}" for h in heads) + f"{'ORT':>9}{'diff':>9}")
    for name, r in results.items():
        cells = "".join(f"{c['ms']:>11.3f} ({c['ratio']:5.2f}x)" for c in r["kernels"].values())
        print(f"{name:<10}{_shape(name):<32}{cells}{r['ort_ms']:>9.3f}"
              f"{r['max_diff_vs_ort']:>9.2g}")  # fmt: skip
    print("compile s: " + "; ".join(
        f"{n} " + "/".join(f"{c['compile_s']:.1f}" for c in r["kernels"].values())
        for n, r in results.items() if n in MODELS))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
