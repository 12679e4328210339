"""Fixtures of the auto-tuner's tests: one build pool per test module."""

from __future__ import annotations

import pytest

from tensorforge.compiler.autotune.measure import Builder


@pytest.fixture(scope="module")
def builder():
    """Two build workers (started on first use, closed after the module)."""
    b = Builder(2, timeout=120)
    yield b
    b.close()
