"""The auto-tuner's parts: config spaces, the crash-proof worker pool, measurement (oracle
checks, failed trials with their reasons), logs, and the baseline tuners.

Oracles: numpy (x86 templates), the accelerator's int8 reference (vta.conv2d), and for the
search itself, exhaustive measurement of a small space on the deterministic cycle model.
"""

from __future__ import annotations

import json
import os
import signal
import time
import warnings

import llvmlite.binding as llvm
import numpy as np
import pytest

from tensorforge.compiler.autotune.dispatch import ApplyBest, TaskRecorder, query
from tensorforge.compiler.autotune.driver import tune_tasks
from tensorforge.compiler.autotune.log import (
    CONFIRM,
    LogWarning,
    TuningLog,
    load_best,
    read_log,
)
from tensorforge.compiler.autotune.measure import (
    LocalRunner,
    MeasureResult,
    SimRunner,
    measure,
)
from tensorforge.compiler.autotune.pool import WorkerPool
from tensorforge.compiler.autotune.space import ConfigSpace, Knob, SpaceError
from tensorforge.compiler.autotune.task import Artifact, Task, TaskError
from tensorforge.compiler.autotune.tuner import GATuner, GridTuner, RandomTuner
from tensorforge.hw.config import HWConfig

TINY_CONV = {"hw": HWConfig.preset("tiny").to_dict(), "n": 1, "ic": 8, "h": 6, "w": 6, "oc": 8,
             "kh": 3, "kw": 3, "stride_h": 1, "stride_w": 1, "pad_h": 1, "pad_w": 1,
             "pool_h": 1, "pool_w": 1, "residual": False}  # fmt: skip
CONV = {"n": 1, "c": 8, "h": 10, "w": 10, "k": 16, "r": 3, "s": 3, "stride": 1, "pad": 1,
        "dil": 1, "dtype": "float32"}  # fmt: skip


@pytest.fixture(scope="module")
def cyclesim():
    r = SimRunner("cyclesim", n_parallel=2)
    yield r
    r.close()


@pytest.fixture(scope="module")
def local():
    r = LocalRunner(repeat=2, min_repeat_ms=5)
    yield r
    r.close()


# ---- spaces --------------------------------------------------------------------------------------


def _space() -> ConfigSpace:
    return ConfigSpace(
        "t", [Knob("a", (1, 2, 4)), Knob("b", (True, False)), Knob("c", ("x", "y"))],
        {"a": 2, "b": True, "c": "y"},
        lambda v: "a=4 with c=x" if v["a"] == 4 and v["c"] == "x" else None,
    )  # fmt: skip


def test_space_indices_round_trip_and_the_constraint_is_enforced():
    space = _space()
    assert len(space) == 12
    for i in range(len(space)):
        assert space.from_values(space.get(i).values).index == i
    valid = [c.values for c in space]
    assert len(valid) == 10 and all(not (v["a"] == 4 and v["c"] == "x") for v in valid)
    rng = np.random.default_rng(0)
    picks = space.sample(rng, 20)
    assert sorted(picks) == sorted(c.index for c in space)  # all valid points, each once
    for i in picks:
        j = space.neighbour(i, rng)
        assert space.distance(i, j) <= 1 and space.is_valid(j)


def test_space_errors_name_the_knob_and_the_choices():
    space = _space()
    with pytest.raises(SpaceError, match="knob 'a' must be one of \\[1, 2, 4\\], not 3"):
        space.from_values({"a": 3, "b": True, "c": "x"})
    with pytest.raises(SpaceError, match="unknown knobs \\['z'\\] and misses \\['c'\\]"):
        space.from_values({"a": 1, "b": True, "z": 0})
    with pytest.raises(SpaceError, match="default config .* is invalid"):
        ConfigSpace("t", [Knob("a", (1, 2))], {"a": 2}, lambda v: "no" if v["a"] == 2 else None)


