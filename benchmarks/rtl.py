"""RTL simulation speed: the exported accelerator under Verilator and Icarus (cocotb) next to the
cycle-accurate model (sim/timing.py) and the functional simulator, on the same programs.

Programs (on the `tiny` config by default): the demo int8 matmul and a conv2d compiled by
compiler.vta. Every backend's output is checked bit-exact against the functional simulator
and the RTL's CYCLES against the cycle-accurate model's (with the RAM model's latencies).

Columns: cycles (of the program, from the cycle-accurate model; equal to the RTL's CYCLES),
wall time of one run, simulated cycles per wall-clock second, and for the RTL the build time
(Verilog export + simulator compile, from an empty cache unless --cached). For the RTL, "run"
is the whole launch (a fresh simulator process: start-up, image load, simulation, write-back),
and "cycles/s" counts only the launch itself (the bench's ``launch_ms``), i.e. the speed of the
simulator with cocotb's AXI models and register polling in the loop.

Usage:
    python benchmarks/rtl.py [--config tiny] [--simulators icarus,verilator] [--cached] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from machine import describe

from tensorforge.compiler.vta import conv2d
from tensorforge.demo import build_matmul
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.vta import RunResult
from tensorforge.runtime.device.vta.rtl import build_rtl, matched_timing

Runner = Callable[..., tuple[np.ndarray, RunResult]]


def programs(cfg: HWConfig) -> dict[str, Runner]:
    """name -> run(backend, **options) returning (output, RunResult)."""
    mm = build_matmul(cfg, 8, 32, 32, shift=6, seed=1)
    rng = np.random.default_rng(2)
    weight = rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8)
    conv = conv2d(cfg, (1, 8, 8, 8), weight, padding=1, shift=8, relu=True, vthreads=2)
    x = rng.integers(-128, 128, (1, 8, 8, 8), dtype=np.int8)
    return {
        "matmul 8x32x32": lambda backend, **kw: mm.run_on(backend, **kw),
        "conv2d 1x8x8x8 k3": lambda backend, **kw: conv.run(x, backend, **kw),
    }


def measure(cfg: HWConfig, simulators: list[str], cached: bool) -> list[dict[str, object]]:
    """Build the RTL (cold unless ``cached``), then run every program on every backend."""
    cache = None if cached else Path(tempfile.mkdtemp(prefix="tf_rtl_bench_"))
    rows: list[dict[str, object]] = []
    try:
        builds = {sim: build_rtl(cfg, sim, cache).seconds for sim in simulators}
        for name, run in programs(cfg).items():
            want, _ = run("sim")
            functional = _row(name, "functional (sim)", run, "sim", {}, want)
            timed = _row(name, "cycle-accurate (cyclesim)", run, "cyclesim",
                         {"timing": matched_timing(cfg)}, want)  # fmt: skip
            cycles = int(timed["cycles"])  # type: ignore[call-overload]
            functional["cycles"] = cycles
            functional["cycles_per_s"] = cycles / float(functional["run_s"])  # type: ignore[arg-type]
            rows += [functional, timed]
            for sim in simulators:
                row = _row(name, f"RTL {sim}", run, "rtl", {"simulator": sim, "cache_dir": cache},
                           want)  # fmt: skip
                if row["cycles"] != cycles:
                    print(f"note: RTL {sim} CYCLES {row['cycles']} != sim/timing {cycles} ({name})")
                row["build_s"] = builds[sim]
                rows.append(row)
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    return rows


def _row(
    name: str, label: str, run: Runner, backend: str, opts: dict[str, object], want: np.ndarray
) -> dict[str, object]:
    t0 = time.perf_counter()
    out, result = run(backend, **opts)
    run_s = time.perf_counter() - t0
    if not np.array_equal(out, want):
        raise SystemExit(f"{label} output differs from the functional simulator on {name}")
    row: dict[str, object] = {"program": name, "backend": label, "run_s": run_s}
    if result.cycles is not None:
        row["cycles"] = result.cycles
        row["cycles_per_s"] = result.cycles / run_s
    if backend == "rtl":
        launch = result.stats["launch_ms"] / 1000
        row["cycles_per_s"] = result.stats["clock_cycles"] / max(launch, 1e-9)
    return row


def table(rows: list[dict[str, object]], cfg: HWConfig) -> str:
    lines = [
        f"RTL simulation speed, HWConfig {cfg.name!r} ({cfg.bitstream_name}) on {describe()}",
        f"{'program':<20}{'backend':<28}{'cycles':>8}{'run s':>9}{'cycles/s':>12}{'build s':>9}",
    ]
    for r in rows:
        build = f"{r['build_s']:.1f}" if "build_s" in r else ""
        lines.append(
            f"{r['program']:<20}{r['backend']:<28}{r.get('cycles', 0):>8}{r['run_s']:>9.3f}"
            f"{r['cycles_per_s']:>12,.0f}{build:>9}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--simulators", default="icarus,verilator")
    ap.add_argument("--cached", action="store_true", help="reuse cached builds (build s = 0)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    cfg = HWConfig.load(args.config)
    rows = measure(cfg, args.simulators.split(","), args.cached)
    print(json.dumps(rows, indent=1) if args.json else table(rows, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
