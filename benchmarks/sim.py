"""Cycle-accurate simulator benchmark: ResNet-18 conv layers C2-C12 on the timing model.

Prints, for each layer (vta_facts.md §6.1) and 1 and 2 virtual threads: cycles, GEMM MAC
utilization, achieved GOPS at the config's clock, DRAM bytes, operational intensity, and the
simulator's own speed (simulated cycles and instructions per wall-clock second); then, in the
same row, the program the compiler generates for the same layer (``compiler.topi.vta.conv2d``,
its default schedule, same data and requantization): its tiling, instructions, cycles and
cycles relative to the hand-assembled program (``--no-compiler`` skips it).

The hand-assembled conv programs are a direct convolution, no im2col. Each output tile (toc
output-channel blocks x th output rows x all columns) is computed by one GEMM per input-channel
chunk whose micro-ops walk (oc, ic, kh, kw) and whose two loop levels walk the tile's rows and
columns over a zero-padded input tile in INP. Requantization is three ALU instructions (SHR,
MAX 0, MIN 127).
"N virtual threads" means N sets of INP/WGT and ACC buffers that successive tiles rotate
through, with dependency tokens between them, which is the instruction stream TVM's virtual
threads lower to: with 1 thread every load waits for the previous compute and every compute
for the previous store; with 2, loads and stores of one tile overlap compute of the other.
Every output is checked bit-exact against numpy unless --no-check.

Usage:
    python benchmarks/sim.py [--config pynq] [--layers C2,C9] [--vthreads 1,2] [--no-compiler]
                             [--roofline roofline.png] [--trace-dir DIR] [--no-check] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorforge.compiler.topi.vta import conv2d as compile_conv2d
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemInsn, MemType, Opcode, Uop
from tensorforge.runtime.device.vta import LoadedProgram, open_device
from tensorforge.runtime.program import UOP_BLOB, ProgramBuilder, ProgramImage
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

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.k) // self.s + 1


@dataclass(frozen=True)
class Tiling:
    th: int  # output rows per tile
    toc: int  # output-channel blocks per tile
    tic: int  # input-channel blocks per chunk
    resident: bool  # all weights loaded once


@dataclass
class ConvKernel:
    cfg: HWConfig
    shape: ConvShape
    tiling: Tiling
    vthreads: int
    image: ProgramImage
    x: np.ndarray
    w: np.ndarray

    def reference(self) -> np.ndarray:
        """numpy: conv (zero padding), >> SHIFT, clip to [0, 127]; (OC, OH, OW) int8."""
        sh, p = self.shape, self.shape.pad
        xp = np.pad(self.x.astype(np.float64), ((0, 0), (p, p), (p, p)))
        cols = np.stack(
            [
                xp[:, kh : kh + sh.s * sh.oh : sh.s, kw : kw + sh.s * sh.oh : sh.s]
                for kh in range(sh.k)
                for kw in range(sh.k)
            ],
            axis=1,
        )  # (IC, K*K, OH, OW); float64 sums of int8 products are exact here
        acc = self.w.reshape(sh.oc, -1).astype(np.float64) @ cols.reshape(-1, sh.oh * sh.oh)
        acc = acc.astype(np.int64).reshape(sh.oc, sh.oh, sh.oh)
        return np.clip(acc >> SHIFT, 0, 127).astype(np.int8)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def choose_tiling(cfg: HWConfig, sh: ConvShape, vthreads: int) -> Tiling:
    """The tiling with the least DRAM traffic (plus a per-step overhead) that fits the SRAMs."""
    icb, ocb, kk, wp = sh.ic // cfg.block_in, sh.oc // cfg.block_out, sh.k * sh.k, sh.h + 2 * sh.pad
    resident = ocb * icb * kk <= cfg.wgt_depth and ocb * icb * kk * vthreads**2 <= cfg.uop_depth
    best, best_cost = None, None
    for th in _divisors(sh.oh):
        rows_in = (th - 1) * sh.s + sh.k
        for toc in _divisors(ocb):
            if toc * th * sh.oh > cfg.acc_depth // vthreads:
                continue
            for tic in _divisors(icb):
                if tic * rows_in * wp > cfg.inp_depth // vthreads:
                    continue
                if not resident and toc * tic * kk > cfg.wgt_depth // vthreads:
                    continue
                h_tiles, oc_tiles, chunks = sh.oh // th, ocb // toc, icb // tic
                inp = oc_tiles * h_tiles * icb * rows_in * sh.h * cfg.inp_elem_bytes
                wgt = (1 if resident else h_tiles) * ocb * icb * kk * cfg.wgt_elem_bytes
                cost = inp + wgt + 4096 * oc_tiles * h_tiles * chunks
                if best_cost is None or cost < best_cost:
                    best, best_cost = Tiling(th, toc, tic, resident), cost
    if best is None:
        raise ValueError(f"no tiling of {sh} fits HWConfig {cfg.name!r} with {vthreads} threads")
    return best


def build_conv(cfg: HWConfig, sh: ConvShape, vthreads: int, seed: int = 0) -> ConvKernel:
    """Assemble the conv program (see the module docstring) with random int8 data."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (sh.ic, sh.h, sh.h), dtype=np.int8)
    w = rng.integers(-128, 128, (sh.oc, sh.ic, sh.k, sh.k), dtype=np.int8)
    t = choose_tiling(cfg, sh, vthreads)
    image = _assemble(cfg, sh, t, vthreads, w)
    return ConvKernel(cfg, sh, t, vthreads, image, x, w)


