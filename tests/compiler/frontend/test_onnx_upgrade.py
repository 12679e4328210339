"""Models of opsets 1-12 are upgraded to 13 (onnx's version converter) and compute what
onnxruntime computes on the original model, old Upsample/Resize coordinate rules included; the
opsets below 7, which onnxruntime does not promise to run, against numpy (their legacy broadcasts
and per-channel PRelu slopes included)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, UnsupportedOpError, from_onnx

RNG = np.random.default_rng(0)


def _model(nodes, x_shape, opset, inits=(), ir_version=None):  # noqa: ANN001, ANN202
    graph = oh.make_graph(
        nodes,
        "old",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = ir_version or (3 if opset <= 8 else 5 if opset <= 10 else 7)
    return model


def _check(model: onnx.ModelProto, x: np.ndarray, source=None) -> None:  # noqa: ANN001
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = tensorforge.compile(source or model).run({"x": x})
    (y,) = got.values()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


X = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_opset7_upsample_with_a_scales_attribute(mode: str) -> None:
    node = oh.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 3.0])
    _check(_model([node], X.shape, 7), X)


@pytest.mark.parametrize("opset,op", [(9, "Upsample"), (10, "Resize")])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_opset9_10_resizes_keep_their_asymmetric_coordinates(
    opset: int, op: str, mode: str
) -> None:
    scales = np.array([1.0, 1.0, 2.0, 1.5], np.float32)  # 1.5: the rounding rule shows
    node = oh.make_node(op, ["x", "scales"], ["y"], mode=mode)
    _check(_model([node], X.shape, opset, [("scales", scales)]), X)


def test_opset10_nearest_shrinking_takes_the_ceiling() -> None:
    scales = np.array([1.0, 1.0, 0.6, 0.6], np.float32)
    node = oh.make_node("Resize", ["x", "scales"], ["y"], mode="nearest")
    x = RNG.standard_normal((1, 2, 10, 11)).astype(np.float32)
    _check(_model([node], x.shape, 10, [("scales", scales)]), x)


def test_opset11_ops_whose_inputs_were_attributes() -> None:
    """Split/Squeeze/Unsqueeze/ReduceSum axes as attributes, and Softmax's old 2-D coercion
    (opset < 13 flattens at `axis`: a softmax over all of C*H*W, not over C)."""
    nodes = [
        oh.make_node("Softmax", ["x"], ["s"], axis=1),
        oh.make_node("Split", ["s"], ["a", "b"], axis=3, split=[3, 4]),
        oh.make_node("ReduceSum", ["a"], ["r"], axes=[3], keepdims=1),
        oh.make_node("Squeeze", ["r"], ["q"], axes=[3]),
        oh.make_node("Unsqueeze", ["q"], ["u"], axes=[3]),
        oh.make_node("Clip", ["u", "lo", "hi"], ["c"]),
        oh.make_node("Mul", ["c", "b"], ["y"]),
    ]
    inits = [("lo", np.array(0.01, np.float32)), ("hi", np.array(0.02, np.float32))]
    _check(_model(nodes, X.shape, 11, inits), X)


@pytest.mark.parametrize("opset", [11, 12])
@pytest.mark.parametrize("axis", [None, 0, 2, -1, -3])
def test_old_hardmax_keeps_its_2d_coercion(opset: int, axis: int | None) -> None:
    """Before opset 13 Hardmax flattened to 2-D at `axis` (one 1 per batch of C*H*W values, not
    per row of C): onnx's converter leaves the node as it is, the importer rewrites it."""
    node = oh.make_node("Hardmax", ["x"], ["y"], **({} if axis is None else {"axis": axis}))
    _check(_model([node], X.shape, opset), X)


def test_a_file_with_large_weights_is_upgraded_whole(tmp_path: Path) -> None:
    """The in-place weight reader indexes initializers; an upgraded model is read whole."""
    w = RNG.standard_normal((64, 2, 3, 3)).astype(np.float32)  # past the in-place threshold
    nodes = [
        oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("Upsample", ["c", "scales"], ["y"], mode="nearest"),
    ]
    scales = np.array([1.0, 1.0, 2.0, 2.0], np.float32)
    model = _model(nodes, X.shape, 9, [("w", w), ("scales", scales)])
    path = tmp_path / "old.onnx"
    onnx.save(model, path)
    _check(model, X, source=str(path))


