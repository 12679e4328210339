"""Measuring configs: build in a pool of worker processes, then run on a runner.

Both steps run outside the tuner's process, so a config whose code crashes, hangs or exhausts
memory is a failed trial with its reason and tuning goes on. A run first checks the output
against the artifact's oracle: a config that computes wrong numbers is a failed trial
(`wrong_answer`), never a winner.

Runners share one interface (`Runner.run(artifacts) -> [RunOutcome]`):

- `LocalRunner`: this CPU, wall time (seconds), one run at a time;
- `SimRunner`: the accelerator on a device backend: `cyclesim` (the cycle-accurate model,
  deterministic cycles, several in parallel) or `rtl` (the exported Verilog under Verilator or
  Icarus, for spot checks of the cycle model);
- `ClusterRunner` (`compiler.autotune.cluster`): the same runs fanned out over a Dask cluster.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .pool import JobResult, WorkerPool
from .space import SpaceError
from .task import Artifact, Task

#: error kinds of a failed trial, in the order a config meets them
ERRORS = ("invalid", "build_error", "build_timeout", "build_crash", "run_error", "run_timeout",
          "run_crash", "wrong_answer")  # fmt: skip


class WrongAnswer(AssertionError):
    """A config's output differs from the oracle's."""


@dataclass
class RunOutcome:
    """What a runner reports for one artifact: costs (seconds or cycles) or an error."""

    costs: list[float] = field(default_factory=list)
    error: str = ""
    message: str = ""
    seconds: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class MeasureResult:
    """One trial: the config's knob values, its cost (the median of `costs`; None when the
    trial failed), the error kind (one of `ERRORS`, "" on success) and its message."""

    values: dict[str, Any]
    cost: float | None
    costs: list[float]
    error: str = ""
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error == ""


# ---- the worker-side jobs (module level: they are sent to worker processes) --------------------


def build_job(task: dict[str, Any], values: dict[str, Any], seed: int) -> Artifact:
    """Build one config (in a worker process)."""
    return Task.from_json(task).build(values, seed)


def check_output(got: np.ndarray, artifact: Artifact) -> None:
    """Raise WrongAnswer unless `got` matches the artifact's expected output."""
    want = artifact.expected
    if got.shape != want.shape:
        raise WrongAnswer(f"output shape {got.shape} differs from the oracle's {want.shape}")
    if artifact.rtol == 0 and artifact.atol == 0:
        bad = got != want
    else:
        bad = ~np.isclose(got, want, rtol=artifact.rtol, atol=artifact.atol)
        bad |= ~np.isfinite(got)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise WrongAnswer(f"{int(bad.sum())} of {got.size} outputs differ from the oracle's, "
                          f"first at {where}: {got[where]} != {want[where]}")  # fmt: skip


#: the run options a runner passes to `run_job` (an RPC server takes them from its clients):
#: option -> (what it must be, check)
RUN_OPTIONS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "number": ("an int in [0, 1000000] (0: enough calls to last min_repeat_ms)",
               lambda v: _is_int(v) and 0 <= v <= 1_000_000),
    "repeat": ("an int in [0, 1000]", lambda v: _is_int(v) and 0 <= v <= 1000),
    "min_repeat_ms": ("a number of milliseconds in [0, 60000]",
                      lambda v: _is_number(v) and 0 <= v <= 60_000),
    "backend": ("a device backend's name", lambda v: isinstance(v, str)),
    "device_options": ("a JSON object of device options",
                       lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v)),
}  # fmt: skip


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def check_run_options(options: Any) -> dict[str, Any]:
    """`options` when it is a dict whose known run options (`RUN_OPTIONS`) have the right types
    and ranges (others are left alone), else a ValueError naming the option and its value.

    Example:
        >>> check_run_options({"repeat": -1})
        Traceback (most recent call last):
        ...
        ValueError: run option 'repeat' must be an int in [0, 1000], not -1
    """
    if not isinstance(options, dict):
        raise ValueError(f"run options must be a JSON object, not {type(options).__name__}")
    for key, (what, ok) in RUN_OPTIONS.items():
        if key in options and not ok(options[key]):
            raise ValueError(f"run option {key!r} must be {what}, not {options[key]!r:.80}")
    return options


