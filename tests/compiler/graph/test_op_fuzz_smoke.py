"""A small run of the differential op fuzzer (benchmarks/op_fuzz.py): a few cases of several
op families, compiled for the CPU in a worker process and compared with onnxruntime, must all
match (or be refused or skipped by onnxruntime); its cases are deterministic and its comparison
catches dtype, shape, value and NaN differences."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks"))

import op_fuzz  # noqa: E402
from op_fuzz_cases import make_case, pick_family  # noqa: E402

BAD = ("mismatch", "error", "crash", "hang", "gen-error")


def test_fuzzer_cases_are_deterministic_and_cover_the_registry_families() -> None:
    first, again = make_case("Conv", 3, 5), make_case("Conv", 3, 5)
    assert first.model.SerializeToString() == again.model.SerializeToString()
    assert all(np.array_equal(first.feed[k], again.feed[k]) for k in first.feed)
    assert make_case("Conv", 3, 6).model != first.model
    ops = set(pick_family())
    assert {"Add", "Conv", "Slice", "ReduceMax", "Cast", "Resize", "chain:conv_epilogue"} <= ops


def test_comparison_catches_dtype_shape_value_and_nan_differences() -> None:
    want = np.array([1.0, np.nan, -np.inf, 3.0], np.float32)
    assert op_fuzz.differs(want.copy(), want) is None
    assert "dtype" in op_fuzz.differs(want.astype(np.float64), want)
    assert "shape" in op_fuzz.differs(want[:3], want)
    assert "differ" in op_fuzz.differs(np.array([1, 0, -np.inf, 3], np.float32), want)
    assert "differ" in op_fuzz.differs(np.array([1, np.nan, np.inf, 3], np.float32), want)
    assert "differ" in op_fuzz.differs(np.array([1, np.nan, -np.inf, 3.01], np.float32), want)
    ints = np.array([3, -1], np.int64)
    assert "differ" in op_fuzz.differs(np.array([3, 0], np.int64), ints)


@pytest.mark.parametrize("seed", [7])
def test_a_short_fuzz_run_finds_nothing(seed: int) -> None:
    ops = ["Add", "Max", "Slice", "ReduceSum", "Conv", "MaxPool", "Cast", "chain:movement"]
    results = op_fuzz.fuzz(ops, seed, budget_s=240, per_op=3, timeout_s=120, out=None)
    assert len(results) == len(ops) * 3
    bad = [r for r in results if r["outcome"] in BAD]
    assert not bad, op_fuzz.summarize(bad)
    assert sum(r["outcome"] == "match" for r in results) >= len(results) // 2


def test_a_short_gpu_fuzz_run_finds_nothing() -> None:
    """The same cases through the GPU back-end: run on OpenCL (PoCL), compiled for CUDA."""
    ops = ["Gelu", "LpPool", "Softmax", "Conv", "chain:conv_epilogue"]
    fuzz = op_fuzz.fuzz(ops, 0, budget_s=240, per_op=3, timeout_s=120, out=None, target="opencl")
    assert not [r for r in fuzz if r["outcome"] in BAD], op_fuzz.summarize(fuzz)
    assert sum(r["outcome"] == "match" for r in fuzz) >= len(fuzz) // 2
    from tensorforge.runtime.device.gpu.nvrtc import available

    if available():
        cuda = op_fuzz.fuzz(ops[:2], 0, budget_s=120, per_op=2, timeout_s=120, out=None,
                            target="cuda")  # fmt: skip
        assert not [r for r in cuda if r["outcome"] in BAD], op_fuzz.summarize(cuda)
        assert any(r["outcome"] == "compiled" for r in cuda)


def test_compiled_code_agrees_with_the_reference_executor_on_nan_and_infinities() -> None:
    """`--oracle reference --specials`: the compiled code against the numpy reference executor
    (the oracle of many tests), a NaN, +inf and -inf in every float input. The families it
    found (max pools' NaN and padding, a 0-d Erf/GatherND, ConvTranspose's dead taps) are
    among these ops."""
    ops = ["MaxPool", "GlobalMaxPool", "ConvTranspose", "Gelu", "GatherND", "ReduceMax", "Relu"]
    results = op_fuzz.fuzz(ops, 1, budget_s=240, per_op=3, timeout_s=120, out=None,
                           extra=("--oracle", "reference", "--specials"))  # fmt: skip
    assert len(results) == len(ops) * 3
    bad = [r for r in results if r["outcome"] in (*BAD, "ref-error")]
    assert not bad, op_fuzz.summarize(bad)
    assert sum(r["outcome"] == "match" for r in results) >= len(results) // 2
    case = make_case("Relu", 1, 0)
    case.feed = {"x": np.zeros((4, 5), np.float32), "n": np.arange(3)}
    specials = op_fuzz.with_specials(case, 0).feed
    assert {"nan", "inf", "-inf"} <= {str(v) for v in specials["x"].ravel()}
    assert np.array_equal(specials["n"], np.arange(3)) and not case.feed["x"].any()
