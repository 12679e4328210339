"""Auto-tuning benchmarks: the TVM paper's Figure 12 analogue, tuned models, rank fidelity.

Parts (``--part``, default all but ``fidelity``):

- ``curves``: best-found cost against trials for the xgb, ga and random tuners, same budget
  and seeds, on ResNet-18's conv layers: the accelerator's C2-C12 (``vta.conv2d``, pynq, on the
  ``cyclesim`` runner) and CPU layers (``x86.conv2d_nchwc`` on the ``local`` runner, one
  thread). Every
  valid config of a layer is measured once first (the cycle model is deterministic, so its
  table is exact; for the CPU the table freezes one measurement per config), then each tuner
  runs against the table, so many seeds cost no extra measurements. Reported per layer: the
  best random finds in ``--budget`` trials, and how many trials each tuner needs to reach
  0.95x of it (median over seeds; goal for xgb: within 250). Tables are cached in
  ``build/tuning/``; a PNG of the curves (mean over seeds, normalized to the table's optimum).
- ``vta``: the C2-C12 best configs with 2 virtual threads, their GEMM MAC utilization (goal:
  mean >= 88%, the paper's figure), and whole ResNet-18 cycles on the accelerator with its
  tasks tuned by xgb on ``cyclesim`` against the default schedules.
- ``resnet``: ResNet-18 and MobileNetV2 (224x224, batch 1) tuned by xgb on this CPU
  (``--trials`` per task, at the first of ``--threads``; the ``--confirm`` best configs of each
  task then re-measured beside its default, ``driver.confirm_best``), compiled with the log,
  and the untuned and the tuned module each timed against onnxruntime in alternating blocks
  (``zoo.interleaved_paired``: the ratios are medians of per-round ratios) at each of
  ``--threads`` (e.g. ``2,1``).
- ``fidelity``: 24 configs of two small conv layers (``tiny``) measured on ``cyclesim`` (both its
  default timing and the RTL RAM model's) and on the exported Verilog under Verilator; Kendall
  tau between the rankings (goal 1.0).

Usage:
    python benchmarks/tuning.py [--part curves,vta,resnet,fidelity] [--seeds 3] [--budget 1000]
                                [--cpu-layers C6] [--trials 64] [--threads 2,1] [--png PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from machine import describe
from tqdm import tqdm

from sim import LAYERS  # ResNet-18's C2-C12 (ReQuEST'18 Table 1)
from tensorforge.compiler.autotune.measure import (
    Builder,
    LocalRunner,
    MeasureResult,
    SimRunner,
    measure,
)
from tensorforge.compiler.autotune.task import Task
from tensorforge.compiler.autotune.tuner import make_tuner
from tensorforge.hw.config import HWConfig

CACHE = Path("build/tuning")
# Bumped when compiled programs change for the same config (2: the bias ADD on the GEMM core),
# so that cached tables of an older compiler are measured again.
TABLE_VERSION = 2
TUNERS = ("xgb", "ga", "random")


def vta_task(name: str, cfg: HWConfig) -> Task:
    h, c, o, k, s = LAYERS[name]
    wl = {"hw": cfg.to_dict(), "n": 1, "ic": c, "h": h, "w": h, "oc": o, "kh": k, "kw": k,
          "stride_h": s, "stride_w": s, "pad_h": k // 2, "pad_w": k // 2, "pool_h": 1,
          "pool_w": 1, "residual": False}  # fmt: skip
    return Task("vta.conv2d", wl, f"vta -config={cfg.name}")


def cpu_task(name: str) -> Task:
    h, c, o, k, s = LAYERS[name]
    wl = {"n": 1, "c": c, "h": h, "w": h, "k": o, "r": k, "s": k, "stride": s, "pad": k // 2,
          "dil": 1, "dtype": "float32"}  # fmt: skip
    return Task("x86.conv2d_nchwc", wl, "llvm")


# ---- exhaustive tables ---------------------------------------------------------------------------


def table(task: Task, label: str, builder: Builder, runner, batch: int = 32) -> dict:
    """{index: (cost or None, stats)} of every valid config, cached in build/tuning/."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{label}.json"
    if path.exists():
        data = json.loads(path.read_text())
        if data.get("task") == task.key and data.get("version") == TABLE_VERSION:
            return {int(k): (v[0], v[1]) for k, v in data["table"].items()}
    indices = [c.index for c in task.space]
    out: dict[int, tuple] = {}
    for k in tqdm(range(0, len(indices), batch), desc=f"table {label}", unit="batch"):
        chunk = indices[k : k + batch]
        results = measure(task, [task.space.get(i).values for i in chunk], builder, runner)
        for i, r in zip(chunk, results, strict=True):
            out[i] = (r.cost, {s: r.stats[s] for s in ("gemm_mac_steps",) if s in r.stats})
    path.write_text(json.dumps({"task": task.key, "version": TABLE_VERSION, "table": out}))
    return out


