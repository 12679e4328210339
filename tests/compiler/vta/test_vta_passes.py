"""The accelerator compiler's passes, each on a small before/expected case, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.tir.stmt import LoweringError
from tensorforge.compiler.vta import Conv2dSchedule, conv2d
from tensorforge.compiler.vta.codegen import generate_program, lower_tile_program
from tensorforge.compiler.vta.passes import (
    Emitted,
    check_sram_capacity,
    constant_adds_to_gemm,
    dedupe_uop_kernels,
    fold_loops,
    gemm_add_weights,
    insert_dependency_tokens,
    stream_resident_loads,
    verify_tokens,
)
from tensorforge.compiler.vta.tile import (
    Alloc,
    Alu,
    AluOp,
    Gemm,
    Load,
    Loop,
    Store,
    TileProgram,
    Uop,
    format_program,
)
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluInsn, FinishInsn, GemmInsn, MemInsn, MemType, Opcode
from tensorforge.runtime.device.vta import LoadedProgram, open_device
from tensorforge.sim.functional import DeadlockError, FunctionalSim
from tensorforge.sim.memory import DeviceMemory
from tensorforge.sim.timing import simulate_timing

TINY = HWConfig.preset("tiny")


def _steps(uops: tuple[Uop, ...], loops: tuple[Loop, ...]) -> list[tuple[int, int, int]]:
    """Every (dst, src, wgt) a micro-op nest visits, in order (the ISA's loop semantics)."""
    out: list[tuple[int, int, int]] = [(0, 0, 0)]
    for lp in loops:
        out = [(d + i * lp.dst, s + i * lp.src, w + i * lp.wgt) for d, s, w in out
               for i in range(lp.extent)]  # fmt: skip
    return [(d + u.dst_idx, s + u.src_idx, w + u.wgt_idx) for d, s, w in out for u in uops]


def test_fold_loops_drops_unit_loops_and_fuses_contiguous_ones() -> None:
    uops, loops = fold_loops((Uop(0, 0, 0),), (Loop(1, 99, 99), Loop(4, 8, 0), Loop(8, 1, 0)))
    assert loops == (Loop(32, 1, 0),)
    assert uops == (Uop(0, 0, 0),)


def test_fold_loops_unrolls_loops_beyond_two_without_changing_the_steps() -> None:
    before = ((Uop(1, 2, 3), Uop(5, 0, 1)), (Loop(2, 100, 7), Loop(3, 10, 1, 2), Loop(4, 1, 9)))
    uops, loops = fold_loops(*before)
    assert len(loops) == 2 and len(uops) == 2 * 4
    assert sorted(_steps(uops, loops)) == sorted(_steps(*before))


def test_fold_loops_rejects_an_extent_the_iter_fields_cannot_hold() -> None:
    with pytest.raises(LoweringError, match="extent must be at most 16383"):
        fold_loops((Uop(),), (Loop(20000, 1, 0), Loop(2, 0, 1)))


def _relu_program() -> TileProgram:
    stmts = (
        Load("X", "a", 0, 0, 1, 4, 4),
        Alu(AluOp.ADD, "a", (Uop(0, 0, 0),), (Loop(4, 1, 0),), src="bias"),
        Store("Y", "a", 0, 0, 1, 4, 4),
    )
    return TileProgram("two", (Alloc("a", "acc", 4), Alloc("bias", "acc", 1)), stmts)


def test_format_program_is_stable() -> None:
    assert format_program(_relu_program()).splitlines() == [
        "tile program two",
        "  alloc a: acc[4]",
        "  alloc bias: acc[1]",
        "  LOAD X[0] -> a[0] 1x4/4 pad=(0, 0, 0, 0)",
        "  ALU ADD a src=bias uops=1 loops=[4:d1,s0]",
        "  STORE a[0] -> Y[0] 1x4/4",
    ]


def test_check_sram_capacity_names_the_buffer_and_sizes() -> None:
    prog = TileProgram("big", (Alloc("x", "inp", 200), Alloc("y", "inp", 100)), ())
    with pytest.raises(LoweringError) as e:
        check_sram_capacity(prog, TINY)
    assert str(e.value) == (
        "the INP buffer must hold at most 256 elements on HWConfig 'tiny', not 300 "
        "(x: 200, y: 100) in tile program 'big': use smaller tiles or fewer virtual threads"
    )


def test_check_sram_capacity_rejects_an_access_outside_its_buffer() -> None:
    stmt = Alu(AluOp.MAX, "a", (Uop(),), (Loop(5, 1, 0),), imm=0)
    prog = TileProgram("oob", (Alloc("a", "acc", 4),), (stmt,))
    with pytest.raises(LoweringError, match=r"buffer 'a' within \[0, 4\), not \[0, 5\)"):
        check_sram_capacity(prog, TINY)


def test_check_sram_capacity_places_buffers_one_after_another() -> None:
    prog = TileProgram("p", (Alloc("x", "inp", 3), Alloc("w", "wgt", 2), Alloc("y", "inp", 5)), ())
    assert check_sram_capacity(prog, TINY) == {"x": 0, "y": 3, "w": 0}


def test_dedupe_uop_kernels_stores_each_kernel_once() -> None:
    k1, k2 = (Uop(0, 1, 2), Uop(1, 2, 3)), (Uop(7, 0, 0),)
    blob, offsets = dedupe_uop_kernels([k1, k2, k1, k2], TINY)
    assert blob == [*k1, *k2] and offsets == [0, 2, 0, 2]


def test_dedupe_uop_kernels_rejects_overflowing_the_uop_buffer() -> None:
    kernels = [tuple(Uop(i, j, 0) for j in range(100)) for i in range(11)]
    with pytest.raises(
        LoweringError, match=r"UOP buffer must hold at most 1024 micro-ops .*not 1100"
    ):
        dedupe_uop_kernels(kernels, TINY)


def _ld(buf: str) -> Emitted:
    return Emitted(MemInsn(Opcode.LOAD, MemType.INP, 0, 0, 1, 1, 1), "X", writes=(buf,))


def _gemm(src: str, dst: str) -> Emitted:
    return Emitted(GemmInsn(uop_bgn=0, uop_end=1), reads=(src, dst), writes=(dst,))


def _st(buf: str) -> Emitted:
    return Emitted(MemInsn(Opcode.STORE, MemType.OUT, 0, 0, 1, 1, 1), "Y", reads=(buf,))


def _flags(stream: list[Emitted]) -> list[str]:
    names = ("pop_prev", "pop_next", "push_prev", "push_next")
    return [",".join(n for n in names if getattr(e.insn, n)) for e in stream]


def test_insert_dependency_tokens_orders_load_compute_store() -> None:
    out = insert_dependency_tokens([_ld("i"), _gemm("i", "a"), _st("a")])
    assert isinstance(out[-1].insn, FinishInsn)
    assert _flags(out) == ["push_next", "pop_prev,push_next", "pop_prev,push_prev", "pop_next"]


def test_insert_dependency_tokens_waits_for_reads_before_overwriting() -> None:
    # The second load overwrites what the first GEMM reads (WAR); the second GEMM's write to
    # "a" waits for the store that reads it (WAR through the store stage).
    stream = [_ld("i"), _gemm("i", "a"), _st("a"), _ld("i"), _gemm("i", "a"), _st("a")]
    out = insert_dependency_tokens(stream)
    assert _flags(out) == [
        "push_next",
        "pop_prev,push_prev,push_next",
        "pop_prev,push_prev",
        "pop_next,push_next",
        "pop_prev,pop_next,push_next",
        "pop_prev,push_prev",
        "pop_next",
    ]
    verify_tokens([e.insn for e in out], TINY)


def test_insert_dependency_tokens_pushes_from_the_producer_itself() -> None:
    out = insert_dependency_tokens([_ld("i"), _ld("j"), _gemm("i", "a"), _gemm("j", "a")])
    # The first GEMM waits only for the first load, not for the second.
    assert _flags(out) == ["push_next", "push_next", "pop_prev", "pop_prev", ""]
    verify_tokens([e.insn for e in out], TINY)


def test_insert_dependency_tokens_skips_waits_already_implied() -> None:
    out = insert_dependency_tokens([_ld("i"), _ld("j"), _gemm("j", "a"), _gemm("i", "a")])
    # Waiting for the second load implies the first (the load stage is in order); the second
    # GEMM and FINISH need no token of their own.
    assert _flags(out) == ["", "push_next", "pop_prev", "", ""]
    verify_tokens([e.insn for e in out], TINY)


def test_insert_dependency_tokens_rejects_a_load_store_hazard() -> None:
    with pytest.raises(LoweringError, match="load and store stages share no token queue"):
        insert_dependency_tokens([_st("a"), _ld("a")])


def test_verify_tokens_rejects_a_deadlock_that_both_simulators_also_find() -> None:
    insns = [
        MemInsn(Opcode.LOAD, MemType.INP, 0, 0, 1, 1, 1, pop_next=True, push_next=True),
        GemmInsn(uop_bgn=0, uop_end=0, pop_prev=True),
        FinishInsn(),
    ]
    stuck = r"deadlock .*after 0 of 3 .*load stage waits at instruction 0 \(LOAD INP\)"
    with pytest.raises(LoweringError, match=r"bad: the dependency tokens are wrong: " + stuck):
        verify_tokens(insns, TINY, "bad")
    with pytest.raises(DeadlockError, match=stuck):
        FunctionalSim(TINY, DeviceMemory(1 << 12)).execute(insns)
    with pytest.raises(DeadlockError, match=stuck):
        simulate_timing(insns, TINY)


def test_verify_tokens_pops_before_it_pushes_as_both_simulators_do() -> None:
    """With one-token queues, instructions 2 and 3 each pop the queue the other pushes into
    while both queues are full: it runs only because a stage pops before it pushes (the RTL's
    order), which the compiler's check once did the other way round and called a deadlock."""
    cfg = TINY.replace(name="tiny_d1", dep_queue_depth=1)
    memory = DeviceMemory(1 << 12, base=0)

    def ld(**flags: bool) -> MemInsn:
        return MemInsn(Opcode.LOAD, MemType.INP, 0, 0, 1, 4, 4, **flags)

    def gemm(**flags: bool) -> GemmInsn:
        return GemmInsn(uop_bgn=0, uop_end=0, **flags)

    insns = [
        ld(push_next=True),
        gemm(push_prev=True),
        gemm(pop_prev=True, push_prev=True),
        ld(pop_next=True, push_next=True),
        gemm(pop_prev=True),
        ld(pop_next=True, push_next=True),
        gemm(),
        FinishInsn(pop_prev=True),
    ]
    verify_tokens(insns, cfg)
    stats = FunctionalSim(cfg, memory).execute(insns)
    timing = simulate_timing(insns, cfg)
    assert (stats.insn_count, stats.load_insns, stats.compute_insns) == (8, 3, 5)
    assert min(timing.start) >= 0 and timing.free[-1] == timing.cycles
    for q, pushes in timing.pushes.items():
        pops = timing.pops[q]
        assert len(pops) == len(pushes)
        assert all(pop > push for push, pop in zip(pushes, pops, strict=True)), q
        assert all(push > pop for push, pop in zip(pushes[1:], pops, strict=False)), q


def test_verify_tokens_rejects_leftover_tokens_and_early_finish() -> None:
    push = MemInsn(Opcode.LOAD, MemType.INP, 0, 0, 1, 1, 1, push_next=True)
    with pytest.raises(LoweringError, match=r"FINISH would leave tokens in \{'l2g': 1\}"):
        verify_tokens([push, push, FinishInsn(pop_prev=True)], TINY)
    with pytest.raises(
        LoweringError, match=r"FINISH can run with 1 instruction\(s\) not yet executed"
    ):
        verify_tokens([push, FinishInsn()], TINY)


def test_two_thread_streams_pass_the_token_verifier_with_small_queues() -> None:
    # generate_program verifies the tokens; the simulator then runs the stream bit-exact.
    cfg = TINY.replace(name="tiny_q4", insn_queue_depth=4, dep_queue_depth=2)
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8)
    kern = conv2d(cfg, (1, 8, 6, 6), w, padding=1, shift=8, vthreads=2,
                  schedule=Conv2dSchedule(tile_h=2, tile_oc=1, tile_ic=1, vthreads=2))  # fmt: skip
    x = rng.integers(-128, 128, (1, 8, 6, 6), dtype=np.int8)
    assert np.array_equal(kern.run(x)[0], kern.reference(x))


