"""Tuning GPU kernels with the tuner's one mechanism: the `gpu.dense` template's tasks are
extracted from a model for an OpenCL target, measured on this machine's OpenCL device (PoCL in
tests) against numpy, logged and applied (oracle for the model: onnxruntime)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from compiler_ops import sum_atol

import tensorforge
from tensorforge.compiler.autotune.driver import extract_tasks, tune_tasks
from tensorforge.compiler.autotune.log import read_log
from tensorforge.compiler.autotune.measure import LocalRunner
from tensorforge.compiler.frontend.onnx_builders import mlp


def test_gpu_dense_tasks_tuned_on_opencl_and_applied(builder, tmp_path) -> None:
    model = mlp(batch=8)
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    tasks = extract_tasks(str(path), "opencl")
    assert {t.template for t in tasks} == {"gpu.dense"} and len(tasks) == 3
    assert all(t.workload["max_threads"] == 256 for t in tasks)  # the OpenCL default limit
    log = tmp_path / "gpu.jsonl"
    with LocalRunner(repeat=2, min_repeat_ms=2) as runner:
        summaries = tune_tasks(tasks[:1], 4, builder, runner, log=log, tuner="random",
                               progress=False)  # fmt: skip
    (summary,) = summaries
    assert summary.trials == 4 and summary.failures == 0
    assert summary.best_cost <= summary.default_cost
    records = list(read_log(log))
    assert {r["target"] for r in records} == {"opencl"} and all(r["cost"] for r in records)
    module = tensorforge.compile(str(path), target="opencl", tuning_log=log)
    assert module.stats["tuning"]["applied"] == 1 and module.stats["tuning"]["default"] == 2
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    (want,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    got = module.run({"x": x})[module.outputs[0]]  # the tuned config's summation order
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=sum_atol(want, floor=1e-6))


def test_tuned_opencl_log_is_not_applied_to_cuda(builder, tmp_path) -> None:
    """Logs are per target kind: a config measured on one device says nothing of another."""
    path = tmp_path / "mlp.onnx"
    path.write_bytes(mlp(batch=8).SerializeToString())
    tasks = extract_tasks(str(path), "opencl")
    log = tmp_path / "gpu.jsonl"
    with LocalRunner(repeat=1, min_repeat_ms=1) as runner:
        tune_tasks(tasks[:1], 1, builder, runner, log=log, tuner="random", progress=False)
    module = tensorforge.compile(str(path), target="cuda", tuning_log=log)
    assert module.stats["tuning"]["applied"] == 0


def _tune_and_apply(graph, name, builder, tmp_path, trials, feeds, atol=1e-5) -> list:
    """Saves `graph` as an opset-17 model, tunes each of its OpenCL tasks for `trials` random
    trials (none may fail), compiles with the log (every task's config applied) and checks the
    module against onnxruntime on `feeds`; the tasks, for the caller's checks."""
    from onnx import helper

    path = tmp_path / f"{name}.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                     .SerializeToString())  # fmt: skip
    tasks = extract_tasks(str(path), "opencl")
    log = tmp_path / f"{name}.jsonl"
    with LocalRunner(repeat=1, min_repeat_ms=1) as runner:
        summaries = tune_tasks(tasks, trials, builder, runner, log=log, tuner="random",
                               progress=False)  # fmt: skip
    assert all(s.trials == trials and s.failures == 0 for s in summaries)
    module = tensorforge.compile(str(path), target="opencl", tuning_log=log)
    assert module.stats["tuning"]["applied"] == len(tasks)
    (want,) = ort.InferenceSession(str(path)).run(None, feeds)
    np.testing.assert_allclose(module.run(feeds)["y"], want, rtol=1e-4, atol=sum_atol(want, atol))
    return tasks


def test_gpu_row_reduce_tasks_tuned_on_opencl_and_applied(builder, tmp_path) -> None:
    """The row-reduction template (softmax over rows of 100) has its own task, tuned on OpenCL
    against numpy; the tuned config then compiles a model that matches onnxruntime."""
    from onnx import TensorProto, helper

    shape = [4, 100]
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )  # fmt: skip
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (task,) = _tune_and_apply(graph, "softmax", builder, tmp_path, 3, {"x": x}, atol=1e-6)
    assert task.template == "gpu.row_reduce" and task.workload["op"] == "softmax"


