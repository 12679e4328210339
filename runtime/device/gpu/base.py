"""The GPU device interface both runtimes implement (OpenCL through pyopencl, CUDA through the
driver API), and the program description they run (`compiler.codegen.gpu.gpu_payload`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class GPUError(RuntimeError):
    """No usable GPU platform or driver, a kernel the device cannot run, or a failed launch."""


@dataclass(frozen=True)
class DeviceInfo:
    """What a device allows per thread block, and its name."""

    name: str
    max_threads: int
    max_shared: int
    fp16: bool
    fp64: bool


class Buffer(Protocol):
    """Device memory of `nbytes` bytes."""

    nbytes: int


class GPUDevice(Protocol):
    """One GPU (or OpenCL device) with a queue; launches run in order."""

    kind: str
    info: DeviceInfo

    def build(self, payload: dict[str, Any]) -> Any:
        """Compile or load a program's source (or PTX); returns a handle for `launch`."""

    def alloc(self, nbytes: int) -> Buffer: ...

    def write(self, buf: Buffer, offset: int, array: np.ndarray) -> None:
        """Copy a C-contiguous array to `buf` at byte `offset`."""

    def read(self, buf: Buffer, offset: int, out: np.ndarray) -> None:
        """Copy from `buf` at byte `offset` into the C-contiguous array `out`."""

    def launch(
        self,
        program: Any,
        kernel: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: list[tuple[Buffer, int, int]],
    ) -> None:
        """Run `kernel`; `args` are (buffer, byte offset, element size) per pointer parameter
        (offsets are multiples of the element size)."""

    def synchronize(self) -> None:
        """Wait until every launch and copy has finished."""


def check_program(payload: dict[str, Any], info: DeviceInfo, kind: str) -> None:
    """Raise GPUError when a program needs more than the device allows (threads per block,
    shared memory), naming the kernel and the device. (float16 needs no extension: OpenCL code
    reaches it through vload_half/vstore_half.)"""
    if payload.get("dialect") != kind:
        raise GPUError(f"program for {payload.get('dialect')!r} cannot run on a {kind} device")
    for k in payload["kernels"]:
        threads = int(np.prod(k["block"]))
        if threads > info.max_threads:
            raise GPUError(
                f"kernel {k['name']!r} needs {threads} threads per block, more than the "
                f"{info.max_threads} device {info.name!r} allows"
            )
        if k["shared_bytes"] > info.max_shared:
            raise GPUError(
                f"kernel {k['name']!r} needs {k['shared_bytes']} bytes of shared memory, more "
                f"than the {info.max_shared} device {info.name!r} allows"
            )
