"""The shape arithmetic torch's exporters write for transformers (Shape -> Gather -> Range ->
comparisons -> Where -> Expand building an attention mask; ConstantOfShape -> CumSum position
ids) folds at compile time: no kernel of the module computes any of it, and the module matches
onnxruntime. Ops on runtime data lower natively or name the node they cannot lower."""

from __future__ import annotations

import importlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, from_onnx

B, S, D = 2, 8, 16
SHAPE_OPS = {  # (Unsqueeze also reshapes q and v: it stays)
    "Shape", "Gather", "Range", "Concat", "Greater", "Equal", "Not", "And", "Or",
    "Where", "ConstantOfShape", "CumSum", "Sub", "Mod", "Expand", "Cast", "Trilu",
}  # fmt: skip


def _const(name: str, value) -> helper.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _mask_nodes() -> list:
    """mask[b, 0, i, j] = -1e9 where j > i (causal) or where j is odd and i even (an arbitrary
    second rule through Mod/Equal/Not/And/Or), else 0; expanded to [B, 1, S, S]."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    return [
        _const("zero", i64(0)), _const("one", i64(1)), _const("two", i64(2)),
        _const("ax0", i64([0])), _const("ax1", i64([1])), _const("big", np.float32(-1e9)),
        _const("nil", np.float32(0.0)), _const("one1", i64([1])),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"]),
        helper.make_node("Range", ["zero", "seq", "one"], ["pos"]),
        helper.make_node("Unsqueeze", ["pos", "ax1"], ["rows"]),
        helper.make_node("Unsqueeze", ["pos", "ax0"], ["cols"]),
        helper.make_node("Greater", ["cols", "rows"], ["future"]),
        helper.make_node("Mod", ["cols", "two"], ["col_parity"]),
        helper.make_node("Mod", ["rows", "two"], ["row_parity"]),
        helper.make_node("Equal", ["col_parity", "one"], ["col_odd"]),
        helper.make_node("Equal", ["row_parity", "one"], ["row_odd"]),
        helper.make_node("Not", ["row_odd"], ["row_even"]),
        helper.make_node("And", ["col_odd", "row_even"], ["odd_even"]),
        helper.make_node("Or", ["future", "odd_even"], ["masked"]),
        helper.make_node("Where", ["masked", "big", "nil"], ["mask2d"]),
        helper.make_node("Unsqueeze", ["batch", "ax0"], ["batch1"]),
        helper.make_node("Unsqueeze", ["seq", "ax0"], ["seq1"]),
        helper.make_node("Concat", ["batch1", "one1", "seq1", "seq1"], ["mask_shape"], axis=0),
        helper.make_node("Expand", ["mask2d", "mask_shape"], ["mask"]),
    ]  # fmt: skip


def _position_nodes() -> list:
    """position ids = CumSum(ones[S]) - 1, through ConstantOfShape, then an embedding lookup."""
    ones = numpy_helper.from_array(np.array([1], np.int64), "value")
    return [
        helper.make_node("Concat", ["seq1"], ["seq_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["seq_shape"], ["ones"], value=ones),
        helper.make_node("CumSum", ["ones", "zero"], ["count"]),
        helper.make_node("Sub", ["count", "one"], ["ids"]),
        helper.make_node("Gather", ["table", "ids"], ["positions"]),
        helper.make_node("Add", ["x", "positions"], ["xp"]),
    ]


def _attention_model():
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32) * 0.3, n)
        for n in ("wq", "wk", "wv")
    ]
    table = numpy_helper.from_array(rng.standard_normal((S, D)).astype(np.float32), "table")
    scale = numpy_helper.from_array(np.array(D**-0.5, np.float32), "scale")
    nodes = _mask_nodes() + _position_nodes() + [
        helper.make_node("MatMul", ["xp", "wq"], ["q3"]),
        helper.make_node("MatMul", ["xp", "wk"], ["k3"]),
        helper.make_node("MatMul", ["xp", "wv"], ["v3"]),
        helper.make_node("Unsqueeze", ["q3", "one1"], ["q"]),
        helper.make_node("Unsqueeze", ["v3", "one1"], ["v"]),
        helper.make_node("Transpose", ["k3"], ["kt3"], perm=[0, 2, 1]),
        helper.make_node("Unsqueeze", ["kt3", "one1"], ["kt"]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        helper.make_node("Mul", ["qk", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mask"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v"], ["y"]),
    ]  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, D])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, 1, S, D])
    graph = helper.make_graph(nodes, "attention", [x], [y], [*weights, table, scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _kernel_ops(module) -> list[str]:
    return [op for call in module.calls for op in call.label.split(" (")[0].split("+")]


@pytest.mark.parametrize("target", ["llvm", "opencl"])
def test_attention_mask_subgraph_folds_and_matches_onnxruntime(target) -> None:
    model = _attention_model()
    x = np.random.default_rng(1).standard_normal((B, S, D)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    module = tensorforge.compile(model, target=target)
    ops = _kernel_ops(module)
    assert "MatMul" in ops and "Softmax" in ops
    assert not SHAPE_OPS & set(ops), ops  # the position embeddings fold too: constant ids
    np.testing.assert_allclose(module.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_torchscript_expand_with_minus_one_folds() -> None:
    """x.expand(2, -1, -1) as TorchScript exports it: the -1 dims replaced through
    ConstantOfShape, Mul, Equal and Where on constants, which must fold at import (Expand's
    shape decides its output shape)."""
    i64 = lambda v: numpy_helper.from_array(np.array(v, np.int64))  # noqa: E731
    nodes = [
        helper.make_node("Constant", [], ["target"], value=i64([2, -1, -1])),
        helper.make_node("Constant", [], ["three"], value=i64([3])),
        helper.make_node("Constant", [], ["neg"], value=i64(-1)),
        helper.make_node("ConstantOfShape", ["three"], ["ones"], value=i64([1])),
        helper.make_node("Mul", ["ones", "neg"], ["negs"]),
        helper.make_node("Equal", ["target", "negs"], ["is_neg"]),
        helper.make_node("Where", ["is_neg", "ones", "target"], ["shape"]),
        helper.make_node("Expand", ["x", "shape"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "expand", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    a = np.random.default_rng(2).standard_normal((1, 3, 4)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": a})
    module = tensorforge.compile(model)
    assert _kernel_ops(module) == ["Expand"]
    np.testing.assert_array_equal(module.run({"x": a})["y"], want)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
def test_position_ids_from_a_runtime_mask_lower_natively(target) -> None:
    """RoBERTa's position ids from input ids at run time: mask = ids != pad; cumsum(mask) * mask
    + pad, then masked_fill of the padded positions; every op on runtime data."""
    pad = numpy_helper.from_array(np.array(1, np.int64), "pad")
    fill = numpy_helper.from_array(np.array(-7, np.int64), "fill")
    axis = numpy_helper.from_array(np.array(1, np.int32), "axis")
    nodes = [
        helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
        helper.make_node("Not", ["is_pad"], ["keep"]),
        helper.make_node("Cast", ["keep"], ["mask"], to=TensorProto.INT32),
        helper.make_node("CumSum", ["mask", "axis"], ["count"]),
        helper.make_node("Mul", ["count", "mask"], ["counted"]),
        helper.make_node("Cast", ["counted"], ["counted64"], to=TensorProto.INT64),
        helper.make_node("Add", ["counted64", "pad"], ["positions"]),
        helper.make_node("Mod", ["positions", "fill"], ["wrapped"], fmod=1),
        helper.make_node("Where", ["is_pad", "fill", "wrapped"], ["out"]),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [3, 9])
    out = helper.make_tensor_value_info("out", TensorProto.INT64, [3, 9])
    graph = helper.make_graph(nodes, "positions", [ids], [out], [pad, fill, axis])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    feed = {"ids": np.random.default_rng(3).integers(0, 4, (3, 9)).astype(np.int64)}
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    module = tensorforge.compile(model, target=target)
    assert "CumSum" in _kernel_ops(module)
    np.testing.assert_array_equal(module.run(feed)["out"], want)


def _one_node_model(op: str, inputs: list, attrs: dict | None = None, inits: list = ()):
    values = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    out = helper.make_tensor_value_info("out", TensorProto.UNDEFINED, None)
    node = helper.make_node(op, [n for n, _, _ in inputs], ["out"], name="n0", **(attrs or {}))
    graph = helper.make_graph([node], "one", values, [out], initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def test_range_of_runtime_bounds_names_the_node() -> None:
    scalar = [(n, TensorProto.INT64, []) for n in ("start", "limit", "delta")]
    with pytest.raises(OnnxImportError, match="Range node 'n0' must be a constant"):
        from_onnx(_one_node_model("Range", scalar))


def test_range_of_too_many_values_names_the_node() -> None:
    bounds = [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("start", 0.0), ("limit", 1.0), ("delta", 1e-15))]  # fmt: skip
    model = _one_node_model("Range", [], inits=bounds)
    model.graph.node[0].input.extend(["start", "limit", "delta"])
    with pytest.raises(OnnxImportError, match="Range node 'n0'.*MAX_TENSOR_BYTES"):
        from_onnx(model)


def test_scatternd_of_runtime_indices_is_computed() -> None:
    # run-time indices (torch's index_put with computed rows) are expanded, not refused
    inputs = [
        ("data", TensorProto.FLOAT, [4, 3]),
        ("indices", TensorProto.INT64, [2, 1]),
        ("updates", TensorProto.FLOAT, [2, 3]),
    ]
    model = _one_node_model("ScatterND", inputs)
    rng = np.random.default_rng(0)
    feed = {
        "data": rng.standard_normal((4, 3)).astype(np.float32),
        "indices": np.array([[-1], [1]], np.int64),
        "updates": rng.standard_normal((2, 3)).astype(np.float32),
    }
    want = feed["data"].copy()
    want[[3, 1]] = feed["updates"]  # index -1 is the last row
    np.testing.assert_array_equal(tensorforge.compile(model).run(feed)["out"], want)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_integer_mod_by_zero_gives_zero_not_a_trap(fmod, dtype) -> None:
    kind = TensorProto.INT32 if dtype == np.int32 else TensorProto.INT8
    model = _one_node_model("Mod", [("a", kind, [6]), ("b", kind, [6])], {"fmod": fmod})
    a = np.array([7, -7, 7, -7, 5, -128 if dtype == np.int8 else 9], dtype)
    b = np.array([3, 3, -3, 0, 0, 7], dtype)
    with np.errstate(all="ignore"):
        want = (np.fmod if fmod else np.mod)(a, b)
    got = tensorforge.compile(model).run({"a": a, "b": b})["out"]
    np.testing.assert_array_equal(got, want)


def _generator_model(op: str, shape: tuple[int, ...] = (16, 8)) -> object:
    """y = x + ConstantOfShape(shape, 2.5), or x + Range(1.5, 100, 0.75) (each over the 64
    elements the importer folds right away)."""
    if op == "ConstantOfShape":
        inits = [numpy_helper.from_array(np.array(shape, np.int64), "shp")]
        fill = numpy_helper.from_array(np.array([2.5], np.float32))
        gen = helper.make_node("ConstantOfShape", ["shp"], ["g"], value=fill)
    else:
        inits = [
            numpy_helper.from_array(np.float32(v), n)
            for n, v in zip("abc", (1.5, 100, 0.75), strict=True)
        ]
        gen = helper.make_node("Range", ["a", "b", "c"], ["g"])
    graph = helper.make_graph(
        [gen, helper.make_node("Add", ["x", "g"], ["y"])], "gen",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["ConstantOfShape", "Range"])
def test_generators_too_big_to_fold_fill_at_run_time(op, monkeypatch):
    fold = importlib.import_module("tensorforge.compiler.graph.passes.fold_constants")
    monkeypatch.setattr(fold, "FOLD_LIMIT_BYTES", 0)  # every output is "too big"
    model = _generator_model(op)
    x = np.array(0.25, np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    module = tensorforge.compile(model, "llvm")
    assert module.stats["constant_bytes"] < want.nbytes  # computed, not stored
    np.testing.assert_array_equal(module.run({"x": x})[module.outputs[0]], want)


def test_a_huge_constant_of_shape_is_not_built_at_compile_time():
    # 100000 x 100000 float32 is 37 GiB: folding it used to allocate it (MemoryError).
    module = tensorforge.compile(_generator_model("ConstantOfShape", (100000, 100000)), "llvm")
    assert module.stats["constant_bytes"] < 1 << 20
    assert module.arena_bytes >= 100000 * 100000 * 4
