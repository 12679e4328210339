"""Integer ONNX arithmetic compiled for the CPU and for OpenCL (PoCL) equals onnxruntime bit for
bit: unsigned types over their whole range (wraparound, division past the signed range), MatMul
of 32/64-bit integers (summed in their own type), Pow of an integer base (raised in float64
and truncated, as onnxruntime's std::pow), and the bitwise ops and BitShift (every amount)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import IR_VERSION

BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")


def _model(nodes: list[tuple[str, str]], x: np.ndarray, y: np.ndarray) -> onnx.ModelProto:
    """One node per (op, output name), each of inputs x and y."""
    elem = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "y"], [out], name=out) for op, out in nodes],
        "integer_ops",
        [
            helper.make_tensor_value_info("x", elem(x.dtype), x.shape),
            helper.make_tensor_value_info("y", elem(y.dtype), y.shape),
        ],
        [helper.make_tensor_value_info(out, elem(x.dtype), None) for _, out in nodes],
    )
    opset = [helper.make_opsetid("", 15)]
    model = helper.make_model(graph, opset_imports=opset, ir_version=IR_VERSION)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _assert_all_equal_onnxruntime(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feed)
    for target in ("llvm", "opencl"):
        got = list(tensorforge.compile(model, target=target).run(feed).values())
        for g, w, out in zip(got, want, model.graph.output, strict=True):
            assert g.dtype == w.dtype, f"{target} {out.name}"
            np.testing.assert_array_equal(g, w, err_msg=f"{target} {out.name}")


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_unsigned_arithmetic_wraps_and_divides_like_onnxruntime(dtype: type) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(info.bits)
    x = rng.integers(0, info.max, (3, 41), dtype=dtype, endpoint=True)
    y = rng.integers(1, info.max, (3, 41), dtype=dtype, endpoint=True)
    x[0, :4], y[0, :4] = [0, 1, info.max, info.max // 2 + 1], [info.max, 3, 1, info.max]
    ops = BINARY[:4] if dtype is np.uint16 else BINARY  # onnxruntime has no uint16 Max/Min
    model = _model([(op, op.lower()) for op in ops], x, y)
    _assert_all_equal_onnxruntime(model, {"x": x, "y": y})


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.int64])
def test_integer_matmul_wraps_in_its_own_type_like_onnxruntime(dtype: type) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(info.bits)
    x = rng.integers(info.min, info.max, (5, 19), dtype=dtype, endpoint=True)
    y = rng.integers(info.min, info.max, (19, 7), dtype=dtype, endpoint=True)
    _assert_all_equal_onnxruntime(_model([("MatMul", "matmul")], x, y), {"x": x, "y": y})


@pytest.mark.parametrize(
    ("base", "exponent"),
    [(np.int32, np.int32), (np.int64, np.int64), (np.int32, np.float32), (np.int64, np.int32)],
)
def test_pow_of_an_integer_base_truncates_like_onnxruntime(base: type, exponent: type) -> None:
    x = np.array([2, -3, 7, 0, 1, -2, 10, 5, 3], base)
    y = np.array([10, 3, 0, 0, 30, 5, 9, 2, 19], exponent)
    if np.dtype(exponent).kind == "f":  # fractional powers truncate toward zero
        y = np.array([0.5, 3, -1, 2, 30, 3, 8.5, 2.5, 19], exponent)
    _assert_all_equal_onnxruntime(_model([("Pow", "pow")], x, y), {"x": x, "y": y})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_reduce_mean_truncates_in_its_own_type_like_onnxruntime(dtype: type) -> None:
    """An integer ReduceMean is the integer sum divided by the count in the input's type (the
    mean was a float64 division whose result did not match the int output buffer)."""
    x = np.random.default_rng(5).integers(-50, 50, (3, 4, 5)).astype(dtype)
    node = helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=0)
    graph = helper.make_graph(
        [node],
        "integer_mean",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("mean", helper.np_dtype_to_tensor_dtype(x.dtype), None)],
        [onnx.numpy_helper.from_array(np.array([0, -1], np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    got = tensorforge.compile(model).run({"x": x})["mean"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


_TRAPS = """
import json, sys
import numpy as np
from onnx import helper
import tensorforge
from tensorforge.compiler.frontend.onnx_builders import IR_VERSION
dtype, a, b = np.dtype(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
elem = helper.np_dtype_to_tensor_dtype(dtype)
nodes = [helper.make_node("Div", ["a", "b"], ["div"]),
         helper.make_node("Mod", ["a", "b"], ["mod"]),
         helper.make_node("Mod", ["a", "b"], ["fmod"], fmod=1)]
graph = helper.make_graph(
    nodes, "traps",
    [helper.make_tensor_value_info(n, elem, (len(a),)) for n in "ab"],
    [helper.make_tensor_value_info(n, elem, (len(a),)) for n in ("div", "mod", "fmod")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
out = tensorforge.compile(model).run({"a": np.array(a, dtype), "b": np.array(b, dtype)})
print(json.dumps({k: v.tolist() for k, v in out.items()}))
"""


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint32])
def test_integer_division_by_zero_or_minus_one_does_not_trap(dtype: type) -> None:
    """Run-time integer divisors of 0 (and, signed, the minimum over -1) made x86's div raise
    SIGFPE and kill the process (onnxruntime's too): they give numpy's 0 quotient and remainder
    by 0 and the wrapped negation by -1. In a child process, so a trap is a failure."""
    import json
    import subprocess
    import sys

    info = np.iinfo(dtype)
    signed = info.min < 0
    a = [info.min, info.min, 7, -7, 0, 5, info.max] if signed else [info.max, 7, 0, 5]
    b = [-1, 0, 0, -2, 0, 3, -1] if signed else [0, 0, 0, 3]
    run = subprocess.run(
        [sys.executable, "-c", _TRAPS, np.dtype(dtype).name, json.dumps(a), json.dumps(b)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])

    def wrap(v: int) -> int:
        return (v - info.min) % (info.max - info.min + 1) + info.min

    def trunc_div(x: int, y: int) -> int:
        return 0 if y == 0 else wrap(abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1))

    assert got["div"] == [trunc_div(x, y) for x, y in zip(a, b, strict=True)]
    assert got["mod"] == [0 if y == 0 else x % y for x, y in zip(a, b, strict=True)]
    assert got["fmod"] == [
        0 if y == 0 else wrap(x - trunc_div(x, y) * y) for x, y in zip(a, b, strict=True)
    ]


INTEGERS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)


def _full_range(dtype: type, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Values over the whole range of `dtype`, its edges (0, 1, -1, the minimum, the maximum)
    first."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(seed).integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    edges = [0, 1, info.max, info.min] + ([-1] if info.min else [info.max >> 1])
    x.reshape(-1)[: len(edges)] = np.array(edges, dtype)
    return x


def _bitwise_model(
    nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], consts: dict[str, np.ndarray]
) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        nodes,
        "bitwise",
        [helper.make_tensor_value_info(n, elem(v.dtype), v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info(n, elem(next(iter(inputs.values())).dtype), None)
         for n in outputs],
        [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()],
    )  # fmt: skip
    opset = [helper.make_opsetid("", 18)]
    model = helper.make_model(graph, opset_imports=opset, ir_version=IR_VERSION)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda t: np.dtype(t).name)
def test_bitwise_ops_fuse_into_one_kernel_and_match_onnxruntime(dtype: type) -> None:
    """BitwiseAnd/Or/Xor/Not of negative values (signed), broadcast operands ((4, 17) and a
    (17,) constant against (3, 4, 17)) and the neighbouring Add and Mul: one fused kernel."""
    x, y = _full_range(dtype, (3, 4, 17), 1), _full_range(dtype, (4, 17), 2)
    mask = _full_range(dtype, (17,), 3)
    make = helper.make_node
    nodes = [
        make("BitwiseAnd", ["x", "y"], ["and"]),
        make("BitwiseOr", ["and", "mask"], ["or"]),
        make("Mul", ["or", "x"], ["mul"]),
        make("BitwiseXor", ["mul", "y"], ["xor"]),
        make("BitwiseNot", ["xor"], ["not"]),
        make("Add", ["not", "x"], ["out"]),
    ]
    model = _bitwise_model(nodes, {"x": x, "y": y}, ["out"], {"mask": mask})
    _assert_all_equal_onnxruntime(model, {"x": x, "y": y})
    for target in ("llvm", "opencl"):
        assert len(tensorforge.compile(model, target=target).calls) == 1, target


@pytest.mark.parametrize("dtype", INTEGERS[4:], ids=lambda t: np.dtype(t).name)
def test_bitshift_matches_onnxruntime_at_every_amount(dtype: type) -> None:
    """BitShift (opset 11's unsigned types) by 0 to twice the width and the type's maximum: an
    amount of the width or more gives 0, as onnxruntime (and numpy) give, where C and LLVM
    are undefined; broadcast amounts, a constant amount past the width, and a shift fused
    with the BitwiseAnd after it."""
    bits = np.iinfo(dtype).bits
    amounts = np.array([*range(2 * bits + 2), np.iinfo(dtype).max], dtype)
    x = _full_range(dtype, (3, amounts.size), bits)
    make = helper.make_node
    nodes = [
        make("BitShift", ["x", "s"], ["left"], direction="LEFT"),
        make("BitShift", ["x", "s"], ["right"], direction="RIGHT"),
        make("BitShift", ["x", "past"], ["gone"], direction="LEFT"),
        make("BitShift", ["x", "one"], ["half"], direction="RIGHT"),
        make("BitwiseAnd", ["half", "x"], ["masked"]),
    ]
    consts = {"past": np.array(bits, dtype), "one": np.array([1], dtype)}
    model = _bitwise_model(nodes, {"x": x, "s": amounts}, ["left", "right", "gone", "masked"],
                           consts)  # fmt: skip
    _assert_all_equal_onnxruntime(model, {"x": x, "s": amounts})
