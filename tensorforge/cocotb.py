"""A cocotb kit for hardware-software tests of the exported accelerator (docs/hardware.md).

`Testbench` wraps a cocotb ``dut`` of the exported top (``tensorforge hw verilog --top top``):
it starts the clock, resets the core (``rst`` is active high and synchronous), puts a
cocotbext-axi RAM model behind the four AXI4 masters and an AXI-Lite master on the registers,
and runs program images or whole compiled modules through the ``pynq`` board driver
(`runtime.device.vta.pynq`) over a board model of that bench, so a test exercises the same
driver code a board runs. `check_program` compares a run with the functional simulator (outputs
bit for bit) and the cycle model (CYCLES, with the RAM model's latencies and the board's buffer
placement).

A user test is a few lines::

    import cocotb
    from tensorforge.cocotb import Testbench
    from tensorforge.demo import build_matmul, pack_inp

    @cocotb.test()
    async def matmul_matches_the_simulators(dut):
        tb = Testbench(dut, "tiny")
        await tb.start()
        k = build_matmul(tb.config, 16, 8, 8)
        await tb.check_program(k.image, {"A": pack_inp(tb.config, k.a)})

and `run_tests("test_mine", "tiny")` (or ``tensorforge hw testbench``'s runner) builds the
Verilog and runs it under Icarus or Verilator.

Needs cocotb and cocotbext-axi (the ``dev`` extra, or ``pip install cocotb cocotbext-axi``).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np

from .hw.config import HWConfig
from .hw.regmap import REGISTERS, Ctrl, LaunchError, LaunchResult, Status

#: the clock period of the bench (ns)
CLOCK_NS = 10
#: clock cycles after START before a module's call that the cycle model cannot run is abandoned
#: as hung, unless `Testbench(max_cycles=)` says otherwise; a hung core simulates at about 2,000
#: cycles/s under Icarus, so this is a minute or two. Every other launch's default limit comes
#: from the cycle model (`program_cycle_limit`, `stream_cycle_limit`).
MAX_CYCLES = 200_000
#: the default cycle limit of a launch whose program the cycle model rejects (a deadlock, no
#: FINISH): the RTL stops at an erroneous instruction within a few cycles, and hangs otherwise
REJECTED_CYCLES = 20_000
#: the bench's DRAM: the masters' whole 32-bit address space
DRAM_BYTES = 1 << 32


def attach_memory(dut: Any, mem: Any, log_level: int = logging.WARNING) -> Any:
    """Put the DRAM model `mem` behind the top's AXI4 masters; the AXI-Lite master of its
    registers. The bus models log at `log_level` (``logging.INFO`` shows every transaction:
    two lines per poll of CTRL)."""
    from cocotbext.axi import (
        AxiLiteBus,
        AxiLiteMaster,
        AxiRamRead,
        AxiRamWrite,
        AxiReadBus,
        AxiWriteBus,
    )

    # Before the models exist: each logs its signals' widths (about 130 lines) as it starts.
    for port in ("s_axil", "m_axi_fetch", "m_axi_load", "m_axi_compute", "m_axi_store"):
        logging.getLogger(f"cocotb.{dut._name}.{port}").setLevel(log_level)
    # cocotbext-axi 0.1.28 calls APIs cocotb 2 deprecates: warnings on every run, none ours.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi")
    for port in ("fetch", "load", "compute"):
        bus = AxiReadBus.from_prefix(dut, f"m_axi_{port}", bus_separator="__")
        AxiRamRead(bus, dut.clk, dut.rst, mem=mem)
    bus = AxiWriteBus.from_prefix(dut, "m_axi_store", bus_separator="__")
    AxiRamWrite(bus, dut.clk, dut.rst, mem=mem)
    return AxiLiteMaster(
        AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk, dut.rst
    )


class Testbench:
    """The exported top under cocotb, with DRAM, registers and the board driver.

    Args:
        dut: the cocotb handle of the exported top (``tf_top_<config>``).
        config: the HWConfig it was exported for (a preset name, JSON path or HWConfig).
        timeout_s: wall-clock seconds one launch may take (simulation is slow).
        max_cycles: clock cycles after START before a launch is abandoned as hung (a program
            that deadlocks on its tokens never sets DONE), checked at each poll of CTRL; by
            default the cycle model's count decides it (`program_cycle_limit`,
            `stream_cycle_limit`; a module's call: `run_module`).
    """

    def __init__(self, dut: Any, config: str | HWConfig, timeout_s: float = 600.0,
                 max_cycles: int | None = None) -> None:  # fmt: skip
        from cocotbext.axi.sparse_memory import SparseMemory

        if timeout_s <= 0 or (max_cycles is not None and max_cycles <= 0):
            raise ValueError(f"timeout_s and max_cycles must be positive, not {timeout_s!r}, "
                             f"{max_cycles!r}")  # fmt: skip
        self.dut = dut
        self.config = HWConfig.load(config)
        self.timeout_s = float(timeout_s)
        self.max_cycles = max_cycles
        self._limit = max_cycles or MAX_CYCLES  # of the launch under way
        self._started_ns: float | None = None  # simulation time of the last START
        self._unfinished: str | None = None  # how the last launch ended, unless with DONE
        self._verdict: str | None = None  # the cycle model's, for a START written by hand
        self.mem = SparseMemory(DRAM_BYTES)
        self.master: Any = None
        self.board: Any = None
        self.flushes = 0

    async def start(self) -> None:
        """Start the clock, attach the memory and the register master, reset the core."""
        import cocotb
        from cocotb.clock import Clock
        from cocotb.task import resume

        from .runtime.device.vta.pynq_model import BoardModel

        if self.master is not None:  # a second clock and RAM model would drive the same pins
            raise RuntimeError("the bench is already started: `await tb.reset()` resets the core")
        cocotb.start_soon(Clock(self.dut.clk, CLOCK_NS, unit="ns").start())
        self.master = attach_memory(self.dut, self.mem)
        await self.reset()
        self.board = BoardModel(resume(self._read32), resume(self._write32), self.peek,
                                self._flush)  # fmt: skip

    async def reset(self) -> None:
        """Reset the core (``rst`` for 3 cycles) and the bus models; DRAM keeps its contents.
        Needed before the next launch after one that stopped on ERROR or hung: the core still
        runs the rest of that program in the background (docs/hardware.md, Errors)."""
        from cocotb.triggers import ClockCycles

        self._master()
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        self._started_ns = self._unfinished = self._verdict = None

    # ---- stimulus ------------------------------------------------------------------------------

    async def read_reg(self, name: str) -> int:
        """A register of hw/regmap.py by name (``tensorforge hw regs`` lists them)."""
        return await self._read32(_offset(name))

    async def write_reg(self, name: str, value: int) -> None:
        """Write a register by name; the core ignores writes to a read-only one, as on a board.
        A START written to CTRL gets `stream_cycle_limit`'s limit for the stream that INSN_ADDR
        and INSN_COUNT name (unless `max_cycles`), as `launch` does.

        Raises:
            KeyError: an unknown register name. ValueError: a value that is not 32 bits.
        """
        offset = _offset(name)
        if not isinstance(value, Integral) or not 0 <= value < 1 << 32:
            raise ValueError(f"register {name} value must be an int from 0 to 0xFFFFFFFF, "
                             f"not {value!r}")  # fmt: skip
        if offset == REGISTERS["CTRL"].offset and value & Ctrl.START:
            lo, hi, count = [await self.read_reg(r) for r in ("INSN_ADDR_LO", "INSN_ADDR_HI",
                                                               "INSN_COUNT")]  # fmt: skip
            self._verdict, limit = self.stream_cycle_limit(hi << 32 | lo, count)
            self._limit = self.max_cycles or limit
        await self._write32(offset, int(value))

    async def _read32(self, offset: int) -> int:
        """A register read; a CTRL read past the cycle limit after START raises LaunchError."""
        value = int(await self._master().read_dword(offset))
        if offset != REGISTERS["CTRL"].offset or self._started_ns is None:
            return value
        if value & (Ctrl.DONE | Ctrl.ERROR):
            self._started_ns = self._verdict = None
            self._unfinished = "stopped with ERROR" if value & Ctrl.ERROR else None
            return value
        cycles = self.cycles_since_start()
        if cycles > self._limit:
            self._started_ns = None
            self._unfinished = "hung"
            status = int(await self.master.read_dword(REGISTERS["STATUS"].offset))
            name = Status(status).name if status in Status._value2member_map_ else str(status)
            verdict, self._verdict = self._verdict, None
            raise LaunchError(
                f"the accelerator (RTL under cocotb) hung: no DONE after {cycles} clock cycles "
                f"(limit {self._limit}, Testbench(max_cycles=)); state: CTRL={_ctrl(value)}, "
                f"STATUS={name}" + (f"; the cycle model: {verdict}" if verdict else "")
            )
        return value

    async def _write32(self, offset: int, value: int) -> None:
        from cocotb.utils import get_sim_time

        start = offset == REGISTERS["CTRL"].offset and bool(value & Ctrl.START)
        if start and self._unfinished:
            raise LaunchError(
                f"the last launch {self._unfinished} and the core may still be running the rest "
                "of that program: `await tb.reset()` before the next launch"
            )
        await self._master().write_dword(offset, value)
        if start:
            self._started_ns = get_sim_time("ns")
            self._unfinished = "did not finish"  # until a poll of CTRL sees DONE

    def _master(self) -> Any:
        if self.master is None:
            raise RuntimeError(
                "the registers need the bench started: call `await tb.start()` first"
            )
        return self.master

    def cycles_since_start(self) -> int:
        """Clock cycles simulated since the last START written to CTRL (0 before any)."""
        from cocotb.utils import get_sim_time

        if self._started_ns is None:
            return 0
        return int(get_sim_time("ns") - self._started_ns) // CLOCK_NS

    def poke(self, addr: int, data: bytes | np.ndarray) -> None:
        """Write DRAM at a physical address (what the accelerator's masters read)."""
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        _check_span(addr, len(raw), "poke")
        self.mem[addr : addr + len(raw)] = raw

    def peek(self, addr: int, nbytes: int) -> bytes:
        """Read DRAM at a physical address."""
        _check_span(addr, nbytes, "peek")
        return bytes(self.mem[addr : addr + nbytes])

    def _flush(self, addr: int, data: bytes) -> None:
        self.flushes += 1
        self.poke(addr, data)

    # ---- runs ----------------------------------------------------------------------------------

    async def launch(self, insn_addr: int, insn_count: int) -> LaunchResult:
        """Run an instruction stream already in DRAM (`poke` it there) with the launch protocol
        (`hw.regmap.launch`), for streams a program image cannot hold (an undefined opcode).
        The default cycle limit is `stream_cycle_limit`'s.

        Raises:
            ValueError: an `insn_count` of 0 or an unaligned `insn_addr` (`check_stream`).
            LaunchError: the core stopped on an error (its STATUS), hung past `max_cycles`, or
                took more than `timeout_s`; a hang's message adds the cycle model's verdict.
        """
        from cocotb.task import bridge, resume

        from .hw.regmap import check_stream, launch

        self._master()
        check_stream(insn_addr, insn_count)
        verdict, limit = self.stream_cycle_limit(insn_addr, insn_count)
        self._limit, self._verdict = self.max_cycles or limit, None
        try:
            run = bridge(launch)
            return await run(resume(self._read32), resume(self._write32), self.config, insn_addr,
                             insn_count, timeout_s=self.timeout_s)  # fmt: skip
        except LaunchError as exc:
            if not _is_hang(exc):
                raise
            raise LaunchError(f"{exc}; the cycle model: {verdict}") from None

    def stream_cycle_limit(self, insn_addr: int, insn_count: int) -> tuple[str, int]:
        """The cycle model's verdict on the instruction stream in DRAM and the default cycle
        limit of its launch, as `program_cycle_limit` gives them for a program image (the model
        decodes the stream alone: its timing does not depend on data)."""
        from .hw.isa import decode_program
        from .runtime.device.vta.rtl import matched_timing
        from .sim.timing import simulate_timing

        try:
            insns = decode_program(self.peek(insn_addr, 16 * insn_count), self.config)
            timed = simulate_timing(insns, self.config, matched_timing(self.config), insn_addr)
        except Exception as exc:  # noqa: BLE001 - its verdict is the message
            return str(exc), REJECTED_CYCLES
        return f"finishes in {timed.cycles} cycles", 4 * timed.cycles + 10_000

    def _options(self) -> dict[str, Any]:
        if self.board is None:
            raise RuntimeError("call `await tb.start()` first")
        return {"bitstream": "testbench.bit", "pynq_module": self.board,
                "timeout_s": self.timeout_s}  # fmt: skip

    async def run_program(self, image: Any, inputs: dict[str, np.ndarray]
                          ) -> tuple[dict[str, np.ndarray], Any]:  # fmt: skip
        """Run a program image through the board driver: (output slots, RunResult).

        Raises:
            DeviceError: the core stopped on an error (its STATUS) or hung; a hang's message
                adds the functional simulator's verdict (a deadlock names the waiting stages).
        """
        from cocotb.task import bridge

        from .runtime.device.vta import DeviceError, LoadedProgram, open_device

        options = self._options()
        verdict, limit = self.program_cycle_limit(image, inputs)
        self._limit, self._verdict = self.max_cycles or limit, None

        def job() -> tuple[dict[str, np.ndarray], Any]:
            device = open_device("pynq", self.config, **options)
            try:
                return LoadedProgram.load(device, image).run(inputs)
            finally:
                device.close()

        try:
            return await bridge(job)()
        except DeviceError as exc:
            if not _is_hang(exc):
                raise
            raise DeviceError(f"{exc}; the cycle model: {verdict}") from None

    def program_cycle_limit(self, image: Any, inputs: dict[str, np.ndarray]) -> tuple[str, int]:
        """The cycle model's verdict on a program and the default cycle limit of its launch:
        4x the model's cycles plus 10,000 when the model runs it, else 20,000 (the RTL stops at
        an erroneous instruction, and a program the model finds deadlocked hangs)."""
        try:
            _, cycles = self.expected(image, inputs)
        except Exception as exc:  # noqa: BLE001 - its verdict is the message
            return str(exc), REJECTED_CYCLES
        return f"finishes in {cycles} cycles", 4 * cycles + 10_000

    async def run_module(self, module: Any, inputs: dict[str, np.ndarray]
                         ) -> tuple[dict[str, np.ndarray], dict[str, int]]:  # fmt: skip
        """Run a compiled module with its accelerator calls on this bench: (outputs, CYCLES of
        each call). The module's device is this bench's afterwards (`use_device` to change it).
        The default cycle limit of each call is 4x the cycle model's longest call plus 10,000
        (`MAX_CYCLES` if the model cannot run it).

        Raises:
            DeviceError: a call stopped on an error or hung; the message names the call and
                the cycle model's count for it.
        """
        from cocotb.task import bridge

        from .runtime.device.vta import DeviceError
        from .runtime.executor import call_note

        options = self._options()
        calls: dict[str, int] = {}
        try:
            _, calls = self.expected_module(module, inputs)
            limit = 4 * max(calls.values(), default=0) + 10_000
        except Exception:  # noqa: BLE001 - the run itself then reports what is wrong
            limit = MAX_CYCLES
        self._limit, self._verdict = self.max_cycles or limit, None

        def job() -> tuple[dict[str, np.ndarray], dict[str, int]]:
            module.use_device("pynq", **options)
            outputs = module.run(inputs)
            return outputs, {k: r.cycles for k, r in module.device_results().items()}

        try:
            return await bridge(job)()
        except DeviceError as exc:
            notes = getattr(exc, "__notes__", [])
            call = next((c for c in module.calls if call_note(c.label, c.kernel) in notes), None)
            if call is None:
                raise
            model = (f"the cycle model finishes it in {calls[call.label]} cycles"
                     if call.label in calls else "the cycle model cannot run it")  # fmt: skip
            raise DeviceError(f"{exc}; in call {call.label!r} ({model})") from None

    def expected_module(self, module: Any, inputs: dict[str, np.ndarray]
                        ) -> tuple[dict[str, np.ndarray], dict[str, int]]:  # fmt: skip
        """The oracles of a compiled module: its outputs with the accelerator calls on the
        functional simulator, and each call's cycles on the cycle model with this bench's RAM
        latencies and buffer placement. Runs a copy: `module` keeps its device."""
        from .runtime.device.vta.pynq_model import PAGE_PLACEMENT
        from .runtime.device.vta.rtl import matched_timing
        from .runtime.module import Module

        copy = Module.from_bytes(module.to_bytes())
        timing = matched_timing(self.config)
        outputs = copy.use_device("cyclesim", timing=timing, **PAGE_PLACEMENT).run(inputs)
        return outputs, {k: int(r.cycles) for k, r in copy.device_results().items()}

    async def check_module(self, module: Any, inputs: dict[str, np.ndarray]
                           ) -> tuple[dict[str, np.ndarray], dict[str, int]]:  # fmt: skip
        """Run a compiled module and assert that its outputs equal the functional simulator's
        and each accelerator call's CYCLES the cycle model's; returns (outputs, CYCLES per
        call)."""
        outputs, calls = await self.run_module(module, inputs)
        want, cycles = self.expected_module(module, inputs)
        _check_outputs(outputs, want)
        if calls != cycles:
            wrong = {k: (calls.get(k), v) for k, v in cycles.items() if calls.get(k) != v}
            raise AssertionError(f"CYCLES of the accelerator calls (bench, model): {wrong}")
        return outputs, calls

    def expected(self, image: Any, inputs: dict[str, np.ndarray]
                 ) -> tuple[dict[str, np.ndarray], int]:  # fmt: skip
        """The oracles of a program: outputs of the functional simulator and cycles of the
        cycle model with this bench's RAM latencies and buffer placement."""
        from .runtime.device.vta import run_image
        from .runtime.device.vta.pynq_model import PAGE_PLACEMENT
        from .runtime.device.vta.rtl import matched_timing

        outputs, _ = run_image(image, inputs, "sim")
        _, timed = run_image(image, inputs, "cyclesim",
                             timing=matched_timing(self.config), **PAGE_PLACEMENT)  # fmt: skip
        return outputs, int(timed.cycles)

    async def check_program(self, image: Any, inputs: dict[str, np.ndarray]
                            ) -> tuple[dict[str, np.ndarray], Any]:  # fmt: skip
        """Run a program and assert that its outputs equal the functional simulator's and its
        CYCLES the cycle model's; returns the run's (outputs, RunResult)."""
        outputs, result = await self.run_program(image, inputs)
        want, cycles = self.expected(image, inputs)
        _check_outputs(outputs, want)
        if result.cycles != cycles:
            raise AssertionError(f"CYCLES {result.cycles} != {cycles} of the cycle model")
        return outputs, result


def _check_outputs(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name, value in want.items():
        if not np.array_equal(got[name], value):
            bad = int(np.count_nonzero(got[name] != value))
            raise AssertionError(f"output {name!r}: {bad} of {value.size} elements differ "
                                 "from the functional simulator")  # fmt: skip


def _is_hang(exc: Exception) -> bool:
    return "hung: no DONE" in str(exc) or "did not finish within" in str(exc)


def _check_span(addr: int, nbytes: int, what: str) -> None:
    ok = isinstance(addr, Integral) and isinstance(nbytes, Integral) and nbytes >= 0
    if not ok or not 0 <= addr <= addr + nbytes <= DRAM_BYTES:
        raise ValueError(
            f"{what} of {nbytes!r} bytes at {addr!r}: the bytes must lie in the bench's DRAM, "
            f"addresses 0 to {DRAM_BYTES - 1:#x} (32-bit AXI)"
        )


def _offset(name: str) -> int:
    if name not in REGISTERS:
        raise KeyError(f"register name must be one of {', '.join(REGISTERS)}, not {name!r}")
    return REGISTERS[name].offset


def _ctrl(value: int) -> str:
    return "|".join(b.name for b in Ctrl if b != Ctrl.START and value & b) or "0"


def run_tests(test_module: str, config: str | HWConfig, simulator: str = "icarus",
              test_dir: str | Path = ".", testcase: str | None = None) -> int:  # fmt: skip
    """Build the exported top for `config` (cached) and run the cocotb tests of `test_module`
    (a module importable from `test_dir`) under `simulator`; the number of failed tests.

    Raises:
        runtime.device.vta.DeviceError: a missing simulator or a failed build.
    """
    from cocotb_tools.runner import get_results, get_runner

    from .runtime.device.vta.rtl import build_rtl

    cfg = HWConfig.load(config)
    build = build_rtl(cfg, simulator)
    test_dir = Path(test_dir).resolve()
    path = os.pathsep.join([str(test_dir), os.environ.get("PYTHONPATH", "")])
    results = test_dir / f"{test_module}_results.xml"
    try:
        get_runner(simulator).test(
            test_module=test_module,
            hdl_toplevel=build.toplevel,
            hdl_toplevel_lang="verilog",
            build_dir=build.directory / "sim_build",
            test_dir=test_dir,
            testcase=testcase,
            results_xml=str(results),
            extra_env={"PYTHONPATH": path},
            timescale=("1ns", "1ps"),
        )
    except SystemExit:  # cocotb's runner exits when a test fails; the results file says which
        pass
    if not results.exists():
        return 1
    total, failed = get_results(results)
    return int(failed) if total else 1


SAMPLE_TEST = '''"""A hardware-software test of the accelerator (cocotb); run it: python run.py"""

import cocotb

from tensorforge.cocotb import Testbench
from tensorforge.demo import build_matmul, pack_inp


@cocotb.test()
async def matmul_matches_the_simulators(dut):
    tb = Testbench(dut, {config})
    await tb.start()
    assert await tb.read_reg("HW_ID") == 0x{hw_id:08X}
    k = build_matmul(tb.config, 8 * tb.config.batch, 2 * tb.config.block_in, tb.config.block_out)
    await tb.check_program(k.image, {{"A": pack_inp(tb.config, k.a)}})
'''

SAMPLE_RUNNER = '''"""Build the exported accelerator and run this folder's cocotb tests.

python run.py [icarus|verilator]
"""

import sys
from pathlib import Path

from tensorforge.cocotb import run_tests
from tensorforge.runtime.device.vta import DeviceError

here = Path(__file__).resolve().parent
simulator = sys.argv[1] if len(sys.argv) > 1 else "icarus"
try:
    failed = run_tests("test_accel", str(here / "hwconfig.json"), simulator, test_dir=here)
except DeviceError as exc:  # a simulator that is missing or unknown, a failed build
    sys.exit(f"run.py: {exc}")
sys.exit(failed)
'''


def sample_files(config: str | HWConfig) -> dict[str, str]:
    """The sample test (``test_accel.py``) and runner (``run.py``) of `write_testbench`."""
    from .hw.config import PRESETS
    from .hw.regmap import HW_ID_MAGIC

    cfg = HWConfig.load(config)
    if PRESETS.get(cfg.name) == cfg:
        config_ref = json.dumps(cfg.name)
    else:  # the folder's own JSON, found next to the test
        config_ref = 'str(__import__("pathlib").Path(__file__).with_name("hwconfig.json"))'
    return {
        "test_accel.py": SAMPLE_TEST.format(config=config_ref, hw_id=HW_ID_MAGIC),
        "run.py": SAMPLE_RUNNER,
    }


def edited_files(config: str | HWConfig, out_dir: str | Path) -> list[str]:
    """The files of `sample_files` in `out_dir` that differ from the samples (yours)."""
    out = Path(out_dir)
    return [name for name, text in sample_files(config).items() if (out / name).is_file()
            and (out / name).read_text(errors="replace") != text]  # fmt: skip


def write_testbench(config: str | HWConfig, out_dir: str | Path, force: bool = False) -> Path:
    """A ready-to-run cocotb project in `out_dir`: the exported top's Verilog (for reference and
    other flows), its ``hwconfig.json``, a sample test (``test_accel.py``) and its runner
    (``run.py``); returns the folder. Run again on a project, it refreshes the Verilog and the
    JSON but keeps a test or runner you edited (`edited_files`) unless `force`."""
    from .hw.export import export_verilog
    from .runtime.container import write_atomic

    cfg = HWConfig.load(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    export_verilog(cfg, out, "top")
    write_atomic(out / "hwconfig.json", cfg.to_json().encode())
    keep = [] if force else edited_files(cfg, out)
    for name, text in sample_files(cfg).items():
        if name not in keep:
            write_atomic(out / name, text.encode())
    return out