def test_gpu_batch_matmul_is_tuned_through_the_dense_template(builder, tmp_path) -> None:
    """A batched MatMul is a `gpu.dense` task with a batch field, measured against numpy."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 17, 9]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 9, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 17, 20])],
    )  # fmt: skip
    rng = np.random.default_rng(2)
    feeds = {"a": rng.standard_normal((3, 17, 9)).astype(np.float32),
             "b": rng.standard_normal((3, 9, 20)).astype(np.float32)}  # fmt: skip
    (task,) = _tune_and_apply(graph, "bmm", builder, tmp_path, 2, feeds)
    assert task.template == "gpu.dense" and task.workload["batch"] == 3


def test_gpu_conv_templates_tuned_on_opencl_and_applied(builder, tmp_path) -> None:
    """A 3x3 conv (direct, `gpu.conv2d`), a depthwise conv (`gpu.depthwise_conv2d`) and a 1x1
    conv (implicit GEMM, `gpu.conv2d_gemm`): each task measured against numpy's convolution,
    the log applied, the model against onnxruntime."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(3)

    def weights(name, shape):
        values = rng.standard_normal(shape).astype(np.float32).ravel().tolist()
        return helper.make_tensor(name, TensorProto.FLOAT, shape, values)

    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["c", "w2"], ["d"], group=6, pads=[1, 1, 1, 1],
                          strides=[2, 2]),
         helper.make_node("Conv", ["d", "w3"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weights("w1", [6, 3, 3, 3]), weights("w2", [6, 1, 3, 3]), weights("w3", [4, 6, 1, 1])],
    )  # fmt: skip
    x = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    tasks = _tune_and_apply(graph, "conv", builder, tmp_path, 2, {"x": x})
    assert sorted(t.template for t in tasks) == ["gpu.conv2d", "gpu.conv2d_gemm",
                                                 "gpu.depthwise_conv2d"]  # fmt: skip


def _conv_graph(xs, convs, rng):
    """A chain of Convs (weights shape, attributes) from input `x` of shape `xs` to `y`."""
    from onnx import TensorProto, helper

    nodes, inits, src = [], [], "x"
    for i, (ws, attrs) in enumerate(convs):
        values = rng.standard_normal(ws).astype(np.float32).ravel().tolist()
        inits.append(helper.make_tensor(f"w{i}", TensorProto.FLOAT, ws, values))
        dst = "y" if i == len(convs) - 1 else f"c{i}"
        nodes.append(helper.make_node("Conv", [src, f"w{i}"], [dst], **attrs))
        src = dst
    return helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip


def test_gpu_grouped_1d_and_3d_conv_tasks_tuned_on_opencl_and_applied(
    builder, tmp_path, capsys
) -> None:
    """Grouped (direct and implicit-GEMM), 1-D (as 2-D of height 1) and 3-D convolutions are
    tasks of the GPU conv templates (`tensorforge tune --target opencl --list` shows them):
    each measured against numpy's convolution for 2 trials, the log applied, the model against
    onnxruntime."""
    from tensorforge.cli import main

    rng = np.random.default_rng(4)
    grouped = _conv_graph([1, 8, 12, 12], [([8, 4, 3, 3], {"group": 2, "pads": [1] * 4}),
                                           ([12, 2, 1, 1], {"group": 4})], rng)  # fmt: skip
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    tasks = _tune_and_apply(grouped, "grouped", builder, tmp_path, 2, {"x": x})
    assert sorted((t.template, t.workload["groups"]) for t in tasks) == [
        ("gpu.conv2d", 2), ("gpu.conv2d_gemm", 4)]  # fmt: skip
    assert {t.describe() for t in tasks} == {
        "gpu.conv2d 8x12x12 k8 3x3 s1x1 g2",
        "gpu.conv2d_gemm 8x12x12 k12 1x1 s1x1 g4",
    }
    capsys.readouterr()
    assert main(["tune", str(tmp_path / "grouped.onnx"), "--target", "opencl", "--list"]) == 0
    assert "gpu.conv2d 8x12x12 k8 3x3 s1x1 g2" in capsys.readouterr().out
    one_d = _conv_graph([2, 4, 80], [([6, 4, 5], {"pads": [2, 2], "dilations": [1]})], rng)
    x = rng.standard_normal((2, 4, 80)).astype(np.float32)
    (task,) = _tune_and_apply(one_d, "conv1d", builder, tmp_path, 2, {"x": x})
    assert task.template == "gpu.conv2d" and task.workload["x"] == [2, 4, 1, 80]
    three_d = _conv_graph([1, 3, 4, 9, 9], [([4, 3, 3, 3, 3], {"pads": [1] * 6})], rng)
    x = rng.standard_normal((1, 3, 4, 9, 9)).astype(np.float32)
    (task,) = _tune_and_apply(three_d, "conv3d", builder, tmp_path, 2, {"x": x})
    assert task.template == "gpu.conv2d" and task.workload["out"] == [4, 9, 9]


def test_tuning_for_a_gpu_kind_this_machine_lacks_stops_before_any_trial(tmp_path, capsys):
    """No CUDA driver here: `tune --target cuda` says so once instead of logging every trial
    as a failed run."""
    import pytest

    from tensorforge.cli import main
    from tensorforge.runtime.device.gpu import GPUError, open_device

    try:
        open_device("cuda")
        pytest.skip("this machine has a CUDA device")
    except GPUError:
        pass
    path = tmp_path / "mlp.onnx"
    path.write_bytes(mlp().SerializeToString())
    log = tmp_path / "cuda.jsonl"
    assert main(["tune", str(path), "--target", "cuda", "--trials", "2", "--log", str(log)]) != 0
    assert "no CUDA driver" in capsys.readouterr().err and not log.exists()