def run_job(artifact: Artifact, options: dict[str, Any]) -> RunOutcome:
    """Run one artifact (in a worker process): check it, then time it or count its cycles."""
    check_run_options(options)
    if artifact.kind == "llvm":
        return _run_llvm(artifact, options)
    if artifact.kind == "vta":
        return _run_vta(artifact, options)
    if artifact.kind == "gpu":
        return _run_gpu(artifact, options)
    raise ValueError(f"artifact kind must be llvm, vta or gpu, not {artifact.kind!r}")


def _run_llvm(artifact: Artifact, options: dict[str, Any]) -> RunOutcome:
    from ...runtime.device.cpu import CPUFunction, ParamSpec
    from ...runtime.device.cpu.loader import ObjectLoader

    loader = ObjectLoader([artifact.payload], [artifact.symbol])
    specs = [ParamSpec(n, d, tuple(s)) for n, d, s in artifact.params]
    fn = CPUFunction(artifact.symbol, loader.address(artifact.symbol), specs, loader)
    out = np.zeros(specs[-1].shape, specs[-1].dtype)
    args = [*artifact.inputs, out]
    fn(*args)
    check_output(out, artifact)
    # Timed calls skip the argument checks (done above): the raw entry point and pointers.
    call, ptrs = fn._cfunc, [a.ctypes.data for a in args]
    number, repeat = int(options.get("number", 0)), int(options.get("repeat", 3))
    min_s = float(options.get("min_repeat_ms", 50)) / 1000
    if number < 1:  # enough calls per repeat to last min_repeat_ms
        t0 = time.perf_counter()
        call(*ptrs)
        once = max(time.perf_counter() - t0, 1e-7)
        number = max(1, min(100_000, math.ceil(min_s / once)))
    costs = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        for _ in range(number):
            call(*ptrs)
        costs.append((time.perf_counter() - t0) / number)
    return RunOutcome(costs, stats={"number": number})


def _run_gpu(artifact: Artifact, options: dict[str, Any]) -> RunOutcome:
    """A GPU program on this machine's device of its dialect: checked once, then the kernels
    alone timed on the device (arguments uploaded once)."""
    import json

    from ...runtime.device.gpu import GPUFunction

    fn = GPUFunction(json.loads(artifact.payload), **dict(options.get("device_options", {})))
    _, dtype, shape = artifact.params[-1]
    out = np.zeros(shape, dtype)
    args = [*artifact.inputs, out]
    fn(*args)
    check_output(out, artifact)
    number, repeat = int(options.get("number", 0)), int(options.get("repeat", 3))
    if number < 1:  # enough calls per repeat to last min_repeat_ms
        once = max(min(fn.measure(args, 1, 1)), 1e-7)
        number = max(
            1, min(10_000, math.ceil(float(options.get("min_repeat_ms", 50)) / 1e3 / once))
        )
    return RunOutcome(fn.measure(args, number, repeat), stats={"number": number})


def _run_vta(artifact: Artifact, options: dict[str, Any]) -> RunOutcome:
    from ...hw.config import HWConfig
    from ...runtime.device.vta import run_image
    from ...runtime.device.vta.layout import unpack_nchw
    from ...runtime.program import ProgramImage

    cfg = HWConfig.from_dict(dict(artifact.hw or {}))
    image = ProgramImage.from_bytes(artifact.payload, "<tuning artifact>")
    backend = str(options.get("backend", "cyclesim"))
    device_options = dict(options.get("device_options", {}))
    outputs, result = run_image(image, artifact.inputs, backend, **device_options)
    n, c = artifact.expected.shape[:2]
    got = unpack_nchw(cfg, outputs[artifact.output], n, c).reshape(artifact.expected.shape)
    check_output(got, artifact)
    if result.cycles is None:
        raise RuntimeError(f"the {backend} backend reports no cycle count")
    return RunOutcome([float(result.cycles)], stats=dict(result.stats))


def outcome_of(job: JobResult, stage: str) -> RunOutcome:
    """A worker pool's job result as a run outcome (`stage`: "build" or "run")."""
    if job.ok:
        res = job.value if isinstance(job.value, RunOutcome) else RunOutcome()
        res.seconds = job.seconds
        return res
    kind = {"error": "error", "crash": "crash", "timeout": "timeout"}[job.status]
    message = job.message
    if stage == "run" and job.status == "error" and message.startswith("WrongAnswer"):
        return RunOutcome(error="wrong_answer", message=message.splitlines()[0],
                          seconds=job.seconds)  # fmt: skip
    return RunOutcome(error=f"{stage}_{kind}", message=message.strip(), seconds=job.seconds)


# ---- builders and runners ------------------------------------------------------------------------


