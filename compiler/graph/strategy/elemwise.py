"""Lazy lowerings of elementwise, broadcast and injective ops (inlined into their readers)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ....runtime.dtypes import is_narrow, storage_dtype
from ... import te
from ...te import dtype as dt
from ...te.narrow import cast_narrow
from ...tir.stmt import LoweringError
from ..ir import Node
from ..lower_te import GroupContext, Index, Lazy, Rule, reshape_lazy
from ..ops.shape import pad_widths, slice_index, split_sizes, squeezed, unsqueezed
from ..registry import get_op


def _out(ctx: GroupContext, node: Node, k: int = 0) -> tuple[tuple[int, ...], str]:
    ty = ctx.type_of(node.outputs[k])
    return ty.shape, ty.dtype


def broadcast_read(src: Lazy, shape: tuple[int, ...]) -> Callable[[Index], Any]:
    """numpy broadcasting: `src` read at the index of an element of `shape`."""
    rank, own = len(shape), len(src.shape)

    def fn(idx: Index) -> Any:
        keep = idx[rank - own :]
        return src(tuple(0 if d == 1 else i for d, i in zip(src.shape, keep, strict=True)))

    return fn


def _inputs(ctx: GroupContext, node: Node) -> list[Lazy | None]:
    return [ctx.get(name) if name else None for name in node.inputs]


def _unary(fn: Callable[[Any, dict[str, Any]], Any]) -> Rule:
    def rule(ctx: GroupContext, node: Node) -> list[Lazy]:
        (x,) = _inputs(ctx, node)
        shape, dtype = _out(ctx, node)
        attrs = dict(node.attrs)
        return [Lazy(shape, dtype, lambda idx: fn(x(idx), attrs))]

    return rule


def _nary(fn: Callable[..., Any]) -> Rule:
    def rule(ctx: GroupContext, node: Node) -> list[Lazy]:
        shape, dtype = _out(ctx, node)
        reads = [broadcast_read(x, shape) for x in _inputs(ctx, node) if x is not None]
        return [Lazy(shape, dtype, lambda idx: fn(*(r(idx) for r in reads)))]

    return rule


# Past this many operands a variadic op (Sum, Max, Min, Mean) or a Concat is combined as a
# balanced tree: a chain of 300 nests 300 deep, past the recursion of the expression visitors
# (a RecursionError) and the 256 bracket levels of clang (OpenCL) and NVRTC; a tree nests 9.
WIDE = 16


def _propagating(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    """`fn` (te.max, te.min) over the operands (`_fold`), giving NaN when any float operand is
    NaN, as ONNX Max and Min do in onnxruntime and numpy; te.max keeps its first operand when
    they are unordered (what ReduceMax's scan order and Relu rely on). The NaN test is a tree
    of its own over the operands, not a select at each step: a step's select read its right
    operand, a whole subtree of a wide Max, three times (a 300-way Max grew past a million
    expression nodes). Where any operand is NaN, the sum of the operands is NaN: that is the
    result."""

    def combine(*values: Any) -> Any:
        out = _fold(fn)(*values)
        if not dt.is_float(out.dtype) or len(values) < 2:
            return out
        nan = _fold(lambda a, b: a | b)(*[v != v for v in values])
        return te.select(nan, _fold(lambda a, b: a + b)(*values), out)

    return combine


def _fold(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    """`fn` over the operands: left to right (the reference's order), or pairwise when wide."""

    def combine(*values: Any) -> Any:
        if len(values) > WIDE:
            half = len(values) // 2
            return fn(combine(*values[:half]), combine(*values[half:]))
        result = values[0]
        for v in values[1:]:
            result = fn(result, v)
        return result

    return combine


# A rational approximation of erf on [-4, 4] (the form Eigen and XLA use for float32): pure
# arithmetic, so it vectorizes, where libm's erf is called lane by lane. |error| < 5e-7.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)  # fmt: skip
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)  # fmt: skip


def fast_erf(x: Any) -> Any:
    """erf(x) for float32 as vectorizable arithmetic; other dtypes call `te.erf`."""
    if x.dtype != "float32":
        return te.erf(x)
    x = te.min(te.max(x, -4.0), 4.0)
    x2 = x * x
    p = te.const(_ERF_P[0], "float32")
    for c in _ERF_P[1:]:
        p = p * x2 + c
    q = te.const(_ERF_Q[0], "float32")
    for c in _ERF_Q[1:]:
        q = q * x2 + c
    return x * p / q


def _gelu(x: Any, attrs: dict[str, Any]) -> Any:
    if attrs.get("approximate", "none") == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + te.tanh(inner))
    return 0.5 * x * (1.0 + fast_erf(x * (1.0 / math.sqrt(2.0))))


