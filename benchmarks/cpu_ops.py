"""CPU back-end benchmark: GEMM and ResNet-18 conv2d layers, TensorForge vs numpy and onnxruntime.

Prints one table per run, side by side: GEMM 512^3 and 1024^3 in GFLOP/s (TensorForge's x86
dense schedule, numpy/OpenBLAS, onnxruntime MatMul) and the ResNet-18 conv layers C1-C12
(vta_facts.md §6.1) in milliseconds (TensorForge's NCHWc conv2d, untuned defaults, against
onnxruntime Conv; torch when installed), each at 1 and 2 threads, as medians of repeated runs.
It also reports the thread pool's launch overhead (a parallel loop of trivial work minus the
same loop run serially). Every TensorForge result is checked against numpy before timing.

Each thread count runs in its own subprocess, so that OpenBLAS and onnxruntime start with that
many threads.

Usage:
    python benchmarks/cpu_ops.py [--threads 1,2] [--layers C2,C9|all|none] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable

import numpy as np
from machine import cpu_model, worker_json

# ResNet-18 conv layers (ReQuEST'18 Table 1): H=W, IC, OC, kernel, stride; padding = kernel // 2
LAYERS = {
    "C1": (224, 3, 64, 7, 2),
    "C2": (56, 64, 64, 3, 1),
    "C3": (56, 64, 64, 1, 1),
    "C4": (56, 64, 128, 3, 2),
    "C5": (56, 64, 128, 1, 2),
    "C6": (28, 128, 128, 3, 1),
    "C7": (28, 128, 256, 3, 2),
    "C8": (28, 128, 256, 1, 2),
    "C9": (14, 256, 256, 3, 1),
    "C10": (14, 256, 512, 3, 2),
    "C11": (14, 256, 512, 1, 2),
    "C12": (7, 512, 512, 3, 1),
}
GEMM_SIZES = (512, 1024)


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    time.sleep(0.05)  # let the previous library's spinning worker threads go to sleep
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


# ---- onnxruntime -----------------------------------------------------------------------------


def ort_session(
    node: object, inputs: list[tuple[str, list[int]]], out: tuple[str, list[int]], threads: int
):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [node],
        "bench",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(out[0], TensorProto.FLOAT, out[1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(
        onnx._serialize(model) if hasattr(onnx, "_serialize") else model.SerializeToString(),
        opts,
        providers=["CPUExecutionProvider"],
    )


# ---- workloads -------------------------------------------------------------------------------


def bench_gemm(n: int, threads: int, repeats: int) -> dict[str, float]:
    from onnx import helper

    from tensorforge.compiler import te
    from tensorforge.compiler.build import build
    from tensorforge.compiler.topi.x86 import dense, schedule_dense
    from tensorforge.compiler.topi.x86.dense import default_config

    rng = np.random.default_rng(0)
    a, b = rng.random((2, n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    # the compile's default tile for this CPU (fitted to its vector registers)
    config = dataclasses.replace(default_config(n), parallel=threads > 1)
    op = dense(A, B, weight_layout="KN", config=config)
    f = build(schedule_dense(op, config), op.args, name="gemm")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3)
    sess = ort_session(
        helper.make_node("MatMul", ["a", "b"], ["c"]),
        [("a", [n, n]), ("b", [n, n])],
        ("c", [n, n]),
        threads,
    )
    flops = 2.0 * n**3
    return {
        "tensorforge": flops / median_time(lambda: f(a, b, c), repeats) / 1e9,
        "numpy": flops / median_time(lambda: a @ b, repeats) / 1e9,
        "onnxruntime": flops / median_time(lambda: sess.run(None, {"a": a, "b": b}), repeats) / 1e9,
    }


def bench_conv(name: str, threads: int, repeats: int) -> dict[str, float]:
    from onnx import helper

    from tensorforge.compiler import te
    from tensorforge.compiler.build import build
    from tensorforge.compiler.topi.x86 import conv2d_nchwc, schedule_conv2d_nchwc
    from tensorforge.compiler.topi.x86.conv2d import default_config, kernel_blocks, pack_kernel

    hw, ic, oc, k, stride = LAYERS[name]
    pad = k // 2
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, ic, hw, hw), dtype=np.float32)
    w = rng.standard_normal((oc, ic, k, k), dtype=np.float32) * 0.1
    out_hw = ((hw + 2 * pad - k) // stride + 1,) * 2
    config = dataclasses.replace(default_config(ic, oc, out_hw), parallel=threads > 1)
    # Weights are constants: packed once ahead of time (as onnxruntime does at session creation).
    wp = pack_kernel(w, *kernel_blocks(ic, oc, config))
    X, W = te.placeholder(x.shape, name="x"), te.placeholder(wp.shape, name="w")
    op = conv2d_nchwc(X, W, stride, pad, config=config)
    f = build(schedule_conv2d_nchwc(op, config), op.args, name="conv")
    out = np.empty(op.out.shape, np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[pad] * 4, strides=[stride] * 2)
    sess = ort_session(
        node, [("x", list(x.shape)), ("w", list(w.shape))], ("y", list(out.shape)), threads
    )
    f(x, wp, out)
    np.testing.assert_allclose(out, sess.run(None, {"x": x, "w": w})[0], rtol=1e-3, atol=1e-3)
    result = {
        "tensorforge": median_time(lambda: f(x, wp, out), repeats) * 1e3,
        "onnxruntime": median_time(lambda: sess.run(None, {"x": x, "w": w}), repeats) * 1e3,
    }
    result["torch"] = bench_torch_conv(x, w, stride, pad, threads, repeats)
    return result


def bench_torch_conv(x, w, stride: int, pad: int, threads: int, repeats: int) -> float:
    try:
        import torch
    except ImportError:
        return float("nan")
    torch.set_num_threads(threads)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    with torch.no_grad():
        return (
            median_time(
                lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad), repeats
            )
            * 1e3
        )


def _tiny_kernel(threads: int, parallel: bool):
    from tensorforge.compiler import te
    from tensorforge.compiler.build import build

    A = te.placeholder((threads * 16,), name="A")
    B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    outer, _ = s[B].split(B.op.axis[0], factor=16)
    if parallel:
        s[B].parallel(outer)
    return build(s, [A, B], name="tiny")


def launch_overhead(threads: int) -> float:
    """Microseconds a parallel loop costs over the same loop run serially (trivial work)."""
    a, b = np.zeros(threads * 16, np.float32), np.zeros(threads * 16, np.float32)
    times = []
    for parallel in (False, True):
        f = _tiny_kernel(threads, parallel)
        times.append(median_time(lambda f=f: f(a, b), 2000, warmup=50))
    return (times[1] - times[0]) * 1e6


def worker(threads: int, layers: list[str]) -> dict:
    from tensorforge.runtime.device import cpu

    cpu.set_num_threads(threads)
    result: dict = {"gemm": {}, "conv": {}}
    for n in GEMM_SIZES:
        result["gemm"][n] = bench_gemm(n, threads, repeats=20 if n <= 512 else 8)
    for name in layers:
        result["conv"][name] = bench_conv(name, threads, repeats=10)
    result["launch_us"] = launch_overhead(threads) if threads > 1 else 0.0
    return result


# ---- driver ----------------------------------------------------------------------------------


def run_worker(threads: int, layers: list[str]) -> dict:
    return worker_json(__file__, threads, "--layers", ",".join(layers) or "none")


def geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def _num(value: float, fmt: str) -> str:
    return "n/a".rjust(7) if value != value else format(value, fmt)  # NaN: not measured


def print_table(results: dict[int, dict], layers: list[str]) -> None:
    import llvmlite

    versions = f"llvmlite {llvmlite.__version__}, numpy {np.__version__}"
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; {versions}")
    threads = sorted(results)
    print("\nGEMM float32, GFLOP/s (median; TF/np = TensorForge / numpy)")
    print(
        f"{'size':>7}"
        + "".join(f" | {t}T:  {'TF':>7} {'numpy':>7} {'ORT':>7} {'TF/np':>6}" for t in threads)
    )
    for n in GEMM_SIZES:
        row = f"{n:>5}^3"
        for t in threads:
            g = results[t]["gemm"][str(n)]
            cells = [_num(g[k], "7.1f") for k in ("tensorforge", "numpy", "onnxruntime")]
            row += f" |      {' '.join(cells)} {g['tensorforge'] / g['numpy']:6.0%}"
        print(row)
    if not layers:
        return
    print("\nResNet-18 conv2d float32, batch 1, ms (median; TF/ORT = time ratio)")
    print(
        f"{'layer':>7}"
        + "".join(f" | {t}T:  {'TF':>7} {'ORT':>7} {'torch':>7} {'TF/ORT':>6}" for t in threads)
    )
    for name in layers:
        row = f"{name:>7}"
        for t in threads:
            c = results[t]["conv"][name]
            cells = [_num(c[k], "7.3f") for k in ("tensorforge", "onnxruntime", "torch")]
            row += f" |      {' '.join(cells)} {c['tensorforge'] / c['onnxruntime']:5.2f}x"
        print(row)
    for t in threads:
        conv = results[t]["conv"]
        ratios = [conv[n]["tensorforge"] / conv[n]["onnxruntime"] for n in layers]
        print(f"geometric mean TF/ORT time, {t} thread(s): {geomean(ratios):.2f}x")
    for t in threads:
        if t > 1:
            print(f"parallel-loop launch overhead, {t} threads: {results[t]['launch_us']:.1f} us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--layers", default="all", help="comma-separated names, 'all' or 'none'")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    layers = (
        list(LAYERS)
        if args.layers == "all"
        else []
        if args.layers == "none"
        else args.layers.split(",")
    )
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        parser.error(f"--layers must name layers of {', '.join(LAYERS)}, not {', '.join(unknown)}")
    if args.worker:
        print(json.dumps(worker(args.worker, layers)))
        return 0
    start = time.time()
    results = {t: run_worker(t, layers) for t in (int(x) for x in args.threads.split(","))}
    if args.json:
        print(json.dumps(results, indent=1))
    print_table(results, layers)
    print(f"\n(total {time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
