"""The fused ALU epilogue on the functional simulator equals compiler.quantize's int8 oracle:
RequantParams emitted step by step (shift, rounding, MUL, per-channel multipliers), the residual
add, and their errors."""

from __future__ import annotations

import re

import compiler_ops as ops
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.compiler.quantize import conv2d_int8, dense_int8, requant_params
from tensorforge.compiler.quantize.requant import AluStep, requant_params_per_channel
from tensorforge.compiler.quantize.residual import add_int8, add_params
from tensorforge.compiler.vta import Conv2dWorkload, candidate_schedules, conv2d, dense
from tensorforge.compiler.vta.tile import Alu, Store
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluOp

CONFIGS = ["pynq", "tiny"]


def _conv_operands(seed: int, cfg: HWConfig, ic_blocks: float = 1.5):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    ic, oc = int(ic_blocks * cfg.block_in) + 1, 2 * cfg.block_out + 1
    x = rng.integers(-128, 128, (2, ic, 6, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (oc, ic, 3, 3), dtype=np.int8)
    b = rng.integers(-5000, 5000, oc, dtype=np.int32)
    return x, w, b


def _bound(w: np.ndarray, b: np.ndarray) -> int:
    return int(127 * np.abs(w.astype(np.int64)).reshape(len(w), -1).sum(1).max() + abs(b).max())


def _epilogue_ops(kern) -> list[tuple[AluOp, int | None]]:  # type: ignore[no-untyped-def]
    """The ALU instructions of the first tile's epilogue: those before the first STORE."""
    stmts = kern.tile_program.stmts
    first_store = next(i for i, s in enumerate(stmts) if isinstance(s, Store))
    return [(s.op, s.imm) for s in stmts[:first_store] if isinstance(s, Alu)]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("relu", [False, True])
def test_shift_requant_with_rounding_matches_the_oracle(config: str, vthreads: int, relu: bool):
    cfg = HWConfig.preset(config).replace(alu_mul=False)
    x, w, b = _conv_operands(vthreads + 2 * relu, cfg)
    shift = 11 if cfg.block_in == 16 else 8  # some outputs saturate: the clip is exercised
    p = requant_params(2.0**-shift, cfg, mode="shift", relu=relu)
    kern = conv2d(cfg, x.shape, w, b, padding=1, requant=p, vthreads=vthreads)
    assert _epilogue_ops(kern) == [(AluOp.ADD, None)] + [(s.op, s.imm) for s in p.steps]
    out, _ = kern.run(x)
    want = conv2d_int8(x, w, b, padding=1, requant=p)
    assert np.array_equal(out, want), np.count_nonzero(out != want)
    assert np.unique(want).size > 20 and want.min() == (0 if relu else -127)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("vthreads", [1, 2])
def test_mul_requant_on_an_alu_mul_config_matches_the_oracle(config: str, vthreads: int):
    cfg = HWConfig.preset(config).replace(alu_mul=True)
    x, w, b = _conv_operands(7 + vthreads, cfg)
    p = requant_params(3e-4, cfg, mode="mul", relu=True, acc_bound=_bound(w, b))
    assert p.steps[0].op == AluOp.MUL and p.multiplier > 1
    kern = conv2d(cfg, x.shape, w, b, stride=2, padding=1, requant=p, vthreads=vthreads)
    assert _epilogue_ops(kern)[1] == (AluOp.MUL, p.multiplier)
    out, _ = kern.run(x)
    want = conv2d_int8(x, w, b, stride=2, padding=1, requant=p)
    assert np.array_equal(out, want) and np.unique(want).size > 10


def test_mul_requant_dense_matches_the_oracle() -> None:
    cfg = HWConfig.preset("tiny")
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (6, 11), dtype=np.int8)
    w = rng.integers(-128, 128, (9, 11), dtype=np.int8)
    b = rng.integers(-900, 900, 9, dtype=np.int32)
    p = requant_params(0.0123, cfg, mode="mul", acc_bound=_bound(w, b))
    for vthreads in (1, 2):
        out, _ = dense(cfg, 6, w, b, requant=p, vthreads=vthreads).run(a)
        assert np.array_equal(out, dense_int8(a, w, b, requant=p))


