"""The auto-tuner against bad input: tuning logs that are JSON but wrong, workloads of the wrong
types or absurd sizes, API misuse, CLI options that would tune nothing or wait forever, and
worker jobs that misbehave.

The rule each test checks: a clear error naming the thing (field and value, file and line), or a
skipped record with a `LogWarning` naming its file and line; nothing lost, no hang, no traceback
from the CLI. Measurement here uses a builder and runner without processes (`_FakeBuilder`,
`_FakeRunner`) wherever the point is the tuner's book-keeping, not the numbers.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from tensorforge.cli import main
from tensorforge.compiler.autotune.dispatch import workload_key
from tensorforge.compiler.autotune.driver import extract_tasks, tune_tasks
from tensorforge.compiler.autotune.log import (
    LogWarning,
    load_best,
    read_log,
    record,
)
from tensorforge.compiler.autotune.measure import (
    Builder,
    LocalRunner,
    MeasureResult,
    Runner,
    RunOutcome,
    SimRunner,
    make_runner,
    measure,
)
from tensorforge.compiler.autotune.plot import plot_log
from tensorforge.compiler.autotune.pool import WorkerPool
from tensorforge.compiler.autotune.space import SpaceError
from tensorforge.compiler.autotune.task import MAX_DIM, Artifact, Task, TaskError
from tensorforge.compiler.autotune.tuner import RandomTuner, make_tuner
from tensorforge.compiler.frontend.onnx_builders import small_cnn
from tensorforge.hw.config import HWConfig

DENSE = {"m": 4, "n": 8, "k": 8, "dtype": "float32", "prepacked": True}
CONV = {"n": 1, "c": 8, "h": 10, "w": 10, "k": 16, "r": 3, "s": 3, "stride": 1, "pad": 1,
        "dil": 1, "dtype": "float32"}  # fmt: skip
DEPTHWISE = {"n": 1, "c": 8, "h": 9, "w": 11, "r": 3, "s": 3, "pads": [1, 1, 0, 1],
             "strides": [2, 2], "dil": [1, 1], "dtype": "float32"}  # fmt: skip
VTA = {"hw": HWConfig.preset("tiny").to_dict(), "n": 1, "ic": 8, "h": 6, "w": 6, "oc": 8,
       "kh": 3, "kw": 3, "stride_h": 1, "stride_w": 1, "pad_h": 1, "pad_w": 1, "pool_h": 1,
       "pool_w": 1, "residual": False}  # fmt: skip


def _onnx_bytes() -> bytes:
    model = small_cnn()
    return model if isinstance(model, bytes) else model.SerializeToString()


def _dense() -> Task:
    return Task("x86.dense", DENSE, "llvm")


class _FakeBuilder(Builder):
    """Builds every config at once without worker processes; remembers what it built."""

    def __init__(self) -> None:  # no worker pool
        self.n_parallel, self.timeout, self.built = 1, 1.0, []

    def build(self, task, configs, seed=0):
        self.built += [dict(c) for c in configs]
        art = Artifact("llvm", b"", [], np.zeros(1, np.float32))
        return [(art, RunOutcome()) for _ in configs]

    def close(self) -> None:
        pass


class _FakeRunner(Runner):
    """Costs 1 ms per artifact, at once."""

    name, unit = "fake", "s"

    def run(self, artifacts, on_outcome=None):
        out = []
        for k in range(len(artifacts)):
            out.append(RunOutcome([1e-3]))
            if on_outcome is not None:
                on_outcome(k, out[-1])
        return out


def _write(path, lines) -> None:
    """Lines of a log: dicts become JSON, strings are written as they are."""
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def _good(task: Task, values: dict | None = None, cost: float | None = 1e-3) -> dict:
    values = values if values is not None else task.space.default.values
    error = "" if cost is not None else "run_error"
    return record(task, MeasureResult(values, cost, [cost] if cost else [], error), 0, "random")


# ---- logs that are JSON but wrong ----------------------------------------------------------------


def _corruptions(task: Task) -> dict[str, tuple[dict, str]]:
    """name -> (a record that must be skipped by read_log, what its warning names)."""
    rec = _good(task)
    nan, inf = float("nan"), float("inf")
    return {
        "config list": ({**rec, "config": [1, 2]}, "field 'config' must be a dict"),
        "config str": ({**rec, "config": "mr=1"}, "field 'config' must be a dict"),
        "workload str": ({**rec, "workload": "m=4"}, "field 'workload' must be a dict"),
        "cost 0": ({**rec, "cost": 0}, "cost must be a positive number"),
        "cost negative": ({**rec, "cost": -1.0}, "cost must be a positive number"),
        "cost NaN": ({**rec, "cost": nan}, "cost must be a positive number"),
        "cost Infinity": ({**rec, "cost": inf}, "cost must be a positive number"),
        "cost str": ({**rec, "cost": "0.001"}, "cost must be a positive number"),
        "cost bool": ({**rec, "cost": True}, "cost must be a positive number"),
        "costs int": ({**rec, "costs": 5}, "costs must be a list"),
        "costs str": ({**rec, "costs": "abc"}, "costs must be a list"),
        "costs NaN": ({**rec, "costs": [nan]}, "costs must be a list of positive numbers"),
        "target empty": ({**rec, "target": ""}, "field 'target' must name a target"),
        "target blank": ({**rec, "target": "  "}, "field 'target' must name a target"),
        "target unknown": ({**rec, "target": "cuda"}, "is not of its template's kind, llvm"),
        "target int": ({**rec, "target": 5}, "field 'target' must be a str"),
        "error None": ({**rec, "error": None}, "error must be one of"),
        "message int": ({**rec, "message": 5}, "field 'message' must be a str"),
        "tuner int": ({**rec, "tuner": 5}, "field 'tuner' must be a str"),
        "trial str": ({**rec, "trial": "7"}, "trial must be an int"),
        # the task key of one workload with the fields of another: never trusted
        "key of another workload": ({**rec, "workload": {**DENSE, "m": -4}},
                                    "is not the key of its template and workload"),
        "key missing fields": ({**rec, "workload": {"m": 4}}, "is not the key"),
        "format": ({**rec, "format": "tensorforge-tune/0"}, "format must be"),
    }  # fmt: skip


def test_records_that_are_json_but_wrong_are_skipped_naming_file_and_line(tmp_path):
    task = _dense()
    cases = _corruptions(task)
    path = tmp_path / "bad.jsonl"
    _write(path, [rec for rec, _ in cases.values()])
    with pytest.warns(LogWarning) as caught:
        assert list(read_log(path)) == []
    messages = [str(w.message) for w in caught]
    assert len(messages) == len(cases)
    for lineno, (name, (_, reason)) in enumerate(cases.items(), 1):
        assert messages[lineno - 1].startswith(f"{path}:{lineno}: skipped"), name
        assert reason in messages[lineno - 1], (name, messages[lineno - 1])
    # every reader agrees: load_best and plot raise clear errors, load_history loads nothing
    with pytest.raises(ValueError, match="is not a tuning log: no line of it is a tuning record"):
        load_best(path, "llvm")
    with pytest.warns(LogWarning):
        assert RandomTuner(task).load_history(read_log(path)) == 0
    with pytest.warns(LogWarning), pytest.raises(ValueError, match="no successful trial"):
        plot_log(list(read_log(path)), tmp_path / "curve.png")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("m", "4", "field 'm' must be an int in [1, 1048576], not '4'"),
        ("m", -4, "field 'm' must be an int in [1, 1048576], not -4"),
        ("m", 0, "field 'm' must be an int"),
        ("m", 10**12, "not 1000000000000"),
        ("m", 4.0, "not 4.0"),
        ("m", True, "not True"),
        ("dtype", "float99", "field 'dtype' must be a numpy dtype name"),
        ("prepacked", "yes", "field 'prepacked' must be true or false"),
        ("zz", 1, "unknown fields ['zz']"),
    ],
)
def test_a_logged_workload_of_wrong_types_or_sizes_is_skipped_by_load_best(
    tmp_path, field, value, message
):
    task = _dense()
    wl = {**DENSE, field: value}
    bad = {**_good(task), "workload": wl, "task": workload_key("x86.dense", wl)}
    path = tmp_path / "wl.jsonl"
    _write(path, [_good(task), bad])
    t0 = time.perf_counter()
    with pytest.warns(LogWarning) as caught:
        best = load_best(path, "llvm")
    assert time.perf_counter() - t0 < 5  # a huge size builds no space
    assert best == {task.key: task.space.default.values}  # the good record still applies
    (w,) = [str(w.message) for w in caught]
    assert w.startswith(f"{path}:2: skipped") and message in w, w


def test_a_record_of_a_space_that_changed_is_skipped_and_the_next_best_applies(tmp_path):
    task = _dense()
    default = task.space.default.values
    other = next(c.values for c in task.space if c.values != default)
    path = tmp_path / "changed.jsonl"
    _write(path, [
        _good(task, default, 3e-3),
        _good(task, other, 2e-3),
        {**_good(task, default, 1e-3), "config": {**default, "mr": 7}},  # not a choice
        {**_good(task, default, 1e-3), "config": {**default, "gone": 1}},  # an unknown knob
        {**_good(task, default, 1e-3), "config": {**default, "mc_tiles": 2}},  # now invalid
    ])  # fmt: skip
    with pytest.warns(LogWarning) as caught:
        assert load_best(path, "llvm") == {task.key: other}
    lines = sorted(str(w.message).split(": skipped")[0] for w in caught)
    assert lines == [f"{path}:3", f"{path}:4", f"{path}:5"]
    assert "knob 'mr' must be one of" in str(caught[0].message)
    tuner = RandomTuner(task)
    with pytest.warns(LogWarning) as caught:
        assert tuner.load_history(read_log(path)) == 2
    assert sorted(str(w.message).split(": skipped")[0] for w in caught) == lines
    assert tuner.best_values == other and tuner.best_cost == 2e-3


def test_unknown_templates_are_errors_naming_file_line_and_task(tmp_path):
    rec = {**_good(_dense()), "template": "x86.gone", "task": "x86.gone{}", "workload": {}}
    path = tmp_path / "gone.jsonl"
    _write(path, [_good(_dense()), rec])
    message = f"{path}:2: tuning log record for x86.gone{{}}: template must be one of"
    with pytest.raises(TaskError, match=re.escape(message)):
        load_best(path, "llvm")


def test_resume_skips_bad_lines_keeps_good_trials_and_loses_nothing(tmp_path):
    task = _dense()
    default = task.space.default.values
    other = next(c.values for c in task.space if c.values != default)
    path = tmp_path / "resume.jsonl"
    good = [_good(task, default, 2e-3), _good(task, other, 1e-3)]
    bad = [rec for rec, _ in _corruptions(task).values()][:6]
    _write(path, [good[0], "{not json", *bad, good[1]])
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(_good(task))[:40])  # the last line cut off by a crash
    before = path.read_text()
    builder = _FakeBuilder()
    with pytest.warns(LogWarning) as caught:
        (summary,) = tune_tasks([task], 5, builder, _FakeRunner(), log=path, tuner="random",
                                progress=False)  # fmt: skip
    assert len(caught) == 8 and all(str(w.message).startswith(f"{path}:") for w in caught)
    assert summary.trials == 5 and summary.default_cost == 2e-3
    assert len(builder.built) == 3 and default not in builder.built and other not in builder.built
    after = path.read_text()
    assert after.startswith(before)  # appended after the cut-off line, which is left as it was
    with pytest.warns(LogWarning):
        assert len(list(read_log(path))) == 5


def test_a_huge_logged_workload_of_another_task_does_not_stall_transfer_learning(tmp_path):
    vta = Task("vta.conv2d", VTA, "vta -config=tiny")
    huge = {**VTA, "ic": 10**12}  # its space alone would take hours to enumerate
    poisoned = {**_good(vta, cost=5.0), "workload": huge, "task": workload_key("vta.conv2d", huge),
                "unit": "cycles"}  # fmt: skip
    path = tmp_path / "poisoned.jsonl"
    _write(path, [poisoned])
    t0 = time.perf_counter()
    (summary,) = tune_tasks([_dense()], 2, _FakeBuilder(), _FakeRunner(), log=path, tuner="xgb",
                            progress=False, tuner_options={"feature": "knob"})  # fmt: skip
    assert summary.trials == 2 and time.perf_counter() - t0 < 20
    with pytest.warns(LogWarning, match=r"poisoned.jsonl:1: skipped .* field 'ic' must be"):
        assert load_best(path, "vta") == {}


def test_a_file_that_is_not_a_log_is_never_appended_to(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(_onnx_bytes())
    before = model.read_bytes()
    with pytest.raises(ValueError, match="is not a tuning log"):
        tune_tasks([_dense()], 2, _FakeBuilder(), _FakeRunner(), log=model, progress=False)
    assert model.read_bytes() == before
    with pytest.raises(ValueError, match="is not a tuning log"):
        load_best(model, "llvm")


def test_plot_refuses_a_folder_and_leaves_no_temporary_file(tmp_path):
    task = _dense()
    records = [_good(task), {**_good(task), "tuner": 5}]  # API callers may pass anything
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        plot_log(records, folder)
    png = plot_log(records, tmp_path / "new" / "dir" / "curve.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in png.parent.iterdir()) == ["curve.png"]


# ---- workloads -------------------------------------------------------------------------------


GPU_CONV = {"x": [1, 4, 8, 8], "w": [6, 4, 3, 3], "out": [8, 8], "pads": [1, 1],
            "strides": [1, 1], "dil": [1, 1], "dtype": "float32", "max_threads": 256}  # fmt: skip
GPU_ROWS = {"rows": 4, "n": 100, "op": "softmax", "dtype": "float32", "max_threads": 256}

_TEMPLATES = {
    "gpu.conv2d": (GPU_CONV, "opencl"),
    "gpu.conv2d_gemm": (GPU_CONV, "opencl"),
    "gpu.depthwise_conv2d": ({**GPU_CONV, "w": [4, 1, 3, 3]}, "opencl"),
    "gpu.row_reduce": (GPU_ROWS, "opencl"),
    "x86.dense": (DENSE, "llvm"),
    "x86.conv2d_nchwc": (CONV, "llvm"),
    "x86.depthwise_conv2d": (DEPTHWISE, "llvm"),
    "vta.conv2d": (VTA, "vta -config=tiny"),
}

_BAD_WORKLOADS = [
    ("x86.conv2d_nchwc", {"c": "64"}, "field 'c' must be an int in [1, 1048576], not '64'"),
    ("x86.conv2d_nchwc", {"stride": 0}, "field 'stride' must be an int in [1,"),
    ("x86.conv2d_nchwc", {"pad": -1}, "field 'pad' must be an int in [0,"),
    ("x86.conv2d_nchwc", {"k": 10**12}, "not 1000000000000"),
    ("x86.conv2d_nchwc", {"r": 13}, "the output of shape (1, 16, 0, 10) must have"),
    ("x86.conv2d_nchwc", {"h": MAX_DIM, "w": MAX_DIM},
     "the data of shape (1, 8, 1048576, 1048576) must have between 1 and 2147483648"),
    ("x86.conv2d_nchwc", {"dtype": None}, "field 'dtype' must be a numpy dtype name"),
    ("x86.dense", {"m": 1 << 16, "k": 1 << 16}, "the data of shape (65536, 65536)"),
    ("x86.depthwise_conv2d", {"pads": [1, 1]}, "field 'pads' must be a list of 4 ints"),
    ("x86.depthwise_conv2d", {"strides": "ab"}, "field 'strides' must be a list of 2 ints"),
    ("x86.depthwise_conv2d", {"dil": [-1, -1]}, "field 'dil' must be a list of 2 ints"),
    ("x86.depthwise_conv2d", {"c": 1}, "field 'c' must be at least 2 (one channel is an"),
    ("x86.depthwise_conv2d", {"pads": [1, 1, 1, 2]}, "must end with the padding its output reads"),
    ("vta.conv2d", {"ic": 10**12}, "field 'ic' must be an int"),
    ("vta.conv2d", {"h": "6"}, "field 'h' must be an int"),
    ("vta.conv2d", {"pad_h": 99}, "pad_h must be in [0, 15]"),
    ("vta.conv2d", {"hw": "pynq"}, "field 'hw' must be a JSON object"),
    ("vta.conv2d", {"hw": {"log_batch": 30}}, "HWConfig.log_batch must be an int in [0, 4]"),
    ("vta.conv2d", {"ic": 1 << 16, "oc": 1 << 16}, "the weight of shape (65536, 65536, 3, 3)"),
    ("vta.conv2d", {"residual": "yes"}, "field 'residual' must be true or false"),
    ("vta.conv2d", {"n": None}, "field 'n' must be an int"),
    ("gpu.conv2d", {"w": [6, 3, 3, 3]}, "weights [6, 3, 3, 3] must have 4 input channels"),
    ("gpu.conv2d_gemm", {"pads": [1, 1, 1, 1]}, "field 'pads' must be a list of 2 ints"),
    ("gpu.depthwise_conv2d", {"w": [6, 1, 3, 3]}, "must be [channels, 1, r, s] for an input of 4"),
    ("gpu.depthwise_conv2d", {"out": [0, 8]}, "field 'out' must be a list of 2 ints"),
    ("gpu.depthwise_conv2d", {"groups": 4}, "has unknown fields ['groups']"),
    ("gpu.conv2d", {"groups": 2}, "weights [6, 4, 3, 3] must have 4 input channels over 2 groups"),
    ("gpu.conv2d_gemm", {"w": [5, 2, 3, 3], "groups": 2}, "a multiple of 2 groups as output"),
    ("gpu.conv2d", {"x": [1, 4, 5, 8, 8]}, "field 'w' must be a list of 5 ints"),
    ("gpu.conv2d_gemm", {"x": [1, 4, 5, 8, 8], "w": [6, 4, 3, 3, 3]},
     "field 'out' must be a list of 3 ints"),
    ("gpu.row_reduce", {"op": "median"}, "field 'op' must be one of"),
    ("gpu.row_reduce", {"n": 1 << 20, "rows": 1 << 20}, "the input of shape (1048576, 1048576)"),
]  # fmt: skip


@pytest.mark.parametrize("template, changes, message", _BAD_WORKLOADS)
def test_a_workload_of_wrong_types_or_sizes_is_a_task_error_naming_the_field(
    template, changes, message
):
    wl, target = _TEMPLATES[template]
    t0 = time.perf_counter()
    with pytest.raises(TaskError, match="workload") as info:
        Task(template, {**wl, **changes}, target)
    assert message in str(info.value), str(info.value)
    assert time.perf_counter() - t0 < 5


def test_a_workload_that_is_not_json_or_misses_fields_is_a_task_error():
    with pytest.raises(TaskError, match="must be JSON data"):
        Task("x86.dense", {**DENSE, "m": np.int64(4)}, "llvm")
    with pytest.raises(TaskError, match="must be JSON data"):
        Task("x86.dense", {**DENSE, "m": math.nan}, "llvm")
    with pytest.raises(TaskError, match="must be a JSON object .a dict., not str"):
        Task("x86.dense", "m=4", "llvm")  # type: ignore[arg-type]
    with pytest.raises(TaskError, match="misses the field 'k'"):
        Task("x86.dense", {"m": 4, "n": 8, "dtype": "float32"}, "llvm")
    with pytest.raises(TaskError, match="weight must be a positive int, not 0"):
        Task("x86.dense", DENSE, "llvm", weight=0)
    with pytest.raises(TaskError, match="has no config space"):  # no tiling fits the SRAMs
        Task("vta.conv2d", {**VTA, "h": 4096, "w": 4096}, "vta -config=tiny").space  # noqa: B018
    assert Task("x86.dense", {"m": 1, "n": 8, "k": 8, "dtype": "float32"}, "llvm").space


def test_extraction_leaves_a_workload_beyond_the_bounds_untuned_with_a_warning(monkeypatch):
    from tensorforge.compiler.autotune import task as task_module

    monkeypatch.setattr(task_module, "MAX_ELEMENTS", 4096)  # the convolutions' data is larger
    with pytest.warns(UserWarning, match="not tuned .it keeps its default config.: x86.conv2d"):
        tasks = extract_tasks(_onnx_bytes(), "llvm")
    assert [t.template for t in tasks] == ["x86.dense"]


# ---- API misuse ----------------------------------------------------------------------------------


def test_constructors_reject_counts_and_timeouts_that_would_fail_every_trial():
    for make, match in [
        (lambda: Builder(0), "Builder n_parallel must be an int of at least 1"),
        (lambda: Builder(1, timeout=0), "Builder timeout must be a positive number"),
        (lambda: Builder(1, timeout=math.nan), "Builder timeout must be a positive number"),
        (lambda: Builder(1, timeout=math.inf), "Builder timeout must be a finite number"),
        (lambda: LocalRunner(repeat=0), "LocalRunner repeat must be an int of at least 1"),
        (lambda: LocalRunner(threads=0), "LocalRunner threads must be an int of at least 1"),
        (lambda: LocalRunner(timeout=-1), "local runner timeout must be a positive number"),
        (lambda: LocalRunner(min_repeat_ms=-5), "min_repeat_ms must be a number >= 0"),
        (lambda: SimRunner(n_parallel=0), "SimRunner n_parallel must be an int of at least 1"),
        (lambda: make_runner("nope"), "runner must be one of local, cyclesim, rtl, cluster"),
        (lambda: make_tuner("nope", _dense()), "tuner must be one of xgb, random, grid, ga"),
    ]:
        with pytest.raises(ValueError, match=match):
            make()


def test_measure_a_config_not_in_the_space_is_a_space_error_before_anything_is_built():
    task = _dense()
    default = task.space.default.values
    builder = _FakeBuilder()
    for bad, match in [({**default, "mr": 7}, "config 1 of the 2 to measure: knob 'mr'"),
                       ({**default, "zz": 1}, "unknown knobs \\['zz'\\]"),
                       (5, "a config must be a mapping")]:  # fmt: skip
        with pytest.raises(SpaceError, match=match):
            measure(task, [default, bad], builder, _FakeRunner())
    assert builder.built == []
    # a point its constraint rejects is an `invalid` trial, never built; values are canonical
    invalid = {**default, "mc_tiles": 2}
    results = measure(task, [invalid, {**default, "parallel": 1}], builder, _FakeRunner())
    assert [r.error for r in results] == ["invalid", ""]
    assert results[1].values["parallel"] is True and builder.built == [default]


def test_tuning_budgets_that_tune_nothing_are_errors():
    task, builder, runner = _dense(), _FakeBuilder(), _FakeRunner()
    assert tune_tasks([], 5, builder, runner, progress=False) == []
    for kwargs, match in [({"n_trial": 0}, "n_trial must be an int of at least 1, not 0"),
                          ({"n_trial": -3}, "n_trial must be an int of at least 1, not -3"),
                          ({"batch_size": 0}, "batch_size must be an int of at least 1, not 0"),
                          ({"early_stopping": 0}, "early_stopping must be an int of at least 1"),
                          ({"early_stopping": -1}, "early_stopping must be an int")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            tune_tasks([task], **{"n_trial": 3, **kwargs}, builder=builder, runner=runner,
                       progress=False)  # fmt: skip
    tuner = RandomTuner(task)
    assert tuner.tune(0, builder, runner) is None  # a budget already spent: nothing to do
    for kwargs, match in [({"n_trial": -1}, "n_trial must be an int of at least 0, not -1"),
                          ({"batch_size": -1}, "batch_size must be an int of at least 1"),
                          ({"early_stopping": 0}, "early_stopping must be an int of")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            tuner.tune(**{"n_trial": 3, **kwargs}, builder=builder, runner=runner)
    assert builder.built == [] and tuner.trials == []
    tuner.measure_indices([3, 3, 5], builder, runner, None, None)  # a point twice: one trial
    assert sorted(i for i, _ in tuner.trials) == [3, 5]


# ---- workers -------------------------------------------------------------------------------------


class _NoPickle:
    def __reduce__(self):
        raise TypeError("this object refuses to be pickled")


def _fails_to_load():
    raise RuntimeError("this result refuses to be unpickled")


class _NoLoad:
    def __reduce__(self):
        return (_fails_to_load, ())


def _unpicklable_result(x: int):
    return _NoPickle() if x == 1 else x


def _unloadable_result(x: int):
    return _NoLoad() if x == 1 else x


def _noisy(x: int) -> int:
    print("a job that prints " * 50)  # to stdout, in Python
    sys.stdout.flush()
    os.write(1, b"a job that writes to fd 1\n")
    ctypes.CDLL(None).printf(b"a job that calls printf\n")
    sys.stdin.read()  # and reads stdin: nothing there, the next job is safe
    return x * 2


def _pid(_: int) -> int:
    return os.getpid()


def _big(mib: int) -> bytes:
    return b"\x07" * (mib << 20)


def _pool_children() -> set[int]:
    """The worker processes of this process's pools (Linux /proc)."""
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"autotune.pool" in cmd:
            out.add(int(pid))
    return out


