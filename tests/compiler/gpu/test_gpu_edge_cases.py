"""Whole models at the GPU back-end's edges (launch limits, tuned configs, odd shapes and
dtypes), on OpenCL (PoCL on this CPU) against onnxruntime, and their CUDA C through NVRTC
(skipped without the wheel)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from compiler_ops import sum_atol
from onnx import TensorProto, helper, numpy_helper

import tensorforge

RNG = np.random.default_rng(0)
F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(v, n) for n, v in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, target="opencl", rtol=1e-4, atol=None):
    module = tensorforge.compile(model, target=target)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for got, ref in zip(module.run(feeds).values(), want, strict=True):
        limit = sum_atol(ref) if atol is None else atol
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=limit)
    return module


def _many_blocks_models():
    """Ops whose templates bind more than 65535 blocks to the grid's z axis (an odd count: the
    folded launch has one idle block)."""
    w = RNG.standard_normal((70001, 1, 3, 3)).astype(np.float32)
    return {
        "batch_matmul": _model([helper.make_node("MatMul", ["x", "b"], ["y"])],
                               [("x", F32, [70001, 2, 3]), ("b", F32, [70001, 3, 2])],
                               [("y", F32, [70001, 2, 2])]),
        "depthwise": _model([helper.make_node("Conv", ["x", "w"], ["y"], group=70001,
                                              pads=[1, 1, 1, 1])],
                            [("x", F32, [1, 70001, 3, 3])], [("y", F32, [1, 70001, 3, 3])],
                            [("w", w)]),
    }  # fmt: skip


def _feeds(model):
    shapes = {
        i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
    }
    return {n: RNG.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


@pytest.mark.parametrize("name", ["batch_matmul", "depthwise"])
def test_grids_past_the_z_limit_fold_into_x(name: str) -> None:
    model = _many_blocks_models()[name]
    module = _check(model, _feeds(model))
    (kernel,) = json.loads(module.kernels[0].payload)["kernels"]
    assert kernel["grid"][2] <= 65535 and kernel["grid"][0] >= 2


def test_folded_grids_compile_with_nvrtc() -> None:
    pytest.importorskip("nvidia.cuda_nvrtc")
    module = tensorforge.compile(_many_blocks_models()["depthwise"], target="cuda -arch=sm_80")
    payload = json.loads(module.kernels[0].payload)
    assert "block_fold" in payload["source"] and ".target sm_80" in payload["ptx"]


CAST_SPECIALS = [np.nan, np.inf, -np.inf, 3e9, -3e9, 5e9, -1.0, 1e19, 2.5e19, -1e19, 1.5, -2.7,
                 2147483520.0, 4294967040.0, 65504.0, -65504.0, 300.7, -129.5, 0.0]  # fmt: skip
CAST_INTS = ["int32", "uint32", "int64", "uint64", "int16", "uint16", "int8", "uint8"]


def _cast_model(src: str, to: str, n: int):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(to))
    source = helper.np_dtype_to_tensor_dtype(np.dtype(src))
    return _model([helper.make_node("Cast", ["x"], ["y"], to=elem)], [("x", source, [n])],
                  [("y", elem, [n])])  # fmt: skip


@pytest.mark.parametrize("src", ["float32", "float64", "float16"])
def test_casts_of_out_of_range_floats_on_opencl_are_cs_on_x86(src: str) -> None:
    """(GPU out-of-range casts) C leaves a float outside the integer type undefined: PoCL gave
    4294967295 for NaN into uint32 and -32768 for 3e9 into int16 from float64. The GPU code
    converts as the CPU back-end does (x86-64's C casts: numpy's astype, onnxruntime's
    static_cast), for every float type into every integer type."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.array(CAST_SPECIALS * 3, dtype=src)  # (float16: 3e9 and 1e19 are inf)
    for to in CAST_INTS:
        with np.errstate(invalid="ignore"):
            want = x.astype(to)
        got = tensorforge.compile(_cast_model(src, to, x.size), target="opencl").run({"x": x})
        np.testing.assert_array_equal(got["y"], want, err_msg=f"{src} -> {to}")


