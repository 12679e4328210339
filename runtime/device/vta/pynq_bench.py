"""The cocotb bench behind `pynq_model.run_on_board_model`: the ``pynq`` backend on the RTL.

Loaded by cocotb inside the simulator; not imported otherwise. ``TF_RTL_CASE`` names a JSON
file: ``config`` (the HWConfig), ``kind`` ("program" or "module"), ``payload`` (the program
image or module file), ``inputs`` (.npz), ``timeout_s``, and where to write ``outputs`` (.npz)
and ``result`` (JSON: ``state``, ``cycles`` or ``calls``, ``flushes``, ``overlays``,
``message``).

It is `tensorforge.cocotb.Testbench`, the users' kit, run on one case: the backend's blocking
driver code runs in a thread through cocotb's ``bridge``; its register reads and writes come
back into the simulation through ``resume`` as AXI-Lite transactions, and its buffers sit in the
same RAM model the accelerator's AXI4 masters read and write.
"""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

import cocotb
import numpy as np

from tensorforge.cocotb import Testbench
from tensorforge.hw.config import HWConfig


@cocotb.test()
async def run_case(dut):
    case = json.loads(Path(os.environ["TF_RTL_CASE"]).read_text())
    tb = Testbench(dut, HWConfig.from_dict(case["config"]), float(case["timeout_s"]))
    await tb.start()
    with np.load(case["inputs"], allow_pickle=False) as npz:
        inputs = {k: npz[k] for k in npz.files}
    payload = Path(case["payload"]).read_bytes()
    try:
        if case["kind"] == "program":
            from tensorforge.runtime.program import ProgramImage

            image = ProgramImage.from_bytes(payload, case["payload"])
            outputs, result = await tb.run_program(image, inputs)
            report = {"cycles": result.cycles}
        else:
            from tensorforge.runtime.module import Module

            module = Module.from_bytes(payload, case["payload"])
            outputs, calls = await tb.run_module(module, inputs)
            report = {"calls": calls}
        np.savez(case["outputs"], **outputs)
        report["state"] = "done"
    except Exception as exc:  # noqa: BLE001 - reported to the host, which raises DeviceError
        report = {"state": "error", "message": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc(limit=-8)}  # fmt: skip
    report["flushes"] = tb.flushes
    report["overlays"] = tb.board.overlays
    Path(case["result"]).write_text(json.dumps(report))
