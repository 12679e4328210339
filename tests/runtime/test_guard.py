"""The write checks (runtime/guard.py): a kernel writing outside its arguments is named where it
happens, both for a compiled function called on numpy arrays and inside a module's arena."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tensorforge
from tensorforge.compiler import te
from tensorforge.compiler.build import build
from tensorforge.compiler.frontend.onnx_builders import mlp
from tensorforge.runtime import guard
from tensorforge.runtime.device.cpu.function import CPUFunction, ParamSpec
from tensorforge.runtime.executor import Executor


@pytest.fixture(autouse=True)
def _checks_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(guard.ENV, "1")


def _add_one(n: int):
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] + 1.0, name="B")
    return build(te.create_schedule(b.op), [a, b], name="add_one")


def test_a_kernel_inside_its_arguments_runs_and_writes_its_output() -> None:
    f = _add_one(8)
    a = np.arange(8, dtype=np.float32)
    b = np.zeros(8, np.float32)
    f(a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_a_kernel_writing_past_an_argument_is_named() -> None:
    f = _add_one(8)
    # the same machine code, told its output holds 5 floats: it writes 3 past the end
    params = [ParamSpec("A", "float32", (8,)), ParamSpec("B", "float32", (5,))]
    short = CPUFunction("add_one", f.function.address, params, f)
    with pytest.raises(guard.KernelWriteError, match=r"outside argument 'B': 12 byte\(s\) past"):
        short(np.zeros(8, np.float32), np.zeros(5, np.float32))


def test_a_kernel_writing_into_a_read_only_argument_is_named() -> None:
    f = _add_one(4)
    a = np.zeros(4, np.float32)
    a.flags.writeable = False
    swapped = CPUFunction("add_one", f.function.address, f.function.params, f)
    with pytest.raises(guard.KernelWriteError, match="read-only argument 'B'"):
        swapped(np.zeros(4, np.float32), a)


def _writer(extra: int):
    """A launch that fills its second argument (4 floats) and `extra` bytes past it."""

    def launch(src: int, dst: int) -> None:
        ctypes.memmove(dst, src, 16)
        ctypes.memset(dst + 16, 0x11, extra)

    return launch


def _executor(extra: int) -> Executor:
    slots = {"x": (0, (4,), "float32"), "y": (64, (4,), "float32"), "z": (128, (4,), "float32")}
    calls = [("copy", "k", _writer(extra), ("x", "y"))]
    return Executor(192, slots, {}, calls)


def test_the_arena_check_passes_a_kernel_that_stays_in_its_arguments() -> None:
    ex = _executor(0)
    ex.views["x"][...] = [1, 2, 3, 4]
    ex.run()
    np.testing.assert_array_equal(ex.views["y"], [1, 2, 3, 4])


def test_the_arena_check_names_the_kernel_and_what_it_overwrote() -> None:
    ex = _executor(64 - 16 + 4)  # through the gap and into z
    with pytest.raises(
        guard.KernelWriteError, match=r"kernel 'k' of 'copy' wrote 52 byte.*overwritten: z"
    ):
        ex.run()


def test_a_compiled_model_runs_under_the_checks_and_matches_the_unchecked_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    checked = tensorforge.compile(mlp()).run({"x": x})
    monkeypatch.setenv(guard.ENV, "0")
    plain = tensorforge.compile(mlp()).run({"x": x})
    for name, value in plain.items():
        np.testing.assert_array_equal(checked[name], value)