OnOutcome = Callable[[int, RunOutcome], None]


def check_seconds(name: str, value: Any) -> float:
    """`value` as float seconds when it is a positive finite number, else a ValueError naming
    `name` (a time-out of 0 would fail every trial, a NaN one never end any)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, not {value!r}")
    return float(value)


def check_count(name: str, value: Any, low: int = 1, none: str = "") -> int | None:
    """`value` when it is an int of at least `low` (or None when `none` says what None means),
    else a ValueError naming `name`."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        also = f" (or None: {none})" if none else ""
        raise ValueError(f"{name} must be an int of at least {low}{also}, not {value!r}")
    return value


def run_in_pool(pool: WorkerPool, artifacts: Sequence[Artifact], options: dict[str, Any],
                timeout: float, on_outcome: OnOutcome | None) -> list[RunOutcome]:  # fmt: skip
    """`run_job` of each artifact on a worker pool, as outcomes."""
    outcomes: dict[int, RunOutcome] = {}

    def ended(k: int, job: JobResult) -> None:
        outcomes[k] = outcome_of(job, "run")
        if on_outcome is not None:
            on_outcome(k, outcomes[k])

    pool.map(run_job, [(a, options) for a in artifacts], timeout, ended)
    return [outcomes[k] for k in range(len(artifacts))]


class Builder:
    """Builds configs of a task in `n_parallel` worker processes, each within `timeout` s."""

    def __init__(self, n_parallel: int | None = None, timeout: float = 60.0) -> None:
        n_parallel = check_count("Builder n_parallel", n_parallel, none="up to 4, one per CPU")
        self.n_parallel = n_parallel or max(1, min(4, os.cpu_count() or 1))
        self.timeout = check_seconds("Builder timeout", timeout)
        self._pool = WorkerPool(self.n_parallel)

    def build(
        self, task: Task, configs: Sequence[dict[str, Any]], seed: int = 0
    ) -> list[tuple[Artifact | None, RunOutcome]]:
        """(artifact, outcome) per config; the outcome carries the error of a failed build."""
        jobs = [(task.to_json(), dict(v), seed) for v in configs]
        out = []
        for job in self._pool.map(build_job, jobs, self.timeout):
            out.append((job.value if job.ok else None, outcome_of(job, "build")))
        return out

    def close(self) -> None:
        self._pool.close()


class Runner:
    """Runs artifacts and reports their costs; subclasses say where."""

    name = "runner"
    unit = "s"

    def run(
        self, artifacts: Sequence[Artifact], on_outcome: OnOutcome | None = None
    ) -> list[RunOutcome]:
        """One outcome per artifact, in order; `on_outcome(k, outcome)` as each one ends (so
        an interrupt keeps what was measured)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release worker processes or connections."""

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PoolRunner(Runner):
    """A runner whose runs go to a pool of local worker processes (`run_job` with `options`)."""

    def __init__(self, n: int, options: dict[str, Any], timeout: float,
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        self.options = options
        self.timeout = check_seconds(f"{self.name} runner timeout", timeout)
        self._pool = WorkerPool(n, env)

    def run(
        self, artifacts: Sequence[Artifact], on_outcome: OnOutcome | None = None
    ) -> list[RunOutcome]:
        return run_in_pool(self._pool, artifacts, self.options, self.timeout, on_outcome)

    def close(self) -> None:
        self._pool.close()


class LocalRunner(PoolRunner):
    """Wall time on this CPU: `repeat` timings of `number` calls each (`number` 0: as many as
    last `min_repeat_ms`), one artifact at a time in a worker process.

    Args:
        threads: threads of the native pool for parallel loops (default: all CPUs).
    """

    name, unit = "local", "s"

    def __init__(self, number: int = 0, repeat: int = 3, min_repeat_ms: float = 50,
                 timeout: float = 30.0, threads: int | None = None) -> None:  # fmt: skip
        check_count("LocalRunner number", number, low=0)
        check_count("LocalRunner repeat", repeat)
        if (
            isinstance(min_repeat_ms, bool)
            or not isinstance(min_repeat_ms, int | float)
            or not (0 <= min_repeat_ms < math.inf)
        ):
            raise ValueError(f"LocalRunner min_repeat_ms must be a number >= 0, not "
                             f"{min_repeat_ms!r}")  # fmt: skip
        threads = check_count("LocalRunner threads", threads, none="every CPU")
        env = {"TF_NUM_THREADS": str(threads)} if threads else {}
        options = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms}
        super().__init__(1, options, timeout, env)


