"""Tuning whole models: task extraction, tuning with a log, resuming, and compiling with the
log applied, on the CPU (oracle: onnxruntime) and on the accelerator (oracle: the untuned
module, bit for bit, since the int8 semantics do not depend on the schedule), plus the CLI."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

import tensorforge
from tensorforge.cli import main
from tensorforge.compiler.autotune.driver import extract_tasks, tune_tasks
from tensorforge.compiler.autotune.log import TuningLog, read_log
from tensorforge.compiler.autotune.measure import LocalRunner, MeasureResult, SimRunner
from tensorforge.compiler.autotune.task import Task, TaskError
from tensorforge.compiler.frontend.onnx_builders import (
    OnnxModelBuilder,
    small_cnn,
)
from tensorforge.digits import load_digits_assets


def _bytes(model) -> bytes:
    return model if isinstance(model, bytes) else model.SerializeToString()


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "small.onnx"
    path.write_bytes(_bytes(small_cnn()))
    return path


def test_cpu_model_tuned_then_compiled_with_the_log(cnn, builder, tmp_path):
    tasks = extract_tasks(str(cnn), "llvm")
    assert [t.template for t in tasks].count("x86.conv2d_nchwc") == 2
    assert [t.template for t in tasks].count("x86.dense") == 1
    log = tmp_path / "tune.jsonl"
    with LocalRunner(repeat=2, min_repeat_ms=5) as runner:
        first = tune_tasks(tasks, 3, builder, runner, log=log, tuner="random", progress=False)
        assert [s.trials for s in first] == [3, 3, 3]
        assert all(s.default_cost and s.best_cost <= s.default_cost for s in first)
        again = tune_tasks(tasks, 5, builder, runner, log=log, tuner="ga", progress=False)
    assert [s.trials for s in again] == [5, 5, 5]  # 3 resumed from the log + 2 new
    assert len(list(read_log(log))) == 15
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    module = tensorforge.compile(str(cnn), tuning_log=log)
    assert module.stats["tuning"]["applied"] == 3 and module.stats["tuning"]["untuned"] == []
    (want,) = ort.InferenceSession(str(cnn)).run(None, {"x": x})
    got = module.run({"x": x})[module.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_logged_config_is_the_one_compiled(tmp_path):
    """A lone convolution keeps NCHW (no chain to keep blocked): its task is the NCHW kernel's,
    and a logged config's own channel blocks are the ones its weights are packed in."""
    b = OnnxModelBuilder("lone")
    x = b.input("x", (1, 16, 14, 14))
    model = _bytes(b.model([b.op("Relu", [b.conv(x, 16, 32, 3, bias=True)])]))
    (task,) = extract_tasks(model, "llvm")
    assert "layout" not in task.workload
    values = {**task.space.default.values, "ic_bn": 4, "oc_bn": 8, "reg_n": 2}
    log = tmp_path / "one.jsonl"
    with TuningLog(log) as out:
        out.write(task, MeasureResult(values, 1e-6, [1e-6]), 0)
    module = tensorforge.compile(model, tuning_log=log)
    assert any(".nchwc4x8" in name for name in module.constants)  # the weights packed 4 x 8
    assert module.stats["tuning"]["applied"] == 1 and module.stats["tuning"]["default"] == 0
    feed = {"x": np.random.default_rng(1).standard_normal((1, 16, 14, 14)).astype(np.float32)}
    (want,) = ort.InferenceSession(model).run(None, feed)
    np.testing.assert_allclose(module.run(feed)[module.outputs[0]], want, rtol=1e-4, atol=1e-5)


def _kernel_ops(module) -> list[str]:
    return [call.label.split(" (")[0] for call in module.calls]


def test_blocked_chain_tasks_are_tuned_as_blocked_kernels_and_stay_blocked(cnn, tmp_path):
    """small_cnn's two convs form a blocked chain (the stem packs its RGB input): their tasks
    are the blocked kernels with the chain's blocks, a logged config applies to them without
    taking them out of the chain (the same kernels as untuned), and the module still matches
    onnxruntime."""
    convs = [t for t in extract_tasks(str(cnn), "llvm") if t.template == "x86.conv2d_nchwc"]
    assert sorted((t.workload["layout"], tuple(t.workload["blocks"])) for t in convs) == [
        ("NCHW-NCHWc", (3, 16)), ("NCHWc", (16, 32))]  # fmt: skip
    log = tmp_path / "blocked.jsonl"
    with TuningLog(log) as out:
        for t in convs:
            ic_bn, oc_bn = t.workload["blocks"]
            assert [k.values for k in t.space.knobs[:2]] == [(ic_bn,), (oc_bn,)]
            values = {**t.space.default.values, "reg_n": 3, "parallel": False}
            out.write(t, MeasureResult(values, 1e-6, [1e-6]), 0)
    tuned = tensorforge.compile(str(cnn), tuning_log=log)
    assert tuned.stats["tuning"]["applied"] == 2 and tuned.stats["tuning"]["default"] == 1
    assert _kernel_ops(tuned) == _kernel_ops(tensorforge.compile(str(cnn)))
    assert sum("ConvNCHWc" in op for op in _kernel_ops(tuned)) == 2
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (want,) = ort.InferenceSession(str(cnn)).run(None, {"x": x})
    np.testing.assert_allclose(tuned.run({"x": x})[tuned.outputs[0]], want, rtol=1e-4,
                               atol=1e-5)  # fmt: skip