def test_every_template_space_holds_its_default_config():
    cases = [
        Task("x86.conv2d_nchwc", CONV, "llvm"),
        Task("x86.dense", {"m": 3, "n": 10, "k": 20, "dtype": "float32", "prepacked": True},
             "llvm"),
        Task("vta.conv2d", TINY_CONV, "vta -config=tiny"),
    ]  # fmt: skip
    for task in cases:
        d = task.space.default
        assert task.space.is_valid(d.index), task.template
    with pytest.raises(TaskError, match="template x86.dense is for llvm targets"):
        Task("x86.dense", {"m": 1, "n": 1, "k": 1, "dtype": "float32"}, "vta")
    with pytest.raises(TaskError, match="template must be one of"):
        Task("x86.nope", {}, "llvm")


# ---- the worker pool -----------------------------------------------------------------------------


def _segfault(x: int) -> int:
    if x == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    return x * 10


def _sleepy(x: int) -> int:
    if x == 1:
        time.sleep(60)
    return x


def _raises(x: int) -> int:
    if x == 1:
        raise ValueError("bad config")
    return x


def test_pool_reports_crashes_timeouts_and_errors_and_goes_on():
    with WorkerPool(2) as pool:
        crash = pool.map(_segfault, [(0,), (1,), (2,)], timeout=60)
        assert [r.status for r in crash] == ["ok", "crash", "ok"]
        assert "SIGSEGV" in crash[1].message and crash[2].value == 20
        t0 = time.perf_counter()
        slow = pool.map(_sleepy, [(0,), (1,), (2,)], timeout=3)
        assert [r.status for r in slow] == ["ok", "timeout", "ok"]
        assert time.perf_counter() - t0 < 30
        err = pool.map(_raises, [(1,), (3,)], timeout=60)
        assert err[0].status == "error" and "ValueError: bad config" in err[0].message
        assert err[1].value == 3


# ---- measurement ---------------------------------------------------------------------------------


def _null_store_object() -> bytes:
    """Object code of `void bad(float *p)` that writes through a null pointer."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    ir = """define void @bad(float* %p) {
      store volatile float 1.0, float* null
      ret void
    }"""
    mod = llvm.parse_assembly(ir)
    mod.triple = llvm.get_process_triple()
    tm = llvm.Target.from_triple(mod.triple).create_target_machine(reloc="pic")
    return tm.emit_object(mod)


def test_local_runner_turns_crashes_and_wrong_numbers_into_failed_trials(local):
    task = Task("x86.conv2d_nchwc", CONV, "llvm")
    good = task.build(task.space.default.values)
    wrong = task.build(task.space.default.values)
    wrong.expected = wrong.expected.copy()
    wrong.expected[0, 3, 2, 1] += 1.0
    crash = Artifact("llvm", _null_store_object(), [], np.zeros(4, "float32"), symbol="bad",
                     params=[("p", "float32", (4,))])  # fmt: skip
    out = local.run([good, wrong, crash, good])
    assert [o.error for o in out] == ["", "wrong_answer", "run_crash", ""]
    assert "differ from the oracle's, first at (0, 3, 2, 1)" in out[1].message
    assert "SIGSEGV" in out[2].message
    assert all(c > 0 for c in out[3].costs) and len(out[3].costs) == 2


def test_measure_checks_every_config_against_numpy_and_reports_failures(builder, local):
    task = Task("x86.conv2d_nchwc", CONV, "llvm")
    configs = [c.values for c in list(task.space)[:: len(task.space) // 5][:5]]
    edge = {**task.space.default.values, "reg_n": 10, "oc_bn": 16, "ic_bn": 8}  # ragged rows
    results = measure(task, [*configs, edge], builder, local)
    assert all(r.ok and r.cost > 0 for r in results), [r.message for r in results]
    broken = Task("x86.dense", {"m": 2, "n": 8, "k": 8, "dtype": "complex64", "prepacked": True},
                  "llvm")  # fmt: skip
    (r,) = measure(broken, [broken.space.default.values], builder, local)
    assert r.error == "build_error" and r.cost is None and "complex64" in r.message


def test_every_depthwise_config_computes_what_numpy_does(builder, local):
    wl = {"n": 1, "c": 8, "h": 9, "w": 11, "r": 3, "s": 3, "pads": [1, 1, 0, 1],
          "strides": [2, 2], "dil": [1, 1], "dtype": "float32"}  # fmt: skip
    task = Task("x86.depthwise_conv2d", wl, "llvm")
    results = measure(task, [c.values for c in task.space], builder, local)
    # nchwc: cb 8/16/32 x reg_n 1/2/4/6 (6: the default, dividing the 6 output columns) x
    # parallel; rows: lanes 4/8/16/32 x parallel x unroll_taps
    assert len(results) == 24 + 16 and all(r.ok for r in results), [r.message for r in results]
    assert task.describe() == "x86.depthwise_conv2d 8x9x11 3x3 s2"


def test_a_depthwise_task_has_the_end_pads_its_graph_asks_for(builder, local):
    """ONNX allows a bottom/right pad that no output reads; the graph's workload has only the
    pads the output reads, so a task keeping the extra pad named a workload no compile asks
    for, and every config of it failed to lower. It is refused; the graph's one is measured."""
    from tensorforge.compiler.autotune.templates import _dw_graph
    from tensorforge.compiler.graph.lower_te import lower_group

    wl = {"n": 2, "c": 7, "h": 9, "w": 6, "r": 3, "s": 3, "pads": [0, 1, 2, 1],
          "strides": [2, 2], "dil": [1, 1], "dtype": "float32"}  # fmt: skip
    with pytest.raises(TaskError, match=r"must end with the padding its output reads, \[2, 0\]"):
        Task("x86.depthwise_conv2d", wl, "llvm")
    graph = _dw_graph(wl, np.ones((7, 1, 3, 3), np.float32))
    with TaskRecorder() as rec:
        lower_group(graph, graph.groups[0])
    ((template, asked),) = rec.workloads.values()
    assert asked == {**wl, "pads": [0, 1, 2, 0]}
    task = Task(template, asked, "llvm")
    configs = [c.values for c in task.space][::5]
    results = measure(task, configs, builder, local)
    assert all(r.ok for r in results), [r.message for r in results]


