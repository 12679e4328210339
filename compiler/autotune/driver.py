"""Tuning a whole model: extract its tasks, tune each, log every trial.

`extract_tasks(model, target)` compiles the model once with a `TaskRecorder` active, so each
operator strategy reports the tunable workload it would build; the distinct workloads become
`Task`s weighted by how often the model runs them (ResNet-18 has 20 convolutions but 12
distinct ones). `tune_tasks` tunes them one after another with one builder and runner, shows a
progress bar per task (trials, failures, best so far) and appends every trial to a log; run
again with the same log, it resumes where it stopped.

Example:
    >>> from tensorforge.compiler.frontend import from_onnx
    >>> from tensorforge.compiler.frontend.onnx_builders import small_cnn
    >>> tasks = extract_tasks(from_onnx(small_cnn()), "llvm")
    >>> sorted({t.template for t in tasks})
    ['x86.conv2d_nchwc', 'x86.dense']
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .dispatch import TaskRecorder
from .log import CONFIRM, TuningLog, load_records
from .measure import Builder, MeasureResult, Runner
from .task import Task, TaskError, get_template
from .tuner import Tuner, check_budget, make_tuner


def extract_tasks(
    model: Any,
    target: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    calibration: Any = None,
) -> list[Task]:
    """The distinct tunable workloads of a model for a target, most frequent first.

    Args:
        model: what `tensorforge.compile` takes (ONNX path/bytes/proto or a Graph).
        target: "llvm" or a "vta ..." target; tasks are those of the target's kind (the CPU
            kernels of a vta model are not included).
        input_shapes, calibration: as for `tensorforge.compile`.
    """
    from ... import api
    from ..target import Target

    tgt = Target.parse(target)
    with TaskRecorder() as rec:
        api.compile(model, str(tgt), input_shapes=input_shapes, calibration=calibration)
    tasks = []
    for key, count in rec.counts.most_common():
        template, workload = rec.workloads[key]
        if get_template(template).serves(tgt.kind):
            try:
                tasks.append(Task(template, workload, str(tgt), weight=count))
            except TaskError as exc:  # e.g. sizes beyond the template's bounds: keeps its default
                warnings.warn(f"not tuned (it keeps its default config): {exc}", stacklevel=2)
    return tasks


@dataclass
class TaskSummary:
    """How tuning one task went: trials, failures, the default's and the best cost."""

    task: Task
    trials: int = 0
    failures: int = 0
    best_cost: float | None = None
    best_values: dict[str, Any] | None = None
    default_cost: float | None = None
    errors: dict[str, int] = field(default_factory=dict)


def _describe_cost(task: Task, cost: float) -> str:
    if not math.isfinite(cost):
        return "-"
    if task.unit == "cycles":
        return f"{cost:,.0f} cycles"
    return f"{task.flops / cost / 1e9:.1f} GFLOP/s"


def tune_tasks(
    tasks: Sequence[Task],
    n_trial: int,
    builder: Builder,
    runner: Runner,
    log: str | Path | None = None,
    tuner: str = "xgb",
    batch_size: int = 8,
    seed: int = 0,
    early_stopping: int | None = None,
    progress: bool = True,
    tuner_options: dict[str, Any] | None = None,
    confirm: int = 0,
) -> list[TaskSummary]:
    """Tune each task with up to `n_trial` trials; the default config is always measured first.

    Trials already in `log` for a task count toward its budget (resume); with the xgb tuner,
    the log's trials of other tasks warm-start the cost model (transfer learning).
    A KeyboardInterrupt stops tuning; every finished trial is already in the log. With
    `confirm` > 0, a wall-time task's `confirm` best configs and its default are re-measured
    side by side after its trials (`confirm_best`), and those timings decide its best.

    Raises:
        ValueError: `n_trial`, `batch_size` or `early_stopping` is less than 1, `confirm` is
            negative, or `log` exists but is not a tuning log (it is never appended to then).
    """
    check_budget(n_trial, batch_size, early_stopping)
    if isinstance(confirm, bool) or not isinstance(confirm, int) or confirm < 0:
        raise ValueError(f"confirm must be a count of configs >= 0, not {confirm!r}")
    history = _history(log)
    summaries = []
    out = TuningLog(log) if log is not None else None
    try:
        for k, task in enumerate(tasks):
            options = dict(tuner_options or {})
            if tuner == "xgb":
                others = [r for r in history if r["task"] != task.key]
                options.setdefault("history", [r for r in others if r.get("tuner") != CONFIRM])
            t = make_tuner(tuner, task, seed=seed, **options)
            loaded = t.load_history(history)
            summary = TaskSummary(task)
            _count(summary, [r for _, r in t.trials])
            summary.default_cost = _logged_default(task, history)
            desc = f"[{k + 1}/{len(tasks)}] {task.describe()}"
            with tqdm(total=n_trial, desc=desc, unit="trial", disable=not progress,
                      initial=min(loaded, n_trial), leave=True) as bar:  # fmt: skip

                def on_trial(tuner_: Tuner, r: MeasureResult, bar: tqdm = bar,
                             s: TaskSummary = summary) -> None:  # fmt: skip
                    _count(s, [r])
                    if r.values == s.task.space.default.values and r.ok:
                        s.default_cost = r.cost
                    bar.update(1)
                    bar.set_postfix_str(f"best {_describe_cost(s.task, tuner_.best_cost)}, "
                                        f"{s.failures} failed")  # fmt: skip

                if summary.default_cost is None and task.space.default.index not in t.visited:
                    default = [task.space.default.index]
                    t.update(*t.measure_indices(default, builder, runner, out, on_trial))
                t.tune(n_trial, builder, runner, batch_size, out, on_trial, early_stopping)
            summary.best_cost = t.best_cost if t.best_values is not None else None
            summary.best_values = t.best_values
            confirmed = any(r["task"] == task.key and r.get("tuner") == CONFIRM for r in history)
            if confirm and task.unit == "s" and (len(t.trials) > loaded or not confirmed):
                best = confirm_best(task, t, builder, runner, out, confirm)
                if best is not None:
                    summary.best_cost, summary.best_values = best.cost, best.values
            summaries.append(summary)
            history.extend(_as_records(task, t, skip=loaded))
    finally:
        if out is not None:
            out.close()
    return summaries


