"""Remote run and remote tuning over loopback: results, security and faults of the RPC server.

Oracles: numpy's matmul (the demo kernel's reference) and the local simulators (outputs of a
remote run must equal a local `sim` run bit for bit, cycles a local `cyclesim` run's); the local
`SimRunner("cyclesim")` for tuning trials measured remotely.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import numpy as np
import pytest

import tensorforge
from tensorforge.cli import main
from tensorforge.compiler.autotune.measure import Builder, SimRunner, measure
from tensorforge.compiler.autotune.rpc import RPCRunner
from tensorforge.compiler.autotune.task import Task
from tensorforge.compiler.frontend.onnx_builders import small_cnn
from tensorforge.demo import build_matmul, pack_inp, unpack_out
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.rpc import RPCError, connect
from tensorforge.runtime.rpc.codec import PayloadError, pack, unpack
from tensorforge.runtime.rpc.server import RPCServer

TOKEN = "test-token-0123456789"
TINY = HWConfig.preset("tiny")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = RPCServer("cyclesim", port=0, token=TOKEN, run_timeout=60,
                    read_timeout=2.0, work_dir=tmp_path_factory.mktemp("rpc"))  # fmt: skip
    with srv:
        yield srv


@pytest.fixture(scope="module")
def remote(server):
    return connect(*server.address, token=TOKEN, timeout=120)


@pytest.fixture(scope="module")
def kernel():
    return build_matmul(TINY, 16, 8, 8, seed=3)


def _raw(server: RPCServer, data: bytes) -> socket.socket:
    s = socket.create_connection(server.address, timeout=10)
    s.sendall(data)
    return s


# ---- results -------------------------------------------------------------------------------------


def test_info_and_loopback_default(server, remote):
    info = remote.info()
    assert info["protocol"] == "tensorforge-rpc/1" and info["device"] == "cyclesim"
    assert server.address[0] == "127.0.0.1"


def test_program_run_is_bit_exact_and_cycle_equal(remote, kernel):
    inputs = {"A": pack_inp(TINY, kernel.a)}
    outputs, meta = remote.run_program(kernel.image, inputs)
    got = unpack_out(TINY, outputs["C"])
    np.testing.assert_array_equal(got, kernel.reference())  # numpy
    local, result = kernel.run_on("cyclesim")
    np.testing.assert_array_equal(got, local)
    assert meta["cycles"] == result.cycles and meta["device"] == "cyclesim"


@pytest.fixture(scope="module")
def cnn():
    """The small CNN compiled for the accelerator, its input name and an input."""
    model = small_cnn(16)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    name = model.graph.input[0].name
    module = tensorforge.compile(model, "vta -config=tiny -device=sim",
                                 calibration={name: x})  # fmt: skip
    return module, name, x


def test_module_run_matches_local_sim_and_cyclesim(remote, tmp_path, cnn):
    module, name, x = cnn
    module = tensorforge.Module.from_bytes(module.to_bytes())
    want = module.run({name: x})
    path = tmp_path / "m.tfm"
    module.save(path)
    outputs, meta = remote.run_module(path, {name: x}, repeat=2)
    for k, v in want.items():
        np.testing.assert_array_equal(outputs[k], v)
    module.use_device("cyclesim").run({name: x})
    local = {k: r.cycles for k, r in module.device_results().items()}
    assert meta["calls"] == local and meta["cycles"] == sum(local.values())
    assert len(meta["wall_s"]) == 2


def test_concurrent_clients(server, kernel):
    inputs = {"A": pack_inp(TINY, kernel.a)}
    errors, outs = [], []

    def client() -> None:
        try:
            r = connect(*server.address, token=TOKEN, timeout=120)
            out, _ = r.run_program(kernel.image, inputs)
            outs.append(unpack_out(TINY, out["C"]))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(outs) == 4
    for o in outs:
        np.testing.assert_array_equal(o, kernel.reference())


def _conv_task(size: int) -> Task:
    """A 3x3 conv of 8 channels on `tiny`, size x size: a task of the accelerator's template."""
    wl = {"hw": TINY.to_dict(), "n": 1, "ic": 8, "h": size, "w": size, "oc": 8, "kh": 3,
          "kw": 3, "stride_h": 1, "stride_w": 1, "pad_h": 1, "pad_w": 1, "pool_h": 1,
          "pool_w": 1, "residual": False}  # fmt: skip
    return Task("vta.conv2d", wl, "vta -config=tiny")


