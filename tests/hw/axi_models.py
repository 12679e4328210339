"""Amaranth-simulator AXI models: an AXI-Lite master and an AXI4 memory slave with fixed latencies.

The memory's timing is sim/latency.py's DRAM model: it accepts up to ``max_reads`` read bursts
(``arready`` low while that many are outstanding); a burst's first beat is valid
``read_latency`` cycles after its AR handshake and after the previous burst's last beat (one R
channel, bursts in order), then one beat per cycle while ``rready``; a write burst's response is
valid ``write_latency`` cycles after its last W beat, one write burst at a time. It records
every burst and asserts the AXI rules a master can break: a burst's size, alignment, 4 KiB
page and range; INCR; an address held (``valid`` and payload unchanged) until its handshake;
``wlast`` on the last beat only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np


async def axil_write(ctx, bus, addr: int, value: int, strb: int = 0xF) -> None:
    """One AXI-Lite write (AW and W together), waiting for its response."""
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.wdata, value)
    ctx.set(bus.wstrb, strb)
    ctx.set(bus.awvalid, 1)
    ctx.set(bus.wvalid, 1)
    ctx.set(bus.bready, 1)
    await ctx.tick().until(bus.awready & bus.wready)
    ctx.set(bus.awvalid, 0)
    ctx.set(bus.wvalid, 0)
    (resp,) = await ctx.tick().sample(bus.bresp).until(bus.bvalid)
    ctx.set(bus.bready, 0)
    assert resp == 0, f"write to {addr:#x} answered {resp}"


async def axil_read(ctx, bus, addr: int) -> int:
    """One AXI-Lite read; returns the data."""
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arvalid, 1)
    ctx.set(bus.rready, 1)
    await ctx.tick().until(bus.arready)
    ctx.set(bus.arvalid, 0)
    data, resp = await ctx.tick().sample(bus.rdata, bus.rresp).until(bus.rvalid)
    ctx.set(bus.rready, 0)
    assert resp == 0, f"read of {addr:#x} answered {resp}"
    return int(data)


@dataclass
class AxiMemory:
    """A byte-addressed memory behind AXI4 read and write ports (numpy uint8)."""

    data: np.ndarray
    read_latency: int
    write_latency: int
    bus_bytes: int
    base: int = 0  # physical address of data[0]
    max_reads: int = 1  # read bursts accepted before arready drops
    reads: list[tuple[int, int, int]] = field(default_factory=list)  # (cycle, addr, beats)
    writes: list[tuple[int, int, int]] = field(default_factory=list)

    def check_burst(self, addr: int, beats: int, size: int) -> None:
        assert size == self.bus_bytes.bit_length() - 1, f"burst size {size} is not the bus width"
        assert addr % self.bus_bytes == 0, f"burst address {addr:#x} is not beat-aligned"
        end = addr + beats * self.bus_bytes
        assert addr // 4096 == (end - 1) // 4096, f"burst {addr:#x}+{beats} crosses 4 KiB"
        lo, hi = addr - self.base, end - self.base
        assert 0 <= lo and hi <= len(self.data), f"burst {addr:#x}+{beats} is out of memory"

    async def serve_reads(self, ctx, bus) -> None:
        """The AR and R channels (a testbench process that never returns)."""
        ctx.set(bus.arready, 1)
        cycle, waiting = 0, None  # waiting: an AR payload seen valid without its handshake
        bursts: deque[list[int]] = deque()  # [addr, beats left, first-beat cycle], oldest first
        sampled = (
            bus.arvalid, bus.araddr, bus.arlen, bus.arsize, bus.arburst, bus.arready, bus.rvalid,
            bus.rready,
        )  # fmt: skip
        async for (
            _,
            _,
            arvalid,
            araddr,
            arlen,
            arsize,
            arburst,
            arready,
            rvalid,
            rready,
        ) in ctx.tick().sample(*sampled):
            if rvalid and rready:
                bursts[0][0] += self.bus_bytes
                bursts[0][1] -= 1
                if not bursts[0][1]:
                    bursts.popleft()
            payload = (araddr, arlen, arsize, arburst)
            if waiting is not None:
                assert arvalid, f"arvalid withdrawn before its handshake (cycle {cycle})"
                assert payload == waiting, f"AR payload changed before its handshake: {payload}"
            waiting = None
            if arvalid and arready:
                assert arburst == 1, f"arburst must be INCR, not {arburst}"
                self.check_burst(araddr, arlen + 1, arsize)
                self.reads.append((cycle, araddr, arlen + 1))
                bursts.append([araddr - self.base, arlen + 1, cycle + self.read_latency])
            elif arvalid:
                waiting = payload
            cycle += 1
            ready = bool(bursts) and cycle >= bursts[0][2]
            ctx.set(bus.arready, len(bursts) < self.max_reads)
            ctx.set(bus.rvalid, ready)
            if ready:
                lo = bursts[0][0]
                ctx.set(bus.rdata, int.from_bytes(self.data[lo : lo + self.bus_bytes], "little"))
                ctx.set(bus.rlast, bursts[0][1] == 1)

    async def serve_writes(self, ctx, bus) -> None:
        """The AW, W and B channels (a testbench process that never returns)."""
        ctx.set(bus.awready, 1)
        ctx.set(bus.wready, 1)
        cycle, burst, resp_at = 0, None, None  # burst: [addr, beats left]
        sampled = (
            bus.awvalid, bus.awaddr, bus.awlen, bus.awsize, bus.wvalid, bus.wdata, bus.wstrb,
            bus.wlast, bus.bready,
        )  # fmt: skip
        async for (
            _,
            _,
            awvalid,
            awaddr,
            awlen,
            awsize,
            wvalid,
            wdata,
            wstrb,
            wlast,
            bready,
        ) in ctx.tick().sample(*sampled):
            if resp_at is not None and cycle >= resp_at and bready:
                resp_at = None
            if awvalid:
                assert burst is None and resp_at is None, "a second write burst while one is open"
                self.check_burst(awaddr, awlen + 1, awsize)
                self.writes.append((cycle, awaddr, awlen + 1))
                burst = [awaddr - self.base, awlen + 1]
            if wvalid:
                assert burst is not None, "W beat before its AW"
                raw = int(wdata).to_bytes(self.bus_bytes, "little")
                for i in range(self.bus_bytes):
                    if wstrb >> i & 1:
                        self.data[burst[0] + i] = raw[i]
                burst[0] += self.bus_bytes
                burst[1] -= 1
                assert bool(wlast) == (burst[1] == 0), "wlast must mark the burst's last beat"
                if not burst[1]:
                    burst, resp_at = None, cycle + self.write_latency
            cycle += 1
            ctx.set(bus.awready, burst is None and resp_at is None)
            ctx.set(bus.bvalid, resp_at is not None and cycle >= resp_at)