def test_generate_program_runs_a_tile_program_on_the_simulator() -> None:
    relu = Alu(AluOp.MAX, "a", (Uop(),), (Loop(4, 1, 0),), imm=0)
    stmts = (Load("X", "a", 0, 0, 1, 4, 4), relu, Store("Y", "a", 0, 0, 1, 4, 4))
    prog = TileProgram("relu", (Alloc("a", "acc", 4),), stmts,
                       inputs=(("X", (4, 1, 4), "int32"),),
                       outputs=(("Y", (4, 1, 4), "int8"),))  # fmt: skip
    image = generate_program(prog, TINY)
    x = np.arange(-8, 8, dtype=np.int32).reshape(4, 1, 4)
    device = open_device("sim", TINY)
    try:
        out, _ = LoadedProgram.load(device, image).run({"X": x})
    finally:
        device.close()
    assert np.array_equal(out["Y"], np.maximum(x, 0).astype(np.int8))


def test_generate_program_rejects_a_gemm_reading_outside_its_buffer() -> None:
    gemm = Gemm("a", "i", "w", (Uop(0, 3, 0),), (Loop(2, 1, 1),))
    allocs = (Alloc("a", "acc", 2), Alloc("i", "inp", 4), Alloc("w", "wgt", 1))
    prog = TileProgram("g", allocs, (gemm,))
    with pytest.raises(
        LoweringError, match=r"GEMM a \+= i.w .*buffer 'i' within \[0, 4\), not \[3, 5\)"
    ):
        generate_program(prog, TINY)


