"""Measuring on a Dask cluster (a LocalCluster of two one-thread worker processes): the same
trials as the local runners and builders, failures included.

Oracles: the local `SimRunner("cyclesim")` (the cycle model is deterministic, so a cluster run
must count the same cycles), the local `Builder` (same payload bytes for the same config and
seed), and the accelerator's int8 reference / numpy behind each artifact's expected output.
"""

from __future__ import annotations

import socket
import sys
import time

import llvmlite.binding as llvm
import numpy as np
import pytest

pytest.importorskip(
    "distributed", reason="Dask distributed is not installed: pip install 'tensorforge[cluster]'"
)

import dask  # noqa: E402

from tensorforge.compiler.autotune.cluster import (  # noqa: E402
    ClusterBuilder,
    ClusterError,
    ClusterRunner,
    local_cluster,
)
from tensorforge.compiler.autotune.measure import (  # noqa: E402
    RunOutcome,
    SimRunner,
    make_runner,
    measure,
)
from tensorforge.compiler.autotune.task import Artifact, Task  # noqa: E402
from tensorforge.hw.config import HWConfig  # noqa: E402

CONV = {"hw": HWConfig.preset("tiny").to_dict(), "n": 1, "ic": 16, "h": 8, "w": 8, "oc": 16,
        "kh": 3, "kw": 3, "stride_h": 1, "stride_w": 1, "pad_h": 1, "pad_w": 1, "pool_h": 1,
        "pool_w": 1, "residual": False}  # fmt: skip
DENSE = {"m": 2, "n": 16, "k": 16, "dtype": "float32", "prepacked": True}


@pytest.fixture(scope="module")
def address():
    with local_cluster(n_workers=2, threads_per_worker=1) as addr:
        yield addr


@pytest.fixture(scope="module")
def runner(address):
    with ClusterRunner(address, backend="cyclesim", connect_timeout=10) as r:
        yield r


@pytest.fixture(scope="module")
def task():
    return Task("vta.conv2d", CONV, "vta -config=tiny")


