"""The offloaded layers of quantized graphs on the behavioural simulator: every tf.qconv2d /
tf.qdense the partition gives to the accelerator is compiled with the accelerator code
generator (compiler/topi/vta) and run on the functional simulator (open_device("sim", cfg));
its int8 output must equal the graph's int8 kernel on the same inputs, bit for bit.

Two rungs of the correctness ladder: the numpy int8 reference (through the graph's kernels)
and the functional simulator running compiled program images.

The code generator requantizes as ``clip((acc + bias) >> shift, lo, 127)`` with ``lo`` 0 (ReLU)
or -128; our requantization rounds (``ADD 2**(shift-1)`` before the shift) and clips to the
narrow range [-127, 127]. Folding the rounding constant into the bias is exact
(``floor((x + 2**(n-1)) / 2**n)`` either way), so the outputs agree bit for bit once the
simulator's result is clipped to our ``out_lo`` (a no-op with ReLU, and on every layer below:
no output reached -128).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import resnet18
from tensorforge.compiler.graph.passes import optimize, partition_graph
from tensorforge.compiler.graph.reference import run_node
from tensorforge.compiler.quantize.graph import quantize_graph
from tensorforge.hw.config import HWConfig

vta = pytest.importorskip(
    "tensorforge.compiler.topi.vta", reason="the accelerator code generator is not importable"
)

DATA = Path(__file__).resolve().parents[3] / "tensorforge" / "data"
COMPUTE = ("tf.qconv2d", "tf.qdense")


def _compile(cfg: HWConfig, node, env, vthreads: int):
    """The code generator's kernel for one offloaded node (shift-mode requantization)."""
    a = node.attr_dict
    shift = a["shift"]
    assert a["multiplier"] == 1 and shift >= 1, (node.name, a["requant_ops"])
    bias = env[node.inputs[2]].astype(np.int64) + (1 << (shift - 1))  # the rounding constant
    assert np.abs(bias).max() < 2**31
    x, w, relu = env[node.inputs[0]], env[node.inputs[1]], a["out_lo"] == 0
    if node.op == "tf.qdense":
        return vta.dense(cfg, x.shape[0], w, bias.astype(np.int32), shift=shift, relu=relu,
                         vthreads=vthreads)  # fmt: skip
    top, left, bottom, right = a["pads"]
    assert (top, left) == (bottom, right)
    return vta.conv2d(
        cfg, x.shape, w, bias.astype(np.int32), stride=tuple(a["strides"]), padding=(top, left),
        shift=shift, relu=relu, vthreads=vthreads,
    )  # fmt: skip


def _run_offloaded(graph, inputs, cfg: HWConfig, vthreads: int = 1):
    """Run a partitioned graph, offloaded conv/dense nodes on the simulator; returns the values
    and, per offloaded node, (simulator output, graph kernel output, GEMM steps)."""
    env = {**graph.constants, **inputs}
    layers = {}
    for node in graph.nodes:
        ours = run_node(graph, node, env)
        if node.op in COMPUTE and node.attr("target") == "vta":
            y, result = _compile(cfg, node, env, vthreads).run(env[node.inputs[0]], backend="sim")
            want = ours[node.outputs[0]]
            layers[node.name] = (y, want, result.stats["gemm_counter"])
            ours = {node.outputs[0]: np.maximum(y, node.attr("out_lo")).astype(np.int8)}
        env.update(ours)
    return env, layers


def _check_layers(layers) -> None:
    for name, (sim, want, gemm_steps) in layers.items():
        assert sim.dtype == np.int8 and sim.shape == want.shape, name
        assert int((sim == -128).sum()) == 0, name  # the clip ranges never differed here
        assert np.array_equal(sim, want), name
        assert gemm_steps > 0


@pytest.mark.parametrize(("preset", "images", "vthreads"), [("pynq", 450, 1), ("tiny", 16, 2)])
def test_digits_offloaded_layers_on_the_simulator_equal_the_int8_graph(preset, images, vthreads):
    with np.load(DATA / "digits_test.npz") as data:
        split = {k: data[k] for k in data.files}
    shapes = {"input": (images, 1, 8, 8)}
    graph = optimize(from_onnx(DATA / "digits_cnn.onnx", input_shapes=shapes))
    cfg = HWConfig.preset(preset).replace(alu_mul=False)
    q = partition_graph(quantize_graph(graph, {"input": split["calib_images"]}, cfg), cfg)
    env, layers = _run_offloaded(q, {"input": split["images"][:images]}, cfg, vthreads)
    assert sorted(layers) == ["conv2", "conv3", "dense"]
    _check_layers(layers)
    plain = {**q.constants, "input": split["images"][:images]}
    for node in q.nodes:
        plain.update(run_node(q, node, plain))
    assert np.array_equal(env["logits_q"], plain["logits_q"])
    if images == 450:
        accuracy = np.mean(np.argmax(env["logits"], axis=1) == split["labels"])
        assert accuracy >= 0.9778 - 0.02  # float accuracy (docs/quantization.md) - 2 points


def test_resnet18_offloaded_conv_and_dense_layers_on_the_simulator_equal_the_int8_graph():
    rng = np.random.default_rng(0)
    calib = [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(4)]
    cfg = HWConfig.preset("pynq").replace(alu_mul=False)
    q = quantize_graph(optimize(from_onnx(resnet18(32))), calib, cfg)
    q = partition_graph(q, cfg)
    x = {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    _, layers = _run_offloaded(q, x, cfg)
    assert len(layers) == 20  # every conv but the 3-channel stem, and the classifier
    _check_layers(layers)
