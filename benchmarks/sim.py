"""Cycle-accurate simulator benchmark: ResNet-18 conv layers C2-C12 on the timing model.

Each layer (vta_facts.md §6.1) is compiled with 1 and 2 virtual threads by the compiler
(``compiler.vta.conv2d``: TE + tensorize + ``vta.lower``, random int8 data and
weights, requantization ``>> 10`` then ReLU) and run on ``cyclesim``. The table prints, per
layer: the schedule, instructions, cycles, GEMM MAC utilization, achieved GOPS at the config's
clock, operational intensity (GEMM ops per DRAM byte) and the simulator's own speed (simulated
cycles and instructions per wall-clock second, of the whole run and of the timing model alone).
The schedule is the compiler's default except the layers of ``SCHEDULES`` (marked ``*``),
where the default's cost model picks a slower tiling than the one given (found by timing every
dividing schedule of the layer on the cycle model).

"N virtual threads": the tiles are split between N copies of the INP/WGT/ACC buffers whose
instruction streams are interleaved, with dependency tokens between them: with 1 thread every
load waits for the previous compute and every compute for the previous store; with 2, loads
and stores of one tile overlap compute of the other. Every output is checked bit-exact against
the compiler's int8 oracle (``compiler.quantize``) unless --no-check.

Usage:
    python benchmarks/sim.py [--config pynq] [--layers C2,C9] [--vthreads 1,2]
                             [--roofline roofline.png] [--trace-dir DIR] [--no-check] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tensorforge.compiler.vta import Conv2dSchedule, VtaKernel, conv2d
from tensorforge.hw.config import HWConfig
from tensorforge.sim.roofline import plot_roofline, roofline_point
from tensorforge.sim.timing import TimingParams, simulate_timing

# ResNet-18 conv layers (ReQuEST'18 Table 1): name, H=W, IC, OC, kernel, stride.
LAYERS = {
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
SHIFT = 10


def _sched(th: int, toc: int, tic: int, resident: bool = False) -> Conv2dSchedule:
    return Conv2dSchedule(tile_h=th, tile_oc=toc, tile_ic=tic, resident_weights=resident)


# (layer, virtual threads) -> the schedule to use instead of the default one on ``pynq``.
SCHEDULES = {
    ("C6", 2): _sched(7, 2, 1),
    ("C11", 2): _sched(1, 16, 4, True),
}


@dataclass(frozen=True)
class ConvShape:
    h: int
    ic: int
    oc: int
    k: int
    s: int

    @property
    def pad(self) -> int:
        return self.k // 2


@dataclass
class ConvKernel:
    """A layer compiled by the compiler, with its random data."""

    kernel: VtaKernel
    x: np.ndarray  # (1, IC, H, W) int8
    tuned: bool  # the schedule is from SCHEDULES, not the default


def build_conv(cfg: HWConfig, sh: ConvShape, vthreads: int, seed: int = 0,
               name: str | None = None) -> ConvKernel:  # fmt: skip
    """Compile the layer (the schedule of ``SCHEDULES[name, vthreads]`` on ``pynq``, else the
    default) with random int8 data and weights."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, sh.ic, sh.h, sh.h), dtype=np.int8)
    w = rng.integers(-128, 128, (sh.oc, sh.ic, sh.k, sh.k), dtype=np.int8)
    given = SCHEDULES.get((name, vthreads)) if cfg.name == "pynq" else None
    sched = None if given is None else replace(given, vthreads=vthreads)
    kern = conv2d(cfg, x.shape, w, stride=sh.s, padding=sh.pad, shift=SHIFT, relu=True,
                  schedule=sched, vthreads=vthreads)  # fmt: skip
    return ConvKernel(kern, x, given is not None)


# ---- the benchmark ---------------------------------------------------------------------------


