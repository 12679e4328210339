"""Tensor expressions: dtype inference, constructors, compute validation, reducers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.compiler import te, tir
from tensorforge.compiler.build import build


def test_binary_ops_promote_dtypes_like_numpy() -> None:
    a8, b8 = te.var("a", "int8"), te.var("b", "uint8")
    assert (a8 + b8).dtype == "int16"
    assert (a8 + 1).dtype == "int8"  # a Python int takes the expression's dtype
    assert (a8 * 1.5).dtype == "float32"
    assert (te.var("h", "float16") + te.var("f", "float32")).dtype == "float32"
    assert (te.var("i") < 3).dtype == "bool"


def test_bitwise_operators_type_like_numpy_and_print_like_python() -> None:
    a8, u8, i = te.var("a", "int8"), te.var("u", "uint8"), te.var("i")
    assert (a8 & u8).dtype == "int16"  # promoted as numpy
    assert (a8 | 1).dtype == (a8 ^ 1).dtype == (a8 << 1).dtype == (a8 >> 1).dtype == "int8"
    assert (3 & i).dtype == (1 << i).dtype == "int32"  # reflected, a Python int on the left
    assert repr(~u8) == "u ^ uint8(255)"  # all ones: the unsigned maximum
    assert repr(~i) == "i ^ -1"
    assert repr((i | 1) ^ i & 3) == "(i | 1) ^ i & 3"  # & binds tighter than ^, ^ than |
    assert repr((i & 7) == 1) == "i & 7 == 1"  # and tighter than a comparison, as in Python
    assert repr(i << i + 1) == "i << i + 1" and repr((i << 2) + 1) == "(i << 2) + 1"
    k = te.compute((4,), lambda j: j, name="K").op.axis[0]
    assert repr(k & 1) == "j & 1" and repr(~k) == "j ^ -1"  # an IterVar stands for its variable


def test_bitwise_operators_of_two_bools_are_logical() -> None:
    p, q = te.var("p", "bool"), te.var("q", "bool")
    assert [repr(e) for e in (p & q, p | q, p ^ q, ~p)] == ["p && q", "p || q", "p != q", "!p"]
    assert (p & 1).dtype == "int32"  # a bool with an integer: numpy promotes


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda i, f: i & f,
            r"operands of & \(bitwise and\) must be integers or bools, not 'float32'",
        ),
        (lambda i, f: f | 1, r"operands of \| \(bitwise or\) must be integers or bools"),
        (lambda i, f: i ^ 1.5, r"operands of \^ \(bitwise xor\) must be integers or bools"),
        (lambda i, f: i << f, r"operands of << \(left shift\) must be integers or bools"),
        (lambda i, f: f >> 2, r"operands of >> \(right shift\) must be integers or bools"),
        (
            lambda i, f: ~f,
            r"operand of ~ \(bitwise not\) must be an integer or bool, not 'float32'",
        ),
        (
            lambda i, f: (i > 0) << (i > 1),
            r"operands of << \(left shift\) must be integers, not two",
        ),
        (
            lambda i, f: te.var("s", "int64") & te.var("u", "uint64"),
            r"must have a common integer dtype, not 'int64' and 'uint64' \(numpy's is 'float64'\)",
        ),
    ],
)
def test_bitwise_operators_refuse_floats_naming_the_operator(build, message) -> None:
    with pytest.raises(TypeError, match=message):
        build(te.var("i"), te.var("f", "float32"))


def test_casts_select_and_intrinsics_have_expected_dtypes() -> None:
    x = te.var("x", "float32")
    assert te.cast(x, "int8").dtype == "int8"
    assert x.astype("float32") is x
    assert te.select(x > 0, x, 0).dtype == "float32"
    for fn in (te.exp, te.log, te.sqrt, te.tanh, te.erf, te.sigmoid, te.rsqrt):
        assert fn(x).dtype == "float32"
    assert te.power(x, 2.0).dtype == "float32"
    assert te.exp(te.var("d", "float64")).dtype == "float64"


def test_math_intrinsics_reject_integers() -> None:
    with pytest.raises(TypeError, match="exp needs float operands, not 'int32'"):
        te.exp(te.var("i"))


def test_unknown_dtype_is_rejected_with_the_list() -> None:
    with pytest.raises(TypeError, match="dtype must be one of .* not 'int4'"):
        te.placeholder((2,), "int4")


def test_symbolic_expressions_have_no_truth_value() -> None:
    with pytest.raises(TypeError, match="no truth value"):
        bool(te.var("i") < 2)


def test_compute_names_axes_after_the_lambda_parameters() -> None:
    A = te.placeholder((3, 4), name="A")
    B = te.compute((3, 4), lambda row, col: A[row, col] * 2.0, name="B")
    assert [iv.name for iv in B.op.axis] == ["row", "col"]
    assert B.op.input_tensors == [A]
    assert repr(B.op.body) == "A[row, col]*2.0f"


def test_compute_rejects_nested_reductions_and_stray_reduce_axes() -> None:
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis((0, 4), "k")
    with pytest.raises(ValueError, match="only be the top-level expression"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1.0, name="bad")
    with pytest.raises(ValueError, match="variable 'k' is neither an axis"):
        te.compute((4,), lambda i: A[i, k], name="bad")
    with pytest.raises(ValueError, match="fcompute must take 2 index argument"):
        te.compute((4, 4), lambda i: A[i, i])


def test_tensor_indexing_checks_rank_and_index_dtype() -> None:
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(IndexError, match="'A' has 2 dimension"):
        A[1]
    with pytest.raises(TypeError, match="index of 'A' must be an integer"):
        A[te.var("f", "float32"), 0]


def test_shapes_must_be_static_positive_ints() -> None:
    with pytest.raises(ValueError, match="symbolic shapes are not supported yet"):
        te.placeholder((te.var("n"), 4))


def test_two_argument_max_and_min_are_elementwise() -> None:
    x, y = te.var("x", "float32"), te.var("y", "float32")
    assert repr(te.max(x, y)) == "max(x, y)"
    assert repr(te.min(x, 0.0)) == "min(x, 0.0f)"


def test_max_and_min_of_bools_are_or_and_and() -> None:
    p, q = te.var("p", "bool"), te.var("q", "bool")
    assert repr(te.max(p, q)) == "p || q"
    assert repr(te.min(p, True)) == "p && True"
    assert te.max(te.var("u", "uint32"), 1).dtype == "uint32"


@pytest.mark.parametrize("reducer", ["max", "min"])
def test_bool_max_and_min_reductions_are_any_and_all(reducer: str) -> None:
    A = te.placeholder((5, 3), "bool", name="A")
    k = te.reduce_axis((0, 3), "k")
    B = te.compute((5,), lambda i: getattr(te, reducer)(A[i, k], axis=k), name="B")
    f = tir.lower(te.create_schedule(B.op), [A, B])
    a = np.array([[0, 0, 0], [1, 1, 1], [1, 0, 0], [0, 1, 1], [0, 0, 1]], bool)
    native, interp = np.zeros(5, bool), np.zeros(5, bool)
    build(f)(a, native)
    tir.interpret(f, [a, interp])
    want = getattr(np, reducer)(a, axis=1)
    np.testing.assert_array_equal(native, want)
    np.testing.assert_array_equal(interp, want)


def test_user_defined_reducer_runs_through_the_interpreter() -> None:
    prod = te.comm_reducer(lambda a, b: a * b, lambda t: te.const(1, t), name="prod")
    A = te.placeholder((3, 4), name="A")
    k = te.reduce_axis((0, 4), "k")
    B = te.compute((3,), lambda i: prod(A[i, k], axis=k, where=A[i, k] > 0), name="B")
    assert repr(B.op.body) == "prod(A[i, k], axis=[k], where=A[i, k] > 0.0f)"
    f = tir.lower(te.create_schedule(B.op), [A, B])
    a = np.array([[1, -2, 3, 4], [0.5, 2, -1, 2], [-1, -1, -1, -1]], "float32")
    b = np.zeros(3, "float32")
    tir.interpret(f, [a, b])
    np.testing.assert_allclose(b, [12.0, 2.0, 1.0])


def test_reducers_require_reduce_axes() -> None:
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i], name="B")
    with pytest.raises(ValueError, match="axis 'i' must be a reduce_axis"):
        te.sum(A[0], axis=B.op.axis[0])


def test_limits_and_identities() -> None:
    assert te.max_value("int8").value == 127
    assert te.min_value("uint8").value == 0
    assert te.const(300, "int8").value == 44  # constants wrap like the hardware
    with pytest.raises(ValueError, match="must be integral"):
        te.const(1.5, "int32")


def test_structural_equality_distinguishes_variables() -> None:
    i, j = te.var("i"), te.var("i")
    assert te.structural_equal(i * 2 + 1, i * 2 + 1)
    assert not te.structural_equal(i * 2 + 1, j * 2 + 1)
    assert bool(i == i) and not bool(i == j)  # identity, as in TVM


@settings(max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data())
def test_unravel_is_numpys_row_major_index(shape, data) -> None:
    flat = data.draw(st.integers(0, int(np.prod(shape)) - 1))
    assert te.unravel(flat, shape) == tuple(int(i) for i in np.unravel_index(flat, shape))
