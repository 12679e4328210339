"""A pool of worker processes that survives its jobs: crashes and time-outs are results.

Each job runs a module-level function in a child process. A job that raises returns the
exception's text; a job that kills its process (a segfault in generated code, an LLVM abort, the
out-of-memory killer) or outlives its time-out is reported as such, the worker is replaced, and
the pool goes on. This is what lets tuning measure configs that may be broken.

Workers are fresh interpreters (`python -m tensorforge.compiler.autotune.pool`: no locks or
thread pools inherited mid-use from the tuner's process, and, unlike multiprocessing's spawn, the
user's script is not re-imported, so tuning works from a script without a `__main__` guard)
that receive the tuner's `sys.path`, exchange pickles over their own pipes and are reused
across jobs. Functions and arguments must be importable and picklable.

Example:
    >>> with WorkerPool(1) as pool:
    ...     [r.value for r in pool.map(divmod, [(7, 2), (9, 4)], timeout=60)]
    [(3, 1), (2, 1)]
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
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


def _send(f: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _recv_bytes(f: Any) -> bytes:
    head = f.read(8)
    if len(head) < 8:
        raise EOFError("the other side closed the pipe")
    (n,) = struct.unpack("<Q", head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError("the other side closed the pipe mid-message")
    return data


def _recv(f: Any) -> Any:
    return pickle.loads(_recv_bytes(f))  # noqa: S301 - our own child process, never a file


class _Unsendable(Exception):
    """A job's function or arguments that cannot be pickled (reported as the job's error)."""


def serve() -> None:
    """The worker's loop (``python -m tensorforge.compiler.autotune.pool``): jobs arrive as
    pickles on the original stdin, results leave on the original stdout; what jobs print goes
    to stderr, and a job that reads stdin reads nothing."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a job that prints must not corrupt the result stream
    inp = os.fdopen(os.dup(0), "rb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # nor may a job that reads stdin swallow the next job
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        path, env = _recv(inp)
    except EOFError:
        return
    sys.path[:] = path
    os.environ.update(env)
    try:
        _serve_jobs(inp, out)
    except BrokenPipeError:  # the parent is gone (killed): nobody reads a result or a trace
        os._exit(0)  # (a normal exit would flush the pipe again and print that it failed)


def _serve_jobs(inp: Any, out: Any) -> None:
    while True:
        try:
            job = _recv(inp)
        except EOFError:
            return
        if job is None:
            return
        try:
            fn, args = job
            value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - every failure is a result
            tb = traceback.format_exc(limit=6)
            _send(out, ("error", f"{type(exc).__name__}: {exc}\n{tb}"))
            continue
        try:
            _send(out, ("ok", value))
        except Exception as exc:  # noqa: BLE001 - pickle raises several types
            message = f"the job's result ({type(value).__name__}) cannot be pickled: {exc}"
            _send(out, ("error", message))


def _dumps(job: Any) -> bytes:
    """A job as the bytes `_recv` reads (length, pickle); `_Unsendable` when it cannot be
    pickled (a lambda, a lock, a local class)."""
    try:
        data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickle raises several types
        raise _Unsendable(f"the job cannot be sent to a worker process: {exc}") from exc
    return struct.pack("<Q", len(data)) + data


class _Worker:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorforge.compiler.autotune.pool"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C in the terminal reaches only the tuner
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        _send(self.stdin, (list(sys.path), env))
        self.job: int | None = None
        self.started = 0.0
        self.deadline = 0.0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.stdin, self.stdout):
            try:
                f.close()
            except OSError:
                pass

    def stop(self) -> None:
        try:
            _send(self.stdin, None)
            self.proc.wait(2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _crash_message(proc: Any) -> str:
    code = proc.poll()
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
            if w.alive():
                return w
            w.kill()
        return _Worker(self.env)

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
                    k = pending.pop()
                    try:
                        data = _dumps((fn, tuple(jobs[k])))
                    except _Unsendable as exc:
                        results[k] = JobResult("error", message=str(exc))
                        if on_result:
                            on_result(k, results[k])
                        continue
                    w = self._take()
                    try:
                        w.stdin.write(data)
                        w.stdin.flush()
                    except OSError:
                        w.kill()
                        pending.append(k)
                        continue
                    w.job, w.started = k, time.perf_counter()
                    w.deadline = w.started + timeout
                    busy.append(w)
                if not busy:
                    continue
                now = time.perf_counter()
                wait_s = max(0.01, min(w.deadline for w in busy) - now)
                ready = wait([w.stdout for w in busy], timeout=wait_s)
                now = time.perf_counter()
                for w in list(busy):
                    if w.stdout in ready:
                        try:
                            data = _recv_bytes(w.stdout)
                        except (EOFError, OSError):
                            try:
                                w.proc.wait(5)
                            except subprocess.TimeoutExpired:
                                pass
                            res = JobResult("crash", message=_crash_message(w.proc),
                                            seconds=now - w.started)  # fmt: skip
                            finish(w, res, reuse=False)
                            continue
                        try:
                            status, value = pickle.loads(data)  # noqa: S301 - our own worker
                        except Exception as exc:  # noqa: BLE001 - any error of unpickling
                            message = f"the job's result cannot be unpickled here: {exc!r}"
                            finish(w, JobResult("error", message=message,
                                                seconds=now - w.started), reuse=True)  # fmt: skip
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


if __name__ == "__main__":
    serve()
