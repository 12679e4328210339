"""The accelerator operators' int8 oracle: thin wrappers over ``compiler.quantize.reference``.

There is one definition of the integer semantics, in ``compiler.quantize``: int8 x int8 products
summed into wrapping ``acc_width``-bit accumulators, an int32 bias, then the requantization's
ALU steps (``RequantParams``: MUL, SHR, rounding ADD, MAX, MIN) evaluated by
``hw.isa.alu_apply``; the residual add is ``quantize.residual.add_int8`` and max pooling
``max_pool2d_int8``. The code generator emits exactly those steps, so these functions only
translate the operators' shorthand (``shift``/``relu``) into ``RequantParams``:
``shift_requant`` is ``requant_params(2**-shift, rounding=False)``, a floor shift clipped to the
quantization scheme's symmetric range ``[-127, 127]`` (``[0, 127]`` with ReLU).

Example:
    >>> import numpy as np
    >>> a = np.array([[1, 2]], np.int8); w = np.array([[3, 4], [-5, -6]], np.int8)
    >>> dense_reference(a, w, bias=np.array([1, 0], np.int32), shift=1, relu=False)
    array([[ 6, -9]], dtype=int8)
    >>> [(s.op.name, s.imm) for s in shift_requant(3, relu=True).steps]
    [('SHR', 3), ('MAX', 0), ('MIN', 127)]
"""

from __future__ import annotations

import numpy as np

from ...hw.config import HWConfig
from ..quantize.reference import conv2d_int8, dense_int8, max_pool2d_int8
from ..quantize.requant import RequantParams, apply_requant, requant_params
from ..quantize.residual import AddParams, add_int8

__all__ = [
    "conv2d_reference",
    "dense_reference",
    "max_pool2d_reference",
    "requantize",
    "shift_requant",
]

_DEFAULT = HWConfig()  # every config has int8 outputs and 32-bit accumulators


def shift_requant(shift: int, relu: bool = False, cfg: HWConfig | None = None) -> RequantParams:
    """The requantization of the ``shift``/``relu`` shorthand: floor ``>> shift``, then clip.

    Args:
        shift: arithmetic right shift in [0, 31].
        relu: clip at 0 instead of the symmetric minimum -127.
        cfg: the config (its accumulator and output widths); default: the ``pynq`` widths.

    Raises:
        ValueError: a shift outside [0, 31].
    """
    if not isinstance(shift, int) or isinstance(shift, bool) or not 0 <= shift <= 31:
        raise ValueError(f"shift must be an int in [0, 31], not {shift!r}")
    return requant_params(2.0**-shift, cfg or _DEFAULT, rounding=False, relu=relu)


def requantize(acc: np.ndarray, shift: int, relu: bool) -> np.ndarray:
    """int32 accumulators -> int8 by the shorthand's steps (``shift_requant``)."""
    return apply_requant(acc, shift_requant(shift, relu)).astype(np.int8)


def dense_reference(
    a: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    shift: int = 0,
    relu: bool = False,
    *,
    requant: RequantParams | None = None,
) -> np.ndarray:
    """``requant(A @ W.T + bias)`` for A (M, K) int8 and W (N, K) int8; returns (M, N) int8.

    ``requant`` overrides the ``shift``/``relu`` shorthand.
    """
    return dense_int8(a, w, bias, requant=requant or shift_requant(shift, relu))


def conv2d_reference(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    shift: int = 0,
    relu: bool = False,
    *,
    requant: RequantParams | None = None,
    residual: np.ndarray | None = None,
    add: AddParams | None = None,
    groups: int = 1,
) -> np.ndarray:
    """Quantized conv2d: x (N, C, H, W) int8, w (O, C / groups, KH, KW) int8 -> (N, O, OH, OW)
    int8.

    With ``residual`` (int8 of the output's shape) and ``add``, the result is the residual add
    ``add_int8(conv, residual, add)`` of the requantized convolution, as the quantized graph
    computes ``tf.qadd(tf.qconv2d(x), residual)``.

    Raises:
        ValueError: ``residual`` given without ``add`` (or the reverse).
    """
    y = conv2d_int8(
        x, w, bias, stride=_ints(stride), padding=_ints(padding),
        requant=requant or shift_requant(shift, relu), groups=groups,
    )  # fmt: skip
    if (residual is None) != (add is None):
        raise ValueError("conv2d residual and add (AddParams) must be given together")
    return y if add is None else add_int8(y, residual, add)


def max_pool2d_reference(
    x: np.ndarray, kernel: int | tuple[int, int], stride: int | tuple[int, int] | None = None
) -> np.ndarray:
    """Max pooling of int8 NCHW without padding (``quantize.max_pool2d_int8``)."""
    return max_pool2d_int8(x, _ints(kernel), None if stride is None else _ints(stride))


def _ints(v: int | tuple[int, int]) -> int | tuple[int, int]:
    return int(v) if isinstance(v, (int, np.integer)) else (int(v[0]), int(v[1]))
