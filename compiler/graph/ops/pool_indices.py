"""MaxPool's second output, `Indices`, and MaxUnpool by indices computed at run time.

Both walk the pooling window tap by tap (`tap_plan`: each tap's offset into the padded input
and, per output position, the flat position it reads, -1 in the padding); the numpy kernels and
the expansions read the same plan. MaxPool's index is the first tap in window order (row-major)
whose value equals the window's maximum, as onnxruntime's `>` scan leaves it: a Where chain
over the taps' strided Slices, fused into one kernel. ONNX's flat index counts over the whole
input, `(n * C + c) * H * W + h * W + w`, or with `storage_order=1` `w * H + h` within the
image (column-major; every spatial rank).

MaxUnpool with run-time indices (a MaxPool's, as SegNet and ENet unpool) places each input
element at its index by the same windows: tap t's candidates `Where(I == position_t, X, 0)`
are spread to the output with zeros between them (the stride) and shifted to the tap's offset,
and where two windows reach one position the element written last in C order wins, as
onnxruntime's loop leaves it. So each index must lie in its element's window (a MaxPool of the
same kernel, strides and pads gives such indices); an element whose index lies elsewhere is
dropped. Constant indices keep the exact Gather of `crop_unpool.py`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node
from .emit import Emitter


@dataclass(frozen=True)
class Tap:
    """One position of the pooling window: its offset along each spatial axis into the padded
    input, and the flat spatial position it reads per output position (-1 in the padding)."""

    offset: tuple[int, ...]
    positions: np.ndarray  # int64 [*outs]

    @property
    def all_valid(self) -> bool:
        return bool((self.positions >= 0).all())


def spatial_strides(dims: tuple[int, ...], storage_order: int) -> list[int]:
    """Each spatial axis's stride in ONNX's flat index: row-major, or column-major when
    `storage_order` is 1."""
    order = range(len(dims)) if storage_order else reversed(range(len(dims)))
    strides, step = [0] * len(dims), 1
    for axis in order:
        strides[axis], step = step, step * dims[axis]
    return strides


def tap_plan(
    dims: tuple[int, ...],
    kernel: tuple[int, ...],
    begin: list[int],
    strides: list[int],
    dilations: list[int],
    outs: list[int],
    flat_strides: list[int],
) -> list[Tap]:
    """The window's taps in row-major order over `kernel`."""
    taps = []
    for k in itertools.product(*(range(n) for n in kernel)):
        offset = tuple(i * d for i, d in zip(k, dilations, strict=True))
        grids = np.meshgrid(*(np.arange(o) for o in outs), indexing="ij")
        flat = np.zeros(tuple(outs), np.int64)
        valid = np.ones(tuple(outs), bool)
        for axis, grid in enumerate(grids):
            pos = grid * strides[axis] + offset[axis] - begin[axis]
            valid &= (pos >= 0) & (pos < dims[axis])
            flat += pos * flat_strides[axis]
        taps.append(Tap(offset, np.where(valid, flat, -1)))
    return taps


def _tap_slices(tap: Tap, strides: list[int], outs: list[int]) -> tuple[slice, ...]:
    return tuple(
        slice(o, o + (n - 1) * s + 1, s) for o, s, n in zip(tap.offset, strides, outs, strict=True)
    )


def _image_base(shape: tuple[int, ...]) -> np.ndarray:
    """[N, C, 1, ...] int64: the flat index of each image's first element."""
    n, c, *dims = shape
    size = int(np.prod(dims, dtype=np.int64))
    base = np.arange(n * c, dtype=np.int64).reshape(n, c) * size
    return base.reshape(n, c, *(1,) * len(dims))


# MaxPool's Indices -------------------------------------------------------------------------------


def pool_taps(geometry: tuple, x_shape: tuple, storage_order: int) -> list[Tap]:
    """`tap_plan` of a MaxPool from its `_pool_pads` geometry."""
    kernel, begin, _, _, strides, dilations, outs = geometry
    dims = tuple(x_shape[2:])
    return tap_plan(
        dims, kernel, begin, strides, dilations, outs, spatial_strides(dims, storage_order)
    )


def max_pool_indices(
    x: np.ndarray, xp: np.ndarray, y: np.ndarray, geometry: tuple, storage_order: int
) -> np.ndarray:
    """numpy: Indices of a MaxPool, from the padded input `xp` and the maxima `y`."""
    strides, outs = geometry[4], geometry[6]
    index = np.full(y.shape, -1, np.int64)
    for tap in reversed(pool_taps(geometry, x.shape, storage_order)):
        hit = (xp[(..., *_tap_slices(tap, strides, outs))] == y) & (tap.positions >= 0)
        index = np.where(hit, tap.positions, index)
    return np.where(index >= 0, index + _image_base(x.shape), -1)


