"""The two ways an accelerator conv2d is generated, side by side on ResNet-18's layers.

For each of ResNet-18's conv layers C2-C12 (batch 1, 224x224 model; `benchmarks/sim.py`) and 1 and 2
virtual threads, `compiler.topi.vta.conv2d` is compiled twice: `lowering="tile"` (the
hand-written tile program, with its best schedule, ragged edge tiles allowed) and
`lowering="auto"` (the TE operator lowered through tensorize, DMA/ALU pragmas and
`tir.vta_lower`, with the best schedule whose knobs divide the dimensions; it falls back to the
tile program where none fits). Each image runs on the `cyclesim` device and is checked bit for
bit against the int8 numpy oracle. Printed: the schedule (tile_h, tile_oc, tile_ic, resident
weights), instructions, cycles, the cycle ratio, and compile time (median of 3).

Usage:
    python benchmarks/vta_lowering.py [--config pynq] [--layers 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from machine import describe

from sim import LAYERS  # ResNet-18's C2-C12 (ReQuEST'18 Table 1)
from tensorforge.compiler.topi.vta import conv2d
from tensorforge.hw.config import HWConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--layers", type=int, default=len(LAYERS))
    args = ap.parse_args()
    cfg = HWConfig.preset(args.config)
    print(describe())
    print(f"config {cfg.name}; cycles on cyclesim (default timing), bit-exact with numpy\n")
    print("| layer | vt | tile: sched, insns, cycles | TE: sched, insns, cycles | TE/tile |"
          " compile tile / TE |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    totals: dict[tuple[str, int], int] = {}
    for name, (h, c, o, k, s) in list(LAYERS.items())[: args.layers]:
        p = k // 2
        x = rng.integers(-128, 128, (1, c, h, h), dtype=np.int8)
        w = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
        for vt in (1, 2):
            cells, cycles, times = [], [], []
            for lowering in ("tile", "auto"):
                spent = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    kern = conv2d(cfg, x.shape, w, stride=s, padding=p, shift=10, relu=True,
                                  vthreads=vt, lowering=lowering)  # fmt: skip
                    spent.append(time.perf_counter() - t0)
                y, result = kern.run(x, backend="cyclesim")
                if not np.array_equal(y, kern.reference(x)):
                    raise SystemExit(f"layer {name} ({lowering}, {vt} vt) is not bit-exact")
                sc = kern.schedule
                n = int(result.stats["cycles"])
                totals[lowering, vt] = totals.get((lowering, vt), 0) + n
                sched = f"{sc.tile_h},{sc.tile_oc},{sc.tile_ic},{int(sc.resident_weights)}"
                tag = "" if lowering == "tile" or kern.lowering == "te" else " (tile)"
                cells.append(f"{sched}{tag}, {kern.image.insn_count}, {n:,}")
                cycles.append(n)
                times.append(statistics.median(spent) * 1e3)
            layer = f"{name} {c}->{o} {k}x{k}/{s} {h}x{h}"
            ratio = cycles[1] / cycles[0]
            print(f"| {layer} | {vt} | {cells[0]} | {cells[1]} | {ratio:.3f} | "
                  f"{times[0]:.0f} / {times[1]:.0f} ms |")  # fmt: skip
    for vt in (1, 2):
        tile, te_ = totals["tile", vt], totals["auto", vt]
        print(f"| total | {vt} | {tile:,} | {te_:,} | {te_ / tile:.3f} | |")


if __name__ == "__main__":
    main()
