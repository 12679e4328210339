"""Whole models imported from ONNX match onnxruntime (float32), before and after the passes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import MODELS, quantized_cnn
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.passes import optimize
from tensorforge.compiler.graph.verify import verify_graph

RTOL = 1e-4


def _inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }


def _onnxruntime(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feed)


def _assert_close(got: np.ndarray, want: np.ndarray) -> None:
    # relative to each element, with an absolute floor at 1e-4 of the output's range for
    # elements that cancel to near zero
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * 1e-1 * np.abs(want).max())


@pytest.fixture(scope="module", params=sorted(MODELS))
def case(request: pytest.FixtureRequest) -> tuple:
    model = MODELS[request.param]()
    feed = _inputs(model)
    return request.param, model, feed, _onnxruntime(model, feed)


def test_imported_model_matches_onnxruntime(case: tuple) -> None:
    name, model, feed, want = case
    graph = from_onnx(model)
    verify_graph(graph)
    got = run_graph(graph, feed)
    assert len(got) == len(want)
    for out, ref in zip(graph.outputs, want, strict=True):
        assert got[out].shape == ref.shape
        _assert_close(got[out], ref)


@pytest.mark.parametrize("layout_block", [None, 8], ids=["nchw", "nchw8c"])
def test_optimized_model_matches_onnxruntime(case: tuple, layout_block: int | None) -> None:
    name, model, feed, want = case
    graph = optimize(from_onnx(model), layout_block=layout_block)
    verify_graph(graph)
    assert graph.groups is not None and graph.memory_plan is not None
    assert graph.memory_plan.peak_bytes < graph.memory_plan.naive_bytes
    got = run_graph(graph, feed)  # group by group out of the planned arena
    for out, ref in zip(graph.outputs, want, strict=True):
        _assert_close(got[out], ref)


def test_resnet18_folds_every_batch_norm_and_fuses_blocks() -> None:
    graph = optimize(from_onnx(MODELS["resnet18"]()))
    ops = [n.op for n in graph.nodes]
    assert "BatchNormalization" not in ops and ops.count("Conv") == 20
    kinds = [tuple(graph.node(n).op for n in g.nodes) for g in graph.groups]
    # stem, 8 blocks of [conv relu] + [conv add relu], 3 downsample convs, pool, flatten, dense
    assert kinds.count(("Conv", "Relu")) == 9
    assert kinds.count(("Conv", "Add", "Relu")) == 8
    assert kinds.count(("Conv",)) == 3
    assert len(kinds) == 24


def test_quantized_model_matches_onnxruntime_bit_exactly() -> None:
    model = quantized_cnn()
    feed = {"x": np.random.default_rng(2).standard_normal((1, 8, 10, 10)).astype(np.float32) * 3}
    options = ort.SessionOptions()
    # ORT's graph optimizations would rewrite the quantized ops; compare the kernels themselves
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    want = session.run(None, feed)
    for graph in (from_onnx(model), optimize(from_onnx(model))):
        got = run_graph(graph, feed)
        for name, ref in zip(graph.outputs, want, strict=True):
            np.testing.assert_array_equal(got[name], ref)
