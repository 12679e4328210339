"""Signal ops: DFT (opsets 17 and 20), STFT, the Hann, Hamming and Blackman windows and
MelWeightMatrix.

A DFT along one axis is a product with constant cosine and sine matrices (the transform's
length is static), so it is a composite of Slice, Transpose and MatMul that every back-end
compiles; STFT gathers its frames with constant indices, weights them by the window and takes
that DFT. The windows and MelWeightMatrix depend on their (constant) inputs alone: their
expansion is their value. The numpy kernels use numpy's FFT, independently of the matrices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType, check_dtype
from ..registry import Pattern, register
from .data_dependent import _fold_expand
from .emit import Emitter

_FLOATS = ("bfloat16", "float16", "float32", "float64")


def _int_scalar(value: Any, what: str) -> int:
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "iu":
        raise ValueError(f"{what} must be one integer, not {array.dtype} of shape {array.shape}")
    return int(array.reshape(-1)[0])


# DFT -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """One DFT: the signal `axis`, transform `length`, input points read along the axis
    (`rows`: the rest is zero padding or cut), output points `bins`, and the kind."""

    axis: int
    length: int
    rows: int
    bins: int
    inverse: bool
    onesided: bool

    @property
    def real_out(self) -> bool:  # an inverse of a one-sided spectrum: a real signal
        return self.inverse and self.onesided


def _plan(attrs: dict[str, Any], shape: tuple[int, ...], length: Any, axis: Any) -> _Plan:
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        raise ValueError(
            f"DFT input must have shape [..., signal, 1 or 2] (real or complex), not {shape}"
        )
    if axis is None:
        axis = attrs.get("axis")
    axis = -2 if axis is None else _int_scalar(axis, "DFT axis")
    if not -rank <= axis < rank or axis % rank == rank - 1:
        raise ValueError(
            f"DFT axis must lie in [{-rank}, {rank - 2}] and not be the last (the real and "
            f"imaginary parts), not {axis} for shape {shape}"
        )
    axis %= rank
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    size = shape[axis]
    if length is not None:
        length = _int_scalar(length, "DFT dft_length")
    elif inverse and onesided:
        length = 2 * (size - 1)
    else:
        length = size
    if length < 1:
        raise ValueError(f"DFT dft_length must be positive, not {length}")
    half = length // 2 + 1
    rows = min(size, half if inverse and onesided else length)
    bins = half if onesided and not inverse else length
    return _Plan(axis, length, rows, bins, inverse, onesided)


def _dft_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    if x.dtype not in _FLOATS:
        raise ValueError(f"DFT input must be a float type, not {x.dtype}")
    plan = _plan(attrs, x.shape, consts[1] if len(consts) > 1 else None, _at(consts, 2))
    shape = list(x.shape)
    shape[plan.axis], shape[-1] = plan.bins, 1 if plan.real_out else 2
    return [TensorType(tuple(shape), x.dtype)]


def _at(values: list, index: int) -> Any:
    return values[index] if len(values) > index else None


def dft(attrs: dict[str, Any], x: np.ndarray, length: Any = None, axis: Any = None) -> np.ndarray:
    plan = _plan(attrs, x.shape, length, axis)
    signal = x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)
    if plan.real_out:
        y = np.fft.irfft(signal, n=plan.length, axis=plan.axis)[..., None]
    else:
        fft = np.fft.ifft if plan.inverse else np.fft.fft
        y = np.take(fft(signal, n=plan.length, axis=plan.axis), range(plan.bins), plan.axis)
        y = np.stack([y.real, y.imag], axis=-1)
    return np.ascontiguousarray(y, dtype=x.dtype)


def _matrices(plan: _Plan) -> tuple[np.ndarray, ...]:
    """(rr, ri, ir, ii), each [rows, bins]: `out_re = re @ rr + im @ ri`,
    `out_im = re @ ir + im @ ii` (ir and ii are None for a real result)."""
    n = np.arange(plan.rows)[:, None]
    k = np.arange(plan.bins)[None, :]
    if plan.real_out:  # rows are frequencies, each but 0 and length / 2 counted twice
        theta = 2 * np.pi * n * k / plan.length
        weight = np.where((n == 0) | (2 * n == plan.length), 1.0, 2.0) / plan.length
        return weight * np.cos(theta), -weight * np.sin(theta), None, None
    theta = 2 * np.pi * n * k / plan.length
    cos, sin = np.cos(theta), np.sin(theta)
    if plan.inverse:
        return cos / plan.length, -sin / plan.length, sin / plan.length, cos / plan.length
    return cos, sin, -sin, cos


def _expand_dft(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x = node.inputs[0]
    shape, dtype = e.shape(x), e.dtype(x)
    consts = [b.constants.get(v) if v else None for v in node.inputs]
    plan = _plan(node.attr_dict, shape, _at(consts, 1), _at(consts, 2))
    rank = len(shape)
    perm = [d for d in range(rank - 1) if d != plan.axis] + [plan.axis]
    parts = []
    for c in range(shape[-1]):  # the real part, then the imaginary one
        part = e.transpose(e.take(x, rank - 1, c), perm)
        parts.append(e.slice(part, rank - 2, 0, plan.rows))
    rr, ri, ir, ii = _matrices(plan)
    outs = [_product(e, parts, (rr, ri), dtype)]
    if ir is not None:
        outs.append(_product(e, parts, (ir, ii), dtype))
    back = [int(i) for i in np.argsort(perm)]
    outs = [e.transpose(o, back) for o in outs]
    e.stack(outs, rank - 1, outputs=[node.outputs[0]])


def _product(e: Emitter, parts: list[str], matrices: tuple, dtype: str) -> str:
    """`parts[0] @ matrices[0] + parts[1] @ matrices[1]` (the imaginary part may be absent)."""
    terms = [
        e.add("MatMul", [part, e.const(m.astype(dtype), "dft")])
        for part, m in zip(parts, matrices, strict=False)
    ]
    return terms[0] if len(terms) == 1 else e.add("Add", terms)


register("DFT", Pattern.OPAQUE, _dft_type, dft, inputs=(1, 3), const_inputs=(1, 2),
         attrs={"axis": None, "inverse": 0, "onesided": 0}, expand=_expand_dft)  # fmt: skip


# STFT ------------------------------------------------------------------------------------------


def _frames(shape: tuple, step: Any, window: tuple | None, length: Any) -> tuple[int, int, int]:
    """(frame step, frame length, frames) of an STFT of a signal of `shape` (`window`: the
    window's shape if there is one; `step` and `length` the constant inputs)."""
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise ValueError(f"STFT signal must have shape [batch, length, 1 or 2], not {shape}")
    step = _int_scalar(step, "STFT frame_step")
    if window is not None and len(window) != 1:
        raise ValueError(f"STFT window must have rank 1, not shape {window}")
    if length is not None:
        length = _int_scalar(length, "STFT frame_length")
    else:
        length = window[0] if window is not None else shape[1]
    if window is not None and window[0] != length:
        raise ValueError(f"STFT window must have frame_length {length} values, not {window}")
    if step < 1 or not 1 <= length <= shape[1]:
        raise ValueError(
            f"STFT frame_step must be positive and frame_length in [1, {shape[1]}] (the "
            f"signal's length), not {step} and {length}"
        )
    return step, length, (shape[1] - length) // step + 1


def _stft_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    if x.dtype not in _FLOATS:
        raise ValueError(f"STFT signal must be a float type, not {x.dtype}")
    window = _at(types, 2)
    window = None if window is None else window.shape
    _, length, frames = _frames(x.shape, consts[1], window, _at(consts, 3))
    bins = length // 2 + 1 if attrs.get("onesided", 1) else length
    return [TensorType((x.shape[0], frames, bins, 2), x.dtype)]


def _frame_index(step: int, length: int, frames: int) -> np.ndarray:
    return (np.arange(frames)[:, None] * step + np.arange(length)[None, :]).astype(np.int64)


def stft(attrs: dict[str, Any], x: np.ndarray, step: Any, window: Any = None, length: Any = None):
    shape = None if window is None else window.shape
    step, length, frames = _frames(x.shape, step, shape, length)
    framed = x[:, _frame_index(step, length, frames)]  # [batch, frames, length, parts]
    if window is not None:
        framed = framed * window.reshape(1, 1, -1, 1)
    onesided = attrs.get("onesided", 1)
    return dft({"axis": 2, "onesided": onesided}, framed.astype(x.dtype))


def _expand_stft(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x = node.inputs[0]
    consts = [b.constants.get(v) if v else None for v in node.inputs]
    window = _at(node.inputs, 2)
    shape = e.shape(window) if window else None
    step, length, frames = _frames(e.shape(x), consts[1], shape, _at(consts, 3))
    framed = e.add("Gather", [x, e.ints(_frame_index(step, length, frames), "frames")],
                   {"axis": 1})  # fmt: skip
    if window:
        framed = e.add("Mul", [framed, e.reshape(window, [1, 1, length, 1])])
    attrs = {"axis": 2, "onesided": node.attr_dict.get("onesided", 1)}
    e.add("DFT", [framed], attrs, outputs=[node.outputs[0]])


register("STFT", Pattern.OPAQUE, _stft_type, stft, inputs=(2, 4), const_inputs=(1, 3),
         attrs={"onesided": 1}, expand=_expand_stft)  # fmt: skip


# Windows and MelWeightMatrix -------------------------------------------------------------------


def _out_dtype(attrs: dict[str, Any], op: str) -> str:
    return check_dtype(attrs.get("output_datatype") or "float32", f"{op}.output_datatype")


def _window(op: str, terms: tuple[float, ...]) -> Any:
    """A cosine-sum window `sum_j (-1)^j terms[j] cos(2 pi j n / N)`, N the size (periodic) or
    the size less one (symmetric)."""

    def compute(attrs: dict[str, Any], size: Any) -> np.ndarray:
        count = _int_scalar(size, f"{op} size")
        if count < 1:
            raise ValueError(f"{op} size must be positive, not {count}")
        period = count if attrs.get("periodic", 1) else count - 1
        n = np.arange(count, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):  # size 1, symmetric: 0 / 0,
            angle = 2 * np.pi * n / np.float64(period)  # NaN as onnxruntime gives
        y = sum((-1) ** j * a * np.cos(j * angle) for j, a in enumerate(terms))
        return np.asarray(y).astype(_out_dtype(attrs, op))

    def infer(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
        y = compute(attrs, consts[0])
        return [TensorType(y.shape, str(y.dtype))]

    register(op, Pattern.OPAQUE, infer, compute, const_inputs=(0,),
             attrs={"output_datatype": None, "periodic": 1}, expand=_fold_expand(op))  # fmt: skip


_window("HannWindow", (0.5, 0.5))
_window("HammingWindow", (25 / 46, 21 / 46))
_window("BlackmanWindow", (0.42, 0.5, 0.08))


def _mel(value: np.ndarray) -> np.ndarray:
    return 2595 * np.log10(1 + value / 700)


def mel_weight_matrix(
    attrs: dict[str, Any], bins: Any, length: Any, rate: Any, low: Any, high: Any
) -> np.ndarray:
    """[length // 2 + 1, bins] triangular filters, evenly spaced on the mel scale from `low` to
    `high` hertz, their edges rounded down to DFT bins (as onnxruntime)."""
    bins = _int_scalar(bins, "MelWeightMatrix num_mel_bins")
    length = _int_scalar(length, "MelWeightMatrix dft_length")
    rate = _int_scalar(rate, "MelWeightMatrix sample_rate")
    low, high = (float(np.asarray(v).reshape(-1)[0]) for v in (low, high))
    if bins < 1 or length < 1 or rate < 1 or not 0 <= low < high:
        raise ValueError(
            "MelWeightMatrix num_mel_bins, dft_length and sample_rate must be positive and "
            f"0 <= lower_edge_hertz < upper_edge_hertz, not {bins}, {length}, {rate}, {low}, "
            f"{high}"
        )
    spectrum = length // 2 + 1
    step = (_mel(high) - _mel(low)) / (bins + 2)
    mels = np.arange(bins + 2) * step + _mel(low)
    edges = ((length + 1) * (700 * (10 ** (mels / 2595) - 1)) // rate).astype(np.int64)
    if edges[-1] >= spectrum:
        raise ValueError(
            f"MelWeightMatrix upper_edge_hertz {high} must lie below the Nyquist frequency of "
            f"sample_rate {rate} (DFT bin {edges[-1]} of {spectrum})"
        )
    out = np.zeros((spectrum, bins))
    for i, (left, center, right) in enumerate(zip(edges, edges[1:], edges[2:], strict=False)):
        if center == left:
            out[center, i] = 1
        else:
            out[left : center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return out.astype(_out_dtype(attrs, "MelWeightMatrix"))


def _mel_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    y = mel_weight_matrix(attrs, *consts)
    return [TensorType(y.shape, str(y.dtype))]


register("MelWeightMatrix", Pattern.OPAQUE, _mel_type, mel_weight_matrix, inputs=(5, 5),
         const_inputs=(0, 1, 2, 3, 4), attrs={"output_datatype": None},
         expand=_fold_expand("MelWeightMatrix"))  # fmt: skip