def test_an_integer_depthwise_space_offers_only_the_kernel_it_runs(builder, local):
    """The strategy lowers integer depthwise convs by rows whatever the layout knob says, so
    the "nchwc" points of an int8 space were 24 copies of the "rows" default's program; the
    space has "rows" only, and each of its points is exact against numpy."""
    wl = {"n": 2, "c": 5, "h": 6, "w": 7, "r": 3, "s": 3, "pads": [1, 1, 1, 1],
          "strides": [1, 2], "dil": [1, 1], "dtype": "int8"}  # fmt: skip
    task = Task("x86.depthwise_conv2d", wl, "llvm")
    default = task.space.default.values
    as_nchwc = {**default, "layout": "nchwc", "cb": 16, "reg_n": 1}
    assert str(task.lower(as_nchwc)) == str(task.lower(default))
    configs = [c.values for c in task.space]
    assert {v["layout"] for v in configs} == {"rows"} and len(configs) == 16
    results = measure(task, configs, builder, local)
    assert all(r.ok for r in results), [r.message for r in results]
    assert task.build(default).rtol == task.build(default).atol == 0  # exact


def test_grouped_conv_configs_compute_what_numpy_does(builder, local):
    """A grouped conv2d workload (`groups`): blocks of one group's channels, checked against
    the grouped numpy oracle; the tasks a grouped model yields carry it."""
    wl = {"n": 1, "c": 24, "h": 7, "w": 7, "k": 24, "r": 3, "s": 3, "stride": 1, "pad": 1,
          "dil": 1, "dtype": "float32", "groups": 3}  # fmt: skip
    task = Task("x86.conv2d_nchwc", wl, "llvm")
    configs = [c.values for c in task.space][::7]
    results = measure(task, configs, builder, local)
    assert configs and all(r.ok for r in results), [r.message for r in results]
    assert all(v["ic_bn"] <= 8 and v["oc_bn"] <= 8 for v in configs)  # divisors of 8 per group
    assert task.describe() == "x86.conv2d_nchwc 24x7x7 k24 3x3 s1 g3"  # vs the ungrouped one


