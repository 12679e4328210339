"""ONNX's backend node cases through the GPU back-end: every case the CPU back-end compiles and
passes (the set tests/compiler/frontend/test_onnx_node_suite_compiled.py asserts) must compile for
OpenCL and give the case's expected outputs (the suite's own data: independent of both
back-ends), run on PoCL. The cases' function-expanded variants, which the CPU suite also runs,
are left out here to keep the suite's time (all 458 passed on PoCL when they were added,
docs/graph.md)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

import tensorforge

sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
from node_suite_compiled import expected_passing  # noqa: E402
from test_onnx_node_suite import SUPPORTED, _cases, case_graph, mismatch  # noqa: E402


def _compiled_case(case):
    """(graph, feed, expected) when the CPU back-end passes the case, else None."""
    return case_graph(case) if case.name in expected_passing() else None


@functools.cache
def _results(op: str) -> tuple[int, list[str]]:
    passed, failed = 0, []
    for case in _cases().get(op, []):
        found = _compiled_case(case)
        if found is None:
            continue
        graph, feed, expected = found
        try:
            got = tensorforge.compile(graph, target="opencl").run(feed)
        except Exception as exc:  # reported by case name
            failed.append(f"{case.name}: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        wrong = mismatch(case, graph, got, expected)
        if wrong:
            failed.append(f"{case.name}: {wrong}")
            continue
        passed += 1
    return passed, failed


@pytest.mark.parametrize("op", SUPPORTED)
def test_node_cases_the_cpu_compiles_pass_on_opencl(op: str) -> None:
    passed, failed = _results(op)
    assert not failed, "\n".join(failed)


def test_opencl_node_suite_summary(capsys: pytest.CaptureFixture[str]) -> None:
    total = sum(_results(op)[0] for op in SUPPORTED)
    with capsys.disabled():
        print(f"\nONNX backend node cases on OpenCL (PoCL): {total} passed")
    assert total == len({name for name in expected_passing() if "_expanded" not in name})
