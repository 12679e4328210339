"""The design-space exploration's picture: latency against DSP and against BRAM.

Every candidate with a latency is a point (hollow when it does not fit the part); the Pareto
front of each resource is a highlighted staircase; presets are stars with their names; the
part's capacity is a dashed line.
"""

from __future__ import annotations

from pathlib import Path

from ..autotune.plot import png_path, pyplot, save_png
from .area import part_capacity
from .sweep import _AREA_KEYS, DseResult, pareto_front


def plot_front(result: DseResult, output: str | Path, resources: tuple[str, ...] = ("DSP", "BRAM36")
               ) -> Path:  # fmt: skip
    """Draw latency against each of `resources`, one panel each, into a PNG.

    Raises:
        ValueError: no candidate has a latency, or `output` is a folder.
        ImportError: matplotlib is missing (naming the extra).
    """
    output = png_path(output)
    points = [r for r in result.records if r.get("latency_ms") and "area" in r]
    if not points:
        raise ValueError("no candidate has a measured latency to plot")
    plt = pyplot()
    cap = part_capacity(result.part)
    fig, axes = plt.subplots(1, len(resources), figsize=(5.2 * len(resources), 4.4), squeeze=False)
    for ax, res in zip(axes[0], resources, strict=True):
        key = _AREA_KEYS[res]
        fits = [r for r in points if r.get("fits")]
        unfit = [r for r in points if not r.get("fits")]
        ax.scatter([r["area"][key] for r in fits], [r["latency_ms"] for r in fits], s=22,
                   color="tab:blue", label="fits the part", zorder=2)  # fmt: skip
        if unfit:
            ax.scatter([r["area"][key] for r in unfit], [r["latency_ms"] for r in unfit], s=22,
                       facecolors="none", edgecolors="grey", label="does not fit",
                       zorder=2)  # fmt: skip
        front = pareto_front(result.records, res)
        if front:
            ax.plot([r["area"][key] for r in front], [r["latency_ms"] for r in front],
                    color="tab:red", drawstyle="steps-post", linewidth=1.6, marker="o",
                    markersize=5, label="Pareto front", zorder=3)  # fmt: skip
        for r in points:
            if r.get("preset"):
                ax.scatter([r["area"][key]], [r["latency_ms"]], marker="*", s=180,
                           color="gold", edgecolors="black", zorder=4)  # fmt: skip
                ax.annotate(r["preset"], (r["area"][key], r["latency_ms"]),
                            textcoords="offset points", xytext=(6, 6), fontsize=8)  # fmt: skip
        ax.axvline(cap[res], color="black", linestyle="--", linewidth=0.8,
                   label=f"{result.part}: {cap[res]} {res}")  # fmt: skip
        ax.set_xlabel(f"{res} (Yosys synth_xilinx)")
        ax.set_ylabel("accelerator latency (ms, tuned)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"design-space exploration on {result.part}: {len(points)} candidates measured")
    return save_png(fig, output)


__all__ = ["plot_front"]
