"""Timing model (sim.timing) against cycle counts computed by hand, and the cyclesim backend
against the functional simulator (same results, same counters)."""

import numpy as np
import pytest

from tensorforge.demo import build_matmul
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import FinishInsn, GemmInsn, MemInsn, MemType, Opcode, Uop, encode_uops
from tensorforge.runtime.device.vta import open_device
from tensorforge.sim.functional import DeadlockError, FunctionalSim
from tensorforge.sim.latency import dma_burst_bytes
from tensorforge.sim.memory import DeviceMemory
from tensorforge.sim.timing import (
    TimingParams,
    alu_cycles,
    dma_bursts,
    gemm_cycles,
    insn_cycles,
    simulate_timing,
)

PYNQ, TINY = HWConfig.preset("pynq"), HWConfig.preset("tiny")
LOAD, STORE = Opcode.LOAD, Opcode.STORE
# Round numbers so the hand computations below stay readable: read latency 10, write
# latency 5, 16-beat bursts of the 8-byte pynq bus (128-byte chunks); the rest default
# (command queue 2, token 1, issue 1, GEMM/ALU pipeline 4, FINISH 1).
P = TimingParams.for_config(PYNQ, dram_read_latency=10, dram_write_latency=5, burst_beats=16)


def timing(prog, cfg=PYNQ, p=P):
    return simulate_timing(prog, cfg, p, insn_addr=0)


def inp_load(x=4, dram=0, **flags):
    return MemInsn(LOAD, MemType.INP, 0, dram, 1, x, x, **flags)


def gemm(steps, **flags):
    return GemmInsn(uop_bgn=0, uop_end=1, iter_out=steps, **flags)


def store(x=4, dram=0, **flags):
    return MemInsn(STORE, MemType.OUT, 0, dram, 1, x, x, **flags)


# ---- closed-form latencies ----------------------------------------------------------------


def test_dma_bursts_split_rows_at_aligned_chunks():
    eb = PYNQ.inp_elem_bytes  # 16 B: 8 elements per 128-byte chunk
    assert dma_bursts(MemInsn(LOAD, MemType.INP, 0, 0, 1, 8, 8), eb, P) == 1
    assert dma_bursts(MemInsn(LOAD, MemType.INP, 0, 4, 1, 10, 10), eb, P) == 2  # 64..224
    assert dma_bursts(MemInsn(LOAD, MemType.INP, 0, 0, 4, 8, 8), eb, P) == 4  # contiguous
    assert dma_bursts(MemInsn(LOAD, MemType.INP, 0, 0, 3, 2, 8), eb, P) == 3  # rows 0,128,256
    assert dma_bursts(MemInsn(LOAD, MemType.INP, 0, 0, 3, 2, 7), eb, P) == 4  # 112..144 splits
    assert dma_bursts(MemInsn(LOAD, MemType.INP, 0, 0, 40, 2, 7), eb, P) == 40 + 40 // 8


def test_load_cycles_count_issue_padding_latency_and_beats():
    # 10 INP elements (160 B) at byte 64: 2 bursts, 20 beats; 1x12 + 1x12 padded = 14 pads.
    insn = MemInsn(LOAD, MemType.INP, 0, 4, 1, 10, 10, y_pad_0=1, x_pad_0=1, x_pad_1=1)
    assert insn_cycles(insn, PYNQ, P) == 1 + 14 + 2 * 10 + 20
    # Micro-ops (4 B) are narrower than the bus: one SRAM write per micro-op per cycle.
    uops = MemInsn(LOAD, MemType.UOP, 0, 0, 1, 6, 6)
    assert insn_cycles(uops, PYNQ, P) == 1 + 10 + 6
    # A WGT element is 32 beats; 4 of them are 1024 B = 8 bursts.
    wgt = MemInsn(LOAD, MemType.WGT, 0, 0, 1, 4, 4)
    assert insn_cycles(wgt, PYNQ, P) == 1 + 8 * 10 + 4 * 32
    assert insn_cycles(store(x=4), PYNQ, P) == 1 + 5 + 8
    assert insn_cycles(inp_load(x=0), PYNQ, P) == 1  # a token-only NOP


