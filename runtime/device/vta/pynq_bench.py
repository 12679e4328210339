"""The cocotb bench behind `pynq_model.run_on_board_model`: the ``pynq`` backend on the RTL.

Loaded by cocotb inside the simulator; not imported otherwise. ``TF_RTL_CASE`` names a JSON
file: ``config`` (the HWConfig), ``kind`` ("program" or "module"), ``payload`` (the program
image or module file), ``inputs`` (.npz), and where to write ``outputs`` (.npz) and ``result``
(JSON: ``state``, ``cycles`` or ``calls``, ``flushes``, ``overlays``, ``message``).

The backend's blocking driver code runs in a thread through cocotb's ``bridge``; its register
reads and writes come back into the simulation through ``resume`` as AXI-Lite transactions, and
its buffers sit in the same RAM model the accelerator's AXI4 masters read and write.
"""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles
from cocotbext.axi.sparse_memory import SparseMemory

from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.vta.pynq_model import BoardModel
from tensorforge.runtime.device.vta.rtl_bench import CLOCK_NS, attach_memory


@cocotb.test()
async def run_case(dut):
    case = json.loads(Path(os.environ["TF_RTL_CASE"]).read_text())
    cfg = HWConfig.from_dict(case["config"])
    mem = SparseMemory(1 << 32)
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    master = attach_memory(dut, mem)
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)

    @resume
    async def read32(offset: int) -> int:
        return await master.read_dword(offset)

    @resume
    async def write32(offset: int, value: int) -> None:
        await master.write_dword(offset, value)

    flushes = [0]

    def dram_write(addr: int, data: bytes) -> None:
        flushes[0] += 1
        mem[addr : addr + len(data)] = data

    def dram_read(addr: int, n: int) -> bytes:
        return bytes(mem[addr : addr + n])

    board = BoardModel(read32, write32, dram_read, dram_write)

    def job() -> dict:
        with np.load(case["inputs"], allow_pickle=False) as npz:
            inputs = {k: npz[k] for k in npz.files}
        payload = Path(case["payload"]).read_bytes()
        # simulated time runs far slower than a board's: the launch waits as long as the run may
        options = {"bitstream": "tf_model.bit", "pynq_module": board,
                   "timeout_s": float(case["timeout_s"])}  # fmt: skip
        if case["kind"] == "program":
            from tensorforge.runtime.device.vta import LoadedProgram, open_device
            from tensorforge.runtime.program import ProgramImage

            image = ProgramImage.from_bytes(payload, case["payload"])
            device = open_device("pynq", cfg, **options)
            try:
                outputs, result = LoadedProgram.load(device, image).run(inputs)
            finally:
                device.close()
            report = {"cycles": result.cycles}
        else:
            from tensorforge.runtime.module import Module

            module = Module.from_bytes(payload, case["payload"]).use_device("pynq", **options)
            outputs = module.run(inputs)
            report = {"calls": {k: r.cycles for k, r in module.device_results().items()}}
        np.savez(case["outputs"], **outputs)
        return report

    try:
        report = await bridge(job)()
        report["state"] = "done"
    except Exception as exc:  # noqa: BLE001 - reported to the host, which raises DeviceError
        report = {"state": "error", "message": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc(limit=-8)}  # fmt: skip
    report["flushes"] = flushes[0]
    report["overlays"] = board.overlays
    Path(case["result"]).write_text(json.dumps(report))
