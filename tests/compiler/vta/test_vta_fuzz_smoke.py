"""A small run of the accelerator fuzzer (benchmarks/vta_fuzz.py): random float ONNX models
compiled for the accelerator under random configs and options, in a worker process, must equal
the int8 graph's numpy reference bit for bit on `sim`, `cyclesim` must equal `sim`, and invalid
options must be refused by name; its cases are deterministic and cover what it promises."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks"))

import vta_fuzz  # noqa: E402
from vta_fuzz_cases import make_case  # noqa: E402


def test_vta_cases_are_deterministic_and_cover_layers_configs_and_options() -> None:
    first, again = make_case(4, 7), make_case(4, 7)
    assert first.model.SerializeToString() == again.model.SerializeToString()
    assert all(np.array_equal(first.feed[k], again.feed[k]) for k in first.feed)
    assert first.config == again.config and first.target() == again.target()
    ops: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for index in range(60):
        case = make_case(0, index)
        ops.update(n.op_type for n in case.model.graph.node)
        rank = len(next(iter(case.feed.values())).shape)
        seen[f"rank {rank}"] += 1
        seen["preset" if case.preset else "varied config"] += 1
        seen["refusal"] += bool(case.expect_refusal)
        seen.update(f"-{k}={v}" for k, v in case.options.items())
    wanted = {"Conv", "Gemm", "MatMul", "Add", "Relu", "MaxPool", "Concat"}
    assert wanted <= set(ops), wanted - set(ops)
    assert ops["Flatten"] + ops["Reshape"], ops
    kinds = ("rank 2", "rank 3", "rank 4", "preset", "varied config", "refusal", "-mode=mul",
             "-mode=shift", "-depthwise=accel", "-vthreads=1", "-weights=per-channel")  # fmt: skip
    assert all(seen[key] for key in kinds), seen


def test_a_difference_of_one_int8_step_is_a_mismatch_and_rounding_is_not() -> None:
    want = np.array([[0.5, -0.25]], np.float32)
    assert vta_fuzz._first_difference(want.copy(), want) is None
    rounded = np.nextafter(want, np.float32(1))
    assert vta_fuzz._first_difference(rounded, want, vta_fuzz.ROUNDING) is None
    assert vta_fuzz._first_difference(rounded, want) is not None  # not bit for bit
    stepped = want + np.float32(0.5 / 127)
    assert "2/2 differ" in vta_fuzz._first_difference(stepped, want, vta_fuzz.ROUNDING)


def test_a_short_vta_fuzz_run_finds_nothing() -> None:
    results = vta_fuzz.fuzz(seed=3, cases=6, max_nodes=5, timeout_s=120, keep=False)
    assert len(results) == 6
    bad = [r for r in results if r["outcome"] in vta_fuzz.DEFECTS]
    assert not bad, vta_fuzz.summarize(results)
    assert sum(bool(r["outcome"] == "match" and r.get("cycles")) for r in results) >= 3, results
