"""ONNX's quantized ops compiled for the CPU (tensorforge.compile: strategy/qlinear.py -> LLVM)
equal onnxruntime's kernels bit for bit, and the graph's numpy reference (run_graph): each op
alone over odd shapes, both 8-bit types, per-tensor, per-axis and per-block parameters, ties,
saturation and NaN, then the quantized CNN end to end.

onnxruntime runs with its graph optimizations off (they would rewrite the quantized ops; the
whole-model test also runs them on), single-threaded.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import IR_VERSION, quantized_cnn
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.ops.quant import requant_multiplier
from tensorforge.compiler.tir.stmt import LoweringError

U8, I8 = np.uint8, np.int8
ELEM = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(U8): TensorProto.UINT8,
    np.dtype(I8): TensorProto.INT8,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.int32): TensorProto.INT32,
}


def _model(
    op: str, feed: dict[str, np.ndarray], args: Sequence[np.ndarray | str | None], **attrs
) -> onnx.ModelProto:
    """One `op` node named "node"; each argument names a graph input of `feed`, is a constant,
    or is None (an absent optional input)."""
    names, inits = [], []
    for k, arg in enumerate(args):
        if arg is None or isinstance(arg, str):
            names.append(arg or "")
        else:
            names.append(f"c{k}")
            inits.append(numpy_helper.from_array(np.asarray(arg), f"c{k}"))
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], name="node", **attrs)],
        op.lower(),
        [helper.make_tensor_value_info(n, ELEM[v.dtype], v.shape) for n, v in feed.items()],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION
    )
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _onnxruntime(model: onnx.ModelProto, feed: dict, optimize: bool = False) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    return session.run(None, feed)


@functools.cache
def onnxruntime_int8_is_exact() -> bool:
    """Whether this CPU's onnxruntime computes u8 x s8 sums exactly. On x86 without VNNI
    (AVX2) its kernels add pairs of products in saturating int16 (vpmaddubsw): 255 * 127 * 2
    = 64770 comes out as 32767 (seen on an AMD EPYC, 2026-11-25), and there it is no oracle."""
    a = numpy_helper.from_array(np.full((1, 2), 255, np.uint8), "a")
    b = numpy_helper.from_array(np.full((2, 1), 127, np.int8), "b")
    consts = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (
        ("one", 1.0, np.float32), ("zu", 0, np.uint8), ("zs", 0, np.int8),
        ("ys", 1000.0, np.float32))]  # fmt: skip
    node = helper.make_node(
        "QLinearMatMul", ["a", "one", "zu", "b", "one", "zs", "ys", "zu"], ["y"]
    )
    graph = helper.make_graph([node], "probe", [], [helper.make_tensor_value_info(
        "y", TensorProto.UINT8, [1, 1])], [a, b, *consts])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = IR_VERSION
    return int(_onnxruntime(model, {})[0][0, 0]) == 65  # round(64770 / 1000)


def _assert_bit_exact(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    """Compiled == run_graph == onnxruntime, values and dtypes (NaN equal to NaN); onnxruntime
    only where its int8 sums are exact on this CPU (`onnxruntime_int8_is_exact`)."""
    got = list(tensorforge.compile(model).run(feed).values())
    graph = from_onnx(model)
    with np.errstate(invalid="ignore"):
        ref = [run_graph(graph, feed)[o] for o in graph.outputs]
    exact = onnxruntime_int8_is_exact() or not _int8_products(model)
    want = _onnxruntime(model, feed) if exact else ref
    for g, w, r in zip(got, want, ref, strict=True):
        assert g.dtype == w.dtype == r.dtype
        np.testing.assert_array_equal(g, r)
        np.testing.assert_array_equal(r, w)
    return got[0]


def _int8_products(model: onnx.ModelProto) -> bool:
    return any(n.op_type in ("QLinearConv", "QLinearMatMul") for n in model.graph.node)


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


# ---- QuantizeLinear ----------------------------------------------------------------------------


def _ties(scale: float, n: int) -> np.ndarray:
    """float32 values whose quotient by `scale` is a tie k + 1/2 or lands within rounding of one
    (float32 and float64 division round these differently), their neighbours, noise, specials."""
    k = np.arange(-150, 150, dtype=np.float64)
    ties = ((k + 0.5) * scale).astype(np.float32)
    near = np.concatenate([np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf)])
    special = np.array([0.0, -0.0, 1e-40, np.inf, -np.inf, np.nan, 1e30, -1e30], np.float32)
    noise = np.random.default_rng(n).standard_normal(n) * 100 * scale
    return np.concatenate([ties, near, special, noise.astype(np.float32)])


@pytest.mark.parametrize(
    "zero", [U8(128), U8(0), I8(-3), I8(0), np.int16(-300), np.uint16(40000), np.uint16(0)]
)
@pytest.mark.parametrize("scale", [0.0371, 2.0**-3, 1.0 / 3.0])
def test_quantize_linear_rounds_ties_in_float32_and_saturates(scale: float, zero) -> None:
    x = _ties(scale, 331).reshape(3, -1)  # rows of 413: vector lanes and a remainder
    scale = np.float32(scale)
    got = _assert_bit_exact(_model("QuantizeLinear", {"x": x}, ["x", scale, zero]), {"x": x})
    info = np.iinfo(zero.dtype)
    assert got.min() == info.min and got.max() == info.max
    assert got[np.isnan(x)].tolist() == [info.min]
    with np.errstate(invalid="ignore"):  # what float64 division would give
        f64 = np.rint(x.astype(np.float64) / np.float64(scale)) + float(zero)
    differs = np.clip(f64, info.min, info.max)[~np.isnan(x)] != got[~np.isnan(x)]
    assert differs.any() == (scale != 2.0**-3)  # dividing by a power of two is exact in both


def test_quantize_linear_without_zero_point_is_uint8() -> None:
    x = np.linspace(-3, 300, 35, dtype=np.float32).reshape(5, 7)
    got = _assert_bit_exact(_model("QuantizeLinear", {"x": x}, ["x", np.float32(0.7)]), {"x": x})
    assert got.dtype == U8 and got.min() == 0 and got.max() == 255


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_quantize_linear_per_axis(axis: int) -> None:
    rng = np.random.default_rng(axis + 5)
    x = (rng.standard_normal((3, 5, 17)) * 20).astype(np.float32)
    n = x.shape[axis]
    scale = rng.uniform(0.05, 0.3, n).astype(np.float32)
    zero = rng.integers(-20, 20, n).astype(I8)
    model = _model("QuantizeLinear", {"x": x}, ["x", scale, zero], axis=axis)
    _assert_bit_exact(model, {"x": x})


def test_quantize_linear_per_block() -> None:
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((2, 7, 5)) * 20).astype(np.float32)
    scale = rng.uniform(0.05, 0.3, (2, 3, 5)).astype(np.float32)  # blocks of 3 along axis 1
    zero = rng.integers(0, 255, (2, 3, 5)).astype(U8)
    model = _model("QuantizeLinear", {"x": x}, ["x", scale, zero], axis=1, block_size=3)
    _assert_bit_exact(model, {"x": x})


# ---- DequantizeLinear --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [U8, I8, np.int16, np.uint16, np.int32])
def test_dequantize_linear_multiplies_in_float32(dtype: type) -> None:
    rng = np.random.default_rng(3)
    x = _random(rng, (3, 67), dtype)
    zero = dtype(rng.integers(0, 100))
    if dtype is np.int32:  # float32(x) rounds above 2**24, before the multiplication
        x[0, :3], zero = [16777217, 2**31 - 1, -(2**31)], None
    model = _model("DequantizeLinear", {"x": x}, ["x", np.float32(0.0371), zero])
    _assert_bit_exact(model, {"x": x})


def test_dequantize_linear_per_axis_and_per_block() -> None:
    rng = np.random.default_rng(4)
    x = _random(rng, (2, 6, 9), U8)
    per_axis = [rng.uniform(0.01, 1, 6).astype(np.float32), _random(rng, (6,), U8)]
    _assert_bit_exact(_model("DequantizeLinear", {"x": x}, ["x", *per_axis], axis=1), {"x": x})
    blocks = [rng.uniform(0.01, 1, (2, 6, 3)).astype(np.float32), _random(rng, (2, 6, 3), U8)]
    model = _model("DequantizeLinear", {"x": x}, ["x", *blocks], axis=2, block_size=4)
    _assert_bit_exact(model, {"x": x})


# ---- QLinearConv -------------------------------------------------------------------------------

# x and w dtypes, (N, C, H, W), (K, kh, kw), group, strides, pads, dilations, then the options:
# "c" per-channel weight scales, "b" a bias, "z" a nonzero weight zero point
CONVS = {
    "ungrouped": (U8, I8, (1, 8, 10, 10), (16, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1), "cb"),
    "depthwise": (U8, I8, (1, 32, 15, 13), (32, 3, 3), 32, (1, 1), (1, 1, 1, 1), (1, 1), "cb"),
    "depthwise_s2": (U8, I8, (1, 24, 15, 15), (24, 3, 3), 24, (2, 2), (1, 1, 1, 1), (1, 1), "c"),
    "grouped_s3_dilated": (I8, I8, (1, 4, 11, 14), (8, 3, 3), 4, (1, 3), (1, 2, 1, 1), (1, 2), "c"),
    "grouped_dilated": (I8, I8, (1, 6, 9, 11), (8, 3, 3), 2, (1, 1), (2, 2, 2, 2), (2, 2), "bz"),
    "pointwise": (I8, I8, (1, 64, 7, 9), (96, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1), "c"),
    "uint8_weights": (U8, U8, (2, 5, 9, 11), (7, 3, 2), 1, (2, 1), (0, 1, 2, 0), (1, 1), "bz"),
    "asymmetric": (U8, I8, (1, 17, 9, 10), (11, 3, 3), 1, (1, 1), (0, 1, 2, 0), (1, 1), "cb"),
    "stride2_5x5": (U8, I8, (1, 3, 17, 13), (5, 5, 5), 1, (2, 2), (2, 2, 2, 2), (1, 1), "cbz"),
    "wide_pad": (I8, I8, (1, 3, 5, 5), (4, 2, 2), 1, (1, 1), (3, 3, 3, 3), (1, 1), "b"),
}

# 1-D (as 2-D of height 1) and 3-D: x and w dtypes, input shape, (K, *taps), group, strides,
# pads, dilations, options
CONVS_ND = {
    "1d_strided": (U8, I8, (2, 8, 19), (16, 3), 1, (2,), (1, 2), (1,), "cb"),
    "1d_depthwise": (U8, I8, (1, 16, 23), (16, 5), 16, (1,), (2, 2), (1,), "cb"),
    "1d_runtime_grouped": (I8, I8, (1, 6, 17), (9, 3), 3, (1,), (0, 1), (2,), "bz"),
    "3d": (U8, I8, (1, 4, 5, 6, 7), (8, 3, 3, 3), 1, (1, 2, 2), (1,) * 6, (1, 1, 1), "cb"),
    "3d_grouped": (
        I8,
        I8,
        (1, 6, 5, 6, 5),
        (6, 2, 3, 2),
        2,
        (1,) * 3,
        (0, 1, 1) * 2,
        (2, 1, 1),
        "bz",
    ),
}


def _conv_args(name: str, rng: np.random.Generator) -> tuple[list, dict[str, int | list]]:
    spec = {**CONVS, **CONVS_ND}[name]
    x_dt, w_dt, x_shape, (k, *taps), group, strides, pads, dil, options = spec
    w = _random(rng, (k, x_shape[1] // group, *taps), w_dt)
    w_scale = rng.uniform(0.001, 0.01, k if "c" in options else ()).astype(np.float32)
    w_zero = _random(rng, (), w_dt) // 4 if "z" in options else w_dt(0)
    bias = rng.integers(-3000, 3000, k).astype(np.int32) if "b" in options else None
    zeros = [_random(rng, (), x_dt), _random(rng, (), x_dt)]
    # an output scale that puts the sums' spread at ~100 output steps: some saturate
    y_scale = np.float32(0.03 * w_scale.mean() * np.sqrt(w[0].size) * 74 * 74 / 100)
    args = ["x", np.float32(0.03), zeros[0], w, w_scale, w_zero, y_scale, zeros[1], bias]
    attrs = {"kernel_shape": list(taps), "strides": list(strides), "pads": list(pads)}
    return args, attrs | {"dilations": list(dil), "group": group}


@pytest.mark.parametrize("name", list(CONVS))
def test_qlinear_conv_equals_onnxruntime(name: str) -> None:
    rng = np.random.default_rng(sum(map(ord, name)))
    args, attrs = _conv_args(name, rng)
    x = _random(rng, CONVS[name][2], CONVS[name][0])
    out = _assert_bit_exact(_model("QLinearConv", {"x": x}, args, **attrs), {"x": x})
    info = np.iinfo(out.dtype)
    assert out.min() == info.min or out.max() == info.max  # saturation is exercised


@pytest.mark.parametrize("name", list(CONVS_ND))
def test_1d_and_3d_qlinear_conv_equals_onnxruntime(name: str) -> None:
    """Constant weights (the blocked conv, or the direct reduction when grouped), or weights
    given at run time ("runtime" cases: the direct reduction reads them centered)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    args, attrs = _conv_args(name, rng)
    feed = {"x": _random(rng, CONVS_ND[name][2], CONVS_ND[name][0])}
    if "runtime" in name:
        feed["w"], args[3] = args[3], "w"
    _assert_bit_exact(_model("QLinearConv", feed, args, **attrs), feed)