@pytest.mark.parametrize("layout, blocks", [("NCHWc", [8, 16]), ("NCHW-NCHWc", [3, 16])])
def test_every_blocked_conv_config_computes_what_numpy_does(builder, local, layout, blocks):
    """The kernel of a blocked chain (input and output NCHW[c]c, or a stem's NCHW input): its
    blocks are the chain's, fixed, and every config of the other knobs matches numpy's
    convolution (blocked the same way) on a strided, padded layer with ragged row tiles."""
    c = blocks[0] * 2 if layout == "NCHWc" else 3
    wl = {"n": 1, "c": c, "h": 11, "w": 11, "k": 32, "r": 3, "s": 3, "stride": 2, "pad": 1,
          "dil": 1, "dtype": "float32", "layout": layout, "blocks": blocks}  # fmt: skip
    task = Task("x86.conv2d_nchwc", wl, "llvm")
    assert [k.values for k in task.space.knobs[:2]] == [(blocks[0],), (blocks[1],)]
    # reg_n 1-6 (6 output columns) x oc_tile (0, part of the 16-channel block, both blocks:
    # whole vectors of this CPU) x parallel
    tiles = task.space.knobs[3].values
    assert 0 in tiles and 32 in tiles and all(t % 16 == 0 or 16 % t == 0 for t in tiles)
    configs = [cfg.values for cfg in task.space]
    results = measure(task, configs, builder, local)
    assert len(results) == 6 * len(tiles) * 2, len(results)
    assert all(r.ok for r in results), [r.message for r in results]
    assert task.build(configs[0]).expected.shape == (1, 2, 6, 6, 16)
    assert task.describe() == f"x86.conv2d_nchwc {c}x11x11 k32 3x3 s2 {layout} {blocks}"


def test_every_blocked_depthwise_config_computes_what_numpy_does(builder, local):
    wl = {"n": 1, "c": 32, "h": 9, "w": 11, "r": 3, "s": 3, "pads": [1, 1, 0, 1],
          "strides": [2, 2], "dil": [1, 1], "dtype": "float32", "layout": "NCHWc",
          "block": 16}  # fmt: skip
    task = Task("x86.depthwise_conv2d", wl, "llvm")
    results = measure(task, [cfg.values for cfg in task.space], builder, local)
    # reg_n 1/2/4/6 x parallel; the layout and the block are the chain's
    assert len(results) == 8 and all(r.ok for r in results), [r.message for r in results]
    assert {r.values["cb"] for r in results} == {16}


@pytest.mark.parametrize("template, fields, message", [
    ("x86.conv2d_nchwc", {"layout": "NHWC", "blocks": [8, 8]}, "must be one of"),
    ("x86.conv2d_nchwc", {"layout": "NCHWc"}, "with 'blocks'"),
    ("x86.conv2d_nchwc", {"layout": "NCHWc", "blocks": [3, 16]}, "must divide the channels"),
    ("x86.depthwise_conv2d", {"block": 8}, "must be 'NCHWc' with a 'block'"),
    ("x86.depthwise_conv2d", {"layout": "NCHWc", "block": 5}, "must divide the channels"),
])  # fmt: skip
def test_a_blocked_workload_with_bad_layout_fields_is_refused(template, fields, message):
    base = CONV if template == "x86.conv2d_nchwc" else {
        "n": 1, "c": 8, "h": 9, "w": 9, "r": 3, "s": 3, "pads": [1, 1, 1, 1], "strides": [1, 1],
        "dil": [1, 1], "dtype": "float32"}  # fmt: skip
    with pytest.raises(TaskError, match=message):
        Task(template, {**base, **fields}, "llvm")


def test_cyclesim_costs_are_deterministic_and_the_output_is_checked(builder, cyclesim):
    task = Task("vta.conv2d", TINY_CONV, "vta -config=tiny")
    configs = [c.values for c in task.space][:6]
    first = measure(task, configs, builder, cyclesim)
    again = measure(task, configs, builder, cyclesim)
    assert all(r.ok for r in first), [r.message for r in first]
    assert [r.cost for r in first] == [r.cost for r in again]
    assert len({r.cost for r in first}) > 1  # the knobs change the cycles