def _leaky(x: Any, attrs: dict[str, Any]) -> Any:
    return te.select(x >= te.const(0, x.dtype), x, x * attrs["alpha"])


def _pow(a: Any, b: Any) -> Any:
    """ONNX Pow has the base's type. An integer base is raised in float64 and truncated back, as
    onnxruntime (std::pow) and the numpy kernel do; a float base takes the exponent as its type."""
    if dt.is_float(a.dtype):
        return te.power(a, b.astype(a.dtype))
    return te.power(a.astype("float64"), b.astype("float64")).astype(a.dtype)


# Pow by a constant exponent of these values, on floats, is multiplications: `llvm.pow` is libm's
# powf per vector lane (dynamo's tanh-GELU `Pow(x, 3)` made its GPT-2 MLP kernel 4x slower;
# LLaMA's RMSNorm writes `x.pow(2)`). One rounding for x * x, as powf; two for the higher
# powers, within an ulp of it.
_POWERS: dict[float, Callable[[Any], Any]] = {
    1.0: lambda x: x,
    2.0: lambda x: x * x,
    3.0: lambda x: x * x * x,
    4.0: lambda x: (x * x) * (x * x),
}


def _pow_rule(ctx: GroupContext, node: Node) -> list[Lazy]:
    shape, dtype = _out(ctx, node)
    exponent = ctx.constant(node.inputs[1])
    if dt.is_float(dtype) and exponent is not None and exponent.size == 1:
        power = _POWERS.get(float(exponent.reshape(())))
        if power is not None:
            read = broadcast_read(ctx.get(node.inputs[0]), shape)
            return [Lazy(shape, dtype, lambda idx: power(read(idx)))]
    return _nary(_pow)(ctx, node)


def _zero(x: Any) -> Any:
    return te.const(0, x.dtype)