def test_too_old_or_inexpressible_models_are_refused_by_name(tmp_path: Path) -> None:
    relu = oh.make_node("Relu", ["x"], ["y"])
    with pytest.raises(OnnxImportError, match=r"must be 13 to 21, not 0 \(opsets 1 to 12 are"):
        from_onnx(_model([relu], X.shape, 0))
    scales = np.array([1.0, 1.0, 2.0, 0.5], np.float32)
    both = oh.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest", name="up")
    with pytest.raises(OnnxImportError, match=r"nearest 'up' both enlarges and shrinks"):
        from_onnx(_model([both], X.shape, 9, [("scales", scales)]))


@pytest.mark.parametrize("opset", [7, 8])
def test_ir3_model_whose_initializers_are_not_graph_inputs(opset: int) -> None:
    """IR 3 listed initializers as graph inputs; files re-saved without them still run in
    onnxruntime, and onnx's converter would refuse them ("Input w is undefined!")."""
    nodes = [
        oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=2),
        oh.make_node("Add", ["c", "bias"], ["s"]),
        oh.make_node("Gather", ["s", "i"], ["y"], axis=3),
    ]
    inits = [
        ("w", RNG.standard_normal((4, 1, 3, 3)).astype(np.float32)),
        ("b", RNG.standard_normal(4).astype(np.float32)),
        ("bias", RNG.standard_normal((4, 1, 1)).astype(np.float32)),
        ("i", np.array([-1, 0, 2], np.int64)),
    ]
    model = _model(nodes, X.shape, opset, inits, ir_version=3)
    _check(model, X)
    assert model.ir_version == 3  # the caller's model is not changed


@pytest.mark.parametrize("opset", [8, 10, 12])
def test_unread_dropout_mask_and_maxpool_indices_are_left_out(opset: int) -> None:
    """Exporters gave Dropout a mask and MaxPool an Indices output that nothing reads; the
    node computes its first output as at inference (a read Indices output is computed)."""
    nodes = [
        oh.make_node("Dropout", ["x"], ["d", "mask"], **({"ratio": 0.3} if opset < 12 else {})),
        oh.make_node("MaxPool", ["d"], ["y", "idx"], kernel_shape=[2, 2], name="pool"),
    ]
    _check(_model(nodes, X.shape, opset), X)
    model = _model(nodes, X.shape, opset)
    model.graph.output.append(oh.make_tensor_value_info("idx", TensorProto.INT64, None))
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})[1]
    np.testing.assert_array_equal(tensorforge.compile(model).run({"x": X})["idx"], want)


def test_batchnorm_with_training_outputs_normalizes_by_the_batch_statistics() -> None:
    """With its mean and variance outputs an opset-7 BatchNormalization normalizes by the
    batch's statistics in onnxruntime, read or not: so does the import (training mode), never
    by the running statistics (which differ from the batch's here)."""
    stats = [("s", 1.5), ("b", 0.25), ("m", 0.5), ("v", 2.0)]
    inits = [(k, np.full(2, v, np.float32)) for k, v in stats]
    node = oh.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "m1", "v1", "sm", "sv"], name="bn"
    )
    _check(_model([node], X.shape, 7, inits), X)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(2.0, 1.5), (0.6, 0.6), (3.0, 0.5)])
def test_opset11_resize_tf_half_pixel_for_nn(mode: str, scales: tuple) -> None:
    """tf2onnx's nearest resizes at opsets 11-12 map output pixel i to (i + 0.5) / scale (the
    mode was removed at 13; the converter keeps it)."""
    sc = np.array([1.0, 1.0, *scales], np.float32)
    node = oh.make_node(
        "Resize",
        ["x", "roi", "scales"],
        ["y"],
        mode=mode,
        coordinate_transformation_mode="tf_half_pixel_for_nn",
    )
    x = RNG.standard_normal((1, 2, 10, 11)).astype(np.float32)
    _check(_model([node], x.shape, 11, [("roi", np.zeros(0, np.float32)), ("scales", sc)]), x)


@pytest.mark.parametrize("opset", [7, 9])
def test_experimental_image_scaler_scale_and_crop_are_rewritten(opset: int) -> None:
    """tiny-YOLOv2 and Emotion FERPlus (opsets 7-8) begin with an ImageScaler; it, Scale and
    Crop by borders were experimental ops that opset 10 removed and the converter knows not."""
    nodes = [
        oh.make_node("ImageScaler", ["x"], ["a"], scale=0.5, bias=[1.0, -2.0]),
        oh.make_node("Scale", ["a"], ["b"], scale=3.0),
        oh.make_node("Crop", ["b"], ["y"], border=[1, 2, 0, 1]),
    ]
    _check(_model(nodes, X.shape, opset), X)


