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
import math
import os
import platform
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ...hw import jsontext
from .dispatch import workload_key
from .measure import ERRORS, MeasureResult
from .task import Task, TaskError, get_template

FORMAT = "tensorforge-tune/1"
#: the `tuner` of a confirmation record (`driver.confirm_best`): the default and the cheapest
#: configs of a task re-measured side by side; a task that has such records is decided by them
CONFIRM = "confirm"


class LogWarning(UserWarning):
    """A line of a tuning log that could not be read (skipped)."""


class Record(dict):
    """A trial record read from a log: a dict that also knows where it was read, `where`
    ("path:line"), for the warnings of whoever skips it later."""

    where: str = "a tuning record"


def where(rec: Any) -> str:
    """Where a record was read ("path:line"), for messages."""
    return getattr(rec, "where", "a tuning record")


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
    """Appends records to a JSON-lines file (created with its folder when missing). A last line
    cut off by a crash is ended first, so the next record starts a line of its own."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+b")  # noqa: SIM115
        if self._file.tell() > 0:
            self._file.seek(-1, os.SEEK_END)
            if self._file.read(1) != b"\n":
                self._file.write(b"\n")
                self._file.flush()

    def write(self, task: Task, result: MeasureResult, trial: int, tuner: str = "") -> None:
        line = json.dumps(record(task, result, trial, tuner)) + "\n"
        self._file.write(line.encode("utf-8"))
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TuningLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_REQUIRED = {"task": str, "template": str, "workload": dict, "target": str, "config": dict}


#: optional fields and their types
_OPTIONAL = {"message": str, "tuner": str, "unit": str}


def valid_cost(x: Any) -> bool:
    """Whether `x` is a cost a trial can have: a positive finite number (not a bool)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _known(template: str) -> bool:
    """Whether this version has the template (records of others are checked by `load_best`)."""
    try:
        get_template(template)
    except TaskError:
        return False
    return True


def _check(rec: Any) -> str | None:
    """Why a parsed line is not a trial record (None when it is)."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    if rec.get("format") != FORMAT:
        return f"format must be {FORMAT!r}, not {rec.get('format')!r}"
    for key, kind in _REQUIRED.items():
        if not isinstance(rec.get(key), kind):
            return f"field {key!r} must be a {kind.__name__}, not {rec.get(key)!r:.80}"
    for key, kind in _OPTIONAL.items():
        if key in rec and not isinstance(rec[key], kind):
            return f"field {key!r} must be a {kind.__name__}, not {rec[key]!r:.80}"
    if not rec["target"].strip():
        return f"field 'target' must name a target such as 'llvm', not {rec['target']!r}"
    if _known(rec["template"]):  # records of unknown templates are load_best's error
        if rec["task"] != workload_key(rec["template"], rec["workload"]):
            return f"field 'task' {rec['task']!r:.80} is not the key of its template and workload"
        template = get_template(rec["template"])
        if not template.serves(rec["target"].split()[0]):
            return f"target {rec['target']!r:.40} is not of its template's kind, {template.kind}"
    cost = rec.get("cost")
    if cost is not None and not valid_cost(cost):
        return f"cost must be a positive number or null, not {cost!r:.40}"
    costs = rec.get("costs", [])
    if not isinstance(costs, list) or not all(map(valid_cost, costs)):
        return f"costs must be a list of positive numbers, not {costs!r:.80}"
    trial = rec.get("trial", 0)
    if isinstance(trial, bool) or not isinstance(trial, int):
        return f"trial must be an int, not {trial!r:.40}"
    if rec.get("error", "") not in ("", *ERRORS):
        return f"error must be one of {list(ERRORS)} or empty, not {rec.get('error')!r:.40}"
    return None


def read_log(path: str | Path) -> Iterator[dict[str, Any]]:
    """The trial records of a log (`Record`s: dicts that know their file and line); a line that
    is not JSON or not a consistent trial record (a wrong type, a cost that is not a positive
    finite number, a task key that is not its template's and workload's, a target of another
    kind) is skipped with a `LogWarning` naming the file and line.

    Raises:
        FileNotFoundError: when the log does not exist.
    """
    path = Path(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = jsontext.loads(line)
            except json.JSONDecodeError as exc:
                warnings.warn(f"{path}:{lineno}: skipped, not JSON ({exc.msg})", LogWarning,
                              stacklevel=2)  # fmt: skip
                continue
            reason = _check(rec)
            if reason:
                warnings.warn(f"{path}:{lineno}: skipped, not a tuning record ({reason})",
                              LogWarning, stacklevel=2)  # fmt: skip
                continue
            out = Record(rec)
            out.where = f"{path}:{lineno}"
            yield out


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Every trial record of a log (`read_log`, its skipped lines warned about once each).

    Raises:
        ValueError: the file has lines but none is a tuning record (a model or some other file
            given as the log by mistake).
        FileNotFoundError: when the log does not exist.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LogWarning)
        records = list(read_log(path))
    skipped = [w for w in caught if issubclass(w.category, LogWarning)]
    if skipped and not records:
        raise ValueError(f"{path} is not a tuning log: no line of it is a tuning record "
                         f"({skipped[0].message})")  # fmt: skip
    for w in caught:
        warnings.warn(w.message, stacklevel=3)
    return records


def best_records(
    records: Iterable[dict[str, Any]], target_kind: str | None = None
) -> dict[str, dict]:
    """The successful record of least cost per task key (of one target kind when given)."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        if rec.get("error") or rec.get("cost") is None:
            continue
        if target_kind and rec["target"].split()[0] != target_kind:
            continue
        by_task.setdefault(rec["task"], []).append(rec)
    return {key: min(_deciding(recs), key=lambda r: r["cost"]) for key, recs in by_task.items()}


