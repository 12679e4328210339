"""Chains of element-wise ops that read their operand many times (Erf, Gelu, Mish) compile to
kernels of bounded expression size on the CPU and match onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph.lower_te import lower_group, tree_size
from tensorforge.compiler.graph.passes import optimize
from tensorforge.compiler.graph.passes.fuse_ops import MAX_EXPR_NODES


def _chain(ops: list[str]) -> onnx.ModelProto:
    names = ["x", *(f"t{i}" for i in range(len(ops) - 1)), "y"]
    nodes = [
        helper.make_node(op, [a], [b]) for op, a, b in zip(ops, names, names[1:], strict=False)
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 64]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "chain", io[:1], io[1:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize(
    "ops", [["Erf"] * 10, ["Gelu"] * 6, ["Mish"] * 6], ids=lambda ops: f"{ops[0]}x{len(ops)}"
)
def test_rereading_chain_compiles_to_bounded_kernels_and_matches_onnxruntime(ops) -> None:
    model = _chain(ops)
    graph = optimize(from_onnx(model))
    for group in graph.groups:  # bounded by construction: no kernel's expression explodes
        assert tree_size(lower_group(graph, group).args[-1].op.body) <= MAX_EXPR_NODES
    module = tensorforge.compile(model, target="llvm")
    x = np.random.default_rng(0).uniform(-3, 3, (1, 64)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    np.testing.assert_allclose(module.run(x)["y"], want, rtol=1e-5, atol=1e-5)
