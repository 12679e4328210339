"""The int8 numpy reference of quantized operators: the oracle the accelerator must match.

Each operator takes int8 activations and weights, accumulates in ``acc_width``-bit wrapping
integers as the GEMM core does, adds an int32 bias at the accumulator scale, and (when given
``RequantParams``) requantizes with the ALU's exact steps (shift/multiply, rounding, ReLU and
clipping as MAX/MIN), returning int8 as the OUT buffer holds it (the low ``out_width`` bits of
ACC). Layouts are the unblocked ones: NCHW activations, OIHW conv weights, ``(out, in)`` dense
weights (ONNX Gemm with ``transB=1``); packing to the accelerator's blocked layouts does not
change the values.

Example:
    >>> import numpy as np
    >>> x = np.ones((1, 1, 3, 3), np.int8)
    >>> w = np.ones((1, 1, 3, 3), np.int8)
    >>> conv2d_int8(x, w, padding=1)[0, 0].tolist()
    [[4, 6, 4], [6, 9, 6], [4, 6, 4]]
"""

from __future__ import annotations

import numpy as np

from ...hw.isa import wrap
from .requant import RequantParams, apply_requant

# Partial sums of int8 products stay far below 2**53, so float64 BLAS matmuls are exact and
# much faster than numpy's integer matmul.
_EXACT_FLOAT_LIMIT = 1 << 53


