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
import os
from pathlib import Path
from typing import Any

import numpy as np

from .hw.config import HWConfig
from .hw.regmap import REGISTERS

#: the clock period of the bench (ns)
CLOCK_NS = 10


def attach_memory(dut: Any, mem: Any) -> Any:
    """Put the DRAM model `mem` behind the top's AXI4 masters; the AXI-Lite master of its
    registers."""
    from cocotbext.axi import (
        AxiLiteBus,
        AxiLiteMaster,
        AxiRamRead,
        AxiRamWrite,
        AxiReadBus,
        AxiWriteBus,
    )

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
    """

    def __init__(self, dut: Any, config: str | HWConfig, timeout_s: float = 600.0) -> None:
        from cocotbext.axi.sparse_memory import SparseMemory

        self.dut = dut
        self.config = HWConfig.load(config)
        self.timeout_s = float(timeout_s)
        self.mem = SparseMemory(1 << 32)
        self.master: Any = None
        self.board: Any = None
        self.flushes = 0

    async def start(self) -> None:
        """Start the clock, attach the memory and the register master, reset the core."""
        import cocotb
        from cocotb.clock import Clock
        from cocotb.task import resume
        from cocotb.triggers import ClockCycles

        from .runtime.device.vta.pynq_model import BoardModel

        cocotb.start_soon(Clock(self.dut.clk, CLOCK_NS, unit="ns").start())
        self.dut.rst.value = 1
        self.master = attach_memory(self.dut, self.mem)
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        self.board = BoardModel(resume(self.master.read_dword), resume(self.master.write_dword),
                                self.peek, self._flush)  # fmt: skip

    # ---- stimulus ------------------------------------------------------------------------------

    async def read_reg(self, name: str) -> int:
        """A register of hw/regmap.py by name (``tensorforge hw regs`` lists them)."""
        return int(await self.master.read_dword(REGISTERS[name].offset))

    async def write_reg(self, name: str, value: int) -> None:
        await self.master.write_dword(REGISTERS[name].offset, int(value))

    def poke(self, addr: int, data: bytes | np.ndarray) -> None:
        """Write DRAM at a physical address (what the accelerator's masters read)."""
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        self.mem[addr : addr + len(raw)] = raw

    def peek(self, addr: int, nbytes: int) -> bytes:
        """Read DRAM at a physical address."""
        return bytes(self.mem[addr : addr + nbytes])

    def _flush(self, addr: int, data: bytes) -> None:
        self.flushes += 1
        self.poke(addr, data)

    # ---- runs ----------------------------------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        if self.board is None:
            raise RuntimeError("call `await tb.start()` first")
        return {"bitstream": "testbench.bit", "pynq_module": self.board,
                "timeout_s": self.timeout_s}  # fmt: skip

    async def run_program(self, image: Any, inputs: dict[str, np.ndarray]
                          ) -> tuple[dict[str, np.ndarray], Any]:  # fmt: skip
        """Run a program image through the board driver: (output slots, RunResult)."""
        from cocotb.task import bridge

        from .runtime.device.vta import LoadedProgram, open_device

        options = self._options()

        def job() -> tuple[dict[str, np.ndarray], Any]:
            device = open_device("pynq", self.config, **options)
            try:
                return LoadedProgram.load(device, image).run(inputs)
            finally:
                device.close()

        return await bridge(job)()

    async def run_module(self, module: Any, inputs: dict[str, np.ndarray]
                         ) -> tuple[dict[str, np.ndarray], dict[str, int]]:  # fmt: skip
        """Run a compiled module with its accelerator calls on this bench: (outputs, CYCLES of
        each call)."""
        from cocotb.task import bridge

        options = self._options()

        def job() -> tuple[dict[str, np.ndarray], dict[str, int]]:
            module.use_device("pynq", **options)
            outputs = module.run(inputs)
            return outputs, {k: r.cycles for k, r in module.device_results().items()}

        return await bridge(job)()

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
        for name, value in want.items():
            if not np.array_equal(outputs[name], value):
                bad = int(np.count_nonzero(outputs[name] != value))
                raise AssertionError(f"output {name!r}: {bad} of {value.size} elements differ "
                                     "from the functional simulator")  # fmt: skip
        if result.cycles != cycles:
            raise AssertionError(f"CYCLES {result.cycles} != {cycles} of the cycle model")
        return outputs, result


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

here = Path(__file__).resolve().parent
simulator = sys.argv[1] if len(sys.argv) > 1 else "icarus"
sys.exit(run_tests("test_accel", str(here / "hwconfig.json"), simulator, test_dir=here))
'''


def write_testbench(config: str | HWConfig, out_dir: str | Path) -> Path:
    """A ready-to-run cocotb project in `out_dir`: the exported top's Verilog (for reference and
    other flows), its ``hwconfig.json``, a sample test (``test_accel.py``) and its runner
    (``run.py``); returns the folder."""
    from .hw.export import export_verilog
    from .hw.regmap import HW_ID_MAGIC

    cfg = HWConfig.load(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    export_verilog(cfg, out, "top")
    (out / "hwconfig.json").write_text(cfg.to_json())
    from .hw.config import PRESETS

    if PRESETS.get(cfg.name) == cfg:
        config_ref = json.dumps(cfg.name)
    else:  # the folder's own JSON, found next to the test
        config_ref = 'str(__import__("pathlib").Path(__file__).with_name("hwconfig.json"))'
    (out / "test_accel.py").write_text(SAMPLE_TEST.format(config=config_ref, hw_id=HW_ID_MAGIC))
    (out / "run.py").write_text(SAMPLE_RUNNER)
    return out