def test_a_depthwise_vta_task_is_extracted_with_its_groups_and_measured(builder, cyclesim):
    """A grouped conv's tuning workload carries ``groups``; its template builds the grouped
    kernel, and each trial's output is checked against the grouped int8 reference."""
    from tensorforge.compiler.vta import conv2d
    from tensorforge.compiler.vta.kernel import tuning_workload

    cfg = HWConfig.preset("tiny")
    kern = conv2d(cfg, (1, 8, 6, 6), np.ones((8, 1, 3, 3), np.int8), padding=1, groups=8)
    wl = tuning_workload(cfg, kern.workload, False)
    assert wl == {**TINY_CONV, "groups": 8}
    task = Task("vta.conv2d", wl, "vta -config=tiny")
    assert task.flops == 2 * 8 * 36 * 9  # one input channel per output channel
    assert task.describe() == "vta.conv2d 8x6x6 oc8 3x3 s1 g8"  # not the dense conv's name
    pooled = Task("vta.conv2d", {**TINY_CONV, "pool_h": 2, "pool_w": 2, "residual": True},
                  "vta -config=tiny")  # fmt: skip
    assert pooled.describe() == "vta.conv2d 8x6x6 oc8 3x3 s1 +pool2x2 +res"
    configs = [c.values for c in task.space][:4]
    results = measure(task, configs, builder, cyclesim)
    assert configs and all(r.ok for r in results), [r.message for r in results]


def test_an_asymmetrically_padded_vta_task_carries_each_side_and_is_measured(builder, cyclesim):
    """TensorFlow's "same" padding of a strided conv: the tuning workload names the bottom and
    right padding (only then: symmetric workloads keep their keys), and every trial's output
    is checked against the int8 reference of the same padding."""
    from tensorforge.compiler.vta import conv2d
    from tensorforge.compiler.vta.kernel import tuning_workload

    cfg = HWConfig.preset("tiny")
    kern = conv2d(cfg, (1, 8, 6, 6), np.ones((8, 8, 3, 3), np.int8), stride=2,
                  padding=(0, 0, 1, 1))  # fmt: skip
    wl = tuning_workload(cfg, kern.workload, False)
    assert wl == {**TINY_CONV, "stride_h": 2, "stride_w": 2, "pad_h": 0, "pad_w": 0,
                  "pad_bottom": 1, "pad_right": 1}  # fmt: skip
    task = Task("vta.conv2d", wl, "vta -config=tiny")
    assert task.flops == 2 * 8 * 9 * 8 * 9  # a 3x3 output
    configs = [c.values for c in task.space][:3]
    results = measure(task, configs, builder, cyclesim)
    assert configs and all(r.ok for r in results), [r.message for r in results]
    with pytest.raises(TaskError, match="pad_bottom"):
        Task("vta.conv2d", {**wl, "pad_bottom": -1}, "vta -config=tiny")


# ---- logs ----------------------------------------------------------------------------------------


def test_a_vta_log_written_with_the_retired_lowering_knob_still_loads(tmp_path):
    """Logs from when a point also chose the lowering ("te" or "tile") apply their schedule."""
    from tensorforge.compiler.vta import conv2d
    from tensorforge.compiler.vta.kernel import tuning_workload

    task = Task("vta.conv2d", TINY_CONV, "vta -config=tiny")
    values = next(c.values for c in task.space if c.values != task.space.default.values
                  and task.space.why_invalid(c.values) is None)  # fmt: skip
    path = tmp_path / "old.jsonl"
    with TuningLog(path) as log:
        log.write(task, MeasureResult({**values, "lowering": "tile"}, 100.0, [100.0]), 0)
    best = load_best(path, "vta")
    assert best == {task.key: {**values, "lowering": "tile"}}
    cfg = HWConfig.preset("tiny")
    w = np.ones((8, 8, 3, 3), np.int8)
    with ApplyBest(best):
        kern = conv2d(cfg, (1, 8, 6, 6), w, padding=1)
    assert tuning_workload(cfg, kern.workload, False) == TINY_CONV
    assert {k: getattr(kern.schedule, k) for k in values} == values


