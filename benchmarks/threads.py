"""Thread scaling: TensorForge's run time at 1 and 2 threads for a few tasks-per-thread settings
of the CPU thread pool, beside onnxruntime's at 1 and 2 threads, all timed in one process.

Each (runtime, threads, tasks per thread) variant runs in blocks of calls, the variants in turn
and the order reversed every round (A B C .. C B A ..), each block after a warm-up, so that the
other jobs on a shared machine slow all variants alike; the table shows medians and each
variant's speed-up from 1 to 2 threads (`--min`: the fastest call instead, a steadier figure
when other jobs keep the cores busy). `--kernels` adds, per model, the kernels whose 2-thread
time is furthest from half their 1-thread time (Module.profile), for each setting.

Usage:
    python benchmarks/threads.py [--models resnet18,mobilenet_v2] [--tasks 1,4] [--rounds 6]
                                 [--repeat 24] [--kernels] [--min]

Needs the models exported by benchmarks/zoo.py (build/zoo/) and onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
from machine import random_inputs
from zoo import WARM_UP_S, _ort_session, ensure_exported


def interleaved(
    variants: dict[str, Any], repeat: int, rounds: int, stat: Any = np.median
) -> dict[str, float]:
    """`stat` (median, or min) ms of each variant's `(setup, call)`, timed in blocks taken in
    turn."""
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    per_block = max(1, -(-repeat // rounds))
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            setup, fn = variants[name]
            setup()
            start = time.perf_counter()
            fn()
            while time.perf_counter() - start < WARM_UP_S:
                fn()
            for _ in range(per_block):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {n: float(stat(t) * 1e3) for n, t in times.items()}


def kernel_rows(module: Any, inputs: dict, tasks: list[int], repeat: int) -> str:
    """Per kernel: 1-thread ms, and 2-thread ms for each tasks-per-thread setting."""
    from tensorforge.runtime.device import cpu

    settings = [(1, tasks[0])] + [(2, k) for k in tasks]
    runs: dict[tuple[int, int], list[np.ndarray]] = {s: [] for s in settings}
    for r in range(4):
        for threads, k in settings if r % 2 == 0 else settings[::-1]:
            cpu.set_num_threads(threads)
            cpu.set_tasks_per_thread(k)
            module.run(inputs)
            prof = module.profile(inputs, repeat=repeat)
            runs[(threads, k)].append(np.array([row.median_ms for row in prof.rows]))
    labels = [row.label for row in prof.rows]
    med = {s: np.median(np.stack(v), axis=0) for s, v in runs.items()}
    one = med[(1, tasks[0])]
    worst = med[(2, tasks[0])] - one / 2
    head = "  ".join(f"2t k={k:<3}" for k in tasks)
    lines = [f"  {'kernel':<58} {'1t ms':>7}  {head}  (ms; k = tasks per thread)"]
    for i in np.argsort(-worst)[:12]:
        cells = "  ".join(f"{med[(2, k)][i]:>8.3f}" for k in tasks)
        lines.append(f"  {labels[i][:58]:<58} {one[i]:>7.3f}  {cells}")
    totals = "  ".join(f"{med[(2, k)].sum():>8.3f}" for k in tasks)
    lines.append(f"  {'sum of kernel medians':<58} {one.sum():>7.3f}  {totals}")
    return "\n".join(lines)


def bench(name: str, tasks: list[int], repeat: int, rounds: int, kernels: bool, stat: Any) -> str:
    import onnx

    import tensorforge
    from tensorforge.runtime.device import cpu

    path = ensure_exported(name)
    model = onnx.load(str(path))
    inputs = random_inputs(model)
    module = tensorforge.compile(model, progress=False)
    sessions = {t: _ort_session(path, t) for t in (1, 2)}

    def tf(threads: int, k: int):
        def setup() -> None:
            cpu.set_num_threads(threads)
            cpu.set_tasks_per_thread(k)

        return setup, lambda: module.run(inputs)

    variants: dict[str, Any] = {"tf 1t": tf(1, tasks[0])}
    variants.update({f"tf 2t k={k}": tf(2, k) for k in tasks})
    for t, sess in sessions.items():
        variants[f"ort {t}t"] = (lambda: None, lambda s=sess: s.run(None, inputs))
    ms = interleaved(variants, repeat, rounds, stat)
    cells = [f"{ms['tf 1t']:7.2f}"]
    cells += [f"{ms[f'tf 2t k={k}']:7.2f} {ms['tf 1t'] / ms[f'tf 2t k={k}']:4.2f}x" for k in tasks]
    cells += [f"{ms['ort 1t']:7.2f}", f"{ms['ort 2t']:7.2f} {ms['ort 1t'] / ms['ort 2t']:4.2f}x"]
    ratio = "  ".join(f"{ms[f'tf 2t k={k}'] / ms['ort 2t']:4.2f}x" for k in tasks)
    row = f"{name:<16} " + "  ".join(cells) + f"  | {ms['tf 1t'] / ms['ort 1t']:4.2f}x  {ratio}"
    if kernels:
        row += "\n" + kernel_rows(module, inputs, tasks, max(3, repeat // 4))
    cpu.set_num_threads(1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--tasks", default="1,4", help="tasks-per-thread settings to compare")
    parser.add_argument("--repeat", type=int, default=24, help="timed calls per variant")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--kernels", action="store_true", help="add per-kernel rows")
    parser.add_argument(
        "--min", action="store_true", help="fastest call instead of the median (busy machines)"
    )
    args = parser.parse_args()
    tasks = [int(k) for k in args.tasks.split(",")]
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    k_cols = "  ".join(f"{'2t k=' + str(k):>13}" for k in tasks)
    print(f"{'model':<16} {'tf 1t':>7}  {k_cols}  {'ort 1t':>7}  {'ort 2t':>13}  | tf/ort 1t, 2t")
    for name in args.models.split(","):
        stat = np.min if args.min else np.median
        print(bench(name, tasks, args.repeat, args.rounds, args.kernels, stat), flush=True)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
