"""Quantized conv2d (and dense) for the accelerator: the tile program of a scheduled workload.

Each tile computes up to ``tile_n`` batch blocks x ``tile_oc`` output-channel blocks x
``tile_h`` output rows x all columns into an ACC buffer laid out [n][oc][row][col] (the last
tile along a dimension may be smaller: a ragged edge tile, with its own extents and strides):
1. a GEMM reset zeroes the tile's accumulators;
2. per input-channel chunk, DMA loads bring the zero-padded input rows into INP ([n][ic][row]
   [col] over the padded width) and, unless resident, the chunk's weights into WGT; one GEMM
   whose micro-ops walk (oc, ic, kh, kw) and whose loops walk (n, row, col) accumulates;
3. ALU instructions add the bias (from an ACC buffer loaded once), then run the
   requantization's steps (``RequantParams.steps``: MUL, SHR, rounding ADD, MAX, MIN) in order;
   with a fused residual add, the int8 residual is loaded into a second ACC buffer
   (``ACC_8BIT``), both operands are scaled (``AddParams.lhs``/``rhs``), added, and the sum is
   requantized (``AddParams.requant``); with a fused max pooling (window = stride), a GEMM
   reset, an ALU ADD and an ALU MAX (a micro-op per window element) reduce the tile into a
   pooled ACC buffer — all on the accelerator;
4. STOREs write the int8 OUT view (of the pooled buffer when pooling) to the output tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

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
from ...quantize.requant import AluStep, RequantParams
from ...quantize.residual import AddParams
from .reference import shift_requant
from .schedule import MAX_XFER, Conv2dSchedule, Conv2dWorkload, input_rows

INPUT, OUTPUT, WEIGHTS, BIAS, RESIDUAL = "X", "Y", "W", "bias", "R"


def conv2d_tile_program(
    cfg: HWConfig,
    wl: Conv2dWorkload,
    sched: Conv2dSchedule,
    w_packed: np.ndarray,
    bias_packed: np.ndarray | None,
    shift: int = 0,
    relu: bool = False,
    name: str = "conv2d",
    *,
    requant: RequantParams | None = None,
    residual: AddParams | None = None,
) -> TileProgram:
    """The tile program of a scheduled conv2d with packed constants (see the module docstring).

    ``requant`` (default: ``shift_requant(shift, relu)``) gives the ALU steps after the bias;
    ``residual`` fuses a residual add whose int8 operand is the input tensor ``R`` (the output's
    packed layout).

    Raises:
        ScheduleError: a knob out of range (``Conv2dSchedule.check``).
    """
    sched.check(cfg, wl)
    nb, icb, ocb = wl.blocked(cfg)
    g = _Geometry(cfg, wl, sched)
    epilogue = _Epilogue(requant or shift_requant(shift, relu, cfg), residual,
                         bias_packed is not None)  # fmt: skip
    allocs = [
        Alloc("inp", "inp", g.inp_size),
        Alloc("wgt", "wgt", ocb * icb * g.kk if sched.resident_weights else g.wgt_tile,
              shared=sched.resident_weights),
        Alloc("acc", "acc", g.acc_size),
    ]  # fmt: skip
    if residual is not None:
        allocs.append(Alloc("res", "acc", g.acc_size))
    if wl.pooled:
        pool_size = sched.tile_n * sched.tile_oc * (sched.tile_h // wl.pool_h) * wl.pw
        allocs.append(Alloc("pool", "acc", pool_size))
    prologue: list[Stmt] = []
    if sched.resident_weights:
        prologue.append(Load(WEIGHTS, "wgt", 0, 0, ocb, icb * g.kk, icb * g.kk))
    if bias_packed is not None:
        allocs.append(Alloc(BIAS, "acc", ocb, shared=True))
        prologue.append(Load(BIAS, BIAS, 0, 0, 1, ocb, ocb))
    tiles = [
        _tile(g, _Extent.of(cfg, wl, sched, n0, oc0, h0), epilogue)
        for n0 in range(0, nb, sched.tile_n)
        for oc0 in range(0, ocb, sched.tile_oc)
        for h0 in range(0, wl.oh, sched.tile_h)
    ]
    consts = [(WEIGHTS, np.ascontiguousarray(w_packed, np.int8).tobytes())]
    if bias_packed is not None:
        consts.append((BIAS, np.ascontiguousarray(bias_packed, np.int32).tobytes()))
    out_shape = (nb, ocb, wl.ph, wl.pw, cfg.batch, cfg.block_out)
    inputs = [(INPUT, (nb, icb, wl.h, wl.w, cfg.batch, cfg.block_in), "int8")]
    if residual is not None:
        inputs.append((RESIDUAL, (nb, ocb, wl.oh, wl.ow, cfg.batch, cfg.block_out), "int8"))
    return TileProgram(
        name,
        tuple(allocs),
        tuple(prologue),
        tuple(tiles),
        inputs=tuple(inputs),
        outputs=((OUTPUT, out_shape, "int8"),),
        constants=tuple(consts),
        vthreads=sched.vthreads,
    )


class _Geometry:
    """Full-tile sizes (the buffers) shared by the statements of every tile."""

    def __init__(self, cfg: HWConfig, wl: Conv2dWorkload, s: Conv2dSchedule) -> None:
        self.cfg, self.wl, self.s = cfg, wl, s
        self.nb, self.icb, self.ocb = wl.blocked(cfg)
        self.kk = wl.kh * wl.kw
        self.inp_size = s.tile_n * s.tile_ic * wl.rows_in(s.tile_h) * wl.wp
        self.wgt_tile = s.tile_oc * s.tile_ic * self.kk
        self.acc_size = s.tile_n * s.tile_oc * s.tile_h * wl.ow


@dataclass(frozen=True)
class _Extent:
    """One tile's origin and extents (smaller than the knobs at a ragged edge)."""

    n0: int
    tn: int
    oc0: int
    toc: int
    h0: int
    th: int
    acc_chan: int  # ACC elements per (n, oc) of this tile: th * ow

    @classmethod
    def of(
        cls, cfg: HWConfig, wl: Conv2dWorkload, s: Conv2dSchedule, n0: int, oc0: int, h0: int
    ) -> _Extent:
        nb, _, ocb = wl.blocked(cfg)
        th = min(s.tile_h, wl.oh - h0)
        return cls(n0, min(s.tile_n, nb - n0), oc0, min(s.tile_oc, ocb - oc0), h0, th, th * wl.ow)

    def loops(self, wl: Conv2dWorkload, src_oc: int = 0, same_src: bool = False) -> tuple:
        """(n, oc, row, col) loops over the tile's ACC entries; src steps by ``src_oc`` per oc,
        or like dst with ``same_src`` (an ACC operand laid out as the tile)."""
        n_dst, oc_dst = self.toc * self.acc_chan, self.acc_chan
        return (
            Loop(self.tn, n_dst, n_dst if same_src else 0),
            Loop(self.toc, oc_dst, oc_dst if same_src else src_oc),
            Loop(self.th * wl.ow, 1, 1 if same_src else 0),
        )