def test_casts_of_floats_to_integers_compile_with_nvrtc() -> None:
    pytest.importorskip("nvidia.cuda_nvrtc")
    for src in ("float32", "float64", "float16"):
        for to in CAST_INTS:
            module = tensorforge.compile(_cast_model(src, to, 57), target="cuda -arch=sm_80")
            payload = json.loads(module.kernels[0].payload)
            assert "tf_f2i_" in payload["source"] and ".target sm_80" in payload["ptx"]


@pytest.mark.parametrize("target", ["opencl", "llvm"])
@pytest.mark.parametrize("n", [10, 100])  # 100: the row template (`gpu.row_reduce`)
def test_max_and_min_of_infinite_rows_are_infinite(n: int, target: str) -> None:
    """A max-reduction's identity is -inf, not the lowest finite float (TVM's): a row of -inf
    (a fully masked attention row) has max -inf (a max pool's padding stays the lowest finite
    value: onnxruntime's)."""
    x = np.full((3, n), -np.inf, np.float32)
    x[1] = RNG.standard_normal(n)
    nodes = [helper.make_node("ReduceMax", ["x"], ["hi"], axes=[1], keepdims=0),
             helper.make_node("Neg", ["x"], ["nx"]),
             helper.make_node("ReduceMin", ["nx"], ["lo"], axes=[1], keepdims=0),
             helper.make_node("Unsqueeze", ["x", "ax"], ["x4"]),
             helper.make_node("MaxPool", ["x4"], ["pool"], kernel_shape=[1, 3],
                              pads=[0, 1, 0, 1])]  # fmt: skip
    outs = [("hi", F32, [3]), ("lo", F32, [3]), ("pool", F32, [1, 1, 3, n])]
    model = _model(nodes, [("x", F32, [3, n])], outs, [("ax", np.array([0, 1], np.int64))])
    _check(model, {"x": x}, target)


def test_buffers_past_32bit_indices_are_refused_by_name() -> None:
    """Kernels index with `int`: a tensor of 2**31 elements or more would wrap (and write out of
    bounds on a GPU) instead of running; compiling it names the kernel and the buffer."""
    from tensorforge.compiler.codegen.gpu import GPULimitError

    shape = [65536, 32769]
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, shape)],
                   [("y", F32, shape)])  # fmt: skip
    for target in ("opencl", "cuda"):
        with pytest.raises(GPULimitError, match=r"relu.*buffer '\w+' has 2147549184 elements"):
            tensorforge.compile(model, target=target)


def _doubling(n: int):
    from tensorforge.compiler import te
    from tensorforge.compiler.codegen.gpu import gpu_payload, split_kernels
    from tensorforge.compiler.target import Target
    from tensorforge.compiler.tir import lower

    a = te.placeholder((n,), name="a")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="b")
    s = te.create_schedule(b.op)
    bx, tx = s[b].split(b.op.axis[0], factor=32)
    s[b].bind(bx, te.thread_axis("blockIdx.x"))
    s[b].bind(tx, te.thread_axis("threadIdx.x"))
    return gpu_payload(split_kernels(lower(s, [a, b], name="dbl")), Target.parse("opencl"))


def test_opencl_arena_offsets_are_64bit_and_old_payloads_still_run() -> None:
    """An arena may hold more than 2**31 elements on a large GPU: OpenCL kernels take `long`
    offsets (`offset_bits` 64); a payload saved before (no `offset_bits`, `int` offsets) runs."""
    from tensorforge.runtime.device.gpu import GPUFunction

    payload = _doubling(100)
    assert payload["offset_bits"] == 64 and "const long" in payload["source"]
    old = {k: v for k, v in payload.items() if k != "offset_bits"}
    old["source"] = payload["source"].replace("const long", "const int")
    a = RNG.standard_normal(100).astype(np.float32)
    for p in (payload, old):
        out = np.zeros(100, np.float32)
        GPUFunction(p)(a, out)
        np.testing.assert_array_equal(out, a * 2)