def _softplus(x: Any) -> Any:
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))."""
    return te.max(x, _zero(x)) + te.log1p(te.exp(-te.abs(x)))


def _expm1(x: Any) -> Any:
    """exp(x) - 1, as onnxruntime computes the ELU family (vectorized exp, no libm call)."""
    return te.exp(x) - 1.0


def _elu(x: Any, attrs: dict[str, Any]) -> Any:
    neg = te.min(x, _zero(x))
    return te.select(x >= _zero(x), x, _expm1(neg) * float(attrs["alpha"]))


def _selu(x: Any, attrs: dict[str, Any]) -> Any:
    neg = te.min(x, _zero(x))
    inner = te.select(x > _zero(x), x, _expm1(neg) * float(attrs["alpha"]))
    return inner * float(attrs["gamma"])


def _celu(x: Any, attrs: dict[str, Any]) -> Any:
    alpha = float(attrs["alpha"])
    neg = te.min(x, _zero(x))
    return te.max(x, _zero(x)) + _expm1(neg * (1.0 / alpha)) * alpha


def _shrink(x: Any, attrs: dict[str, Any]) -> Any:
    lambd, bias = float(attrs["lambd"]), float(attrs["bias"])
    wide = x.astype("float64") if not dt.is_float(x.dtype) else x
    lo, hi = te.const(-lambd, wide.dtype), te.const(lambd, wide.dtype)
    out = te.select(wide < lo, wide + bias, te.select(wide > hi, wide - bias, _zero(wide)))
    return out.astype(x.dtype) if out.dtype != x.dtype else out


def _is_inf(x: Any, attrs: dict[str, Any]) -> Any:
    inf = te.const(math.inf, x.dtype)
    pos = (x == inf) if attrs["detect_positive"] else te.const(False, "bool")
    neg = (x == -inf) if attrs["detect_negative"] else te.const(False, "bool")
    return pos | neg


def _mean_rule(ctx: GroupContext, node: Node) -> list[Lazy]:
    count = len([i for i in node.inputs if i])
    return _nary(lambda *vs: _fold(lambda a, b: a + b)(*vs) / te.const(count, vs[0].dtype))(
        ctx, node
    )


def _sign(x: Any, attrs: dict[str, Any]) -> Any:
    one, zero = te.const(1, x.dtype), _zero(x)
    sign = te.select(x > zero, one, te.select(x < zero, -one, zero))
    return te.select(x != x, x, sign) if dt.is_float(x.dtype) else sign  # NaN stays NaN


def _mod(fmod: bool) -> Callable[[Any, Any], Any]:
    """ONNX Mod: fmod=1 C's remainder (the dividend's sign), fmod=0 the divisor's sign; an
    integer remainder by zero is 0 (as numpy gives) rather than a trap."""

    def fn(a: Any, b: Any) -> Any:
        if dt.is_float(a.dtype):
            r = te.fmod(a, b)
            if fmod:
                return r
            zero = _zero(r)
            return te.select((r != zero) & ((r < zero) != (b < zero)), r + b, r)
        zero = _zero(b)
        safe = te.select(b == zero, te.const(1, b.dtype), b)
        r = a - (a / safe) * safe if fmod else a % safe
        return te.select(b == zero, zero, r)

    return fn


def _mod_rule(ctx: GroupContext, node: Node) -> list[Lazy]:
    return _nary(_mod(bool(dict(node.attrs).get("fmod", 0))))(ctx, node)


def _clip(ctx: GroupContext, node: Node) -> list[Lazy]:
    x, lo, hi = (_inputs(ctx, node) + [None, None])[:3]
    shape, dtype = _out(ctx, node)

    def bound(b: Lazy | None, idx: Index, default: Any) -> Any:
        return default if b is None else b(()) if not b.shape else b(idx[-len(b.shape) :])

    # an absent bound is the type's lowest or largest finite value (ONNX's default), so a float
    # infinity clips to it, as in onnxruntime
    def fn(idx: Index) -> Any:
        v = x(idx)
        if lo is not None or dt.is_float(dtype):
            v = te.max(v, bound(lo, idx, te.min_value(dtype)))
        if hi is not None or dt.is_float(dtype):
            v = te.min(v, bound(hi, idx, te.max_value(dtype)))
        return v

    return [Lazy(shape, dtype, fn)]


def _cast(ctx: GroupContext, node: Node) -> list[Lazy]:
    x = ctx.get(node.inputs[0])  # (CastLike's second input gives only the dtype)
    src = ctx.type_of(node.inputs[0]).dtype
    shape, dtype = _out(ctx, node)
    if is_narrow(src) or is_narrow(dtype):  # bfloat16, float8, int4, ...: bit conversions
        attrs = get_op(node.op).full_attrs(node)
        saturate, mode = bool(attrs["saturate"]), str(attrs["round_mode"])
        return [Lazy(shape, storage_dtype(dtype),
                     lambda idx: cast_narrow(x(idx), src, dtype, saturate, mode))]  # fmt: skip
    return [Lazy(shape, dtype, lambda idx: x(idx).astype(dtype))]


def _bitcast(ctx: GroupContext, node: Node) -> list[Lazy]:
    """BitCast with float bits (between integers it expands to a Cast)."""
    x = ctx.get(node.inputs[0])
    shape, dtype = _out(ctx, node)
    return [Lazy(shape, dtype, lambda idx: te.reinterpret(x(idx), dtype))]


def _where(ctx: GroupContext, node: Node) -> list[Lazy]:
    shape, dtype = _out(ctx, node)
    c, a, b = (broadcast_read(x, shape) for x in _inputs(ctx, node))
    return [Lazy(shape, dtype, lambda idx: te.select(c(idx), a(idx), b(idx)))]


def _batch_norm(ctx: GroupContext, node: Node) -> list[Lazy]:
    x, scale, bias, mean, var = _inputs(ctx, node)
    shape, dtype = _out(ctx, node)
    eps = dict(node.attrs)["epsilon"]

    def fn(idx: Index) -> Any:
        c = (idx[1],)
        # the channel's factor first, as the reference and onnxruntime fold it: a zero scale
        # zeroes (x - mean) before a small variance could scale it past the type's range
        # (float16 x = -1e4, var 0, epsilon 0.01: -1e5 is inf, and inf * 0 NaN)
        factor = te.rsqrt(var(c) + eps) * scale(c)
        return (x(idx) - mean(c)) * factor + bias(c)

    return [Lazy(shape, dtype, fn)]


# ---- injective --------------------------------------------------------------------------------


def _reshape(ctx: GroupContext, node: Node) -> list[Lazy]:
    shape, _ = _out(ctx, node)
    return [reshape_lazy(ctx.get(node.inputs[0]), shape)]


def _transpose(ctx: GroupContext, node: Node) -> list[Lazy]:
    x = ctx.get(node.inputs[0])
    shape, dtype = _out(ctx, node)
    perm = dict(node.attrs).get("perm") or tuple(reversed(range(len(shape))))

    def fn(idx: Index) -> Any:
        src = [None] * len(perm)
        for out_axis, in_axis in enumerate(perm):
            src[in_axis] = idx[out_axis]
        return x(tuple(src))

    return [Lazy(shape, dtype, fn)]


def _expand(ctx: GroupContext, node: Node) -> list[Lazy]:
    shape, dtype = _out(ctx, node)
    return [Lazy(shape, dtype, broadcast_read(ctx.get(node.inputs[0]), shape))]


def _concat(ctx: GroupContext, node: Node) -> list[Lazy]:
    shape, dtype = _out(ctx, node)
    axis = dict(node.attrs)["axis"] % len(shape)
    parts = [x for x in _inputs(ctx, node) if x is not None and x.shape[axis] > 0]

    starts = [int(s) for s in np.cumsum([0] + [p.shape[axis] for p in parts])]

    def read(idx: Index, k: int) -> Any:
        shifted = idx[:axis] + (idx[axis] - starts[k],) + idx[axis + 1 :]
        return parts[k](shifted)

    def pick(idx: Index, lo: int, hi: int) -> Any:  # parts lo..hi-1: halves when wide
        if hi - lo > WIDE:
            mid = (lo + hi) // 2
            return te.if_then_else(idx[axis] >= starts[mid], pick(idx, mid, hi), pick(idx, lo, mid))
        value = read(idx, lo)  # the first part, then each later part from its start on
        for k in range(lo + 1, hi):
            value = te.if_then_else(idx[axis] >= starts[k], read(idx, k), value)
        return value

    return [Lazy(shape, dtype, lambda idx: pick(idx, 0, len(parts)))]


def _slices(ctx: GroupContext, node: Node, x: Lazy, index: tuple, k: int = 0) -> Lazy:
    shape, dtype = _out(ctx, node, k)
    starts, steps = [], []
    for dim, sl in zip(x.shape, index, strict=True):
        start, _, step = sl.indices(dim)
        starts.append(start)
        steps.append(step)

    def fn(idx: Index) -> Any:
        return x(
            tuple(
                i * step + start if (step, start) != (1, 0) else i
                for i, start, step in zip(idx, starts, steps, strict=True)
            )
        )

    return Lazy(shape, dtype, fn)


def const_input(ctx: GroupContext, node: Node, k: int) -> Any:
    if k >= len(node.inputs) or not node.inputs[k]:
        return None
    value = ctx.constant(node.inputs[k])
    if value is None:
        raise LoweringError(f"input {k} of {node.op} node {node.name!r} must be a constant")
    return value


def _slice(ctx: GroupContext, node: Node) -> list[Lazy]:
    x = ctx.get(node.inputs[0])
    args = [const_input(ctx, node, k) for k in range(1, 5)]
    return [_slices(ctx, node, x, slice_index(x.shape, *args))]


def _split(ctx: GroupContext, node: Node) -> list[Lazy]:
    x = ctx.get(node.inputs[0])
    attrs = dict(node.attrs)
    axis = attrs["axis"] % len(x.shape)
    sizes = split_sizes(
        {**attrs, "num_outputs": attrs.get("num_outputs") or len(node.outputs)},
        x.shape[axis],
        const_input(ctx, node, 1),
    )
    result, start = [], 0
    for k, size in enumerate(sizes):
        index = [slice(None)] * len(x.shape)
        index[axis] = slice(start, start + size)
        result.append(_slices(ctx, node, x, tuple(index), k) if node.outputs[k] else None)
        start += size
    return result


def _gather(ctx: GroupContext, node: Node) -> list[Lazy]:
    x, ind = _inputs(ctx, node)
    shape, dtype = _out(ctx, node)
    axis = dict(node.attrs)["axis"] % len(x.shape)
    rank = len(ind.shape)

    n = x.shape[axis]

    def fn(idx: Index) -> Any:
        i = ind(idx[axis : axis + rank])
        i = te.select(i < 0, i + n, i)
        # an index out of [-n, n) (an error in onnxruntime) is clamped into the axis, as TVM's
        # take does: the kernel never reads outside the data (a run-time index of 10**9 read
        # far past it and crashed); clamped in the index's own type, then narrowed
        i = te.max(te.min(i, te.const(n - 1, i.dtype)), te.const(0, i.dtype)).astype("int32")
        return x(idx[:axis] + (i,) + idx[axis + rank :])

    return [Lazy(shape, dtype, fn)]


def _squeeze_like(fn: Callable[[tuple[int, ...], Any], tuple[int, ...]]) -> Rule:
    def rule(ctx: GroupContext, node: Node) -> list[Lazy]:
        shape, _ = _out(ctx, node)
        return [reshape_lazy(ctx.get(node.inputs[0]), shape)]

    return rule


def _pad(ctx: GroupContext, node: Node) -> list[Lazy]:
    x = ctx.get(node.inputs[0])
    shape, dtype = _out(ctx, node)
    mode = dict(node.attrs)["mode"]
    widths = pad_widths(len(x.shape), const_input(ctx, node, 1), const_input(ctx, node, 3))
    if mode != "constant":
        return [Lazy(shape, dtype, _pad_source(x, widths, mode, node))]
    fill_expr = _pad_fill(ctx, node, dtype)

    def fn(idx: Index) -> Any:
        src = tuple(i - lo if lo else i for i, (lo, _) in zip(idx, widths, strict=True))
        conds = []
        for i, (lo, _), dim in zip(src, widths, x.shape, strict=True):
            conds += [i >= 0] if lo else []
            conds += [i < dim] if lo or _ else []
        return te.if_then_else(te.all_of(*conds), x(src), fill_expr) if conds else x(src)

    return [Lazy(shape, dtype, fn)]


def _pad_fill(ctx: GroupContext, node: Node, dtype: str) -> Any:
    """Pad's constant_value: absent or empty means 0; a constant or a run-time scalar."""
    name = node.inputs[2] if len(node.inputs) > 2 else ""
    const = ctx.constant(name) if name else None
    if not name or (const is not None and const.size == 0):
        return te.const(0, dtype)
    fill = ctx.get(name)
    return fill((0,) * len(fill.shape))


