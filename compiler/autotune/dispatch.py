"""How operator strategies ask for a tuned config: a context that answers per workload.

A strategy that has a tunable template calls `query(template, workload)` with the workload's
JSON description; the active context answers with knob values, or None for "use the default
config". Two contexts exist: `ApplyBest` (the best configs of a tuning log, used by
`tensorforge.compile(..., tuning_log=...)`) and `TaskRecorder` (what `extract_tasks` uses to
see which workloads a model asks for, and how often). Outside any context, `query` returns None
and every strategy uses its default config.

Example:
    >>> wl = {"m": 1, "n": 10, "k": 64, "dtype": "float32"}
    >>> with TaskRecorder() as rec:
    ...     query("x86.dense", wl) is None
    True
    >>> rec.counts[workload_key("x86.dense", wl)]
    1
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

_CURRENT: ContextVar[DispatchContext | None] = ContextVar("tensorforge_autotune", default=None)


def workload_key(template: str, workload: Mapping[str, Any]) -> str:
    """The canonical text of a (template, workload) pair: the key of tasks and log records."""
    return template + json.dumps(workload, sort_keys=True, separators=(",", ":"))


def query(template: str, workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The knob values the active context chooses for this workload, or None (the default)."""
    ctx = _CURRENT.get()
    return None if ctx is None else ctx.query(template, dict(workload))


def peek(template: str, workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """As `query`, but neither recorded as a task nor counted as applied: for a decision taken
    before lowering (whether a tuned convolution keeps the layout it was tuned in)."""
    ctx = _CURRENT.get()
    return None if ctx is None else ctx.peek(template, dict(workload))


class DispatchContext:
    """A context (use with `with`) that answers `query` while it is active."""

    def __init__(self) -> None:
        self._token: Any = None

    def query(self, template: str, workload: dict[str, Any]) -> dict[str, Any] | None:
        raise NotImplementedError

    def peek(self, template: str, workload: dict[str, Any]) -> dict[str, Any] | None:
        return None

    def __enter__(self) -> DispatchContext:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)


class TaskRecorder(DispatchContext):
    """Records every queried workload and how many times it was asked for; answers None."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.workloads: dict[str, tuple[str, dict[str, Any]]] = {}

    def query(self, template: str, workload: dict[str, Any]) -> None:
        key = workload_key(template, workload)
        self.counts[key] += 1
        self.workloads.setdefault(key, (template, workload))
        return None


class ApplyBest(DispatchContext):
    """Answers with the given best configs (`{workload key: knob values}`); remembers which
    queries were answered (`applied`) and which fell back to the default (`fallback`)."""

    def __init__(self, best: Mapping[str, dict[str, Any]]) -> None:
        super().__init__()
        self.best = dict(best)
        self.applied: list[str] = []
        self.fallback: list[str] = []

    def query(self, template: str, workload: dict[str, Any]) -> dict[str, Any] | None:
        key = workload_key(template, workload)
        values = self.best.get(key)
        (self.applied if values is not None else self.fallback).append(key)
        return None if values is None else dict(values)

    def peek(self, template: str, workload: dict[str, Any]) -> dict[str, Any] | None:
        values = self.best.get(workload_key(template, workload))
        return None if values is None else dict(values)
