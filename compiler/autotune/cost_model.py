"""The tuner's statistical cost model: gradient-boosted trees that rank configs (TVM section 5.2).

`XGBCostModel` learns from measured configs which unmeasured ones are likely fast. It is
trained with XGBoost's pairwise ranking objective, one query group per task, on each task's
normalized throughput (the task's best cost divided by the config's cost, 1 for the best, 0 for
a failed trial), so only the order of configs within a task matters and tasks whose costs
differ by orders of magnitude (or are in seconds and cycles) train one model together. The
regression objective ("reg") fits the same label with squared error instead.

Features:

- "itervar": the loop-IR features of the lowered config (`features.loop_features`); a template
  without loop IR (the accelerator's ``vta.conv2d``) falls back to the knob vector;
- "knob": the knob vector (`ConfigSpace.vector`).

Loop features are cached per (task, target, index), by default in one cache shared by the
models of this process (a later task's model finds the trials of earlier tasks, its history,
already lowered). Transfer learning: `fit_history` keeps the trials of
*other* tasks from tuning logs and trains on them together with the current task's trials, so a
new task starts with a model. Loop features transfer across templates (they share one vector);
knob vectors only between tasks of the same template.

Example:
    >>> from tensorforge.compiler.autotune.task import Task
    >>> task = Task("x86.dense", {"m": 4, "n": 32, "k": 64, "dtype": "float32",
    ...                           "prepacked": True}, "llvm")
    >>> model = XGBCostModel(feature="knob", seed=0)
    >>> indices = [int(i) for i in task.space.valid_indices()[:40]]
    >>> costs = [1.0 + task.space.vector(i)[1] for i in indices]  # larger bn: slower
    >>> _ = model.fit([(task, indices, costs)])
    >>> scores = model.predict(task, indices)
    >>> bool(scores[int(costs.index(min(costs)))] > scores[int(costs.index(max(costs)))])
    True
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .features import FEATURE_LENGTH, loop_features
from .space import ConfigSpace, SpaceError
from .task import Task, TaskError

FEATURES = ("itervar", "knob")
OBJECTIVES = ("rank", "reg")

#: one training group: a task, measured indices of its space and their costs (None: failed)
Group = tuple[Task, Sequence[int], Sequence[float | None]]

#: loop-feature vectors shared by the models of this process: (task key, target, index) -> row
_SHARED_CACHE: dict[tuple[str, str, int], np.ndarray] = {}
#: the shared cache forgets its oldest quarter beyond this many vectors (1.4 kB each)
SHARED_CACHE_LIMIT = 1 << 16


def normalized_throughput(costs: Sequence[float | None]) -> np.ndarray:
    """Each trial's label: the best cost over its cost (1 for the best), 0 for a failed trial.

    Example:
        >>> normalized_throughput([2.0, None, 4.0]).tolist()
        [1.0, 0.0, 0.5]
    """
    ok = [c for c in costs if c is not None and c > 0 and math.isfinite(c)]
    best = min(ok) if ok else 1.0
    return np.array(
        [best / c if c is not None and c > 0 and math.isfinite(c) else 0.0 for c in costs],
        np.float32,
    )


class _KnobTable:
    """Vectorized `ConfigSpace.vector` for many indices at once (mixed radix, table lookup)."""

    def __init__(self, space: ConfigSpace) -> None:
        self.space = space
        self.tables = [
            np.array([k.numeric(p) for p in range(len(k.values))], np.float32) for k in space.knobs
        ]

    def vectors(self, indices: np.ndarray) -> np.ndarray:
        pos = self.space.positions_of(indices)
        out = np.empty(pos.shape, np.float32)
        for k, table in enumerate(self.tables):
            out[:, k] = table[pos[:, k]]
        return out


def _xgboost() -> Any:
    from tensorforge.extras import require

    return require("xgboost", "the tuner's XGBoost cost model (or --tuner random|grid|ga)")


class XGBCostModel:
    """Gradient-boosted trees over config features that score configs (higher: faster).

    Args:
        feature: "itervar" (loop-IR features, the knob vector where a template has no loop IR)
            or "knob" (the knob vector).
        objective: "rank" (pairwise ranking, one group per task) or "reg" (squared error on
            the normalized throughput).
        seed: the random seed of training and history subsampling.
        n_rounds: boosting rounds per fit.
        max_history: at most this many history records are kept by `fit_history`.
        params: XGBoost parameters overriding the defaults.
        shared_cache: keep loop features in the process-wide cache (else in this model's).
    """

    def __init__(
        self,
        feature: str = "itervar",
        objective: str = "rank",
        seed: int = 0,
        n_rounds: int = 80,
        max_history: int = 1024,
        params: Mapping[str, Any] | None = None,
        shared_cache: bool = True,
    ) -> None:
        if feature not in FEATURES:
            raise ValueError(f"feature must be one of {FEATURES}, not {feature!r}")
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, not {objective!r}")
        _xgboost()  # a missing extra is said before tuning starts, not after a batch
        self.feature = feature
        self.objective = objective
        self.seed = seed
        self.n_rounds = n_rounds
        self.max_history = max_history
        self.params: dict[str, Any] = {
            "max_depth": 6,
            "eta": 0.2,
            "min_child_weight": 1,
            "subsample": 1.0,
            "colsample_bytree": 1.0,
            "lambda": 1.0,
            "nthread": 1,
            "seed": seed,
            "verbosity": 0,
        }
        if objective == "rank":
            self.params.update(objective="rank:pairwise", lambdarank_pair_method="mean",
                               lambdarank_num_pair_per_sample=8)  # fmt: skip
        else:
            self.params.update(objective="reg:squarederror")
        self.params.update(params or {})
        self._booster: Any = None
        self._key: tuple | None = None  # the feature family the booster was trained on
        self._cache = _SHARED_CACHE if shared_cache else {}
        self._tables: dict[tuple[str, str], _KnobTable] = {}
        self._history: list[tuple[np.ndarray, np.ndarray]] = []
        self._history_key: tuple | None = None

    # ---- features ------------------------------------------------------------------------------

    def uses_loop_features(self, task: Task) -> bool:
        """Whether `task`'s configs get loop-IR features (else the knob vector)."""
        return self.feature == "itervar" and task.tmpl.lower is not None

    def feature_key(self, task: Task) -> tuple:
        """Tasks with equal keys share a feature space (and so can train one model)."""
        if self.uses_loop_features(task):
            return ("itervar", FEATURE_LENGTH)
        return ("knob", task.template, len(task.space.knobs))

    def features(self, task: Task, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The feature matrix of points of `task`'s space, one row per index (float32)."""
        idx = np.asarray(indices, np.int64).reshape(-1)
        tkey = (task.key, task.target)
        if not self.uses_loop_features(task):
            table = self._tables.get(tkey)
            if table is None:
                table = self._tables[tkey] = _KnobTable(task.space)
            return table.vectors(idx)
        out = np.empty((len(idx), FEATURE_LENGTH), np.float32)
        for row, i in enumerate(idx.tolist()):
            key = (*tkey, i)
            vec = self._cache.get(key)
            if vec is None:
                vec = self._cache[key] = self._lowered_features(task, i)
            out[row] = vec
        if self._cache is _SHARED_CACHE and len(_SHARED_CACHE) > SHARED_CACHE_LIMIT:
            for key in list(itertools.islice(_SHARED_CACHE, SHARED_CACHE_LIMIT // 4)):
                del _SHARED_CACHE[key]
        return out

    def cached(self, task: Task, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Which points' features are at hand without lowering (always, for knob vectors)."""
        idx = np.asarray(indices, np.int64).reshape(-1)
        if not self.uses_loop_features(task):
            return np.ones(len(idx), bool)
        tkey = (task.key, task.target)
        return np.array([(*tkey, i) in self._cache for i in idx.tolist()], bool)

    @staticmethod
    def _lowered_features(task: Task, index: int) -> np.ndarray:
        try:
            func = task.lower(task.space.get(index).values)
        except Exception:  # noqa: BLE001 - a config that fails to lower has no features
            return np.zeros(FEATURE_LENGTH, np.float32)
        return loop_features(func)

    # ---- training ------------------------------------------------------------------------------

    @property
    def fitted(self) -> bool:
        """Whether `predict` can be called."""
        return self._booster is not None

    @property
    def n_history(self) -> int:
        """How many history trials `fit_history` kept."""
        return sum(len(y) for _, y in self._history)

    def _group(self, task: Task, indices: Sequence[int], costs: Sequence[float | None]) -> tuple:
        if len(indices) != len(costs):
            raise ValueError(f"{len(indices)} indices but {len(costs)} costs")
        return self.features(task, indices), normalized_throughput(costs)

    def fit(self, groups: Sequence[Group]) -> XGBCostModel:
        """Train on measured configs of one or more tasks, plus the history of `fit_history`
        when it shares their feature family (`feature_key`).

        Args:
            groups: (task, indices, costs) per task; a cost of None is a failed trial.

        Raises:
            ValueError: when the groups are of different feature families (knob vectors of
                different templates) or the lengths of indices and costs differ.
        """
        keys = {self.feature_key(t) for t, _, _ in groups}
        if len(keys) > 1:
            raise ValueError(f"training groups must share one feature family, not {keys}")
        key = keys.pop() if keys else self._history_key
        data = list(self._history) if key == self._history_key else []
        data += [self._group(t, i, c) for t, i, c in groups]
        self._train(data, key)
        return self

    def _train(self, data: list[tuple[np.ndarray, np.ndarray]], key: tuple | None) -> None:
        xgb = _xgboost()

        if self.objective == "rank":  # a group without two different labels has no pairs
            data = [(x, y) for x, y in data if len(y) > 1 and np.ptp(y) > 0]
        data = [(x, y) for x, y in data if len(y)]
        if not data:
            return
        widths = {x.shape[1] for x, _ in data}
        if len(widths) > 1:
            raise ValueError(f"training groups have feature vectors of lengths {sorted(widths)}")
        x = np.concatenate([x for x, _ in data])
        y = np.concatenate([y for _, y in data])
        dmat = xgb.DMatrix(x, label=y)
        if self.objective == "rank":
            dmat.set_group([len(g) for _, g in data])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._booster = xgb.train(self.params, dmat, self.n_rounds)
        self._key = key

    def predict(self, task: Task, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Scores of points of `task`'s space: higher predicts faster (float64, any scale).

        Raises:
            RuntimeError: before the model is fitted, or when `task`'s features are of another
                family than the model was trained on (knob vectors of another template).
        """
        if self._booster is None:
            raise RuntimeError("the cost model is not fitted yet")
        if self.feature_key(task) != self._key:
            raise RuntimeError(f"{task.template} has features {self.feature_key(task)}, the "
                               f"model was trained on {self._key}")  # fmt: skip
        x = self.features(task, indices)
        if len(x) == 0:
            return np.zeros(0)
        return np.asarray(self._booster.inplace_predict(x), np.float64)

    # ---- transfer learning ---------------------------------------------------------------------

    def fit_history(self, records: Iterable[Mapping[str, Any]], task: Task | None = None) -> int:
        """Keep trials of other tasks from tuning-log records (`log.read_log`) and train on them;
        later `fit` calls train on them together with their own groups.

        Args:
            records: log records (task, template, workload, target, config, cost, error).
            task: the task about to be tuned: its own records are skipped (a tuner loads those
                with `Tuner.load_history`) and only records whose features are compatible with
                it are kept. Without it, the largest compatible family of records is kept.

        Returns:
            How many records were kept (at most `max_history`).
        """
        by_task: dict[str, tuple[Task, list[int], list[float | None]]] = {}
        bad: set[str] = set()
        for rec in records:
            key = rec.get("task")
            if not isinstance(key, str) or key in bad or (task is not None and key == task.key):
                continue
            entry = by_task.get(key)
            if entry is None:
                try:
                    other = Task(str(rec["template"]), dict(rec["workload"]), str(rec["target"]))
                    other.space  # noqa: B018 - builds the space, may reject the workload
                except (TaskError, KeyError, TypeError, ValueError):
                    bad.add(key)
                    continue
                entry = by_task[key] = (other, [], [])
            try:
                index = entry[0].space.from_values(rec["config"]).index
            except (SpaceError, KeyError, TypeError):
                continue
            cost = rec.get("cost")
            ok = not rec.get("error") and isinstance(cost, int | float) and cost > 0
            entry[1].append(index)
            entry[2].append(float(cost) if ok else None)
        families: dict[tuple, list[tuple[Task, list[int], list[float | None]]]] = {}
        for entry in by_task.values():
            families.setdefault(self.feature_key(entry[0]), []).append(entry)
        if task is not None:
            key = self.feature_key(task)
            chosen = families.get(key, [])
        elif families:
            key, chosen = max(families.items(), key=lambda kv: sum(len(e[1]) for e in kv[1]))
        else:
            key, chosen = None, []
        chosen = self._subsample(chosen)
        self._history = [self._group(t, i, c) for t, i, c in chosen if i]
        self._history_key = key
        if self._history:
            self._train(list(self._history), key)
        return self.n_history

    def _subsample(self, entries: list[tuple[Task, list[int], list[float | None]]]) -> list:
        total = sum(len(e[1]) for e in entries)
        if total <= self.max_history:
            return entries
        rng = np.random.default_rng(self.seed)
        keep = self.max_history / total
        out = []
        for t, idx, costs in entries:
            n = max(2, int(round(len(idx) * keep)))
            pick = np.sort(rng.choice(len(idx), min(n, len(idx)), replace=False))
            out.append((t, [idx[k] for k in pick], [costs[k] for k in pick]))
        return out
