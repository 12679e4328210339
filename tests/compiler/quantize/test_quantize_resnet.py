"""ResNet-18 (fixed random weights from onnx_builders, 32x32 input) through quantize_graph: the
int8 graph runs, stays close to float, every int8 node equals compiler/quantize's reference
(and, for pooling, the float MaxPool kernel) on its inputs, and the partition offloads every
layer but the 3-channel stem. This int8 graph is the oracle for the simulator run."""

from __future__ import annotations

import compiler_ops as ops
import numpy as np
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import resnet18
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.ops.nn import max_pool
from tensorforge.compiler.graph.passes import (
    accelerator_regions,
    optimize,
    partition_graph,
    partition_report,
)
from tensorforge.compiler.graph.reference import run_node
from tensorforge.compiler.graph.verify import verify_graph
from tensorforge.compiler.quantize import conv2d_int8, dense_int8, requant_params
from tensorforge.compiler.quantize.graph import quantize_graph
from tensorforge.compiler.quantize.residual import add_int8, add_params
from tensorforge.hw.config import HWConfig

SIZE = 32
INT8_OPS = ("tf.qconv2d", "tf.qdense", "tf.qadd", "tf.qmaxpool")
MODES = {"shift": HWConfig.preset("pynq").replace(alu_mul=False), "mul": HWConfig.preset("pynq")}


@pytest.fixture(scope="module")
def float_graph():
    return optimize(from_onnx(resnet18(SIZE)))


@pytest.fixture(scope="module")
def sample() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)}


@pytest.fixture(scope="module", params=sorted(MODES))
def quantized(request, float_graph):
    rng = np.random.default_rng(0)
    calib = [{"x": rng.standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)} for _ in range(4)]
    mode = request.param
    return mode, quantize_graph(float_graph, calib, MODES[mode], mode)


def test_resnet18_quantizes_and_its_int8_graph_tracks_float(float_graph, quantized, sample):
    mode, q = quantized
    verify_graph(q)
    ops = [n.op for n in q.nodes]
    counts = {op: ops.count(op) for op in ("tf.qconv2d", "tf.qadd", "tf.qmaxpool", "tf.qdense")}
    assert counts == {"tf.qconv2d": 20, "tf.qadd": 8, "tf.qmaxpool": 1, "tf.qdense": 1}
    assert "GlobalAveragePool" in ops  # float, between a dequantize and a quantize
    want = run_graph(float_graph, sample)[float_graph.outputs[0]].ravel()
    got = run_graph(q, sample)[q.outputs[0]].ravel()
    assert np.corrcoef(want, got)[0, 1] > 0.98, mode
    assert np.abs(got - want).max() < 0.15 * np.abs(want).max()


def _reference(node, env, cfg: HWConfig, mode: str) -> np.ndarray:
    """The node recomputed from its scales with compiler/quantize called directly."""
    a = node.attr_dict
    ins = [env[i] for i in node.inputs]
    if node.op == "tf.qadd":
        ratios = (a["lhs_scale"] / a["out_scale"], a["rhs_scale"] / a["out_scale"])
        return add_int8(*ins, add_params(*ratios, cfg, mode=mode, relu=a["out_lo"] == 0))
    if node.op == "tf.qmaxpool":
        attrs = {**a, "ceil_mode": 0, "auto_pad": "NOTSET"}
        return max_pool(attrs, ins[0].astype(np.float64)).astype(np.int8)
    x, w, b = ins
    rows = np.abs(w.astype(np.int64)).reshape(len(w), -1).sum(axis=1)
    top, left, bottom, right = a.get("pads", (0, 0, 0, 0))
    assert (top, left) == (bottom, right)
    if isinstance(a["weight_scale"], tuple):  # per-channel weight scales (mode mul's default)
        # the stored multipliers are the nearest to each channel's ratio; the output is the
        # integer formula floor(floor(acc / 2**pre) * m_c / 2**shift) in Python ints
        ratios = a["in_scale"] * np.array(a["weight_scale"]) / a["out_scale"]
        m, shift, pre = a["channel_multipliers"], a["shift"], a["pre_shift"]
        assert np.all(np.abs(np.array(m) - ratios * 2.0 ** (shift + pre)) <= 0.5 + 1e-9)
        if node.op == "tf.qdense":
            acc = dense_int8(x, w, b)
        else:
            acc = conv2d_int8(x, w, b, stride=tuple(a["strides"]), padding=(top, left))
        return ops.per_channel_requant(acc, m, shift, pre, a["out_lo"], a["out_hi"])
    ratio = a["in_scale"] * a["weight_scale"] / a["out_scale"]
    p = requant_params(ratio, cfg, mode=mode, relu=a["out_lo"] == 0,
                       acc_bound=127 * int(rows.max()) + int(np.abs(b).max()))  # fmt: skip
    if node.op == "tf.qdense":
        return dense_int8(x, w, b, requant=p)
    return conv2d_int8(x, w, b, stride=tuple(a["strides"]), padding=(top, left), requant=p)


