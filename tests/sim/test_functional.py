"""Functional simulator vs numpy on hand-assembled programs; token protocol; error reports."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.demo import build_matmul
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import (
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    MemInsn,
    MemType,
    Opcode,
    Uop,
    alu_apply,
    encode_uops,
)
from tensorforge.sim.functional import DeadlockError, FunctionalSim, SimError
from tensorforge.sim.memory import DeviceMemory

PYNQ, TINY = HWConfig.preset("pynq"), HWConfig.preset("tiny")
LOAD, STORE = Opcode.LOAD, Opcode.STORE


def make_sim(cfg=TINY):
    return FunctionalSim(cfg, DeviceMemory(1 << 20))


def put(sim, data, eb):
    """Place bytes in DRAM; returns the dram_base (in elements of eb bytes)."""
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    block = sim.memory.alloc(max(raw.size, 1), 4096)
    sim.memory.write(block.addr, raw)
    return block.addr // eb, block


def load_uops(sim, uops, sram_base=0):
    base, _ = put(sim, np.frombuffer(encode_uops(uops, sim.cfg), np.uint8), 4)
    return MemInsn(LOAD, MemType.UOP, sram_base, base, 1, len(uops), len(uops))


# ---- data movement ----------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [TINY, PYNQ], ids=lambda c: c.name)
def test_padded_2d_load_then_store(cfg):
    """LOAD ACC_8BIT with padding on all sides, copy to OUT on the ALU, STORE: numpy's pad."""
    sim, lanes = make_sim(cfg), cfg.batch * cfg.block_out
    rng = np.random.default_rng(1)
    src = rng.integers(-128, 128, (7, 9, lanes), dtype=np.int8)  # 7 rows of 9 elements
    y, x, pads = 4, 5, (1, 2, 3, 1)  # a 4x5 window at (2, 3); pads y0, y1, x0, x1
    base, _ = put(sim, src, cfg.acc8_elem_bytes)
    ny, nx = y + pads[0] + pads[1], x + pads[2] + pads[3]
    out_base, out = put(sim, np.zeros((ny, nx, lanes), np.int8), cfg.out_elem_bytes)
    prog = [
        load_uops(sim, [Uop(0, 0, 0)]),
        MemInsn(LOAD, MemType.ACC_8BIT, 0, base + 2 * 9 + 3, y, x, 9, *pads),
        AluInsn(
            uop_bgn=0,
            uop_end=1,
            iter_out=ny * nx,
            dst_factor_out=1,
            alu_opcode=AluOp.SHR,
            use_imm=True,
            imm=0,
            push_next=True,
        ),  # fmt: skip
        MemInsn(STORE, MemType.OUT, 0, out_base, ny, nx, nx, pop_prev=True, push_prev=True),
        FinishInsn(pop_next=True),
    ]
    stats = sim.execute(prog)
    got = np.frombuffer(sim.memory.read(out.addr, out.nbytes), np.int8).reshape(ny, nx, lanes)
    want = np.pad(src[2 : 2 + y, 3 : 3 + x], ((pads[0], pads[1]), (pads[2], pads[3]), (0, 0)))
    assert np.array_equal(got, want)
    assert stats.acc_load_nbytes == y * x * cfg.acc8_elem_bytes  # padding is not counted
    assert stats.out_store_nbytes == ny * nx * cfg.out_elem_bytes
    assert stats.alu_counter == ny * nx


def test_padded_inp_load_through_identity_gemm():
    """LOAD INP with padding, multiply by an identity weight block, STORE: numpy's pad."""
    cfg = TINY
    sim, bi = make_sim(cfg), cfg.block_in
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (3, 4, 1, bi), dtype=np.int8)
    base, _ = put(sim, a, cfg.inp_elem_bytes)
    wbase, _ = put(sim, np.eye(bi, dtype=np.int8)[None], cfg.wgt_elem_bytes)
    n = (3 + 2) * (4 + 1)
    obase, out = put(sim, np.zeros((n, 1, bi), np.int8), cfg.out_elem_bytes)
    prog = [
        MemInsn(LOAD, MemType.WGT, 0, wbase, 1, 1, 1),
        MemInsn(LOAD, MemType.INP, 0, base, 3, 4, 4, 1, 1, 1, 0, push_next=True),
        load_uops(sim, [Uop(0, 0, 0)]),
        GemmInsn(reset_reg=True, uop_bgn=0, uop_end=1, iter_out=n, dst_factor_out=1, pop_prev=True),
        GemmInsn(
            uop_bgn=0, uop_end=1, iter_out=n, dst_factor_out=1, src_factor_out=1, push_next=True
        ),  # fmt: skip
        MemInsn(STORE, MemType.OUT, 0, obase, 1, n, n, pop_prev=True, push_prev=True),
        FinishInsn(pop_next=True),
    ]
    sim.execute(prog)
    got = np.frombuffer(sim.memory.read(out.addr, out.nbytes), np.int8).reshape(5, 5, bi)
    assert np.array_equal(got, np.pad(a[:, :, 0], ((1, 1), (1, 0), (0, 0))))