def _pad_source(x: Lazy, widths: list[tuple[int, int]], mode: str, node: Node) -> Any:
    """Edge, reflect and wrap padding as numpy does them: negative widths crop first, then each
    output index maps to an index of the cropped range (clamped, mirrored without repeating
    the edge, or taken modulo its length)."""
    if mode not in ("edge", "reflect", "wrap"):
        raise LoweringError(
            f"Pad mode must be constant, edge, reflect or wrap, not {mode!r} (node {node.name!r})"
        )
    axes = []
    for dim, (lo, hi) in zip(x.shape, widths, strict=True):
        start, n = max(0, -lo), dim - max(0, -lo) - max(0, -hi)
        axes.append((start, n, max(0, lo), max(0, lo) or max(0, hi)))

    def fn(idx: Index) -> Any:
        src = []
        for i, (start, n, before, padded) in zip(idx, axes, strict=True):
            j = i - before if before else i
            if padded:
                j = _pad_index(j, n, mode)
            src.append(j + start if start else j)
        return x(tuple(src))

    return fn


def _pad_index(j: Any, n: int, mode: str) -> Any:
    """Index `j` (any integer) of a padded axis mapped into `[0, n)` by `mode`."""
    if mode == "edge" or n == 1:
        return te.min(te.max(j, 0), n - 1)
    if mode == "wrap":
        return j % n
    period = 2 * (n - 1)
    t = j % period
    return te.select(t < n, t, period - t)


