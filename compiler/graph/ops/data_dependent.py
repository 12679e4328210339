"""Ops whose output shape depends on input values (NonZero, Unique, NonMaxSuppression, Compress).

The graph IR has static shapes, so each such op takes the inputs that decide its shape as
constants (`const_inputs`: a model whose values are computed at run time is refused, naming the
node and the input). With those known, NonZero, Unique and NonMaxSuppression are constants
themselves (their expansion is their value), and Compress is a Gather of the kept indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, get_op, register
from .emit import Emitter

_FLOATS = ("bfloat16", "float16", "float32", "float64")


def _fold_expand(op: str) -> Any:
    """An `expand` that replaces the node by constants: its outputs computed from its inputs
    (all constants, `const_inputs`)."""

    def expand(b: GraphBuilder, node: Node) -> None:
        arrays = [b.constants[i] if i else None for i in node.inputs]
        for out, value in zip(node.outputs, get_op(op).run(node, arrays), strict=False):
            if out:
                b.add_constant(out, np.asarray(value))

    return expand


def _axis(axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"{op} axis must lie in [{-rank}, {rank - 1}], not {axis}")
    return axis % rank


# NonZero ---------------------------------------------------------------------------------------


def non_zero(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """The coordinates of the non-zero elements, one column each, in row-major order."""
    if x.ndim == 0:  # (onnxruntime: a scalar is a tensor of rank 1 here)
        x = x.reshape(1)
    return np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)


def _non_zero_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [TensorType(non_zero(attrs, consts[0]).shape, "int64")]


register("NonZero", Pattern.OPAQUE, _non_zero_type, non_zero, const_inputs=(0,),
         expand=_fold_expand("NonZero"))  # fmt: skip


# Compress --------------------------------------------------------------------------------------


def _kept(attrs: dict[str, Any], shape: tuple[int, ...], condition: np.ndarray) -> tuple:
    """(axis or None for the flattened input, indices kept along it)."""
    condition = np.asarray(condition)
    if condition.ndim != 1:
        raise ValueError(f"Compress condition must have rank 1, not shape {condition.shape}")
    axis = attrs.get("axis")
    length = int(np.prod(shape)) if axis is None else shape[_axis(axis, len(shape), "Compress")]
    # entries past the axis's length are ignored, true ones too, as onnxruntime does
    kept = np.flatnonzero(condition[:length]).astype(np.int64)
    return (None if axis is None else _axis(axis, len(shape), "Compress")), kept


def compress(attrs: dict[str, Any], x: np.ndarray, condition: np.ndarray) -> np.ndarray:
    axis, kept = _kept(attrs, x.shape, condition)
    return np.take(x.reshape(-1) if axis is None else x, kept, axis=axis or 0)


def _compress_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    axis, kept = _kept(attrs, x.shape, consts[1])
    if axis is None:
        return [TensorType((kept.size,), x.dtype)]
    return [TensorType((*x.shape[:axis], kept.size, *x.shape[axis + 1 :]), x.dtype)]


def _expand_compress(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, condition = node.inputs
    axis, kept = _kept(node.attr_dict, e.shape(x), b.constants[condition])
    if axis is None:
        x, axis = e.reshape(x, [int(np.prod(e.shape(x)))]), 0
    e.add("Gather", [x, e.ints(kept, "kept")], {"axis": axis}, outputs=[node.outputs[0]])


register("Compress", Pattern.INJECTIVE, _compress_type, compress, attrs={"axis": None},
         inputs=(2, 2), const_inputs=(1,), expand=_expand_compress)  # fmt: skip


# Unique ----------------------------------------------------------------------------------------


def unique(attrs: dict[str, Any], x: np.ndarray) -> tuple[np.ndarray, ...]:
    """(unique values or slices, first index of each, each element's unique index, counts);
    `sorted=0` keeps them in order of first occurrence."""
    axis = attrs.get("axis")
    if axis is None:
        values, axis = x.reshape(-1), 0
    else:
        values, axis = x, _axis(axis, x.ndim, "Unique")
    _, first, inverse, counts = np.unique(
        values, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    if not attrs.get("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    y = np.take(values, first, axis=axis)
    as_int = [np.asarray(a, np.int64).reshape(-1) for a in (first, inverse, counts)]
    return (y, *as_int)


def _unique_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [TensorType(v.shape, str(v.dtype)) for v in unique(attrs, consts[0])]


register("Unique", Pattern.OPAQUE, _unique_type, unique, attrs={"axis": None, "sorted": 1},
         outputs=(1, 4), const_inputs=(0,), expand=_fold_expand("Unique"))  # fmt: skip


# NonMaxSuppression -----------------------------------------------------------------------------


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """[..., 4] boxes as (y_min, x_min, y_max, x_max), either corner order accepted (in the
    boxes' own precision, as onnxruntime computes: it decides an overlap at the threshold)."""
    if center_point_box:
        x, y, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2),
                     np.maximum(x1, x2)], axis=-1)  # fmt: skip