def test_rpc_runner_measures_like_the_local_cycle_model(server):
    task = _conv_task(6)
    configs = [task.space.get(int(i)).values for i in task.space.valid_indices()[:4]]
    builder = Builder(2, timeout=120)
    # a pool of two boards: the same server twice
    with RPCRunner([f"127.0.0.1:{server.address[1]}"] * 2, token=TOKEN) as rpc:
        remote = measure(task, configs, builder, rpc)
    with SimRunner("cyclesim", n_parallel=2) as sim:
        local = measure(task, configs, builder, sim)
    builder.close()
    assert [r.cost for r in remote] == [r.cost for r in local]
    assert all(r.ok for r in remote)


def test_rpc_runner_refuses_a_server_without_cycles(tmp_path):
    with RPCServer("sim", port=0, token=TOKEN, work_dir=tmp_path) as plain:
        with pytest.raises(ValueError, match="serves device 'sim', which counts no cycles"):
            RPCRunner([f"127.0.0.1:{plain.address[1]}"], token=TOKEN)


# ---- security ------------------------------------------------------------------------------------


def test_wrong_or_missing_token_is_refused_and_logged(server, caplog):
    with caplog.at_level(logging.WARNING, logger="tensorforge.rpc"):
        with pytest.raises(RPCError) as info:
            connect(*server.address, token="not-the-token")
        assert info.value.kind == "unauthorized"
        s = _raw(server, b"GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 401 " in s.recv(4096).split(b"\r\n")[0] + b" "
        s.close()
    assert sum("refused" in r.getMessage() for r in caplog.records) >= 2


def test_request_size_is_bounded(tmp_path, kernel):
    with RPCServer("sim", port=0, token=TOKEN, max_request_bytes=1000,
                   work_dir=tmp_path) as small:  # fmt: skip
        r = connect(*small.address, token=TOKEN)
        with pytest.raises(RPCError) as info:
            r.upload(kernel.image.to_bytes())
        assert info.value.kind == "too_large" and "1,000" in str(info.value)
        assert r.info()["device"] == "sim"  # still serving
        r.max_request_bytes = None  # a client that does not check first: the server refuses
        with pytest.raises(RPCError) as info:
            r.upload(kernel.image.to_bytes())
        assert info.value.kind in ("too_large", "connection")
        assert r.info()["device"] == "sim"


def test_an_oversized_request_is_refused_before_it_is_sent(tmp_path):
    with RPCServer("sim", port=0, token=TOKEN, max_request_bytes=1000,
                   work_dir=tmp_path) as small:  # fmt: skip
        r = connect(*small.address, token=TOKEN)
        with pytest.raises(RPCError, match=r"takes requests of up to 1,000 bytes, not 2,005 "):
            r.upload(b"TFMOD" + bytes(2000))


def test_uploads_never_escape_the_work_folder(server, remote, kernel):
    for bad in ("../../etc/passwd", "a" * 63, "A" * 64):
        with pytest.raises(RPCError) as info:
            remote._request("POST", f"/v1/run?id={bad}", pack({}, {}))
        assert info.value.kind == "bad_request"
    with pytest.raises(RPCError, match="not a module"):
        remote.upload(b"#!/bin/sh\nrm -rf /\n", "module")
    with pytest.raises(RPCError, match="bad_upload"):
        remote.upload(b"TFPROG\x00\x01" + b"\xff" * 40, "program")
    remote.upload(kernel.image.to_bytes())
    names = [p.name for p in server.work_dir.iterdir()]
    assert names and all(len(n.split(".")[0]) == 64 and n.endswith((".tfp", ".tfm"))
                         for n in names)  # fmt: skip


def test_payloads_are_checked_before_they_expand():
    with pytest.raises(PayloadError, match="expands to"):
        unpack(pack({}, {"x": np.zeros(1 << 20, np.uint8)}), max_expanded=1 << 16)
    with pytest.raises(PayloadError, match="not an .npz"):
        unpack(b"PK\x03\x04 not really")
    obj = np.array([{"a": 1}], dtype=object)
    with pytest.raises(ValueError, match="Python objects"):
        pack({}, {"x": obj})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ([], "run options must be a JSON object, not list"),
        ({"device_options": [1]}, "'device_options' must be a JSON object"),  # was 500 internal
        ({"repeat": -1}, "'repeat' must be an int in \\[0, 1000\\], not -1"),
        ({"number": 10**12}, "'number' must be an int in \\[0, 1000000\\]"),
        ({"min_repeat_ms": float("nan")}, "'min_repeat_ms' must be a number"),
    ],
)
def test_bad_measure_options_are_a_400_naming_the_option(server, remote, options, message):
    # found by fuzzing: device_options of the wrong type reached a dict merge (500 internal)
    task = Task("x86.dense", {"m": 1, "n": 8, "k": 8, "dtype": "float32", "prepacked": True},
                "llvm")  # fmt: skip
    from tensorforge.compiler.autotune.rpc import artifact_to_payload

    meta, arrays, blobs = unpack(artifact_to_payload(task.build(task.space.default.values)))
    with pytest.raises(RPCError, match=message) as info:
        remote.measure(pack({**meta, "options": options}, arrays, blobs))
    assert info.value.kind == "bad_request"
    assert remote.info()["device"] == "cyclesim"  # still serving


