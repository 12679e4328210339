"""bfloat16, float8, float4e2m1, int4 and uint4 tensors through import, the numpy reference
executor and compiled CPU code, against independent oracles: ml_dtypes' own conversions (and
onnx's `numpy_helper.saturate_cast`, the ONNX reference's definition of `saturate`),
onnxruntime (Cast round trips and QuantizeLinear -> DequantizeLinear chains, which its CPU
kernels run for float8 and int4), and numpy computing each op of a bfloat16 model in float32,
rounded to bfloat16 after each op."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import run_graph
from tensorforge.runtime.dtypes import is_narrow

CODES = {
    "float32": T.FLOAT, "float16": T.FLOAT16, "float64": T.DOUBLE, "int32": T.INT32,
    "int8": T.INT8, "uint8": T.UINT8, "int64": T.INT64, "bool": T.BOOL,
    "bfloat16": T.BFLOAT16, "float8_e4m3fn": T.FLOAT8E4M3FN, "float8_e4m3fnuz": T.FLOAT8E4M3FNUZ,
    "float8_e5m2": T.FLOAT8E5M2, "float8_e5m2fnuz": T.FLOAT8E5M2FNUZ,
    "float4_e2m1fn": T.FLOAT4E2M1, "int4": T.INT4, "uint4": T.UINT4,
    "float8_e8m0fnu": T.FLOAT8E8M0,
}  # fmt: skip
NARROW_FLOATS = [
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float4_e2m1fn",
]  # fmt: skip
FLOAT8 = [d for d in NARROW_FLOATS if d.startswith("float8")]


def _floats(n: int = 1037, seed: int = 0) -> np.ndarray:
    """Specials (NaN, +-inf, +-0, overflow, each format's ties and denormals) and values of every
    magnitude from 1e-8 to 1e6, both signs. 1037: vector code and a scalar tail."""
    rng = np.random.default_rng(seed)
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-30, -1e-45, 448,
               464, 465, 480, 57344, 61440, 65000, 6, 7, 5.5, 0.25, 0.75, 2**-9, 2**-10,
               3 * 2**-11, 2**-17, 1.5 * 2**-16, 1 + 2**-8, 1 + 3 * 2**-8, 2**-133,
               3e38]  # fmt: skip
    mags = 10.0 ** rng.uniform(-8, 6, n)
    values = np.concatenate([special, mags * rng.choice([-1, 1], n)])
    return values[:n].astype(np.float32)


def _cast_model(
    src: str, dst: str, n: int, saturate: int | None = None, opset: int = 23
) -> onnx.ModelProto:
    kw = {} if saturate is None else {"saturate": saturate}
    node = oh.make_node("Cast", ["x"], ["y"], to=CODES[dst], **kw)
    graph = oh.make_graph(
        [node],
        "cast",
        [oh.make_tensor_value_info("x", CODES[src], (n,))],
        [oh.make_tensor_value_info("y", CODES[dst], (n,))],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal dtype and values, bit for bit for narrow results (NaN's bits included), NaN
    equal to NaN for wide floats."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if is_narrow(str(got.dtype)):  # its bits
        bits = "uint16" if got.dtype.itemsize == 2 else "uint8"
        np.testing.assert_array_equal(got.view(bits), want.view(bits))
    else:
        np.testing.assert_array_equal(got, want)


def _both(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    """The output through compiled code and through the numpy reference executor."""
    (compiled,) = tensorforge.compile(model, progress=False).run({"x": x}).values()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (reference,) = run_graph(from_onnx(model), {"x": x}).values()
    return [compiled, reference]


def _oracle_cast(x: np.ndarray, dst: str, saturate: bool) -> np.ndarray:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        if dst == "float8_e8m0fnu":  # Cast-24's definition (round_mode "up")
            return numpy_helper.to_float8e8m0(x, saturate, "up")
        if saturate and dst.startswith("float8"):
            return numpy_helper.saturate_cast(x, np.dtype(dst))
        return x.astype(dst)


@pytest.mark.parametrize("src", ["float32", "float16", "float64"])
@pytest.mark.parametrize("dst", NARROW_FLOATS)
def test_float_to_narrow_float_rounds_as_ml_dtypes(src: str, dst: str) -> None:
    with np.errstate(over="ignore"):
        x = _floats().astype(src)
    for saturate in (1, 0) if dst.startswith("float8") else (None,):
        want = _oracle_cast(x, dst, saturate is None or bool(saturate))
        for got in _both(_cast_model(src, dst, x.size, saturate), x):
            _same(got, want)


@pytest.mark.parametrize("src", NARROW_FLOATS)
@pytest.mark.parametrize("dst", ["float32", "float16", "float64", "bfloat16", "float8_e4m3fn"])
def test_every_narrow_float_value_converts_as_ml_dtypes(src: str, dst: str) -> None:
    if src == dst:
        return
    count = 1 << (16 if src == "bfloat16" else 4 if src == "float4_e2m1fn" else 8)
    bits = np.arange(count, dtype=np.uint32).astype("uint16" if src == "bfloat16" else "uint8")
    x = bits.view(src)
    with np.errstate(invalid="ignore"):
        wide = x.astype(np.float32)
        want = _oracle_cast(wide, dst, True) if dst != "float64" else x.astype(dst)
    nan = np.isnan(x.astype(np.float32))
    for got in _both(_cast_model(src, dst, x.size), x):
        assert got.dtype == want.dtype
        with np.errstate(invalid="ignore"):
            g, w = got.astype(np.float64), want.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(g), nan)
        np.testing.assert_array_equal(g[~nan], w[~nan])
        np.testing.assert_array_equal(np.signbit(g[~nan]), np.signbit(w[~nan]))


@pytest.mark.parametrize("dst", ["int4", "uint4"])
@pytest.mark.parametrize("src", ["float32", "int32", "int8", "uint8", "bool"])
def test_casts_to_int4_wrap_as_ml_dtypes(src: str, dst: str) -> None:
    rng = np.random.default_rng(1)
    if src == "float32":  # truncated, then wrapped to 4 bits; NaN and infinities give 0
        x = np.concatenate([[np.nan, np.inf, -np.inf, -0.0, 7.9, -8.9, 15.5, 16.5, -1.5],
                            rng.uniform(-1e6, 1e6, 200)]).astype(np.float32)  # fmt: skip
    elif src == "bool":
        x = rng.integers(0, 2, 37).astype(bool)
    else:
        info = np.iinfo(src)
        x = rng.integers(info.min, int(info.max) + 1, 203).astype(src)
    want = _oracle_cast(x, dst, False)
    for got in _both(_cast_model(src, dst, x.size), x):
        _same(got, want)


@pytest.mark.parametrize("src", ["int4", "uint4"])
@pytest.mark.parametrize("dst", ["float32", "float16", "int8", "int32", "uint8", "bfloat16"])
def test_int4_values_convert_as_ml_dtypes(src: str, dst: str) -> None:
    x = np.arange(16, dtype=np.uint8).view(src)
    for got in _both(_cast_model(src, dst, x.size), x):
        _same(got, x.astype(dst))


def roundtrip_model(dst: str, n: int, opset: int = 21, narrow_out: bool = False) -> onnx.ModelProto:
    """float32 `x` -> `dst` (output `q` too with `narrow_out`) -> float32 `y`."""
    nodes = [oh.make_node("Cast", ["x"], ["q"], to=CODES[dst]),
             oh.make_node("Cast", ["q"], ["y"], to=T.FLOAT)]  # fmt: skip
    outputs = [oh.make_tensor_value_info("y", T.FLOAT, (n,))]
    if narrow_out:
        outputs.insert(0, oh.make_tensor_value_info("q", CODES[dst], (n,)))
    graph = oh.make_graph(
        nodes, "roundtrip", [oh.make_tensor_value_info("x", T.FLOAT, (n,))], outputs
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@pytest.mark.parametrize("dst", ["bfloat16", *FLOAT8[:4], "int4", "uint4"])
def test_cast_round_trips_match_onnxruntime(dst: str) -> None:
    """float32 -> narrow -> float32, as onnxruntime's CPU Cast kernels compute it (onnxruntime
    cannot hand narrow arrays to numpy, so the narrow value stays inside the model)."""
    x = _floats()
    if dst in ("int4", "uint4"):
        # whole numbers, wrapped past the range: onnxruntime rounds a fraction half away from
        # zero where ONNX's reference and ml_dtypes truncate (`x.astype(int4)`), as we do
        x = np.random.default_rng(2).integers(-40, 40, 300).astype(np.float32)
    model = roundtrip_model(dst, x.size)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (got,) = tensorforge.compile(model, progress=False).run({"x": x}).values()
    np.testing.assert_array_equal(got, want)


def _qdq_model(qtype: str, shape: tuple, axis: int, block: int, scale: np.ndarray,
               zero: np.ndarray | None) -> onnx.ModelProto:  # fmt: skip
    inits = [numpy_helper.from_array(scale, "s")]
    names = ["x", "s"]
    if zero is not None:
        inits.append(numpy_helper.from_array(zero, "z"))
        names.append("z")
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    nodes = [oh.make_node("QuantizeLinear", names, ["q"], **attrs),
             oh.make_node("DequantizeLinear", ["q", *names[1:]], ["y"], **attrs)]  # fmt: skip
    if zero is None:  # the quantized type from output_dtype
        nodes[0] = oh.make_node("QuantizeLinear", names, ["q"], output_dtype=CODES[qtype], **attrs)
    graph = oh.make_graph(
        nodes,
        "qdq",
        [oh.make_tensor_value_info("x", T.FLOAT, shape)],
        [oh.make_tensor_value_info("y", T.FLOAT, shape)],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])


@pytest.mark.parametrize("qtype", ["float8_e4m3fn", "float8_e5m2", "int4", "uint4"])
@pytest.mark.parametrize("granularity", ["tensor", "axis", "block"])
def test_quantize_dequantize_chains_match_onnxruntime(qtype: str, granularity: str) -> None:
    rng = np.random.default_rng(3)
    shape = (4, 6)
    x = (rng.standard_normal(shape) * 40).astype(np.float32)
    x[0, :3] = [1e9, -1e9, 0.0]  # saturating
    axis, block = (1, 0) if granularity != "block" else (1, 3)
    sizes = {"tensor": (), "axis": (6,), "block": (4, 2)}[granularity]
    scale = rng.uniform(0.05, 0.5, sizes).astype(np.float32)
    zero = None
    if qtype in ("int4", "uint4"):
        low, high = (-8, 8) if qtype == "int4" else (0, 16)
        zero = rng.integers(low, high, sizes).astype(np.int8).astype(qtype)
    model = _qdq_model(qtype, shape, axis, block, scale, zero)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    for got in _both(model, x):
        np.testing.assert_array_equal(got, want)


def _bf16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def _bf16_block(rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """MatMul + Add + Relu + Softmax + LayerNormalization, inputs, weights and every value in
    bfloat16."""
    w = {
        "w": _bf16(rng.standard_normal((32, 48)) / 6),
        "b": _bf16(rng.standard_normal(48) / 4),
        "gamma": _bf16(1 + rng.standard_normal(48) / 8),
        "beta": _bf16(rng.standard_normal(48) / 8),
    }
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["mm"]),
        oh.make_node("Add", ["mm", "b"], ["biased"]),
        oh.make_node("Relu", ["biased"], ["act"]),
        oh.make_node("Softmax", ["act"], ["probs"], axis=-1),
        oh.make_node("LayerNormalization", ["probs", "gamma", "beta"], ["y"], axis=-1),
    ]
    graph = oh.make_graph(
        nodes,
        "bf16_block",
        [oh.make_tensor_value_info("x", T.BFLOAT16, (2, 8, 32))],
        [oh.make_tensor_value_info("y", T.BFLOAT16, (2, 8, 48))],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)]), w


def _numpy_block(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """Each op in float32 from bfloat16 operands, its result rounded to bfloat16."""
    mm = _bf16(_f32(x) @ _f32(w["w"]))
    biased = _bf16(_f32(mm) + _f32(w["b"]))
    act = _bf16(np.maximum(_f32(biased), 0))
    e = np.exp(_f32(act) - _f32(act).max(-1, keepdims=True))
    probs = _bf16(e / e.sum(-1, keepdims=True))
    p = _f32(probs)
    mean = p.mean(-1, keepdims=True)
    var = ((p - mean) ** 2).mean(-1, keepdims=True)
    return _bf16((p - mean) / np.sqrt(var + 1e-5) * _f32(w["gamma"]) + _f32(w["beta"]))


def test_bfloat16_block_matches_numpy_rounding_after_each_op() -> None:
    """Each op rounds once to bfloat16, so results agree with numpy's per-op rounding except
    where float32 summation order differs before a rounding: at most 2 bfloat16 ulps
    (relative 2**-6), and nearly every element exactly."""
    rng = np.random.default_rng(4)
    model, w = _bf16_block(rng)
    x = _bf16(rng.standard_normal((2, 8, 32)))
    want = _numpy_block(x, w)
    for got in _both(model, x):
        assert got.dtype == ml_dtypes.bfloat16
        np.testing.assert_allclose(_f32(got), _f32(want), rtol=2.0**-6, atol=2.0**-8)
        assert np.mean(_f32(got) == _f32(want)) > 0.95


def test_bfloat16_attention_is_the_float32_op_rounded_once() -> None:
    """Attention on bfloat16 computes in float32 and rounds its result once: the same as
    onnx's reference evaluator running the float32 op on the widened inputs, then rounding
    (to 1 bfloat16 ulp: float32 summation order)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(5)
    q, k, v = (_bf16(rng.standard_normal((1, 2, 5, 8))) for _ in range(3))

    def model(dtype: int) -> onnx.ModelProto:
        node = oh.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)
        info = [oh.make_tensor_value_info(n, dtype, (1, 2, 5, 8)) for n in "qkv"]
        graph = oh.make_graph([node], "attn", info, [oh.make_tensor_value_info("y", dtype, None)])
        return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 23)])

    feed = {"q": q, "k": k, "v": v}
    (wide,) = ReferenceEvaluator(model(T.FLOAT)).run(None, {n: _f32(a) for n, a in feed.items()})
    (got,) = tensorforge.compile(model(T.BFLOAT16), progress=False).run(feed).values()
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(_f32(got), _f32(_bf16(wide)), rtol=2.0**-7, atol=0)


