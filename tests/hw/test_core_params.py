# amaranth: UnusedElaboratable=no
"""hw.core: ISA views match hw.isa bit for bit; constructors reject bad parameters."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tensorforge.hw.config import HWConfig
from tensorforge.hw.core.alu import AluCore
from tensorforge.hw.core.decode import (
    alu_layout,
    gemm_layout,
    mem_layout,
    struct_layout,
    uop_layout,
)
from tensorforge.hw.core.gemm import GemmCore
from tensorforge.hw.core.loop import UopLoop
from tensorforge.hw.core.queues import CommandQueue, TokenQueue
from tensorforge.hw.isa import (
    AluInsn,
    AluOp,
    GemmInsn,
    MemInsn,
    MemType,
    Opcode,
    Uop,
    encode_uop,
    encode_word,
    layouts,
)

CONFIGS = [HWConfig.preset(n) for n in ("pynq", "tiny", "ultra96")]


def random_fields(rng: np.random.Generator, layout, skip=("opcode",)) -> dict[str, int]:
    return {
        f.name: int(rng.integers(f.lo, f.hi + 1))
        for f in layout.fields
        if f.width and f.name not in skip
    }


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_views_read_every_field_where_hw_isa_packs_it(cfg):
    rng = np.random.default_rng(0)
    lay = layouts(cfg)
    for _ in range(20):
        cases = [
            (gemm_layout(cfg), GemmInsn(**random_fields(rng, lay.gemm))),
            (alu_layout(cfg), AluInsn(**random_fields(rng, lay.alu, ("opcode", "alu_opcode")),
                                      alu_opcode=AluOp(int(rng.integers(0, 5))))),
            (mem_layout(cfg), MemInsn(**random_fields(rng, lay.mem, ("opcode", "memory_type")),
                                      opcode=Opcode.STORE, memory_type=MemType.OUT)),
        ]  # fmt: skip
        for view_layout, insn in cases:
            const = view_layout.from_bits(encode_word(insn, cfg))
            assert const.opcode == insn.opcode
            for f in dataclasses.fields(insn):
                if f.name.startswith("rq_") or (f.name == "requant" and not cfg.gemm_requant):
                    continue  # no field of their own: packed into src_factor_out (gemm_requant)
                assert const[f.name] == int(getattr(insn, f.name)), f.name
        uop = Uop(**random_fields(rng, lay.uop))
        const = uop_layout(cfg).from_bits(int.from_bytes(encode_uop(uop, cfg), "little"))
        assert (const.dst_idx, const.src_idx, const.wgt_idx) == dataclasses.astuple(uop)


def test_struct_layout_rejects_non_layouts():
    with pytest.raises(TypeError, match=r"layout must be a hw.isa.Layout, not 'GEMM'"):
        struct_layout("GEMM")


@pytest.mark.parametrize("block", [GemmCore, AluCore, CommandQueue, TokenQueue])
def test_blocks_reject_a_config_that_is_not_a_hwconfig(block):
    with pytest.raises(TypeError, match=r"cfg must be a HWConfig, not 'pynq'"):
        block("pynq")


def test_queues_reject_bad_depths():
    tiny = HWConfig.preset("tiny")
    with pytest.raises(ValueError, match=r"depth must be a positive int, not 0"):
        CommandQueue(tiny, 0)
    with pytest.raises(ValueError, match=r"depth must be a positive int, not True"):
        TokenQueue(tiny, True)


def test_uop_loop_rejects_unknown_streams():
    with pytest.raises(ValueError, match=r"streams must name fields of the layout, not 'wgt'"):
        UopLoop(alu_layout(HWConfig.preset("tiny")), ("dst", "wgt"))


@pytest.mark.parametrize("module", ["core.decode", "core.gemm", "core.alu", "export"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"tensorforge.hw.{module}")
    assert doctest.testmod(mod).failed == 0
