"""1-D and 3-D convolutions: TensorForge vs onnxruntime on the CPU.

Each case is a small ONNX model (compiler/frontend/onnx_builders.py, fixed random weights)
compiled whole by `tensorforge.compile` (untuned defaults) and run by an onnxruntime session,
batch 1, float32, at each thread count in its own subprocess (both frameworks get that many
threads). Prints the median time of each, their ratio (TF/ORT) and TensorForge's kernel time
alone (`Module.profile`, without `Module.run`'s input and output copies); every TensorForge
output is checked against onnxruntime's first.

Cases: a whole keyword-spotting 1-D CNN on one second of 16 kHz audio (`audio_cnn_1d`), a
wav2vec2 feature-encoder layer (512 channels, 3 taps, stride 2), a dilated TCN layer; r3d_18's
stem (3x7x7, stride (1, 2, 2)) on an 8-frame 112x112 clip, a 3x3x3 conv-bn-relu at 64 x 8x28x28
(r3d_18's layer 1 of that clip, its rows and columns halved), r2plus1d_18's (1,3,3) spatial and
(3,1,1) temporal convs at that size, and two whole r3d_18 blocks (`r3d_block`: a basic block,
then a downsampling one).

Usage:
    python benchmarks/conv_nd.py [--threads 1] [--cases audio_cnn_1d,...|all] [--repeat 10]
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

# name: (spatial dims, channels in, channels out, input spatial shape, kernel, stride, dilation)
LAYERS: dict[str, tuple[int, int, int, tuple, tuple, tuple, int]] = {
    "w2v_512x799s2": (1, 512, 512, (799,), (3,), (2,), 1),
    "tcn_128x2000d4": (1, 128, 128, (2000,), (3,), (1,), 4),
    "r3d_stem_3x8x112": (3, 3, 64, (8, 112, 112), (3, 7, 7), (1, 2, 2), 1),
    "r3d_64x8x28": (3, 64, 64, (8, 28, 28), (3, 3, 3), (1, 1, 1), 1),
    "r2p1d_s_64x8x28": (3, 64, 144, (8, 28, 28), (1, 3, 3), (1, 1, 1), 1),
    "r2p1d_t_144x8x28": (3, 144, 64, (8, 28, 28), (3, 1, 1), (1, 1, 1), 1),
}
CASES = ["audio_cnn_1d", *LAYERS, "r3d_block"]


def build(name: str) -> Any:
    """The ONNX model of case `name`."""
    from tensorforge.compiler.frontend import onnx_builders as ob

    if name == "audio_cnn_1d":
        return ob.audio_cnn_1d(16000)
    if name == "r3d_block":
        return ob.r3d_block(8, 28, 64)
    dims, cin, cout, shape, k, stride, dil = LAYERS[name]
    b = ob.OnnxModelBuilder(name)
    x = b.input("x", (1, cin, *shape))
    w = b.weight((cout, cin, *k))
    pads = [(t - 1) * dil // 2 for t in k] * 2  # "same" padding
    y = b.op("Conv", [x, w], kernel_shape=list(k), strides=list(stride),
             dilations=[dil] * dims, pads=pads)  # fmt: skip
    return b.model([b.op("Relu", [b.bn(y, cout)])])


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
    print(f"{'case':>17}" + head)
    for name in cases:
        row = f"{name:>17}"
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
    parser.add_argument("--threads", default="1")
    parser.add_argument("--cases", default="all")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = CASES if args.cases == "all" else args.cases.split(",")
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
