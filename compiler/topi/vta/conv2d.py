"""Quantized conv2d (and dense) for the accelerator: the tile program of a scheduled workload.

Each tile computes ``tile_n`` batch blocks x ``tile_oc`` output-channel blocks x ``tile_h``
output rows x all columns into an ACC buffer laid out [n][oc][row][col]:
1. a GEMM reset zeroes the tile's accumulators;
2. per input-channel chunk, DMA loads bring the zero-padded input rows into INP ([n][ic][row]
   [col] over the padded width) and, unless resident, the chunk's weights into WGT; one GEMM
   whose micro-ops walk (oc, ic, kh, kw) and whose loops walk (n, row, col) accumulates;
3. ALU instructions add the bias (from an ACC buffer loaded once), shift right, clip (ReLU is a
   clip at 0) — all fused on the accelerator;
4. STOREs write the int8 OUT view to the output tensor.
"""

from __future__ import annotations

import numpy as np

from ....hw.config import HWConfig
from ...codegen.vta_tile import (
    Alloc,
    Alu,
    AluOp,
    Gemm,
    Load,
    Loop,
    Stmt,
    Store,
    Tile,
    TileProgram,
    Uop,
)
from .schedule import MAX_XFER, Conv2dSchedule, Conv2dWorkload

INPUT, OUTPUT, WEIGHTS, BIAS = "X", "Y", "W", "bias"


