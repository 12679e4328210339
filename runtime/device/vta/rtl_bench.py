"""The cocotb bench behind the ``rtl`` device: one program run on the exported top.

Loaded by cocotb inside the simulator (``runtime/device/vta/rtl.py`` starts it); not imported
otherwise. ``TF_RTL_CASE`` names a JSON file written by the device:

- ``config``: the HWConfig as a dict; ``base``: the physical address of the image's first byte;
- ``image``: a raw file of device memory from ``base``; ``insn_addr``, ``insn_count``;
- ``max_cycles``: clock cycles after START before the run is abandoned;
- ``timeout_s``: wall-clock seconds for ``hw.regmap.launch``;
- ``output``: where the bench writes device memory after the run (same span as ``image``);
- ``result``: where it writes a JSON report: ``state`` ("done", "error" or "timeout"), ``cycles``
  (the CYCLES register), ``clock_cycles`` (cycles simulated from START to the end of polling),
  ``polls``, ``launch_ms`` (wall clock of the launch) and, unless done, ``message``, ``ctrl``,
  ``status`` and ``cycles_lo``.

Device memory is one cocotbext-axi ``SparseMemory`` behind the four AXI4 masters (fetch, load,
compute read through ``AxiRamRead``; store writes through ``AxiRamWrite``), set up by
`tensorforge.cocotb.Testbench`, and the launch protocol is ``hw.regmap.launch`` itself over its
``AxiLiteMaster`` (with its own cycle limit on each poll, ``max_cycles``, and a report of
the registers on a hang; the users' kit has its own limit, `Testbench(max_cycles=)`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
from cocotb.task import bridge, resume
from cocotb.utils import get_sim_time

from tensorforge.cocotb import CLOCK_NS, Testbench
from tensorforge.hw.config import HWConfig
from tensorforge.hw.regmap import REGISTERS, LaunchError, launch


class CycleLimit(Exception):
    """The run went past ``max_cycles`` clock cycles after START."""


@cocotb.test()
async def run_program(dut):
    case = json.loads(Path(os.environ["TF_RTL_CASE"]).read_text())
    cfg = HWConfig.from_dict(case["config"])
    base = case["base"]
    image = Path(case["image"]).read_bytes()
    tb = Testbench(dut, cfg)
    tb.poke(base, image)
    await tb.start()
    master = tb.master

    start_ns = get_sim_time("ns")
    limit = case["max_cycles"]
    polls = 0

    def elapsed() -> int:
        return int(get_sim_time("ns") - start_ns) // CLOCK_NS

    @resume
    async def read32(offset: int) -> int:
        nonlocal polls
        if offset == REGISTERS["CTRL"].offset:
            polls += 1
            if elapsed() > limit:
                raise CycleLimit(f"no DONE after {elapsed()} clock cycles (limit {limit})")
        return await master.read_dword(offset)

    @resume
    async def write32(offset: int, value: int) -> None:
        await master.write_dword(offset, value)

    report: dict[str, object]
    wall = time.perf_counter()
    try:
        run = bridge(launch)
        res = await run(read32, write32, cfg, case["insn_addr"], case["insn_count"],
                        timeout_s=case["timeout_s"])  # fmt: skip
        report = {"state": "done", "cycles": res.cycles, "polls": res.polls}
    except (CycleLimit, LaunchError) as exc:
        state = (
            "timeout" if isinstance(exc, CycleLimit) or "did not finish" in str(exc) else "error"
        )
        report = {"state": state, "message": str(exc), "polls": polls}
        for reg in ("CTRL", "STATUS", "CYCLES_LO"):
            report[reg.lower()] = await master.read_dword(REGISTERS[reg].offset)
    report["clock_cycles"] = elapsed()
    report["launch_ms"] = int((time.perf_counter() - wall) * 1000)
    Path(case["output"]).write_bytes(tb.peek(base, len(image)))
    Path(case["result"]).write_text(json.dumps(report))
