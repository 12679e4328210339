"""Composite normalizations, reductions and rearrangements (ops/normalization.py,
ops/reduce_extra.py, ops/space.py) in small models as exporters write them: compiled to native
code (after expand_composites; some also to OpenCL, run on PoCL) and the numpy reference, each
against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, from_onnx
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.passes import optimize

N, C, H, W = 2, 8, 6, 6
RNG = np.random.default_rng(0)


def _const(name: str, value: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes, inits, x_shape=(N, 3, H, W), opset=17, out_type=TensorProto.FLOAT):  # noqa: ANN001, ANN202
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", out_type, None)],
        [_const(k, v) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _conv(name: str, out: str, cin: int, cout: int, src: str = "x", k: int = 3):  # noqa: ANN202
    inits = {
        f"{name}_w": RNG.standard_normal((cout, cin, k, k)).astype(np.float32) * 0.3,
        f"{name}_b": RNG.standard_normal(cout).astype(np.float32) * 0.1,
    }
    node = helper.make_node(
        "Conv", [src, f"{name}_w", f"{name}_b"], [out], pads=[k // 2] * 4, name=name
    )
    return node, inits


def _check(model, x=None, exact=False, target="llvm") -> np.ndarray:  # noqa: ANN001
    if target == "opencl":
        pytest.importorskip("pyopencl")
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = RNG.standard_normal(shape).astype(np.float32) if x is None else x
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    ref = run_graph(from_onnx(model), {"x": x})["y"]
    got = tensorforge.compile(model, target=target, progress=False).run({"x": x})["y"]
    for what, value in (("compiled", got), ("reference", ref)):
        assert value.dtype == want.dtype, what
        if exact:
            np.testing.assert_array_equal(value, want, err_msg=what)
        else:
            np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-5, err_msg=what)
    return want


def test_instance_norm_in_a_conv_net_matches_onnxruntime() -> None:
    conv, inits = _conv("c1", "h", 3, C)
    inits |= {"s": RNG.uniform(0.5, 1.5, C).astype(np.float32), "b": RNG.standard_normal(C)}
    inits["b"] = inits["b"].astype(np.float32)
    nodes = [
        conv,
        helper.make_node("InstanceNormalization", ["h", "s", "b"], ["n"], epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    _check(_model(nodes, inits))


@pytest.mark.parametrize("target", ["llvm", "opencl"])
def test_group_norm_as_torch_exports_it_matches_onnxruntime(target: str) -> None:
    """torch.nn.GroupNorm at opset 17 (TorchScript exporter): Reshape to [N, G, -1],
    InstanceNormalization with ones and zeros, Reshape back, then the affine Mul and Add."""
    groups = 4
    conv, inits = _conv("c1", "h", 3, C)
    inits |= {
        "to_groups": np.array([0, groups, -1], np.int64),
        "ones": np.ones(groups, np.float32),
        "zeros": np.zeros(groups, np.float32),
        "back": np.array([N, C, H, W], np.int64),
        "gamma": RNG.uniform(0.5, 1.5, (C, 1, 1)).astype(np.float32),
        "beta": RNG.standard_normal((C, 1, 1)).astype(np.float32),
    }
    nodes = [
        conv,
        helper.make_node("Reshape", ["h", "to_groups"], ["g"]),
        helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["gn"], epsilon=1e-5),
        helper.make_node("Reshape", ["gn", "back"], ["r"]),
        helper.make_node("Mul", ["r", "gamma"], ["m"]),
        helper.make_node("Add", ["m", "beta"], ["y"]),
    ]
    _check(_model(nodes, inits), target=target)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_op_matches_onnxruntime(opset: int) -> None:
    """Opset 18 takes a scale and bias per group, opset 21 per channel."""
    groups = 2
    n = groups if opset == 18 else C
    conv, inits = _conv("c1", "h", 3, C)
    inits |= {
        "s": RNG.uniform(0.5, 1.5, n).astype(np.float32),
        "b": RNG.standard_normal(n).astype(np.float32),
    }
    gn = helper.make_node(
        "GroupNormalization", ["h", "s", "b"], ["y"], num_groups=groups, epsilon=1e-4
    )
    _check(_model([conv, gn], inits, opset=opset))


def test_group_normalization_refuses_groups_that_do_not_divide_channels() -> None:
    conv, inits = _conv("c1", "h", 3, C)
    inits |= {"s": np.ones(3, np.float32), "b": np.zeros(3, np.float32)}
    gn = helper.make_node("GroupNormalization", ["h", "s", "b"], ["y"], num_groups=3, name="gn")
    with pytest.raises(OnnxImportError, match=r"num_groups must .*divide the 8 channels, not 3"):
        from_onnx(_model([conv, gn], inits, opset=21))


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax_of_a_segmentation_head_matches_onnxruntime_ties_included(last, target) -> None:
    """Class scores through a Relu: many pixels have several classes tied at 0, so the first
    (or last) index rule decides them."""
    conv, inits = _conv("head", "logits", 3, 5, k=1)
    nodes = [
        conv,
        helper.make_node("Relu", ["logits"], ["scores"]),
        helper.make_node("ArgMax", ["scores"], ["y"], axis=1, keepdims=0, select_last_index=last),
    ]
    want = _check(_model(nodes, inits, out_type=TensorProto.INT64), exact=True, target=target)
    assert want.shape == (N, H, W)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_super_resolution_net_matches_onnxruntime(mode, target) -> None:
    """ESPCN-like: convolutions to C * r^2 channels, then DepthToSpace by r."""
    r = 3
    c1, i1 = _conv("c1", "h", 1, 8)
    c2, i2 = _conv("c2", "f", 8, r * r, src="t")
    nodes = [
        c1,
        helper.make_node("Tanh", ["h"], ["t"]),
        c2,
        helper.make_node("DepthToSpace", ["f"], ["y"], blocksize=r, mode=mode),
    ]
    want = _check(_model(nodes, i1 | i2, x_shape=(1, 1, 5, 7)), target=target)
    assert want.shape == (1, 1, 15, 21)


def test_space_to_depth_after_a_conv_matches_onnxruntime() -> None:
    conv, inits = _conv("c1", "h", 3, 4)
    nodes = [conv, helper.make_node("SpaceToDepth", ["h"], ["y"], blocksize=2)]
    _check(_model(nodes, inits))


@pytest.mark.parametrize(
    "op", ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]
)
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_with_axes_as_attribute_or_input_match_onnxruntime(op: str, opset: int) -> None:
    """Opset 13 gives the axes as an attribute, 18 as an input; LogSum reads exp(x) so its sum
    is positive, and LogSumExp gets values whose exp overflows float32 unless stabilized."""
    axes = [1, -1]
    inputs, attrs, inits = ["e" if op == "ReduceLogSum" else "x"], {"keepdims": 0}, {}
    if opset >= 18:
        inputs.append("axes")
        inits["axes"] = np.array(axes, np.int64)
    else:
        attrs["axes"] = axes
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node(op, inputs, ["y"], **attrs)]
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    if op == "ReduceLogSumExp":
        x = x * 50 + 100
    want = _check(_model(nodes, inits, x_shape=x.shape, opset=opset), x)
    assert want.shape == (2, 4)


def test_lp_and_mean_variance_normalization_match_onnxruntime() -> None:
    conv, inits = _conv("c1", "h", 3, C)
    nodes = [
        conv,
        helper.make_node("LpNormalization", ["h"], ["l"], axis=1, p=2),
        helper.make_node("MeanVarianceNormalization", ["l"], ["y"]),
    ]
    _check(_model(nodes, inits))


def test_lrn_after_a_conv_matches_onnxruntime() -> None:
    """AlexNet/GoogLeNet's local response normalization (onnxruntime takes odd sizes only)."""
    conv, inits = _conv("c1", "h", 3, C)
    nodes = [
        conv,
        helper.make_node("LRN", ["h"], ["l"], size=3, alpha=1e-2, beta=0.75, bias=2.0),
        helper.make_node("LRN", ["l"], ["y"], size=5),
    ]
    _check(_model(nodes, inits))


