"""Kernels of kind "loop": an ONNX Loop run at run time, its body a compiled module of its own.

A loop kernel's payload is the body's `Module` (`Module.to_bytes`), compiled by the CPU
back-end from the graph op `Loop` (`compiler/graph/ops/loop.py`). Its parameters are the node's
inputs (the trip count and the first condition when the node has them, the carried values'
first values, the outer values the body reads), then its outputs (the carried values' last
values, then the scan outputs), each a pointer into the outer module's arena. Its `meta`:
`has_trips`, `has_cond`, `carried`, `scans`, `node` (the Loop's name, for errors), and the body
module's input and output names in the body's order (iteration, condition, carried...,
captured...; condition, carried..., scan values...).

`iterate` is the loop itself, shared with the reference executor: `for i in range(M) while
cond: carried = body(i, cond, carried)`. A loop without a trip count stops with
`LoopLimitError` after `WHILE_LIMIT` iterations rather than hang.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .ndarray import view_at

#: iterations a loop without a trip count may run before it is stopped as runaway
WHILE_LIMIT = 1 << 24
#: loops inside loops a module may hold (each body is a module of its own)
MAX_NESTING = 32


class LoopLimitError(RuntimeError):
    """A Loop without a trip count ran `WHILE_LIMIT` iterations without its condition turning
    false."""


Step = Callable[[int, np.ndarray, list[np.ndarray]], list[np.ndarray]]


def iterate(
    step: Step,
    trips: np.ndarray | None,
    cond: np.ndarray | None,
    carried: Sequence[np.ndarray],
    name: str,
    scans: Sequence[np.ndarray] = (),
) -> list[np.ndarray]:
    """Run `step(i, cond, carried) -> [cond, *carried, *scan values]` while `i < trips` (when
    given) and `cond` (when given) hold; the carried values after the last iteration (copies of
    the first values when it runs zero times). Iteration i's scan values are written to
    `scans[k][i]` (a loop with scan outputs has a constant trip count and no condition, so each
    scan output holds exactly `trips` rows)."""
    limit = None if trips is None else int(np.asarray(trips).reshape(-1)[0])
    running = np.array(True) if cond is None else np.asarray(cond, bool).reshape(())
    state = [np.array(a, copy=True) for a in carried]
    i = 0
    while bool(running) and (limit is None or i < limit):
        if limit is None and i >= WHILE_LIMIT:
            raise LoopLimitError(
                f"Loop node {name!r} ran {WHILE_LIMIT} iterations and its condition is still "
                "true: stopped (it has no trip count to bound it)"
            )
        result = step(i, running, state)
        running = np.array(result[0], bool).reshape(())  # (a copy: result may be views)
        state = [np.array(r, copy=True) for r in result[1 : 1 + len(state)]]
        for out, value in zip(scans, result[1 + len(state) :], strict=True):
            out[i] = np.asarray(value).reshape(out.shape[1:])
        i += 1
    return state


class LoopLaunch:
    """One loop kernel, loaded: called with one data pointer per parameter."""

    def __init__(self, kernel: Any, body: Any) -> None:
        meta = kernel.meta
        self.name, self.body, self.params = kernel.name, body, kernel.params
        try:
            self.node = str(meta.get("node", kernel.name))  # the ONNX node's name, for errors
            self.has_trips, self.has_cond = bool(meta["has_trips"]), bool(meta["has_cond"])
            self.carried, self.scans = int(meta["carried"]), int(meta.get("scans", 0))
            self.inputs = [str(v) for v in meta["inputs"]]
            self.outputs = [str(v) for v in meta["outputs"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"loop kernel {self.name!r}: its meta is malformed ({exc!r})"
            ) from None
        self.fixed = int(self.has_trips) + int(self.has_cond)
        self.captured = len(self.params) - self.fixed - 2 * self.carried - self.scans
        if (
            self.carried < 0
            or self.scans < 0
            or self.carried + self.scans < 1
            or self.captured < 0
            or (self.scans and (not self.has_trips or self.has_cond))
            or len(self.inputs) != 2 + self.carried + self.captured
            or len(self.outputs) != 1 + self.carried + self.scans
        ):
            raise ValueError(
                f"loop kernel {self.name!r}: its meta ({self.carried} carried values, "
                f"{self.scans} scan outputs, {len(self.inputs)} body inputs, "
                f"{len(self.outputs)} body outputs) does not fit its {len(self.params)} parameters"
            )

    def __call__(self, *pointers: int) -> None:
        arrays = [view_at(p, s.shape, s.dtype) for p, s in zip(pointers, self.params, strict=True)]
        head = arrays[: self.fixed]
        trips = head.pop(0) if self.has_trips else None
        cond = head.pop(0) if self.has_cond else None
        at = self.fixed + self.carried + self.captured
        carried = arrays[self.fixed : self.fixed + self.carried]
        captured = arrays[self.fixed + self.carried : at]
        outs, scans = arrays[at : at + self.carried], arrays[at + self.carried :]

        def step(i: int, c: np.ndarray, state: list[np.ndarray]) -> list[np.ndarray]:
            values = [np.array(i, np.int64), c, *state, *captured]
            views = self.body.run_views(dict(zip(self.inputs, values, strict=True)))
            return [views[name] for name in self.outputs]  # (copied by `iterate`)

        with nested(self.name):  # (its body's own loops load and run inside this one)
            final = iterate(step, trips, cond, carried, self.node, scans)
        for out, value in zip(outs, final, strict=True):
            out[...] = value.reshape(out.shape)


def load_loop_kernels(kernels: Sequence[Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The Module loader of "loop" kernels: each body module read from its payload."""
    launches: dict[str, Any] = {}
    for k in kernels:
        launches[k.name] = LoopLaunch(k, read_body(k))
    return launches


_NESTING = threading.local()


@contextlib.contextmanager
def nested(name: str) -> Iterator[None]:
    """Inside loop kernel `name` (running it, or inspecting its body): at most MAX_NESTING loops
    deep, so a file nesting deeper is refused (a `ModuleFormatError`), not a recursion error."""
    from .module import ModuleFormatError

    depth = getattr(_NESTING, "depth", 0)
    if depth >= MAX_NESTING:
        raise ModuleFormatError(f"loop kernel {name!r} nests loops more than {MAX_NESTING} deep")
    _NESTING.depth = depth + 1
    try:
        yield
    finally:
        _NESTING.depth = depth


def read_body(kernel: Any) -> Any:
    """The body `Module` of loop kernel `kernel`, read from its payload (no code runs)."""
    from .module import Module

    return Module.from_bytes(bytes(kernel.payload), f"loop kernel {kernel.name!r}")