def test_burst_bytes_follow_the_chunk_split():
    eb = PYNQ.inp_elem_bytes
    # 10 elements at byte 64: 64..128 and 128..224.
    assert dma_burst_bytes(MemInsn(LOAD, MemType.INP, 0, 4, 1, 10, 10), eb, P).tolist() == [64, 96]
    # rows of 2 elements every 7: 0..32, 112..128 + 128..144, 224..256
    rows = MemInsn(LOAD, MemType.INP, 0, 0, 3, 2, 7)
    assert dma_burst_bytes(rows, eb, P).tolist() == [32, 16, 16, 32]
    assert len(dma_burst_bytes(rows, eb, P)) == dma_bursts(rows, eb, P)


@pytest.mark.parametrize(("outstanding", "cycles"), [(1, 161), (2, 97), (4, 89), (8, 89)])
def test_bursts_in_flight_hide_the_read_latency(outstanding, cycles):
    """32 INP elements (512 B, 4 bursts of 16 beats) with read latency 24, by hand (the accept
    is cycle 0, ARs from cycle 1): one in flight pays 24 + 16 per burst, 1 + 4 * 40 = 161.
    Two: ARs at 1 and 2, data 25-40 and 41-56; burst 2's AR waits for burst 0's end (41), its
    data 65-80; burst 3's AR at 57, data 81-96: 97. Four or more: ARs at 1-4, data back to
    back from 25 to 88: 89 = 1 + 24 + 64, the latency paid once."""
    cfg = PYNQ.replace(max_outstanding_reads=outstanding)
    p = TimingParams.for_config(cfg, dram_read_latency=24, burst_beats=16)
    assert p.max_outstanding_reads == outstanding
    insn = MemInsn(LOAD, MemType.INP, 0, 8, 1, 32, 32)
    assert dma_bursts(insn, cfg.inp_elem_bytes, p) == 4
    assert insn_cycles(insn, cfg, p) == cycles


def test_bursts_in_flight_with_partial_bursts_and_narrow_elements():
    """Micro-ops (4 B, one per cycle) at byte 120, 40 of them: bursts of 8, 128 and 24 bytes,
    i.e. 2, 32 and 6 units; latency 10, two in flight. ARs at 1 and 2: burst 0's data 11-12,
    burst 1's 13-44 (its own first beat is due at 12); burst 2's AR at 13 (burst 0 ended at
    12), data 45-50 (due at 23): ready at 51."""
    cfg = PYNQ.replace(max_outstanding_reads=2)
    p = TimingParams.for_config(cfg, dram_read_latency=10)
    insn = MemInsn(LOAD, MemType.UOP, 0, 30, 1, 40, 40)
    assert dma_burst_bytes(insn, 4, p).tolist() == [8, 128, 24]
    assert insn_cycles(insn, cfg, p) == 51
    assert insn_cycles(insn, PYNQ, TimingParams.for_config(PYNQ, dram_read_latency=10)) == (
        1 + 3 * 10 + 40
    )


def test_compute_formulas_count_steps_then_drain():
    """hw/timing.py's GEMM and ALU formulas (docs/hardware.md), with the pipeline depth of P."""
    assert [gemm_cycles(n, P.gemm_latency) for n in (0, 1, 8)] == [1, 6, 13]
    alu = [alu_cycles(n, ii, P.alu_latency) for n, ii in ((0, 2), (6, 2), (9, 1))]
    assert alu == [1, 16, 14]


# ---- whole programs, cycle by cycle -------------------------------------------------------
# Fetch reads the program in one 128-byte burst: data from cycle 10, instruction i complete
# after its 2 beats, at 12 + 2i. An instruction written in cycle w can be popped at w + 2.


def test_lone_load():
    r = timing([inp_load(x=4, push_next=True), FinishInsn(pop_prev=True)])
    assert r.dispatch == [12, 14]
    load = 1 + 10 + 8  # issue, latency, 4 elements x 2 beats
    assert (r.start[0], r.end[0]) == (14, 14 + load)  # 33; pushes l2g in cycle 33
    assert (r.start[1], r.cycles) == (34, 36)  # FINISH pops in 34, takes 2 cycles
    c = r.counters()
    assert c["load_busy"] == load and c["dram_bytes_inp"] == 64 and c["compute_wait_l2g"] == 18


