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


_FAILING_OPTIMIZATIONS = r"""
import gc
import llvmlite.binding as llvm
from llvmlite import ir
from tensorforge.compiler.codegen import llvm_jit

module = ir.Module(name="m")
fn = ir.Function(module, ir.FunctionType(ir.IntType(32), [ir.IntType(32)]), name="f")
ir.IRBuilder(fn.append_basic_block()).ret(fn.args[0])


class BrokenMachine:  # fails after the module is parsed into the context
    @property
    def triple(self):
        raise RuntimeError("no triple")


kept = []
for _ in range(300):
    context = llvm.create_context()
    try:
        llvm_jit.optimize(module, BrokenMachine(), context)
    except RuntimeError as exc:
        cycle = [exc]
        cycle.append(cycle)  # the traceback (and the module in its frame) in a reference cycle
    del context, cycle
    gc.collect()
print("survived")
"""


def test_a_failed_optimization_frees_its_module_before_its_context() -> None:
    """The garbage collector may free a context before a module parsed into it (a traceback
    in a reference cycle holds both), and freeing a context deletes its modules: the module's
    own free was then a double free, a native crash in whatever test collected next."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _FAILING_OPTIMIZATIONS], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and "survived" in run.stdout, (run.returncode, run.stderr[-2000:])
