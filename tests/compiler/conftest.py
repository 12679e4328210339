"""Shared helpers for compiler tests: operator definitions live in compiler_ops.py next to this."""

from __future__ import annotations

import sys
from pathlib import Path

# compiler_ops.py is a plain helper module shared by the test folders below this one.
sys.path.insert(0, str(Path(__file__).parent))
