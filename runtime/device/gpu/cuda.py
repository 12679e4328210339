"""The CUDA device: the driver API (libcuda.so.1) through ctypes, kernels compiled by NVRTC.

No CUDA toolkit or Python binding is needed: the driver comes with the NVIDIA driver and NVRTC
from a PyPI wheel. Buffers are `cuMemAlloc` allocations; a pointer parameter is passed as the
device address of (buffer + byte offset), as the CUDA dialect's kernels take them
(`compiler.codegen.gpu_source`). The library is loaded in `CUDADevice.__init__`, so this module
imports on machines without a GPU.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from . import nvrtc
from .base import DeviceInfo, GPUError

KIND = "cuda"
_MAX_THREADS_PER_BLOCK, _MAX_SHARED_PER_BLOCK, _CC_MAJOR, _CC_MINOR = 1, 8, 75, 76
_JIT_ERROR_LOG_BUFFER, _JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 5, 6
_LOG_BYTES = 16384

_P, _I, _U = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
_U64, _SIZE = ctypes.c_uint64, ctypes.c_size_t
_PP, _PI = ctypes.POINTER(_P), ctypes.POINTER(_I)
# The argument types of every driver function used; all return a CUresult (int).
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cuInit": (_U,),
    "cuGetErrorName": (_I, ctypes.POINTER(ctypes.c_char_p)),
    "cuDeviceGetCount": (_PI,),
    "cuDeviceGet": (_PI, _I),
    "cuDeviceGetName": (ctypes.c_char_p, _I, _I),
    "cuDeviceGetAttribute": (_PI, _I, _I),
    "cuDevicePrimaryCtxRetain": (_PP, _I),
    "cuCtxSetCurrent": (_P,),
    "cuCtxSynchronize": (),
    "cuModuleLoadDataEx": (_PP, ctypes.c_char_p, _U, _PI, _PP),
    "cuModuleGetFunction": (_PP, _P, ctypes.c_char_p),
    "cuModuleUnload": (_P,),
    "cuMemAlloc_v2": (ctypes.POINTER(_U64), _SIZE),
    "cuMemFree_v2": (_U64,),
    "cuMemcpyHtoD_v2": (_U64, _P, _SIZE),
    "cuMemcpyDtoH_v2": (_P, _U64, _SIZE),
    "cuLaunchKernel": (_P, _U, _U, _U, _U, _U, _U, _U, _P, _PP, _PP),
}  # fmt: skip


def _load_driver() -> Any:
    """libcuda.so.1, with every function this module calls typed."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise GPUError(
            f"no CUDA driver (libcuda.so.1) on this machine: install the NVIDIA driver ({e})"
        ) from None
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = list(argtypes), ctypes.c_int
    return lib


class CUDABuffer:
    """`nbytes` of device memory at address `ptr`, freed when the object goes."""

    def __init__(self, device: CUDADevice, nbytes: int, ptr: int) -> None:
        self.device, self.nbytes, self.ptr = device, nbytes, ptr

    def __del__(self) -> None:
        try:  # at interpreter exit the driver may already be gone
            self.device._current()
            self.device._lib.cuMemFree_v2(self.ptr)
        except Exception:
            pass


class CUDAProgram:
    """A loaded CUDA module; `function` looks kernels up by name, once each."""

    def __init__(self, device: CUDADevice, module: int) -> None:
        self.device, self.module = device, module
        self.functions: dict[str, ctypes.c_void_p] = {}

    def function(self, name: str) -> ctypes.c_void_p:
        if name not in self.functions:
            fn = ctypes.c_void_p()
            self.device._check(
                "cuModuleGetFunction",
                ctypes.byref(fn),
                self.module,
                name.encode(),
                what=f"kernel {name!r}",
            )
            self.functions[name] = fn
        return self.functions[name]

    def __del__(self) -> None:
        try:
            self.device._current()
            self.device._lib.cuModuleUnload(self.module)
        except Exception:
            pass


