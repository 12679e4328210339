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
    assert "Erfc (not an ONNX operator: the converter left its own framework's op" in message
    assert "(node 'gelu/Erfc', opset 17)" in message
    assert "gelu(x, approximate=True)` converts" in message
    assert "StringNormalizer (node 'odd', opset 17)" in message  # an ONNX op: no note
    assert "FakeQuantWithMinMaxVars (not an ONNX operator" in message