def test_qlinear_conv_same_upper_padding() -> None:
    rng = np.random.default_rng(11)
    args, attrs = _conv_args("stride2_5x5", rng)
    del attrs["pads"]
    x = _random(rng, (1, 3, 16, 12), U8)
    model = _model("QLinearConv", {"x": x}, args, auto_pad="SAME_UPPER", **attrs)
    assert _assert_bit_exact(model, {"x": x}).shape == (1, 5, 8, 6)


def test_qlinear_conv_with_weights_computed_at_run_time() -> None:
    rng = np.random.default_rng(12)
    feed = {"x": _random(rng, (1, 4, 7, 6), U8), "w": _random(rng, (6, 4, 3, 3), I8)}
    scales = [np.float32(0.05), np.float32(0.004), np.float32(0.25)]
    args = ["x", scales[0], U8(120), "w", scales[1], I8(3), scales[2], U8(100)]
    model = _model("QLinearConv", feed, args, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    _assert_bit_exact(model, feed)


# ---- the integer kernels of ungrouped convolutions (strategy/int8_dot.py, `int8_kernel`) ---------

KERNELS = ("quads", "pairs", "centered")


@pytest.fixture(params=KERNELS)
def int8_kernel(request, monkeypatch) -> str:
    """Each integer kernel forced in turn (TF_INT8_KERNEL): every one is exact on any CPU, the
    dot-product ones written out as plain arithmetic where the CPU lacks the instruction."""
    monkeypatch.setenv("TF_INT8_KERNEL", request.param)
    return request.param


def _packed_kernel(module: tensorforge.Module) -> str:
    """The kernel the conv took, by its packed weights' name (`<node>.w.<kernel><blocks>`)."""
    (name,) = [n for n in module.constants if ".w." in n]
    kind = name.split(".w.")[1].rstrip("0123456789x")
    return "centered" if kind == "nchwc" else kind


def _extreme(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Mostly the type's two ends, some values in between."""
    info = np.iinfo(dtype)
    ends = rng.choice([info.min, info.max], shape)
    return np.where(rng.random(shape) < 0.8, ends, _random(rng, shape, dtype)).astype(dtype)


# x and w dtypes, (N, C, H, W), (K, kh, kw), strides, pads, x zero point, w zero point: channel
# counts that are not multiples of 2 or 4, zero points at the types' ends; the kernel "quads"
# takes where its centered weights fit int8 ("pairs" where they do not: w zero at the far end)
EXTREMES = {
    "c1_u8": (U8, I8, (1, 1, 6, 7), (5, 3, 3), (1, 1), (1, 1, 1, 1), U8(255), I8(0), "quads"),
    "c3_stem": (U8, I8, (1, 3, 13, 12), (6, 5, 5), (2, 2), (2, 2, 2, 2), U8(0), I8(0), "quads"),
    "c5_i8": (I8, I8, (1, 5, 7, 9), (7, 3, 3), (1, 1), (1, 1, 1, 1), I8(-128), I8(0), "quads"),
    "c6_i8_top": (I8, I8, (2, 6, 5, 6), (3, 3, 3), (1, 2), (0, 1, 2, 0), I8(127), I8(0), "quads"),
    "c7_w_zero": (U8, I8, (1, 7, 6, 6), (9, 3, 3), (1, 1), (1, 1, 1, 1), U8(3), I8(-128), "pairs"),
    "c9_u8_w": (U8, U8, (1, 9, 5, 7), (4, 3, 2), (1, 1), (1, 0, 1, 1), U8(255), U8(128), "quads"),
    "c10_u8_w0": (U8, U8, (1, 10, 5, 5), (5, 3, 3), (1, 1), (1, 1, 1, 1), U8(128), U8(0), "pairs"),
    "c18_1x1_s2": (U8, I8, (1, 18, 9, 11), (11, 1, 1), (2, 3), (0,) * 4, U8(250), I8(0), "quads"),
    "c36_dil": (I8, I8, (1, 36, 9, 9), (16, 3, 3), (1, 1), (2, 2, 2, 2), I8(-7), I8(127), "pairs"),
}


@pytest.mark.parametrize("name", list(EXTREMES))
def test_integer_kernels_equal_onnxruntime_at_extreme_values(name: str, int8_kernel: str) -> None:
    """Each kernel, bit for bit with onnxruntime and the reference: inputs and weights at their
    types' ends (0/255, -128/127), zero points at the ends, channels past the words' last
    multiple of 2 or 4 (zero in the reduction), padding that reads the zero point (the quads'
    input is not centered), a bias and an output scale that saturate some outputs."""
    x_dt, w_dt, x_shape, (k, *taps), strides, pads, x_zero, w_zero, expected = EXTREMES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    w = _extreme(rng, (k, x_shape[1], *taps), w_dt)
    bias = rng.integers(-(2**20), 2**20, k).astype(np.int32)
    y_scale = np.float32(0.02 * 0.005 * np.sqrt(w[0].size) * 128 * 128 / 100)
    args = ["x", np.float32(0.02), x_zero, w, np.float32(0.005), w_zero, y_scale, x_dt(0), bias]
    dilations = [2, 2] if "dil" in name else [1, 1]
    attrs = {"kernel_shape": taps, "strides": list(strides), "pads": list(pads),
             "dilations": dilations}  # fmt: skip
    x = _extreme(rng, x_shape, x_dt)
    model = _model("QLinearConv", {"x": x}, args, **attrs)
    out = _assert_bit_exact(model, {"x": x})
    info = np.iinfo(out.dtype)
    assert out.min() == info.min and out.max() == info.max  # saturation both ways
    module = tensorforge.compile(model)
    assert _packed_kernel(module) == (expected if int8_kernel == "quads" else int8_kernel)


@pytest.mark.parametrize(
    ("channels", "w_value", "w_zero"),
    [(66001, -128, 0), (33101, -128, 127)],  # quads (words padded to 8 of them), pairs
)
def test_integer_kernels_wrap_int32_sums_as_onnxruntime(
    channels: int, w_value: int, w_zero: int, int8_kernel: str
) -> None:
    """ConvInteger's int32 sums wrap (255 x -128 over 66001 channels is below -2**31, 255 x -255
    over 33101 too), in any kernel's order of summation, as onnxruntime's and the reference's."""
    w = np.full((3, channels, 1, 1), w_value, np.int8)
    w[1] = 127
    x = np.full((1, channels, 1, 2), 255, np.uint8)
    x[0, ::7, 0, 1] = 0
    args = ["x", w, U8(0), I8(w_zero)]
    model = _model("ConvInteger", {"x": x}, args)
    (got,) = tensorforge.compile(model).run({"x": x}).values()
    exact = np.einsum("chw,kc->khw", x[0].astype(np.int64),
                      w[:, :, 0, 0].astype(np.int64) - w_zero)  # fmt: skip
    assert (exact < -(2**31)).any()
    np.testing.assert_array_equal(got[0], exact.astype(np.int32))  # the wrapped sums
    np.testing.assert_array_equal(got, _onnxruntime(model, {"x": x})[0])


def test_quads_read_a_zero_point_given_at_run_time(int8_kernel: str) -> None:
    """The input's zero point as a graph input: the quads' padding and correction term read it
    (`zu * sum w` computed in the kernel), exact still."""
    rng = np.random.default_rng(31)
    w = _extreme(rng, (6, 3, 3, 3), I8)
    feed = {"x": _extreme(rng, (1, 3, 8, 7), U8), "xz": np.array(251, U8)}
    args = ["x", np.float32(0.02), "xz", w, np.float32(0.004), I8(0), np.float32(0.9), U8(128)]
    model = _model("QLinearConv", feed, args, kernel_shape=[3, 3], pads=[1, 2, 1, 0])
    _assert_bit_exact(model, feed)


@pytest.mark.parametrize(
    ("a_dt", "b_dt", "a_shape", "n", "a_zero", "b_zero"),
    [
        (U8, I8, (7, 13), 3, U8(255), I8(0)),  # K = 13: the last word's 3 bytes past K
        (I8, I8, (2, 3, 6), 37, I8(-128), I8(0)),  # leading dims, a panel and a tail
        (U8, U8, (5, 9), 11, U8(0), U8(128)),  # uint8 weights: centered they fit int8
        (I8, I8, (4, 5), 6, I8(127), I8(-128)),  # centered weights of 9 bits: pairs
    ],
)
def test_integer_matmul_kernels_equal_onnxruntime_at_extreme_values(
    a_dt, b_dt, a_shape, n, a_zero, b_zero, int8_kernel: str
) -> None:
    """QLinearMatMul and MatMulInteger with each kernel, bit for bit: operands at their types'
    ends, zero points at the ends, K not a multiple of 2 or 4."""
    rng = np.random.default_rng(a_shape[-1] * n)
    k = a_shape[-1]
    feed = {"a": _extreme(rng, a_shape, a_dt)}
    b = _extreme(rng, (k, n), b_dt)
    y_scale = np.float32(0.02 * 0.01 * np.sqrt(k) * 128 * 128 / 60)
    args = ["a", np.float32(0.02), a_zero, b, np.float32(0.01), b_zero, y_scale, a_dt(0)]
    _assert_bit_exact(_model("QLinearMatMul", feed, args), feed)
    _assert_bit_exact(_model("MatMulInteger", feed, ["a", b, a_zero, b_zero]), feed)


@pytest.mark.skipif(
    not __import__("llvmlite.binding").binding.get_process_triple().startswith("x86_64"),
    reason="an x86-64 -mcpu",
)
def test_a_compile_for_a_baseline_cpu_takes_pmaddwd_words(monkeypatch) -> None:
    """The compile's target decides (its features, not the host's): baseline x86-64 (SSE2)
    takes the pairs, whose 128-bit pmaddwd code runs on any x86-64 host, exact still."""
    monkeypatch.delenv("TF_INT8_KERNEL", raising=False)
    rng = np.random.default_rng(41)
    args, attrs = _conv_args("asymmetric", rng)
    x = _random(rng, CONVS["asymmetric"][2], U8)
    model = _model("QLinearConv", {"x": x}, args, **attrs)
    module = tensorforge.compile(model, "llvm -mcpu=x86-64")
    assert _packed_kernel(module) == "pairs"
    (got,) = module.run({"x": x}).values()
    graph = from_onnx(model)
    np.testing.assert_array_equal(got, run_graph(graph, {"x": x})[graph.outputs[0]])


def test_int8_kernel_follows_the_target_features(monkeypatch) -> None:
    from tensorforge.compiler.graph.strategy.int8_dot import int8_kernel

    monkeypatch.delenv("TF_INT8_KERNEL", raising=False)
    assert int8_kernel("llvm -mcpu=cascadelake -mattr=+avx512f,+avx512bw,+avx512vnni") == "quads"
    assert int8_kernel("llvm -mcpu=alderlake -mattr=+avx2,+avxvnni") == "quads"
    assert int8_kernel("llvm -mcpu=skylake-avx512 -mattr=+avx512f,+avx512bw") == "pairs"
    assert int8_kernel("llvm -mcpu=haswell -mattr=+avx2,+fma") == "pairs"
    assert int8_kernel("llvm -mtriple=aarch64-linux-gnu") == "centered"
    assert int8_kernel("opencl") == "centered"
    monkeypatch.setenv("TF_INT8_KERNEL", "pairs")
    assert int8_kernel("llvm -mcpu=cascadelake -mattr=+avx512vnni") == "pairs"
    assert int8_kernel("cuda") == "centered"  # GPU kernels never take the CPU's words
    monkeypatch.setenv("TF_INT8_KERNEL", "fast")
    with pytest.raises(LoweringError, match="TF_INT8_KERNEL must be auto or one of quads"):
        int8_kernel("llvm")


# ---- QLinearMatMul -----------------------------------------------------------------------------


def _matmul_args(a_dt: type, b, b_scale, b_zero, y_scale: float = 0.7) -> list:
    """onnxruntime's kernels want the output in a's type."""
    a_zero, y_zero = (U8(120), U8(128)) if a_dt is U8 else (I8(-7), I8(3))
    return ["a", np.float32(0.02), a_zero, b, b_scale, b_zero, np.float32(y_scale), y_zero]


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "a_dt", "per_column"),
    [
        ((1, 1600), (1600, 10), U8, False),
        ((7, 37), (37, 33), U8, True),  # rows past the 6-row tile, columns past a 32-wide panel
        ((2, 5, 13), (13, 3), I8, True),  # leading dims of a folded into rows
        ((2, 5, 13), (2, 13, 9), U8, False),  # batched b: the direct reduction
        ((3, 1, 4, 6), (2, 6, 5), I8, False),  # broadcast batch dims
    ],
)
def test_qlinear_matmul_equals_onnxruntime(a_shape, b_shape, a_dt, per_column: bool) -> None:
    rng = np.random.default_rng(a_shape[-1] * 100 + b_shape[-1])
    n = b_shape[-1]
    b_scale = rng.uniform(0.001, 0.02, n if per_column else ()).astype(np.float32)
    b_zero = np.zeros(n, I8) if per_column else I8(5)
    feed = {"a": _random(rng, a_shape, a_dt)}
    y_scale = 0.02 * b_scale.mean() * np.sqrt(a_shape[-1]) * 74 * 74 / 100  # some saturate
    args = _matmul_args(a_dt, _random(rng, b_shape, I8), b_scale, b_zero, y_scale)
    out = _assert_bit_exact(_model("QLinearMatMul", feed, args), feed)
    info = np.iinfo(out.dtype)
    assert out.min() == info.min or out.max() == info.max


