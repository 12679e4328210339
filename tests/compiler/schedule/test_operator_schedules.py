"""Operators under several schedules equal numpy (loop-IR interpreter vs numpy reference).

Each operator runs under a naive schedule, a tiled + reordered one, one with cache_read /
cache_write + compute_at, and one with inlined producers (where the operator has producers).
"""

from __future__ import annotations

from collections.abc import Callable

import compiler_ops as ops
import pytest

from tensorforge.compiler import te
from tensorforge.compiler.schedule import Schedule


def naive(op: ops.Op) -> Schedule:
    return te.create_schedule(op.out.op)


# ---- matmul / batched matmul --------------------------------------------------------------------


def matmul_tiled(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    C = op.out
    i, j = C.op.axis[-2:]
    (k,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 3)  # neither divides its extent (6, 7): guards
    ko, ki = s[C].split(k, factor=2)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    return s


def matmul_cached(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    A, B, C = op.args
    AA = s.cache_read(A, "local", [C])
    BB = s.cache_read(B, "local", [C])
    CC = s.cache_write(C, "local")
    i, j = C.op.axis[-2:]
    io, jo, ii, ji = s[C].tile(i, j, 2, 4)
    s[CC].compute_at(s[C], jo)
    (k,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(k, factor=2)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    return s


def matmul_inlined(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    A, B, C = op.args
    AA = s.cache_read(A, "local", [C])
    s[AA].compute_inline()
    i = C.op.axis[-2]
    s[C].split(i, nparts=4)
    return s


MATMUL_SCHEDULES = [naive, matmul_tiled, matmul_cached, matmul_inlined]


@pytest.mark.parametrize("schedule", MATMUL_SCHEDULES)
def test_matmul_schedules_match_numpy(schedule: Callable[[ops.Op], Schedule]) -> None:
    op = ops.matmul()
    ops.check(op, schedule(op))


@pytest.mark.parametrize("schedule", MATMUL_SCHEDULES)
def test_batched_matmul_schedules_match_numpy(schedule: Callable[[ops.Op], Schedule]) -> None:
    op = ops.batch_matmul()
    ops.check(op, schedule(op))


def test_int8_matmul_accumulating_in_int32_is_bit_exact() -> None:
    A = te.placeholder((4, 6), "int8", name="A")
    B = te.placeholder((6, 5), "int8", name="B")
    k = te.reduce_axis((0, 6), "k")
    C = te.compute(
        (4, 5),
        lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k),
        name="C",
    )
    op = ops.Op([A, B, C], lambda a, b: a.astype("int32") @ b.astype("int32"))
    s = matmul_cached(op)
    inputs = ops.random_inputs(op)
    assert (ops.run(op, s) == op.reference(*inputs)).all()


# ---- conv2d, depthwise conv2d -----------------------------------------------------------------


def conv_tiled(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    Out = op.out
    n, k, y, x = Out.op.axis
    rc_or_ry = Out.op.reduce_axis[0]
    yo, xo, yi, xi = s[Out].tile(y, x, 2, 3)
    s[Out].reorder(k, yo, xo, rc_or_ry, yi, xi)
    return s


def conv_cached(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    Out, P = op.out, op.parts["pad"]
    OL = s.cache_write(Out, "local")
    PP = s.cache_read(P, "shared", [OL])
    WW = s.cache_read(op.args[1], "local", [OL])
    n, k, y, x = Out.op.axis
    yo, xo, yi, xi = s[Out].tile(y, x, 2, 2)
    s[OL].compute_at(s[Out], xo)
    first = s[OL].op.reduce_axis[0]
    s[PP].compute_at(s[OL], first)
    s[WW].compute_at(s[OL], first)
    s[P].compute_at(s[Out], xo)  # the padded tile, computed per output tile
    return s


def conv_inlined(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    s[op.parts["pad"]].compute_inline()
    n, k, y, x = op.out.op.axis
    fused = s[op.out].fuse(y, x)
    s[op.out].split(fused, factor=5)
    return s


CONV_SCHEDULES = [naive, conv_tiled, conv_cached, conv_inlined]


@pytest.mark.parametrize("schedule", CONV_SCHEDULES)
@pytest.mark.parametrize(
    "params",
    [dict(stride=1, pad=1, dil=1), dict(stride=2, pad=1, dil=1), dict(stride=1, pad=2, dil=2)],
    ids=["s1p1d1", "s2p1d1", "s1p2d2"],
)
def test_conv2d_nchw_schedules_match_numpy(schedule, params) -> None:
    op = ops.conv2d(**params)
    ops.check(op, schedule(op))


@pytest.mark.parametrize("schedule", CONV_SCHEDULES)
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_conv2d_schedules_match_numpy(schedule, stride: int) -> None:
    op = ops.depthwise_conv2d(stride=stride)
    ops.check(op, schedule(op))


# ---- pooling ----------------------------------------------------------------------------------


def pool_tiled(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    stage = op.parts.get("sum", op.out)
    n, c, y, x = stage.op.axis
    ry, rx = stage.op.reduce_axis
    yo, xo, yi, xi = s[stage].tile(y, x, 2, 3)
    s[stage].reorder(c, yo, xo, ry, rx, yi, xi)
    return s


def pool_cached(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    out, P = op.out, op.parts["pad"]
    if "sum" in op.parts:  # avg pool: the sum is computed per output tile
        inner = op.parts["sum"]
    else:
        inner = s.cache_write(out, "local")
    PP = s.cache_read(P, "local", [inner])
    n, c, y, x = out.op.axis
    yo, yi = s[out].split(y, factor=2)
    s[inner].compute_at(s[out], yo)
    s[PP].compute_at(s[inner], s[inner].op.axis[2])
    return s


def pool_inlined(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    s[op.parts["pad"]].compute_inline()
    n, c, y, x = op.out.op.axis
    s[op.out].fuse(c, y)
    return s


POOL_SCHEDULES = [naive, pool_tiled, pool_cached, pool_inlined]


@pytest.mark.parametrize("schedule", POOL_SCHEDULES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_schedules_match_numpy(schedule, kind: str) -> None:
    op = ops.pool2d(kind)
    ops.check(op, schedule(op))


# ---- softmax, layer norm ----------------------------------------------------------------------


def softmax_tiled(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    i, j = op.out.op.axis
    io, jo, ii, ji = s[op.out].tile(i, j, 2, 4)
    s[op.out].reorder(jo, io, ii, ji)
    (k,) = op.parts["sum"].op.reduce_axis
    ko, ki = s[op.parts["sum"]].split(k, factor=4)
    return s


def softmax_cached(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    out, mx, ex, sm = op.out, op.parts["max"], op.parts["exp"], op.parts["sum"]
    XX = s.cache_read(op.args[0], "local", [mx, ex])
    i, j = out.op.axis
    s[mx].compute_at(s[out], i)
    s[ex].compute_at(s[out], i)
    s[sm].compute_at(s[out], i)
    s[XX].compute_at(s[out], i)
    return s


def softmax_inlined(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    s[op.parts["exp"]].compute_inline()
    i, j = op.out.op.axis
    s[op.parts["sum"]].compute_at(s[op.out], i)
    return s


@pytest.mark.parametrize("schedule", [naive, softmax_tiled, softmax_cached, softmax_inlined])
def test_softmax_schedules_match_numpy(schedule) -> None:
    op = ops.softmax()
    ops.check(op, schedule(op))


def layer_norm_tiled(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    i, j = op.out.op.axis
    io, jo, ii, ji = s[op.out].tile(i, j, 2, 3)
    s[op.out].reorder(io, jo, ji, ii)
    (k,) = op.parts["var"].op.reduce_axis
    s[op.parts["var"]].split(k, factor=3)
    return s


def layer_norm_cached(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    out, p = op.out, op.parts
    VL = s.cache_write(p["var"], "local")
    i, j = out.op.axis
    for name in ("sum", "mean", "dev", "var"):
        s[p[name]].compute_at(s[out], i)
    s[VL].compute_at(s[out], i)
    return s


def layer_norm_inlined(op: ops.Op) -> Schedule:
    s = te.create_schedule(op.out.op)
    s[op.parts["mean"]].compute_inline()
    s[op.parts["dev"]].compute_inline()
    i, j = op.out.op.axis
    s[op.out].parallel(i)
    s[op.out].vectorize(j)
    return s


@pytest.mark.parametrize(
    "schedule", [naive, layer_norm_tiled, layer_norm_cached, layer_norm_inlined]
)
def test_layer_norm_schedules_match_numpy(schedule) -> None:
    op = ops.layer_norm()
    ops.check(op, schedule(op), rtol=1e-4, atol=1e-4)
