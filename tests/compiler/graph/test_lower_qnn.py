"""The int8 graph ops compiled for the CPU (compile_graph: strategy/qnn.py -> LLVM) equal the
graph's reference executor (run_graph: the numpy kernels of compiler/quantize and
hw.isa.alu_apply) bit for bit: each op alone over odd shapes, strides, paddings and
requantizations (realistic ones from requant_params/add_params and hand-written ALU programs that
wrap), then whole quantized models.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import resnet18
from tensorforge.compiler.graph import Graph, GraphBuilder, run_graph
from tensorforge.compiler.graph.compile import compile_graph
from tensorforge.compiler.graph.ops.qnn import add_attrs, requant_attrs
from tensorforge.compiler.graph.passes import optimize, partition_graph
from tensorforge.compiler.quantize import requant_params
from tensorforge.compiler.quantize.graph import quantize_graph
from tensorforge.compiler.quantize.requant import (
    AluStep,
    RequantParams,
    requant_params_per_channel,
)
from tensorforge.compiler.quantize.residual import AddParams, add_params
from tensorforge.compiler.tir.stmt import LoweringError
from tensorforge.digits import load_digits_assets
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluOp

MUL = HWConfig.preset("pynq")  # alu_mul: multiply+shift requantization
SHIFT = MUL.replace(alu_mul=False)
SCALES = {"in_scale": 0.5, "weight_scale": 0.25, "out_scale": 1.0}


def _int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, shape).astype(np.int8)


def _assert_compiled_equals_reference(graph: Graph, inputs: dict[str, np.ndarray]) -> Graph:
    """compile_graph's module and run_graph agree exactly on every output (values and dtype)."""
    got = compile_graph(graph, progress=False).run(inputs)
    want = run_graph(graph, inputs)
    assert list(got) == list(graph.outputs)
    for name in graph.outputs:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    return graph


def _steps(*pairs: tuple[str, int], lo: int = -127, hi: int = 127) -> RequantParams:
    """A hand-written ALU program (the summary fields are not read by any kernel)."""
    steps = tuple(AluStep(AluOp[op], imm) for op, imm in pairs)
    return RequantParams(steps, 1, 0, False, lo, hi, 32)


# Hand-written programs that reach what requant_params never emits: MUL and left shifts that
# wrap int32, a right shift past 31 (clamped), a left shift past 31 (zero), no final MAX/MIN (the
# int8 result is the low 8 bits) and a negative rounding constant.
WRAPPING = {
    "mul_wraps": _steps(("MUL", 30011), ("SHR", -5), ("SHR", 9), ("MAX", -100), ("MIN", 100)),
    "low_bits": _steps(("MUL", 1001), ("SHR", 3), ("ADD", -77)),
    "shr_past_31": _steps(("ADD", 5), ("SHR", 40), ("MAX", -127), ("MIN", 127)),
    "shl_past_31": _steps(("SHR", -32), ("ADD", 3)),
    "shl_31": _steps(("SHR", -31), ("SHR", 24)),
}


# ---- tf.quantize / tf.dequantize ----------------------------------------------------------------


def _unary_graph(op: str, x: np.ndarray, scale: float) -> Graph:
    b = GraphBuilder(op)
    name = b.add_input("x", x.shape, str(x.dtype))
    (y,) = b.add_node(op, [name], {"scale": scale}, name="q")
    return b.build([y])


