"""The users' cocotb kit refuses bad stimulus with a clear error, before any simulation.

These need no simulator: the checks run before the bench touches a signal. The oracle is the
documented contract (docs/hardware.md, the `Testbench` API): DRAM is the 32-bit address space of
the AXI masters and registers are 32 bits wide.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cocotbext.axi")

from tensorforge import cocotb as kit  # noqa: E402

DRAM_BYTES = 1 << 32  # the masters' 32-bit addresses


@pytest.fixture
def tb():
    return kit.Testbench(object(), "tiny")  # named so pytest does not collect it


def test_poke_and_peek_round_trip_at_the_ends_of_dram(tb):
    tb.poke(0, np.arange(4, dtype=np.int8))
    tb.poke(DRAM_BYTES - 3, [7, 8, 9])
    assert tb.peek(0, 4) == bytes([0, 1, 2, 3])
    assert tb.peek(DRAM_BYTES - 3, 3) == bytes([7, 8, 9])


@pytest.mark.parametrize(
    ("addr", "nbytes"), [(-16, 16), (DRAM_BYTES, 1), (DRAM_BYTES - 8, 16), (0x100, -1)]
)
def test_dram_outside_the_address_space_is_refused(tb, addr, nbytes):
    """Before: `poke` raised SparseMemory's `IndexError: slice assignment is wrong size` and
    `peek` returned fewer bytes than asked for (or none) without a word."""
    message = rf"{nbytes} bytes at {addr}: the bytes must lie in the bench's DRAM, addresses 0 "
    with pytest.raises(ValueError, match=f"peek of {message}"):
        tb.peek(addr, nbytes)
    if nbytes >= 0:
        with pytest.raises(ValueError, match=f"poke of {message}"):
            tb.poke(addr, bytes(nbytes))


@pytest.mark.parametrize("value", [-1, 1 << 32, 1.5])
def test_a_register_value_must_be_32_bits(tb, value):
    """Before: cocotbext-axi's `OverflowError: int too big to convert` (or `can't convert
    negative int to unsigned`) from inside the bus model."""
    with pytest.raises(ValueError, match=rf"register INSN_COUNT value must be an int from 0 to "
                                         rf"0xFFFFFFFF, not {value!r}"):  # fmt: skip
        asyncio.run(tb.write_reg("INSN_COUNT", value))
    with pytest.raises(KeyError, match="not 'COUNT'"):
        asyncio.run(tb.write_reg("COUNT", 1))


def test_rerunning_the_cli_keeps_the_test_you_edited(tmp_path, capsys, monkeypatch):
    """`tensorforge hw testbench` on an existing project refreshes the Verilog and the JSON but
    keeps an edited test_accel.py (before: silently replaced by the sample); --force replaces
    it. Oracle: the file's own bytes and `sample_files`. (The export itself, 3 s a run, is
    test_export.py's; here a stand-in writes the file.)"""
    from tensorforge.cli import main
    from tensorforge.hw import export

    def fake_export(cfg, out_dir, top):
        (Path(out_dir) / f"tf_{top}_{cfg.name}.v").write_text("// exported")

    monkeypatch.setattr(export, "export_verilog", fake_export)
    out = tmp_path / "tb"
    args = ["hw", "testbench", "--config", "tiny", "-o", str(out)]
    assert main(args) == 0
    mine = (out / "test_accel.py").read_text() + "\n# my own test\n"
    (out / "test_accel.py").write_text(mine)
    (out / "tf_top_tiny.v").write_text("stale")
    capsys.readouterr()
    assert main(args) == 0
    assert (out / "test_accel.py").read_text() == mine
    assert "kept your test_accel.py: it differs from the sample" in capsys.readouterr().out
    assert (out / "tf_top_tiny.v").read_text() == "// exported"  # refreshed
    assert (out / "run.py").read_text() == kit.sample_files("tiny")["run.py"]
    assert main([*args, "--force"]) == 0
    assert (out / "test_accel.py").read_text() == kit.sample_files("tiny")["test_accel.py"]


def test_the_runner_names_an_unknown_simulator_in_one_line(tmp_path, monkeypatch):
    """The written project's run.py: `python run.py questa` used to end in a traceback."""
    import subprocess
    import sys

    from tensorforge.hw import export

    monkeypatch.setattr(export, "export_verilog", lambda cfg, out_dir, top: None)
    folder = kit.write_testbench("tiny", tmp_path / "tb")
    proc = subprocess.run([sys.executable, "run.py", "questa"], cwd=folder, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr == ("run.py: simulator must be one of ['icarus', 'verilator'], not "
                           "'questa'\n")  # fmt: skip
