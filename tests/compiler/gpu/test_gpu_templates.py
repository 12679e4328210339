"""The GPU operator templates beyond dense (`compiler.topi.gpu`): row reductions with one thread
block per row, batched MatMul, and convolutions (direct, implicit GEMM, depthwise; grouped, 1-D
and 3-D ones too). Run on OpenCL (PoCL on this CPU) against onnxruntime; their CUDA source
compiled by NVRTC (skipped without the wheel)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from compiler_ops import sum_atol
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import tensorforge
from tensorforge.compiler import te
from tensorforge.compiler.codegen.gpu import GPULimitError, gpu_payload, split_kernels
from tensorforge.compiler.target import Target
from tensorforge.compiler.tir import lower
from tensorforge.compiler.tir.stmt import LoweringError
from tensorforge.compiler.topi.gpu import reduce as gpu_reduce
from tensorforge.compiler.topi.gpu.conv2d import template_for

RNG = np.random.default_rng(0)


def _model(nodes, inputs, output, out_shape, inits=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)],
        list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, feeds, target="opencl"):
    module = tensorforge.compile(model, target=target)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    (got,) = module.run(feeds).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=sum_atol(want))
    return module


def _sources(module) -> str:
    return "".join(json.loads(k.payload)["source"] for k in module.kernels)


def _row_models(n: int):
    """Softmax, LogSoftmax, LayerNorm (with Relu before: a fused producer) over rows of n."""
    shape = [3, 5, n]
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [n], RNG.standard_normal(n).tolist())
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [n], RNG.standard_normal(n).tolist())
    return {
        "softmax": _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                          [("x", shape)], "y", shape),
        "log_softmax": _model([helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)],
                              [("x", shape)], "y", shape),
        "layer_norm": _model([helper.make_node("Relu", ["x"], ["r"]),
                              helper.make_node("LayerNormalization", ["r", "scale", "bias"], ["y"],
                                               axis=-1, epsilon=1e-5)],
                             [("x", shape)], "y", shape, [scale, bias]),
    }  # fmt: skip


@pytest.mark.parametrize("n", [65, 200, 256])  # 65, 200: rows the threads do not divide
@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "layer_norm"])
def test_row_templates_on_opencl_match_onnxruntime(kind: str, n: int) -> None:
    model = _row_models(n)[kind]
    module = _check(model, {"x": RNG.standard_normal((3, 5, n)).astype(np.float32)})
    source = _sources(module)
    assert "__local" in source and "barrier(CLK_LOCAL_MEM_FENCE)" in source
    assert "get_group_id(0)" in source


@pytest.mark.parametrize(("op", "axes", "keepdims"), [
    ("ReduceSum", [2], 1), ("ReduceMean", [1, 2], 0), ("ReduceMax", [2], 0),
    ("ReduceMin", [1, 2], 1),
])  # fmt: skip
def test_long_reductions_with_producer_and_tail_on_opencl(op, axes, keepdims) -> None:
    """Exp before (a fused producer, read in the row's loads) and Sigmoid after."""
    shape = [4, 9, 70]
    out_shape = [d if a not in axes else 1 for a, d in enumerate(shape)]
    if not keepdims:
        out_shape = [d for a, d in enumerate(shape) if a not in axes]
    axes_t = helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node(op, ["e", "axes"] if op == "ReduceSum" else ["e"], ["r"],
                         keepdims=keepdims, **({} if op == "ReduceSum" else {"axes": axes})),
        helper.make_node("Sigmoid", ["r"], ["y"]),
    ]  # fmt: skip
    inits = [axes_t] if op == "ReduceSum" else []
    model = _model(nodes, [("x", shape)], "y", out_shape, inits)
    x = (RNG.standard_normal(shape) * 0.1).astype(np.float32)
    module = _check(model, {"x": x})
    first = module.kernels[0]
    assert (
        first.name.endswith(f"exp_{op.lower()}")
        and "__local" in json.loads(first.payload)["source"]
    )


def test_short_rows_keep_the_generic_schedule() -> None:
    model = _row_models(32)["softmax"]
    module = _check(model, {"x": RNG.standard_normal((3, 5, 32)).astype(np.float32)})
    assert "__local" not in _sources(module)


