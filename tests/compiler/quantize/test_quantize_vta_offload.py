"""The offloaded layers of quantized graphs on the behavioural simulator: every tf.qconv2d /
tf.qdense the partition gives to the accelerator is compiled with the accelerator code
generator (compiler/topi/vta) and run on the functional simulator by ``OffloadRunner``, which
(with ``check=True``) compares each layer's output with the graph's int8 kernel on the same
input, bit for bit. Two rungs of the correctness ladder: the numpy int8 reference (the graph's
kernels) and the functional simulator running compiled program images.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import resnet18
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.offload import OffloadMismatchError, OffloadRunner, compile_layer
from tensorforge.compiler.graph.passes import optimize, partition_graph
from tensorforge.compiler.quantize.graph import quantize_graph
from tensorforge.digits import load_digits_assets
from tensorforge.hw.config import HWConfig


def _digits(cfg: HWConfig, images: int):
    model, split = load_digits_assets()
    shapes = {"input": (images, 1, 8, 8)}
    graph = optimize(from_onnx(str(model), input_shapes=shapes))
    q = partition_graph(quantize_graph(graph, {"input": split["calib_images"]}, cfg), cfg)
    return q, {"input": split["images"][:images]}, split["labels"][:images]


@pytest.mark.parametrize(("preset", "images", "vthreads"), [("pynq", 450, 1), ("tiny", 16, 2)])
def test_digits_offloaded_layers_on_the_simulator_equal_the_int8_graph(preset, images, vthreads):
    cfg = HWConfig.preset(preset).replace(alu_mul=False)
    q, inputs, labels = _digits(cfg, images)
    runner = OffloadRunner(q, cfg, "sim", vthreads, check=True)
    assert [n.name for n in runner.offloaded()] == ["conv2", "conv3", "dense"]
    outputs, layers = runner.run(inputs)
    ran = {layer.name: layer for layer in layers if layer.runs_on == "vta"}
    assert sorted(ran) == ["conv2", "conv3", "dense"]
    assert all(layer.counters["gemm_counter"] > 0 for layer in ran.values())
    plain = run_graph(q, inputs)  # the whole int8 graph on the reference kernels
    assert np.array_equal(outputs[q.outputs[0]], plain[q.outputs[0]])
    if images == 450:
        accuracy = np.mean(np.argmax(outputs[q.outputs[0]], axis=1) == labels)
        assert accuracy >= 0.9778 - 0.02  # float accuracy (docs/quantization.md) - 2 points


def test_resnet18_offloaded_conv_and_dense_layers_on_the_simulator_equal_the_int8_graph():
    rng = np.random.default_rng(0)
    calib = [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(4)]
    cfg = HWConfig.preset("pynq").replace(alu_mul=False)
    q = partition_graph(quantize_graph(optimize(from_onnx(resnet18(32))), calib, cfg), cfg)
    x = {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    runner = OffloadRunner(q, cfg, check=True)
    assert len(runner.offloaded()) == 20  # every conv but the 3-channel stem, and the classifier
    outputs, _ = runner.run(x)
    assert np.array_equal(outputs[q.outputs[0]], run_graph(q, x)[q.outputs[0]])


def test_a_wrong_device_result_is_caught_and_named(monkeypatch):
    cfg = HWConfig.preset("tiny").replace(alu_mul=False)
    q, inputs, _ = _digits(cfg, 4)
    runner = OffloadRunner(q, cfg, check=True)
    kernel = runner._kernel(runner.offloaded()[0], {**q.constants}, (4, 16, 8, 8))
    real_run = kernel.run

    def off_by_one(x, backend="sim", **options):
        y, result = real_run(x, backend, **options)
        return (y.astype(np.int16) + 1).clip(-128, 127).astype(np.int8), result

    monkeypatch.setattr(kernel, "run", off_by_one)
    with pytest.raises(OffloadMismatchError, match=r"layer 'conv2' \(tf.qconv2d\) on backend sim"):
        runner.run(inputs)


def test_mul_requantization_is_refused_with_the_node_named():
    cfg = HWConfig.preset("pynq")  # alu_mul=True: the quantizer may choose multipliers
    model, split = load_digits_assets()
    graph = optimize(from_onnx(str(model), input_shapes={"input": (2, 1, 8, 8)}))
    q = quantize_graph(graph, {"input": split["calib_images"]}, cfg, mode="mul")
    q = partition_graph(q, cfg)
    node = next(n for n in q.nodes if n.attr_dict.get("multiplier", 1) != 1)
    env = dict(q.constants)
    with pytest.raises(ValueError, match=f"node '{node.name}'.*only shift requantization"):
        compile_layer(cfg, node, env, (2, 16, 8, 8), 1)
