# amaranth: UnusedElaboratable=no
"""Verilog export of every block; the exported tiny GEMM and ALU cores under cocotb vs numpy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from core_models import Srams, alu_model, gemm_model, pack, random_alu, random_gemm

from tensorforge.hw.config import HWConfig
from tensorforge.hw.core.common import acc_bits, inp_bits, out_bits, wgt_bits
from tensorforge.hw.export import TOPS, export_verilog, module_name
from tensorforge.hw.isa import AluOp, encode_word
from tensorforge.hw.timing import alu_cycles, alu_ii, gemm_cycles

HERE = Path(__file__).parent


def ports(text: str) -> dict[str, str]:
    """Top-level port name -> declaration ("input [7:0]") of the first module in ``text``."""
    top = text.split("endmodule")[0]
    out = {}
    for line in top.splitlines():
        words = line.strip().rstrip(";").split()
        if words and words[0] in ("input", "output"):
            out[words[-1]] = " ".join(words[:-1])
    return out


_SLOW_EXPORTS = {("pynq", "top")}  # the whole pynq accelerator takes ~15 s


@pytest.mark.parametrize(
    ("preset", "top"),
    [
        pytest.param(
            preset, top, marks=[pytest.mark.slow] if (preset, top) in _SLOW_EXPORTS else []
        )
        for top in TOPS
        for preset in ("tiny", "pynq")
    ],
)
def test_every_block_exports(tmp_path, preset, top):
    cfg = HWConfig.preset(preset)
    path = export_verilog(cfg, tmp_path / "v", top)
    assert path == tmp_path / "v" / f"{module_name(cfg, top)}.v"
    text = path.read_text()
    assert f"module {module_name(cfg, top)}(" in text
    assert "/work/" not in text  # no source paths: reproducible output
    p = ports(text)
    assert p["clk"] == "input" and p["rst"] == "input"
    if top == "gemm":
        assert p["wgt_rd__data"] == f"input [{wgt_bits(cfg) - 1}:0]"
        assert p["inp_rd__data"] == f"input [{inp_bits(cfg) - 1}:0]"
        assert p["acc_wr__data"] == f"output [{acc_bits(cfg) - 1}:0]"
        assert p["out_wr__addr"] == f"output [{cfg.log_acc_depth - 1}:0]"
        assert p["insn__payload"] == "input [127:0]"
    if top == "alu":
        assert "wgt_rd__data" not in p and p["acc_rd__data"] == f"input [{acc_bits(cfg) - 1}:0]"
        assert p["out_wr__data"] == f"output [{out_bits(cfg) - 1}:0]"


def test_export_is_reproducible(tmp_path):
    cfg = HWConfig.preset("tiny")
    first = export_verilog(cfg, tmp_path / "a", "alu").read_text()
    assert export_verilog(cfg, tmp_path / "b", "alu").read_text() == first


def test_export_rejects_unknown_tops_and_configs(tmp_path):
    with pytest.raises(ValueError, match=rf"top must be one of {', '.join(TOPS)}, not 'cpu'"):
        export_verilog(HWConfig.preset("tiny"), tmp_path, top="cpu")
    with pytest.raises(TypeError, match=r"cfg must be a HWConfig, not 'tiny'"):
        export_verilog("tiny", tmp_path)


def core_case(cfg: HWConfig, top: str, seed: int) -> dict:
    """A random program for ``top`` with its SRAM images, expected cycles and results."""
    rng = np.random.default_rng(seed)
    srams = Srams.random(cfg, rng)
    if top == "gemm":
        insns = [random_gemm(rng, cfg, srams, 8 * i) for i in range(10)]
        reads = ["uop", "inp", "wgt", "acc"]
    else:
        ops = [AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR, AluOp.MUL]
        insns = [random_alu(rng, cfg, srams, 8 * i, ops[i % 5]) for i in range(10)]
        reads = ["uop", "acc"]
    images = {b: [str(pack(r, b)) for r in srams.arrays[b]] for b in ("inp", "wgt", "acc", "out")}
    images["uop"] = [str(int(w)) for w in srams.arrays["uop"]]
    cycles = []
    for insn in insns:  # runs the model in place
        if top == "gemm":
            cycles.append(gemm_cycles(gemm_model(insn, srams)))
        else:
            cycles.append(alu_cycles(alu_model(insn, srams), alu_ii(insn.use_imm, insn.reset_reg)))
    return {
        "reads": reads,
        "srams": {b: images[b] for b in reads + ["out"]},
        "insns": [str(encode_word(insn, cfg)) for insn in insns],
        "cycles": cycles,
        "expected": {b: [str(pack(r, b)) for r in srams.arrays[b]] for b in ("acc", "out")},
    }


@pytest.mark.rtl
@pytest.mark.parametrize(
    "simulator",
    ["icarus", pytest.param("verilator", marks=pytest.mark.slow)],  # ~9 s build
)
@pytest.mark.parametrize("top", ["gemm", "alu"])
def test_exported_tiny_core_matches_numpy(tmp_path, top, simulator):
    tool = {"icarus": "iverilog", "verilator": "verilator"}[simulator]
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not on PATH (`make setup` installs it; run through `make test`)")
    runner_mod = pytest.importorskip("cocotb_tools.runner", reason="cocotb 2.x is not installed")

    cfg = HWConfig.preset("tiny")
    path = export_verilog(cfg, tmp_path, top)
    case = tmp_path / "case.json"
    case.write_text(json.dumps(core_case(cfg, top, seed=21)))
    runner = runner_mod.get_runner(simulator)
    runner.build(
        sources=[path],
        hdl_toplevel=module_name(cfg, top),
        build_dir=tmp_path / "build",
        build_args=["-Wno-fatal"] if simulator == "verilator" else [],
        timescale=("1ns", "1ps"),
    )
    results = runner.test(
        test_module="cocotb_core_bench",
        hdl_toplevel=module_name(cfg, top),
        test_dir=tmp_path,
        results_xml=str(tmp_path / "results.xml"),
        extra_env={"TF_CORE_CASE": str(case)},
    )
    assert runner_mod.get_results(results) == (1, 0)
