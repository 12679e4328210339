"""The model zoo through the GPU back-end: compile each zoo model for OpenCL, run it on the local
OpenCL device (PoCL's CPU device here) and compare with onnxruntime; or, for `--target cuda`,
compile only (CUDA C to PTX by NVRTC: nothing runs without a GPU).

The models are zoo.py's (torchvision architectures, random weights, batch 1, float32, exported
to build/zoo/ by `python benchmarks/zoo.py`); the input is machine.random_inputs's seeded
normal values and the check is zoo.py's: the largest absolute error relative to the output's
largest magnitude, and the share of agreeing top-1 classes. Each model runs in a child process
of its own with a time limit (`--timeout-s`): a model past it is a row "timeout", one whose
child dies a row "crash", so every model appears. Times: the compile (`tensorforge.compile`),
the first run (PoCL builds each program's kernels then) and a second run.

Usage:
    python benchmarks/zoo_gpu.py [--target opencl|cuda] [--models resnet18,vit_b_16]
                                 [--timeout-s 300] [--json build/zoo_gpu.json]
    python benchmarks/zoo_gpu.py --load build/zoo_gpu.json     # a saved run's table again
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from zoo import CACHE, MATCH_RTOL, MODELS, _first_line, _ort_session, compare

HERE = Path(__file__).resolve().parent


def child(name: str, target: str) -> dict[str, Any]:
    """Compile, run once (OpenCL) and check zoo model `name`."""
    import numpy as np
    import onnx
    from machine import random_inputs

    import tensorforge

    path = CACHE / f"{name}.onnx"
    model = onnx.load(str(path))
    inputs = random_inputs(model)
    row: dict[str, Any] = {"model": name, "target": target, "error": None}
    start = time.perf_counter()
    try:
        module = tensorforge.compile(model, target=target)
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        return row | {"error": f"compile: {_first_line(exc)}"}
    row["compile_s"] = time.perf_counter() - start
    row["groups"] = len(module.kernels)  # fused groups, each one program of device kernels
    row["launches"] = module.stats.get("device_kernels")
    if target != "opencl":  # CUDA: compiled to PTX by NVRTC, nothing runs
        no_ptx = [k.name for k in module.kernels if "ptx" not in json.loads(k.payload)]
        return row | {"error": f"no PTX (is NVRTC installed?): {no_ptx[:3]}" if no_ptx else None}
    try:
        start = time.perf_counter()
        ours = next(iter(module.run(inputs).values()))
        row["first_run_s"] = time.perf_counter() - start  # PoCL builds its kernels here
        start = time.perf_counter()
        ours = next(iter(module.run(inputs).values()))
        row["run_s"] = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001
        return row | {"error": f"run: {_first_line(exc)}"}
    want = _ort_session(path, 1).run(None, inputs)[0]
    row["rel_error"], row["top1_agree"] = compare(ours, want)
    if float(np.std(want)) <= 1e-4 * float(np.abs(want).max()):
        row["error"] = "degenerate: onnxruntime's output is constant"
    elif row["rel_error"] > MATCH_RTOL or row["top1_agree"] < 1.0:
        row["error"] = f"mismatch: rel error {row['rel_error']:.1e}, top-1 {row['top1_agree']:.2f}"
    return row


def run_one(name: str, target: str, timeout_s: float) -> dict[str, Any]:
    """`child` in a process of its own, bounded by `timeout_s`."""
    cmd = [sys.executable, __file__, "--child", name, "--target", target]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"model": name, "target": target, "error": f"timeout after {timeout_s:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or [""])[-1][:160]
        return {"model": name, "target": target, "error": f"crash (exit {done.returncode}) {tail}"}
    return json.loads(lines[-1]) | {"wall_s": time.perf_counter() - start}


def markdown(rows: list[dict[str, Any]]) -> str:
    head = "| model | groups | compile s | first run s | run s | rel. error | top-1 | note |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        cells = [
            r["model"],
            str(r.get("groups", "")),
            _fmt(r.get("compile_s"), ".1f"),
            _fmt(r.get("first_run_s"), ".1f"),
            _fmt(r.get("run_s"), ".2f"),
            _fmt(r.get("rel_error"), ".1e"),
            _fmt(r.get("top1_agree"), ".2f"),
            r["error"] or ("match" if r.get("target") == "opencl" else "compiled to PTX"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="opencl", choices=("opencl", "cuda"))
    parser.add_argument("--models", default="", help="comma-separated; default: every model")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--json", default="", help="write the rows here")
    parser.add_argument("--load", default="", help="print the table of a saved --json run")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        print(markdown(json.loads(Path(args.load).read_text())))
        return
    if args.child:
        print(json.dumps(child(args.child, args.target)), flush=True)
        return
    names = args.models.split(",") if args.models else list(MODELS)
    rows = []
    for name in names:
        rows.append(run_one(name, args.target, args.timeout_s))
        print(json.dumps(rows[-1]), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    print(markdown(rows))


if __name__ == "__main__":
    main()
