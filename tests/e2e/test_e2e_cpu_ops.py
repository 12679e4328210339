"""Op lowerings of the CPU back-end, one small graph each, against the numpy reference executor."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tensorforge
from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.ir import Graph
from tensorforge.compiler.tir.stmt import LoweringError

RNG = np.random.default_rng(7)


def _w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _unary_chain(b: GraphBuilder) -> str:
    x = b.add_input("x", (2, 3, 17), "float32")
    (s,) = b.add_node("Sigmoid", [x])
    (t,) = b.add_node("Tanh", [x])
    (lr,) = b.add_node("LeakyRelu", [x], {"alpha": 0.2})
    (hs,) = b.add_node("HardSwish", [x])
    (g1,) = b.add_node("Gelu", [x])
    (g2,) = b.add_node("Gelu", [x], {"approximate": "tanh"})
    (a,) = b.add_node("Abs", [x])
    (lg,) = b.add_node("Log", [b.add_node("Add", [a, b.add_constant("one", np.float32(1))])[0]])
    (sq,) = b.add_node("Sqrt", [a])
    (e,) = b.add_node("Exp", [b.add_node("Neg", [x])[0]])
    (p,) = b.add_node("Pow", [a, b.add_constant("e3", np.float32(1.5))])
    (mx,) = b.add_node("Max", [s, t, lr])
    (mn,) = b.add_node("Min", [hs, g1, g2])
    lo, hi = b.add_constant("lo", np.float32(-0.5)), b.add_constant("hi", np.float32(0.7))
    (cl,) = b.add_node("Clip", [x, lo, hi])
    (d,) = b.add_node("Div", [b.add_node("Sub", [mx, mn])[0], b.add_node("Add", [e, lg])[0]])
    (out,) = b.add_node("Mul", [b.add_node("Add", [d, sq])[0], b.add_node("Add", [p, cl])[0]])
    return out


def _where_cast(b: GraphBuilder) -> str:
    x = b.add_input("x", (4, 8), "float32")
    y = b.add_input("y", (8,), "float32")
    (c,) = b.add_node(
        "Cast", [b.add_node("Mul", [x, b.add_constant("k", np.float32(3))])[0]], {"to": "int32"}
    )
    (f,) = b.add_node("Cast", [c], {"to": "float32"})
    (gt,) = b.add_node("Max", [x, y])
    (cond,) = b.add_node("Cast", [b.add_node("Relu", [x])[0]], {"to": "bool"})
    return b.add_node("Where", [cond, f, gt])[0]


def _data_movement(b: GraphBuilder) -> str:
    x = b.add_input("x", (2, 6, 5), "float32")
    c = b.add_constant("c", _w(2, 3, 5))
    (cat,) = b.add_node("Concat", [x, c], {"axis": 1})  # 2, 9, 5
    starts, ends = b.add_constant("st", np.array([1, 4])), b.add_constant("en", np.array([9, 0]))
    axes, steps = b.add_constant("ax", np.array([1, 2])), b.add_constant("sp", np.array([2, -2]))
    (sl,) = b.add_node("Slice", [cat, starts, ends, axes, steps])  # 2, 4, 2
    (tr,) = b.add_node("Transpose", [sl], {"perm": (2, 0, 1)})  # 2, 2, 4
    pads = b.add_constant("pads", np.array([0, 1, 0, 1, 0, 2]))
    (pd,) = b.add_node("Pad", [tr, pads, b.add_constant("v", np.float32(-3))])  # 3, 3, 6
    idx = b.add_constant("idx", np.array([[2, -1], [0, 1]], np.int64))
    (ga,) = b.add_node("Gather", [pd, idx], {"axis": 2})  # 3, 3, 2, 2
    (un,) = b.add_node("Unsqueeze", [ga, b.add_constant("u", np.array([0]))])
    (sq,) = b.add_node("Squeeze", [un, b.add_constant("s", np.array([0]))])
    (ex,) = b.add_node("Expand", [sq, b.add_constant("shape", np.array([2, 3, 3, 2, 2]))])
    (flat,) = b.add_node("Flatten", [ex], {"axis": 2})
    (r,) = b.add_node("Reshape", [flat, b.add_constant("rs", np.array([3, -1]))])
    return b.add_node("Relu", [r])[0]


def _concats(b: GraphBuilder) -> str:
    """Every element of three-part concatenations, along the last (vector) axis and the first."""
    x = b.add_input("x", (2, 3, 5), "float32")
    (last,) = b.add_node("Concat", [x, b.add_constant("c", _w(2, 3, 1)), x], {"axis": -1})
    (first,) = b.add_node("Concat", [last, b.add_constant("d", _w(1, 3, 11)), last], {"axis": 0})
    return b.add_node("Relu", [first])[0]  # 5, 3, 11


def _split(b: GraphBuilder) -> str:
    x = b.add_input("x", (3, 10), "float32")
    a, c = b.add_node(
        "Split", [x, b.add_constant("sz", np.array([4, 6]))], {"axis": 1}, num_outputs=2
    )
    (s,) = b.add_node("ReduceSum", [a, b.add_constant("a1", np.array([1]))])
    return b.add_node("Mul", [c, s])[0]


def _reductions(b: GraphBuilder) -> str:
    x = b.add_input("x", (3, 4, 5), "float32")
    (e,) = b.add_node("Exp", [x])  # fused into the reduction
    (m,) = b.add_node("ReduceMean", [e, b.add_constant("a", np.array([1]))], {"keepdims": 0})
    (mx,) = b.add_node("ReduceMax", [x, b.add_constant("b", np.array([-2]))])
    (mn,) = b.add_node("ReduceMin", [x, b.add_constant("c", np.array([1]))], {"keepdims": 0})
    (tot,) = b.add_node("ReduceSum", [m])
    (y,) = b.add_node("Add", [b.add_node("Sub", [m, mn])[0], tot])
    return b.add_node(
        "Mul", [y, b.add_node("Reshape", [mx, b.add_constant("r", np.array([3, 5]))])[0]]
    )[0]


def _convolutions(b: GraphBuilder) -> str:
    x = b.add_input("x", (1, 4, 11, 9), "float32")
    (dw,) = b.add_node(
        "Conv",
        [x, b.add_constant("wd", _w(4, 1, 3, 3)), b.add_constant("bd", _w(4))],
        {"group": 4, "pads": (1, 0, 2, 1), "strides": (2, 1)},
    )  # depthwise, asymmetric padding and strides: 1, 4, 6, 8
    (gc,) = b.add_node(
        "Conv",
        [dw, b.add_constant("wg", _w(6, 2, 3, 2))],
        {"group": 2, "dilations": (2, 1), "pads": (2, 1, 2, 1)},
    )  # grouped, dilated: 1, 6, 6, 9
    (rl,) = b.add_node("Relu", [gc])
    (cv,) = b.add_node(
        "Conv",
        [rl, b.add_constant("w", _w(8, 6, 3, 3)), b.add_constant("b", _w(8))],
        {"pads": (1, 1, 1, 1), "strides": (2, 2)},
    )  # the x86 operator: 1, 8, 3, 5
    return b.add_node("Sigmoid", [cv])[0]


def _conv_input_weights(b: GraphBuilder) -> str:
    x = b.add_input("x", (2, 3, 9, 8), "float32")
    w = b.add_input("w", (5, 3, 3, 3), "float32")  # weights known only at run time
    (cv,) = b.add_node("Conv", [x, w], {"pads": (1, 1, 1, 1), "dilations": (1, 2)})
    return b.add_node("Relu", [cv])[0]


def _strided_windows(b: GraphBuilder) -> str:
    """Padded windows with a column stride above 1 read the padded input dealt into phases."""
    x = b.add_input("x", (1, 4, 12, 17), "float32")
    (d2,) = b.add_node(
        "Conv",
        [x, b.add_constant("w2", _w(4, 1, 3, 3))],
        {"group": 4, "pads": (1, 1, 1, 1), "strides": (2, 2)},
    )  # MobileNetV2's downsampling depthwise conv: 1, 4, 6, 9
    (d3,) = b.add_node(
        "Conv",
        [x, b.add_constant("w3", _w(8, 1, 3, 3)), b.add_constant("b3", _w(8))],
        {"group": 4, "pads": (0, 2, 1, 1), "strides": (2, 3), "dilations": (1, 2)},
    )  # two filters per group, phases from rx * dilation: 1, 8, 6, 6
    (ap,) = b.add_node(
        "AveragePool",
        [d2],
        {"kernel_shape": (2, 3), "pads": (1, 1, 0, 2), "strides": (1, 3)},
    )  # exclusive padding: the direct reduction, 1, 4, 6, 4
    flat = [b.add_node("Flatten", [v])[0] for v in (d3, ap)]
    return b.add_node("Concat", flat, {"axis": 1})[0]


def _pools(b: GraphBuilder) -> str:
    x = b.add_input("x", (1, 3, 13, 12), "float32")
    (ap,) = b.add_node(
        "AveragePool", [x], {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1), "strides": (2, 2)}
    )
    (mp,) = b.add_node(
        "MaxPool",
        [x],
        {"kernel_shape": (2, 3), "pads": (0, 1, 1, 0), "strides": (2, 2), "ceil_mode": 1},
    )
    (m3,) = b.add_node(
        "MaxPool", [x], {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1), "strides": (2, 2)}
    )
    (gm,) = b.add_node("GlobalMaxPool", [b.add_node("Add", [ap, mp])[0]])
    (ga,) = b.add_node("GlobalAveragePool", [m3])
    return b.add_node("Add", [ga, gm])[0]


def _gemms(b: GraphBuilder) -> str:
    x = b.add_input("x", (6, 5), "float32")
    (g1,) = b.add_node(
        "Gemm",
        [x, b.add_constant("w1", _w(7, 6)), b.add_constant("c1", _w(7))],
        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
    )  # 5, 7
    (g2,) = b.add_node("Gemm", [g1, b.add_constant("w2", _w(7, 3)), b.add_constant("c2", _w(5, 1))])
    return b.add_node("Tanh", [g2])[0]


def _matmuls(b: GraphBuilder) -> str:
    x = b.add_input("x", (2, 3, 4, 5), "float32")
    y = b.add_input("y", (3, 5, 6), "float32")
    (bm,) = b.add_node("MatMul", [x, y])  # batched, broadcast: 2, 3, 4, 6
    (mm,) = b.add_node("MatMul", [bm, b.add_constant("w", _w(6, 40))])  # 2, 3, 4, 40
    (sm,) = b.add_node("Softmax", [mm], {"axis": -1})
    return b.add_node(
        "LayerNormalization",
        [sm, b.add_constant("g", _w(40)), b.add_constant("be", _w(40))],
        {"axis": -1},
    )[0]


def _softmaxes(b: GraphBuilder) -> str:
    x = b.add_input("x", (3, 7, 5), "float32")
    (s1,) = b.add_node("Softmax", [x], {"axis": 1})
    (s2,) = b.add_node("LogSoftmax", [x], {"axis": -1})
    (s3,) = b.add_node("LogSoftmax", [x], {"axis": 0})
    return b.add_node("Add", [b.add_node("Add", [s1, s2])[0], s3])[0]


def _softmax_lanes(b: GraphBuilder) -> str:
    """(Log)softmax whose rows or columns fill vector lanes: a last axis of 40 (lanes and a
    ragged tail), an axis before the last with 37 columns after it (two vectors and a tail)
    and with 3 (fewer columns than lanes); inputs scaled up so that the max subtraction
    matters."""
    x = b.add_input("x", (2, 9, 37), "float32")
    (big,) = b.add_node("Mul", [x, b.add_constant("k", np.float32(40))])
    (s1,) = b.add_node("Softmax", [big], {"axis": 1})
    (s2,) = b.add_node("LogSoftmax", [big], {"axis": 1})
    (s3,) = b.add_node("LogSoftmax", [big], {"axis": -1})
    (s4,) = b.add_node("Softmax", [big], {"axis": 0})
    (t,) = b.add_node("Reshape", [big, b.add_constant("sh", np.array([2, 111, 3]))])
    (s5,) = b.add_node("LogSoftmax", [t], {"axis": 1})
    (s5,) = b.add_node("Reshape", [s5, b.add_constant("back", np.array([2, 9, 37]))])
    (a,) = b.add_node("Add", [b.add_node("Add", [s1, s2])[0], b.add_node("Add", [s3, s4])[0]])
    return b.add_node("Add", [a, s5])[0]


def _unread_indices(b: GraphBuilder) -> str:
    """Gather along an axis of size 1 reads no index (each must be 0 or -1): its kernel has an
    indices parameter that no compute reads, which once stopped the lowering with a KeyError."""
    x = b.add_input("x", (4, 3), "float32")
    (r,) = b.add_node("Reshape", [x, b.add_constant("shape", np.array([4, 1, 3]))])
    (g,) = b.add_node("Gather", [r, b.add_constant("idx", np.array([0, -1]))], {"axis": 1})
    return b.add_node("MatMul", [g, b.add_constant("w", _w(3, 6))])[0]


CASES: dict[str, Callable[[GraphBuilder], str]] = {
    "unread_indices": _unread_indices,
    "softmaxes": _softmaxes,
    "softmax_lanes": _softmax_lanes,
    "unary_chain": _unary_chain,
    "where_cast": _where_cast,
    "data_movement": _data_movement,
    "concats": _concats,
    "split": _split,
    "reductions": _reductions,
    "convolutions": _convolutions,
    "conv_input_weights": _conv_input_weights,
    "strided_windows": _strided_windows,
    "pools": _pools,
    "gemms": _gemms,
    "matmuls": _matmuls,
}


def _graph(case: Callable[[GraphBuilder], str]) -> Graph:
    b = GraphBuilder("case")
    return b.build([case(b)])


@pytest.mark.parametrize("name", list(CASES))
def test_lowering_matches_the_numpy_reference(name: str) -> None:
    graph = _graph(CASES[name])
    rng = np.random.default_rng(1)
    inputs = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}
    want = run_graph(graph, inputs)
    got = tensorforge.compile(graph).run(inputs)
    for key in want:
        assert got[key].dtype == want[key].dtype
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5)


def test_elementwise_producers_fuse_into_a_reduction() -> None:
    module = tensorforge.compile(_graph(_reductions))
    assert any(c.label.startswith("Exp+ReduceMean") for c in module.calls)


def test_op_without_a_lowering_names_op_and_node(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorforge.compiler.graph import registry

    # an op the reference executor runs but no back-end lowers (registered for this test only)
    monkeypatch.setattr(registry, "OPS", dict(registry.OPS))
    registry.register("NoLowering", registry.Pattern.ELEMWISE, lambda a, t, c: [t[0]],
                      lambda a, x: x.copy())  # fmt: skip
    b = GraphBuilder("g")
    x = b.add_input("x", (1, 2, 5, 5), "float32")
    (y,) = b.add_node("NoLowering", [b.add_node("Relu", [x])[0]], name="the_op")
    with pytest.raises(LoweringError, match=r"op NoLowering \(node 'the_op'\) has no CPU"):
        tensorforge.compile(b.build([y]))


def test_unbuilt_variant_names_the_node() -> None:
    b = GraphBuilder("g")  # a 4-D convolution (1-D to 3-D ones lower)
    x = b.add_input("x", (1, 2, 3, 3, 3, 3), "float32")
    w = b.add_constant("w", np.ones((3, 2, 2, 2, 2, 2), np.float32))
    (y,) = b.add_node("Conv", [x, w], {"kernel_shape": [2, 2, 2, 2]}, name="conv4d")
    with pytest.raises(
        LoweringError, match=r"Conv must be 1-D, 2-D or 3-D .*not 4-D \(node 'conv4d'"
    ):
        tensorforge.compile(b.build([y]))


def test_scalar_input_and_output_and_two_outputs() -> None:
    b = GraphBuilder("scalars")
    x = b.add_input("x", (3, 4), "float32")
    s = b.add_input("s", (), "float32")
    (y,) = b.add_node("Mul", [x, s])
    axes = b.add_constant("a", np.array([0, 1]))
    (z,) = b.add_node("ReduceSum", [y, axes], {"keepdims": 0})
    graph = b.build([y, z])
    inputs = {"x": _w(3, 4), "s": np.array(2.5, np.float32)}
    got, want = tensorforge.compile(graph).run(inputs), run_graph(graph, inputs)
    assert [v.shape for v in got.values()] == [(3, 4), ()]
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5)
