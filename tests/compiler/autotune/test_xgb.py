"""The model-based tuner: loop-IR features, the XGBoost ranking model, and the SA-driven tuner.

Oracles: knob-dependent properties of the lowered loop IR (vector width, parallel loops,
unrolled register tiles) for the features; Kendall's tau against a known synthetic cost for the
model; trials-to-optimum against the random tuner on a synthetic cost over a real config space
for the tuner; and one short real tuning run on the accelerator's cycle model.
"""

from __future__ import annotations

import doctest
import importlib
import math
import time

import numpy as np
import pytest

from tensorforge.compiler.autotune.cost_model import XGBCostModel, normalized_throughput
from tensorforge.compiler.autotune.features import FEATURE_LENGTH, feature_names, loop_features
from tensorforge.compiler.autotune.measure import Builder, MeasureResult, SimRunner, measure
from tensorforge.compiler.autotune.task import Task
from tensorforge.compiler.autotune.tuner import RandomTuner, Tuner, make_tuner
from tensorforge.compiler.autotune.xgb import XGBTuner
from tensorforge.compiler.schedule.stage import ForKind
from tensorforge.compiler.te.expr import IntImm, Var
from tensorforge.compiler.tir.stmt import Buffer, BufferLoad, BufferStore, Evaluate, For
from tensorforge.hw.config import HWConfig

SMALL_CONV = {"n": 1, "c": 16, "h": 8, "w": 8, "k": 32, "r": 3, "s": 3, "stride": 1, "pad": 1,
              "dil": 1, "dtype": "float32"}  # fmt: skip
BIG_CONV = dict(SMALL_CONV, c=64, k=64, h=14, w=14)
DENSE = {"m": 16, "n": 64, "k": 64, "dtype": "float32", "prepacked": True}
NAMES = feature_names()


def feat(vec: np.ndarray, name: str) -> float:
    return float(vec[NAMES.index(name)])


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a of two score vectors (numpy; no scipy in the dependencies)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    n = len(a)
    return float((da * db).sum() / (n * (n - 1)))


def synthetic_cost(task: Task, index: int) -> float:
    """A smooth cost of the knob positions of a conv2d_nchwc point, its optimum in the middle of
    the space (pack_data is left out: with padding it does not change the program)."""
    p = task.space.positions(index)
    return math.exp(0.3 * (p[0] - 4) ** 2 + 0.25 * (p[1] - 3) ** 2 + 0.08 * (p[2] - 6) ** 2
                    + 0.8 * p[4])  # fmt: skip


@pytest.fixture(scope="module")
def small_conv() -> Task:
    return Task("x86.conv2d_nchwc", SMALL_CONV, "llvm")


@pytest.fixture(scope="module")
def big_conv() -> Task:
    return Task("x86.conv2d_nchwc", BIG_CONV, "llvm")


# ---- features --------------------------------------------------------------------------------


def test_features_fixed_length_and_follow_the_knobs(small_conv: Task) -> None:
    default = dict(small_conv.space.default.values)
    assert set(default) == {"ic_bn", "oc_bn", "reg_n", "oc_tile", "pack_data", "parallel"}
    # a fixed point (the default tile depends on the host's vector registers): 8 columns by
    # one whole 32-channel block
    base = dict(default, ic_bn=16, oc_bn=32, reg_n=8, oc_tile=0, pack_data=False, parallel=True)
    variants = {
        "default": base,
        "serial": dict(base, parallel=False),
        "narrow_vector": dict(base, oc_bn=4),
        "small_tile": dict(base, reg_n=2),
        "ic_block": dict(base, ic_bn=4),
    }
    vecs = {k: loop_features(small_conv.lower(v)) for k, v in variants.items()}
    for v in vecs.values():
        assert v.shape == (FEATURE_LENGTH,) and v.dtype == np.float32
        assert np.isfinite(v).all()
    # every pair of configs differs
    keys = list(vecs)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            assert not np.array_equal(vecs[keys[a]], vecs[keys[b]]), (keys[a], keys[b])
    d = vecs["default"]
    # the innermost loop of the reduction is the oc_bn-wide vector
    assert feat(d, "main.L0.kind.vectorized") == 1.0
    assert feat(d, "main.vector_width") == 5.0 == feat(d, "main.L0.extent")
    assert feat(vecs["narrow_vector"], "main.vector_width") == 2.0
    # parallel: the outer loops run on the thread pool, or none does
    assert feat(d, "global.loops.parallel") > 0
    assert feat(vecs["serial"], "global.loops.parallel") == 0
    # reg_n register tiles are unrolled into sibling stores around the same loops
    assert feat(d, "main.siblings") == pytest.approx(math.log2(1 + 8))
    assert feat(vecs["small_tile"], "main.siblings") == pytest.approx(math.log2(1 + 2))
    # the ic_bn-long inner reduction loop sits just outside the vector
    assert feat(d, "main.L1.extent") == 4.0 and feat(vecs["ic_block"], "main.L1.extent") == 2.0
    # the stored accumulator is unit stride along the vector loop and reused along rc
    assert feat(d, "main.L0.buf0.stride") == 1.0
    assert feat(d, "main.L1.buf0.stride") == 0.0
    assert feat(d, "main.L1.buf0.reuse") > feat(d, "main.L0.buf0.reuse")


