# amaranth: UnusedElaboratable=no
"""GemmCore with DSP packing (two int8 MACs per multiplier): the GEMM Amaranth-sim tests of
test_gemm_core.py run again with packing on (bit-exact and cycle-exact against the numpy model),
the packing arithmetic checked exhaustively, and the pynq core's DSP count under synth_xilinx."""

from __future__ import annotations

import functools

import pytest
import test_gemm_core as unpacked  # the existing tests, re-run below with packing on
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from tensorforge.hw.config import HWConfig
from tensorforge.hw.core.gemm import (
    GemmCore,
    default_dsp_packing,
    packed_weight,
    split_products,
)
from tensorforge.hw.synth import PARTS, synth_xilinx

TINY = HWConfig.preset("tiny")
PYNQ = HWConfig.preset("pynq")


@pytest.fixture(autouse=True)
def packed_cores(monkeypatch):
    monkeypatch.setattr(unpacked, "GemmCore", functools.partial(GemmCore, dsp_packing=True))


@pytest.mark.parametrize("cfg", [TINY, unpacked.TINY_B2], ids=lambda c: c.name)
def test_packed_random_program_matches_numpy(cfg):
    unpacked.test_gemm_random_program_matches_numpy(cfg)


def test_packed_back_to_back_steps_on_one_acc_entry():
    unpacked.test_gemm_back_to_back_steps_on_one_acc_entry()


def test_packed_reset_zeroes_acc_and_out():
    unpacked.test_gemm_reset_zeroes_acc_and_out()


def test_packed_small_case_matches_numpy_pynq():
    unpacked.test_gemm_small_case_matches_numpy_pynq()


def test_packed_write_first_srams():
    unpacked.test_gemm_is_exact_with_write_first_srams()


def test_packed_one_entry_buffers():
    unpacked.test_gemm_with_one_entry_buffers_wraps_every_index()


def test_odd_block_out_leaves_the_last_lane_unpacked():
    cfg = TINY.replace(name="tiny_o1", log_block_out=0)  # BLOCK_OUT 1: nothing to pair
    unpacked.test_gemm_random_program_matches_numpy(cfg)


def test_packed_core_is_the_default_on_pynq_only():
    assert GemmCore(PYNQ).dsp_packing and default_dsp_packing(PYNQ)
    assert not GemmCore(TINY).dsp_packing
    assert GemmCore(TINY, dsp_packing=True).dsp_packing


def test_packed_multiply_splits_products_exactly():
    # Every w_lo against the extreme w_hi and x (the borrow at w_hi = -128, the product 16384 at
    # -128 * -128), through the same Amaranth expressions the core uses, against Python ints.
    w_lo, w_hi, x = Signal(signed(8)), Signal(signed(8)), Signal(signed(8))
    low, high = split_products(packed_weight(w_lo, w_hi, 16) * x, 16, 16)
    lo_out, hi_out = Signal(signed(16)), Signal(signed(16))
    m = Module()
    m.d.comb += [lo_out.eq(low), hi_out.eq(high)]
    edges = [-128, -127, -1, 0, 1, 77, 127]
    bad = []

    async def bench(ctx):
        for xv in edges:
            ctx.set(x, xv)
            for a in range(-128, 128):
                ctx.set(w_lo, a)
                for h in edges:
                    ctx.set(w_hi, h)
                    got = (ctx.get(lo_out), ctx.get(hi_out))
                    if got != (a * xv, h * xv):
                        bad.append((a, h, xv, got))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not bad, f"(w_lo, w_hi, x, got) wrong: {bad[:5]}"


@pytest.mark.slow
def test_packed_pynq_gemm_fits_the_xc7z020_dsps(tmp_path):
    r = synth_xilinx(PYNQ, "gemm", "xc7z020", work_dir=tmp_path)
    assert r.dsps == PYNQ.batch * PYNQ.block_in * PYNQ.block_out // 2
    assert r.dsps <= PARTS["xc7z020"].dsps and not r.over