def test_packed_int4_initializers_unpack_one_value_a_byte(tmp_path) -> None:
    """ONNX files hold int4 two a byte (first value in the low bits); odd counts, both the
    small ones parsed with the model and the large ones read from the file in place."""
    rng = np.random.default_rng(6)
    small = rng.integers(-8, 8, (3, 5)).astype(np.int8).astype(ml_dtypes.int4)
    large = rng.integers(0, 16, (101, 97)).astype(np.uint8).astype(ml_dtypes.uint4)
    nodes = [oh.make_node("Cast", ["a"], ["ya"], to=T.INT8),
             oh.make_node("Cast", ["b"], ["yb"], to=T.INT32)]  # fmt: skip
    graph = oh.make_graph(
        nodes,
        "int4",
        [],
        [
            oh.make_tensor_value_info("ya", T.INT8, None),
            oh.make_tensor_value_info("yb", T.INT32, None),
        ],
        [numpy_helper.from_array(small, "a"), numpy_helper.from_array(large, "b")],
    )
    path = tmp_path / "int4.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)]), path)
    out = tensorforge.compile(str(path), progress=False).run({})
    np.testing.assert_array_equal(out["ya"], small.astype(np.int8))
    np.testing.assert_array_equal(out["yb"], large.astype(np.int32))


