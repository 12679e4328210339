"""NVRTC (CUDA C to PTX with no GPU) and the CUDA device's error paths; one `gpu` test runs a
kernel on a real device through the driver API and skips elsewhere."""

from __future__ import annotations

import ctypes
import re
from typing import Any

import numpy as np
import pytest

from tensorforge.runtime.device.gpu import cuda, nvrtc
from tensorforge.runtime.device.gpu.base import GPUError

needs_nvrtc = pytest.mark.skipif(
    not nvrtc.available(), reason="NVRTC missing: pip install nvidia-cuda-nvrtc-cu12"
)

KERNEL = r"""
#include <cuda_fp16.h>
extern "C" __global__ void reverse_half(const __half* x, float* y) {
  __shared__ float tile[64];
  int i = (int)threadIdx.x;
  tile[i] = __half2float(x[blockIdx.x * 64 + i]);
  __syncthreads();
  __half h = __float2half_rn(tile[63 - i] * 2.0f);
  y[blockIdx.x * 64 + i] = __half2float(h);
}
"""

VECTOR_ADD = r"""
extern "C" __global__ void vadd(const float* a, const float* b, float* c) {
  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < 1000) c[i] = a[i] + b[i];
}
"""


@needs_nvrtc
def test_version_and_archs() -> None:
    assert nvrtc.version() >= (12, 0)
    assert nvrtc.capability(nvrtc.DEFAULT_ARCH) in nvrtc.supported_archs()


@needs_nvrtc
@pytest.mark.parametrize("arch", [nvrtc.DEFAULT_ARCH, "sm_90", "compute_80", "sm_90a"])
def test_compiles_kernel_with_shared_memory_and_half(arch: str) -> None:
    ptx = nvrtc.compile_ptx(KERNEL, arch, "reverse")
    assert ".visible .entry reverse_half" in ptx
    assert ".shared" in ptx and "bar.sync" in ptx
    assert f".target sm_{arch.split('_')[1]}" in ptx


@needs_nvrtc
def test_half_without_a_cuda_fp16_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no CUDA runtime wheel or toolkit, the built-in cuda_fp16.h stand-in is used."""
    monkeypatch.setattr(nvrtc, "_fp16_include", lambda: None)
    ptx = nvrtc.compile_ptx(KERNEL, "sm_80", "reverse")
    assert ".visible .entry reverse_half" in ptx and "cvt.rn.f16.f32" in ptx


@needs_nvrtc
def test_syntax_error_names_program_arch_and_log() -> None:
    with pytest.raises(nvrtc.NVRTCError) as err:
        nvrtc.compile_ptx('extern "C" __global__ void k(float* x) { x[0] = ; }', "sm_80", "broken")
    message = str(err.value)
    assert "'broken'" in message and "sm_80" in message
    assert "expected an expression" in message  # the compiler's log
    assert isinstance(err.value, GPUError)


@pytest.mark.parametrize("arch", ["sm_9", "gfx90a", "90", "", "sm_90x"])
def test_bad_arch_string(arch: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(arch))):
        nvrtc.compile_ptx(VECTOR_ADD, arch)


@needs_nvrtc
def test_arch_nvrtc_cannot_target() -> None:
    with pytest.raises(nvrtc.NVRTCError, match=r"sm_10: it supports .*sm_90"):
        nvrtc.compile_ptx(VECTOR_ADD, "sm_10", "old")


def test_missing_library_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library(name: str, *args: Any, **kwargs: Any) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(nvrtc, "_LIB", None)
    monkeypatch.setattr(nvrtc.ctypes, "CDLL", no_library)
    assert not nvrtc.available()
    with pytest.raises(nvrtc.NVRTCError, match="pip install nvidia-cuda-nvrtc-cu12"):
        nvrtc.compile_ptx(VECTOR_ADD)


def _driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_loads(), reason="libcuda.so.1 loads on this machine")
def test_cuda_device_without_driver() -> None:
    with pytest.raises(GPUError, match=r"no CUDA driver \(libcuda\.so\.1\)"):
        cuda.CUDADevice()


class FakeDriver:
    """A libcuda stand-in: every call returns codes[name] (0 by default); out-parameters that
    a call fills are set from outs[name]."""

    def __init__(self, codes: dict[str, int], outs: dict[str, Any]) -> None:
        self.codes, self.outs = codes, outs

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> int:
            if name in self.outs:
                args[-1 if name == "cuGetErrorName" else 0]._obj.value = self.outs[name]
            return self.codes.get(name, 0)

        return call


@pytest.mark.parametrize(
    ("codes", "outs", "device", "message"),
    [
        (
            {"cuInit": 100},
            {"cuGetErrorName": b"CUDA_ERROR_NO_DEVICE"},
            0,
            "no CUDA device: cuInit failed with CUDA_ERROR_NO_DEVICE",
        ),
        ({"cuInit": 999, "cuGetErrorName": 1}, {}, 0, "cuInit failed with CUresult 999"),
        ({}, {"cuDeviceGetCount": 0}, 0, "no CUDA device: the driver loaded but found none"),
        ({}, {"cuDeviceGetCount": 1}, 3, r"must be in \[0, 1\), not 3"),
        (
            {"cuDevicePrimaryCtxRetain": 201},
            {"cuDeviceGetCount": 1, "cuGetErrorName": b"CUDA_ERROR_INVALID_CONTEXT"},
            0,
            "cuDevicePrimaryCtxRetain failed with CUDA_ERROR_INVALID_CONTEXT",
        ),
    ],
)
def test_cuda_device_driver_errors(
    monkeypatch: pytest.MonkeyPatch,
    codes: dict[str, int],
    outs: dict[str, Any],
    device: int,
    message: str,
) -> None:
    monkeypatch.setattr(cuda, "_load_driver", lambda: FakeDriver(codes, outs))
    with pytest.raises(GPUError, match=message):
        cuda.CUDADevice(device)


@pytest.mark.gpu
def test_vector_add_on_a_cuda_device() -> None:
    try:
        dev = cuda.CUDADevice()
    except GPUError as e:
        pytest.skip(f"no CUDA device: {e}")
    payload = {
        "dialect": "cuda",
        "source": VECTOR_ADD,
        "kernels": [{"name": "vadd", "args": [0, 1, 2], "grid": [4, 1, 1], "block": [256, 1, 1]}],
    }
    program = dev.build(payload)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 1000), dtype=np.float32)
    bufs = [dev.alloc(4 + 4000) for _ in range(3)]  # data at byte offset 4 of each buffer
    dev.write(bufs[0], 4, a)
    dev.write(bufs[1], 4, b)
    k = payload["kernels"][0]
    dev.launch(program, "vadd", tuple(k["grid"]), tuple(k["block"]), [(x, 4, 4) for x in bufs])
    out = np.zeros(1000, np.float32)
    dev.read(bufs[2], 4, out)
    dev.synchronize()
    np.testing.assert_array_equal(out, a + b)
    assert dev.info.max_threads >= 1024 and dev.info.fp16