def test_pool_turns_unpicklable_jobs_and_results_into_errors_and_goes_on():
    before = _pool_children()
    with WorkerPool(2) as pool:
        out = pool.map(_unpicklable_result, [(0,), (1,), (2,)], timeout=60)
        assert [r.status for r in out] == ["ok", "error", "ok"] and out[2].value == 2
        assert "result (_NoPickle) cannot be pickled: this object refuses" in out[1].message
        out = pool.map(_unloadable_result, [(0,), (1,), (2,)], timeout=60)
        assert [r.status for r in out] == ["ok", "error", "ok"]
        assert "cannot be unpickled here: RuntimeError('this result refuses" in out[1].message
        out = pool.map(_pid, [(0,), (_NoPickle(),), (2,)], timeout=60)
        assert [r.status for r in out] == ["ok", "error", "ok"]
        assert "the job cannot be sent to a worker process" in out[1].message
        (out,) = pool.map(lambda x: x, [(0,)], timeout=60)
        assert out.status == "error" and "cannot be sent" in out.message
        assert _pool_children() - before <= {w.proc.pid for w in pool._idle}  # none leaked
    assert _pool_children() - before == set()


def test_a_worker_whose_tuner_was_killed_exits_quietly():
    """SIGKILL of `tensorforge tune` leaves its workers writing into a closed pipe: each must
    exit without a BrokenPipeError traceback on the terminal."""
    from tensorforge.compiler.autotune.pool import _send

    worker = subprocess.Popen([sys.executable, "-m", "tensorforge.compiler.autotune.pool"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)  # fmt: skip
    _send(worker.stdin, (list(sys.path), {}))
    worker.stdout.close()  # the reader is gone before the result comes
    _send(worker.stdin, (time.sleep, (0.2,)))
    _send(worker.stdin, None)
    worker.stdin.close()
    assert worker.wait(30) == 0
    assert worker.stderr.read() == b""
    worker.stderr.close()


def test_pool_survives_noisy_jobs_killed_workers_and_large_results():
    with WorkerPool(1) as pool:
        out = pool.map(_noisy, [(1,), (2,)], timeout=60)
        assert [(r.status, r.value) for r in out] == [("ok", 2), ("ok", 4)], out
        (pid,) = [r.value for r in pool.map(_pid, [(0,)], timeout=60)]
        os.kill(pid, signal.SIGKILL)  # the OOM killer takes the idle worker between jobs
        (worker,) = pool._idle
        worker.proc.wait(10)
        (again,) = pool.map(_pid, [(0,)], timeout=60)
        assert again.status == "ok" and again.value != pid
        (big,) = pool.map(_big, [(64,)], timeout=60)
        assert big.status == "ok" and len(big.value) == 64 << 20 and big.value[-1] == 7


# ---- the command line ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "small.onnx"
    path.write_bytes(_onnx_bytes())
    return path


@pytest.mark.parametrize(
    "args, message",
    [
        (["--trials", "0"], "--trials must be at least 1, not 0"),
        (["--trials", "-5"], "--trials must be at least 1, not -5"),
        (["--batch", "0"], "--batch must be at least 1, not 0"),
        (["--parallel", "0"], "--parallel must be at least 1, not 0"),
        (["--timeout", "0"], "--timeout must be a positive, finite number of seconds, not 0"),
        (["--timeout", "-1"], "--timeout must be a positive"),
        (["--timeout", "nan"], "--timeout must be a positive, finite number of seconds, not nan"),
        (["--early-stopping", "0"], "--early-stopping must be at least 1, not 0"),
        (["--tasks", "x,1"], "--tasks must be task numbers like 0,3, not 'x,1'"),
        (["--tasks", ",,"], "--tasks must name at least one task number"),
        (["--tasks", "1,1"], "--tasks names tasks [1] more than once"),
        (["--tasks", "9"], "--tasks [9] out of range: the model has tasks 0..2"),
        (["--target", "garbage"], "target kind must be one of"),
        (["--cluster", ""], "--cluster needs a scheduler address"),
        (["--cluster", "garbage"], "cannot reach a Dask scheduler at garbage"),
        (["--plot", "x.jsonl"], "--plot draws a log and takes no MODEL"),
    ],
)
def test_cli_rejects_bad_options_with_one_clear_line(model, tmp_path, capsys, args, message):
    if "--cluster" in args and args[-1]:
        pytest.importorskip("distributed")
    log = tmp_path / "t.jsonl"
    rc = main(["tune", str(model), "--log", str(log), "--no-progress", *args])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("tensorforge: error: ") and message in err, err
    assert "Traceback" not in err and not log.exists()


def test_cli_errors_name_the_model_and_the_log(model, tmp_path, capsys):
    (tmp_path / "text.onnx").write_text("hello")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "corrupt.jsonl").write_text("{oops\n")
    cases = [
        (["tune", str(tmp_path / "missing.onnx")], "missing.onnx: not an ONNX model"),
        (["tune", str(tmp_path / "text.onnx")], "text.onnx: not an ONNX model"),
        (["tune", "--plot", str(tmp_path / "missing.jsonl")], "No such file or directory"),
        (["tune", "--plot", str(tmp_path / "empty.jsonl")],
         "empty.jsonl: no successful trial to plot (of 0 trials)"),
        (["tune", "--plot", str(tmp_path / "corrupt.jsonl")], "corrupt.jsonl is not a tuning log"),
        (["tune", str(model), "--log", str(model), "--tasks", "2"],
         "small.onnx is not a tuning log"),
        (["compile", str(model), "-o", str(tmp_path / "m.tfm"), "--tuning-log", str(model)],
         "small.onnx is not a tuning log"),
    ]  # fmt: skip
    before = model.read_bytes()
    for args, message in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LogWarning)
            assert main(args) == 1, args
        err = capsys.readouterr().err
        assert err.startswith("tensorforge: error: ") and message in err, (args, err)
    assert model.read_bytes() == before  # the model given as the log is untouched