def test_gather_elements_and_one_hot_match_onnxruntime() -> None:
    """Negative indices in GatherElements; OneHot of the ArgMax of the gathered values."""
    idx = RNG.integers(-H, H, (N, 3, 4, W)).astype(np.int64)
    inits = {"idx": idx, "depth": np.array(4, np.int64), "vals": np.array([0, 2], np.float32)}
    nodes = [
        helper.make_node("GatherElements", ["x", "idx"], ["g"], axis=2),
        helper.make_node("ArgMax", ["g"], ["a"], axis=2, keepdims=0),
        helper.make_node("OneHot", ["a", "depth", "vals"], ["y"], axis=1),
    ]
    _check(_model(nodes, inits))


def test_composites_leave_no_composite_op_behind() -> None:
    conv, inits = _conv("c1", "h", 3, C)
    nodes = [conv, helper.make_node("LpNormalization", ["h"], ["y"], axis=1, p=1)]
    graph = optimize(from_onnx(_model(nodes, inits)))
    assert {n.op for n in graph.nodes}.isdisjoint({"LpNormalization", "ReduceL1"})


def test_gather_elements_refuses_constant_indices_out_of_range() -> None:
    inits = {"idx": np.array([[0, 1], [6, 0]], np.int64)}
    node = helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=0, name="ge")
    want = r"GatherElements node 'ge': input 'idx' holds an index outside \[-6, 5\].*: 6 at "
    with pytest.raises(OnnxImportError, match=want):
        from_onnx(_model([node], inits, x_shape=(6, 2)))


