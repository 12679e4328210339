"""The accelerator's ISA: the one definition of instructions, micro-ops and their semantics.

The layout is VTA's (vta_facts.md §1): 128-bit LOAD/STORE/GEMM/ALU/FINISH instructions whose low
64 bits and high 64 bits are packed separately, and 32-bit micro-ops. Field widths that VTA
derives from buffer depths are derived here from the HWConfig, so the ISA of one config is not
binary-compatible with another's. The Amaranth decoder, both simulators, the compiler and the docs
(`tensorforge isa`) read these tables.

Extensions and choices over VTA, all deliberate:
- ALU MUL (opcode 4): the low ``acc_width`` bits of the product. VTA's fsim had it, its hardware
  did not; a HWConfig with ``alu_mul=False`` rejects it.
- ALU SHR: the operand ``s`` is a signed amount; ``s >= 0`` is an arithmetic right shift (floor of
  x / 2**s, so any s >= acc_width - 1 gives the sign), ``s < 0`` a left shift by -s wrapping to
  ``acc_width`` bits (any -s >= acc_width gives 0). VTA's HLS used only the low 5 bits.
- ADD wraps to ``acc_width`` bits; MIN and MAX compare signed values.
- GEMM accumulates int8 x int8 products into ``acc_width``-bit two's-complement lanes (wrapping).
- Every GEMM and ALU write of ACC also writes OUT with the low ``out_width`` bits (VTA's HLS).
- GEMM ``requant`` (HWConfig ``gemm_requant``; the format has no such field without it): each step
  writes OUT with ``requant_apply`` of the new accumulator (a floor or rounding right shift,
  then a clip to the symmetric ``out_width`` range, or to [0, max] with ``rq_relu``) and writes
  0 to ACC. The parameters are packed into the ``src_factor_out`` field (``rq_shift`` in its
  low ``log_acc_width`` bits, then ``rq_round``, then ``rq_relu``), so such a GEMM has no src
  loop offsets (``src_factor_in`` must be 0). One requantizing step per output vector (a
  conv's bias step) replaces the ALU passes SHR, MAX, MIN (and ADD for rounding), and the
  cleared ACC needs no reset before the next tile.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> cfg = HWConfig.preset("pynq")
    >>> insn = GemmInsn(uop_bgn=0, uop_end=4, iter_out=2, iter_in=1, dst_factor_out=4)
    >>> decode(encode(insn, cfg), cfg) == insn
    True
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Union

import numpy as np

if TYPE_CHECKING:
    from .config import HWConfig

INSN_BYTES = 16
UOP_BYTES = 4
LOOP_ITER_WIDTH = 14  # iter_out / iter_in
MEM_SRAM_WIDTH = 16
MEM_DRAM_WIDTH = 32
MEM_SIZE_WIDTH = 16  # y_size, x_size, x_stride
MEM_PAD_WIDTH = 4
MAX_PAD = (1 << MEM_PAD_WIDTH) - 1  # the largest LOAD pad field
MAX_XFER = (1 << MEM_SIZE_WIDTH) - 1  # the largest y_size / x_size / x_stride
ALU_IMM_WIDTH = 16


class IsaError(ValueError):
    """An instruction or micro-op that cannot be encoded or decoded for a HWConfig."""


class Opcode(enum.IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemType(enum.IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC_8BIT = 5  # int8 values loaded into ACC, sign-extended


class AluOp(enum.IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4  # extension: see the module docstring


class Stage(enum.IntEnum):
    """The three task-pipeline stages, in order; fetch routes each instruction to one."""

    LOAD = 1
    COMPUTE = 2
    STORE = 3


# ---- instructions ------------------------------------------------------------------------
# Field names are the ISA's names in every layer. Dependency flags come last so that every
# instruction can be built with keywords only.


@dataclass(frozen=True, slots=True)
class MemInsn:
    """LOAD (DRAM -> SRAM, 2-D strided with zero padding) or STORE (OUT -> DRAM).

    ``dram_base`` and ``sram_base`` count elements of ``memory_type``; ``x_stride`` counts DRAM
    elements per row. The SRAM side is written densely with row width x_pad_0+x_size+x_pad_1.
    """

    opcode: Opcode = Opcode.LOAD
    memory_type: MemType = MemType.INP
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 0
    x_size: int = 0
    x_stride: int = 0
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False


@dataclass(frozen=True, slots=True)
class GemmInsn:
    """ACC[dst] += INP[src] . WGT[wgt]^T over a two-level loop around micro-ops [uop_bgn, uop_end).

    With ``reset_reg`` the addressed ACC entries are set to 0 instead. With ``requant``
    (HWConfig ``gemm_requant``) each step writes OUT[dst] = ``requant_apply(ACC[dst] + ...,
    rq_shift, rq_round, rq_relu)`` and ACC[dst] = 0; its src offsets are 0 (``src_factor_out``
    and ``src_factor_in`` must be 0: the encoding holds the parameters there).
    """

    reset_reg: bool = False
    uop_bgn: int = 0
    uop_end: int = 0
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0
    wgt_factor_out: int = 0
    wgt_factor_in: int = 0
    requant: bool = False
    rq_shift: int = 0
    rq_round: bool = False
    rq_relu: bool = False
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @property
    def opcode(self) -> Opcode:
        return Opcode.GEMM


@dataclass(frozen=True, slots=True)
class AluInsn:
    """ACC[dst] = alu_opcode(ACC[dst], imm if use_imm else ACC[src]), lane-wise.

    The same two-level loop as GEMM; ``src`` indexes ACC. With ``reset_reg`` the addressed ACC
    (and OUT) entries are set to 0 instead, as for GEMM.
    """

    reset_reg: bool = False
    uop_bgn: int = 0
    uop_end: int = 0
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0
    alu_opcode: AluOp = AluOp.ADD
    use_imm: bool = False
    imm: int = 0
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @property
    def opcode(self) -> Opcode:
        return Opcode.ALU


@dataclass(frozen=True, slots=True)
class FinishInsn:
    """Ends a program: the compute stage raises ``done``."""

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @property
    def opcode(self) -> Opcode:
        return Opcode.FINISH


@dataclass(frozen=True, slots=True)
class Uop:
    """A micro-op: base indices into ACC (dst), INP or ACC (src) and WGT (wgt)."""

    dst_idx: int = 0
    src_idx: int = 0
    wgt_idx: int = 0


Insn = Union[MemInsn, GemmInsn, AluInsn, FinishInsn]  # noqa: UP007 (a runtime alias)


def elem_bytes(cfg: HWConfig, memory_type: MemType) -> int:
    """Bytes of one element of a memory type: the unit of dram_base, x_stride and sram_base."""
    return {
        MemType.UOP: cfg.uop_elem_bytes,
        MemType.INP: cfg.inp_elem_bytes,
        MemType.WGT: cfg.wgt_elem_bytes,
        MemType.ACC: cfg.acc_elem_bytes,
        MemType.ACC_8BIT: cfg.acc8_elem_bytes,
        MemType.OUT: cfg.out_elem_bytes,
    }[memory_type]


def stage_of(insn: Insn) -> Stage:
    """Which pipeline stage executes an instruction (fetch's routing rule, vta_facts.md §2.1)."""
    if isinstance(insn, MemInsn):
        if insn.opcode == Opcode.STORE:
            return Stage.STORE
        if insn.memory_type in (MemType.INP, MemType.WGT):
            return Stage.LOAD
    return Stage.COMPUTE


def describe(insn: Insn) -> str:
    """A short name for error messages, e.g. ``LOAD INP`` or ``ALU SHR``."""
    if isinstance(insn, MemInsn):
        return f"{insn.opcode.name} {insn.memory_type.name}"
    if isinstance(insn, AluInsn):
        return f"ALU {insn.alu_opcode.name}"
    return insn.opcode.name


# ---- bit layouts ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BitField:
    name: str
    lsb: int
    width: int
    signed: bool = False
    doc: str = ""

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1

    @property
    def lo(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


@dataclass(frozen=True)
class Layout:
    """The bit fields of one instruction format."""

    name: str
    fields: tuple[BitField, ...]
    width: int

    def field(self, name: str) -> BitField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def pack(self, values: dict[str, int], what: str) -> int:
        word = 0
        for f in self.fields:
            v = int(values.get(f.name, 0))
            if not f.lo <= v <= f.hi:
                raise IsaError(
                    f"{what} field {f.name} must be in [{f.lo}, {f.hi}] ({f.width} bits), not {v}"
                )
            word |= (v & ((1 << f.width) - 1)) << f.lsb
        return word

    def unpack(self, word: int) -> dict[str, int]:
        out = {}
        for f in self.fields:
            v = (word >> f.lsb) & ((1 << f.width) - 1)
            if f.signed and f.width and v >> (f.width - 1):
                v -= 1 << f.width
            out[f.name] = v
        return out


_DOCS = {
    "opcode": "0 LOAD, 1 STORE, 2 GEMM, 3 FINISH, 4 ALU",
    "pop_prev": "pop a token from the previous stage before executing",
    "pop_next": "pop a token from the next stage before executing",
    "push_prev": "push a token to the previous stage after executing",
    "push_next": "push a token to the next stage after executing",
    "memory_type": "0 UOP, 1 WGT, 2 INP, 3 ACC, 4 OUT, 5 ACC_8BIT",
    "sram_base": "SRAM index, in elements of memory_type",
    "dram_base": "DRAM address, in elements of memory_type",
    "y_size": "rows",
    "x_size": "elements per row (0: no transfer, tokens only)",
    "x_stride": "DRAM row stride, in elements",
    "y_pad_0": "zero rows before",
    "y_pad_1": "zero rows after",
    "x_pad_0": "zero elements before each row",
    "x_pad_1": "zero elements after each row",
    "reset_reg": "write 0 to the addressed ACC entries instead",
    "uop_bgn": "first micro-op",
    "uop_end": "micro-op end (exclusive)",
    "iter_out": "outer loop trip count",
    "iter_in": "inner loop trip count",
    "dst_factor_out": "ACC index step per outer iteration",
    "dst_factor_in": "ACC index step per inner iteration",
    "src_factor_out": "INP (GEMM) or ACC (ALU) index step per outer iteration",
    "src_factor_in": "INP (GEMM) or ACC (ALU) index step per inner iteration",
    "wgt_factor_out": "WGT index step per outer iteration",
    "wgt_factor_in": "WGT index step per inner iteration",
    "requant": "requantize on writeback (HWConfig gemm_requant): OUT = requant_apply(ACC), "
    "ACC = 0; src_factor_out then holds rq_shift (log_acc_width bits), rq_round, rq_relu",
    "alu_opcode": "0 MIN, 1 MAX, 2 ADD, 3 SHR, 4 MUL (extension)",
    "use_imm": "operand is imm instead of ACC[src]",
    "imm": "signed immediate operand",
    "dst_idx": "ACC index",
    "src_idx": "INP index (GEMM) or ACC index (ALU)",
    "wgt_idx": "WGT index",
}

_HEADER = (("opcode", 3), ("pop_prev", 1), ("pop_next", 1), ("push_prev", 1), ("push_next", 1))


def _place(name: str, words: list[list[tuple[str, int]]], signed: tuple[str, ...] = ()) -> Layout:
    """Pack each 64-bit word's fields from its low bit, as VTA's C bitfields do."""
    fields = []
    for w, spec in enumerate(words):
        lsb = 64 * w
        for fname, width in spec:
            fields.append(BitField(fname, lsb, width, fname in signed, _DOCS[fname]))
            lsb += width
        if lsb > 64 * (w + 1):
            raise _LayoutOverflow(name, w, lsb - 64 * w)
    return Layout(name, tuple(fields), 64 * len(words))


class _LayoutOverflow(Exception):
    def __init__(self, layout: str, word: int, bits: int) -> None:
        self.layout, self.word, self.bits = layout, word, bits


@dataclass(frozen=True)
class IsaLayouts:
    mem: Layout
    gemm: Layout
    alu: Layout
    uop: Layout

    def for_insn(self, insn: Insn) -> Layout:
        if isinstance(insn, MemInsn):
            return self.mem
        if isinstance(insn, AluInsn):
            return self.alu
        return self.gemm  # GEMM and FINISH share a format


@lru_cache(maxsize=64)
def layouts(cfg: HWConfig) -> IsaLayouts:
    """The bit layouts for a config (cached; HWConfig is immutable)."""
    loop = [
        ("reset_reg", 1),
        ("uop_bgn", cfg.log_uop_depth),
        ("uop_end", cfg.log_uop_depth + 1),
        ("iter_out", LOOP_ITER_WIDTH),
        ("iter_in", LOOP_ITER_WIDTH),
    ]
    acc, inp, wgt = cfg.log_acc_depth, cfg.log_inp_depth, cfg.log_wgt_depth
    mem = _place(
        "MEM",
        [
            [*_HEADER, ("memory_type", 3), ("sram_base", MEM_SRAM_WIDTH),
             ("dram_base", MEM_DRAM_WIDTH)],
            [("y_size", MEM_SIZE_WIDTH), ("x_size", MEM_SIZE_WIDTH), ("x_stride", MEM_SIZE_WIDTH),
             ("y_pad_0", MEM_PAD_WIDTH), ("y_pad_1", MEM_PAD_WIDTH),
             ("x_pad_0", MEM_PAD_WIDTH), ("x_pad_1", MEM_PAD_WIDTH)],
        ],
    )  # fmt: skip
    gemm = _place(
        "GEMM",
        [
            # requant only with the option: the presets' layouts (and RTL) stay VTA's
            [*_HEADER, *loop, *([("requant", 1)] if cfg.gemm_requant else [])],
            [("dst_factor_out", acc), ("dst_factor_in", acc), ("src_factor_out", inp),
             ("src_factor_in", inp), ("wgt_factor_out", wgt), ("wgt_factor_in", wgt)],
        ],
    )  # fmt: skip
    alu = _place(
        "ALU",
        [
            [*_HEADER, *loop],
            [("dst_factor_out", acc), ("dst_factor_in", acc), ("src_factor_out", acc),
             ("src_factor_in", acc), ("alu_opcode", 3), ("use_imm", 1), ("imm", ALU_IMM_WIDTH)],
        ],
        signed=("imm",),
    )  # fmt: skip
    uop = _place("UOP", [[("dst_idx", acc), ("src_idx", max(acc, inp)), ("wgt_idx", wgt)]])
    uop = Layout("UOP", uop.fields, 32)
    if uop.fields[-1].msb >= 32:
        raise _LayoutOverflow("UOP", 0, uop.fields[-1].msb + 1)
    return IsaLayouts(mem, gemm, alu, uop)


def check_config_fits(cfg: HWConfig) -> None:
    """Raise ValueError naming the knob when a config's fields do not fit the ISA."""
    if cfg.gemm_requant and cfg.log_inp_depth < cfg.log_acc_width + 2:
        raise ValueError(
            f"HWConfig.gemm_requant needs a src_factor_out field of at least "
            f"{cfg.log_acc_width + 2} bits for the requantization, not {cfg.log_inp_depth}: "
            "raise log_inp_buff_size"
        )
    for buf in ("uop", "inp", "wgt", "acc"):
        depth = getattr(cfg, f"{buf}_depth")
        if depth > 1 << MEM_SRAM_WIDTH:
            raise ValueError(
                f"HWConfig.log_{buf}_buff_size gives a {buf.upper()} depth of {depth}, beyond "
                f"the {MEM_SRAM_WIDTH}-bit sram_base field (at most {1 << MEM_SRAM_WIDTH})"
            )
    try:
        layouts(cfg)
    except _LayoutOverflow as e:
        limit = 32 if e.layout == "UOP" else 64
        knobs = {
            "UOP": "log_acc_buff_size/log_inp_buff_size/log_wgt_buff_size",
            "GEMM": "log_uop_buff_size (or gemm_requant)"
            if e.word == 0
            else "log_acc/inp/wgt_buff_size",
            "ALU": "log_uop_buff_size" if e.word == 0 else "log_acc_buff_size",
        }[e.layout]
        raise ValueError(
            f"HWConfig.{knobs} makes the {e.layout} format need {e.bits} bits in word "
            f"{e.word}, more than {limit}: reduce the buffer depth"
        ) from None


# ---- encode / decode -----------------------------------------------------------------------

_MEM_FIELDS = tuple(f.name for f in dataclasses.fields(MemInsn))
_GEMM_FIELDS = tuple(f.name for f in dataclasses.fields(GemmInsn))
_ALU_FIELDS = tuple(f.name for f in dataclasses.fields(AluInsn))
DEP_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")  # hw/tokens.py: their queues


def _where(index: int | None) -> str:
    return "" if index is None else f"instruction {index} "


def encode_word(insn: Insn, cfg: HWConfig, index: int | None = None) -> int:
    """The instruction as a 128-bit integer."""
    if not isinstance(insn, (MemInsn, GemmInsn, AluInsn, FinishInsn)):
        raise IsaError(f"{_where(index)}must be an ISA instruction, not {insn!r}")
    what = f"{_where(index)}({describe(insn)})"
    values = {f: int(getattr(insn, f)) for f in DEP_FLAGS}
    values["opcode"] = int(insn.opcode)
    if isinstance(insn, MemInsn):
        if insn.opcode not in (Opcode.LOAD, Opcode.STORE):
            raise IsaError(f"{what} opcode must be LOAD or STORE, not {insn.opcode!r}")
        values.update({f: int(getattr(insn, f)) for f in _MEM_FIELDS if f != "opcode"})
    elif isinstance(insn, (GemmInsn, AluInsn)):
        if isinstance(insn, AluInsn) and insn.alu_opcode == AluOp.MUL and not cfg.alu_mul:
            raise IsaError(f"{what}: HWConfig {cfg.name!r} has no ALU MUL (alu_mul=False)")
        names = _GEMM_FIELDS if isinstance(insn, GemmInsn) else _ALU_FIELDS
        values.update({f: int(getattr(insn, f)) for f in names if f not in _RQ_PARAMS})
        if isinstance(insn, GemmInsn):
            _pack_requant(insn, cfg, what, values)
    return layouts(cfg).for_insn(insn).pack(values, what)


_RQ_PARAMS = ("rq_shift", "rq_round", "rq_relu")


def _pack_requant(insn: GemmInsn, cfg: HWConfig, what: str, values: dict[str, int]) -> None:
    """Put a requantizing GEMM's parameters into its src_factor_out field (checked)."""
    if not insn.requant:
        if insn.rq_shift or insn.rq_round or insn.rq_relu:
            raise IsaError(f"{what}: rq_shift/rq_round/rq_relu need requant=True")
        return
    if not cfg.gemm_requant:
        raise IsaError(f"{what}: HWConfig {cfg.name!r} has no GEMM requant (gemm_requant=False)")
    if insn.reset_reg or insn.src_factor_out or insn.src_factor_in:
        raise IsaError(
            f"{what}: a requant GEMM must have reset_reg=False and src factors 0, not "
            f"{insn.reset_reg}, {insn.src_factor_out}, {insn.src_factor_in}"
        )
    if not 0 <= insn.rq_shift < cfg.acc_width or (insn.rq_round and insn.rq_shift == 0):
        raise IsaError(f"{what} field rq_shift must be in [{int(insn.rq_round)}, "
                       f"{cfg.acc_width - 1}], not {insn.rq_shift}")  # fmt: skip
    lw = cfg.log_acc_width
    values["src_factor_out"] = (
        insn.rq_shift | int(insn.rq_round) << lw | int(insn.rq_relu) << (lw + 1)
    )


def unpack_requant(src_factor_out: int, cfg: HWConfig) -> tuple[int, bool, bool]:
    """(rq_shift, rq_round, rq_relu) from a requantizing GEMM's src_factor_out field."""
    lw = cfg.log_acc_width
    return (
        src_factor_out & ((1 << lw) - 1),
        bool(src_factor_out >> lw & 1),
        bool(src_factor_out >> (lw + 1) & 1),
    )


def encode(insn: Insn, cfg: HWConfig, index: int | None = None) -> bytes:
    """The instruction's 16 bytes, little-endian (bit 0 is bit 0 of byte 0)."""
    return encode_word(insn, cfg, index).to_bytes(INSN_BYTES, "little")


def _enum(kind: type[enum.IntEnum], value: int, what: str, field: str) -> enum.IntEnum:
    try:
        return kind(value)
    except ValueError:
        names = ", ".join(f"{m.value} {m.name}" for m in kind)
        raise IsaError(f"{what}field {field} must be one of {names}, not {value}") from None


def decode_word(word: int, cfg: HWConfig, index: int | None = None) -> Insn:
    lay = layouts(cfg)
    where = _where(index)
    opcode = _enum(Opcode, word & 0b111, where, "opcode")
    if opcode in (Opcode.LOAD, Opcode.STORE):
        v = lay.mem.unpack(word)
        v["opcode"] = opcode
        v["memory_type"] = _enum(MemType, v["memory_type"], where, "memory_type")
        return MemInsn(**{f: _typed(f, v[f]) for f in _MEM_FIELDS})
    if opcode == Opcode.ALU:
        v = lay.alu.unpack(word)
        v["alu_opcode"] = _enum(AluOp, v["alu_opcode"], where, "alu_opcode")
        return AluInsn(**{f: _typed(f, v[f]) for f in _ALU_FIELDS})
    v = lay.gemm.unpack(word)
    if opcode == Opcode.FINISH:
        return FinishInsn(**{f: bool(v[f]) for f in DEP_FLAGS})
    v["rq_shift"], v["rq_round"], v["rq_relu"] = 0, 0, 0
    v.setdefault("requant", 0)
    if v["requant"]:
        v["rq_shift"], v["rq_round"], v["rq_relu"] = unpack_requant(v["src_factor_out"], cfg)
        v["src_factor_out"] = 0
    return GemmInsn(**{f: _typed(f, v[f]) for f in _GEMM_FIELDS})


_BOOL_FIELDS = frozenset(DEP_FLAGS + ("reset_reg", "use_imm", "requant", "rq_round", "rq_relu"))


def _typed(name: str, value: object) -> object:
    return bool(value) if name in _BOOL_FIELDS else value


def decode(data: bytes, cfg: HWConfig, index: int | None = None) -> Insn:
    if len(data) != INSN_BYTES:
        raise IsaError(f"{_where(index)}must be {INSN_BYTES} bytes, not {len(data)}")
    return decode_word(int.from_bytes(data, "little"), cfg, index)


def encode_program(insns: list[Insn], cfg: HWConfig) -> bytes:
    return b"".join(encode(insn, cfg, i) for i, insn in enumerate(insns))


def decode_program(data: bytes, cfg: HWConfig) -> list[Insn]:
    if len(data) % INSN_BYTES:
        raise IsaError(
            f"an instruction stream must be a multiple of {INSN_BYTES} bytes, not {len(data)}"
        )
    return [
        decode(data[i : i + INSN_BYTES], cfg, i // INSN_BYTES)
        for i in range(0, len(data), INSN_BYTES)
    ]


def encode_uop(uop: Uop, cfg: HWConfig, index: int | None = None) -> bytes:
    what = "" if index is None else f"micro-op {index} "
    values = {"dst_idx": uop.dst_idx, "src_idx": uop.src_idx, "wgt_idx": uop.wgt_idx}
    return layouts(cfg).uop.pack(values, f"{what}(UOP)").to_bytes(UOP_BYTES, "little")


def decode_uop(data: bytes, cfg: HWConfig) -> Uop:
    if len(data) != UOP_BYTES:
        raise IsaError(f"a micro-op must be {UOP_BYTES} bytes, not {len(data)}")
    return Uop(**layouts(cfg).uop.unpack(int.from_bytes(data, "little")))


def encode_uops(uops: list[Uop], cfg: HWConfig) -> bytes:
    return b"".join(encode_uop(u, cfg, i) for i, u in enumerate(uops))


def decode_uop_array(words: np.ndarray, cfg: HWConfig) -> tuple[np.ndarray, ...]:
    """Vectorized micro-op decode: uint32 words -> (dst_idx, src_idx, wgt_idx) int64 arrays."""
    w = words.astype(np.int64)
    return tuple((w >> f.lsb) & ((1 << f.width) - 1) for f in layouts(cfg).uop.fields)  # type: ignore[return-value]


# ---- semantics shared by every model of the hardware --------------------------------------


def wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement wrap of int64 values to ``bits`` bits (returned as int64)."""
    half = 1 << (bits - 1)
    return ((x + half) & ((1 << bits) - 1)) - half


def alu_apply(op: AluOp, a: np.ndarray, b: np.ndarray | int, acc_width: int) -> np.ndarray:
    """One ALU operation on accumulator lanes, exactly as the hardware computes it.

    ``a`` holds ACC[dst] values, ``b`` the operand (ACC[src] values or the immediate); both are
    signed ``acc_width``-bit values. Returns int64 values in the ``acc_width``-bit range.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if op == AluOp.MIN:
        return np.minimum(a, b)
    if op == AluOp.MAX:
        return np.maximum(a, b)
    if op == AluOp.ADD:
        return wrap(a + b, acc_width)
    if op == AluOp.MUL:
        # The low acc_width bits of the product; int64 multiplication wraps mod 2**64, which
        # preserves the low bits.
        with np.errstate(over="ignore"):
            return wrap(a * b, acc_width)
    if op == AluOp.SHR:
        right = np.clip(b, 0, acc_width - 1)
        left = np.clip(-b, 0, acc_width)
        shifted_left = np.where(left >= acc_width, 0, wrap(a << np.minimum(left, 62), acc_width))
        return np.where(b >= 0, a >> right, shifted_left)
    raise IsaError(f"alu_opcode must be one of {[o.name for o in AluOp]}, not {op!r}")


def requant_apply(
    acc: np.ndarray, shift: int, round_: bool, relu: bool, acc_width: int, out_width: int
) -> np.ndarray:
    """A requantizing GEMM step's OUT value (``GemmInsn.requant``), as int64.

    ``clip(wrap(acc + (2**(shift-1) if round_ else 0)) >> shift, lo, hi)`` with
    ``hi = 2**(out_width-1) - 1`` and ``lo = 0`` with ``relu``, else ``-hi``: exactly the ALU
    passes [ADD 2**(shift-1),] SHR shift, MAX lo, MIN hi (``alu_apply``), in one step.

    Example:
        >>> requant_apply(np.array([-300, 23, 24, 5000]), 4, True, False, 32, 8).tolist()
        [-19, 1, 2, 127]
    """
    x = np.asarray(acc, dtype=np.int64)
    if round_:
        x = alu_apply(AluOp.ADD, x, 1 << (shift - 1), acc_width)
    hi = (1 << (out_width - 1)) - 1
    return np.clip(alu_apply(AluOp.SHR, x, shift, acc_width), 0 if relu else -hi, hi)


# ---- documentation -------------------------------------------------------------------------


def layout_rows(cfg: HWConfig) -> list[tuple[str, str, str, int, str]]:
    """(format, bits, field, width, meaning) rows for every format, in bit order."""
    lay = layouts(cfg)
    rows = []
    for layout in (lay.mem, lay.gemm, lay.alu, lay.uop):
        fmt = {"MEM": "LOAD/STORE", "GEMM": "GEMM/FINISH"}.get(layout.name, layout.name)
        for f in layout.fields:
            if f.width == 0:
                continue
            bits = f"[{f.msb}:{f.lsb}]" if f.width > 1 else f"[{f.lsb}]"
            doc = f.doc + (" (signed)" if f.signed else "")
            rows.append((fmt, bits, f.name, f.width, doc))
    return rows


def layout_table(cfg: HWConfig, markdown: bool = True) -> str:
    """The ISA layout of a config as a Markdown (or plain text) table."""
    rows = layout_rows(cfg)
    head = ("format", "bits", "field", "width", "meaning")
    if markdown:
        lines = [
            f"ISA layout for HWConfig {cfg.name!r} ({cfg.bitstream_name}): "
            f"{INSN_BYTES * 8}-bit instructions, {UOP_BYTES * 8}-bit micro-ops.",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---" for _ in head) + "|",
        ]
        lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    fmt_row = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [f"ISA layout for HWConfig {cfg.name!r} ({cfg.bitstream_name})"]
    lines += [fmt_row.format(*head), fmt_row.format(*("-" * w for w in widths))]
    lines += [fmt_row.format(*(str(c) for c in r)) for r in rows]
    return "\n".join(lines) + "\n"