def test_cli_plot_writes_into_a_new_folder(tmp_path, capsys):
    log, png = tmp_path / "t.jsonl", tmp_path / "a" / "b" / "curve.png"
    task = _dense()
    _write(log, [_good(task, cost=2e-3), _good(task, next(iter(task.space)).values, 1e-3)])
    assert main(["tune", "--plot", str(log), "-o", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and f"wrote {png}" in capsys.readouterr().out


def test_an_unreachable_cluster_fails_within_the_connect_timeout_and_exits_cleanly():
    pytest.importorskip("distributed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "from tensorforge.compiler.autotune.cluster import ClusterError, ClusterRunner\n"
        "import sys\n"
        "for address in sys.argv[1:]:\n"
        "    try:\n"
        "        ClusterRunner(address, connect_timeout=1)\n"
        "    except ClusterError as exc:\n"
        "        print(exc)\n"
    )
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, f"tcp://127.0.0.1:{port}", "garbage"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 2, proc.stderr
    assert f"scheduler at tcp://127.0.0.1:{port} does not answer within 1 s" in lines[0]
    assert "cannot reach a Dask scheduler at garbage (ValueError" in lines[1]
    # no client left half made, waiting for its stopped event loop at exit with a traceback
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert time.perf_counter() - t0 < 15
