"""The tile program: an accelerator kernel as DMA copies and micro-op nests over named buffers.

The accelerator's lowering (``vta.lower``) turns a scheduled operator's loop IR into a
``TileProgram``: SRAM allocations (``Alloc``, sizes in elements of their scope) and the statements
(``Load``, ``Gemm``, ``Alu``, ``Store``) in program order, whose SRAM indices are relative to the
allocations they name. The passes of ``vta.passes`` fold loops into micro-op loop fields and
check capacities, and ``vta.generate_program`` lowers the result to a ProgramImage with
dependency tokens.

Example:
    >>> a = Alloc("acc", "acc", 4)
    >>> stmt = Alu(AluOp.MAX, "acc", (Uop(0, 0, 0),), (Loop(4, 1, 0),), imm=0)
    >>> print(format_stmt(stmt))
    ALU MAX acc imm=0 uops=1 loops=[4:d1,s0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from ...hw.isa import AluOp, Uop

if TYPE_CHECKING:
    from ...hw.config import HWConfig

SCOPES = ("inp", "wgt", "acc")


@dataclass(frozen=True, slots=True)
class MemoryScope:
    """An on-chip buffer as the compiler sees it: element shape and type, depth, bytes."""

    name: str
    elem_shape: tuple[int, ...]
    dtype: str
    depth: int
    nbytes: int


def memory_scopes(cfg: HWConfig) -> dict[str, MemoryScope]:
    """The inp/wgt/acc/uop scopes of a config, with capacities derived from it.

    Example:
        >>> from tensorforge.hw.config import HWConfig
        >>> memory_scopes(HWConfig.preset("tiny"))["wgt"]
        MemoryScope(name='wgt', elem_shape=(4, 4), dtype='int8', depth=256, nbytes=4096)
    """
    c = cfg
    return {
        "inp": MemoryScope("inp", (c.batch, c.block_in), "int8", c.inp_depth, c.inp_buff_size),
        "wgt": MemoryScope("wgt", (c.block_out, c.block_in), "int8", c.wgt_depth, c.wgt_buff_size),
        "acc": MemoryScope("acc", (c.batch, c.block_out), "int32", c.acc_depth, c.acc_buff_size),
        "uop": MemoryScope("uop", (), "uint32", c.uop_depth, c.uop_buff_size),
    }


__all__ = [
    "Alloc",
    "Alu",
    "AluOp",
    "Gemm",
    "GemmRequant",
    "Load",
    "Loop",
    "MemoryScope",
    "SCOPES",
    "Stmt",
    "Store",
    "TileProgram",
    "Uop",
    "format_program",
    "format_stmt",
    "memory_scopes",
]


@dataclass(frozen=True, slots=True)
class Alloc:
    """An on-chip buffer of ``size`` elements in memory scope ``scope`` (inp, wgt or acc)."""

    name: str
    scope: str
    size: int


@dataclass(frozen=True, slots=True)
class Load:
    """DRAM tensor ``tensor`` -> buffer ``buf`` at ``sram_offset``: a 2-D strided copy with padding.

    Offsets, sizes and strides count elements of the buffer's scope, as the LOAD instruction does.
    ``acc_8bit`` (an ``acc`` buffer only) loads int8 DRAM elements sign-extended into the
    accumulators (``MemType.ACC_8BIT``: a residual operand, or max pooling's input).
    """

    tensor: str
    buf: str
    sram_offset: int
    dram_offset: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0
    acc_8bit: bool = False

    @property
    def footprint(self) -> int:
        """SRAM elements written (the padded rectangle)."""
        ny = self.y_pad_0 + self.y_size + self.y_pad_1
        return ny * (self.x_pad_0 + self.x_size + self.x_pad_1)


@dataclass(frozen=True, slots=True)
class Store:
    """Accumulator buffer ``buf`` (its int8 OUT view) -> DRAM tensor ``tensor``, 2-D strided."""

    tensor: str
    buf: str
    sram_offset: int
    dram_offset: int
    y_size: int
    x_size: int
    x_stride: int


@dataclass(frozen=True, slots=True)
class Loop:
    """One loop around micro-ops: ``extent`` steps, index steps for dst, src and wgt."""

    extent: int
    dst: int
    src: int
    wgt: int = 0


@dataclass(frozen=True, slots=True)
class GemmRequant:
    """A GEMM's requantization on writeback (``hw.isa.GemmInsn.requant``): OUT gets the new
    accumulator ``[+ 2**(shift-1)] >> shift`` clipped to [-max, max] ([0, max] with relu)."""

    shift: int
    round: bool = False
    relu: bool = False


@dataclass(frozen=True, slots=True)
class Gemm:
    """``acc[dst] += inp[src] . wgt[wgt]^T`` for each micro-op inside ``loops`` (outermost first).

    Micro-op indices are relative to the buffers ``dst`` (acc), ``src`` (inp) and ``wgt``. With
    ``reset`` the addressed accumulators are zeroed and ``src``/``wgt`` are unused. With
    ``requant`` (HWConfig ``gemm_requant``) each step writes the requantized sum to OUT and 0 to
    the accumulator; its loops have no src steps.
    """

    dst: str
    src: str
    wgt: str
    uops: tuple[Uop, ...]
    loops: tuple[Loop, ...] = ()
    reset: bool = False
    requant: GemmRequant | None = None


@dataclass(frozen=True, slots=True)
class Alu:
    """``acc[dst] = op(acc[dst], imm or acc[src])`` for each micro-op inside ``loops``.

    ``src`` names the acc buffer of the operand (None with an immediate); micro-op src indices
    are relative to it.
    """

    op: AluOp
    dst: str
    uops: tuple[Uop, ...]
    loops: tuple[Loop, ...] = ()
    src: str | None = None
    imm: int | None = None


Stmt = Union[Load, Store, Gemm, Alu]  # noqa: UP007 (a runtime alias)


@dataclass(frozen=True, slots=True)
class TileProgram:
    """A kernel before encoding: its buffers and statements, and its DRAM tensors.

    ``inputs``/``outputs`` map DRAM tensor names to (shape, dtype) of their packed layout;
    ``constants`` map blob names to their bytes.
    """

    name: str
    allocs: tuple[Alloc, ...]
    stmts: tuple[Stmt, ...]
    inputs: tuple[tuple[str, tuple[int, ...], str], ...] = ()
    outputs: tuple[tuple[str, tuple[int, ...], str], ...] = ()
    constants: tuple[tuple[str, bytes], ...] = ()

    def alloc(self, name: str) -> Alloc:
        for a in self.allocs:
            if a.name == name:
                return a
        raise KeyError(f"tile program {self.name!r} has no buffer {name!r}")


def _loops(loops: tuple[Loop, ...]) -> str:
    parts = [f"{lp.extent}:d{lp.dst},s{lp.src}" + (f",w{lp.wgt}" if lp.wgt else "") for lp in loops]
    return "[" + " ".join(parts) + "]"


def format_stmt(stmt: Stmt) -> str:
    """A stable one-line text form of a statement (for golden tests and debugging)."""
    if isinstance(stmt, Load):
        pads = (stmt.y_pad_0, stmt.y_pad_1, stmt.x_pad_0, stmt.x_pad_1)
        return (
            f"LOAD{'.acc8' if stmt.acc_8bit else ''} {stmt.tensor}[{stmt.dram_offset}] -> "
            f"{stmt.buf}[{stmt.sram_offset}] {stmt.y_size}x{stmt.x_size}/{stmt.x_stride} "
            f"pad={pads}"
        )
    if isinstance(stmt, Store):
        return (
            f"STORE {stmt.buf}[{stmt.sram_offset}] -> {stmt.tensor}[{stmt.dram_offset}] "
            f"{stmt.y_size}x{stmt.x_size}/{stmt.x_stride}"
        )
    if isinstance(stmt, Gemm):
        head = (
            f"GEMM.reset {stmt.dst}" if stmt.reset else f"GEMM {stmt.dst} += {stmt.src}.{stmt.wgt}"
        )
        rq = stmt.requant
        if rq is not None:
            head += (
                f" requant(>>{rq.shift}{' round' if rq.round else ''}{' relu' if rq.relu else ''})"
            )
        return f"{head} uops={len(stmt.uops)} loops={_loops(stmt.loops)}"
    operand = f"imm={stmt.imm}" if stmt.imm is not None else f"src={stmt.src}"
    return (
        f"ALU {stmt.op.name} {stmt.dst} {operand} uops={len(stmt.uops)} loops={_loops(stmt.loops)}"
    )


def format_program(prog: TileProgram) -> str:
    """The whole tile program as text: buffers, then statements."""
    lines = [f"tile program {prog.name}"]
    lines += [f"  alloc {a.name}: {a.scope}[{a.size}]" for a in prog.allocs]
    return "\n".join(lines + [f"  {format_stmt(s)}" for s in prog.stmts])
