"""The accelerator Device protocol (DESIGN.md contract 4) and the loader every backend shares.

A backend provides device memory (alloc/free/write/read, with the cache flush on write and
invalidate on read that a board needs) and ``run``; ``LoadedProgram`` places a program image's
buffers, patches its relocations and runs it, identically on every backend.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ....hw.config import HWConfig
from ....hw.isa import INSN_BYTES, MemInsn, describe, elem_bytes
from ....sim.memory import Allocation
from ...program import ProgramImage, Slot


class DeviceError(RuntimeError):
    """A device that cannot do what was asked: no such backend, bad buffers, a failed run."""


@dataclass
class RunResult:
    """What one run reports: counters (backend-specific names), cycles where known, wall time."""

    stats: dict[str, int]
    wall_s: float
    cycles: int | None = None
    backend: str = ""


@runtime_checkable
class Device(Protocol):
    """An accelerator: device memory plus a launcher for instruction streams."""

    config: HWConfig
    backend: str

    def alloc(self, nbytes: int, align: int = 64) -> Allocation: ...

    def free(self, block: Allocation) -> None: ...

    def write(self, block: Allocation, data: bytes | np.ndarray, offset: int = 0) -> None:
        """Copy host bytes into device memory and make them visible to the device (flush)."""

    def read(self, block: Allocation, nbytes: int | None = None, offset: int = 0) -> bytes:
        """Copy device memory to the host after invalidating stale cache lines."""

    def run(self, insns: Allocation, insn_count: int) -> RunResult: ...

    def close(self) -> None: ...


@dataclass
class LoadedProgram:
    """A program image placed in a device's memory, ready to run any number of times."""

    device: Device
    image: ProgramImage
    buffers: dict[str, Allocation] = field(default_factory=dict)
    insn_block: Allocation | None = None

    @classmethod
    def load(cls, device: Device, image: ProgramImage) -> LoadedProgram:
        if image.config != device.config:
            raise DeviceError(
                f"program {image.name!r} was built for HWConfig {image.config.name!r} "
                f"({image.config.bitstream_name}); the device runs {device.config.name!r} "
                f"({device.config.bitstream_name}), whose ISA differs"
            )
        check_transfers(image)
        prog = cls(device, image)
        try:
            for blob in image.blobs:
                prog.buffers[blob.name] = device.alloc(max(len(blob.data), 1), blob.align)
                device.write(prog.buffers[blob.name], blob.data)
            for slot in image.slots:
                prog.buffers[slot.name] = device.alloc(slot.nbytes, slot.align)
            patched = image.patch({n: b.addr for n, b in prog.buffers.items()})
            prog.insn_block = device.alloc(len(patched), INSN_BYTES)
            device.write(prog.insn_block, patched)
        except Exception:
            prog.free()
            raise
        return prog

    def slot(self, name: str) -> Slot:
        for s in self.image.slots:
            if s.name == name:
                return s
        raise DeviceError(
            f"program {self.image.name!r} has no slot {name!r}; slots: "
            f"{[s.name for s in self.image.slots]}"
        )

    def write(self, name: str, array: np.ndarray) -> None:
        """Copy an array into a slot; its shape and dtype must be the slot's."""
        slot = self.slot(name)
        array = np.asarray(array)
        if array.shape != slot.shape or array.dtype != np.dtype(slot.dtype):
            raise DeviceError(
                f"slot {name!r} of program {self.image.name!r} must get shape {slot.shape} and "
                f"dtype {slot.dtype}, not shape {array.shape} and dtype {array.dtype}"
            )
        self.device.write(self.buffers[name], np.ascontiguousarray(array))

    def read(self, name: str) -> np.ndarray:
        slot = self.slot(name)
        raw = self.device.read(self.buffers[name], slot.nbytes)
        return np.frombuffer(raw, dtype=slot.dtype).reshape(slot.shape).copy()

    def run(
        self, inputs: dict[str, np.ndarray] | None = None
    ) -> tuple[dict[str, np.ndarray], RunResult]:
        """Write inputs, run, and return every output slot and the run's result."""
        inputs = inputs or {}
        wanted = {s.name for s in self.image.slots if s.kind == "input"}
        missing, extra = sorted(wanted - set(inputs)), sorted(set(inputs) - wanted)
        if missing or extra:
            raise DeviceError(
                f"program {self.image.name!r} takes inputs {sorted(wanted)}; "
                + (f"missing {missing}" if missing else "")
                + ("; " if missing and extra else "")
                + (f"unknown {extra}" if extra else "")
            )
        for name, array in inputs.items():
            self.write(name, array)
        assert self.insn_block is not None
        result = self.device.run(self.insn_block, self.image.insn_count)
        outputs = {s.name: self.read(s.name) for s in self.image.slots if s.kind == "output"}
        return outputs, result

    def free(self) -> None:
        for block in [*self.buffers.values(), *([self.insn_block] if self.insn_block else [])]:
            self.device.free(block)
        self.buffers.clear()
        self.insn_block = None


def check_transfers(image: ProgramImage) -> None:
    """Every DMA of the program stays inside the one buffer (slot or blob) its relocation names.

    Device memory is checked as a whole by every backend, but a LOAD reading a neighbouring
    buffer or a STORE past its output slot lands in memory the program owns and would go
    unnoticed; this check runs before the program is placed.

    Raises:
        DeviceError: naming the instruction, its buffer and the overrun (or a DMA without a
            relocation, whose address could be anything once the image is placed).
    """
    sizes = {b.name: len(b.data) for b in image.blobs}
    sizes.update({s.name: s.nbytes for s in image.slots})
    target = {r.insn: r.target for r in image.relocations}
    for index, insn in enumerate(image.instructions()):
        if not isinstance(insn, MemInsn) or insn.x_size == 0 or insn.y_size == 0:
            continue  # compute, or a token-only NOP
        where = f"program {image.name!r}, instruction {index} ({describe(insn)})"
        if index not in target:
            raise DeviceError(f"{where}: addresses DRAM without a relocation to a slot or blob")
        name = target[index]
        if name not in sizes:
            raise DeviceError(f"{where}: relocation to {name!r}, which is no slot or blob")
        eb = elem_bytes(image.config, insn.memory_type)
        first = insn.dram_base * eb
        end = (insn.dram_base + (insn.y_size - 1) * insn.x_stride + insn.x_size) * eb
        if first < 0 or end > sizes[name]:
            raise DeviceError(
                f"{where}: moves bytes [{first}, {end}) of {name!r}, which holds {sizes[name]}"
            )


def timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start
