"""Device DRAM model: a byte-addressed memory at a physical base address, with an allocator.

Example:
    >>> mem = DeviceMemory(1 << 20)
    >>> buf = mem.alloc(100, align=64)
    >>> mem.write(buf.addr, b"hello")
    >>> mem.read(buf.addr, 5)
    b'hello'
    >>> mem.free(buf)
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

DEFAULT_BASE = 0x1000_0000  # where a board's CMA region might start; any aligned base works
PAGE_BYTES = 4096


class DeviceMemoryError(RuntimeError):
    """Out-of-bounds access, a double free, or an allocation that does not fit."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """A block of device memory: physical address and size in bytes."""

    addr: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.addr + self.nbytes


class DeviceMemory:
    """Byte-addressed DRAM with physical addresses [base, base + size).

    Args:
        size: bytes of memory.
        base: physical address of the first byte (page-aligned).
    """

    def __init__(self, size: int, base: int = DEFAULT_BASE) -> None:
        if size <= 0:
            raise ValueError(f"DeviceMemory size must be positive, not {size}")
        if base % PAGE_BYTES:
            raise ValueError(f"DeviceMemory base must be {PAGE_BYTES}-aligned, not {base:#x}")
        self.base = base
        self.size = size
        self.data = np.zeros(size, dtype=np.uint8)
        self._free: list[tuple[int, int]] = [(base, base + size)]  # sorted (start, end)
        self._live: dict[int, Allocation] = {}

    # ---- allocator ------------------------------------------------------------------------
    def alloc(self, nbytes: int, align: int = 64) -> Allocation:
        """First-fit allocation of ``nbytes`` (at least 1) aligned to ``align`` (a power of 2)."""
        if nbytes <= 0:
            raise ValueError(f"allocation size must be positive, not {nbytes}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"allocation alignment must be a power of two, not {align}")
        for i, (start, end) in enumerate(self._free):
            addr = -(-start // align) * align
            if addr + nbytes <= end:
                pieces = [(start, addr)] if addr > start else []
                if addr + nbytes < end:
                    pieces.append((addr + nbytes, end))
                self._free[i : i + 1] = pieces
                block = Allocation(addr, nbytes)
                self._live[addr] = block
                return block
        raise DeviceMemoryError(
            f"cannot allocate {nbytes} bytes aligned to {align}: {self.free_bytes} of "
            f"{self.size} bytes free, largest free block {self.largest_free} bytes"
        )

    def free(self, block: Allocation) -> None:
        if self._live.get(block.addr) != block:
            raise DeviceMemoryError(
                f"free of {block.nbytes} bytes at {block.addr:#x}: not allocated"
            )
        del self._live[block.addr]
        i = bisect.bisect(self._free, (block.addr, block.end))
        self._free.insert(i, (block.addr, block.end))
        # Coalesce with neighbours.
        merged: list[tuple[int, int]] = []
        for start, end in self._free:
            if merged and merged[-1][1] == start:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((start, end))
        self._free = merged

    @property
    def free_bytes(self) -> int:
        return sum(end - start for start, end in self._free)

    @property
    def largest_free(self) -> int:
        return max((end - start for start, end in self._free), default=0)

    @property
    def allocations(self) -> list[Allocation]:
        return sorted(self._live.values(), key=lambda a: a.addr)

    # ---- access ---------------------------------------------------------------------------
    def offset(self, addr: int, nbytes: int, what: str = "access") -> int:
        """The byte offset of [addr, addr + nbytes) in ``data``; raises when out of bounds."""
        if nbytes < 0 or addr < self.base or addr + nbytes > self.base + self.size:
            raise DeviceMemoryError(
                f"{what} of {nbytes} bytes at {addr:#x} is outside device memory "
                f"[{self.base:#x}, {self.base + self.size:#x})"
            )
        return addr - self.base

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        if isinstance(data, np.ndarray):
            raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        else:
            raw = np.frombuffer(data, dtype=np.uint8)
        off = self.offset(addr, raw.size, "write")
        self.data[off : off + raw.size] = raw

    def read(self, addr: int, nbytes: int) -> bytes:
        off = self.offset(addr, nbytes, "read")
        return self.data[off : off + nbytes].tobytes()

    def view(self, addr: int, nbytes: int, what: str = "access") -> np.ndarray:
        """A writable uint8 view of [addr, addr + nbytes) (no copy)."""
        off = self.offset(addr, nbytes, what)
        return self.data[off : off + nbytes]
