"""The users' cocotb kit: a written testbench project runs, passes, and can fail.

Oracles: the functional simulator and the cycle model (inside `Testbench.check_program`), and
the register map's HW_ID magic.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tensorforge.cli import main
from tensorforge.cocotb import run_tests, write_testbench
from tensorforge.hw.config import HWConfig

pytestmark = pytest.mark.rtl


@pytest.fixture(autouse=True)
def _icarus():
    if shutil.which("iverilog") is None:
        pytest.skip("iverilog is not installed (make setup installs it)")


def test_project_of_a_custom_config_runs_and_passes(tmp_path):
    cfg = HWConfig.preset("tiny").replace(name="tiny_wide", log_block_out=3, log_acc_buff_size=13)
    folder = write_testbench(cfg, tmp_path / "tb")
    assert "hwconfig.json" in (folder / "test_accel.py").read_text()
    assert (folder / "tf_top_tiny_wide.v").exists()
    proc = subprocess.run([sys.executable, "run.py"], cwd=folder, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "PASS=1 FAIL=0" in proc.stdout


def test_a_failing_user_test_is_reported(tmp_path):
    folder = write_testbench("tiny", tmp_path / "tb")
    (folder / "test_wrong.py").write_text(
        "import cocotb\n"
        "from tensorforge.cocotb import Testbench\n\n"
        "@cocotb.test()\n"
        "async def wrong_magic(dut):\n"
        "    tb = Testbench(dut, 'tiny')\n"
        "    await tb.start()\n"
        "    assert await tb.read_reg('HW_ID') == 0, 'HW_ID is not 0'\n"
    )
    assert run_tests("test_wrong", "tiny", test_dir=folder) == 1


def test_cli_writes_the_project(tmp_path, capsys):
    assert main(["hw", "testbench", "--config", "tiny", "-o", str(tmp_path / "tb")]) == 0
    assert "python run.py" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "tb").iterdir()} >= {
        "run.py",
        "test_accel.py",
        "hwconfig.json",
        "tf_top_tiny.v",
    }


@pytest.mark.slow
def test_sample_test_passes_under_verilator(tmp_path):
    from tensorforge.runtime.device.vta import DeviceError
    from tensorforge.runtime.device.vta.rtl import check_simulator

    try:
        check_simulator("verilator")
    except DeviceError as exc:
        pytest.skip(str(exc))
    folder = write_testbench("tiny", tmp_path / "tb")
    assert run_tests("test_accel", "tiny", "verilator", test_dir=folder) == 0