def _wide_conv(xs, ws, ys, dtype=F32, **attrs):
    np_dtype = np.float64 if dtype == TensorProto.DOUBLE else np.float32
    w = RNG.standard_normal(ws).astype(np_dtype)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    return _model([node], [("x", dtype, xs)], [("y", dtype, ys)], [("w", w)])


WIDE_CONVS = {  # dilated kernels whose input windows outgrow a tile's shared memory
    "depthwise_f64": ([1, 4, 100, 100], [4, 1, 7, 7], [1, 4, 26, 26],
                      {"group": 4, "strides": [2, 2], "dilations": [8, 8]}, TensorProto.DOUBLE),
    "depthwise_one_output_too_wide": ([1, 4, 140, 140], [4, 1, 9, 9], [1, 4, 4, 4],
                                      {"group": 4, "strides": [3, 3], "dilations": [16, 16]}, F32),
    "direct_one_row_too_wide": ([1, 2, 140, 140], [3, 2, 9, 9], [1, 3, 12, 12],
                                {"dilations": [16, 16]}, F32),
}  # fmt: skip


@pytest.mark.parametrize("name", WIDE_CONVS)
def test_conv_tiles_shrink_or_fall_back_to_gemm_to_fit_shared_memory(name: str) -> None:
    """A default tile stages at most 16 KiB (doubles count 8 bytes); a window that exceeds the
    target even for one output row uses the implicit GEMM, whose tiles do not grow with it.
    (These were `GPULimitError`s for the default config.)"""
    xs, ws, ys, attrs, dtype = WIDE_CONVS[name]
    model = _wide_conv(xs, ws, ys, dtype, **attrs)
    x = RNG.standard_normal(xs).astype(np.float64 if dtype == TensorProto.DOUBLE else np.float32)
    (want,) = tensorforge.compile(model, target="llvm").run({"x": x}).values()
    (got,) = tensorforge.compile(model, target="opencl").run({"x": x}).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    tensorforge.compile(model, target="cuda")  # within 48 KiB too (NVRTC where installed)


