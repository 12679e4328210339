"""Code built for the JIT (`compiler.build.build`) runs wherever MCJIT maps its sections.

MCJIT maps a kernel's code and its constant pool separately. In a long-lived process (a test
worker after thousands of kernels) the address space has holes, and the two can land more than
2 GiB apart; with the small code model's 32-bit RIP-relative references LLVM then aborted the
whole process while relocating ("isInt<32>(RealOffset)"), a crash in whichever test built its
kernel next. The test arranges that address space on purpose: one free page above a 3 GiB
reservation, every other gap above it filled, so that the code (several pages) goes below the
reservation and the constant pool (one page) into the free page.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64",
    reason="arranges the address space with Linux x86-64's top-down mmap",
)

_FAR_APART = r"""
import ctypes, mmap
from tensorforge.compiler.codegen.llvm_jit import JITModule

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PAGE = mmap.PAGESIZE
MAP_PRIVATE_ANONYMOUS_NORESERVE = 0x22 | 0x4000


def reserve(size):  # address space only: no access, no memory
    address = libc.mmap(None, size, 0, MAP_PRIVATE_ANONYMOUS_NORESERVE, -1, 0)
    assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    return address


class Text:  # LLVM IR text where JITModule takes an llvmlite module (it parses str(module))
    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


VEC = "<8 x float> <float 1.5, float 2.5, float 3.5, float 4.5, float 5.5, float 6.5, " \
      "float 7.25, float 8.75>"
body = "".join(f"  %q{i} = getelementptr <8 x float>, ptr %p, i64 {i}\n"
               f"  store volatile {VEC}, ptr %q{i}, align 4\n" for i in range(1000))
ir = "define void @f(ptr %p) {\n" + body + "  ret void\n}\n"

big = reserve(3 << 30)  # the highest gap of 3 GiB
size, fillers = 1 << 30, []
while size >= PAGE:  # fill every gap above it, largest pieces first
    address = reserve(size)
    if address < big:
        libc.munmap(address, size)
        size //= 2
        continue
    fillers.append((address, size))
hole = next(a for a, n in reversed(fillers) if n == PAGE)
libc.munmap(hole, PAGE)  # the one free page above the reservation

jit = JITModule(Text(ir))
out = (ctypes.c_float * 8000)()
ctypes.CFUNCTYPE(None, ctypes.c_void_p)(jit.address("f"))(ctypes.addressof(out))
assert list(out[-8:]) == [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.25, 8.75], list(out[-8:])
print("ran", hex(jit.address("f")), "pool page", hex(hole))
"""


def test_jit_code_runs_with_its_constants_more_than_2_gib_away() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _FAR_APART], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and "ran" in run.stdout, (run.returncode, run.stderr[-2000:])
