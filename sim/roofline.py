"""Roofline of timing-model runs: operational intensity vs achieved GOPS (cf. TVM's Fig. 10).

The compute roof is the config's peak (``HWConfig.peak_gops``: one GEMM step per cycle); the
bandwidth roof is one AXI port at one beat per cycle (``TimingParams.peak_bandwidth_gbs``). A
dashed line shows the bandwidth a DMA engine sustains on long transfers under the model (each
burst pays the read latency). matplotlib is imported only by ``plot_roofline``.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> from tensorforge.hw.isa import FinishInsn
    >>> from tensorforge.sim.timing import simulate_timing
    >>> p = roofline_point("empty", simulate_timing([FinishInsn()], HWConfig.preset("pynq")))
    >>> p.gops
    0.0
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..hw.config import HWConfig
from .timing import TimingParams, TimingResult


@dataclass(frozen=True)
class RooflinePoint:
    """One kernel run: GEMM ops, DRAM bytes and cycles; ``group`` picks its marker."""

    name: str
    ops: int
    dram_bytes: int
    cycles: int
    clock_mhz: float
    group: str = ""

    @property
    def intensity(self) -> float:
        """Operational intensity: ops per DRAM byte."""
        return self.ops / self.dram_bytes if self.dram_bytes else 0.0

    @property
    def gops(self) -> float:
        return self.ops * self.clock_mhz * 1e6 / self.cycles / 1e9 if self.cycles else 0.0


def roofline_point(name: str, result: TimingResult, group: str = "") -> RooflinePoint:
    return RooflinePoint(
        name, result.ops, result.dram_bytes, result.cycles, result.params.clock_mhz, group
    )


def sustained_bandwidth_gbs(params: TimingParams) -> float:
    """GB/s of a long read under the model: full bursts, ``max_outstanding_reads`` in flight, so
    one per ``max(beats, (latency + beats) / max_outstanding_reads)`` cycles."""
    beats = params.burst_bytes // params.bus_bytes
    period = max(beats, (params.dram_read_latency + beats) / params.max_outstanding_reads)
    return params.peak_bandwidth_gbs * beats / period


def attainable_gops(intensity: float, cfg: HWConfig, params: TimingParams) -> float:
    """min(compute roof, bandwidth roof x intensity)."""
    return min(cfg.peak_gops, params.peak_bandwidth_gbs * intensity)


def plot_roofline(
    points: list[RooflinePoint],
    cfg: HWConfig,
    params: TimingParams | None = None,
    path: str | Path = "roofline.png",
    title: str | None = None,
) -> Path:
    """Draw the roofs and the points on log-log axes; write a PNG; return its path.

    Raises:
        ImportError: when matplotlib is not installed (with the pip command to install it).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plot_roofline needs matplotlib: pip install matplotlib") from None
    params = params or TimingParams.for_config(cfg)
    xs = [p.intensity for p in points if p.intensity > 0] or [1.0]
    ridge = cfg.peak_gops / params.peak_bandwidth_gbs
    lo, hi = min(xs + [ridge]) / 4, max(xs + [ridge]) * 4
    grid = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    roof = f"roof: {cfg.peak_gops:.1f} GOPS, {params.peak_bandwidth_gbs:.2f} GB/s"
    ax.plot(grid, [attainable_gops(x, cfg, params) for x in grid], "k-", lw=2, label=roof)
    bw = sustained_bandwidth_gbs(params)
    ax.plot(grid, [min(cfg.peak_gops, bw * x) for x in grid], "k--", lw=1,
            label=f"sustained DMA bandwidth {bw:.2f} GB/s")  # fmt: skip
    markers = "os^vD"
    groups = list(dict.fromkeys(p.group for p in points))
    for g, group in enumerate(groups):
        mine = [p for p in points if p.group == group]
        ax.scatter([p.intensity for p in mine], [p.gops for p in mine], marker=markers[g % 5],
                   label=group or None, zorder=3)  # fmt: skip
        for p in mine:
            ax.annotate(p.name, (p.intensity, p.gops), textcoords="offset points",
                        xytext=(4, 4 if g % 2 == 0 else -10), fontsize=7)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (ops / DRAM byte)")
    ax.set_ylabel("achieved GOPS")
    ax.set_title(title or f"Roofline: {cfg.name} ({cfg.bitstream_name}) at {cfg.clock_mhz:g} MHz")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
