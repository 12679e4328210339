"""Multi-output computes (one loop nest, several tensors) and tuple reducers such as argmax."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.schedule import ScheduleError


def _argmax_reducer() -> te.Reducer:
    def combine(x, y):
        keep = x[1] >= y[1]  # (index, value); ties keep the accumulator: the first index
        return te.select(keep, x[0], y[0]), te.select(keep, x[1], y[1])

    def identity(t_index, t_value):
        return te.const(-1, t_index), te.min_value(t_value)

    return te.comm_reducer(combine, identity, name="argmax")


def _run(func: tir.PrimFunc, arrays: list[np.ndarray]) -> None:
    tir.interpret(func, arrays)


def test_elementwise_multi_output_is_one_loop_nest() -> None:
    A = te.placeholder((4, 6), name="A")
    S, D = te.compute((4, 6), lambda i, j: (A[i, j] + 1.0, A[i, j] * A[i, j]), name="T")
    assert (S.name, D.name) == ("T", "T.v1")
    assert S.op is D.op and D.value_index == 1
    s = te.create_schedule([S, D])
    io, ii = s[S].split(S.op.axis[0], factor=2)
    f = tir.lower(s, [A, S, D])
    assert repr(f).count("for ") == 3  # io, ii, j: both outputs in the same loops
    a = np.random.default_rng(0).uniform(-1, 1, (4, 6)).astype("float32")
    s_out, d_out = np.zeros_like(a), np.zeros_like(a)
    _run(f, [a, s_out, d_out])
    np.testing.assert_allclose(s_out, a + 1, rtol=1e-6)
    np.testing.assert_allclose(d_out, a * a, rtol=1e-6)


def test_multi_output_outputs_may_have_different_dtypes_and_be_consumed() -> None:
    A = te.placeholder((8,), "int32", name="A")
    Q, R = te.compute((8,), lambda i: (A[i] // 3, (A[i] % 3).astype("int8")), name="QR")
    Y = te.compute((8,), lambda i: Q[i] * 3 + R[i].astype("int32"), name="Y")
    s = te.create_schedule(Y.op)
    s[Q].compute_at(s[Y], Y.op.axis[0])
    f = tir.lower(s, [A, Y])
    a = np.arange(-4, 4, dtype="int32") * 7
    y = np.zeros(8, "int32")
    _run(f, [a, y])
    np.testing.assert_array_equal(y, a)  # q*3 + r == a for floor division


@pytest.mark.parametrize("schedule", ["naive", "split_reduce"])
def test_argmax_tuple_reducer_equals_numpy(schedule: str) -> None:
    n, m = 5, 9
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    argmax = _argmax_reducer()
    idx, val = te.compute((n,), lambda i: argmax((k, A[i, k]), axis=k), name="Arg")
    assert idx.dtype == "int32" and val.dtype == "float32"
    s = te.create_schedule(idx.op)
    if schedule == "split_reduce":
        ko, ki = s[idx].split(k, factor=4)  # 9 = 4 + 4 + 1: a guarded reduction
        s[idx].reorder(ko, idx.op.axis[0], ki)
    f = tir.lower(s, [A, idx, val])
    a = np.random.default_rng(1).uniform(-1, 1, (n, m)).astype("float32")
    a[2, 3] = a[2, 7] = 5.0  # a tie: the first index wins
    got_idx, got_val = np.zeros(n, "int32"), np.zeros(n, "float32")
    _run(f, [a, got_idx, got_val])
    np.testing.assert_array_equal(got_idx, a.argmax(axis=1))
    np.testing.assert_array_equal(got_val, a.max(axis=1))


def test_tuple_reducer_misuse_is_rejected() -> None:
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis((0, 4), "k")
    argmax = _argmax_reducer()
    with pytest.raises(ValueError, match="needs one output per component"):
        te.compute((4,), lambda i: argmax((k, A[i, k]), axis=k)[0], name="Bad")
    with pytest.raises(ValueError, match="components of one tuple reduction, in order"):
        te.compute((4,), lambda i: tuple(reversed(argmax((k, A[i, k]), axis=k))), name="Bad")
    bad = te.comm_reducer(lambda x, y: x[0], lambda a, b: (0, 0), name="bad")
    with pytest.raises(ValueError, match="fcombine must return a tuple of 2 values"):
        bad((k, A[0, k]), axis=k)


def test_unsupported_primitives_on_multi_output_raise_schedule_error() -> None:
    A = te.placeholder((4,), name="A")
    S, D = te.compute((4,), lambda i: (A[i] + 1.0, A[i] * 2.0), name="T")
    s = te.create_schedule([S, D])
    with pytest.raises(ScheduleError, match="cache_write: stage 'T' has several outputs"):
        s.cache_write(S, "local")
