"""Differential schedule fuzzing: random multi-stage programs under random legal schedules give
numpy's results in the loop-IR interpreter and in the LLVM CPU build (and, bound to GPU threads,
in OpenCL on PoCL). See docs/testing.md for running it longer (TF_FUZZ_EXAMPLES)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import schedule_fuzz as fz
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorforge.compiler import tir
from tensorforge.compiler.build import build
from tensorforge.compiler.schedule import PRIMITIVES, ScheduleError, primitive_name
from tensorforge.compiler.tir import LoweringError

PRIMITIVE_NAMES = {primitive_name(cls) for cls in PRIMITIVES}
EXAMPLES = int(os.environ.get("TF_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=EXAMPLES or 25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


def _run(prog: fz.Program, runner) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    inputs = [fz.random_array(t.shape, t.dtype, rng) for t in prog.inputs]
    outputs = [np.zeros(t.shape, t.dtype) for t in prog.outputs]
    runner(inputs + outputs)
    return outputs, prog.reference(*inputs)


def _compare(prog: fz.Program, got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    for t, g, w in zip(prog.outputs, got, want, strict=True):
        assert g.dtype == w.dtype, (what, t.name, g.dtype, w.dtype)
        np.testing.assert_allclose(
            g.astype("float64"),
            w.astype("float64"),
            err_msg=f"{what}: {t.name}",
            **fz.tolerance(t.dtype),
        )


def _check_interpreter_and(prog, s, target: str) -> None:  # noqa: ANN001
    """Schedule `s` of `prog` on the interpreter and built for `target`, each against numpy."""
    func = tir.lower(s, prog.args, name=prog.name)
    got, want = _run(prog, lambda arrays: tir.interpret(func, arrays))
    _compare(prog, got, want, "interpreter")
    module = build(s, prog.args, target=target, name=prog.name)
    got, want = _run(prog, lambda arrays: module(*arrays))
    _compare(prog, got, want, target)


@FUZZ
@given(prog=fz.programs(), data=st.data())
def test_random_schedules_match_numpy_in_interpreter_and_llvm(prog, data) -> None:
    _check_interpreter_and(prog, fz.draw_schedule(prog, data), "llvm")


@FUZZ
@given(prog=fz.programs(), data=st.data())
def test_any_schedule_raises_schedule_error_or_matches_numpy(prog, data) -> None:
    s, _ = fz.draw_wild_schedule(prog, data)
    try:
        func = tir.lower(s, prog.args, name=prog.name)
    except ScheduleError as err:
        assert re.match(r"^[a-z_]+: ", str(err)), str(err)
        assert str(err).split(":")[0] in PRIMITIVE_NAMES, str(err)
        return
    got, want = _run(prog, lambda arrays: tir.interpret(func, arrays))
    _compare(prog, got, want, "interpreter")
    module = build(s, prog.args, target="llvm", name=prog.name)
    got, want = _run(prog, lambda arrays: module(*arrays))
    _compare(prog, got, want, "llvm")


@st.composite
def gpu_programs(draw) -> fz.Program:
    dim = st.sampled_from(fz.ODD)
    family = draw(st.sampled_from(["ew_matmul", "broadcast", "pad_conv", "row_reduce"]))
    if family == "ew_matmul":
        dtype = draw(st.sampled_from(("float32", "int8")))
        return fz.ew_matmul(draw(dim), draw(dim), draw(dim), dtype)
    if family == "broadcast":
        return fz.broadcast_chain(draw(dim), draw(dim), "float32")
    if family == "row_reduce":
        return fz.row_reduce(draw(dim), draw(dim), "float32", draw(st.sampled_from(("sum", "max"))))
    return fz.pad_conv(draw(st.integers(3, 7)), draw(st.integers(3, 7)), 3, 1, 1, 1, "float32")


def _opencl_or_skip() -> None:
    from tensorforge.runtime.device.gpu.opencl import platforms

    if not platforms():
        pytest.skip("no OpenCL platform (install pocl-opencl-icd)")


@settings(FUZZ, max_examples=EXAMPLES or 12)
@given(prog=gpu_programs(), data=st.data())
def test_random_gpu_schedules_match_numpy_in_interpreter_and_opencl(prog, data) -> None:
    _opencl_or_skip()
    _check_interpreter_and(prog, fz.draw_gpu_schedule(prog, data), "opencl")


@settings(FUZZ, max_examples=EXAMPLES or 12)
@given(prog=gpu_programs(), data=st.data())
def test_any_gpu_schedule_raises_schedule_error_or_matches_numpy(prog, data) -> None:
    """Random primitives (binds, double buffering among them) on top of a legal GPU schedule."""
    _opencl_or_skip()
    start = fz.draw_gpu_schedule(prog, data) if data.draw(st.booleans()) else None
    s, _ = fz.draw_wild_schedule(prog, data, fz.WILD_GPU, start)
    try:
        func = tir.lower(s, prog.args, name=prog.name)
    except ScheduleError as err:
        assert str(err).split(":")[0] in PRIMITIVE_NAMES, str(err)
        return
    got, want = _run(prog, lambda arrays: tir.interpret(func, arrays))
    _compare(prog, got, want, "interpreter")
    try:
        module = build(s, prog.args, target="opencl", name=prog.name)
    except LoweringError as err:  # what the CPU allows but a GPU kernel cannot hold
        assert re.match(r"^(kernel|stage) '", str(err)), str(err)
        return
    got, want = _run(prog, lambda arrays: module(*arrays))
    _compare(prog, got, want, "opencl")
