"""``tensorforge tune``: tune a model's operators, or plot a tuning log.

tensorforge tune MODEL.onnx --target llvm --trials 200 --log tune.jsonl [--tuner xgb]
                 [--runner local|cyclesim|rtl|cluster|rpc] [--cluster tcp://host:8786|local]
                 [--rpc HOST:PORT[,...] --token T]
                 [--tasks 0,3] [--list] [--batch 8] [--parallel N] [--seed 0]
tensorforge tune --plot tune.jsonl -o curve.png
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any


def add_parser(sub: argparse._SubParsersAction, shape_arg: Any, calibrate_arg: Any) -> None:
    p = sub.add_parser(
        "tune",
        help="auto-tune a model's operators (XGBoost cost model + simulated annealing) into a "
        "log that compile/run --tuning-log apply; or --plot a log",
    )
    p.add_argument("model", nargs="?", help="the ONNX model to tune")
    p.add_argument("--target", default="llvm", help="llvm (default) or 'vta -config=...'")
    p.add_argument("--trials", type=int, default=200, help="trials per task (default: 200)")
    p.add_argument("--log", default="tune.jsonl", help="the JSON-lines log (appended; resumes)")
    p.add_argument("--tuner", choices=("xgb", "random", "grid", "ga"), default="xgb",
                   help="the search (default: xgb)")  # fmt: skip
    p.add_argument(
        "--runner",
        choices=("local", "cyclesim", "rtl", "cluster", "rpc"),
        default=None,
        help="where configs run (default: local; cyclesim for vta)",
    )
    p.add_argument(
        "--rpc",
        metavar="HOST:PORT[,...]",
        help="RPC servers to measure on (`tensorforge rpc serve`; a pool of boards as "
        "several addresses); implies --runner rpc; token: --token or TF_RPC_TOKEN",
    )
    p.add_argument("--token", default=None, help="--rpc: the servers' token")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="a Dask scheduler (tcp://host:8786), or 'local' to start a LocalCluster;"
                   " implies --runner cluster")  # fmt: skip
    p.add_argument("--tasks", help="tune only these task numbers (as --list shows), e.g. 0,3")
    p.add_argument("--list", action="store_true", help="list the model's tasks and exit")
    p.add_argument("--batch", type=int, default=8, help="configs per measurement batch")
    p.add_argument("--parallel", type=int, default=None, help="build processes (default: CPUs)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per build and per run")
    p.add_argument("--seed", type=int, default=0, help="the tuner's random seed")
    p.add_argument("--early-stopping", type=int, default=None, metavar="N",
                   help="stop a task after N trials without improvement")  # fmt: skip
    p.add_argument("--confirm", type=int, default=None, metavar="N",
                   help="re-measure each task's N best configs beside its default and keep "
                        "the best of those (wall-time tasks; for a shared machine)")  # fmt: skip
    p.add_argument("--plot", metavar="LOG", help="draw the tuning curves of LOG instead")
    p.add_argument("-o", "--output", default="tune.png", help="--plot: the PNG to write")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    calibrate_arg(p, "calibration inputs for a vta target and a float model")
    shape_arg(p)


def run(args: argparse.Namespace, load_arrays: Any, load_shapes: Any) -> int:
    if args.plot:
        if args.model:
            raise ValueError(f"--plot draws a log and takes no MODEL, not {args.model!r}")
        return _plot(args)
    if not args.model:
        raise ValueError("tune needs a MODEL (or --plot LOG)")
    _check_options(args)
    picks = _parse_tasks(args.tasks)
    from .compiler.autotune.driver import extract_tasks, tune_tasks
    from .compiler.target import Target

    target = Target.parse(args.target)
    if target.kind not in ("llvm", "vta", "opencl", "cuda"):
        raise ValueError(f"tune targets must be llvm, vta, opencl or cuda, not {args.target!r}")
    names = _input_names(args.model)
    calibration = load_arrays(names, args.calibrate, "--calibrate") or None
    shapes = load_shapes(names, args.shape) or None
    tasks = extract_tasks(args.model, str(target), shapes, calibration)
    if args.list or not tasks:
        _print_tasks(tasks)
        if not tasks:
            print(f"{args.model}: no tunable operators for target {str(target)!r}")
        return 0
    tasks = _select(tasks, picks)
    runner_name = "cluster" if args.cluster is not None else args.runner
    runner_name = "rpc" if args.rpc else runner_name
    if runner_name == "rpc" and not args.rpc:
        raise ValueError("--runner rpc needs --rpc HOST:PORT (a `tensorforge rpc serve` server)")
    runner_name = runner_name or ("cyclesim" if target.kind == "vta" else "local")
    if target.kind != "vta" and runner_name in ("cyclesim", "rtl"):
        raise ValueError(
            f"--runner {runner_name} measures accelerator tasks, not {target.kind} ones"
        )
    if target.kind == "vta" and runner_name == "local":
        raise ValueError("--runner local times CPU code; accelerator tasks need cyclesim or rtl")
    if target.kind in ("opencl", "cuda") and runner_name == "local":
        from .runtime.device.gpu import open_device

        open_device(target.kind)  # none here: a GPUError naming what is missing, before any trial
    try:
        with _measurers(runner_name, args, target.kind) as (builder, runner):
            summaries = tune_tasks(tasks, args.trials, builder, runner, log=args.log,
                                   tuner=args.tuner, batch_size=args.batch, seed=args.seed,
                                   early_stopping=args.early_stopping,
                                   progress=not args.no_progress,
                                   confirm=args.confirm or 0)  # fmt: skip
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished trial is in {args.log}; run again to resume")
        return 130
    _print_summary(summaries)
    print(f"log: {args.log}; compile with: tensorforge compile {args.model} "
          f"--target '{target}' --tuning-log {args.log} -o model.tfm")  # fmt: skip
    return 0


@contextlib.contextmanager
def _measurers(name: str, args: argparse.Namespace, kind: str) -> Iterator[tuple[Any, Any]]:
    """(builder, runner): local worker pools (runs on this machine or RPC servers), or both on a
    Dask cluster."""
    from .compiler.autotune.measure import Builder, make_runner

    if name != "cluster":
        options: dict[str, Any] = {"timeout": args.timeout}
        if name == "rtl":
            options["device_options"] = {"simulator": "verilator"}
        if name == "rpc":  # the servers have their own run time-outs
            options = {"addresses": args.rpc, "token": args.token,
                       "unit": "cycles" if kind == "vta" else "s"}  # fmt: skip
        builder = Builder(args.parallel, timeout=args.timeout)
        try:
            with make_runner(name, **options) as runner:
                yield builder, runner
        finally:
            builder.close()
        return
    from .compiler.autotune.cluster import ClusterBuilder, local_cluster

    backend = "cyclesim" if kind == "vta" else "local"
    with contextlib.ExitStack() as stack:
        address = args.cluster
        if not address or address == "local":
            address = stack.enter_context(local_cluster())
        runner = stack.enter_context(make_runner("cluster", address=address, backend=backend,
                                                 timeout=args.timeout))  # fmt: skip
        yield ClusterBuilder(runner.client, timeout=args.timeout), runner


def _input_names(path: str) -> list[str]:
    import onnx

    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as e:  # noqa: BLE001  (protobuf raises its own types)
        raise ValueError(f"{path}: not an ONNX model: {e}") from None
    weights = {t.name for t in proto.graph.initializer}
    return [v.name for v in proto.graph.input if v.name not in weights]


def _check_options(args: argparse.Namespace) -> None:
    """Reject numbers that would tune nothing, wait forever or fail every trial, at once."""
    import math

    counts = {"--trials": args.trials, "--batch": args.batch, "--parallel": args.parallel,
              "--early-stopping": args.early_stopping, "--confirm": args.confirm}  # fmt: skip
    for flag, value in counts.items():
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, not {value}")
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise ValueError(
            f"--timeout must be a positive, finite number of seconds, not {args.timeout:g}"
        )
    if args.cluster is not None and not args.cluster.strip():
        raise ValueError("--cluster needs a scheduler address (tcp://host:8786) or 'local'")


def _parse_tasks(spec: str | None) -> list[int] | None:
    """--tasks 0,3 -> [0, 3] (None: every task)."""
    if spec is None:
        return None
    try:
        picks = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--tasks must be task numbers like 0,3, not {spec!r}") from None
    if not picks:
        raise ValueError(f"--tasks must name at least one task number, like 0,3, not {spec!r}")
    repeated = sorted({k for k in picks if picks.count(k) > 1})
    if repeated:
        raise ValueError(f"--tasks names tasks {repeated} more than once")
    return picks


def _select(tasks: list[Any], picks: list[int] | None) -> list[Any]:
    if picks is None:
        return tasks
    bad = [k for k in picks if not 0 <= k < len(tasks)]
    if bad:
        raise ValueError(f"--tasks {bad} out of range: the model has tasks 0..{len(tasks) - 1}")
    return [tasks[k] for k in picks]


def _print_tasks(tasks: list[Any]) -> None:
    print(f"{'#':>3}  {'task':<48}{'runs':>5}{'configs':>9}")
    for k, t in enumerate(tasks):
        print(f"{k:>3}  {t.describe():<48}{t.weight:>5}{len(t.space):>9}")


def _fmt(cost: float | None, unit: str) -> str:
    if cost is None:
        return "-"
    return f"{cost:,.0f}" if unit == "cycles" else f"{cost * 1e3:.4f} ms"


def _print_summary(summaries: list[Any]) -> None:
    print(f"\n{'task':<48}{'runs':>5}{'trials':>7}{'failed':>7}{'default':>16}{'best':>16}"
          f"{'speedup':>9}")  # fmt: skip
    for s in summaries:
        unit = s.task.unit
        speed = (f"{s.default_cost / s.best_cost:.2f}x"
                 if s.default_cost and s.best_cost else "-")  # fmt: skip
        default, best = _fmt(s.default_cost, unit), _fmt(s.best_cost, unit)
        print(f"{s.task.describe():<48}{s.task.weight:>5}{s.trials:>7}{s.failures:>7}"
              f"{default:>16}{best:>16}{speed:>9}")  # fmt: skip


def _plot(args: argparse.Namespace) -> int:
    from .compiler.autotune.log import load_records
    from .compiler.autotune.plot import plot_log

    records = load_records(args.plot)
    if not any(not r.get("error") and r.get("cost") is not None for r in records):
        raise ValueError(f"{args.plot}: no successful trial to plot (of {len(records)} trials)")
    path = plot_log(records, args.output, title=f"tuning curves: {args.plot}")
    print(f"wrote {path}")
    return 0
