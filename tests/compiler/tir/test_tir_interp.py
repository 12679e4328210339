"""The reference interpreter: dtype semantics, bounds checking, argument handling."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te, tir


def _run(build, inputs, out_shape, out_dtype, **kwargs):
    tensors = build()
    f = tir.lower(te.create_schedule(tensors[-1].op), tensors, **kwargs)
    out = np.zeros(out_shape, out_dtype)
    tir.interpret(f, [*inputs, out])
    return out


def test_int8_arithmetic_wraps_like_the_hardware() -> None:
    def build():
        A = te.placeholder((4,), "int8", name="A")
        return [A, te.compute((4,), lambda i: A[i] * 2 + 1, name="B")]

    a = np.array([1, 64, -64, 127], "int8")
    with np.errstate(over="ignore"):
        expected = (a * np.int8(2) + np.int8(1)).astype("int8")
    np.testing.assert_array_equal(_run(build, [a], (4,), "int8"), expected)


def test_casts_truncate_toward_zero_and_round_floats_on_store() -> None:
    def build():
        A = te.placeholder((4,), "float32", name="A")
        return [A, te.compute((4,), lambda i: te.cast(A[i] * 3.0, "int16"), name="B")]

    a = np.array([0.9, -0.9, 1.5, -2.5], "float32")
    np.testing.assert_array_equal(_run(build, [a], (4,), "int16"), (a * 3).astype("int16"))

    def build_div():
        A = te.placeholder((3,), "float32", name="A")
        return [A, te.compute((3,), lambda i: A[i] / 3.0, name="B")]

    a = np.array([1, 2, 10], "float32")
    np.testing.assert_array_equal(_run(build_div, [a], (3,), "float32"), a / np.float32(3))


def test_if_then_else_guards_the_read_but_select_does_not() -> None:
    def build(fn):
        def make():
            A = te.placeholder((4,), name="A")
            return [A, te.compute((5,), lambda i: fn(i >= 1, A[i - 1], 0.0), name="B")]

        return make

    a = np.arange(4, dtype="float32")
    expected = [0.0, 0.0, 1.0, 2.0, 3.0]
    np.testing.assert_array_equal(_run(build(te.if_then_else), [a], (5,), "float32"), expected)
    # loop_partition would peel i = 0, where the select is known false, and drop the read
    uncut = [p for p in tir.DEFAULT_PIPELINE if p is not tir.loop_partition]
    with pytest.raises(tir.InterpretError, match=r"A\[-1\] is out of bounds \(size 4\)"):
        _run(build(te.select), [a], (5,), "float32", passes=uncut)


def test_padding_with_if_then_else_runs() -> None:
    def build():
        A = te.placeholder((4,), name="A")
        return [
            A,
            te.compute(
                (6,), lambda i: te.if_then_else(te.all_of(i >= 1, i < 5), A[i - 1], -1.0), name="B"
            ),
        ]

    a = np.arange(4, dtype="float32")
    np.testing.assert_array_equal(_run(build, [a], (6,), "float32"), [-1, 0, 1, 2, 3, -1])


def test_math_intrinsics_match_numpy() -> None:
    def build():
        A = te.placeholder((5,), name="A")
        return [
            A,
            te.compute(
                (5,),
                lambda i: (
                    te.tanh(A[i])
                    + te.erf(A[i]) * te.exp(A[i])
                    + te.sqrt(te.abs(A[i]))
                    + te.power(A[i], 2.0)
                ),
                name="B",
            ),
        ]

    from math import erf

    a = np.array([-2, -0.5, 0, 0.5, 2], "float32")
    x = a.astype("float64")
    expected = np.tanh(x) + np.array([erf(v) for v in x]) * np.exp(x) + np.sqrt(abs(x)) + x**2
    np.testing.assert_allclose(_run(build, [a], (5,), "float32"), expected, rtol=1e-6)


def test_arguments_may_be_given_by_name_and_are_checked() -> None:
    A = te.placeholder((2,), name="A")
    B = te.compute((2,), lambda i: A[i] + 1.0, name="B")
    f = tir.lower(te.create_schedule(B.op), [A, B])
    b = np.zeros(2, "float32")
    tir.interpret(f, {"A": np.ones(2, "float32"), "B": b})
    assert b.tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match=r"missing \['B'\]"):
        tir.interpret(f, {"A": np.ones(2, "float32")})
    with pytest.raises(ValueError, match="expected 2 arrays, got 1"):
        tir.interpret(f, [b])


def test_unknown_extern_calls_are_reported_and_registered_ones_run() -> None:
    A = te.placeholder((3,), "int32", name="A")
    B = te.compute((3,), lambda i: te.call_extern("triple", A[i]), name="B")
    f = tir.lower(te.create_schedule(B.op), [A, B])
    a, b = np.array([1, 2, 3], "int32"), np.zeros(3, "int32")
    with pytest.raises(tir.InterpretError, match="no interpreter implementation of extern 'tri"):
        tir.interpret(f, [a, b])
    tir.register_extern("triple", lambda x: 3 * x)
    tir.interpret(f, [a, b])
    assert b.tolist() == [3, 6, 9]


@pytest.mark.parametrize("gpu", [False, True], ids=["loops", "gpu_threads"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint64"])
def test_bitwise_operators_and_shifts_at_every_amount_are_numpys(dtype: str, gpu: bool) -> None:
    """& | ^ ~ on negative values, << >> by amounts past the width or negative (read as
    unsigned: 0, or -1 for >> of a negative value), in the interpreter with no back-end, as
    plain loops and as a GPU schedule (blocks and threads: interp_gpu)."""
    from compiler_ops import bitwise_inputs, bitwise_ops

    from tensorforge.compiler.topi.gpu import GPUScheduleConfig, schedule_auto

    inputs, outs, reference = bitwise_ops(dtype, 29)
    if gpu:
        sched = schedule_auto(outs, GPUScheduleConfig(threads=8))
    else:
        sched = te.create_schedule([t.op for t in outs])
    f = tir.lower(sched, [*inputs, *outs])
    arrays = bitwise_inputs(dtype, 29, seed=3)
    got = [np.zeros(29, dtype) for _ in outs]
    tir.interpret(f, [*arrays, *got])
    for t, g, want in zip(outs, got, reference(*arrays), strict=True):
        np.testing.assert_array_equal(g, want, err_msg=t.name)
