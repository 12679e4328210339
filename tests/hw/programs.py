"""Programs the hardware tests share: run in Amaranth's simulator (test_top.py) and on the
``rtl`` device backend under Icarus and Verilator (test_top_rtl.py)."""

from __future__ import annotations

import numpy as np

from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemInsn, MemType, Opcode, Uop
from tensorforge.runtime.program import UOP_BLOB, ProgramBuilder, ProgramImage


def hand_program(cfg: HWConfig, rng: np.random.Generator) -> ProgramImage:
    """Every instruction type: padded INP loads, WGT, UOP, ACC and ACC_8BIT loads, GEMM with
    reset, every ALU op (immediate and ACC operands, chained hazards), STORE, and the four token
    queues (l2g, g2l, g2s, s2g)."""
    bi, bo, bt = cfg.block_in, cfg.block_out, cfg.batch
    b = ProgramBuilder(cfg, name="every_insn")
    b.slot("X", "input", (2, 3, bt, bi))
    b.slot("O", "output", (12, bt, bo))
    b.blob("W", rng.integers(-128, 128, (3, bo, bi), dtype=np.int8))
    b.blob("A8", rng.integers(-128, 128, (4, bt, bo), dtype=np.int8))
    b.blob("A32", rng.integers(-(1 << 20), 1 << 20, (4, bt, bo), dtype=np.int32))
    every = b.add_uops([Uop(i, 0, 0) for i in range(12)])
    pairs = b.add_uops([Uop(i, 11 - i, 0) for i in range(12)])
    gemm = b.add_uops([Uop(i, 6 + i, i % 3) for i in range(4)])  # padded tile rows 1..2
    late = b.add_uops([Uop(i, 20 + i % 2, (i + 1) % 3) for i in range(4)])
    n = len(b.uops)
    L, S = Opcode.LOAD, Opcode.STORE
    b.emit(MemInsn(L, MemType.UOP, 0, 0, 1, n, n), reloc=UOP_BLOB)
    b.emit(MemInsn(L, MemType.ACC_8BIT, 4, 0, 1, 4, 4), reloc="A8")
    b.emit(MemInsn(L, MemType.ACC, 8, 0, 2, 2, 2), reloc="A32")
    b.emit(MemInsn(L, MemType.WGT, 0, 0, 1, 3, 3), reloc="W")
    b.emit(MemInsn(L, MemType.INP, 0, 0, 2, 3, 3, 1, 1, 1, 1, push_next=True), reloc="X")
    b.emit(GemmInsn(reset_reg=True, uop_bgn=every, uop_end=every + 4, pop_prev=True))
    b.emit(GemmInsn(uop_bgn=gemm, uop_end=gemm + 4, iter_out=2, src_factor_out=1,
                    push_prev=True))  # fmt: skip
    b.emit(MemInsn(L, MemType.INP, 20, 4, 1, 2, 2, pop_next=True, push_next=True), reloc="X")
    b.emit(GemmInsn(uop_bgn=late, uop_end=late + 4, pop_prev=True))
    ops = [(AluOp.ADD, False, 0), (AluOp.MUL, True, -3), (AluOp.SHR, True, 3),
           (AluOp.SHR, True, -2), (AluOp.MAX, False, 0), (AluOp.MIN, True, 20000),
           (AluOp.MAX, True, -20000), (AluOp.MIN, False, 0), (AluOp.ADD, True, 77),
           (AluOp.SHR, True, 6)]  # fmt: skip
    for op, use_imm, imm in ops:
        uop = pairs if not use_imm else every
        b.emit(AluInsn(uop_bgn=uop, uop_end=uop + 12, alu_opcode=op, use_imm=use_imm, imm=imm))
    b.emit(AluInsn(reset_reg=True, uop_bgn=every + 10, uop_end=every + 12, push_next=True))
    b.emit(MemInsn(S, MemType.OUT, 0, 0, 2, 6, 6, pop_prev=True, push_prev=True), reloc="O")
    b.emit(FinishInsn(pop_next=True))
    return b.build()


def hand_inputs(cfg: HWConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random values for ``hand_program``'s input slot."""
    return {"X": rng.integers(-128, 128, (2, 3, cfg.batch, cfg.block_in), dtype=np.int8)}