@pytest.mark.parametrize(
    ("stmt", "message"),
    [
        (
            Gemm("a", "w", "i", (Uop(),), (Loop(2, 1, 1),)),
            r"must use a buffer in inp, not 'w' \(wgt\)",
        ),
        (Alu(AluOp.ADD, "a", (Uop(),), (Loop(2, 1, 0),)), "must have either an immediate"),
        (Alu(AluOp.MAX, "a", (), (Loop(2, 1, 0),), imm=0), "must have micro-ops"),
        (Store("Y", "nope", 0, 0, 1, 2, 2), r"not 'nope' \(not allocated\)"),
    ],
)
def test_the_tile_program_verifier_names_the_statement_and_the_pass(stmt, message) -> None:
    allocs = (Alloc("a", "acc", 2), Alloc("i", "inp", 4), Alloc("w", "wgt", 1))
    with pytest.raises(LoweringError, match=r"tile program 'v' after lowering: `.*` .*" + message):
        generate_program(TileProgram("v", allocs, (stmt,)), TINY)


# ---- constant additions on the GEMM core ---------------------------------------------------


@pytest.mark.parametrize("config", ["pynq", "tiny"])
def test_gemm_add_weights_reproduce_every_constant_in_range(config: str) -> None:
    cfg = HWConfig.preset(config)
    n = cfg.block_in - 1
    hi, lo = 127 * (127 * n) + 63, 127 * (-128 * n) - 63  # the extremes of the range
    rng = np.random.default_rng(0)
    c = rng.integers(lo, hi + 1, (5, 1, cfg.block_out)).astype(np.int32)
    c[0, 0, :2] = hi, lo
    values = np.repeat(c, cfg.batch, axis=1)
    w = gemm_add_weights(values, cfg)
    assert w is not None and w.dtype == np.int8 and w.shape == (5, cfg.block_out, cfg.block_in)
    v = np.array([1] + [127] * n, np.int64)  # the constant input entry
    assert np.array_equal(w.astype(np.int64) @ v, c[:, 0, :])
    for bad in (hi + 1, lo - 1):
        values[0, :, 0] = bad
        assert gemm_add_weights(values, cfg) is None  # out of range: the ALU ADD stays