def _per_channel_oracle(acc: np.ndarray, p) -> np.ndarray:  # type: ignore[no-untyped-def]
    return ops.per_channel_requant(acc, p.channel_multipliers, p.shift, p.pre_shift, p.lo,
                                   rounding=True)  # fmt: skip


def _per_channel(cfg: HWConfig, w: np.ndarray, b: np.ndarray, seed: int, relu: bool, pre=0):  # type: ignore[no-untyped-def]
    bounds = 127 * np.abs(w.astype(np.int64)).reshape(len(w), -1).sum(1) + np.abs(b)
    ratios = np.random.default_rng(seed).uniform(0.2, 3.0, len(w)) * 3e-4
    return requant_params_per_channel(ratios, cfg, acc_bounds=bounds, relu=relu, pre_shift=pre)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("vthreads", [1, 2])
def test_per_channel_requant_matches_an_integer_oracle(config: str, vthreads: int) -> None:
    cfg = HWConfig.preset(config).replace(alu_mul=True)
    x, w, b = _conv_operands(21 + vthreads, cfg)
    pre = 3 * (vthreads - 1)  # with 2 threads also a pre-shift before the multipliers
    p = _per_channel(cfg, w, b, vthreads, relu=vthreads == 2, pre=pre)
    kern = conv2d(cfg, x.shape, w, b, stride=2, padding=1, requant=p, vthreads=vthreads)
    ops = _epilogue_ops(kern)
    head = [(AluOp.SHR, pre)] if pre else []
    assert ops[1 : 2 + len(head)] == [*head, (AluOp.MUL, None)]  # after the bias: tensor MUL
    assert [op for op, _ in ops[2 + len(head) :]] == [s.op for s in p.steps]
    out, _ = kern.run(x)
    acc = conv2d_int8(x, w, b, stride=2, padding=1)  # the int32 accumulators, no requant
    want = _per_channel_oracle(acc, p)
    assert np.array_equal(out, want), np.count_nonzero(out != want)
    assert np.unique(want).size > 20
    # a channel's output follows its own ratio: the ratio spread is 15x, so the channels'
    # output magnitudes must differ as their multipliers do
    spread = np.abs(want.astype(float)).mean(axis=(0, 2, 3))
    assert np.corrcoef(spread, p.channel_multipliers)[0, 1] > 0.5


def test_per_channel_requant_dense_and_a_fused_residual_match_the_oracle() -> None:
    cfg = HWConfig.preset("tiny")
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (6, 11), dtype=np.int8)
    w = rng.integers(-128, 128, (9, 11), dtype=np.int8)
    b = rng.integers(-900, 900, 9, dtype=np.int32)
    p = _per_channel(cfg, w, b, 5, relu=False)
    out, _ = dense(cfg, 6, w, b, requant=p).run(a)
    want = _per_channel_oracle(dense_int8(a, w, b), p)
    assert np.array_equal(out, want)
    x, w, b = _conv_operands(31, cfg)
    p = _per_channel(cfg, w, b, 6, relu=False, pre=2)
    add = add_params(0.61, 1.37, cfg, mode="mul", relu=True)
    kern = conv2d(cfg, x.shape, w, b, padding=1, requant=p, residual=add, vthreads=2)
    r = rng.integers(-127, 128, kern.output_shape, dtype=np.int8)
    out, _ = kern.run(x, residual=r)
    conv = _per_channel_oracle(conv2d_int8(x, w, b, padding=1), p)
    assert np.array_equal(out, add_int8(conv, r, add))


def test_per_channel_requant_needs_the_alu_mul_and_one_multiplier_per_channel() -> None:
    cfg = HWConfig.preset("pynq")
    x, w, b = _conv_operands(2, cfg)
    p = _per_channel(cfg, w, b, 1, relu=True)
    with pytest.raises(ValueError, match="per-channel requant multipliers need the ALU MUL"):
        conv2d(cfg.replace(name="nomul", alu_mul=False), x.shape, w, b, padding=1, requant=p)
    with pytest.raises(ValueError, match=r"\d+ per-channel multipliers for \d+ output channels"):
        conv2d(cfg, x.shape, w[:-1], b[:-1], padding=1, requant=p)
    with pytest.raises(ValueError, match="per-channel requantization needs the ALU MUL"):
        _per_channel(cfg.replace(name="nomul", alu_mul=False), w, b, 1, relu=True)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("mode", ["shift", "mul"])
