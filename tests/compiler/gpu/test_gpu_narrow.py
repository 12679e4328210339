"""bfloat16, float8 and int4 on the GPU back-end: the bit conversions of compiler/te/narrow.py
are integer expressions the OpenCL and CUDA printers print like any other, so Cast to and from
every narrow type runs on OpenCL (PoCL on this CPU) exactly as ml_dtypes converts, and its CUDA
C compiles with NVRTC (skipped without the wheel; run on a GPU where one exists)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tensorforge

sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
from test_narrow_dtypes import (  # noqa: E402
    NARROW_FLOATS,
    _cast_model,
    _floats,
    _oracle_cast,
    _same,
    roundtrip_model,
)


def _chain(dst: str):
    """float32 -> narrow (saturating) -> float32, with the narrow value as an output too."""
    n = 515
    return roundtrip_model(dst, n, opset=24, narrow_out=True), _floats(n, seed=8)


@pytest.mark.parametrize("dst", [*NARROW_FLOATS, "float8_e8m0fnu", "int4", "uint4"])
def test_narrow_casts_on_opencl_match_ml_dtypes(dst: str) -> None:
    model, x = _chain(dst)
    if dst in ("int4", "uint4"):
        x = np.random.default_rng(9).integers(-40, 40, x.size).astype(np.float32)
    out = tensorforge.compile(model, target="opencl", progress=False).run({"x": x})
    want = _oracle_cast(x, dst, True)
    _same(out["q"], want)
    np.testing.assert_array_equal(out["y"], want.astype(np.float32))


def test_narrow_casts_compile_with_nvrtc() -> None:
    pytest.importorskip("nvidia.cuda_nvrtc")
    for dst in ("bfloat16", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e8m0fnu", "int4"):
        module = tensorforge.compile(_chain(dst)[0], target="cuda -arch=sm_80", progress=False)
        for image in module.kernels:
            assert ".visible .entry" in json.loads(image.payload)["ptx"]
    x = np.zeros(4, np.float32).astype(ml_dtypes.bfloat16)
    module = tensorforge.compile(_cast_model("bfloat16", "float32", 4), target="cuda -arch=sm_80",
                                 progress=False)  # fmt: skip
    assert module.tensors["x"].dtype == str(x.dtype)
