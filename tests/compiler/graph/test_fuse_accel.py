"""fuse_accelerator_ops: offloaded conv/dense groups absorb the residual add and the
non-overlapping max pooling that only they feed (before/expected on quantized graphs)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import resnet18
from tensorforge.compiler.graph.passes import fuse_ops, optimize, partition_graph
from tensorforge.compiler.graph.passes.fuse_accel import accelerator_chain, fuse_accelerator_ops
from tensorforge.compiler.quantize.graph import quantize_graph
from tensorforge.digits import load_digits_assets
from tensorforge.hw.config import HWConfig

PYNQ = HWConfig.preset("pynq")


def _groups(graph):
    return [list(g.nodes) for g in graph.groups]


def _digits(cfg=PYNQ):
    model, split = load_digits_assets()
    graph = optimize(from_onnx(str(model), input_shapes={"input": (1, 1, 8, 8)}))
    return partition_graph(quantize_graph(graph, {"input": split["calib_images"]}, cfg), cfg)


def test_conv_absorbs_the_max_pool_it_alone_feeds():
    before = fuse_ops(_digits())
    assert ["conv2"] in _groups(before) and ["pool"] in _groups(before)
    after = fuse_accelerator_ops(before)
    assert ["conv2", "pool"] in _groups(after)
    assert ["pool"] not in _groups(after)
    assert ["conv3"] in _groups(after) and ["dense"] in _groups(after)  # nothing to absorb
    assert len(after.groups) == len(before.groups) - 1
    assert after.nodes == before.nodes  # the pass only regroups


def test_a_pool_on_the_cpu_or_a_graph_output_is_not_absorbed():
    q = _digits()
    nodes = [
        replace(n, attrs=tuple({**n.attr_dict, "target": "cpu"}.items())) if n.name == "pool" else n
        for n in q.nodes
    ]
    cpu_pool = q.replace(nodes=tuple(nodes))
    assert ["conv2", "pool"] not in _groups(fuse_accelerator_ops(fuse_ops(cpu_pool)))
    conv2 = next(n for n in q.nodes if n.name == "conv2")
    exposed = q.replace(outputs=(*q.outputs, conv2.outputs[0]))
    assert accelerator_chain(exposed, conv2) == [conv2]


def test_resnet_convs_absorb_their_residual_adds():
    rng = np.random.default_rng(0)
    calib = [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(2)]
    q = quantize_graph(optimize(from_onnx(resnet18(32))), calib, PYNQ)
    after = fuse_accelerator_ops(fuse_ops(partition_graph(q, PYNQ)))
    by_node = {n.name: n for n in after.nodes}
    fused = [g for g in _groups(after) if len(g) > 1 and by_node[g[0]].op == "tf.qconv2d"]
    adds = [n for n in after.nodes if n.op == "tf.qadd"]
    assert len(fused) == len(adds) == 8  # one per basic block, shortcut convs or not
    for group in fused:
        assert [by_node[n].op for n in group] == ["tf.qconv2d", "tf.qadd"]
        conv, add = by_node[group[0]], by_node[group[1]]
        assert conv.outputs[0] in add.inputs


def test_the_pass_needs_fused_groups():
    with pytest.raises(ValueError, match="needs a fused graph"):
        fuse_accelerator_ops(_digits())


def test_with_the_config_an_add_whose_fused_kernel_overflows_acc_is_not_absorbed():
    # 1x1 convs over 200 columns on tiny: each fits ACC alone (200 + bias), not with the
    # residual operand's second ACC tile (400 + bias of 256 entries).
    from tensorforge.compiler.graph import GraphBuilder

    rng = np.random.default_rng(2)
    b = GraphBuilder("wide_residual")
    x = b.add_input("x", (1, 16, 1, 200), "float32")
    w1, w2 = (b.add_constant(f"w{i}", rng.standard_normal((16, 16, 1, 1)).astype(np.float32))
              for i in (1, 2))  # fmt: skip
    (y,) = b.add_node("Conv", [x, w1])
    (z,) = b.add_node("Conv", [y, w2])
    (z,) = b.add_node("Add", [z, y])
    graph = optimize(b.build([z]))
    tiny = HWConfig.preset("tiny")
    calib = {"x": rng.standard_normal((1, 16, 1, 200)).astype(np.float32)}
    before = fuse_ops(partition_graph(quantize_graph(graph, calib, tiny, mode="shift"), tiny))
    assert ["conv_1", "add"] in _groups(fuse_accelerator_ops(before))  # no config: fused
    after = fuse_accelerator_ops(before, tiny)
    assert ["conv_1"] in _groups(after) and ["add"] in _groups(after)