def test_gemm_add_weights_needs_equal_batch_rows() -> None:
    cfg = HWConfig.preset("pynq").replace(log_batch=1)
    values = np.zeros((1, 2, cfg.block_out), np.int32)
    values[0, 1, 3] = 5
    assert gemm_add_weights(values, cfg) is None


def _alu_adds(image) -> int:  # type: ignore[no-untyped-def]
    """Tensor-tensor ALU ADDs (the ones that read a second accumulator) of a program image."""
    return sum(isinstance(i, AluInsn) and i.alu_opcode == AluOp.ADD and not i.use_imm
               for i in image.instructions())  # fmt: skip


@pytest.mark.parametrize(("config", "vthreads"), [("pynq", 2), ("tiny", 1), ("tiny", 2)])
def test_the_bias_is_added_on_the_gemm_core_bit_exact(config: str, vthreads: int) -> None:
    from tensorforge.compiler.quantize import conv2d_int8, requant_params

    cfg = HWConfig.preset(config)
    rng = np.random.default_rng(vthreads)
    ic, oc = 2 * cfg.block_in + 1, 2 * cfg.block_out + 3
    x = rng.integers(-128, 128, (1, ic, 12, 10), dtype=np.int8)  # 120 pixels: the GEMM pays
    w = rng.integers(-128, 128, (oc, ic, 3, 3), dtype=np.int8)
    b = rng.integers(-30000, 30000, oc, dtype=np.int32)
    p = requant_params(2.0**-11, cfg, mode="shift", relu=False)
    kern = conv2d(cfg, x.shape, w, b, padding=1, requant=p, vthreads=vthreads)
    adds = [s for s in kern.tile_program.stmts if isinstance(s, Alu) and s.src is not None]
    assert adds and _alu_adds(kern.image) == 0  # the tile program's bias ADD became a GEMM
    gemm_steps = sum(isinstance(i, GemmInsn) and not i.reset_reg for i in kern.image.instructions())
    assert gemm_steps > 0
    out, _ = kern.run(x)
    assert np.array_equal(out, conv2d_int8(x, w, b, padding=1, requant=p))


