"""CenterCropPad (a Slice and a zero Pad about the centre), MaxUnpool (a Gather by a constant
map of where each input element lands) and Det (the Leibniz sum over permutations: a Gather of
each permutation's elements, a ReduceProd and a signed ReduceSum), all composites."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter
from .pool_indices import expand_max_unpool_runtime

_FLOATS = ("bfloat16", "float16", "float32", "float64")

# CenterCropPad ---------------------------------------------------------------------------------


def _targets(attrs: dict[str, Any], shape: tuple, sizes: Any) -> dict[int, int]:
    """axis -> target length."""
    rank = len(shape)
    sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
    axes = attrs.get("axes")
    axes = list(range(rank)) if axes is None else list(axes)
    if len(axes) != len(sizes):
        raise ValueError(f"CenterCropPad shape must have one value per axis {axes}, not {sizes}")
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise ValueError(f"CenterCropPad axes must be distinct axes of rank {rank}, not {axes}")
    if min(sizes, default=1) < 0:
        raise ValueError(f"CenterCropPad shape must be non-negative, not {sizes}")
    return {a % rank: s for a, s in zip(axes, sizes, strict=True)}


def _crop_pad_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    targets = _targets(attrs, x.shape, consts[1])
    shape = tuple(targets.get(a, d) for a, d in enumerate(x.shape))
    return [TensorType(shape, x.dtype)]


def _plan(shape: tuple, targets: dict[int, int]) -> tuple[dict, list[int]]:
    """(axis -> (start, stop) to crop, ONNX Pad pads) of a centre crop or pad."""
    crops, before, after = {}, [0] * len(shape), [0] * len(shape)
    for axis, size in targets.items():
        dim = shape[axis]
        if size < dim:
            start = (dim - size) // 2
            crops[axis] = (start, start + size)
        elif size > dim:
            before[axis] = (size - dim) // 2
            after[axis] = size - dim - before[axis]
    return crops, before + after


def center_crop_pad(attrs: dict[str, Any], x: np.ndarray, sizes: Any) -> np.ndarray:
    crops, pads = _plan(x.shape, _targets(attrs, x.shape, sizes))
    index = tuple(slice(*crops.get(a, (0, d))) for a, d in enumerate(x.shape))
    rank = x.ndim
    return np.pad(x[index], [(pads[a], pads[rank + a]) for a in range(rank)])


def _expand_crop_pad(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, sizes = node.inputs
    crops, pads = _plan(e.shape(x), _targets(node.attr_dict, e.shape(x), b.constants[sizes]))
    for axis, (start, stop) in crops.items():
        x = e.slice(x, axis, start, stop)
    if any(pads):
        x = e.add("Pad", [x, e.ints(pads, "pads")])
    e.rename(x, node.outputs[0])


register("CenterCropPad", Pattern.INJECTIVE, _crop_pad_type, center_crop_pad,
         attrs={"axes": None}, inputs=(2, 2), const_inputs=(1,),
         expand=_expand_crop_pad)  # fmt: skip


# MaxUnpool -------------------------------------------------------------------------------------


def _unpool_shapes(attrs: dict[str, Any], shape: tuple, out: Any) -> tuple[tuple, tuple]:
    """(shape that the indices address, output shape)."""
    nd = len(shape) - 2
    kernel = attrs.get("kernel_shape")
    if nd < 1 or kernel is None or len(kernel) != nd:
        raise ValueError(
            f"MaxUnpool kernel_shape must have one value per spatial dim of input {shape}, "
            f"not {kernel}"
        )
    strides = list(attrs.get("strides") or (1,) * nd)
    pads = list(attrs.get("pads") or (0,) * 2 * nd)
    if len(strides) != nd or len(pads) != 2 * nd:
        raise ValueError(
            f"MaxUnpool strides and pads must have {nd} and {2 * nd} values, not {strides} and "
            f"{pads}"
        )
    inferred = tuple(shape[:2]) + tuple(
        (n - 1) * s - (pads[i] + pads[nd + i]) + k
        for i, (n, s, k) in enumerate(zip(shape[2:], strides, kernel, strict=True))
    )
    if out is None:
        return inferred, inferred
    out = tuple(int(v) for v in np.asarray(out).reshape(-1))
    if len(out) != len(shape) or any(o < i for o, i in zip(out, inferred, strict=True)):
        raise ValueError(
            f"MaxUnpool output_shape must have rank {len(shape)} and hold the unpooled shape "
            f"{inferred}, not {out}"
        )
    return inferred, out


def _landing(x_size: int, indices: np.ndarray, total: int) -> np.ndarray:
    """[total] map: 1 + the input element that lands at each position (the last one written
    wins), 0 where none does."""
    flat = np.asarray(indices, np.int64).reshape(-1)
    if flat.size != x_size or ((flat < 0) | (flat >= total)).any():
        raise ValueError(
            f"MaxUnpool indices must hold one position in [0, {total - 1}] per input element"
        )
    where = np.zeros(total, np.int64)
    where[flat] = np.arange(1, flat.size + 1)
    return where


def max_unpool(attrs: dict[str, Any], x: np.ndarray, indices: Any, out: Any = None):
    inferred, shape = _unpool_shapes(attrs, x.shape, out)
    where = _landing(x.size, indices, int(np.prod(inferred)))
    y = np.concatenate([np.zeros(1, x.dtype), x.reshape(-1)])[where].reshape(inferred)
    return np.pad(y, [(0, o - i) for o, i in zip(shape, inferred, strict=True)])


def _unpool_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    _, shape = _unpool_shapes(attrs, x.shape, consts[2] if len(consts) > 2 else None)
    if types[1].shape != x.shape:
        raise ValueError(f"MaxUnpool indices must have the input's shape {x.shape}")
    return [TensorType(shape, x.dtype)]


def _expand_unpool(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, indices = node.inputs[:2]
    out = b.constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    inferred, shape = _unpool_shapes(node.attr_dict, e.shape(x), out)
    if indices not in b.constants:  # a MaxPool's, computed at run time
        expand_max_unpool_runtime(b, node, inferred, shape)
        return
    where = _landing(int(np.prod(e.shape(x))), b.constants[indices], int(np.prod(inferred)))
    zero = e.const(np.zeros(1, e.dtype(x)), "zero")
    values = e.add("Concat", [zero, e.reshape(x, [-1])], {"axis": 0})
    y = e.reshape(e.add("Gather", [values, e.ints(where, "where")], {"axis": 0}), inferred)
    extra = [o - i for o, i in zip(shape, inferred, strict=True)]
    if any(extra):
        y = e.add("Pad", [y, e.ints([0] * len(shape) + extra, "pads")])
    e.rename(y, node.outputs[0])


register("MaxUnpool", Pattern.INJECTIVE, _unpool_type, max_unpool, inputs=(2, 3),
         const_inputs=(2,), attrs={"kernel_shape": None, "pads": None, "strides": None},
         expand=_expand_unpool)  # fmt: skip


# Det -------------------------------------------------------------------------------------------

#: the largest matrix Det expands (the Leibniz sum has size! terms: 720 at 6)
DET_MAX_SIZE = 6


def _det_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    if x.dtype not in _FLOATS:
        raise ValueError(f"Det input must be a float type, not {x.dtype}")
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"Det input must be square matrices [..., M, M], not {x.shape}")
    if x.shape[-1] > DET_MAX_SIZE:
        raise ValueError(
            f"Det matrices must be at most {DET_MAX_SIZE} x {DET_MAX_SIZE} (its expansion sums "
            f"size! products), not {x.shape[-1]} x {x.shape[-1]}"
        )
    return [TensorType(x.shape[:-2], x.dtype)]


def det(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return np.asarray(np.linalg.det(x.astype(np.float64)), x.dtype)


def _permutations(size: int) -> tuple[np.ndarray, np.ndarray]:
    """([size!, size] flat positions row * size + column of each permutation, [size!] signs)."""
    perms = np.array(list(itertools.permutations(range(size))), np.int64).reshape(-1, size)
    inversions = sum(
        (perms[:, i] > perms[:, j]).astype(np.int64)
        for i in range(size)
        for j in range(i + 1, size)
    )
    signs = np.where(np.asarray(inversions) % 2, -1.0, 1.0)
    return np.arange(size) * size + perms, signs


def _expand_det(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    (x,) = node.inputs
    *batch, size, _ = e.shape(x)
    positions, signs = _permutations(size)
    flat = e.reshape(x, [*batch, size * size])
    picked = e.add("Gather", [flat, e.ints(positions, "perms")], {"axis": len(batch)})
    products = e.add("ReduceProd", [picked, e.ints([-1], "axes")], {"keepdims": 0})
    signed = e.add("Mul", [products, e.const(signs.astype(e.dtype(x)), "signs")])
    e.add("ReduceSum", [signed, e.ints([-1], "axes")], {"keepdims": 0}, outputs=[node.outputs[0]])


register("Det", Pattern.OPAQUE, _det_type, det, expand=_expand_det)