class SimRunner(PoolRunner):
    """Cycles of the accelerator on a device backend: "cyclesim" (the cycle-accurate model;
    runs in parallel, deterministic) or "rtl" (the exported Verilog; `device_options` such as
    ``{"simulator": "verilator"}`` go to the backend)."""

    unit = "cycles"

    def __init__(
        self,
        backend: str = "cyclesim",
        n_parallel: int | None = None,
        timeout: float = 120.0,
        device_options: dict[str, Any] | None = None,
    ) -> None:
        if backend not in ("cyclesim", "rtl"):
            raise ValueError(f"SimRunner backend must be cyclesim or rtl, not {backend!r}")
        self.name = backend
        options = {"backend": backend, "device_options": dict(device_options or {})}
        n_parallel = check_count("SimRunner n_parallel", n_parallel, none="up to 4 for cyclesim")
        n = n_parallel or (max(1, min(4, os.cpu_count() or 1)) if backend == "cyclesim" else 1)
        super().__init__(n, options, timeout)


RUNNERS = ("local", "cyclesim", "rtl", "cluster", "rpc")


def make_runner(name: str, **options: Any) -> Runner:
    """A runner by name: local, cyclesim, rtl, cluster (`address=` a Dask scheduler), or rpc
    (`addresses=` RPC servers)."""
    if name == "local":
        return LocalRunner(**options)
    if name in ("cyclesim", "rtl"):
        return SimRunner(name, **options)
    if name == "cluster":
        from .cluster import ClusterRunner

        return ClusterRunner(**options)
    if name == "rpc":
        from .rpc import RPCRunner

        return RPCRunner(**options)
    raise ValueError(f"runner must be one of {', '.join(RUNNERS)}, not {name!r}")


def measure(
    task: Task,
    configs: Sequence[dict[str, Any]],
    builder: Builder,
    runner: Runner,
    seed: int = 0,
    on_result: Callable[[MeasureResult], None] | None = None,
) -> list[MeasureResult]:
    """Build and run each config of `task`: one `MeasureResult` per config, in order.

    Every config must be a point of the task's space (its knob values, checked before anything
    is built); a point that its space's constraint rejects is not built but reported as an
    `invalid` trial, as a build or run that fails is a failed trial. Results carry each point's
    canonical values (e.g. ``True`` for a bool knob given as 1).

    Raises:
        SpaceError: a config is not a point of the space (an unknown or missing knob, a value
            not among its choices), naming the config's position and the knob.
        ValueError: when the runner's cost unit is not the task's (e.g. timing accelerator
            programs on a CPU runner).
    """
    if runner.unit != task.unit:
        raise ValueError(f"runner {runner.name!r} measures {runner.unit}, but task "
                         f"{task.template} is costed in {task.unit}")  # fmt: skip
    points = []
    for k, values in enumerate(configs):
        try:
            points.append(task.space.from_values(values).values)
        except SpaceError as exc:
            raise SpaceError(f"config {k} of the {len(configs)} to measure: {exc}") from exc
    configs = points
    results: list[MeasureResult | None] = [None] * len(configs)
    todo = []
    for k, values in enumerate(configs):
        reason = task.space.why_invalid(values)
        if reason:
            results[k] = MeasureResult(dict(values), None, [], "invalid", reason)
        else:
            todo.append(k)
    built = builder.build(task, [configs[k] for k in todo], seed) if todo else []
    runnable = [(k, art, out) for k, (art, out) in zip(todo, built, strict=True) if art]
    for k, (art, out) in zip(todo, built, strict=True):
        if art is None:
            results[k] = MeasureResult(dict(configs[k]), None, [], out.error, out.message,
                                       build_s=out.seconds)  # fmt: skip

    def finish(j: int, r: RunOutcome) -> None:
        k, _, b = runnable[j]
        cost = statistics.median(r.costs) if not r.error and r.costs else None
        error = r.error or ("" if cost is not None else "run_error")
        results[k] = MeasureResult(dict(configs[k]), cost, list(r.costs), error, r.message,
                                   b.seconds, r.seconds, r.stats)  # fmt: skip
        if on_result:
            on_result(results[k])

    for r in results:  # invalid configs and failed builds are reported first
        if r is not None and on_result:
            on_result(r)
    if runnable:
        runner.run([art for _, art, _ in runnable], finish)
    return [r for r in results if r is not None]
