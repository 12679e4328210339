"""A candidate's area: Yosys ``synth_xilinx`` of the whole accelerator, cached, after a screen.

`synthesize` runs `tensorforge.hw.synth.synth_xilinx` on the exported top for a part (LUT, FF,
DSP48, BRAM36 from Yosys's cell counts: an estimate of Vivado's, close for DSP and BRAM). The
result is cached in a folder under a digest of the knobs that shape the RTL and the part: the
clock frequency does not change the netlist, so a sweep over clocks synthesizes once.

`screen` first rejects, in microseconds, a config that cannot fit whatever Yosys does: its GEMM
core alone needs more DSP48s (one per MAC, or one per two with DSP packing), or its SRAMs
(marked ``ram_style=block``) more block RAM (their shapes mapped with Xilinx's aspect ratios,
`hw.synth.bram36_for`, which matches Yosys on the presets) than the part has under its limits.
The block-RAM bound is not applied to parts with UltraRAM (the K26), where Yosys may place large
memories in URAM instead.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> big = HWConfig.preset("pynq").replace(log_block_out=5, log_wgt_buff_size=19,
    ...                                       log_acc_buff_size=18)
    >>> screen(big, "xc7z020")
    ['DSP >= 256 > 220 (the GEMM core alone)', 'BRAM36 >= 201 > 140 (the SRAMs alone)']
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...hw.config import HWConfig
from ...hw.synth import PARTS, gemm_dsps, place_and_route_ecp5, sram_bram36, synth_xilinx


@dataclass
class Area:
    """Resources of one candidate on its part."""

    luts: float
    ffs: float
    dsps: float
    bram36: float
    #: "yosys" (synthesized) or "screen" (the lower bounds of `screen`: LUT/FF unknown, 0)
    source: str
    seconds: float = 0.0
    memories: dict[str, float] = field(default_factory=dict)
    urams: float = 0  # UltraRAM blocks (UltraScale+ parts that have them)

    def usage(self) -> dict[str, float]:
        return {"LUT": self.luts, "FF": self.ffs, "DSP": self.dsps, "BRAM36": self.bram36,
                "URAM": self.urams}  # fmt: skip

    def over(self, part: str, limits: Mapping[str, float] | None = None) -> list[str]:
        """The resources this area needs more of than `limits` (shares) of the part allow."""
        avail = part_capacity(part)
        out = []
        for r, used in self.usage().items():
            cap = avail[r] * (limits or {}).get(r, 1.0)
            if used > cap:
                out.append(f"{r} {used:g} > {cap:g}")
        return out

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Area:
        return Area(**{k: data[k] for k in ("luts", "ffs", "dsps", "bram36", "source")},
                    seconds=float(data.get("seconds", 0.0)),
                    memories=dict(data.get("memories", {})),
                    urams=data.get("urams", 0))  # fmt: skip


def part_capacity(part: str) -> dict[str, int]:
    """Each resource of a part (the keys of `Area.usage`)."""
    p = PARTS[part]
    return {"LUT": p.luts, "FF": p.ffs, "DSP": p.dsps, "BRAM36": p.bram36, "URAM": p.urams}


def screen(cfg: HWConfig, part: str, limits: Mapping[str, float] | None = None) -> list[str]:
    """Why `cfg` cannot fit `part` under `limits` by lower bounds alone ([] if it may fit)."""
    p = PARTS[part]
    limits = limits or {}
    reasons = []
    dsps, dsp_cap = gemm_dsps(cfg), p.dsps * limits.get("DSP", 1.0)
    if dsps > dsp_cap:
        reasons.append(f"DSP >= {dsps} > {dsp_cap:g} (the GEMM core alone)")
    brams, bram_cap = sum(sram_bram36(cfg).values()), p.bram36 * limits.get("BRAM36", 1.0)
    if brams > bram_cap and not p.urams:  # with UltraRAM, Yosys may put SRAMs there instead
        reasons.append(f"BRAM36 >= {brams:g} > {bram_cap:g} (the SRAMs alone)")
    return reasons


def screen_area(cfg: HWConfig) -> Area:
    """The lower bounds `screen` uses, as an `Area` (LUT and FF unknown: 0)."""
    return Area(0, 0, gemm_dsps(cfg), sum(sram_bram36(cfg).values()), "screen",
                memories=sram_bram36(cfg))  # fmt: skip


def rtl_key(cfg: HWConfig, part: str) -> str:
    """The cache key of a synthesis: the knobs that shape the netlist (not name or clock), and
    the part."""
    knobs = {k: v for k, v in cfg.to_dict().items() if k not in ("name", "clock_mhz")}
    text = json.dumps({"knobs": knobs, "part": part}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def synthesize(cfg: HWConfig, part: str, cache_dir: str | Path | None = None) -> Area:
    """The whole top of `cfg` synthesized for `part` by Yosys (cached in `cache_dir`).

    Raises:
        hw.synth.SynthError: Yosys failed (its log's tail) or is missing.
    """
    cache = Path(cache_dir) / f"{rtl_key(cfg, part)}.json" if cache_dir is not None else None
    if cache is not None and cache.exists():
        try:
            return Area.from_json(json.loads(cache.read_text()))
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache entry: synthesize again
    report = synth_xilinx(cfg, "top", part)  # in a temporary folder
    area = Area(report.luts, report.ffs, report.dsps, report.bram36, "yosys",
                round(report.seconds, 1), report.memories, report.urams)  # fmt: skip
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(area.to_json(), indent=1))
        tmp.replace(cache)
    return area


def ecp5_gemm_fmax(cfg: HWConfig, cache_dir: str | Path | None = None) -> float:
    """Fmax (MHz) of `cfg`'s GEMM core placed and routed on an ECP5 LFE5U-85F by the open flow
    (`hw.synth.place_and_route_ecp5`), cached like `synthesize`: a check of the clock knob on
    real routing, on another FPGA family than the Xilinx parts (so a hint, not a guarantee).

    Raises:
        hw.synth.SynthError: a tool failed (a core too large for the device, say).
    """
    cache = None
    if cache_dir is not None:
        cache = Path(cache_dir) / f"ecp5_gemm_{rtl_key(cfg, 'LFE5U-85F')}.json"
        if cache.exists():
            try:
                return float(json.loads(cache.read_text())["fmax_mhz"])
            except (ValueError, KeyError, TypeError):
                pass
    fmax = place_and_route_ecp5(cfg, "gemm").fmax_mhz  # in a temporary folder
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"fmax_mhz": fmax}))
    return fmax