def test_features_of_another_template_have_the_same_length() -> None:
    task = Task("x86.dense", DENSE, "llvm")
    v = loop_features(task.lower(task.space.default.values))
    assert v.shape == (FEATURE_LENGTH,) and v.any()


def test_features_never_raise_on_odd_input() -> None:
    assert not loop_features(None).any()
    assert loop_features(Evaluate(IntImm(0))).shape == (FEATURE_LENGTH,)
    # a loop with a symbolic extent and an indirect index: zeros where unknown, no exception
    buf = Buffer("a", "float32", (16,))
    idx = Buffer("idx", "int32", (16,))
    i, n = Var("i"), Var("n")
    body = BufferStore(buf, IntImm(0, "float32"), (BufferLoad(idx, (i,), "int32"),))
    v = loop_features(For(i, IntImm(0), n, ForKind.SERIAL, body))
    assert v.shape == (FEATURE_LENGTH,) and np.isfinite(v).all()
    assert feat(v, "main.L0.extent") == 0.0 and feat(v, "main.L0.kind.serial") == 1.0
    assert loop_features("not a function").shape == (FEATURE_LENGTH,)  # type: ignore[arg-type]


def test_feature_extraction_is_fast(big_conv: Task) -> None:
    func = big_conv.lower(big_conv.space.default.values)
    loop_features(func)
    t0 = time.perf_counter()
    for _ in range(10):
        loop_features(func)
    assert (time.perf_counter() - t0) / 10 < 0.020


# ---- the cost model --------------------------------------------------------------------------


def test_normalized_throughput_gives_failures_the_lowest_label() -> None:
    assert normalized_throughput([4.0, None, 2.0, 8.0]).tolist() == [0.5, 0.0, 1.0, 0.25]
    assert normalized_throughput([None, None]).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_model_orders_held_out_points(big_conv: Task, objective: str) -> None:
    rng = np.random.default_rng(0)
    points = big_conv.space.sample(rng, 300)
    train, test = points[:100], points[100:]
    costs: list[float | None] = [synthetic_cost(big_conv, i) for i in train]
    costs[:5] = [None] * 5  # failed trials train as the slowest
    model = XGBCostModel(feature="knob", objective=objective, seed=0)
    assert not model.fitted
    with pytest.raises(RuntimeError, match="not fitted"):
        model.predict(big_conv, test)
    model.fit([(big_conv, train, costs)])
    scores = model.predict(big_conv, test)
    truth = -np.array([synthetic_cost(big_conv, i) for i in test])
    assert kendall_tau(scores, truth) > 0.5


def test_knob_features_match_the_space_vector(big_conv: Task) -> None:
    model = XGBCostModel(feature="knob")
    idx = big_conv.space.sample(np.random.default_rng(1), 20)
    np.testing.assert_array_equal(model.features(big_conv, idx),
                                  np.stack([big_conv.space.vector(i) for i in idx]))  # fmt: skip


def test_itervar_features_are_cached_and_fall_back_to_knobs() -> None:
    model = XGBCostModel(feature="itervar", shared_cache=False)
    dense = Task("x86.dense", DENSE, "llvm")
    idx = [int(i) for i in dense.space.valid_indices()[:3]]
    x = model.features(dense, idx)
    assert x.shape == (3, FEATURE_LENGTH)
    t0 = time.perf_counter()
    np.testing.assert_array_equal(model.features(dense, idx), x)
    assert time.perf_counter() - t0 < 0.005  # served from the cache, not lowered again
    # models of one process share loop features: a new model finds them lowered
    fresh = Task("x86.dense", dict(DENSE, m=8), "llvm")  # no other test lowers this one
    few = [int(i) for i in fresh.space.valid_indices()[:3]]
    XGBCostModel(feature="itervar").features(fresh, few[:2])
    assert XGBCostModel(feature="itervar").cached(fresh, few).tolist() == [True, True, False]
    vta = Task("vta.conv2d", vta_workload(), "vta -config=tiny")
    assert not model.uses_loop_features(vta)
    assert model.features(vta, [vta.space.default.index]).shape == (1, len(vta.space.knobs))


