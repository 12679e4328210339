"""The exported register block under Icarus (and Verilator) via cocotb: hw.regmap.launch over
cocotbext-axi's AXI-Lite master, registers against sim/regblock.py's model."""

from __future__ import annotations

import json
import shutil

import pytest

from tensorforge.hw.config import HWConfig
from tensorforge.hw.export import export_verilog, module_name
from tensorforge.hw.regmap import Status


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["icarus", pytest.param("verilator", marks=pytest.mark.slow)])
def test_launch_protocol_on_exported_regblock(tmp_path, simulator):
    tool = {"icarus": "iverilog", "verilator": "verilator"}[simulator]
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not on PATH (`make setup` installs it; run through `make test`)")
    runner_mod = pytest.importorskip("cocotb_tools.runner", reason="cocotb 2.x is not installed")
    pytest.importorskip("cocotbext.axi", reason="cocotbext-axi is not installed")

    cfg = HWConfig.preset("tiny")
    path = export_verilog(cfg, tmp_path, "regblock")
    case = tmp_path / "case.json"
    script = [[17, 0], [5, int(Status.SRAM_RANGE)], [1, 0], [250, 0]]
    case.write_text(json.dumps({"preset": cfg.name, "script": script}))
    runner = runner_mod.get_runner(simulator)
    runner.build(
        sources=[path],
        hdl_toplevel=module_name(cfg, "regblock"),
        build_dir=tmp_path / "build",
        build_args=["-Wno-fatal"] if simulator == "verilator" else [],
        timescale=("1ns", "1ps"),
    )
    results = runner.test(
        test_module="cocotb_regblock_bench",
        hdl_toplevel=module_name(cfg, "regblock"),
        test_dir=tmp_path,
        results_xml=str(tmp_path / "results.xml"),
        extra_env={"TF_REGBLOCK_CASE": str(case)},
    )
    assert runner_mod.get_results(results) == (1, 0)
