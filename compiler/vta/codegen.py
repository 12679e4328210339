"""Accelerator code generator: a tile program to a ProgramImage (DESIGN.md contract 3).

``generate_program`` runs the passes of ``vta.passes`` in order, lowers each statement to one
ISA instruction (LOAD/STORE with relocations against the program's slots and blobs, GEMM/ALU
against de-duplicated micro-op kernels), inserts dependency tokens, verifies them, and builds
the image with ``runtime.program.ProgramBuilder``.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> from tensorforge.compiler.vta.tile import Alloc, Alu, AluOp, Load, Loop, Store
    >>> from tensorforge.compiler.vta.tile import TileProgram, Uop
    >>> cfg = HWConfig.preset("tiny")
    >>> relu = Alu(AluOp.MAX, "a", (Uop(),), (Loop(4, 1, 0),), imm=0)
    >>> stmts = (Load("X", "a", 0, 0, 1, 4, 4), relu, Store("Y", "a", 0, 0, 1, 4, 4))
    >>> prog = TileProgram("relu", (Alloc("a", "acc", 4),), stmts,
    ...                    inputs=(("X", (4, 1, 4), "int32"),), outputs=(("Y", (4, 1, 4), "int8"),))
    >>> generate_program(prog, cfg).insn_count
    5
"""

from __future__ import annotations

from dataclasses import replace

from ...hw.config import HWConfig
from ...hw.isa import AluInsn, GemmInsn, MemInsn, MemType, Opcode
from ...runtime.program import UOP_BLOB, ProgramBuilder, ProgramImage
from .passes import (
    Emitted,
    check_sram_capacity,
    constant_adds_to_gemm,
    dedupe_uop_kernels,
    drop_zero_resets,
    fold_uop_loops,
    insert_dependency_tokens,
    requant_into_gemm,
    stream_resident_loads,
    verify_tile_program,
    verify_tokens,
)
from .tile import Alu, Gemm, Load, Loop, Stmt, Store, TileProgram, Uop

_MEM_TYPES = {"inp": MemType.INP, "wgt": MemType.WGT, "acc": MemType.ACC}


def lower_tile_program(
    prog: TileProgram, cfg: HWConfig, verify: bool = True
) -> tuple[TileProgram, list[Emitted], list[Uop]]:
    """The pipeline up to the token-flagged stream: (final tile program, stream, micro-op blob).

    With ``verify`` the tile program is checked as it comes and after folding
    (``verify_tile_program``), as ``tir.run_pipeline`` checks the loop IR after each pass.
    """
    if verify:
        verify_tile_program(prog, False, "lowering")
    prog = constant_adds_to_gemm(prog, cfg)  # the bias on the GEMM core: twice the ALU's rate
    if verify:
        verify_tile_program(prog, False, "constant_adds_to_gemm")
    prog = requant_into_gemm(prog, cfg)  # the bias step requantizes (gemm_requant): no ALU
    prog = drop_zero_resets(prog)  # the requantizing step left the accumulators at 0
    if verify:
        verify_tile_program(prog, False, "requant_into_gemm")
    prog = fold_uop_loops(prog)  # at most two loop levels per GEMM/ALU
    if verify:
        verify_tile_program(prog, True, "fold_uop_loops")
    prog, regions = stream_resident_loads(prog)  # resident weights loaded by first use
    bases = check_sram_capacity(prog, cfg)  # buffer placement; fails before any encoding
    stmts = prog.stmts
    kernels = [_absolute_uops(s, bases) for s in stmts if isinstance(s, (Gemm, Alu))]
    blob, offsets = dedupe_uop_kernels(kernels, cfg)  # each distinct kernel stored once
    stream: list[Emitted] = []
    if blob:
        n = len(blob)
        load = MemInsn(Opcode.LOAD, MemType.UOP, 0, 0, 1, n, n)
        stream.append(Emitted(load, UOP_BLOB, writes=("uop",)))
    k = iter(zip(kernels, offsets, strict=True))
    for i, s in enumerate(stmts):
        if isinstance(s, (Gemm, Alu)):
            uops, offset = next(k)
            e = _lower_compute(s, offset, len(uops))
        else:
            e = _lower_copy(s, prog, bases)
        if i in regions:  # parts of streamed resident buffers: hazards per part
            if isinstance(s, Load):
                e = replace(e, writes=regions[i])
            else:
                split = {r.split("#")[0] for r in regions[i]}
                e = replace(e, reads=tuple(b for b in e.reads if b not in split) + regions[i])
        stream.append(e)
    stream = insert_dependency_tokens(stream)  # push/pop flags + FINISH
    return prog, stream, blob


