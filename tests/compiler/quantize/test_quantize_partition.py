"""The partition pass (compiler/graph/passes/partition.py) on quantized graphs: before/expected
targets for the digits model, the report, and each rule's reason for running on the CPU."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.compile_vta import compile_graph_vta
from tensorforge.compiler.graph.passes import (
    accelerator_regions,
    optimize,
    partition_graph,
    partition_report,
)
from tensorforge.compiler.graph.verify import verify_graph
from tensorforge.compiler.quantize.graph import quantize_graph
from tensorforge.hw.config import HWConfig

DATA = Path(__file__).resolve().parents[3] / "tensorforge" / "data"
PYNQ = HWConfig.preset("pynq")
NO_MUL = PYNQ.replace(alu_mul=False)


@pytest.fixture(scope="module")
def digits():
    with np.load(DATA / "digits_test.npz") as data:
        calib = data["calib_images"]
    graph = optimize(from_onnx(DATA / "digits_cnn.onnx", input_shapes={"input": (8, 1, 8, 8)}))
    return {mode: quantize_graph(graph, {"input": calib}, PYNQ, mode) for mode in ("shift", "mul")}


def _targets(graph) -> dict[str, str]:
    return {n.name: n.attr_dict.get("target", "-") for n in graph.nodes}


def test_partition_graph_sets_targets_before_expected(digits) -> None:
    before = digits["shift"]
    assert set(_targets(before).values()) == {"cpu", "-"}  # as quantize_graph writes it
    after = partition_graph(before, PYNQ)
    verify_graph(after)
    assert _targets(after) == {
        "input_quantize": "cpu",
        "conv1": "cpu",  # 1 input channel
        "conv2": "vta",
        "pool": "vta",
        "conv3": "vta",
        "flatten": "-",  # a plain Flatten of int8 data, on the CPU
        "dense": "vta",
        "logits_dequantize": "cpu",
    }
    regions = accelerator_regions(after)
    assert [(r.name, r.nodes) for r in regions] == [
        ("vta_0", ("conv2", "pool", "conv3")),
        ("vta_1", ("dense",)),
    ]
    x = {"input": np.random.default_rng(0).random((8, 1, 8, 8), np.float32)}
    assert np.array_equal(run_graph(after, x)["logits"], run_graph(before, x)["logits"])


def test_partition_report_lists_every_layer_and_where_it_runs(digits) -> None:
    report = partition_report(digits["shift"], PYNQ)
    lines = report.splitlines()
    assert lines[0].startswith("partition of graph 'digits_cnn' for HWConfig 'pynq' (1x16x16")
    rows = dict(re.match(r"\s+(\S+)\s.*\]\s+(cpu|vta) ", line).groups() for line in lines[2:10])
    want = partition_graph(digits["shift"], PYNQ)
    assert rows == {
        n.name: "vta" if n.attr_dict.get("target") == "vta" else "cpu" for n in want.nodes
    }
    assert [rows[n] for n in ("conv1", "conv2", "pool", "conv3", "dense")] == [
        "cpu",
        "vta",
        "vta",
        "vta",
        "vta",
    ]
    assert "1 input channel(s) < block_in 16 (94% padding)" in report
    assert "NCHW1n16c x OIHW16o16i" in report and "M 10->16" in report
    assert "regions: vta_0: conv2, pool, conv3; vta_1: dense" in report
    assert "offloaded: 3 of 4 conv/dense layers, 98.0% of their MACs" in report
    tiny = partition_report(digits["shift"], HWConfig.preset("tiny"))
    assert "NCHW1n4c x OIHW4o4i" in tiny and "M 10->12" in tiny


def test_mul_requantization_stays_on_the_cpu_without_the_mul_extension(digits) -> None:
    targets = _targets(partition_graph(digits["mul"], NO_MUL))
    assert [targets[n] for n in ("conv2", "conv3", "dense")] == ["cpu"] * 3
    assert targets["pool"] == "vta"
    report = partition_report(digits["mul"], NO_MUL)
    assert "requantization uses MUL but HWConfig 'pynq' has alu_mul=False" in report
    assert "offloaded: 0 of 4 conv/dense layers, 0.0% of their MACs" in report


def _conv_pool_graph(relu: bool, pads: tuple[int, ...]):
    b = GraphBuilder("conv_pool")
    x = b.add_input("x", (1, 16, 6, 6), "float32")
    w = np.random.default_rng(3).standard_normal((16, 16, 3, 3)).astype(np.float32)
    (y,) = b.add_node("Conv", [x, b.add_constant("w", w)], {"pads": pads}, name="conv")
    if relu:
        (y,) = b.add_node("Relu", [y])
    (y,) = b.add_node("MaxPool", [y], {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1)}, name="mp")
    return b.build([y])


@pytest.mark.parametrize("relu", [True, False])
def test_padded_max_pool_is_offloaded_only_after_a_relu(relu: bool) -> None:
    graph = _conv_pool_graph(relu, (1, 1, 1, 1))
    x = np.random.default_rng(4).standard_normal((1, 16, 6, 6)).astype(np.float32)
    q = partition_graph(quantize_graph(graph, {"x": x}, PYNQ), PYNQ)
    assert _targets(q)["mp"] == ("vta" if relu else "cpu")
    if not relu:
        assert "needs -inf fill (input may be negative)" in partition_report(q, PYNQ)


@pytest.mark.parametrize("pads", [(0, 0, 1, 1), (1, 0, 2, 1)])
def test_asymmetric_conv_padding_runs_on_the_accelerator_bit_exact(pads) -> None:  # noqa: ANN001
    """TensorFlow's "same" padding of a strided conv (and any other per-side amounts within
    the LOAD's pad fields) is offloaded; the module equals the int8 graph bit for bit."""
    graph = _conv_pool_graph(True, pads)
    x = np.random.default_rng(4).standard_normal((1, 16, 6, 6)).astype(np.float32)
    q = partition_graph(quantize_graph(graph, {"x": x}, PYNQ), PYNQ)
    assert _targets(q)["conv"] == "vta"
    module = compile_graph_vta(q, "vta", progress=False, config=PYNQ)
    got = module.run({"x": x})[module.outputs[0]]
    want = run_graph(q, {"x": x})[q.outputs[0]]
    assert np.array_equal(got, want) and np.unique(want).size > 2


