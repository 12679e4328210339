"""Depthwise and grouped convolutions, squeeze-excitation and MBConv blocks: TensorForge vs
onnxruntime on the CPU.

Each case is a small ONNX model (compiler/frontend/onnx_builders.py, fixed random weights)
compiled whole by `tensorforge.compile` (untuned defaults) and run by an onnxruntime session,
batch 1, float32, at each thread count in its own subprocess (both frameworks get that many
threads). Prints the median time of each and their ratio (TF/ORT), and TensorForge's kernel
time alone (`Module.profile`: without `Module.run`'s copies of the input into its arena and of
the output out, which cost about 0.1 ms per MB); every TensorForge output is checked against
onnxruntime's first.

Cases: depthwise 3x3 and 5x5 convolutions at MobileNetV2/EfficientNet-B0 shapes (each with its
batch norm and activation, as the models have them), grouped 3x3 convolutions at
RegNetY-400MF shapes (group width 8 and 16), a squeeze-excitation block alone and a whole
EfficientNet MBConv block (expand 1x1 + SiLU, depthwise + SiLU, SE, project 1x1, residual).

Usage:
    python benchmarks/dwconv.py [--threads 1,2] [--cases dw3_32x112,...|all] [--repeat 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
from machine import describe, median_ms

# name: (kind, channels, size, kernel, stride, group width or SE channels)
CASES: dict[str, tuple[str, int, int, int, int, int]] = {
    "dw3_32x112": ("dw", 32, 112, 3, 1, 0),
    "dw3_96x112s2": ("dw", 96, 112, 3, 2, 0),
    "dw3_144x56": ("dw", 144, 56, 3, 1, 0),
    "dw5_240x28": ("dw", 240, 28, 5, 1, 0),
    "dw3_480x14": ("dw", 480, 14, 3, 1, 0),
    "dw5_672x14s2": ("dw", 672, 14, 5, 2, 0),
    "dw5_1152x7": ("dw", 1152, 7, 5, 1, 0),
    "gc8_48x56": ("group", 48, 56, 3, 1, 8),
    "gc8_104x56s2": ("group", 104, 56, 3, 2, 8),
    "gc16_208x14": ("group", 208, 14, 3, 1, 16),
    "gc8_440x7": ("group", 440, 7, 3, 1, 8),
    "se_240x28": ("se", 240, 28, 0, 0, 10),
    "se_672x14": ("se", 672, 14, 0, 0, 28),
    "mbconv_40x28": ("mbconv", 40, 28, 5, 1, 10),
    "mbconv_112x14": ("mbconv", 112, 14, 3, 1, 28),
}


def build(name: str) -> Any:
    """The ONNX model of case `name`."""
    from tensorforge.compiler.frontend import onnx_builders as ob

    kind, c, size, k, stride, extra = CASES[name]
    if kind == "mbconv":
        return ob.mbconv_block(size, c, k, extra)
    b = ob.OnnxModelBuilder(name)
    x = b.input("x", (1, c, size, size))
    if kind == "dw":
        y = ob.silu(b, b.bn(b.conv(x, c, c, k, stride, group=c), c))
    elif kind == "group":
        y = b.op("Relu", [b.bn(b.conv(x, c, c, k, stride, group=c // extra), c)])
    else:
        y = ob.squeeze_excitation(b, x, c, extra)
    return b.model([y])


def bench_case(name: str, threads: int, repeat: int) -> dict[str, float]:
    import onnxruntime as ort

    import tensorforge

    model = build(name)
    rng = np.random.default_rng(0)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feed = {"x": rng.standard_normal(shape).astype(np.float32)}
    module = tensorforge.compile(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ours, want = list(module.run(feed).values())[0], sess.run(None, feed)[0]
    np.testing.assert_allclose(ours, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
    tf_times, ort_times, kernel_times = [], [], []
    for _ in range(3):  # interleaved rounds: a burst of load on the shared machine hits both
        time.sleep(0.02)
        tf_times.append(median_ms(lambda: module.run(feed), repeat))
        kernel_times.append(module.profile(feed, repeat).total_ms)
        time.sleep(0.02)
        ort_times.append(median_ms(lambda: sess.run(None, feed), repeat))
    return {"tensorforge": float(np.median(tf_times)), "onnxruntime": float(np.median(ort_times)),
            "kernels": float(np.median(kernel_times))}  # fmt: skip


def worker(threads: int, cases: list[str], repeat: int) -> dict[str, dict[str, float]]:
    from tensorforge.runtime.device import cpu

    cpu.set_num_threads(threads)
    return {name: bench_case(name, threads, repeat) for name in cases}


def run_worker(threads: int, cases: list[str], repeat: int) -> dict:
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "TF_NUM_THREADS"):
        env[var] = str(threads)
    cmd = [sys.executable, __file__, "--worker", str(threads), "--cases", ",".join(cases),
           "--repeat", str(repeat)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker with {threads} thread(s) failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def print_table(results: dict[int, dict], cases: list[str]) -> None:
    threads = sorted(results)
    print(f"machine: {describe()}")
    print("batch 1, float32, ms (median of 3 interleaved rounds of medians; TF/ORT = time ratio;")
    print("kern = TensorForge's kernels alone, without Module.run's input and output copies)")
    head = "".join(f" | {t}T:  {'TF':>7} {'kern':>7} {'ORT':>7} {'TF/ORT':>6}" for t in threads)
    print(f"{'case':>14}" + head)
    for name in cases:
        row = f"{name:>14}"
        for t in threads:
            r = results[t][name]
            ratio = r["tensorforge"] / r["onnxruntime"]
            row += (f" |      {r['tensorforge']:7.3f} {r['kernels']:7.3f} {r['onnxruntime']:7.3f} "
                    f"{ratio:5.2f}x")  # fmt: skip
        print(row)
    for t in threads:
        ratios = [results[t][n]["tensorforge"] / results[t][n]["onnxruntime"] for n in cases]
        print(f"geometric mean TF/ORT time, {t} thread(s): {np.exp(np.mean(np.log(ratios))):.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--cases", default="all")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = list(CASES) if args.cases == "all" else args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"--cases must name cases of {', '.join(CASES)}, not {', '.join(unknown)}")
    if args.worker:
        print(json.dumps(worker(args.worker, cases, args.repeat)))
        return 0
    results = {t: run_worker(t, cases, args.repeat) for t in map(int, args.threads.split(","))}
    if args.json:
        print(json.dumps(results, indent=1))
    print_table(results, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
