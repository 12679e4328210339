"""The examples in compiler.quantize's docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "tensorforge.compiler.quantize",
    "tensorforge.compiler.quantize.calibrate",
    "tensorforge.compiler.quantize.scheme",
    "tensorforge.compiler.quantize.requant",
    "tensorforge.compiler.quantize.reference",
]


@pytest.mark.parametrize("name", MODULES)
def test_quantize_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
