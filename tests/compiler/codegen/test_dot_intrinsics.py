"""The dot-product intrinsics of packed integers (`te.dot_i16x2`, `te.dot_u8i8x4`): the LLVM
back-end's code equals numpy and the loop-IR interpreter bit for bit at every vector width, with
the x86 instruction the target's features allow (pmaddwd, vpdpwssd, vpdpbusd) or the arithmetic
written out; `llvm_jit.target_features` is what it reads them from."""

from __future__ import annotations

import ctypes
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.build import build, build_object
from tensorforge.compiler.codegen.llvm_jit import elf_machine, target_features
from tensorforge.runtime.device.cpu.loader import ObjectLoader

NAMES = ("dot_i16x2", "dot_u8i8x4")
X86 = llvm.get_process_triple().startswith("x86_64")
# extreme words: -32768 halves (pmaddwd's one wrapping case, twice), 0x80 and 0x7f bytes, -1
EDGES = [-(2**31), 0x7FFF7FFF, -1, 0x80808080 - 2**32, 0x7F7F7F7F, 0, 0x00FF00FF, -0x7F7F7F80]


def _reference(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's: the words viewed as int16 pairs (bytes: a's unsigned, b's signed), multiplied
    and summed in int64, wrapped to int32."""
    views = ("<i2", "<i2") if name == "dot_i16x2" else ("u1", "i1")
    per = 2 if name == "dot_i16x2" else 4
    x = a.astype("<i4").view(views[0]).reshape(-1, per).astype(np.int64)
    y = b.astype("<i4").view(views[1]).reshape(-1, per).astype(np.int64)
    return (x * y).sum(1).astype(np.int32)


def _kernel(name: str, lanes: int, n: int, accumulate: bool):
    """D[i] = (C[i] +) dot(A[i], B[i % lanes]), vectorized by `lanes` (1: serial)."""
    a = te.placeholder((n,), "int32", name="A")
    b = te.placeholder((lanes,), "int32", name="B")
    c = te.placeholder((n,), "int32", name="C")
    dot = getattr(te, name)

    def body(i):
        value = dot(a[i], b[i % lanes])
        return c[i] + value if accumulate else value

    d = te.compute((n,), body, name="D")
    s = te.create_schedule(d.op)
    if lanes > 1:
        _, inner = s[d].split(d.op.axis[0], factor=lanes)
        s[d].vectorize(inner)
    return s, [a, b, c, d] if accumulate else [a, b, d]


def _inputs(lanes: int, n: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    a = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(-(2**31), 2**31, lanes, dtype=np.int64).astype(np.int32)
    c = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    a[: len(EDGES)] = EDGES
    b[: min(lanes, len(EDGES))] = EDGES[:lanes]
    return a, b, c


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("lanes", [1, 2, 3, 4, 5, 8, 16, 32, 64])
@pytest.mark.parametrize("name", NAMES)
def test_dot_intrinsics_equal_numpy_and_the_interpreter(
    name: str, lanes: int, accumulate: bool
) -> None:
    """The host's instructions (a 5-lane vector as 4 + 1, a 3-lane one as 2 + 1: short runs
    padded to the narrowest instruction), the accumulating form (one vpdpbusd with its add)
    and the wrap of int32 sums included; JIT-compiled, interpreted and as an object file."""
    n = lanes * max(3, -(-len(EDGES) // lanes))
    sched, args = _kernel(name, lanes, n, accumulate)
    a, b, c = _inputs(lanes, n, lanes)
    want = _reference(name, a, np.tile(b, n // lanes))
    if accumulate:
        want = (c.astype(np.int64) + want).astype(np.int32)
    inputs = [a, b, c] if accumulate else [a, b]
    got = np.empty(n, np.int32)
    build(sched, args, name="dot")(*inputs, got)
    np.testing.assert_array_equal(got, want)
    func = tir.lower(sched, args, name="dot")
    interpreted = np.empty(n, np.int32)
    tir.interpret(func, [*inputs, interpreted])
    np.testing.assert_array_equal(interpreted, want)
    if X86:  # as a compiled module runs it: an object file (the small code model), not the JIT
        np.testing.assert_array_equal(_run_object(func, inputs, n), want)


def _run_object(func: tir.PrimFunc, inputs: list[np.ndarray], n: int) -> np.ndarray:
    loader = ObjectLoader([build_object(func, target="llvm")])
    out = np.zeros(n, np.int32)
    arrays = [np.ascontiguousarray(x) for x in inputs] + [out]
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(arrays))(loader.address(func.name))
    fn(*[x.ctypes.data for x in arrays])
    loader.close()
    return out


def _instructions(target: str, name: str, lanes: int = 32) -> set[str]:
    sched, args = _kernel(name, lanes, lanes * 3, accumulate=True)
    asm = build(sched, args, target=target, name="dot").assembly()
    return set(re.findall(r"\b(v?pmaddwd|vpdpwssd|vpdpbusd|vpmulld)\b", asm))


# target -> (dot_i16x2's instructions, dot_u8i8x4's): code for CPUs this host may lack is only
# generated, never run
TARGETS = {
    "llvm -mcpu=x86-64": ({"pmaddwd"}, {"pmaddwd"}),  # SSE2; LLVM finds pmaddwd in u8 x s8
    "llvm -mcpu=haswell -mattr=+avx2,+fma": ({"vpmaddwd"}, {"vpmaddwd"}),
    "llvm -mcpu=skylake-avx512 -mattr=+avx512f,+avx512bw": ({"vpmaddwd"}, {"vpmaddwd"}),
    "llvm -mcpu=alderlake -mattr=+avx2,+avxvnni": ({"vpdpwssd"}, {"vpdpbusd"}),
    "llvm -mcpu=cascadelake -mattr=+avx512f,+avx512bw,+avx512vnni": ({"vpdpwssd"}, {"vpdpbusd"}),
}


@pytest.mark.skipif(not X86, reason="x86 instructions")
@pytest.mark.parametrize("target", list(TARGETS))
def test_dot_intrinsics_take_the_targets_instructions(target: str) -> None:
    """pmaddwd at the widest vector the features allow (its add folded into vpdpwssd by LLVM
    on VNNI CPUs), vpdpbusd with VNNI (AVX-512's or AVX-VNNI's), and never a vpmulld."""
    for name, want in zip(NAMES, TARGETS[target], strict=True):
        assert _instructions(target, name) == want, (target, name)


@pytest.mark.skipif(not X86, reason="x86 instructions")
def test_dot_intrinsics_are_portable_arithmetic_elsewhere() -> None:
    """No x86 features, no x86 intrinsic: an AArch64 object builds from the same loop IR."""
    for name in NAMES:
        sched, args = _kernel(name, 16, 48, accumulate=True)
        obj = build_object(sched, args, target="llvm -mtriple=aarch64-linux-gnu", name="dot")
        assert elf_machine(obj) == (2, 183)


def test_target_features() -> None:
    """-mattr's "+" words closed under the x86 implications the code generator needs; the
    host's without it; only SSE2 for another -mcpu alone on x86-64; none for another triple."""
    words = target_features("llvm -mcpu=cascadelake -mattr=+avx512bw,+avx512vnni,-avx512vl")
    assert {"+avx512bw", "+avx512vnni", "+avx512f", "+avx2", "+sse2"} <= words
    assert "+avx512vl" not in words and "-avx512vl" not in words
    assert target_features("llvm -mcpu=haswell") == ({"+sse2"} if X86 else set())
    assert target_features("llvm -mtriple=aarch64-linux-gnu") == frozenset()
    assert target_features("opencl") == frozenset()
    host = llvm.get_host_cpu_features().flatten().split(",")
    assert target_features("llvm") >= {w for w in host if w.startswith("+")}
    assert not any(w.startswith("-") for w in target_features("llvm"))
