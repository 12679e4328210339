"""The GEMM core: one BATCH x BLOCK_IN x BLOCK_OUT int8 matrix step per cycle into int32 ACC."""

from __future__ import annotations

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from .common import (
    UOP_BITS,
    AccForward,
    acc_bits,
    check_config,
    inp_bits,
    lanes,
    out_bits,
    read_port,
    tree_sum,
    wgt_bits,
    write_port,
)
from .decode import gemm_layout, uop_layout
from .loop import UopLoop

#: Cycles from a step's issue (its UOP read) to its ACC/OUT write; see docs/hardware.md.
GEMM_LATENCY = 4


def gemm_cycles(n_steps: int) -> int:
    """Cycles from accepting a GEMM instruction to being ready for the next one.

    ``n_steps = iter_out * iter_in * max(0, uop_end - uop_bgn)``; one step per cycle (II = 1),
    then the pipeline drains. An empty instruction takes one cycle.

    Example:
        >>> gemm_cycles(24), gemm_cycles(0)
        (29, 1)
    """
    return n_steps + GEMM_LATENCY + 1 if n_steps > 0 else 1


class GemmCore(wiring.Component):
    """Executes GEMM instructions over external UOP, INP, WGT, ACC and OUT SRAM ports.

    For each step of the instruction's loop (see ``UopLoop``) with micro-op ``u``::

        ACC[u.dst_idx + dst_off] += INP[u.src_idx + src_off] . WGT[u.wgt_idx + wgt_off]^T
        OUT[same index] = low out_width bits of the new ACC value

    or, with ``reset_reg``, ACC and OUT at that index are set to 0. Indices wrap modulo the
    buffer depth. Products and sums wrap to ``acc_width`` bits.

    Pipeline (one step per cycle, never stalls): S0 UOP read; S1 index add; S2 INP/WGT/ACC
    reads; S3 multiply; S4 adder tree, accumulate, ACC and OUT write. A step consumes ACC two
    cycles after reading it, so the last two writes are forwarded (``AccForward``): every step
    sees the result of every earlier step, exactly as sequential execution.

    Ports:
        insn: stream of 128-bit GEMM instructions (``decode.gemm_layout``); ``ready`` is high
            while idle. Opcode and dependency flags are ignored here.
        busy: an instruction is executing.
        uop_rd, inp_rd, wgt_rd, acc_rd: synchronous SRAM read ports (data one cycle after addr).
        acc_wr, out_wr: SRAM write ports (ACC and OUT share indices).
    SRAM words pack lanes LSB first: INP [batch][block_in], WGT [block_out][block_in],
    ACC/OUT [batch][block_out] -- the little-endian byte image of the element in DRAM.

    Args:
        cfg: the HWConfig.
    """

    def __init__(self, cfg: HWConfig) -> None:
        self.cfg = check_config(cfg)
        super().__init__(
            {
                "insn": In(stream.Signature(gemm_layout(cfg))),
                "busy": Out(1),
                "uop_rd": In(read_port(cfg.log_uop_depth, UOP_BITS)),
                "inp_rd": In(read_port(cfg.log_inp_depth, inp_bits(cfg))),
                "wgt_rd": In(read_port(cfg.log_wgt_depth, wgt_bits(cfg))),
                "acc_rd": In(read_port(cfg.log_acc_depth, acc_bits(cfg))),
                "acc_wr": In(write_port(cfg.log_acc_depth, acc_bits(cfg))),
                "out_wr": In(write_port(cfg.log_acc_depth, out_bits(cfg))),
            }
        )

    def elaborate(self, platform) -> Module:
        cfg = self.cfg
        m = Module()
        loop = m.submodules.loop = UopLoop(gemm_layout(cfg), ("dst", "src", "wgt"))
        widths = {"dst": cfg.log_acc_depth, "src": cfg.log_inp_depth, "wgt": cfg.log_wgt_depth}

        # Accept an instruction only when the whole pipeline is empty.
        reset = Signal()
        v1, v2, v3, v4 = (Signal(name=f"v{i}") for i in range(1, 5))
        idle = ~(loop.valid | v1 | v2 | v3 | v4)
        start = self.insn.valid & idle
        m.d.comb += [
            self.insn.ready.eq(idle),
            self.busy.eq(~idle),
            loop.insn.eq(self.insn.payload),
            loop.start.eq(start),
            loop.advance.eq(1),
        ]
        with m.If(start):
            m.d.sync += reset.eq(self.insn.payload.reset_reg)

        # S0: read the micro-op.
        m.d.comb += self.uop_rd.addr.eq(loop.uop_idx)
        off1 = Signal.like(loop.offsets)
        m.d.sync += [v1.eq(loop.valid), off1.eq(loop.offsets)]

        # S1: micro-op base + loop offset = SRAM indices (modulo depth).
        uop = data.View(uop_layout(cfg), self.uop_rd.data)
        base = {"dst": uop.dst_idx, "src": uop.src_idx, "wgt": uop.wgt_idx}
        idx2 = {p: Signal(w, name=f"{p}2") for p, w in widths.items()}
        m.d.sync += v2.eq(v1)
        m.d.sync += [idx2[p].eq(base[p] + off1[p]) for p in widths]

        # S2: read INP, WGT and ACC.
        m.d.comb += [
            self.inp_rd.addr.eq(idx2["src"]),
            self.wgt_rd.addr.eq(idx2["wgt"]),
            self.acc_rd.addr.eq(idx2["dst"]),
        ]
        dst3 = Signal(widths["dst"])
        m.d.sync += [v3.eq(v2), dst3.eq(idx2["dst"])]

        # S3: the BATCH x BLOCK_OUT x BLOCK_IN products, registered (DSP M register).
        inp = lanes(self.inp_rd.data, cfg.batch, cfg.block_in, cfg.inp_width)
        wgt = lanes(self.wgt_rd.data, cfg.block_out, cfg.block_in, cfg.wgt_width)
        prod_shape = signed(cfg.inp_width + cfg.wgt_width)
        prod = Signal(
            data.ArrayLayout(
                data.ArrayLayout(data.ArrayLayout(prod_shape, cfg.block_in), cfg.block_out),
                cfg.batch,
            )
        )
        for b in range(cfg.batch):
            for o in range(cfg.block_out):
                for i in range(cfg.block_in):
                    m.d.sync += prod[b][o][i].eq(inp[b][i] * wgt[o][i])
        dst4 = Signal(widths["dst"])
        acc4 = Signal(acc_bits(cfg))
        m.d.sync += [v4.eq(v3), dst4.eq(dst3), acc4.eq(self.acc_rd.data)]

        # S4: sum, accumulate (with forwarding), write ACC and OUT.
        fwd = AccForward(m, cfg.log_acc_depth, acc_bits(cfg))
        acc_old = lanes(fwd.forward(dst4, acc4), cfg.batch, cfg.block_out, cfg.acc_width)
        acc_new = Signal(acc_bits(cfg))
        new = lanes(acc_new, cfg.batch, cfg.block_out, cfg.acc_width)
        out = lanes(self.out_wr.data, cfg.batch, cfg.block_out, cfg.out_width)
        for b in range(cfg.batch):
            for o in range(cfg.block_out):
                dot = tree_sum([prod[b][o][i] for i in range(cfg.block_in)])
                with m.If(~reset):
                    m.d.comb += new[b][o].eq(acc_old[b][o] + dot)  # wraps to acc_width
                m.d.comb += out[b][o].eq(new[b][o])  # low out_width bits
        m.d.comb += [
            self.acc_wr.en.eq(v4),
            self.acc_wr.addr.eq(dst4),
            self.acc_wr.data.eq(acc_new),
            self.out_wr.en.eq(v4),
            self.out_wr.addr.eq(dst4),
        ]
        fwd.record(v4, dst4, acc_new)
        return m
