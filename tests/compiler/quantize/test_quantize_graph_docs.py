"""The graph-level quantization docstrings and the example of docs/quantization.md run and print
what they claim."""

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
