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
    # nor their signal widths at start (130 lines) or cocotbext-axi's use of APIs cocotb 2
    # deprecates (a dozen warnings with source lines)
    assert "awvalid width" not in proc.stdout and "DeprecationWarning" not in proc.stdout


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
from tensorforge.runtime.device.vta import DeviceError


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
    # a call that hangs is named, with the model's count for it
    tb.max_cycles = 300
    await tb.reset()
    try:
        await tb.run_module(module, {name: x})
    except DeviceError as exc:
        message = str(exc)
    else:
        raise AssertionError("no DeviceError")
    assert "hung: no DONE after" in message and "(limit 300" in message, message
    hung = next(label for label, cycles in calls.items() if cycles > 300)  # in call order
    assert message.endswith(f"; in call {hung!r} (the cycle model finishes it in "
                            f"{calls[hung]} cycles)"), message
"""


def test_a_compiled_module_is_checked_against_both_models(tmp_path):
    folder = write_testbench("tiny", tmp_path / "tb")
    (folder / "test_module.py").write_text(USER_MODULE)
    assert run_tests("test_module", "tiny", test_dir=folder) == 0


USER_LAYERS = '''"""A user's integration test: compiled layers, a hand-launched ALU program,
a stream that cannot finish, on a custom config (batch 2, 128-bit AXI)."""

from pathlib import Path

import cocotb
import numpy as np

from tensorforge.cocotb import Testbench
from tensorforge.compiler.quantize.residual import add_params
from tensorforge.compiler.vta import conv2d, dense, max_pool2d
from tensorforge.hw.isa import AluInsn, AluOp, FinishInsn, MemInsn, MemType, Opcode, Uop
from tensorforge.hw.isa import decode_program, encode
from tensorforge.hw.regmap import Ctrl, LaunchError
from tensorforge.runtime.device.vta import run_image
from tensorforge.runtime.device.vta.rtl import matched_timing
from tensorforge.runtime.program import UOP_BLOB, ProgramBuilder
from tensorforge.sim.timing import simulate_timing

CONFIG = str(Path(__file__).with_name("hwconfig.json"))


async def raises(awaitable, kind):
    try:
        await awaitable
    except kind as exc:
        return str(exc)
    raise AssertionError(f"no {kind.__name__}")


async def poll_until_done(tb):
    while not (await tb.read_reg("CTRL")) & (Ctrl.DONE | Ctrl.ERROR):
        pass


@cocotb.test()
async def compiled_layers_match_the_simulators(dut):
    tb = Testbench(dut, CONFIG)
    await tb.start()
    cfg, rng = tb.config, np.random.default_rng(1)
    x = rng.integers(-128, 128, (cfg.batch, 4, 4, 4), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 4, 3, 3), dtype=np.int8)
    b = rng.integers(-500, 500, 8, dtype=np.int32)
    add = add_params(0.5, 1.3, cfg, mode="mul", relu=True)  # MUL on the ALU
    conv = conv2d(cfg, x.shape, w, b, padding=1, shift=8, residual=add, vthreads=2)
    r = rng.integers(-127, 128, conv.residual_shape, dtype=np.int8)
    out, _ = await tb.check_program(conv.image, conv.inputs(x, r))
    y = conv.unpack(out["Y"])
    assert np.array_equal(y, conv.reference(x, r))  # and the int8 oracle
    pool = max_pool2d(cfg, y.shape, 2)
    out, _ = await tb.check_program(pool.image, pool.inputs(y))
    assert np.array_equal(pool.unpack(out["Y"]), pool.reference(y))
    fc = dense(cfg, 2, rng.integers(-128, 128, (4, 8), dtype=np.int8), shift=7)
    a = rng.integers(-128, 128, (2, 8), dtype=np.int8)
    out, _ = await tb.check_program(fc.image, fc.inputs(a))
    assert np.array_equal(fc.unpack(out["Y"]), fc.reference(a))


def alu_program(cfg):
    """ACC from DRAM, then ADD/MUL/SHR/MAX/MIN with immediates and ADD of ACC, stored."""
    b = ProgramBuilder(cfg, name="alu")
    b.slot("A", "input", (4, cfg.batch, cfg.block_out), "int32")
    b.slot("O", "output", (4, cfg.batch, cfg.block_out))
    u = b.add_uops([Uop(i, 3 - i, 0) for i in range(4)])
    b.emit(MemInsn(Opcode.LOAD, MemType.UOP, 0, 0, 1, 4, 4), reloc=UOP_BLOB)
    b.emit(MemInsn(Opcode.LOAD, MemType.ACC, 0, 0, 1, 4, 4), reloc="A")
    for op, imm in [(AluOp.ADD, 1000), (AluOp.MUL, -3), (AluOp.SHR, 4), (AluOp.MAX, -90),
                    (AluOp.MIN, 100), (AluOp.SHR, -1)]:
        b.emit(AluInsn(uop_bgn=u, uop_end=u + 4, alu_opcode=op, use_imm=True, imm=imm))
    b.emit(AluInsn(uop_bgn=u, uop_end=u + 4, alu_opcode=AluOp.ADD, push_next=True))
    b.emit(MemInsn(Opcode.STORE, MemType.OUT, 0, 0, 1, 4, 4, pop_prev=True, push_prev=True),
           reloc="O")
    b.emit(FinishInsn(pop_next=True))
    return b.build()


@cocotb.test()
async def a_program_launched_by_hand_matches_the_simulators(dut):
    tb = Testbench(dut, CONFIG)
    await tb.start()
    image = alu_program(tb.config)
    shape = image.buffer("A").shape
    inputs = {"A": np.random.default_rng(2).integers(-3000, 3000, shape, dtype=np.int32)}
    want, _ = tb.expected(image, inputs)
    # place it by hand: a page per buffer, the stream last
    names = [s.name for s in image.slots] + [bl.name for bl in image.blobs]
    addr = {n: 0x1000_0000 + 0x1000 * i for i, n in enumerate(names)}
    for bl in image.blobs:
        tb.poke(addr[bl.name], bl.data)
    tb.poke(addr["A"], inputs["A"])
    insns = image.patch(addr)
    at = 0x1000_0000 + 0x1000 * len(names)
    tb.poke(at, insns)
    await tb.write_reg("INSN_ADDR_LO", at)
    await tb.write_reg("INSN_ADDR_HI", 0)
    await tb.write_reg("INSN_COUNT", image.insn_count)
    await tb.write_reg("CTRL", Ctrl.START)
    await poll_until_done(tb)
    assert await tb.read_reg("CTRL") == Ctrl.DONE
    cycles = await tb.read_reg("CYCLES_LO")
    timed = simulate_timing(decode_program(insns, tb.config), tb.config,
                            matched_timing(tb.config), at)
    assert cycles == timed.cycles, (cycles, timed.cycles)
    got = np.frombuffer(tb.peek(addr["O"], want["O"].nbytes), np.int8).reshape(want["O"].shape)
    assert np.array_equal(got, want["O"])


@cocotb.test()
async def a_stream_without_finish_ends_with_the_models_verdict(dut):
    tb = Testbench(dut, CONFIG)
    await tb.start()
    tb.poke(0x2000_0000, encode(AluInsn(), tb.config))  # an empty ALU, no FINISH: never DONE
    message = await raises(tb.launch(0x2000_0000, 1), LaunchError)
    assert "hung: no DONE after 20001 clock cycles (limit 20000" in message, message
    assert "; the cycle model: " in message and "FINISH" in message, message
    message = await raises(tb.launch(0x2000_0000, 0), ValueError)
    assert "insn_count must be an int from 1" in message, message
    message = await raises(tb.start(), RuntimeError)
    assert "already started" in message, message
    await tb.reset()
    tb.max_cycles = 2000  # the same stream started by hand: the same verdict
    for reg, value in (("INSN_ADDR_LO", 0x2000_0000), ("INSN_COUNT", 1), ("CTRL", Ctrl.START)):
        await tb.write_reg(reg, value)
    message = await raises(poll_until_done(tb), LaunchError)
    assert "(limit 2000" in message and "; the cycle model: " in message, message
    await tb.reset()
    image = alu_program(tb.config)
    await tb.check_program(image, image.random_inputs(seed=3))
'''


def test_a_users_layers_on_a_custom_config_match_the_models(tmp_path):
    """A user's own tests in a project written by `tensorforge hw testbench --config <json>`
    for batch 2 and a 128-bit bus (both new to the kit): a compiled conv with a MUL-scaled
    residual add and 2 virtual threads, a max pooling and a dense, one after another on one
    bench; an ALU program (immediates) placed and launched by hand through `poke`/`write_reg`/
    `read_reg`/`peek`; a stream without FINISH. Oracles: the functional simulator (outputs),
    the cycle model (CYCLES) and the int8 reference. A stream that could never finish used to
    wait 200,000 cycles (about a minute) without the model's verdict, a count of 0 as long, and
    a second `start()` put a second clock and RAM model on the pins."""
    cfg = HWConfig.preset("tiny").replace(name="tiny_b2w", log_batch=1, axi_data_width=128)
    (tmp_path / "cfg.json").write_text(cfg.to_json())
    folder = tmp_path / "tb"
    assert main(["hw", "testbench", "--config", str(tmp_path / "cfg.json"), "-o", str(folder)]) == 0
    (folder / "test_layers.py").write_text(USER_LAYERS)
    assert run_tests("test_layers", str(folder / "hwconfig.json"), test_dir=folder) == 0


def test_hardware_guide_sample_runs_as_written(tmp_path):
    """docs/hardware.md's sample test, copied from the page, passes."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "hardware.md").read_text()
    block = re.findall(r"```python\n(.*?)```", doc, re.S)[0]  # the first: the sample
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
