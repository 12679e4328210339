"""LLVM's memory while compiling: every pass manager the O3 pipeline builds is freed after its
run (llvmlite's own release never reaches LLVM), and code built that way still computes what
numpy does."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

from tensorforge.compiler import te
from tensorforge.compiler.build import build
from tensorforge.compiler.codegen import llvm_jit


def _axpy_schedule() -> tuple:
    a = te.placeholder((64,), name="a")
    b = te.placeholder((64,), name="b")
    c = te.compute((64,), lambda i: a[i] * 2.0 + b[i], name="c")
    return te.create_schedule(c.op), [a, b, c]


def _record_disposals(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    freed: list[object] = []
    real = llvm.NewPassManager._dispose

    def dispose(self: object) -> None:
        freed.append(self)
        real(self)

    monkeypatch.setattr(llvm.NewPassManager, "_dispose", dispose)
    return freed


def test_each_optimization_frees_its_pass_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    real = llvm.PassBuilder.getModulePassManager

    def get(self: object) -> object:
        made.append(real(self))
        return made[-1]

    monkeypatch.setattr(llvm.PassBuilder, "getModulePassManager", get)
    freed = _record_disposals(monkeypatch)
    sched, args = _axpy_schedule()
    built = build(sched, args, name="axpy")  # parse, O3 (the pass manager), machine code
    assert len(made) == 1 and made[0].closed and freed == made
    a, b = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
    c = np.zeros(64, np.float32)
    built(a, b, c)
    np.testing.assert_array_equal(c, a * 2 + b)


def test_free_pass_manager_frees_once(monkeypatch: pytest.MonkeyPatch) -> None:
    freed = _record_disposals(monkeypatch)
    tm = llvm_jit.target_machine("llvm")
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    mpm = pb.getModulePassManager()
    llvm_jit.free_pass_manager(mpm)
    llvm_jit.free_pass_manager(mpm)  # a second call (or the collector) frees nothing twice
    del mpm
    assert len(freed) == 1
