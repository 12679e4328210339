"""The users' cocotb kit: a written testbench project runs, passes, and can fail.

Oracles: the functional simulator and the cycle model (inside `Testbench.check_program`), and
the register map's HW_ID magic.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

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
    assert "Read start addr" not in proc.stdout  # the AXI models' per-transaction lines: 400


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


USER_ERRORS = '''
import cocotb
import numpy as np
from tensorforge.cocotb import Testbench
from tensorforge.hw.isa import FinishInsn, GemmInsn, MemInsn, MemType, Opcode, Uop
from tensorforge.hw.regmap import LaunchError
from tensorforge.runtime.device.vta import DeviceError
from tensorforge.runtime.program import UOP_BLOB, ProgramBuilder


def deadlocked(cfg):
    """The compute stage pops a token from store, which waits for compute: a deadlock."""
    b = ProgramBuilder(cfg, name="deadlock")
    b.slot("Y", "output", (1, cfg.batch, cfg.block_out))
    u = b.add_uops([Uop(0, 0, 0)])
    b.emit(MemInsn(Opcode.LOAD, MemType.UOP, 0, 0, 1, 1, 1), reloc=UOP_BLOB)
    b.emit(GemmInsn(reset_reg=True, uop_bgn=u, uop_end=u + 1, pop_next=True, push_next=True))
    b.emit(MemInsn(Opcode.STORE, MemType.OUT, 0, 0, 1, 1, 1, pop_prev=True, push_prev=True),
           reloc="Y")
    b.emit(FinishInsn())
    return b.build()


async def raises(awaitable, kind):
    try:
        await awaitable
    except kind as exc:
        return str(exc)
    raise AssertionError(f"no {kind.__name__}")


@cocotb.test()
async def a_deadlock_ends_with_the_models_verdict(dut):
    tb = Testbench(dut, "tiny")  # the default cycle limit: 20,000 for a program the model rejects
    await tb.start()
    message = await raises(tb.run_program(deadlocked(tb.config), {}), DeviceError)
    assert "hung: no DONE after 20001 clock cycles (limit 20000" in message, message
    assert "CTRL=BUSY, STATUS=OK; the cycle model: deadlock" in message, message
    assert "compute stage waits at instruction 1 (GEMM) to pop a token from s2g" in message
    # the core still waits: the next launch is refused until a reset, then runs
    message = await raises(tb.run_program(deadlocked(tb.config), {}), DeviceError)
    assert message.endswith("the last launch hung and the core may still be running the rest of "
                            "that program: `await tb.reset()` before the next launch"), message
    await tb.reset()
    tb.poke(0x2000_0000, bytes([3]) + bytes(15))  # FINISH
    assert (await tb.launch(0x2000_0000, 1)).cycles > 0


@cocotb.test()
async def a_raw_stream_with_an_undefined_opcode_stops_with_bad_opcode(dut):
    tb = Testbench(dut, "tiny")
    await tb.start()
    tb.poke(0x2000_0000, bytes([7]) + bytes(15))
    message = await raises(tb.launch(0x2000_0000, 1), LaunchError)
    assert "STATUS BAD_OPCODE" in message, message
    assert await tb.read_reg("STATUS") == 1
    message = await raises(tb.launch(0x2000_0000, 1), LaunchError)
    assert message.startswith("the last launch stopped with ERROR"), message


@cocotb.test()
async def a_hung_launch_stops_at_max_cycles(dut):
    tb = Testbench(dut, "tiny", max_cycles=500)
    await tb.start()  # a stream of one ALU that pops a token nobody pushes
    tb.poke(0x2000_0000, bytes([4 | 1 << 3]) + bytes(15))
    message = await raises(tb.launch(0x2000_0000, 1), LaunchError)
    assert "hung: no DONE after 501 clock cycles (limit 500" in message, message


@cocotb.test()
async def an_unknown_register_name_lists_the_names(dut):
    tb = Testbench(dut, "tiny")
    message = await raises(tb.read_reg("HW_ID"), RuntimeError)  # not an AttributeError on None
    assert "call `await tb.start()` first" in message, message
    await tb.start()
    message = await raises(tb.read_reg("CYCLES"), KeyError)
    assert "register name must be one of CTRL, STATUS" in message and "not 'CYCLES'" in message
'''


def test_user_errors_end_with_clear_errors_not_hangs(tmp_path):
    """A deadlocked program, an undefined opcode, a hung raw launch, a misspelt register and a
    register read before `start`: each a clear error within seconds (a deadlock used to poll
    for `timeout_s`, 600 s)."""
    folder = write_testbench("tiny", tmp_path / "tb")
    (folder / "test_errors.py").write_text(USER_ERRORS)
    assert run_tests("test_errors", "tiny", test_dir=folder) == 0


USER_MODULE = """
import cocotb
import numpy as np
import tensorforge
from tensorforge.cocotb import Testbench
from tensorforge.compiler.frontend.onnx_builders import small_cnn


@cocotb.test()
async def a_compiled_cnn_matches_the_simulators(dut):
    tb = Testbench(dut, "tiny")
    await tb.start()
    model = small_cnn(8)
    name = model.graph.input[0].name
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    module = tensorforge.compile(model, "vta -config=tiny -device=sim", calibration={name: x})
    want = module.run({name: x})
    outputs, calls = await tb.check_module(module, {name: x})
    assert len(calls) == 3 and min(calls.values()) > 0, calls
    for key, value in want.items():
        assert np.array_equal(outputs[key], value), key
"""


def test_a_compiled_module_is_checked_against_both_models(tmp_path):
    folder = write_testbench("tiny", tmp_path / "tb")
    (folder / "test_module.py").write_text(USER_MODULE)
    assert run_tests("test_module", "tiny", test_dir=folder) == 0


def test_hardware_guide_sample_runs_as_written(tmp_path):
    """docs/hardware.md's sample test, copied from the page, passes."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "hardware.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", doc, re.S)
    folder = write_testbench("tiny", tmp_path / "tb")
    (folder / "test_doc.py").write_text(block)
    assert run_tests("test_doc", "tiny", test_dir=folder) == 0


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
