"""Command queues (128-bit instructions) and dependency-token queues (counters)."""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from .common import check_config
from .decode import INSN_BITS


def _check_depth(depth: object, what: str) -> int:
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise ValueError(f"{what} must be a positive int, not {depth!r}")
    return depth


class CommandQueue(wiring.Component):
    """A FIFO of 128-bit instructions between fetch and one stage (load, compute or store).

    ``SyncFIFOBuffered``: block-RAM storage plus an output register, so a word written into an
    empty queue is readable two cycles later; one push and one pop per cycle.

    Args:
        cfg: the HWConfig; ``depth`` defaults to ``cfg.insn_queue_depth``.
        depth: entries, overriding the config.

    Ports:
        w: instructions in (``ready`` while not full).
        r: instructions out, in order (``valid`` while not empty).
        level: entries held.
    """

    def __init__(self, cfg: HWConfig, depth: int | None = None) -> None:
        check_config(cfg)
        self.depth = _check_depth(cfg.insn_queue_depth if depth is None else depth, "depth")
        super().__init__(
            {
                "w": In(stream.Signature(INSN_BITS)),
                "r": Out(stream.Signature(INSN_BITS)),
                "level": Out(range(self.depth + 1)),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        fifo = m.submodules.fifo = SyncFIFOBuffered(width=INSN_BITS, depth=self.depth)
        wiring.connect(m, wiring.flipped(self.w), fifo.w_stream)
        wiring.connect(m, wiring.flipped(self.r), fifo.r_stream)
        m.d.comb += self.level.eq(fifo.level)
        return m


class TokenQueue(wiring.Component):
    """A dependency-token queue (VTA's l2g, g2l, g2s, s2g): tokens carry no data, so it is an
    up/down counter of ``depth`` entries.

    A push is accepted while ``level < depth``, a pop while ``level > 0``; both may happen in
    one cycle. A pushed token can be popped in the next cycle.

    Args:
        cfg: the HWConfig; ``depth`` defaults to ``cfg.dep_queue_depth``.
        depth: entries, overriding the config.

    Ports:
        push_valid, push_ready: push one token when both are high.
        pop_valid, pop_ready: pop one token when both are high.
        level: tokens held.
    """

    def __init__(self, cfg: HWConfig, depth: int | None = None) -> None:
        check_config(cfg)
        self.depth = _check_depth(cfg.dep_queue_depth if depth is None else depth, "depth")
        super().__init__(
            {
                "push_valid": In(1),
                "push_ready": Out(1),
                "pop_valid": Out(1),
                "pop_ready": In(1),
                "level": Out(range(self.depth + 1)),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        push = self.push_valid & self.push_ready
        pop = self.pop_valid & self.pop_ready
        m.d.comb += [
            self.push_ready.eq(self.level != self.depth),
            self.pop_valid.eq(self.level != 0),
        ]
        with m.If(push & ~pop):
            m.d.sync += self.level.eq(self.level + 1)
        with m.Elif(pop & ~push):
            m.d.sync += self.level.eq(self.level - 1)
        return m
