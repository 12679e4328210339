"""Ops that generate or move data by index: ConstantOfShape, EyeLike, Range, Tile, Trilu, CumSum
and ScatterND (the shape arithmetic and mask building that exported transformers carry).

ConstantOfShape's shape and Range's bounds decide output shapes, so they must be constants;
such nodes then always fold at compile time, as EyeLike (torch.diag's ones on the diagonal)
does: it reads only its input's static shape. ScatterND lowers with constant indices (a table
of the update written at each position); indices computed at run time (torch's
`x[rows, cols] = v` with computed rows) are expanded: each position of the data's leading
dims compares itself with every update row's linear position and takes the last match (or
reduces the matches), as `scatter_elements` does along one axis."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType, check_dtype
from ..registry import Pattern, register
from .emit import Emitter
from .shape import SHAPE_ONLY_OPS, int_list, normalize_axis


def _constant_of_shape_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    dims = int_list(consts[0])
    if any(d < 0 for d in dims):
        raise ValueError(f"ConstantOfShape shape must have non-negative dims, not {dims!r}")
    return [TensorType(tuple(dims), check_dtype(attrs["dtype"], "ConstantOfShape value"))]


register(
    "ConstantOfShape",
    Pattern.OPAQUE,
    _constant_of_shape_type,
    lambda a, shape: np.full(int_list(shape), a["value"] or 0, a["dtype"]),
    const_inputs=(0,),
    attrs={"value": None, "dtype": "float32"},
)


def _scalar(value: Any, what: str) -> Any:
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(f"{what} must be a scalar, not shape {list(array.shape)}")
    return array.reshape(()).item()


def range_count(start: Any, limit: Any, delta: Any) -> int:
    """How many values Range yields: max(ceil((limit - start) / delta), 0), exact for integers."""
    names = ("Range start", "Range limit", "Range delta")
    start, limit, delta = (_scalar(v, w) for v, w in zip((start, limit, delta), names, strict=True))
    if delta == 0:
        raise ValueError("Range delta must be non-zero")
    if isinstance(delta, int):
        return max(-((start - limit) // delta), 0)
    return max(math.ceil((limit - start) / delta), 0)


def _range(attrs: dict[str, Any], start: Any, limit: Any, delta: Any) -> np.ndarray:
    dtype = np.asarray(start).dtype
    steps = np.arange(
        range_count(start, limit, delta), dtype=np.float64 if dtype.kind == "f" else dtype
    )
    return (np.asarray(start).reshape(()) + steps * np.asarray(delta).reshape(())).astype(dtype)


register(
    "Range",
    Pattern.OPAQUE,
    lambda a, t, c: [TensorType((range_count(*c),), t[0].dtype)],
    _range,
    inputs=(3, 3),
    const_inputs=(0, 1, 2),
)


def tile_repeats(rank: int, repeats: Any) -> list[int]:
    reps = int_list(repeats)
    if len(reps) != rank or any(r < 0 for r in reps):
        raise ValueError(f"Tile repeats must be {rank} non-negative values, not {reps!r}")
    return reps


register(
    "Tile",
    Pattern.INJECTIVE,
    lambda a, t, c: [
        TensorType(
            tuple(
                d * r for d, r in zip(t[0].shape, tile_repeats(len(t[0].shape), c[1]), strict=True)
            ),
            t[0].dtype,
        )
    ],
    lambda a, x, repeats: np.tile(x, tile_repeats(x.ndim, repeats)),
    inputs=(2, 2),
    const_inputs=(1,),
)


def trilu_offset(k: Any) -> int:
    """The diagonal offset of Trilu (input k, 0 when absent)."""
    return 0 if k is None else int(_scalar(k, "Trilu k"))


def _trilu_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    if len(types[0].shape) < 2:
        raise ValueError(f"Trilu input must have rank >= 2, not {len(types[0].shape)}")
    return [types[0]]


register(
    "Trilu",
    Pattern.INJECTIVE,
    _trilu_type,
    lambda a, x, k=None: (np.triu if a["upper"] else np.tril)(x, trilu_offset(k)),
    inputs=(1, 2),
    const_inputs=(1,),
    attrs={"upper": 1},
)


def cumsum_axis(rank: int, axis: Any) -> int:
    return normalize_axis(int(_scalar(axis, "CumSum axis")), rank, "CumSum axis")


def _cumsum(attrs: dict[str, Any], x: np.ndarray, axis: Any) -> np.ndarray:
    a = cumsum_axis(x.ndim, axis)
    flip = (lambda v: np.flip(v, a)) if attrs["reverse"] else (lambda v: v)
    total = np.cumsum(flip(x), axis=a, dtype=x.dtype)
    if attrs["exclusive"]:  # the sums before each position: shifted by one, 0 first (not
        # `total - x`, which rounds differently and makes NaN of an infinite x)
        total = np.moveaxis(total, a, 0)
        total = np.concatenate([np.zeros_like(total[:1]), total[:-1]])
        total = np.moveaxis(total, 0, a)
    return np.ascontiguousarray(flip(total))


register(
    "CumSum",
    Pattern.COMM_REDUCE,
    lambda a, t, c: [t[0]],
    _cumsum,
    inputs=(2, 2),
    const_inputs=(1,),
    attrs={"exclusive": 0, "reverse": 0},
)


SCATTER_REDUCTIONS = {
    "none": None,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _eye_like_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    if len(types[0].shape) != 2:
        raise ValueError(f"EyeLike input must be 2-D, not shape {types[0].shape}")
    dtype = attrs["dtype"] or types[0].dtype
    return [TensorType(types[0].shape, check_dtype(dtype, "EyeLike.dtype"))]


def _eye_like(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return np.eye(*x.shape, k=attrs["k"], dtype=attrs["dtype"] or x.dtype)


def _expand_eye_like(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    (x,) = node.inputs
    attrs = node.attr_dict
    eye = np.eye(*e.shape(x), k=attrs.get("k", 0), dtype=attrs.get("dtype") or e.dtype(x))
    e.rename(e.const(eye, "eye"), node.outputs[0])


register(
    "EyeLike",
    Pattern.OPAQUE,
    _eye_like_type,
    _eye_like,
    attrs={"k": 0, "dtype": None},
    expand=_expand_eye_like,
)


def scatter_neutral(reduction: str, dtype: str) -> Any:
    """The value that leaves `reduction` of the data unchanged: 0 (add), 1 (mul), the lowest
    (max) or highest (min) value of `dtype`."""
    if reduction in ("add", "mul"):
        return int(reduction == "mul")
    largest = reduction == "max"
    kind = np.dtype(dtype)
    if kind.kind == "f":
        return -np.inf if largest else np.inf
    if kind == np.bool_:
        return not largest
    return np.iinfo(kind).min if largest else np.iinfo(kind).max


#: each reduction's ReduceX over the matching updates and the op that combines it with the data
SCATTER_COMBINE = {
    "add": ("ReduceSum", "Add"),
    "mul": ("ReduceProd", "Mul"),
    "max": ("ReduceMax", "Max"),
    "min": ("ReduceMin", "Min"),
}


def scatter_positions(data_shape: tuple[int, ...], indices: np.ndarray) -> np.ndarray:
    """ScatterND's indices as non-negative positions in data's leading dims, [rows, k]."""
    k = indices.shape[-1]
    if not 1 <= k <= len(data_shape):
        raise ValueError(f"ScatterND indices must end in a dim in [1, {len(data_shape)}], not {k}")
    rows = np.asarray(indices, np.int64).reshape(-1, k)
    dims = np.array(data_shape[:k], np.int64)
    if ((rows < -dims) | (rows >= dims)).any():
        raise ValueError(f"ScatterND indices must lie within data dims {list(dims)}")
    return np.where(rows < 0, rows + dims, rows)


def _scatter_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    data, indices, updates = (t.shape for t in types)
    k = indices[-1] if indices else 0
    want = (*indices[:-1], *data[k:])
    if not indices or tuple(updates) != want:
        raise ValueError(f"ScatterND updates must have shape {list(want)}, not {list(updates)}")
    if attrs["reduction"] not in SCATTER_REDUCTIONS:
        raise ValueError(
            f"ScatterND reduction must be one of {', '.join(SCATTER_REDUCTIONS)}, "
            f"not {attrs['reduction']!r}"
        )
    return [types[0]]


def _scatter(attrs: dict[str, Any], data: np.ndarray, indices: Any, updates: Any) -> np.ndarray:
    rows = scatter_positions(data.shape, np.asarray(indices))
    where = tuple(rows.T)
    flat = np.asarray(updates).reshape(len(rows), *data.shape[rows.shape[1] :])
    out = data.copy()
    reduce = SCATTER_REDUCTIONS[attrs["reduction"]]
    if reduce is None:
        for position, update in zip(rows, flat, strict=True):  # in order: the last one stays
            out[tuple(position)] = update
    else:
        reduce.at(out, where, flat)
    return out


def _is_constant_later(b: GraphBuilder, value: str) -> bool:
    """Whether `value` is a constant or computed from constants and shapes alone (so that
    fold_constants, which runs after the expansions, makes it one)."""
    producers = {out: n for n in b.nodes for out in n.outputs if out}
    todo, seen = [value], set()
    while todo:
        name = todo.pop()
        if name in seen or name in b.constants:
            continue
        seen.add(name)
        node = producers.get(name)
        if node is None:  # a graph input
            return False
        if node.op not in SHAPE_ONLY_OPS:
            todo.extend(i for i in node.inputs if i)
    return True


def _expand_scatter_nd(b: GraphBuilder, node: Node) -> bool:
    """Run-time indices only (module docstring); constant ones keep the node (False)."""
    data, indices, updates = node.inputs
    if _is_constant_later(b, indices):  # fold_constants makes it one: the table lowering
        return False
    e = Emitter(b, node)
    shape, ishape, dtype = e.shape(data), e.shape(indices), e.dtype(data)
    k, reduction = ishape[-1], node.attr_dict["reduction"]
    rows, rest = math.prod(ishape[:-1]), list(shape[k:])
    count = math.prod(shape[:k])
    idx = indices if e.dtype(indices) == "int64" else e.add("Cast", [indices], {"to": "int64"})
    idx = e.reshape(idx, [rows, k])
    dims, zero = e.const(np.array(shape[:k], np.int64), "dims"), e.const(0, "zero", "int64")
    idx = e.add("Where", [e.add("Less", [idx, zero]), e.add("Add", [idx, dims]), idx])
    strides = np.array([math.prod(shape[i + 1 : k]) for i in range(k)], np.int64)
    linear = e.reduce_sum(e.add("Mul", [idx, e.const(strides, "strides")]), [1])  # [rows]
    position = e.const(np.arange(count, dtype=np.int64).reshape(count, 1), "position")
    hit = e.add("Equal", [e.add("Unsqueeze", [linear, e.ints([0], "axes")]), position])
    flat_data = e.reshape(data, [count, *rest])
    flat_updates = e.reshape(updates, [rows, *rest])
    lanes = [1] * len(rest)
    if reduction == "none":  # the last update row written at each position
        ramp = e.const(np.arange(rows, dtype=np.int64), "ramp")
        minus = e.const(-1, "minus", "int64")
        writer = e.add("Where", [hit, ramp, minus])
        writer = e.add("ReduceMax", [writer, e.ints([1], "axes")], {"keepdims": 0})
        taken = e.add("Gather", [flat_updates, e.add("Max", [writer, zero])], {"axis": 0})
        written = e.reshape(e.add("GreaterOrEqual", [writer, zero]), [count, *lanes])
        out = e.add("Where", [written, taken, flat_data])
    else:
        reduce, combine = SCATTER_COMBINE[reduction]
        spread = e.add("Unsqueeze", [flat_updates, e.ints([0], "axes")])  # [1, rows, *rest]
        mask = e.reshape(hit, [count, rows, *lanes])
        neutral = e.const(scatter_neutral(reduction, dtype), "neutral", dtype)
        masked = e.add("Where", [mask, spread, neutral])
        total = e.add(reduce, [masked, e.ints([1], "axes")], {"keepdims": 0})
        out = e.add(combine, [flat_data, total])
    e.add("Reshape", [out, e.ints(list(shape), "shape")], outputs=[node.outputs[0]])
    return True


register(
    "ScatterND",
    Pattern.INJECTIVE,
    _scatter_type,
    _scatter,
    inputs=(3, 3),
    attrs={"reduction": "none"},
    expand=_expand_scatter_nd,
)
