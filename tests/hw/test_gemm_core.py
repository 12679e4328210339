"""GemmCore in the Amaranth simulator against a numpy model of GEMM (bit-exact, cycle-exact)."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth_harness import SramHarness, read_back, run_insn, simulate
from core_models import Srams, gemm_model, random_gemm

from tensorforge.hw.config import HWConfig
from tensorforge.hw.core.gemm import GemmCore
from tensorforge.hw.isa import GemmInsn, Uop
from tensorforge.hw.timing import GEMM_LATENCY, gemm_cycles


def run_program(
    cfg: HWConfig, srams: Srams, insns: list[GemmInsn], write_first: bool = False
) -> list[tuple[int, int]]:
    """Run ``insns`` back to back on the RTL and the model; compare ACC/OUT after each.

    Returns (steps, cycles) per instruction.
    """
    model = srams.copy()
    dut = GemmCore(cfg)
    harness = SramHarness(dut, srams, write_first)
    timings = []

    async def testbench(ctx):
        for i, insn in enumerate(insns):
            cycles = await run_insn(ctx, dut, insn, cfg)
            steps = gemm_model(insn, model)
            timings.append((steps, cycles))
            for buf in ("acc", "out"):
                got = read_back(ctx, harness, cfg, buf)
                bad = np.argwhere((got != model.arrays[buf]).any(axis=(1, 2)))
                assert not bad.size, f"instruction {i} {insn}: {buf.upper()} rows {bad[:, 0]}"

    simulate(harness, testbench)
    return timings


# A non-square variant: BATCH 2, BLOCK_IN 4, BLOCK_OUT 8 (lane order and widths).
TINY_B2 = HWConfig.preset("tiny").replace(name="tiny_b2", log_batch=1, log_block_out=3)


@pytest.mark.parametrize("cfg", [HWConfig.preset("tiny"), TINY_B2], ids=lambda c: c.name)
def test_gemm_random_program_matches_numpy(cfg):
    rng = np.random.default_rng(8)
    srams = Srams.random(cfg, rng)
    insns = [random_gemm(rng, cfg, srams, 8 * i) for i in range(12)]
    timings = run_program(cfg, srams, insns)
    for steps, cycles in timings:
        assert cycles == gemm_cycles(steps) == steps + GEMM_LATENCY + 1


def test_gemm_back_to_back_steps_on_one_acc_entry():
    # Every step accumulates into ACC[3]: each needs the previous step's result (forwarding).
    cfg = HWConfig.preset("tiny")
    srams = Srams.random(cfg, np.random.default_rng(1))
    srams.set_uops(0, [Uop(dst_idx=3, src_idx=i, wgt_idx=2 * i) for i in range(4)])
    insns = [
        GemmInsn(uop_bgn=0, uop_end=4, iter_out=3, iter_in=2, src_factor_in=5, wgt_factor_out=1),
        GemmInsn(uop_bgn=0, uop_end=1, iter_out=2, iter_in=1),  # two steps, 1 cycle apart
        GemmInsn(uop_bgn=0, uop_end=2, iter_out=1, iter_in=1),
    ]
    timings = run_program(cfg, srams, insns)
    assert timings == [(24, gemm_cycles(24)), (2, gemm_cycles(2)), (2, gemm_cycles(2))]


def test_gemm_reset_zeroes_acc_and_out():
    cfg = HWConfig.preset("tiny")
    srams = Srams.random(cfg, np.random.default_rng(2))
    srams.set_uops(0, [Uop(dst_idx=i) for i in range(4)])
    insn = GemmInsn(reset_reg=True, uop_bgn=0, uop_end=4, iter_out=2, dst_factor_out=4)
    assert run_program(cfg, srams, [insn]) == [(8, gemm_cycles(8))]


@pytest.mark.parametrize("name", ["tiny", "pynq"])
def test_gemm_requant_writes_clipped_out_and_clears_acc(name):
    """HWConfig gemm_requant: OUT = the shifted (rounded) sum clipped to int8 (or [0, 127]),
    ACC = 0, src offsets 0 (the field holds the parameters); a dst stepped on twice sees the
    0 of its first step (forwarding); same cycles as any GEMM."""
    cfg = HWConfig.preset(name).replace(gemm_requant=True)
    rng = np.random.default_rng(21)
    srams = Srams.random(cfg, rng)
    srams.arrays["acc"][:8] = rng.integers(-3000, 3000, srams.arrays["acc"][:8].shape)
    srams.set_uops(0, [Uop(dst_idx=i, src_idx=3 + i, wgt_idx=2 * i) for i in range(4)])
    srams.set_uops(4, [Uop(dst_idx=5, src_idx=1, wgt_idx=1)])
    insns = [
        GemmInsn(uop_bgn=0, uop_end=4, iter_out=2, dst_factor_out=4, wgt_factor_out=1,
                 requant=True, rq_shift=6, rq_round=True),
        GemmInsn(uop_bgn=0, uop_end=4, iter_in=2, dst_factor_in=8, requant=True, rq_shift=0,
                 rq_relu=True),
        GemmInsn(uop_bgn=4, uop_end=5, iter_out=3, requant=True, rq_shift=31, rq_relu=True),
        GemmInsn(uop_bgn=0, uop_end=4, src_factor_out=1),  # an ordinary GEMM after them
    ]  # fmt: skip
    timings = run_program(cfg, srams, insns)
    assert timings == [(8, gemm_cycles(8)), (8, gemm_cycles(8)), (3, gemm_cycles(3)),
                       (4, gemm_cycles(4))]  # fmt: skip


def test_gemm_empty_instructions_take_one_cycle_and_write_nothing():
    cfg = HWConfig.preset("tiny")
    srams = Srams.random(cfg, np.random.default_rng(3))
    insns = [
        GemmInsn(uop_bgn=5, uop_end=5),
        GemmInsn(uop_bgn=6, uop_end=2),
        GemmInsn(uop_bgn=0, uop_end=4, iter_out=0),
        GemmInsn(uop_bgn=0, uop_end=4, iter_in=0),
    ]
    assert run_program(cfg, srams, insns) == [(0, 1)] * 4


def test_gemm_small_case_matches_numpy_pynq():
    cfg = HWConfig.preset("pynq")
    rng = np.random.default_rng(16)
    srams = Srams.random(cfg, rng)
    srams.set_uops(
        0, [Uop(dst_idx=7, src_idx=100, wgt_idx=900), Uop(dst_idx=7, src_idx=3, wgt_idx=1)]
    )
    insns = [
        GemmInsn(uop_bgn=0, uop_end=2, iter_out=2, iter_in=1, dst_factor_out=1000,
                 src_factor_out=1, wgt_factor_out=2),
        GemmInsn(reset_reg=True, uop_bgn=1, uop_end=2, iter_out=1, iter_in=1),
    ]  # fmt: skip
    assert run_program(cfg, srams, insns) == [(4, gemm_cycles(4)), (1, gemm_cycles(1))]


def test_gemm_is_exact_with_write_first_srams():
    cfg = HWConfig.preset("tiny")
    rng = np.random.default_rng(10)
    srams = Srams.random(cfg, rng)
    insns = [random_gemm(rng, cfg, srams, 8 * i) for i in range(8)]
    for steps, cycles in run_program(cfg, srams, insns, write_first=True):
        assert cycles == gemm_cycles(steps)


def test_gemm_with_one_entry_buffers_wraps_every_index():
    cfg = HWConfig.preset("tiny").replace(
        name="one", log_uop_buff_size=2, log_inp_buff_size=2, log_wgt_buff_size=4,
        log_acc_buff_size=4,
    )  # fmt: skip
    assert (cfg.uop_depth, cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth) == (1, 1, 1, 1)
    srams = Srams.random(cfg, np.random.default_rng(4))
    srams.set_uops(0, [Uop()])
    insn = GemmInsn(uop_bgn=0, uop_end=1, iter_out=3, iter_in=2, dst_factor_out=0)
    assert run_program(cfg, srams, [insn]) == [(6, gemm_cycles(6))]


def test_gemm_stops_at_an_out_of_range_index_before_writing_it():
    # dst = u.dst_idx + 244 * i_out on tiny's 256 ACC entries: the second pass reaches ACC[256]
    # at its third step. The steps before it run; it and the rest write nothing.
    cfg = HWConfig.preset("tiny")
    srams = Srams.random(cfg, np.random.default_rng(6))
    srams.set_uops(0, [Uop(dst_idx=10 + i, src_idx=i, wgt_idx=2 * i) for i in range(4)])
    model = srams.copy()
    model.set_uops(4, [Uop(254, 0, 0), Uop(255, 1, 2)])  # the second pass's in-range steps
    gemm_model(GemmInsn(uop_end=4), model)
    gemm_model(GemmInsn(uop_bgn=4, uop_end=6), model)
    dut = GemmCore(cfg)
    harness = SramHarness(dut, srams)
    errors: list[int] = []

    async def testbench(ctx):
        insn = GemmInsn(uop_end=4, iter_out=2, dst_factor_out=244)
        cycles = await run_insn(ctx, dut, insn, cfg, errors)
        assert cycles < gemm_cycles(8), "the loop stops at the error"
        for buf in ("acc", "out"):
            got = read_back(ctx, harness, cfg, buf)
            bad = np.argwhere((got != model.arrays[buf]).any(axis=(1, 2)))
            assert not bad.size, f"{buf.upper()} rows {bad[:, 0]} differ"

    simulate(harness, testbench)
    assert errors == [7 + 2], "one pulse, in S2 of the bad (7th) step"
