"""ONNX's backend node cases through `tensorforge.compile` and native code (not the reference
executor), with the cases' function-expanded variants (the op as a graph of primitive ops), each
batch of cases in its own process so that a crash is a failing case, not a lost run. The set of
passing cases is asserted exactly (node_suite_compiled.txt): a regression fails, and so does an
improvement nobody recorded (`python node_suite_compiled.py --update`)."""

from __future__ import annotations

import functools
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from node_suite_compiled import (  # noqa: E402
    assert_clean,
    assert_recorded,
    expected_passing,
    run_isolated,
    supported_cases,
)

# the first test runs all 1810 cases, 471 of them function-expanded variants (about 10 minutes
# on two busy cores), past the default 600 s
# (the three tests share one run of every case, `results`: one worker runs them all)
pytestmark = [pytest.mark.timeout(1800), pytest.mark.xdist_group("node_suite_compiled")]


@functools.cache
def results() -> dict[str, tuple[str, str]]:
    return run_isolated(supported_cases())


def test_no_case_compiles_to_a_wrong_answer_an_error_or_a_crash() -> None:
    assert_clean(results())


def test_the_passing_cases_are_exactly_the_recorded_ones() -> None:
    assert_recorded(
        results(), expected_passing(), str(Path(__file__).parent / "node_suite_compiled.py")
    )


def test_compiled_node_suite_summary(capsys: pytest.CaptureFixture[str]) -> None:
    counts = Counter(s for s, _ in results().values())
    refused = Counter(d.split(":")[0] for s, d in results().values() if s == "refused")
    with capsys.disabled():
        print(
            f"\nONNX backend node cases through compiled CPU code: {counts['pass']} passed, "
            f"{counts['refused']} refused ({dict(refused)}), of {len(results())}"
        )
    assert counts["pass"] == len(expected_passing())