def _bitshift(ctx: GroupContext, node: Node) -> list[Lazy]:
    """`<<` / `>>` of the te layer: numpy's shifts at every amount, as ONNX BitShift (an amount
    of the width or more, or a negative one, shifts every bit out: 0, or -1 for `>>` of a
    negative X)."""
    left = node.attr("direction") == "LEFT"
    return _nary(lambda x, y: x << y if left else x >> y)(ctx, node)


ELEMENTWISE: dict[str, Rule] = {
    "Relu": _unary(lambda x, a: te.max(x, _zero(x))),
    "Identity": _unary(lambda x, a: x),
    "Neg": _unary(lambda x, a: -x),
    "Abs": _unary(lambda x, a: te.abs(x)),
    "Sigmoid": _unary(lambda x, a: te.sigmoid(x)),
    "Tanh": _unary(lambda x, a: te.tanh(x)),
    "Erf": _unary(lambda x, a: fast_erf(x)),
    "Gelu": _unary(_gelu),
    "HardSwish": _unary(lambda x, a: x * te.min(te.max(x * (1.0 / 6.0) + 0.5, 0.0), 1.0)),
    "HardSigmoid": _unary(
        lambda x, a: te.min(te.max(x * float(a["alpha"]) + float(a["beta"]), 0.0), 1.0)
    ),
    "LeakyRelu": _unary(_leaky),
    "PRelu": _nary(lambda x, slope: te.select(x < _zero(x), x * slope, x)),
    "Softplus": _unary(lambda x, a: _softplus(x)),
    "Softsign": _unary(lambda x, a: x / (te.abs(x) + 1.0)),
    "Mish": _unary(lambda x, a: x * te.tanh(_softplus(x))),
    "Elu": _unary(_elu),
    "Selu": _unary(_selu),
    "Celu": _unary(_celu),
    "ThresholdedRelu": _unary(lambda x, a: te.select(x > float(a["alpha"]), x, _zero(x))),
    "Shrink": _unary(_shrink),
    "IsNaN": _unary(lambda x, a: x != x),
    "IsInf": _unary(_is_inf),
    **{
        op: _unary(lambda x, a, fn=fn: fn(x))
        for op, fn in (
            ("Sin", te.sin),
            ("Cos", te.cos),
            ("Tan", te.tan),
            ("Asin", te.asin),
            ("Acos", te.acos),
            ("Atan", te.atan),
            ("Sinh", te.sinh),
            ("Cosh", te.cosh),
            ("Asinh", te.asinh),
            ("Acosh", te.acosh),
            ("Atanh", te.atanh),
        )
    },  # fmt: skip
    "Sqrt": _unary(lambda x, a: te.sqrt(x)),
    "Exp": _unary(lambda x, a: te.exp(x)),
    "Log": _unary(lambda x, a: te.log(x)),
    "Reciprocal": _unary(lambda x, a: 1.0 / x),
    "Floor": _unary(lambda x, a: te.floor(x)),
    "Ceil": _unary(lambda x, a: te.ceil(x)),
    "Round": _unary(lambda x, a: te.round(x)),
    "Sign": _unary(_sign),
    "Not": _unary(lambda x, a: ~x),
    "Add": _nary(lambda a, b: a + b),
    "Sub": _nary(lambda a, b: a - b),
    "Mul": _nary(lambda a, b: a * b),
    "Div": _nary(lambda a, b: a / b),
    "Pow": _pow_rule,
    "Max": _nary(_propagating(te.max)),
    "Min": _nary(_propagating(te.min)),
    "Sum": _nary(_fold(lambda a, b: a + b)),
    "Mean": _mean_rule,
    "Mod": _mod_rule,
    "Equal": _nary(lambda a, b: a == b),
    "Less": _nary(lambda a, b: a < b),
    "Greater": _nary(lambda a, b: a > b),
    "LessOrEqual": _nary(lambda a, b: a <= b),
    "GreaterOrEqual": _nary(lambda a, b: a >= b),
    "And": _nary(lambda a, b: a & b),
    "Or": _nary(lambda a, b: a | b),
    "Xor": _nary(lambda a, b: a != b),
    "BitwiseAnd": _nary(lambda a, b: a & b),
    "BitwiseOr": _nary(lambda a, b: a | b),
    "BitwiseXor": _nary(lambda a, b: a ^ b),
    "BitwiseNot": _unary(lambda x, a: ~x),
    "BitShift": _bitshift,
    "Clip": _clip,
    "Cast": _cast,
    "CastLike": _cast,
    "BitCast": _bitcast,
    "Where": _where,
    "BatchNormalization": _batch_norm,
    "Reshape": _reshape,
    "Flatten": _reshape,
    "Squeeze": _squeeze_like(squeezed),
    "Unsqueeze": _squeeze_like(unsqueezed),
    "Transpose": _transpose,
    "Expand": _expand,
    "Concat": _concat,
    "Slice": _slice,
    "Split": _split,
    "Gather": _gather,
    "Pad": _pad,
}