def expand_max_pool_indices(b: GraphBuilder, node: Node, geometry: tuple) -> None:
    """MaxPool(X) for Y, then Indices as the Where chain over the taps of the padded X."""
    e = Emitter(b, node)
    (x,) = node.inputs
    y, indices = node.outputs
    attrs = node.attr_dict
    pooled = {k: v for k, v in attrs.items() if k != "storage_order"}
    e.add("MaxPool", [x], pooled, outputs=[y])
    kernel, begin, end, extra, strides, _, outs = geometry
    dtype, rank = e.dtype(x), len(e.shape(x))
    low = -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min
    pads = [0, 0, *begin, 0, 0, *(a + b for a, b in zip(end, extra, strict=True))]
    xp = x if not any(pads) else e.add("Pad", [x, e.ints(pads, "pads"), e.const(low, "low", dtype)])
    axes = e.ints(list(range(2, rank)), "axes")
    steps = e.ints(strides, "steps")
    index = e.const(-1, "none", "int64")
    for tap in reversed(pool_taps(geometry, e.shape(x), attrs.get("storage_order", 0))):
        ends = [o + (n - 1) * s + 1 for o, s, n in zip(tap.offset, strides, outs, strict=True)]
        starts = e.ints(tap.offset, "starts")
        value = e.add("Slice", [xp, starts, e.ints(ends, "ends"), axes, steps])
        hit = e.add("Equal", [value, y])
        if not tap.all_valid:
            hit = e.add("And", [hit, e.const(tap.positions >= 0, "valid")])
        index = e.add("Where", [hit, e.const(tap.positions, "position"), index])
    base = e.const(_image_base(e.shape(x)), "base")
    found = e.add("GreaterOrEqual", [index, e.const(0, "zero", "int64")])
    e.add("Where", [found, e.add("Add", [index, base]), index], outputs=[indices])


# MaxUnpool by run-time indices -----------------------------------------------------------------


def _unpool_taps(attrs: dict[str, Any], x_shape: tuple, inferred: tuple) -> list[Tap]:
    nd = len(x_shape) - 2
    kernel = tuple(attrs["kernel_shape"])
    strides = list(attrs.get("strides") or (1,) * nd)
    begin = list(attrs.get("pads") or (0,) * 2 * nd)[:nd]
    dims = tuple(inferred[2:])
    return tap_plan(
        dims, kernel, begin, strides, [1] * nd, list(x_shape[2:]), spatial_strides(dims, 0)
    )


def expand_max_unpool_runtime(b: GraphBuilder, node: Node, inferred: tuple, shape: tuple) -> None:
    """MaxUnpool whose indices are computed at run time (see the module docstring)."""
    e = Emitter(b, node)
    x, indices = node.inputs[:2]
    attrs = node.attr_dict
    x_shape, dtype = e.shape(x), e.dtype(x)
    nd = len(x_shape) - 2
    strides = list(attrs.get("strides") or (1,) * nd)
    begin = list(attrs.get("pads") or (0,) * 2 * nd)[:nd]
    idx = indices if e.dtype(indices) == "int64" else e.add("Cast", [indices], {"to": "int64"})
    # each image's indices relative to its own first element (of the output's shape)
    local = e.add("Sub", [idx, e.const(_image_base(shape), "base")])
    zero = e.const(np.zeros((), dtype), "zero")
    out, taps = None, _unpool_taps(attrs, x_shape, inferred)
    for k, tap in reversed(list(enumerate(taps))):
        hit = e.add("Equal", [local, e.const(tap.positions, "position")])
        placed = [e.add("Where", [hit, x, zero]), hit]
        kernel_pos = np.unravel_index(k, tuple(attrs["kernel_shape"]))
        for axis in range(nd):
            shift = int(kernel_pos[axis]) - begin[axis]
            placed = [
                _spread(e, v, 2 + axis, strides[axis], shift, shape[2 + axis]) for v in placed
            ]
        value, mask = placed
        out = value if out is None else e.add("Where", [mask, value, out])
    e.rename(out, node.outputs[0])


def _spread(e: Emitter, value: str, axis: int, stride: int, shift: int, length: int) -> str:
    """`value` along `axis` placed at positions `i * stride + shift` of a zero (false) axis of
    `length`, what falls outside cut off."""
    shape = list(e.shape(value))
    n, rank = shape[axis], len(shape)
    if stride > 1:  # zeros between the elements: [.., n, 1] padded to [.., n, stride]
        wide = e.add("Unsqueeze", [value, e.ints([axis + 1], "axes")])
        pads = [0] * (rank + 1) * 2
        pads[rank + 1 + axis + 1] = stride - 1
        wide = e.add("Pad", [wide, e.ints(pads, "pads")])
        value = e.reshape(wide, [*shape[:axis], n * stride, *shape[axis + 1 :]])
    size = n * stride
    if shift < 0:
        value, size = e.slice(value, axis, -shift, size), size + shift
    before = max(shift, 0)
    after = length - before - size
    if after < 0:
        value, after = e.slice(value, axis, 0, size + after), 0
    if before or after:
        pads = [0] * rank * 2
        pads[axis], pads[rank + axis] = before, after
        value = e.add("Pad", [value, e.ints(pads, "pads")])
    return value


__all__ = [
    "expand_max_pool_indices",
    "expand_max_unpool_runtime",
    "max_pool_indices",
    "pool_taps",
    "spatial_strides",
    "tap_plan",
]
