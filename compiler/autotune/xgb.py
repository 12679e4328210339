"""The model-based tuner: an XGBoost cost model explored by simulated annealing (TVM section 5).

`XGBTuner` measures random configs until a batch has a success, then after every measured
batch it retrains its `XGBCostModel` and plans the next batch:

1. *explore*: parallel simulated-annealing chains walk the space (one knob changes per step)
   scored by the model, vectorized over the chains with numpy; the best unvisited points any
   chain met form the plan. Chains persist between plans (warm starts), the worst ones
   restarting from the best measured configs. A space of at most `exhaustive_limit` valid
   points is simply ranked whole by the model instead. Points whose features equal a
   measured point's (a knob without effect on this workload's program) are left out, and at
   most `feature_budget` configs are lowered for loop features per plan.
2. *choose*: from the top ``3 * n`` candidates, pick greedily by score while keeping every two
   picks at least `min_distance` knobs apart (`ConfigSpace.distance`), so a batch does not
   spend trials on near-duplicates; fill up by score when too few qualify.
3. *explore at random*: a fraction `epsilon` of each batch is uniform random samples.

Example:
    >>> import numpy as np
    >>> from tensorforge.compiler.autotune.task import Task
    >>> task = Task("x86.dense", {"m": 4, "n": 32, "k": 64, "dtype": "float32",
    ...                           "prepacked": True}, "llvm")
    >>> tuner = XGBTuner(task, seed=0, feature="knob")
    >>> earlier = task.space.sample(np.random.default_rng(0), 16)
    >>> tuner.load_history([{"task": task.key, "config": task.space.get(i).values,
    ...                      "cost": 1.0 + sum(task.space.positions(i))} for i in earlier])
    16
    >>> batch = tuner.next_batch(8)
    >>> len(batch), tuner.model.fitted, set(batch).isdisjoint(tuner.visited)
    (8, True, True)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .cost_model import XGBCostModel
from .measure import MeasureResult
from .task import Task
from .tuner import Tuner


class XGBTuner(Tuner):
    """Simulated annealing over an XGBoost cost model, with diverse, epsilon-greedy batches.

    Args:
        task: the task to tune.
        seed: the random seed (sampling, annealing, the model).
        feature: the cost model's features, "itervar" (loop IR; the knob vector for templates
            without loop IR) or "knob".
        objective: the cost model's objective, "rank" or "reg".
        plan_size: how many top candidates each annealing run keeps.
        n_sa_chains: parallel annealing chains.
        sa_steps: steps per annealing run (it stops early once its plan stops improving).
        epsilon: the fraction of each batch drawn uniformly at random.
        min_distance: two points of one batch differ in at least this many knobs when enough
            candidates allow it.
        exhaustive_limit: spaces with at most this many valid points are ranked whole.
        feature_budget: at most this many configs are lowered for loop features per plan
            (each takes tens of milliseconds); points not lowered yet wait for a later plan.
            None: no limit. Knob vectors cost nothing and are never limited.
        history: log records of other tasks to start the model from (transfer learning).
        model: a cost model to use instead of a new one (its history is kept).
    """

    name = "xgb"

    def __init__(
        self,
        task: Task,
        seed: int = 0,
        feature: str = "itervar",
        objective: str = "rank",
        plan_size: int = 64,
        n_sa_chains: int = 128,
        sa_steps: int = 100,
        epsilon: float = 0.05,
        min_distance: int = 2,
        exhaustive_limit: int = 512,
        feature_budget: int | None = 128,
        history: Iterable[dict[str, Any]] | None = None,
        model: XGBCostModel | None = None,
    ) -> None:
        super().__init__(task, seed)
        if not 0 <= epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], not {epsilon}")
        self.model = model or XGBCostModel(feature, objective, seed)
        self.plan_size = max(1, int(plan_size))
        self.n_sa_chains = max(1, int(n_sa_chains))
        self.sa_steps = max(0, int(sa_steps))
        self.epsilon = float(epsilon)
        self.min_distance = int(min_distance)
        self.exhaustive_limit = int(exhaustive_limit)
        self.feature_budget = None if feature_budget is None else max(0, int(feature_budget))
        self._budget_left = math.inf
        self._indices: list[int] = []
        self._costs: list[float | None] = []
        self._n_ok = 0
        self._measured_keys: set[bytes] = set()  # feature vectors of measured points
        self._plan: list[tuple[float, int]] | None = None  # (score, index), best first
        self._chains: np.ndarray | None = None  # knob positions of the annealing chains
        radix = [len(k.values) for k in self.space.knobs]
        self._radix = np.array(radix, np.int64)
        self._mult = np.array([math.prod(radix[k + 1 :]) for k in range(len(radix))], np.int64)
        self._movable = np.flatnonzero(self._radix > 1)
        valid = self.space.valid_indices()
        self._valid_list = valid
        self._valid_mask: np.ndarray | None = None
        if valid is not None:
            self._valid_mask = np.zeros(len(self.space), bool)
            self._valid_mask[valid] = True
        if history is not None:
            self.model.fit_history(history, task)

    # ---- learning ------------------------------------------------------------------------------

    def update(self, indices: Sequence[int], results: Sequence[MeasureResult]) -> None:
        """Add the measured configs to the training set and retrain the model."""
        for i, r in zip(indices, results, strict=True):
            ok = r.ok and r.cost is not None and r.cost > 0 and math.isfinite(r.cost)
            self._indices.append(int(i))
            self._costs.append(float(r.cost) if ok else None)
            self._n_ok += ok
        if len(indices):
            rows = self.model.features(self.task, [int(i) for i in indices])
            self._measured_keys.update(row.tobytes() for row in rows)
        if self._n_ok:
            self.model.fit([(self.task, self._indices, self._costs)])
        self._plan = None

    # ---- choosing ------------------------------------------------------------------------------

    def next_batch(self, n: int) -> list[int]:
        """Up to `n` unvisited valid indices: the model's best, diverse, with random ones mixed
        in (all random until the model has been trained)."""
        if n <= 0:
            return []
        if not self.model.fitted:
            return self.space.sample(self.rng, n, self.visited)
        n_random = int(self.epsilon * n)
        n_random += int(self.rng.random() < self.epsilon * n - n_random)
        if self._plan is None:
            self._plan = self._make_plan(max(self.plan_size, 3 * n))
        ranked = [i for _, i in self._plan if i not in self.visited]
        chosen = self._diverse(ranked[: 3 * n], n - n_random)
        taken = self.visited | set(chosen)
        chosen += self.space.sample(self.rng, n - len(chosen), taken)
        return chosen

    def _distinct(self, ranked: list[int]) -> list[int]:
        """`ranked` without points whose features equal a measured point's or an earlier
        one's: configs that lower to the same program (a knob without effect for this
        workload) would only measure the same thing again."""
        seen = set(self._measured_keys)
        out = []
        for i, row in zip(ranked, self.model.features(self.task, ranked), strict=True):
            key = row.tobytes()
            if key not in seen:
                seen.add(key)
                out.append(i)
        return out

    def _diverse(self, ranked: list[int], n: int) -> list[int]:
        """Up to `n` of `ranked` (best first): greedily by score, skipping points within
        `min_distance` knobs of one already chosen, then filling up by score."""
        chosen: list[int] = []
        for i in ranked:
            if len(chosen) == n:
                return chosen
            if all(self.space.distance(i, j) >= self.min_distance for j in chosen):
                chosen.append(i)
        for i in ranked:
            if len(chosen) == n:
                break
            if i not in chosen:
                chosen.append(i)
        return chosen

    def _unvisited_mask(self, indices: np.ndarray) -> np.ndarray:
        if not self.visited:
            return np.ones(len(indices), bool)
        return ~np.isin(indices, np.fromiter(self.visited, np.int64, len(self.visited)))

    def _make_plan(self, size: int) -> list[tuple[float, int]]:
        """The best `size` unvisited points by the model, best first, without twins."""
        self._budget_left = math.inf if self.feature_budget is None else self.feature_budget
        if self._valid_list is not None and len(self._valid_list) <= self.exhaustive_limit:
            pool = self._affordable(self._valid_list[self._unvisited_mask(self._valid_list)])
            scores = self.model.predict(self.task, pool)
            order = np.argsort(-scores, kind="stable")[: 2 * size]
            plan = [(float(scores[k]), int(pool[k])) for k in order]
        else:
            plan = self._anneal(2 * size)
        keep = set(self._distinct([i for _, i in plan]))
        return [(s, i) for s, i in plan if i in keep][:size]

    def _affordable(self, indices: np.ndarray) -> np.ndarray:
        """`indices` (distinct) less those whose features would exceed the plan's budget
        (a random choice of the uncached ones is kept)."""
        if self._budget_left == math.inf:
            return indices
        new = ~self.model.cached(self.task, indices)
        n_new = int(new.sum())
        if n_new <= self._budget_left:
            self._budget_left -= n_new
            return indices
        keep = ~new
        allowed = int(self._budget_left)
        if allowed:
            keep[self.rng.choice(np.flatnonzero(new), allowed, replace=False)] = True
        self._budget_left = 0
        return indices[keep]

    def _is_valid(self, indices: np.ndarray) -> np.ndarray:
        if self._valid_mask is not None:
            return self._valid_mask[indices]
        return np.array([self.space.is_valid(int(i)) for i in indices], bool)

    def _start_points(self) -> np.ndarray:
        """Knob positions of the chains: the previous run's end points, the worst of them
        replaced by the best measured configs; random valid points for missing chains."""
        c = self.n_sa_chains
        measured = [(cost, i) for i, cost in zip(self._indices, self._costs, strict=True)
                    if cost is not None]  # fmt: skip
        best = [i for _, i in sorted(measured)[: max(1, c // 4)]]
        if self._chains is None:
            fresh = np.array(self.space.sample(self.rng, c - len(best), set(best)), np.int64)
            starts = best + self._affordable(np.sort(fresh)).tolist()
            starts = starts or [self.space.default.index]
            # a tiny space repeats its points to fill the chains
            return self.space.positions_of(np.resize(np.array(starts, np.int64), c))
        chains = self._chains.copy()
        if best:
            scores = self.model.predict(self.task, chains @ self._mult)
            worst = np.argsort(scores, kind="stable")[: len(best)]
            chains[worst] = self.space.positions_of(np.array(best, np.int64))
        return chains

    def _anneal(self, size: int) -> list[tuple[float, int]]:
        """Parallel simulated annealing on the model's scores; the best `size` unvisited
        points met, best first."""
        pos = self._start_points()
        cur = pos @ self._mult
        score = self.model.predict(self.task, cur)
        found: dict[int, float] = {}

        def note(indices: np.ndarray, scores: np.ndarray) -> bool:
            """Record unvisited points; whether the plan's top changed."""
            mask = self._unvisited_mask(indices)
            if len(found) >= size:
                floor = sorted(found.values(), reverse=True)[size - 1]
            else:
                floor = -math.inf
            changed = False
            for i, s in zip(indices[mask].tolist(), scores[mask].tolist(), strict=True):
                if i not in found:
                    found[i] = s
                    changed = changed or s > floor
            return changed

        note(cur, score)
        scale = float(np.std(score)) if len(score) > 1 else 0.0
        temp0 = scale if scale > 0 else 1.0
        rows = np.arange(len(pos))
        patience = max(10, self.sa_steps // 4)
        quiet = 0
        for step in range(self.sa_steps):
            if not len(self._movable):
                break
            temp = temp0 * (1.0 - step / max(1, self.sa_steps))
            knob = self._movable[self.rng.integers(len(self._movable), size=len(pos))]
            radix = self._radix[knob]
            shift = self.rng.integers(1, radix)  # a different value of that knob
            new = pos.copy()
            new[rows, knob] = (pos[rows, knob] + shift) % radix
            cand = new @ self._mult
            ok = self._is_valid(cand)
            uniq = self._affordable(np.unique(cand[ok]))
            ok &= np.isin(cand, uniq)
            if not ok.any():
                continue
            uscore = self.model.predict(self.task, uniq)
            new_score = np.full(len(pos), -np.inf)
            new_score[ok] = uscore[np.searchsorted(uniq, cand[ok])]
            improved = note(uniq, uscore)
            quiet = 0 if improved else quiet + 1
            delta = new_score - score
            with np.errstate(over="ignore", invalid="ignore"):
                accept = (delta > 0) | (
                    ok & (self.rng.random(len(pos)) < np.exp(delta / max(temp, 1e-12)))
                )
            pos[accept] = new[accept]
            score[accept] = new_score[accept]
            if quiet >= patience:
                break
        self._chains = pos
        ranked = sorted(found.items(), key=lambda kv: -kv[1])[:size]
        return [(s, i) for i, s in ranked]
