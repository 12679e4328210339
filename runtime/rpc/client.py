"""The RPC client: `connect(host, port, token=...)` to a ``tensorforge rpc serve`` elsewhere.

Example (a server started with ``tensorforge rpc serve --device cyclesim --token SECRET``)::

    remote = connect("pynq-board.local", 9091, token="SECRET")
    remote.info()["device"]                        # 'cyclesim'
    outputs, meta = remote.run_module("model.tfm", {"x": x})
    meta["cycles"], meta["wall_s"]                 # measured on the server

Every request has a time-out; a server that does not answer in time, refuses the token or the
request, or goes away raises `RPCError` naming the server and what it said.
"""

from __future__ import annotations

import http.client
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .codec import PayloadError, pack, unpack

DEFAULT_PORT = 9091
#: seconds to wait for a server to accept the connection (a dead or filtered address never
#: answers at all: that is not worth the long wait for a run's answer)
CONNECT_TIMEOUT = 10.0


class RPCError(RuntimeError):
    """The server refused or failed a request, or could not be reached.

    Attributes:
        kind: the server's error kind ("unauthorized", "run_timeout", "run_error", ...), or
            "connection" when no answer came.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def parse_address(address: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``host:port`` (or ``host``) as (host, port).

    Example:
        >>> parse_address("board.local:9000"), parse_address("10.0.0.2")
        (('board.local', 9000), ('10.0.0.2', 9091))
    """
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, default_port
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not host or not 0 < number < 65536:
        raise ValueError(f"an RPC address must be host:port, not {address!r}")
    return host, number