def test_fused_residual_add_matches_the_oracle(config: str, vthreads: int, mode: str) -> None:
    cfg = HWConfig.preset(config)
    x, w, b = _conv_operands(11 + vthreads, cfg)
    ratios = (0.5, 2.0) if mode == "shift" else (0.61, 1.37)
    p = requant_params(2.0**-10, cfg)  # the conv's own requantization (no ReLU before the add)
    add = add_params(*ratios, cfg, mode=mode, relu=True)
    kern = conv2d(cfg, x.shape, w, b, padding=1, requant=p, residual=add, vthreads=vthreads)
    r = np.random.default_rng(5).integers(-127, 128, kern.output_shape, dtype=np.int8)
    out, result = kern.run(x, residual=r)
    want = add_int8(conv2d_int8(x, w, b, padding=1, requant=p), r, add)
    assert np.array_equal(out, want), np.count_nonzero(out != want)
    assert np.unique(want).size > 20 and want.min() == 0
    assert result.stats["acc_load_nbytes"] >= r.size  # the residual came in through ACC_8BIT


def test_fused_residual_add_on_dense_and_ragged_tiles() -> None:
    cfg = HWConfig.preset("tiny")
    rng = np.random.default_rng(8)
    a = rng.integers(-128, 128, (5, 10), dtype=np.int8)
    w = rng.integers(-128, 128, (13, 10), dtype=np.int8)
    r = rng.integers(-127, 128, (5, 13), dtype=np.int8)
    add = add_params(1.0, 0.25, cfg)
    from tensorforge.compiler.vta import Conv2dSchedule

    ragged = Conv2dSchedule(tile_n=2, tile_oc=3, tile_ic=2)  # 5 rows, 4 oc and 3 ic blocks
    for sched in (None, ragged):
        kern = dense(cfg, 5, w, shift=6, residual=add, schedule=sched)
        out, _ = kern.run(a, residual=r)
        assert np.array_equal(out, add_int8(dense_int8(a, w, requant=kern.requant), r, add))


def test_shorthand_builds_quantize_params_with_symmetric_bounds() -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _conv_operands(1, cfg)
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=12)
    want = requant_params(2.0**-12, cfg, rounding=False)
    assert kern.requant == want and (want.lo, want.hi) == (-127, 127)
    out, _ = kern.run(x)
    assert np.array_equal(out, conv2d_int8(x, w, b, padding=1, requant=want))


def test_mul_on_a_config_without_alu_mul_is_rejected() -> None:
    with_mul = HWConfig.preset("pynq")
    without = with_mul.replace(name="pynq_vta", alu_mul=False)
    x, w, b = _conv_operands(2, with_mul)
    p = requant_params(3e-4, with_mul, mode="mul", acc_bound=_bound(w, b))
    with pytest.raises(ValueError) as e:
        conv2d(without, x.shape, w, b, padding=1, requant=p)
    assert str(e.value).startswith(
        f"conv2d requant step MUL {p.multiplier} needs the ALU MUL extension, but HWConfig "
        "'pynq_vta' has alu_mul=False"
    )
    add = add_params(0.61, 1.37, with_mul, mode="mul")
    with pytest.raises(ValueError, match="conv2d residual lhs step MUL .* alu_mul=False"):
        conv2d(without, x.shape, w, b, padding=1, shift=10, residual=add)


def test_bad_epilogue_arguments_are_rejected() -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _conv_operands(4, cfg)
    p = requant_params(2.0**-10, cfg)
    with pytest.raises(ValueError, match="give either requant or the shift/relu shorthand"):
        conv2d(cfg, x.shape, w, b, shift=3, requant=p)
    with pytest.raises(ValueError, match=r"shift must be an int in \[0, 31\], not 32"):
        conv2d(cfg, x.shape, w, b, shift=32)
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=10, residual=add_params(1.0, 1.0, cfg))
    with pytest.raises(ValueError, match=r"conv2d residual must be int8 of shape \(2, 9, 6, 5\), "
                                         "not None"):  # fmt: skip
        kern.run(x)
    plain = conv2d(cfg, x.shape, w, b, padding=1, shift=10)
    with pytest.raises(ValueError, match="this conv2d kernel has no fused residual add"):
        plain.run(x, residual=np.zeros((2, 9, 6, 5), np.int8))


