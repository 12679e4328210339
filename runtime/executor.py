"""The graph executor: runs a module's kernel calls over one aligned arena (its memory plan).

Every tensor that crosses a kernel boundary is a view into the arena at its planned offset;
constants are the module's own arrays, used in place (a copy only for one that is not
C-contiguous and 64-byte aligned). A call passes raw data pointers, computed once, so
running a model costs one native call per kernel and no allocation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import guard
from . import ndarray as nd

Launch = Callable[..., None]  # the kernel, called with one data pointer (int) per argument


@dataclass(frozen=True)
class Step:
    """One planned call: the kernel's label (its fused nodes), the launch and its pointers."""

    label: str
    kernel: str
    launch: Launch
    pointers: tuple[int, ...]


@dataclass(frozen=True)
class ProfileRow:
    label: str
    kernel: str
    median_ms: float
    share: float


class Profile:
    """Median time of each kernel call over `repeat` runs, in call order, and its share."""

    def __init__(self, rows: Sequence[ProfileRow], total_ms: float, repeat: int) -> None:
        self.rows, self.total_ms, self.repeat = list(rows), total_ms, repeat

    def table(self, top: int | None = None) -> str:
        """The profile as a text table (all calls, or the `top` slowest)."""
        rows = sorted(self.rows, key=lambda r: -r.median_ms)[:top] if top else self.rows
        width = max([len(r.label) for r in rows] + [5])
        lines = [f"{'#':>3}  {'layer':<{width}}  {'median ms':>10}  {'share':>6}"]
        for k, row in enumerate(rows):
            lines.append(f"{k:>3}  {row.label:<{width}}  {row.median_ms:>10.3f}  {row.share:>5.1%}")
        lines.append(f"{'':>3}  {'total (sum of medians)':<{width}}  {self.total_ms:>10.3f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def with_row(self, label: str, kernel: str, median_ms: float) -> Profile:
        """This profile with one more row last (a module's data-dependent tail), shares
        recomputed."""
        medians = [(r.label, r.kernel, r.median_ms) for r in self.rows] + [
            (label, kernel, median_ms)
        ]
        total = sum(m for _, _, m in medians)
        rows = [ProfileRow(a, k, m, m / total if total else 0.0) for a, k, m in medians]
        return Profile(rows, total, self.repeat)

    @staticmethod
    def of(calls: Sequence[tuple[str, str]], times: np.ndarray) -> Profile:
        """The profile of (label, kernel) calls timed in seconds, `times[repeat, call]`."""
        medians = np.median(times, axis=0) * 1e3
        total = float(medians.sum())
        rows = [
            ProfileRow(label, kernel, float(m), float(m) / total if total else 0.0)
            for (label, kernel), m in zip(calls, medians, strict=True)
        ]
        return Profile(rows, total, times.shape[0])


def call_note(label: str, kernel: str) -> str:
    """The note `Executor.run` adds to an error raised by a call."""
    return f"in call {label!r} (kernel {kernel!r})"


class Executor:
    """Binds kernel calls to an arena and constants, then runs them in order.

    Args:
        arena_bytes: size of the arena (the memory plan's peak).
        slots: value -> (offset, shape, dtype) inside the arena.
        constants: value -> array, used in place when it is C-contiguous and 64-byte aligned
            (read-only is fine: kernels never write a constant), else copied to aligned memory
            once (`ndarray.aligned`).
        calls: (label, kernel name, launch, argument value names) in execution order.

    With `guard.enabled()` (``TENSORFORGE_CHECK_WRITES=1``), `run` checks after each kernel that
    it wrote nothing outside its own arguments (`guard.ArenaChecker`).
    """

    def __init__(
        self,
        arena_bytes: int,
        slots: Mapping[str, tuple[int, tuple[int, ...], str]],
        constants: Mapping[str, np.ndarray],
        calls: Sequence[tuple[str, str, Launch, Sequence[str]]],
    ) -> None:
        ranges = {
            name: (offset, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
            for name, (offset, shape, dtype) in slots.items()
        }
        self.checker = guard.ArenaChecker(max(arena_bytes, 1), ranges) if guard.enabled() else None
        self.arena = (
            self.checker.arena
            if self.checker is not None
            else nd.empty((max(arena_bytes, 1),), "uint8").numpy()
        )
        self.views: dict[str, np.ndarray] = {}
        for name, (offset, shape, dtype) in slots.items():
            nbytes = ranges[name][1]
            self.views[name] = self.arena[offset : offset + nbytes].view(dtype).reshape(shape)
        for name, value in constants.items():
            self.views[name] = nd.aligned(np.asarray(value))
        self.steps = [
            Step(label, kernel, launch, tuple(self.views[a].ctypes.data for a in args))
            for label, kernel, launch, args in calls
        ]
        self.step_args = [tuple(args) for _, _, _, args in calls]

    def run(self) -> None:
        """Run every call in order; an error raised by a call gets a note naming it (type and
        message unchanged): ``in call '<label>' (kernel '<name>')``."""
        for step, args in zip(self.steps, self.step_args, strict=True):
            try:
                if self.checker is not None:
                    self.checker.run(
                        step.label, step.kernel, args, lambda s=step: s.launch(*s.pointers)
                    )
                else:
                    step.launch(*step.pointers)
            except Exception as exc:
                exc.add_note(call_note(step.label, step.kernel))
                raise

    def profile(self, repeat: int = 10) -> Profile:
        """Run `repeat` times, timing each call; medians per call."""
        times = np.zeros((repeat, len(self.steps)))
        clock = time.perf_counter
        for r in range(repeat):
            for k, step in enumerate(self.steps):
                start = clock()
                step.launch(*step.pointers)
                times[r, k] = clock() - start
        return Profile.of([(s.label, s.kernel) for s in self.steps], times)
