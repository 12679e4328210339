"""Register tiles of the blocked conv2d: old default vs new vs onnxruntime, per layer.

Every layer runs as a compiled model runs it: in a blocked chain (`graph.passes.alter_layout`,
channel blocks of `_block_for(channels, CPU_BLOCK)`, input and output NCHW[b]c; an RGB stem
reads NCHW), with pre-packed weights and untuned knobs. "old" is the default before the
`oc_tile` knob (one output-channel block per register tile, `reg_n` by the output width:
8, or the largest divisor of the width in 4-14), "new" is `default_blocked_config` today
(`register_tile`: a tile fitted to this CPU's vector registers), ORT the same convolution as a
one-node onnxruntime model (NCHW in and out). The three are timed interleaved (old, new, ORT,
old, ...) in one process per thread count, and each result is checked against onnxruntime's
before timing. Times are medians in ms; the load average is printed before and after.

Layers: ResNet-18's C1-C12 (as benchmarks/cpu_ops.py), ResNet-50's bottleneck convolutions
and Inception-v3's square-kernel convolutions (H=W, IC, OC, kernel, stride; padding
kernel // 2).

Usage:
    python benchmarks/conv_tiles.py [--threads 1,2] [--nets resnet18,resnet50,inception_v3]
                                    [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from cpu_ops import LAYERS as RESNET18
from cpu_ops import geomean, ort_session
from machine import cpu_model, worker_json

NETS = {
    "resnet18": {f"r18.{k}": v for k, v in RESNET18.items()},
    "resnet50": {
        "r50.a1": (56, 64, 64, 1, 1),
        "r50.a2": (56, 64, 64, 3, 1),
        "r50.a3": (56, 64, 256, 1, 1),
        "r50.a4": (56, 256, 64, 1, 1),
        "r50.b2": (28, 128, 128, 3, 1),
        "r50.b3": (28, 128, 512, 1, 1),
        "r50.b4": (28, 512, 128, 1, 1),
        "r50.c2": (14, 256, 256, 3, 1),
        "r50.c3": (14, 256, 1024, 1, 1),
        "r50.c4": (14, 1024, 256, 1, 1),
        "r50.d2": (7, 512, 512, 3, 1),
        "r50.d3": (7, 512, 2048, 1, 1),
        "r50.d4": (7, 2048, 512, 1, 1),
    },
    "inception_v3": {
        "i3.2b": (147, 32, 64, 3, 1),
        "i3.3b": (73, 64, 80, 1, 1),
        "i3.4a": (71, 80, 192, 3, 1),
        "i3.5b1": (35, 192, 64, 1, 1),
        "i3.5b5": (35, 48, 64, 5, 1),
        "i3.5b3": (35, 64, 96, 3, 1),
        "i3.5b3b": (35, 96, 96, 3, 1),
        "i3.6a": (35, 288, 384, 3, 2),
        "i3.6b1": (17, 768, 192, 1, 1),
        "i3.7b1": (8, 1280, 320, 1, 1),
        "i3.7b3": (8, 448, 384, 3, 1),
    },
}


def old_config(channels: int, ow: int, blocks: tuple[int, int]):
    """The default register tile before `oc_tile` (commit bd5c142's `default_config`)."""
    from tensorforge.compiler.topi.x86 import Conv2dConfig

    if ow % 8 == 0 and (ow <= 64 or channels < 16):
        reg_n = 8
    else:
        reg_n = max([d for d in range(4, 15) if ow % d == 0], default=8)
    return Conv2dConfig(ic_bn=blocks[0], oc_bn=blocks[1], reg_n=min(reg_n, ow))


def build_layer(layer: tuple[int, ...], config):
    """The blocked-chain kernel of `layer` with `config`, and a call that runs it."""
    from tensorforge.compiler import te
    from tensorforge.compiler.build import build
    from tensorforge.compiler.topi.x86 import conv2d_nchwc, schedule_conv2d_nchwc

    hw, ic, oc, k, stride = layer
    shape = (1, ic // config.ic_bn, hw, hw, config.ic_bn) if ic >= 8 else (1, ic, hw, hw)
    X = te.placeholder(shape, name="x")
    W = te.placeholder((oc // config.oc_bn, ic // config.ic_bn, k, k, config.ic_bn,
                        config.oc_bn), name="w")  # fmt: skip
    op = conv2d_nchwc(X, W, stride, k // 2, config=config, blocked=True)
    return build(schedule_conv2d_nchwc(op, config), op.args, name="conv"), op.out.shape


def bench_layer(layer: tuple[int, ...], threads: int, rounds: int) -> dict[str, float]:
    from onnx import helper

    from tensorforge.compiler.graph.ops.layout import from_blocked, to_blocked
    from tensorforge.compiler.graph.passes.alter_layout import CPU_BLOCK, _block_for
    from tensorforge.compiler.topi.x86.conv2d import default_blocked_config, pack_kernel

    hw, ic, oc, k, stride = layer
    ow = (hw + 2 * (k // 2) - k) // stride + 1
    blocks = (_block_for(ic, CPU_BLOCK), _block_for(oc, CPU_BLOCK))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, ic, hw, hw), dtype=np.float32)
    w = rng.standard_normal((oc, ic, k, k), dtype=np.float32) * 0.1
    xb = np.ascontiguousarray(to_blocked(x, blocks[0])) if ic >= 8 else x
    wp = pack_kernel(w, *blocks)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[k // 2] * 4, strides=[stride] * 2)
    sess = ort_session(node, [("x", list(x.shape)), ("w", list(w.shape))],
                       ("y", [1, oc, ow, ow]), threads)  # fmt: skip
    want = sess.run(None, {"x": x, "w": w})[0]
    new = default_blocked_config(ic, oc, (ow, ow), blocks)
    calls, result = {}, {"tile_old": "", "tile_new": f"{new.reg_n}x{new.oc_tile or new.oc_bn}"}
    for name, config in (("old", old_config(ic, ow, blocks)), ("new", new)):
        f, shape = build_layer(layer, config)
        out = np.empty(shape, np.float32)
        f(xb, wp, out)
        np.testing.assert_allclose(from_blocked(out), want, rtol=1e-3, atol=1e-3)
        calls[name] = lambda f=f, out=out: f(xb, wp, out)
    result["tile_old"] = f"{old_config(ic, ow, blocks).reg_n}x{blocks[1]}"
    calls["ort"] = lambda: sess.run(None, {"x": x, "w": w})
    times = interleaved(calls, rounds, 2.0 * oc * ic * k * k * ow * ow)
    return {**result, **times}


def interleaved(calls: dict, rounds: int, flops: float) -> dict[str, float]:
    """Median ms of each call, timed in turns: each round runs every call `reps` times."""
    reps = max(2, int(2e8 / flops))  # about 0.2 GFLOP per turn
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    for _ in range(rounds):
        for name, fn in calls.items():
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            samples[name].append((time.perf_counter() - t) / reps)
    return {name: float(np.median(s)) * 1e3 for name, s in samples.items()}


def worker(threads: int, names: list[str], rounds: int) -> dict:
    from tensorforge.runtime.device import cpu

    cpu.set_num_threads(threads)
    layers = {k: v for net in NETS.values() for k, v in net.items()}
    return {name: bench_layer(layers[name], threads, rounds) for name in names}


def run_worker(threads: int, names: list[str], rounds: int) -> dict:
    return worker_json(__file__, threads, "--layers", ",".join(names), "--rounds", str(rounds))


def print_table(results: dict[int, dict], names: list[str]) -> None:
    threads = sorted(results)
    head = "".join(f" | {t}T: {'old':>7} {'new':>7} {'ORT':>7} {'new/old':>7} {'new/ORT':>7}"
                   for t in threads)  # fmt: skip
    print(f"{'layer':>8} {'HW,IC,OC,k,s':>20} {'tile old':>8} {'new':>5}{head}")
    layers = {k: v for net in NETS.values() for k, v in net.items()}
    for name in names:
        r0 = results[threads[0]][name]
        row = f"{name:>8} {','.join(map(str, layers[name])):>20} {r0['tile_old']:>8} "
        row += f"{r0['tile_new']:>5}"
        for t in threads:
            r = results[t][name]
            row += (f" |    {r['old']:7.3f} {r['new']:7.3f} {r['ort']:7.3f} "
                    f"{r['new'] / r['old']:6.2f}x {r['new'] / r['ort']:6.2f}x")  # fmt: skip
        print(row)
    for t in threads:
        rs = [results[t][n] for n in names]
        new_old, old_ort, new_ort = (
            geomean([r[a] / r[b] for r in rs])
            for a, b in (("new", "old"), ("old", "ort"), ("new", "ort"))
        )
        print(f"geometric mean, {t} thread(s): new/old {new_old:.2f}x, old/ORT {old_ort:.2f}x, "
              f"new/ORT {new_ort:.2f}x")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--nets", default=",".join(NETS))
    parser.add_argument("--layers", help="comma-separated layer names (instead of --nets)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = [n for n in args.nets.split(",") if n not in NETS]
    if unknown:
        parser.error(f"unknown nets {unknown}; there are {', '.join(NETS)}")
    names = args.layers.split(",") if args.layers else [
        k for net in args.nets.split(",") for k in NETS[net]]  # fmt: skip
    if args.worker:
        print(json.dumps(worker(args.worker, names, args.rounds)))
        return 0
    from tensorforge.compiler.codegen.llvm_jit import vector_registers

    lanes, count = vector_registers()
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {count} vector registers of {lanes}"
          f" float32 lanes, load {tuple(round(v, 2) for v in os.getloadavg())}")  # fmt: skip
    results = {t: run_worker(t, names, args.rounds) for t in map(int, args.threads.split(","))}
    print_table(results, names)
    print(f"load after: {tuple(round(v, 2) for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
