"""The accelerator's load engine with several read bursts in flight, and the requantizing GEMM:
C2-C12 GEMM utilization and whole ResNet-18 cycles on ``cyclesim`` (``pynq`` with
``max_outstanding_reads`` 1 and 4, ``gemm_requant`` off and on).

Per layer (the ``vta.conv2d`` tuning task of benchmarks/tuning.py, 2 virtual threads) the same
sample of configs is timed under each setting (a setting is ``N`` bursts in flight, ``N+rq``
with ``gemm_requant``): the default config of each, the best ``--top``
by the schedule estimate (compiler/vta/schedule.py ``estimated_cycles``) under each, and the
best ``--top`` of a tuning log (``--log``, e.g. benchmarks/tuning.py's build/tuning/
resnet18_vta.jsonl) for the layer's shape. Utilization counts the conv's own MACs over the
cycles, as benchmarks/tuning.py ``part_vta``. ``--resnet`` adds whole ResNet-18 (int8, batch 1)
with the default schedules, in each requantization mode of ``--modes`` (``mul``, ``pynq``'s
default, keeps its ALU epilogue under ``gemm_requant``: the per-channel MUL is a tensor pass the
requantizing GEMM does not fold; ``shift`` folds).

Usage:
    python benchmarks/vta_inflight.py [--settings 1,4,1+rq,4+rq] [--layers C10,C12] [--top 8]
                                      [--log build/tuning/resnet18_vta.jsonl] [--resnet]
                                      [--modes mul,shift] [--no-layers]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from machine import describe
from tuning import vta_task

from sim import LAYERS  # ResNet-18's C2-C12 (ReQuEST'18 Table 1)
from tensorforge.compiler.autotune.measure import Builder, SimRunner, measure
from tensorforge.compiler.vta.kernel import SHAPE_FIELDS
from tensorforge.compiler.vta.schedule import Conv2dWorkload, estimated_cycles, schedule_from
from tensorforge.hw.config import HWConfig


def config(setting: str) -> HWConfig:
    """``pynq`` with ``N`` read bursts in flight, and ``gemm_requant`` for ``N+rq``."""
    n, _, rq = str(setting).partition("+")
    if rq not in ("", "rq"):
        raise ValueError(f"a setting must be N or N+rq, not {setting!r}")
    return HWConfig.preset("pynq").replace(max_outstanding_reads=int(n), gemm_requant=rq == "rq")


def logged_configs(path: Path | None, workload: dict, top: int) -> list[str]:
    """The ``top`` cheapest distinct 2-thread configs of ``path`` for ``workload``'s shape."""
    if path is None or not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        wl, cfg = rec.get("workload", {}), rec.get("config", {})
        if (
            rec.get("cost")
            and cfg.get("vthreads") == 2
            and all(wl.get(f) == workload[f] for f in SHAPE_FIELDS)
        ):
            values = {k: v for k, v in cfg.items() if k != "lowering"}  # a retired knob
            rows.append((rec["cost"], json.dumps(values, sort_keys=True)))
    out: list[str] = []
    for _, c in sorted(rows):
        if c not in out:
            out.append(c)
    return out[:top]


def sample(name: str, settings: list[str], top: int, log: Path | None) -> list[dict]:
    tasks = [vta_task(name, config(n)) for n in settings]
    workload = tasks[0].workload
    wl = Conv2dWorkload(**{f: workload[f] for f in SHAPE_FIELDS})
    two = [c.values for c in tasks[0].space if c.values["vthreads"] == 2]
    picks = set(logged_configs(log, workload, top))
    for n, task in zip(settings, tasks, strict=True):
        picks.add(json.dumps(task.space.default.values, sort_keys=True))
        ranked = sorted(two, key=lambda v, n=n: estimated_cycles(config(n), wl, schedule_from(v)))
        picks |= {json.dumps(v, sort_keys=True) for v in ranked[:top]}
    return [json.loads(c) for c in sorted(picks)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", "--outstanding", default="1,4,1+rq,4+rq")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--log", type=Path, default=Path("build/tuning/resnet18_vta.jsonl"))
    ap.add_argument("--resnet", action="store_true")
    ap.add_argument("--modes", default="mul", help="requantization modes of --resnet (mul,shift)")
    ap.add_argument("--no-layers", action="store_true", help="only --resnet")
    args = ap.parse_args()
    settings = args.settings.split(",")
    print(f"machine: {describe()}\n")
    if args.no_layers:
        whole_resnet(settings, args.modes.split(","))
        return
    head = " | ".join(f"{n}: default / best (util.)" for n in settings)
    print(f"| layer | configs | {head} |")
    print("|---|---|" + "---|" * len(settings))
    builder, sim = Builder(2, timeout=300), SimRunner("cyclesim")
    utils: dict[str, list[float]] = {n: [] for n in settings}
    for name in args.layers.split(","):
        picks = sample(name, settings, args.top, args.log)
        cells = []
        for n in settings:
            task = vta_task(name, config(n))
            results = measure(task, picks, builder, sim)
            costs = {json.dumps(c, sort_keys=True): r.cost for c, r in zip(picks, results,
                                                                          strict=True)}  # fmt: skip
            best = min(c for c in costs.values() if c)
            default = costs[json.dumps(task.space.default.values, sort_keys=True)]
            util = task.flops / 2 / config(n).macs_per_cycle / best
            utils[n].append(util)
            cells.append(f"{default:,.0f} / {best:,.0f} ({util:.1%})")
        print(f"| {name} | {len(picks)} | " + " | ".join(cells) + " |", flush=True)
    means = ", ".join(f"{n} {np.mean(u):.1%}" for n, u in utils.items())
    print(f"\nmean GEMM MAC utilization of the best sampled configs: {means}")
    builder.close()
    sim.close()
    if args.resnet:
        whole_resnet(settings, args.modes.split(","))


def whole_resnet(settings: list[str], modes: list[str]) -> None:
    import tempfile

    import tensorforge
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.frontend.onnx_builders import resnet18

    graph = from_onnx(resnet18())
    rng = np.random.default_rng(0)
    calib = {graph.inputs[0]: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            for n in settings:
                path = Path(tmp) / f"pynq_{n.replace('+', '_')}.json"
                path.write_text(config(n).to_json())
                t0 = time.perf_counter()
                target = f"vta -config={path} -device=cyclesim -mode={mode}"
                module = tensorforge.compile(graph, target, calibration=calib)
                module.run(calib)
                total = sum(r.cycles for r in module.device_results().values())
                print(f"ResNet-18, default schedules, requant mode {mode}, {n}: {total:,} cycles "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
