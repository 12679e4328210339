"""Write checks for compiled CPU kernels: an opt-in mode that catches a kernel writing outside
its own arguments (a wrong tail, a vector store past a buffer's end, a bad index) where it
happens, instead of as corrupted neighbours or a heap abort much later.

Turn it on with ``TENSORFORGE_CHECK_WRITES=1`` in the environment (the test suite does, in
``tests/conftest.py``); it is read when a function or module is loaded. Then

- a `CPUFunction` call runs on copies of its arrays placed between red zones of `RED_ZONE`
  bytes, checks the zones after the call and copies back what the kernel wrote;
- a module's executor keeps red zones around its arena and, after each kernel, compares the
  arena with its state before the kernel: a byte that changed outside the kernel's own
  arguments names the kernel and the tensor it overwrote.

Either raises `KernelWriteError`. The checks cost a copy per call: they are for tests and
debugging, never for timing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from . import ndarray as nd

ENV = "TENSORFORGE_CHECK_WRITES"
RED_ZONE = 4 * nd.ALIGNMENT  # bytes each side of a buffer: four cache lines
PATTERN = 0xA5


def enabled() -> bool:
    """Whether `ENV` asks for the write checks (any value but empty or "0")."""
    return os.environ.get(ENV, "") not in ("", "0")


class KernelWriteError(RuntimeError):
    """A compiled kernel wrote memory outside its own arguments."""


def _zoned(nbytes: int) -> np.ndarray:
    """A uint8 buffer of `nbytes` + two red zones, the zones filled with `PATTERN` and the body
    starting on an `ALIGNMENT` boundary."""
    raw = nd.empty((nbytes + 2 * RED_ZONE,), "uint8").numpy()
    raw[:RED_ZONE] = PATTERN
    raw[RED_ZONE + nbytes :] = PATTERN
    return raw


def _zone_damage(raw: np.ndarray, nbytes: int) -> str | None:
    """Where the red zones of `raw` (made by `_zoned(nbytes)`) were written, or None."""
    before = np.flatnonzero(raw[:RED_ZONE] != PATTERN)
    after = np.flatnonzero(raw[RED_ZONE + nbytes :] != PATTERN)
    if before.size:
        return f"{before.size} byte(s) before its start (first {RED_ZONE - before[0]} before)"
    if after.size:
        return f"{after.size} byte(s) past its end (first at byte {nbytes + after[0]})"
    return None


def checked_call(name: str, params: Sequence[str], arrays: Sequence[np.ndarray], call) -> None:
    """Run `call(*pointers)` on red-zoned copies of `arrays` (checked C-contiguous arrays) and
    copy back the ones the kernel changed; `KernelWriteError` names the argument whose zone it
    wrote, or a read-only argument it wrote into."""
    zoned = []
    for array in arrays:
        raw = _zoned(array.nbytes)
        raw[RED_ZONE : RED_ZONE + array.nbytes] = array.reshape(-1).view(np.uint8)
        zoned.append(raw)
    call(*(raw.ctypes.data + RED_ZONE for raw in zoned))
    for param, array, raw in zip(params, arrays, zoned, strict=True):
        damage = _zone_damage(raw, array.nbytes)
        if damage:
            raise KernelWriteError(f"{name} wrote outside argument {param!r}: {damage}")
        body = raw[RED_ZONE : RED_ZONE + array.nbytes]
        flat = array.reshape(-1).view(np.uint8)
        if not np.array_equal(body, flat):
            if not array.flags.writeable:
                raise KernelWriteError(f"{name} wrote into its read-only argument {param!r}")
            flat[...] = body


class ArenaChecker:
    """The arena of an executor between red zones, and which bytes each kernel may write.

    Args:
        arena_bytes: the arena's size.
        ranges: value -> (offset, nbytes) inside the arena.
    """

    def __init__(self, arena_bytes: int, ranges: Mapping[str, tuple[int, int]]) -> None:
        self.nbytes, self.ranges = arena_bytes, dict(ranges)
        self.raw = _zoned(arena_bytes)
        self.arena = self.raw[RED_ZONE : RED_ZONE + arena_bytes]

    def _where(self, stray: np.ndarray) -> str:
        """The first stray byte's place and every tensor the stray bytes fall in."""
        first = int(stray[0])
        if first < 0:
            place = f"{-first} byte(s) before the arena"
        elif first >= self.nbytes:
            place = f"{first - self.nbytes} byte(s) past the arena's end"
        else:
            place = f"arena byte {first}"
        hit = [n for n, (o, b) in self.ranges.items() if np.any((stray >= o) & (stray < o + b))]
        return f"the first at {place}; " + (
            f"overwritten: {', '.join(hit)}" if hit else "no tensor overwritten"
        )

    def run(self, label: str, kernel: str, args: Sequence[str], call) -> None:
        """Run `call()`, the kernel of step `label`; raise `KernelWriteError` when it changed a
        byte outside the arena ranges of `args`."""
        before = self.raw.copy()
        call()
        changed = before != self.raw  # (a mask: the indices of every byte a kernel wrote were
        del before  # 8 bytes each, 3.3 GB after a ConstantOfShape filling a 411 MB weight)
        for name in args:
            if name in self.ranges:
                offset, nbytes = self.ranges[name]
                changed[RED_ZONE + offset : RED_ZONE + offset + nbytes] = False
        stray = np.flatnonzero(changed) - RED_ZONE
        if stray.size:
            raise KernelWriteError(
                f"kernel {kernel!r} of {label!r} wrote {stray.size} byte(s) outside its "
                f"arguments {list(args)}: {self._where(stray)}"
            )


__all__ = ["ENV", "RED_ZONE", "ArenaChecker", "KernelWriteError", "checked_call", "enabled"]
