"""The CPU back-end's docstring examples and the user guide (docs/cpu_backend.md) run."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

MODULES = [
    "tensorforge.compiler.target",
    "tensorforge.compiler.build",
    "tensorforge.runtime.ndarray",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_cpu_backend_guide_examples_run() -> None:
    guide = Path(__file__).parents[3] / "docs" / "cpu_backend.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), re.S)
    assert len(blocks) == 3
    namespace: dict = {}
    for code in blocks:  # the second block reuses the first one's schedule
        exec(compile(code, str(guide), "exec"), namespace)
    assert namespace["y"].shape == (100, 30)
    assert "qconv" in namespace["asm"]  # the third: an integer conv's assembly
