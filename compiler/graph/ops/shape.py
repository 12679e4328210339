"""Data-movement and reduction ops: Reshape, Flatten, Transpose, Concat, Split, Slice, Gather,
Squeeze, Unsqueeze, Expand, Pad, Shape and ReduceMean/Sum/Max/Min/Prod.

Inputs that decide an output shape (Reshape's shape, Slice's starts, ...) must be constants."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir import TensorType, broadcast_shapes
from ..registry import REQUIRED, Pattern, register

MANY = 1 << 16


def int_list(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def normalize_axis(axis: int, rank: int, what: str) -> int:
    """`axis` in [0, rank), from [-rank, rank); ValueError naming `what` otherwise (ONNX
    rejects such axes: numpy's wrap-around is not its semantics)."""
    if not -rank <= axis < rank:
        raise ValueError(f"{what} must be in [{-rank}, {rank - 1}] for rank {rank}, not {axis}")
    return axis + rank if axis < 0 else axis


def reshape_target(shape: tuple[int, ...], target: list[int], allowzero: int) -> tuple[int, ...]:
    """The shape Reshape produces: 0 copies an input dim (unless allowzero), -1 is inferred.
    Exact integer arithmetic: a target whose product would wrap in int64 is rejected."""
    if any(d < -1 for d in target):
        raise ValueError(f"Reshape shape must have dims >= -1, not {target!r}")
    if allowzero and 0 in target and -1 in target:
        raise ValueError(f"Reshape shape with allowzero=1 must not hold both 0 and -1: {target!r}")
    if not allowzero and any(d == 0 and i >= len(shape) for i, d in enumerate(target)):
        raise ValueError(f"Reshape shape {target!r} copies (0) a dim the input {shape!r} lacks")
    dims = [shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if dims.count(-1) > 1:
        raise ValueError(f"Reshape shape must have at most one -1, not {target!r}")
    total = math.prod(shape)
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or total % known:
            raise ValueError(
                f"Reshape of {shape!r} to {target!r}: the -1 dim cannot be inferred "
                f"({total} elements over {known})"
            )
        dims[dims.index(-1)] = total // known
    if math.prod(dims) != total:
        raise ValueError(
            f"Reshape of {shape!r} must keep the element count {total}, not give {dims!r} "
            f"({math.prod(dims)} elements)"
        )
    return tuple(dims)


def _reshape_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    dims = reshape_target(types[0].shape, int_list(consts[1]), attrs["allowzero"])
    return [TensorType(dims, types[0].dtype)]


def _reshape(attrs: dict[str, Any], x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    return x.reshape(reshape_target(x.shape, int_list(shape), attrs["allowzero"])).copy()


register(
    "Reshape",
    Pattern.INJECTIVE,
    _reshape_type,
    _reshape,
    inputs=(2, 2),
    const_inputs=(1,),
    attrs={"allowzero": 0},
)


def _flat_shape(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    rank = len(shape)
    if not -rank <= axis <= rank:
        raise ValueError(f"Flatten axis must be in [{-rank}, {rank}], not {axis}")
    axis = axis + rank if axis < 0 else axis
    return math.prod(shape[:axis]), math.prod(shape[axis:])


register(
    "Flatten",
    Pattern.INJECTIVE,
    lambda a, t, c: [TensorType(_flat_shape(t[0].shape, a["axis"]), t[0].dtype)],
    lambda a, x: x.reshape(_flat_shape(x.shape, a["axis"])).copy(),
    attrs={"axis": 1},
)


def _perm(attrs: dict[str, Any], rank: int) -> tuple[int, ...]:
    if attrs.get("perm") is None:
        return tuple(range(rank))[::-1]
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(rank)):
        raise ValueError(f"Transpose perm must be a permutation of 0..{rank - 1}, not {perm!r}")
    return perm


register(
    "Transpose",
    Pattern.INJECTIVE,
    lambda a, t, c: [
        TensorType(tuple(t[0].shape[p] for p in _perm(a, len(t[0].shape))), t[0].dtype)
    ],
    lambda a, x: np.transpose(x, _perm(a, x.ndim)).copy(),  # (ascontiguousarray: a 0-d is [1])
    attrs={"perm": None},
)


def _concat_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    first = types[0].shape
    axis = normalize_axis(attrs["axis"], len(first), "Concat axis")
    for t in types[1:]:
        if len(t.shape) != len(first) or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first, strict=True)) if i != axis
        ):
            raise ValueError(f"Concat inputs must agree off axis {axis}, not {first} and {t.shape}")
    total = sum(t.shape[axis] for t in types)
    return [TensorType((*first[:axis], total, *first[axis + 1 :]), types[0].dtype)]


