"""Auto-tuning (the TVM paper's section 5): config spaces declared next to each operator's
schedule, tasks extracted from a model, measurement in worker processes on a runner (this CPU,
the accelerator's cycle model or RTL, a Dask cluster), an XGBoost cost model guiding simulated
annealing, and JSON-lines logs that `tensorforge.compile(..., tuning_log=...)` applies.

See docs/autotune.md. The names below load their modules on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "ConfigSpace": "space",
    "Knob": "space",
    "Task": "task",
    "extract_tasks": "driver",
    "tune_tasks": "driver",
    "Builder": "measure",
    "LocalRunner": "measure",
    "SimRunner": "measure",
    "make_runner": "measure",
    "measure": "measure",
    "make_tuner": "tuner",
    "TuningLog": "log",
    "read_log": "log",
    "load_best": "log",
    "ApplyBest": "dispatch",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
