"""A transformer's Linear layers (MatMuls of [batch, tokens, K] activations) and 1-D
convolutions on the accelerator: `passes.accel_forms` rewrites them into the 2-D dense and conv
the GEMM core computes. The rewrite against the float graph, the placement, and the module on
the behavioural simulator against the int8 graph's reference executor bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.compile_vta import compile_graph_vta, quantize_for
from tensorforge.compiler.graph.passes.accel_forms import accelerator_forms
from tensorforge.hw.config import HWConfig

PYNQ = HWConfig.preset("pynq")


def _linear_layers():
    """An MLP over a sequence: [2, 5, 32] -> MatMul [32, 48] + bias, ReLU -> MatMul [48, 16]."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("mlp")
    x = b.add_input("x", (2, 5, 32), "float32")
    w1 = b.add_constant("w1", rng.standard_normal((32, 48)).astype(np.float32) / 6)
    (y,) = b.add_node("MatMul", [x, w1], name="fc1")
    (y,) = b.add_node("Add", [y, b.add_constant("b1", rng.standard_normal(48).astype(np.float32))])
    (y,) = b.add_node("Relu", [y])
    w2 = b.add_constant("w2", rng.standard_normal((48, 16)).astype(np.float32) / 7)
    (y,) = b.add_node("MatMul", [y, w2], name="fc2")
    return b.build([y])


def _conv1d(attrs: dict, groups: int = 1):
    """Conv1d 16 -> 32 channels over 20 steps (with bias), ReLU."""
    rng = np.random.default_rng(1)
    b = GraphBuilder("conv1d")
    x = b.add_input("x", (2, 16, 20), "float32")
    w = b.add_constant("w", rng.standard_normal((32, 16 // groups, 3)).astype(np.float32) / 5)
    bias = b.add_constant("bias", rng.standard_normal(32).astype(np.float32))
    (y,) = b.add_node("Conv", [x, w, bias], {**attrs, "group": groups}, name="conv")
    (y,) = b.add_node("Relu", [y])
    return b.build([y])


def _feed(graph, seed: int, batch: int | None = None) -> dict[str, np.ndarray]:  # noqa: ANN001
    shape = graph.types[graph.inputs[0]].shape
    return {graph.inputs[0]: np.random.default_rng(seed).standard_normal(shape, np.float32)}


CONV1D = [
    {"pads": (1, 1)},
    {"pads": (2, 0), "strides": (2,)},
    {"pads": (2, 2), "dilations": (2,)},
    {"auto_pad": "SAME_UPPER"},
]


@pytest.mark.parametrize("graph", [_linear_layers(), *[_conv1d(a) for a in CONV1D],
                                   _conv1d({"pads": (1, 1)}, groups=2)])  # fmt: skip
def test_the_2d_forms_compute_what_the_model_does(graph) -> None:  # noqa: ANN001
    rewritten = accelerator_forms(graph)
    assert rewritten is not graph
    assert not any(n.op == "MatMul" and len(rewritten.types[n.inputs[0]].shape) > 2
                   for n in rewritten.nodes)  # fmt: skip
    assert not any(n.op == "Conv" and rewritten.types[n.inputs[1]].shape.__len__() == 3
                   for n in rewritten.nodes)  # fmt: skip
    x = _feed(graph, 2)
    want, got = run_graph(graph, x), run_graph(rewritten, x)
    for name in graph.outputs:
        assert got[name].shape == want[name].shape
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_graphs_without_such_ops_are_left_as_they_are() -> None:
    b = GraphBuilder("g")
    x = b.add_input("x", (3, 8), "float32")
    (y,) = b.add_node("MatMul", [x, b.add_constant("w", np.ones((8, 4), np.float32))])
    graph = b.build([y])
    assert accelerator_forms(graph) is graph


@pytest.mark.parametrize(
    ("graph", "offloaded"),
    [(_linear_layers(), ["fc1", "fc2"]), (_conv1d({"pads": (1, 1)}), ["conv"]),
     (_conv1d({"pads": (2, 0), "strides": (2,)}), ["conv"])],  # asymmetric pads too
)  # fmt: skip
def test_on_the_accelerator_bit_exact_with_the_int8_graph(graph, offloaded: list[str]) -> None:  # noqa: ANN001
    calibration = _feed(graph, 3)
    module = compile_graph_vta(graph, "vta -config=pynq -device=sim", calibration, progress=False)
    placement = {row[0]: row[2] for row in module.stats["placement"]}
    assert sorted(n for n, where in placement.items() if where == "vta") == offloaded
    q = quantize_for(graph, PYNQ, calibration, "mul")
    x = _feed(graph, 4)
    want = run_graph(q, x)[graph.outputs[0]]
    got = module.run(x)[graph.outputs[0]]
    assert np.array_equal(got, want)  # bit for bit
    float_out = run_graph(graph, x)[graph.outputs[0]]
    error = np.linalg.norm(got - float_out) / np.linalg.norm(float_out)
    assert error < 0.1  # int8 of the float model: two layers calibrated on one batch, 6%


def test_calibration_batches_of_another_size_than_the_graphs() -> None:
    """The unflattening Reshape after an N-D MatMul must not bake in the graph's batch size:
    calibration batches are run with their own (found by benchmarks/vta_fuzz.py, 0:4)."""
    graph = _linear_layers()  # batch 2
    calibration = {"x": np.random.default_rng(5).standard_normal((3, 5, 32), np.float32)}
    module = compile_graph_vta(graph, "vta -config=pynq", calibration, progress=False)
    q = quantize_for(graph, PYNQ, calibration, "mul")
    x = _feed(graph, 6)
    assert np.array_equal(module.run(x)[graph.outputs[0]], run_graph(q, x)[graph.outputs[0]])
