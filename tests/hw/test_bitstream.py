"""Bitstream recipes: the wrapper and the block-design Tcl agree with the exported Verilog.

Vivado cannot run here, so the checks are what can be checked without it: Icarus elaborates the
wrapper with the exported top (every port connected, widths equal), the Tcl names only
interfaces and pins the wrapper declares, and the manifest round trip (register, find) works.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tensorforge.cli import main
from tensorforge.hw.bitstream import (
    CELL,
    WRAPPER,
    find_bitstream,
    register,
    verilog_ports,
    write_recipe,
)
from tensorforge.hw.config import HWConfig
from tensorforge.hw.export import module_name
from tensorforge.hw.regmap import config_hash

TINY = HWConfig.preset("tiny")


@pytest.mark.parametrize("board", ["pynq-z2", "kv260"])
def test_wrapper_and_tcl_match_the_exported_top(tmp_path, board):
    tcl = write_recipe(TINY, board, tmp_path)
    top_file = tmp_path / f"{module_name(TINY, 'top')}.v"
    top_ports = verilog_ports(top_file.read_text(), module_name(TINY, "top"))
    wrapper = (tmp_path / f"{WRAPPER}.v").read_text()
    # every port of the exported top is connected exactly once, clock and reset adapted
    for name in top_ports:
        assert len(re.findall(rf"\.{re.escape(name)}\(", wrapper)) == 1, name
    assert ".rst(~ap_rst_n)" in wrapper and ".clk(ap_clk)" in wrapper
    # each wrapper port belongs to an interface the X_INTERFACE_INFO attributes declare
    declared = set(re.findall(r'aximm:1.0 (\w+) \w+" \*\)', wrapper))
    assert declared == {"s_axi_control", "m_axi_fetch", "m_axi_load", "m_axi_compute",
                        "m_axi_store"}  # fmt: skip
    text = tcl.read_text()
    used = set(re.findall(rf"{CELL}/(\w+)", text))
    assert used <= declared | {"ap_clk", "ap_rst_n"}
    assert used >= declared  # every interface is connected in the block design
    entry = json.loads((tmp_path / "bitstream.json").read_text())
    assert entry["config_hash"] == f"{config_hash(TINY):#010x}" and entry["board"] == board


def test_wrapper_declares_the_reads_each_master_keeps_in_flight(tmp_path):
    """The interconnect is told: fetch one read burst, the load and compute masters (LOAD
    engines) ``max_outstanding_reads``, the store master one write."""
    write_recipe(TINY.replace(max_outstanding_reads=4), "pynq-z2", tmp_path)
    wrapper = (tmp_path / f"{WRAPPER}.v").read_text()
    found = re.findall(
        r'NUM_(READ|WRITE)_OUTSTANDING (\d+)" \*\)\n\s*\w+ (?:\[\d+:0\] )?'
        r"(m_axi_[a-z]+)_",
        wrapper,
    )
    assert sorted((port, kind, int(n)) for kind, n, port in found) == [
        ("m_axi_compute", "READ", 4), ("m_axi_fetch", "READ", 1), ("m_axi_load", "READ", 4),
        ("m_axi_store", "WRITE", 1),
    ]  # fmt: skip


def test_icarus_elaborates_the_wrapper_with_the_top(tmp_path):
    if shutil.which("iverilog") is None:
        pytest.skip("iverilog is not installed (make setup installs it)")
    write_recipe(TINY, "pynq-z2", tmp_path)
    top = f"{module_name(TINY, 'top')}.v"
    proc = subprocess.run(["iverilog", "-Wall", "-o", str(tmp_path / "a.out"), "-s", WRAPPER,
                           f"{WRAPPER}.v", top], cwd=tmp_path, capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # Icarus warns "Port N (name) of <module> expects W bits, got V" on a width mismatch
    assert "expects" not in proc.stderr and "Port" not in proc.stderr, proc.stderr


def test_bus_wider_than_the_board_is_refused(tmp_path):
    wide = TINY.replace(name="wide", axi_data_width=128)
    with pytest.raises(ValueError, match="128-bit AXI bus; pynq-z2's high-performance port is 64"):
        write_recipe(wide, "pynq-z2", tmp_path)
    with pytest.raises(ValueError, match="board must be one of"):
        write_recipe(TINY, "zedboard", tmp_path)


def test_manifest_register_and_find(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"format": 1, "bitstreams": []}')
    out = tmp_path / "recipe"
    write_recipe(TINY, "pynq-z2", out)
    with pytest.raises(FileNotFoundError, match="build the recipe with Vivado first"):
        register(out, manifest)
    (out / "tf_tiny.bit").write_bytes(b"bit")  # stands for what Vivado writes
    (out / "tf_tiny.hwh").write_text("<hwh/>")
    register(out, manifest)
    assert find_bitstream(TINY, manifest=manifest) == str(out / "tf_tiny.bit")
    assert find_bitstream(TINY, "kv260", manifest=manifest) is None
    assert find_bitstream(HWConfig.preset("pynq"), manifest=manifest) is None
    register(out, manifest)  # again: replaced, not duplicated
    assert len(json.loads(manifest.read_text())["bitstreams"]) == 1


def test_cli_writes_the_recipe_and_says_how_to_build(tmp_path, capsys):
    rc = main(["hw", "bitstream", "--board", "pynq-z2", "--config", "tiny", "-o",
               str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and (tmp_path / "build.tcl").exists()
    if shutil.which("vivado") is None:
        assert "vivado -mode batch -source build.tcl" in out