def _records(task: Task, indices: list[int], cost: callable) -> list[dict]:
    return [{"task": task.key, "template": task.template, "workload": dict(task.workload),
             "target": task.target, "config": task.space.get(i).values, "cost": cost(i),
             "error": ""} for i in indices]  # fmt: skip


def test_history_transfers_between_tasks(big_conv: Task) -> None:
    other = Task("x86.conv2d_nchwc", dict(BIG_CONV, h=28, w=28), "llvm")
    rng = np.random.default_rng(2)
    hist = _records(other, other.space.sample(rng, 150), lambda i: synthetic_cost(other, i))
    dense = Task("x86.dense", DENSE, "llvm")
    hist += _records(dense, dense.space.sample(rng, 5), lambda i: 1.0 + i)
    hist.append({**hist[0], "template": "no.such", "task": "bogus"})  # skipped, no error
    model = XGBCostModel(feature="knob", seed=0)
    # knob vectors only transfer within a template: the dense records are left out
    assert model.fit_history(hist, big_conv) == 150
    assert model.fitted
    test = big_conv.space.sample(rng, 200)
    truth = -np.array([synthetic_cost(big_conv, i) for i in test])
    assert kendall_tau(model.predict(big_conv, test), truth) > 0.5
    # the task's own records are not history
    assert XGBCostModel(feature="knob").fit_history(hist, other) == 0
    # knob vectors of another template are another feature family
    with pytest.raises(RuntimeError, match="trained on"):
        model.predict(dense, [dense.space.default.index])
    with pytest.raises(ValueError, match="one feature family"):
        model.fit([(big_conv, test[:5], [1.0] * 5), (dense, [dense.space.default.index], [1.0])])


def test_loop_feature_history_crosses_templates(small_conv: Task) -> None:
    dense = Task("x86.dense", DENSE, "llvm")
    rng = np.random.default_rng(3)
    hist = _records(dense, dense.space.sample(rng, 6), lambda i: 1.0 + i % 7)
    model = XGBCostModel(feature="itervar", seed=0)
    assert model.fit_history(hist, small_conv) == 6
    assert model.predict(small_conv, [small_conv.space.default.index]).shape == (1,)


# ---- the tuner --------------------------------------------------------------------------------


def drive(tuner: Tuner, cost: dict[int, float], budget: int, seed: int, batch: int = 8) -> int:
    """Run `tuner` with fabricated measurements (2% noise); trials until it met the optimum
    (`budget` if never)."""
    rng = np.random.default_rng(1000 + seed)
    best = min(cost.values())
    n = 0
    while n < budget:
        chosen = tuner.next_batch(batch)
        assert len(set(chosen)) == len(chosen) and not set(chosen) & tuner.visited
        assert all(tuner.space.is_valid(i) for i in chosen)
        results = [MeasureResult(tuner.space.get(i).values, cost[i] * rng.lognormal(0, 0.02), [])
                   for i in chosen]  # fmt: skip
        tuner._record(chosen, results)
        tuner.update(chosen, results)
        for i in chosen:
            n += 1
            if cost[i] == best:
                return n
    return budget


def test_xgb_finds_the_optimum_faster_than_random(big_conv: Task) -> None:
    cost = {int(i): synthetic_cost(big_conv, int(i)) for i in big_conv.space.valid_indices()}
    assert len(cost) > 512  # annealing, not exhaustive ranking (exhaustive_limit)
    seeds, budget = range(3), 320
    xgb = [drive(XGBTuner(big_conv, seed=s, feature="knob"), cost, budget, s) for s in seeds]
    rnd = [drive(RandomTuner(big_conv, seed=s), cost, budget, s) for s in seeds]
    assert max(xgb) < budget  # every run found it
    assert np.mean(xgb) < 0.5 * np.mean(rnd)