def generate_program(prog: TileProgram, cfg: HWConfig) -> ProgramImage:
    """Compile a tile program to a program image for ``cfg``.

    Raises:
        LoweringError: a buffer overflows its SRAM, an access leaves its buffer, the micro-ops
            do not fit, or the tokens would deadlock (each message names what failed).
    """
    final, stream, blob = lower_tile_program(prog, cfg)
    verify_tokens([e.insn for e in stream], cfg, prog.name)  # no deadlock, balanced tokens
    b = ProgramBuilder(cfg, name=prog.name)
    for name, shape, dtype in final.inputs:
        b.slot(name, "input", shape, dtype)
    for name, shape, dtype in final.outputs:
        b.slot(name, "output", shape, dtype)
    for name, data in final.constants:
        b.blob(name, data)
    b.add_uops(blob)
    for e in stream:
        b.emit(e.insn, reloc=e.reloc)
    return b.build()


def _absolute_uops(s: Gemm | Alu, bases: dict[str, int]) -> tuple[Uop, ...]:
    dst = bases[s.dst]
    if isinstance(s, Gemm):
        src, wgt = (0, 0) if s.reset else (bases[s.src], bases[s.wgt])
    else:
        src, wgt = (bases[s.src] if s.src is not None else 0), 0
    if isinstance(s, Gemm) and s.reset:
        return tuple(Uop(u.dst_idx + dst, 0, 0) for u in s.uops)
    return tuple(Uop(u.dst_idx + dst, u.src_idx + src, u.wgt_idx + wgt) for u in s.uops)


def _loop_fields(loops: tuple[Loop, ...], with_wgt: bool) -> dict[str, int]:
    padded = (*loops, Loop(1, 0, 0), Loop(1, 0, 0))[:2]
    out, inner = padded
    fields = dict(
        iter_out=out.extent,
        iter_in=inner.extent,
        dst_factor_out=out.dst,
        dst_factor_in=inner.dst,
        src_factor_out=out.src,
        src_factor_in=inner.src,
    )
    if with_wgt:
        fields.update(wgt_factor_out=out.wgt, wgt_factor_in=inner.wgt)
    return fields


def _lower_compute(s: Gemm | Alu, offset: int, n: int) -> Emitted:
    span = dict(uop_bgn=offset, uop_end=offset + n)
    if isinstance(s, Gemm):
        if s.reset:
            insn = GemmInsn(reset_reg=True, **span, **_loop_fields(s.loops, False))
            return Emitted(insn, reads=(s.dst,), writes=(s.dst,))
        fields = _loop_fields(s.loops, True)
        rq = s.requant
        if rq is not None:  # the src fields carry the requantization (no src steps)
            fields.update(src_factor_out=0, src_factor_in=0, requant=True, rq_shift=rq.shift,
                          rq_round=rq.round, rq_relu=rq.relu)  # fmt: skip
        insn = GemmInsn(**span, **fields)
        return Emitted(insn, reads=(s.src, s.wgt, s.dst), writes=(s.dst,))
    alu = AluInsn(
        **span,
        **_loop_fields(s.loops, False),
        alu_opcode=s.op,
        use_imm=s.imm is not None,
        imm=s.imm or 0,
    )
    reads = (s.dst,) if s.src is None else (s.dst, s.src)
    return Emitted(alu, reads=reads, writes=(s.dst,))


def _lower_copy(s: Stmt, prog: TileProgram, bases: dict[str, int]) -> Emitted:
    base = bases[s.buf] + s.sram_offset  # type: ignore[union-attr]
    if isinstance(s, Load):
        mt = MemType.ACC_8BIT if s.acc_8bit else _MEM_TYPES[prog.alloc(s.buf).scope]
        insn = MemInsn(
            Opcode.LOAD, mt, base, s.dram_offset, s.y_size, s.x_size, s.x_stride,
            s.y_pad_0, s.y_pad_1, s.x_pad_0, s.x_pad_1,
        )  # fmt: skip
        return Emitted(insn, s.tensor, writes=(s.buf,))
    assert isinstance(s, Store)
    insn = MemInsn(Opcode.STORE, MemType.OUT, base, s.dram_offset, s.y_size, s.x_size, s.x_stride)
    return Emitted(insn, s.tensor, reads=(s.buf,))
