"""Measuring on a Dask cluster: builds and runs fanned out over many machines.

`ClusterRunner` is a `Runner` whose runs go to the workers of a Dask distributed cluster, and
`ClusterBuilder` a `Builder` whose builds do, so that tuning outgrows one machine without
changing anything else: the jobs are the same module-level `run_job` and `build_job` that the
local worker pools run (`compiler.autotune.measure`), and their failures become the same failed
trials (`run_error`, `wrong_answer`, `run_timeout`, `run_crash`, and `build_*` for builds).

Example (a scheduler started with ``dask scheduler`` and workers with ``dask worker ADDRESS
--nthreads 1``, each with the same version of this package and ``tensorforge[cluster]``)::

    with ClusterRunner("tcp://head:8786", backend="cyclesim") as runner:
        builder = ClusterBuilder(runner.client)  # builds on the workers too, one connection
        results = measure(task, configs, builder, runner)

`local_cluster()` starts a cluster of worker processes on this machine and gives its address
(``tensorforge tune --cluster local`` uses it).

How the jobs run:

- at most as many jobs are in flight as the cluster has worker threads, so a job starts when it
  is submitted and its `timeout` counts its own run, not its wait in a queue;
- a job past its time-out is cancelled and, because Dask cannot stop a running thread, the
  worker running it is restarted through its nanny (workers started without a nanny are left
  alone and keep that thread busy until the job returns);
- a job whose worker process dies (a segfault in generated code, the out-of-memory killer) is
  retried by Dask on another worker up to the scheduler's ``allowed-failures`` times (3 by
  default; `local_cluster` sets 0) and then fails with `KilledWorker`: a `run_crash` trial,
  after which the runner goes on with the other jobs;
- the cluster going away (the scheduler stops, or cancels the jobs) raises `ClusterError`
  rather than recording trials that failed through no fault of their configs.

For wall-time measurements (``backend="local"``) give each worker one thread and a machine (or
set of cores, e.g. ``TF_NUM_THREADS`` in the workers' environment) of its own: jobs that share
cores disturb each other's timings. Cycle counts (``cyclesim``, ``rtl``) are not disturbed.

Security: Dask sends jobs and results between the processes with pickle, so anyone who can
reach the scheduler can run code on the workers and the workers' results can run code here.
Use a cluster you trust, on a network you trust (or Dask's TLS security), like any Dask cluster.

Needs the ``distributed`` package: ``pip install 'tensorforge[cluster]'``.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
import traceback
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

from .measure import (
    Builder,
    OnOutcome,
    Runner,
    RunOutcome,
    check_seconds,
    run_in_pool,
)
from .pool import JobResult
from .task import Artifact

#: the backends a cluster runner measures on, and the unit of each one's costs
BACKENDS = {"cyclesim": "cycles", "rtl": "cycles", "local": "s"}

#: the default time-out of one job per backend (as the local runners)
DEFAULT_TIMEOUT = {"cyclesim": 120.0, "rtl": 120.0, "local": 30.0}


class ClusterError(RuntimeError):
    """The cluster cannot be used: `distributed` is missing, the scheduler does not answer or has
    no workers, or it went away during a measurement."""


def _distributed() -> ModuleType:
    """The `distributed` package, imported on first use."""
    from tensorforge.extras import require

    return require("distributed", "measuring on a Dask cluster", ClusterError)


def _close_failed_client(exc: BaseException, client_type: type) -> None:
    """Close the client a failed `Client(...)` left half made (in its constructor's frame):
    left to the garbage collector, it would wait at exit for its stopped event loop and then
    print a traceback."""
    tb = exc.__traceback__
    while tb is not None:
        client = tb.tb_frame.f_locals.get("self")
        if isinstance(client, client_type):
            with contextlib.suppress(Exception):
                client.close(timeout=1)
            return
        tb = tb.tb_next


class _Cluster:
    """A connection to a Dask scheduler and the fan-out loop shared by runners and builders.

    Args:
        address: the scheduler's address, a connected synchronous `distributed.Client` (left
            open on close), or None for the current client of this process or, without one,
            Dask's configured ``scheduler-address`` (``DASK_SCHEDULER_ADDRESS``).
        connect_timeout: seconds to wait for the scheduler to answer and for a first worker.
    """

    def __init__(self, address: Any, connect_timeout: float) -> None:
        distributed = _distributed()
        self.connect_timeout = check_seconds("connect_timeout", connect_timeout)
        self._owned = False
        if address is None:
            try:
                address = distributed.Client.current()
            except ValueError:
                import dask

                address = dask.config.get("scheduler-address", None)
            if address is None:
                raise ClusterError(
                    "no Dask cluster to measure on: pass the scheduler's address (e.g. "
                    "tcp://host:8786), a distributed.Client, or start one with local_cluster()"
                )
        if isinstance(address, distributed.Client):
            if address.asynchronous:
                raise ValueError("ClusterRunner and ClusterBuilder need a synchronous Client")
            self.client = address
            self.address = str(address.scheduler.address if address.scheduler else "")
            return
        if not isinstance(address, str):
            raise TypeError(
                f"address must be a scheduler address, a distributed.Client or None, "
                f"not {type(address).__name__}"
            )
        self.address = address
        t0 = time.perf_counter()
        try:
            self.client = distributed.Client(
                address, timeout=self.connect_timeout, set_as_default=False
            )
        except Exception as exc:  # noqa: BLE001 - OSError, ValueError, a non-Dask server's bytes
            _close_failed_client(exc, distributed.Client)
            if time.perf_counter() - t0 >= self.connect_timeout:
                what = f"the Dask scheduler at {address} does not answer within "
                what += f"{self.connect_timeout:g} s"
            else:
                what = f"cannot reach a Dask scheduler at {address}"
            raise ClusterError(
                f"{what} ({type(exc).__name__}: {exc}); give its address as tcp://host:8786, or "
                "'local'"
            ) from exc
        self._owned = True

    def close(self) -> None:
        """Close the connection, unless it is a client the caller passed in."""
        if self._owned:
            self._owned = False
            with contextlib.suppress(Exception):
                self.client.close(timeout=self.connect_timeout)

    def threads(self) -> int:
        """Worker threads in the cluster now: how many jobs may run at once."""
        try:
            return sum(int(n) for n in self.client.nthreads().values())
        except Exception as exc:  # noqa: BLE001 - any failure of the scheduler call
            raise ClusterError(f"the Dask scheduler at {self.address} went away: {exc}") from exc

    def wait_for_threads(self) -> int:
        """The cluster's worker threads, waiting up to `connect_timeout` s for a first worker."""
        n = self.threads()
        if n:
            return n
        try:
            self.client.wait_for_workers(1, timeout=self.connect_timeout)
        except Exception as exc:  # noqa: BLE001 - TimeoutError, or the scheduler went away
            raise ClusterError(
                f"the Dask scheduler at {self.address} has no workers (waited "
                f"{self.connect_timeout:g} s); start some with: dask worker {self.address}"
            ) from exc
        return max(1, self.threads())

    def map(
        self,
        fn: Callable[..., Any],
        jobs: Sequence[tuple[Any, ...]],
        timeout: float,
        on_result: Callable[[int, JobResult], None] | None = None,
    ) -> list[JobResult]:
        """Run `fn(*args)` for each args tuple on the workers; results in job order, as the
        local `WorkerPool.map` gives them ("ok", "error", "crash" or "timeout").

        `on_result(k, result)` is called as each job ends. A KeyboardInterrupt (or any error
        here) cancels the jobs still in flight and propagates.
        """
        results: list[JobResult | None] = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        running: dict[Any, tuple[int, Any, float]] = {}  # key -> (job, future, submitted at)
        ended: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def finish(k: int, res: JobResult) -> None:
            results[k] = res
            if on_result:
                on_result(k, res)

        try:
            while pending or running:
                if pending:
                    free = (self.threads() if running else self.wait_for_threads()) - len(running)
                    for _ in range(min(free, len(pending))):
                        k = pending.popleft()
                        fut = self.client.submit(fn, *jobs[k], pure=False)
                        running[fut.key] = (k, fut, time.perf_counter())
                        fut.add_done_callback(ended.put)
                if not running:  # every worker is busy with something else: try again soon
                    time.sleep(0.05)
                    continue
                wait_s = min(t0 + timeout for _, _, t0 in running.values()) - time.perf_counter()
                with contextlib.suppress(queue.Empty):
                    fut = ended.get(timeout=max(0.0, wait_s))
                    while True:  # everything that has ended by now
                        if fut.key in running and running[fut.key][1] is fut:
                            k, _, t0 = running.pop(fut.key)
                            finish(k, self._result(fut, time.perf_counter() - t0, timeout))
                        fut = ended.get_nowait()
                now = time.perf_counter()
                late = [key for key, (_, f, t0) in running.items() if now >= t0 + timeout]
                for key in late:
                    k, fut, t0 = running.pop(key)
                    self._abandon(fut)
                    message = f"no result within {timeout:g} s"
                    finish(k, JobResult("timeout", message=message, seconds=now - t0))
        except BaseException:
            for _, fut, _ in running.values():
                with contextlib.suppress(Exception):
                    fut.cancel()
            raise
        return [r for r in results if r is not None]

    def _result(self, fut: Any, seconds: float, timeout: float) -> JobResult:
        """The job result of a future that has ended."""
        distributed = _distributed()
        status = fut.status
        if status == "finished":
            try:
                value = fut.result(timeout=max(timeout, self.connect_timeout))
            except Exception as exc:  # noqa: BLE001 - the result could not be fetched
                message = f"the result could not be fetched: {type(exc).__name__}: {exc}"
                return JobResult("error", message=message, seconds=seconds)
            return JobResult("ok", value, seconds=seconds)
        if status == "cancelled":  # not by us: the scheduler restarted or went away
            raise ClusterError(
                f"the Dask cluster at {self.address} cancelled the jobs (did the scheduler "
                "restart or stop?); the jobs still in flight were not recorded"
            )
        exc = fut.exception()
        if isinstance(exc, distributed.KilledWorker):
            worker = getattr(getattr(exc, "last_worker", None), "address", "?")
            message = (
                "the Dask worker process running it died (a segfault, an abort or the "
                f"out-of-memory killer; last on {worker})"
            )
            return JobResult("crash", message=message, seconds=seconds)
        tb = "".join(traceback.format_tb(fut.traceback(), limit=-6))
        return JobResult("error", message=f"{type(exc).__name__}: {exc}\n{tb}", seconds=seconds)

    def _abandon(self, fut: Any) -> None:
        """Cancel a late job and restart the worker running it, whose thread Dask cannot stop."""
        worker = None
        with contextlib.suppress(Exception):
            busy = self.client.processing()
            worker = next((w for w, keys in busy.items() if fut.key in keys), None)
        with contextlib.suppress(Exception):
            fut.cancel()
        if worker is None:
            return
        try:
            info = self.client.scheduler_info(n_workers=-1)["workers"].get(worker, {})
            if not info.get("nanny"):
                message = (
                    f"Dask worker {worker} has no nanny to restart it: a job past its "
                    "time-out keeps one of its threads busy"
                )
                warnings.warn(message, stacklevel=3)
                return
            restart_s = max(30.0, self.connect_timeout)
            self.client.restart_workers([worker], timeout=restart_s, raise_for_error=False)
        except Exception as exc:  # noqa: BLE001 - best effort: the job's outcome stands
            warnings.warn(f"could not restart Dask worker {worker}: {exc}", stacklevel=3)


