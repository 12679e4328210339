"""RoiAlign (corner-weight tables and batched MatMuls), compiled, against onnxruntime: regions
given at run time or as constants (adaptive sampling), both modes, both coordinate modes,
regions reaching past the image."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, from_onnx

X_SHAPE = (2, 3, 9, 11)


def _rois() -> np.ndarray:
    rng = np.random.default_rng(0)
    corners = rng.uniform(-3, 12, (6, 2, 2))  # some regions hang over the borders
    rois = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)
    rois[0] = [2.0, 3.0, 2.2, 3.1]  # a tiny one
    rois[1, 2] = rois[1, 0]  # no width: no samples (adaptive), output 0
    return rois.astype(np.float32)


def _model(const_rois: bool, **attrs):  # noqa: ANN202
    node = oh.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], name="align", **attrs)
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)]
    inits = [numpy_helper.from_array(np.array([0, 1, 1, 0, 1, 0], np.int64), "idx")]
    if const_rois:
        inits.append(numpy_helper.from_array(_rois(), "rois"))
    else:
        inputs.append(oh.make_tensor_value_info("rois", TensorProto.FLOAT, (6, 4)))
    graph = oh.make_graph(
        [node], "g", inputs, [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 16)])


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize(("const_rois", "ratio"), [(False, 2), (True, 0), (True, 3)])
def test_roi_align_matches_onnxruntime(mode: str, ctm: str, const_rois: bool, ratio: int) -> None:
    model = _model(
        const_rois,
        mode=mode,
        coordinate_transformation_mode=ctm,
        output_height=3,
        output_width=4,
        sampling_ratio=ratio,
        spatial_scale=0.8,
    )
    feed = {"x": np.random.default_rng(1).standard_normal(X_SHAPE).astype(np.float32)}
    if not const_rois:
        feed["rois"] = _rois()
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_adaptive_sampling_of_run_time_regions_runs_in_the_tail() -> None:
    """The samples per bin depend on each region's size: a graph refuses it by name, and
    `tensorforge.compile` runs it after the compiled part (docs/compile.md)."""
    model = _model(False, sampling_ratio=0, output_height=3, output_width=4)
    with pytest.raises(OnnxImportError, match=r"RoiAlign node 'align'.*rois must be constants"):
        from_onnx(model)
    feed = {"x": np.random.default_rng(1).standard_normal(X_SHAPE).astype(np.float32),
            "rois": _rois()}  # fmt: skip
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    module = tensorforge.compile(model)
    assert module.tail is not None
    np.testing.assert_allclose(module.run(feed)["y"], want, rtol=1e-4, atol=1e-5)