def test_a_tuned_conv_tile_over_this_targets_shared_memory_falls_back_to_the_default() -> None:
    from tensorforge.compiler.autotune.dispatch import ApplyBest, TaskRecorder

    model = _wide_conv([1, 8, 60, 60], [4, 8, 7, 7], [1, 4, 42, 42], dilations=[3, 3])
    with TaskRecorder() as rec:
        tensorforge.compile(model, target="opencl -max_shared=65536")
    (key,) = rec.workloads  # the same workload on every shared-memory limit
    big = {"tk": 1, "ty": 8, "tx": 32, "vthread": 2, "c_tile": 8}  # 44 KiB, tuned on 64 KiB
    with ApplyBest({key: big}):
        module = tensorforge.compile(model, target="opencl")
    x = RNG.standard_normal([1, 8, 60, 60]).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(module.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def _template_models():
    """One model per GPU template (direct, 3-D direct, implicit GEMM and depthwise convs,
    dense, batched MatMul, row reduction), at sizes whose tiles do not divide."""
    w = {n: RNG.standard_normal(s).astype(np.float32) for n, s in
         {"w2": [6, 5, 3, 3], "w3": [4, 2, 3, 3, 3], "w1": [7, 5, 1, 1], "wd": [5, 1, 3, 3],
          "wm": [13, 70]}.items()}  # fmt: skip
    nodes = [helper.make_node("Conv", ["x", "w2"], ["direct"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["v", "w3"], ["direct3d"], pads=[1] * 6),
             helper.make_node("Conv", ["x", "w1"], ["gemm"]),
             helper.make_node("Conv", ["x", "wd"], ["depthwise"], group=5, pads=[1, 1, 1, 1]),
             helper.make_node("Gemm", ["m", "wm"], ["dense"], transB=1),
             helper.make_node("MatMul", ["a", "b"], ["bmm"]),
             helper.make_node("Softmax", ["m"], ["softmax"], axis=-1)]  # fmt: skip
    inputs = [("x", F32, [2, 5, 17, 19]), ("v", F32, [1, 2, 5, 9, 9]), ("m", F32, [33, 70]),
              ("a", F32, [2, 17, 9]), ("b", F32, [2, 9, 21])]  # fmt: skip
    outputs = [("direct", F32, [2, 6, 17, 19]), ("direct3d", F32, [1, 4, 5, 9, 9]),
               ("gemm", F32, [2, 7, 17, 19]), ("depthwise", F32, [2, 5, 17, 19]),
               ("dense", F32, [33, 13]), ("bmm", F32, [2, 17, 21]),
               ("softmax", F32, [33, 70])]  # fmt: skip
    return _model(nodes, inputs, outputs, list(w.items()))


@pytest.mark.parametrize("threads", [1, 32])
def test_default_tiles_fit_a_small_thread_limit(threads: int) -> None:
    """Every template's default block fits `-max_threads` (the direct, depthwise and dense
    defaults had 64, 16 and 16 threads whatever the limit: a `GPULimitError`)."""
    model = _template_models()
    _check(model, _feeds(model), f"opencl -max_threads={threads}", rtol=1e-4, atol=1e-4)


def test_a_payload_with_another_offset_width_is_refused() -> None:
    from tensorforge.runtime.device.gpu import GPUError, parse_payload

    payload = _doubling(100)
    parse_payload(json.dumps(payload).encode(), "dbl")
    for bits in (16, "64", True):
        data = json.dumps({**payload, "offset_bits": bits}).encode()
        with pytest.raises(GPUError, match="offset_bits must be 32 or 64"):
            parse_payload(data, "dbl")


def _deep_models():
    """Expressions as deep as their operands (a Concat or Sum of 300, a chain of 400 element-
    wise ops): past Python's recursion (a RecursionError compiling, on every target) and past
    the 256 bracket levels of clang and NVRTC (an OpenCL build failure at load)."""
    k = 300
    widths = [1 + i % 3 for i in range(k)]
    concat = _model([helper.make_node("Concat", [f"x{i}" for i in range(k)], ["c"], axis=1),
                     helper.make_node("Relu", ["c"], ["y"])],
                    [(f"x{i}", F32, [2, w]) for i, w in enumerate(widths)],
                    [("y", F32, [2, sum(widths)])])  # fmt: skip
    variadic = _model([helper.make_node(op, [f"x{i}" for i in range(k)], [op]) for op in
                       ("Sum", "Max", "Mean")], [(f"x{i}", F32, [3, 5]) for i in range(k)],
                      [(op, F32, [3, 5]) for op in ("Sum", "Max", "Mean")])  # fmt: skip
    chain = [helper.make_node("Add" if i % 2 else "Mul", [f"t{i}", "c"], [f"t{i + 1}"])
             for i in range(400)]  # fmt: skip
    chain = _model(chain, [("t0", F32, [3, 5]), ("c", F32, [5])], [("t400", F32, [3, 5])])
    return {"concat": concat, "variadic": variadic, "chain": chain}


@pytest.mark.parametrize(("name", "target"), [
    ("concat", "opencl"), ("variadic", "opencl"), ("chain", "opencl"),
    ("variadic", "llvm"), ("chain", "llvm"),  # (the CPU's 300-way Concat takes a minute)
])  # fmt: skip
def test_wide_and_deep_expressions_compile_and_match(name: str, target: str) -> None:
    model = _deep_models()[name]
    feeds = _feeds(model)
    if name == "chain":
        feeds["c"] = (RNG.random(5) * 0.02 + 0.99).astype(np.float32)  # bounded over 400 steps
    _check(model, feeds, target, rtol=1e-4, atol=1e-4)
    if target == "opencl":
        tensorforge.compile(model, target="cuda")  # NVRTC where installed
