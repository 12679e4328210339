"""Tuning logs: JSON lines, one record per trial, appended as trials finish.

A record holds the task (template, workload, target), the config's knob values, the cost (the
median, in the task's unit) and every repeat, the error kind and message of a failed trial, the
build and run seconds, when, on which machine, by which tuner and TensorForge version. Reading a
log skips corrupt or foreign lines with a warning naming the line, so a log cut off by a crash
still loads. Files are appended line by line and flushed, so an interrupt loses nothing that
finished.

Example:
    >>> import tempfile, os
    >>> from tensorforge.compiler.autotune.task import Task
    >>> task = Task("x86.dense", {"m": 1, "n": 8, "k": 8, "dtype": "float32",
    ...                           "prepacked": True}, "llvm")
    >>> path = os.path.join(tempfile.mkdtemp(), "tune.jsonl")
    >>> with TuningLog(path) as log:
    ...     log.write(task, MeasureResult(task.space.default.values, 2e-6, [2e-6]), trial=0)
    >>> [r["cost"] for r in read_log(path)]
    [2e-06]
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .measure import ERRORS, MeasureResult
from .task import Task, TaskError

FORMAT = "tensorforge-tune/1"


class LogWarning(UserWarning):
    """A line of a tuning log that could not be read (skipped)."""


def machine() -> str:
    """This machine, as logs record it: OS, architecture, CPU count."""
    return f"{platform.system()} {platform.machine()} {os.cpu_count()} cpus ({platform.node()})"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tensorforge")
    except PackageNotFoundError:
        return "unknown"


def record(task: Task, result: MeasureResult, trial: int, tuner: str = "") -> dict[str, Any]:
    """The log record of one trial."""
    return {
        "format": FORMAT,
        "task": task.key,
        "template": task.template,
        "workload": dict(task.workload),
        "target": task.target,
        "config": dict(result.values),
        "cost": result.cost,
        "costs": list(result.costs),
        "unit": task.unit,
        "error": result.error,
        "message": result.message[:2000],
        "build_s": round(result.build_s, 4),
        "run_s": round(result.run_s, 4),
        "trial": trial,
        "tuner": tuner,
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "version": _version(),
    }


class TuningLog:
    """Appends records to a JSON-lines file (created with its folder when missing)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, task: Task, result: MeasureResult, trial: int, tuner: str = "") -> None:
        self._file.write(json.dumps(record(task, result, trial, tuner)) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TuningLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_REQUIRED = {"task": str, "template": str, "workload": dict, "target": str, "config": dict}


def _check(rec: Any) -> str | None:
    """Why a parsed line is not a trial record (None when it is)."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    if rec.get("format") != FORMAT:
        return f"format must be {FORMAT!r}, not {rec.get('format')!r}"
    for key, kind in _REQUIRED.items():
        if not isinstance(rec.get(key), kind):
            return f"field {key!r} must be a {kind.__name__}"
    cost = rec.get("cost")
    if cost is not None and (not isinstance(cost, int | float) or not cost > 0):
        return f"cost must be a positive number or null, not {cost!r}"
    if rec.get("error", "") not in ("", *ERRORS):
        return f"error must be one of {list(ERRORS)} or empty, not {rec.get('error')!r}"
    return None


def read_log(path: str | Path) -> Iterator[dict[str, Any]]:
    """The trial records of a log; unreadable lines are skipped with a `LogWarning` naming the
    file and line.

    Raises:
        FileNotFoundError: when the log does not exist.
    """
    path = Path(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                warnings.warn(f"{path}:{lineno}: skipped, not JSON ({exc.msg})", LogWarning,
                              stacklevel=2)  # fmt: skip
                continue
            reason = _check(rec)
            if reason:
                warnings.warn(f"{path}:{lineno}: skipped, not a tuning record ({reason})",
                              LogWarning, stacklevel=2)  # fmt: skip
                continue
            yield rec


def best_records(
    records: Iterable[dict[str, Any]], target_kind: str | None = None
) -> dict[str, dict]:
    """The successful record of least cost per task key (of one target kind when given)."""
    best: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec.get("error") or rec.get("cost") is None:
            continue
        if target_kind and rec["target"].split()[0] != target_kind:
            continue
        old = best.get(rec["task"])
        if old is None or rec["cost"] < old["cost"]:
            best[rec["task"]] = rec
    return best


def load_best(paths: str | Path | Iterable[str | Path], target: str) -> dict[str, dict[str, Any]]:
    """{task key: best knob values} of one or more logs, for `target`'s kind; each record's
    template and config are checked (an unknown template is an error naming the line's task).

    Raises:
        TaskError: a record names a template this version does not have.
        FileNotFoundError: a log does not exist.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    records: list[dict[str, Any]] = []
    for p in paths:
        records.extend(read_log(p))
    kind = str(target).split()[0]
    out = {}
    for key, rec in best_records(records, kind).items():
        try:
            task = Task(rec["template"], rec["workload"], rec["target"])
            task.space.from_values(rec["config"])
        except TaskError as exc:
            raise TaskError(f"tuning log record for {key[:80]}: {exc}") from exc
        except ValueError as exc:
            warnings.warn(f"tuning log record for {key[:80]} skipped: {exc}", LogWarning,
                          stacklevel=2)  # fmt: skip
            continue
        out[key] = dict(rec["config"])
    return out