def test_conv_padding_past_the_pad_fields_runs_on_the_cpu() -> None:
    graph = _conv_pool_graph(True, (0, 0, 16, 1))
    x = np.random.default_rng(4).standard_normal((1, 16, 6, 6)).astype(np.float32)
    q = quantize_graph(graph, {"x": x}, PYNQ)
    assert _targets(partition_graph(q, PYNQ))["conv"] == "cpu"
    assert "padding (0, 0, 16, 1) must be at most 15 per side" in partition_report(q, PYNQ)
    assert accelerator_regions(q) == ()  # not partitioned yet: nothing offloaded


def _conv_depthwise_dense_graph():
    """conv (int8) -> depthwise conv (stays float: group > 1) -> dense (int8)."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("dw")
    x = b.add_input("x", (1, 16, 8, 8), "float32")
    w = b.add_constant("w", rng.standard_normal((32, 16, 3, 3)).astype(np.float32))
    (y,) = b.add_node("Conv", [x, w], {"pads": (1, 1, 1, 1)}, name="conv")
    dw = b.add_constant("dw", rng.standard_normal((32, 1, 3, 3)).astype(np.float32))
    (y,) = b.add_node("Conv", [y, dw], {"pads": (1, 1, 1, 1), "group": 32}, name="depthwise")
    (y,) = b.add_node("Flatten", [y], name="flatten")
    fc = b.add_constant("fc", rng.standard_normal((32 * 8 * 8, 10)).astype(np.float32))
    (y,) = b.add_node("MatMul", [y, fc], name="dense")
    return b.build([y])


def test_mac_share_counts_the_float_convs_left_on_the_cpu() -> None:
    graph = _conv_depthwise_dense_graph()
    x = np.random.default_rng(6).standard_normal((2, 16, 8, 8)).astype(np.float32)
    q = partition_graph(quantize_graph(graph, {"x": x}, PYNQ), PYNQ)
    targets = _targets(q)
    assert (targets["conv"], targets["depthwise"], targets["dense"]) == ("vta", "-", "vta")
    # MACs from the shapes: output elements times the reduction length of each
    conv, depthwise, dense = 8 * 8 * 32 * (16 * 9), 8 * 8 * 32 * 9, 10 * (32 * 8 * 8)
    share = (conv + dense) / (conv + depthwise + dense)
    report = partition_report(q, PYNQ)
    assert f"offloaded: 2 of 3 conv/dense layers, {share:.1%} of their MACs" in report
    module = compile_graph_vta(q, "vta -config=pynq", progress=False)
    assert module.stats["offloaded_macs"] == round(share, 4)
    assert module.stats["offloaded_layers"] == [2, 3]
