"""Reshapes lowered by runs of dims (`lower_te.reshape_lazy`) compiled to native code vs numpy:
channel shuffles and random reshape/transpose/reshape chains."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.graph.lower_te import _reshape_runs


def _chain(shape: tuple, mid: tuple, perm: tuple, end: tuple):
    """Relu -> Reshape(mid) -> Transpose(perm) -> Reshape(end): one injective kernel."""
    inits = [
        numpy_helper.from_array(np.array(mid, np.int64), "mid"),
        numpy_helper.from_array(np.array(end, np.int64), "end"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "mid"], ["m"]),
        helper.make_node("Transpose", ["m"], ["t"], perm=list(perm)),
        helper.make_node("Reshape", ["t", "end"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(end))],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(shape: tuple, mid: tuple, perm: tuple, end: tuple) -> None:
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype("f4")
    got = tensorforge.compile(_chain(shape, mid, perm, end), progress=False).run({"x": x})["y"]
    want = np.maximum(x, 0).reshape(mid).transpose(perm).reshape(end)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("c", "side"), [(58, 28), (116, 14), (24, 7)])
def test_channel_shuffle_matches_numpy(c: int, side: int) -> None:
    _check((1, 2 * c, side, side), (1, 2, c, side, side), (0, 2, 1, 3, 4), (1, 2 * c, side, side))


def test_reshape_runs_cut_where_both_prefix_products_agree() -> None:
    runs = _reshape_runs((1, 116, 28, 28), (1, 2, 58, 28, 28))
    assert runs == [((0, 1), (0, 1)), ((1, 2), (1, 3)), ((2, 3), (3, 4)), ((3, 4), (4, 5))]
    assert _reshape_runs((6, 0), (0, 3)) == [((0, 2), (0, 2))]  # empty: one run


@st.composite
def _chains(draw: st.DrawFn) -> tuple:
    dims = draw(st.lists(st.integers(1, 4), min_size=2, max_size=5))
    mid = tuple(dims)
    perm = tuple(draw(st.permutations(range(len(mid)))))
    size = int(np.prod(mid))
    cut = draw(st.integers(1, len(mid)))
    shape = (int(np.prod(mid[:cut])), int(np.prod(mid[cut:])))  # merged: the input
    transposed = tuple(mid[p] for p in perm)
    split = draw(st.integers(0, len(transposed)))
    end = (int(np.prod(transposed[:split])), int(np.prod(transposed[split:])))
    assert int(np.prod(end)) == size
    return shape, mid, perm, end


@settings(max_examples=20, deadline=None)
@given(_chains())
def test_reshape_transpose_reshape_chains_match_numpy(case: tuple) -> None:
    _check(*case)
