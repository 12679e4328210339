"""The model files shipped in the onnx package's backend test data (torch exports at opset 6,
hand-written sequence and Expand models, the classic model zoo CNNs in their light form) through
`tensorforge.compile` and native code, against the outputs recorded with them; each batch of
models in its own process. The passing set is asserted exactly (model_data_compiled.txt):
a regression fails, and so does an improvement nobody recorded
(`python model_data_compiled.py --update`)."""

from __future__ import annotations

import functools
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from model_data_compiled import expected_passing, run_all  # noqa: E402
from node_suite_compiled import assert_clean, assert_recorded  # noqa: E402

# the three tests share one run of every model (`results`): one worker runs them all
pytestmark = [pytest.mark.timeout(1200), pytest.mark.xdist_group("onnx_model_data")]


@functools.cache
def results() -> dict[str, tuple[str, str]]:
    return run_all()


def test_no_model_compiles_to_a_wrong_answer_an_error_or_a_crash() -> None:
    assert_clean(results())


def test_the_passing_models_are_exactly_the_recorded_ones() -> None:
    assert_recorded(
        results(), expected_passing(), str(Path(__file__).parent / "model_data_compiled.py")
    )


def test_every_torch_opset6_export_and_every_light_zoo_model_passes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What is refused is only what a compiled model cannot hold: a symbolic dim, string ops,
    training-only Gradient (a shape that is a graph input runs in a data-dependent tail)."""
    counts = Counter(s for s, _ in results().values())
    kinds = {n.split("/")[0] for n, (s, _) in results().items() if s != "pass"}
    with capsys.disabled():
        print(f"\nonnx's shipped model data through compiled CPU code: {dict(counts)}")
    failing = {n: r for n, r in sorted(results().items()) if r[0] != "pass"}
    assert kinds <= {"simple"}, failing
