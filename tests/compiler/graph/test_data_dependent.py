"""Ops whose output shape depends on input values (NonZero, Unique, NonMaxSuppression, Compress):
folded at compile time when those inputs are constants, compiled, against onnxruntime; run
after the compiled part when they are computed at run time (tests/compiler/frontend/
test_onnx_tail.py has more of those)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, from_onnx
from tensorforge.compiler.graph.ops import data_dependent
from tensorforge.compiler.graph.registry import UnsupportedOpError


def _model(nodes, inputs, outputs, consts):  # noqa: ANN001, ANN202
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [oh.make_empty_tensor_value_info(n) for n in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def _check(model, feed: dict) -> None:  # noqa: ANN001
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)
    for value, expected in zip(model.graph.output, want, strict=True):
        assert got[value.name].dtype == expected.dtype
        np.testing.assert_allclose(got[value.name], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("axis", "length"), [(None, 30), (0, 4), (-1, 4), (-1, 9)])
def test_compress_of_a_run_time_input_by_a_constant_condition(
    axis: int | None, length: int
) -> None:
    # a shorter condition drops the rest; a longer one's extra entries are ignored
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    cond = rng.random(length) > 0.4
    cond[-1] = True
    attrs = {} if axis is None else {"axis": axis}
    nodes = [
        oh.make_node("Compress", ["x", "c"], ["k"], **attrs),
        oh.make_node("Relu", ["k"], ["y"]),
    ]
    _check(_model(nodes, [("x", (5, 6))], ["y"], {"c": cond}), {"x": x})


def test_non_zero_of_a_large_constant_mask_feeds_run_time_math() -> None:
    # 2 x ~6000 coordinates: past the importer's small-result fold, expanded to a constant
    mask = np.random.default_rng(1).random((80, 100)) > 0.25
    nodes = [
        oh.make_node("NonZero", ["m"], ["nz"]),
        oh.make_node("Cast", ["nz"], ["f"], to=TensorProto.FLOAT),
        oh.make_node("Add", ["f", "x"], ["y"]),
    ]
    n = int(mask.sum())
    x = np.random.default_rng(2).standard_normal((2, n)).astype(np.float32)
    _check(_model(nodes, [("x", (2, n))], ["y"], {"m": mask}), {"x": x})


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 1])
def test_unique_of_a_constant_gives_all_four_outputs(sorted_: int, axis: int | None) -> None:
    values = np.random.default_rng(3).integers(0, 4, (3, 40)).astype(np.float32)
    values[:, 7] = values[:, 3]  # a repeated column for the axis case
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    nodes = [
        oh.make_node("Unique", ["v"], ["u", "i", "inv", "cnt"], **attrs),
        oh.make_node("Add", ["u", "x"], ["y"]),
    ]
    shape = (1,)
    x = np.ones(shape, np.float32)
    model = _model(nodes, [("x", shape)], ["y", "i", "inv", "cnt"], {"v": values})
    _check(model, {"x": x})


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_of_constant_boxes(center: int) -> None:
    rng = np.random.default_rng(4)
    boxes = rng.uniform(0, 10, (2, 30, 4)).astype(np.float32)
    scores = rng.random((2, 3, 30)).astype(np.float32)
    consts = {
        "boxes": boxes,
        "scores": scores,
        "limit": np.array([5], np.int64),
        "iou": np.array([0.3], np.float32),
        "score": np.array([0.2], np.float32),
    }
    node = oh.make_node(
        "NonMaxSuppression",
        ["boxes", "scores", "limit", "iou", "score"],
        ["sel"],
        center_point_box=center,
    )
    _check(_model([node], [], ["sel"], consts), {})


def test_non_zero_of_a_run_time_input_runs_in_the_tail_and_from_onnx_refuses_it() -> None:
    """A graph has static shapes, so `from_onnx` refuses it by name; `tensorforge.compile`
    runs it after the compiled part (runtime/tail.py)."""
    nodes = [oh.make_node("NonZero", ["x"], ["y"], name="where_nonzero")]
    model = _model(nodes, [("x", (3,))], ["y"], {})
    with pytest.raises(UnsupportedOpError, match=r"NonZero \(node 'where_nonzero'.*\n.*computed"):
        from_onnx(model)
    for x in ([0, 2, 0], [0, 0, 0], [1, 1, 1]):
        _check(model, {"x": np.array(x, np.float32)})


def test_compress_by_a_run_time_condition() -> None:
    nodes = [oh.make_node("Compress", ["x", "c"], ["y"], name="pick", axis=0)]
    graph = _model(nodes, [("x", (3,))], ["y"], {})
    graph.graph.input.append(oh.make_tensor_value_info("c", TensorProto.BOOL, (3,)))
    with pytest.raises(UnsupportedOpError, match=r"Compress \(node 'pick'.*\n.*computed at run"):
        from_onnx(graph)
    x = np.array([1.5, -2, 3], np.float32)
    for c in ([True, False, True], [False] * 3):
        _check(graph, {"x": x, "c": np.array(c)})


def _greedy_reference(boxes: np.ndarray, scores: np.ndarray, iou: float, limit: int) -> list:
    """Greedy NMS of one class, box by box in numpy (float32, as onnxruntime computes)."""
    y1, x1 = np.minimum(boxes[:, 0], boxes[:, 2]), np.minimum(boxes[:, 1], boxes[:, 3])
    y2, x2 = np.maximum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 1], boxes[:, 3])
    area = (y2 - y1) * (x2 - x1)
    kept: list[int] = []
    for i in np.argsort(-scores, kind="stable"):
        if len(kept) >= limit:
            break
        h = np.minimum(y2[i], y2[kept]) - np.maximum(y1[i], y1[kept])
        w = np.minimum(x2[i], x2[kept]) - np.maximum(x1[i], x1[kept])
        inter = np.where((h > 0) & (w > 0), h * w, 0)
        union = area[i] + area[kept] - inter
        ok = (inter > 0) & (area[i] > 0) & (area[kept] > 0) & (union > 0)
        if not (ok & (inter / np.where(ok, union, 1) > np.float32(iou))).any():
            kept.append(int(i))
    return kept


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_non_max_suppression_of_many_boxes_is_greedy_nms(
    tiled: bool, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hundreds of boxes, with ties and empty boxes: the sweep over pairs that meet along x
    (and the tiled fallback for boxes that mostly meet) keep what box-by-box greedy keeps."""
    if tiled:
        monkeypatch.setattr(data_dependent, "_NMS_PAIRS", 0)
    rng = np.random.default_rng(seed)
    n = 700
    boxes = rng.uniform(0, 60, (n, 4)).astype(np.float32)
    boxes[::7] = np.round(boxes[::7])
    boxes[::11, 2] = boxes[::11, 0]  # no area
    scores = np.round(rng.uniform(0, 1, n), 2).astype(np.float32)  # ties
    for iou, limit in ((0.3, 10_000), (0.0, 10_000), (0.6, 40)):
        got = data_dependent.non_max_suppression(
            {}, boxes[None], scores[None, None], np.int64(limit), np.float32(iou)
        )
        assert got[:, 2].tolist() == _greedy_reference(boxes, scores, iou, limit)


def test_non_max_suppression_with_an_iou_threshold_past_1_is_refused_by_name() -> None:
    consts = {
        "boxes": np.zeros((1, 2, 4), np.float32),
        "scores": np.ones((1, 1, 2), np.float32),
        "limit": np.array([1], np.int64),
        "iou": np.array([1.5], np.float32),
    }
    node = oh.make_node("NonMaxSuppression", list(consts), ["sel"], name="nms")
    with pytest.raises(OnnxImportError, match=r"NonMaxSuppression node 'nms'.*iou_threshold"):
        tensorforge.compile(_model([node], [], ["sel"], consts))