def test_a_bias_out_of_the_gemm_range_stays_an_alu_add_and_is_exact() -> None:
    from tensorforge.compiler.quantize import conv2d_int8, requant_params

    cfg = HWConfig.preset("tiny")  # BLOCK_IN 4: constants up to about 127 * 128 * 3
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 4, 4, 4), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 4, 1, 1), dtype=np.int8)
    b = np.array([1 << 20, -5, 7, -(1 << 20)], np.int32)
    p = requant_params(2.0**-14, cfg, mode="shift", relu=False)
    kern = conv2d(cfg, x.shape, w, b, requant=p)
    assert _alu_adds(kern.image) == 1
    out, _ = kern.run(x)
    assert np.array_equal(out, conv2d_int8(x, w, b, requant=p))


def test_few_output_pixels_keep_the_alu_add() -> None:
    """7x7 outputs on pynq: 49 ADD steps per channel block save less than loading a 256-byte
    weight entry instead of a 64-byte accumulator entry costs (ResNet-18's C10-C12)."""
    cfg = HWConfig.preset("pynq")
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 32, 7, 7), dtype=np.int8)
    w = rng.integers(-128, 128, (32, 32, 1, 1), dtype=np.int8)
    b = rng.integers(-3000, 3000, 32, dtype=np.int32)
    assert _alu_adds(conv2d(cfg, x.shape, w, b, shift=8).image) == 1
    x = rng.integers(-128, 128, (1, 32, 14, 14), dtype=np.int8)
    assert _alu_adds(conv2d(cfg, x.shape, w, b, shift=8).image) == 0


def test_constant_adds_to_gemm_leaves_a_non_constant_operand_alone() -> None:
    """A residual's ADD reads a buffer loaded from an input slot, not from a constant."""
    add = Alu(AluOp.ADD, "a", (Uop(0, 0),), (Loop(4, 1, 1),), src="r")
    prog = TileProgram("res", (Alloc("a", "acc", 4), Alloc("r", "acc", 4)),
                       (Load("R", "r", 0, 0, 1, 4, 4), add),
                       inputs=(("R", (4, 1, 4), "int32"),))  # fmt: skip
    assert constant_adds_to_gemm(prog, TINY) is prog


# ---- resident weights streamed in by first use ---------------------------------------------