def _softmax_program(threads: int, warp: bool, rows: int = 3, n: int = 300):
    x = te.placeholder((rows, n), name="x")
    config = gpu_reduce.RowReduceConfig(threads)
    out, stages = gpu_reduce.softmax_rows(x, config, warp)
    return lower(gpu_reduce.schedule_rows(out, stages, config), [x, out], name="sm")


def test_cuda_warp_stage_compiles_with_nvrtc() -> None:
    pytest.importorskip("nvidia.cuda_nvrtc")
    payload = gpu_payload(split_kernels(_softmax_program(128, True)), Target.parse("cuda"))
    assert "__shfl_xor_sync(0xffffffffu" in payload["source"]
    assert ".visible .entry sm_k0(" in payload["ptx"]


def test_every_cuda_row_template_compiles_with_nvrtc() -> None:
    pytest.importorskip("nvidia.cuda_nvrtc")
    for kind, model in _row_models(100).items():
        module = tensorforge.compile(model, target="cuda -arch=sm_80")
        for image in module.kernels:
            payload = json.loads(image.payload)
            assert ".target sm_80" in payload["ptx"], kind
        assert "__shfl_xor_sync" in _sources(module)


def test_opencl_refuses_the_warp_intrinsic_by_name() -> None:
    with pytest.raises(LoweringError, match="tf_warp_max"):
        gpu_payload(split_kernels(_softmax_program(64, True)), Target.parse("opencl"))


def test_rows_over_the_thread_limit_are_rejected() -> None:
    with pytest.raises(GPULimitError, match="threads"):
        gpu_payload(split_kernels(_softmax_program(512, False)), Target.parse("opencl"))


def test_default_threads_follow_the_row_and_the_limit() -> None:
    assert gpu_reduce.default_config(100).threads == 32
    assert gpu_reduce.default_config(4096).threads == 256
    assert gpu_reduce.default_config(4096, max_threads=200).threads == 128
    space = gpu_reduce.config_space(1000, 256)
    assert max(space.knobs[0].values) == 256


def _matmul_model(sa, sb, so, transpose_b: bool = False):
    """MatMul (b through a Transpose of its last two axes: a fused producer) then * 0.5."""
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    nodes = [helper.make_node("MatMul", ["a", "bt" if transpose_b else "b"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]  # fmt: skip
    if transpose_b:
        perm = [*range(len(sb) - 2), len(sb) - 1, len(sb) - 2]
        nodes.insert(0, helper.make_node("Transpose", ["b"], ["bt"], perm=perm))
    return _model(nodes, [("a", sa), ("b", sb)], "y", so, [half])


@pytest.mark.parametrize(("sa", "sb", "so", "transpose_b"), [
    ([3, 17, 9], [3, 9, 21], [3, 17, 21], False),  # 17 x 21: tiles the threads do not divide
    ([2, 3, 33, 16], [2, 3, 40, 16], [2, 3, 33, 40], True),  # attention's q @ k^T
    ([2, 3, 17, 9], [3, 9, 21], [2, 3, 17, 21], False),  # b broadcast over the first batch dim
    ([17, 9], [2, 9, 21], [2, 17, 21], False),  # a broadcast
])  # fmt: skip
def test_batch_matmul_uses_the_dense_tiles_on_opencl(sa, sb, so, transpose_b) -> None:
    model = _matmul_model(sa, sb, so, transpose_b)  # sb: b as stored (before a transpose)
    feeds = {"a": RNG.standard_normal(sa).astype(np.float32),
             "b": RNG.standard_normal(sb).astype(np.float32)}  # fmt: skip
    module = _check(model, feeds)
    matmul = module.kernels[-1]  # the scaling fused in
    assert matmul.name.endswith("matmul_mul")
    source = json.loads(matmul.payload)["source"]
    assert "get_group_id(2)" in source and "__local" in source


def test_batch_matmul_compiles_with_nvrtc() -> None:
    pytest.importorskip("nvidia.cuda_nvrtc")
    model = _matmul_model([2, 3, 33, 16], [2, 3, 40, 16], [2, 3, 33, 40], True)
    module = tensorforge.compile(model, target="cuda -arch=sm_80")
    payload = json.loads(module.kernels[-1].payload)
    assert "blockIdx.z" in payload["source"] and ".target sm_80" in payload["ptx"]


def _conv_model(xs, ws, group=1, pads=None, strides=None, dil=None, fused=True):
    """Conv (+ bias and Relu when `fused`) with constant weights; 1-D, 2-D or 3-D by the rank
    of `xs` (padding 1 on every side, stride and dilation 1 unless given)."""
    rank = len(xs) - 2
    pads, strides, dil = pads or (1,) * 2 * rank, strides or (1,) * rank, dil or (1,) * rank
    weights = RNG.standard_normal(ws).astype(np.float32)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, ws, weights.ravel().tolist())]
    inputs = ["x", "w"]
    if fused:
        bias = RNG.standard_normal(ws[0]).astype(np.float32)
        inits.append(helper.make_tensor("b", TensorProto.FLOAT, [ws[0]], bias.tolist()))
        inputs.append("b")
    attrs = {"group": group, "pads": list(pads), "strides": list(strides), "dilations": list(dil)}
    conv = helper.make_node("Conv", inputs, ["c" if fused else "y"], **attrs)
    nodes = [conv, helper.make_node("Relu", ["c"], ["y"])] if fused else [conv]
    return _model(nodes, [("x", xs)], "y", None, inits)


