"""Runaway programs stop with a clear error naming the instruction, before the simulator spends
the time or memory they ask for (a step budget per run, which users can raise)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tensorforge.cli import main
from tensorforge.demo import build_matmul
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemInsn, MemType, Opcode, Uop
from tensorforge.runtime.device.vta import open_device
from tensorforge.runtime.device.vta.base import LoadedProgram
from tensorforge.runtime.program import UOP_BLOB, ProgramBuilder
from tensorforge.sim.functional import DEFAULT_MAX_STEPS, SimBudgetError

TINY = HWConfig.preset("tiny")


def _runaway(insn) -> object:
    """An image whose one compute instruction loops 16383 x 16383 times (815 bytes of program)."""
    b = ProgramBuilder(TINY, "runaway")
    n = 1 if isinstance(insn, AluInsn) else 1024
    off = b.add_uops([Uop(0, 0, 0)] * n)
    b.emit(MemInsn(Opcode.LOAD, MemType.UOP, 0, off, 1, n, n), reloc=UOP_BLOB)
    b.emit(insn)
    b.emit(FinishInsn())
    return b.build()


RUNAWAYS = {
    # every step reads the entry the step before wrote: one at a time, in Python
    "self-dependent ALU": AluInsn(uop_bgn=0, uop_end=1, iter_out=16383, iter_in=16383,
                                  alu_opcode=AluOp.ADD),
    "GEMM of 1024 micro-ops": GemmInsn(uop_bgn=0, uop_end=1024, iter_out=4096, iter_in=4096),
}  # fmt: skip


@pytest.mark.parametrize("name", RUNAWAYS)
def test_runaway_instruction_is_stopped_before_it_runs(name) -> None:
    image = _runaway(RUNAWAYS[name])
    device = open_device("sim", TINY)
    start = time.perf_counter()
    with pytest.raises(SimBudgetError, match=r"instruction 1 \((ALU|GEMM).*exceed what is left"):
        LoadedProgram.load(device, image).run({})
    assert time.perf_counter() - start < 5


def test_the_budget_counts_every_step_and_can_be_raised() -> None:
    kern = build_matmul(TINY, 4, 32, 16, shift=5)
    out, _ = kern.run_on("sim")
    np.testing.assert_array_equal(out, kern.reference())
    with pytest.raises(SimBudgetError, match="budget .* of 10\\)"):
        kern.run_on("sim", max_steps=10)
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        open_device("sim", TINY, max_steps=0)
    assert DEFAULT_MAX_STEPS >= 1 << 20


def test_cli_reports_a_runaway_program_in_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "runaway.tfp"
    _runaway(RUNAWAYS["self-dependent ALU"]).save(path)
    assert main(["sim", "run", str(path), "--random-inputs"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tensorforge: error: ") and err.count("\n") == 1
    assert "instruction 1 (ALU" in err and "--max-steps" in err
