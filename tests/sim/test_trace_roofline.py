"""Chrome traces and rooflines of timing-model runs, and the conv benchmark's programs."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorforge.demo import build_matmul
from tensorforge.hw.config import HWConfig
from tensorforge.sim.roofline import (
    RooflinePoint,
    attainable_gops,
    plot_roofline,
    roofline_point,
    sustained_bandwidth_gbs,
)
from tensorforge.sim.timing import TimingParams
from tensorforge.sim.trace import chrome_trace

TINY = HWConfig.preset("tiny")


def _run(tmp_path=None, cfg=TINY):
    k = build_matmul(cfg, m=16 * cfg.batch, k=4 * cfg.block_in, n=4 * cfg.block_out, tile_rows=4)
    trace = tmp_path / "run.json" if tmp_path else None
    out, result = k.run_on("cyclesim", trace=trace)
    assert np.array_equal(out, k.reference())
    return result


def test_trace_has_a_track_per_module_and_queue_counters(tmp_path):
    result = _run(tmp_path)
    data = json.loads((tmp_path / "run.json").read_text())
    events = data["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {"fetch", "load", "compute", "store"}
    slices = [e for e in events if e["ph"] == "X" and "insn" in e["args"] and "unit" in e["args"]]
    assert len(slices) == len(result.timing.insns)
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert {"cmd queue load", "cmd queue compute", "cmd queue store"} <= counters
    assert {"tokens l2g", "tokens g2l", "tokens g2s", "tokens s2g"} <= counters
    # Every queue drains to zero, and slices are at the clock's microseconds.
    for name in counters:
        last = [e for e in events if e["ph"] == "C" and e["name"] == name][-1]
        assert last["args"]["level"] == 0, name
    us = 1 / TINY.clock_mhz
    gemm = next(e for e in slices if e["name"] == "GEMM")
    assert gemm["ts"] == pytest.approx(gemm["args"]["start_cycle"] * us)
    assert gemm["dur"] == pytest.approx(gemm["args"]["cycles"] * us)
    assert data["otherData"]["cycles"] == result.cycles


def test_a_failed_trace_write_leaves_the_old_trace(tmp_path, monkeypatch):
    """The trace is written atomically: a write that fails part-way (here the flush to disk)
    leaves the previous trace whole and no temporary file behind."""
    from tensorforge.sim.trace import write_chrome_trace

    result = _run(tmp_path)
    before = (tmp_path / "run.json").read_bytes()

    def broken(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", broken)
    with pytest.raises(OSError, match="No space"):
        write_chrome_trace(result.timing, tmp_path / "run.json")
    assert (tmp_path / "run.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_trace_shows_token_waits():
    timing = _run().timing
    events = chrome_trace(timing)["traceEvents"]
    waits = [e for e in events if e["name"].startswith("wait ")]
    c = timing.counters()
    total = sum(v for k, v in c.items() if "_wait_" in k and not k.endswith("fetch"))
    assert sum(round(e["dur"] * TINY.clock_mhz) for e in waits) == total > 0


def test_roofline_points_and_png(tmp_path):
    pytest.importorskip("matplotlib")
    timing = _run().timing
    p = roofline_point("matmul", timing, "demo")
    assert p.gops == pytest.approx(timing.gops) and p.intensity == timing.ops / timing.dram_bytes
    params = TimingParams.for_config(TINY)
    assert attainable_gops(1e9, TINY, params) == TINY.peak_gops
    assert attainable_gops(1.0, TINY, params) == pytest.approx(params.peak_bandwidth_gbs)
    other = RooflinePoint("x", 10**6, 10**4, 10**4, 100.0, "other")
    path = plot_roofline([p, other], TINY, params, tmp_path / "roof.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _bench():
    path = Path(__file__).parents[2] / "benchmarks" / "sim.py"
    spec = importlib.util.spec_from_file_location("bench_sim", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_sim"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("outstanding", "gbs"), [(1, 0.32), (2, 0.64), (4, 0.8), (8, 0.8)])
def test_sustained_read_bandwidth_counts_bursts_in_flight(outstanding, gbs):
    """16-beat bursts of 8 bytes at 100 MHz (0.8 GB/s peak), read latency 24: one in flight
    moves 16 beats per 40 cycles; two, 32 per 40; four or more keep the bus busy."""
    p = TimingParams(dram_read_latency=24, max_outstanding_reads=outstanding)
    assert sustained_bandwidth_gbs(p) == pytest.approx(gbs)


@pytest.mark.parametrize("shape", [(8, 8, 8, 3, 1), (8, 8, 16, 3, 2), (8, 16, 8, 1, 2)])
def test_benchmark_conv_programs_are_bit_exact_and_vthreads_help(shape):
    bench = _bench()
    sh = bench.ConvShape(*shape)
    cycles = []
    for vt in (1, 2):
        kernel = bench.build_conv(TINY, sh, vt)
        row = bench.run_layer(kernel, check=True, trace=None)
        assert row["bit_exact"], (shape, vt)
        cycles.append(row["cycles"])
    assert cycles[1] < cycles[0]


def test_run_image_fills_inputs_and_writes_the_trace(tmp_path):
    from tensorforge.runtime.device.vta import run_image

    k = build_matmul(TINY, m=8, k=8, n=8)
    outputs, result = run_image(k.image, backend="cyclesim", trace=tmp_path / "t.json")
    assert set(outputs) == {"C"} and result.cycles == result.timing.cycles
    assert json.loads((tmp_path / "t.json").read_text())["otherData"]["cycles"] == result.cycles


def test_benchmark_schedules_beat_the_default_on_their_layers():
    """The schedules the benchmark gives instead of the default are no slower on cyclesim."""
    from tensorforge.sim.timing import simulate_timing

    bench = _bench()
    cfg = HWConfig.preset("pynq")
    for name, vt in bench.SCHEDULES:
        sh = bench.ConvShape(*bench.LAYERS[name])
        given = bench.build_conv(cfg, sh, vt, name=name)
        default = bench.build_conv(cfg, sh, vt)
        assert given.tuned and not default.tuned and given.kernel.schedule.vthreads == vt
        cycles = [simulate_timing(k.kernel.image.instructions(), cfg).cycles
                  for k in (given, default)]  # fmt: skip
        assert cycles[0] <= cycles[1], (name, vt, cycles)
