"""The dot-product kernels of ONNX's integer convolutions and matmuls on x86 (`int8_kernel`):
topi's conv2d and dense micro-kernels summing int32 words of four input channels with vpdpbusd
("quads") or of two with pmaddwd ("pairs"), bit-exact with the centered kernel of
`strategy.qlinear`, which resolves the operands and calls `conv_words` / `matmul_words`
(docs/cpu_backend.md, "Integer convolutions and matmuls on dot-product instructions")."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ... import te
from ...codegen.llvm_jit import target_features
from ...target import Target
from ...te.tensor import Tensor
from ...tir.stmt import LoweringError
from ...topi.x86 import conv2d_nchwc, schedule_conv2d_nchwc
from ...topi.x86.conv2d import default_config as conv_default
from ...topi.x86.conv2d import kernel_blocks, pack_kernel
from ..lower_te import GroupContext, Index, Lazy, Tail, reshape_lazy, unravel
from .conv import ConvView
from .matmul import packed_dense
from .nn import Result, pad_image

ACC = "int32"
Reader = Callable[[Index], Any]  # index of the operand -> its zero point


@dataclass(frozen=True)
class WordInput:
    """The integer operand the words are built from, resolved by the caller."""

    x: Lazy  # the input (a lifted 1-D convolution's 2-D view)
    zero: Reader | None  # its zero point: one value, or one per row of a matmul's `a`
    zero_const: np.ndarray | None  # that zero point's value where it is a constant
    signed: bool  # int8 (else uint8)


#: the integer kernels of QLinearConv, ConvInteger, QLinearMatMul and MatMulInteger (`int8_kernel`)
KERNELS = ("quads", "pairs", "centered")


def int8_kernel(target: str) -> str:
    """The integer kernel of a QLinearConv / ConvInteger for `target`: "quads" (vpdpbusd on
    words of four channels) where the CPU has AVX-512 VNNI or AVX-VNNI, else "pairs" (pmaddwd
    on words of two) on any x86-64 CPU, else "centered" (int32 x int16 products, any LLVM
    target: the kernel before the other two). The features are `llvm_jit.target_features`':
    the host's, or -mattr's when given. The environment variable TF_INT8_KERNEL set to one of
    `KERNELS` forces that kernel on every LLVM target (each is exact everywhere; tests and
    benchmarks compare them); GPU targets always take "centered"."""
    if Target.parse(target).kind != "llvm":
        return "centered"
    forced = os.environ.get("TF_INT8_KERNEL", "auto") or "auto"
    if forced != "auto":
        if forced not in KERNELS:
            raise LoweringError(
                f"TF_INT8_KERNEL must be auto or one of {', '.join(KERNELS)}, not {forced!r}"
            )
        return forced
    features = target_features(target)
    if features & {"+avx512vnni", "+avxvnni"}:
        return "quads"
    return "pairs" if "+sse2" in features else "centered"


def conv_words(
    ctx: GroupContext,
    name: str,
    inp: WordInput,
    w: np.ndarray,
    finish: Any,
    tail: Tail,
    view: ConvView,
    kernel: str,
) -> Result:
    """topi's NCHW[x]c conv on int32 *words* of input channels, `w` the centered weights:

    - "pairs": two channels of the centered input (9-bit values as int16 halves) per word, the
      weights the same, summed by `te.dot_i16x2` (pmaddwd; vpdpwssd on VNNI CPUs);
    - "quads": four channels of the input as unsigned bytes (uint8 as it is, int8 plus 128)
      per word, the centered weights as signed bytes (they must fit), summed by
      `te.dot_u8i8x4` (vpdpbusd); the padding reads the input's zero point `zu` (as the bytes
      hold it), so every position adds `zu * w` too, which the epilogue takes off:
      ``sum (u - zu) * w = sum u * w - zu * sum w`` with ``sum w`` per output channel over
      its channels and taps (computed once), in wrapping int32 like the sums themselves.

    Channels past the last multiple of 2 (4) are zeros in the weights (and in the input's last
    word), so they add nothing. Every word's products and their sum are exact in int32 (pairs:
    |9-bit x 9-bit| <= 255 * 255, two of them < 2**17; quads: 4 * 255 * 128 < 2**17; pmaddwd
    wraps only for -32768 * -32768 twice, which 9-bit values never reach, and vpdpbusd's
    non-saturating form adds each word's sum to the accumulator as an int32 add), so the int32
    result is the centered kernel's bit for bit, wrapping included (int32 sums are exact mod
    2**32, in any order)."""
    quads = kernel == "quads"
    per = 4 if quads else 2
    x = inp.x
    stride, dil = view.stride, view.dilation
    pointwise = all(t == 1 for t in w.shape[2:]) and not any((*view.begin, *view.end))
    if pointwise and max(view.strides) > 1:  # only every stride-th position is read: pack those
        x, stride, dil = _subsampled(x, view.strides, view.out_shape[2:]), 1, 1
    value, zu, flip = _word_values(replace(inp, x=x), quads)
    zu = zu(()) if callable(zu) else zu  # one value
    n, c, *spatial = x.shape
    words = _word_count(c, per)
    packed_x = _packed_words(value, x.shape, 1, per, flip)
    fill = _word_of(zu, per)
    if isinstance(view.padding, int):
        data, pad = _stage(ctx, packed_x), view.padding
    else:
        data, pad = pad_image(packed_x, view.begin, view.end, fill), 0
        ctx.inline.append(data)
    w_words = _weight_words(w, per)
    config = conv_default(words, w.shape[0], tuple(view.out_shape[2:]))
    config = replace(config, pack_data=True)  # pack the words once
    ic_bn, oc_bn = kernel_blocks(words, w.shape[0], config)
    packed = ctx.add_constant(
        f"{name}.w.{kernel}{ic_bn}x{oc_bn}", pack_kernel(w_words, ic_bn, oc_bn)
    )
    correct = _zero_correction(ctx, name, w, zu) if quads else None

    def epilogue(acc: Any, *idx: Any) -> Any:
        if correct is not None:
            acc = acc + correct(idx[1])
        return tail.epilogue(finish(acc, idx), tuple(idx))

    product = te.dot_u8i8x4 if quads else te.dot_i16x2
    op = conv2d_nchwc(data, packed, stride, pad, dil, None, epilogue, config, ACC,
                      product=product, pad_value=fill, rows_inner=True,
                      tile_epilogue=True)  # fmt: skip
    return schedule_conv2d_nchwc(op, config), [op.out]


def _word_values(inp: WordInput, quads: bool) -> tuple[Callable[[Index], Any], Any, int]:
    """(index -> what the words hold of the input, its zero point as they hold it, the bits to
    flip in each word): for quads the input's bytes, read as unsigned (uint8 as it is; int8
    with its sign bits flipped, i.e. plus 128: the flip is on the whole word, so LLVM still
    loads four bytes as one) and its zero point the same way (an immediate where it is one
    constant, else a reader by index); for pairs the centered input, whose zero point is 0."""
    x, z = inp.x, inp.zero
    if not quads:

        def centered(idx: Index) -> Any:
            v = x(idx).astype(ACC)
            return v - z(idx).astype(ACC) if z is not None else v

        return centered, te.const(0, ACC), 0
    shift, flip = (128, _signed32(0x80808080)) if inp.signed else (0, 0)

    def raw(idx: Index) -> Any:
        return x(idx).astype(ACC)

    if z is None:
        return raw, te.const(shift, ACC), flip
    if inp.zero_const is not None and inp.zero_const.size == 1:  # the correction: constants
        return raw, te.const(int(inp.zero_const.reshape(-1)[0]) + shift, ACC), flip
    return raw, lambda idx: z(idx).astype(ACC) + shift, flip


def _signed32(value: int) -> int:
    return int(np.uint32(value).view(np.int32))


def _packed_words(
    value: Callable[[Index], Any], shape: tuple[int, ...], axis: int, per: int, flip: int = 0
) -> Lazy:
    """The int32 words of `per` consecutive elements of `value` (int32 values of 8 or 16 bits)
    along `axis` of `shape`, the lowest in the low bits: bytes for 4, int16 halves for 2; past
    the axis's end (the last words) 0; each word xor `flip`."""
    size, words = shape[axis], _word_count(shape[axis], per)
    mask, bits = (0xFF, 8) if per == 4 else (0xFFFF, 16)

    def word(idx: Index) -> Any:
        packed = None
        for j in range(per):
            at = idx[axis] * per + j

            def read(pos: Any) -> Any:
                return value((*idx[:axis], pos, *idx[axis + 1 :]))

            if (words - 1) * per + j >= size:  # may be past the end
                v = te.select(at < size, read(te.min(at, size - 1)), te.const(0, ACC))
            else:
                v = read(at)
            v = v & te.const(mask, ACC)
            v = te.shift_left(v, bits * j) if j else v
            packed = v if packed is None else packed | v
        return packed ^ te.const(flip, ACC) if flip else packed

    return Lazy((*shape[:axis], words, *shape[axis + 1 :]), ACC, word)


