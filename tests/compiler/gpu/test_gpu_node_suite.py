"""ONNX's backend node cases through the GPU back-end: every case the CPU back-end compiles and
passes (the set tests/compiler/frontend/test_onnx_node_suite_compiled.py asserts) must compile for
OpenCL and give the case's expected outputs (the suite's own data: independent of both
back-ends), run on PoCL."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorforge
from tensorforge.compiler.frontend import from_onnx

sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
from node_suite_compiled import expected_passing  # noqa: E402
from test_onnx_node_suite import SUPPORTED, _array, _cases, _lift_opset, _shape_inputs  # noqa: E402


def _compiled_case(case):
    """(graph, feed, expected) when the CPU back-end passes the case, else None."""
    if case.name not in expected_passing():
        return None
    ((inputs, expected),) = case.data_sets
    inputs, expected = [_array(v) for v in inputs], [_array(v) for v in expected]
    model = _lift_opset(case.model)
    consts = _shape_inputs(model, list(inputs))
    graph = from_onnx(model, constant_inputs=consts)
    names = [v.name for v in model.graph.input]
    feed = {n: v for n, v in zip(names, inputs, strict=False) if n not in consts}
    return graph, feed, expected


@functools.cache
def _results(op: str) -> tuple[int, list[str]]:
    passed, failed = 0, []
    for case in _cases().get(op, []):
        found = _compiled_case(case)
        if found is None:
            continue
        graph, feed, expected = found
        try:
            module = tensorforge.compile(graph, target="opencl")
            got = module.run(feed)
            for name, want in zip(graph.outputs, expected, strict=True):
                assert got[name].dtype == want.dtype, f"dtype {got[name].dtype} != {want.dtype}"
                np.testing.assert_allclose(got[name], want, rtol=case.rtol, atol=case.atol)
        except Exception as exc:  # reported by case name
            failed.append(f"{case.name}: {type(exc).__name__}: {str(exc)[:300]}")
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
    assert total == len(expected_passing())