_ONES8 = {"s": np.ones(8, np.float32), "b": np.ones(8, np.float32)}


@pytest.mark.parametrize(
    ("node", "inits", "shape", "message"),
    [
        (helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=3), {}, (1, 8, 4, 4),
         r"channels \(8\) must be a multiple of blocksize\^2 \(9\)"),
        (helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2), {}, (8, 4, 4),
         r"input must be 4-D \[N, C, H, W\], not shape \(8, 4, 4\)"),
        (helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=3, mode="CRD"), {},
         (1, 8, 4, 4), r"height and width \(4, 4\) must be multiples of 3"),
        (helper.make_node("LRN", ["x"], ["y"], size=0), {}, (1, 8, 4, 4),
         r"LRN size must be a positive integer, not 0"),
        (helper.make_node("OneHot", ["x", "d", "v"], ["y"]),
         {"d": np.array(0, np.int64), "v": np.array([0, 1], np.float32)}, (3,),
         r"OneHot depth must be positive, not 0"),
        (helper.make_node("ArgMax", ["x"], ["y"], axis=1), {}, (2, 0, 3),
         r"the reduced axis 1 must not be empty"),
        (helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"]),
         {"s": np.ones(4, np.float32), "b": np.ones(8, np.float32)}, (1, 8, 4, 4),
         r"InstanceNormalization scale must have shape \(8,\), not \(4,\)"),
        (helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2),
         _ONES8 | {"s": np.ones(3, np.float32)}, (1, 8, 4, 4),
         r"scale must have shape \(2,\) or \(8,\), not \(3,\)"),
        (helper.make_node("LpNormalization", ["x"], ["y"], p=3), {}, (1, 8, 4, 4),
         r"LpNormalization p must be 1 or 2, not 3"),
        (helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 0]), {},
         (1, 8, 4, 4), r"axes must be distinct, not \(0, 0\)"),
    ],
)  # fmt: skip
def test_bad_attributes_and_shapes_are_refused_naming_them(node, inits, shape, message) -> None:
    node.name = "bad"
    with pytest.raises(OnnxImportError, match=rf"{node.op_type} node 'bad': .*{message}"):
        from_onnx(_model([node], inits, x_shape=shape, opset=21))


@pytest.mark.parametrize("shape", [(1, 4, 16, 32), (2, 3, 7, 48)])
def test_instance_norm_over_long_rows_matches_onnxruntime(shape) -> None:
    """Rows of 512 and 336 (multiples of 16, at least 256): LayerNormalization sums them in 16
    vector lanes first; values offset from 0 so the mean matters."""
    c = shape[1]
    inits = {"s": RNG.uniform(0.5, 1.5, c).astype(np.float32), "b": np.zeros(c, np.float32)}
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)
    x = (RNG.standard_normal(shape) * 3 + 5).astype(np.float32)
    _check(_model([node], inits, x_shape=shape), x)


@pytest.mark.parametrize("cols", [64, 80, 96, 100, 768])
def test_layer_norm_rows_summed_in_vector_lanes_match_onnxruntime(cols: int) -> None:
    """The kernel the instance and group norms expand into: rows that are multiples of 16 of
    more than 64 values (80, 96, 768) are summed in 16 vector lanes first, others (64, 100) in
    one running sum."""
    shape = (3, 5, cols)
    inits = {
        "s": RNG.uniform(0.5, 1.5, cols).astype(np.float32),
        "b": RNG.standard_normal(cols).astype(np.float32),
    }
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)
    x = (RNG.standard_normal(shape) * 2 - 4).astype(np.float32)
    _check(_model([node], inits, x_shape=shape), x)


def test_lrn_window_wider_than_the_channels_matches_onnxruntime() -> None:
    """size 100001 over 8 channels: every channel's window holds all 8 (the rest is padding),
    and the expansion stays small."""
    node = helper.make_node("LRN", ["x"], ["y"], size=100001, alpha=50.0, beta=0.5)
    model = _model([node], {}, x_shape=(1, C, 3, 3))
    _check(model)
    assert len(optimize(from_onnx(model)).nodes) < 40


def test_one_hot_of_no_indices_with_a_huge_depth_is_empty_at_once() -> None:
    """A zero-size output: no ramp of 10**11 values is built, by the expansion or the kernel."""
    inits = {"d": np.array(10**11, np.int64), "v": np.array([0, 1], np.float32)}
    node = helper.make_node("OneHot", ["x", "d", "v"], ["y"], axis=0)
    graph = from_onnx(_model([node], inits, x_shape=(0, 3)))
    assert graph.types["y"].shape == (10**11, 0, 3)
    assert run_graph(graph, {"x": np.zeros((0, 3), np.float32)})["y"].size == 0
    assert run_graph(optimize(graph), {"x": np.zeros((0, 3), np.float32)})["y"].size == 0