class RemoteSession:
    """A connection to one RPC server (each request opens its own HTTP connection).

    Args:
        host, port: the server.
        token: the server's token (default: the ``TF_RPC_TOKEN`` environment variable).
        timeout: seconds to wait for each answer (a run's answer includes the run itself).
        connect_timeout: seconds to wait for the server to accept a connection (at most
            `timeout`).
    """

    def __init__(self, host: str, port: int = DEFAULT_PORT, token: str | None = None,
                 timeout: float = 300.0, connect_timeout: float = CONNECT_TIMEOUT
                 ) -> None:  # fmt: skip
        self.host, self.port, self.timeout = host, int(port), float(timeout)
        self.connect_timeout = min(float(connect_timeout), self.timeout)
        self.max_request_bytes: int | None = None  # the server's limit, once `info` told it
        token = token if token is not None else os.environ.get("TF_RPC_TOKEN")
        if not token:
            raise ValueError("an RPC token is needed: pass token= or set TF_RPC_TOKEN (the "
                             "server prints its token when it starts)")  # fmt: skip
        self.token = token
        self._uploaded: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"RemoteSession({self.host}:{self.port})"

    # ---- requests ------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: bytes | None = None
                 ) -> tuple[bytes, str]:  # fmt: skip
        where = f"RPC server {self.host}:{self.port}"
        if body is not None and self.max_request_bytes and len(body) > self.max_request_bytes:
            limit = f"{self.max_request_bytes:,}"
            raise RPCError("too_large", f"{where} takes requests of up to {limit} bytes, not "
                           f"{len(body):,} ({method} {path})")  # fmt: skip
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except TimeoutError:
            raise RPCError("connection", f"cannot reach {where}: no answer to the connection "
                           f"within {self.connect_timeout:g} s") from None  # fmt: skip
        except OSError as exc:
            conn.close()
            raise RPCError("connection", f"cannot reach {where}: {type(exc).__name__}: "
                           f"{exc}") from None  # fmt: skip
        try:
            conn.sock.settimeout(self.timeout)
            headers = {"Authorization": f"Bearer {self.token}"}
            if body is not None:
                headers["Content-Type"] = "application/octet-stream"
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            ctype = resp.getheader("Content-Type", "")
        except TimeoutError as exc:
            raise RPCError("connection", f"{where} did not answer {method} {path} within "
                           f"{self.timeout:g} s ({exc})") from None  # fmt: skip
        except (OSError, http.client.HTTPException) as exc:
            raise RPCError("connection", f"cannot reach {where}: {type(exc).__name__}: "
                           f"{exc}") from None  # fmt: skip
        finally:
            conn.close()
        if resp.status != 200:
            try:
                err = json.loads(data)
                kind, message = str(err["error"]), str(err["message"])
            except (ValueError, KeyError, TypeError):
                text = data[:200].decode("utf-8", "replace").strip() or "(no body)"
                kind, message = "http", f"{text}; is it a tensorforge RPC server?"
            raise RPCError(kind, f"{where}: {resp.status} {kind}: {message}")
        return data, ctype

    def _json(self, method: str, path: str, body: bytes | None = None) -> dict[str, Any]:
        data, _ = self._request(method, path, body)
        try:
            return json.loads(data)
        except ValueError:
            what = f"{self.host}:{self.port} answered {path} with something that is not JSON"
            raise RPCError("protocol", f"{what}: is it a tensorforge RPC server?") from None

    def info(self) -> dict[str, Any]:
        """The server's protocol, device, accelerator config and limits."""
        info = self._json("GET", "/v1/info")
        limit = (info.get("limits") or {}).get("max_request_bytes")
        if isinstance(limit, int) and limit > 0:
            self.max_request_bytes = limit
        return info

    def upload(self, data: bytes | str | Path, kind: str | None = None) -> str:
        """Send a module (.tfm) or program image (.tfp), by bytes or path; its id on the
        server (uploads of the same bytes are sent once per session)."""
        if isinstance(data, str | Path):
            data = Path(data).read_bytes()
        if kind is None:
            kind = "module" if data.startswith(b"TFMOD") else "program"
        import hashlib

        digest = hashlib.sha256(data).hexdigest()
        if self._uploaded.get(digest) != kind:
            answer = self._json("POST", f"/v1/upload?kind={kind}", data)
            if answer.get("id") != digest:
                raise RPCError("protocol", f"the server named the upload {answer.get('id')!r}, "
                               f"not its digest {digest}")  # fmt: skip
            self._uploaded[digest] = kind
        return digest

    def _run(self, ident: str, inputs: dict[str, Any], repeat: int
             ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:  # fmt: skip
        body = pack({}, {k: np.asarray(v) for k, v in inputs.items()})
        try:
            data, _ = self._request("POST", f"/v1/run?id={ident}&repeat={int(repeat)}", body)
        except RPCError as exc:
            if exc.kind != "unknown_id":
                raise
            self._uploaded.clear()  # evicted on the server: the caller uploads again
            raise
        try:
            meta, arrays, _ = unpack(data)
        except PayloadError as exc:
            raise RPCError("protocol", f"bad answer from {self.host}:{self.port}: {exc}") from None
        return arrays, meta

    def run_module(self, module: Any, inputs: dict[str, Any], repeat: int = 1
                   ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:  # fmt: skip
        """Run a module (a `Module`, its bytes or a .tfm path) remotely: (outputs, meta) with
        meta's ``wall_s`` (each run, timed on the server), ``calls`` and ``cycles``."""
        if hasattr(module, "to_bytes"):
            module = module.to_bytes()
        return self._run(self.upload(module, "module"), inputs, repeat)

    def run_program(self, image: Any, inputs: dict[str, Any]
                    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:  # fmt: skip
        """Run a program image (a `ProgramImage`, its bytes or a .tfp path) once remotely:
        (output slots, meta with ``cycles``, ``stats`` and ``wall_s``)."""
        if hasattr(image, "to_bytes"):
            image = image.to_bytes()
        return self._run(self.upload(image, "program"), inputs, 1)

    def measure(self, payload: bytes) -> dict[str, Any]:
        """One tuning trial of an artifact payload (`compiler.autotune.rpc`)."""
        return self._json("POST", "/v1/measure", payload)


def connect(host: str, port: int = DEFAULT_PORT, token: str | None = None,
            timeout: float = 300.0, connect_timeout: float = CONNECT_TIMEOUT
            ) -> RemoteSession:  # fmt: skip
    """A session with the RPC server at host:port, checked with one `info` request.

    Raises:
        RPCError: the server cannot be reached, refuses the token, or is not a tensorforge
            RPC server.
    """
    session = RemoteSession(host, port, token, timeout, connect_timeout)
    info = session.info()
    if not str(info.get("protocol", "")).startswith("tensorforge-rpc/"):
        raise RPCError("protocol", f"{host}:{port} is not a tensorforge RPC server")
    return session