CONVS = {  # edge tiles: outputs of 11 x 13, 9 x 9, 8 x 8 against blocks of 8-16 threads
    "3x3_pad": ([2, 5, 11, 13], [7, 5, 3, 3], {}, "gpu.conv2d"),
    "3x3_stride2_asym": ([1, 3, 17, 17], [8, 3, 3, 3], {"strides": (2, 2), "pads": (0, 1, 1, 0)},
                         "gpu.conv2d"),
    "dilated": ([1, 2, 12, 12], [3, 2, 3, 3], {"dil": (2, 2), "pads": (2, 2, 2, 2)},
                "gpu.conv2d"),
    "1x1": ([1, 4, 9, 9], [6, 4, 1, 1], {"pads": (0, 0, 0, 0), "fused": False},
            "gpu.conv2d_gemm"),
    "3x3_small_output": ([2, 5, 7, 6], [9, 5, 3, 3], {}, "gpu.conv2d_gemm"),
    "depthwise": ([2, 6, 10, 11], [6, 1, 3, 3], {"group": 6}, "gpu.depthwise_conv2d"),
    "depthwise_stride2": ([1, 8, 9, 9], [8, 1, 3, 3], {"group": 8, "strides": (2, 2)},
                          "gpu.depthwise_conv2d"),
    "depthwise_plain": ([1, 4, 7, 7], [4, 1, 5, 5], {"group": 4, "pads": (2, 2, 2, 2),
                                                       "fused": False}, "gpu.depthwise_conv2d"),
}  # fmt: skip


@pytest.mark.parametrize("name", CONVS)
def test_conv_templates_on_opencl_match_onnxruntime(name: str) -> None:
    xs, ws, kw, template = CONVS[name]
    model = _conv_model(xs, ws, **kw)
    out_hw = tuple(d.dim_value for d in _inferred_output(model)[2:])
    assert template_for(ws, kw.get("group", 1), out_hw) == template
    module = _check(model, {"x": RNG.standard_normal(xs).astype(np.float32)})
    assert len(module.kernels) == 1  # bias and activation fused
    source = _sources(module)
    assert "__local" in source and "barrier(CLK_LOCAL_MEM_FENCE)" in source
    assert "get_group_id(2)" in source  # images (and channels) on the grid's z axis


def _inferred_output(model):
    from onnx import shape_inference

    inferred = shape_inference.infer_shapes(model)
    return inferred.graph.output[0].type.tensor_type.shape.dim


