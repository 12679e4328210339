"""Depthwise conv2d for x86 in the NCHW[x]c blocked layout: channels in vector lanes.

The NCHW input is padded and packed into `data_vec[n, C/cb, H', W', cb]` and the `[C, 1, R, S]`
kernel into `kernel_vec[C/cb, R, S, cb]` (a constant, packed once by `pack_depthwise_kernel`);
the convolution keeps `reg_n` output columns x `cb` channels in vector registers, one vector FMA
per column and tap (a stride only changes which packed vector a tap loads: no gathers), and the
tile is written straight to the NCHW output with the bias and element-wise epilogue fused. Small
images (7x7, 14x14) keep full vectors this way, where vectorizing along a row of 7 cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ... import te
from ...schedule.primitives import ScheduleError, check_positive_knobs
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor
from ...tir.stmt import walk

Epilogue = Callable[..., te.Expr]  # (value, n, c, y, x) -> expression


@dataclass(frozen=True)
class DepthwiseConfig:
    """Knobs: `cb` channels per block (the vector lanes; reduced to a divisor of C), `reg_n`
    output columns per register tile, thread-pool use over (n, channel block, row). `vec`:
    channels per register tile of a blocked kernel, one vector register's worth (the target's
    float32 lanes, `codegen.llvm_jit.vector_registers`); a block wider than that is computed as
    `cb / vec` tiles one after the other, so that a tile's `reg_n` accumulators stay in
    registers (0, or a `vec` that does not divide `cb`: the whole block in one tile)."""

    cb: int = 8
    reg_n: int = 8
    parallel: bool = True
    vec: int = 0

    def check(self) -> None:
        check_positive_knobs(self, ("cb", "reg_n"), "depthwise")
        if self.vec < 0:
            raise ScheduleError(f"depthwise: knob vec must be >= 0, not {self.vec!r}")


@dataclass
class DepthwiseOp:
    args: list[Tensor]
    data_vec: Tensor
    conv: Tensor
    act: Tensor
    out: Tensor
    cb: int
    blocked: bool = False  # data and out in the blocked layout (out is act)


def channel_block(channels: int, wanted: int) -> int:
    """The largest divisor of `channels` not above `wanted`."""
    return max(d for d in range(1, min(channels, wanted) + 1) if channels % d == 0)


def pack_depthwise_kernel(weight: np.ndarray, cb: int) -> np.ndarray:
    """`[C, 1, R, S]` weights -> `[C/cb, R, S, cb]` (numpy)."""
    c, _, r, s = weight.shape
    return np.ascontiguousarray(weight.reshape(c // cb, cb, r, s).transpose(0, 2, 3, 1))


def depthwise_conv2d_nchwc(
    data: Tensor,
    kernel: Tensor,
    out_hw: Sequence[int],
    pads: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    bias: Tensor | None = None,
    epilogue: Epilogue | None = None,
    blocked: bool = False,
) -> DepthwiseOp:
    """The compute of an NCHW depthwise conv2d (output `[N, C, *out_hw]`) through the blocked
    layout. `kernel`: packed `[C/cb, R, S, cb]`; `pads`: (top, left) padding before the image
    (whatever the windows read past its end is zero too). With `blocked`, `data` is already
    `[N, C/cb, H, W, cb]` and the output stays `[N, C/cb, OH, OW, cb]` (no transposes: between
    layers that keep the blocked layout, `graph.passes.alter_layout`); the epilogue then takes
    the blocked index `(n, co, y, x, ci)`. With `blocked` and NCHW `data` (a chain's first
    layer) each task packs its input block from NCHW; channels past the data's (a padded
    chain's, `alter_layout.PAD_BLOCK`) read zeros."""
    blocks, r, s, cb = kernel.shape
    from_nchw = blocked and len(data.shape) == 4
    if blocked and not from_nchw:
        if len(data.shape) != 5 or data.shape[-1] != cb:
            raise ValueError(f"depthwise: blocked data must be [N, C/{cb}, H, W, {cb}] as the "
                             f"packed kernel, not {list(data.shape)}")  # fmt: skip
        n, _, h, w, _ = data.shape
        c = data.shape[1] * cb
    else:
        n, c, h, w = data.shape
    if blocks * cb != c and not (from_nchw and c <= blocks * cb):
        raise ValueError(f"depthwise: packed kernel must cover the {c} channels, not {blocks * cb}")
    (oh, ow), (sh, sw), (dh, dw), (top, left) = out_hw, strides, dilations, pads
    rows, cols = (oh - 1) * sh + (r - 1) * dh + 1, (ow - 1) * sw + (s - 1) * dw + 1

    def fpack(nn: te.Expr, co: te.Expr, y: te.Expr, x: te.Expr, ci: te.Expr) -> te.Expr:
        yy, xx = y - top, x - left
        inside = te.all_of(yy >= 0, yy < h, xx >= 0, xx < w)
        cy, cx = te.min(te.max(yy, 0), h - 1), te.min(te.max(xx, 0), w - 1)
        if blocked and not from_nchw:
            return te.select(inside, data[nn, co, cy, cx, ci], te.const(0, data.dtype))
        cc = co * cb + ci
        if blocks * cb > c:  # padded channels: zeros
            inside = te.all_of(inside, cc < c)
            cc = te.min(cc, c - 1)
        return te.select(inside, data[nn, cc, cy, cx], te.const(0, data.dtype))

    data_vec = te.compute((n, blocks, rows, cols, cb), fpack, name="data_vec")
    ry, rx = te.reduce_axis((0, r), "ry"), te.reduce_axis((0, s), "rx")
    conv = te.compute(
        (n, blocks, oh, ow, cb),
        lambda nn, co, y, x, ci: te.sum(
            data_vec[nn, co, y * sh + ry * dh, x * sw + rx * dw, ci] * kernel[co, ry, rx, ci],
            axis=[ry, rx],
        ),
        name="conv",
    )

    def fact(nn: te.Expr, co: te.Expr, y: te.Expr, x: te.Expr, ci: te.Expr) -> te.Expr:
        value, cc = conv[nn, co, y, x, ci], co * cb + ci
        if bias is not None:
            value = value + bias[cc]
        if epilogue is None:
            return value
        return epilogue(value, nn, co, y, x, ci) if blocked else epilogue(value, nn, cc, y, x)

    # bias and epilogue in the blocked layout: full channel vectors, whatever the image width
    act = te.compute(conv.shape, fact, name="act")
    if blocked:
        args = [data, kernel] + ([bias] if bias is not None else []) + [act]
        return DepthwiseOp(args, data_vec, conv, act, act, cb, True)
    out = te.compute((n, c, oh, ow), lambda nn, cc, y, x: act[nn, cc // cb, y, x, cc % cb],
                     name="out")  # fmt: skip
    args = [data, kernel] + ([bias] if bias is not None else []) + [out]
    return DepthwiseOp(args, data_vec, conv, act, out, cb)


def schedule_depthwise_nchwc(op: DepthwiseOp, config: DepthwiseConfig) -> Schedule:
    """One task per (n, channel block): its padded input block packed first (a few KiB
    that stay in cache), then `reg_n x cb` register tiles, the taps unrolled
    around them, written to the NCHW output with the epilogue."""
    config.check()
    if op.blocked:
        return _schedule_blocked(op, config)
    s = te.create_schedule(op.out.op)
    conv, out = op.conv, op.out
    s[conv].set_scope("local")
    on, oc, oy, ox = out.op.axis
    ko, ki = s[out].split(oc, factor=op.cb)
    xo, xi = s[out].split(ox, factor=config.reg_n)
    s[out].reorder(on, ko, oy, xo, ki, xi)
    block = s[out].fuse(on, ko)
    if config.parallel:
        s[out].parallel(block)
    s[out].vectorize(xi)
    s[op.data_vec].compute_at(s[out], block)
    # channels unrolled, not vector lanes: LLVM then vectorizes the transpose with shuffles of
    # row loads (1.2-1.5x faster kernels) where explicit lanes would each load a scalar
    s[op.data_vec].unroll(op.data_vec.op.axis[-1])
    s[conv].compute_at(s[out], xo)
    s[op.act].set_scope("local")
    s[op.act].compute_at(s[out], xo)
    s[op.act].vectorize(op.act.op.axis[-1])
    _schedule_tile(s, conv)
    return s


def _schedule_tile(s: Schedule, conv: Tensor, vec: int | None = None) -> None:
    """The `reg_n x cb` register tile: taps outermost, its columns unrolled, channels in vector
    lanes; with `vec` (dividing cb), `cb / vec` tiles of `reg_n x vec` one after the other."""
    _, _, _, lx, lci = conv.op.axis
    ry, rx = conv.op.reduce_axis
    if vec is not None and int(conv.shape[-1]) > vec:
        lco, lci = s[conv].split(lci, factor=vec)
        s[conv].reorder(lco, ry, rx, lx, lci)
        s[conv].unroll(lco)
    else:
        s[conv].reorder(ry, rx, lx, lci)
    s[conv].unroll(rx)
    s[conv].unroll(lx)
    s[conv].vectorize(lci)


#: math intrinsics whose vector code is long (tens of instructions and a dozen constants)
TRANSCENDENTAL = frozenset({"exp", "exp2", "sigmoid", "tanh", "erf", "log", "log2", "log1p"})


def has_transcendental(t: Tensor) -> bool:
    """Whether `t`'s compute calls one of `TRANSCENDENTAL` (a SiLU, sigmoid, GELU or tanh
    epilogue). A blocked kernel then applies it after all of a block's tiles, over the whole
    block, its column loop rolled (a SiLU'd 3x3 depthwise over 32x112x112: 2.0 ms with per-tile
    unrolled stores, 1.3 this way; a ReLU'd one keeps the per-tile stores, 0.47 against 0.50)."""
    return any(isinstance(e, te.Call) and e.name in TRANSCENDENTAL for e in walk(t.op.body))


#: the fewest parallel tasks a blocked depthwise kernel is cut into (row chunks when the
#: channel blocks alone are fewer)
MIN_TASKS = 8


#: the most bytes of padded input one task of a blocked depthwise kernel copies: its rows are
#: cut into more chunks beyond, so that the copy is still in the core's L2 cache when the
#: register tiles read it
COPY_BUDGET = 256 * 1024


def _row_chunks(op: DepthwiseOp, fewest: int) -> int:
    """The chunks a channel block's output rows are cut into: `fewest`, or more where a chunk's
    padded input would exceed `COPY_BUDGET` (then a divisor of the rows: uneven chunks leave a
    guard in the copy loops). 96 channels at 112x112, stride 2, 32-channel blocks: 3 chunks
    of 550 KiB copies ran 1.3x slower than 7 of 250 KiB on an AMD Zen 5 (1 MiB of L2)."""
    oh = int(op.out.shape[2])
    _, _, rows, cols, cb = (int(d) for d in op.data_vec.shape)
    row_bytes = cols * cb * np.dtype(op.data_vec.dtype).itemsize
    fewest = min(oh, fewest)
    if -(-rows // fewest) * row_bytes <= COPY_BUDGET:
        return fewest
    fits = [c for c in range(fewest, oh + 1) if -(-rows // c) * row_bytes <= COPY_BUDGET]
    return next((c for c in fits if oh % c == 0), fewest)


def _schedule_blocked(op: DepthwiseOp, config: DepthwiseConfig) -> Schedule:
    """As `schedule_depthwise_nchwc`, the tile stored as it is: columns unrolled, channels in
    vector lanes, one vector of channels (`config.vec`) per register tile; the padded input
    block copied a vector at a time. A transcendental epilogue (`has_transcendental`) is applied
    after the block's tiles, over the whole block, its column loop rolled."""
    s = te.create_schedule(op.out.op)
    conv, out = op.conv, op.out
    s[conv].set_scope("local")
    on, oc, oy, ox, ci = out.op.axis
    xo, xi = s[out].split(ox, factor=config.reg_n)
    vec = config.vec if 0 < config.vec < op.cb and op.cb % config.vec == 0 else op.cb
    # whole-vector blocks leave few (n, channel block) tasks (32 channels: one), so the rows are
    # cut into chunks too; each chunk copies the padded rows its windows read
    blocks = int(out.shape[0]) * int(out.shape[1])
    chunks = _row_chunks(op, -(-MIN_TASKS // blocks))
    yo, yi = s[out].split(oy, nparts=chunks)
    costly = has_transcendental(out)
    # a 32-channel block on 8-lane AVX2 made a 7-column tile 28 accumulators, more than the 16
    # vector registers: LLVM spilled them and the kernel ran at half speed. So one vector of
    # channels per tile: stored tile by tile, or (a costly epilogue) all tiles of the block
    # first, then the epilogue over the block's vectors, rolled: unrolled, 8 columns of exp
    # code outgrew the registers; one vector per iteration left its latency exposed
    cio, ci = s[out].split(ci, factor=op.cb if costly else vec)
    s[out].reorder(on, oc, yo, yi, xo, cio, xi, ci)
    block = s[out].fuse(on, oc, yo)
    if config.parallel:
        s[out].parallel(block)
    if not costly:
        s[out].unroll(xi)
    s[out].vectorize(ci)
    s[op.data_vec].compute_at(s[out], block)
    if len(op.args[0].shape) == 4:  # packed from NCHW: channels unrolled, as the NCHW kernel's
        s[op.data_vec].unroll(op.data_vec.op.axis[-1])
    else:
        s[op.data_vec].vectorize(op.data_vec.op.axis[-1])
    s[conv].compute_at(s[out], cio)
    _schedule_tile(s, conv, vec if costly else None)
    return s


def default_depthwise_config(channels: int, out_w: int) -> DepthwiseConfig:
    """8-channel blocks (measured faster than 16: half the registers per tile, a cheaper
    transpose into NCHW); a row tile dividing the output width where one does."""
    reg_n = next((d for d in (8, 7, 6, 5, 4) if out_w % d == 0), 8)
    return DepthwiseConfig(cb=channel_block(channels, 8), reg_n=min(reg_n, out_w))