def test_bfloat16_data_movement_comparisons_and_constants() -> None:
    """Ops that move, pick or compare bfloat16 values keep their bits exactly (Transpose,
    Concat, Gather, Slice, Where, Max, Equal, ArgMax, ConstantOfShape, a Constant), checked
    against numpy on the same values."""
    rng = np.random.default_rng(7)
    x = _bf16(rng.standard_normal((3, 4)) * 100)
    fill = numpy_helper.from_array(_bf16(np.array([2.71875])), "fill")
    const = numpy_helper.from_array(_bf16(rng.standard_normal((4, 3))), "k")
    nodes = [
        oh.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        oh.make_node("Constant", [], ["k"], value=const),
        oh.make_node("Concat", ["t", "k"], ["cat"], axis=1),
        oh.make_node("Constant", [], ["idx"], value=numpy_helper.from_array(np.array([2, 0]))),
        oh.make_node("Gather", ["cat", "idx"], ["g"], axis=1),
        oh.make_node("Max", ["t", "k"], ["mx"]),
        oh.make_node("Equal", ["mx", "t"], ["eq"]),
        oh.make_node("Where", ["eq", "t", "k"], ["w"]),
        oh.make_node("ArgMax", ["x"], ["am"], axis=1),
        oh.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([2, 2]))),
        oh.make_node("ConstantOfShape", ["shape"], ["full"], value=fill),
    ]
    outs = [("g", T.BFLOAT16), ("w", T.BFLOAT16), ("eq", T.BOOL), ("am", T.INT64),
            ("full", T.BFLOAT16)]  # fmt: skip
    graph = oh.make_graph(
        nodes,
        "moves",
        [oh.make_tensor_value_info("x", T.BFLOAT16, (3, 4))],
        [oh.make_tensor_value_info(n, t, None) for n, t in outs],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    k = numpy_helper.to_array(const)
    t = x.T
    eq = np.maximum(_f32(t), _f32(k)) == _f32(t)
    want = {
        "g": np.concatenate([t, k], axis=1)[:, [2, 0]],
        "w": np.where(eq, t, k),
        "eq": eq,
        "am": _f32(x).argmax(1)[:, None],  # (keepdims)
        "full": np.full((2, 2), numpy_helper.to_array(fill)[0]),
    }
    compiled = tensorforge.compile(model, progress=False).run({"x": x})
    reference = run_graph(from_onnx(model), {"x": x})
    for got in (compiled, reference):
        for name, value in want.items():
            _same(np.asarray(got[name]), np.asarray(value))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_float8e8m0_casts_as_onnx_defines_them(round_mode: str, saturate: int) -> None:
    """float32 -> float8e8m0 against onnx's own `numpy_helper.to_float8e8m0` (Cast-24's
    definition) in each rounding mode, and every float8e8m0 value back as ml_dtypes converts."""
    x = _floats()
    node = oh.make_node("Cast", ["x"], ["y"], to=T.FLOAT8E8M0, saturate=saturate,
                        round_mode=round_mode)  # fmt: skip
    graph = oh.make_graph(
        [node],
        "e8m0",
        [oh.make_tensor_value_info("x", T.FLOAT, (x.size,))],
        [oh.make_tensor_value_info("y", T.FLOAT8E8M0, (x.size,))],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)])
    want = numpy_helper.to_float8e8m0(x, bool(saturate), round_mode)
    for got in _both(model, x):
        _same(got, want)
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    back = _both(_cast_model("float8_e8m0fnu", "float32", 256, opset=24), codes)
    for got in back:
        np.testing.assert_array_equal(got, codes.astype(np.float32))