def _quantize_inputs(scale: float, dtype: str) -> np.ndarray:
    """Ties of x / scale (k + 1/2), their float neighbours, saturation, signed zeros, specials."""
    k = np.arange(-140, 141, dtype=np.float64)
    ties = ((k + 0.5) * scale).astype(dtype)
    around = np.concatenate([np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf)])
    special = np.array([0.0, -0.0, 1e-40, -1e-40, 1e30, -1e30, np.inf, -np.inf], dtype)
    noise = np.random.default_rng(3).standard_normal(401) * 60 * scale
    flat = np.concatenate([ties, around, special, noise.astype(dtype)])
    return flat[: flat.size // 7 * 7].reshape(1, 7, -1).astype(dtype)


@pytest.mark.filterwarnings("ignore::tensorforge.CalibrationRangeWarning")  # (saturating is
@pytest.mark.parametrize("dtype", ["float32", "float64"])  # what it checks)
@pytest.mark.parametrize("scale", [2.0**-3, 0.0371, 1.0 / 3.0, 7.25e-5])
def test_quantize_rounds_half_to_even_and_saturates_like_numpy(scale: float, dtype: str) -> None:
    x = _quantize_inputs(scale, dtype)
    _assert_compiled_equals_reference(_unary_graph("tf.quantize", x, scale), {"x": x})


def test_quantize_of_nan_is_zero_as_numpys_cast() -> None:
    x = np.array([[np.nan, 1.0, -np.nan, 3.0, np.nan]], np.float32)
    got = compile_graph(_unary_graph("tf.quantize", x, 0.5), progress=False).run({"x": x})
    with np.errstate(invalid="ignore"):
        want = run_graph(_unary_graph("tf.quantize", x, 0.5), {"x": x})
    assert got["q"].tolist() == [[0, 2, 0, 6, 0]]
    np.testing.assert_array_equal(got["q"], want["q"])


@pytest.mark.parametrize("scale", [2.0**-7, 0.0371, 1.0 / 3.0, 3.7e-5, 1e3])
def test_dequantize_rounds_once_to_float32(scale: float) -> None:
    x = np.arange(-128, 128, dtype=np.int8).reshape(2, 128)
    _assert_compiled_equals_reference(_unary_graph("tf.dequantize", x, scale), {"x": x})


# ---- tf.qadd ------------------------------------------------------------------------------------


def _qadd_graph(shape: tuple[int, ...], params: AddParams) -> Graph:
    b = GraphBuilder("qadd")
    x, y = b.add_input("a", shape, "int8"), b.add_input("b", shape, "int8")
    attrs = {**add_attrs(params), "lhs_scale": 1.0, "rhs_scale": 1.0, "out_scale": 1.0}
    (out,) = b.add_node("tf.qadd", [x, y], attrs, name="add")
    return b.build([out])


ADDS = {
    "shift_left_a_relu": add_params(2.0**3, 2.0**-1, SHIFT, relu=True),  # SHR -4 on a
    "shift_right_sum": add_params(2.0**-2, 2.0**-5, SHIFT),
    "shift_equal": add_params(1.0, 1.0, SHIFT),
    "mul_both": add_params(0.731, 1.37, MUL, mode="mul"),
    "mul_relu": add_params(3.3, 0.05, MUL, mode="mul", relu=True),
    "wrapping": AddParams(AluStep(AluOp.SHR, -24), AluStep(AluOp.MUL, 30000), WRAPPING["low_bits"]),
    "shl_past_31": AddParams(AluStep(AluOp.SHR, -33), None, WRAPPING["mul_wraps"]),
}


@pytest.mark.parametrize("shape", [(1, 5, 7, 3), (2, 3, 11, 13), (1, 1)])
@pytest.mark.parametrize("name", list(ADDS))
def test_qadd_equals_the_alu_reference(name: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape) + len(name))
    inputs = {"a": _int8(rng, shape), "b": _int8(rng, shape)}
    _assert_compiled_equals_reference(_qadd_graph(shape, ADDS[name]), inputs)


def test_add_params_reach_a_left_shift() -> None:
    assert (ADDS["shift_left_a_relu"].lhs.op, ADDS["shift_left_a_relu"].lhs.imm) == (AluOp.SHR, -4)


# ---- tf.qconv2d ---------------------------------------------------------------------------------


def _qconv_graph(
    x_shape: tuple, w: np.ndarray, bias: np.ndarray | None, strides: tuple, pads: tuple, p
) -> Graph:
    b = GraphBuilder("qconv")
    inputs = [b.add_input("x", x_shape, "int8"), b.add_constant("w", w)]
    if bias is not None:
        inputs.append(b.add_constant("bias", bias))
    attrs = {"strides": strides, "pads": pads, **SCALES, **requant_attrs(p)}
    (y,) = b.add_node("tf.qconv2d", inputs, attrs, name="conv")
    return b.build([y])


def _conv_requant(kind: str, w: np.ndarray, bias: np.ndarray | None) -> RequantParams:
    bound = 127 * int(np.abs(w.astype(np.int64)).sum(axis=(1, 2, 3)).max())
    bound += 0 if bias is None else int(np.abs(bias.astype(np.int64)).max())
    if kind in WRAPPING:
        return WRAPPING[kind]
    if kind == "channel_relu":  # per-channel multipliers (per-channel weight scales)
        rows = np.abs(w.astype(np.int64)).reshape(len(w), -1).sum(axis=1) * 127
        bounds = rows + (0 if bias is None else np.abs(bias.astype(np.int64)))
        ratios = np.linspace(0.3, 2.5, len(w)) * 0.00137
        return requant_params_per_channel(ratios, MUL, acc_bounds=bounds, relu=True, pre_shift=2)
    if kind == "channel_wraps":  # multipliers whose products wrap int32, then the low bits
        m = tuple(30011 + 7919 * c for c in range(len(w)))
        steps = tuple(AluStep(AluOp[op], imm) for op, imm in (("SHR", 9), ("ADD", -3)))
        return RequantParams(steps, 1, 0, False, -127, 127, 32, m)
    mode, relu = kind.split("_")
    if mode == "shift":
        return requant_params(2.0**-9, SHIFT, relu=relu == "relu", acc_bound=bound)
    if mode == "left":  # a ratio above 1: SHR by a negative amount
        return requant_params(2.0, SHIFT, relu=relu == "relu", acc_bound=bound)
    return requant_params(0.00137, MUL, mode="mul", relu=relu == "relu", acc_bound=bound)


