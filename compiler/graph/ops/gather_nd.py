"""GatherND (what torch exports for advanced indexing, `x[rows, cols]`: picking each sequence's
last token, box coordinates by index) as a composite: the indexed leading dims of the data
flattened into one, the index tuples turned into linear positions there (negative indices
wrapped, batch dims offset), then one Gather."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter


def _layout(attrs: dict[str, Any], data: tuple, indices: tuple) -> tuple[int, int]:
    """(batch dims b, index length m), checked against ONNX's rules."""
    b = int(attrs["batch_dims"])
    if not indices:
        raise ValueError("GatherND indices must have at least one dim, not be a scalar")
    m = int(indices[-1])
    if not 0 <= b < min(len(data), len(indices)):
        raise ValueError(
            f"GatherND batch_dims must be in [0, {min(len(data), len(indices)) - 1}], not {b}"
        )
    if tuple(data[:b]) != tuple(indices[:b]):
        raise ValueError(
            f"GatherND's first {b} dims of data {list(data)} and indices {list(indices)} must match"
        )
    if not 1 <= m <= len(data) - b:
        raise ValueError(
            f"GatherND indices must end in a dim in [1, {len(data) - b}] (data rank {len(data)}, "
            f"batch_dims {b}), not {m}"
        )
    return b, m


def _gather_nd_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    data, indices = types
    if indices.dtype != "int64":
        raise ValueError(f"GatherND indices must be int64, not {indices.dtype}")
    b, m = _layout(attrs, data.shape, indices.shape)
    return [TensorType((*indices.shape[:-1], *data.shape[b + m :]), data.dtype)]


def gather_nd(attrs: dict[str, Any], data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """numpy: per batch, data[tuple(index)] for each index tuple."""
    b, m = _layout(attrs, data.shape, indices.shape)
    dims = np.array(data.shape[b : b + m], np.int64)
    if ((indices < -dims) | (indices >= dims)).any():
        raise IndexError(f"GatherND indices must lie within data dims {dims.tolist()}")
    wrapped = np.where(indices < 0, indices + dims, indices)
    batches = int(np.prod(data.shape[:b], dtype=np.int64))
    data_b = data.reshape(batches, *data.shape[b:])
    index_b = wrapped.reshape(batches, -1, m)
    out = np.stack([data_b[i][tuple(index_b[i].T)] for i in range(batches)])
    return out.reshape((*indices.shape[:-1], *data.shape[b + m :]))


def expand(b: GraphBuilder, node: Node) -> None:
    """Reshape + linear positions (int64 arithmetic and a ReduceSum) + Gather."""
    e = Emitter(b, node)
    data, indices = node.inputs
    shape, ishape = e.shape(data), e.shape(indices)
    batch, m = _layout(dict(node.attrs), shape, ishape)
    dims = shape[batch : batch + m]
    tail = shape[batch + m :]
    per_batch = int(np.prod(dims, dtype=np.int64))
    flat = e.reshape(data, [int(np.prod(shape[:batch], dtype=np.int64)) * per_batch, *tail])
    dims_c = e.const(np.array(dims, np.int64), "dims")
    wrapped = e.add("Where", [e.add("Less", [indices, e.const(np.int64(0), "zero")]),
                              e.add("Add", [indices, dims_c]), indices])  # fmt: skip
    strides = np.cumprod((*dims[1:], 1)[::-1], dtype=np.int64)[::-1]
    weighted = e.add("Mul", [wrapped, e.const(strides.copy(), "strides")])
    linear = e.reduce_sum(weighted, [len(ishape) - 1])
    if batch:  # each batch's positions start at its block of per_batch rows
        lead = ishape[:batch]
        offsets = np.arange(int(np.prod(lead)), dtype=np.int64).reshape(lead) * per_batch
        offsets = offsets.reshape((*lead, *(1,) * (len(ishape) - 1 - batch)))
        linear = e.add("Add", [linear, e.const(offsets, "batch_offsets")])
    e.add("Gather", [flat, linear], {"axis": 0}, outputs=list(node.outputs[:1]))


register(
    "GatherND",
    Pattern.OPAQUE,
    _gather_nd_type,
    gather_nd,
    inputs=(2, 2),
    attrs={"batch_dims": 0},
    expand=expand,
)

__all__ = ["expand", "gather_nd"]
