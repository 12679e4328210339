"""Ops that work along one axis of positions (time, a cache's sequence, a scan): CumProd
(opset 26), ReverseSequence and TensorScatter (opset 24, a key/value cache update). All are
composites (`expand`); each also has its own numpy kernel written from the ONNX spec.

CumProd is a masked product: output position i multiplies the inputs at the positions j that
a constant [n, n] table allows (j <= i, j < i exclusive, j >= i / j > i reversed), the others
replaced by one, so it costs n products per element (the scanned axes are short: a sequence's
positions). ReverseSequence and TensorScatter compute, at run time from the lengths or write
offsets, which position of their input each output position reads, and gather it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter
from .shape import normalize_axis

# ---- CumProd --------------------------------------------------------------------------------


def _cumprod_axis(rank: int, axis: Any) -> int:
    value = np.asarray(axis)
    if value.size != 1:
        raise ValueError(f"CumProd axis must be a scalar, not shape {list(value.shape)}")
    return normalize_axis(int(value.reshape(())), rank, "CumProd axis")


def _cumprod_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    if types[1].dtype not in ("int32", "int64"):
        raise ValueError(f"CumProd axis must be int32 or int64, not {types[1].dtype}")
    _cumprod_axis(len(types[0].shape), consts[1])
    return [types[0]]


def _cumprod_table(n: int, attrs: dict[str, Any]) -> np.ndarray:
    """[i, j]: whether output position i multiplies input position j."""
    i, j = np.arange(n).reshape(-1, 1), np.arange(n).reshape(1, -1)
    if attrs["reverse"]:
        return j > i if attrs["exclusive"] else j >= i
    return j < i if attrs["exclusive"] else j <= i


def cumprod(attrs: dict[str, Any], x: np.ndarray, axis: Any) -> np.ndarray:
    """Running product along `axis` (from the end when reversed; exclusive: one position
    later, starting at one)."""
    a = _cumprod_axis(x.ndim, axis)
    z = np.moveaxis(x, a, -1)
    table = _cumprod_table(z.shape[-1], attrs)
    out = np.where(table, z[..., None, :], np.ones((), x.dtype)).prod(axis=-1, dtype=x.dtype)
    return np.ascontiguousarray(np.moveaxis(out, -1, a))


def _expand_cumprod(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x = node.inputs[0]
    shape, dtype = e.shape(x), e.dtype(x)
    rank = len(shape)
    axis = _cumprod_axis(rank, b.constants[node.inputs[1]])
    perm = [i for i in range(rank) if i != axis] + [axis]
    z = e.add("Unsqueeze", [e.transpose(x, perm), e.ints([-2], "axes")])  # [..., 1, n]
    table = e.const(_cumprod_table(shape[axis], node.attr_dict), "table")
    masked = e.add("Where", [table, z, e.const(1, "one", dtype)])
    prod = e.add("ReduceProd", [masked, e.ints([-1], "last")], {"keepdims": 0})
    back = [perm.index(i) for i in range(rank)]
    e.add("Transpose", [prod], {"perm": back}, outputs=[node.outputs[0]])


register(
    "CumProd",
    Pattern.OPAQUE,
    _cumprod_type,
    cumprod,
    inputs=(2, 2),
    const_inputs=(1,),
    attrs={"exclusive": 0, "reverse": 0},
    expand=_expand_cumprod,
)


# ---- ReverseSequence ------------------------------------------------------------------------


def _reverse_axes(attrs: dict[str, Any], rank: int) -> tuple[int, int]:
    if rank < 2:
        raise ValueError(f"ReverseSequence input must have rank >= 2, not {rank}")
    axes = attrs["batch_axis"], attrs["time_axis"]
    if sorted(axes) != [0, 1]:
        raise ValueError(
            f"ReverseSequence batch_axis and time_axis must be 0 and 1 in some order, not "
            f"{axes[0]!r} and {axes[1]!r}"
        )
    return axes


def _reverse_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, lens = types
    batch_axis, _ = _reverse_axes(attrs, len(x.shape))
    if lens.dtype != "int64" or lens.shape != (x.shape[batch_axis],):
        raise ValueError(
            f"ReverseSequence sequence_lens must be int64 of shape [{x.shape[batch_axis]}], "
            f"not {lens.dtype} {list(lens.shape)}"
        )
    lengths = consts[1]
    n = x.shape[1 - batch_axis]
    if lengths is not None and ((lengths < 0) | (lengths > n)).any():
        raise ValueError(
            f"ReverseSequence sequence_lens must be in [0, {n}], not {lengths.tolist()}"
        )
    return [x]


def _reverse_source(t: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The time step each output step reads: the first `length` steps reversed."""
    return np.where(t < lengths, lengths - 1 - t, t)


