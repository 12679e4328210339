"""Quantized conv2d and dense for the accelerator, written in TE and scheduled with VTA's recipe.

``conv2d_te(cfg, workload, schedule, ...)`` declares the blocked computation (data
``NCHW{BATCH}n{BLOCK_IN}c``, weights ``OIHW{BLOCK_OUT}o{BLOCK_IN}i``, int32 accumulation, then
the bias, the requantization's ALU steps (after a tensor-tensor MUL by the per-channel
multipliers when the weights have per-channel scales), a residual add, a max pooling and an
int8 cast) and schedules it:

1. split the output into tiles of ``tile_n`` batch blocks x ``tile_oc`` channel blocks x
   ``tile_h`` rows (``tile_h // pool_h`` pooled rows; all columns); a knob that does not divide
   its dimension leaves a smaller edge tile, guarded by bound inference, whose guards
   ``vta.lower`` turns into smaller instruction extents; with two virtual threads, the
   tiles along the first axis with an even tile count are split between
   ``te.thread_axis("vthread")`` copies;
2. compute the accumulator stages at the tile (scope ``local.acc_buffer``);
3. per chunk of ``tile_ic`` input-channel blocks, copy the zero-padded input rows
   (``cache_read`` into ``local.inp_buffer``, the padding inlined) and the weights (into
   ``local.wgt_buffer``; all at once with ``resident_weights``) with ``pragma dma_copy``;
4. tensorize the GEMM with the config's intrinsic (``vta.intrin.gemm_intrin``), the loops
   around it ordered (rows, columns, out-channel, in-channel, kernel window) so that rows and
   columns become the instruction's two hardware loops;
5. ``pragma alu`` on each element-wise stage (a fused max pooling: a zero stage, lowered to a
   GEMM reset, an ADD of each window's first element and a MAX per other element),
   ``pragma dma_copy`` on the int8 output.

``TeOperator.lower()`` gives its loop IR (``tir.lower`` with ``VTA_PIPELINE``),
``tile_program()`` the tile program (``vta.lower``) that ``vta.codegen.generate_program``
turns into a program image; the slots are ``layout.py``'s (``X``, ``Y``, ``R``; constants
``W``, ``bias``, ``mult``), which ``VtaKernel`` fills and reads.

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> from tensorforge.compiler.vta import Conv2dSchedule, Conv2dWorkload
    >>> cfg = HWConfig.preset("tiny")
    >>> wl = Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, pad_h=1, pad_w=1)
    >>> w = np.ones((2, 2, 3, 3, 4, 4), np.int8)
    >>> op = conv2d_te(cfg, wl, Conv2dSchedule(tile_h=3, tile_oc=1, tile_ic=2, vthreads=2), w)
    >>> print(op.lower())  # doctest: +ELLIPSIS
    func conv2d(X: int8[288], W: int8[576], Y: int8[288]) {
      for i1.outer.outer in range(2) thread("vthread") {
    ...attr pragma_dma_copy = None {
    ...attr vta_gemm = 2 {
    ...
    >>> image = op.build()      # through vta.lower and vta.codegen
    >>> image.insn_count
    34
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...hw.config import HWConfig
from ...hw.isa import AluOp
from ...runtime.program import ProgramImage
from .. import te, tir
from ..quantize.requant import AluStep, RequantParams
from ..quantize.residual import AddParams
from .codegen import generate_program
from .intrin import gemm_intrin
from .layout import BIAS, INPUT, MULTIPLIERS, OUTPUT, RESIDUAL, WEIGHTS, pack_bias
from .lower import VTA_PIPELINE, lower_to_tile_program
from .reference import shift_requant
from .schedule import Conv2dSchedule, Conv2dWorkload
from .tile import TileProgram

INP, WGT, ACC = "local.inp_buffer", "local.wgt_buffer", "local.acc_buffer"


@dataclass
class TeOperator:
    """A scheduled accelerator operator: its TE schedule, parameters and constant values."""

    cfg: HWConfig
    name: str
    schedule: Any
    args: list[te.Tensor]
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    def lower(self) -> tir.PrimFunc:
        """The loop IR (tensorized GEMM, dma_copy and alu pragmas still as attributes)."""
        return tir.lower(self.schedule, self.args, name=self.name, passes=VTA_PIPELINE)

    def tile_program(self) -> TileProgram:
        return lower_to_tile_program(self.lower(), self.cfg, self.constants, self.name)

    def build(self) -> ProgramImage:
        return generate_program(self.tile_program(), self.cfg)


def _step(x: te.Tensor, step: AluStep, name: str, cast: bool = False) -> te.Tensor:
    """One ALU step as a stage (``cast``: read int8 ``x`` widened, as an ACC_8BIT load holds it)."""

    def f(*i: Any) -> Any:
        v = te.cast(x[i], "int32") if cast else x[i]
        if step.op is AluOp.SHR:
            return te.shift_right(v, step.imm) if step.imm >= 0 else te.shift_left(v, -step.imm)
        ops = {
            AluOp.ADD: lambda: v + step.imm,
            AluOp.MUL: lambda: v * step.imm,
            AluOp.MIN: lambda: te.min(v, step.imm),
            AluOp.MAX: lambda: te.max(v, step.imm),
        }
        return ops[step.op]()

    return te.compute(x.shape, f, name=name)


def conv2d_te(
    cfg: HWConfig,
    wl: Conv2dWorkload,
    sched: Conv2dSchedule,
    w_packed: np.ndarray,
    bias_packed: np.ndarray | None = None,
    *,
    requant: RequantParams | None = None,
    residual: AddParams | None = None,
    name: str = "conv2d",
) -> TeOperator:
    """The TE operator of ``requant(conv2d(x, w) + bias)`` (and a residual add, and a max
    pooling when ``wl.pooled``) on ``cfg``; ``w_packed`` is ``layout.pack_grouped``'s (with
    ``wl.groups`` > 1 each output block's reduction reads only its groups' input blocks).

    Raises:
        ScheduleError: a knob out of range (``Conv2dSchedule.check``).
    """
    sched.check(cfg, wl)
    nb, icb, ocb = wl.blocked(cfg)
    q, rb = wl.group_blocks(cfg)
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    ph, pw, sh, sw = wl.pad_h, wl.pad_w, wl.stride_h, wl.stride_w
    X = te.placeholder((nb, icb, wl.h, wl.w, b, bi), "int8", name=INPUT)
    W = te.placeholder((ocb, rb, wl.kh, wl.kw, bo, bi), "int8", name=WEIGHTS)
    pad = te.compute(
        (nb, icb, wl.h + ph + wl.pad_b, wl.w + pw + wl.pad_r, b, bi),
        lambda n, c, y, x, i, k: te.if_then_else(
            te.all_of(y >= ph, y < wl.h + ph, x >= pw, x < wl.w + pw),
            X[n, c, y - ph, x - pw, i, k],
            te.const(0, "int8"),
        ),
        name="pad",
    )
    ic = te.reduce_axis((0, rb), "ic")
    ky = te.reduce_axis((0, wl.kh), "ky")
    kx = te.reduce_axis((0, wl.kw), "kx")
    k = te.reduce_axis((0, bi), "k")

    def in_block(o: Any) -> Any:  # the input block of reduction step ic (layout.group_blocks)
        if wl.groups == 1:
            return ic
        return (o if q == 1 else o // q) * rb + ic

    C = te.compute(
        (nb, ocb, wl.oh, wl.ow, b, bo),
        lambda n, o, y, x, i, j: te.sum(
            te.cast(pad[n, in_block(o), y * sh + ky, x * sw + kx, i, k], "int32")
            * te.cast(W[o, ic, ky, kx, j, k], "int32"),
            axis=[ic, ky, kx, k],
        ),
        name="C",
    )
    args, constants = [X, W], {WEIGHTS: np.asarray(w_packed)}
    stages, last = [], C
    if bias_packed is not None:
        B = te.placeholder((ocb, b, bo), "int32", name=BIAS)
        last = te.compute(C.shape, lambda n, o, y, x, i, j: C[n, o, y, x, i, j] + B[o, i, j],
                          name="biased")  # fmt: skip
        stages.append(last)
        args.append(B)
        constants[BIAS] = np.asarray(bias_packed)
    req = requant or shift_requant(0, False, cfg)
    if bool(req.channel_multipliers) != wl.channel_scales:
        raise ValueError(f"conv2d workload channel_scales={wl.channel_scales} but the requant "
                         f"has {len(req.channel_multipliers)} per-channel multipliers")  # fmt: skip
    if req.channel_multipliers:  # [SHR pre_shift,] one tensor-tensor MUL by the multipliers
        if req.pre_shift:
            last = _step(last, AluStep(AluOp.SHR, req.pre_shift), "pre")
            stages.append(last)
        M = te.placeholder((ocb, b, bo), "int32", name=MULTIPLIERS)
        scaled = last
        last = te.compute(C.shape, lambda n, o, y, x, i, j: scaled[n, o, y, x, i, j] * M[o, i, j],
                          name="scaled")  # fmt: skip
        stages.append(last)
        args.append(M)
        constants[MULTIPLIERS] = pack_bias(cfg, np.asarray(req.channel_multipliers), wl.oc)
    for s, step in enumerate(req.steps):
        last = _step(last, step, f"rq{s}")
        stages.append(last)
    res_reader = None
    if residual is not None:
        R = te.placeholder(C.shape, "int8", name=RESIDUAL)
        args.insert(1, R)
        if residual.lhs is not None:
            last = _step(last, residual.lhs, "lhs")
            stages.append(last)
        lhs = last
        if residual.rhs is not None:
            rhs = _step(R, residual.rhs, "rhs", cast=True)
            last = te.compute(C.shape, lambda *i: lhs[i] + rhs[i], name="sum")
            stages += [rhs, last]
            res_reader = rhs
        else:
            last = te.compute(C.shape, lambda *i: lhs[i] + te.cast(R[i], "int32"), name="sum")
            stages.append(last)
            res_reader = last
        for s, step in enumerate(residual.requant.steps):
            last = _step(last, step, f"arq{s}")
            stages.append(last)
    zeroed = []
    if wl.pooled:
        zero, pooling = _max_pool(last, wl)
        zeroed.append(zero)
        stages += pooling
        last = pooling[-1]
    final = last
    Y = te.compute(final.shape, lambda *i: te.cast(final[i], "int8"), name=OUTPUT)
    args.append(Y)
    s = te.create_schedule(Y.op)
    return _schedule(cfg, wl, sched, s, (X, W, pad, C, Y), (zeroed, stages), res_reader, args,
                     constants, name)  # fmt: skip


def _max_pool(x: te.Tensor, wl: Conv2dWorkload) -> tuple[te.Tensor, list[te.Tensor]]:
    """(zeroed buffer, ALU stages) of a non-overlapping max pooling (window = stride, no padding)
    of ``x``: the zeroed buffer (a GEMM reset), plus each window's first element (ALU ADD),
    then one ALU MAX per other element. Rows and columns past the last whole window are not
    read (the floor of ``max_pool2d_reference``)."""
    n, o, _, _, b, bo = x.shape
    shape = (n, o, wl.ph, wl.pw, b, bo)
    zero = te.compute(shape, lambda *i: te.const(0, "int32"), name="pool")
    stages = [zero]
    for k in range(wl.pool_h * wl.pool_w):
        stages.append(te.compute(shape, _window_step(stages[-1], x, wl, k), name=f"pool{k}"))
    return zero, stages[1:]


def _window_step(prev: te.Tensor, x: te.Tensor, wl: Conv2dWorkload, k: int) -> Any:
    """``prev + x[window element 0]`` (k = 0), else ``max(prev, x[window element k])``."""
    dy, dx = divmod(k, wl.pool_w)

    def f(n: Any, o: Any, y: Any, c: Any, i: Any, j: Any) -> Any:
        v = x[n, o, y * wl.pool_h + dy, c * wl.pool_w + dx, i, j]
        return prev[n, o, y, c, i, j] + v if k == 0 else te.max(prev[n, o, y, c, i, j], v)

    return f


def _schedule(cfg, wl, sched, s, tensors, acc_stages, res_reader, args, constants, name):  # type: ignore[no-untyped-def]
    X, W, pad, C, Y = tensors
    zeroed, stages = acc_stages
    # 1. tiles of the output (with a fused pooling, tile_h // pool_h pooled rows), virtual
    # threads over an axis with several tiles
    rows = sched.tile_h // wl.pool_h
    n, o, y, x, i, j = s[Y].op.axis
    no, ni = s[Y].split(n, factor=sched.tile_n)
    oo, oi = s[Y].split(o, factor=sched.tile_oc)
    yo, yi = s[Y].split(y, factor=rows)
    s[Y].reorder(no, oo, yo, ni, oi, yi, x, i, j)
    tile_axis = yo
    if sched.vthreads > 1:  # over the first axis whose tile count the threads divide
        counts = sched.tile_counts(cfg, wl)
        axes = {"tile_oc": oo, "tile_h": yo, "tile_n": no}
        axis = next((axes[k] for k, c in counts.items() if c % sched.vthreads == 0), oo)
        vt, inner = s[Y].split(axis, nparts=sched.vthreads)
        s[Y].bind(vt, te.thread_axis("vthread"))
        if axis is tile_axis:
            tile_axis = inner
    s[Y].pragma(ni, "dma_copy")
    # 2. the accumulator stages at the tile
    s[pad].compute_inline()
    for t in (C, *zeroed, *stages):
        s[t].set_scope(ACC)
        s[t].compute_at(s[Y], tile_axis)
    for t in stages:
        s[t].pragma(s[t].op.axis[0], "alu")
    # 3. copies per input-channel chunk
    xb = s.cache_read(pad, INP, [C])
    wb = s.cache_read(W, WGT, [C])
    cn, co, cy, cx, ci, cj = s[C].op.axis
    ic, ky, kx, k = s[C].op.reduce_axis
    ico, ici = s[C].split(ic, factor=sched.tile_ic)
    s[C].reorder(ico, cn, cy, cx, co, ici, ky, kx, ci, cj, k)
    s[xb].compute_at(s[C], ico)
    if sched.resident_weights:
        s[wb].compute_root()
    else:
        s[wb].compute_at(s[C], ico)
    for t in (xb, wb):
        s[t].pragma(s[t].op.axis[0], "dma_copy")
    for p in args:  # the per-channel vectors, loaded once
        reader = {BIAS: "biased", MULTIPLIERS: "scaled"}.get(p.name)
        if reader is not None:
            bb = s.cache_read(p, ACC, [st for st in stages if st.name == reader])
            s[bb].compute_root()
            s[bb].pragma(s[bb].op.axis[0], "dma_copy")
    if res_reader is not None:  # the int8 residual, loaded into the accumulators (ACC_8BIT)
        r = next(p for p in args if p.name == RESIDUAL)
        rb = s.cache_read(r, ACC, [res_reader])
        s[rb].compute_at(s[Y], tile_axis)
        s[rb].pragma(s[rb].op.axis[0], "dma_copy")
    # 4. the GEMM
    s[C].tensorize(ci, gemm_intrin(cfg))
    return TeOperator(cfg, name, s, args, constants)