def test_gemm_after_a_micro_op_load():
    prog = [MemInsn(LOAD, MemType.UOP, 0, 0, 1, 1, 1), gemm(8), FinishInsn()]
    r = timing(prog)
    assert (r.start, r.end) == ([14, 26, 40], [26, 40, 42])  # 1+10+1, then 1 + (8+5), then 2
    assert r.cycles == 42
    c = r.counters()
    assert (c["gemm_mac_steps"], c["gemm_busy"], c["dma_uop_busy"]) == (8, 14, 12)
    assert r.ops == 8 * 2 * 256
    assert r.gops == pytest.approx(r.ops / (42 / 100e6) / 1e9)


def _pipeline(overlap):
    if overlap:  # two INP tiles and two ACC tiles: loads run ahead, stores trail
        return [
            inp_load(push_next=True),
            inp_load(push_next=True),
            gemm(8, pop_prev=True, push_next=True),
            gemm(8, pop_prev=True, push_next=True),
            store(pop_prev=True),
            store(pop_prev=True, push_prev=True),
            FinishInsn(pop_next=True),
        ]
    return [  # one INP tile and one ACC tile: every step waits for the one before
        inp_load(push_next=True),
        gemm(8, pop_prev=True, push_prev=True, push_next=True),
        store(pop_prev=True, push_prev=True),
        inp_load(pop_next=True, push_next=True),
        gemm(8, pop_prev=True, pop_next=True, push_next=True),
        store(pop_prev=True, push_prev=True),
        FinishInsn(pop_next=True),
    ]


def test_load_compute_store_without_overlap():
    # load 19 cycles, GEMM 1+13 = 14, store 1+5+8 = 14, FINISH 2.
    r = timing(_pipeline(overlap=False))
    assert r.start == [14, 34, 49, 49, 69, 84, 99]
    # load0 14-33; gemm0 waits l2g (34) to 48; store0 waits g2s (49) to 63; load1 waits g2l
    # (49) to 68; gemm1 waits l2g (69) to 83; store1 84-98; FINISH pops s2g in 99.
    assert r.end == [33, 48, 63, 68, 83, 98, 101]
    assert r.cycles == 101


def test_load_compute_store_with_overlap():
    r = timing(_pipeline(overlap=True))
    # load1 follows load0 at once (33-52); gemm0 34-48; gemm1 waits for load1's token (53);
    # store0 49-63; store1 waits for gemm1 (68) to 82; FINISH 83-85.
    assert r.start == [14, 33, 34, 53, 49, 68, 83]
    assert r.cycles == 85
    c = r.counters()
    assert (c["compute_wait_fetch"], c["compute_wait_l2g"]) == (18, (34 - 18) + (53 - 48))


def test_full_command_queue_back_pressures_fetch():
    prog = [gemm(100), gemm(1), gemm(1), gemm(1), inp_load(x=0, push_next=True),
            FinishInsn(pop_prev=True)]  # fmt: skip
    cfg = PYNQ.replace(insn_queue_depth=2)
    r = timing(prog, cfg, TimingParams.for_config(cfg, dram_read_latency=10, burst_beats=16))
    # Depth 2 = one block-RAM entry + the output register. gemm0 runs 14..120; gemm1 reaches
    # the output register at 16 and is popped at 120, so gemm2 (written at 16) reaches it at
    # 121 and fetch can write gemm3 only then; the load behind it is written at 122.
    assert r.dispatch == [12, 14, 16, 121, 122, 128]
    assert r.start == [14, 120, 127, 134, 124, 141]
    assert (r.cycles, r.fetch_stall) == (143, (121 - 18) + (128 - 123))
    roomy = timing(prog)
    assert roomy.dispatch == [12, 14, 16, 18, 20, 22] and roomy.start[4] == 22
    assert roomy.cycles == 143  # compute was the bottleneck either way


