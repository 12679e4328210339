"""CUDA C for every kernel of the test models, compiled by NVRTC (no GPU needed), and run on a
GPU where one exists (`gpu` marker)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from compiler_ops import INTEGERS, UNSIGNED, bitwise_ops, unsigned_inputs, unsigned_ops

import tensorforge
from tensorforge.compiler import te
from tensorforge.compiler.build import build_gpu
from tensorforge.compiler.codegen.gpu import gpu_payload, split_kernels
from tensorforge.compiler.frontend import onnx_builders as B
from tensorforge.compiler.target import Target
from tensorforge.compiler.tir import lower
from tensorforge.compiler.topi.gpu import GPUScheduleConfig, schedule_auto
from tensorforge.runtime.device.gpu import GPUError, open_device
from tensorforge.runtime.device.gpu.nvrtc import NVRTCError, compile_ptx

MODELS = {
    "mlp": B.mlp,
    "transformer_encoder": B.transformer_encoder,
    "resnet18_32px": lambda: B.resnet18(size=32, classes=10),
    "quantized_cnn": B.quantized_cnn,
    "regnet_y_block": lambda: B.regnet_y_block(size=28),  # grouped convs, direct and GEMM
}


@pytest.mark.parametrize("name", MODELS)
def test_every_cuda_kernel_of_a_model_compiles_with_nvrtc(name: str) -> None:
    module = tensorforge.compile(MODELS[name](), target="cuda -arch=sm_80")
    for image in module.kernels:
        payload = json.loads(image.payload)
        assert payload["arch"] == "sm_80" and ".target sm_80" in payload["ptx"]
        for k in payload["kernels"]:
            assert f".visible .entry {k['name']}(" in payload["ptx"]


def test_fp16_arithmetic_compiles_for_cuda() -> None:
    x = te.placeholder((256,), "float16", name="x")
    y = te.compute((256,), lambda i: te.max(x[i] * x[i] + 1.0, 0.5), name="y")
    s = schedule_auto([y], GPUScheduleConfig(threads=128))
    payload = gpu_payload(split_kernels(lower(s, [x, y], name="h")), Target.parse("cuda"))
    assert "__half" in payload["source"] and "h_k0" in payload["ptx"]


@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_operators_compile_for_cuda(dtype: str) -> None:
    inputs, outs, _ = bitwise_ops(dtype, 64)
    s = schedule_auto(outs, GPUScheduleConfig(threads=64))
    payload = gpu_payload(split_kernels(lower(s, [*inputs, *outs], name="b")), Target.parse("cuda"))
    assert f"tf_shl_{dtype}(" in payload["source"] and f"tf_shr_{dtype}(" in payload["source"]
    assert ".visible .entry b_k0(" in payload["ptx"]


@pytest.mark.parametrize(
    ("src", "dst", "intrinsic"),
    [("float32", "int32", "__float_as_int"), ("uint32", "float32", "__uint_as_float"),
     ("float64", "int64", "__double_as_longlong")],
)  # fmt: skip
def test_reinterpret_compiles_for_cuda(src: str, dst: str, intrinsic: str) -> None:
    x = te.placeholder((64,), src, name="x")
    y = te.compute((64,), lambda i: te.reinterpret(x[i], dst), name="y")
    s = schedule_auto([y], GPUScheduleConfig(threads=64))
    payload = gpu_payload(split_kernels(lower(s, [x, y], name="r")), Target.parse("cuda"))
    assert f"{intrinsic}(" in payload["source"] and ".visible .entry r_k0(" in payload["ptx"]


def _unsigned_schedule(dtype: str):
    inputs, outs, reference = unsigned_ops(dtype, 64)
    return schedule_auto(outs, GPUScheduleConfig(threads=64)), [*inputs, *outs], reference


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_arithmetic_compiles_for_cuda(dtype: str) -> None:
    s, args, _ = _unsigned_schedule(dtype)
    payload = gpu_payload(split_kernels(lower(s, args, name="u")), Target.parse("cuda"))
    assert "unsigned" in payload["source"] and ".visible .entry u_k0(" in payload["ptx"]


def test_nvrtc_errors_name_the_program() -> None:
    with pytest.raises(NVRTCError, match="program 'broken' for sm_80"):
        compile_ptx('extern "C" __global__ void f() { undeclared = 1; }', "sm_80", "broken")


def _cuda_or_skip():
    try:
        return open_device("cuda")
    except GPUError as e:
        pytest.skip(f"no CUDA device: {e}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["mlp", "resnet18_32px"])
def test_model_on_cuda_matches_onnxruntime(name: str) -> None:
    _cuda_or_skip()
    model = MODELS[name]()
    sess = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
            np.float32
        )
        for i in sess.get_inputs()
    }
    module = tensorforge.compile(model, target="cuda")
    for ref, out in zip(sess.run(None, feeds), module.run(feeds).values(), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_arithmetic_on_cuda_matches_numpy(dtype: str) -> None:
    _cuda_or_skip()
    s, args, reference = _unsigned_schedule(dtype)
    f = build_gpu(s, args, "cuda", name="u")
    a, b = unsigned_inputs(dtype, 64)
    got = [np.zeros(64, t.dtype) for t in args[2:]]
    f(a, b, *got)
    for t, g, want in zip(args[2:], got, reference(a, b), strict=True):
        np.testing.assert_array_equal(g, want, err_msg=t.name)