def test_ops_an_old_opset_does_not_define_are_listed_by_name() -> None:
    nodes = [
        oh.make_node("Affine", ["x"], ["a"], name="aff", alpha=2.0),
        oh.make_node("Crop", ["a"], ["y"], name="centre", border=[1, 1, 1, 1], scale=[2, 2]),
    ]
    with pytest.raises(UnsupportedOpError, match=r"Affine .*'aff', opset 8\).*\n.*Crop .*'centre'"):
        from_onnx(_model(nodes, X.shape, 8))


@pytest.mark.parametrize("opset", [7, 8])
def test_per_activation_batchnorm_spatial_0(opset: int) -> None:
    """spatial=0 (opsets 7-8) normalizes each activation with parameters of shape (C, H, W);
    onnx's converter refuses it, so it is written out element-wise first."""
    shape = X.shape[1:]
    params = [RNG.standard_normal(shape).astype(np.float32) for _ in range(3)]
    var = np.abs(RNG.standard_normal(shape)).astype(np.float32) + 0.5
    inits = list(zip(["s", "b", "m"], params, strict=True)) + [("v", var)]
    node = oh.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0, epsilon=1e-3
    )
    _check(_model([node], X.shape, opset, inits), X)


def test_old_resize_in_an_if_branch_keeps_its_coordinate_rule() -> None:
    """The converter upgrades subgraphs too; their Upsample nodes get the old rule as well."""
    branches = {
        key: oh.make_graph(
            [oh.make_node("Upsample", ["x", "scales"], [key], mode=mode)],
            key,
            [],
            [oh.make_tensor_value_info(key, TensorProto.FLOAT, None)],
        )  # fmt: skip
        for key, mode in (("then", "linear"), ("else", "nearest"))
    }
    nodes = [
        oh.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
        oh.make_node(
            "If", ["c"], ["y"], then_branch=branches["then"], else_branch=branches["else"]
        ),
    ]
    scales = np.array([1.0, 1.0, 2.0, 2.0], np.float32)
    _check(_model(nodes, X.shape, 9, [("scales", scales)]), X)


@pytest.mark.parametrize("scale", [0.6, 1.7])
def test_opset10_nearest_resize_with_scales_computed_from_constants(scale: float) -> None:
    """Exporters concatenate Constant nodes into the scales: they are evaluated to choose the
    old nearest rounding (the ceiling when shrinking)."""
    ones, factors = np.ones(2, np.float32), np.full(2, scale, np.float32)
    nodes = [
        oh.make_node("Constant", [], ["a"], value=numpy_helper.from_array(ones)),
        oh.make_node("Constant", [], ["b"], value=numpy_helper.from_array(factors)),
        oh.make_node("Concat", ["a", "b"], ["scales"], axis=0),
        oh.make_node("Resize", ["x", "scales"], ["y"], mode="nearest"),
    ]
    x = RNG.standard_normal((1, 2, 10, 11)).astype(np.float32)
    _check(_model(nodes, x.shape, 10), x)


def test_a_wrong_intermediate_value_info_does_not_become_the_output_shape() -> None:
    """onnxruntime ignores a value_info that contradicts the graph; the converter's shape
    inference would write it into the declared output, which the importer then checks."""
    nodes = [oh.make_node("Relu", ["x"], ["a"]), oh.make_node("Neg", ["a"], ["y"])]
    model = _model(nodes, X.shape, 9)
    model.graph.value_info.append(oh.make_tensor_value_info("a", TensorProto.FLOAT, [2, 2]))
    _check(model, X)


def test_values_the_rewrites_add_do_not_clash_with_the_models_names() -> None:
    """The nodes written for an ImageScaler or an old Hardmax get names no value has."""
    nodes = [
        oh.make_node("ImageScaler", ["x"], ["a"], scale=2.0, bias=[1.0, -1.0]),
        oh.make_node("Add", ["a", "a__imagescaler0_scale"], ["b"]),
        oh.make_node("Hardmax", ["b"], ["y"], axis=1),
        oh.make_node("Relu", ["b"], ["y__hardmax2_2d"]),
    ]
    model = _model(nodes, X.shape, 8, [("a__imagescaler0_scale", X[0, 0, 0])])
    model.graph.output.append(oh.make_tensor_value_info("y__hardmax2_2d", TensorProto.FLOAT, None))
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})
    got = tensorforge.compile(model).run({"x": X})
    for y, w in zip(got.values(), want, strict=True):
        np.testing.assert_allclose(y, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [9, 11, 13])