# (N, C, H, W), (O, KH, KW), strides, pads (top, left, bottom, right), requant kind, bias
CONVS = {
    "digits_conv1": ((1, 1, 8, 8), (16, 3, 3), (1, 1), (1, 1, 1, 1), "shift_relu", True),
    "prime_stride2": ((2, 3, 13, 11), (7, 3, 3), (2, 2), (1, 1, 1, 1), "mul_plain", True),
    "asymmetric": ((1, 5, 9, 10), (11, 3, 2), (1, 1), (0, 1, 2, 0), "shift_plain", True),
    "asymmetric_stride2": ((1, 16, 9, 9), (16, 3, 3), (2, 2), (0, 0, 1, 1), "mul_relu", True),
    "pointwise_stride2": ((1, 17, 7, 7), (13, 1, 1), (2, 2), (0, 0, 0, 0), "mul_relu", False),
    "unequal_strides": ((1, 4, 11, 9), (5, 5, 5), (2, 1), (2, 1, 0, 2), "shift_plain", True),
    "wide_pad": ((1, 3, 5, 5), (4, 2, 2), (1, 1), (3, 3, 3, 3), "mul_plain", True),
    "left_shift": ((1, 2, 6, 7), (3, 3, 3), (1, 1), (1, 1, 1, 1), "left_plain", True),
    "mul_wraps": ((1, 8, 7, 5), (9, 3, 3), (1, 2), (1, 1, 1, 1), "mul_wraps", True),
    "low_bits": ((1, 3, 6, 6), (5, 3, 3), (1, 1), (1, 0, 1, 0), "low_bits", False),
    "shr_past_31": ((1, 3, 5, 5), (2, 3, 3), (1, 1), (1, 1, 1, 1), "shr_past_31", True),
    "shl_31": ((1, 16, 5, 5), (16, 3, 3), (1, 1), (1, 1, 1, 1), "shl_31", True),
    "per_channel": ((1, 6, 7, 7), (11, 3, 3), (1, 1), (1, 1, 1, 1), "channel_relu", True),
    "per_channel_wraps": ((1, 5, 6, 5), (7, 3, 3), (2, 1), (1, 0, 1, 0), "channel_wraps", False),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_qconv2d_equals_the_int8_reference(name: str) -> None:
    x_shape, (o, kh, kw), strides, pads, kind, has_bias = CONVS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    w = rng.integers(-127, 128, (o, x_shape[1], kh, kw)).astype(np.int8)
    bias = rng.integers(-(2**14), 2**14, o).astype(np.int32) if has_bias else None
    graph = _qconv_graph(x_shape, w, bias, strides, pads, _conv_requant(kind, w, bias))
    _assert_compiled_equals_reference(graph, {"x": _int8(rng, x_shape)})


def test_qconv2d_bias_add_wraps_the_int32_accumulator() -> None:
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (4, 6, 3, 3)).astype(np.int8)
    bias = np.array([2**31 - 1, -(2**31), 2**31 - 40000, 7], np.int32)  # sums wrap both ways
    p = _steps(("SHR", 20), ("MAX", -127), ("MIN", 127))
    graph = _qconv_graph((1, 6, 7, 7), w, bias, (1, 1), (1, 1, 1, 1), p)
    x = _int8(rng, (1, 6, 7, 7))
    out = run_graph(graph, {"x": x})["conv"]
    assert out[0, 0].min() < 0 < out[0, 1].max()  # the oracle itself wrapped
    _assert_compiled_equals_reference(graph, {"x": x})


# ---- tf.qdense ----------------------------------------------------------------------------------


def _qdense_graph(n: int, w: np.ndarray, bias: np.ndarray | None, p: RequantParams) -> Graph:
    b = GraphBuilder("qdense")
    inputs = [b.add_input("x", (n, w.shape[1]), "int8"), b.add_constant("w", w)]
    if bias is not None:
        inputs.append(b.add_constant("bias", bias))
    (y,) = b.add_node("tf.qdense", inputs, {**SCALES, **requant_attrs(p)}, name="dense")
    return b.build([y])