def run_layer(kernel: ConvKernel, check: bool, trace: Path | None) -> dict:
    kern = kernel.kernel
    cfg, image = kern.config, kern.image
    start = time.perf_counter()
    y, result = kern.run(kernel.x, backend="cyclesim", trace=trace)
    wall = time.perf_counter() - start
    timing = result.timing
    assert timing is not None
    ok = bool(np.array_equal(y, kern.reference(kernel.x))) if check else None
    # The timing model alone (no data), for the simulator-speed column.
    t0 = time.perf_counter()
    simulate_timing(image.instructions(), cfg, timing.params)
    timing_wall = time.perf_counter() - t0
    u = timing.utilization()
    s = kern.schedule
    return {
        "schedule": [s.tile_h, s.tile_oc, s.tile_ic, s.resident_weights],
        "tuned": kernel.tuned,
        "cycles": timing.cycles,
        "insns": image.insn_count,
        "utilization": u["gemm_macs"],
        "gops": timing.gops,
        "dram_bytes": timing.dram_bytes,
        "intensity": timing.ops / timing.dram_bytes,
        "load_util": u["load"],
        "store_util": u["store"],
        "bit_exact": ok,
        "wall_s": wall,
        "timing_wall_s": timing_wall,
        "cycles_per_s": timing.cycles / wall,
        "insns_per_s": image.insn_count / wall,
        "timing_cycles_per_s": timing.cycles / timing_wall,
        "timing_insns_per_s": image.insn_count / timing_wall,
        "_timing": timing,
    }


def _schedule(row: dict) -> str:
    th, toc, tic, resident = row["schedule"]
    return f"{'*' if row['tuned'] else ''}{th}/{toc}/{tic}{' W' if resident else ''}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--vthreads", default="1,2")
    ap.add_argument("--roofline", metavar="PNG", help="also plot the roofline to this file")
    ap.add_argument("--trace-dir", metavar="DIR", help="write a Chrome trace per run")
    ap.add_argument("--no-check", action="store_true", help="skip the comparison with the oracle")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = ap.parse_args(argv)
    cfg = HWConfig.load(args.config)
    params = TimingParams.for_config(cfg)
    vts = [int(v) for v in args.vthreads.split(",")]
    rows, points = [], []
    if not args.json:
        print(
            f"ResNet-18 conv layers on HWConfig {cfg.name!r} ({cfg.bitstream_name}), "
            f"{cfg.clock_mhz:g} MHz, peak {cfg.peak_gops:.1f} GOPS; the compiler's programs"
        )
        print(f"timing: {params}")
        print(f"{'layer':<6}{'vt':>3}{'sched th/toc/tic':>17}{'insns':>7}{'cycles':>12}{'util':>7}"
              f"{'GOPS':>7}{'ops/B':>7}{'exact':>6}{'Mcyc/s':>8}{'kinsn/s':>8}"
              f"{'t-only Mcyc/s':>14}")  # fmt: skip
    for name in args.layers.split(","):
        sh = ConvShape(*LAYERS[name])
        for vt in vts:
            kernel = build_conv(cfg, sh, vt, name=name)
            trace = Path(args.trace_dir) / f"{name}_vt{vt}.json" if args.trace_dir else None
            r = run_layer(kernel, not args.no_check, trace)
            points.append(roofline_point(name, r.pop("_timing"), f"{vt} virtual thread(s)"))
            row = {"layer": name, "vthreads": vt, **r}
            rows.append(row)
            if args.json:
                print(json.dumps(row))
                continue
            exact = {None: "-", True: "yes", False: "NO"}[r["bit_exact"]]
            print(f"{name:<6}{vt:>3}{_schedule(row):>17}{r['insns']:>7}{r['cycles']:>12,}"
                  f"{r['utilization']:>7.1%}{r['gops']:>7.1f}{r['intensity']:>7.1f}{exact:>6}"
                  f"{r['cycles_per_s'] / 1e6:>8.1f}{r['insns_per_s'] / 1e3:>8.1f}"
                  f"{r['timing_cycles_per_s'] / 1e6:>14.1f}")  # fmt: skip
    if not args.json:
        for vt in vts:
            mine = [r for r in rows if r["vthreads"] == vt]
            total = sum(r["cycles"] for r in mine)
            print(f"vt={vt}: total {total:,} cycles ({total / cfg.clock_mhz / 1e3:.2f} ms), "
                  f"peak utilization {max(r['utilization'] for r in mine):.1%}, mean "
                  f"{sum(r['utilization'] for r in mine) / len(mine):.1%}")  # fmt: skip
        print("sched: output rows / output-channel blocks per tile / input-channel blocks per "
              "chunk; W = all weights loaded once; * = from SCHEDULES, not the default. util = "
              "GEMM MAC utilization.")  # fmt: skip
    if args.roofline:
        plot_roofline(points, cfg, params, args.roofline)
        if not args.json:
            print(f"roofline written to {args.roofline}")
    return 1 if any(r["bit_exact"] is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
