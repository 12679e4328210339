"""Batched float32 MatMul on the CPU (both operands computed at run time, attention's
`Q K^T` and `P V`): register-tiled dense per matrix with its right operand packed at run time
(`topi.x86.batch_dense`), against onnxruntime: broadcast batch dims, ragged tiles and panels, a
transposed operand folded into the packing, and fused tails (scale, mask add, softmax input)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tensorforge
from tensorforge.compiler.topi.x86.dense import DenseConfig

RNG = np.random.default_rng(7)


def _model(sa, sb, transpose_b: bool, tail: str):
    inputs = [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, list(sa)),
        helper.make_tensor_value_info("b", TensorProto.FLOAT, list(sb)),
    ]
    inits = [helper.make_tensor("half", TensorProto.FLOAT, [], [0.125])]
    nodes = []
    rhs = "b"
    if transpose_b:
        perm = [*range(len(sb) - 2), len(sb) - 1, len(sb) - 2]
        nodes.append(helper.make_node("Transpose", ["b"], ["bt"], perm=perm))
        rhs = "bt"
    nodes.append(helper.make_node("MatMul", ["a", rhs], ["m"]))
    out = "m"
    if tail in ("scale", "mask"):
        nodes.append(helper.make_node("Mul", ["m", "half"], ["s"]))
        out = "s"
    if tail == "mask":
        n = sb[-2] if transpose_b else sb[-1]
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, n]))
        nodes.append(helper.make_node("Add", ["s", "mask"], ["y"]))
        out = "y"
    outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "batch_matmul", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CASES = [  # a, b as stored, b transposed first, tail
    ((3, 17, 9), (3, 9, 21), False, "none"),  # ragged row tiles and a ragged panel
    ((2, 3, 33, 16), (2, 3, 40, 16), True, "scale"),  # q @ k^T, the transpose folded
    ((2, 3, 17, 9), (3, 9, 21), False, "mask"),  # b broadcast over the first batch dim
    ((17, 9), (2, 9, 21), False, "none"),  # a broadcast
    ((4, 1, 64), (4, 64, 130), False, "scale"),  # one row per matrix, several panels
    ((2, 12, 8), (1, 8, 7), False, "none"),  # fewer columns than lanes
    ((1, 4, 20, 64), (1, 4, 64, 20), False, "mask"),  # panels that divide: no copy stage
]


@pytest.mark.parametrize(("sa", "sb", "transpose_b", "tail"), CASES)
def test_batch_matmul_matches_onnxruntime(sa, sb, transpose_b, tail) -> None:
    model = _model(sa, sb, transpose_b, tail)
    feeds = {
        "a": RNG.standard_normal(sa).astype(np.float32),
        "b": RNG.standard_normal(sb).astype(np.float32),
    }
    if tail == "mask":
        n = sb[-2] if transpose_b else sb[-1]
        feeds["mask"] = np.where(RNG.random((1, n)) < 0.3, -1e4, 0).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    module = tensorforge.compile(model)
    got = next(iter(module.run(feeds).values()))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "config",
    [DenseConfig(mr=4, bn=64), DenseConfig(mr=6, bn=16, kunroll=4)],
    ids=["4x64", "6x16u4"],
)
def test_batch_dense_knobs_match_numpy(config: DenseConfig) -> None:
    """The template's knobs (what `_batch_default` and a tuned log choose) are all exact."""
    from tensorforge.compiler import te
    from tensorforge.compiler.build import build
    from tensorforge.compiler.topi.x86.dense import batch_dense, schedule_batch_dense

    nb, m, k, n = 3, 13, 24, 70
    A = te.placeholder((nb, m, k), name="A")
    B = te.placeholder((nb, k, n), name="B")
    op = batch_dense(lambda q, i, kk: A[q, i, kk], lambda q, kk, j: B[q, kk, j],
                     (nb, m, k, n), "float32", lambda v, q, i, j: v * 2.0, config)  # fmt: skip
    f = build(schedule_batch_dense(op, config), [A, B, op.out], name="bdense")
    a = RNG.standard_normal((nb, m, k)).astype(np.float32)
    b = RNG.standard_normal((nb, k, n)).astype(np.float32)
    y = np.zeros((nb, m, n), np.float32)
    f(a, b, y)
    np.testing.assert_allclose(y, 2 * (a @ b), rtol=1e-5, atol=1e-4)
