"""The harness of the small-model benchmarks (dwconv.py, conv_nd.py): each case is an ONNX model
compiled whole by `tensorforge.compile` (untuned defaults) and run by an onnxruntime session,
batch 1, float32, at each thread count in its own subprocess (both frameworks get that many
threads); TensorForge's output is checked against onnxruntime's first, then both are timed in
3 interleaved rounds (medians of `repeat` calls), plus TensorForge's kernels alone
(`Module.profile`, without `Module.run`'s input and output copies).

A script gives its cases and model builder to `main`:

    sys.exit(main(__doc__, CASES, build, __file__, threads="1", repeat=10))
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from machine import describe, median_ms, worker_json

Build = Callable[[str], Any]  # case name -> ONNX model


def bench_case(model: Any, threads: int, repeat: int) -> dict[str, float]:
    """Median ms of TensorForge, its kernels alone and onnxruntime on one model (input "x")."""
    import onnxruntime as ort

    import tensorforge

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


def _worker(build: Build, threads: int, cases: list[str], repeat: int) -> dict[str, Any]:
    from tensorforge.runtime.device import cpu

    cpu.set_num_threads(threads)
    return {name: bench_case(build(name), threads, repeat) for name in cases}


def _run_worker(script: str, threads: int, cases: list[str], repeat: int) -> dict:
    return worker_json(script, threads, "--cases", ",".join(cases), "--repeat", str(repeat))


def print_table(results: dict[int, dict], cases: list[str]) -> None:
    threads = sorted(results)
    width = max(len(c) for c in cases) + 1
    print(f"machine: {describe()}")
    print("batch 1, float32, ms (median of 3 interleaved rounds of medians; TF/ORT = time ratio;")
    print("kern = TensorForge's kernels alone, without Module.run's input and output copies)")
    head = "".join(f" | {t}T:  {'TF':>7} {'kern':>7} {'ORT':>7} {'TF/ORT':>6}" for t in threads)
    print(f"{'case':>{width}}" + head)
    for name in cases:
        row = f"{name:>{width}}"
        for t in threads:
            r = results[t][name]
            ratio = r["tensorforge"] / r["onnxruntime"]
            row += (f" |      {r['tensorforge']:7.3f} {r['kernels']:7.3f} {r['onnxruntime']:7.3f} "
                    f"{ratio:5.2f}x")  # fmt: skip
        print(row)
    for t in threads:
        ratios = [results[t][n]["tensorforge"] / results[t][n]["onnxruntime"] for n in cases]
        print(f"geometric mean TF/ORT time, {t} thread(s): {np.exp(np.mean(np.log(ratios))):.2f}x")


def main(
    doc: str,
    all_cases: Sequence[str],
    build: Build,
    script: str,
    threads: str,
    repeat: int,
    argv: list[str] | None = None,
) -> int:
    """The command line of a small-model benchmark: --threads, --cases, --repeat, --json."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--threads", default=threads)
    parser.add_argument("--cases", default="all")
    parser.add_argument("--repeat", type=int, default=repeat)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = list(all_cases) if args.cases == "all" else args.cases.split(",")
    unknown = [c for c in cases if c not in all_cases]
    if unknown:
        parser.error(f"--cases must name cases of {', '.join(all_cases)}, not {', '.join(unknown)}")
    if args.worker:
        print(json.dumps(_worker(build, args.worker, cases, args.repeat)))
        return 0
    results = {
        t: _run_worker(script, t, cases, args.repeat) for t in map(int, args.threads.split(","))
    }
    if args.json:
        print(json.dumps(results, indent=1))
    print_table(results, cases)
    return 0
