"""The int8 numpy reference of the accelerator's quantized dense and conv2d (the oracle).

The computation: int8 x int8 products summed into a 32-bit wrapping accumulator, plus an int32
bias (wrapping), an arithmetic right shift (floor division by 2**shift; shifts of 31 or more give
the sign, as the ALU's SHR), ReLU as a maximum with 0, a clip to [-128, 127] (or [0, 127] with
ReLU), and a cast to int8. It is written from that definition alone, in int64 numpy, not from
the simulator.

Example:
    >>> import numpy as np
    >>> a = np.array([[1, 2]], np.int8); w = np.array([[3, 4], [-5, -6]], np.int8)
    >>> dense_reference(a, w, bias=np.array([1, 0], np.int32), shift=1, relu=False)
    array([[ 6, -9]], dtype=int8)
"""

from __future__ import annotations

import numpy as np

ACC_BITS = 32


def wrap32(x: np.ndarray) -> np.ndarray:
    """Two's-complement wrap of int64 values to 32 bits."""
    half = np.int64(1 << (ACC_BITS - 1))
    return ((x.astype(np.int64) + half) & np.int64((1 << ACC_BITS) - 1)) - half


def requantize(acc: np.ndarray, shift: int, relu: bool) -> np.ndarray:
    """int32 accumulators -> int8: arithmetic ``>> shift``, ReLU, clip, cast."""
    if shift < 0:
        raise ValueError(f"shift must be >= 0, not {shift!r}")
    shifted = acc.astype(np.int64) >> min(shift, ACC_BITS - 1)
    lo = 0 if relu else -128
    return np.clip(shifted, lo, 127).astype(np.int8)


def dense_reference(
    a: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, shift: int = 0, relu: bool = False
) -> np.ndarray:
    """``requantize(A @ W.T + bias)`` for A (M, K) int8 and W (N, K) int8; returns (M, N) int8."""
    acc = wrap32(a.astype(np.int64) @ w.astype(np.int64).T)
    if bias is not None:
        acc = wrap32(acc + np.asarray(bias, np.int64)[None, :])
    return requantize(acc, shift, relu)


def conv2d_reference(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    shift: int = 0,
    relu: bool = False,
) -> np.ndarray:
    """Quantized conv2d: x (N, C, H, W) int8, w (O, C, KH, KW) int8 -> (N, O, OH, OW) int8.

    Zero padding of ``padding`` (rows, columns) on each side, stride ``stride``.
    """
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    acc = np.zeros((n, o, oh, ow), np.int64)
    w64 = w.astype(np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
            acc += np.einsum("nchw,oc->nohw", patch, w64[:, :, i, j])
    acc = wrap32(acc)
    if bias is not None:
        acc = wrap32(acc + np.asarray(bias, np.int64)[None, :, None, None])
    return requantize(acc, shift, relu)
