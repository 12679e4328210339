"""onnxruntime's quantized contrib ops (QOperator format: QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QLinearSoftmax,
QLinearReduceMean, QLinearWhere, QGemm, the contrib QLinearConv/QuantizeLinear/
DequantizeLinear) compiled for the CPU, against onnxruntime's own kernels: each op alone over
both 8-bit types, with and without the optional zero points; then models quantized by
onnxruntime's `quantize_static` in the QOperator format, end to end.

onnxruntime computes some of these in fixed point or by lookup table (ops/contrib_qlinear.py),
so outputs may differ by one quantization step where a value lies near a rounding boundary:
the tests allow that step and require nearly all values to be equal.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import IR_VERSION, small_cnn
from tensorforge.compiler.graph import run_graph

MS = "com.microsoft"
ELEM = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
        np.dtype(np.float32): TensorProto.FLOAT, np.dtype(bool): TensorProto.BOOL}  # fmt: skip
RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> None:
    """Each test's own inputs, whatever order the workers run the tests in."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def _q(dtype: type, shape: Sequence[int]) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _zero(dtype: type) -> np.ndarray:
    return np.array(128 if dtype is np.uint8 else -3, dtype)


def _model(
    op: str, feed: dict[str, np.ndarray], args: Sequence, y: type | None = None, **attrs
) -> onnx.ModelProto:
    """One com.microsoft `op` node; an argument is a graph input's name, a constant, or None
    (an optional input left out); its output of type `y` (default: the last input's)."""
    names, inits = [], []
    for k, arg in enumerate(args):
        if arg is None or isinstance(arg, str):
            names.append(arg or "")
        else:
            names.append(f"c{k}")
            inits.append(numpy_helper.from_array(np.asarray(arg), f"c{k}"))
    while names and not names[-1]:
        names.pop()
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], name="node", domain=MS, **attrs)],
        op.lower(),
        [helper.make_tensor_value_info(n, ELEM[v.dtype], v.shape) for n, v in feed.items()],
        [
            helper.make_tensor_value_info(
                "y", ELEM[np.dtype(y or list(feed.values())[-1].dtype)], None
            )
        ],  # fmt: skip
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def _onnxruntime(model: onnx.ModelProto, feed: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    return session.run(None, feed)


def _check(
    model: onnx.ModelProto,
    feed: dict[str, np.ndarray],
    steps: float = 1,
    oracle: onnx.ModelProto | None = None,
) -> None:
    """Compiled and the graph's numpy reference each within `steps` quantization steps of the
    oracle's output (onnxruntime running `model`, or `oracle` where it has no kernel for the
    op: the same computation in standard ops) and, over outputs of 100 values or more, at
    least 95% of the values equal to it."""
    (want,) = _onnxruntime(oracle or model, feed)
    got = tensorforge.compile(model).run(feed)["y"]
    ref = run_graph(from_onnx(model), feed)["y"]
    for out in (got, ref):
        assert out.dtype == want.dtype
        diff = np.abs(out.astype(np.float64) - want.astype(np.float64))
        assert diff.max() <= steps, f"largest difference {diff.max()} (> {steps})"
        assert diff.size < 100 or np.mean(diff == 0) >= 0.95


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_ops_broadcast(op, dtype):
    a, b = _q(dtype, (2, 3, 5, 7)), _q(dtype, (3, 1, 7))
    z = _zero(dtype)
    sa, sb, sc = np.float32(0.05), np.float32(0.02), np.float32(0.07 if op == "QLinearAdd" else 0.2)
    model = _model(op, {"a": a, "b": b}, ["a", sa, z, "b", sb, z, sc, z])
    _check(model, {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("QLinearSigmoid", {}),
        ("QLinearLeakyRelu", {"alpha": 0.1}),
        ("QLinearGlobalAveragePool", {}),
        ("QLinearGlobalAveragePool", {"channels_last": 1}),
        ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("QLinearAveragePool", {"kernel_shape": [2, 2], "count_include_pad": 1,
                                "pads": [0, 0, 1, 1], "channels_last": 1}),
        ("QLinearSoftmax", {"axis": -1, "opset": 13}),
    ],
)  # fmt: skip
def test_unary_ops(op, attrs, dtype):
    x = _q(dtype, (1, 6, 9, 11))
    z = _zero(dtype)
    ys = np.float32(1 / 256) if op in ("QLinearSigmoid", "QLinearSoftmax") else np.float32(0.04)
    y_zero = np.array(0, dtype) if op in ("QLinearSigmoid", "QLinearSoftmax") else z
    if op in ("QLinearSigmoid", "QLinearSoftmax") and dtype is np.int8:
        y_zero = np.array(-128, dtype)
    model = _model(op, {"x": x}, ["x", np.float32(0.05), z, ys, y_zero], **attrs)
    _check(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(("axes", "keepdims"), [([2, 3], 1), ([1], 0)])
def test_reduce_mean_against_its_qdq_form(axes, keepdims, dtype):
    # onnxruntime has no CPU kernel for QLinearReduceMean: the oracle is onnxruntime running
    # DequantizeLinear -> ReduceMean -> QuantizeLinear (the op's definition) in standard ops
    x = _q(dtype, (2, 6, 5, 7))
    z, scales = _zero(dtype), [np.float32(0.05), np.float32(0.03)]
    model = _model("QLinearReduceMean", {"x": x}, ["x", scales[0], z, scales[1], z],
                   axes=axes, keepdims=keepdims)  # fmt: skip
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s0", "z"], ["f"]),
        helper.make_node("ReduceMean", ["f", "axes"], ["m"], keepdims=keepdims),
        helper.make_node("QuantizeLinear", ["m", "s1", "z"], ["y"]),
    ]
    named = {"s0": scales[0], "s1": scales[1], "z": z, "axes": np.array(axes)}
    inits = [numpy_helper.from_array(v, n) for n, v in named.items()]
    x_info = helper.make_tensor_value_info("x", ELEM[x.dtype], x.shape)
    y_info = helper.make_tensor_value_info("y", ELEM[x.dtype], None)
    graph = helper.make_graph(nodes, "qdq", [x_info], [y_info], inits)
    oracle = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION
    )
    _check(model, {"x": x}, oracle=oracle)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_concat_requantizes_each_input(dtype):
    feed = {"a": _q(dtype, (1, 3, 4, 4)), "b": _q(dtype, (1, 5, 4, 4))}
    z = _zero(dtype)
    args = [np.float32(0.1), z, "a", np.float32(0.05), z, "b", np.float32(0.2), np.array(0, dtype)]
    _check(_model("QLinearConcat", feed, args, axis=1), feed)