register(
    "Concat",
    Pattern.INJECTIVE,
    _concat_type,
    lambda a, *xs: np.concatenate(xs, axis=a["axis"]),
    inputs=(1, MANY),
    attrs={"axis": REQUIRED},
)


def split_sizes(attrs: dict[str, Any], dim: int, split: Any) -> list[int]:
    """Chunk sizes of Split along its axis (explicit, or num_outputs chunks, the last smaller)."""
    if split is not None:
        sizes = int_list(split)
        if any(s < 0 for s in sizes):
            raise ValueError(f"Split sizes must be non-negative, not {sizes!r}")
        if sum(sizes) != dim:
            raise ValueError(f"Split sizes must sum to {dim}, not {sizes!r}")
        return sizes
    count = attrs.get("num_outputs")
    if not count:
        raise ValueError("Split needs a split input or num_outputs")
    chunk = -(-dim // count)
    return [min(chunk, dim - i * chunk) for i in range(count)]


def _split_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    shape = types[0].shape
    axis = normalize_axis(attrs["axis"], len(shape), "Split axis")
    sizes = split_sizes(attrs, shape[axis], consts[1] if len(consts) > 1 else None)
    return [TensorType((*shape[:axis], s, *shape[axis + 1 :]), types[0].dtype) for s in sizes]


def _split(attrs: dict[str, Any], x: np.ndarray, split: Any = None) -> tuple[np.ndarray, ...]:
    axis = attrs["axis"] % x.ndim
    bounds = np.cumsum(split_sizes(attrs, x.shape[axis], split))[:-1]
    return tuple(np.ascontiguousarray(p) for p in np.split(x, bounds, axis=axis))


register(
    "Split",
    Pattern.INJECTIVE,
    _split_type,
    _split,
    inputs=(1, 2),
    outputs=(1, MANY),
    const_inputs=(1,),
    attrs={"axis": 0, "num_outputs": None},
)


# an end of INT32_MAX or INT64_MAX means "to the end in the step's direction" (onnxruntime's
# reading; ONNX's clamping would make [-1:INT64_MAX:-1] empty)
_SLICE_TO_END = (2**31 - 1, 2**63 - 1)


def _slice_bounds(n: int, start: int, end: int, step: int) -> slice:
    """ONNX's clamping of one axis's start and end, as a normalized Python slice: a start before
    the axis clamps to 0 for a negative step too (numpy would give nothing)."""
    if n == 0:
        return slice(0, 0, step)
    start = start + n if start < 0 else start
    if end in _SLICE_TO_END:
        end = -1 if step < 0 else n
    elif end < 0:
        end += n
    if step < 0:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    else:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
    return slice(start, None if end < 0 else end, step)


def slice_index(shape: tuple[int, ...], starts: Any, ends: Any, axes: Any, steps: Any) -> tuple:
    """The Python index that ONNX Slice denotes (starts and ends clamped as ONNX says)."""
    starts, ends = int_list(starts), int_list(ends)
    axes = int_list(axes) if axes is not None else list(range(len(starts)))
    steps = int_list(steps) if steps is not None else [1] * len(starts)
    index = [slice(None)] * len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step == 0:
            raise ValueError("Slice steps must be non-zero")
        axis = normalize_axis(axis, len(shape), "Slice axis")
        index[axis] = _slice_bounds(shape[axis], start, end, step)
    return tuple(index)


def _slice_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    shape = types[0].shape
    index = slice_index(shape, *(consts[1:] + [None] * (5 - len(consts))))
    dims = tuple(len(range(*s.indices(d))) for s, d in zip(index, shape, strict=True))
    return [TensorType(dims, types[0].dtype)]


register(
    "Slice",
    Pattern.INJECTIVE,
    _slice_type,
    lambda a, x, *args: x[slice_index(x.shape, *(list(args) + [None] * (4 - len(args))))].copy(),
    inputs=(3, 5),
    const_inputs=(1, 2, 3, 4),
)


def check_index_range(op: str, indices: np.ndarray | None, n: int, axis: int) -> None:
    """Constant indices of `op` along an axis of size `n` lie in [-n, n-1] (checked once, at
    type inference: onnxruntime rejects the rest; computed ones are not checked)."""
    if indices is not None and indices.size and (indices.min() < -n or indices.max() >= n):
        bad = indices[(indices < -n) | (indices >= n)].reshape(-1)[0]
        raise ValueError(f"{op} indices must be in [{-n}, {n - 1}] along axis {axis}, not {bad}")


def _gather_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    data, idx = types[0].shape, types[1].shape
    axis = normalize_axis(attrs["axis"], len(data), "Gather axis")
    check_index_range("Gather", consts[1], data[axis], axis)
    return [TensorType((*data[:axis], *idx, *data[axis + 1 :]), types[0].dtype)]


def _gather(attrs: dict[str, Any], x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    axis = attrs["axis"] % x.ndim
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    return np.take(x, indices, axis=axis)


register("Gather", Pattern.INJECTIVE, _gather_type, _gather, inputs=(2, 2), attrs={"axis": 0})


def squeezed(shape: tuple[int, ...], axes: Any) -> tuple[int, ...]:
    """`shape` without `axes` (each of size 1); no axes, or an empty list of them (an old
    file's `axes=[]`, which onnxruntime reads as absent at every opset), drops every 1."""
    if axes is None or not int_list(axes):
        return tuple(d for d in shape if d != 1)
    drop = {normalize_axis(a, len(shape), "Squeeze axis") for a in int_list(axes)}
    for a in sorted(drop):
        if shape[a] != 1:
            raise ValueError(f"Squeeze axis {a} must have size 1, not {shape[a]}")
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def unsqueezed(shape: tuple[int, ...], axes: Any) -> tuple[int, ...]:
    rank = len(shape) + len(int_list(axes))
    new = sorted(normalize_axis(a, rank, "Unsqueeze axis") for a in int_list(axes))
    if len(set(new)) != len(new):
        raise ValueError(f"Unsqueeze axes must be distinct, not {int_list(axes)!r}")
    dims, rest = [], iter(shape)
    for i in range(rank):
        dims.append(1 if i in new else next(rest))
    return tuple(dims)


def _shape_op(fn: Any) -> tuple[Any, Any]:
    def infer(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
        return [
            TensorType(fn(types[0].shape, consts[1] if len(consts) > 1 else None), types[0].dtype)
        ]

    def compute(attrs: dict[str, Any], x: np.ndarray, axes: Any = None) -> np.ndarray:
        return x.reshape(fn(x.shape, axes)).copy()

    return infer, compute


register("Squeeze", Pattern.INJECTIVE, *_shape_op(squeezed), inputs=(1, 2), const_inputs=(1,))
register("Unsqueeze", Pattern.INJECTIVE, *_shape_op(unsqueezed), inputs=(2, 2), const_inputs=(1,))


def _expanded(shape: tuple[int, ...], target: Any) -> tuple[int, ...]:
    dims = tuple(int_list(target))
    if any(d < 0 for d in dims):
        raise ValueError(f"Expand shape must have non-negative dims, not {dims!r}")
    return broadcast_shapes(shape, dims)


register(
    "Expand",
    Pattern.BROADCAST,
    lambda a, t, c: [TensorType(_expanded(t[0].shape, c[1]), t[0].dtype)],
    lambda a, x, target: np.broadcast_to(x, _expanded(x.shape, target)).copy(),
    inputs=(2, 2),
    const_inputs=(1,),
)


def pad_widths(rank: int, pads: Any, axes: Any) -> list[tuple[int, int]]:
    pads = int_list(pads)
    axes = (
        [normalize_axis(a, rank, "Pad axis") for a in int_list(axes)]
        if axes is not None
        else [*range(rank)]
    )
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad pads must have {2 * len(axes)} values, not {len(pads)}")
    widths = [(0, 0)] * rank
    for i, axis in enumerate(axes):
        widths[axis] = (pads[i], pads[i + len(axes)])
    return widths


def _pad_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    shape = types[0].shape
    widths = pad_widths(len(shape), consts[1], consts[3] if len(consts) > 3 else None)
    return [
        TensorType(
            tuple(d + a + b for d, (a, b) in zip(shape, widths, strict=True)), types[0].dtype
        )
    ]


def _pad(
    attrs: dict[str, Any], x: np.ndarray, pads: Any, value: Any = None, axes: Any = None
) -> np.ndarray:
    widths = pad_widths(x.ndim, pads, axes)
    mode = attrs["mode"]
    # negative pads crop
    crop = tuple(
        slice(max(0, -a), d - max(0, -b)) for d, (a, b) in zip(x.shape, widths, strict=True)
    )
    x = x[crop]
    widths = [(max(0, a), max(0, b)) for a, b in widths]
    if mode == "constant":
        fill = np.asarray(value if value is not None else 0).reshape(-1)
        return np.pad(x, widths, constant_values=fill[0] if fill.size else 0)
    numpy_mode = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}.get(mode)
    if numpy_mode is None:
        raise ValueError(f"Pad mode must be constant, reflect, edge or wrap, not {mode!r}")
    return np.pad(x, widths, mode=numpy_mode)


register(
    "Pad",
    Pattern.INJECTIVE,
    _pad_type,
    _pad,
    inputs=(2, 4),
    const_inputs=(1, 3),
    attrs={"mode": "constant"},
)


def _shape_range(attrs: dict[str, Any]) -> slice:
    return slice(attrs["start"], attrs.get("end"))


register(
    "Shape",
    Pattern.OPAQUE,
    lambda a, t, c: [TensorType((len(t[0].shape[_shape_range(a)]),), "int64")],
    lambda a, x: np.array(x.shape[_shape_range(a)], np.int64),
    attrs={"start": 0, "end": None},
)
register(
    "Size",
    Pattern.OPAQUE,
    lambda a, t, c: [TensorType((), "int64")],
    lambda a, x: np.array(x.size, np.int64),
)
# Ops whose result depends on their input's (static) shape alone: they always fold.
SHAPE_ONLY_OPS = ("Shape", "Size")


def reduce_axes(attrs: dict[str, Any], rank: int, axes: Any) -> tuple[int, ...] | None:
    """The axes a Reduce* op reduces; None means nothing (noop_with_empty_axes)."""
    if axes is None or np.asarray(axes).size == 0:
        return None if attrs["noop_with_empty_axes"] else tuple(range(rank))
    return tuple(sorted({normalize_axis(a, rank, "reduce axis") for a in int_list(axes)}))


def _extreme(dtype: np.dtype, lowest: bool) -> Any:
    if dtype.kind == "f":
        return -np.inf if lowest else np.inf
    if dtype.kind == "b":
        return not lowest
    info = np.iinfo(dtype)
    return info.min if lowest else info.max


def reduce_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    """The output type of a Reduce* op (input 1: the constant axes; keepdims,
    noop_with_empty_axes)."""
    shape = types[0].shape
    axes = reduce_axes(attrs, len(shape), consts[1] if len(consts) > 1 else None)
    if axes is None:
        return [types[0]]
    keep = attrs["keepdims"]
    dims = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
    return [TensorType(dims, types[0].dtype)]


def _reduce(fn: Any) -> tuple[Any, Any]:
    infer = reduce_type

    def compute(attrs: dict[str, Any], x: np.ndarray, axes: Any = None) -> np.ndarray:
        (out,) = infer(attrs, [TensorType(x.shape, str(x.dtype))], [None, axes])
        axes = reduce_axes(attrs, x.ndim, axes)
        if axes is None:
            return x.copy()
        if x.size == 0 and fn in (np.max, np.min):  # an empty max is the dtype's lowest value
            return np.full(out.shape, _extreme(x.dtype, fn is np.max), x.dtype)
        if x.size == 0 and fn is np.mean:  # an empty mean is 0, as onnxruntime's
            return np.zeros(out.shape, x.dtype)
        wide = x.astype(np.float64) if x.dtype.kind == "f" else x
        if x.dtype.kind == "f" and fn in (np.max, np.min):  # NaN: `nan_first`
            return nan_first(wide, axes, fn, attrs).astype(x.dtype)
        return np.asarray(fn(wide, axis=axes, keepdims=bool(attrs["keepdims"]))).astype(x.dtype)

    return infer, compute


def nan_first(x: np.ndarray, axes: Any, fn: Any, attrs: dict[str, Any]) -> np.ndarray:
    """ReduceMax/ReduceMin of floats as onnxruntime's scan from the first element has NaN: the
    extreme of the numbers, but a NaN first in the reduced range is the result (so a range of
    NaN only is NaN). Its vectorized scan lets a NaN in some other places win too: not
    followed (docs/graph.md)."""
    keep = bool(attrs["keepdims"])
    worst = -np.inf if fn is np.max else np.inf
    extreme = fn(np.where(np.isnan(x), worst, x), axis=axes, keepdims=True)
    first = x[tuple(slice(0, 1) if a in axes else slice(None) for a in range(x.ndim))]
    out = np.where(np.isnan(first), first, extreme)
    return out if keep else np.squeeze(out, axis=axes)


REDUCE_ATTRS = {"keepdims": 1, "noop_with_empty_axes": 0}
for _name, _fn in {
    "ReduceMean": np.mean,
    "ReduceSum": np.sum,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceProd": np.prod,
}.items():
    register(
        _name,
        Pattern.COMM_REDUCE,
        *_reduce(_fn),
        inputs=(1, 2),
        const_inputs=(1,),
        attrs=REDUCE_ATTRS,
    )
