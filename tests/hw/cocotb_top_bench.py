"""cocotb bench for the exported accelerator: cocotbext-axi AXI RAMs (one shared memory behind
the four masters) holding a program image placed by the runtime, and hw.regmap.launch itself
over an AxiLiteMaster.

Run by test_top_cocotb.py. TF_TOP_CASE names a JSON file: preset, DRAM base, the image file
(bytes from base), insn_addr, insn_count and the output file, where the bench writes the DRAM
bytes after the run and, in a side file ``<output>.json``, the cycles launch() read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
from cocotb.task import bridge

from tensorforge.cocotb import Testbench
from tensorforge.hw.config import HWConfig
from tensorforge.hw.regmap import launch


@cocotb.test()
async def program_runs(dut):
    with open(os.environ["TF_TOP_CASE"]) as f:
        case = json.load(f)
    cfg = HWConfig.preset(case["preset"])
    base = case["base"]
    image = Path(case["image"]).read_bytes()
    tb = Testbench(dut, cfg)
    tb.poke(base, image)
    await tb.start()  # the users' kit: clock, AXI RAM models behind the masters, reset
    # the board model's register access: AXI-Lite transactions, callable from bridged code
    result = await bridge(launch)(tb.board.read32, tb.board.write32, cfg, case["insn_addr"],
                                  case["insn_count"], timeout_s=120.0)  # fmt: skip
    out = Path(case["output"])
    out.write_bytes(tb.peek(base, len(image)))
    Path(f"{out}.json").write_text(json.dumps({"cycles": result.cycles}))