def test_a_log_of_the_nchw_kernels_still_loads_and_says_what_it_did_not_apply(cnn, tmp_path):
    """A log written when the tasks were the NCHW kernels: it loads, its config of a conv that
    now runs blocked is not applied (a warning names the workload), that conv takes the
    blocked default and is listed as untuned, and the chain stays blocked."""
    (task,) = [t for t in extract_tasks(str(cnn), "llvm") if t.workload.get("c") == 16]
    nchw = {k: v for k, v in task.workload.items() if k not in ("layout", "blocks")}
    old = Task("x86.conv2d_nchwc", nchw, "llvm")
    log = tmp_path / "old.jsonl"
    with TuningLog(log) as out:
        out.write(old, MeasureResult({**old.space.default.values, "ic_bn": 4}, 1e-6, [1e-6]), 0)
    with pytest.warns(UserWarning, match=r"NCHW conv2d .*'c': 16.* runs blocked"):
        module = tensorforge.compile(str(cnn), tuning_log=log)
    assert module.stats["tuning"]["applied"] == 0
    assert task.key in module.stats["tuning"]["untuned"]
    assert _kernel_ops(module) == _kernel_ops(tensorforge.compile(str(cnn)))


def _depthwise_chain() -> bytes:
    """3x3 convs around a stride-1 and a stride-2 depthwise 3x3: one blocked chain."""
    b = OnnxModelBuilder("dw_chain")
    h = b.op("Relu", [b.conv(b.input("x", (1, 16, 28, 28)), 16, 32, 3)])
    h = b.op("Relu", [b.conv(h, 32, 32, 3, group=32)])
    h = b.op("Relu", [b.conv(h, 32, 32, 3)])
    h = b.op("Relu", [b.conv(h, 32, 32, 3, stride=2, group=32)])
    return _bytes(b.model([b.conv(h, 32, 32, 3)]))


def test_depthwise_convolutions_are_tasks_and_their_configs_apply(tmp_path):
    model = _depthwise_chain()
    tasks = extract_tasks(model, "llvm")
    dw = [t for t in tasks if t.template == "x86.depthwise_conv2d"]
    assert len(dw) == 2  # one stride-1 and one stride-2 depthwise 3x3, both in the chain
    assert all((t.workload["layout"], t.workload["block"]) == ("NCHWc", 32) for t in dw)
    log = tmp_path / "dw.jsonl"
    with TuningLog(log) as out:
        for t in dw:
            values = dict(t.space.default.values, reg_n=2, parallel=False)
            out.write(t, MeasureResult(values, 1e-6, [1e-6]), 0)
    module = tensorforge.compile(model, tuning_log=log)
    assert module.stats["tuning"]["applied"] == 2
    assert _kernel_ops(module) == _kernel_ops(tensorforge.compile(model))
    name = ort.InferenceSession(model).get_inputs()[0].name
    x = np.random.default_rng(2).standard_normal((1, 16, 28, 28)).astype(np.float32)
    (want,) = ort.InferenceSession(model).run(None, {name: x})
    np.testing.assert_allclose(module.run({name: x})[module.outputs[0]], want, rtol=1e-4,
                               atol=1e-4)  # fmt: skip


def test_grouped_convolutions_are_conv2d_tasks_with_groups_and_their_configs_apply(tmp_path):
    """A RegNet-style grouped 3x3 (group width 8) becomes an `x86.conv2d_nchwc` task whose
    workload carries `groups`; a non-default config from a log applies, and the module still
    matches onnxruntime."""
    b = OnnxModelBuilder("grouped")
    x = b.input("x", (1, 32, 14, 14))
    model = _bytes(b.model([b.op("Relu", [b.conv(x, 32, 32, 3, group=4, bias=True)])]))
    (task,) = [t for t in extract_tasks(model, "llvm") if t.template == "x86.conv2d_nchwc"]
    assert task.workload["groups"] == 4
    values = dict(task.space.default.values, oc_bn=4, reg_n=7)
    log = tmp_path / "g.jsonl"
    with TuningLog(log) as out:
        out.write(task, MeasureResult(values, 1e-6, [1e-6]), 0)
    module = tensorforge.compile(model, tuning_log=log)
    assert module.stats["tuning"]["applied"] == 1
    feed = {"x": np.random.default_rng(3).standard_normal((1, 32, 14, 14)).astype(np.float32)}
    (want,) = ort.InferenceSession(model).run(None, feed)
    np.testing.assert_allclose(module.run(feed)[module.outputs[0]], want, rtol=1e-4, atol=1e-4)