def test_residual_is_an_acc_8bit_load_and_only_into_acc() -> None:
    from tensorforge.compiler.tir.stmt import LoweringError
    from tensorforge.compiler.vta.codegen import generate_program
    from tensorforge.compiler.vta.tile import Alloc, Load, TileProgram, format_program
    from tensorforge.hw.isa import MemType

    cfg = HWConfig.preset("tiny")
    x, w, b = _conv_operands(6, cfg)
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=9, residual=add_params(1.0, 1.0, cfg))
    text = format_program(kern.tile_program)
    loaded = re.search(r"LOAD\.acc8 R\[0\] -> ([\w.@]+)\[0\]", text)
    assert loaded and f"alloc {loaded[1]}: acc[" in text, text[:800]
    types = {i.memory_type for i in kern.image.instructions() if hasattr(i, "memory_type")}
    assert MemType.ACC_8BIT in types
    bad = Load("X", "i", 0, 0, 1, 4, 4, acc_8bit=True)
    prog = TileProgram("bad", (Alloc("i", "inp", 4),), (bad,), inputs=(("X", (4,), "int8"),))
    with pytest.raises(
        LoweringError, match=r"LOAD\.acc8 .* must use a buffer in acc, not 'i' \(inp\)"
    ):
        generate_program(prog, cfg)


@settings(max_examples=20, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 2), st.integers(1, 9), st.integers(2, 6), st.integers(2, 6)),
    oc=st.integers(1, 9),
    ratio=st.floats(1e-5, 1e-2),
    mode=st.sampled_from(["shift", "mul"]),
    add_ratios=st.one_of(st.none(), st.tuples(st.floats(0.1, 4.0), st.floats(0.1, 4.0))),
    relu=st.booleans(),
    pick=st.integers(0, 10_000),
)
def test_random_epilogues_on_random_schedules_match_the_oracle(  # type: ignore[no-untyped-def]
    shape, oc, ratio, mode, add_ratios, relu, pick
) -> None:
    cfg = HWConfig.preset("tiny")
    rng = np.random.default_rng(pick)
    x = rng.integers(-128, 128, shape, dtype=np.int8)
    w = rng.integers(-128, 128, (oc, shape[1], 3, 3), dtype=np.int8)
    b = rng.integers(-3000, 3000, oc, dtype=np.int32)
    if mode == "shift":
        ratio = 2.0 ** round(np.log2(ratio))
    p = requant_params(ratio, cfg, mode=mode, relu=relu and add_ratios is None,
                       acc_bound=_bound(w, b))  # fmt: skip
    add = None if add_ratios is None else add_params(*add_ratios, cfg, mode="mul", relu=relu)
    wl = Conv2dWorkload(shape[0], shape[1], shape[2], shape[3], oc, 3, 3, pad_h=1, pad_w=1)
    scheds = candidate_schedules(cfg, wl, 1 + pick % 2, residual=add is not None)
    s = scheds[pick % len(scheds)]
    kern = conv2d(cfg, x.shape, w, b, padding=1, requant=p, residual=add, schedule=s)
    want = conv2d_int8(x, w, b, padding=1, requant=p)
    r = None
    if add is not None:
        r = rng.integers(-127, 128, want.shape, dtype=np.int8)
        want = add_int8(want, r, add)
    out, _ = kern.run(x, residual=r)
    assert np.array_equal(out, want), s


def test_a_residual_operand_scaled_by_zero_is_refused_with_the_step_named() -> None:
    # mode "mul" rounds the smaller ratio's multiplier to 0 when the ratios are 2**16 apart:
    # that operand vanishes, and its ALU stage would be a constant the lowering cannot emit.
    cfg = HWConfig.preset("tiny")
    add = add_params(1.0, 2.0**-17, cfg, mode="mul")
    assert add.rhs == AluStep(AluOp.MUL, 0)
    x, w, b = _conv_operands(5, cfg)
    with pytest.raises(ValueError, match="conv2d residual rhs step MUL 0 must not reach the acc"):
        conv2d(cfg, x.shape, w, b, padding=1, shift=10, residual=add)
