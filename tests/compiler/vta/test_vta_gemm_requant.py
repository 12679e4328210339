"""HWConfig ``gemm_requant``: the compiler folds the bias step and the requantization passes into
one requantizing GEMM (``requant_into_gemm``) and drops the resets it makes redundant
(``drop_zero_resets``); compiled int8 convs on the functional simulator equal
compiler.quantize's int8 oracle, and the presets' programs are unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.quantize import conv2d_int8, requant_params
from tensorforge.compiler.quantize.residual import add_int8, add_params
from tensorforge.compiler.vta import Conv2dSchedule, conv2d
from tensorforge.compiler.vta.passes import drop_zero_resets, requant_into_gemm
from tensorforge.compiler.vta.tile import Alu, Gemm, GemmRequant, Store
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluInsn, AluOp, GemmInsn


def _operands(seed: int, cfg: HWConfig, k: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    ic, oc = 2 * cfg.block_in, 2 * cfg.block_out + 1
    x = rng.integers(-128, 128, (1, ic, 8, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (oc, ic, k, k), dtype=np.int8)
    b = rng.integers(-5000, 5000, oc, dtype=np.int32)
    return x, w, b


@pytest.mark.parametrize("config", ["tiny", "pynq"])
@pytest.mark.parametrize(("k", "relu", "rounding"), [(1, True, True), (3, False, True),
                                                    (1, False, False)])  # fmt: skip
def test_requantizing_gemm_conv_matches_the_oracle(config: str, k: int, relu: bool,
                                                   rounding: bool):  # fmt: skip
    base = HWConfig.preset(config).replace(alu_mul=False)
    cfg = base.replace(gemm_requant=True)
    x, w, b = _operands(k + 2 * relu, cfg, k)
    shift = (11 if cfg.block_in == 16 else 8) - (k == 1) * 2  # some outputs saturate
    p = requant_params(2.0**-shift, cfg, mode="shift", relu=relu, rounding=rounding)
    sched = Conv2dSchedule(tile_n=1, tile_h=2, tile_oc=1, tile_ic=2, vthreads=2)  # 12 tiles
    kern = conv2d(cfg, x.shape, w, b, padding=k // 2, requant=p, schedule=sched)
    insns = kern.image.instructions()
    assert not any(isinstance(i, AluInsn) for i in insns), "the ALU passes must be folded"
    rq = [i for i in insns if isinstance(i, GemmInsn) and i.requant]
    assert rq and all((i.rq_shift, i.rq_round, i.rq_relu) == (shift, rounding, relu) for i in rq)
    out, _ = kern.run(x)
    want = conv2d_int8(x, w, b, padding=k // 2, requant=p)
    assert np.array_equal(out, want), np.count_nonzero(out != want)
    assert np.unique(want).size > 20 and want.max() == 127
    # the same conv on the VTA-compatible config: ALU passes and a reset per tile
    plain = conv2d(base, x.shape, w, b, padding=k // 2, requant=p, schedule=sched)
    assert any(isinstance(i, AluInsn) for i in plain.image.instructions())
    resets = [sum(isinstance(i, GemmInsn) and i.reset_reg for i in im.instructions())
              for im in (kern.image, plain.image)]  # fmt: skip
    assert resets[0] < resets[1]


def test_a_residual_conv_keeps_its_alu_epilogue_and_matches():
    """The residual add reads the requantized accumulators: nothing is folded there."""
    cfg = HWConfig.preset("tiny").replace(alu_mul=False, gemm_requant=True)
    x, w, b = _operands(5, cfg, 3)
    rng = np.random.default_rng(6)
    p = requant_params(2.0**-8, cfg, mode="shift")
    add = add_params(0.5, 1.0, cfg, relu=True)
    kern = conv2d(cfg, x.shape, w, b, padding=1, requant=p, residual=add, vthreads=2)
    assert not any(isinstance(i, GemmInsn) and i.requant for i in kern.image.instructions())
    r = rng.integers(-128, 128, kern.residual_shape, dtype=np.int8)
    out, _ = kern.run(x, residual=r)
    want = add_int8(conv2d_int8(x, w, b, padding=1, requant=p), r, add)
    assert np.array_equal(out, want)


def test_presets_compile_the_same_program_as_before():
    """Off (the presets), the passes change nothing: the image is the VTA-compatible one."""
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(1, cfg, 1)
    kern = conv2d(cfg, x.shape, w, b, shift=6, relu=True, vthreads=2)
    assert requant_into_gemm(kern.tile_program, cfg) is kern.tile_program
    assert not any(isinstance(i, GemmInsn) and i.requant for i in kern.image.instructions())


def _prog(stmts):  # type: ignore[no-untyped-def]
    from tensorforge.compiler.vta.tile import Alloc, TileProgram

    allocs = (Alloc("C", "acc", 8), Alloc("ones", "inp", 1), Alloc("bw", "wgt", 2))
    return TileProgram("t", allocs, tuple(stmts))


def test_requant_into_gemm_needs_the_whole_pattern_and_unread_accumulators():
    from tensorforge.compiler.vta.tile import Loop, Uop

    cfg = HWConfig.preset("tiny").replace(gemm_requant=True)
    loops = (Loop(8, 1, 0),)
    bias = Gemm("C", "ones", "bw", (Uop(0, 0, 0),), loops)
    passes = [Alu(op, "C", (Uop(),), loops, imm=imm) for op, imm in
              ((AluOp.SHR, 5), (AluOp.MAX, 0), (AluOp.MIN, 127))]  # fmt: skip
    store = Store("Y", "C", 0, 0, 1, 8, 8)
    fused = requant_into_gemm(_prog([bias, *passes, store]), cfg).stmts
    assert fused == (Gemm("C", "ones", "bw", (Uop(),), loops, requant=GemmRequant(5, False, True)),
                     store)  # fmt: skip
    # MIN 100 is not the int8 clip; a later ALU pass reads the accumulators: unchanged
    other = [*passes[:2], Alu(passes[2].op, "C", (Uop(),), loops, imm=100)]
    assert requant_into_gemm(_prog([bias, *other, store]), cfg).stmts == (bias, *other, store)
    reader = Alu(passes[0].op, "C", (Uop(3, 0, 0),), (), imm=1)
    prog = _prog([bias, *passes, store, reader])
    assert requant_into_gemm(prog, cfg).stmts == prog.stmts
    # a reset of accumulators the requantizing GEMM left at 0 goes; a partial one stays
    reset = Gemm("C", "", "", (Uop(),), loops, reset=True)
    tail = Gemm("C", "", "", (Uop(),), (Loop(2, 1, 0),), reset=True)
    cleared = drop_zero_resets(requant_into_gemm(_prog([reset, bias, *passes, store, reset]),
                                                 cfg))  # fmt: skip
    assert cleared.stmts == (reset, fused[0], store)
    kept = _prog([Gemm("C", "ones", "bw", (Uop(),), (Loop(4, 1, 0),)), tail])
    assert drop_zero_resets(kept).stmts == kept.stmts
