"""Existing operator schedules through the LLVM back-end equal the loop-IR interpreter and numpy.

The schedules are the ones tests/compiler/schedule/test_operator_schedules.py checks with the
interpreter; here each is compiled to native code (rung: interpreter -> CPU code).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import compiler_ops as ops
import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.build import build


def _load_schedules():
    path = Path(__file__).parents[1] / "schedule" / "test_operator_schedules.py"
    spec = importlib.util.spec_from_file_location("_tf_operator_schedules", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


S = _load_schedules()


def compile_and_compare(op: ops.Op, sch, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Native result == interpreter result (close) == numpy reference (close)."""
    inputs = ops.random_inputs(op)
    func = tir.lower(sch, op.args, name="kernel")
    interp = np.zeros(op.out.shape, op.out.dtype)
    tir.interpret(func, [*inputs, interp])
    native = np.zeros(op.out.shape, op.out.dtype)
    build(func)(*inputs, native)
    np.testing.assert_allclose(native, interp, rtol=rtol, atol=atol)
    np.testing.assert_allclose(native, op.reference(*inputs), rtol=rtol, atol=atol)


CASES: list[tuple[str, Callable[[], ops.Op], Callable]] = [
    *((f"matmul-{s.__name__}", ops.matmul, s) for s in S.MATMUL_SCHEDULES),
    *((f"batch_matmul-{s.__name__}", ops.batch_matmul, s) for s in S.MATMUL_SCHEDULES),
    *((f"conv2d-{s.__name__}", ops.conv2d, s) for s in S.CONV_SCHEDULES),
    *(
        (f"depthwise-{s.__name__}", lambda: ops.depthwise_conv2d(stride=2), s)
        for s in S.CONV_SCHEDULES
    ),
    *((f"maxpool-{s.__name__}", lambda: ops.pool2d("max"), s) for s in S.POOL_SCHEDULES),
    *((f"avgpool-{s.__name__}", lambda: ops.pool2d("avg"), s) for s in S.POOL_SCHEDULES),
    *(
        (f"softmax-{s.__name__}", ops.softmax, s)
        for s in (S.naive, S.softmax_tiled, S.softmax_cached, S.softmax_inlined)
    ),
    *(
        (f"layer_norm-{s.__name__}", ops.layer_norm, s)
        for s in (S.naive, S.layer_norm_tiled, S.layer_norm_cached, S.layer_norm_inlined)
    ),
]


@pytest.mark.parametrize(("make_op", "schedule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_existing_schedules_compile_to_the_same_results(make_op, schedule) -> None:
    op = make_op()
    compile_and_compare(op, schedule(op), rtol=1e-4, atol=1e-5)


def test_int8_matmul_is_bit_exact_against_interpreter_and_numpy() -> None:
    A = te.placeholder((5, 7), "int8", name="A")
    B = te.placeholder((7, 3), "int8", name="B")
    k = te.reduce_axis((0, 7), "k")
    C = te.compute(
        (5, 3),
        lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k),
        name="C",
    )
    op = ops.Op([A, B, C], lambda a, b: a.astype("int32") @ b.astype("int32"))
    sch = S.matmul_cached(op)
    inputs = ops.random_inputs(op)
    func = tir.lower(sch, op.args, name="kernel")
    interp, native = np.zeros((5, 3), "int32"), np.zeros((5, 3), "int32")
    tir.interpret(func, [*inputs, interp])
    build(func)(*inputs, native)
    assert (native == interp).all()
    assert (native == op.reference(*inputs)).all()
