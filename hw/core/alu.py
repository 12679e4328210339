"""The tensor ALU: MIN/MAX/ADD/SHR/MUL over BATCH x BLOCK_OUT accumulator lanes."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..isa import AluOp
from ..timing import ALU_LATENCY
from .common import (
    UOP_BITS,
    AccForward,
    acc_bits,
    check_config,
    drop_after_range_error,
    lanes,
    out_bits,
    read_port,
    write_port,
)
from .decode import alu_layout, uop_layout
from .loop import UopLoop


def alu_lane(m: Module, op: Value, a: Value, b: Value, cfg: HWConfig) -> Value:
    """``hw.isa.alu_apply(op, a, b)`` for one signed ``acc_width``-bit lane.

    Opcodes the config lacks (MUL without ``alu_mul``, 5 to 7) leave ``a`` unchanged.
    """
    width = cfg.acc_width
    res = Signal(signed(width))
    # SHR: b >= 0 shifts right arithmetically (at most width-1); b < 0 shifts left by -b,
    # and -b >= width gives 0.
    right = a >> Mux(b >= width - 1, width - 1, b[: cfg.log_acc_width])
    neg_b = Signal(signed(width + 1))
    m.d.comb += neg_b.eq(-b)
    left = Mux(neg_b >= width, 0, (a << neg_b[: cfg.log_acc_width])[:width])
    m.d.comb += res.eq(a)
    with m.Switch(op):
        with m.Case(AluOp.MIN):
            m.d.comb += res.eq(Mux(a < b, a, b))
        with m.Case(AluOp.MAX):
            m.d.comb += res.eq(Mux(a > b, a, b))
        with m.Case(AluOp.ADD):
            m.d.comb += res.eq(a + b)
        with m.Case(AluOp.SHR):
            m.d.comb += res.eq(Mux(b < 0, left, right))
        if cfg.alu_mul:
            with m.Case(AluOp.MUL):
                m.d.comb += res.eq(a * b)  # the low acc_width bits
    return res


class AluCore(wiring.Component):
    """Executes ALU instructions over external UOP, ACC and OUT SRAM ports.

    For each step of the instruction's loop (see ``UopLoop``) with micro-op ``u``, with
    ``dst = u.dst_idx + dst_off`` and ``src = u.src_idx + src_off`` (both ACC indices)::

        ACC[dst] = alu_apply(alu_opcode, ACC[dst], imm if use_imm else ACC[src])
        OUT[dst] = low out_width bits of ACC[dst]

    or, with ``reset_reg``, ACC[dst] and OUT[dst] are set to 0. ``imm`` is sign-extended.

    Index range (sim/functional.py's check): a step whose exact ``dst``, or (with an ACC operand:
    neither ``use_imm`` nor ``reset_reg``) ``src``, is beyond ACC's depth pulses
    ``range_error``; it and every later step of the instruction write nothing, and the loop
    stops (the steps before it have been executed).

    Pipeline: S0 UOP read; S1 index add; S2 ACC[dst] read; S3 ACC[src] read; S4 operate, write
    ACC and OUT. ACC has one read port, so a step with an ACC operand occupies it for two
    cycles: II = 2; with ``use_imm`` (or ``reset_reg``) II = 1. ACC[dst] is used two cycles
    after its read, so the last two writes are forwarded to it (``AccForward``); results equal
    sequential execution.

    Ports:
        insn: stream of 128-bit ALU instructions (``decode.alu_layout``); ``ready`` while idle.
        busy: an instruction is executing.
        range_error: one-cycle pulse: a step's index is out of range (at most once per insn).
        uop_rd, acc_rd: synchronous SRAM read ports; acc_wr, out_wr: SRAM write ports.

    Args:
        cfg: the HWConfig (``alu_mul`` decides whether MUL is built).
    """

    def __init__(self, cfg: HWConfig) -> None:
        self.cfg = check_config(cfg)
        super().__init__(
            {
                "insn": In(stream.Signature(alu_layout(cfg))),
                "busy": Out(1),
                "range_error": Out(1),
                "uop_rd": In(read_port(cfg.log_uop_depth, UOP_BITS)),
                "acc_rd": In(read_port(cfg.log_acc_depth, acc_bits(cfg))),
                "acc_wr": In(write_port(cfg.log_acc_depth, acc_bits(cfg))),
                "out_wr": In(write_port(cfg.log_acc_depth, out_bits(cfg))),
            }
        )

    def elaborate(self, platform) -> Module:
        cfg = self.cfg
        m = Module()
        loop = m.submodules.loop = UopLoop(alu_layout(cfg), ("dst", "src"))
        aw = cfg.log_acc_depth

        # Accept an instruction only when the whole pipeline is empty; latch its operation.
        reset, use_src = Signal(), Signal()
        alu_op = Signal.like(self.insn.payload.alu_opcode)
        imm = Signal(signed(cfg.acc_width))
        # One valid bit per stage after S0: the pipeline is ALU_LATENCY (hw/timing.py) deep.
        v1, v2, v3, v4 = (Signal(name=f"v{i}") for i in range(1, ALU_LATENCY + 1))
        idle = ~(loop.valid | v1 | v2 | v3 | v4)
        start = self.insn.valid & idle
        insn = self.insn.payload
        m.d.comb += [
            self.insn.ready.eq(idle),
            self.busy.eq(~idle),
            loop.insn.eq(insn),
            loop.start.eq(start),
            loop.advance.eq(~(use_src & v1)),  # II = 2: leave a bubble behind each step
        ]
        with m.If(start):
            m.d.sync += [
                reset.eq(insn.reset_reg),
                use_src.eq(~insn.use_imm & ~insn.reset_reg),
                alu_op.eq(insn.alu_opcode),
                imm.eq(insn.imm),
            ]

        # S0: read the micro-op.
        m.d.comb += self.uop_rd.addr.eq(loop.uop_idx)
        off1, over1 = Signal.like(loop.offsets), Signal.like(loop.over)
        m.d.sync += [
            v1.eq(loop.valid & loop.advance),
            off1.eq(loop.offsets),
            over1.eq(loop.over),
        ]

        # S1: micro-op base + loop offset = ACC indices (modulo depth), and the range check.
        uop = data.View(uop_layout(cfg), self.uop_rd.data)
        dst2, src2 = Signal(aw), Signal(aw)
        dst_out = over1.dst | (uop.dst_idx + off1.dst >= cfg.acc_depth)
        src_out = over1.src | (uop.src_idx + off1.src >= cfg.acc_depth)
        bad2 = Signal()
        m.d.sync += [v2.eq(v1), dst2.eq(uop.dst_idx + off1.dst), src2.eq(uop.src_idx + off1.src)]
        m.d.sync += bad2.eq(dst_out | (use_src & src_out))  # src only when it is read, as the model

        # S2 reads ACC[dst]; S3 reads ACC[src] (never both in one cycle: II = 2 then). An
        # out-of-range step ends the instruction: it and the steps behind it are dropped in S2.
        dropped = drop_after_range_error(m, start, v2 & bad2, self.range_error, loop.abort)
        dst3, src3, dst4 = Signal(aw), Signal(aw), Signal(aw)
        m.d.comb += self.acc_rd.addr.eq(Mux(v3 & use_src, src3, dst2))
        m.d.sync += [v3.eq(v2 & ~bad2 & ~dropped), dst3.eq(dst2), src3.eq(src2)]
        a4 = Signal(acc_bits(cfg))
        m.d.sync += [v4.eq(v3), dst4.eq(dst3), a4.eq(self.acc_rd.data)]

        # S4: operate on forwarded operands, write ACC and OUT.
        fwd = m.submodules.fwd = AccForward(aw, acc_bits(cfg))
        wiring.connect(m, self.acc_wr, fwd.acc_wr)
        m.d.comb += [fwd.addr.eq(dst4), fwd.sram.eq(a4)]
        shape = (cfg.batch, cfg.block_out, cfg.acc_width)
        a = lanes(fwd.data, *shape)
        # ACC[src] is read one cycle before use, and with II = 2 no step wrote in that cycle:
        # it needs no forwarding.
        b = lanes(self.acc_rd.data, *shape)
        result = Signal(acc_bits(cfg))
        res = lanes(result, *shape)
        out = lanes(self.out_wr.data, cfg.batch, cfg.block_out, cfg.out_width)
        for i in range(cfg.batch):
            for o in range(cfg.block_out):
                lane = alu_lane(m, alu_op, a[i][o], Mux(use_src, b[i][o], imm), cfg)
                with m.If(~reset):
                    m.d.comb += res[i][o].eq(lane)
                m.d.comb += out[i][o].eq(res[i][o])  # low out_width bits
        m.d.comb += [
            self.acc_wr.en.eq(v4),
            self.acc_wr.addr.eq(dst4),
            self.acc_wr.data.eq(result),
            self.out_wr.en.eq(v4),
            self.out_wr.addr.eq(dst4),
        ]
        return m
