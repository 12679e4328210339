"""Requantization steps against exact rational arithmetic (fractions.Fraction) and against the
functional simulator's ALU; scale choice and quantize/dequantize against float arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.compiler.quantize import (
    apply_requant,
    choose_scale,
    dequantize,
    is_power_of_two,
    quantize,
    quantize_bias,
    quantize_weight,
    requant_params,
)
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluInsn, AluOp, FinishInsn, Uop, encode, encode_uop
from tensorforge.sim.functional import FunctionalSim
from tensorforge.sim.memory import DeviceMemory

PYNQ = HWConfig.preset("pynq")
NO_MUL = PYNQ.replace(alu_mul=False)
ACC_MAX = (1 << 31) - 1


def _oracle(acc: int, ratio: Fraction, rounding: bool, lo: int, hi: int) -> int:
    exact = Fraction(acc) * ratio
    value = math.floor(exact + Fraction(1, 2)) if rounding else math.floor(exact)
    return min(max(value, lo), hi)


@settings(max_examples=300, deadline=None)
@given(
    shift=st.integers(0, 80),
    accs=st.lists(st.integers(-(ACC_MAX - (1 << 15)), ACC_MAX - (1 << 15)), min_size=1),
    rounding=st.booleans(),
    relu=st.booleans(),
)
def test_shift_requant_equals_rational_rounding(
    shift: int, accs: list[int], rounding: bool, relu: bool
) -> None:
    p = requant_params(2.0**-shift, NO_MUL, rounding=rounding, relu=relu)
    assert all(s.op != AluOp.MUL for s in p.steps)
    assert (p.lo, p.hi) == ((0 if relu else -127), 127)
    got = apply_requant(np.array(accs), p)
    ratio = Fraction(1, 2**shift)
    for acc, y in zip(accs, got.tolist(), strict=True):
        assert y == _oracle(acc, ratio, rounding, p.lo, p.hi)
        exact = Fraction(acc) * ratio
        if p.lo <= exact <= p.hi:
            assert abs(y - exact) <= Fraction(1, 2) if rounding else 0 <= exact - y < 1


@settings(max_examples=300, deadline=None)
@given(
    ratio=st.floats(2.0**-40, 0.999, allow_subnormal=False),
    bound=st.integers(1, 1 << 29),
    fractions_of_bound=st.lists(st.floats(-1, 1), min_size=1, max_size=20),
    rounding=st.booleans(),
)
def test_mul_requant_within_half_lsb_of_exact_ratio(
    ratio: float, bound: int, fractions_of_bound: list[float], rounding: bool
) -> None:
    p = requant_params(ratio, PYNQ, mode="mul", rounding=rounding, acc_bound=bound)
    accs = [round(f * bound) for f in fractions_of_bound] + [bound, -bound]
    got = apply_requant(np.array(accs), p)
    exact_ratio = Fraction(ratio)
    # The multiplier is as precise as the accumulator bound and the immediate field allow.
    limit = min((1 << 15) - 1, (1 << 30) // bound)
    assert 1 <= p.multiplier <= limit
    assert abs(p.ratio - exact_ratio) <= exact_ratio / limit
    for acc, y in zip(accs, got.tolist(), strict=True):
        assert y == _oracle(acc, p.ratio, rounding, p.lo, p.hi)
        exact = Fraction(acc) * exact_ratio
        if p.lo <= exact <= p.hi:
            approx = abs(acc) * abs(p.ratio - exact_ratio)
            assert abs(y - exact) <= (Fraction(1, 2) if rounding else 1) + approx


def test_mul_requant_of_realistic_layer_is_within_half_lsb_plus_multiplier_error() -> None:
    # A 3x3x32 conv: |acc| <= 288 * 127 * 127; the output stays within int8.
    bound = 288 * 127 * 127
    ratio = 0.00123456
    p = requant_params(ratio, PYNQ, mode="mul", acc_bound=bound)
    assert [s.op for s in p.steps][0] == AluOp.MUL
    accs = np.arange(-int(127 / ratio), int(127 / ratio), 37)
    err = apply_requant(accs, p) - accs * ratio
    assert np.abs(err).max() <= 0.5 + 127 * abs(float(p.ratio) / ratio - 1)
    assert np.abs(err).max() < 0.8


def test_large_shift_is_split_so_the_rounding_constant_fits_the_immediate() -> None:
    p = requant_params(2.0**-20, NO_MUL)
    assert [(s.op, s.imm) for s in p.steps[:3]] == [
        (AluOp.SHR, 5),
        (AluOp.ADD, 1 << 14),
        (AluOp.SHR, 15),
    ]
    accs = np.array([(1 << 19) - 1, 1 << 19, 3 << 19, -(1 << 19), -(1 << 19) - 1])
    assert apply_requant(accs, p).tolist() == [0, 1, 2, 0, -1]


@pytest.mark.parametrize("rounding", [True, False])
def test_tiny_ratio_clamps_the_shift_and_still_rounds_exactly(rounding: bool) -> None:
    p = requant_params(2.0**-200, NO_MUL, rounding=rounding)
    assert p.shift == 200
    assert all(s.op != AluOp.SHR or s.imm <= 32 for s in p.steps)
    accs = [ACC_MAX - (1 << 15), -ACC_MAX + (1 << 15), -1, 0]
    want = [0, 0, 0, 0] if rounding else [0, -1, -1, 0]  # floor of a tiny negative is -1
    assert apply_requant(np.array(accs), p).tolist() == want


def test_requant_without_rounding_floors() -> None:
    p = requant_params(0.25, NO_MUL, rounding=False)
    assert AluOp.ADD not in [s.op for s in p.steps]
    assert apply_requant(np.array([7, -1, -4, 1000, -1000]), p).tolist() == [1, -1, -1, 127, -127]


def test_power_of_two_ratio_in_mul_mode_needs_no_mul() -> None:
    p = requant_params(2.0**-9, NO_MUL, mode="mul", acc_bound=1 << 20)
    assert (p.multiplier, p.shift) == (1, 9)


def test_ratio_above_one_is_a_left_shift_checked_against_the_bound() -> None:
    p = requant_params(4.0, NO_MUL, acc_bound=100)
    assert apply_requant(np.array([3, -40, 100]), p).tolist() == [12, -127, 127]
    with pytest.raises(ValueError, match=r"acc_bound \* ratio must fit 32-bit accumulators"):
        requant_params(4.0, NO_MUL, acc_bound=1 << 30)
    with pytest.raises(ValueError, match="acc_bound is required when the requant ratio is > 1"):
        requant_params(4.0, NO_MUL)


def test_requant_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="needs the ALU MUL extension.*alu_mul=False"):
        requant_params(0.3, NO_MUL, mode="mul", acc_bound=1000)
    with pytest.raises(ValueError, match="must be a power of two in mode 'shift', not 0.3"):
        requant_params(0.3, PYNQ)
    with pytest.raises(ValueError, match="acc_bound is required in requant mode 'mul'"):
        requant_params(0.3, PYNQ, mode="mul")
    with pytest.raises(ValueError, match="requant mode must be one of"):
        requant_params(0.5, PYNQ, mode="round")
    with pytest.raises(ValueError, match="ratio must be a positive finite number, not -1.0"):
        requant_params(-1.0, PYNQ)
    with pytest.raises(ValueError, match=r"must fit 32-bit accumulators, not .* \+ rounding"):
        requant_params(2.0**-4, NO_MUL, acc_bound=ACC_MAX - 4)
    assert requant_params(2.0**-4, NO_MUL, acc_bound=ACC_MAX - 8).shift == 4
    p = requant_params(0.5, PYNQ)
    with pytest.raises(ValueError, match=r"accumulator values must fit 32 bits"):
        apply_requant(np.array([1 << 31]), p)


@pytest.mark.parametrize(
    ("ratio", "mode"), [(2.0**-3, "shift"), (2.0**-25, "shift"), (0.0123, "mul"), (3e-7, "mul")]
)
def test_requant_steps_encode_and_match_the_functional_simulator(ratio: float, mode: str) -> None:
    """The ALU steps as instructions on sim.functional give the same int8 OUT values."""
    p = requant_params(ratio, PYNQ, mode=mode, relu=mode == "mul", acc_bound=1 << 22)
    rows = 64
    acc = np.random.default_rng(1).integers(-(1 << 22), 1 << 22, (rows, 1, 16), dtype=np.int32)
    insns = [
        AluInsn(uop_end=1, iter_out=rows, dst_factor_out=1, src_factor_out=1,
                alu_opcode=s.op, use_imm=True, imm=s.imm)
        for s in p.steps
    ]  # fmt: skip
    for insn in insns:
        encode(insn, PYNQ)  # every immediate fits the instruction's field
    sim = FunctionalSim(PYNQ, DeviceMemory(1 << 16))
    sim.uop[0] = np.frombuffer(encode_uop(Uop(0, 0, 0), PYNQ), dtype=np.uint32)[0]
    sim.acc[:rows] = acc
    sim.execute([*insns, FinishInsn()])
    np.testing.assert_array_equal(sim.out[:rows], apply_requant(acc, p).astype(np.int8))


# ---- scales, quantize/dequantize, weights and biases --------------------------------------


@given(threshold=st.floats(1e-6, 1e6), bits=st.sampled_from([4, 8, 16]))
def test_choose_scale_covers_the_threshold(threshold: float, bits: int) -> None:
    top = (1 << (bits - 1)) - 1
    s = choose_scale(threshold, bits)
    assert threshold / s == pytest.approx(top, rel=1e-12)
    s2 = choose_scale(threshold, bits, power_of_two=True)
    assert is_power_of_two(s2)
    assert top / 2 < threshold / s2 <= top  # the smallest power of two that does not clip


@given(
    values=st.lists(st.floats(-1, 1), min_size=1, max_size=50),
    threshold=st.floats(0.01, 100),
    pow2=st.booleans(),
)
def test_quantize_dequantize_error_is_at_most_half_a_step(
    values: list[float], threshold: float, pow2: bool
) -> None:
    x = np.array(values) * threshold
    s = choose_scale(threshold, power_of_two=pow2)
    q = quantize(x, s)
    assert q.dtype == np.int8 and np.abs(q.astype(int)).max() <= 127
    # dequantize returns float32: allow its rounding on top of half a step.
    assert np.all(np.abs(dequantize(q, s) - x) <= s / 2 + 1e-6 * (np.abs(x) + s))


def test_quantize_saturates_symmetrically() -> None:
    assert quantize(np.array([1e9, -1e9, 0.49, -0.51]), 1.0).tolist() == [127, -127, 0, -1]
    assert choose_scale(0.0) == 1.0
    with pytest.raises(ValueError, match="threshold must be a finite number >= 0, not -1.0"):
        choose_scale(-1.0)
    with pytest.raises(ValueError, match="scale must be a positive finite number, not 0.0"):
        quantize(np.zeros(2), 0.0)


def test_quantize_weight_uses_the_full_range() -> None:
    w = np.random.default_rng(0).normal(size=(16, 8, 3, 3))
    qw = quantize_weight(w)
    assert np.abs(qw.values.astype(int)).max() == 127
    np.testing.assert_allclose(qw.dequantize(), w, atol=qw.scale / 2 + 1e-6)
    qp = quantize_weight(w, power_of_two=True)
    assert is_power_of_two(qp.scale) and 64 <= np.abs(qp.values.astype(int)).max() <= 127


def test_quantize_bias_is_at_the_accumulator_scale() -> None:
    b = np.array([0.1, -0.37, 2.0])
    qb = quantize_bias(b, 2.0**-12)
    assert qb.values.dtype == np.int32
    assert qb.values.tolist() == [round(0.1 * 4096), round(-0.37 * 4096), 8192]
    with pytest.raises(ValueError, match="quantized bias must fit 32-bit accumulators"):
        quantize_bias(np.array([1.0]), 2.0**-40)