GROUPED_1D_3D = {  # (input, weights, attributes, template, its shared-memory stages)
    "grouped_g2": ([2, 8, 11, 13], [12, 4, 3, 3], {"group": 2}, "gpu.conv2d"),
    "grouped_g4_stride2_asym": ([1, 16, 17, 17], [8, 4, 3, 3], {"group": 4, "strides": (2, 2),
                                "pads": (0, 1, 1, 0)}, "gpu.conv2d"),
    "grouped_g8_dilated": ([1, 16, 12, 12], [16, 2, 3, 3], {"group": 8, "dil": (2, 2),
                           "pads": (2, 2, 2, 2), "fused": False}, "gpu.conv2d"),
    "grouped_multiplier": ([1, 4, 10, 10], [8, 1, 3, 3], {"group": 4}, "gpu.conv2d"),
    "grouped_1x1": ([1, 8, 9, 9], [12, 2, 1, 1], {"group": 4, "pads": (0, 0, 0, 0)},
                    "gpu.conv2d_gemm"),
    "grouped_small_output": ([2, 6, 7, 6], [9, 2, 3, 3], {"group": 3}, "gpu.conv2d_gemm"),
    "1d": ([2, 5, 70], [7, 5, 3], {}, "gpu.conv2d"),
    "1d_grouped_strided": ([1, 8, 150], [6, 4, 5], {"group": 2, "strides": (2,), "dil": (2,),
                           "pads": (2, 3)}, "gpu.conv2d"),
    "1d_short": ([2, 4, 20], [6, 4, 3], {"pads": (0, 2), "fused": False}, "gpu.conv2d_gemm"),
    "1d_depthwise": ([1, 6, 80], [6, 1, 3], {"group": 6}, "gpu.depthwise_conv2d"),
    "3d": ([1, 3, 6, 9, 10], [5, 3, 3, 3, 3], {}, "gpu.conv2d"),
    "3d_grouped_batch2": ([2, 4, 3, 9, 10], [6, 2, 3, 3, 3], {"group": 2}, "gpu.conv2d"),
    "3d_dilated_odd": ([1, 2, 7, 11, 11], [4, 2, 2, 3, 3], {"dil": (2, 1, 2),
                       "pads": (0, 1, 2, 1, 0, 2)}, "gpu.conv2d"),
    "3d_grouped_strided": ([2, 4, 5, 9, 10], [6, 2, 3, 3, 3], {"group": 2, "strides": (1, 2, 1),
                           "pads": (1, 0, 1, 1, 2, 0)}, "gpu.conv2d_gemm"),
    "3d_stem_7x7x7": ([1, 3, 6, 20, 20], [4, 3, 7, 7, 7], {"strides": (2, 2, 2), "pads": (3,) * 6},
                      "gpu.conv2d"),  # the default tile shrinks to fit shared memory
    "3d_1x1x1": ([1, 4, 3, 5, 5], [6, 4, 1, 1, 1], {"pads": (0,) * 6, "fused": False},
                 "gpu.conv2d_gemm"),
}  # fmt: skip
SHARED = {  # each template's shared-memory tiles
    "gpu.conv2d": ["pad", "weights"],
    "gpu.conv2d_gemm": ["lhs", "col"],
    "gpu.depthwise_conv2d": ["pad"],
}


def _as_2d(shape):
    """A 1-D convolution's shape as the 2-D one of height 1 the strategy runs."""
    return [*shape[:2], 1, *shape[2:]] if len(shape) == 3 else list(shape)


@pytest.mark.parametrize("name", GROUPED_1D_3D)
def test_grouped_1d_and_3d_conv_templates_on_opencl_match_onnxruntime(name: str) -> None:
    """Grouped (not depthwise), 1-D and 3-D convolutions get the direct or implicit-GEMM
    template (1-D ones as 2-D of height 1), bias and Relu fused, against onnxruntime."""
    import re

    xs, ws, kw, template = GROUPED_1D_3D[name]
    model = _conv_model(xs, ws, **kw)
    out = _as_2d([d.dim_value for d in _inferred_output(model)])[2:]
    assert template_for(_as_2d(ws), kw.get("group", 1), out) == template
    module = _check(model, {"x": RNG.standard_normal(xs).astype(np.float32)})
    assert len(module.kernels) == 1
    source = _sources(module)
    tiles = re.findall(r"__local float (\w+)_shared\[", source)
    assert [t if t in ("pad", "lhs", "col") else "weights" for t in tiles] == SHARED[template]
    assert "get_group_id(2)" in source


def test_1d_and_grouped_conv_tails_read_the_output_index() -> None:
    """A residual Add after a 1-D and after a grouped conv (the tail indexed by NCW/NCHW
    positions of the template's output) matches onnxruntime."""
    for xs, ws, group in (([1, 6, 90], [6, 3, 3], 2), ([1, 8, 9, 10], [8, 2, 3, 3], 4)):
        rank = len(xs) - 2
        weights = RNG.standard_normal(ws).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=group, pads=[1] * 2 * rank),
                 helper.make_node("Add", ["c", "x"], ["y"])]  # fmt: skip
        inits = [helper.make_tensor("w", TensorProto.FLOAT, ws, weights.ravel().tolist())]
        model = _model(nodes, [("x", xs)], "y", xs, inits)
        module = _check(model, {"x": RNG.standard_normal(xs).astype(np.float32)})
        assert len(module.kernels) == 1