def test_a_conv2d_log_written_before_the_oc_tile_knob_still_loads(tmp_path):
    """A config without `oc_tile` meant one output-channel block per register tile."""
    task = Task("x86.conv2d_nchwc", CONV, "llvm")
    values = {k: v for k, v in task.space.default.values.items() if k != "oc_tile"}
    path = tmp_path / "old.jsonl"
    with TuningLog(path) as log:
        log.write(task, MeasureResult(values, 1e-4, [1e-4]), 0)
    assert load_best(path, "llvm") == {task.key: values}
    assert task.space.from_values(values).values == {**values, "oc_tile": 0}
    with pytest.raises(SpaceError, match="misses \\['reg_n'\\]"):
        task.space.from_values({k: v for k, v in values.items() if k != "reg_n"})


def test_log_round_trip_skips_bad_lines_and_picks_the_best(tmp_path):
    task = Task("x86.dense", {"m": 2, "n": 8, "k": 8, "dtype": "float32", "prepacked": True},
                "llvm")  # fmt: skip
    configs = [c.values for c in task.space][:3]
    path = tmp_path / "t.jsonl"
    with TuningLog(path) as log:
        log.write(task, MeasureResult(configs[0], 3e-6, [3e-6]), 0)
        log.write(task, MeasureResult(configs[1], 1e-6, [1e-6]), 1)
        log.write(task, MeasureResult(configs[2], None, [], "run_crash", "SIGSEGV"), 2)
    with open(path, "a") as f:
        f.write("{not json\n")
        f.write(json.dumps({"format": "something-else"}) + "\n")
    with pytest.warns(LogWarning) as caught:
        records = list(read_log(path))
    assert len(records) == 3
    assert {str(w.message).split(": skipped")[0] for w in caught} == {f"{path}:4", f"{path}:5"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LogWarning)
        best = load_best(path, "llvm")
        assert load_best(path, "vta") == {}
    assert best == {task.key: configs[1]}
    rec = dict(records[0], template="x86.gone", task="x86.gone{}")
    (tmp_path / "u.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.raises(TaskError, match="template must be one of"):
        load_best(tmp_path / "u.jsonl", "llvm")


def test_a_confirmed_task_is_decided_by_its_confirmation_records(builder, local, tmp_path):
    """`confirm_best` re-measures a task's cheapest configs and its default side by side and
    logs them as `confirm` records; those decide the best (not a lucky single timing of
    another config), and they are not trials: resuming neither counts nor re-measures them."""
    task = Task("x86.conv2d_nchwc", CONV, "llvm")
    log = tmp_path / "c.jsonl"
    summary = tune_tasks([task], 4, builder, local, log=log, tuner="random", progress=False,
                         confirm=2)  # fmt: skip
    records = list(read_log(log))
    confirmed = [r for r in records if r["tuner"] == CONFIRM]
    assert len(records) - len(confirmed) == 4
    configs = [r["config"] for r in confirmed]
    assert task.space.default.values in configs and len(configs) in (2, 3)
    assert all(len(r["costs"]) == 5 * 2 for r in confirmed)  # 5 rounds of 2 timings each
    winner = min(confirmed, key=lambda r: r["cost"])
    assert load_best(log, "llvm") == {task.key: winner["config"]}
    assert summary[0].best_values == winner["config"]
    lucky = next(c.values for c in task.space if c.values not in configs)
    with TuningLog(log) as out:
        out.write(task, MeasureResult(lucky, winner["cost"] / 100, [winner["cost"] / 100]), 9)
    assert load_best(log, "llvm") == {task.key: winner["config"]}
    again = tune_tasks([task], 5, builder, local, log=log, tuner="random", progress=False,
                       confirm=2)  # fmt: skip
    assert again[0].trials == 5 and len(list(read_log(log))) == len(records) + 1  # no new ones
    assert len([r for r in read_log(log) if r["tuner"] == CONFIRM]) == len(confirmed)
    with pytest.raises(ValueError, match="confirm must be a count of configs >= 0, not -1"):
        tune_tasks([task], 1, builder, local, confirm=-1)


def test_dispatch_contexts_answer_and_record():
    wl = {"m": 1, "n": 2, "k": 3, "dtype": "float32", "prepacked": True}
    assert query("x86.dense", wl) is None
    task = Task("x86.dense", wl, "llvm")
    with ApplyBest({task.key: {"mr": 1}}) as ctx:
        assert query("x86.dense", wl) == {"mr": 1}
        assert query("x86.dense", {**wl, "k": 4}) is None
    assert len(ctx.applied) == 1 and len(ctx.fallback) == 1
    with TaskRecorder() as rec:
        query("x86.dense", wl)
        query("x86.dense", wl)
    assert rec.counts[task.key] == 2


# ---- tuners --------------------------------------------------------------------------------------


def test_grid_search_finds_the_true_optimum_and_tuners_never_repeat(builder, cyclesim, tmp_path):
    task = Task("vta.conv2d", TINY_CONV, "vta -config=tiny")
    n = len(list(task.space))
    grid = GridTuner(task)
    best = grid.tune(n + 5, builder, cyclesim, batch_size=16)
    costs = [r.cost for _, r in grid.trials]
    assert len(grid.trials) == n and None not in costs  # every valid point, once, all succeed
    assert (
        grid.best_cost == min(costs)
        and best == task.space.get(grid.trials[int(np.argmin(costs))][0]).values
    )
    for cls in (RandomTuner, GATuner):
        t = cls(task, seed=1)
        log = tmp_path / f"{cls.name}.jsonl"
        with TuningLog(log) as out:
            t.tune(12, builder, cyclesim, batch_size=4, log=out)
        seen = [i for i, _ in t.trials]
        assert len(seen) == 12 == len(set(seen))
        assert t.best_cost >= grid.best_cost
        resumed = cls(task, seed=2)  # resume: the log's trials count and are not measured again
        assert resumed.load_history(read_log(log)) == 12
        resumed.tune(16, builder, cyclesim, batch_size=4)
        assert len(resumed.trials) == 16 and len({i for i, _ in resumed.trials}) == 16


class _InterruptedRunner(SimRunner):
    """Delivers the first outcome of a batch, then is interrupted (Ctrl-C mid batch)."""

    def run(self, artifacts, on_outcome=None):
        def first_only(k, outcome):
            on_outcome(k, outcome)
            raise KeyboardInterrupt

        return super().run(artifacts[:1], first_only)


def test_ctrl_c_mid_batch_keeps_the_finished_trials(builder, tmp_path):
    task = Task("vta.conv2d", TINY_CONV, "vta -config=tiny")
    log = tmp_path / "interrupted.jsonl"
    tuner = RandomTuner(task, seed=5)
    with _InterruptedRunner("cyclesim", n_parallel=1) as runner, TuningLog(log) as out:
        with pytest.raises(KeyboardInterrupt):
            tuner.tune(20, builder, runner, batch_size=4, log=out)
    (rec,) = list(read_log(log))  # the one trial that finished is logged and recorded
    assert rec["error"] == "" and rec["cost"] > 0
    assert len(tuner.trials) == 1 and tuner.best_cost == rec["cost"]
    resumed = RandomTuner(task, seed=6)
    assert resumed.load_history(read_log(log)) == 1


@pytest.mark.rtl
def test_rtl_runner_counts_the_cycles_of_the_cycle_model_with_the_ram_timing(builder, icarus):
    from tensorforge.runtime.device.vta.rtl import matched_timing

    task = Task("vta.conv2d", {**TINY_CONV, "h": 4, "w": 4}, "vta -config=tiny")
    configs = [c.values for c in task.space][:2]
    timing = {"timing": matched_timing(HWConfig.preset("tiny"))}
    with (
        SimRunner("cyclesim", n_parallel=1, device_options=timing) as model,
        SimRunner("rtl", timeout=600, device_options={"simulator": icarus}) as rtl,
    ):
        want = [r.cost for r in measure(task, configs, builder, model)]
        got = measure(task, configs, builder, rtl)
    assert all(r.ok for r in got), [r.message for r in got]
    assert [r.cost for r in got] == want