def _overlaps(boxes: np.ndarray, others: np.ndarray, threshold: float) -> np.ndarray:
    """[len(boxes), len(others)]: whether each pair's intersection over union lies above
    `threshold` (`_iou_above`)."""
    return _iou_above(boxes[:, None], others[None], threshold)


#: candidates whose overlaps are computed together (a tile of the pairs' matrix)
_NMS_TILE = 256
#: box pairs that meet along x, past which NMS works tile by tile instead (memory)
_NMS_PAIRS = 1 << 25
_PAIR_CHUNK = 1 << 20


def _greedy(candidates: np.ndarray, threshold: float, limit: int) -> list[int]:
    """Positions in `candidates` (corners, by falling score) that greedy NMS keeps: each box
    that overlaps no kept box before it, at most `limit`.

    The boxes that can overlap are found first by a sweep along x (sorted by their left
    edge, a box can only overlap the boxes that start before its right edge), so a
    detector's thousands of boxes, spread over the image (and over classes, by torchvision's
    coordinate offsets), cost the pairs that meet, not all pairs."""
    m = len(candidates)
    left, right = candidates[:, 1], candidates[:, 3]
    by_left = np.argsort(left, kind="stable")
    ends = np.searchsorted(left[by_left], right[by_left], side="left")
    counts = np.maximum(ends - np.arange(m) - 1, 0)
    if int(counts.sum()) > _NMS_PAIRS:
        return _greedy_tiled(candidates, threshold, limit)
    firsts = np.repeat(np.arange(m), counts)
    seconds = firsts + 1 + np.arange(len(firsts)) - np.repeat(np.cumsum(counts) - counts, counts)
    # the boxes' columns in left-edge order: each pair's two reads are near the last pair's
    y1, x1, y2, x2 = (np.ascontiguousarray(candidates[by_left, i]) for i in range(4))
    area = (y2 - y1) * (x2 - x1)
    edges = []
    for at in range(0, len(firsts), _PAIR_CHUNK):
        a, b = firsts[at : at + _PAIR_CHUNK], seconds[at : at + _PAIR_CHUNK]
        # `_iou_above`'s arithmetic, on columns (the same float operations, fewer copies)
        h = np.minimum(y2[a], y2[b]) - np.maximum(y1[a], y1[b])
        w = np.minimum(x2[a], x2[b]) - np.maximum(x1[a], x1[b])
        inter = np.where((h > 0) & (w > 0), h * w, 0.0)
        area_a, area_b = area[a], area[b]
        union = area_a + area_b - inter
        valid = (inter > 0) & (area_a > 0) & (area_b > 0) & (union > 0)
        hit = valid & (inter / np.where(valid, union, 1) > threshold)
        a, b = by_left[a[hit]], by_left[b[hit]]  # (positions in score order)
        edges.append(np.stack([np.minimum(a, b), np.maximum(a, b)]))
    low, high = np.concatenate(edges, axis=1) if edges else np.zeros((2, 0), np.int64)
    order = np.argsort(low, kind="stable")
    low, high = low[order], high[order]
    starts = np.searchsorted(low, np.arange(m + 1)).tolist()
    suppressed = np.zeros(m, bool)
    kept: list[int] = []
    for k in range(m):
        if suppressed[k]:
            continue
        kept.append(k)
        if len(kept) >= limit:
            break
        if starts[k + 1] > starts[k]:
            suppressed[high[starts[k] : starts[k + 1]]] = True
    return kept


def _iou_above(a: np.ndarray, b: np.ndarray, threshold: float) -> np.ndarray:
    """Elementwise over broadcast corners `a` and `b` (..., 4): intersection over union above
    `threshold`, boxes with no area or no intersection never (symmetric in a and b)."""
    sides = np.minimum(a[..., 2:], b[..., 2:]) - np.maximum(a[..., :2], b[..., :2])
    inter = np.where((sides > 0).all(axis=-1), sides[..., 0] * sides[..., 1], 0.0)
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    union = area_a + area_b - inter
    valid = (inter > 0) & (area_a > 0) & (area_b > 0) & (union > 0)
    return valid & (inter / np.where(valid, union, 1) > threshold)


