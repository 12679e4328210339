"""Operator fusion: the groups TVM's rules form, and fused execution giving the same results."""

from __future__ import annotations

import numpy as np

from tensorforge.compiler.graph import GraphBuilder, Pattern, run_graph
from tensorforge.compiler.graph.passes import fold_batch_norm, fuse_ops, plan_memory
from tensorforge.compiler.graph.printer import print_graph
from tensorforge.compiler.graph.verify import verify_graph

RNG = np.random.default_rng(0)


def _groups(graph) -> list[tuple[str, ...]]:
    return [g.nodes for g in graph.groups]


def _conv_bn_relu(b: GraphBuilder, x: str, name: str, relu: bool = True) -> str:
    w = b.add_constant(f"{name}_w", RNG.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3)
    (y,) = b.add_node("Conv", [x, w], {"pads": [1, 1, 1, 1]}, name=name)
    params = [
        RNG.uniform(0.5, 1.5, 4),
        RNG.standard_normal(4),
        RNG.standard_normal(4),
        RNG.uniform(0.5, 2, 4),
    ]
    names = [b.add_constant(f"{name}_p{i}", p.astype(np.float32)) for i, p in enumerate(params)]
    (y,) = b.add_node("BatchNormalization", [y, *names], name=f"{name}_bn")
    if relu:
        (y,) = b.add_node("Relu", [y], name=f"{name}_relu")
    return y


def _residual_block() -> object:
    b = GraphBuilder("block")
    x = b.add_input("x", (1, 4, 8, 8), "float32")
    (x0,) = b.add_node("Relu", [x], name="stem")
    y = _conv_bn_relu(b, x0, "conv1")
    y = _conv_bn_relu(b, y, "conv2", relu=False)
    (s,) = b.add_node("Add", [y, x0], name="add")
    (r,) = b.add_node("Relu", [s], name="relu")
    return b.build([r])


def test_conv_bn_relu_add_block_groups_as_tvm_forms_them() -> None:
    graph = _residual_block()
    fused = fuse_ops(graph)
    verify_graph(fused)
    # batch norm is a broadcast op here: the conv absorbs it and the ops after it
    assert _groups(fused) == [
        ("stem",),
        ("conv1", "conv1_bn", "conv1_relu"),
        ("conv2", "conv2_bn", "add", "relu"),
    ]
    assert [g.pattern for g in fused.groups] == [
        Pattern.ELEMWISE,
        Pattern.OUT_ELEMWISE_FUSABLE,
        Pattern.OUT_ELEMWISE_FUSABLE,
    ]
    folded = fuse_ops(fold_batch_norm(graph))
    assert _groups(folded) == [("stem",), ("conv1", "conv1_relu"), ("conv2", "add", "relu")]
    assert "group fused_2_conv_add_relu (out_elemwise_fusable): conv2, add, relu" in print_graph(
        folded
    )


def test_fused_and_planned_execution_matches_node_by_node() -> None:
    graph = _residual_block()
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    want = run_graph(graph, {"x": x})["relu"]
    got = run_graph(plan_memory(fuse_ops(graph)), {"x": x})["relu"]
    np.testing.assert_array_equal(got, want)


def test_two_consumers_of_a_conv_keep_it_apart() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 4, 8, 8), "float32")
    w = b.add_constant("w", np.ones((4, 4, 1, 1), np.float32))
    (c,) = b.add_node("Conv", [x, w], name="conv")
    (a,) = b.add_node("Relu", [c], name="a")
    (m,) = b.add_node("MaxPool", [c], {"kernel_shape": [1, 1]}, name="pool")
    (s,) = b.add_node("Add", [a, m], name="sum")
    # the paths conv->relu->sum and conv->pool->sum are not all elementwise: conv stays alone;
    # relu (elementwise) fuses into its post-dominator sum, which the pool then absorbs
    assert _groups(fuse_ops(b.build([s]))) == [("conv",), ("a", "pool", "sum")]


def test_reduction_absorbs_elementwise_inputs_but_not_its_consumers() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (2, 3, 4), "float32")
    (t,) = b.add_node("Transpose", [x], {"perm": [0, 2, 1]}, name="t")
    (e,) = b.add_node("Exp", [t], name="exp")
    (m,) = b.add_node("Mul", [e, b.add_constant("k", np.float32(3))], name="mul")
    axes = b.add_constant("axes", np.array([2], np.int64))
    (r,) = b.add_node("ReduceSum", [m, axes], name="sum")
    (n,) = b.add_node("Neg", [r], name="neg")
    graph = fuse_ops(b.build([n]))
    # as in TVM, the transpose (injective, fused in phase 1) cannot join a group that is
    # already a reduction; the elementwise/broadcast ops (phase 0) can
    assert _groups(graph) == [("t",), ("exp", "mul", "sum"), ("neg",)]
    assert graph.groups[1].pattern == Pattern.COMM_REDUCE