def test_full_token_queue_holds_the_producer():
    nop = inp_load(x=0, push_next=True)
    prog = [nop, nop, gemm(10, pop_prev=True), gemm(1, pop_prev=True), FinishInsn()]
    cfg = PYNQ.replace(dep_queue_depth=1)
    r = timing(prog, cfg, TimingParams.for_config(cfg, dram_read_latency=10, burst_beats=16))
    # nop1 ends at 17 but l2g holds one token until gemm0 pops it in 18: its push is in 19.
    assert (r.start[1], r.end[1], r.free[1]) == (16, 17, 19)
    assert r.pushes["l2g"] == [15, 19] and r.pops["l2g"] == [18, 34]
    assert r.counters()["load_stall_push"] == 2
    assert r.cycles == 43


# ---- deadlock ---------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_deadlock_is_reported_not_hung():
    # The GEMM forgets to push g2s: the store and FINISH wait for each other's tokens.
    prog = [inp_load(push_next=True), gemm(4, pop_prev=True), store(pop_prev=True, push_prev=True),
            FinishInsn(pop_next=True)]  # fmt: skip
    with pytest.raises(DeadlockError) as e:
        timing(prog)
    msg = str(e.value)
    assert "store stage waits at instruction 2 (STORE OUT) to pop a token from g2s" in msg
    assert "compute stage waits at instruction 3 (FINISH) to pop a token from s2g" in msg
    assert "after 2 of 4 instructions" in msg and "load stage is idle" in msg
    # A full command queue that fetch can never drain is a deadlock too.
    prog = [gemm(1, pop_prev=True), gemm(1), gemm(1), inp_load(x=0, push_next=True), FinishInsn()]
    cfg = PYNQ.replace(insn_queue_depth=2)
    with pytest.raises(
        DeadlockError,
        match=r"fetch is blocked at instruction 2 \(GEMM\): the "
        r"compute queue is full \(2 entries\)",
    ):
        simulate_timing(prog, cfg)


@pytest.mark.timeout(10)
def test_cyclesim_device_reports_deadlock():
    k = build_matmul(TINY, m=8, k=8, n=8)
    image = k.image
    from tensorforge.hw.isa import decode_program, encode
    from tensorforge.runtime.program import ProgramImage

    insns = decode_program(image.insns, TINY)
    insns[-1] = FinishInsn(pop_next=True, pop_prev=True)  # waits for a load token never sent
    broken = ProgramImage(
        TINY, b"".join(encode(i, TINY) for i in insns), image.blobs, image.slots,
        image.relocations, "broken",
    )  # fmt: skip
    from tensorforge.runtime.device.vta import LoadedProgram

    device = open_device("cyclesim", TINY)
    prog = LoadedProgram.load(device, broken)
    with pytest.raises(DeadlockError, match="FINISH"):
        prog.run({"A": np.zeros((8, 2, 1, 4), np.int8)})


# ---- the cyclesim backend against the functional simulator --------------------------------


@pytest.mark.parametrize("cfg", [TINY, PYNQ], ids=lambda c: c.name)
def test_cyclesim_results_equal_functional(cfg):
    k = build_matmul(cfg, m=16 * cfg.batch, k=4 * cfg.block_in, n=4 * cfg.block_out, tile_rows=4)
    out_sim, res_sim = k.run_on("sim")
    out_cyc, res_cyc = k.run_on("cyclesim")
    assert np.array_equal(out_sim, out_cyc) and np.array_equal(out_cyc, k.reference())
    assert res_cyc.backend == "cyclesim" and res_cyc.cycles == res_cyc.timing.cycles > 0
    for key, value in res_sim.stats.items():
        assert res_cyc.stats[key] == value, key
    t = res_cyc.timing
    assert t.counters()["gemm_mac_steps"] == res_sim.stats["gemm_counter"]
    for stage in ("load", "compute", "store"):  # every cycle of every stage is accounted for
        parts = [v for name, v in t.counters().items() if name.startswith(f"{stage}_")]
        assert sum(parts) == t.cycles


