"""The graph-level quantization docstrings and the examples of docs/quantization.md (quantize and
partition; compile the int8 graph for the CPU) run and print what they claim."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

MODULES = [
    "tensorforge.compiler.quantize.graph",
    "tensorforge.compiler.quantize.residual",
]
GUIDE = Path(__file__).resolve().parents[3] / "docs" / "quantization.md"


@pytest.mark.parametrize("name", MODULES)
def test_graph_quantize_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_graph_level_guide_example_prints_what_the_guide_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = GUIDE.read_text()
    section = text[text.index("## Graph-level quantization") :]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    shown = re.search(r"\nprints\n\n```\n(.*?)```", section, re.S).group(1)
    exec(compile(code, str(GUIDE), "exec"), {})
    assert capsys.readouterr().out == shown


def test_cpu_guide_example_compiles_the_int8_graph_and_prints_what_the_guide_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = GUIDE.read_text()
    section = text[text.index("## int8 graphs on the CPU") :]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    shown = re.search(r"\nprints\n\n```\n(.*?)```", section, re.S).group(1)
    exec(compile(code, str(GUIDE), "exec"), {})  # asserts the module equals run_graph
    assert capsys.readouterr().out == shown
