"""Einsum expanded into MatMul/Transpose/ReduceSum (passes/expand_einsum.py), compiled to native
code (and OpenCL for one case), against numpy's einsum in float64 and onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph.ir import TensorType
from tensorforge.compiler.graph.passes import optimize
from tensorforge.compiler.graph.registry import get_op

ELEM = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32}

# (equation, operand shapes): attention (MaxViT's two), plain and batched matmul, transposes,
# outer and inner products, sums, diagonals, ellipsis with broadcasting, three operands
CASES = [
    ("BGHID,BGHJD->BGHIJ", [(1, 2, 3, 5, 4), (1, 2, 3, 6, 4)]),
    ("BGHIJ,BGHJD->BGHID", [(1, 2, 3, 5, 6), (1, 2, 3, 6, 4)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij", [(3, 4)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i", [(5,), (5,)]),
    ("ijk->j", [(2, 3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("bii->bi", [(2, 3, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 5)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("b...d,bd->b...", [(2, 3, 5, 4), (2, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ab,bc,ca->", [(2, 3), (3, 4), (4, 2)]),
    ("nchw,kc->nkhw", [(1, 3, 4, 5), (6, 3)]),
    ("ijk,ikl->jl", [(3, 2, 4), (3, 4, 5)]),
]


def _model(equation: str, shapes: list[tuple[int, ...]], dtype: str):
    names = [f"x{i}" for i in range(len(shapes))]
    ins = [
        helper.make_tensor_value_info(n, ELEM[dtype], s) for n, s in zip(names, shapes, strict=True)
    ]
    out = helper.make_tensor_value_info("y", ELEM[dtype], None)
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    graph = helper.make_graph([node], "einsum", ins, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _inputs(shapes, dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "int32":
        return {f"x{i}": rng.integers(-4, 5, s).astype(np.int32) for i, s in enumerate(shapes)}
    return {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}


@pytest.mark.parametrize(("equation", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_einsum_compiled_matches_numpy(equation, shapes) -> None:
    feeds = _inputs(shapes, "float32")
    want = np.einsum(equation, *(feeds[k].astype(np.float64) for k in sorted(feeds)))
    module = tensorforge.compile(_model(equation, shapes, "float32"), progress=False)
    got = module.run(feeds)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_einsum_becomes_one_batched_matmul_for_attention() -> None:
    equation, shapes = CASES[0]
    graph = optimize(from_onnx(_model(equation, shapes, "float32")))
    ops = [n.op for n in graph.nodes]
    assert "Einsum" not in ops and ops.count("MatMul") == 1


@pytest.mark.parametrize("equation", ["bij,bjk->bik", "ii->i", "ij,jk,kl->il"])
def test_einsum_on_integers_matches_onnxruntime(equation) -> None:
    shapes = dict((e, s) for e, s in CASES)[equation]
    model = _model(equation, shapes, "int32")
    feeds = _inputs(shapes, "int32")
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = tensorforge.compile(model, progress=False).run(feeds)["y"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_einsum_attention_on_opencl_matches_numpy() -> None:
    pytest.importorskip("pyopencl")
    equation, shapes = CASES[0]
    feeds = _inputs(shapes, "float32")
    want = np.einsum(equation, *(feeds[k].astype(np.float64) for k in sorted(feeds)))
    try:
        module = tensorforge.compile(_model(equation, shapes, "float32"), target="opencl")
    except RuntimeError as exc:  # no OpenCL platform on this machine
        pytest.skip(str(exc))
    np.testing.assert_allclose(module.run(feeds)["y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("equation", "shapes", "message"),
    [
        ("ij,jk->ik", [(3, 4), (5, 6)], "label 'j' has sizes 4 and 5"),
        ("ij->ik", [(3, 4)], "output label 'k'"),
        ("ijk->ij", [(3, 4)], "names 3 axes, but its operand has rank 2"),
        ("ij,jk", [(3, 4)], "2 input term"),
        ("i1->i", [(3, 4)], "labels must be letters"),
        ("ij->ii", [(3, 3)], "must not repeat"),
    ],
)
def test_einsum_bad_equations_are_named(equation, shapes, message) -> None:
    types = [TensorType(s, "float32") for s in shapes]
    with pytest.raises(ValueError, match=message):
        get_op("Einsum").infer({"equation": equation}, types, [None] * len(types))


def test_einsum_bad_model_is_a_clear_error_from_compile() -> None:
    with pytest.raises(Exception, match="label 'j' has sizes 4 and 5"):
        tensorforge.compile(_model("ij,jk->ik", [(3, 4), (5, 6)], "float32"), progress=False)
