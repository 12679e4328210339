"""The GEMM core: one BATCH x BLOCK_IN x BLOCK_OUT int8 matrix step per cycle into int32 ACC."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..timing import GEMM_LATENCY
from .common import (
    UOP_BITS,
    AccForward,
    acc_bits,
    check_config,
    drop_after_range_error,
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

#: boards whose FPGA has DSP48E1 slices (25 x 18 multipliers) and too few of them for one per MAC
PACKING_BOARDS = ("pynq",)


def default_dsp_packing(cfg: HWConfig) -> bool:
    """Whether ``GemmCore`` packs two MACs per multiplier for ``cfg`` unless told otherwise.

    On for the ``pynq`` board (the xc7z020 has 220 DSP48E1 for the 256 MACs of 1x16x16) with
    int8 operands; off elsewhere, where one DSP per MAC fits.

    Example:
        >>> from tensorforge.hw.config import HWConfig
        >>> [default_dsp_packing(HWConfig.preset(n)) for n in ("pynq", "tiny")]
        [True, False]
    """
    return cfg.board in PACKING_BOARDS and cfg.inp_width == cfg.wgt_width == 8


def packed_weight(w_lo: Value, w_hi: Value, shift: int) -> Value:
    """``w_hi * 2**shift + w_lo`` (signed), built without a wide adder.

    The low ``shift`` bits are ``w_lo`` sign-extended; the top is ``w_hi - (w_lo < 0)``: the
    borrow a negative ``w_lo`` takes from the high part.
    """
    sign = w_lo[-1]
    return Cat(w_lo, sign.replicate(shift - len(w_lo)), (w_hi - sign)[: len(w_hi) + 1]).as_signed()


def split_products(p: Value, shift: int, width: int) -> tuple[Value, Value]:
    """(low, high) products from ``p = high * 2**shift + low`` with ``low`` a signed ``width``-bit
    value: ``low`` is the low bits read as signed and ``high = (p >> shift) + (low < 0)``, the
    sign correction that returns the borrow."""
    low = p[:width].as_signed()
    high = (p[shift:] + p[width - 1])[:width].as_signed()
    return low, high


class RequantRegs:
    """The requantization of the GEMM instruction in flight (``GemmInsn.requant``)."""

    def __init__(self, cfg: HWConfig) -> None:
        self.cfg = cfg
        self.on = Signal()
        self.shift = Signal(cfg.log_acc_width)
        self.round = Signal(cfg.acc_width)  # the rounding constant 2**(shift-1), or 0
        self.relu = Signal()

    def latch(self, insn: data.View) -> list:
        lw = self.cfg.log_acc_width
        field = insn.src_factor_out
        shift, rnd = field[:lw], field[lw]
        return [
            self.on.eq(insn.requant),
            self.shift.eq(shift),
            self.round.eq(Mux(rnd, (Const(1, self.cfg.acc_width) << shift) >> 1, 0)),
            self.relu.eq(field[lw + 1]),
        ]


def requant_lane(m: Module, acc: Value, rq: RequantRegs, cfg: HWConfig) -> Value:
    """``hw.isa.requant_apply`` of one signed ``acc_width``-bit lane, as ``out_width`` bits."""
    x = Signal(signed(cfg.acc_width))
    m.d.comb += x.eq(acc + rq.round)  # wraps to acc_width, as the ALU's ADD
    y = Signal(signed(cfg.acc_width))
    m.d.comb += y.eq(x >> rq.shift)
    hi = (1 << (cfg.out_width - 1)) - 1
    lo = Mux(rq.relu, 0, -hi)
    return Mux(y > hi, hi, Mux(y < lo, lo, y))[: cfg.out_width]


class GemmCore(wiring.Component):
    """Executes GEMM instructions over external UOP, INP, WGT, ACC and OUT SRAM ports.

    For each step of the instruction's loop (see ``UopLoop``) with micro-op ``u``::

        ACC[u.dst_idx + dst_off] += INP[u.src_idx + src_off] . WGT[u.wgt_idx + wgt_off]^T
        OUT[same index] = low out_width bits of the new ACC value

    or, with ``reset_reg``, ACC and OUT at that index are set to 0. Products and sums wrap to
    ``acc_width`` bits. With ``requant`` (built only for ``cfg.gemm_requant``) the src offsets
    are 0 and each step writes ``OUT = hw.isa.requant_apply(new ACC value)`` and ``ACC = 0``
    (``requant_lane``; the parameters come from the src_factor_out field).

    Index range (sim/functional.py's check): a step whose exact ACC index (``dst``) is beyond
    ACC's depth, or, without ``reset_reg``, whose INP (``src``) or WGT (``wgt``) index is beyond
    its buffer's, pulses ``range_error``; it and every later step of the instruction write
    nothing, and the loop stops (the steps before it have been executed).

    Pipeline (one step per cycle, never stalls): S0 UOP read; S1 index add; S2 INP/WGT/ACC
    reads; S3 multiply; S4 adder tree, accumulate, ACC and OUT write. A step consumes ACC two
    cycles after reading it, so the last two writes are forwarded (``AccForward``): every step
    sees the result of every earlier step, exactly as sequential execution.

    Ports:
        insn: stream of 128-bit GEMM instructions (``decode.gemm_layout``); ``ready`` is high
            while idle. Opcode and dependency flags are ignored here.
        busy: an instruction is executing.
        range_error: one-cycle pulse: a step's index is out of range (at most once per insn).
        uop_rd, inp_rd, wgt_rd, acc_rd: synchronous SRAM read ports (data one cycle after addr).
        acc_wr, out_wr: SRAM write ports (ACC and OUT share indices).
    SRAM words pack lanes LSB first: INP [batch][block_in], WGT [block_out][block_in],
    ACC/OUT [batch][block_out] -- the little-endian byte image of the element in DRAM.

    DSP packing (``dsp_packing``): the products ``inp[b][i] * wgt[o][i]`` and
    ``inp[b][i] * wgt[o + 1][i]`` share their input, so one multiplier computes both as
    ``(wgt[o + 1][i] * 2**16 + wgt[o][i]) * inp[b][i]``: a 25 x 8 bit product that fits one
    DSP48E1 (25 x 18). Each int8 product fits 16 signed bits, so the low one is the low 16 bits
    read as signed and the high one the bits above plus the low one's sign (the borrow). Same
    results and timing, half the multipliers (an odd last output lane stays unpacked).

    Args:
        cfg: the HWConfig.
        dsp_packing: pack two int8 MACs per multiplier; default ``default_dsp_packing(cfg)``.

    Raises:
        ValueError: ``dsp_packing`` with operands other than int8.
    """

    def __init__(self, cfg: HWConfig, dsp_packing: bool | None = None) -> None:
        self.cfg = check_config(cfg)
        if dsp_packing is None:
            dsp_packing = default_dsp_packing(cfg)
        if dsp_packing and not cfg.inp_width == cfg.wgt_width == 8:
            raise ValueError(
                f"dsp_packing needs int8 operands, not inp_width {cfg.inp_width} and wgt_width "
                f"{cfg.wgt_width} (HWConfig {cfg.name!r})"
            )
        self.dsp_packing = dsp_packing
        super().__init__(
            {
                "insn": In(stream.Signature(gemm_layout(cfg))),
                "busy": Out(1),
                "range_error": Out(1),
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
        rq = RequantRegs(cfg)
        # One valid bit per stage after S0: the pipeline is GEMM_LATENCY (hw/timing.py) deep.
        v1, v2, v3, v4 = (Signal(name=f"v{i}") for i in range(1, GEMM_LATENCY + 1))
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
            if cfg.gemm_requant:
                m.d.sync += rq.latch(self.insn.payload)

        # S0: read the micro-op.
        m.d.comb += self.uop_rd.addr.eq(loop.uop_idx)
        off1, over1 = Signal.like(loop.offsets), Signal.like(loop.over)
        m.d.sync += [v1.eq(loop.valid), off1.eq(loop.offsets), over1.eq(loop.over)]

        # S1: micro-op base + loop offset = SRAM indices (modulo depth), and the range check.
        uop = data.View(uop_layout(cfg), self.uop_rd.data)
        base = {"dst": uop.dst_idx, "src": uop.src_idx, "wgt": uop.wgt_idx}
        offs = {p: off1[p] for p in widths}
        overs = {p: over1[p] for p in widths}
        if cfg.gemm_requant:  # a requantizing GEMM's src fields hold parameters: no offsets
            offs["src"], overs["src"] = Mux(rq.on, 0, off1["src"]), over1["src"] & ~rq.on
        idx2 = {p: Signal(w, name=f"{p}2") for p, w in widths.items()}
        outside = {p: overs[p] | (base[p] + offs[p] >= 1 << w) for p, w in widths.items()}
        checked = outside["dst"] | (~reset & (outside["src"] | outside["wgt"]))  # as the model
        bad2 = Signal()
        m.d.sync += [v2.eq(v1), bad2.eq(checked)]
        m.d.sync += [idx2[p].eq(base[p] + offs[p]) for p in widths]

        # S2: read INP, WGT and ACC. An out-of-range step ends the instruction: it and the
        # steps behind it are dropped here, before anything is written.
        m.d.comb += [
            self.inp_rd.addr.eq(idx2["src"]),
            self.wgt_rd.addr.eq(idx2["wgt"]),
            self.acc_rd.addr.eq(idx2["dst"]),
        ]
        dropped = drop_after_range_error(m, start, v2 & bad2, self.range_error, loop.abort)
        dst3 = Signal(widths["dst"])
        m.d.sync += [v3.eq(v2 & ~bad2 & ~dropped), dst3.eq(idx2["dst"])]

        # S3: the BATCH x BLOCK_OUT x BLOCK_IN products, registered (DSP M register).
        inp = lanes(self.inp_rd.data, cfg.batch, cfg.block_in, cfg.inp_width)
        wgt = lanes(self.wgt_rd.data, cfg.block_out, cfg.block_in, cfg.wgt_width)
        prod = self._products(m, inp, wgt)
        dst4 = Signal(widths["dst"])
        acc4 = Signal(acc_bits(cfg))
        m.d.sync += [v4.eq(v3), dst4.eq(dst3), acc4.eq(self.acc_rd.data)]

        # S4: sum, accumulate (with forwarding), write ACC and OUT.
        fwd = m.submodules.fwd = AccForward(cfg.log_acc_depth, acc_bits(cfg))
        wiring.connect(m, self.acc_wr, fwd.acc_wr)
        m.d.comb += [fwd.addr.eq(dst4), fwd.sram.eq(acc4)]
        acc_old = lanes(fwd.data, cfg.batch, cfg.block_out, cfg.acc_width)
        acc_new = Signal(acc_bits(cfg))
        new = lanes(acc_new, cfg.batch, cfg.block_out, cfg.acc_width)
        out = lanes(self.out_wr.data, cfg.batch, cfg.block_out, cfg.out_width)
        for b in range(cfg.batch):
            for o in range(cfg.block_out):
                dot = tree_sum(prod[b][o])
                with m.If(~reset):
                    m.d.comb += new[b][o].eq(acc_old[b][o] + dot)  # wraps to acc_width
                m.d.comb += out[b][o].eq(new[b][o])  # low out_width bits
                if cfg.gemm_requant:
                    with m.If(rq.on):
                        m.d.comb += out[b][o].eq(requant_lane(m, new[b][o], rq, cfg))
        m.d.comb += [
            self.acc_wr.en.eq(v4),
            self.acc_wr.addr.eq(dst4),
            self.acc_wr.data.eq(Mux(rq.on, 0, acc_new) if cfg.gemm_requant else acc_new),
            self.out_wr.en.eq(v4),
            self.out_wr.addr.eq(dst4),
        ]
        return m

    def _products(self, m: Module, inp: data.View, wgt: data.View) -> list[list[list[Value]]]:
        """Register the products (S3); return them as [batch][block_out][block_in] values."""
        cfg = self.cfg
        width = cfg.inp_width + cfg.wgt_width
        paired = cfg.block_out - cfg.block_out % 2 if self.dsp_packing else 0
        prod: list[list[list[Value]]] = [
            [[] for _ in range(cfg.block_out)] for _ in range(cfg.batch)
        ]
        for b in range(cfg.batch):
            for i in range(cfg.block_in):
                for o in range(0, paired, 2):
                    pw = packed_weight(wgt[o][i], wgt[o + 1][i], width)
                    p = Signal(signed(len(pw) + cfg.inp_width), name=f"pp{b}_{o // 2}_{i}")
                    m.d.sync += p.eq(pw * inp[b][i])
                    low, high = split_products(p, width, width)
                    prod[b][o].append(low)
                    prod[b][o + 1].append(high)
                for o in range(paired, cfg.block_out):
                    p = Signal(signed(width), name=f"p{b}_{o}_{i}")
                    m.d.sync += p.eq(inp[b][i] * wgt[o][i])
                    prod[b][o].append(p)
        return prod