def test_resnet18_int8_nodes_equal_the_reference_bit_for_bit(quantized, sample):
    mode, q = quantized
    env = {**q.constants, **sample}
    checked = 0
    for node in q.nodes:
        env.update(run_node(q, node, env))
        if node.op in INT8_OPS:
            assert np.array_equal(env[node.outputs[0]], _reference(node, env, MODES[mode], mode))
            checked += 1
    assert checked == 30


def test_resnet18_partition_offloads_all_but_the_stem(quantized):
    mode, q = quantized
    for name in ("pynq", "tiny"):
        cfg = HWConfig.preset(name)
        p = partition_graph(q, cfg)
        verify_graph(p)
        targets = {n.name: n.attr("target") for n in p.nodes if n.op in INT8_OPS}
        assert targets.pop("conv_2") == "cpu"  # 3 input channels
        if name == "tiny" and mode == "mul":
            _check_tiny_keeps_the_512_channel_layers(q, p, targets)
            continue
        assert set(targets.values()) == {"vta"}
        regions = accelerator_regions(p)
        assert [len(r.nodes) for r in regions] == [28, 1]  # maxpool .. last add; the classifier
        assert regions[0].nodes[0] == "maxpool_9" and regions[1].nodes == ("gemm_171",)
        report = partition_report(q, cfg)
        assert f"3 input channel(s) < block_in {cfg.block_in}" in report
        assert "offloaded: 20 of 21 conv/dense layers" in report
        assert "zero padding is exact (input >= 0 after a fused ReLU)" in report


def _check_tiny_keeps_the_512_channel_layers(q, p, targets: dict[str, str]) -> None:
    """`tiny`'s 256-entry ACC cannot hold a 512- or 1000-channel layer's per-channel
    multipliers beside one tile: those layers stay on the CPU (they never compiled for it: the
    schedule search, the oracle here, finds no tiling), every other one is offloaded."""
    from tensorforge.compiler.vta.schedule import Conv2dWorkload, ScheduleError, default_schedule

    cfg = HWConfig.preset("tiny")
    on_cpu = {k for k, v in targets.items() if v == "cpu"}
    assert on_cpu == {"conv_127", "conv_135", "conv_142", "conv_151", "conv_159", "gemm_171"}
    for node in (n for n in p.nodes if n.name in targets and n.op in ("tf.qconv2d", "tf.qdense")):
        x, w = (q.types[node.inputs[i]].shape for i in (0, 1))
        if node.op == "tf.qdense":
            wl = Conv2dWorkload(x[0], x[1], 1, 1, w[0], 1, 1, channel_scales=True)
        else:
            (sh, sw), (top, left, _, _) = node.attr("strides"), node.attr("pads")
            wl = Conv2dWorkload(*x, w[0], w[2], w[3], sh, sw, top, left, channel_scales=True)
        if node.name in on_cpu:
            with pytest.raises(ScheduleError, match="acc .* > 256"):
                default_schedule(cfg, wl, 1)
        else:
            default_schedule(cfg, wl, 1)  # fits