@pytest.mark.parametrize("inputs", [None, "tuple", 1, ["list"]])
def test_an_artifact_payload_with_a_bad_inputs_kind_is_refused(inputs):
    # found by fuzzing the server: any other value made a dict of the inputs, and the kernel's
    # call failed inside the worker with a TypeError
    from tensorforge.compiler.autotune.rpc import artifact_from_payload, artifact_to_payload

    task = Task("x86.dense", {"m": 1, "n": 8, "k": 8, "dtype": "float32", "prepacked": True},
                "llvm")  # fmt: skip
    meta, arrays, blobs = unpack(artifact_to_payload(task.build(task.space.default.values)))
    with pytest.raises(ValueError, match="inputs must be 'list' or 'dict', not"):
        artifact_from_payload({**meta, "inputs": inputs}, arrays, blobs)
    assert artifact_from_payload(meta, arrays, blobs).symbol == meta["symbol"]


# ---- faults --------------------------------------------------------------------------------------


def test_stalled_and_crashed_clients_do_not_block_others(server, remote):
    head = (f"POST /v1/upload?kind=module HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}"
            "\r\nContent-Length: 100000\r\n\r\n").encode()  # fmt: skip
    stalled = _raw(server, head + b"TFMOD")  # sends 5 of 100000 bytes, then waits
    crashed = _raw(server, head + b"TFMOD\x00")
    crashed.close()  # a client that dies mid-upload
    t0 = time.perf_counter()
    assert remote.info()["device"] == "cyclesim"
    assert time.perf_counter() - t0 < 1.5  # not waiting on the stalled one
    # the stalled connection is dropped after read_timeout (2 s)
    stalled.settimeout(10)
    assert stalled.recv(4096) == b""
    stalled.close()
    assert remote.info()["device"] == "cyclesim"


def test_too_many_connections_are_answered_busy(tmp_path):
    with RPCServer("sim", port=0, token=TOKEN, max_connections=1, read_timeout=5,
                   work_dir=tmp_path) as one:  # fmt: skip
        hold = _raw(one, b"GET /v1/info HTTP/1.1\r\n")  # an unfinished request holds the slot
        time.sleep(0.2)
        with pytest.raises(RPCError) as info:
            connect(*one.address, token=TOKEN, timeout=10)
        assert info.value.kind == "busy"
        hold.close()