def test_hand_programs_give_functional_results_on_cyclesim():
    """A micro-op load, a GEMM and a store, with data, on both backends."""
    results = []
    for backend in ("sim", "cyclesim"):
        device = open_device(backend, TINY)
        mem = device.memory
        rng = np.random.default_rng(3)
        inp = rng.integers(-128, 128, (2, 1, 4), dtype=np.int8)
        wgt = rng.integers(-128, 128, (1, 4, 4), dtype=np.int8)
        uops = np.frombuffer(encode_uops([Uop(0, 0, 0), Uop(0, 1, 0)], TINY), np.uint8)
        blocks = {}
        for name, data in (("uop", uops), ("inp", inp), ("wgt", wgt), ("out", np.zeros(4))):
            blocks[name] = mem.alloc(256, 256)
            mem.write(blocks[name].addr, np.ascontiguousarray(data).view(np.uint8))
        eb = {"uop": 4, "inp": TINY.inp_elem_bytes, "wgt": TINY.wgt_elem_bytes, "out": 4}
        base = {n: blocks[n].addr // eb[n] for n in blocks}
        prog = [
            MemInsn(LOAD, MemType.UOP, 0, base["uop"], 1, 2, 2),
            MemInsn(LOAD, MemType.INP, 0, base["inp"], 1, 2, 2),
            MemInsn(LOAD, MemType.WGT, 0, base["wgt"], 1, 1, 1, push_next=True),
            GemmInsn(reset_reg=True, uop_bgn=0, uop_end=1),
            GemmInsn(uop_bgn=0, uop_end=2, pop_prev=True, push_next=True),
            MemInsn(STORE, MemType.OUT, 0, base["out"], 1, 1, 1, pop_prev=True, push_prev=True),
            FinishInsn(pop_next=True),
        ]
        from tensorforge.hw.isa import encode_program

        code = encode_program(prog, TINY)
        block = mem.alloc(len(code), 16)
        mem.write(block.addr, code)
        result = device.run(block, len(prog))
        out = np.frombuffer(mem.read(blocks["out"].addr, 4), np.int8)
        results.append((out.copy(), result))
    (out_sim, r_sim), (out_cyc, r_cyc) = results
    want = (inp[0, 0].astype(np.int32) + inp[1, 0]) @ wgt[0].astype(np.int32).T
    assert np.array_equal(out_sim, want.astype(np.int8)) and np.array_equal(out_cyc, out_sim)
    assert r_sim.cycles is None and r_cyc.cycles == r_cyc.timing.cycles
    assert {k: r_cyc.stats[k] for k in r_sim.stats} == r_sim.stats


def test_functional_sim_state_is_shared_with_cyclesim_runs():
    sim = FunctionalSim(TINY, DeviceMemory(1 << 16))
    assert simulate_timing([FinishInsn()], TINY).cycles > 0
    assert sim.execute([FinishInsn()]).insn_count == 1


def test_timing_params_validate_and_derive_from_the_config():
    p = TimingParams.for_config(HWConfig.preset("ultra96"))
    assert (p.bus_bytes, p.clock_mhz, p.burst_bytes) == (16, 333.0, 256)
    assert TimingParams.for_config(PYNQ, burst_beats=256).burst_bytes == 2048
    with pytest.raises(ValueError, match="TimingParams.dram_read_latency must be an int >= 0"):
        TimingParams(dram_read_latency=-1)
    with pytest.raises(ValueError, match="powers of two"):
        TimingParams(burst_beats=12)
    with pytest.raises(ValueError, match="TimingParams.max_outstanding_reads must be a positive"):
        TimingParams(max_outstanding_reads=0)
    with pytest.raises(ValueError, match=r"HWConfig.max_outstanding_reads must be an int in \[1, "):
        PYNQ.replace(max_outstanding_reads=0)


@pytest.mark.parametrize(
    "module", ["sim.timing", "sim.trace", "sim.roofline", "runtime.device.vta.cyclesim"]
)
def test_docstring_examples_run(module):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(f"tensorforge.{module}")).failed == 0