class ClusterRunner(Runner):
    """Runs artifacts on the workers of a Dask cluster: cycles of the accelerator's models
    (``backend="cyclesim"`` or ``"rtl"``) or wall time on the workers' CPUs (``"local"``).

    Args:
        address: the scheduler's address (``tcp://host:8786``), a connected
            `distributed.Client` (not closed by `close`), or None for the current client of
            this process or Dask's configured ``scheduler-address``.
        backend: where each worker measures: "cyclesim", "rtl" or "local".
        timeout: seconds one run may take (default: 120 for cyclesim and rtl, 30 for local).
        connect_timeout: seconds to wait for the scheduler to answer (and for a first worker).
        number, repeat, min_repeat_ms: the timing options of `LocalRunner` (backend "local").
        device_options: options of the device backend, as for `SimRunner` (cyclesim, rtl).

    Raises:
        ClusterError: `distributed` is not installed, or the scheduler does not answer within
            `connect_timeout` seconds.
    """

    name = "cluster"

    def __init__(
        self,
        address: Any = None,
        backend: str = "cyclesim",
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        *,
        number: int | None = None,
        repeat: int | None = None,
        min_repeat_ms: float | None = None,
        device_options: dict[str, Any] | None = None,
    ) -> None:
        if backend not in BACKENDS:
            choices = ", ".join(BACKENDS)
            raise ValueError(f"ClusterRunner backend must be one of {choices}, not {backend!r}")
        timing = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms}
        if backend == "local":
            if device_options is not None:
                raise ValueError("device_options are for the cyclesim and rtl backends")
            defaults = {"number": 0, "repeat": 3, "min_repeat_ms": 50}
            self.options: dict[str, Any] = {
                k: defaults[k] if v is None else v for k, v in timing.items()
            }
        else:
            given = [k for k, v in timing.items() if v is not None]
            if given:
                names = ", ".join(given)
                raise ValueError(f"{names} are options of the local backend, not {backend}")
            self.options = {"backend": backend, "device_options": dict(device_options or {})}
        self.backend = backend
        self.unit = BACKENDS[backend]
        self.timeout = DEFAULT_TIMEOUT[backend] if timeout is None else timeout
        self.timeout = check_seconds("ClusterRunner timeout", self.timeout)
        self._cluster = _Cluster(address, connect_timeout)

    @property
    def client(self) -> Any:
        """The `distributed.Client` in use (e.g. to share with a `ClusterBuilder`)."""
        return self._cluster.client

    @property
    def address(self) -> str:
        """The scheduler's address."""
        return self._cluster.address

    def run(
        self, artifacts: Sequence[Artifact], on_outcome: OnOutcome | None = None
    ) -> list[RunOutcome]:
        """One outcome per artifact, in order; `on_outcome(k, outcome)` as each one ends."""
        return run_in_pool(self._cluster, artifacts, self.options, self.timeout, on_outcome)

    def close(self) -> None:
        """Close the connection to the scheduler (unless the caller passed the client in)."""
        self._cluster.close()