def pack_input(cfg: HWConfig, x: np.ndarray) -> np.ndarray:
    ic, h, w = x.shape
    return np.ascontiguousarray(
        x.reshape(ic // cfg.block_in, cfg.block_in, h, w).transpose(0, 2, 3, 1)
    ).reshape(ic // cfg.block_in, h, w, 1, cfg.block_in)


def unpack_output(cfg: HWConfig, y: np.ndarray) -> np.ndarray:
    ocb, oh, ow = y.shape[:3]
    return y.reshape(ocb, oh, ow, cfg.block_out).transpose(0, 3, 1, 2).reshape(-1, oh, ow)


def _assemble(cfg: HWConfig, sh: ConvShape, t: Tiling, vt: int, w: np.ndarray) -> ProgramImage:
    icb, ocb, k, kk, p = sh.ic // cfg.block_in, sh.oc // cfg.block_out, sh.k, sh.k**2, sh.pad
    wp, oh, rows_in = sh.h + 2 * p, sh.oh, (t.th - 1) * sh.s + sh.k
    h_tiles, oc_tiles, chunks = oh // t.th, ocb // t.toc, icb // t.tic
    b = ProgramBuilder(cfg, name=f"conv_{sh.h}_{sh.ic}_{sh.oc}_k{k}s{sh.s}_vt{vt}")
    b.slot("X", "input", (icb, sh.h, sh.h, 1, cfg.block_in))
    b.slot("Y", "output", (ocb, oh, oh, 1, cfg.block_out))
    packed = w.reshape(ocb, cfg.block_out, icb, cfg.block_in, k, k).transpose(0, 2, 4, 5, 1, 3)
    b.blob("W", np.ascontiguousarray(packed))
    inp_base = [v * (cfg.inp_depth // vt) for v in range(vt)]
    acc_base = [v * (cfg.acc_depth // vt) for v in range(vt)]
    wgt_base = [v * (cfg.wgt_depth // vt) for v in range(vt)]
    tile_acc = t.th * oh  # ACC entries per output-channel block of a tile
    uop_cache: dict[tuple, int] = {}

    def gemm_uops(bs: int, a: int, ot: int, c: int) -> int:
        key = (bs, a) + ((ot, c) if t.resident else ())
        if key not in uop_cache:
            uops = []
            for oi in range(t.toc):
                for ii in range(t.tic):
                    for kh in range(k):
                        for kw in range(k):
                            if t.resident:
                                wi = ((ot * t.toc + oi) * icb + c * t.tic + ii) * kk + kh * k + kw
                            else:
                                wi = wgt_base[bs] + (oi * t.tic + ii) * kk + kh * k + kw
                            src = inp_base[bs] + ii * rows_in * wp + kh * wp + kw
                            uops.append(Uop(acc_base[a] + oi * tile_acc, src, wi))
            uop_cache[key] = b.add_uops(uops)
        return uop_cache[key]

    def reset_uops(a: int) -> int:
        key = ("reset", a)
        if key not in uop_cache:
            uop_cache[key] = b.add_uops([Uop(acc_base[a] + oi * tile_acc, 0, 0)
                                         for oi in range(t.toc)])  # fmt: skip
        return uop_cache[key]

    tiles = [(ot, ht) for ot in range(oc_tiles) for ht in range(h_tiles)]
    # Micro-ops first, so that their LOAD (the compute stage's first instruction) knows its size.
    for n, (ot, _) in enumerate(tiles):
        reset_uops(n % vt)
        for c in range(chunks):
            gemm_uops((n * chunks + c) % vt, n % vt, ot, c)
    alu_uop = [b.add_uops([Uop(acc_base[a], 0, 0)]) for a in range(vt)]
    b.emit(MemInsn(Opcode.LOAD, MemType.UOP, 0, 0, 1, len(b.uops), len(b.uops)), reloc=UOP_BLOB)
    if t.resident:
        n_w = ocb * icb * kk
        b.emit(MemInsn(Opcode.LOAD, MemType.WGT, 0, 0, 1, n_w, n_w), reloc="W")
    steps = len(tiles) * chunks
    rows = dict(iter_out=t.th, iter_in=oh, dst_factor_out=oh, dst_factor_in=1)
    for n, (ot, ht) in enumerate(tiles):
        a = n % vt
        for c in range(chunks):
            g = n * chunks + c
            bs = g % vt
            loads = []
            h0 = ht * t.th * sh.s - p
            lo, hi = max(h0, 0), min(h0 + rows_in, sh.h)
            for ii in range(t.tic):
                ic = c * t.tic + ii
                loads.append(MemInsn(
                    Opcode.LOAD, MemType.INP, inp_base[bs] + ii * rows_in * wp,
                    (ic * sh.h + lo) * sh.h, hi - lo, sh.h, sh.h,
                    y_pad_0=lo - h0, y_pad_1=h0 + rows_in - hi, x_pad_0=p, x_pad_1=p,
                ))  # fmt: skip
            if not t.resident:
                loads.append(MemInsn(
                    Opcode.LOAD, MemType.WGT, wgt_base[bs], (ot * t.toc * icb + c * t.tic) * kk,
                    t.toc, t.tic * kk, icb * kk,
                ))  # fmt: skip
            for j, insn in enumerate(loads):
                first, last = j == 0, j == len(loads) - 1
                reloc = "X" if insn.memory_type == MemType.INP else "W"
                b.emit(_flags(insn, pop_next=first and g >= vt, push_next=last), reloc=reloc)
            if c == 0:
                u = reset_uops(a)
                b.emit(GemmInsn(reset_reg=True, uop_bgn=u, uop_end=u + t.toc, **rows,
                                pop_next=n >= vt))  # fmt: skip
            u = gemm_uops(bs, a, ot, c)
            n_uops = t.toc * t.tic * kk
            frees = g + vt < steps  # a later chunk reuses this INP/WGT slot
            b.emit(GemmInsn(uop_bgn=u, uop_end=u + n_uops, **rows, src_factor_out=sh.s * wp,
                            src_factor_in=sh.s, pop_prev=True, push_prev=frees))  # fmt: skip
        whole = dict(iter_out=t.toc * t.th, iter_in=oh, dst_factor_out=oh, dst_factor_in=1)
        for op, imm in ((AluOp.SHR, SHIFT), (AluOp.MAX, 0), (AluOp.MIN, 127)):
            b.emit(AluInsn(uop_bgn=alu_uop[a], uop_end=alu_uop[a] + 1, **whole, alu_opcode=op,
                           use_imm=True, imm=imm, push_next=op == AluOp.MIN))  # fmt: skip
        for oi in range(t.toc):
            dram = ((ot * t.toc + oi) * oh + ht * t.th) * oh
            push = oi == t.toc - 1 and (n + vt < len(tiles) or n == len(tiles) - 1)
            b.emit(MemInsn(Opcode.STORE, MemType.OUT, acc_base[a] + oi * tile_acc, dram, t.th,
                           oh, oh, pop_prev=oi == 0, push_prev=push), reloc="Y")  # fmt: skip
    b.emit(FinishInsn(pop_next=True))
    return b.build()


def _flags(insn: MemInsn, **flags: bool) -> MemInsn:
    from dataclasses import replace

    return replace(insn, **flags)


# ---- the benchmark ---------------------------------------------------------------------------


def run_layer(kernel: ConvKernel, check: bool, trace: Path | None) -> dict:
    cfg = kernel.cfg
    device = open_device("cyclesim", cfg, trace=trace)
    try:
        prog = LoadedProgram.load(device, kernel.image)
        start = time.perf_counter()
        outputs, result = prog.run({"X": pack_input(cfg, kernel.x)})
        wall = time.perf_counter() - start
    finally:
        device.close()
    timing = result.timing
    assert timing is not None
    ok = None
    if check:
        ok = bool(np.array_equal(unpack_output(cfg, outputs["Y"]), kernel.reference()))
    # The timing model alone (no data), for the simulator-speed column.
    t0 = time.perf_counter()
    simulate_timing(kernel.image.instructions(), cfg, timing.params)
    timing_wall = time.perf_counter() - t0
    u = timing.utilization()
    return {
        "cycles": timing.cycles,
        "insns": kernel.image.insn_count,
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
        "insns_per_s": kernel.image.insn_count / wall,
        "timing_cycles_per_s": timing.cycles / timing_wall,
        "timing_insns_per_s": kernel.image.insn_count / timing_wall,
        "_timing": timing,
    }


def run_compiled(kernel: ConvKernel, check: bool) -> dict:
    """The compiler's program for the same layer, data and requantization, on cyclesim."""
    sh = kernel.shape
    comp = compile_conv2d(
        kernel.cfg,
        (1, sh.ic, sh.h, sh.h),
        kernel.w,
        stride=sh.s,
        padding=sh.pad,
        shift=SHIFT,
        relu=True,
        vthreads=kernel.vthreads,
    )
    y, result = comp.run(kernel.x[None], backend="cyclesim")
    assert result.timing is not None
    s = comp.schedule
    return {
        "tiling": [s.tile_h, s.tile_oc, s.tile_ic, s.resident_weights],
        "insns": comp.image.insn_count,
        "cycles": result.cycles,
        "utilization": result.timing.utilization()["gemm_macs"],
        "bit_exact": bool(np.array_equal(y[0], kernel.reference())) if check else None,
    }


def _tiling(t: list) -> str:
    return f"{t[0]}/{t[1]}/{t[2]}{' W' if t[3] else ''}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--vthreads", default="1,2")
    ap.add_argument("--roofline", metavar="PNG", help="also plot the roofline to this file")
    ap.add_argument("--trace-dir", metavar="DIR", help="write a Chrome trace per run")
    ap.add_argument("--no-check", action="store_true", help="skip the numpy comparison")
    ap.add_argument("--no-compiler", action="store_true", help="skip the compiler's programs")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = ap.parse_args(argv)
    cfg = HWConfig.load(args.config)
    params = TimingParams.for_config(cfg)
    vts = [int(v) for v in args.vthreads.split(",")]
    rows, points = [], []
    if not args.json:
        print(
            f"ResNet-18 conv layers on HWConfig {cfg.name!r} ({cfg.bitstream_name}), "
            f"{cfg.clock_mhz:g} MHz, peak {cfg.peak_gops:.1f} GOPS; hand-assembled direct "
            "conv programs" + ("" if args.no_compiler else " | the compiler's programs")
        )
        print(f"timing: {params}")
        head = (f"{'layer':<6}{'vt':>3}{'tiling th/toc/tic':>18}{'insns':>7}{'cycles':>12}"
                f"{'util':>7}{'GOPS':>7}{'ops/B':>7}{'exact':>6}{'Mcyc/s':>8}{'kinsn/s':>8}"
                f"{'t-only Mcyc/s':>14}")  # fmt: skip
        if not args.no_compiler:
            head += (f" |{'compiler tiling':>16}{'insns':>7}{'cycles':>12}{'util':>7}"
                     f"{'exact':>6}{'vs hand':>8}")  # fmt: skip
        print(head)
    for name in args.layers.split(","):
        sh = ConvShape(*LAYERS[name])
        for vt in vts:
            kernel = build_conv(cfg, sh, vt)
            trace = Path(args.trace_dir) / f"{name}_vt{vt}.json" if args.trace_dir else None
            r = run_layer(kernel, not args.no_check, trace)
            points.append(roofline_point(name, r.pop("_timing"), f"{vt} virtual thread(s)"))
            t = kernel.tiling
            row = {"layer": name, "vthreads": vt, "tiling": [t.th, t.toc, t.tic, t.resident], **r}
            c = None if args.no_compiler else run_compiled(kernel, not args.no_check)
            if c is not None:
                row["compiler"] = c
            rows.append(row)
            if args.json:
                print(json.dumps(row))
                continue
            exact = {None: "-", True: "yes", False: "NO"}
            tiling = _tiling(row["tiling"])
            line = (
                f"{name:<6}{vt:>3}{tiling:>18}{r['insns']:>7}{r['cycles']:>12,}"
                f"{r['utilization']:>7.1%}{r['gops']:>7.1f}{r['intensity']:>7.1f}"
                f"{exact[r['bit_exact']]:>6}{r['cycles_per_s'] / 1e6:>8.1f}"
                f"{r['insns_per_s'] / 1e3:>8.1f}{r['timing_cycles_per_s'] / 1e6:>14.1f}"
            )
            if c is not None:
                line += (f" |{_tiling(c['tiling']):>16}{c['insns']:>7}{c['cycles']:>12,}"
                         f"{c['utilization']:>7.1%}{exact[c['bit_exact']]:>6}"
                         f"{c['cycles'] / r['cycles']:>8.2f}")  # fmt: skip
            print(line)
    if not args.json:
        for vt in vts:
            mine = [r for r in rows if r["vthreads"] == vt]
            total = sum(r["cycles"] for r in mine)
            line = (f"vt={vt}: total {total:,} cycles ({total / cfg.clock_mhz / 1e3:.2f} ms), "
                    f"peak utilization {max(r['utilization'] for r in mine):.1%}, mean "
                    f"{sum(r['utilization'] for r in mine) / len(mine):.1%}")  # fmt: skip
            if not args.no_compiler:
                comp = sum(r["compiler"]["cycles"] for r in mine)
                line += f"; compiler {comp:,} cycles ({comp / total:.2f}x hand)"
            print(line)
        print("tiling: output rows / output-channel blocks per tile / input-channel blocks per "
              "chunk; W = all weights loaded once. util = GEMM MAC utilization.")  # fmt: skip
    if args.roofline:
        plot_roofline(points, cfg, params, args.roofline)
        if not args.json:
            print(f"roofline written to {args.roofline}")
    bad = [r for r in rows if False in (r["bit_exact"], r.get("compiler", {}).get("bit_exact"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