def test_accelerator_model_tuned_on_the_cycle_model_is_bit_exact_and_not_slower(builder, tmp_path):
    model, split = load_digits_assets()
    shapes, calib = {"input": (4, 1, 8, 8)}, {"input": split["calib_images"]}
    target = "vta -config=tiny -device=cyclesim"
    tasks = extract_tasks(str(model), target, shapes, calib)
    assert len(tasks) == 3 and {t.template for t in tasks} == {"vta.conv2d"}
    log = tmp_path / "vta.jsonl"
    with SimRunner("cyclesim", n_parallel=2) as runner:
        summaries = tune_tasks(tasks, 6, builder, runner, log=log, tuner="random", seed=3,
                               progress=False)  # fmt: skip
    assert all(s.failures == 0 and s.best_cost <= s.default_cost for s in summaries)
    inputs = {"input": split["images"][:4]}
    default = tensorforge.compile(str(model), target, shapes, calibration=calib)
    tuned = tensorforge.compile(str(model), target, shapes, calibration=calib, tuning_log=log)
    assert tuned.stats["tuning"]["applied"] == 3
    out = tuned.outputs[0]
    assert np.array_equal(tuned.run(inputs)[out], default.run(inputs)[out])
    cycles = [sum(r.cycles for r in m.device_results().values()) for m in (default, tuned)]
    assert cycles[1] <= cycles[0] * 1.02, cycles


def test_cli_tunes_lists_plots_and_compiles_with_the_log(cnn, tmp_path, capsys):
    log, png = tmp_path / "cli.jsonl", tmp_path / "curve.png"
    assert main(["tune", str(cnn), "--list"]) == 0
    assert "x86.dense 1x32 n10" in capsys.readouterr().out
    args = ["tune", str(cnn), "--trials", "2", "--tuner", "random", "--log", str(log),
            "--tasks", "2", "--no-progress", "--parallel", "1", "--confirm", "1"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "x86.dense 1x32 n10" in out and "speedup" in out
    assert {r["template"] for r in read_log(log)} == {"x86.dense"}
    assert {r["tuner"] for r in read_log(log)} == {"random", "confirm"}
    assert main(["tune", "--plot", str(log), "-o", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    tfm = tmp_path / "m.tfm"
    assert main(["compile", str(cnn), "-o", str(tfm), "--tuning-log", str(log),
                 "--no-progress"]) == 0  # fmt: skip
    assert "1 kernels use tuned configs, 2 the default" in capsys.readouterr().out


def test_cli_and_api_errors_are_clear(cnn, tmp_path, capsys):
    assert main(["tune", str(cnn), "--tasks", "7"]) == 1
    assert "--tasks [7] out of range: the model has tasks 0..2" in capsys.readouterr().err
    assert main(["tune", str(cnn), "--runner", "cyclesim"]) == 1
    assert "accelerator tasks, not llvm" in capsys.readouterr().err
    assert main(["tune"]) == 1
    assert "tune needs a MODEL" in capsys.readouterr().err
    assert main(["tune", str(cnn), "--confirm", "0"]) == 1
    assert "--confirm must be at least 1, not 0" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    rec = {"format": "tensorforge-tune/1", "task": "x86.gone{}", "template": "x86.gone",
           "workload": {}, "target": "llvm", "config": {}, "cost": 1.0, "error": ""}  # fmt: skip
    bad.write_text(json.dumps(rec) + "\n")
    with pytest.raises(TaskError, match="template must be one of"):
        tensorforge.compile(str(cnn), tuning_log=bad)
    with pytest.raises(FileNotFoundError):
        tensorforge.compile(str(cnn), tuning_log=tmp_path / "missing.jsonl")


def test_cli_tunes_on_a_local_dask_cluster(cnn, tmp_path, capsys):
    pytest.importorskip("distributed")
    log = tmp_path / "cluster.jsonl"
    args = ["tune", str(cnn), "--cluster", "local", "--trials", "2", "--tuner", "random",
            "--log", str(log), "--tasks", "0", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    records = list(read_log(log))
    assert len(records) == 2 and all(r["error"] == "" and r["cost"] > 0 for r in records)