def test_hung_run_is_stopped_and_the_next_works(server, remote, kernel, cnn):
    module, name, x = cnn
    old = server.run_timeout
    # the model's run (tens of ms of cycle simulation per layer) cannot finish in 20 ms: it
    # stands for a hung accelerator
    server.run_timeout = 0.02
    try:
        with pytest.raises(RPCError) as info:
            remote.run_module(module, {name: x}, repeat=5)
        assert info.value.kind == "run_timeout" and "stopped" in str(info.value)
    finally:
        server.run_timeout = old
    out, _ = remote.run_program(kernel.image, {"A": pack_inp(TINY, kernel.a)})
    np.testing.assert_array_equal(unpack_out(TINY, out["C"]), kernel.reference())


def test_config_mismatch_names_both(tmp_path, kernel):
    with RPCServer("sim", config="pynq", port=0, token=TOKEN, work_dir=tmp_path) as pynq:
        r = connect(*pynq.address, token=TOKEN)
        with pytest.raises(RPCError) as info:
            r.run_program(kernel.image, {"A": pack_inp(TINY, kernel.a)})
        assert info.value.kind == "run_error"
        assert "'tiny'" in str(info.value) and "'pynq'" in str(info.value)


def test_unreachable_server_is_a_clear_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(RPCError, match=f"cannot reach RPC server 127.0.0.1:{port}"):
        connect("127.0.0.1", port, token=TOKEN, timeout=5)
    with pytest.raises(ValueError, match="token"):
        connect("127.0.0.1", port, token="")