class ClusterBuilder(Builder):
    """Builds configs on the workers of a Dask cluster, each within `timeout` s: `Builder`'s
    interface, for tuning that needs more build processes than one machine has.

    Args:
        address: as for `ClusterRunner` (e.g. ``ClusterBuilder(runner.client)`` shares the
            runner's connection).
        timeout: seconds one build may take.
        connect_timeout: seconds to wait for the scheduler to answer (and for a first worker).
    """

    def __init__(
        self, address: Any = None, timeout: float = 60.0, connect_timeout: float = 10.0
    ) -> None:
        # Builder's local worker pool is not wanted: its __init__ is not called, and the
        # cluster takes the pool's place (the same `map`).
        self.timeout = check_seconds("ClusterBuilder timeout", timeout)
        self._cluster = _Cluster(address, connect_timeout)
        self._pool = self._cluster  # type: ignore[assignment]

    @property
    def n_parallel(self) -> int:  # type: ignore[override]
        """How many builds may run at once: the cluster's worker threads now."""
        return max(1, self._cluster.threads())

    @property
    def client(self) -> Any:
        """The `distributed.Client` in use."""
        return self._cluster.client

    def close(self) -> None:
        """Close the connection to the scheduler (unless the caller passed the client in)."""
        self._cluster.close()

    def __enter__(self) -> ClusterBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def local_cluster(
    n_workers: int = 2,
    threads_per_worker: int = 1,
    allowed_failures: int = 0,
    **options: Any,
) -> Iterator[str]:
    """Start a Dask cluster of `n_workers` worker processes on this machine; yields the
    scheduler's address and stops the cluster on exit.

    Dask starts the workers with multiprocessing's spawn method, which imports the calling
    script again in each of them: a script that calls this needs an
    ``if __name__ == "__main__":`` guard (the `tensorforge` command has one).

    Args:
        n_workers: worker processes (each restarted by its nanny when it dies).
        threads_per_worker: jobs each worker runs at once (1 for wall-time measurements).
        allowed_failures: how many more workers a job that killed its worker is retried on
            before it fails with `KilledWorker` (Dask's default is 3; a config whose code
            crashes crashes again, so 0 reports it at once).
        options: more `distributed.LocalCluster` arguments (e.g. ``env={"TF_NUM_THREADS":
            "1"}`` for the workers' environment, ``memory_limit=``, or ``silence_logs=`` a
            logging level: by default Dask's own logs of failed jobs and dead workers are
            silenced, since failed trials are reported as results).

    Example::

        with local_cluster(2) as address, ClusterRunner(address) as runner:
            outcomes = runner.run(artifacts)
    """
    distributed = _distributed()
    kwargs: dict[str, Any] = {
        "host": "127.0.0.1",
        "scheduler_port": 0,
        "dashboard_address": None,
        "silence_logs": logging.CRITICAL,  # failed trials are results, not errors to log
        **options,
    }
    scheduler_kwargs = {"allowed_failures": allowed_failures, **kwargs.pop("scheduler_kwargs", {})}
    cluster = distributed.LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        scheduler_kwargs=scheduler_kwargs,
        **kwargs,
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()
