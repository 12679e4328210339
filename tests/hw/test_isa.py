"""The ISA: VTA's bit positions, encode/decode round trips, range errors, ALU semantics."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.hw import isa
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import (
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    IsaError,
    MemInsn,
    MemType,
    Opcode,
    Uop,
    alu_apply,
    decode,
    encode,
)

CONFIGS = [HWConfig.preset("pynq"), HWConfig.preset("tiny")]
ROOT = Path(__file__).resolve().parents[2]

# vta_facts.md §1.4-1.7: (field, lsb, width) for VTA's default configuration.
VTA_PYNQ = {
    "MEM": [("memory_type", 7, 3), ("sram_base", 10, 16), ("dram_base", 26, 32),
            ("y_size", 64, 16), ("x_size", 80, 16), ("x_stride", 96, 16), ("y_pad_0", 112, 4),
            ("y_pad_1", 116, 4), ("x_pad_0", 120, 4), ("x_pad_1", 124, 4)],
    "GEMM": [("reset_reg", 7, 1), ("uop_bgn", 8, 13), ("uop_end", 21, 14), ("iter_out", 35, 14),
             ("iter_in", 49, 14), ("dst_factor_out", 64, 11), ("dst_factor_in", 75, 11),
             ("src_factor_out", 86, 11), ("src_factor_in", 97, 11), ("wgt_factor_out", 108, 10),
             ("wgt_factor_in", 118, 10)],
    "ALU": [("src_factor_in", 97, 11), ("alu_opcode", 108, 3), ("use_imm", 111, 1),
            ("imm", 112, 16)],
    "UOP": [("dst_idx", 0, 11), ("src_idx", 11, 11), ("wgt_idx", 22, 10)],
}  # fmt: skip


@pytest.mark.parametrize("fmt", sorted(VTA_PYNQ))
def test_pynq_layout_is_vtas(fmt):
    lay = isa.layouts(HWConfig.preset("pynq"))
    layout = {"MEM": lay.mem, "GEMM": lay.gemm, "ALU": lay.alu, "UOP": lay.uop}[fmt]
    for name, lsb, width in VTA_PYNQ[fmt]:
        f = layout.field(name)
        assert (f.lsb, f.width) == (lsb, width), name
    if fmt != "UOP":
        assert [(f.name, f.lsb) for f in layout.fields[:5]] == [
            ("opcode", 0), ("pop_prev", 3), ("pop_next", 4), ("push_prev", 5), ("push_next", 6)
        ]  # fmt: skip


def _fits(cfg, name):
    """A strategy for any value a field holds under cfg."""
    lay = isa.layouts(cfg)
    for layout in (lay.mem, lay.gemm, lay.alu):
        for f in layout.fields:
            if f.name == name:
                return st.integers(f.lo, f.hi)
    raise KeyError(name)


def _insns(cfg):
    deps = {f: st.booleans() for f in ("pop_prev", "pop_next", "push_prev", "push_next")}
    ints = lambda cls, skip: {  # noqa: E731
        f.name: _fits(cfg, f.name)
        for f in dataclasses.fields(cls)
        if f.name not in skip and f.name not in deps
    }
    mem = st.builds(
        MemInsn, opcode=st.sampled_from([Opcode.LOAD, Opcode.STORE]),
        memory_type=st.sampled_from(list(MemType)), **ints(MemInsn, {"opcode", "memory_type"}),
        **deps,
    )  # fmt: skip
    rq = {"requant", "rq_shift", "rq_round", "rq_relu"}  # test_requant_gemm_round_trips
    gemm = st.builds(GemmInsn, reset_reg=st.booleans(), **ints(GemmInsn, {"reset_reg", *rq}),
                     **deps)  # fmt: skip
    alu = st.builds(
        AluInsn, reset_reg=st.booleans(), use_imm=st.booleans(),
        alu_opcode=st.sampled_from(list(AluOp)),
        **ints(AluInsn, {"reset_reg", "use_imm", "alu_opcode"}), **deps,
    )  # fmt: skip
    return st.one_of(mem, gemm, alu, st.builds(FinishInsn, **deps))


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_every_instruction_round_trips(cfg):
    @settings(max_examples=300, deadline=None)
    @given(_insns(cfg))
    def check(insn):
        raw = encode(insn, cfg)
        assert len(raw) == 16
        assert decode(raw, cfg) == insn

    check()


@pytest.mark.parametrize("name", ["pynq", "tiny"])
def test_requant_gemm_round_trips_and_is_refused_without_the_option(name):
    """HWConfig gemm_requant adds the 1-bit ``requant`` field after iter_in and packs the
    parameters into src_factor_out; the presets' encoding is unchanged."""
    base = HWConfig.preset(name)
    cfg = base.replace(gemm_requant=True)
    lay = isa.layouts(cfg).gemm
    assert lay.field("requant").lsb == lay.field("iter_in").msb + 1
    assert "requant" not in [f.name for f in isa.layouts(base).gemm.fields]

    @settings(max_examples=200, deadline=None)
    @given(
        st.integers(0, 31),
        st.booleans(),
        st.booleans(),
        st.integers(0, 15),
        st.integers(0, 15),
        st.booleans(),
    )
    def check(shift, rnd, relu, dst, wgt, push):
        insn = GemmInsn(uop_end=3, iter_out=2, dst_factor_out=dst, wgt_factor_in=wgt,
                        requant=True, rq_shift=shift, rq_round=rnd and shift > 0, rq_relu=relu,
                        push_next=push)  # fmt: skip
        assert decode(encode(insn, cfg), cfg) == insn
        plain = dataclasses.replace(insn, requant=False, rq_shift=0, rq_round=False,
                                    rq_relu=False)  # fmt: skip
        assert encode(plain, cfg) == encode(plain, base)

    check()
    with pytest.raises(isa.IsaError, match="has no GEMM requant"):
        encode(GemmInsn(requant=True, rq_shift=3), base)
    with pytest.raises(isa.IsaError, match="src factors 0"):
        encode(GemmInsn(requant=True, src_factor_out=1), cfg)
    with pytest.raises(isa.IsaError, match=r"rq_shift must be in \[1, 31\], not 0"):
        encode(GemmInsn(requant=True, rq_round=True), cfg)
    with pytest.raises(isa.IsaError, match="need requant=True"):
        encode(GemmInsn(rq_shift=2), cfg)


