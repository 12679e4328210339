"""Tensor cores: fp16 dense tensorized with the WMMA intrinsic (`tir.gpu_intrin`).

Oracle without a GPU: the loop-IR interpreter runs the tensorized program (the intrinsic's calls
by their Python implementations) and must equal numpy's float16 -> float32 matmul. The CUDA C is
compiled by NVRTC (no GPU needed) and run where a CUDA device exists (`gpu` marker).
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.build import build_gpu
from tensorforge.compiler.codegen.gpu import gpu_payload, split_kernels
from tensorforge.compiler.target import Target
from tensorforge.compiler.tir.gpu_intrin import wmma_intrin
from tensorforge.compiler.topi.gpu.tensorcore import dense_fp16, schedule_dense_tensorcore
from tensorforge.runtime.device.gpu import GPUError, nvrtc, open_device

RNG = np.random.default_rng(0)


def _dense(m: int, k: int, n: int, **tiles: int):
    A = te.placeholder((m, k), "float16", name="A")
    B = te.placeholder((k, n), "float16", name="B")
    C = dense_fp16(A, B)
    s = schedule_dense_tensorcore(te.create_schedule(C.op), C, **tiles)
    return s, [A, B, C]


def _inputs(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = RNG.standard_normal((m, k)).astype(np.float16)
    b = RNG.standard_normal((k, n)).astype(np.float16)
    return a, b, a.astype(np.float32) @ b.astype(np.float32)


def _needs_mma_headers() -> None:
    if not nvrtc.available():
        pytest.skip("NVRTC missing: pip install nvidia-cuda-nvrtc-cu12")
    if nvrtc._mma_includes() is None:
        pytest.skip(f"no CUDA headers with mma.h: {nvrtc.MMA_HINT}")


@pytest.mark.parametrize(
    ("m", "k", "n", "tiles"),
    [
        (32, 48, 32, {}),  # one 32x32 block, three 16-wide reduction steps
        (48, 32, 64, {"tile_m": 16, "tile_n": 32}),  # a 3 x 2 grid of blocks
        (16, 16, 48, {}),  # one reduction step: the accumulator is zeroed by tf_wmma_fill
    ],
)
def test_tensorized_dense_in_the_interpreter_equals_numpy(m, k, n, tiles) -> None:
    s, args = _dense(m, k, n, **tiles)
    func = tir.lower(s, args, name="tc")
    text = str(func)
    assert "@tf_wmma_mma_16x16x16(A.shared.access_ptr(" in text
    assert 'thread("threadIdx.x")' in text and "wmma.lane" in text
    assert ("@tf_wmma_fill_16x16x16(" in text) == (k == 16)
    (kernel,) = split_kernels(func).kernels
    assert kernel.block == (32, 1, 1)  # one warp per block
    a, b, ref = _inputs(m, k, n)
    c = np.full((m, n), np.nan, np.float32)
    tir.interpret(func, [a, b, c])
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


def test_the_interpreter_does_the_warp_collective_product_once() -> None:
    """All 32 lanes call the update; only lane 0's call computes (else C would be 32x)."""
    s, args = _dense(16, 16, 16)
    func = tir.lower(s, args, name="once")
    calls: list[int] = []
    mma = tir.EXTERN_FUNCS["tf_wmma_mma_16x16x16"]
    tir.register_extern("tf_wmma_mma_16x16x16", lambda *a: (calls.append(a[-1]), mma(*a)))
    try:
        a, b, ref = _inputs(16, 16, 16)
        c = np.zeros((16, 16), np.float32)
        tir.interpret(func, [a, b, c])
    finally:
        tir.register_extern("tf_wmma_mma_16x16x16", mma)
    assert sorted(calls) == list(range(32))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("m", "k", "n"), [(32, 48, 32), (16, 16, 48)])
def test_cuda_source_uses_wmma_and_compiles_with_nvrtc(m, k, n) -> None:
    _needs_mma_headers()
    s, args = _dense(m, k, n)
    payload = gpu_payload(
        split_kernels(tir.lower(s, args, name="tc")), Target.parse("cuda -arch=sm_80")
    )
    source = payload["source"]
    assert "#include <mma.h>" in source and "wmma::mma_sync" in source
    assert "tf_wmma_mma_16x16x16((&A_shared[" in source
    assert ("wmma::fill_fragment" in source) == (k == 16)
    assert "ptx" in payload and payload["arch"] == "sm_80"
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32" in payload["ptx"]