def reverse_sequence(attrs: dict[str, Any], x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Reverse the first `sequence_lens[b]` time steps of each batch entry b."""
    batch_axis, time_axis = _reverse_axes(attrs, x.ndim)
    z = x if batch_axis == 0 else x.swapaxes(0, 1)  # [B, T, ...]
    t = np.arange(z.shape[1]).reshape(1, -1)
    source = _reverse_source(t, lengths.reshape(-1, 1))
    out = np.take_along_axis(z, source.reshape((*source.shape, *(1,) * (z.ndim - 2))), axis=1)
    return out if batch_axis == 0 else out.swapaxes(0, 1)


def _expand_reverse(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, lengths = node.inputs
    shape = e.shape(x)
    batch_axis, time_axis = _reverse_axes(node.attr_dict, len(shape))
    grid = [1] * len(shape)
    grid[time_axis] = shape[time_axis]
    t = e.const(np.arange(shape[time_axis], dtype=np.int64).reshape(grid), "steps")
    grid[time_axis], grid[batch_axis] = 1, shape[batch_axis]
    n = e.reshape(lengths, grid)
    last = e.add("Sub", [n, e.const(1, "one", "int64")])
    source = e.add("Where", [e.add("Less", [t, n]), e.add("Sub", [last, t]), t])
    source = e.add("Expand", [source, e.ints(shape, "shape")])
    e.add("GatherElements", [x, source], {"axis": time_axis}, outputs=[node.outputs[0]])


register(
    "ReverseSequence",
    Pattern.OPAQUE,
    _reverse_type,
    reverse_sequence,
    inputs=(2, 2),
    attrs={"batch_axis": 1, "time_axis": 0},
    expand=_expand_reverse,
)


# ---- TensorScatter --------------------------------------------------------------------------

_SCATTER_MODES = ("linear", "circular")


def _tensor_scatter_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    cache, update = types[0].shape, types[1].shape
    axis = normalize_axis(attrs["axis"], len(cache), "TensorScatter axis")
    if axis == 0:
        raise ValueError("TensorScatter axis must not be the batch axis 0")
    if attrs["mode"] not in _SCATTER_MODES:
        raise ValueError(
            f"TensorScatter mode must be 'linear' or 'circular', not {attrs['mode']!r}"
        )
    if (
        len(update) != len(cache)
        or update[axis] > cache[axis]
        or any(u != c for i, (u, c) in enumerate(zip(update, cache, strict=True)) if i != axis)
    ):
        raise ValueError(
            f"TensorScatter update shape {list(update)} must be the cache's {list(cache)} but "
            f"along axis {axis}, where it may be shorter"
        )
    indices = types[2] if len(types) > 2 else None
    if indices is not None and (indices.dtype != "int64" or indices.shape != (cache[0],)):
        raise ValueError(
            f"TensorScatter write_indices must be int64 of shape [{cache[0]}], not "
            f"{indices.dtype} {list(indices.shape)}"
        )
    return [types[0]]


def _scatter_source(attrs: dict[str, Any], positions: Any, offsets: Any, m: int) -> Any:
    """numpy: which update step each cache position takes (out of [0, steps) keeps the cache)."""
    step = positions - offsets
    return step % m if attrs["mode"] == "circular" else step


def tensor_scatter(
    attrs: dict[str, Any], cache: np.ndarray, update: np.ndarray, indices: Any = None
) -> np.ndarray:
    """`cache` with `update` written along `axis` from each batch entry's write index."""
    axis = attrs["axis"] % cache.ndim
    m, steps = cache.shape[axis], update.shape[axis]
    offsets = np.zeros(cache.shape[0], np.int64) if indices is None else indices
    grid = [1] * cache.ndim
    grid[axis] = m
    positions = np.arange(m).reshape(grid)
    step = _scatter_source(attrs, positions, offsets.reshape(-1, *(1,) * (cache.ndim - 1)), m)
    hit = (step >= 0) & (step < steps)
    step = np.broadcast_to(np.clip(step, 0, steps - 1), cache.shape)
    return np.where(hit, np.take_along_axis(update, step, axis=axis), cache)


def _expand_tensor_scatter(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    cache, update = node.inputs[:2]
    indices = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    shape = e.shape(cache)
    rank = len(shape)
    axis = node.attr_dict["axis"] % rank
    m, steps = shape[axis], e.shape(update)[axis]
    grid = [1] * rank
    grid[axis] = m
    step = e.const(np.arange(m, dtype=np.int64).reshape(grid), "positions")
    if indices is not None:
        step = e.add("Sub", [step, e.reshape(indices, [shape[0], *(1,) * (rank - 1)])])
        if node.attr_dict["mode"] == "circular":
            step = e.add("Mod", [step, e.const(m, "length", "int64")])
    zero = e.const(0, "zero", "int64")
    limit = e.const(steps, "steps", "int64")
    hit = e.add("And", [e.add("GreaterOrEqual", [step, zero]), e.add("Less", [step, limit])])
    clipped = e.add("Min", [e.add("Max", [step, zero]), e.const(steps - 1, "last", "int64")])
    clipped = e.add("Expand", [clipped, e.ints(shape, "shape")])
    taken = e.add("GatherElements", [update, clipped], {"axis": axis})
    e.add("Where", [hit, taken, cache], outputs=[node.outputs[0]])


register(
    "TensorScatter",
    Pattern.OPAQUE,
    _tensor_scatter_type,
    tensor_scatter,
    inputs=(2, 3),
    attrs={"axis": -2, "mode": "linear"},
    expand=_expand_tensor_scatter,
)

__all__ = ["cumprod", "reverse_sequence", "tensor_scatter"]
