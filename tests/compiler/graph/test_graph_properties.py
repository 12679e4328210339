"""Hypothesis properties: memory plans of random graphs never overlap live tensors and run to
the same results; Slice/Pad shape inference agrees with numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.passes import fuse_ops, plan_memory
from tensorforge.compiler.graph.verify import verify_graph

UNARY = ["Relu", "Exp", "Neg", "Tanh", "Abs"]


@st.composite
def random_dags(draw: st.DrawFn) -> tuple:
    """A DAG of unary/binary elementwise ops, MatMuls (fusion barriers) and a few outputs."""
    b = GraphBuilder("dag")
    values = [b.add_input("x", (4, 4), "float32")]
    for i in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["unary", "add", "matmul"]))
        a = draw(st.sampled_from(values))
        if kind == "unary":
            (y,) = b.add_node(draw(st.sampled_from(UNARY)), [a], name=f"n{i}")
        else:
            other = draw(st.sampled_from(values))
            (y,) = b.add_node("Add" if kind == "add" else "MatMul", [a, other], name=f"n{i}")
        values.append(y)
    outputs = draw(st.lists(st.sampled_from(values[1:]), min_size=1, max_size=3, unique=True))
    return b.build(outputs), draw(st.booleans())


@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_memory_plan_never_overlaps_live_tensors_and_runs_identically(case: tuple) -> None:
    graph, fused = case
    planned = plan_memory(fuse_ops(graph) if fused else graph)
    verify_graph(planned)
    plan = planned.memory_plan
    for a, b in itertools.combinations(plan.slots, 2):
        live = a.first <= b.last and b.first <= a.last
        apart = a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset
        assert not live or apart, (a, b)
    assert plan.peak_bytes <= plan.naive_bytes
    x = np.random.default_rng(0).uniform(-0.5, 0.5, (4, 4)).astype(np.float32)
    want, got = run_graph(graph, {"x": x}), run_graph(planned, {"x": x})
    for name in graph.outputs:
        np.testing.assert_array_equal(got[name], want[name])


slice_args = st.tuples(
    st.integers(-12, 12), st.integers(-12, 12), st.sampled_from([-3, -2, -1, 1, 2, 3])
)


def _onnx_slice_positions(n: int, start: int, end: int, step: int) -> np.ndarray:
    """The positions ONNX Slice keeps along an axis of size n, walked out from the spec's text
    (not numpy's slicing, which differs: a start before the axis clamps to 0 for a negative
    step too, where numpy gives nothing)."""
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
    else:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    kept, i = [], start
    while (i < end if step > 0 else i > end) and 0 <= i < n:
        kept.append(i)
        i += step
    return np.asarray(kept, dtype=np.int64)


def test_slice_oracle_follows_onnxruntime() -> None:
    """The oracle above against onnxruntime, on the cases where ONNX and numpy part ways."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    cases = [(1, -2, -2, -3), (3, -5, -9, -1), (4, 7, -9, -2), (5, 0, 9, 2), (0, 0, 1, 1)]
    for n, start, end, step in cases:
        names = ("starts", "ends", "axes", "steps")
        consts = [
            helper.make_tensor(k, TensorProto.INT64, [1], [v])
            for k, v in zip(names, (start, end, 0, step), strict=True)
        ]
        graph = helper.make_graph(
            [helper.make_node("Slice", ["x", *names], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            consts,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        x = np.arange(n, dtype=np.float32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, x[_onnx_slice_positions(n, start, end, step)])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=3), st.data())
def test_slice_and_pad_agree_with_the_onnx_spec(shape: list[int], data: st.DataObject) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    start, end, step = data.draw(slice_args)
    pads = data.draw(st.lists(st.integers(0, 3), min_size=2 * len(shape), max_size=2 * len(shape)))
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    b = GraphBuilder()
    xi = b.add_input("x", shape, "float32")
    consts = [
        b.add_constant(f"c{i}", np.array([v], np.int64))
        for i, v in enumerate((start, end, axis, step))
    ]
    (s,) = b.add_node("Slice", [xi, *consts], name="s")
    (p,) = b.add_node("Pad", [xi, b.add_constant("pads", np.array(pads, np.int64))], name="p")
    out = run_graph(b.build([s, p]), {"x": x})  # checks results against the inferred types
    kept = _onnx_slice_positions(shape[axis], start, end, step)
    np.testing.assert_array_equal(out[s], np.take(x, kept, axis=axis))
    widths = list(zip(pads[: len(shape)], pads[len(shape) :], strict=True))
    np.testing.assert_array_equal(out[p], np.pad(x, widths))
