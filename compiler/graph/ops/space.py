"""Data rearrangement and index ops as composites (`expand`, run by
`passes.expand_composites`): DepthToSpace and SpaceToDepth (DCR and CRD modes: Reshape,
Transpose, Reshape), OneHot (Equal against a constant index ramp, then Where) and
GatherElements (a Gather from the flattened data at computed linear indices). Each also has
its own numpy kernel, written from the ONNX spec with explicit index arithmetic."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import REQUIRED, Pattern, register
from .emit import Emitter
from .shape import check_index_range, normalize_axis

# ---- DepthToSpace, SpaceToDepth -------------------------------------------------------------


def _block_mode(op: str, attrs: dict[str, Any], shape: tuple[int, ...]) -> tuple[int, str]:
    block, mode = attrs["blocksize"], attrs["mode"]
    if len(shape) != 4:
        raise ValueError(f"{op} input must be 4-D [N, C, H, W], not shape {shape}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"{op} blocksize must be a positive integer, not {block!r}")
    if mode not in ("DCR", "CRD"):
        raise ValueError(f"{op} mode must be 'DCR' or 'CRD', not {mode!r}")
    return block, mode


def _depth_to_space_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    b, _ = _block_mode("DepthToSpace", attrs, types[0].shape)
    n, c, h, w = types[0].shape
    if c % (b * b):
        raise ValueError(f"DepthToSpace channels ({c}) must be a multiple of blocksize^2 ({b * b})")
    return [TensorType((n, c // (b * b), h * b, w * b), types[0].dtype)]


def _space_to_depth_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    b, _ = _block_mode("SpaceToDepth", attrs, types[0].shape)
    n, c, h, w = types[0].shape
    if h % b or w % b:
        raise ValueError(f"SpaceToDepth height and width ({h}, {w}) must be multiples of {b}")
    return [TensorType((n, c * b * b, h // b, w // b), types[0].dtype)]


def _depth_channel(c: Any, by: Any, bx: Any, channels: int, b: int, mode: str) -> Any:
    """The deep channel holding shallow channel `c` at block offset (by, bx)."""
    if mode == "DCR":  # depth (block offset) outermost
        return (by * b + bx) * channels + c
    return (c * b + by) * b + bx


def depth_to_space(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """`y[n, c, h*b + by, w*b + bx] = x[n, channel(c, by, bx), h, w]`."""
    b, mode = attrs["blocksize"], attrs["mode"]
    n, c, h, w = x.shape
    out_c = c // (b * b)
    cc, yy, xx = np.indices((out_c, h * b, w * b), sparse=True)
    chan = _depth_channel(cc, yy % b, xx % b, out_c, b, mode)
    return x[:, chan, yy // b, xx // b]


def space_to_depth(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """The inverse of DepthToSpace with the same blocksize and mode."""
    b, mode = attrs["blocksize"], attrs["mode"]
    n, c, h, w = x.shape
    cc, yy, xx = np.indices((c, h, w), sparse=True)
    out = np.empty((n, c * b * b, h // b, w // b), x.dtype)
    out[:, _depth_channel(cc, yy % b, xx % b, c, b, mode), yy // b, xx // b] = x
    return out


def _expand_depth_to_space(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    (x,) = node.inputs
    n, c, h, w = e.shape(x)
    k, mode = node.attr_dict["blocksize"], node.attr_dict["mode"]
    if mode == "DCR":  # [N, by, bx, C, H, W] -> [N, C, H, by, W, bx]
        split, perm = [n, k, k, c // (k * k), h, w], [0, 3, 4, 1, 5, 2]
    else:  # [N, C, by, bx, H, W] -> [N, C, H, by, W, bx]
        split, perm = [n, c // (k * k), k, k, h, w], [0, 1, 4, 2, 5, 3]
    moved = e.transpose(e.reshape(x, split), perm)
    shape = [n, c // (k * k), h * k, w * k]
    e.add("Reshape", [moved, e.ints(shape, "shape")], outputs=[node.outputs[0]])


def _expand_space_to_depth(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    (x,) = node.inputs
    n, c, h, w = e.shape(x)
    k, mode = node.attr_dict["blocksize"], node.attr_dict["mode"]
    # [N, C, H/b, by, W/b, bx] -> [N, by, bx, C, H/b, W/b] (DCR) or [N, C, by, bx, ...] (CRD)
    perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    moved = e.transpose(e.reshape(x, [n, c, h // k, k, w // k, k]), perm)
    shape = [n, c * k * k, h // k, w // k]
    e.add("Reshape", [moved, e.ints(shape, "shape")], outputs=[node.outputs[0]])


_BLOCK_ATTRS = {"blocksize": REQUIRED, "mode": "DCR"}
register("DepthToSpace", Pattern.INJECTIVE, _depth_to_space_type, depth_to_space,
         attrs=_BLOCK_ATTRS, expand=_expand_depth_to_space)  # fmt: skip
register("SpaceToDepth", Pattern.INJECTIVE, _space_to_depth_type, space_to_depth,
         attrs=_BLOCK_ATTRS, expand=_expand_space_to_depth)  # fmt: skip


# ---- OneHot ---------------------------------------------------------------------------------


def _depth(value: np.ndarray) -> int:
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise ValueError(f"OneHot depth must hold one value, not {flat.size}")
    depth = int(flat[0])
    if depth < 1:
        raise ValueError(f"OneHot depth must be positive, not {flat[0].item()!r}")
    return depth


def _one_hot_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    shape = types[0].shape
    axis = normalize_axis(attrs["axis"], len(shape) + 1, "OneHot axis")
    if types[2].shape not in ((2,),):
        raise ValueError(f"OneHot values must have shape (2,) (off, on), not {types[2].shape}")
    depth = _depth(consts[1])
    return [TensorType((*shape[:axis], depth, *shape[axis:]), types[2].dtype)]


def one_hot(attrs: dict[str, Any], indices: np.ndarray, depth: Any, values: np.ndarray):  # noqa: ANN201
    """`values[1]` where an index (negative ones counted from `depth`) equals the position
    along the new axis, `values[0]` elsewhere."""
    n = _depth(depth)
    axis = normalize_axis(attrs["axis"], indices.ndim + 1, "OneHot axis")
    idx = np.where(indices < 0, indices + n, indices)
    out = np.full((*indices.shape[:axis], n, *indices.shape[axis:]), values[0], values.dtype)
    if out.size == 0:  # a huge depth over no indices: nothing to compare
        return out
    for k in range(n):
        where = (slice(None),) * axis + (k,)
        out[where] = np.where(idx == k, values[1], values[0])
    return out


def _expand_one_hot(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    indices, depth_value, values = node.inputs
    shape, dtype = e.shape(indices), e.dtype(indices)
    depth = _depth(b.constants[depth_value])
    axis = normalize_axis(node.attr_dict["axis"], len(shape) + 1, "OneHot axis")
    (y,) = node.outputs
    if 0 in shape:  # no indices: no ramp (its length, the depth, is bounded by nothing else)
        dims = e.ints([*shape[:axis], depth, *shape[axis:]], "shape")
        e.add("Expand", [e.take(values, 0, 0), dims], outputs=[y])
        return
    zero, n = e.const(0, "zero", dtype), e.const(depth, "depth", dtype)
    wrapped = e.add("Where", [e.add("Less", [indices, zero]), e.add("Add", [indices, n]), indices])
    lifted = e.reshape(wrapped, [*shape[:axis], 1, *shape[axis:]])
    ramp = e.const(np.arange(depth).reshape([depth] + [1] * (len(shape) - axis)), "ramp", dtype)
    hit = e.add("Equal", [lifted, ramp])
    off, on = e.take(values, 0, 0), e.take(values, 0, 1)
    e.add("Where", [hit, on, off], outputs=[y])


register("OneHot", Pattern.OPAQUE, _one_hot_type, one_hot, inputs=(3, 3), const_inputs=(1,),
         attrs={"axis": -1}, expand=_expand_one_hot)  # fmt: skip


# ---- GatherElements -------------------------------------------------------------------------


def _gather_elements_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    data, indices = types[0].shape, types[1].shape
    axis = normalize_axis(attrs["axis"], len(data), "GatherElements axis")
    if types[1].dtype not in ("int32", "int64"):
        raise ValueError(f"GatherElements indices must be int32 or int64, not {types[1].dtype}")
    if len(indices) != len(data) or any(
        i != axis and k > d for i, (k, d) in enumerate(zip(indices, data, strict=True))
    ):
        raise ValueError(
            f"GatherElements indices shape {indices} must have the data's rank and no "
            f"larger dims (but along axis {axis}), data shape {data}"
        )
    if data[axis] == 0 and 0 not in indices:
        raise ValueError(f"GatherElements cannot index the empty axis {axis} of shape {data}")
    check_index_range("GatherElements", consts[1], data[axis], axis)
    return [TensorType(indices, types[0].dtype)]


def gather_elements(attrs: dict[str, Any], data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """`out[i...] = data[i...]` with the axis coordinate replaced by `indices[i...]`."""
    axis = attrs["axis"] % data.ndim
    n = data.shape[axis]
    check_index_range("GatherElements", indices, n, axis)
    coords = list(np.indices(indices.shape, sparse=True))
    coords[axis] = np.where(indices < 0, indices + n, indices)
    return data[tuple(coords)]


def _expand_gather_elements(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    data, indices = node.inputs
    shape, ishape = e.shape(data), e.shape(indices)
    axis = node.attr_dict["axis"] % len(shape)
    strides = [int(np.prod(shape[i + 1 :])) for i in range(len(shape))]
    fixed = sum(
        np.arange(d).reshape([-1 if j == i else 1 for j in range(len(ishape))]) * strides[i]
        for i, d in enumerate(ishape)
        if i != axis
    )
    idx = indices if e.dtype(indices) == "int64" else e.add("Cast", [indices], {"to": "int64"})
    zero, n = e.const(0, "zero", "int64"), e.const(shape[axis], "extent", "int64")
    wrapped = e.add("Where", [e.add("Less", [idx, zero]), e.add("Add", [idx, n]), idx])
    linear = e.add("Mul", [wrapped, e.const(strides[axis], "stride", "int64")])
    offsets = np.broadcast_to(np.asarray(fixed, np.int64), ishape)
    linear = e.add("Add", [linear, e.const(offsets, "offsets", "int64")])
    flat = e.reshape(data, [int(np.prod(shape))])
    e.add("Gather", [flat, linear], {"axis": 0}, outputs=[node.outputs[0]])


register("GatherElements", Pattern.OPAQUE, _gather_elements_type, gather_elements,
         inputs=(2, 2), attrs={"axis": 0}, expand=_expand_gather_elements)  # fmt: skip