@dataclass(frozen=True)
class _Epilogue:
    """The ALU work after the reduction: bias, requantization, an optional residual add."""

    requant: RequantParams
    residual: AddParams | None
    bias: bool


def _tile(g: _Geometry, t: _Extent, ep: _Epilogue) -> Tile:
    """Phases: the reset, one per reduction chunk, the epilogue (ALU and stores)."""
    s, wl = g.s, g.wl
    whole = t.loops(wl)
    phases: list[tuple[Stmt, ...]] = [(Gemm("acc", "inp", "wgt", (Uop(),), whole, reset=True),)]
    for c0 in range(0, g.icb, s.tile_ic):
        tic = min(s.tile_ic, g.icb - c0)
        out: list[Stmt] = list(_input_loads(g, t, c0, tic))
        if not s.resident_weights:
            icb_kk = g.icb * g.kk
            dram = (t.oc0 * g.icb + c0) * g.kk
            out.append(Load(WEIGHTS, "wgt", 0, dram, t.toc, tic * g.kk, icb_kk))
        out.append(_gemm(g, t, c0, tic))
        phases.append(tuple(out))
    out = []
    if ep.bias:
        out.append(Alu(AluOp.ADD, "acc", (Uop(0, t.oc0, 0),), t.loops(wl, src_oc=1), src=BIAS))
    out += _steps("acc", ep.requant.steps, whole)
    if ep.residual is not None:
        out += _residual_add(g, t, ep.residual)
    if wl.pooled:
        out += _max_pool(g, t)
    out += _stores(g, t, pooled=wl.pooled)
    phases.append(tuple(out))
    return tuple(phases)


def _max_pool(g: _Geometry, t: _Extent) -> list[Stmt]:
    """``pool = max over each window of acc``: reset, ADD of the first element, MAX of the rest."""
    wl = g.wl
    rows = t.th // wl.pool_h
    if rows == 0:
        return []  # a ragged last tile shorter than a window: its rows are not pooled
    chan = rows * wl.pw
    loops = (
        Loop(t.tn, t.toc * chan, t.toc * t.acc_chan),
        Loop(t.toc, chan, t.acc_chan),
        Loop(rows, wl.pw, wl.pool_h * wl.ow),
        Loop(wl.pw, 1, wl.pool_w),
    )
    reset = Gemm("pool", "inp", "wgt", (Uop(),), (Loop(t.tn * t.toc * chan, 1, 0),), reset=True)
    window = [Uop(0, i * wl.ow + j, 0) for i in range(wl.pool_h) for j in range(wl.pool_w)]
    out: list[Stmt] = [reset, Alu(AluOp.ADD, "pool", (window[0],), loops, src="acc")]
    if len(window) > 1:
        out.append(Alu(AluOp.MAX, "pool", tuple(window[1:]), loops, src="acc"))
    return out


