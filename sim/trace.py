"""Chrome trace-event JSON of a timing-model run (opens in Perfetto and chrome://tracing).

One track per module (fetch, load, compute, store) holds a slice per instruction (named as in
error messages, e.g. ``GEMM`` or ``LOAD INP``) and a slice per token wait; counters show the
occupancy of the three command queues and the four token queues. Timestamps are microseconds
at the configured clock; every slice's ``args`` carry its cycles.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> from tensorforge.hw.isa import FinishInsn
    >>> from tensorforge.sim.timing import simulate_timing
    >>> trace = chrome_trace(simulate_timing([FinishInsn()], HWConfig.preset("pynq")))
    >>> sorted({e["ph"] for e in trace["traceEvents"]})
    ['C', 'M', 'X']
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..hw.isa import describe, stage_of
from .timing import STAGES, TOKEN_QUEUES, TimingResult, unit_of

PID = 1
TID = {"layers": 0, "fetch": 1, "load": 2, "compute": 3, "store": 4}


def chrome_trace(result: TimingResult) -> dict[str, Any]:
    """The trace as a JSON-ready dict (``{"traceEvents": [...], ...}``)."""
    us = 1.0 / result.params.clock_mhz  # microseconds per cycle
    events: list[dict[str, Any]] = [
        _meta(
            "process_name", 0, f"accelerator {result.config.name} ({result.config.bitstream_name})"
        ),
    ]
    for name, tid in TID.items():
        if name == "layers":
            continue  # only a sequence of runs has a layer track
        events.append(_meta("thread_name", tid, name))
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                       "args": {"sort_index": tid}})  # fmt: skip
    for k, (request, end) in enumerate(result.fetch_bursts):
        events.append(_slice("fetch burst", "dma", "fetch", request, end, us, {"burst": k}))
    last_free = {s: 0 for s in STAGES}
    for i, insn in enumerate(result.insns):
        s = stage_of(insn)
        track = s.name.lower()
        if result.waits[i]:
            begin = max(last_free[s], result.ready[i])
            args = {"insn": i, "queue": result.waits[i]}
            events.append(_slice(f"wait {result.waits[i]}", "stall", track, begin,
                                 result.start[i], us, args))  # fmt: skip
        args = {"insn": i, "unit": unit_of(insn), "cycles": result.end[i] - result.start[i],
                "start_cycle": result.start[i], "dispatch_cycle": result.dispatch[i]}  # fmt: skip
        events.append(_slice(describe(insn), unit_of(insn), track, result.start[i],
                             result.end[i], us, args))  # fmt: skip
        if result.free[i] > result.end[i]:
            events.append(_slice("push stall", "stall", track, result.end[i], result.free[i], us,
                                 {"insn": i}))  # fmt: skip
        last_free[s] = result.free[i]
    events += _counters(result, us)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "config": result.config.name,
            "clock_mhz": result.params.clock_mhz,
            "cycles": result.cycles,
            "timing_params": result.params.to_dict(),
        },
    }


def write_chrome_trace(result: TimingResult, path: str | Path) -> Path:
    """Write ``chrome_trace(result)`` to ``path`` (atomically: a reader never sees half a
    trace, and a failed write leaves the old file); returns the path."""
    return _write_json(chrome_trace(result), path)


def _write_json(trace: dict[str, Any], path: str | Path) -> Path:
    from ..runtime.container import write_atomic

    path = Path(path)
    write_atomic(path, json.dumps(trace, separators=(",", ":")).encode())
    return path


def chrome_trace_sequence(runs: Sequence[tuple[str, TimingResult]]) -> dict[str, Any]:
    """One trace of several runs placed one after another (a model's accelerator layers): each
    run's events shifted by the cycles of the runs before it, plus a ``layers`` track with one
    slice per run named by its label.

    Raises:
        ValueError: for no runs, or runs of different configurations or clocks.
    """
    if not runs:
        raise ValueError("chrome_trace_sequence needs at least one run")
    first = runs[0][1]
    clocks = {(r.config, r.params.clock_mhz) for _, r in runs}
    if len(clocks) != 1:
        raise ValueError("the runs of one trace must share a HWConfig and a clock")
    us = 1.0 / first.params.clock_mhz
    trace = chrome_trace(first)
    events = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    events.append(_meta("thread_name", TID["layers"], "layers"))
    offset = 0
    for label, result in runs:
        for event in chrome_trace(result)["traceEvents"]:
            if event["ph"] != "M":
                events.append({**event, "ts": event["ts"] + offset * us})
        args = {"cycles": result.cycles, "start_cycle": offset}
        events.append(_slice(label, "layer", "layers", offset, offset + result.cycles, us, args))
        offset += result.cycles
    trace["traceEvents"] = events
    trace["otherData"] = {**trace["otherData"], "cycles": offset, "layers": len(runs)}
    return trace


def write_chrome_trace_sequence(runs: Sequence[tuple[str, TimingResult]], path: str | Path) -> Path:
    """Write ``chrome_trace_sequence(runs)`` to ``path`` (atomically, as `write_chrome_trace`);
    returns the path."""
    return _write_json(chrome_trace_sequence(runs), path)


def _meta(name: str, tid: int, value: str) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": PID, "tid": tid, "args": {"name": value}}


def _slice(name: str, cat: str, track: str, begin: int, end: int, us: float, args: dict) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "pid": PID, "tid": TID[track],
            "ts": begin * us, "dur": (end - begin) * us, "args": args}  # fmt: skip


def _counters(result: TimingResult, us: float) -> list[dict[str, Any]]:
    """Counter events: one series per queue, a sample wherever its level changes."""
    changes: dict[str, dict[int, int]] = {}
    for i, insn in enumerate(result.insns):
        series = changes.setdefault(f"cmd queue {stage_of(insn).name.lower()}", {})
        series[result.dispatch[i]] = series.get(result.dispatch[i], 0) + 1
        series[result.start[i]] = series.get(result.start[i], 0) - 1
    for q in TOKEN_QUEUES:
        series = changes.setdefault(f"tokens {q}", {0: 0})
        for t in result.pushes[q]:
            series[t] = series.get(t, 0) + 1
        for t in result.pops[q]:
            series[t] = series.get(t, 0) - 1
    events = []
    for name, series in changes.items():
        level = 0
        for t in sorted(series):
            level += series[t]
            events.append({"name": name, "ph": "C", "pid": PID, "ts": t * us,
                           "args": {"level": level}})  # fmt: skip
    return events
