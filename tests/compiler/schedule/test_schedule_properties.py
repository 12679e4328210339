"""Hypothesis: random legal split/fuse/reorder/tile sequences preserve results; illegal ones
raise ScheduleError naming the primitive (and leave the schedule usable)."""

from __future__ import annotations

import compiler_ops as ops
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedule_fuzz import draw_legal_step

from tensorforge.compiler import te, tir
from tensorforge.compiler.schedule import Schedule, ScheduleError, Stage

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PRIMITIVES = ["split", "fuse", "reorder", "tile"]


def apply_legal(stage: Stage, data: st.DataObject, steps: int) -> None:
    for _ in range(steps):
        draw_legal_step(stage, data)


def apply_illegal(stage: Stage, data: st.DataObject, kind: str) -> None:
    """Apply an illegal use of primitive `kind` (after legal ones of other kinds)."""
    leaves = list(stage.leaf_iter_vars)
    if kind == "split":
        iv = data.draw(st.sampled_from(leaves))
        if data.draw(st.booleans()):
            stage.split(iv, factor=data.draw(st.integers(-3, 0)))
        stage.split(iv, factor=2)
        stage.split(iv, factor=2)  # no longer a leaf
    elif kind == "fuse":
        i = data.draw(st.integers(0, len(leaves) - 1))
        j = data.draw(st.integers(0, len(leaves) - 1).filter(lambda j: j != i + 1))
        a, b = leaves[i], leaves[j]
        stage.fuse(a, b)  # not adjacent, reversed, or the same axis twice
    elif kind == "reorder":
        iv = data.draw(st.sampled_from(leaves))
        stage.reorder(iv, iv)
    else:
        x = data.draw(st.sampled_from(leaves))
        if data.draw(st.booleans()):
            stage.tile(x, x, 2, 2)
        y = data.draw(st.sampled_from([v for v in leaves if v is not x]))
        stage.tile(x, y, data.draw(st.integers(-2, 0)), 2)


def _matmul() -> ops.Op:
    return ops.matmul(5, 4, 6)


def _conv() -> ops.Op:
    return ops.conv2d(c=2, h=5, w=5, k=2, stride=2, pad=1)


@pytest.mark.parametrize("make", [_matmul, _conv], ids=["matmul", "conv2d"])
@SETTINGS
@given(data=st.data())
def test_random_legal_schedules_preserve_results(make, data) -> None:
    op = make()
    s = te.create_schedule(op.out.op)
    if "pad" in op.parts and data.draw(st.booleans()):
        s[op.parts["pad"]].compute_inline()
    apply_legal(s[op.out], data, data.draw(st.integers(1, 4)))
    ops.check(op, s)


@pytest.mark.parametrize("make", [_matmul, _conv], ids=["matmul", "conv2d"])
@SETTINGS
@given(data=st.data())
def test_illegal_primitives_raise_schedule_error_naming_them(make, data) -> None:
    op = make()
    s = te.create_schedule(op.out.op)
    stage = s[op.out]
    apply_legal(stage, data, data.draw(st.integers(0, 2)))
    kind = data.draw(st.sampled_from(PRIMITIVES))
    with pytest.raises(ScheduleError, match=f"^{kind}: ") as err:
        apply_illegal(stage, data, kind)
    assert str(err.value).split(":")[0] == kind
    replayed = Schedule.replay(op.out, s.primitives)  # the failing record was not recorded
    assert repr(tir.lower(replayed, op.args)) == repr(tir.lower(s, op.args))
    ops.check(op, s)  # whatever was applied before the error still lowers correctly


@pytest.mark.parametrize("make", [_matmul, _conv], ids=["matmul", "conv2d"])
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_random_schedules_replay_from_json(make, data) -> None:
    op = make()
    s = te.create_schedule(op.out.op)
    apply_legal(s[op.out], data, data.draw(st.integers(1, 4)))
    replayed = Schedule.from_json(s.to_json(), op.out)
    assert repr(tir.lower(replayed, op.args)) == repr(tir.lower(s, op.args))
