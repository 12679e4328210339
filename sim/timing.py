"""Cycle-accurate timing model of the accelerator: fetch, load, compute, store, queues, DRAM.

The model has the hardware's structure (vta_facts.md §2.1, docs/hardware.md): fetch reads the
instruction stream from DRAM in AXI bursts and writes each instruction into the command queue
of its stage (stalling while that queue is full); load, compute and store each run their queue
in order, popping dependency tokens before an instruction and pushing them after it; four token
queues connect them. Each instruction's duration is a closed-form function of its fields (the
formulas below, with every constant a named field of ``TimingParams``), so the model advances a
whole instruction per step and stays exact: the time of every event is the max of the events it
waits for plus a constant. Data is not touched here: ``CycleSimDevice`` runs the functional
simulator for the results (bit-exact) and this model for the cycles.

Cycle conventions: an instruction popped from its command queue in cycle S occupies its stage
for cycles S .. E-1 (``E = S + duration``); it pushes its tokens in cycle E (later while the
token queue is full), and the stage can pop its next instruction in the cycle of its last push.
A token pushed in cycle t can be popped from cycle t + token_latency.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> from tensorforge.hw.isa import FinishInsn
    >>> cfg = HWConfig.preset("pynq")
    >>> simulate_timing([FinishInsn()], cfg).cycles
    30
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..hw.config import HWConfig
from ..hw.isa import (
    INSN_BYTES,
    AluInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    MemInsn,
    MemType,
    Stage,
    describe,
    elem_bytes,
    stage_of,
)
from ..hw.tokens import POP_QUEUES, TOKEN_QUEUES, pop_queues, push_queues
from .functional import (
    SimError,
    StageStepper,
    describe_fetch_block,
    describe_wait,
    validate_program,
)

# Per-instruction latencies and the parameters; re-exported here, where users look for them.
from .latency import (
    PAGE_BYTES,
    STAGES,
    TimingParams,
    alu_cycles,
    alu_ii,
    dma_bursts,
    dma_data_cycles,
    gemm_cycles,
    insn_cycles,
    load_cycles,
    loop_steps,
    store_cycles,
    unit_of,
)

__all__ = [
    "PAGE_BYTES",
    "STAGES",
    "TOKEN_QUEUES",
    "TimingParams",
    "TimingResult",
    "alu_cycles",
    "alu_ii",
    "dma_bursts",
    "dma_data_cycles",
    "gemm_cycles",
    "insn_cycles",
    "load_cycles",
    "loop_steps",
    "simulate_timing",
    "store_cycles",
    "unit_of",
]

# ---- the result ----------------------------------------------------------------------------


@dataclass
class TimingResult:
    """Per-instruction times of one run and the statistics derived from them.

    ``dispatch[i]`` is the cycle fetch wrote instruction i into its command queue; ``start[i]``
    the cycle its stage popped it; ``end[i]`` the cycle its unit was ready again; ``free[i]``
    the cycle its last token push was accepted (its stage could then take the next one);
    ``ready[i]`` the first cycle it was at its command queue's output. ``waits[i]`` names the
    token queue the stage waited on after that, or "".
    """

    config: HWConfig
    params: TimingParams
    insns: list[Insn]
    cycles: int
    dispatch: list[int]
    start: list[int]
    end: list[int]
    free: list[int]
    ready: list[int]
    waits: list[str]
    pushes: dict[str, list[int]]
    pops: dict[str, list[int]]
    fetch_bursts: list[tuple[int, int]]  # (request cycle, last data beat + 1)
    fetch_stall: int
    wall_s: float = 0.0
    _counters: dict[str, int] = field(default_factory=dict, repr=False)

    def counters(self) -> dict[str, int]:
        """Integer statistics: cycles, busy/stall cycles per module and unit, steps, bytes."""
        if not self._counters:
            self._counters = _counters(self)
        return dict(self._counters)

    def utilization(self) -> dict[str, float]:
        """Busy fraction of each stage and unit; ``gemm_macs`` counts only multiplying steps."""
        c, total = self.counters(), max(self.cycles, 1)
        out = {s: c[f"{s}_busy"] / total for s in ("fetch", "load", "compute", "store")}
        out.update({u: c[f"{u}_busy"] / total for u in ("gemm", "alu")})
        out["gemm_macs"] = c["gemm_mac_steps"] / total
        return out

    @property
    def ops(self) -> int:
        """Integer operations of the GEMM core: two per MAC, BATCH*BLOCK_IN*BLOCK_OUT per step."""
        return 2 * self.config.macs_per_cycle * self.counters()["gemm_mac_steps"]

    @property
    def seconds(self) -> float:
        return self.cycles / (self.params.clock_mhz * 1e6)

    @property
    def gops(self) -> float:
        """Achieved GEMM throughput at the configured clock."""
        return self.ops / self.seconds / 1e9 if self.cycles else 0.0

    @property
    def dram_bytes(self) -> int:
        """Payload bytes moved between DRAM and the chip, instruction fetch included."""
        c = self.counters()
        return sum(v for k, v in c.items() if k.startswith("dram_bytes_"))

    def summary(self) -> str:
        """A small human-readable table of the run."""
        c, u = self.counters(), self.utilization()
        lines = [
            f"{self.cycles:,} cycles = {self.seconds * 1e6:,.1f} us at {self.params.clock_mhz:g} "
            f"MHz; {self.gops:.2f} GOPS of {self.config.peak_gops:.1f} peak "
            f"(GEMM MAC utilization {u['gemm_macs']:.1%})",
            f"  {'module':<9}{'busy':>12}{'util':>8}{'stalled':>12}",
        ]
        for s in ("fetch", "load", "compute", "store"):
            stalled = sum(v for k, v in c.items() if k.startswith((f"{s}_wait", f"{s}_stall")))
            lines.append(f"  {s:<9}{c[f'{s}_busy']:>12,}{u[s]:>8.1%}{stalled:>12,}")
        moved = ", ".join(
            f"{k.removeprefix('dram_bytes_')} {v:,}" for k, v in c.items() if k.startswith("dram_")
        )
        lines.append(f"  DRAM bytes: {moved}")
        return "\n".join(lines)


def _counters(r: TimingResult) -> dict[str, int]:
    cfg = r.config
    c: dict[str, int] = {"cycles": r.cycles}
    c["fetch_busy"] = sum(e - s for s, e in r.fetch_bursts)
    c["fetch_stall"] = r.fetch_stall
    for s in STAGES:
        name = s.name.lower()
        c[f"{name}_busy"] = c[f"{name}_wait_fetch"] = c[f"{name}_stall_push"] = 0
        for q in POP_QUEUES[s].values():
            c[f"{name}_wait_{q}"] = 0
    for unit in (
        "gemm",
        "alu",
        "dma_uop",
        "dma_acc",
        "dma_acc_8bit",
        "dma_inp",
        "dma_wgt",
        "dma_out",
        "finish",
    ):
        c[f"{unit}_busy"] = 0
    c.update(gemm_steps=0, gemm_mac_steps=0, alu_steps=0)
    c.update({f"dram_bytes_{b}": 0 for b in ("insn", "uop", "inp", "wgt", "acc", "out")})
    c["dram_bytes_insn"] = len(r.insns) * INSN_BYTES
    last_free = dict.fromkeys(STAGES, 0)
    for i, insn in enumerate(r.insns):
        s = stage_of(insn)
        stage, busy = s.name.lower(), r.end[i] - r.start[i]
        c[f"{stage}_busy"] += busy
        c[f"{unit_of(insn)}_busy"] += busy
        c[f"{stage}_stall_push"] += r.free[i] - r.end[i]
        # The gap before an instruction: first waiting for fetch, then for a token.
        gap_end = max(last_free[s], min(r.ready[i], r.start[i]))
        c[f"{stage}_wait_fetch"] += gap_end - last_free[s]
        if r.waits[i]:
            c[f"{stage}_wait_{r.waits[i]}"] += r.start[i] - gap_end
        last_free[s] = r.free[i]
        if isinstance(insn, GemmInsn):
            c["gemm_steps"] += loop_steps(insn)
            c["gemm_mac_steps"] += 0 if insn.reset_reg else loop_steps(insn)
        elif isinstance(insn, AluInsn):
            c["alu_steps"] += loop_steps(insn)
        elif isinstance(insn, MemInsn):
            mt = insn.memory_type
            name = "acc" if mt == MemType.ACC_8BIT else mt.name.lower()
            c[f"dram_bytes_{name}"] += insn.x_size * insn.y_size * elem_bytes(cfg, mt)
    for s in STAGES:
        name = s.name.lower()
        accounted = sum(v for k, v in c.items() if k.startswith(f"{name}_") and k != f"{name}_busy")
        c[f"{name}_idle"] = r.cycles - accounted - c[f"{name}_busy"]
    return c


# ---- the scheduler -------------------------------------------------------------------------


def simulate_timing(
    insns: Sequence[Insn],
    cfg: HWConfig,
    params: TimingParams | None = None,
    insn_addr: int = 0,
) -> TimingResult:
    """Cycle times of a program on ``cfg`` (no data is executed).

    Args:
        insns: the decoded program; it must end with FINISH.
        cfg: the hardware configuration.
        params: latencies; default ``TimingParams.for_config(cfg)``.
        insn_addr: the instruction stream's DRAM byte address (bursts follow its alignment).

    Returns:
        a ``TimingResult``; ``cycles`` counts from launch to FINISH's ``done``.

    Raises:
        DeadlockError: when no module can make progress before FINISH, naming each stage's
            waiting instruction and queue (the program is never run forever).
        SimError: for dependency flags that name a missing stage.
    """
    import time

    t0 = time.perf_counter()
    params = params or TimingParams.for_config(cfg)
    validate_program(insns)
    sched = _Scheduler(list(insns), cfg, params, insn_addr)
    sched.run()
    left = [i for i, t in enumerate(sched.start) if t < 0]
    if left:
        raise SimError(
            f"FINISH can run with {len(left)} instruction(s) not yet executed (first: "
            f"instruction {left[0]}, {describe(insns[left[0]])}); FINISH must wait for them "
            "with dependency tokens",
            left[0],
        )
    result = sched.result()
    result.wall_s = time.perf_counter() - t0
    return result


class _Scheduler(StageStepper):
    """Computes event times in dependency order: each time is a max over known earlier times."""

    def __init__(self, insns: list[Insn], cfg: HWConfig, p: TimingParams, insn_addr: int) -> None:
        self.insns, self.cfg, self.p = insns, cfg, p
        n = len(insns)
        self.stage = [stage_of(insn) for insn in insns]
        self.dur = [insn_cycles(insn, cfg, p) for insn in insns]
        self.queue: dict[Stage, list[int]] = {s: [] for s in STAGES}
        self.pos = [0] * n
        for i, s in enumerate(self.stage):
            self.pos[i] = len(self.queue[s])
            self.queue[s].append(i)
        self.dispatch = [-1] * n
        self.start = [-1] * n
        self.end = [-1] * n
        self.free = [-1] * n
        self.ready = [-1] * n
        self.waits = [""] * n
        self.pushes: dict[str, list[int]] = {q: [] for q in TOKEN_QUEUES}
        self.pops: dict[str, list[int]] = {q: [] for q in TOKEN_QUEUES}
        self.next = dict.fromkeys(STAGES, 0)
        self.stage_free = dict.fromkeys(STAGES, 0)
        self.pending: dict[Stage, tuple[int, list[str]] | None] = dict.fromkeys(STAGES)
        self.done = False
        self._init_fetch(insn_addr)

    # ---- fetch ------------------------------------------------------------------------------
    def _init_fetch(self, insn_addr: int) -> None:
        chunk = self.p.burst_bytes
        self.insn_addr = insn_addr
        # burst_of[i]: the burst (aligned chunk) holding instruction i.
        self.burst_of = [(insn_addr + INSN_BYTES * i) // chunk for i in range(len(self.insns))]
        self.bursts: list[tuple[int, int, int]] = []  # (request, data start, data end)
        self.burst_last: list[int] = []  # index of each burst's last instruction
        for i in range(len(self.insns)):
            if i + 1 == len(self.insns) or self.burst_of[i + 1] != self.burst_of[i]:
                self.burst_last.append(i)
        self.fetched = 0
        self.fetch_stall = 0
        self.last_dispatch = -1
        self._beat0 = 0

    def _fetch(self) -> bool:
        moved = False
        while self.fetched < len(self.insns):
            i = self.fetched
            s = self.stage[i]
            slot = self._queue_slot(s, self.pos[i])
            if slot is None:
                break
            arrival = self._arrival(i)
            ready = max(arrival, self.last_dispatch + 1)
            self.dispatch[i] = max(ready, slot)
            self.fetch_stall += self.dispatch[i] - ready
            self.last_dispatch = self.dispatch[i]
            self.fetched += 1
            moved = True
        return moved

    def _arrival(self, i: int) -> int:
        """Cycle instruction i is in fetch's buffer (its last beat has arrived)."""
        p = self.p
        first = i == 0 or self.burst_of[i] != self.burst_of[i - 1]
        if first:
            b = len(self.bursts)
            request = self.bursts[-1][2] if self.bursts else 0
            if b >= p.fetch_buffer_bursts:
                # The buffer of burst b - fetch_buffer_bursts is free once it is dispatched.
                request = max(
                    request, self.dispatch[self.burst_last[b - p.fetch_buffer_bursts]] + 1
                )
            last = self.burst_last[b]
            lo = (self.insn_addr + INSN_BYTES * i) // p.bus_bytes
            hi = -(-(self.insn_addr + INSN_BYTES * (last + 1)) // p.bus_bytes)
            begin = request + p.dram_read_latency
            self.bursts.append((request, begin, begin + hi - lo))
            self._beat0 = lo
        _, begin, _ = self.bursts[-1]
        end_beat = -(-(self.insn_addr + INSN_BYTES * (i + 1)) // self.p.bus_bytes)
        return begin + end_beat - self._beat0

    def _queue_slot(self, s: Stage, m: int) -> int | None:
        """Earliest cycle fetch may write the m-th instruction of stage s (None: not known yet).

        ``CommandQueue`` is a ``SyncFIFOBuffered``: depth-1 block-RAM entries plus an output
        register, and ``w.ready`` means "the block RAM part is not full". So the m-th write
        waits until entry m-depth+1 has moved to the output register (docs/hardware.md).
        """
        depth = self.p.insn_queue_depth
        if depth == 1:  # a lone register: written again the cycle after its pop
            if m == 0:
                return 0
            prev = self.start[self.queue[s][m - 1]]
            return None if prev < 0 else prev + 1
        j = m - depth + 1
        if j <= 0:
            return 0
        return self._out_reg(s, j)

    def _out_reg(self, s: Stage, j: int) -> int | None:
        """Cycle the j-th instruction of stage s reaches its queue's output register."""
        i = self.queue[s][j]
        if self.dispatch[i] < 0:
            return None
        lone = self.p.insn_queue_depth == 1  # SyncFIFOBuffered(depth=1): readable next cycle
        t = self.dispatch[i] + (1 if lone else self.p.cmd_queue_latency)
        if j > 0:
            prev = self.start[self.queue[s][j - 1]]
            if prev < 0:
                return None
            t = max(t, prev + 1)
        return t

    # ---- stages -----------------------------------------------------------------------------
    def _step(self, s: Stage) -> bool:
        if self.pending[s] is not None:
            return self._push(s)
        k = self.next[s]
        if k >= len(self.queue[s]):
            return False
        i = self.queue[s][k]
        ready = self._out_reg(s, k) if self.dispatch[i] >= 0 else None
        if ready is None:
            return False
        insn = self.insns[i]
        cause, when = "fetch", ready
        pops = pop_queues(insn)
        for q in pops:
            n = len(self.pops[q])
            if n >= len(self.pushes[q]):
                return False
            t = self.pushes[q][n] + self.p.token_latency
            if t > when:
                cause, when = q, t
        begin = max(self.stage_free[s], when)
        self.ready[i] = ready
        self.waits[i] = cause if cause != "fetch" and when > max(self.stage_free[s], ready) else ""
        for q in pops:
            self.pops[q].append(begin)
        self.start[i], self.end[i] = begin, begin + self.dur[i]
        self.next[s] += 1
        self.pending[s] = (i, push_queues(insn))
        self._push(s)
        return True

    def _push(self, s: Stage) -> bool:
        pending = self.pending[s]
        assert pending is not None
        i, queues = pending
        t, moved = max(self.end[i], self.stage_free[s]), False
        depth = self.p.dep_queue_depth
        while queues:
            q = queues[0]
            k = len(self.pushes[q])
            when = self.end[i]
            if k >= depth:
                if len(self.pops[q]) <= k - depth:
                    break  # the queue is full until the consumer pops
                when = max(when, self.pops[q][k - depth] + self.p.token_latency)
            self.pushes[q].append(when)
            t = max(t, when)
            queues.pop(0)
            moved = True
        self.stage_free[s] = max(self.stage_free[s], t)
        if queues:
            return moved
        self.free[i] = max(self.end[i], t)
        self.stage_free[s] = self.free[i]
        self.pending[s] = None
        if isinstance(self.insns[i], FinishInsn):
            self.done = True
        return True

    # ---- reports ----------------------------------------------------------------------------
    def result(self) -> TimingResult:
        finish = len(self.insns) - 1
        return TimingResult(
            config=self.cfg,
            params=self.p,
            insns=self.insns,
            cycles=self.free[finish],
            dispatch=self.dispatch,
            start=self.start,
            end=self.end,
            free=self.free,
            ready=self.ready,
            waits=self.waits,
            pushes=self.pushes,
            pops=self.pops,
            fetch_bursts=[(r, e) for r, _, e in self.bursts],
            fetch_stall=self.fetch_stall,
        )

    def _waiting(self, s: Stage) -> str:
        if self.pending[s] is not None:
            _, queues = self.pending[s]  # type: ignore[misc]
            return describe_wait(s, blocked_push=queues[0])
        k = self.next[s]
        if k >= len(self.queue[s]) or self.dispatch[self.queue[s][k]] < 0:
            return describe_wait(s)
        i = self.queue[s][k]
        insn = self.insns[i]
        empty = [q for q in pop_queues(insn) if len(self.pops[q]) >= len(self.pushes[q])]
        return describe_wait(s, (i, insn), empty)

    def _deadlock_report(self) -> str:
        parts = [self._waiting(s) for s in STAGES]
        if self.fetched < len(self.insns):
            nxt = self.insns[self.fetched]
            parts.append(describe_fetch_block(self.fetched, nxt, self.p.insn_queue_depth))
        started = sum(t >= 0 for t in self.start)
        last = max((t for t in self.free if t >= 0), default=0)
        return (
            f"deadlock at cycle {last} after {started} of {len(self.insns)} instructions: "
            + "; ".join(parts)
        )
