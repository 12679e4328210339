"""1-D and 3-D convolutions compiled to native code, against onnxruntime: groups, depthwise,
strides, dilations, asymmetric pads, bias, batch 2, a fused Relu/Add tail, weights given at run
time; a 1-D one takes the 2-D kernels (as 2-D of height 1), a 3-D one the blocked conv with a
depth axis."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

import tensorforge
from tensorforge.compiler import te
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import audio_cnn_1d, r3d_block
from tensorforge.compiler.graph.lower_te import lower_group
from tensorforge.compiler.graph.passes import optimize
from tensorforge.compiler.tir.stmt import LoweringError
from tensorforge.compiler.topi.x86.conv2d import conv2d_nchwc

# (input shape, weight shape, attributes); each also runs with bias + Relu and with an Add tail
CASES_1D = [
    ((2, 4, 17), (6, 4, 3), {"pads": [1, 2]}),
    ((1, 8, 20), (16, 8, 5), {"pads": [2, 2], "strides": [2]}),
    ((1, 8, 23), (8, 8, 3), {"pads": [0, 3], "dilations": [3], "strides": [2]}),
    ((2, 6, 15), (9, 2, 3), {"group": 3, "pads": [1, 1]}),
    ((1, 16, 31), (16, 1, 5), {"group": 16, "pads": [2, 2]}),  # depthwise
    ((2, 8, 19), (16, 1, 3), {"group": 8, "strides": [2], "pads": [1, 0]}),  # multiplier 2
    ((1, 16, 12), (24, 16, 1), {}),  # pointwise: a GEMM
    ((2, 16, 12), (24, 16, 1), {"strides": [2]}),
    ((1, 5, 10), (7, 5, 4), {"auto_pad": "SAME_UPPER"}),
]
CASES_3D = [
    ((1, 4, 5, 6, 7), (6, 4, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),
    ((2, 3, 6, 9, 8), (8, 3, 3, 7, 7), {"pads": [1, 3, 3, 1, 3, 3], "strides": [1, 2, 2]}),
    ((1, 8, 7, 6, 6), (8, 8, 3, 1, 1), {"pads": [1, 0, 0, 1, 0, 0], "strides": [2, 1, 1]}),
    ((1, 6, 6, 7, 5), (6, 3, 2, 2, 3), {"group": 2, "dilations": [2, 1, 2], "pads": [0, 1, 2] * 2}),
    ((1, 8, 5, 6, 6), (8, 1, 3, 3, 3), {"group": 8, "pads": [1, 0, 1, 1, 2, 1]}),  # depthwise
    ((1, 16, 4, 5, 6), (8, 16, 1, 1, 1), {}),  # pointwise: a GEMM
    ((2, 8, 5, 6, 6), (16, 8, 1, 1, 1), {"strides": [2, 2, 2]}),
]

# 2-D with a stride and dilation per axis: the blocked conv takes them too
CASES_2D = [
    ((1, 8, 9, 10), (16, 8, 3, 3), {"strides": [1, 2], "dilations": [2, 1], "pads": [2, 1, 2, 0]})
]


def _model(x_shape, w, attrs, bias=None, tail="relu", weight_input=False):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    inits = [] if weight_input else [numpy_helper.from_array(w, "w")]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
    names = ["x", "w", "b"][: 2 + (bias is not None)]
    nodes = [helper.make_node("Conv", names, ["y"], name="conv", **attrs)]
    if tail == "add":  # a residual of the conv's output shape read in the same kernel
        conv_only = _make(nodes, inputs, "y", inits)
        (y,) = shape_inference.infer_shapes(conv_only, strict_mode=True).graph.output
        y_shape = [d.dim_value for d in y.type.tensor_type.shape.dim]
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, y_shape))
        nodes.append(helper.make_node("Add", ["y", "r"], ["s"]))
    if tail == "self":  # the conv's own input as the residual: one parameter read two ways
        nodes.append(helper.make_node("Add", ["y", "x"], ["s"]))
    nodes.append(helper.make_node("Relu", ["s" if tail in ("add", "self") else "y"], ["z"]))
    return _make(nodes, inputs, "z", inits)


def _make(nodes, inputs, output, inits):
    out = helper.make_tensor_value_info(output, TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "conv", inputs, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _check(model, rng) -> None:
    feed = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    module = tensorforge.compile(model, target="llvm")
    assert module.stats["kernels"] == 1  # the tail (bias, Relu, residual Add) fused
    got = module.run(feed)["z"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tail", ["relu", "add"])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES_1D + CASES_2D + CASES_3D)
def test_conv_nd_matches_onnxruntime(x_shape, w_shape, attrs, tail) -> None:
    rng = np.random.default_rng(len(x_shape) * 100 + w_shape[0])
    w = rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32) if tail == "relu" else None
    _check(_model(x_shape, w, attrs, bias, tail), rng)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"), [CASES_1D[0], CASES_1D[3], CASES_3D[0], CASES_3D[3]]
)
def test_conv_nd_with_runtime_weights_matches_onnxruntime(x_shape, w_shape, attrs) -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal(w_shape).astype(np.float32)
    _check(_model(x_shape, w, attrs, weight_input=True), rng)


@pytest.mark.parametrize("weight_input", [False, True])
@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((1, 8, 20), (8, 8, 3), {"pads": [1, 1]}),
        ((2, 16, 31), (16, 1, 5), {"group": 16, "pads": [2, 2]}),
        ((1, 16, 12), (16, 16, 1), {}),
        ((1, 8, 4, 5, 6), (8, 8, 3, 3, 3), {"pads": [1] * 6}),
    ],  # fmt: skip
)
def test_conv_plus_its_own_input_matches_onnxruntime(x_shape, w_shape, attrs, weight_input):
    rng = np.random.default_rng(3)
    w = rng.standard_normal(w_shape).astype(np.float32)
    _check(_model(x_shape, w, attrs, tail="self", weight_input=weight_input), rng)


def _stages(model) -> set[str]:
    graph = optimize(from_onnx(model))
    (group,) = [g for g in graph.groups if any(n == "conv" for n in g.nodes)]
    kernel = lower_group(graph, group)
    return {stage.op.name for stage in kernel.schedule.stages}


@pytest.mark.parametrize(
    ("case", "stage"),
    [
        (CASES_1D[0], "data_vec"),
        (CASES_1D[1], "data_vec"),
        (CASES_1D[4], "act"),
        (CASES_1D[6], "packed"),
        (CASES_3D[1], "data_vec"),
        (CASES_3D[3], "data_vec"),
        (CASES_3D[5], "packed"),
    ],  # fmt: skip
)
def test_conv_takes_the_blocked_kernels(case, stage) -> None:
    """A 1-D one as 2-D: the blocked NCHWc conv2d (`data_vec`), the depthwise NCHWc template
    (`act`), the pointwise GEMM (dense, `packed`); a 3-D one the NCHWc conv2d with a depth axis
    (strides and dilations per axis, groups) or the pointwise GEMM."""
    x_shape, w_shape, attrs = case
    w = np.ones(w_shape, np.float32)
    stages = _stages(_model(x_shape, w, attrs))
    assert stage in stages, stages


def test_conv_past_3d_is_refused_naming_the_node() -> None:
    w = np.ones((2, 2, 1, 1, 1, 1), np.float32)
    model = _model((1, 2, 3, 3, 3, 3), w, {}, weight_input=True)
    with pytest.raises(LoweringError, match="Conv must be 1-D, 2-D or 3-D on the CPU back-end, "
                                            "not 4-D .node 'conv'"):  # fmt: skip
        tensorforge.compile(model, target="llvm")


@pytest.mark.parametrize(
    "build",
    [lambda: audio_cnn_1d(length=800, width=8), lambda: r3d_block(frames=4, size=6, c=8)],
    ids=["audio_cnn_1d", "r3d_block"],
)
def test_small_1d_and_3d_models_match_onnxruntime(build) -> None:
    model = build()
    (x,) = model.graph.input
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    feed = {"x": np.random.default_rng(2).standard_normal(shape).astype(np.float32)}
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    module = tensorforge.compile(model, target="llvm")
    (got,) = module.run(feed).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_blocked_conv_refuses_bad_geometry() -> None:
    data = te.placeholder((1, 16, 4, 8, 8), name="x")
    kernel = te.placeholder((16, 16, 3, 3, 3), name="w")
    with pytest.raises(ValueError, match=r"stride must be an int or 3 ints >= 1, not \(1, 2\)"):
        conv2d_nchwc(data, kernel, (1, 2))
    with pytest.raises(ValueError, match="padding must be an int or 6 ints >= 0"):
        conv2d_nchwc(data, kernel, 1, (1, 1, 1, 1))
    with pytest.raises(ValueError, match="data must be NCHW or NCDHW, not 3-D"):
        conv2d_nchwc(te.placeholder((1, 16, 8), name="x"), kernel)
