"""Small operator definitions (topi-free) with numpy references, for compiler tests.

Each builder returns an `Op`: the argument tensors (inputs then output), the named intermediate
tensors schedules refer to, and a numpy reference of the output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorforge.compiler import te, tir


def sum_atol(reference: np.ndarray, floor: float = 1e-5) -> float:
    """The absolute tolerance for float32 results that are long sums (convolutions, matmuls,
    reductions) compared with another runtime's. Rounding error grows with the magnitude of the
    terms summed, not of the result: an output near zero that is the difference of large partial
    sums carries their error. The largest output stands for that magnitude; 4e-6 of it is some
    32 ulps, what a different summation order (another vector width, another blocking) gives
    over sums of a few thousand terms."""
    if not np.issubdtype(reference.dtype, np.floating):
        return floor
    finite = np.abs(reference[np.isfinite(reference)])  # inf and nan are compared as such
    return max(floor, 4e-6 * float(finite.max(initial=0.0)))


@dataclass
class Op:
    args: list[te.Tensor]
    reference: Callable[..., np.ndarray]
    parts: dict[str, te.Tensor] = field(default_factory=dict)

    @property
    def out(self) -> te.Tensor:
        return self.args[-1]


def matmul(n: int = 6, m: int = 5, p: int = 7, dtype: str = "float32") -> Op:
    A = te.placeholder((n, m), dtype, name="A")
    B = te.placeholder((m, p), dtype, name="B")
    k = te.reduce_axis((0, m), "k")
    C = te.compute((n, p), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return Op([A, B, C], lambda a, b: a @ b)


def batch_matmul(b: int = 2, n: int = 4, m: int = 5, p: int = 3) -> Op:
    A = te.placeholder((b, n, m), name="A")
    B = te.placeholder((b, m, p), name="B")
    k = te.reduce_axis((0, m), "k")
    C = te.compute((b, n, p), lambda bb, i, j: te.sum(A[bb, i, k] * B[bb, k, j], axis=k), name="C")
    return Op([A, B, C], lambda a, bm: np.matmul(a, bm))


def _pad(data: te.Tensor, pad: int, value: float = 0.0) -> te.Tensor:
    n, c, h, w = data.shape

    def fpad(nn: Any, cc: Any, y: Any, x: Any) -> te.Expr:
        inside = te.all_of(y >= pad, y < h + pad, x >= pad, x < w + pad)
        return te.if_then_else(inside, data[nn, cc, y - pad, x - pad], value)

    return te.compute((n, c, h + 2 * pad, w + 2 * pad), fpad, name=f"{data.name}_pad")


def _windows(x: np.ndarray, r: int, s: int, stride: int, dil: int, oh: int, ow: int):
    """x: (N, C, H, W) padded -> (N, C, OH, OW, R, S) windows."""
    out = np.empty(x.shape[:2] + (oh, ow, r, s), x.dtype)
    for y in range(oh):
        for z in range(ow):
            ys, zs = y * stride, z * stride
            out[:, :, y, z] = x[
                :, :, ys : ys + dil * (r - 1) + 1 : dil, zs : zs + dil * (s - 1) + 1 : dil
            ]
    return out


def _np_pad(x: np.ndarray, pad: int, value: float = 0.0) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=value)


def conv2d(
    n: int = 1,
    c: int = 2,
    h: int = 6,
    w: int = 6,
    k: int = 3,
    r: int = 3,
    s: int = 3,
    stride: int = 1,
    pad: int = 1,
    dil: int = 1,
) -> Op:
    A = te.placeholder((n, c, h, w), name="A")
    W = te.placeholder((k, c, r, s), name="W")
    P = _pad(A, pad)
    oh = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (s - 1) - 1) // stride + 1
    rc, ry, rx = (
        te.reduce_axis((0, c), "rc"),
        te.reduce_axis((0, r), "ry"),
        te.reduce_axis((0, s), "rx"),
    )
    Out = te.compute(
        (n, k, oh, ow),
        lambda nn, kk, y, x: te.sum(
            P[nn, rc, y * stride + ry * dil, x * stride + rx * dil] * W[kk, rc, ry, rx],
            axis=[rc, ry, rx],
        ),
        name="Out",
    )

    def ref(a: np.ndarray, wt: np.ndarray) -> np.ndarray:
        win = _windows(_np_pad(a, pad), r, s, stride, dil, oh, ow)
        return np.einsum("ncyxrs,kcrs->nkyx", win, wt)

    return Op([A, W, Out], ref, {"pad": P})


def depthwise_conv2d(
    n: int = 1,
    c: int = 3,
    h: int = 6,
    w: int = 6,
    r: int = 3,
    s: int = 3,
    stride: int = 1,
    pad: int = 1,
) -> Op:
    A = te.placeholder((n, c, h, w), name="A")
    W = te.placeholder((c, 1, r, s), name="W")
    P = _pad(A, pad)
    oh = (h + 2 * pad - r) // stride + 1
    ow = (w + 2 * pad - s) // stride + 1
    ry, rx = te.reduce_axis((0, r), "ry"), te.reduce_axis((0, s), "rx")
    Out = te.compute(
        (n, c, oh, ow),
        lambda nn, cc, y, x: te.sum(
            P[nn, cc, y * stride + ry, x * stride + rx] * W[cc, 0, ry, rx], axis=[ry, rx]
        ),
        name="Out",
    )

    def ref(a: np.ndarray, wt: np.ndarray) -> np.ndarray:
        win = _windows(_np_pad(a, pad), r, s, stride, 1, oh, ow)
        return np.einsum("ncyxrs,crs->ncyx", win, wt[:, 0])

    return Op([A, W, Out], ref, {"pad": P})


def pool2d(
    kind: str,
    n: int = 1,
    c: int = 2,
    h: int = 7,
    w: int = 7,
    size: int = 3,
    stride: int = 2,
    pad: int = 1,
) -> Op:
    A = te.placeholder((n, c, h, w), name="A")
    low = -3.4028234663852886e38
    P = _pad(A, pad, low if kind == "max" else 0.0)
    oh = (h + 2 * pad - size) // stride + 1
    ow = (w + 2 * pad - size) // stride + 1
    ry, rx = te.reduce_axis((0, size), "ry"), te.reduce_axis((0, size), "rx")
    reducer = te.max if kind == "max" else te.sum
    R = te.compute(
        (n, c, oh, ow),
        lambda nn, cc, y, x: reducer(P[nn, cc, y * stride + ry, x * stride + rx], axis=[ry, rx]),
        name="Pool",
    )
    parts = {"pad": P}
    if kind == "avg":
        parts["sum"] = R
        R = te.compute(R.shape, lambda *i: R[i] / float(size * size), name="Avg")

    def ref(a: np.ndarray) -> np.ndarray:
        win = _windows(
            _np_pad(a, pad, low if kind == "max" else 0.0), size, size, stride, 1, oh, ow
        )
        return win.max(axis=(4, 5)) if kind == "max" else win.mean(axis=(4, 5))

    return Op([A, R], ref, parts)


def softmax(n: int = 3, m: int = 6) -> Op:
    X = te.placeholder((n, m), name="X")
    k1, k2 = te.reduce_axis((0, m), "k1"), te.reduce_axis((0, m), "k2")
    Mx = te.compute((n,), lambda i: te.max(X[i, k1], axis=k1), name="Max")
    E = te.compute((n, m), lambda i, j: te.exp(X[i, j] - Mx[i]), name="Exp")
    S = te.compute((n,), lambda i: te.sum(E[i, k2], axis=k2), name="Sum")
    Y = te.compute((n, m), lambda i, j: E[i, j] / S[i], name="Softmax")

    def ref(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return Op([X, Y], ref, {"max": Mx, "exp": E, "sum": S})


def layer_norm(n: int = 3, m: int = 8, eps: float = 1e-5) -> Op:
    X = te.placeholder((n, m), name="X")
    G = te.placeholder((m,), name="gamma")
    B = te.placeholder((m,), name="beta")
    k1, k2 = te.reduce_axis((0, m), "k1"), te.reduce_axis((0, m), "k2")
    Mean = te.compute((n,), lambda i: te.sum(X[i, k1], axis=k1), name="Sum")
    Mu = te.compute((n,), lambda i: Mean[i] / float(m), name="Mean")
    D = te.compute((n, m), lambda i, j: X[i, j] - Mu[i], name="Dev")
    V = te.compute((n,), lambda i: te.sum(D[i, k2] * D[i, k2], axis=k2), name="Var")
    Y = te.compute(
        (n, m), lambda i, j: D[i, j] * te.rsqrt(V[i] / float(m) + eps) * G[j] + B[j], name="LN"
    )

    def ref(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
        mu = x.mean(axis=1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g + b

    return Op([X, G, B, Y], ref, {"sum": Mean, "mean": Mu, "dev": D, "var": V})


def random_inputs(op: Op, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for t in op.args[:-1]:
        if t.dtype.startswith("float"):
            arrays.append(rng.uniform(-1, 1, t.shape).astype(t.dtype))
        else:
            arrays.append(rng.integers(-8, 8, t.shape).astype(t.dtype))
    return arrays


def run(op: Op, sch: Any, seed: int = 0, check_raw: bool = True) -> np.ndarray:
    """Lower `sch`, run it (and its unoptimised IR) through the interpreter, return the output."""
    inputs = random_inputs(op, seed)
    out = op.out
    results = []
    pipelines = [None, []] if check_raw else [None]
    for passes in pipelines:
        func = tir.lower(sch, op.args, name="kernel", passes=passes)
        result = np.zeros(out.shape, out.dtype)
        tir.interpret(func, [*inputs, result])
        results.append(result)
    if check_raw:
        np.testing.assert_array_equal(results[0], results[1])
    return results[0]


def check(op: Op, sch: Any, rtol: float = 1e-5, atol: float = 1e-5, seed: int = 0) -> None:
    """The schedule's result equals the numpy reference (loop-IR interpreter vs numpy)."""
    inputs = random_inputs(op, seed)
    expected = op.reference(*inputs)
    np.testing.assert_allclose(run(op, sch, seed), expected, rtol=rtol, atol=atol)