def _deciding(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The successful records of one task that decide its best: its confirmation records
    (`CONFIRM`) when it has any (each single trial's cost may be a lucky timing), else all."""
    confirmed = [r for r in recs if r.get("tuner") == CONFIRM]
    return confirmed or recs


def load_best(paths: str | Path | Iterable[str | Path], target: str) -> dict[str, dict[str, Any]]:
    """{task key: best knob values} of one or more logs, for `target`'s kind. Each task's
    successful records (its confirmation records, `CONFIRM`, when it has any) are taken
    cheapest first until one is a valid point of today's space:
    a record whose workload or config does not fit (a space that changed) is skipped with a
    `LogWarning` naming its file and line, and the next cheapest one is used.

    Raises:
        TaskError: a record names a template this version does not have (naming its file, line
            and task).
        ValueError: a file has lines but no tuning record (it is not a tuning log).
        FileNotFoundError: a log does not exist.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    kind = str(target).split()[0] if str(target).strip() else ""
    if not kind:
        raise ValueError(f"load_best needs a target such as 'llvm', not {target!r}")
    by_task: dict[str, list[dict[str, Any]]] = {}
    for p in paths:
        for rec in load_records(p):
            if not rec.get("error") and rec.get("cost") is not None:
                if rec["target"].split()[0] == kind:
                    by_task.setdefault(rec["task"], []).append(rec)
    out = {}
    for key, recs in by_task.items():
        recs = sorted(_deciding(recs), key=lambda r: r["cost"])
        first = recs[0]
        try:
            get_template(first["template"])
        except TaskError as exc:
            raise TaskError(f"{where(first)}: tuning log record for {key[:80]}: {exc}") from exc
        try:
            space = Task(first["template"], first["workload"], first["target"]).space
        except ValueError as exc:
            warnings.warn(f"{where(first)}: skipped with the {len(recs) - 1} other records of "
                          f"{key[:80]}: {exc}", LogWarning, stacklevel=2)  # fmt: skip
            continue
        for rec in recs:
            try:
                reason = space.why_invalid(space.from_values(rec["config"]).values)
            except ValueError as exc:
                reason = str(exc)
            if reason:
                warnings.warn(f"{where(rec)}: skipped, config {rec['config']} is not a valid "
                              f"point of today's space: {reason}", LogWarning,
                              stacklevel=2)  # fmt: skip
                continue
            out[key] = dict(rec["config"])
            break
    return out