def test_conv_of_more_than_three_spatial_dims_is_refused_by_name() -> None:
    weights = helper.make_tensor("w", TensorProto.FLOAT, [2, 2, 1, 1, 1, 1], [1.0] * 4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv4d")]
    model = _model(nodes, [("x", [1, 2, 3, 3, 3, 3])], "y", None, [weights])
    with pytest.raises(
        LoweringError, match="Conv must be 1-D, 2-D or 3-D on a GPU, not 4-D .node 'conv4d'"
    ):
        tensorforge.compile(model, target="opencl")


def test_conv_templates_compile_with_nvrtc() -> None:
    pytest.importorskip("nvidia.cuda_nvrtc")
    cases = {**CONVS, **GROUPED_1D_3D}
    for name in ("3x3_pad", "1x1", "depthwise", "grouped_g2", "grouped_1x1", "1d", "1d_short",
                 "1d_depthwise", "3d", "3d_grouped_batch2", "3d_grouped_strided"):  # fmt: skip
        xs, ws, kw, _ = cases[name]
        module = tensorforge.compile(_conv_model(xs, ws, **kw), target="cuda -arch=sm_80")
        payload = json.loads(module.kernels[0].payload)
        assert "__shared__" in payload["source"] and ".target sm_80" in payload["ptx"]


def test_conv_tiles_over_the_shared_memory_limit_are_rejected() -> None:
    """A depthwise tile whose input window does not fit the target's shared memory."""
    xs, ws = [1, 2, 64, 64], [2, 1, 31, 31]
    model = _conv_model(xs, ws, group=2, pads=(15, 15, 15, 15))
    with pytest.raises(GPULimitError, match="shared"):
        tensorforge.compile(model, target="opencl -max_shared=2048")


@st.composite
def _conv_cases(draw):
    """A random small 2-D or 3-D (grouped) convolution: input and weight shapes, pads before
    and after, strides, dilations, output size."""
    rank, groups = draw(st.sampled_from((2, 3))), draw(st.integers(1, 3))
    cg, per = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    sizes = [draw(st.integers(1, 4 if i < rank - 2 else 9)) for i in range(rank)]
    kernel = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides, dil = ([draw(st.integers(1, 2)) for _ in range(rank)] for _ in range(2))
    before, after = ([draw(st.integers(0, 2)) for _ in range(rank)] for _ in range(2))
    spans = zip(sizes, before, after, kernel, dil, strides, strict=True)
    out = [(n + b + a - d * (k - 1) - 1) // s + 1 for n, b, a, k, d, s in spans]
    assume(min(out) >= 1)
    x, w = [draw(st.integers(1, 2)), groups * cg, *sizes], [groups * per, cg, *kernel]
    return x, w, before, after, strides, dil, out, groups


@settings(max_examples=20, deadline=None)
@given(case=_conv_cases(), template=st.sampled_from(("gpu.conv2d", "gpu.conv2d_gemm")),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_any_config_of_the_grouped_and_3d_conv_templates_matches_onnxruntime(
    case, template, seed
) -> None:
    """Every valid point of the direct and implicit-GEMM spaces, for grouped 2-D and 3-D
    convolutions of odd sizes, strides, dilations and asymmetric padding, on OpenCL against
    onnxruntime."""
    from tensorforge.compiler.build import build_gpu
    from tensorforge.compiler.topi.gpu.conv2d import config_space_of, conv_program

    xs, ws, before, after, strides, dil, out, groups = case
    wl = {"x": xs, "w": ws, "out": out, "pads": before, "strides": strides, "dil": dil,
          "dtype": "float32", "max_threads": 256}  # fmt: skip
    if groups > 1:
        wl["groups"] = groups
    space = config_space_of(template, wl)
    (index,) = space.sample(np.random.default_rng(seed))
    args, s = conv_program(template, wl, space.get(index).values)
    xv, wv = RNG.standard_normal(xs).astype("f4"), RNG.standard_normal(ws).astype("f4")
    got = np.zeros([int(d) for d in args[2].shape], np.float32)
    build_gpu(s, args, "opencl", name="conv")(xv, wv, got)
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=groups, pads=[*before, *after],
                            strides=strides, dilations=dil)  # fmt: skip
    model = _model([node], [("x", xs), ("w", ws)], "y", None)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": xv, "w": wv})
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