def test_injective_chain_fuses() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (2, 3, 4), "float32")
    (t,) = b.add_node("Transpose", [x], {"perm": [0, 2, 1]}, name="t")
    (r,) = b.add_node("Reshape", [t, b.add_constant("s", np.array([6, 4], np.int64))], name="r")
    (e,) = b.add_node("Exp", [r], name="exp")
    (c,) = b.add_node("Concat", [e, e], {"axis": 0}, name="cat")
    graph = fuse_ops(b.build([c]))
    assert _groups(graph) == [("t", "r", "exp", "cat")]
    assert graph.groups[0].pattern == Pattern.INJECTIVE


def test_opaque_ops_stay_alone_and_elementwise_chains_fuse() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (2, 8), "float32")
    (a,) = b.add_node("Exp", [x], name="exp")
    (c,) = b.add_node("Mul", [a, b.add_constant("k", np.float32(2))], name="mul")
    (s,) = b.add_node("Softmax", [c], name="softmax")
    (r,) = b.add_node("Tanh", [s], name="tanh")
    (sh,) = b.add_node(
        "Reshape", [r, b.add_constant("shape", np.array([16], np.int64))], name="flat"
    )
    assert _groups(fuse_ops(b.build([sh]))) == [("exp", "mul"), ("softmax",), ("tanh", "flat")]


def test_matmul_absorbs_bias_add_and_gelu_chain() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (4, 8), "float32")
    (m,) = b.add_node("MatMul", [x, b.add_constant("w", np.ones((8, 8), np.float32))], name="mm")
    (a,) = b.add_node("Add", [m, b.add_constant("bias", np.ones(8, np.float32))], name="bias")
    (g,) = b.add_node("Gelu", [a], name="gelu")
    (t,) = b.add_node("Transpose", [g], name="t")
    # the transpose is injective, not elementwise: it stays out of the matmul's group
    assert _groups(fuse_ops(b.build([t]))) == [("mm", "bias", "gelu"), ("t",)]


def test_a_long_elementwise_chain_fuses_in_groups_of_at_most_max_fuse_nodes() -> None:
    """Before: 150 Relu/Neg in a chain (one group: an expression 150 deep). After: 64 + 64 + 22
    nodes, consecutive, computing the same."""
    from tensorforge.compiler.graph.passes.fuse_ops import MAX_FUSE_NODES

    b = GraphBuilder("chain")
    y = b.add_input("x", (3, 5), "float32")
    for i in range(150):
        (y,) = b.add_node("Relu" if i % 2 else "Neg", [y], name=f"n{i}")
    graph = b.build([y])
    fused = fuse_ops(graph)
    sizes = [len(g) for g in _groups(fused)]
    assert sizes == [MAX_FUSE_NODES, MAX_FUSE_NODES, 150 - 2 * MAX_FUSE_NODES]
    assert [n for g in _groups(fused) for n in g] == [f"n{i}" for i in range(150)]
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(run_graph(fused, {"x": x})[y], run_graph(graph, {"x": x})[y])


def _rereading_chain(ops: list[str]) -> tuple[object, str]:
    b = GraphBuilder("rereading")
    y = b.add_input("x", (1, 64), "float32")
    for i, op in enumerate(ops):
        (y,) = b.add_node(op, [y], name=f"n{i}")
    return b.build([y]), y


def test_a_chain_of_ops_rereading_their_operand_splits_before_its_expression_explodes() -> None:
    """Before: 10 Erfs in one group, each reading its operand 21 times (an expression tree of
    21^10 nodes; compiling never finished). After: groups whose kernels' expressions, counted as
    trees, stay within MAX_EXPR_NODES, computing the same."""
    from tensorforge.compiler.graph.lower_te import lower_group, tree_size
    from tensorforge.compiler.graph.passes.fuse_ops import MAX_EXPR_NODES

    graph, y = _rereading_chain(["Erf"] * 10)
    fused = fuse_ops(graph)
    assert [n for g in _groups(fused) for n in g] == [f"n{i}" for i in range(10)]
    assert len(fused.groups) > 1
    for group in fused.groups:
        kernel = lower_group(fused, group)
        assert tree_size(kernel.args[-1].op.body) <= MAX_EXPR_NODES
    x = RNG.uniform(-3, 3, (1, 64)).astype(np.float32)
    np.testing.assert_array_equal(run_graph(fused, {"x": x})[y], run_graph(graph, {"x": x})[y])


def test_expression_growth_counts_operand_reads_from_the_lowering_rule() -> None:
    from tensorforge.compiler.graph.lower_te import expression_growth

    graph, _ = _rereading_chain(["Relu", "HardSwish", "Erf"])
    reads = [expression_growth(graph, n).reads for n in graph.nodes]
    assert reads[:2] == [(1,), (2,)] and reads[2][0] > 10


def test_conv_bias_gelu_still_fuses_under_the_expression_budget() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 4, 8, 8), "float32")
    w = b.add_constant("w", RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    (c,) = b.add_node("Conv", [x, w], name="conv")
    (a,) = b.add_node(
        "Add", [c, b.add_constant("b", np.ones((1, 8, 1, 1), np.float32))], name="bias"
    )
    (g,) = b.add_node("Gelu", [a], name="gelu")
    assert _groups(fuse_ops(b.build([g]))) == [("conv", "bias", "gelu")]
