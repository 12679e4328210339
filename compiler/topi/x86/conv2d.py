"""conv2d for x86 in the NCHW[x]c blocked layout: pack, register-tiled compute, unpack + epilogue.

The NCHW input is padded and packed into `data_vec[n, C/ic_bn, H+2p, W+2p, ic_bn]`, the OIHW
kernel into `kernel_vec[K/oc_bn, C/ic_bn, R, S, ic_bn, oc_bn]`; the convolution computes
`conv[n, K/oc_bn, OH, OW, oc_bn]` with a register tile of `reg_n` output columns times
`oc_tile` output channels held in vector registers (one broadcast of an input value per column,
one vector FMA per weight vector of the tile; the tile spans several output-channel blocks or
part of one, sized to the CPU's vector registers), then the result is unpacked to NCHW with the
element-wise epilogue (bias, activation) fused in.

A 3-D convolution (NCDHW input, OIDHW kernel) is the same with a depth axis before the rows:
`data_vec[n, C/ic_bn, D', H', W', ic_bn]`, `conv[n, K/oc_bn, OD, OH, OW, oc_bn]`, its depth taps
one more reduction loop around the row taps (TVM's conv3d_NCDHWc).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ... import te
from ...autotune.space import ConfigSpace, Knob, divisors
from ...schedule.primitives import ScheduleError, check_positive_knobs
from ...schedule.schedule import Schedule
from ...schedule.stage import AttachKind
from ...te.tensor import Tensor
from .depthwise import has_transcendental

Epilogue = Callable[..., te.Expr]  # (value, n, k, y, x) -> expression


@dataclass(frozen=True)
class Conv2dConfig:
    """The schedule's knobs; block sizes are reduced to the largest divisor of the channels.

    Attributes:
        ic_bn: input-channel block (the innermost packed dimension of the data).
        oc_bn: output-channel block (the vector lanes of the micro-kernel).
        reg_n: output columns per register tile.
        oc_tile: output channels per register tile (`reg_n x oc_tile` accumulators): a
            multiple of `oc_bn` spans that many blocks, each input value broadcast once
            feeding all their weight vectors; a divisor of `oc_bn` computes a block in parts
            (a 32-channel block as two 16-lane tiles where 16 AVX2 registers cannot hold
            32 x reg_n accumulators); 0 is one block.
        pack_data: copy the input to the blocked layout even when there is no padding to add
            (with padding it is always copied).
        parallel: run the fused (n, channel block, row) loop on the thread pool.
    """

    ic_bn: int = 16
    oc_bn: int = 16
    reg_n: int = 8
    pack_data: bool = False
    parallel: bool = True
    oc_tile: int = 0

    def check(self) -> None:
        check_positive_knobs(self, ("ic_bn", "oc_bn", "reg_n"), "conv2d")
        if self.oc_tile < 0:
            raise ScheduleError(f"conv2d: oc_tile must be >= 0, not {self.oc_tile}")


@dataclass
class Conv2dOp:
    """The tensors of one conv2d: arguments in parameter order and the stages schedules touch."""

    args: list[Tensor]
    data_vec: Tensor
    kernel_vec: Tensor
    conv: Tensor
    out: Tensor
    ic_bn: int
    oc_bn: int
    padding: tuple[int, ...]  # before each spatial axis, then after (top, left, bottom, right)
    blocked: bool = False  # data and out in the blocked layout
    rows_inner: bool = False  # data_vec is [n, C/ic_bn, H', ic_bn, W'] (`conv2d_nchwc`)
    tile_epilogue: Tensor | None = None  # the epilogue on the blocked tile (`conv2d_nchwc`)


def _block(extent: int, wanted: int) -> int:
    return max(d for d in range(1, min(extent, wanted) + 1) if extent % d == 0)


def conv2d_nchwc(
    data: Tensor,
    kernel: Tensor,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    bias: Tensor | None = None,
    epilogue: Epilogue | None = None,
    config: Conv2dConfig | None = None,
    out_dtype: str | None = None,
    groups: int = 1,
    blocked: bool = False,
    product: Callable[[te.Expr, te.Expr], te.Expr] | None = None,
    pad_value: te.Expr | None = None,
    rows_inner: bool = False,
    tile_epilogue: bool = False,
) -> Conv2dOp:
    """The compute of an NCHW conv2d (or NCDHW conv3d) through the blocked layout (output NCHW,
    NCDHW), or, with `blocked`, of a 2-D one from and to the blocked layout itself.

    Args:
        data: `[N, C, H, W]`, or `[N, C, D, H, W]`.
        kernel: `[K, C, R, S]` (`[K, C, T, R, S]`), or already packed by `pack_kernel`
            (weights are constants, so the graph layer packs them once, ahead of time).
        stride, dilation: one for every spatial axis, or one per axis.
        padding: the same on every side, or ONNX's `pads`: the padding before each spatial
            axis, then after each ((top, left, bottom, right) in 2-D).
        bias: optional `[K]`.
        epilogue: optional `f(value, n, k, y, x) -> expr` (`f(value, n, k, z, y, x)`) applied
            last.
        config: knobs (block sizes).
        out_dtype: accumulation dtype (default: the data dtype; int32 for int8/uint8 data).
        groups: a grouped convolution (kernel `[K, C/groups, R, S]`): each output-channel block
            reduces over its group's input-channel blocks only (the blocks divide the group
            sizes).
        blocked: the output stays `[N, K/oc_bn, OH, OW, oc_bn]` (no unpack), and 5-D `data`
            is already `[N, C/ic_bn, H, W, ic_bn]` (the kernel pre-packed with that `ic_bn`:
            no pack, only a padded copy when there is padding), as between two layers that
            both keep the blocked layout (`graph.passes.alter_layout`); 4-D `data` is packed
            as without it (an RGB stem). The epilogue takes the blocked index,
            `f(value, n, ko, y, x, ki)`.
        product: `f(input value, weight value) -> term` of the sum (default: their product in
            the accumulation dtype). The int8 kernels (`graph.strategy.qlinear`) pass int32
            words of two or four channels each as the data and the kernel, so "channels" are
            words, and `te.dot_i16x2` / `te.dot_u8i8x4` as the product.
        pad_value: what the padding reads (default 0; the int8 kernels' padding word holds the
            input's zero point where the input is not centered).
        rows_inner: pack NCHW data as `[N, C/ic_bn, (D',) H', ic_bn, W']`, the columns of one
            input channel innermost (not with `blocked`): the copy then reads and writes whole
            rows as vectors, where the NCHWc copy reads each of its lanes from another channel
            plane (a gather); the micro-kernel broadcasts single values either way. The int8
            kernels build their words of channels while packing, so they take this layout.
        tile_epilogue: apply the bias and epilogue to the register tile in the blocked layout
            (vectors along the output channels, the per-channel operands read as vectors),
            then transpose the result to NCHW from that local tile: for an epilogue that
            narrows the sums (the int8 kernels' requantization to 8 bits) a quarter of the
            bytes to transpose, and a third of the epilogue's vector operations of a 14-column
            tile, which applies it on 8 + 4 + 2 columns per channel after the transpose (not
            with `blocked`).

    Raises:
        ValueError: when the channels disagree or the output would be empty.
    """
    config = config or Conv2dConfig()
    config.check()
    data_blocked = blocked and len(data.shape) == 5
    if data_blocked:
        _check_blocked(data, kernel)
        n, cb, *sizes, b = data.shape
        c = cb * b
    else:
        n, c, *sizes = data.shape
    nd = len(sizes)
    if nd not in (2, 3):
        raise ValueError(f"conv2d: data must be NCHW or NCDHW, not {len(data.shape)}-D")
    if len(kernel.shape) == nd + 4:  # pre-packed [K/oc_bn, C/ic_bn, *taps, ic_bn, oc_bn]
        ko_, co_, *taps, ic_bn, oc_bn = kernel.shape
        k, cg = ko_ * oc_bn, co_ * ic_bn
    else:
        k, cg, *taps = kernel.shape
        ic_bn, oc_bn = _block(cg, config.ic_bn), _block(k // groups, config.oc_bn)
    if groups == 1 and c != cg:
        raise ValueError(f"conv2d: kernel channels must equal data channels ({c}), not {cg}")
    if c != cg * groups or k % (groups * oc_bn) or cg % ic_bn:
        raise ValueError(
            f"conv2d: kernel channels x groups must equal data channels ({c}), not {cg}x{groups}"
            f", with blocks ({ic_bn}, {oc_bn}) dividing one group's channels"
        )
    pads = _all_pads(padding, nd)
    strides, dils = _per_axis(stride, nd, "stride"), _per_axis(dilation, nd, "dilation")
    geometry = zip(sizes, pads[:nd], pads[nd:], taps, strides, dils, strict=True)
    outs = [(h + b + a - d * (t - 1) - 1) // st + 1 for h, b, a, t, st, d in geometry]
    if min(outs) < 1:
        raise ValueError(f"conv2d: output size must be positive, not {'x'.join(map(str, outs))}")
    if blocked and (rows_inner or tile_epilogue):
        raise ValueError("conv2d: rows_inner and tile_epilogue are for NCHW data and output")
    data_vec = _pack_data(data, pads, ic_bn, data_blocked, pad_value, rows_inner)
    kernel_vec = kernel
    if len(kernel.shape) == nd + 2:
        kernel_vec = te.compute(
            (k // oc_bn, cg // ic_bn, *taps, ic_bn, oc_bn),
            lambda ko, co, *tk: kernel[(ko * oc_bn + tk[-1], co * ic_bn + tk[-2], *tk[:-2])],
            name="kernel_vec",
        )
    rc = te.reduce_axis((0, cg), "rc")
    rtaps = [
        te.reduce_axis((0, t), name) for t, name in zip(taps, ("rz", "ry", "rx")[-nd:], strict=True)
    ]
    acc = out_dtype or ("int32" if data.dtype in ("int8", "uint8") else data.dtype)
    blocks_per_group = (k // groups) // oc_bn

    def in_block(ko: te.Expr) -> te.Expr:  # the group's first input-channel block, then rc's
        if groups == 1:
            return rc // ic_bn
        return (ko // blocks_per_group) * (cg // ic_bn) + rc // ic_bn

    def fconv(nn: te.Expr, ko: te.Expr, *pos: te.Expr) -> te.Expr:
        *pos, ki = pos
        at = [p * st + r * d for p, r, st, d in zip(pos, rtaps, strides, dils, strict=True)]
        if rows_inner:
            read = data_vec[(nn, in_block(ko), *at[:-1], rc % ic_bn, at[-1])]
        else:
            read = data_vec[(nn, in_block(ko), *at, rc % ic_bn)]
        weight = kernel_vec[(ko, rc // ic_bn, *rtaps, rc % ic_bn, ki)]
        term = product(read, weight) if product else read.astype(acc) * weight.astype(acc)
        return te.sum(term, axis=[rc, *rtaps])

    conv = te.compute((n, k // oc_bn, *outs, oc_bn), fconv, name="conv")
    if blocked:
        out = _blocked_out(conv, bias, epilogue, acc)
        args = [data, kernel] + ([bias] if bias is not None else []) + [out]
        return Conv2dOp(args, data_vec, kernel_vec, conv, out, ic_bn, oc_bn, pads, True)

    def funpack(nn: te.Expr, kk: te.Expr, *pos: te.Expr) -> te.Expr:
        value = conv[(nn, kk // oc_bn, *pos, kk % oc_bn)]
        if bias is not None:
            value = value + bias[kk].astype(acc)
        return epilogue(value, nn, kk, *pos) if epilogue is not None else value

    tile = None
    if tile_epilogue:

        def ftile(nn: te.Expr, ko: te.Expr, *pos: te.Expr) -> te.Expr:
            *pos, ki = pos
            return funpack(nn, ko * oc_bn + ki, *pos)

        tile = te.compute(conv.shape, ftile, name="tile")
        out = te.compute((n, k, *outs), lambda nn, kk, *pos: tile[(nn, kk // oc_bn, *pos,
                         kk % oc_bn)], name="out")  # fmt: skip
    else:
        out = te.compute((n, k, *outs), funpack, name="out")
    args = [data, kernel] + ([bias] if bias is not None else []) + [out]
    return Conv2dOp(args, data_vec, kernel_vec, conv, out, ic_bn, oc_bn, pads,
                    rows_inner=rows_inner, tile_epilogue=tile)  # fmt: skip


def _check_blocked(data: Tensor, kernel: Tensor) -> None:
    if len(data.shape) != 5 or len(kernel.shape) != 6 or data.shape[-1] != kernel.shape[-2]:
        raise ValueError(
            f"conv2d: blocked data must be [N, C/b, H, W, b] with a kernel packed for b, not "
            f"data {list(data.shape)} and kernel {list(kernel.shape)}"
        )


def _blocked_out(conv: Tensor, bias: Tensor | None, epilogue: Epilogue | None, acc: str) -> Tensor:
    """The blocked result with the bias and the epilogue (at the blocked index) applied."""
    oc_bn = conv.shape[-1]

    def fout(nn: te.Expr, ko: te.Expr, y: te.Expr, x: te.Expr, ki: te.Expr) -> te.Expr:
        value = conv[nn, ko, y, x, ki]
        if bias is not None:
            value = value + bias[ko * oc_bn + ki].astype(acc)
        return epilogue(value, nn, ko, y, x, ki) if epilogue is not None else value

    return te.compute(conv.shape, fout, name="out")


def _all_pads(padding: int | Sequence[int], nd: int) -> tuple[int, ...]:
    """The padding before each of `nd` spatial axes, then after each, of an int (every side)
    or of 2 * nd ints."""
    if isinstance(padding, int):
        return (padding,) * 2 * nd
    pads = tuple(int(p) for p in padding)
    if len(pads) != 2 * nd or min(pads) < 0:
        raise ValueError(f"conv2d: padding must be an int or {2 * nd} ints >= 0, not {padding!r}")
    return pads


def _per_axis(value: int | Sequence[int], nd: int, what: str) -> tuple[int, ...]:
    """One `what` per spatial axis, of one for all or of `nd`."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * nd
    values = tuple(int(v) for v in value)
    if len(values) != nd or min(values) < 1:
        raise ValueError(f"conv2d: {what} must be an int or {nd} ints >= 1, not {value!r}")
    return values


def default_config(
    channels: int,
    filters: int,
    out_hw: tuple[int, ...],
    registers: tuple[int, int] | None = None,
) -> Conv2dConfig:
    """The hand-chosen knobs by layer shape (the default point of `config_space`): 32 output
    channels per block where they divide the filters, wider input-channel blocks for deep
    layers on larger images (a 3-D convolution's by its output rows and columns), and the
    register tile of `register_tile` for the CPU's vector registers (`registers`: (lanes,
    count), the host's by default). A stem convolution (under 16 input channels: RGB images)
    reduces over so few values per tile that writing the tile out to NCHW costs as much as
    computing it: 8 columns there (power-of-two vectors to transpose; 14 ran 1.7x slower on
    MobileNet's 3->32 stem)."""
    oh, ow = out_hw[-2:]
    oc_bn = 32 if filters % 32 == 0 else 16
    ic_bn = 32 if channels >= 256 and oh >= 14 else 16
    ic_bn, oc_bn = _block(channels, ic_bn), _block(filters, oc_bn)
    columns = 8 if channels < 16 and ow % 8 == 0 else None
    reg_n, oc_tile = register_tile(ow, oc_bn, filters, registers, columns)
    return Conv2dConfig(ic_bn=ic_bn, oc_bn=oc_bn, reg_n=reg_n, oc_tile=oc_tile)


def register_tile(
    ow: int,
    oc_bn: int,
    filters: int,
    registers: tuple[int, int] | None = None,
    columns: int | None = None,
) -> tuple[int, int]:
    """The default (reg_n, oc_tile) of a row of `ow` output columns in blocks of `oc_bn`
    channels, for `registers` = (float32 lanes per vector, vector registers) (the host's:
    `codegen.llvm_jit.vector_registers`).

    A tile of `reg_n` columns by `v` weight vectors holds `reg_n * v` accumulators and needs
    `v` weight vectors and one broadcast input value besides: `reg_n * v + v + 1` registers.
    The rule takes the tile with the most accumulators that fits (enough independent FMAs to
    cover their latency), of those with at least two weight vectors per broadcast value when
    there are any (one loads as many values as it computes FMAs), then of those that span
    several blocks only to reach those two vectors (`_spans_blocks`), ties to more weight
    vectors; then evens the columns out over the row (7 as 4 + 3, not 6 + 1). Tile widths are
    whole vectors that divide a block or are whole blocks (at most the filters). AVX2 (8 x 16):
    6 columns x 16 channels, half of a 32-channel block (32 x 8 columns, the rule before,
    needed 32 registers for its accumulators alone and spilled; 1.2-2.4x slower on ResNet's
    layers); AVX-512 (16 x 32): 14 columns x 32 channels, 7 x 32 on 7-wide rows (the rule
    before took 4 columns x 3 blocks there, cut to 2 blocks by `_tile_split`: 1.3-1.4x slower
    on 7- and 8-wide 3x3 layers of 384-512 channels, 1.02-1.06x on 1x1 and strided ones).
    `columns` fixes reg_n. A block that is not whole vectors (20 channels) keeps one block per
    tile, at most 8 columns. A tile of several weight vectors needs MIN_COLUMNS columns (or the
    whole row): 208 filters in 16-channel blocks (13, prime) took 1 column x 13 vectors, each
    weight vector loaded for one column, and GoogLeNet's 96 -> 208 3x3 layer at 14x14 ran 1.09 ms
    against 0.30 as 14 columns x 1 vector (176 filters 0.87 -> 0.26, 112 filters as 3 x 7
    vectors 0.22 -> 0.17; AMD EPYC with AVX-512)."""
    from ...codegen.llvm_jit import vector_registers

    lanes, count = registers or vector_registers()
    best: tuple[tuple, int, int] | None = None  # (key, reg_n, channels)
    for vecs in range(1, count - 1):
        chans = vecs * lanes
        if chans > filters or (chans % oc_bn and oc_bn % chans):
            continue
        if chans > oc_bn and (filters // oc_bn) % (chans // oc_bn):
            continue  # `_tile_split` would cut it to fewer blocks than counted here
        reg_n = columns or min((count - 1 - vecs) // vecs, ow)
        if reg_n < 1 or reg_n * vecs + vecs + 1 > count:
            continue
        if vecs > 1 and reg_n < min(MIN_COLUMNS, ow) and not columns:
            continue  # each weight vector would serve too few columns
        key = (min(vecs, 2), not _spans_blocks(vecs, lanes, oc_bn), reg_n * vecs, vecs)
        if best is None or key > best[0]:
            best = (key, reg_n, chans)
    if best is None:
        return columns or min(8, ow), 0
    _, reg_n, chans = best
    if columns is None:
        reg_n = -(-ow // -(-ow // reg_n))
    return reg_n, 0 if chans == oc_bn else chans


#: the fewest output columns a register tile of several weight vectors may have (`register_tile`)
MIN_COLUMNS = 4


def _spans_blocks(vecs: int, lanes: int, oc_bn: int) -> bool:
    """Whether a tile of `vecs` weight vectors covers more output channels than one block and
    more than the two vectors per broadcast value: measured slower than a one-block tile of
    more columns on AVX-512 (AMD Zen 5, 2026-11-29), even where that tile held fewer
    accumulators (7 x 32 against 4 x 64 on a 7-wide row)."""
    return vecs * lanes > max(oc_bn, 2 * lanes)


#: the most accumulator elements a register tile may hold (reg_n x oc_bn): beyond this the
#: unrolled micro-kernel only spills and takes long to compile
MAX_TILE = 512


def default_blocked_config(
    channels: int,
    filters: int,
    out_hw: tuple[int, ...],
    blocks: tuple[int, int],
    registers: tuple[int, int] | None = None,
) -> Conv2dConfig:
    """The default knobs of a conv2d whose channel blocks are given (`blocks` = (ic_bn,
    oc_bn): a layer of a blocked chain, `graph.passes.alter_layout`, whose input and output
    blocks its neighbours share): `register_tile`'s register tile for those blocks (8 columns
    for a stem, as `default_config`)."""
    ow = out_hw[-1]
    columns = 8 if channels < 16 and ow % 8 == 0 else None
    reg_n, oc_tile = register_tile(ow, blocks[1], filters, registers, columns)
    return Conv2dConfig(ic_bn=blocks[0], oc_bn=blocks[1], reg_n=reg_n, oc_tile=oc_tile)


def with_blocks(
    config: Conv2dConfig, blocks: tuple[int, int], ow: int, filters: int
) -> Conv2dConfig:
    """`config` on the channel blocks `blocks` (ic_bn, oc_bn) of a blocked chain: reg_n at
    most the output width `ow`, the same register tile width in channels where it is whole
    blocks or part of one of the new oc_bn, else `register_tile`'s tile."""
    reg_n, chans = min(config.reg_n, ow), config.oc_tile or config.oc_bn
    if _tile_misfit(chans, blocks[1]):
        reg_n, chans = register_tile(ow, blocks[1], filters)
    return dataclasses.replace(config, ic_bn=blocks[0], oc_bn=blocks[1], reg_n=reg_n,
                               oc_tile=0 if chans == blocks[1] else chans)  # fmt: skip


#: the widest register tile the tuner tries, in output channels
MAX_OC_TILE = 128


def config_space(
    channels: int,
    filters: int,
    out_hw: tuple[int, ...],
    padding: int = 0,
    blocks: tuple[int, int] | None = None,
) -> ConfigSpace:
    """The knobs a tuner searches for one conv2d (TVM's x86 NCHWc template): input- and
    output-channel blocks (divisors of the channels), output columns and output channels
    (`oc_tile`: several blocks or part of one, whole vectors of this CPU) per register tile,
    whether the input is copied to the blocked layout (always, with padding: then a single
    choice), and thread-pool use. The default point is `default_config`.

    With `blocks` (ic_bn, oc_bn), the kernel of a blocked chain: its input and output layouts
    are its neighbours' too, so the blocks are fixed (one choice each) and the other knobs
    vary; the default point is `default_blocked_config`.

    Tuning logs written before `oc_tile` existed meant one block per tile (0)."""
    from ...codegen.llvm_jit import vector_registers

    ow = out_hw[-1]
    d = default_config(channels, filters, out_hw)
    if blocks is not None:
        d = default_blocked_config(channels, filters, out_hw, blocks)
    regs = sorted({r for r in (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16) if r <= ow} | {d.reg_n})
    lanes = vector_registers()[0]
    widths = range(lanes, min(filters, MAX_OC_TILE) + 1, lanes)
    if blocks is not None:
        widths = [w for w in widths if w != blocks[1] and not _tile_misfit(w, blocks[1])]
    knobs = [
        Knob("ic_bn", divisors(channels, 64) if blocks is None else (blocks[0],)),
        Knob("oc_bn", divisors(filters, 64) if blocks is None else (blocks[1],)),
        Knob("reg_n", tuple(regs)),
        Knob("oc_tile", tuple(sorted({0, *widths, d.oc_tile}))),
        Knob("pack_data", (False, True) if padding == 0 else (False,)),
        Knob("parallel", (True, False)),
    ]

    def constraint(v: dict) -> str | None:
        tile = v["oc_tile"] or v["oc_bn"]
        if v["oc_tile"] == v["oc_bn"]:
            return "oc_tile equal to oc_bn is oc_tile 0 (one block)"
        if _tile_misfit(tile, v["oc_bn"]):
            return "an oc_tile that is neither a multiple nor a divisor of oc_bn"
        if v["reg_n"] * tile > MAX_TILE:
            return f"a register tile of reg_n x oc_tile > {MAX_TILE} accumulators"
        return None

    default = {"ic_bn": d.ic_bn, "oc_bn": d.oc_bn, "reg_n": d.reg_n, "oc_tile": d.oc_tile,
               "pack_data": d.pack_data, "parallel": d.parallel}  # fmt: skip
    return ConfigSpace("x86.conv2d_nchwc", knobs, default, constraint, added={"oc_tile": 0})


def _tile_misfit(oc_tile: int, oc_bn: int) -> bool:
    return bool(oc_tile % oc_bn and oc_bn % oc_tile)


def config_from(values: dict) -> Conv2dConfig:
    """The `Conv2dConfig` of a point of `config_space`."""
    v = dict(values)
    return Conv2dConfig(ic_bn=int(v["ic_bn"]), oc_bn=int(v["oc_bn"]), reg_n=int(v["reg_n"]),
                        oc_tile=int(v.get("oc_tile", 0)), pack_data=bool(v["pack_data"]),
                        parallel=bool(v["parallel"]))  # fmt: skip


def kernel_blocks(
    channels: int, filters: int, config: Conv2dConfig | None = None
) -> tuple[int, int]:
    """The (ic_bn, oc_bn) that `conv2d_nchwc` uses for these channel counts."""
    config = config or Conv2dConfig()
    return _block(channels, config.ic_bn), _block(filters, config.oc_bn)


def pack_kernel(weight: np.ndarray, ic_bn: int, oc_bn: int) -> np.ndarray:
    """OIHW (OIDHW) weights -> the packed `[K/oc_bn, C/ic_bn, *taps, ic_bn, oc_bn]` layout
    (numpy)."""
    k, c, *taps = weight.shape
    if k % oc_bn or c % ic_bn:
        raise ValueError(f"pack_kernel: blocks ({ic_bn}, {oc_bn}) must divide (C, K) = ({c}, {k})")
    blocked = weight.reshape(k // oc_bn, oc_bn, c // ic_bn, ic_bn, *taps)
    tap_axes = range(4, 4 + len(taps))
    return np.ascontiguousarray(blocked.transpose(0, 2, *tap_axes, 3, 1))


def _pack_data(
    data: Tensor,
    pads: tuple[int, ...],
    ic_bn: int,
    blocked: bool,
    fill: te.Expr | None = None,
    rows_inner: bool = False,
) -> Tensor:
    """`data` padded (with `fill`, default 0) in the blocked layout (`rows_inner`: with the
    block's channels before the columns); `blocked` data is read as it lies (a padded copy, or
    nothing once inlined)."""
    if blocked:
        n, cb, *sizes, _ = data.shape
        c = cb * ic_bn
    else:
        n, c, *sizes = data.shape
    nd = len(sizes)
    before, after = pads[:nd], pads[nd:]

    def read(nn: te.Expr, co: te.Expr, ci: te.Expr, pos: list) -> te.Expr:
        if blocked:
            return data[(nn, co, *pos, ci)]
        return data[(nn, co * ic_bn + ci, *pos)]

    def fpack(nn: te.Expr, co: te.Expr, *pos: te.Expr) -> te.Expr:
        if rows_inner:
            *pos, ci, col = pos
            pos = [*pos, col]
        else:
            *pos, ci = pos
        if not any(pads):
            return read(nn, co, ci, pos)
        # A select over a clamped (always in-bounds) read keeps the loop vectorizable.
        src = [p - b for p, b in zip(pos, before, strict=True)]
        bounds = zip(src, sizes, strict=True)
        inside = te.all_of(*(cond for i, h in bounds for cond in (i >= 0, i < h)))
        clamped = [te.min(te.max(i, 0), h - 1) for i, h in zip(src, sizes, strict=True)]
        value = read(nn, co, ci, clamped)
        return te.select(inside, value, te.const(0, data.dtype) if fill is None else fill)

    padded = [h + b + a for h, b, a in zip(sizes, before, after, strict=True)]
    if rows_inner:
        return te.compute((n, c // ic_bn, *padded[:-1], ic_bn, padded[-1]), fpack,
                          name="data_vec")  # fmt: skip
    return te.compute((n, c // ic_bn, *padded, ic_bn), fpack, name="data_vec")


def schedule_conv2d_nchwc(op: Conv2dOp, config: Conv2dConfig | None = None) -> Schedule:
    """The x86 schedule: parallel packing, `reg_n x oc_tile` register tiles (`oc_tile` 0: one
    `oc_bn` block) written straight to the NCHW output (the blocked result never goes to
    memory)."""
    config = config or Conv2dConfig()
    config.check()
    s = te.create_schedule(op.out.op)
    conv, out = op.conv, op.out
    if not config.pack_data and not any(op.padding):  # read NCHW directly: no copy of the input
        s[op.data_vec].compute_inline()
    _schedule_packing(s, op, config)
    s[conv].set_scope("local")
    blocks, lanes = _tile_split(conv.shape[-1], conv.shape[1], config.oc_tile)
    if op.blocked:  # the tile stored as it is: columns unrolled, channels in vector lanes
        on, ok, *rows, ox, ki = out.op.axis
        ko, kt = s[out].split(ok, factor=blocks)
        kl, ki = s[out].split(ki, factor=lanes)
        xo, xi = s[out].split(ox, factor=config.reg_n)
        s[out].reorder(on, ko, *rows, xo, kl, kt, xi, ki)
        if not has_transcendental(out):  # see `has_transcendental`: rolled, exp code is smaller
            s[out].unroll(xi)
        s[out].vectorize(ki)
    else:
        on, ok, *rows, ox = out.op.axis  # rows: the output rows (a 3-D one's depth, then rows)
        ko, ki = s[out].split(ok, factor=op.oc_bn)
        ko, kt = s[out].split(ko, factor=blocks)
        kl, ki = s[out].split(ki, factor=lanes)
        xo, xi = s[out].split(ox, factor=config.reg_n)
        s[out].reorder(on, ko, *rows, xo, kl, kt, ki, xi)
        s[out].vectorize(xi)
        if op.tile_epilogue is not None:  # the epilogue on the tile, along its channels
            tile = op.tile_epilogue
            s[tile].compute_at(s[out], kl)
            s[tile].set_scope("local")
            tx, tki = tile.op.axis[-2], tile.op.axis[-1]
            s[tile].unroll(tx)
            s[tile].vectorize(tki)
    row = s[out].fuse(on, ko, *rows)
    if config.parallel:
        s[out].parallel(row)
    s[conv].compute_at(s[out], kl)  # the tile: `blocks` blocks x reg_n columns x `lanes` lanes
    lkt, lx, lki = conv.op.axis[1], conv.op.axis[-2], conv.op.axis[-1]
    rc, *rtaps = conv.op.reduce_axis
    rco, rci = s[conv].split(rc, factor=op.ic_bn)
    # one broadcast of an input value per column, then its FMAs on the tile's weight vectors
    s[conv].reorder(rco, *rtaps, rci, lx, lkt, lki)
    s[conv].unroll(lx)
    s[conv].unroll(lkt)
    s[conv].vectorize(lki)
    return s


def _tile_split(oc_bn: int, n_blocks: int, oc_tile: int) -> tuple[int, int]:
    """The register tile's (blocks, lanes) of `oc_tile` output channels: several whole blocks
    (a multiple of `oc_bn`; the most up to `oc_tile // oc_bn` that divide the `n_blocks` there
    are), or part of one (a divisor of it); 0 is one block.

    A tile of blocks must divide the blocks: the last tile of a ragged split would compute
    blocks past the output's from weights past the packed kernel's end (an out-of-bounds read
    that crashed now and then: 3 blocks in tiles of 2)."""
    if oc_tile == 0 or oc_tile == oc_bn:
        return 1, oc_bn
    if _tile_misfit(oc_tile, oc_bn):
        raise ScheduleError(
            f"conv2d: oc_tile must be 0, a multiple or a divisor of oc_bn ({oc_bn}), not {oc_tile}"
        )
    if oc_tile % oc_bn == 0:
        wanted = min(oc_tile // oc_bn, n_blocks)
        return max(b for b in range(1, wanted + 1) if n_blocks % b == 0), oc_bn
    return 1, oc_tile


def _schedule_packing(s: Schedule, op: Conv2dOp, config: Conv2dConfig) -> None:
    """Data: rows in parallel, input-channel block as vector lanes (unrolled when under 8);
    kernel: blocks in parallel."""
    if s[op.data_vec].attach is AttachKind.INLINE:
        return _schedule_kernel_packing(s, op, config)
    if op.rows_inner:  # whole rows as vectors, one per (row, channel of the block)
        nn, co, *rows_, ci, col = op.data_vec.op.axis
        rows = s[op.data_vec].fuse(nn, co, *rows_)
        s[op.data_vec].vectorize(col)
        if config.parallel:
            s[op.data_vec].parallel(rows)
        return _schedule_kernel_packing(s, op, config)
    nn, co, *rows_, _, ci = op.data_vec.op.axis
    rows = s[op.data_vec].fuse(nn, co, *rows_)
    # few channels per block (an RGB stem): channels unrolled, LLVM vectorizes the columns with
    # shuffles; vector lanes over 3 channels were 3-lane gathers (the stem conv 1.2x faster)
    if op.ic_bn < 8:
        s[op.data_vec].unroll(ci)
    else:
        s[op.data_vec].vectorize(ci)
    if config.parallel:
        s[op.data_vec].parallel(rows)
    _schedule_kernel_packing(s, op, config)


def _schedule_kernel_packing(s: Schedule, op: Conv2dOp, config: Conv2dConfig) -> None:
    if s[op.kernel_vec].is_compute:
        fused = s[op.kernel_vec].fuse(*op.kernel_vec.op.axis[0:2])
        if config.parallel:
            s[op.kernel_vec].parallel(fused)