def _greedy_tiled(candidates: np.ndarray, threshold: float, limit: int) -> list[int]:
    """`_greedy` for boxes that mostly meet (one pair matrix would not fit): tile by tile,
    the kept boxes of earlier tiles suppress a tile's boxes in one step, then the tile is
    resolved in order with its own overlaps."""
    kept: list[int] = []
    for start in range(0, len(candidates), _NMS_TILE):
        if len(kept) >= limit:
            break
        tile = candidates[start : start + _NMS_TILE]
        suppressed = np.zeros(len(tile), bool)
        if kept:
            suppressed |= _overlaps(candidates[kept], tile, threshold).any(axis=0)
        inside = _overlaps(tile, tile, threshold)
        for k in range(len(tile)):
            if suppressed[k]:
                continue
            kept.append(start + k)
            if len(kept) >= limit:
                break
            suppressed[k + 1 :] |= inside[k, k + 1 :]
    return kept


def _scalar(value: np.ndarray | None, default: float | None, what: str) -> float | None:
    if value is None:
        return default
    value = np.asarray(value)
    if value.size != 1:
        raise ValueError(f"NonMaxSuppression {what} must hold one value, not shape {value.shape}")
    return value.reshape(-1)[0].item()


def non_max_suppression(
    attrs: dict[str, Any],
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output: np.ndarray | None = None,
    iou: np.ndarray | None = None,
    score: np.ndarray | None = None,
) -> np.ndarray:
    """[selected, 3] rows of (batch, class, box): per batch and class, boxes by falling score
    (ties by index) above `score`, each kept unless it overlaps a kept one by more than `iou`,
    at most `max_output` of them."""
    _check_nms(boxes.shape, scores.shape)
    limit = max(int(_scalar(max_output, 0, "max_output_boxes_per_class")), 0)
    iou_threshold = float(_scalar(iou, 0.0, "iou_threshold"))
    if not 0 <= iou_threshold <= 1:  # (onnxruntime refuses it too)
        raise ValueError(f"NonMaxSuppression iou_threshold must lie in [0, 1], not {iou_threshold}")
    score_threshold = _scalar(score, None, "score_threshold")
    corners = _corners(boxes, attrs.get("center_point_box", 0))
    rows = []
    for n, c in np.ndindex(scores.shape[:2]):
        order = np.argsort(-scores[n, c], kind="stable")
        if score_threshold is not None:
            order = order[scores[n, c, order] > score_threshold]
        if limit:
            kept = _greedy(corners[n, order], iou_threshold, limit)
            rows += [(n, c, int(order[k])) for k in kept]
    return np.array(rows, np.int64).reshape(-1, 3)


def _check_nms(boxes: tuple, scores: tuple) -> None:
    if len(boxes) != 3 or boxes[2] != 4:
        raise ValueError(f"NonMaxSuppression boxes must have shape [N, boxes, 4], not {boxes}")
    if len(scores) != 3 or scores[0] != boxes[0] or scores[2] != boxes[1]:
        raise ValueError(
            f"NonMaxSuppression scores must have shape [{boxes[0]}, classes, {boxes[1]}], not "
            f"{scores}"
        )


def _nms_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    if attrs.get("center_point_box", 0) not in (0, 1):
        raise ValueError(
            f"NonMaxSuppression attribute center_point_box must be 0 or 1, not "
            f"{attrs['center_point_box']!r}"
        )
    if types[0].dtype not in _FLOATS:
        raise ValueError(f"NonMaxSuppression boxes must be a float type, not {types[0].dtype}")
    return [TensorType(_selection(attrs, *consts).shape, "int64")]


#: the last selection computed, with its inputs: type inference computes it to know its length,
#: then the import's fold (or the reference executor) asks for the same one
_LAST_SELECTION: list[tuple[tuple, tuple, np.ndarray]] = []


def _selection(attrs: dict[str, Any], *arrays: np.ndarray | None) -> np.ndarray:
    """`non_max_suppression`, computed once for the same read-only input arrays."""
    key = (int(attrs.get("center_point_box", 0)), len(arrays))
    frozen = all(a is None or not np.asarray(a).flags.writeable for a in arrays)
    if frozen and _LAST_SELECTION:
        last_key, last_arrays, last = _LAST_SELECTION[0]
        if last_key == key and all(a is b for a, b in zip(arrays, last_arrays, strict=True)):
            return last
    selected = non_max_suppression(attrs, *arrays)
    if frozen:  # (the arrays are held, so their identities stay theirs)
        selected.flags.writeable = False
        _LAST_SELECTION[:] = [(key, arrays, selected)]
    return selected


register("NonMaxSuppression", Pattern.OPAQUE, _nms_type, _selection,
         attrs={"center_point_box": 0}, inputs=(2, 5), const_inputs=(0, 1, 2, 3, 4),
         expand=_fold_expand("NonMaxSuppression"))  # fmt: skip
