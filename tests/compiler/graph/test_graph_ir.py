"""Graph IR: builder type inference, immutability, printer golden text, verifier, errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tensorforge.compiler.graph import GraphBuilder, GraphError, Node, TensorType, run_graph
from tensorforge.compiler.graph.printer import print_graph
from tensorforge.compiler.graph.registry import OPS, Pattern, UnsupportedOpError, get_op
from tensorforge.compiler.graph.verify import verify_graph


def _conv_graph() -> tuple:
    b = GraphBuilder("net")
    x = b.add_input("x", (1, 3, 8, 8), "float32")
    w = b.add_constant("w", np.ones((4, 3, 3, 3), np.float32))
    (c,) = b.add_node("Conv", [x, w], {"strides": [2, 2], "pads": [1, 1, 1, 1]}, name="conv")
    shape = b.add_constant("shape", np.array([1, -1], np.int64))
    (r,) = b.add_node("Reshape", [c, shape], name="flat")
    return b, b.build([r])


def test_builder_infers_types() -> None:
    _, graph = _conv_graph()
    assert graph.types["conv"] == TensorType((1, 4, 4, 4), "float32")
    assert graph.types["flat"] == TensorType((1, 64), "float32")
    verify_graph(graph)


def test_builder_names_stay_unique_as_nodes_are_added_or_edited() -> None:
    """Node names are checked in a set (a scan of every node made an expansion of 25,000 nodes
    take minutes); a pass that edits `nodes` directly still gets unused names."""
    b = GraphBuilder()
    x = b.add_input("x", (2,), "float32")
    for _ in range(50):
        (x,) = b.add_node("Relu", [x], name="relu")
    b.nodes.append(Node("Relu", "relu_x", (x,), ("y_edit",), ()))  # (as a pass might)
    assert b.fresh("relu_x") != "relu_x"
    b.add_node("Relu", [x], name="relu_x")  # the name is taken: a fresh one
    names = [n.name for n in b.nodes]
    assert len(set(names)) == len(names) == 52


def test_printer_golden_text() -> None:
    _, graph = _conv_graph()
    assert print_graph(graph) == (
        "graph net(%x: float32[1, 3, 8, 8]) {\n"
        "  const %w: float32[4, 3, 3, 3]\n"
        "  const %shape: int64[2] = [ 1, -1]\n"
        "  conv: %conv = Conv(%x, %w) {auto_pad='NOTSET', group=1, pads=[1, 1, 1, 1], "
        "strides=[2, 2]} : float32[1, 4, 4, 4]\n"
        "  flat: %flat = Reshape(%conv, %shape) {allowzero=0} : float32[1, 64]\n"
        "  return %flat\n"
        "}"
    )


def test_nodes_graphs_and_constants_are_immutable() -> None:
    _, graph = _conv_graph()
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph.nodes[0].op = "Relu"  # type: ignore[misc]
    with pytest.raises(TypeError):
        graph.types["x"] = TensorType((1,), "float32")  # type: ignore[index]
    with pytest.raises(ValueError, match="read-only"):
        graph.constants["w"][0] = 2.0


def test_every_op_declares_a_pattern_and_kernel() -> None:
    get_op("Relu")
    assert len(OPS) >= 48
    assert get_op("Conv").pattern == Pattern.OUT_ELEMWISE_FUSABLE
    assert get_op("Add").pattern == Pattern.BROADCAST
    assert get_op("ReduceSum").pattern == Pattern.COMM_REDUCE
    assert get_op("Reshape").pattern == Pattern.INJECTIVE
    assert get_op("Softmax").pattern == Pattern.OPAQUE


def test_unknown_op_and_bad_attributes_are_named() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (2, 3), "float32")
    with pytest.raises(UnsupportedOpError, match="Frobnicate"):
        b.add_node("Frobnicate", [x])
    with pytest.raises(GraphError, match=r"attributes of Relu must be among \[\], not \['alpha'\]"):
        b.add_node("Relu", [x], {"alpha": 1.0}, name="r")
    with pytest.raises(
        GraphError, match=r"attribute 'axis' of Concat must be given \(node 'cat'\)"
    ):
        b.add_node("Concat", [x, x], name="cat")


def test_shape_deciding_inputs_must_be_constants() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (2, 3), "float32")
    s = b.add_input("s", (1,), "int64")
    with pytest.raises(
        GraphError, match=r"input 1 \('s'\) of Reshape node 'reshape' must be a constant"
    ):
        b.add_node("Reshape", [x, s])


def test_shape_errors_name_the_node() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (2, 3), "float32")
    y = b.add_input("y", (4, 5), "float32")
    with pytest.raises(
        GraphError, match=r"MatMul node 'mm': MatMul reduction sizes must agree, not 3 and 4"
    ):
        b.add_node("MatMul", [x, y], name="mm")


def test_verifier_reports_wrong_types_and_order() -> None:
    _, graph = _conv_graph()
    types = dict(graph.types)
    types["flat"] = TensorType((64,), "float32")
    with pytest.raises(
        GraphError, match=r"output 'flat' must have type float32\[1, 64\], not float32\[64\]"
    ):
        verify_graph(graph.replace(types=types))
    with pytest.raises(GraphError, match=r"must read values defined before it, not \['conv'\]"):
        verify_graph(graph.replace(nodes=graph.nodes[::-1]))
    extra = Node("Relu", "dup", ("x",), ("conv",))
    with pytest.raises(GraphError, match=r"value 'conv' must be defined once, not 2 times"):
        verify_graph(graph.replace(nodes=(*graph.nodes, extra)))


def test_run_graph_checks_inputs() -> None:
    _, graph = _conv_graph()
    with pytest.raises(ValueError, match=r"inputs must include \['x'\]"):
        run_graph(graph, {})
    with pytest.raises(
        ValueError, match=r"input 'x' must be float32\[1, 3, 8, 8\], not float64\[1, 3, 8, 8\]"
    ):
        run_graph(graph, {"x": np.zeros((1, 3, 8, 8))})


def test_run_graph_checks_kernel_results_against_declared_types() -> None:
    _, graph = _conv_graph()
    types = dict(graph.types)
    types["conv"] = TensorType((1, 4, 8, 8), "float32")  # a wrong type the kernel cannot produce
    with pytest.raises(
        GraphError, match=r"node 'conv' \(Conv\) output 'conv' must be float32\[1, 4, 8, 8\]"
    ):
        run_graph(graph.replace(types=types), {"x": np.zeros((1, 3, 8, 8), np.float32)})


def test_conv_kernel_matches_direct_loops() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 6, 5)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    attrs = {"group": 2, "strides": (2, 1), "pads": (1, 0, 1, 1), "dilations": (1, 2)}
    b = GraphBuilder()
    xi = b.add_input("x", x.shape, "float32")
    (y,) = b.add_node("Conv", [xi, b.add_constant("w", w)], attrs)
    got = run_graph(b.build([y]), {"x": x})[y]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (0, 1)])
    want = np.zeros(got.shape)
    for m in range(6):
        g = m // 3
        for i in range(got.shape[2]):
            for j in range(got.shape[3]):
                patch = xp[0, 2 * g : 2 * g + 2, 2 * i : 2 * i + 3, j : j + 4 : 2]
                want[0, m, i, j] = (patch * w[m]).sum()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
