"""The accelerator's one lowering on ResNet-18's layers, against the two it replaced.

For each of ResNet-18's conv layers C2-C12 (batch 1, 224x224 model; `benchmarks/sim.py`) and 1 and 2
virtual threads, `compiler.vta.conv2d` compiles the TE operator (tensorize, DMA/ALU pragmas,
`vta.lower`) with its default schedule; the image runs on the `cyclesim` device and is checked
bit for bit against the int8 numpy oracle. Printed: the schedule (tile_h, tile_oc, tile_ic,
resident weights), instructions, cycles, compile time (median of 3), and `before`: the fewer
cycles of the two lowerings there were until issue 14 (the hand-written tile program with its
best schedule, ragged tiles allowed, and the TE path with the best dividing schedule), as
measured by this script's previous version on 2026-11-24 (`BEFORE` below, from
/tmp/base/vta_lowering.txt; same config, data and timing).

Usage:
    python benchmarks/vta_lowering.py [--config pynq] [--layers 11]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from machine import describe

from sim import LAYERS  # ResNet-18's C2-C12 (ReQuEST'18 Table 1)
from tensorforge.compiler.vta import conv2d
from tensorforge.hw.config import HWConfig

# (layer, vthreads) -> min(tile program, TE) cycles on pynq before issue 14.
BEFORE = {
    ("C2", 1): 593_227, ("C2", 2): 518_545, ("C3", 1): 146_692, ("C3", 2): 108_356,
    ("C4", 1): 332_752, ("C4", 2): 277_715, ("C5", 1): 74_289, ("C5", 2): 55_436,
    ("C6", 1): 564_652, ("C6", 2): 527_851, ("C7", 1): 391_134, ("C7", 2): 247_083,
    ("C8", 1): 78_010, ("C8", 2): 50_633, ("C9", 1): 679_098, ("C9", 2): 481_653,
    ("C10", 1): 620_318, ("C10", 2): 422_608, ("C11", 1): 90_389, ("C11", 2): 78_040,
    ("C12", 1): 1_207_993, ("C12", 2): 777_688,
}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--layers", type=int, default=len(LAYERS))
    args = ap.parse_args()
    cfg = HWConfig.preset(args.config)
    print(describe())
    print(f"config {cfg.name}; cycles on cyclesim (default timing), bit-exact with numpy\n")
    print("| layer | vt | schedule | insns | cycles | before | ratio | compile |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    totals: dict[int, list[int]] = {1: [0, 0], 2: [0, 0]}
    for name, (h, c, o, k, s) in list(LAYERS.items())[: args.layers]:
        p = k // 2
        x = rng.integers(-128, 128, (1, c, h, h), dtype=np.int8)
        w = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
        for vt in (1, 2):
            spent = []
            for _ in range(3):
                t0 = time.perf_counter()
                kern = conv2d(cfg, x.shape, w, stride=s, padding=p, shift=10, relu=True,
                              vthreads=vt)  # fmt: skip
                spent.append(time.perf_counter() - t0)
            y, result = kern.run(x, backend="cyclesim")
            if not np.array_equal(y, kern.reference(x)):
                raise SystemExit(f"layer {name} ({vt} vt) is not bit-exact")
            sc, n = kern.schedule, int(result.stats["cycles"])
            before = BEFORE.get((name, vt)) if cfg.name == "pynq" else None
            totals[vt][0] += n
            totals[vt][1] += before or 0
            sched = f"{sc.tile_h},{sc.tile_oc},{sc.tile_ic},{int(sc.resident_weights)}"
            cells = f"{before:,} | {n / before:.3f}" if before else "- | -"
            print(f"| {name} {c}->{o} {k}x{k}/{s} {h}x{h} | {vt} | {sched} | "
                  f"{kern.image.insn_count} | {n:,} | {cells} | "
                  f"{statistics.median(spent) * 1e3:.0f} ms |")  # fmt: skip
    for vt, (now, before) in totals.items():
        cells = f"{before:,} | {now / before:.3f}" if before else "- | -"
        print(f"| total | {vt} | | | {now:,} | {cells} | |")


if __name__ == "__main__":
    main()