def test_cuda_source_without_tensor_cores_has_no_wmma_prelude() -> None:
    A = te.placeholder((64,), "float16", name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    payload = gpu_payload(split_kernels(tir.lower(s, [A, B], name="h")), Target.parse("cuda"))
    assert "mma.h" not in payload["source"] and "wmma" not in payload["source"]


def test_tensor_cores_before_volta_are_a_clear_compile_error() -> None:
    _needs_mma_headers()
    old = [a for a in nvrtc.supported_archs() if a < 70]
    if not old:
        pytest.skip("this NVRTC compiles for no architecture before sm_70")
    s, args = _dense(16, 16, 16)
    with pytest.raises(nvrtc.NVRTCError, match=r"need compute capability 7\.0 \(sm_70\)"):
        gpu_payload(
            split_kernels(tir.lower(s, args, name="tc")), Target.parse(f"cuda -arch=sm_{old[-1]}")
        )


def test_missing_mma_headers_say_what_to_install(monkeypatch) -> None:
    if not nvrtc.available():
        pytest.skip("NVRTC missing: pip install nvidia-cuda-nvrtc-cu12")
    monkeypatch.setattr(nvrtc, "_mma_includes", lambda: None)
    source = '#include <mma.h>\nextern "C" __global__ void k() {}\n'
    with pytest.raises(
        nvrtc.NVRTCError,
        match=r"program 'wmma' for sm_80: it uses tensor cores .*pip install "
        r"nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12",
    ):
        nvrtc.compile_ptx(source, "sm_80", "wmma")


def test_opencl_refuses_the_tensor_core_intrinsic() -> None:
    s, args = _dense(32, 32, 32)
    program = split_kernels(tir.lower(s, args, name="tc"))
    with pytest.raises(
        tir.LoweringError,
        match=r"opencl codegen: tensor-core intrinsic 'tf_wmma_mma_16x16x16' needs the cuda "
        "target",
    ):
        gpu_payload(program, Target.parse("opencl"))


@pytest.mark.parametrize(
    ("shape_a", "shape_b", "message"),
    [
        ((24, 32), (32, 16), r"multiple of 16; got m=24, n=16, k=32"),
        ((32, 32), (32, 40), r"multiple of 16; got m=32, n=40, k=32"),
        ((16, 20), (20, 16), r"multiple of 16; got m=16, n=16, k=20"),
    ],
)
def test_shapes_that_are_not_multiples_of_16_are_refused(shape_a, shape_b, message) -> None:
    A = te.placeholder(shape_a, "float16", name="A")
    B = te.placeholder(shape_b, "float16", name="B")
    with pytest.raises(ValueError, match=r"dense_fp16 of 'A' and 'B': .*" + message):
        dense_fp16(A, B)


def test_bad_inputs_and_tiles_are_refused_by_name() -> None:
    A = te.placeholder((32, 32), "float32", name="A")
    B = te.placeholder((32, 32), "float16", name="B")
    with pytest.raises(
        ValueError, match=r"'A' must be a 2-D float16 tensor, not float32\[32, 32\]"
    ):
        dense_fp16(A, B)
    with pytest.raises(ValueError, match=r"got tile_m=24, tile_n=16"):
        _dense(48, 16, 32, tile_m=24, tile_n=16)
    with pytest.raises(ValueError, match=r"the 32x32 tile must divide the 48x32 output"):
        _dense(48, 16, 32, tile_m=32, tile_n=32)
    with pytest.raises(ValueError, match=r"shape 16x16x8 is not a WMMA shape"):
        wmma_intrin(16, 16, 8)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "k", "n"), [(64, 96, 128), (16, 16, 48)])
def test_tensor_core_dense_on_cuda_equals_numpy(m, k, n) -> None:
    try:
        open_device("cuda")
    except GPUError as e:
        pytest.skip(f"no CUDA device: {e}")
    s, args = _dense(m, k, n)
    f = build_gpu(s, args, "cuda", name="tc")
    a, b, ref = _inputs(m, k, n)
    c = np.zeros((m, n), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)