def test_qlinear_matmul_requantizes_in_float32() -> None:
    """Every product of a uint8 and an int8 value, with per-column scales chosen (seed 23) so
    that one float32 product rounds onto a tie that the exact (float64) product is not."""
    rng = np.random.default_rng(23)
    feed = {"a": np.arange(256, dtype=U8).reshape(256, 1)}
    b = rng.integers(-128, 128, (1, 256)).astype(I8)
    b_scale = rng.uniform(0.001, 0.02, 256).astype(np.float32)
    args = _matmul_args(U8, b, b_scale, np.zeros(256, I8))
    args[2] = U8(0)  # a's zero point; the output's stays 128
    got = _assert_bit_exact(_model("QLinearMatMul", feed, args), feed)
    m = requant_multiplier(np.float32(0.02) * b_scale, np.float32(0.7)).astype(np.float64)
    exact = np.clip(np.rint(feed["a"].astype(np.float64) * b.astype(np.float64) * m), -128, 127)
    assert (exact + 128 != got).sum() == 1


def test_qlinear_matmul_rounds_exact_ties_to_even() -> None:
    feed = {"a": np.diag(np.arange(256)).astype(U8)}  # row i sums to i
    b = np.ones((256, 1), I8)
    args = ["a", np.float32(1.0), U8(0), b, np.float32(0.5), I8(0), np.float32(1.0), U8(0)]
    got = _assert_bit_exact(_model("QLinearMatMul", feed, args), feed).reshape(-1)
    assert got[:8].tolist() == [0, 0, 1, 2, 2, 2, 3, 4]  # 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 3.5 -> 4