# ---- unsigned integers: every operation that differs from signed, with numpy as the oracle ----

UNSIGNED = ("uint8", "uint16", "uint32", "uint64")


def unsigned_ops(dtype: str, n: int = 37) -> tuple[list[te.Tensor], list[te.Tensor], Callable]:
    """(inputs A and B, one output per operation, numpy reference of the outputs). Wrapping
    + - * and negation, division and remainder of values past the signed range, min/max and <,
    a literal of the type's maximum, a logical right shift, widening and float conversions."""
    bits = np.iinfo(dtype).bits
    top = int(np.iinfo(dtype).max)
    A, B = te.placeholder((n,), dtype, name="A"), te.placeholder((n,), dtype, name="B")
    exprs = {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "neg": lambda a, b: -a,
        "div": lambda a, b: a / b,
        "floordiv": lambda a, b: a // b,
        "mod": lambda a, b: a % b,
        "min": lambda a, b: te.min(a, b),
        "max": lambda a, b: te.max(a, b),
        "less": lambda a, b: a < b,
        "plus_max": lambda a, b: a + top,
        "shift": lambda a, b: te.shift_right(a, bits - 1),
        "widen": lambda a, b: a.astype("uint64") + b.astype("uint64"),
        "to_float": lambda a, b: a.astype("float64"),
        "from_float": lambda a, b: (a.astype("float64") * 0.5).astype(dtype),
    }
    outs = [_elementwise(f, A, B, k) for k, f in exprs.items()]

    def reference(a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        t = a.dtype.type
        with np.errstate(over="ignore"):
            return [
                a + b, a - b, a * b, t(0) - a, a // b, a // b, a % b,
                np.minimum(a, b), np.maximum(a, b), a < b, a + t(top), a >> t(bits - 1),
                a.astype(np.uint64) + b.astype(np.uint64), a.astype(np.float64),
                (a.astype(np.float64) * 0.5).astype(dtype),
            ]  # fmt: skip

    return [A, B], outs, reference


def _elementwise(f: Callable, A: te.Tensor, B: te.Tensor, name: str) -> te.Tensor:
    return te.compute(A.shape, lambda i: f(A[i], B[i]), name=name)


def unsigned_inputs(dtype: str, n: int = 37, seed: int = 0) -> list[np.ndarray]:
    """A and B over the whole range of `dtype`, the edges (0, 1, the signed range's end, the
    maximum) included; B has no zero (it divides)."""
    info = np.iinfo(dtype)
    half = 1 << (info.bits - 1)
    edges = np.array([0, 1, half - 1, half, half + 1, info.max - 1, info.max], dtype)
    rng = np.random.default_rng(seed)
    a, b = (rng.integers(0, info.max, n, dtype=dtype, endpoint=True) for _ in range(2))
    a[: edges.size], b[-edges.size :] = edges, edges[::-1]
    return [a, np.maximum(b, 1)]


# ---- integer bitwise operators: every dtype, numpy as the oracle ------------------------------

INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def bitwise_ops(dtype: str, n: int = 37) -> tuple[list[te.Tensor], list[te.Tensor], Callable]:
    """(inputs A, B and shift amounts S, one output per operation, numpy reference). `& | ^ ~`
    of values over the whole range (negatives of signed types), `<<` and `>>` by amounts past
    the width and (signed) negative ones, which numpy defines (0, or the sign bits of a right
    shift), literals (a mask, the type's all-ones, a constant amount past the width), an int32
    loop index in a bitwise expression, and a mixed chain."""
    bits = np.iinfo(dtype).bits
    A, B = te.placeholder((n,), dtype, name="A"), te.placeholder((n,), dtype, name="B")
    S = te.placeholder((n,), dtype, name="S")
    exprs: dict[str, Callable[[Any, Any, Any, Any], Any]] = {
        "and": lambda i, a, b, s: a & b,
        "or": lambda i, a, b, s: a | b,
        "xor": lambda i, a, b, s: a ^ b,
        "not": lambda i, a, b, s: ~a,
        "shl": lambda i, a, b, s: a << s,
        "shr": lambda i, a, b, s: a >> s,
        "literals": lambda i, a, b, s: ((a & 0x5A) | 3) ^ -1,
        "shift_past_width": lambda i, a, b, s: (a << (bits + 1)) | (a >> (bits + 1)),
        "index": lambda i, a, b, s: a ^ (i & 7).astype(dtype),
        "chain": lambda i, a, b, s: ~((a << 1) & (b >> 2)) + (a ^ b),
    }
    outs = [_indexed(f, A, B, S, name) for name, f in exprs.items()]

    def reference(a: np.ndarray, b: np.ndarray, s: np.ndarray) -> list[np.ndarray]:
        t = a.dtype.type
        i = np.arange(n).astype(dtype)
        with np.errstate(over="ignore"):
            return [
                a & b, a | b, a ^ b, ~a, a << s, a >> s,
                ((a & t(0x5A)) | t(3)) ^ ~t(0),
                (a << t(bits + 1)) | (a >> t(bits + 1)),
                a ^ (i & t(7)),
                ~((a << t(1)) & (b >> t(2))) + (a ^ b),
            ]  # fmt: skip

    return [A, B, S], outs, reference


def _indexed(f: Callable, A: te.Tensor, B: te.Tensor, S: te.Tensor, name: str) -> te.Tensor:
    return te.compute(A.shape, lambda i: f(i, A[i], B[i], S[i]), name=name)


def bitwise_inputs(dtype: str, n: int = 37, seed: int = 0) -> list[np.ndarray]:
    """A and B over the whole range of `dtype` (its edges included), S amounts of 0 to twice the
    width, the edges of the width, the type's maximum and, signed, -1 and the minimum."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    a, b = (rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True) for _ in range(2))
    edges = [0, 1, -1, info.min, info.max] if info.min else [0, 1, info.max, info.max >> 1]
    a[: len(edges)] = b[-len(edges) :] = np.array(edges, dtype)
    s = rng.integers(0, 2 * info.bits + 1, n).astype(dtype)
    amounts = [0, 1, info.bits - 1, info.bits, info.bits + 1, info.max]
    amounts += [-1, info.min] if info.min else []
    s[: len(amounts)] = np.array(amounts, dtype)
    return [a, b, s]


def per_channel_requant(
    acc: np.ndarray,
    multipliers: Any,
    shift: int,
    pre_shift: int = 0,
    lo: int = -127,
    hi: int = 127,
    rounding: bool = False,
) -> np.ndarray:
    """The per-channel requantization in Python integers (no ALU model): clip(floor(floor(acc_c /
    2**pre_shift) * m_c / 2**shift [+ 1/2])), channels on axis 1, as int8."""
    m = np.array(multipliers, dtype=object).reshape((1, -1) + (1,) * (acc.ndim - 2))
    scaled = (acc.astype(object) // 2**pre_shift) * m
    if rounding:
        scaled = scaled + (1 << (shift - 1))
    return np.clip(scaled // 2**shift, lo, hi).astype(np.int8)
