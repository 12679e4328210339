"""TopK (a classifier's top-5, a sampler's smallest-k, a whole sort: torch.sort and argsort)
compiled, against onnxruntime; ties take the lower index first; an axis too long to rank is
refused by name."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph.compile import compile_graph
from tensorforge.compiler.graph.ops.topk import MAX_K, MAX_SORT_N
from tensorforge.compiler.tir.stmt import LoweringError


def _model(shape: tuple[int, ...], k: int, axis: int, largest: int, dtype=TensorProto.FLOAT):  # noqa: ANN001, ANN202
    head = "Softmax" if dtype == TensorProto.FLOAT else "Identity"
    nodes = [
        oh.make_node(head, ["x"], ["p"], **({"axis": axis} if head == "Softmax" else {})),
        oh.make_node("TopK", ["p", "k"], ["values", "indices"], axis=axis, largest=largest),
    ]
    graph = oh.make_graph(
        nodes,
        "head",
        [oh.make_tensor_value_info("x", dtype, shape)],
        [
            oh.make_tensor_value_info("values", dtype, None),
            oh.make_tensor_value_info("indices", TensorProto.INT64, None),
        ],
        [numpy_helper.from_array(np.array([k], np.int64), "k")],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "shape,k,axis,largest", [((2, 1000), 5, -1, 1), ((3, 7, 4), 3, 1, 0), ((4, 9), 9, 1, 1)]
)
def test_topk_matches_onnxruntime(shape, k, axis, largest) -> None:  # noqa: ANN001
    model = _model(shape, k, axis, largest)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:4] = x.reshape(-1)[4]  # ties: the lower index comes first
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model).run(x)
    np.testing.assert_allclose(got["values"], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got["indices"], want[1])


@pytest.mark.parametrize(
    "shape,k,axis,largest,dtype",
    [
        ((3, 80), 80, -1, 1, np.float32),  # torch.sort(descending=True) exports TopK, K = n
        ((70, 2), MAX_K + 1, 0, 0, np.float32),  # argsort along axis 0, first K
        ((2, 100), 70, 1, 1, np.int64),
    ],
)
def test_a_k_beyond_the_selection_steps_sorts_by_rank(shape, k, axis, largest, dtype) -> None:  # noqa: ANN001
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT64
    model = _model(shape, k, axis, largest, onnx_type)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape) if dtype == np.float32 else rng.integers(-5, 5, shape)
    x = x.astype(dtype)
    x.reshape(-1)[:6] = x.reshape(-1)[7]  # ties: the lower index comes first
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model).run(x)
    np.testing.assert_allclose(got["values"], want[0], rtol=1e-6)  # Softmax's rounding
    np.testing.assert_array_equal(got["indices"], want[1])


def test_an_axis_too_long_to_rank_is_refused_by_the_lowering_and_runs_in_a_tail() -> None:
    """The CPU lowering refuses it by name; `tensorforge.compile` runs it after the compiled
    part with numpy's sort (docs/compile.md, "Data-dependent shapes")."""
    model = _model((1, MAX_SORT_N + 1), MAX_K + 1, -1, 1)
    with pytest.raises(LoweringError, match=rf"K={MAX_K + 1} over an axis of {MAX_SORT_N + 1}"):
        compile_graph(from_onnx(model), progress=False)
    module = tensorforge.compile(model)
    assert module.tail is not None
    x = np.random.default_rng(0).standard_normal((1, MAX_SORT_N + 1)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = module.run({"x": x})
    for value, expected in zip(got.values(), want, strict=True):
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)


def _plain(shape: tuple[int, ...], k: int, axis: int, largest: int):  # noqa: ANN202
    """TopK straight on the input (no Softmax in front: NaN and inf reach it as they are)."""
    model = _model(shape, k, axis, largest)
    del model.graph.node[0]
    model.graph.node[0].input[0] = "x"
    return model


# NaN ranks as the largest value (onnxruntime's order), NaNs among themselves by index; +-inf
# and ties (0.0 and -0.0 among them) by index too
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 2.0, -1.0], np.float32)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("k", [1, 5, MAX_K + 6])
@pytest.mark.parametrize("largest", [1, 0])
def test_nan_ranks_largest_as_in_onnxruntime(target: str, k: int, largest: int) -> None:
    x = np.random.default_rng(2).choice(SPECIALS, size=(3, MAX_K + 6))
    x[0, :] = np.nan  # a row of NaNs only: index order
    model = _plain(x.shape, k, 1, largest)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model, target=target).run(x)
    np.testing.assert_array_equal(got["indices"], want[1])
    np.testing.assert_array_equal(got["values"], want[0])  # (NaN matches NaN)


def test_sort_of_a_torch_tensor_with_nan_matches_torch_and_onnxruntime() -> None:
    torch = pytest.importorskip("torch")
    from tensorforge.compiler.frontend import export_onnx

    class Sort(torch.nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN202
            return torch.sort(x, dim=-1, descending=True)

    x = np.random.default_rng(3).choice(SPECIALS, size=(2, 9))
    model = export_onnx(Sort(), (torch.from_numpy(x),))
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"input0": x})
    got = list(tensorforge.compile(model).run({"input0": x}).values())
    values, _ = Sort()(torch.from_numpy(x))
    for result, ort_result in zip(got, want, strict=True):
        np.testing.assert_array_equal(result, ort_result)
    np.testing.assert_array_equal(got[0], values.numpy())  # (torch's sort of ties: unstable)