def test_qlinear_matmul_with_b_computed_at_run_time() -> None:
    rng = np.random.default_rng(8)
    feed = {"a": _random(rng, (5, 19), U8), "b": _random(rng, (19, 7), I8)}
    args = _matmul_args(U8, "b", np.float32(0.01), I8(-2))
    _assert_bit_exact(_model("QLinearMatMul", feed, args), feed)


# ---- errors and the whole model ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "runtime"),
    [
        ("ungrouped", (1, 2, 4, 5, 6, 7)),  # per-channel weight scales; a direct reduction
        ("ungrouped", (1, 2, 4, 6, 7)),  # a constant weight zero point: topi's conv2d still
        ("grouped_dilated", (1, 2, 4, 5, 6, 7)),  # a nonzero weight zero point
    ],
)
def test_qlinear_conv_with_parameters_computed_at_run_time(name: str, runtime: tuple) -> None:
    """Scales and zero points as graph inputs (as in onnx's node suite), constant weights: the
    kernel reads them and computes the multiplier itself, bit-exact still."""
    rng = np.random.default_rng(13 + len(runtime))
    args, attrs = _conv_args(name, rng)
    feed = {"x": _random(rng, CONVS[name][2], CONVS[name][0])}
    for k in runtime:
        feed[f"in{k}"], args[k] = np.asarray(args[k]), f"in{k}"
    out = _assert_bit_exact(_model("QLinearConv", feed, args, **attrs), feed)
    info = np.iinfo(out.dtype)
    assert out.min() == info.min or out.max() == info.max


