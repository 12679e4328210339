"""ONNX patterns that tf2onnx writes for Keras models, rebuilt with onnx.helper (no TensorFlow
needed), compiled and checked against onnxruntime: NHWC inputs with Transposes around the
convolutions, explicit Pads before strided convolutions, unfused batch norms, dynamic batch
dimensions ("unk__N") bound with `input_shapes`."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph.compile import CPU_BLOCK
from tensorforge.compiler.graph.passes import optimize

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, arrays, opset=17):  # noqa: ANN001, ANN202
    initializers = [numpy_helper.from_array(np.asarray(v), k) for k, v in arrays.items()]
    graph = oh.make_graph(nodes, "tf2onnx", inputs, outputs, initializers)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _float(name: str, shape) -> object:  # noqa: ANN001
    return oh.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _weights(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _check(model, feeds, input_shapes=None, rtol=1e-5):  # noqa: ANN001, ANN202
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    module = tensorforge.compile(model, input_shapes=input_shapes, progress=False)
    got = list(module.run(feeds).values())
    for ours, theirs in zip(got, want, strict=True):
        scale = float(np.abs(theirs).max())
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=rtol * scale)


def _optimized_ops(model, input_shapes=None) -> list[str]:  # noqa: ANN001
    graph = optimize(from_onnx(model, input_shapes=input_shapes), CPU_BLOCK, chains_only=True)
    return [n.op for n in graph.nodes]


def _pad_conv_model(pads, value=None, mode="constant"):  # noqa: ANN001, ANN202
    # Keras's ZeroPadding2D / "valid" stride-2 conv after it, as tf2onnx writes them (MobileNetV2's
    # block_N_pad): NHWC input, Transpose to NCHW, Pad, Conv with pads 0, Relu6 as Clip
    channels = 8 + pads[1] + pads[5]
    arrays = {"perm_w": _weights(16, channels, 3, 3), "pads": np.array(pads, np.int64)}
    arrays.update(lo=np.float32(0), hi=np.float32(6), w1=_weights(8, 4, 1, 1))
    pad_inputs = ["c1", "pads"] + (["value"] if value is not None else [])
    if value is not None:
        arrays["value"] = np.float32(value)
    nodes = [
        oh.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
        oh.make_node("Conv", ["t", "w1"], ["c0"], kernel_shape=[1, 1]),
        oh.make_node("Clip", ["c0", "lo", "hi"], ["c1"]),
        oh.make_node("Pad", pad_inputs, ["p"], mode=mode),
        oh.make_node("Conv", ["p", "perm_w"], ["c2"], kernel_shape=[3, 3], strides=[2, 2]),
        oh.make_node("Transpose", ["c2"], ["y"], perm=[0, 2, 3, 1]),
    ]
    return _model(nodes, [_float("x", ["unk__12", 17, 16, 4])], [_float("y", None)], arrays)


def test_zero_pad_before_a_strided_conv_becomes_its_padding() -> None:
    model = _pad_conv_model([0, 0, 0, 0, 0, 0, 1, 1])
    x = RNG.standard_normal((1, 17, 16, 4)).astype(np.float32)
    _check(model, {"x": x}, input_shapes={"x": x.shape})
    assert "Pad" not in _optimized_ops(model, {"x": x.shape})


@pytest.mark.parametrize(
    ("pads", "value", "mode"),
    [
        ([0, 1, 1, 0, 0, 0, 1, 0], None, "constant"),  # pads the channels: not a conv's padding
        ([0, 0, 1, 1, 0, 0, 1, 1], 0.5, "constant"),  # a non-zero fill
        ([0, 0, 1, 1, 0, 0, 1, 1], None, "reflect"),
        ([0, 0, -1, 0, 0, 0, 1, 1], None, "constant"),  # a crop
    ],
)
def test_a_pad_that_is_not_zero_padding_stays(pads, value, mode) -> None:  # noqa: ANN001
    model = _pad_conv_model(pads, value, mode)
    x = RNG.standard_normal((1, 17, 16, 4)).astype(np.float32)
    _check(model, {"x": x}, input_shapes={"x": x.shape})
    assert "Pad" in _optimized_ops(model, {"x": x.shape})


def test_tensorflow_ops_left_in_the_file_are_listed_with_the_rest() -> None:
    # tf2onnx 1.17 cannot convert TensorFlow's Erfc (Keras 3's exact GELU under TensorFlow) and
    # leaves it in the file as it is; onnxruntime refuses such a file too
    nodes = [
        oh.make_node("Mul", ["x", "k"], ["s"], name="gelu/mul"),
        oh.make_node("Erfc", ["s"], ["e"], name="gelu/Erfc"),
        oh.make_node("StringNormalizer", ["e"], ["n"], name="odd"),
        oh.make_node("FakeQuantWithMinMaxVars", ["n"], ["y"], name="fq"),
    ]
    model = _model(nodes, [_float("x", [2, 3])], [_float("y", None)], {"k": np.float32(-0.7)})
    with pytest.raises(tensorforge.compiler.frontend.UnsupportedOpError) as info:
        tensorforge.compile(model, progress=False)
    message = str(info.value)
    assert "uses 3 unsupported op(s)" in message
    assert "Erfc (node 'gelu/Erfc', opset 17)" in message
    assert "Erfc is not an ONNX operator: the converter left its own framework's op" in message
    assert "gelu(x, approximate=True)` converts" in message
    assert "StringNormalizer (node 'odd', opset 17)" in message
    assert "StringNormalizer is not" not in message  # an ONNX op
    assert "FakeQuantWithMinMaxVars is not an ONNX operator" in message
    assert len(message.splitlines()) == 6


def _nhwc_block_model(reduce_keepdims: int = 1):  # noqa: ANN202
    # MobileNetV3's block as tf2onnx writes it when its transpose optimizer gives up: every
    # Conv between Transposes, the batch norm's scale and shift, hard-swish, the
    # squeeze-excitation (ReduceMean over NHWC's rows and columns) and a ZeroPadding2D in NHWC
    c = 8
    arrays = {
        "w0": _weights(c, 4, 3, 3), "w1": _weights(c, 1, 3, 3), "w2": _weights(4, c, 1, 1),
        "w3": _weights(c, 4, 1, 1), "w4": _weights(c, c, 3, 3),
        "scale": RNG.uniform(0.5, 1.5, c).astype(np.float32),
        "shift": RNG.uniform(-0.2, 0.2, c).astype(np.float32),
        "three": np.float32(3), "sixth": np.float32(1 / 6), "lo": np.float32(0),
        "hi": np.float32(6), "rows_cols": np.array([1, 2], np.int64),
        "pads": np.array([0, 0, 0, 0, 0, 1, 1, 0], np.int64),
        "gain": RNG.uniform(0.5, 1.5, (1, 1, c)).astype(np.float32),
    }  # fmt: skip
    to_nchw, to_nhwc = {"perm": [0, 3, 1, 2]}, {"perm": [0, 2, 3, 1]}
    nodes = [
        oh.make_node("Transpose", ["x"], ["x_t"], **to_nchw),
        oh.make_node("Conv", ["x_t", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        oh.make_node("Transpose", ["c0"], ["a"], **to_nhwc),
        oh.make_node("Mul", ["a", "scale"], ["a1"]),
        oh.make_node("Add", ["a1", "shift"], ["a2"]),
        oh.make_node("Add", ["a2", "three"], ["h0"]),  # hard-swish: x * relu6(x + 3) / 6
        oh.make_node("Clip", ["h0", "lo", "hi"], ["h1"]),
        oh.make_node("Mul", ["h1", "sixth"], ["h2"]),
        oh.make_node("Mul", ["a2", "h2"], ["h"]),
        oh.make_node("Transpose", ["h"], ["h_t"], **to_nchw),
        oh.make_node(
            "Conv", ["h_t", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=c
        ),
        oh.make_node("Transpose", ["c1"], ["d"], **to_nhwc),
        oh.make_node("Relu", ["d"], ["r"]),
        oh.make_node("ReduceMean", ["r"], ["s"], axes=[1, 2], keepdims=1),
        oh.make_node("Transpose", ["s"], ["s_t"], **to_nchw),
        oh.make_node("Conv", ["s_t", "w2"], ["c2"], kernel_shape=[1, 1]),
        oh.make_node("Relu", ["c2"], ["c2r"]),
        oh.make_node("Conv", ["c2r", "w3"], ["c3"], kernel_shape=[1, 1]),
        oh.make_node("Transpose", ["c3"], ["g"], **to_nhwc),
        oh.make_node("Sigmoid", ["g"], ["gs"]),
        oh.make_node("Mul", ["r", "gs"], ["se"]),
        oh.make_node("Mul", ["se", "gain"], ["se2"]),  # a constant of lower rank
        oh.make_node("Pad", ["se2", "pads"], ["p"]),
        oh.make_node("Transpose", ["p"], ["p_t"], **to_nchw),
        oh.make_node("Conv", ["p_t", "w4"], ["c4"], kernel_shape=[3, 3], strides=[2, 2]),
        oh.make_node("Transpose", ["c4"], ["o"], **to_nhwc),
        oh.make_node("ReduceMean", ["o"], ["y"], axes=[1], keepdims=reduce_keepdims),
        oh.make_node("Add", ["se", "x_extra"], ["z"]),  # a run-time NHWC operand: stays NHWC
    ]
    inputs = [_float("x", ["unk__3", 9, 10, 4]), _float("x_extra", ["unk__4", 9, 10, c])]
    return _model(nodes, inputs, [_float("y", None), _float("z", None)], arrays)


@pytest.mark.parametrize("keepdims", [1, 0])
def test_nhwc_transposes_around_convolutions_cancel(keepdims: int) -> None:
    model = _nhwc_block_model(keepdims)
    shapes = {"x": (1, 9, 10, 4), "x_extra": (1, 9, 10, 8)}
    feeds = {k: RNG.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    _check(model, feeds, input_shapes=shapes)
    ops = _optimized_ops(model, shapes)
    # 11 -> 3 left: the input's, the one before the run-time NHWC operand, and the output's
    # (after the ReduceMean, which now reduces NCHW's rows: keepdims 0 leaves [N, C, W])
    assert ops.count("Transpose") == 3
    assert "Pad" not in ops  # moved to NCHW, then folded into the strided Conv
    assert ops.count("ConvNCHWc") == 5


@pytest.mark.parametrize(
    ("scale_shape", "folds"),
    [((1, 8, 1, 1), True), ((8, 1, 1), True), ((), True), ((1, 1, 6, 7), False)],
)
def test_unfused_batch_norm_after_a_depthwise_conv_folds(scale_shape, folds) -> None:  # noqa: ANN001
    # Keras's depthwise conv + BatchNormalization: tf2onnx writes `conv * s + t` (MobileNet)
    arrays = {
        "w": _weights(8, 1, 3, 3),
        "b": RNG.standard_normal(8).astype(np.float32),
        "s": RNG.uniform(0.5, 1.5, scale_shape).astype(np.float32),
        "t": RNG.uniform(-0.5, 0.5, (1, 8, 1, 1)).astype(np.float32),
    }
    nodes = [
        oh.make_node(
            "Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8
        ),
        oh.make_node("Mul", ["s", "c"], ["m"]),
        oh.make_node("Add", ["m", "t"], ["y"]),
    ]
    model = _model(nodes, [_float("x", [1, 8, 6, 7])], [_float("y", None)], arrays)
    x = RNG.standard_normal((1, 8, 6, 7)).astype(np.float32)
    _check(model, {"x": x})
    ops = _optimized_ops(model)
    assert ("Mul" not in ops and "Add" not in ops) == folds
    assert ops.count("ConvNCHWc") + ops.count("Conv") == 1


def test_transposes_without_perm_reverse_and_cancel() -> None:
    nodes = [
        oh.make_node("Transpose", ["x"], ["t"]),  # no perm: the axes reversed
        oh.make_node("Add", ["t", "bias"], ["a"]),
        oh.make_node("Sigmoid", ["a"], ["s"]),
        oh.make_node("Transpose", ["s"], ["back"]),
        oh.make_node("MatMul", ["back", "w"], ["y"]),
        oh.make_node("Transpose", ["s"], ["z"], perm=[1, 2, 0]),  # composes: one Transpose left
    ]
    arrays = {"bias": RNG.standard_normal((5, 1, 1)).astype(np.float32), "w": _weights(5, 2)}
    model = _model(nodes, [_float("x", [3, 4, 5])], [_float("y", None), _float("z", None)], arrays)
    _check(model, {"x": RNG.standard_normal((3, 4, 5)).astype(np.float32)})
    assert _optimized_ops(model).count("Transpose") == 1