@pytest.mark.parametrize(
    ("n", "m", "k", "kind", "has_bias"),
    [
        (1, 13, 37, "shift_relu", True),
        (7, 33, 512, "mul_plain", True),  # rows past the 6-row tile, columns past a panel
        (3, 1, 1, "shift_plain", False),
        (2, 10, 64, "left_plain", True),
        (5, 17, 29, "mul_wraps", True),
        (4, 9, 11, "low_bits", False),
        (3, 21, 40, "channel_relu", True),
        (2, 6, 33, "channel_wraps", True),
    ],
)
def test_qdense_equals_the_int8_reference(n: int, m: int, k: int, kind: str, has_bias) -> None:
    rng = np.random.default_rng(n * 1000 + m * 10 + k)
    w = rng.integers(-127, 128, (m, k)).astype(np.int8)
    bias = rng.integers(-(2**14), 2**14, m).astype(np.int32) if has_bias else None
    p = _conv_requant(kind, w.reshape(m, k, 1, 1), bias)
    _assert_compiled_equals_reference(_qdense_graph(n, w, bias, p), {"x": _int8(rng, (n, k))})


# ---- tf.qmaxpool --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "kernel", "strides", "pads"),
    [
        ((1, 3, 7, 9), (2, 2), (2, 2), (0, 0, 0, 0)),
        ((2, 5, 11, 13), (3, 3), (2, 2), (1, 1, 1, 1)),
        ((1, 2, 6, 7), (2, 3), (1, 2), (0, 1, 2, 0)),
        ((1, 1, 5, 5), (2, 2), (1, 1), (2, 2, 2, 2)),  # windows wholly in the padding
        ((1, 17, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    ],
)
def test_qmaxpool_pads_below_every_int8_value(shape, kernel, strides, pads) -> None:
    b = GraphBuilder("qpool")
    x = b.add_input("x", shape, "int8")
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "scale": 1.0}
    (y,) = b.add_node("tf.qmaxpool", [x], attrs, name="pool")
    rng = np.random.default_rng(sum(shape))
    _assert_compiled_equals_reference(b.build([y]), {"x": _int8(rng, shape)})


def test_an_accumulator_width_other_than_32_is_refused_naming_op_and_node() -> None:
    p = replace(requant_params(2.0**-4, SHIFT), acc_width=24)
    graph = _qconv_graph((1, 3, 4, 4), np.ones((2, 3, 1, 1), np.int8), None, (1, 1), (0,) * 4, p)
    with pytest.raises(LoweringError, match=r"tf.qconv2d node 'conv': acc_width must be 32.*24"):
        compile_graph(graph, progress=False)


# ---- whole quantized models ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits() -> tuple[Graph, dict[str, np.ndarray]]:
    model, split = load_digits_assets()
    shapes = {"input": split["images"].shape}
    return optimize(from_onnx(str(model), input_shapes=shapes)), split


def _every_value_an_output(graph: Graph) -> Graph:
    """The graph with every node's output also a graph output (so the module returns them)."""
    return graph.replace(outputs=tuple(o for n in graph.nodes for o in n.outputs if o))


@pytest.mark.parametrize(("mode", "cfg"), [("shift", SHIFT), ("mul", MUL)])
def test_digits_cnn_compiled_for_the_cpu_equals_run_graph(digits, mode: str, cfg) -> None:
    graph, split = digits
    q = partition_graph(quantize_graph(graph, {"input": split["calib_images"]}, cfg, mode), cfg)
    inputs = {"input": split["images"]}  # all 450 test images
    _assert_compiled_equals_reference(q, inputs)
    every = _assert_compiled_equals_reference(_every_value_an_output(q), inputs)
    assert [n.op for n in every.nodes].count("tf.qconv2d") == 3


@pytest.mark.parametrize(
    ("mode", "cfg", "each_value"), [("shift", SHIFT, False), ("mul", MUL, True)]
)
def test_resnet18_int8_graph_compiled_for_the_cpu_equals_run_graph(mode, cfg, each_value) -> None:
    size, rng = 32, np.random.default_rng(0)
    graph = optimize(from_onnx(resnet18(size)))
    calib = [{"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)} for _ in range(2)]
    q = quantize_graph(graph, calib, cfg, mode)
    x = {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}
    _assert_compiled_equals_reference(q, x)
    if not each_value:
        return
    # Every int8 value on the way, each node its own kernel. The float GlobalAveragePool between
    # a dequantize and a quantize sums in another order than numpy (ulps apart, so compared with
    # a tolerance); everything int8 is exact.
    every = _every_value_an_output(q)
    got = compile_graph(every, progress=False).run(x)
    want = run_graph(every, x)
    assert sum(want[name].dtype == np.int8 for name in every.outputs) == 32  # 2 are quantize
    for name in every.outputs:
        if want[name].dtype == np.int8:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        else:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6, err_msg=name)
