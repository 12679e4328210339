"""The RPC server: run modules, program images and tuning trials on this machine's accelerator
device for clients elsewhere (``tensorforge rpc serve``; docs/deploy.md).

Transport: HTTP/1.1 from Python's standard library (``http.server`` here, ``http.client`` in
the client), bodies in numpy's ``.npz`` format (`codec`): no third-party dependency, so the
server runs on every board image's Python, and no pickle crosses the network.

Endpoints (every request carries ``Authorization: Bearer <token>``):

- ``GET /v1/info``: the server's device, accelerator config and limits (JSON);
- ``POST /v1/upload?kind=module|program``: a ``.tfm`` module or ``.tfp`` program image; the
  answer is its id (the SHA-256 of its bytes, which is also its file name in the work folder);
- ``POST /v1/run?id=ID&repeat=N``: inputs as a payload; outputs, wall times measured here and
  the accelerator's cycles come back as a payload;
- ``POST /v1/measure``: one auto-tuner artifact; its outcome (costs, or the failed trial's
  error kind and message) as JSON.

Safety: the server binds to 127.0.0.1 unless told otherwise; the token is compared in constant
time and every refusal is logged with the client's address; bodies need a Content-Length at
most `max_request_bytes`, payloads are size-checked before they expand, and uploads are stored
under their digest (a client never names a path). Every socket read has `read_timeout`, and
each connection has its own thread (at most `max_connections`), so a stalled or half-sent
request never blocks the others. Runs go to a worker process with `run_timeout`: a run that
crashes or hangs is killed and reported, and the next request gets a fresh worker.

A module holds native code: whoever holds the token can run code on this machine as the
server's user, as with any remote-execution service. Keep the token secret and the server on a
network you trust.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import platform
import re
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from ...hw.config import HWConfig
from . import jobs
from .codec import PayloadError, pack, unpack

log = logging.getLogger("tensorforge.rpc")

PROTOCOL = "tensorforge-rpc/1"
DEVICES = ("sim", "cyclesim", "rtl", "pynq", "pynq-model")
KINDS = {"module": (b"TFMOD", ".tfm"), "program": (b"TFPROG", ".tfp")}
_ID = re.compile(r"[0-9a-f]{64}")
#: the device options a client's /v1/measure may set (sizes, limits, the timing model, which
#: HDL simulator): not the ones that name files or modules on the server (a bitstream, an
#: overlay, a cache directory, a trace path, the pynq module), which only its operator sets
CLIENT_DEVICE_OPTIONS = ("memory_bytes", "min_align", "max_steps", "timing", "max_cycles",
                         "timeout_s", "simulator")  # fmt: skip


class _Refused(Exception):
    """An answer other than 200: its HTTP status, error kind and message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


