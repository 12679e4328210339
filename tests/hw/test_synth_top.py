"""Whole-top synthesis: block RAM per SRAM from synth_xilinx (the parsing, and the tiny top)."""

from __future__ import annotations

import pytest

from tensorforge.hw.config import HWConfig
from tensorforge.hw.synth import PARTS, SynthReport, block_rams_by_memory, synth_xilinx

SRAMS = ("uop_sram", "inp_sram", "wgt_sram", "acc_sram", "out_sram")


def test_block_rams_are_grouped_by_memory_and_ramb18_counts_half():
    ramb36 = "tf_top_pynq/wgt_sram.0.0\ntf_top_pynq/wgt_sram.1.12\ntf_top_pynq/acc_sram.0.3\n"
    ramb18 = "tf_top_pynq/wgt_sram.2.0\ntf_top_pynq/load_queue.fifo.storage.0.1\n"
    got = block_rams_by_memory(ramb36, ramb18)
    assert got == {"wgt_sram": 2.5, "acc_sram": 1.0, "load_queue.fifo.storage": 0.5}
    assert block_rams_by_memory("", "") == {}


def test_report_lists_block_ram_per_memory_largest_first():
    cells = {"RAMB36E1": 3, "RAMB18E1": 1}
    r = SynthReport("top", "tiny", PARTS["xc7z020"], cells, 1.0, {"a_sram": 0.5, "b_sram": 3})
    lines = r.table().splitlines()
    assert lines.index("  BRAM36 for b_sram: 3") < lines.index("  BRAM36 for a_sram: 0.5")
    assert r.bram36 == 3.5


@pytest.mark.slow
def test_tiny_top_puts_every_sram_in_block_ram(tmp_path):
    cfg = HWConfig.preset("tiny")
    r = synth_xilinx(cfg, "top", "xc7z020", work_dir=tmp_path)
    assert all(r.memories.get(name, 0) > 0 for name in SRAMS), r.memories
    assert sum(r.memories.values()) == r.bram36
    # WGT holds block_out x block_in int8 per entry: at least its bits in 36 Kb blocks.
    assert r.memories["wgt_sram"] >= cfg.wgt_buff_size * 8 / 36864
    assert not r.over
