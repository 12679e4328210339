"""A pool of worker processes that survives its jobs: crashes and time-outs are results.

Each job runs a module-level function in a child process. A job that raises returns the
exception's text; a job that kills its process (a segfault in generated code, an LLVM abort, the
out-of-memory killer) or outlives its time-out is reported as such, the worker is replaced, and
the pool goes on. This is what lets tuning measure configs that may be broken.

Workers are started with the `spawn` method (a fresh interpreter: no locks or thread pools
inherited mid-use from the tuner's process) and reused across jobs.

Example:
    >>> with WorkerPool(1) as pool:
    ...     [r.value for r in pool.map(divmod, [(7, 2), (9, 4)], timeout=60)]
    [(3, 1), (2, 1)]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any


@dataclass
class JobResult:
    """The outcome of one job: `status` "ok" (with `value`), "error" (the job raised), "crash"
    (its process died) or "timeout"; `message` says what happened; `seconds` is wall time."""

    status: str
    value: Any = None
    message: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _serve(conn: Connection, env: dict[str, str]) -> None:
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        fn, args = job
        try:
            conn.send(("ok", fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - every failure is a result
            tb = traceback.format_exc(limit=6)
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{tb}"))


class _Worker:
    def __init__(self, ctx: Any, env: dict[str, str]) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, env), daemon=True)
        self.proc.start()
        child.close()
        self.job: int | None = None
        self.started = 0.0
        self.deadline = 0.0

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(2)
        self.kill()


def _crash_message(proc: Any) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker process died with {name}"
    return f"the worker process exited with code {code}"


class WorkerPool:
    """`n` reusable worker processes.

    Args:
        n: the number of workers (jobs run at most `n` at a time).
        env: environment variables set in each worker before its first job (e.g.
            TF_NUM_THREADS for timing runs).
    """

    def __init__(self, n: int = 1, env: dict[str, str] | None = None) -> None:
        if n < 1:
            raise ValueError(f"WorkerPool needs at least one worker, not {n}")
        self.n = n
        self.env = dict(env or {})
        self._ctx = mp.get_context("spawn")
        self._idle: list[_Worker] = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self._idle:
            w.stop()
        self._idle.clear()

    def _take(self) -> _Worker:
        while self._idle:
            w = self._idle.pop()
            if w.proc.is_alive():
                return w
            w.kill()
        return _Worker(self._ctx, self.env)

    def map(
        self,
        fn: Callable[..., Any],
        jobs: Sequence[tuple[Any, ...]],
        timeout: float,
        on_result: Callable[[int, JobResult], None] | None = None,
    ) -> list[JobResult]:
        """Run `fn(*args)` for each args tuple; results in job order.

        `on_result(k, result)` is called as each job ends. A KeyboardInterrupt kills the running
        jobs and propagates; the results already delivered through `on_result` stand.
        """
        results: list[JobResult | None] = [None] * len(jobs)
        pending = list(range(len(jobs)))[::-1]
        busy: list[_Worker] = []

        def finish(w: _Worker, res: JobResult, reuse: bool) -> None:
            busy.remove(w)
            assert w.job is not None
            results[w.job] = res
            if on_result:
                on_result(w.job, res)
            w.job = None
            if reuse:
                self._idle.append(w)
            else:
                w.kill()

        try:
            while pending or busy:
                while pending and len(busy) < self.n:
                    w = self._take()
                    k = pending.pop()
                    try:
                        w.conn.send((fn, tuple(jobs[k])))
                    except (OSError, BrokenPipeError):
                        w.kill()
                        pending.append(k)
                        continue
                    w.job, w.started = k, time.perf_counter()
                    w.deadline = w.started + timeout
                    busy.append(w)
                now = time.perf_counter()
                wait_s = max(0.01, min(w.deadline for w in busy) - now)
                ready = wait([w.conn for w in busy], timeout=wait_s)
                now = time.perf_counter()
                for w in list(busy):
                    if w.conn in ready:
                        try:
                            status, value = w.conn.recv()
                        except (EOFError, OSError):
                            w.proc.join(5)
                            res = JobResult("crash", message=_crash_message(w.proc),
                                            seconds=now - w.started)  # fmt: skip
                            finish(w, res, reuse=False)
                            continue
                        ok = status == "ok"
                        res = JobResult(status, value if ok else None, "" if ok else value,
                                        now - w.started)  # fmt: skip
                        finish(w, res, reuse=True)
                    elif now >= w.deadline:
                        res = JobResult("timeout", message=f"no result within {timeout:g} s",
                                        seconds=now - w.started)  # fmt: skip
                        finish(w, res, reuse=False)
        except BaseException:
            for w in busy:
                w.kill()
            raise
        return [r for r in results if r is not None]