def test_gemm_requant_needs_room_for_its_parameters():
    with pytest.raises(ValueError, match="gemm_requant needs a src_factor_out field of at least 7"):
        HWConfig.preset("tiny").replace(log_inp_buff_size=8, gemm_requant=True)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_uops_round_trip(cfg):
    lay = isa.layouts(cfg).uop
    hi = {f.name: f.hi for f in lay.fields}

    @settings(max_examples=200, deadline=None)
    @given(st.builds(Uop, *(st.integers(0, hi[n]) for n in ("dst_idx", "src_idx", "wgt_idx"))))
    def check(uop):
        assert isa.decode_uop(isa.encode_uop(uop, cfg), cfg) == uop

    check()


def test_known_encoding_matches_hand_packed_bits():
    cfg = HWConfig.preset("pynq")
    insn = MemInsn(Opcode.LOAD, MemType.INP, sram_base=5, dram_base=0x1234, y_size=3, x_size=4,
                   x_stride=16, y_pad_0=1, x_pad_1=2, push_next=True)  # fmt: skip
    word = (0 | 1 << 6 | 2 << 7 | 5 << 10 | 0x1234 << 26 | 3 << 64 | 4 << 80 | 16 << 96
            | 1 << 112 | 2 << 124)  # fmt: skip
    assert encode(insn, cfg) == word.to_bytes(16, "little")


def test_out_of_range_field_names_instruction_field_value_and_limit():
    cfg = HWConfig.preset("pynq")
    with pytest.raises(IsaError, match=r"instruction 7 \(GEMM\) field iter_out must be in "
                       r"\[0, 16383\] \(14 bits\), not 20000"):  # fmt: skip
        encode(GemmInsn(iter_out=20000), cfg, index=7)
    with pytest.raises(IsaError, match=r"field imm must be in \[-32768, 32767\]"):
        encode(AluInsn(imm=40000), cfg)
    tiny = HWConfig.preset("tiny")  # ACC depth 256: 8-bit factors
    with pytest.raises(IsaError, match=r"field dst_factor_out must be in \[0, 255\]"):
        encode(GemmInsn(dst_factor_out=256), tiny)


def test_decode_rejects_unknown_opcode_and_memory_type():
    cfg = HWConfig.preset("pynq")
    with pytest.raises(IsaError, match="instruction 2 field opcode must be one of .*, not 6"):
        decode((6).to_bytes(16, "little"), cfg, index=2)
    with pytest.raises(IsaError, match="field memory_type must be one of .*, not 7"):
        decode((7 << 7).to_bytes(16, "little"), cfg)
    with pytest.raises(IsaError, match="must be a multiple of 16 bytes, not 17"):
        isa.decode_program(bytes(17), cfg)


def test_stage_routing():
    assert isa.stage_of(MemInsn(Opcode.LOAD, MemType.INP)) == isa.Stage.LOAD
    assert isa.stage_of(MemInsn(Opcode.LOAD, MemType.WGT)) == isa.Stage.LOAD
    assert isa.stage_of(MemInsn(Opcode.LOAD, MemType.UOP)) == isa.Stage.COMPUTE
    assert isa.stage_of(MemInsn(Opcode.LOAD, MemType.ACC)) == isa.Stage.COMPUTE
    assert isa.stage_of(MemInsn(Opcode.STORE, MemType.OUT)) == isa.Stage.STORE
    assert isa.stage_of(FinishInsn()) == isa.Stage.COMPUTE


def _ref_alu(op, a, b):
    """Python integers: the documented semantics, independently of numpy."""

    def wrap32(x):
        return (x + (1 << 31)) % (1 << 32) - (1 << 31)

    if op == AluOp.MIN:
        return min(a, b)
    if op == AluOp.MAX:
        return max(a, b)
    if op == AluOp.ADD:
        return wrap32(a + b)
    if op == AluOp.MUL:
        return wrap32(a * b)
    return a // (1 << b) if b >= 0 else wrap32(a * (1 << -b))  # SHR: floor, or left shift


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(list(AluOp)),
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.one_of(st.integers(-40, 40), st.integers(-(1 << 31), (1 << 31) - 1)),
)
def test_alu_semantics_match_python_integers(op, a, b):
    got = int(alu_apply(op, np.array([a]), np.array([b]), 32)[0])
    assert got == _ref_alu(op, a, b)


def test_isa_doc_is_generated_from_the_isa():
    doc = (ROOT / "docs" / "isa.md").read_text()
    assert isa.layout_table(HWConfig.preset("pynq")) in doc, (
        "docs/isa.md is stale: regenerate the table with `tensorforge isa --config pynq`"
    )


def test_encoder_refuses_mul_without_the_extension():
    cfg = HWConfig.preset("tiny").replace(alu_mul=False)
    with pytest.raises(
        IsaError, match=r"instruction 4 \(ALU MUL\): HWConfig 'tiny' has no ALU MUL"
    ):
        encode(AluInsn(alu_opcode=AluOp.MUL), cfg, index=4)