def test_an_address_that_never_accepts_times_out_with_a_clear_error():
    """A dead or filtered address never answers the connection: the client gives up after its
    connect time-out, not after the long wait meant for a run's answer."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    backlog = []
    for _ in range(4):  # fill the accept queue: further connections are never answered
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        backlog.append(c)
    start = time.monotonic()
    try:
        with pytest.raises(RPCError, match=f"cannot reach RPC server 127.0.0.1:{port}: no "
                           "answer to the connection within 0.5 s"):  # fmt: skip
            connect("127.0.0.1", port, token=TOKEN, timeout=60, connect_timeout=0.5)
    finally:
        for c in (*backlog, listener):
            c.close()
    assert time.monotonic() - start < 5


def test_a_server_that_is_not_ours_is_named_as_such():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), NotFound) as other:
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            with pytest.raises(RPCError, match="404 http: .no body.; is it a tensorforge RPC"):
                connect(*other.server_address[:2], token=TOKEN, timeout=10)
        finally:
            other.shutdown()


@pytest.mark.parametrize(
    ("port", "message"),
    [(99999, "port must be an integer from 0 to 65535, not 99999"), (-1, "not -1")],
)
def test_a_port_out_of_range_is_a_clear_error(tmp_path, port, message):
    with pytest.raises(ValueError, match=message):
        RPCServer("sim", port=port, token=TOKEN, work_dir=tmp_path)


# ---- the command line ----------------------------------------------------------------------------


def test_cli_run_remote(server, tmp_path, cnn, capsys):
    module, name, x = cnn
    np.save(tmp_path / "x.npy", x)
    module.save(tmp_path / "m.tfm")
    host, port = server.address
    rc = main(["run", str(tmp_path / "m.tfm"), "--input", str(tmp_path / "x.npy"),
               "--remote", f"{host}:{port}", "--token", TOKEN])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and f"ran on {host}:{port} (device cyclesim" in out
    for key, value in tensorforge.Module.from_bytes(module.to_bytes()).run({name: x}).items():
        assert f"{key}: {value.dtype}{list(value.shape)} min {value.min():.4g}" in out
    rc = main(["run", str(tmp_path / "m.tfm"), "--input", str(tmp_path / "x.npy"),
               "--remote", f"{host}:{port}", "--token", "wrong-token-123"])  # fmt: skip
    assert rc == 1 and "unauthorized" in capsys.readouterr().err


def test_cli_tune_on_an_rpc_server(server, tmp_path, cnn, capsys):
    import onnx

    _, name, x = cnn
    onnx.save(small_cnn(16), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", x)
    host, port = server.address
    log = tmp_path / "t.jsonl"
    rc = main(["tune", str(tmp_path / "m.onnx"), "--target", "vta -config=tiny",
               "--calibrate", str(tmp_path / "x.npy"), "--rpc", f"{host}:{port}",
               "--token", TOKEN, "--trials", "2", "--tasks", "0", "--log", str(log),
               "--no-progress"])  # fmt: skip
    assert rc == 0, capsys.readouterr()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 2 and all(r["cost"] > 0 and not r["error"] for r in records)


# ---- a board-side server ------------------------------------------------------------------------

# what a board's Python may lack: LLVM (no 32-bit ARM wheels), onnx, and every extra
BOARD_LACKS = ["llvmlite", "onnx", "tqdm", "amaranth", "xgboost", "onnxruntime", "scipy",
               "cocotb", "distributed", "matplotlib", "torch", "pyopencl"]  # fmt: skip


@pytest.fixture(scope="module")
def board_server(tmp_path_factory):
    """`tensorforge rpc serve` in a Python where only numpy and this package import (its workers,
    started by the server, inherit the same limits through sitecustomize)."""
    import os
    import subprocess
    import sys

    site = tmp_path_factory.mktemp("board_site")
    (site / "sitecustomize.py").write_text(
        f"import sys\nfor _n in {BOARD_LACKS!r}:\n    sys.modules[_n] = None\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(site))
    cmd = [sys.executable, "-m", "tensorforge.cli", "rpc", "serve", "--device", "cyclesim",
           "--port", str(port), "--token", TOKEN]  # fmt: skip
    out = subprocess.PIPE
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.stdout.read()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the board-side server did not start"
            time.sleep(0.2)
    yield port
    proc.terminate()
    proc.wait(timeout=30)


def test_a_server_without_llvm_runs_programs_and_measures_for_the_tuner(board_server, kernel):
    remote = connect("127.0.0.1", board_server, token=TOKEN, timeout=120)
    outputs, meta = remote.run_program(kernel.image, {"A": pack_inp(TINY, kernel.a)})
    np.testing.assert_array_equal(unpack_out(TINY, outputs["C"]), kernel.reference())  # numpy
    assert meta["cycles"] == kernel.run_on("cyclesim")[1].cycles
    task = _conv_task(4)
    configs = [task.space.get(int(i)).values for i in task.space.valid_indices()[:2]]
    builder = Builder(1, timeout=120)
    with RPCRunner([f"127.0.0.1:{board_server}"], token=TOKEN) as rpc:
        remote_results = measure(task, configs, builder, rpc)
    with SimRunner("cyclesim", n_parallel=1) as sim:
        local = measure(task, configs, builder, sim)
    builder.close()
    assert all(r.ok for r in remote_results), [r.error for r in remote_results]
    assert [r.cost for r in remote_results] == [r.cost for r in local]


@pytest.mark.parametrize("key", ["bitstream", "cache_dir", "trace", "pynq_module"])
def test_measure_refuses_device_options_that_name_files_on_the_server(server, remote, key):
    # a client's device_options overrode the server's, a bitstream or cache directory among them
    task = Task("x86.dense", {"m": 1, "n": 8, "k": 8, "dtype": "float32", "prepacked": True},
                "llvm")  # fmt: skip
    from tensorforge.compiler.autotune.rpc import artifact_to_payload

    meta, arrays, blobs = unpack(artifact_to_payload(task.build(task.space.default.values)))
    options = {"device_options": {key: "/tmp/elsewhere"}}
    with pytest.raises(RPCError, match=rf"device options \['{key}'\] are the server's to set"):
        remote.measure(pack({**meta, "options": options}, arrays, blobs))
