"""Tuners: choose the next configs to measure, learn from the results.

`Tuner.tune` is the loop every tuner shares: ask for a batch of unvisited configs, measure it
(build and run), log each trial as it finishes, update, until the trial budget is spent or the
space is exhausted. Subclasses only choose batches: `RandomTuner`, `GridTuner`, `GATuner` (a
genetic algorithm) here, `XGBTuner` (the cost model with simulated annealing) in `xgb.py`.

Costs are minimized (seconds or cycles); failed trials count against the budget and are never
chosen as best.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .log import CONFIRM, LogWarning, TuningLog, valid_cost, where
from .measure import Builder, MeasureResult, Runner, measure
from .space import SpaceError
from .task import Task


def check_budget(
    n_trial: int, batch_size: int, early_stopping: int | None, least_trials: int = 1
) -> None:
    """Raise a ValueError naming the first of the tuning budget's numbers that is not an int
    in its range: `n_trial` >= `least_trials`, `batch_size` >= 1, `early_stopping` None or >= 1."""
    for name, value, low in (("n_trial", n_trial, least_trials), ("batch_size", batch_size, 1),
                             ("early_stopping", early_stopping, 1)):  # fmt: skip
        if value is None and name == "early_stopping":
            continue
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise ValueError(f"{name} must be an int of at least {low}, not {value!r}")


class Tuner:
    """The shared loop and book-keeping; subclasses implement `next_batch` (and `update`)."""

    name = "base"

    def __init__(self, task: Task, seed: int = 0) -> None:
        self.task = task
        self.space = task.space
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.visited: set[int] = set()
        self.trials: list[tuple[int, MeasureResult]] = []
        self.best_cost = math.inf
        self.best_values: dict[str, Any] | None = None
        valid = self.space.valid_indices()
        self._n_valid = len(valid) if valid is not None else len(self.space)

    # ---- what subclasses implement -------------------------------------------------------------

    def next_batch(self, n: int) -> list[int]:
        """Up to `n` unvisited valid indices to measure next."""
        raise NotImplementedError

    def update(self, indices: Sequence[int], results: Sequence[MeasureResult]) -> None:
        """Learn from measured configs (the default only keeps the book)."""

    # ---- shared ----------------------------------------------------------------------------------

    def has_next(self) -> bool:
        return len(self.visited) < self._n_valid

    def _record(self, indices: Sequence[int], results: Sequence[MeasureResult]) -> None:
        for i, r in zip(indices, results, strict=True):
            self.visited.add(int(i))
            self.trials.append((int(i), r))
            if r.ok and r.cost is not None and r.cost < self.best_cost:
                self.best_cost, self.best_values = r.cost, dict(r.values)

    def load_history(self, records: Iterable[dict[str, Any]]) -> int:
        """Feed earlier trials of this task (log records) as if measured now; returns how many.
        Records of other tasks are ignored; one whose config is not a valid point of today's
        space (a space that changed) is skipped with a `LogWarning` naming where it was read."""
        indices, results = [], []
        for rec in records:
            if rec.get("task") != self.task.key or rec.get("tuner") == CONFIRM:
                continue  # confirmation records re-measure trials: they are not trials
            error = rec.get("error") or ""
            try:
                config = self.space.from_values(rec.get("config"))
                reason = self.space.why_invalid(config.values)
                if reason and error != "invalid":
                    raise SpaceError(f"config {config.values} is invalid: {reason}")
            except SpaceError as exc:
                warnings.warn(f"{where(rec)}: skipped, not a point of today's space of "
                              f"{self.task.describe()}: {exc}", LogWarning,
                              stacklevel=2)  # fmt: skip
                continue
            cost = rec.get("cost")
            cost = float(cost) if valid_cost(cost) and not error else None
            costs = rec.get("costs")
            costs = [float(c) for c in costs if valid_cost(c)] if isinstance(costs, list) else []
            message = rec.get("message")
            indices.append(config.index)
            results.append(MeasureResult(config.values, cost, costs,
                                         error or ("" if cost is not None else "run_error"),
                                         message if isinstance(message, str) else ""))  # fmt: skip
        if indices:
            self.tell(indices, results)
        return len(indices)

    def tell(self, indices: Sequence[int], results: Sequence[MeasureResult]) -> None:
        """Record points measured elsewhere (not through `tune`) and learn from them."""
        self._record(indices, results)
        self.update(indices, results)

    def tune(
        self,
        n_trial: int,
        builder: Builder,
        runner: Runner,
        batch_size: int = 8,
        log: TuningLog | None = None,
        on_trial: Callable[[Tuner, MeasureResult], None] | None = None,
        early_stopping: int | None = None,
    ) -> dict[str, Any] | None:
        """Measure up to `n_trial` configs in all (trials already loaded count); returns the best
        knob values found (None when every trial failed).

        Each trial is logged and recorded as it finishes, so an interrupt (KeyboardInterrupt
        propagates) keeps every finished trial. `on_trial(tuner, result)` is called after each
        trial (progress bars); `early_stopping`: stop after this many trials without a better
        config.

        Raises:
            ValueError: `n_trial` is negative, `batch_size` or `early_stopping` less than 1.
        """
        check_budget(n_trial, batch_size, early_stopping, least_trials=0)
        last_better = len(self.trials)
        while len(self.trials) < n_trial and self.has_next():
            want = min(batch_size, n_trial - len(self.trials))
            batch = [i for i in self.next_batch(want) if i not in self.visited][:want]
            if not batch:
                break
            indices, results = self.measure_indices(batch, builder, runner, log, on_trial)
            if any(r.ok and r.cost == self.best_cost for r in results):
                last_better = len(self.trials)
            self.update(indices, results)
            if early_stopping and len(self.trials) - last_better >= early_stopping:
                break
        return self.best_values

    def measure_indices(
        self,
        batch: list[int],
        builder: Builder,
        runner: Runner,
        log: TuningLog | None,
        on_trial: Callable[[Tuner, MeasureResult], None] | None,
    ) -> tuple[list[int], list[MeasureResult]]:
        """Measure these points now, recording and logging each trial as it finishes; returns
        the (indices, results) in the order they finished (without calling `update`)."""
        batch = list(dict.fromkeys(int(i) for i in batch))  # a point measured twice is one trial
        configs = [self.space.get(i).values for i in batch]
        indices: list[int] = []
        results: list[MeasureResult] = []

        def finished(r: MeasureResult) -> None:
            index = batch[configs.index(r.values)]
            indices.append(index)
            results.append(r)
            if log is not None:
                log.write(self.task, r, len(self.trials), self.name)
            self._record([index], [r])
            if on_trial:
                on_trial(self, r)

        measure(self.task, configs, builder, runner, seed=self.seed, on_result=finished)
        return indices, results


class RandomTuner(Tuner):
    """Uniform samples without repetition."""

    name = "random"

    def next_batch(self, n: int) -> list[int]:
        return self.space.sample(self.rng, n, self.visited)


class GridTuner(Tuner):
    """Every valid config in index order (for small spaces)."""

    name = "grid"

    def __init__(self, task: Task, seed: int = 0) -> None:
        super().__init__(task, seed)
        self._order = iter(c.index for c in self.space)

    def next_batch(self, n: int) -> list[int]:
        out: list[int] = []
        for i in self._order:
            if i not in self.visited:
                out.append(i)
                if len(out) == n:
                    break
        return out


class GATuner(Tuner):
    """A genetic algorithm: fitness-proportional parents, uniform crossover of knob positions,
    per-knob mutation, the elite kept across generations."""

    name = "ga"

    def __init__(self, task: Task, seed: int = 0, pop_size: int = 16, elite: int = 4,
                 mutation: float = 0.1) -> None:  # fmt: skip
        super().__init__(task, seed)
        self.pop_size, self.elite, self.mutation = pop_size, elite, mutation
        self.scores: dict[int, float] = {}

    def update(self, indices: Sequence[int], results: Sequence[MeasureResult]) -> None:
        for i, r in zip(indices, results, strict=True):
            self.scores[int(i)] = 1.0 / r.cost if r.ok and r.cost else 0.0

    def next_batch(self, n: int) -> list[int]:
        ranked = sorted(self.scores, key=self.scores.get, reverse=True)[: self.pop_size]
        if len(ranked) < 2 or not any(self.scores[i] > 0 for i in ranked):
            return self.space.sample(self.rng, n, self.visited)
        fitness = np.array([self.scores[i] for i in ranked])
        prob = fitness / fitness.sum() if fitness.sum() > 0 else None
        out: list[int] = []
        for _ in range(50 * n):
            a, b = self.rng.choice(len(ranked), 2, p=prob)
            pa, pb = self.space.positions(ranked[a]), self.space.positions(ranked[b])
            child = [x if self.rng.random() < 0.5 else y for x, y in zip(pa, pb, strict=True)]
            for k, knob in enumerate(self.space.knobs):
                if self.rng.random() < self.mutation:
                    child[k] = int(self.rng.integers(len(knob.values)))
            index = self.space.index_of(child)
            if index not in self.visited and index not in out and self.space.is_valid(index):
                out.append(index)
                if len(out) == n:
                    return out
        return out + self.space.sample(self.rng, n - len(out), self.visited | set(out))


TUNERS: dict[str, type[Tuner]] = {"random": RandomTuner, "grid": GridTuner, "ga": GATuner}


def make_tuner(name: str, task: Task, seed: int = 0, **options: Any) -> Tuner:
    """A tuner by name: xgb, random, grid or ga."""
    if name == "xgb":
        from .xgb import XGBTuner

        return XGBTuner(task, seed=seed, **options)
    if name not in TUNERS:
        raise ValueError(f"tuner must be one of xgb, {', '.join(TUNERS)}, not {name!r}")
    return TUNERS[name](task, seed=seed, **options)