def simulate(task: Task, tab: dict, tuner: str, budget: int, seed: int, batch: int = 8):
    """Best-so-far cost after each trial of `tuner` run against the measured table."""
    t = make_tuner(tuner, task, seed=seed)
    best, curve = np.inf, []
    while len(t.trials) < budget and t.has_next():
        want = min(batch, budget - len(t.trials))
        picks = [i for i in t.next_batch(want) if i not in t.visited][:want]
        if not picks:
            break
        results = []
        for i in picks:
            cost = tab[i][0]
            err = "" if cost is not None else "run_error"
            results.append(MeasureResult(task.space.get(i).values, cost,
                                         [cost] if cost else [], err))  # fmt: skip
            best = min(best, cost if cost is not None else np.inf)
            curve.append(best)
        t._record(picks, results)
        t.update(picks, results)
    return np.array(curve)


def reach(curve: np.ndarray, target: float) -> float:
    """Trials needed to reach a cost <= target (inf when never)."""
    hit = np.flatnonzero(curve <= target)
    return float(hit[0] + 1) if len(hit) else np.inf


def part_curves(args, builder) -> dict:
    cfg = HWConfig.preset("pynq")
    layers = [("vta", n, vta_task(n, cfg)) for n in args.vta_layers.split(",") if n]
    layers += [("cpu", n, cpu_task(n)) for n in args.cpu_layers.split(",") if n]
    rows, curves = [], {}
    sim = SimRunner("cyclesim")
    local = LocalRunner(repeat=3, min_repeat_ms=20, threads=1)  # steadier on a shared host
    for kind, name, task in layers:
        runner = sim if kind == "vta" else local
        tab = table(task, f"{kind}_{name}", builder, runner)
        optimum = min(c for c, _ in tab.values() if c is not None)
        per: dict[str, list[np.ndarray]] = {}
        for tuner in TUNERS:
            per[tuner] = [simulate(task, tab, tuner, args.budget, seed) for seed in
                          range(args.seeds)]  # fmt: skip
        rand_best = statistics.median(float(c[-1]) for c in per["random"])
        goal = rand_best / 0.95
        row = {"layer": f"{kind} {name}", "configs": len(tab), "optimum": optimum,
               "random_best": rand_best, "unit": task.unit}  # fmt: skip
        for tuner in TUNERS:
            needs = [reach(c, goal) for c in per[tuner]]
            row[f"{tuner}_trials"] = statistics.median(needs)
            row[f"{tuner}_opt"] = statistics.median(reach(c, optimum) for c in per[tuner])
            row[f"{tuner}_at250"] = statistics.median(
                float(c[min(249, len(c) - 1)]) for c in per[tuner]
            )
        rows.append(row)
        curves[f"{kind} {name}"] = {k: [c.tolist() for c in v] for k, v in per.items()}
        curves[f"{kind} {name}"]["optimum"] = optimum
    sim.close()
    local.close()
    print(f"\n### Trials to reach 0.95x of random's best in {args.budget} trials, and the "
          f"table's optimum (median of {args.seeds} seeds; inf: never)\n")  # fmt: skip
    print("| layer | valid configs | optimum | random best | to 0.95x: xgb | ga | random |"
          " to the optimum: xgb | ga | random | xgb best@250 / optimum |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        fmt = (lambda v: f"{v:,.0f}") if r["unit"] == "cycles" else (lambda v: f"{v * 1e3:.3f} ms")
        print(f"| {r['layer']} | {r['configs']} | {fmt(r['optimum'])} | {fmt(r['random_best'])} "
              f"| {r['xgb_trials']:.0f} | {r['ga_trials']:.0f} | {r['random_trials']:.0f} "
              f"| {r['xgb_opt']:.0f} | {r['ga_opt']:.0f} | {r['random_opt']:.0f} "
              f"| {r['optimum'] / r['xgb_at250']:.3f} |")  # fmt: skip
    ok = sum(r["xgb_trials"] <= 250 for r in rows)
    print(f"\nxgb within 250 trials on {ok} of {len(rows)} layers")
    if args.png:
        _plot(curves, args.png)
    return {"rows": rows}


def _plot(curves: dict, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(curves)
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        opt = curves[name]["optimum"]
        for tuner in TUNERS:
            runs = curves[name][tuner]
            n = min(len(c) for c in runs)
            mean = np.mean([opt / np.array(c[:n]) for c in runs], axis=0)
            ax.plot(np.arange(1, n + 1), mean, label=tuner)
        ax.set_title(name, fontsize=9)
        ax.set_xscale("log")
        ax.set_ylim(0.5, 1.02)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    axes[0][0].set_ylabel("best / optimum (throughput)")
    axes[0][0].legend(fontsize=8)
    fig.supxlabel("trials")
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


# ---- the accelerator: utilization and whole ResNet-18 --------------------------------------------


def part_vta(args, builder) -> None:
    cfg = HWConfig.preset("pynq")
    print("\n### C2-C12 with 2 virtual threads: the best config in each layer's table\n")
    print("| layer | default cycles | best cycles | speedup | GEMM MAC util. (best) |")
    print("|---|---|---|---|---|")
    sim = SimRunner("cyclesim")
    utils = []
    for name in LAYERS:
        task = vta_task(name, cfg)
        tab = table(task, f"vta_{name}", builder, sim)
        two = {i: v for i, v in tab.items() if task.space.get(i).values["vthreads"] == 2
               and v[0] is not None}  # fmt: skip
        best = min(two, key=lambda i: two[i][0])
        cost, stats = two[best]
        default = tab[task.space.default.index][0]
        # the conv's own MACs (the GEMM steps that add the bias are not counted)
        util = task.flops / 2 / cfg.macs_per_cycle / cost
        utils.append(util)
        print(f"| {name} | {default:,.0f} | {cost:,.0f} | {default / cost:.2f}x | {util:.1%} |")
    print(f"\nmean GEMM MAC utilization of the tuned layers: {np.mean(utils):.1%} (goal 88%)")
    _whole_resnet_on_vta(args, builder, sim)
    sim.close()


def _whole_resnet_on_vta(args, builder, sim) -> None:
    import tensorforge
    from tensorforge.compiler.autotune.driver import extract_tasks, tune_tasks
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.frontend.onnx_builders import resnet18

    graph = from_onnx(resnet18())
    rng = np.random.default_rng(0)
    calib = {graph.inputs[0]: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    target = "vta -config=pynq -device=cyclesim"
    tasks = extract_tasks(graph, target, calibration=calib)
    log = CACHE / "resnet18_vta.jsonl"
    tune_tasks(tasks, args.vta_trials, builder, sim, log=log, tuner="xgb", progress=True)
    totals = []
    for tl in (None, log):
        module = tensorforge.compile(graph, target, calibration=calib, tuning_log=tl)
        module.run(calib)
        totals.append(sum(r.cycles for r in module.device_results().values()))
    print(f"\nResNet-18 on the accelerator (pynq, cyclesim): {len(tasks)} tasks tuned with "
          f"{args.vta_trials} xgb trials each; default schedules {totals[0]:,} cycles, tuned "
          f"{totals[1]:,} cycles ({totals[0] / totals[1]:.2f}x)")  # fmt: skip


# ---- CPU models ----------------------------------------------------------------------------------


def part_resnet(args, builder) -> None:
    import os

    import onnxruntime as ort
    from zoo import interleaved_paired

    import tensorforge
    from tensorforge.compiler.autotune.driver import extract_tasks, tune_tasks
    from tensorforge.compiler.frontend.onnx_builders import mobilenet_v2, resnet18
    from tensorforge.runtime.device.cpu.pool import set_num_threads

    threads = [int(t) for t in str(args.threads).split(",")]
    print(f"\n### Tuned models on this CPU (tuned at {threads[0]} threads; xgb, {args.trials} "
          f"trials per task; ms, median of {args.repeat} runs in alternating blocks, default "
          f"and tuned each against onnxruntime; ratios: medians of per-round ratios, "
          f"zoo.interleaved_paired)\n")  # fmt: skip
    print("| model | tasks | threads | default | tuned | onnxruntime | default / ort "
          "| tuned / ort | load | tune min |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, build in (("resnet18", resnet18), ("mobilenet_v2", mobilenet_v2)):
        model = build()
        data = model if isinstance(model, bytes) else model.SerializeToString()
        tasks = extract_tasks(data, "llvm")
        log = CACHE / f"{name}_cpu.jsonl"
        t0 = time.perf_counter()
        with LocalRunner(repeat=3, min_repeat_ms=20, threads=threads[0]) as runner:
            tune_tasks(tasks, args.trials, builder, runner, log=log, tuner="xgb",
                       confirm=args.confirm)  # fmt: skip
        minutes = (time.perf_counter() - t0) / 60
        default, tuned = tensorforge.compile(data), tensorforge.compile(data, tuning_log=log)
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        for t in threads:
            set_num_threads(t)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = t
            sess = ort.InferenceSession(data, opts)
            feed = {sess.get_inputs()[0].name: x}
            ort_run = lambda s=sess, f=feed: s.run(None, f)  # noqa: E731
            d_ms, _, d_ratio = interleaved_paired(
                lambda m=default, f=feed: m.run(f), ort_run, args.repeat
            )
            t_ms, ort_t, t_ratio = interleaved_paired(
                lambda m=tuned, f=feed: m.run(f), ort_run, args.repeat
            )
            print(f"| {name} | {len(tasks)} | {t} | {d_ms:.2f} | {t_ms:.2f} | {ort_t:.2f} "
                  f"| {d_ratio:.2f}x | {t_ratio:.2f}x | {os.getloadavg()[0]:.1f} "
                  f"| {minutes:.1f} |", flush=True)  # fmt: skip


# ---- rank fidelity: cycle model vs RTL -----------------------------------------------------------


def kendall_tau(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b (ties in either ranking do not count against it): 1.0 for equal
    rankings."""
    s = ta = tb = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            x, y = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
            s += x * y
            ta += x != 0
            tb += y != 0
    return float(s / np.sqrt(ta * tb)) if ta and tb else 1.0


def part_fidelity(args, builder) -> None:
    from tensorforge.runtime.device.vta.rtl import matched_timing

    cfg = HWConfig.preset("tiny")
    shapes = [(16, 8, 16, 3, 1), (8, 16, 32, 3, 2)]  # (h, c, o, k, stride)
    print("\n### Rank fidelity: cyclesim vs the RTL under Verilator (tiny config)\n")
    print("| layer | configs | tau (default timing) | tau (RTL RAM timing) | equal cycles |")
    print("|---|---|---|---|---|")
    runners = {
        "default": SimRunner("cyclesim"),
        "matched": SimRunner("cyclesim", device_options={"timing": matched_timing(cfg)}),
        "rtl": SimRunner("rtl", timeout=900, device_options={"simulator": "verilator"}),
    }
    rng = np.random.default_rng(0)
    for h, c, o, k, s in shapes:
        wl = {"hw": cfg.to_dict(), "n": 1, "ic": c, "h": h, "w": h, "oc": o, "kh": k, "kw": k,
              "stride_h": s, "stride_w": s, "pad_h": k // 2, "pad_w": k // 2, "pool_h": 1,
              "pool_w": 1, "residual": False}  # fmt: skip
        task = Task("vta.conv2d", wl, "vta -config=tiny")
        valid = [cf.index for cf in task.space]
        picks = [int(i) for i in rng.choice(valid, min(24, len(valid)), replace=False)]
        configs = [task.space.get(i).values for i in picks]
        costs = {k_: [r.cost for r in measure(task, configs, builder, run)]
                 for k_, run in runners.items()}  # fmt: skip
        equal = sum(a == b for a, b in zip(costs["matched"], costs["rtl"], strict=True))
        print(f"| {c}x{h}x{h} k{o} {k}x{k} s{s} | {len(picks)} "
              f"| {kendall_tau(costs['default'], costs['rtl']):.3f} "
              f"| {kendall_tau(costs['matched'], costs['rtl']):.3f} "
              f"| {equal}/{len(picks)} |")  # fmt: skip
    for r in runners.values():
        r.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", default="curves,vta,resnet")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--vta-layers", default=",".join(LAYERS))
    ap.add_argument("--cpu-layers", default="C6")
    ap.add_argument("--trials", type=int, default=64, help="resnet: trials per task")
    ap.add_argument("--vta-trials", type=int, default=150, help="vta: trials per ResNet task")
    ap.add_argument("--threads", default="2", help="resnet: tuned at the first, timed at each")
    ap.add_argument(
        "--confirm",
        type=int,
        default=3,
        help="resnet: best configs per task re-measured beside the default (0: off)",
    )
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--png", default="docs/img/tuning_curves.png")
    args = ap.parse_args(argv)
    print(describe())
    parts = set(args.part.split(","))
    builder = Builder(2, timeout=120)
    try:
        if "curves" in parts:
            part_curves(args, builder)
        if "vta" in parts:
            part_vta(args, builder)
        if "resnet" in parts:
            part_resnet(args, builder)
        if "fidelity" in parts:
            part_fidelity(args, builder)
    finally:
        builder.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