class RPCServer:
    """Serve `device` over HTTP.

    Args:
        device: "sim", "cyclesim", "rtl" or "pynq" (on a board: give the bitstream in
            ``device_options={"bitstream": "tf.bit"}``), or "pynq-model": the ``pynq``
            backend's code on the board model over the RTL (`pynq_model`; each run simulates).
        config: the accelerator's HWConfig (a preset, a JSON path or a HWConfig): uploads built
            for another config are refused, naming both. None: any config (the simulators
            take each program's own).
        host, port: where to listen (port 0: any free port; see `address`).
        token: the shared secret (None: a random one, see `token`).
        work_dir: where uploads are kept (created; default a folder under the system's temp).
        run_timeout: seconds one run may take before its worker is killed.
        read_timeout: seconds any socket read may wait.
        max_request_bytes: the largest request body (uploads, inputs, artifacts).
        max_connections: connections served at once; more are answered 503 at once.
        max_files: uploads kept (the least recently used are removed beyond it).
        device_options: options of the device backend (e.g. ``{"simulator": "verilator"}``;
            "pynq-model" also takes ``timeout_s``, one simulation's limit, default 600 s).
    """

    def __init__(
        self,
        device: str = "cyclesim",
        config: str | HWConfig | None = None,
        host: str = "127.0.0.1",
        port: int = 9091,
        token: str | None = None,
        work_dir: str | Path | None = None,
        run_timeout: float = 120.0,
        read_timeout: float = 30.0,
        max_request_bytes: int = 256 << 20,
        max_connections: int = 32,
        max_files: int = 64,
        device_options: dict[str, Any] | None = None,
    ) -> None:
        if device == "pynq" and not (device_options or {}).get("bitstream"):
            raise ValueError("serving the pynq device needs its bitstream (--bitstream tf.bit, "
                             "with the .hwh beside it)")  # fmt: skip
        if device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
        from ...compiler.autotune.measure import check_seconds

        self.device = device
        self.config = HWConfig.load(config) if config is not None else None
        self.token = token if token is not None else secrets.token_urlsafe(24)
        if not isinstance(self.token, str) or len(self.token) < 8:
            raise ValueError("the token must be a string of at least 8 characters")
        self.run_timeout = check_seconds("run_timeout", run_timeout)
        self.read_timeout = check_seconds("read_timeout", read_timeout)
        self.max_request_bytes = int(max_request_bytes)
        self.max_files = int(max_files)
        self.device_options = dict(device_options or {})
        if work_dir is None:
            import tempfile

            work_dir = tempfile.mkdtemp(prefix="tf_rpc_")
        self.work_dir = Path(work_dir).resolve()
        if self.work_dir.exists() and not self.work_dir.is_dir():
            raise ValueError(f"the work folder {work_dir} is a file, not a folder")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._pool_lock = threading.Lock()
        self._pool: Any = None
        self._thread: threading.Thread | None = None
        handler = type("Handler", (_Handler,), {"timeout": self.read_timeout, "rpc": self})
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an integer from 0 to 65535, not {port!r}")
        try:
            self.httpd = ThreadingHTTPServer((host, port), handler)
        except OSError as e:  # in use, not an address of this machine, an unknown name
            raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
        self.httpd.daemon_threads = True

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    # ---- life --------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        log.info("serving %s on %s:%d (work folder %s)", self.device, *self.address,
                 self.work_dir)  # fmt: skip
        try:
            self.httpd.serve_forever()
        finally:
            self.close()

    def start(self) -> RPCServer:
        """Serve from a background thread (tests, notebooks); `close` stops it."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.httpd.shutdown()
        with contextlib.suppress(Exception):
            self.httpd.server_close()
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> RPCServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the work ------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        from ... import __version__

        return {
            "protocol": PROTOCOL,
            "version": __version__,
            "device": self.device,
            "config": self.config.to_dict() if self.config else None,
            "bitstream": self.device_options.get("bitstream"),
            "bitstream_sha256": self._bitstream_digest(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "limits": {
                "max_request_bytes": self.max_request_bytes,
                "run_timeout_s": self.run_timeout,
                "read_timeout_s": self.read_timeout,
            },  # fmt: skip
        }

    def _bitstream_digest(self) -> str | None:
        path = self.device_options.get("bitstream")
        if not path or not Path(path).is_file():
            return None
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    def upload(self, kind: str, data: bytes) -> str:
        if kind not in KINDS:
            raise _Refused(400, "bad_request", f"kind must be module or program, not {kind!r}")
        magic, suffix = KINDS[kind]
        if not data.startswith(magic):
            raise _Refused(400, "bad_upload", f"the upload is not a {kind} file (its first bytes "
                           f"are {data[:8]!r}, a {kind} starts with {magic!r})")  # fmt: skip
        try:  # parse the container (pure Python; no native code runs) for a clear error now
            if kind == "module":
                from ...runtime.module import Module

                Module.from_bytes(data, "<upload>")
            else:
                from ...runtime.program import ProgramImage

                ProgramImage.from_bytes(data, "<upload>")
        except ValueError as exc:
            raise _Refused(400, "bad_upload", str(exc)) from None
        digest = hashlib.sha256(data).hexdigest()
        path = self.work_dir / f"{digest}{suffix}"
        if not path.exists():
            tmp = path.with_suffix(f".{threading.get_ident()}.part")
            tmp.write_bytes(data)
            tmp.replace(path)
        path.touch()
        self._evict()
        return digest

    def _evict(self) -> None:
        files = sorted((p for p in self.work_dir.iterdir() if p.suffix in (".tfm", ".tfp")),
                       key=lambda p: p.stat().st_mtime)  # fmt: skip
        for p in files[: max(0, len(files) - self.max_files)]:
            with contextlib.suppress(OSError):
                p.unlink()

    def find(self, ident: str) -> tuple[str, Path]:
        if not isinstance(ident, str) or not _ID.fullmatch(ident):
            raise _Refused(400, "bad_request", "id must be the 64 hex digits upload answered")
        for kind, (_, suffix) in KINDS.items():
            path = self.work_dir / f"{ident}{suffix}"
            if path.exists():
                return kind, path
        raise _Refused(404, "unknown_id", f"no upload {ident[:12]}... on this server (it may "
                       "have been evicted): upload it again")  # fmt: skip

    def call(self, fn: Any, args: tuple[Any, ...]) -> Any:
        """Run a job in the worker pool within `run_timeout`; its value, or `_Refused`."""
        from ...compiler.autotune.pool import WorkerPool

        with self._pool_lock:
            if self._pool is None:
                self._pool = WorkerPool(1)
            (res,) = self._pool.map(fn, [args], self.run_timeout)
        if res.ok:
            return res.value
        if res.status == "timeout":
            raise _Refused(504, "run_timeout", f"the run took more than {self.run_timeout:g} s and "
                           "was stopped (its worker was killed; the server goes on)")  # fmt: skip
        if res.status == "crash":
            raise _Refused(500, "run_crash", res.message)
        raise _Refused(422, "run_error", res.message.strip().splitlines()[-1] if res.message
                       else "the run failed")  # fmt: skip

    def run(self, ident: str, repeat: int, body: bytes) -> bytes:
        kind, path = self.find(ident)
        _, inputs, _ = self._unpack(body)
        config = self.config.to_dict() if self.config else None
        if kind == "module":
            out = self.call(jobs.run_module, (str(path), inputs, self.device,
                                              self.device_options, config, repeat))  # fmt: skip
            meta = {"wall_s": out["wall_s"], "calls": out["calls"],
                    "cycles": sum(c or 0 for c in out["calls"].values()) or None}  # fmt: skip
        else:
            out = self.call(jobs.run_program, (str(path), inputs, self.device,
                                               self.device_options, config))  # fmt: skip
            meta = {"wall_s": out["wall_s"], "cycles": out["cycles"], "stats": out["stats"]}
        meta["device"] = self.device
        return pack(meta, out["outputs"])

    def measure(self, body: bytes) -> dict[str, Any]:
        from ...compiler.autotune.measure import RunOutcome, check_run_options, outcome_of
        from ...compiler.autotune.pool import JobResult

        meta, arrays, blobs = self._unpack(body)
        options = meta.pop("options", {})
        try:
            check_run_options(options)
        except ValueError as exc:
            raise _Refused(400, "bad_request", str(exc)) from None
        client = options.get("device_options", {})
        refused = sorted(k for k in client if k not in CLIENT_DEVICE_OPTIONS)
        if refused:
            raise _Refused(400, "bad_request", f"device options {refused} are the server's to "
                           f"set; a client may set only {list(CLIENT_DEVICE_OPTIONS)}")  # fmt: skip
        # the server's own options win: a client cannot point them elsewhere
        options = {**options, "backend": self.device,
                   "device_options": {**client, **self.device_options}}  # fmt: skip
        config = self.config.to_dict() if self.config else None
        args = (meta, arrays, blobs, options, config)
        try:
            value = self.call(jobs.measure_artifact, args)
            outcome = RunOutcome(list(value["costs"]), stats=value["stats"])
        except _Refused as exc:
            status = {"run_timeout": "timeout", "run_crash": "crash"}.get(exc.kind, "error")
            job = JobResult(status, message=exc.message)
            outcome = outcome_of(job, "run")
        return {"costs": outcome.costs, "stats": outcome.stats, "error": outcome.error,
                "message": outcome.message}  # fmt: skip

    def _unpack(self, body: bytes) -> tuple[dict[str, Any], dict[str, Any], dict[str, bytes]]:
        try:
            return unpack(body, max_expanded=4 * self.max_request_bytes)
        except PayloadError as exc:
            raise _Refused(400, "bad_payload", str(exc)) from None


class _Handler(BaseHTTPRequestHandler):
    """One connection: authenticate, read a bounded body, dispatch, answer."""

    rpc: RPCServer
    protocol_version = "HTTP/1.1"
    server_version = "tensorforge-rpc"

    def handle(self) -> None:
        if not self.rpc._slots.acquire(blocking=False):
            body = json.dumps({"error": "busy", "message": "too many connections; try again "
                               "later"}).encode()  # fmt: skip
            with contextlib.suppress(OSError):
                self.wfile.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                                 b"application/json\r\nConnection: close\r\nContent-Length: "
                                 + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
            log.warning("refused %s: too many connections", self.client_address[0])
            return
        try:
            super().handle()
        except (TimeoutError, ConnectionError) as exc:
            log.warning("dropped %s: %s", self.client_address[0], exc)
        finally:
            self.rpc._slots.release()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        log.info("%s %s", self.client_address[0], format % args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._serve(lambda url, body: self.rpc.info(), body=False)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self._serve(self._post, body=True)

    def _post(self, url: Any, body: bytes) -> Any:
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if url.path == "/v1/upload":
            return {"id": self.rpc.upload(q.get("kind", ""), body)}
        if url.path == "/v1/run":
            try:
                repeat = int(q.get("repeat", "1"))
            except ValueError:
                repeat = 0
            if not 1 <= repeat <= 1000:
                raise _Refused(400, "bad_request", "repeat must be an int in [1, 1000]")
            return self.rpc.run(q.get("id", ""), repeat, body)
        if url.path == "/v1/measure":
            return self.rpc.measure(body)
        raise _Refused(404, "not_found", f"no endpoint POST {url.path}")

    def _serve(self, fn: Any, body: bool) -> None:
        url = urlparse(self.path)
        try:
            self._authenticate()
            if not body and url.path != "/v1/info":
                raise _Refused(404, "not_found", f"no endpoint GET {url.path}")
            data = self._read_body() if body else b""
            answer = fn(url, data)
        except _Refused as exc:
            if exc.status >= 500:
                log.error("%s %s: %s", self.client_address[0], exc.kind, exc.message)
            self._send_json(exc.status, {"error": exc.kind, "message": exc.message},
                            close=exc.status in (401, 411, 413))  # fmt: skip
            return
        except (TimeoutError, ConnectionError):
            raise  # the client stalled or went away: `handle` drops the connection
        except Exception as exc:  # noqa: BLE001 - a bug must not take the server down
            log.exception("internal error serving %s", self.path)
            self._send_json(500, {"error": "internal", "message": f"{type(exc).__name__}: {exc}"})
            return
        if isinstance(answer, bytes):
            self._send(200, answer, "application/octet-stream")
        else:
            self._send_json(200, answer)

    def _authenticate(self) -> None:
        given = self.headers.get("Authorization", "")
        want = f"Bearer {self.rpc.token}"
        if not hmac.compare_digest(given.encode("utf-8", "replace"), want.encode()):
            log.warning("refused %s %s: %s token", self.client_address[0], self.path,
                        "no" if not given else "wrong")  # fmt: skip
            raise _Refused(401, "unauthorized", "missing or wrong token")

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None:
            raise _Refused(411, "length_required", "a request body needs a Content-Length")
        try:
            n = int(length)
        except ValueError:
            n = -1
        if n < 0:
            raise _Refused(400, "bad_request", f"Content-Length must be a byte count, not "
                           f"{length!r}")  # fmt: skip
        if n > self.rpc.max_request_bytes:
            raise _Refused(413, "too_large", f"the body of {n:,} bytes is over this server's "
                           f"limit of {self.rpc.max_request_bytes:,}")  # fmt: skip
        data = self.rfile.read(n)  # each read waits at most read_timeout (socket time-out)
        if len(data) != n:
            raise ConnectionError(f"the client sent {len(data)} of {n} bytes and closed")
        return data

    def _send_json(self, status: int, obj: Any, close: bool = False) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json", close)

    def _send(self, status: int, data: bytes, ctype: str, close: bool = False) -> None:
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)
