"""The micro-op loop shared by GEMM and ALU: iter_out x iter_in x [uop_bgn, uop_end)."""

from __future__ import annotations

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..isa import LOOP_ITER_WIDTH


class UopLoop(wiring.Component):
    """Generates the steps of one GEMM or ALU instruction, one per cycle while ``advance``.

    Step ``(i_out, i_in, k)`` in loop order gives ``uop_idx = k`` and, for each index stream
    ``p`` in ``streams``, ``offsets.p = i_out * p_factor_out + i_in * p_factor_in`` modulo
    ``2**width`` (the width of the ``p_factor_*`` fields, i.e. of the addressed buffer's index).
    Offsets are accumulated, never multiplied; ``over.p`` is set when the exact offset is
    ``2**width`` or more (an addition carried out), so a core can tell a wrapped index from an
    in-range one. The micro-op index counts modulo the UOP depth; the step count is
    ``iter_out * iter_in * max(0, uop_end - uop_bgn)`` whatever the values, so the loop always
    ends, or earlier on ``abort``.

    Args:
        layout: the instruction's Amaranth layout (``decode.gemm_layout`` or ``alu_layout``).
        streams: the index streams, e.g. ``("dst", "src", "wgt")`` for GEMM.

    Ports:
        start: load ``insn`` (only while idle, i.e. ``valid`` is low); the first step is valid in
            the next cycle, or no step if the loop is empty.
        insn: the instruction.
        advance: consume the current step (when ``valid``).
        abort: drop the rest of the instruction (``valid`` is low from the next cycle).
        valid: a step is available; ``last`` marks the instruction's final step.
        uop_idx, offsets: the step's micro-op index and per-stream offsets.
        over: per stream, the exact offset is at least ``2**width`` (``offsets`` wrapped).
    """

    def __init__(self, layout: data.Layout, streams: tuple[str, ...]) -> None:
        if not isinstance(layout, data.Layout):
            raise TypeError(f"layout must be an amaranth.lib.data.Layout, not {layout!r}")
        names = {name for name, _ in layout}
        for p in streams:
            for f in (f"{p}_factor_out", f"{p}_factor_in"):
                if f not in names:
                    raise ValueError(f"streams must name fields of the layout, not {p!r} ({f})")
        self._streams = tuple(streams)
        self._widths = {p: layout[f"{p}_factor_out"].width for p in streams}
        uop_width = layout["uop_bgn"].width
        super().__init__(
            {
                "start": In(1),
                "insn": In(layout),
                "advance": In(1),
                "abort": In(1),
                "valid": Out(1),
                "last": Out(1),
                "uop_idx": Out(uop_width),
                "offsets": Out(
                    data.StructLayout({p: unsigned(w) for p, w in self._widths.items()})
                ),
                "over": Out(data.StructLayout({p: unsigned(1) for p in streams})),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        insn = self.insn
        uop_w = len(self.uop_idx)

        # Latched loop bounds; counters count down to zero ("left" = iterations after this one).
        bgn = Signal(uop_w)
        n_uop = Signal(uop_w + 1)  # micro-ops per inner pass
        n_in = Signal(LOOP_ITER_WIDTH)
        k_left = Signal(uop_w + 1)
        in_left = Signal(LOOP_ITER_WIDTH)
        out_left = Signal(LOOP_ITER_WIDTH)
        f_out = {p: Signal(w, name=f"{p}_f_out") for p, w in self._widths.items()}
        f_in = {p: Signal(w, name=f"{p}_f_in") for p, w in self._widths.items()}
        base = {p: Signal(w, name=f"{p}_base") for p, w in self._widths.items()}  # i_out * f_out
        base_over = {p: Signal(name=f"{p}_base_over") for p in self._streams}
        off = {p: getattr(self.offsets, p) for p in self._streams}
        over = {p: getattr(self.over, p) for p in self._streams}
        # Every addend is non-negative, so the exact offset reaches 2**width exactly when one
        # of the additions that built it carried out; the flags remember that.
        sum_in = {p: Signal(w + 1, name=f"{p}_sum_in") for p, w in self._widths.items()}
        sum_out = {p: Signal(w + 1, name=f"{p}_sum_out") for p, w in self._widths.items()}
        for p in self._streams:
            m.d.comb += [sum_in[p].eq(off[p] + f_in[p]), sum_out[p].eq(base[p] + f_out[p])]

        k_end, in_end, out_end = k_left == 0, in_left == 0, out_left == 0
        m.d.comb += self.last.eq(self.valid & k_end & in_end & out_end)

        with m.If(self.start):
            count = insn.uop_end - insn.uop_bgn  # wide enough: uop_end has one more bit
            empty = (insn.uop_end <= insn.uop_bgn) | (insn.iter_out == 0) | (insn.iter_in == 0)
            m.d.sync += [
                self.valid.eq(~empty),
                bgn.eq(insn.uop_bgn),
                self.uop_idx.eq(insn.uop_bgn),
                n_uop.eq(count),
                k_left.eq(count - 1),
                n_in.eq(insn.iter_in),
                in_left.eq(insn.iter_in - 1),
                out_left.eq(insn.iter_out - 1),
            ]
            for p in self._streams:
                m.d.sync += [
                    f_out[p].eq(insn[f"{p}_factor_out"]),
                    f_in[p].eq(insn[f"{p}_factor_in"]),
                    base[p].eq(0),
                    off[p].eq(0),
                    base_over[p].eq(0),
                    over[p].eq(0),
                ]
        with m.Elif(self.abort):
            m.d.sync += self.valid.eq(0)
        with m.Elif(self.valid & self.advance):
            with m.If(~k_end):
                m.d.sync += [self.uop_idx.eq(self.uop_idx + 1), k_left.eq(k_left - 1)]
            with m.Else():
                m.d.sync += [self.uop_idx.eq(bgn), k_left.eq(n_uop - 1)]
                with m.If(~in_end):
                    m.d.sync += in_left.eq(in_left - 1)
                    for p, w in self._widths.items():
                        m.d.sync += [off[p].eq(sum_in[p]), over[p].eq(over[p] | sum_in[p][w])]
                with m.Elif(~out_end):
                    m.d.sync += [in_left.eq(n_in - 1), out_left.eq(out_left - 1)]
                    for p, w in self._widths.items():
                        carried = base_over[p] | sum_out[p][w]
                        m.d.sync += [
                            base[p].eq(sum_out[p]),
                            off[p].eq(sum_out[p]),
                            base_over[p].eq(carried),
                            over[p].eq(carried),
                        ]
                with m.Else():
                    m.d.sync += self.valid.eq(0)
        return m
