"""Native lowerings of ConstantOfShape, Range, Tile, Trilu and ScatterND (lazy: they inline into
their readers) and CumSum (an anchor: a masked sum over the scanned axis). ConstantOfShape and
Range fold at compile time unless their output is too big to keep as a constant
(``fold_constants.FOLD_LIMIT_BYTES``): then they fill it at run time."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import te
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Index, Lazy, Rule, Tail, unravel
from ..ops.indexing import cumsum_axis, scatter_positions, trilu_offset
from ..registry import get_op
from .elemwise import const_input
from .nn import Result, reduce_kernel


def _constant_of_shape(ctx: GroupContext, node: Node) -> list[Lazy]:
    out = ctx.type_of(node.outputs[0])
    value = get_op(node.op).full_attrs(node)["value"]
    fill = te.const(np.asarray(value if value is not None else 0).reshape(-1)[0].item(), out.dtype)
    return [Lazy(out.shape, out.dtype, lambda idx: fill)]


def _range(ctx: GroupContext, node: Node) -> list[Lazy]:
    out = ctx.type_of(node.outputs[0])
    start, _, delta = (const_input(ctx, node, k).reshape(()).item() for k in range(3))
    acc = "float64" if "float" in out.dtype else out.dtype  # as the reference computes it
    first, step = te.const(start, acc), te.const(delta, acc)
    return [
        Lazy(
            out.shape,
            out.dtype,
            lambda idx: te.cast(first + te.cast(idx[0], acc) * step, out.dtype),
        )
    ]


def _tile(ctx: GroupContext, node: Node) -> list[Lazy]:
    x = ctx.get(node.inputs[0])
    out = ctx.type_of(node.outputs[0])

    def fn(idx: Index) -> Any:
        return x(tuple(0 if d == 1 else i if d == n else i % d
                       for i, d, n in zip(idx, x.shape, out.shape, strict=True)))  # fmt: skip

    return [Lazy(out.shape, out.dtype, fn)]


def _trilu(ctx: GroupContext, node: Node) -> list[Lazy]:
    x = ctx.get(node.inputs[0])
    k = trilu_offset(const_input(ctx, node, 1))
    upper = get_op("Trilu").full_attrs(node)["upper"]
    zero = te.const(0, x.dtype)

    def fn(idx: Index) -> Any:
        offset = idx[-1] - idx[-2]
        keep = offset >= k if upper else offset <= k
        return te.select(keep, x(idx), zero)

    return [Lazy(x.shape, x.dtype, fn)]


_COMBINE = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "max": te.max, "min": te.min}


def scatter_table(shape: tuple[int, ...], rows: np.ndarray, last_only: bool) -> np.ndarray:
    """For each position of data's leading dims, the update rows written there in order
    (padded with -1): [*shape[:k], count]; `last_only` keeps one (the last write wins)."""
    k = rows.shape[1]
    hits: dict[tuple[int, ...], list[int]] = {}
    for r, position in enumerate(map(tuple, rows.tolist())):
        hits[position] = [r] if last_only else hits.get(position, []) + [r]
    count = max((len(v) for v in hits.values()), default=1)
    table = np.full((*shape[:k], count), -1, np.int32)
    for position, found in hits.items():
        table[position][: len(found)] = found
    return table


def _scatter_nd(ctx: GroupContext, node: Node) -> list[Lazy]:
    data, updates = ctx.get(node.inputs[0]), ctx.get(node.inputs[2])
    indices = const_input(ctx, node, 1)
    reduction = get_op("ScatterND").full_attrs(node)["reduction"]
    rows = scatter_positions(data.shape, indices)
    k, lead = rows.shape[1], tuple(indices.shape[:-1])
    table = scatter_table(data.shape, rows, reduction == "none")
    ref = ctx.add_constant(f"{node.name}.rows", table)

    def fn(idx: Index) -> Any:
        value = data(idx)
        for c in range(table.shape[-1]):
            r = ref[(*idx[:k], c)]
            update = updates((*unravel(te.max(r, 0), lead), *idx[k:]))
            new = update if reduction == "none" else _COMBINE[reduction](value, update)
            value = te.select(r >= 0, new, value)
        return value

    return [Lazy(data.shape, data.dtype, fn)]


def _cumsum(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """out[..., i, ...] = the sum of x[..., j, ...] over j <= i (j < i exclusive; j >= i and
    j > i when reversed), as one reduction masked by the output position."""
    x = ctx.get(node.inputs[0])
    attrs = get_op("CumSum").full_attrs(node)
    axis = cumsum_axis(len(x.shape), const_input(ctx, node, 1))
    r = te.reduce_axis((0, x.shape[axis]), "r")

    def body(*i: Any) -> Any:
        at = i[axis]
        if attrs["reverse"]:
            keep = r > at if attrs["exclusive"] else r >= at
        else:
            keep = r < at if attrs["exclusive"] else r <= at
        return te.sum(x((*i[:axis], r, *i[axis + 1 :])), axis=[r], where=keep)

    return reduce_kernel(te.compute(x.shape, body, name="cumsum"), tail)


ELEMENTWISE: dict[str, Rule] = {
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Tile": _tile,
    "Trilu": _trilu,
    "ScatterND": _scatter_nd,
}
ANCHORS: dict[str, AnchorRule] = {"CumSum": _cumsum}
