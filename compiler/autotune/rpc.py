"""Measuring on remote devices: the ``rpc`` runner sends each artifact to RPC servers.

`RPCRunner` is a `Runner` whose runs go to one or more ``tensorforge rpc serve`` processes (a
board, or a pool of boards: several addresses), each running one artifact at a time with the
auto-tuner's own `run_job` (the first run checked against the artifact's expected output). A
failed trial comes back as the same error kinds as the local runners (`run_error`,
`wrong_answer`, `run_timeout`, `run_crash`). A server that cannot be reached is dropped and its
artifact goes to another; when none is left, `RPCError` is raised rather than recording trials
that failed through no fault of their configs.

Artifacts travel as `runtime.rpc.codec` payloads (numpy's ``.npz``, no pickle).

Example (servers started with ``tensorforge rpc serve --device cyclesim --token T``)::

    with RPCRunner(["board1:9091", "board2:9091"], token="T") as runner:
        results = measure(task, configs, builder, runner)
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...runtime.rpc.client import RemoteSession, RPCError, connect, parse_address
from ...runtime.rpc.codec import pack
from .measure import OnOutcome, Runner, RunOutcome, check_seconds
from .task import Artifact


def artifact_to_payload(artifact: Artifact, options: dict[str, Any] | None = None) -> bytes:
    """An artifact (and run options) as one payload.

    Example:
        >>> from tensorforge.runtime.rpc.codec import unpack
        >>> a = Artifact("llvm", b"\\x7fELF", [np.ones(2, np.float32)], np.ones(2), "k",
        ...              [("x", "float32", (2,)), ("y", "float32", (2,))])
        >>> b = artifact_from_payload(*unpack(artifact_to_payload(a)))
        >>> b.payload, b.inputs[0].tolist(), b.params[0]
        (b'\\x7fELF', [1.0, 1.0], ('x', 'float32', (2,)))
    """
    listed = isinstance(artifact.inputs, list | tuple)
    names = [str(k) for k in range(len(artifact.inputs))] if listed else list(artifact.inputs)
    values = list(artifact.inputs) if listed else [artifact.inputs[n] for n in names]
    meta = {"kind": artifact.kind, "symbol": artifact.symbol,
            "params": [[n, d, list(s)] for n, d, s in artifact.params],
            "output": artifact.output, "rtol": artifact.rtol, "atol": artifact.atol,
            "hw": artifact.hw, "inputs": "list" if listed else "dict", "input_names": names,
            "options": dict(options or {})}  # fmt: skip
    arrays = {f"in.{k}": np.asarray(v) for k, v in enumerate(values)}
    arrays["expected"] = np.asarray(artifact.expected)
    return pack(meta, arrays, {"payload": artifact.payload})


def artifact_from_payload(meta: dict[str, Any], arrays: dict[str, np.ndarray],
                          blobs: dict[str, bytes]) -> Artifact:  # fmt: skip
    """The artifact of a payload's parts (`runtime.rpc.codec.unpack`).

    Raises:
        ValueError: a field is missing or of the wrong type.
    """
    if meta.get("inputs") not in ("list", "dict"):  # else a dict reached the kernel's call
        raise ValueError(f"not a tuning artifact payload: inputs must be 'list' or 'dict', not "
                         f"{meta.get('inputs')!r:.40}")  # fmt: skip
    try:
        names = [str(n) for n in meta["input_names"]]
        values = [arrays[f"in.{k}"] for k in range(len(names))]
        inputs: Any = values if meta["inputs"] == "list" else dict(zip(names, values, strict=True))
        params = [(str(n), str(d), tuple(int(x) for x in s)) for n, d, s in meta["params"]]
        return Artifact(str(meta["kind"]), blobs["payload"], inputs, arrays["expected"],
                        str(meta["symbol"]), params, str(meta["output"]), float(meta["rtol"]),
                        float(meta["atol"]), meta["hw"])  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a tuning artifact payload: {type(exc).__name__}: {exc}") from None


class RPCRunner(Runner):
    """Runs artifacts on RPC servers (one artifact at a time per server).

    Args:
        addresses: ``host:port`` of each server, as a list or a comma-separated string.
        token: the servers' token (default: ``TF_RPC_TOKEN``).
        timeout: seconds to wait for one answer (the servers have their own run time-outs).
        unit: the cost's unit: "cycles" (accelerator devices) or "s" (CPU artifacts timed on
            the server).
        options: run options sent with each artifact (e.g. ``{"repeat": 3}`` for CPU timing).

    Raises:
        RPCError: a server cannot be reached or refuses the token.
    """

    name = "rpc"

    def __init__(self, addresses: str | Sequence[str], token: str | None = None,
                 timeout: float = 300.0, unit: str = "cycles",
                 options: dict[str, Any] | None = None) -> None:  # fmt: skip
        if isinstance(addresses, str):
            addresses = [a.strip() for a in addresses.split(",") if a.strip()]
        if not addresses:
            raise ValueError("RPCRunner needs at least one server address (host:port)")
        if unit not in ("cycles", "s"):
            raise ValueError(f"RPCRunner unit must be cycles or s, not {unit!r}")
        self.unit = unit
        self.options = dict(options or {})
        timeout = check_seconds("RPCRunner timeout", timeout)
        self.sessions: list[RemoteSession] = [
            connect(*parse_address(a), token=token, timeout=timeout) for a in addresses
        ]
        if unit == "cycles":
            for address, session in zip(addresses, self.sessions, strict=True):
                device = session.info().get("device")
                if device not in ("cyclesim", "rtl", "pynq"):
                    raise ValueError(
                        f"RPC server {address} serves device {device!r}, which counts no "
                        "cycles: serve cyclesim, rtl or pynq to tune on it"
                    )

    def run(self, artifacts: Sequence[Artifact], on_outcome: OnOutcome | None = None
            ) -> list[RunOutcome]:  # fmt: skip
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for k in range(len(artifacts)):
            todo.put(k)
        outcomes: dict[int, RunOutcome] = {}
        lost: dict[int, str] = {}  # session index -> why it was dropped
        lock = threading.Lock()

        def serve(j: int) -> None:
            while True:
                try:
                    k = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    payload = artifact_to_payload(artifacts[k], self.options)
                    answer = self.sessions[j].measure(payload)
                except RPCError as exc:
                    todo.put(k)  # another server takes it
                    with lock:
                        lost[j] = str(exc)
                    return
                out = RunOutcome(
                    [float(c) for c in answer.get("costs", [])],
                    error=str(answer.get("error", "")),
                    message=str(answer.get("message", "")),
                    stats=dict(answer.get("stats", {})),
                )
                with lock:
                    outcomes[k] = out
                    if on_outcome is not None:
                        on_outcome(k, out)

        while len(outcomes) < len(artifacts):
            alive = [j for j in range(len(self.sessions)) if j not in lost]
            if not alive:
                raise RPCError("connection", "no RPC server is left to measure on: "
                               + "; ".join(lost.values()))  # fmt: skip
            threads = [threading.Thread(target=serve, args=(j,), daemon=True) for j in alive]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return [outcomes[k] for k in range(len(artifacts))]