def test_squeeze_with_an_empty_axes_list_drops_every_unit_dim(opset: int) -> None:
    """`axes=[]` (an attribute before 13, an empty input after) reads as no axes in
    onnxruntime: every dim of size 1 goes."""
    node = oh.make_node("Squeeze", ["x", "axes"] if opset >= 13 else ["x"], ["y"])
    inits = [("axes", np.zeros(0, np.int64))] if opset >= 13 else []
    if opset < 13:
        node.attribute.append(oh.make_attribute("axes", [], attr_type=onnx.AttributeProto.INTS))
    x = RNG.standard_normal((1, 3, 1, 4)).astype(np.float32)
    _check(_model([node], x.shape, opset, inits), x)


def _run_old(nodes: list, opset: int, inits=(), x: np.ndarray = X) -> np.ndarray:  # noqa: ANN001
    (y,) = tensorforge.compile(_model(nodes, x.shape, opset, inits)).run({"x": x}).values()
    return y


C = RNG.standard_normal(2).astype(np.float32)
C_CHANNEL = C[None, :, None, None]


@pytest.mark.parametrize("opset", [1, 6])
@pytest.mark.parametrize(
    ("op", "numpy_op"),
    [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide)],
)
def test_legacy_broadcast_along_an_axis(opset: int, op: str, numpy_op) -> None:  # noqa: ANN001
    """Before opset 7, `broadcast=1, axis=1` matched B's dims to A's from axis 1 on (a
    per-channel bias of a caffe2 export); onnx's adapter fails on it."""
    node = oh.make_node(op, ["x", "c"], ["y"], broadcast=1, axis=1)
    got = _run_old([node], opset, [("c", C)])
    np.testing.assert_allclose(got, numpy_op(X, C_CHANNEL), rtol=1e-6)
    suffix = oh.make_node(op, ["x", "w"], ["y"], broadcast=1)  # (no axis: trailing dims)
    w = RNG.standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(_run_old([suffix], opset, [("w", w)]), numpy_op(X, w), rtol=1e-6)


def test_legacy_pow_broadcast_and_per_channel_prelu_slope() -> None:
    """Opset-6 PRelu's 1-D slope is one per channel (numpy would broadcast it on the last
    axis: torch's PReLU exports before opset 7)."""
    base = np.abs(X) + 0.5
    power = oh.make_node("Pow", ["x", "c"], ["y"], broadcast=1, axis=1)
    got = _run_old([power], 6, [("c", C)], x=base)
    np.testing.assert_allclose(got, base**C_CHANNEL, rtol=1e-5)
    prelu = oh.make_node("PRelu", ["x", "slope"], ["y"])
    slope = np.array([0.1, -2.0], np.float32)
    got = _run_old([prelu], 6, [("slope", slope)])
    np.testing.assert_allclose(got, np.where(X > 0, X, X * slope[None, :, None, None]))


def test_opset1_ops_whose_attributes_changed() -> None:
    """Opset 1's Reshape (shape attribute), Concat (axis 1 by default), BatchNormalization
    (consumed_inputs, is_test) and experimental Upsample (height_scale, width_scale)."""
    reshape = oh.make_node("Reshape", ["x"], ["y"], shape=[2, -1])
    np.testing.assert_array_equal(_run_old([reshape], 1), X.reshape(2, -1))
    concat = oh.make_node("Concat", ["x", "x"], ["y"])
    np.testing.assert_array_equal(_run_old([concat], 1), np.concatenate([X, X], 1))
    var = np.abs(C) + 0.1
    bn = oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], is_test=1,
                      consumed_inputs=[0, 0, 0, 1, 1], epsilon=1e-3)  # fmt: skip
    got = _run_old([bn], 1, [("s", C), ("b", C), ("m", C), ("v", var)])
    want = (X - C_CHANNEL) / np.sqrt(var[None, :, None, None] + 1e-3) * C_CHANNEL + C_CHANNEL
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    up = oh.make_node("Upsample", ["x"], ["y"], height_scale=2.0, width_scale=3.0)
    np.testing.assert_array_equal(_run_old([up], 1), X.repeat(2, 2).repeat(3, 3))


def test_old_ops_the_converter_cannot_carry_are_refused_by_name() -> None:
    """Opset 1's Pad (paddings) and Cast (a type name) have no adapter in onnx's converter;
    a training-mode Dropout (is_test=0) has no inference meaning."""
    pad = oh.make_node("Pad", ["x"], ["y"], paddings=[0, 0, 1, 1, 0, 0, 1, 1])
    with pytest.raises(OnnxImportError, match=r"opset 1 could not be upgraded .* for Pad"):
        from_onnx(_model([pad], X.shape, 1))
    dropout = oh.make_node("Dropout", ["x"], ["y"], is_test=0)
    with pytest.raises(OnnxImportError, match=r"opset 1 could not be upgraded .*is_test"):
        from_onnx(_model([dropout], X.shape, 1))