# ---- whole kernels ----------------------------------------------------------------------


def test_blocked_gemm_1x64_at_64x64_in_16x16_tiles():
    k = build_matmul(PYNQ, 1, 64, 64, seed=3)
    out, result = k.run_on("sim")
    assert np.array_equal(out, k.reference())
    assert result.stats["gemm_counter"] == (64 // 16) * (64 // 16)
    assert result.stats["wgt_load_nbytes"] == 64 * 64


@pytest.mark.parametrize(
    ("cfg", "m", "k", "n", "tile_rows"),
    [(TINY, 32, 16, 8, 2), (TINY, 24, 12, 20, 3), (PYNQ, 48, 32, 48, 4), (TINY, 8, 4, 4, None)],
)
def test_tiled_pipeline_with_tokens_matches_numpy(cfg, m, k, n, tile_rows):
    kern = build_matmul(cfg, m, k, n, tile_rows=tile_rows, seed=m + k + n)
    out, result = kern.run_on("sim")
    assert np.array_equal(out, kern.reference())
    s = result.stats
    assert s["gemm_counter"] == (m // cfg.batch) * (k // cfg.block_in) * (n // cfg.block_out)
    assert s["inp_load_nbytes"] == m * k and s["out_store_nbytes"] == m * n


def test_alu_chain_bias_shr_max_min_with_extreme_values():
    """Values that overflow int8 and the accumulator's sign: the clip must see int32 sums."""
    a = np.full((4, 32), 127, np.int8)
    w = np.full((16, 32), -128, np.int8)
    w[::2] = 127
    bias = np.arange(16, dtype=np.int32) * 1000 - 8000
    kern = build_matmul(TINY, 4, 32, 16, shift=5, a=a, w=w, bias=bias)
    out, _ = kern.run_on("sim")
    assert np.array_equal(out, kern.reference())
    assert set(np.unique(out)) >= {0, 127}


# ---- the token protocol -----------------------------------------------------------------


def _pipeline(missing=None):
    """load -> compute -> store with every token; `missing` drops one flag."""
    sim = make_sim()
    lanes = TINY.block_in
    base, _ = put(sim, np.ones((1, 1, lanes), np.int8), TINY.inp_elem_bytes)
    wbase, _ = put(sim, np.eye(lanes, dtype=np.int8)[None], TINY.wgt_elem_bytes)
    obase, out = put(sim, np.zeros(lanes, np.int8), TINY.out_elem_bytes)
    flags = {
        1: {"push_next": True},
        3: {"pop_prev": True},
        4: {"push_next": True},
        5: {"pop_prev": True, "push_prev": True},
        6: {"pop_next": True},
    }
    if missing:
        del flags[missing[0]][missing[1]]
    prog = [
        MemInsn(LOAD, MemType.WGT, 0, wbase, 1, 1, 1),
        MemInsn(LOAD, MemType.INP, 0, base, 1, 1, 1, **flags[1]),
        load_uops(sim, [Uop(0, 0, 0)]),
        GemmInsn(reset_reg=True, uop_bgn=0, uop_end=1, **flags[3]),
        GemmInsn(uop_bgn=0, uop_end=1, **flags[4]),
        MemInsn(STORE, MemType.OUT, 0, obase, 1, 1, 1, **flags[5]),
        FinishInsn(**flags[6]),
    ]
    return sim, prog, out


def test_pipeline_with_correct_tokens_runs():
    sim, prog, out = _pipeline()
    stats = sim.execute(prog)
    assert stats.load_insns == 2 and stats.compute_insns == 4 and stats.store_insns == 1
    assert np.array_equal(np.frombuffer(sim.memory.read(out.addr, 4), np.int8), np.ones(4))


def test_missing_push_is_a_deadlock_naming_instruction_and_queue():
    sim, prog, _ = _pipeline(missing=(4, "push_next"))
    with pytest.raises(DeadlockError) as e:
        sim.execute(prog)
    msg = str(e.value)
    assert "store stage waits at instruction 5 (STORE OUT) to pop a token from g2s" in msg
    assert "compute stage waits at instruction 6 (FINISH) to pop a token from s2g" in msg
    assert "load stage is idle" in msg


def test_missing_pop_leaves_a_token_and_is_reported():
    sim, prog, _ = _pipeline(missing=(3, "pop_prev"))
    with pytest.raises(SimError, match=r"FINISH would leave tokens in \{'l2g': 1\}"):
        sim.execute(prog)


def test_finish_before_unsynchronized_work_is_reported():
    sim, prog, _ = _pipeline()
    prog[6] = FinishInsn()  # does not wait for the store
    prog[5] = MemInsn(STORE, MemType.OUT, 0, prog[5].dram_base, 1, 1, 1, pop_prev=True)
    with pytest.raises(SimError, match=r"FINISH can run with 1 instruction\(s\) not yet executed "
                       r"\(first: instruction 5, STORE OUT\)"):  # fmt: skip
        sim.execute(prog)


def test_full_command_queue_blocks_fetch_and_is_reported():
    cfg = TINY.replace(insn_queue_depth=2)
    sim = make_sim(cfg)
    # Compute waits for a load that sits behind two queued compute instructions' successors.
    prog = [
        GemmInsn(reset_reg=True, pop_prev=True),
        GemmInsn(reset_reg=True),
        GemmInsn(reset_reg=True),
        MemInsn(LOAD, MemType.INP, 0, 0, 0, 0, 0, push_next=True),
        FinishInsn(),
    ]
    with pytest.raises(DeadlockError, match=r"fetch is blocked at instruction 2 \(GEMM\): the "
                       r"compute queue is full \(2 entries\)"):  # fmt: skip
        sim.execute(prog)
    # With room in the queue the same program runs.
    assert make_sim().execute(prog).insn_count == 5


def test_full_token_queue_delays_the_producer_without_losing_tokens():
    nop = MemInsn(LOAD, MemType.INP, 0, 0, 0, 0, 0, push_next=True)
    pop = GemmInsn(pop_prev=True)
    prog = [nop, nop, nop, pop, pop, pop, FinishInsn()]
    for depth in (1, 2, 8):
        stats = make_sim(TINY.replace(dep_queue_depth=depth)).execute(prog)
        assert (stats.load_insns, stats.compute_insns) == (3, 4)
    with pytest.raises(SimError, match=r"FINISH would leave tokens in \{'l2g': 1\}"):
        make_sim().execute([nop, nop, pop, FinishInsn()])


@pytest.mark.parametrize(
    ("prog", "message"),
    [
        ([MemInsn(LOAD, MemType.INP, pop_prev=True), FinishInsn()],
         r"instruction 0 \(LOAD INP\) sets pop_prev, but the load stage has no previous stage"),
        ([MemInsn(STORE, MemType.OUT, push_next=True), FinishInsn()],
         "the store stage has no next stage"),
        ([FinishInsn(), FinishInsn()], "FINISH must be the last instruction"),
        ([GemmInsn()], r"last instruction \(0, GEMM\) must be FINISH"),
        ([], "the program is empty"),
    ],
)  # fmt: skip
def test_malformed_programs_are_rejected_before_running(prog, message):
    with pytest.raises(SimError, match=message):
        make_sim().execute(prog)


# ---- range errors -----------------------------------------------------------------------


def test_out_of_range_sram_and_dram_name_the_instruction():
    sim = make_sim()
    big = MemInsn(LOAD, MemType.INP, 250, 0, 2, 4, 4, push_next=True)  # 8 from 250 > 256
    with pytest.raises(SimError, match=r"instruction 0 \(LOAD INP\): INP indices \[250, 258\) "
                       r"exceed the INP buffer's 256 entries"):  # fmt: skip
        sim.execute([big, FinishInsn(pop_prev=True)])
    end = (sim.memory.base + sim.memory.size) // 4
    far = MemInsn(LOAD, MemType.INP, 0, end, 1, 1, 1, push_next=True)
    with pytest.raises(
        SimError, match=r"instruction 1 \(LOAD INP\): DRAM load of 4 bytes at 0x\w+ is outside "
    ):
        sim.execute([GemmInsn(), far, FinishInsn(pop_prev=True)])
    gemm = GemmInsn(uop_bgn=0, uop_end=1, iter_out=3, dst_factor_out=130)
    with pytest.raises(SimError, match=r"instruction 0 \(GEMM\): ACC index 260 is out of range"
                       r" \[0, 256\)"):  # fmt: skip
        sim.execute([gemm, FinishInsn()])
    with pytest.raises(SimError, match="uop_end \\(1\\) must be >= uop_bgn \\(2\\)"):
        sim.execute([GemmInsn(uop_bgn=2, uop_end=1), FinishInsn()])


def test_alu_mul_needs_the_extension():
    cfg = TINY.replace(alu_mul=False)
    with pytest.raises(SimError, match="has no ALU MUL"):
        make_sim(cfg).execute([AluInsn(alu_opcode=AluOp.MUL, uop_end=1), FinishInsn()])


# ---- GEMM and ALU semantics vs step-by-step references -----------------------------------


def _loop_steps(insn, uops):
    for io in range(insn.iter_out):
        for ii in range(insn.iter_in):
            for u in uops[insn.uop_bgn : insn.uop_end]:
                yield (
                    u.dst_idx + io * insn.dst_factor_out + ii * insn.dst_factor_in,
                    u.src_idx + io * insn.src_factor_out + ii * insn.src_factor_in,
                    u.wgt_idx + io * getattr(insn, "wgt_factor_out", 0)
                    + ii * getattr(insn, "wgt_factor_in", 0),
                )  # fmt: skip


def _seed_sim(rng):
    sim = make_sim()
    sim.inp[:] = rng.integers(-128, 128, sim.inp.shape)
    sim.wgt[:] = rng.integers(-128, 128, sim.wgt.shape)
    sim.acc[:] = rng.integers(-(1 << 31), 1 << 31, sim.acc.shape)
    return sim


small = st.integers(0, 5)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_gemm_equals_step_by_step_loop(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    sim = _seed_sim(rng)
    uops = [Uop(*(data.draw(st.integers(0, 40)) for _ in range(3))) for _ in range(4)]
    insn = GemmInsn(uop_bgn=0, uop_end=data.draw(st.integers(0, 4)), iter_out=data.draw(small),
                    iter_in=data.draw(small), **{f: data.draw(small) for f in (
                        "dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in",
                        "wgt_factor_out", "wgt_factor_in")})  # fmt: skip
    sim.uop[:4] = np.frombuffer(encode_uops(uops, TINY), "<u4")
    acc = sim.acc.astype(np.int64)
    out = sim.out.copy()
    for d, s, w in _loop_steps(insn, uops):
        acc[d] = alu_apply(AluOp.ADD, acc[d], sim.inp[s].astype(np.int64) @ sim.wgt[w].T.astype(
            np.int64), 32)  # fmt: skip
        out[d] = acc[d].astype(np.int8)
    sim.execute([insn, FinishInsn()])
    assert np.array_equal(sim.acc, acc) and np.array_equal(sim.out, out)


RQ_TINY = TINY.replace(gemm_requant=True)


def _numpy_requant(acc, shift, rnd, relu):
    """The ALU passes the requantizing GEMM replaces, in plain numpy int64 arithmetic:
    [ADD 2**(shift-1)] (wrapping to 32 bits), floor shift, MAX lo, MIN 127."""
    x = acc.astype(np.int64) + ((1 << (shift - 1)) if rnd else 0)
    x = (x + (1 << 31)) % (1 << 32) - (1 << 31)
    return np.clip(x >> shift, 0 if relu else -127, 127)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_random_requant_gemm_equals_numpy_steps(data):
    """GEMM ``requant``: OUT gets the requantized sum, ACC 0, src offsets are 0, a repeated
    dst sees the 0 of its earlier step (numpy step by step; HWConfig gemm_requant)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    sim = FunctionalSim(RQ_TINY, DeviceMemory(1 << 20))
    sim.inp[:] = rng.integers(-128, 128, sim.inp.shape)
    sim.wgt[:] = rng.integers(-128, 128, sim.wgt.shape)
    sim.acc[:] = rng.integers(-(1 << 31), 1 << 31, sim.acc.shape)
    sim.acc[:8] = rng.integers(-5000, 5000, sim.acc[:8].shape)  # values the clip leaves alone
    shift = data.draw(st.integers(0, 31))
    rnd = shift > 0 and data.draw(st.booleans())
    relu = data.draw(st.booleans())
    uops = [Uop(*(data.draw(st.integers(0, 20)) for _ in range(3))) for _ in range(3)]
    insn = GemmInsn(uop_bgn=0, uop_end=data.draw(st.integers(1, 3)), iter_out=data.draw(small),
                    iter_in=data.draw(small), dst_factor_out=data.draw(small),
                    dst_factor_in=data.draw(small), wgt_factor_out=data.draw(small),
                    wgt_factor_in=data.draw(small), requant=True, rq_shift=shift, rq_round=rnd,
                    rq_relu=relu)  # fmt: skip
    sim.uop[:3] = np.frombuffer(encode_uops(uops, RQ_TINY), "<u4")
    acc, out = sim.acc.astype(np.int64), sim.out.copy()
    for io in range(insn.iter_out):
        for ii in range(insn.iter_in):
            for u in uops[: insn.uop_end]:
                d = u.dst_idx + io * insn.dst_factor_out + ii * insn.dst_factor_in
                w = u.wgt_idx + io * insn.wgt_factor_out + ii * insn.wgt_factor_in
                # src: the micro-op's base only (the src fields hold the parameters)
                total = acc[d] + sim.inp[u.src_idx].astype(np.int64) @ sim.wgt[w].T
                out[d] = _numpy_requant(total, shift, rnd, relu).astype(np.int8)
                acc[d] = 0
    sim.execute([insn, FinishInsn()])
    assert np.array_equal(sim.acc, acc) and np.array_equal(sim.out, out)


def test_requant_gemm_needs_the_option():
    with pytest.raises(SimError, match="has no GEMM requant"):
        make_sim().execute([GemmInsn(uop_end=1, requant=True, rq_shift=3), FinishInsn()])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_alu_equals_sequential_steps(data):
    """Covers the vectorized fast paths: aliasing dst/src, repeated dst, immediates."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    sim = _seed_sim(rng)
    sim.acc[:] = rng.integers(-300, 300, sim.acc.shape)  # small values make SHR/MUL interesting
    uops = [Uop(data.draw(st.integers(0, 12)), data.draw(st.integers(0, 12)), 0) for _ in range(3)]
    insn = AluInsn(
        uop_bgn=0, uop_end=data.draw(st.integers(1, 3)), iter_out=data.draw(small),
        iter_in=data.draw(small), alu_opcode=data.draw(st.sampled_from(list(AluOp))),
        use_imm=data.draw(st.booleans()), imm=data.draw(st.integers(-40, 40)),
        **{f: data.draw(st.integers(0, 3)) for f in (
            "dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in")},
    )  # fmt: skip
    sim.uop[:3] = np.frombuffer(encode_uops(uops, TINY), "<u4")
    if insn.alu_opcode == AluOp.SHR and not insn.use_imm:
        sim.acc[:] = rng.integers(-40, 40, sim.acc.shape)  # shift amounts from ACC
    acc = sim.acc.astype(np.int64)
    out = sim.out.copy()
    for d, s, _ in _loop_steps(insn, uops):
        b = insn.imm if insn.use_imm else acc[s].copy()
        acc[d] = alu_apply(insn.alu_opcode, acc[d], b, 32)
        out[d] = acc[d].astype(np.int8)
    sim.execute([insn, FinishInsn()])
    assert np.array_equal(sim.acc, acc) and np.array_equal(sim.out, out)


def test_sram_state_persists_between_runs_like_hardware():
    sim = make_sim()
    sim.execute([load_uops(sim, [Uop(1, 2, 3)]), FinishInsn()])
    assert sim.uop[0] != 0
    sim.execute([FinishInsn()])
    assert sim.uop[0] != 0
    sim.reset()
    assert sim.uop[0] == 0


def test_vectorized_gemm_is_fast_enough_for_a_resnet_layer_slice():
    """A 1x16x16 GEMM instruction must not loop in Python per multiply: 64k micro-op steps."""
    import time

    sim = make_sim(PYNQ)
    sim.uop[:16] = np.frombuffer(encode_uops([Uop(j, j, j) for j in range(16)], PYNQ), "<u4")
    insn = GemmInsn(uop_bgn=0, uop_end=16, iter_out=64, iter_in=64, dst_factor_out=16,
                    src_factor_in=16, wgt_factor_in=16)  # fmt: skip
    start = time.perf_counter()
    sim.execute([insn, FinishInsn()])
    assert time.perf_counter() - start < 5.0  # a per-multiply Python loop takes minutes