class CUDADevice:
    """One CUDA device through its primary context; copies and launches go to the default
    stream, so they run in order.

    Args:
        device: the device's ordinal.

    Raises:
        GPUError: when libcuda.so.1 is missing, the driver finds no device, or `device` is out
            of range.
    """

    kind = KIND

    def __init__(self, device: int = 0) -> None:
        self._lib = _load_driver()
        code = self._lib.cuInit(0)
        if code:
            raise GPUError(f"no CUDA device: cuInit failed with {self._error_name(code)}")
        count = ctypes.c_int()
        self._check("cuDeviceGetCount", ctypes.byref(count))
        if count.value == 0:
            raise GPUError("no CUDA device: the driver loaded but found none")
        if not 0 <= device < count.value:
            raise GPUError(f"CUDA device index must be in [0, {count.value}), not {device}")
        handle, self._ctx = ctypes.c_int(), ctypes.c_void_p()
        self._check("cuDeviceGet", ctypes.byref(handle), device)
        self._dev = handle.value
        self._check("cuDevicePrimaryCtxRetain", ctypes.byref(self._ctx), self._dev)
        self._current()
        name = ctypes.create_string_buffer(256)
        self._check("cuDeviceGetName", name, len(name), self._dev)
        self.capability = (self._attribute(_CC_MAJOR), self._attribute(_CC_MINOR))
        self.info = DeviceInfo(
            name=name.value.decode(errors="replace"),
            max_threads=self._attribute(_MAX_THREADS_PER_BLOCK),
            max_shared=self._attribute(_MAX_SHARED_PER_BLOCK),
            fp16=self.capability >= (5, 3),
            fp64=True,
        )

    def _error_name(self, code: int) -> str:
        text = ctypes.c_char_p()
        if self._lib.cuGetErrorName(code, ctypes.byref(text)) or not text.value:
            return f"CUresult {code}"
        return text.value.decode()

    def _check(self, call: str, *args: Any, what: str = "") -> None:
        """Run the driver function `call`; raise GPUError naming it (and `what`) on failure."""
        code = getattr(self._lib, call)(*args)
        if code:
            about = f" for {what}" if what else ""
            raise GPUError(f"{call}{about} failed with {self._error_name(code)}")

    def _attribute(self, attribute: int) -> int:
        value = ctypes.c_int()
        self._check("cuDeviceGetAttribute", ctypes.byref(value), attribute, self._dev)
        return value.value

    def _current(self) -> None:
        """Make this device's context current on the calling thread (contexts are per thread)."""
        self._check("cuCtxSetCurrent", self._ctx)

    @property
    def arch(self) -> str:
        """The device's own arch, e.g. sm_90."""
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def build(self, payload: dict[str, Any]) -> CUDAProgram:
        """Load the payload's PTX, or compile its source with NVRTC for this device's arch
        (PTX made for a newer arch than the device's is compiled again from the source)."""
        ptx, cc, made = payload.get("ptx"), int(self.arch[3:]), payload.get("arch")
        if not ptx or (made and nvrtc.capability(made) > cc):
            # NVRTC may predate the device: the newest arch it knows that the device runs
            best = max([a for a in nvrtc.supported_archs() if a <= cc], default=cc)
            ptx = nvrtc.compile_ptx(payload["source"], f"sm_{best}", "program")
        self._current()
        log = ctypes.create_string_buffer(_LOG_BYTES)
        options = (ctypes.c_int * 2)(_JIT_ERROR_LOG_BUFFER, _JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), _LOG_BYTES)
        module = ctypes.c_void_p()
        code = self._lib.cuModuleLoadDataEx(ctypes.byref(module), ptx.encode(), 2, options, values)
        if code:
            name = self._error_name(code)
            hint = (
                f" (the driver is older than NVRTC {'.'.join(map(str, nvrtc.version()))}: update "
                "the driver or install an older nvidia-cuda-nvrtc-cu12)"
                if name == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
                else ""
            )
            raise GPUError(
                f"cuModuleLoadDataEx failed on {self.info.name!r} with {name}{hint}: "
                f"{log.value.decode(errors='replace').strip()}"
            )
        return CUDAProgram(self, module.value)

    def alloc(self, nbytes: int) -> CUDABuffer:
        self._current()
        ptr = ctypes.c_uint64()
        self._check("cuMemAlloc_v2", ctypes.byref(ptr), max(int(nbytes), 1), what=f"{nbytes} bytes")
        return CUDABuffer(self, int(nbytes), ptr.value)

    def _span(self, buf: CUDABuffer, offset: int, nbytes: int, verb: str) -> None:
        if offset < 0 or offset + nbytes > buf.nbytes:
            raise GPUError(
                f"cannot {verb} {nbytes} bytes at offset {offset} of a {buf.nbytes}-byte buffer"
            )

    def write(self, buf: CUDABuffer, offset: int, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        if array.nbytes:
            self._span(buf, offset, array.nbytes, "write")
            self._current()
            self._check("cuMemcpyHtoD_v2", buf.ptr + offset, array.ctypes.data, array.nbytes)

    def read(self, buf: CUDABuffer, offset: int, out: np.ndarray) -> None:
        if out.nbytes:
            if not (out.flags.c_contiguous and out.flags.writeable):
                raise GPUError("read needs a C-contiguous, writeable output array")
            self._span(buf, offset, out.nbytes, "read")
            self._current()
            self._check("cuMemcpyDtoH_v2", out.ctypes.data, buf.ptr + offset, out.nbytes)

    def launch(
        self,
        program: CUDAProgram,
        kernel: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: list[tuple[CUDABuffer, int, int]],
    ) -> None:
        self._current()
        fn = program.function(kernel)
        pointers = [ctypes.c_uint64(buf.ptr + byte_offset) for buf, byte_offset, _ in args]
        params = (ctypes.c_void_p * max(len(pointers), 1))(*map(ctypes.addressof, pointers))
        dims = [int(n) for n in (*grid, *block)]
        self._check("cuLaunchKernel", fn, *dims, 0, None, params, None, what=f"kernel {kernel!r}")

    def synchronize(self) -> None:
        self._current()
        self._check("cuCtxSynchronize")
