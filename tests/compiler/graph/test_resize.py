"""Resize as torch exports F.interpolate (bilinear with and without align_corners, nearest),
compiled to native code and OpenCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, from_onnx

# (attributes torch's exporter writes, scales or sizes): F.interpolate(scale_factor=2, ...)
CASES = [
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, "scales"),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, "scales"),
    (
        {
            "mode": "nearest",
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
        },
        "scales",
    ),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, "sizes"),
    ({"mode": "cubic", "coordinate_transformation_mode": "half_pixel"}, "sizes"),
]
SHAPE = (2, 3, 7, 5)


def _model(attrs: dict, how: str, dtype: int = TensorProto.FLOAT):
    """x -> Resize x2 (scales) or to 13x11 (sizes) -> + y (a neighbour to fuse with)."""
    out = (2, 3, 13, 11) if how == "sizes" else (2, 3, 14, 10)
    x = helper.make_tensor_value_info("x", dtype, SHAPE)
    y = helper.make_tensor_value_info("y", dtype, out)
    z = helper.make_tensor_value_info("z", dtype, out)
    target = (
        numpy_helper.from_array(np.array(out, np.int64), "sizes")
        if how == "sizes"
        else numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    )
    inputs = ["x", "", "", "sizes"] if how == "sizes" else ["x", "", "scales"]
    nodes = [
        helper.make_node("Resize", inputs, ["r"], name="up", **attrs),
        helper.make_node("Add", ["r", "y"], ["z"]),
    ]
    graph = helper.make_graph(nodes, "resize", [x, y], [z], initializer=[target])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize(("attrs", "how"), CASES)
def test_resize_matches_onnxruntime(attrs, how, target) -> None:
    model = _model(attrs, how)
    rng = np.random.default_rng(0)
    out = model.graph.output[0].type.tensor_type.shape
    x = rng.standard_normal(SHAPE).astype(np.float32)
    y = rng.standard_normal(tuple(d.dim_value for d in out.dim)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "y": y})
    module = tensorforge.compile(model, target=target)
    np.testing.assert_allclose(module.run({"x": x, "y": y})["z"], want, rtol=1e-5, atol=1e-5)
    assert module.stats["kernels"] == 1  # the resize is inlined into the Add


def test_nearest_resize_of_int32_is_a_gather() -> None:
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}
    model = _model(attrs, "scales", TensorProto.INT32)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 100, SHAPE, dtype=np.int32)
    y = rng.integers(0, 100, (2, 3, 14, 10), dtype=np.int32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "y": y})
    got = tensorforge.compile(model).run({"x": x, "y": y})["z"]
    np.testing.assert_array_equal(got, want)


def test_resize_with_runtime_scales_names_the_node() -> None:
    model = _model({"mode": "linear"}, "scales")
    del model.graph.initializer[:]
    model.graph.input.append(helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4]))
    with pytest.raises(OnnxImportError, match="Resize node 'up' must be a constant"):
        from_onnx(model)


def test_resize_with_an_unknown_mode_names_the_node() -> None:
    model = _model({"mode": "bilinear"}, "scales")
    with pytest.raises(OnnxImportError, match="Resize node 'up'.*mode must be one of"):
        from_onnx(model)


def test_resize_sizes_from_exported_shape_math() -> None:
    """F.interpolate(x, scale_factor=2) as TorchScript exports it: the sizes computed from
    Shape in float (Cast, Mul, Floor, Cast back), empty roi and scales: all of it folds."""
    i64 = lambda v: numpy_helper.from_array(np.array(v, np.int64))  # noqa: E731
    f32 = lambda v: numpy_helper.from_array(np.array(v, np.float32))  # noqa: E731
    nodes = [
        helper.make_node("Constant", [], ["lo"], value=i64([0])),
        helper.make_node("Constant", [], ["mid"], value=i64([2])),
        helper.make_node("Constant", [], ["hi"], value=i64([4])),
        helper.make_node("Constant", [], ["two"], value=f32(2.0)),
        helper.make_node("Constant", [], ["empty"], value=f32([])),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "lo", "mid"], ["nc"]),
        helper.make_node("Slice", ["shape", "mid", "hi"], ["hw"]),
        helper.make_node("Cast", ["hw"], ["hw_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["hw_f", "two"], ["scaled"]),
        helper.make_node("Floor", ["scaled"], ["floored"]),
        helper.make_node("Cast", ["floored"], ["hw2"], to=TensorProto.INT64),
        helper.make_node("Concat", ["nc", "hw2"], ["sizes"], axis=0),
        helper.make_node(
            "Resize",
            ["x", "empty", "empty", "sizes"],
            ["y"],
            mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel",
        ),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "interpolate", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    a = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": a})
    module = tensorforge.compile(model)
    assert [c.label.split(" (")[0] for c in module.calls] == ["Resize"]
    np.testing.assert_allclose(module.run({"x": a})["y"], want, rtol=1e-5, atol=1e-5)


def test_resize_to_an_impossible_size_fails_before_building_tables() -> None:
    model = _model({"mode": "linear"}, "scales")
    model.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(np.array([1, 1, 1e12, 1e12], np.float32), "scales")
    )
    with pytest.raises(OnnxImportError, match="Resize node 'up'.*MAX_TENSOR_BYTES"):
        from_onnx(model)


@pytest.mark.parametrize("mode", ["cubic", "linear", "nearest"])
@pytest.mark.parametrize("sizes", [(2, 3, 1, 4), (2, 3, 3, 1), (2, 3, 1, 1)])
def test_pytorch_half_pixel_to_one_sample_reads_coordinate_zero(mode, sizes) -> None:
    """pytorch_half_pixel maps every output of an axis resized to length 1 to input coordinate
    0 (the spec's `length_resized > 1 ? ... : 0`, onnxruntime's); -0.5 gave a cubic resize
    another value."""
    node = helper.make_node(
        "Resize", ["x", "", "", "sizes"], ["y"], mode=mode,
        coordinate_transformation_mode="pytorch_half_pixel",
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "one_sample",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