def _object(ir: str) -> bytes:
    """Host object code of an LLVM IR module."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(ir)
    mod.triple = llvm.get_process_triple()
    tm = llvm.Target.from_triple(mod.triple).create_target_machine(reloc="pic")
    return tm.emit_object(mod)


def _llvm_artifact(ir: str, symbol: str) -> Artifact:
    """An artifact calling `void symbol(float *p)` with a 4-float buffer."""
    params = [("p", "float32", (4,))]
    return Artifact("llvm", _object(ir), [], np.zeros(4, "float32"), symbol, params)


#: `void bad(float *p)` writes through a null pointer (a segfault)
NULL_STORE = "define void @bad(float* %p) {\n  store volatile float 1.0, float* null\n  ret void\n}"
#: `void spin(float *p)` never returns
SPIN = """define void @spin(float* %p) {
entry:
  br label %loop
loop:
  store volatile float 1.0, float* %p
  br label %loop
}"""


def test_cluster_cycles_equal_the_local_cycle_model(address, runner, builder, task):
    configs = [c.values for c in task.space][:6]
    assert (runner.name, runner.unit) == ("cluster", "cycles")
    seen = []
    got = measure(task, configs, builder, runner, seed=1, on_result=seen.append)
    with SimRunner("cyclesim", n_parallel=2) as sim:
        want = measure(task, configs, builder, sim, seed=1)
    assert all(r.ok for r in got), [r.message for r in got]
    assert [r.cost for r in got] == [r.cost for r in want]
    assert len({r.cost for r in got}) > 1  # the knobs change the cycles
    assert len(seen) == len(configs) and all(r.run_s > 0 for r in got)
    with make_runner("cluster", address=address) as r:  # the name the CLI uses
        assert isinstance(r, ClusterRunner) and r.backend == "cyclesim"


def test_wrong_answers_and_crashes_are_failed_trials_and_the_runner_goes_on(address, runner, task):
    good = task.build(task.space.default.values, seed=2)
    wrong = task.build(task.space.default.values, seed=2)
    wrong.expected = wrong.expected.copy()
    wrong.expected.flat[5] += 1
    ended: dict[int, RunOutcome] = {}
    out = runner.run([good, wrong, good], lambda k, o: ended.__setitem__(k, o))
    assert [o.error for o in out] == ["", "wrong_answer", ""], [o.message for o in out]
    assert "differ from the oracle's" in out[1].message and out[0].costs == out[2].costs
    assert sorted(ended) == [0, 1, 2] and ended[1].error == "wrong_answer"

    dense = Task("x86.dense", DENSE, "llvm")
    fine = dense.build(dense.space.default.values)
    crash = _llvm_artifact(NULL_STORE, "bad")
    with ClusterRunner(address, backend="local", repeat=2, min_repeat_ms=5) as wall:
        assert wall.unit == "s"
        out = wall.run([fine, crash, fine])
    assert [o.error for o in out] == ["", "run_crash", ""], [o.message for o in out]
    assert "worker process running it died" in out[1].message
    assert all(len(o.costs) == 2 and min(o.costs) > 0 for o in (out[0], out[2]))


def test_a_late_run_times_out_and_the_cluster_recovers(runner, task):
    dense = Task("x86.dense", DENSE, "llvm")
    fine = dense.build(dense.space.default.values)
    # a second runner on the module's client (runners and builders may share one)
    with ClusterRunner(runner.client, "local", timeout=2, min_repeat_ms=5) as wall:
        t0 = time.perf_counter()
        out = wall.run([_llvm_artifact(SPIN, "spin"), fine])
        assert [o.error for o in out] == ["run_timeout", ""], [o.message for o in out]
        assert "no result within 2 s" in out[0].message
        assert time.perf_counter() - t0 < 20
        # the worker stuck in the late run was restarted: both workers take jobs again
        assert [o.error for o in wall.run([fine] * 4)] == [""] * 4
        runner.client.wait_for_workers(2, timeout=30)


def test_an_address_nobody_answers_fails_within_the_connect_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    t0 = time.perf_counter()
    with pytest.raises(ClusterError, match=f"scheduler at {address} does not answer within 2 s"):
        ClusterRunner(address, connect_timeout=2)
    assert time.perf_counter() - t0 < 2 + 5
    with dask.config.set({"scheduler-address": None}):
        with pytest.raises(ClusterError, match="no Dask cluster to measure on"):
            ClusterBuilder(None)


def test_options_are_checked_for_the_backend(runner):
    with pytest.raises(ValueError, match="backend must be one of cyclesim, rtl, local"):
        ClusterRunner(runner.client, backend="fpga")
    with pytest.raises(ValueError, match="repeat are options of the local backend"):
        ClusterRunner(runner.client, backend="cyclesim", repeat=5)
    with pytest.raises(ValueError, match="device_options are for the cyclesim and rtl"):
        ClusterRunner(runner.client, backend="local", device_options={})


def test_cluster_builder_builds_the_same_artifacts(runner, builder, task):
    configs = [c.values for c in task.space][:3]
    bad = {**configs[0], "nope": 1}
    with ClusterBuilder(runner.client) as cb:
        assert cb.n_parallel >= 1
        remote = cb.build(task, [*configs, bad], seed=7)
    local = builder.build(task, configs, seed=7)
    assert [o.error for _, o in remote] == ["", "", "", "build_error"]
    assert remote[3][0] is None and remote[3][1].message
    for (a, _), (b, _) in zip(remote, local, strict=False):
        assert a.payload == b.payload and np.array_equal(a.expected, b.expected)
    assert runner.client.status == "running"  # a client passed in is not closed


def test_without_distributed_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` fails
    with pytest.raises(ClusterError, match=r"pip install 'tensorforge\[cluster\]'"):
        ClusterRunner("tcp://127.0.0.1:8786")
