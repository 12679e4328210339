# amaranth: UnusedElaboratable=no
"""GemmCore with DSP packing (two int8 MACs per multiplier): the GEMM Amaranth-sim tests of
test_gemm_core.py run again with packing on (bit-exact and cycle-exact against the numpy model),
the packing arithmetic checked exhaustively, and the pynq core's DSP count under synth_xilinx."""

from __future__ import annotations

import re

import pytest
import test_gemm_core as unpacked  # the existing tests, re-run below with packing on
from amaranth.back import rtlil
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


def multipliers(core: GemmCore) -> tuple[int, int]:
    """(packed, single) multipliers of the elaborated core: its product registers in RTLIL."""
    text = rtlil.convert(core)
    return tuple(len(set(re.findall(rf"wire .*\\{p}\d+_\d+_\d+\b", text))) for p in ("pp", "p"))


@pytest.fixture
def packed(monkeypatch):
    """Run a test of test_gemm_core.py with every GemmCore it builds packed; then check that it
    built one and that each elaborates to batch x block_in multipliers per output-lane pair
    (one more per lane for an odd last lane), so the test fails if packing silently turns off."""

    def run(test, *args) -> None:
        built: list[GemmCore] = []

        def packed_core(cfg: HWConfig) -> GemmCore:
            built.append(GemmCore(cfg, dsp_packing=True))
            return built[-1]

        monkeypatch.setattr(unpacked, "GemmCore", packed_core)
        test(*args)
        assert built, f"{test.__name__} built no GemmCore"
        for core in built:
            c = core.cfg
            want = (
                c.batch * c.block_in * (c.block_out // 2),
                c.batch * c.block_in * (c.block_out % 2),
            )
            assert multipliers(core) == want, f"{c.name}: (packed, single) multipliers"

    return run


@pytest.mark.parametrize("cfg", [TINY, unpacked.TINY_B2], ids=lambda c: c.name)
def test_packed_random_program_matches_numpy(packed, cfg):
    packed(unpacked.test_gemm_random_program_matches_numpy, cfg)


def test_packed_back_to_back_steps_on_one_acc_entry(packed):
    packed(unpacked.test_gemm_back_to_back_steps_on_one_acc_entry)


def test_packed_reset_zeroes_acc_and_out(packed):
    packed(unpacked.test_gemm_reset_zeroes_acc_and_out)


def test_packed_small_case_matches_numpy_pynq(packed):
    packed(unpacked.test_gemm_small_case_matches_numpy_pynq)


def test_packed_write_first_srams(packed):
    packed(unpacked.test_gemm_is_exact_with_write_first_srams)


def test_packed_one_entry_buffers(packed):
    packed(unpacked.test_gemm_with_one_entry_buffers_wraps_every_index)


def test_odd_block_out_leaves_the_last_lane_unpacked(packed):
    cfg = TINY.replace(name="tiny_o1", log_block_out=0)  # BLOCK_OUT 1: nothing to pair
    packed(unpacked.test_gemm_random_program_matches_numpy, cfg)


def test_unpacked_core_has_one_multiplier_per_mac():
    assert multipliers(GemmCore(TINY)) == (0, TINY.macs_per_cycle)


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