def conv2d_tile_program(
    cfg: HWConfig,
    wl: Conv2dWorkload,
    sched: Conv2dSchedule,
    w_packed: np.ndarray,
    bias_packed: np.ndarray | None,
    shift: int,
    relu: bool,
    name: str = "conv2d",
) -> TileProgram:
    """The tile program of a scheduled conv2d with packed constants (see the module docstring).

    Raises:
        ScheduleError: a knob that does not divide its dimension (``Conv2dSchedule.check``).
    """
    sched.check(cfg, wl)
    nb, icb, ocb = wl.blocked(cfg)
    g = _Geometry(cfg, wl, sched)
    allocs = [
        Alloc("inp", "inp", g.inp_size),
        Alloc("wgt", "wgt", ocb * icb * g.kk if sched.resident_weights else g.wgt_tile,
              shared=sched.resident_weights),
        Alloc("acc", "acc", g.acc_size),
    ]  # fmt: skip
    prologue: list[Stmt] = []
    if sched.resident_weights:
        prologue.append(Load(WEIGHTS, "wgt", 0, 0, ocb, icb * g.kk, icb * g.kk))
    if bias_packed is not None:
        allocs.append(Alloc(BIAS, "acc", ocb, shared=True))
        prologue.append(Load(BIAS, BIAS, 0, 0, 1, ocb, ocb))
    tiles = [
        _tile(g, nt, ot, ht, bias_packed is not None, shift, relu)
        for nt in range(nb // sched.tile_n)
        for ot in range(ocb // sched.tile_oc)
        for ht in range(wl.oh // sched.tile_h)
    ]
    consts = [(WEIGHTS, np.ascontiguousarray(w_packed, np.int8).tobytes())]
    if bias_packed is not None:
        consts.append((BIAS, np.ascontiguousarray(bias_packed, np.int32).tobytes()))
    return TileProgram(
        name,
        tuple(allocs),
        tuple(prologue),
        tuple(tiles),
        inputs=((INPUT, (nb, icb, wl.h, wl.w, cfg.batch, cfg.block_in), "int8"),),
        outputs=((OUTPUT, (nb, ocb, wl.oh, wl.ow, cfg.batch, cfg.block_out), "int8"),),
        constants=tuple(consts),
        vthreads=sched.vthreads,
    )


class _Geometry:
    """Tile sizes and strides shared by the statements of every tile."""

    def __init__(self, cfg: HWConfig, wl: Conv2dWorkload, s: Conv2dSchedule) -> None:
        self.cfg, self.wl, self.s = cfg, wl, s
        self.nb, self.icb, self.ocb = wl.blocked(cfg)
        self.kk = wl.kh * wl.kw
        self.rows_in = wl.rows_in(s.tile_h)
        self.inp_chan = self.rows_in * wl.wp  # INP elements per (n, ic) of a tile
        self.inp_size = s.tile_n * s.tile_ic * self.inp_chan
        self.wgt_tile = s.tile_oc * s.tile_ic * self.kk
        self.acc_chan = s.tile_h * wl.ow  # ACC elements per (n, oc) of a tile
        self.acc_size = s.tile_n * s.tile_oc * self.acc_chan


def _tile(g: _Geometry, nt: int, ot: int, ht: int, bias: bool, shift: int, relu: bool) -> Tile:
    """Phases: the reset, one per reduction chunk, the epilogue (ALU and stores)."""
    s, wl = g.s, g.wl
    whole = (
        Loop(s.tile_n, s.tile_oc * g.acc_chan, 0),
        Loop(s.tile_oc, g.acc_chan, 0),
        Loop(s.tile_h, wl.ow, 0),
        Loop(wl.ow, 1, 0),
    )
    phases: list[tuple[Stmt, ...]] = [(Gemm("acc", "inp", "wgt", (Uop(),), whole, reset=True),)]
    for c in range(g.icb // s.tile_ic):
        out: list[Stmt] = list(_input_loads(g, nt, ht, c))
        if not s.resident_weights:
            icb_kk = g.icb * g.kk
            dram = (ot * s.tile_oc * g.icb + c * s.tile_ic) * g.kk
            out.append(Load(WEIGHTS, "wgt", 0, dram, s.tile_oc, s.tile_ic * g.kk, icb_kk))
        out.append(_gemm(g, ot, c))
        phases.append(tuple(out))
    out = []
    if bias:
        per_oc = (whole[0], Loop(s.tile_oc, g.acc_chan, 1), *whole[2:])
        out.append(Alu(AluOp.ADD, "acc", (Uop(0, ot * s.tile_oc, 0),), per_oc, src=BIAS))
    if shift:
        out.append(Alu(AluOp.SHR, "acc", (Uop(),), whole, imm=shift))
    out.append(Alu(AluOp.MAX, "acc", (Uop(),), whole, imm=0 if relu else -128))
    out.append(Alu(AluOp.MIN, "acc", (Uop(),), whole, imm=127))
    out += _stores(g, nt, ot, ht)
    phases.append(tuple(out))
    return tuple(phases)


def _input_loads(g: _Geometry, nt: int, ht: int, c: int) -> list[Load]:
    s, wl = g.s, g.wl
    h0 = ht * s.tile_h * wl.stride_h - wl.pad_h
    lo, hi = max(h0, 0), min(h0 + g.rows_in, wl.h)
    n0, ic0 = nt * s.tile_n, c * s.tile_ic
    plane = wl.h * wl.w
    if h0 == 0 and g.rows_in == wl.h and wl.pad_w == 0 and g.icb * plane <= MAX_XFER:
        # Whole unpadded images: one strided copy for every (n, ic) of the chunk.
        dram = (n0 * g.icb + ic0) * plane
        return [Load(INPUT, "inp", 0, dram, s.tile_n, s.tile_ic * plane, g.icb * plane)]
    loads = []
    for ni in range(s.tile_n):
        for ii in range(s.tile_ic):
            dram = (((n0 + ni) * g.icb + ic0 + ii) * wl.h + lo) * wl.w
            loads.append(Load(
                INPUT, "inp", (ni * s.tile_ic + ii) * g.inp_chan, dram, hi - lo, wl.w, wl.w,
                y_pad_0=lo - h0, y_pad_1=h0 + g.rows_in - hi, x_pad_0=wl.pad_w, x_pad_1=wl.pad_w,
            ))  # fmt: skip
    return loads


def _gemm(g: _Geometry, ot: int, c: int) -> Gemm:
    s, wl = g.s, g.wl
    uops = []
    for oi in range(s.tile_oc):
        for ii in range(s.tile_ic):
            for i in range(wl.kh):
                for j in range(wl.kw):
                    if s.resident_weights:
                        block = (ot * s.tile_oc + oi) * g.icb + c * s.tile_ic + ii
                    else:
                        block = oi * s.tile_ic + ii
                    src = ii * g.inp_chan + i * wl.wp + j
                    uops.append(Uop(oi * g.acc_chan, src, block * g.kk + i * wl.kw + j))
    loops = (
        Loop(s.tile_n, s.tile_oc * g.acc_chan, s.tile_ic * g.inp_chan),
        Loop(s.tile_h, wl.ow, wl.stride_h * wl.wp),
        Loop(wl.ow, 1, wl.stride_w),
    )
    return Gemm("acc", "inp", "wgt", tuple(uops), loops)


def _stores(g: _Geometry, nt: int, ot: int, ht: int) -> list[Store]:
    s, wl = g.s, g.wl
    plane = wl.oh * wl.ow
    n0, oc0 = nt * s.tile_n, ot * s.tile_oc
    if s.tile_h == wl.oh and g.ocb * plane <= MAX_XFER:
        dram = (n0 * g.ocb + oc0) * plane
        return [Store(OUTPUT, "acc", 0, dram, s.tile_n, s.tile_oc * plane, g.ocb * plane)]
    stores = []
    for ni in range(s.tile_n):
        dram = (((n0 + ni) * g.ocb + oc0) * wl.oh + ht * s.tile_h) * wl.ow
        sram = ni * s.tile_oc * g.acc_chan
        stores.append(Store(OUTPUT, "acc", sram, dram, s.tile_oc, g.acc_chan, plane))
    return stores
