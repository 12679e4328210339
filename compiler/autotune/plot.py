"""Tuning curves: best-so-far against trials, one line per task (and tuner), as a PNG.

The y axis is the speedup of the best config found so far over the task's default config (or,
when the default was not measured, over the first successful trial), so tasks of different
sizes and units (seconds, cycles) share one plot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def curves(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str], np.ndarray]:
    """{(task key, tuner): best-so-far cost after each trial} in log order (inf before the
    first success)."""
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for rec in records:
        cost = rec.get("cost")
        ok = not rec.get("error") and cost is not None
        by[(str(rec["task"]), str(rec.get("tuner") or ""))].append(float(cost) if ok else np.inf)
    return {k: np.minimum.accumulate(np.array(v)) for k, v in by.items()}


def _tasks(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One `Task` per task key of the log (None where the record names no valid task)."""
    from .task import Task, TaskError

    out: dict[str, Any] = {}
    for rec in records:
        if rec["task"] not in out:
            try:
                out[rec["task"]] = Task(rec["template"], rec["workload"], rec["target"])
            except (TaskError, ValueError):
                out[rec["task"]] = None
    return out


def _baseline(records: Sequence[dict[str, Any]], key: str, task: Any) -> float | None:
    """The default config's cost of a task when logged, else its first successful cost."""
    default = task.space.default.values if task is not None else None
    first = None
    for rec in records:
        if rec["task"] != key or rec.get("error") or rec.get("cost") is None:
            continue
        first = first if first is not None else rec["cost"]
        if rec["config"] == default:
            return float(rec["cost"])
    return first


def plot_log(records: Sequence[dict[str, Any]], output: str | Path, title: str = "") -> Path:
    """Draw the tuning curves of `records` (from `read_log`) into a PNG file.

    Raises:
        ValueError: when no record has a successful trial, or `output` is a folder.
        ImportError: when matplotlib is missing (it names the extra to install).
    """
    output = png_path(output)
    plt = pyplot()
    records = list(records)
    lines = curves(records)
    tasks = _tasks(records)
    fig, ax = plt.subplots(figsize=(8, 4.8))
    drawn = 0
    for (key, tuner), best in sorted(lines.items()):
        task = tasks.get(key)
        base = _baseline(records, key, task)
        if base is None or not np.isfinite(best).any():
            continue
        speedup = np.where(np.isfinite(best), base / best, np.nan)
        name = (task.describe() if task is not None else key[:60]) + (
            f" ({tuner})" if tuner else ""
        )
        ax.plot(
            np.arange(1, len(best) + 1), speedup, label=name, linewidth=1.4, drawstyle="steps-post"
        )
        drawn += 1
    if not drawn:
        plt.close(fig)
        raise ValueError("the log has no successful trial to plot")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("trials")
    ax.set_ylabel("best so far: speedup over the default config")
    ax.set_title(title or "tuning curves")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return save_png(fig, output)


def png_path(output: str | Path) -> Path:
    """`output` as a Path, refused when it is a folder."""
    output = Path(output)
    if output.is_dir():
        raise ValueError(f"{output} is a folder; give the PNG file to write")
    return output


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed).

    Raises:
        ImportError: naming the extra to install.
    """
    from tensorforge.extras import require

    require("matplotlib", "plotting").use("Agg")
    return require("matplotlib.pyplot", "plotting")


def save_png(fig: Any, output: Path) -> Path:
    """Write `fig` to `output` (through a temporary file, so a failure leaves no half PNG)."""
    plt = pyplot()
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp.png")
    try:
        fig.savefig(tmp, dpi=120)
        tmp.replace(output)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return output
