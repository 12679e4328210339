"""AffineGrid (opset 20; torch's `F.affine_grid` through the TorchScript exporter at opset 20)
as a composite: the constant grid of normalized output coordinates `(x, y[, z], 1)` times each
batch's transposed affine matrix, one batched MatMul."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter

_FLOATS = ("bfloat16", "float16", "float32", "float64")


def _size(value: Any) -> list[int]:
    size = [int(v) for v in np.asarray(value).reshape(-1)]
    if len(size) not in (4, 5) or min(size) < 1:
        raise ValueError(
            f"AffineGrid size must hold 4 or 5 positive sizes (N, C, H, W[, D first]), not {size}"
        )
    return size


def _affine_grid_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    theta = types[0]
    size = _size(consts[1])
    nd = len(size) - 2
    if theta.dtype not in _FLOATS:
        raise ValueError(f"AffineGrid theta must be a float type, not {theta.dtype}")
    if theta.shape != (size[0], nd, nd + 1):
        raise ValueError(
            f"AffineGrid theta must have shape {(size[0], nd, nd + 1)} for size {size}, not "
            f"{theta.shape}"
        )
    return [TensorType((size[0], *size[2:], nd), theta.dtype)]


def _base_grid(size: list[int], align_corners: int) -> np.ndarray:
    """`[*spatial, nd + 1]`: each output position's normalized (x, y[, z]) and a 1; x runs
    along the last axis."""
    spatial = size[2:]

    def ramp(n: int) -> np.ndarray:
        i = np.arange(n, dtype=np.float64)
        if align_corners:  # an axis of one position: torch's 0 (onnx's reference evaluator
            # takes -1 and onnxruntime 1.32 gives 1; the spec's step divides by zero)
            return np.zeros(1) if n == 1 else -1 + 2 * i / (n - 1)
        return (2 * i + 1) / n - 1

    axes = np.meshgrid(*(ramp(n) for n in spatial), indexing="ij")
    return np.stack([*reversed(axes), np.ones(spatial)], axis=-1)


def affine_grid(attrs: dict[str, Any], theta: np.ndarray, size: Any) -> np.ndarray:
    """`grid[n, ..., :] = theta[n] @ (x, y[, z], 1)` at every output position."""
    size = _size(size)
    base = _base_grid(size, attrs["align_corners"])
    grid = np.einsum("...k,njk->n...j", base, theta.astype(np.float64))
    return grid.astype(theta.dtype)


def _expand_affine_grid(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    theta, size_value = node.inputs
    size = _size(b.constants[size_value])
    nd = len(size) - 2
    base = _base_grid(size, node.attr_dict["align_corners"]).reshape(-1, nd + 1)
    points = e.const(base.astype(e.dtype(theta)), "base_grid")
    grid = e.add("MatMul", [points, e.transpose(theta, [0, 2, 1])])  # [N, positions, nd]
    e.add("Reshape", [grid, e.ints([size[0], *size[2:], nd], "shape")], outputs=list(node.outputs))


register("AffineGrid", Pattern.OPAQUE, _affine_grid_type, affine_grid, inputs=(2, 2),
         const_inputs=(1,), attrs={"align_corners": 0}, expand=_expand_affine_grid)  # fmt: skip
