"""Convolutions with awkward channel counts: the blocked chains with and without channel padding
(`alter_layout.PAD_BLOCK`), against onnxruntime on the CPU.

A channel count whose own block is not a power of two of 16 lanes or more (Xception's 728, in
8-lane blocks; ShuffleNet's 58 and 116, in 29-lane blocks that keep NCHW) is padded with zero
channels up to a multiple of 16 in the blocked chains. Each case is a small ONNX model
(compiler/frontend/onnx_builders.py, fixed random weights, batch 1, float32) compiled twice in
this process by `tensorforge.compile` (untuned defaults): "before" with `PAD_BLOCK = 0` (no
padding, the rule before this work) and "after" with the default; both are checked against
onnxruntime, then the three are timed in rotation (each round a block of `--per-block` calls
of each after 100 ms of warm-up calls, the order rotated every round). Prints the medians and
the medians over rounds of the paired ratios (each round's blocks back to back, so a load that
comes and goes between rounds cancels in its ratio), and each build's largest difference from
onnxruntime relative to onnxruntime's largest output magnitude.

Cases: two 3x3 convs (+ batch norm, ReLU) and two separable convs (depthwise 3x3 + 1x1, batch
norm, ReLU, as Xception has them) with C channels; Xception's entry-flow block (256 -> 728,
38x38 -> 19x19, with its strided 1x1 shortcut and max pool) and middle-flow block (three
separable 728-channel convs and the residual, 19x19); two ShuffleNetV2 units (stride 1: split,
1x1 + depthwise 3x3 + 1x1 on one half, concat, channel shuffle) of 116 and 232 channels;
inverted residuals (expand 1x1, depthwise, project 1x1, residual Add) with MNASNet's and
MobileNetV3's expanded widths of 72, 120, 184 and 200 channels.

Usage:
    python benchmarks/odd_channels.py [--cases c3_58,...|all] [--rounds 8] [--per-block 5]
    python benchmarks/odd_channels.py --onnx build/xception.onnx,...  (whole models, batch 1)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np
from machine import describe, timed_calls

WARM_UP_S = 0.1

# name: (kind, channels, size)
CASES: dict[str, tuple[str, int, int]] = {
    **{f"c3_{c}": ("c3", c, s) for c, s in ((20, 56), (58, 28), (100, 28), (116, 28),
                                            (200, 14), (232, 14), (728, 14), (1000, 7))},
    **{f"sep_{c}": ("sep", c, s) for c, s in ((20, 56), (58, 28), (100, 28), (116, 28),
                                              (200, 14), (232, 14), (728, 19), (1000, 7))},
    "sep_24": ("sep", 24, 56),  # MobileNetV2's and EfficientNet's 8-lane counts
    "sep_40": ("sep", 40, 28),
    # MNASNet's and MobileNetV3's expanded widths (8-lane blocks before, padded now)
    "ir_72": ("ir", 72, 56),
    "ir_120": ("ir", 120, 28),
    "ir_184": ("ir", 184, 14),
    "ir_200": ("ir", 200, 14),
    "xception_entry": ("entry", 728, 38),
    "xception_middle": ("middle", 728, 19),
    "shuffle_116": ("shuffle", 116, 28),
    "shuffle_232": ("shuffle", 232, 14),
}  # fmt: skip


def _separable(b: Any, x: str, cin: int, cout: int, relu_first: bool) -> str:
    if relu_first:
        x = b.op("Relu", [x])
    y = b.conv(b.conv(x, cin, cin, 3, group=cin), cin, cout, 1)
    y = b.bn(y, cout)
    return y if relu_first else b.op("Relu", [y])


#: an inverted residual's width -> its input and output width and its depthwise kernel
IR_BASE, IR_KERNEL = {72: 24, 120: 40, 184: 80, 200: 80}, {72: 3, 120: 5, 184: 3, 200: 3}


def _inverted_residual(b: Any, x: str, wide: int) -> str:
    """MNASNet's / MobileNetV3's block: expand 1x1, depthwise, project 1x1, residual."""
    c, k = IR_BASE[wide], IR_KERNEL[wide]
    y = b.conv_bn(x, c, wide, 1)
    y = b.conv_bn(y, wide, wide, k, group=wide)
    return b.op("Add", [b.conv_bn(y, wide, c, 1, act=None), x])


def _shuffle_unit(b: Any, x: str, c: int, size: int) -> str:
    half = c // 2
    left, right = b.op("Split", [x, b.const(np.array([half, half], np.int64))], outputs=2, axis=1)
    y = b.conv_bn(right, half, half, 1)
    y = b.conv_bn(y, half, half, 3, group=half, act=None)
    y = b.conv_bn(y, half, half, 1)
    cat = b.op("Concat", [left, y], axis=1)
    grouped = b.op("Reshape", [cat, b.const(np.array([1, 2, half, size, size], np.int64))])
    swapped = b.op("Transpose", [grouped], perm=[0, 2, 1, 3, 4])
    return b.op("Reshape", [swapped, b.const(np.array([1, c, size, size], np.int64))])


def build(name: str) -> Any:
    """The ONNX model of case `name`."""
    from tensorforge.compiler.frontend import onnx_builders as ob

    kind, c, size = CASES[name]
    b = ob.OnnxModelBuilder(name)
    if kind == "entry":
        x = b.input("x", (1, 256, size, size))
        y = _separable(b, _separable(b, x, 256, c, True), c, c, True)
        y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        y = b.op("Add", [y, b.bn(b.conv(x, 256, c, 1, 2), c)])
        return b.model([y])
    x = b.input("x", (1, IR_BASE.get(c, c) if kind == "ir" else c, size, size))
    if kind == "c3":
        y = b.conv_bn(b.conv_bn(x, c, c, 3), c, c, 3)
    elif kind == "sep":
        y = _separable(b, _separable(b, x, c, c, False), c, c, False)
    elif kind == "ir":
        y = _inverted_residual(b, x, c)
    elif kind == "middle":
        y = x
        for _ in range(3):
            y = _separable(b, y, c, c, True)
        y = b.op("Add", [y, x])
    else:
        y = _shuffle_unit(b, _shuffle_unit(b, x, c, size), c, size)
    return b.model([y])


def _pass_module() -> Any:
    import importlib

    return importlib.import_module("tensorforge.compiler.graph.passes.alter_layout")


def _compile(model: Any, pad_block: int, shapes: dict | None = None) -> Any:
    import tensorforge

    pass_module = _pass_module()
    saved = pass_module.PAD_BLOCK
    pass_module.PAD_BLOCK = pad_block
    try:
        return tensorforge.compile(model, input_shapes=shapes, progress=False)
    finally:
        pass_module.PAD_BLOCK = saved


def bench_case(model: Any, rounds: int, per_block: int) -> dict[str, float]:
    """Medians (ms) of before, after and onnxruntime, and the medians of the paired ratios."""
    import onnxruntime as ort

    pass_module = _pass_module()
    weights = {t.name for t in model.graph.initializer}
    (inp,) = [i for i in model.graph.input if i.name not in weights]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]  # a dynamic batch: 1
    rng = np.random.default_rng(0)
    feed = {inp.name: rng.uniform(0, 1, shape).astype(np.float32)}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, feed)[0]
    shapes = {inp.name: tuple(shape)}
    modules = [_compile(model, 0, shapes), _compile(model, pass_module.PAD_BLOCK, shapes)]
    errors = []  # the largest difference from onnxruntime, relative to its largest magnitude
    for module in modules:
        got = list(module.run(feed).values())[0]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
        errors.append(float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-12)))
    fns = [lambda m=m: m.run(feed) for m in modules] + [lambda: sess.run(None, feed)]
    times: list[list[float]] = [[], [], []]
    ratios: dict[str, list[float]] = {"after/before": [], "before/ort": [], "after/ort": []}
    for r in range(rounds):
        order = [(i + r) % 3 for i in range(3)]
        medians = [0.0, 0.0, 0.0]
        for which in order:
            fn, start = fns[which], time.perf_counter()
            while time.perf_counter() - start < WARM_UP_S:
                fn()
            block = timed_calls(fn, per_block)
            medians[which] = float(np.median(block))
            times[which] += block
        ratios["after/before"].append(medians[1] / medians[0])
        ratios["before/ort"].append(medians[0] / medians[2])
        ratios["after/ort"].append(medians[1] / medians[2])
    out = {k: float(np.median(times[i]) * 1e3) for i, k in enumerate(("before", "after", "ort"))}
    out.update(err_before=errors[0], err_after=errors[1])
    return {**out, **{k: float(np.median(v)) for k, v in ratios.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="all")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-block", type=int, default=5)
    parser.add_argument("--onnx", help="time these ONNX files (comma-separated) instead")
    args = parser.parse_args()
    cases = list(CASES) if args.cases == "all" else args.cases.split(",")
    load = build
    if args.onnx:
        import onnx

        cases, load = args.onnx.split(","), onnx.load
    from tensorforge.runtime.device import cpu

    cpu.set_num_threads(1)
    print(describe())
    print(f"{'case (1 thread)':18} {'before':>8} {'after':>8} {'ORT':>8} "
          f"{'before/ORT':>10} {'after/ORT':>9} {'after/before':>12} {'error before':>12} "
          f"{'error after':>11}")  # fmt: skip
    for name in cases:
        r = bench_case(load(name), args.rounds, args.per_block)
        name = os.path.basename(name)
        print(f"{name:18} {r['before']:8.3f} {r['after']:8.3f} {r['ort']:8.3f} "
              f"{r['before/ort']:9.2f}x {r['after/ort']:8.2f}x {r['after/before']:12.3f} "
              f"{r['err_before']:12.1e} {r['err_after']:11.1e}",
              flush=True)  # fmt: skip
    print(describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