def _subsampled(x: Lazy, strides: tuple[int, ...], out: tuple[int, ...]) -> Lazy:
    """`x` at every `strides`-th spatial position, `out` of them per axis."""

    def fn(idx: Index) -> Any:
        return x((*idx[:2], *(i * s for i, s in zip(idx[2:], strides, strict=True))))

    return Lazy((*x.shape[:2], *out), x.dtype, fn)


def _word_count(channels: int, per: int) -> int:
    """The words of `per` channels that hold `channels`: ceil(channels / per), rounded up to a
    multiple of 8 where that count has no divisor from 4 to 16 (the input-channel block of the
    packed layout divides the words: 16501 words, 29 x 569, would be blocks of 1)."""
    words = -(-channels // per)
    if words > 16 and max(d for d in range(1, 17) if words % d == 0) < 4:
        words = -(-words // 8) * 8
    return words


def _word_of(value: Any, per: int) -> Any:
    """The int32 word of `per` copies of `value` (a byte, or an int16 for pairs: 0 there)."""
    if isinstance(value, te.IntImm) or per == 2:
        v = int(value.value) if isinstance(value, te.IntImm) else 0
        word = sum((v & 0xFF) << (8 * j) for j in range(per)) if per == 4 else 0
        return te.const(int(np.uint32(word).view(np.int32)), ACC)
    return value * te.const(0x01010101, ACC)  # zu in [0, 255]: the int32 product wraps


def _weight_words(w: np.ndarray, per: int) -> np.ndarray:
    """Centered `[K, C, *taps]` weights as `[K, ceil(C / per), *taps]` int32 words: `per`
    consecutive channels each (zeros past C), as int16 halves (pairs) or bytes (quads), the
    lowest channel in the low bits."""
    k, c, *taps = w.shape
    padded = np.zeros((k, _word_count(c, per) * per, *taps), np.int16)
    padded[:, :c] = w
    lanes = padded.reshape(k, -1, per, *taps)
    lanes = np.moveaxis(lanes, 2, -1).astype("<i2" if per == 2 else "i1")
    return np.ascontiguousarray(lanes).view("<i4")[..., 0]


def _zero_correction(
    ctx: GroupContext, name: str, w: np.ndarray, zu: Any
) -> Callable[[Any], Any] | None:
    """`k -> -zu * sum(w[k])` in wrapping int32 (the quads' zero-point term), a table of
    constants where `zu` is one; None where it is 0."""
    sums = w.reshape(w.shape[0], -1).astype(np.int64).sum(1)
    if isinstance(zu, te.IntImm):
        if not zu.value:
            return None
        table = _wrap32(-int(zu.value) * sums)
        correction = ctx.add_constant(f"{name}.zero_sums", table)
        return lambda k: correction[k]
    sums_table = ctx.add_constant(f"{name}.w_sums", _wrap32(sums))
    return lambda k: te.const(0, ACC) - zu * sums_table[k]


def _wrap32(values: np.ndarray) -> np.ndarray:
    return (np.asarray(values, np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def matmul_words(
    ctx: GroupContext,
    name: str,
    inp: WordInput,
    b: np.ndarray,
    finish: Callable[[Any, Index], Any],
    tail: Tail,
    kernel: str,
) -> Result:
    """topi's dense on int32 words of `per` consecutive values along K, `b` the centered `[K,
    N]` weights: `conv_words`'s pairs or quads (the quads' correction ``-za * sum_k b[k, j]``
    per row where `a`'s zero point is, per column by the column sums), in the dense kernel's
    panels of columns; exact in int32 as the centered kernel."""
    quads = kernel == "quads"
    per = 4 if quads else 2
    a = inp.x
    value, zu, flip = _word_values(inp, quads)
    lead, k = a.shape[:-1], a.shape[-1]
    rows = int(np.prod(lead))
    words = reshape_lazy(_packed_words(value, a.shape, len(a.shape) - 1, per, flip),
                         (rows, _word_count(k, per)))  # fmt: skip
    # quads: each word is four consecutive bytes of `a` (a 32-bit load where the micro-kernel
    # broadcasts it); pairs: two centered values, packed once into a stage of their own
    data = te.compute(words.shape, lambda *i: words(i), name="words")
    if quads:
        ctx.inline.append(data)
    b_words = _weight_words(np.ascontiguousarray(b.T), per).T  # [K / per, N]
    correct = None
    if quads:
        sums = b.astype(np.int64).sum(0)  # per column
        if isinstance(zu, te.IntImm):
            if zu.value:
                table = ctx.add_constant(f"{name}.zero_sums", _wrap32(-int(zu.value) * sums))
                correct = lambda idx: table[idx[-1]]  # noqa: E731
        else:
            col_sums = ctx.add_constant(f"{name}.b_sums", _wrap32(sums))
            correct = lambda idx: te.const(0, ACC) - zu(idx) * col_sums[idx[-1]]  # noqa: E731

    def epilogue(acc: Any, i: Any, j: Any) -> Any:
        idx = (*unravel(i, lead), j) if len(lead) > 1 else (i, j)
        if correct is not None:
            acc = acc + correct(idx)
        return tail.epilogue(finish(acc, idx), idx)

    product = te.dot_u8i8x4 if quads else te.dot_i16x2
    sched, outs = packed_dense(ctx, data, f"{name}.b_{kernel}", "KN", epilogue,
                               values=np.ascontiguousarray(b_words), product=product)  # fmt: skip
    if not quads:
        sched[data].parallel(data.op.axis[0])  # rows; LLVM vectorizes the words
    return sched, outs


def _stage(ctx: GroupContext, lazy: Lazy) -> Tensor:
    """`lazy` as a compute inlined into the stage that reads it (the input's packing)."""
    t = te.compute(lazy.shape, lambda *i: lazy(i), name="words")
    ctx.inline.append(t)
    return t