@pytest.mark.parametrize("b_const", [False, True])
def test_qlinear_matmul_with_parameters_computed_at_run_time(b_const: bool) -> None:
    rng = np.random.default_rng(21)
    b = _random(rng, (37, 9), I8)
    b_scale = rng.uniform(0.001, 0.02, 9).astype(np.float32)
    args = _matmul_args(U8, b if b_const else "b", b_scale, _random(rng, (9,), I8) // 8, 0.05)
    feed = {"a": _random(rng, (2, 5, 37), U8)} | ({} if b_const else {"b": b})
    for k in (1, 2, 4, 5, 6, 7):
        feed[f"in{k}"], args[k] = np.asarray(args[k]), f"in{k}"
    _assert_bit_exact(_model("QLinearMatMul", feed, args), feed)


@pytest.mark.parametrize("runtime", [False, True])
def test_qlinear_matmul_per_row_a_parameters_match_the_reference(runtime: bool) -> None:
    """Per-row scales and zero points of `a` (onnxruntime refuses them): against the numpy
    reference executor, which follows the ONNX definition."""
    rng = np.random.default_rng(22)
    args = _matmul_args(U8, _random(rng, (6, 5), I8), np.float32(0.01), I8(2), 0.03)
    args[1] = rng.uniform(0.01, 0.03, 4).astype(np.float32)
    args[2] = _random(rng, (4,), U8)
    feed = {"a": _random(rng, (3, 4, 6), U8)}
    if runtime:
        for k in (1, 2):
            feed[f"in{k}"], args[k] = args[k], f"in{k}"
    graph = from_onnx(_model("QLinearMatMul", feed, args))
    got = tensorforge.compile(graph).run(feed)
    want = run_graph(graph, feed)
    np.testing.assert_array_equal(got[graph.outputs[0]], want[graph.outputs[0]])


def test_parameters_of_a_shape_onnx_does_not_allow_are_refused_naming_op_and_node() -> None:
    rng = np.random.default_rng(0)
    args, attrs = _conv_args("pointwise", rng)
    feed = {"x": _random(rng, CONVS["pointwise"][2], I8), "ys": np.full(3, 0.37, np.float32)}
    args[6] = "ys"
    model = _model("QLinearConv", feed, args, **attrs)
    with pytest.raises(LoweringError, match=r"QLinearConv node 'node': 'ys' of shape \[3\] must"):
        tensorforge.compile(model)
    feed = {"a": _random(rng, (3, 4), U8)}
    args = _matmul_args(U8, _random(rng, (4, 2), I8), np.float32(0.1), I8(0))
    args[1] = np.full(2, 0.02, np.float32)  # neither one value nor one per row
    with pytest.raises(LoweringError, match=r"QLinearMatMul node 'node': 'c1' of shape \[2\]"):
        tensorforge.compile(_model("QLinearMatMul", feed, args))


@pytest.mark.parametrize("gain", [0.3, 3.0, 30.0])  # 30: most values saturate
def test_quantized_cnn_compiled_equals_onnxruntime(gain: float) -> None:
    model = quantized_cnn()
    module = tensorforge.compile(model)
    assert [c.label.split(" ")[0] for c in module.calls].count("QLinearConv") == 1
    for seed in range(3):
        rng = np.random.default_rng(seed)
        feed = {"x": (rng.standard_normal((1, 8, 10, 10)) * gain).astype(np.float32)}
        got = list(module.run(feed).values())
        graph = from_onnx(model)
        ref = run_graph(graph, feed)
        for g, name in zip(got, graph.outputs, strict=True):
            np.testing.assert_array_equal(g, ref[name])
        if not onnxruntime_int8_is_exact():
            continue  # its saturating int16 pair sums are no oracle on this CPU
        for optimize in (False, True):
            for g, w in zip(got, _onnxruntime(model, feed, optimize), strict=True):
                np.testing.assert_array_equal(g, w)
