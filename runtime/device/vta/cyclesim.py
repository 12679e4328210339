"""The ``cyclesim`` backend: bit-exact results from the functional simulator, cycles from
``tensorforge.sim.timing``.

Usable wherever ``sim`` is: ``open_device("cyclesim", cfg)``. Each run returns a
``CycleRunResult`` whose ``cycles`` is the timing model's count from launch to FINISH and whose
``stats`` hold the functional counters plus the timing counters (busy/stall cycles per module,
steps, DRAM bytes); ``timing`` holds the full ``TimingResult`` (per-instruction times,
utilization, GOPS). With ``trace=PATH`` every run also writes a Chrome trace-event file.

Example:
    >>> from tensorforge.demo import build_matmul
    >>> from tensorforge.hw.config import HWConfig
    >>> k = build_matmul(HWConfig.preset("tiny"), m=8, k=8, n=8)
    >>> out, result = k.run_on("cyclesim")
    >>> result.cycles > 0 and result.backend
    'cyclesim'
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ....hw.config import HWConfig
from ....sim.functional import DEFAULT_MAX_STEPS
from ....sim.memory import Allocation
from ....sim.timing import TimingParams, TimingResult, simulate_timing
from .base import RunResult
from .sim import DEFAULT_MEMORY, SimDevice


@dataclass
class CycleRunResult(RunResult):
    """A RunResult with the timing model's full result."""

    timing: TimingResult | None = None


class CycleSimDevice(SimDevice):
    """Runs programs on the functional simulator (data) and the timing model (cycles).

    Args:
        config: the hardware configuration.
        memory_bytes: device DRAM size.
        timing: the model's latencies; default ``TimingParams.for_config(config)``.
        trace: a path; each run writes its Chrome trace-event JSON there.
    """

    backend = "cyclesim"

    def __init__(
        self,
        config: HWConfig,
        memory_bytes: int = DEFAULT_MEMORY,
        timing: TimingParams | None = None,
        trace: str | Path | None = None,
        min_align: int = 64,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        super().__init__(config, memory_bytes, min_align, max_steps)
        self.timing = timing or TimingParams.for_config(config)
        self.trace = trace
        self.last: TimingResult | None = None

    def run(self, insns: Allocation, insn_count: int) -> CycleRunResult:
        start = time.perf_counter()
        program = self.sim.fetch(insns.addr, insn_count)
        # The functional run validates the program (tokens, FINISH, ranges) and moves the data.
        stats = self.sim.execute(program)
        timing = simulate_timing(program, self.config, self.timing, insn_addr=insns.addr)
        self.last = timing
        if self.trace is not None:
            from ....sim.trace import write_chrome_trace

            write_chrome_trace(timing, self.trace)
        wall = time.perf_counter() - start
        counters = {**stats.as_dict(), **timing.counters()}
        return CycleRunResult(counters, wall, timing.cycles, self.backend, timing=timing)