def _steps(buf: str, steps: tuple[AluStep | None, ...], loops: tuple) -> list[Stmt]:
    return [Alu(st.op, buf, (Uop(),), loops, imm=st.imm) for st in steps if st is not None]


def _residual_add(g: _Geometry, t: _Extent, p: AddParams) -> list[Stmt]:
    """``acc = requant(scale_a(acc) + scale_b(res))`` with the residual loaded into ``res``."""
    whole = t.loops(g.wl)
    out: list[Stmt] = [
        Load(RESIDUAL, "res", st.sram_offset, st.dram_offset, st.y_size, st.x_size,
             st.x_stride, acc_8bit=True)
        for st in _stores(g, t)
    ]  # fmt: skip
    out += _steps("acc", (p.lhs,), whole) + _steps("res", (p.rhs,), whole)
    out.append(Alu(AluOp.ADD, "acc", (Uop(),), t.loops(g.wl, same_src=True), src="res"))
    return out + _steps("acc", p.requant.steps, whole)


def _input_loads(g: _Geometry, t: _Extent, c0: int, tic: int) -> list[Load]:
    wl = g.wl
    rows_in = wl.rows_in(t.th)
    top = t.h0 * wl.stride_h - wl.pad_h
    lo, hi = input_rows(wl, t.h0, t.th)
    plane = wl.h * wl.w
    if top == 0 and rows_in == wl.h and wl.pad_w == 0 and g.icb * plane <= MAX_XFER:
        # Whole unpadded images: one strided copy for every (n, ic) of the chunk.
        dram = (t.n0 * g.icb + c0) * plane
        return [Load(INPUT, "inp", 0, dram, t.tn, tic * plane, g.icb * plane)]
    loads = []
    for ni in range(t.tn):
        for ii in range(tic):
            dram = (((t.n0 + ni) * g.icb + c0 + ii) * wl.h + lo) * wl.w
            loads.append(Load(
                INPUT, "inp", (ni * tic + ii) * rows_in * wl.wp, dram, hi - lo, wl.w, wl.w,
                y_pad_0=lo - top, y_pad_1=top + rows_in - hi, x_pad_0=wl.pad_w,
                x_pad_1=wl.pad_w,
            ))  # fmt: skip
    return loads


def _gemm(g: _Geometry, t: _Extent, c0: int, tic: int) -> Gemm:
    s, wl = g.s, g.wl
    inp_chan = wl.rows_in(t.th) * wl.wp  # INP elements per (n, ic) of this tile
    uops = []
    for oi in range(t.toc):
        for ii in range(tic):
            for i in range(wl.kh):
                for j in range(wl.kw):
                    if s.resident_weights:
                        block = (t.oc0 + oi) * g.icb + c0 + ii
                    else:
                        block = oi * tic + ii
                    src = ii * inp_chan + i * wl.wp + j
                    uops.append(Uop(oi * t.acc_chan, src, block * g.kk + i * wl.kw + j))
    loops = (
        Loop(t.tn, t.toc * t.acc_chan, tic * inp_chan),
        Loop(t.th, wl.ow, wl.stride_h * wl.wp),
        Loop(wl.ow, 1, wl.stride_w),
    )
    return Gemm("acc", "inp", "wgt", tuple(uops), loops)


def _stores(g: _Geometry, t: _Extent, pooled: bool = False) -> list[Store]:
    """The tile's output (``acc``, or the pooled buffer ``pool``) to the output tensor."""
    wl = g.wl
    if pooled:
        buf, oh, ow, h0, th = "pool", wl.ph, wl.pw, t.h0 // wl.pool_h, t.th // wl.pool_h
    else:
        buf, oh, ow, h0, th = "acc", wl.oh, wl.ow, t.h0, t.th
    if th == 0:
        return []
    plane, chan = oh * ow, th * ow
    if t.th == wl.oh and g.ocb * plane <= MAX_XFER:
        dram = (t.n0 * g.ocb + t.oc0) * plane
        return [Store(OUTPUT, buf, 0, dram, t.tn, t.toc * plane, g.ocb * plane)]
    stores = []
    for ni in range(t.tn):
        dram = (((t.n0 + ni) * g.ocb + t.oc0) * oh + h0) * ow
        stores.append(Store(OUTPUT, buf, ni * t.toc * chan, dram, t.toc, chan, plane))
    return stores
