"""Whole models imported from ONNX match onnxruntime (float32), before and after the passes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import MODELS, efficientnet_b0, quantized_cnn
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
    for out, ref in zip(graph.model_outputs, want, strict=True):
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
    for out, ref in zip(graph.model_outputs, want, strict=True):
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
        for name, ref in zip(graph.model_outputs, want, strict=True):
            np.testing.assert_array_equal(got[name], ref)


def test_mobilenet_v2_has_the_papers_topology() -> None:
    """Sandler et al. 2018, Table 2: 52 convolutions (17 of them depthwise, 4 with stride 2), a
    residual add in each repeated bottleneck (10), 320 channels before the 1x1 conv to 1280 at
    7x7, and torchvision's parameter count (batch norm scale and bias counted, running
    statistics not)."""
    model = MODELS["mobilenet_v2"]()
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = model.graph.node
    convs = [n for n in nodes if n.op_type == "Conv"]
    attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in convs]
    depthwise = [(n, a) for n, a in zip(convs, attrs, strict=True) if a["group"] > 1]
    assert len(convs) == 52 and len(depthwise) == 17
    assert all(a["group"] == inits[n.input[1]].shape[0] for n, a in depthwise)
    assert [a["strides"][0] for _, a in depthwise].count(2) == 4
    assert sum(n.op_type == "Add" for n in nodes) == 10
    weights = [inits[i].size for n in nodes if n.op_type in ("Conv", "Gemm") for i in n.input[1:]]
    norms = [2 * inits[n.input[1]].size for n in nodes if n.op_type == "BatchNormalization"]
    assert sum(weights) + sum(norms) == 3_504_872
    last = inits[convs[-1].input[1]]
    assert last.shape == (1280, 320, 1, 1)
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info
    }
    assert shapes[convs[-1].output[0]] == [1, 1280, 7, 7]


def test_efficientnet_b0_has_the_papers_topology() -> None:
    """Tan and Le 2019, Table 1: 16 MBConv blocks (16 depthwise convolutions, 4 with stride 2,
    a squeeze-excitation's two 1x1 convolutions in each), 81 convolutions, a residual add in
    each repeated block (9), and torchvision's parameter count (batch norm scale and bias
    counted, running statistics not)."""
    model = efficientnet_b0()
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = model.graph.node
    convs = [n for n in nodes if n.op_type == "Conv"]
    attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in convs]
    depthwise = [a for a in attrs if a["group"] > 1]
    assert len(convs) == 81 and len(depthwise) == 16
    assert [a["strides"][0] for a in depthwise].count(2) == 4
    assert sum(n.op_type == "Add" for n in nodes) == 9
    weights = [inits[i].size for n in nodes if n.op_type in ("Conv", "Gemm") for i in n.input[1:]]
    norms = [2 * inits[n.input[1]].size for n in nodes if n.op_type == "BatchNormalization"]
    assert sum(weights) + sum(norms) == 5_288_548


@pytest.mark.parametrize("outputs", [["r", "r"], ["x", "r", "x"]])
def test_a_value_listed_twice_as_graph_output_keeps_every_output(outputs: list[str]) -> None:
    """onnxruntime runs a graph that lists an output twice and returns it at each position; the
    module does too (the repeat gets its own name), instead of refusing it with 'outputs must
    be distinct'."""
    import tensorforge

    f = onnx.TensorProto.FLOAT
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["r"])],
        "twice",
        [onnx.helper.make_tensor_value_info("x", f, (2, 3))],
        [onnx.helper.make_tensor_value_info(o, f, (2, 3)) for o in outputs],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 9
    x = _inputs(model)["x"]
    want = _onnxruntime(model, {"x": x})
    got = tensorforge.compile(model).run({"x": x})
    assert len(got) == len(outputs)
    assert list(got)[: len(dict.fromkeys(outputs))] == list(dict.fromkeys(outputs))
    for value, expected in zip(got.values(), want, strict=True):
        np.testing.assert_array_equal(value, expected)