def test_xgb_ranks_a_small_space_whole() -> None:
    task = Task("x86.dense", DENSE, "llvm")
    valid = task.space.valid_indices()
    assert len(valid) <= 1024
    tuner = XGBTuner(task, seed=0, feature="knob", exhaustive_limit=1024, epsilon=0.0)
    cost = {int(i): float(1 + sum((p - 2) ** 2 for p in task.space.positions(int(i))))
            for i in valid}  # fmt: skip
    assert drive(tuner, cost, len(valid), 0) < len(valid) // 4
    # the model's picks in a batch keep apart: no two within min_distance knobs
    batch = tuner.next_batch(6)
    assert all(task.space.distance(a, b) >= 2 for a in batch for b in batch if a != b)
    # it still hands out every point until the space is exhausted
    while tuner.has_next():
        chosen = tuner.next_batch(64)
        assert chosen
        tuner._record(chosen, [MeasureResult(task.space.get(i).values, 1.0, []) for i in chosen])
        tuner.update(chosen, [MeasureResult(task.space.get(i).values, 1.0, []) for i in chosen])
    assert tuner.visited == {int(i) for i in valid}


def test_xgb_samples_randomly_until_a_success_and_options(big_conv: Task) -> None:
    tuner = make_tuner("xgb", big_conv, seed=0, feature="knob", epsilon=0.25)
    assert isinstance(tuner, XGBTuner) and tuner.name == "xgb"
    first = tuner.next_batch(8)
    failed = [MeasureResult(big_conv.space.get(i).values, None, [], "build_error") for i in first]
    tuner._record(first, failed)
    tuner.update(first, failed)
    assert not tuner.model.fitted  # no success yet: still random
    assert len(tuner.next_batch(8)) == 8
    with pytest.raises(ValueError, match="epsilon"):
        XGBTuner(big_conv, epsilon=2.0)


def test_xgb_starts_from_history(big_conv: Task) -> None:
    other = Task("x86.conv2d_nchwc", dict(BIG_CONV, h=28, w=28), "llvm")
    hist = _records(other, other.space.sample(np.random.default_rng(4), 150),
                    lambda i: synthetic_cost(other, i))  # fmt: skip
    tuner = XGBTuner(big_conv, seed=0, feature="knob", history=hist, epsilon=0.0)
    assert tuner.model.fitted  # the first batch already comes from the model
    batch = tuner.next_batch(8)
    cost = np.array([synthetic_cost(big_conv, i) for i in batch])
    everything = np.array([synthetic_cost(big_conv, int(i))
                           for i in big_conv.space.valid_indices()])  # fmt: skip
    assert np.median(cost) < np.quantile(everything, 0.1)


def vta_workload() -> dict:
    return {"hw": HWConfig.preset("tiny").to_dict(), "n": 1, "ic": 16, "h": 8, "w": 8, "oc": 16,
            "kh": 3, "kw": 3, "stride_h": 1, "stride_w": 1, "pad_h": 1, "pad_w": 1, "pool_h": 1,
            "pool_w": 1, "residual": False}  # fmt: skip


def test_xgb_tunes_the_accelerator_conv2d() -> None:
    task = Task("vta.conv2d", vta_workload(), "vta -config=tiny")
    builder, runner = Builder(1), SimRunner("cyclesim", n_parallel=1)
    try:
        (default,) = measure(task, [task.space.default.values], builder, runner)
        assert default.ok, default.message
        tuner = XGBTuner(task, seed=0)  # itervar falls back to knob vectors here
        best = tuner.tune(16, builder, runner, batch_size=8)
    finally:
        builder.close()
        runner.close()
    assert len(tuner.trials) == 16 and best is not None
    assert tuner.model.fitted
    assert tuner.best_cost <= default.cost


@pytest.mark.parametrize("module", ["features", "cost_model", "xgb"])
def test_docstring_examples(module: str) -> None:
    mod = importlib.import_module(f"tensorforge.compiler.autotune.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_loop_feature_lowering_stays_within_the_budget(small_conv: Task) -> None:
    model = XGBCostModel(seed=0, shared_cache=False)
    tuner = XGBTuner(small_conv, seed=0, exhaustive_limit=0, feature_budget=16, model=model)
    first = tuner.next_batch(8)
    results = [MeasureResult(small_conv.space.get(i).values, 1.0 + k, []) for k, i in
               enumerate(first)]  # fmt: skip
    tuner._record(first, results)
    tuner.update(first, results)
    lowered = len(tuner.model._cache)
    assert lowered == 8
    batch = tuner.next_batch(8)
    assert len(set(batch)) == 8 and not set(batch) & tuner.visited
    assert len(tuner.model._cache) <= lowered + 16