def test_where_picks_between_two_quantized_tensors():
    feed = {"c": RNG.random((4, 6)) > 0.5, "w": _q(np.uint8, (6,)), "x": _q(np.uint8, (4, 6))}
    zu = np.array(100, np.uint8)
    args = ["c", "x", np.float32(0.1), zu, "w", np.float32(0.3), zu, np.float32(0.2), zu]
    _check(_model("QLinearWhere", feed, args), feed)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("quantized_out", [True, False])
@pytest.mark.parametrize("per_column", [False, True])
def test_qgemm(trans_b, quantized_out, per_column):
    a = _q(np.uint8, (3, 20))
    w = _q(np.int8, (12, 20) if trans_b else (20, 12))
    b_scale = (RNG.random(12).astype(np.float32) * 0.02 + 0.01) if per_column else np.float32(0.02)
    b_zero = np.zeros(12, np.int8) if per_column else np.array(0, np.int8)
    bias = RNG.integers(-500, 500, 12).astype(np.int32)
    out = [np.float32(0.5), np.array(120, np.uint8)] if quantized_out else []
    args = ["a", np.float32(0.03), np.array(128, np.uint8), w, b_scale, b_zero, bias, *out]
    y = np.uint8 if quantized_out else np.float32
    model = _model("QGemm", {"a": a}, args, y=y, transB=trans_b, alpha=0.5)
    if quantized_out:
        _check(model, {"a": a})
        return
    (want,) = _onnxruntime(model, {"a": a})
    got = tensorforge.compile(model).run({"a": a})["y"]  # alpha scales the bias too
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_contrib_qlinear_conv(channels_last):
    x = _q(np.uint8, (1, 7, 7, 4) if channels_last else (1, 4, 7, 7))
    w = _q(np.int8, (6, 4, 3, 3))
    args = ["x", np.float32(0.02), np.array(128, np.uint8), w, np.full(6, 0.01, np.float32),
            np.zeros(6, np.int8), np.float32(0.3), np.array(128, np.uint8),
            RNG.integers(-1000, 1000, 6).astype(np.int32)]  # fmt: skip
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1], "dilations": [1, 1]}
    model = _model("QLinearConv", {"x": x}, args, channels_last=channels_last, **attrs)
    _check(model, {"x": x}, steps=0)


def test_contrib_quantize_and_dequantize():
    x = RNG.standard_normal((3, 8)).astype(np.float32) * 4
    q = _model(
        "QuantizeLinear", {"x": x}, ["x", np.float32(0.05), np.array(10, np.uint8)], y=np.uint8
    )
    _check(q, {"x": x}, steps=0)
    u = _q(np.uint8, (3, 8))
    d = _model(
        "DequantizeLinear", {"u": u}, ["u", np.float32(0.05), np.array(10, np.uint8)], y=np.float32
    )
    _check(d, {"u": u}, steps=0)


def test_models_quantized_by_onnxruntime_in_the_qoperator_format(tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    model = small_cnn(32)
    name = model.graph.input[0].name
    batches = [RNG.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(5)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = list(batches[:4])

        def get_next(self) -> dict | None:
            return {name: self.left.pop()} if self.left else None

    onnx.save(model, tmp_path / "float.onnx")
    quantize_static(tmp_path / "float.onnx", tmp_path / "int8.onnx", Reader(),
                    quant_format=QuantFormat.QOperator)  # fmt: skip
    quantized = onnx.load(tmp_path / "int8.onnx")
    ops = {n.op_type for n in quantized.graph.node if n.domain == MS}
    assert ops & {"QLinearAdd", "QLinearGlobalAveragePool", "QGemm", "QLinearAveragePool"}, ops
    x = batches[4]
    (want,) = _onnxruntime(quantized, {name: x})
    got = tensorforge.compile(quantized).run({name: x})
    (got,) = got.values()
    scale = np.abs(want).max() / 127
    np.testing.assert_allclose(got, want, atol=2 * scale)
    assert got.argmax() == want.argmax()
