"""NVRTC through ctypes: CUDA C to PTX without nvcc or a CUDA toolkit.

The library comes from the PyPI wheel `nvidia-cuda-nvrtc-cu12` (or a toolkit's libnvrtc), so a
CUDA payload's PTX can be made on a machine with no GPU. NVRTC 12 has no built-in
`cuda_fp16.h`: the header is taken from the `nvidia-cuda-runtime-cu12` wheel or a CUDA toolkit
when one is found, else from a small stand-in below with what the code generator uses.

Tensor-core code (`#include <mma.h>`, the WMMA intrinsics) has no stand-in: it needs `mma.h` and
the `crt/mma.h` it includes, from one CUDA distribution: the wheels (`nvidia-cuda-runtime-cu12`
has `mma.h` and `cuda_fp16.h`, `nvidia-cuda-nvcc-cu12` has `crt/mma.h`), or a toolkit's include
folder ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import re
from collections.abc import Iterator, Sequence

from .base import GPUError

DEFAULT_ARCH = "sm_75"  # Turing: tensor cores; NVRTC 12.9 deprecates older ones
_ARCH = re.compile(r"(?:sm|compute)_(\d{2,3})[af]?")
_LIB: ctypes.CDLL | None = None

# What `compiler.codegen.gpu_source` needs of cuda_fp16.h: the type and round-to-nearest casts.
_FP16_STANDIN = r"""#pragma once
struct __align__(2) __half {
  unsigned short __x;
  __half() = default;
  __device__ __half(float f) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(__x) : "f"(f)); }
  __device__ operator float() const {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(__x));
    return f;
  }
};
static __device__ __forceinline__ __half __float2half_rn(float f) { return __half(f); }
static __device__ __forceinline__ __half __float2half(float f) { return __half(f); }
static __device__ __forceinline__ float __half2float(__half h) { return float(h); }
"""


class NVRTCError(GPUError):
    """NVRTC is missing, or it rejected a program (the message holds the compiler's log)."""


def _wheel_dirs(package: str, sub: str) -> Iterator[str]:
    """`sub` inside each folder of the `nvidia.<package>` namespace package, where installed."""
    try:
        spec = importlib.util.find_spec(f"nvidia.{package}")
    except (ImportError, ValueError):
        return
    for root in (spec.submodule_search_locations or []) if spec else []:
        yield os.path.join(root, sub)


def _library() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        names = [os.path.join(d, "libnvrtc.so.12") for d in _wheel_dirs("cuda_nvrtc", "lib")]
        names += [n for n in [ctypes.util.find_library("nvrtc")] if n]
        for name in [*names, "libnvrtc.so.12", "libnvrtc.so"]:
            try:
                _LIB = ctypes.CDLL(name)
                break
            except OSError:
                continue
        else:
            raise NVRTCError("NVRTC (libnvrtc) not found: pip install nvidia-cuda-nvrtc-cu12")
        _LIB.nvrtcGetErrorString.restype = ctypes.c_char_p
    return _LIB


def _check(code: int, call: str) -> None:
    if code:
        raise NVRTCError(f"{call} failed: {_library().nvrtcGetErrorString(code).decode()}")


def available() -> bool:
    """Whether libnvrtc loads."""
    try:
        _library()
    except NVRTCError:
        return False
    return True


def version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def supported_archs() -> list[int]:
    """The compute capabilities (75 for sm_75) this NVRTC can compile for, ascending."""
    lib, n = _library(), ctypes.c_int()
    _check(lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)), "nvrtcGetNumSupportedArchs")
    archs = (ctypes.c_int * n.value)()
    _check(lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
    return sorted(archs)


def capability(arch: str) -> int:
    """The compute capability of an arch as a number: 90 for "sm_90", "sm_90a" or "compute_90".

    Raises:
        ValueError: naming `arch` when it is not sm_NN or compute_NN.
    """
    m = _ARCH.fullmatch(arch)
    if m is None:
        raise ValueError(f"CUDA arch must look like sm_90 or compute_90, not {arch!r}")
    return int(m.group(1))


def _toolkit_includes() -> list[str]:
    """The include folders of the CUDA toolkits named by $CUDA_HOME, $CUDA_PATH, or installed
    in /usr/local/cuda, in that order."""
    roots = [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    return [os.path.join(r, "include") for r in roots if r]


def _fp16_include() -> str | None:
    """A folder holding a real cuda_fp16.h: the CUDA runtime wheel's, else a toolkit's."""
    dirs = [*_wheel_dirs("cuda_runtime", "include"), *_toolkit_includes()]
    return next((d for d in dirs if os.path.isfile(os.path.join(d, "cuda_fp16.h"))), None)


# What a source including mma.h needs, each from one of a distribution's include folders.
_MMA_HEADERS = ("mma.h", "crt/mma.h", "cuda_fp16.h")
_INCLUDES_MMA = re.compile(r"^\s*#\s*include\s*[<\"]mma\.h[>\"]", re.MULTILINE)
MMA_HINT = (
    "pip install nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 (mma.h and crt/mma.h), or set "
    "CUDA_HOME to a CUDA toolkit"
)


def _mma_includes() -> list[str] | None:
    """Include folders of one CUDA distribution that has mma.h, the crt/mma.h it includes and
    cuda_fp16.h: the wheels (runtime and nvcc) together, else a toolkit's; None when none has.

    Folders are not mixed across distributions, so the headers agree with one another.
    """
    wheels = [*_wheel_dirs("cuda_runtime", "include"), *_wheel_dirs("cuda_nvcc", "include")]
    for dirs in [wheels, *([d] for d in _toolkit_includes())]:
        have = [d for d in dirs if os.path.isdir(d)]
        if have and all(
            any(os.path.isfile(os.path.join(d, h)) for d in have) for h in _MMA_HEADERS
        ):
            return have
    return None


def compile_ptx(
    source: str, arch: str = DEFAULT_ARCH, name: str = "program", options: Sequence[str] = ()
) -> str:
    """PTX of the CUDA C `source` for `arch` ("sm_90" or "compute_90"), options added after
    `--gpu-architecture`.

    A source that includes `mma.h` (tensor cores) is compiled with the include folders of a
    CUDA distribution that has it (see `_mma_includes`); other sources that include
    `cuda_fp16.h` get a real one where found, else the stand-in.

    Raises:
        ValueError: for an `arch` that is not sm_NN or compute_NN.
        NVRTCError: when NVRTC is missing, cannot target `arch`, or rejects the program (the
            message names the program and the arch and holds the compiler's log), or when the
            source includes mma.h and no CUDA headers have it (the message says what to
            install).
    """
    cc = capability(arch)
    lib, where = _library(), f"program {name!r} for {arch}"
    if cc not in (known := supported_archs()):
        names = ", ".join(f"sm_{a}" for a in known)
        raise NVRTCError(
            f"NVRTC {'.'.join(map(str, version()))} cannot compile {where}: it supports {names}"
        )
    opts = [f"--gpu-architecture=compute_{arch.split('_')[1]}", *options]
    headers: list[bytes] = []
    if _INCLUDES_MMA.search(source):
        includes = _mma_includes()
        if includes is None:
            raise NVRTCError(
                f"NVRTC cannot compile {where}: it uses tensor cores (#include <mma.h>) and no "
                f"CUDA headers with mma.h and crt/mma.h were found: {MMA_HINT}"
            )
        opts += [f"-I{d}" for d in includes]
    elif "cuda_fp16.h" in source:
        include = _fp16_include()
        opts += [f"-I{include}"] if include else []
        headers = [] if include else [_FP16_STANDIN.encode()]
    prog = ctypes.c_void_p()
    n = len(headers)
    _check(
        lib.nvrtcCreateProgram(
            ctypes.byref(prog), source.encode(), name.encode(), n,
            (ctypes.c_char_p * n)(*headers), (ctypes.c_char_p * n)(*[b"cuda_fp16.h"] * n),
        ),
        f"nvrtcCreateProgram of {where}",
    )  # fmt: skip
    try:
        code = lib.nvrtcCompileProgram(
            prog, len(opts), (ctypes.c_char_p * len(opts))(*map(str.encode, opts))
        )
        size = ctypes.c_size_t()
        _check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        if code:
            reason = lib.nvrtcGetErrorString(code).decode()
            text = log.value.decode(errors="replace").strip()
            raise NVRTCError(f"NVRTC could not compile {where} ({reason}):\n{text}")
        _check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        ptx = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
