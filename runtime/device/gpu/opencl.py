"""The OpenCL device: pyopencl on any platform (PoCL on a CPU in tests, a GPU's ICD elsewhere).

Buffers are `pyopencl.Buffer`s; a pointer parameter is passed as (buffer, element offset), as
the OpenCL C dialect's kernels take them (`compiler.codegen.gpu_source`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .base import DeviceInfo, GPUError

KIND = "opencl"


def _import_cl() -> Any:
    from tensorforge.extras import require

    return require("pyopencl", "the opencl device", GPUError)


def platforms() -> list[tuple[str, list[str]]]:
    """(platform name, device names) of every OpenCL platform this machine has."""
    cl = _import_cl()
    try:
        found = cl.get_platforms()
    except cl.Error:  # no ICD installed: pyopencl raises PLATFORM_NOT_FOUND_KHR
        return []
    return [(p.name, [d.name for d in p.get_devices()]) for p in found]


class _Program:
    """A built program and its kernel objects, one per name."""

    def __init__(self, program: Any, offset_bits: int = 32) -> None:
        self.program = program
        self.kernels: dict[str, Any] = {}
        # element offsets into the arena: 64-bit since an arena may pass 2**31 elements (a
        # module saved before then declares `const int` offsets and has no `offset_bits`)
        self.offset = np.int64 if offset_bits == 64 else np.int32


class OpenCLDevice:
    """An OpenCL device and an in-order queue.

    Args:
        platform: a substring of the platform's name ("" for the first platform with a device;
            the environment variable TF_OPENCL_PLATFORM sets the default).
        device: index of the device on that platform.

    Raises:
        GPUError: when no OpenCL platform or device matches, naming what exists.
    """

    kind = KIND

    def __init__(self, platform: str | None = None, device: int = 0) -> None:
        cl = self.cl = _import_cl()
        want = os.environ.get("TF_OPENCL_PLATFORM", "") if platform is None else platform
        found = platforms()
        if not found:
            raise GPUError(
                "no OpenCL platform found: install an ICD (Debian: pocl-opencl-icd for the CPU, "
                "or the GPU vendor's driver)"
            )
        chosen = [
            p for p in cl.get_platforms() if want.lower() in p.name.lower() and p.get_devices()
        ]
        if not chosen:
            raise GPUError(f"no OpenCL platform matches {want!r}; found {found}")
        devices = chosen[0].get_devices()
        if not 0 <= device < len(devices):
            raise GPUError(
                f"OpenCL device index must be in [0, {len(devices)}) on {chosen[0].name!r}, "
                f"not {device}"
            )
        self.device = devices[device]
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context)
        ext = self.device.extensions
        self.info = DeviceInfo(
            name=f"{chosen[0].name.strip()}: {self.device.name.strip()}",
            max_threads=int(self.device.max_work_group_size),
            max_shared=int(self.device.local_mem_size),
            fp16="cl_khr_fp16" in ext,
            fp64="cl_khr_fp64" in ext,
        )

    def build(self, payload: dict[str, Any]) -> Any:
        cl = self.cl
        try:
            program = cl.Program(self.context, payload["source"]).build()
            return _Program(program, payload.get("offset_bits", 32))
        except cl.RuntimeError as e:
            raise GPUError(f"OpenCL build failed on {self.info.name!r}: {e}") from None

    def alloc(self, nbytes: int) -> Any:
        return self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, max(int(nbytes), 1))

    def write(self, buf: Any, offset: int, array: np.ndarray) -> None:
        if array.nbytes:
            self.cl.enqueue_copy(self.queue, buf, np.ascontiguousarray(array), dst_offset=offset)

    def read(self, buf: Any, offset: int, out: np.ndarray) -> None:
        if out.nbytes:
            self.cl.enqueue_copy(self.queue, out, buf, src_offset=offset)

    def launch(
        self,
        program: Any,
        kernel: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: list[tuple[Any, int, int]],
    ) -> None:
        k = program.kernels.get(kernel)
        if k is None:  # each retrieval makes a new kernel object: keep one per name
            k = program.kernels[kernel] = self.cl.Kernel(program.program, kernel)
        values: list[Any] = []
        for buf, byte_offset, itemsize in args:
            values += [buf, program.offset(byte_offset // itemsize)]
        k.set_args(*values)
        global_size = tuple(g * b for g, b in zip(grid, block, strict=True))
        self.cl.enqueue_nd_range_kernel(self.queue, k, global_size, tuple(block))

    def synchronize(self) -> None:
        self.queue.finish()
