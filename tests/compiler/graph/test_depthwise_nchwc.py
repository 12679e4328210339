"""Depthwise and grouped convolutions compiled for the CPU against onnxruntime: both layouts of
the `x86.depthwise_conv2d` template (NCHWc, channels in vector lanes; rows), strides 1 and 2,
symmetric and asymmetric padding, bias, dilation and fused epilogues (SiLU, HardSwish, ReLU6,
a residual add), channel counts that no block divides."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tensorforge
from tensorforge.compiler.autotune.dispatch import ApplyBest, workload_key
from tensorforge.compiler.frontend.onnx_builders import (
    OnnxModelBuilder,
    mbconv_block,
    squeeze_excitation,
)
from tensorforge.compiler.graph.strategy import nn as strategy

ort = pytest.importorskip("onnxruntime")


def _model(c: int, size: int, k: int, stride: int, pads: list[int], group: int, dil: int,
           bias: bool, act: str) -> onnx.ModelProto:  # fmt: skip
    rng = np.random.default_rng(c * 31 + size)
    w = rng.standard_normal((c, c // group, k, k)).astype(np.float32)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())]
    inputs = ["x", "w"]
    if bias:
        b = rng.standard_normal(c).astype(np.float32)
        inits.append(helper.make_tensor("b", TensorProto.FLOAT, [c], b))
        inputs.append("b")
    conv = helper.make_node("Conv", inputs, ["y"], group=group, kernel_shape=[k, k],
                            strides=[stride, stride], pads=pads, dilations=[dil, dil])  # fmt: skip
    nodes = [conv]
    if act == "silu":
        nodes += [
            helper.make_node("Sigmoid", ["y"], ["s"]),
            helper.make_node("Mul", ["y", "s"], ["z"]),
        ]
    elif act == "hardswish":
        nodes.append(helper.make_node("HardSwish", ["y"], ["z"]))
    elif act == "relu6":
        nodes.append(helper.make_node("Clip", ["y", "lo", "hi"], ["z"]))
        inits += [helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0]),
                  helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0])]  # fmt: skip
    elif act == "residual":
        nodes.append(helper.make_node("Add", ["y", "x"], ["z"]))
    out = "z" if act != "none" else "y"
    graph = helper.make_graph(
        nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], initializer=inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _check(model: onnx.ModelProto, values: dict | None = None) -> None:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = want.run(None, {"x": x})[0]
    if values is None:
        module = tensorforge.compile(model, progress=False)
    else:
        with ApplyBest(values) as ctx:
            module = tensorforge.compile(model, progress=False)
        assert ctx.applied, "the depthwise template was not used"
    got = list(module.run({"x": x}).values())[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


CASES = [  # c, size, k, stride, pads, dilation, bias, epilogue
    (16, 7, 3, 1, [1, 1, 1, 1], 1, False, "none"),
    (24, 9, 3, 2, [1, 1, 1, 1], 1, True, "silu"),
    (12, 10, 5, 1, [2, 2, 2, 2], 1, True, "hardswish"),
    (40, 11, 5, 2, [2, 2, 2, 2], 1, False, "relu6"),
    (20, 8, 3, 1, [1, 1, 1, 1], 1, True, "residual"),
    (8, 12, 3, 2, [0, 1, 1, 0], 1, True, "silu"),  # asymmetric (TF "SAME")
    (18, 9, 3, 1, [2, 2, 2, 2], 2, False, "none"),  # dilated
    (3, 6, 3, 1, [0, 0, 0, 0], 1, True, "none"),  # no padding, 3 channels
]


@pytest.mark.parametrize("layout", ["nchwc", "rows", "default"])
@pytest.mark.parametrize("case", CASES, ids=[f"c{c[0]}s{c[3]}k{c[2]}{c[7]}" for c in CASES])
def test_depthwise_matches_onnxruntime(case: tuple, layout: str) -> None:
    c, size, k, stride, pads, dil, bias, act = case
    model = _model(c, size, k, stride, pads, c, dil, bias, act)
    if layout == "default":
        return _check(model)
    out = (size + pads[1] + pads[3] - dil * (k - 1) - 1) // stride + 1
    wl = {"n": 1, "c": c, "h": size, "w": size, "r": k, "s": k, "pads": [pads[0], pads[1], *(
        strategy.pads_after((out, out), (k, k), pads[:2], [stride] * 2, [dil] * 2, (size, size)))],
        "strides": [stride, stride], "dil": [dil, dil], "dtype": "float32"}  # fmt: skip
    values = dict(strategy.depthwise_space(wl).default.values, layout=layout, cb=16, reg_n=4)
    _check(model, {workload_key("x86.depthwise_conv2d", wl): values})


@pytest.mark.parametrize("group,stride", [(2, 1), (4, 2), (3, 1)])
def test_grouped_conv_matches_onnxruntime(group: int, stride: int) -> None:
    _check(_model(24, 9, 3, stride, [1, 1, 1, 1], group, 1, True, "silu"))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 24, 7, 7), (2, 5, 9, 33), (1, 3, 1, 17), (1, 4, 5, 1)])
def test_global_pool_matches_onnxruntime(op: str, shape: tuple) -> None:
    """Global pooling reduces the rows first with the last axis in vector lanes, then the row."""
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])], "gp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    _check(onnx.shape_inference.infer_shapes(model, strict_mode=True))


def test_squeeze_excitation_and_mbconv_blocks_match_onnxruntime() -> None:
    """GlobalAveragePool -> 1x1 conv -> SiLU -> 1x1 conv -> Sigmoid -> Mul, alone and inside a
    whole MBConv block (5x5 depthwise, residual)."""
    b = OnnxModelBuilder("se")
    x = b.input("x", (1, 24, 9, 9))
    _check(b.model([squeeze_excitation(b, x, 24, 6)]))
    _check(mbconv_block(size=9, c=8, k=5, squeeze=4))


def _conv_only(
    x_shape: tuple,
    w_shape: tuple,
    group: int,
    pads: list[int],
    stride: int = 1,
    dil: int = 1,
    weight_input: bool = False,
) -> tuple[onnx.ModelProto, dict]:
    """A lone Conv; the weight a constant or (`weight_input`) a graph input fed at run time."""
    rng = np.random.default_rng(len(w_shape) + group)
    w = rng.standard_normal(w_shape).astype(np.float32)
    k = w_shape[2]
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=group, kernel_shape=[k, k],
                            strides=[stride] * 2, pads=pads, dilations=[dil] * 2)  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    inits, feed = [], {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w_shape)))
        feed["w"] = w
    else:
        inits.append(helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()))
    graph = helper.make_graph([node], "c", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feed


@pytest.mark.parametrize(
    "x_shape,w_shape,group,pads,stride,dil,weight_input",
    [
        ((1, 8, 9, 9), (16, 1, 3, 3), 8, [1, 1, 1, 1], 1, 1, False),  # channel multiplier 2
        ((1, 12, 8, 8), (12, 4, 3, 3), 3, [0, 1, 1, 0], 2, 1, False),  # grouped, asymmetric
        ((2, 16, 10, 10), (16, 1, 3, 3), 16, [2, 2, 2, 2], 1, 2, False),  # batch 2, dilated
        ((2, 16, 10, 10), (32, 4, 3, 3), 4, [2, 2, 2, 2], 2, 2, False),  # grouped, dilated
        ((1, 16, 7, 7), (16, 1, 3, 3), 16, [1, 1, 1, 1], 1, 1, True),  # runtime weights
        ((1, 16, 7, 7), (16, 8, 3, 3), 2, [1, 1, 1, 1], 1, 1, True),
    ],
    ids=["multiplier", "grouped-asym", "dw-batch-dil", "grouped-dil", "dw-runtime-w",
         "grouped-runtime-w"],
)  # fmt: skip
def test_other_grouped_convs_match_onnxruntime(
    x_shape: tuple, w_shape: tuple, group: int, pads: list, stride: int, dil: int,
    weight_input: bool,
) -> None:  # fmt: skip
    model, feed = _conv_only(x_shape, w_shape, group, pads, stride, dil, weight_input)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = list(tensorforge.compile(model, progress=False).run(feed).values())[0]
    np.testing.assert_allclose(got, sess.run(None, feed)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ["none", "silu", "relu6", "residual"])
@pytest.mark.parametrize("size,bias", [(7, True), (12, False), (1, True), (1, False)])
def test_pointwise_conv_as_a_gemm_matches_onnxruntime(act: str, size: int, bias: bool) -> None:
    """1x1 convolutions (stride 1, batch 1) lower to topi's dense on NCHW as it lies (a 1x1
    image: the row vector times pre-packed weights)."""
    _check(_model(24, size, 1, 1, [0, 0, 0, 0], 1, 1, bias, act))


def test_pointwise_conv_of_a_batch_matches_onnxruntime() -> None:
    model, feed = _conv_only((2, 8, 5, 5), (12, 8, 1, 1), 1, [0, 0, 0, 0])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = list(tensorforge.compile(model, progress=False).run(feed).values())[0]
    np.testing.assert_allclose(got, sess.run(None, feed)[0], rtol=1e-4, atol=1e-4)