def _two_gemm_program() -> TileProgram:
    """Resident weights of 8 entries, loaded whole; GEMM 1 reads entries 0-3, GEMM 2 4-7."""
    g1 = Gemm("a", "x", "w", (Uop(0, 0, 0),), (Loop(4, 0, 0, 1),))
    g2 = Gemm("a", "x", "w", (Uop(0, 0, 4),), (Loop(4, 0, 0, 1),))
    stmts = (Load("W", "w", 0, 0, 1, 8, 8), Load("X", "x", 0, 0, 1, 1, 1), g1,
             Load("X", "x", 0, 1, 1, 1, 1), g2, Store("Y", "a", 0, 0, 1, 1, 1))  # fmt: skip
    allocs = (Alloc("a", "acc", 1), Alloc("x", "inp", 1), Alloc("w", "wgt", 8))
    return TileProgram("two", allocs, stmts, inputs=(("X", (2, 1, 4), "int8"),),
                       outputs=(("Y", (1, 1, 4), "int8"),),
                       constants=(("W", bytes(8 * 16)),))  # fmt: skip


def test_stream_resident_loads_loads_each_part_before_its_first_gemm() -> None:
    prog, regions = stream_resident_loads(_two_gemm_program())
    lines = format_program(prog).splitlines()[4:]
    assert lines == [
        "  LOAD X[0] -> x[0] 1x1/1 pad=(0, 0, 0, 0)",
        "  LOAD W[0] -> w[0] 1x4/4 pad=(0, 0, 0, 0)",
        "  GEMM a += x.w uops=1 loops=[4:d0,s0,w1]",
        "  LOAD X[1] -> x[0] 1x1/1 pad=(0, 0, 0, 0)",
        "  LOAD W[4] -> w[4] 1x4/4 pad=(0, 0, 0, 0)",
        "  GEMM a += x.w uops=1 loops=[4:d0,s0,w1]",
        "  STORE a[0] -> Y[0] 1x1/1",
    ]
    assert regions == {1: ("w#2",), 2: ("w#2",), 4: ("w#4",), 5: ("w#4",)}


def test_stream_resident_loads_lets_the_first_gemm_wait_for_its_part_only() -> None:
    _, stream, _ = lower_tile_program(_two_gemm_program(), TINY)
    insns = [e.insn for e in stream]
    loads = [i for i, x in enumerate(insns) if isinstance(x, MemInsn) and x.opcode == Opcode.LOAD]
    first_gemm = next(i for i, x in enumerate(insns) if isinstance(x, GemmInsn))
    # the second part's LOAD comes after the first GEMM in the stream, which did not wait for it
    assert [insns[i].x_size for i in loads if insns[i].memory_type == MemType.WGT] == [4, 4]
    assert loads[-1] > first_gemm


def test_streamed_resident_weights_are_bit_exact_and_take_fewer_cycles(monkeypatch) -> None:
    from tensorforge.compiler.quantize import conv2d_int8, requant_params
    from tensorforge.compiler.vta import codegen

    cfg = HWConfig.preset("pynq")
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (1, 64, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (128, 64, 1, 1), dtype=np.int8)
    b = rng.integers(-3000, 3000, 128, dtype=np.int32)
    p = requant_params(2.0**-10, cfg, mode="shift", relu=True)
    sched = Conv2dSchedule(tile_h=2, tile_oc=8, tile_ic=1, vthreads=2, resident_weights=True)
    kern = conv2d(cfg, x.shape, w, b, requant=p, schedule=sched)
    wgt_loads = [i for i in kern.image.instructions()
                 if isinstance(i, MemInsn) and i.memory_type == MemType.WGT]  # fmt: skip
    assert len(wgt_loads) > 2  # the weights in parts
    out, _ = kern.run(x)
    assert np.array_equal(out, conv2d_int8(x, w, b, requant=p))
    monkeypatch.setattr(codegen, "stream_resident_loads", lambda prog: (prog, {}))
    whole = conv2d(cfg, x.shape, w, b, requant=p, schedule=sched)
    streamed = simulate_timing(kern.image.instructions(), cfg).cycles
    assert streamed < simulate_timing(whole.image.instructions(), cfg).cycles