def _as_int8(x: np.ndarray, what: str, op: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.int8:
        raise TypeError(f"{op}: {what} must be int8, not {x.dtype}")
    return x


def _pair(v: int | tuple[int, int], what: str, op: str) -> tuple[int, int]:
    pair = (v, v) if isinstance(v, int) else tuple(v)
    if len(pair) != 2 or any(not isinstance(p, int) for p in pair):
        raise ValueError(f"{op}: {what} must be an int or a pair of ints, not {v!r}")
    return pair  # type: ignore[return-value]


def _exact_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer a @ b, exact, through float64 when the sums cannot lose precision."""
    bound = int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0)) * a.shape[-1]
    if bound < _EXACT_FLOAT_LIMIT:
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
    return a.astype(np.int64) @ b.astype(np.int64)


def conv2d_nchw(
    x: np.ndarray,
    w: np.ndarray,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    groups: int = 1,
) -> np.ndarray:
    """Plain 2-D convolution (cross-correlation) of NCHW ``x`` with OIHW ``w``, zero padding.

    With ``groups`` > 1, ``w`` is (O, C / groups, KH, KW) and output channels ``g * O / groups``
    onwards read only input channels ``g * C / groups`` onwards (depthwise: ``groups == C``).
    Integer inputs give exact int64 sums; float inputs give float64. The shared im2col core of
    the int8 reference and of float evaluation in calibration.
    """
    (sh, sw), (ph, pw) = _pair(stride, "stride", "conv2d"), _pair(padding, "padding", "conv2d")
    if not isinstance(groups, int) or groups < 1 or w.ndim != 4 or w.shape[0] % groups:
        raise ValueError(f"conv2d: groups must be an int >= 1 dividing O, not {groups!r} "
                         f"(w{w.shape})")  # fmt: skip
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1] * groups:
        grouped = f" (C = {groups} groups x w's I)" if groups > 1 else ""
        raise ValueError(
            f"conv2d: x (NCHW) and w (OIHW) must agree on C{grouped}, not x{x.shape} and w{w.shape}"
        )
    if groups > 1:
        cg, og = w.shape[1], w.shape[0] // groups
        parts = [
            conv2d_nchw(x[:, g * cg : (g + 1) * cg], w[g * og : (g + 1) * og], stride, padding)
            for g in range(groups)
        ]
        return np.concatenate(parts, axis=1)
    if min(sh, sw) < 1 or min(ph, pw) < 0:
        raise ValueError(f"conv2d: stride must be >= 1 and padding >= 0, not {stride}, {padding}")
    n, c, _, _ = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    if xp.shape[2] < kh or xp.shape[3] < kw:
        raise ValueError(f"conv2d: kernel {kh}x{kw} must fit the padded input {xp.shape[2:]}")
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    oh, ow = win.shape[2], win.shape[3]
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    wmat = w.reshape(o, c * kh * kw).T
    if np.issubdtype(x.dtype, np.integer) and np.issubdtype(w.dtype, np.integer):
        out = _exact_matmul(cols, wmat)
    else:
        out = cols.astype(np.float64) @ wmat.astype(np.float64)
    return out.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)


def _finish(
    acc: np.ndarray,
    bias: np.ndarray | None,
    channel_axis: int,
    requant: RequantParams | None,
    acc_width: int,
    op: str,
) -> np.ndarray:
    """Bias add, accumulator wrap, then requantization to int8 (or the int32 accumulators)."""
    if bias is not None:
        bias = np.asarray(bias)
        if not np.issubdtype(bias.dtype, np.integer) or bias.shape != (acc.shape[channel_axis],):
            raise ValueError(
                f"{op}: bias must be integer of shape ({acc.shape[channel_axis]},), "
                f"not {bias.dtype}{bias.shape}"
            )
        shape = [1] * acc.ndim
        shape[channel_axis] = -1
        acc = acc + bias.astype(np.int64).reshape(shape)
    if requant is not None:
        acc_width = requant.acc_width
    acc = wrap(acc, acc_width)
    if requant is None:
        return acc.astype(np.int32 if acc_width <= 32 else np.int64)
    return wrap(apply_requant(acc, requant, channel_axis), 8).astype(np.int8)


def conv2d_int8(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    requant: RequantParams | None = None,
    acc_width: int = 32,
    groups: int = 1,
) -> np.ndarray:
    """Quantized conv2d: int8 NCHW x int8 OIHW (+ int32 bias) -> requantized int8 NCHW.

    Args:
        x: int8 activations, N x C x H x W.
        w: int8 weights, O x C/groups x KH x KW.
        bias: integer bias per output channel at the accumulator scale, or None.
        stride, padding: an int or an (h, w) pair; padding is with zeros (the zero point).
        requant: the ALU requantization (with fused ReLU/clip); None returns the accumulators.
        acc_width: accumulator width when ``requant`` is None (else ``requant.acc_width``).
        groups: grouped convolution (``conv2d_nchw``); ``C`` for depthwise.

    Returns:
        int8 N x O x OH x OW, or the wrapped accumulators (int32) when ``requant`` is None.

    Raises:
        TypeError: if x or w is not int8.
        ValueError: for mismatched shapes, bad stride/padding or a bias of the wrong shape.
    """
    x, w = _as_int8(x, "x", "conv2d"), _as_int8(w, "w", "conv2d")
    acc = conv2d_nchw(x, w, stride, padding, groups)
    return _finish(acc, bias, 1, requant, acc_width, "conv2d")


def dense_int8(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    requant: RequantParams | None = None,
    acc_width: int = 32,
) -> np.ndarray:
    """Quantized dense: int8 ``x`` (N x K) times int8 ``w`` (M x K) transposed, + bias.

    Same conventions as ``conv2d_int8``; returns int8 N x M (or the int32 accumulators).
    """
    x, w = _as_int8(x, "x", "dense"), _as_int8(w, "w", "dense")
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(
            f"dense: x (N x K) and w (M x K) must agree on K, not x{x.shape} and w{w.shape}"
        )
    return _finish(_exact_matmul(x, w.T), bias, 1, requant, acc_width, "dense")


def max_pool2d_int8(
    x: np.ndarray, kernel: int | tuple[int, int] = 2, stride: int | tuple[int, int] | None = None
) -> np.ndarray:
    """Max pooling of int8 NCHW (no padding); on the accelerator a chain of ALU MAX steps.

    Max pooling commutes with every monotonic requantization, so it runs on int8 values.
    """
    x = _as_int8(x, "x", "max_pool2d")
    (kh, kw) = _pair(kernel, "kernel", "max_pool2d")
    (sh, sw) = _pair(kernel if stride is None else stride, "stride", "max_pool2d")
    if x.ndim != 4 or x.shape[2] < kh or x.shape[3] < kw:
        raise ValueError(f"max_pool2d: x must be NCHW of at least {kh}x{kw}, not {x.shape}")
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    return win.max(axis=(4, 5))