def confirm_best(
    task: Task,
    tuner: Tuner,
    builder: Builder,
    runner: Runner,
    log: TuningLog | None = None,
    finalists: int = 3,
    rounds: int = 5,
) -> MeasureResult | None:
    """Re-measure the `finalists` cheapest distinct configs of a tuned task and its default
    side by side, `rounds` times in alternating order (so that other jobs on a shared machine
    slow them alike), and log each one's median as a `CONFIRM` record, which then decides the
    task's best (`log.load_best`): under load the cheapest of many single timings is the
    luckiest one as often as the fastest config. Returns the confirmed best (None when none
    could be re-measured)."""
    ranked = sorted((r for _, r in tuner.trials if r.ok), key=lambda r: r.cost)
    configs: list[dict[str, Any]] = []
    for values in [r.values for r in ranked[: finalists * 4]]:
        if values not in configs and len(configs) < finalists:
            configs.append(dict(values))
    if task.space.default.values not in configs:
        configs.append(dict(task.space.default.values))
    built = [(v, art) for v, (art, _) in zip(configs, builder.build(task, configs), strict=True)
             if art is not None]  # fmt: skip
    times: list[list[float]] = [[] for _ in built]
    for rnd in range(rounds if built else 0):
        order = list(range(len(built)))[:: 1 if rnd % 2 == 0 else -1]
        for k, outcome in zip(order, runner.run([built[k][1] for k in order]), strict=True):
            times[k].extend(outcome.costs if not outcome.error else [])
    results = [MeasureResult(dict(v), statistics.median(ts), ts)
               for (v, _), ts in zip(built, times, strict=True) if ts]  # fmt: skip
    for r in results:
        if log is not None:
            log.write(task, r, len(tuner.trials), CONFIRM)
    return min(results, key=lambda r: r.cost or math.inf) if results else None


def _count(s: TaskSummary, results: Sequence[MeasureResult]) -> None:
    for r in results:
        s.trials += 1
        if not r.ok:
            s.failures += 1
            s.errors[r.error] = s.errors.get(r.error, 0) + 1


def _history(log: str | Path | None) -> list[dict[str, Any]]:
    """The records of the log to resume from (a file that is not a tuning log is an error: it
    is never appended to)."""
    if log is None or not Path(log).exists():
        return []
    try:
        return load_records(log)
    except ValueError as exc:
        raise ValueError(f"{exc}; give the log another path") from None


def _logged_default(task: Task, history: list[dict[str, Any]]) -> float | None:
    for rec in history:
        if rec["task"] == task.key and rec["config"] == task.space.default.values:
            return rec.get("cost")
    return None


def _as_records(task: Task, tuner: Tuner, skip: int) -> list[dict[str, Any]]:
    """This run's trials (after the `skip` loaded from the log, already in the history) as
    minimal log records, for the next task's transfer learning."""
    return [{"task": task.key, "template": task.template, "workload": dict(task.workload),
             "target": task.target, "config": dict(r.values), "cost": r.cost, "error": r.error}
            for _, r in tuner.trials[skip:]]  # fmt: skip
