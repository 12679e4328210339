"""The graph layer's docstring examples and the user guide's example run."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

MODULES = [
    "tensorforge.compiler.graph.ir",
    "tensorforge.compiler.graph.printer",
    "tensorforge.compiler.graph.reference",
    "tensorforge.compiler.frontend.onnx_builders",
]


@pytest.mark.parametrize("name", MODULES)
def test_graph_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_graph_user_guide_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    guide = Path(__file__).parents[3] / "docs" / "graph.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), re.S)
    assert blocks
    has_torch = importlib.util.find_spec("torch") is not None
    for code in blocks:
        if "import torch" in code and not has_torch:
            continue  # the optional PyTorch example; the torch frontend's tests say they skip
        exec(compile(code, str(guide), "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("graph small_cnn(%x: float32[1, 3, 32, 32]) {")
    assert re.search(r"7 fused groups, arena \d+ bytes \(naive \d+ bytes\)", out)
    assert "float8_e4m3fn [[5 5 5]\n [0 0 0]]" in out  # the narrow types' example
