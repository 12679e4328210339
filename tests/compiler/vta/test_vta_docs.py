"""The accelerator compiler's docstring examples and its user guide's example run."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

MODULES = [
    "tensorforge.compiler.vta.codegen",
    "tensorforge.compiler.vta.tile",
    "tensorforge.compiler.vta.intrin",
    "tensorforge.compiler.vta.kernel",
    "tensorforge.compiler.vta.layout",
    "tensorforge.compiler.vta.pool",
    "tensorforge.compiler.vta.reference",
    "tensorforge.compiler.vta.schedule",
]


@pytest.mark.parametrize("name", MODULES)
def test_vta_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_vta_compiler_guide_example_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    guide = Path(__file__).parents[3] / "docs" / "vta_compiler.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), re.S)
    assert len(blocks) == 1
    code = blocks[0].replace("/tmp/conv.tfprog", str(tmp_path / "conv.tfprog"))
    exec(compile(code, str(guide), "exec"), {})
    assert "instructions" in capsys.readouterr().out
    assert (tmp_path / "conv.tfprog").stat().st_size > 0
