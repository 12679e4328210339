"""Every line of the README's "A short tour", run as written in a shell, in order, in one folder.

The commands are read from README.md, so the tour cannot drift from what works. Only budgets
shrink (trials, DSE candidates and synthesis) and the RPC port is a free one: each change is
listed in BUDGETS with its reason. Lines that leave files are checked for them.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# (pattern in the line, replacement): the tour's budgets are a user's; the test's are small
BUDGETS = [
    ("--trials 200", "--trials 3"),  # CPU tuning: three trials per task still tunes and logs
    ("--calibrate x.npy --log vta.jsonl", "--calibrate x.npy --log vta.jsonl --trials 2"),
    # DSE: the presets and one candidate, 1 trial, DSP/BRAM bounds instead of Yosys (minutes
    # per candidate)
    ("--space space.json --calibrate x.npy -o dse/",
     "--space space.json --calibrate x.npy -o dse/ --candidates 1 --no-synth --trials 1"),
    # Yosys on the `pynq` top takes minutes; `tiny` runs the same flow (the pynq figures are
    # benchmarks', tests/hw/test_synth_top.py checks the flow)
    ("hw synth --config pynq --part xc7z020", "hw synth --config tiny --part xc7z020"),
]  # fmt: skip

# files a line must leave behind
LEAVES = {
    "tensorforge sample": ["model.onnx", "x.npy"],
    "--save matmul.tfp": ["matmul.tfp"],
    "--trace t.json": ["t.json"],
    "-o model.tfm": ["model.tfm"],
    "--log tune.jsonl": ["tune.jsonl"],
    "--log vta.jsonl": ["vta.jsonl"],
    "-o gpu.tfm": ["gpu.tfm"],
    "-o curve.png": ["curve.png"],
    "> space.json": ["space.json"],
    "-o dse/": ["dse"],
    "--output-dir out/": ["out"],
    "-o trace.json": ["trace.json"],
    "-o build/": ["build"],
    "--board pynq-z2": [],
    "hw testbench": ["tb/run.py"],
}


def tour_lines() -> list[str]:
    """The commands of the README's tour, comments removed, in order."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## A short tour\n\n```sh\n(.*?)```", text, re.S)
    assert block, "README.md has no '## A short tour' sh block"
    lines = []
    for raw in block.group(1).splitlines():
        if raw.strip().startswith("#") or not raw.strip():
            continue  # a continuation comment
        lines.append(_strip_comment(raw))
    return lines


def _strip_comment(line: str) -> str:
    """The line without its trailing `# ...` comment (a `#` outside quotes after a space)."""
    quote = None
    for i, ch in enumerate(line):
        if ch in "\"'" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or line[i - 1] == " "):
            return line[:i].rstrip()
    return line.rstrip()


def _with_budget(line: str) -> str:
    for old, new in BUDGETS:
        line = line.replace(old, new)
    return line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The tour's lines build on each other in one folder (model.onnx, then model.tfm, ...): under
# pytest-xdist (`make test` runs `-n auto --dist loadgroup`) they stay on one worker. That
# worker may run other modules' tests between them (a run of 11-28 did: `sample` ran, the folder
# went with the module-scoped fixture, and every later line found no model.onnx), so the
# folder lives for the session and each line first runs the earlier lines this folder has not
# seen.
pytestmark = pytest.mark.xdist_group("readme_tour")


@pytest.fixture(scope="session")
def shell(tmp_path_factory):
    """Runs tour lines in one folder with this venv first on PATH; serves RPC in the background."""
    cwd = tmp_path_factory.mktemp("tour")
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
               TF_RPC_TOKEN="tour-token", MPLBACKEND="Agg")  # fmt: skip
    state = {"server": None, "port": _free_port()}

    def run(line: str) -> subprocess.CompletedProcess:
        run.done.add(line)
        line = _with_budget(line)
        if line.startswith("tensorforge rpc serve"):
            server = subprocess.Popen(
                shlex.split(line) + ["--port", str(state["port"])], cwd=cwd, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            state["server"] = server
            _wait_for_port(state["port"], server)
            return subprocess.CompletedProcess(line, 0, "", "")
        line = line.replace("host:9091", f"127.0.0.1:{state['port']}")
        return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=900)  # fmt: skip

    run.cwd = cwd
    run.done = set()
    yield run
    if state["server"] is not None:
        state["server"].terminate()
        state["server"].wait(timeout=30)


def _wait_for_port(port: int, server: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the RPC server exited: {server.stdout.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the RPC server did not listen on port {port} in {timeout} s")


def test_the_tour_has_the_documented_commands():
    lines = tour_lines()
    assert lines[0] == "tensorforge sample"  # it writes the files the others use
    assert all(line.startswith("tensorforge ") for line in lines), lines
    for needle in ("tune model.onnx", "dse model.onnx", "rpc serve", "--remote", "hw testbench"):
        assert any(needle in line for line in lines), needle


def _runs_here(line: str) -> bool:
    """Whether this interpreter has the extra the line needs."""
    import importlib.util

    needs = {"--target opencl": "pyopencl", "hw testbench": "cocotb"}
    return all(importlib.util.find_spec(m) for key, m in needs.items() if key in line)


@pytest.mark.parametrize("line", tour_lines())
def test_tour_line_runs_as_written(shell, line):
    if "--target opencl" in line:
        pytest.importorskip("pyopencl", reason="the OpenCL line needs the [gpu] extra")
    if "hw testbench" in line:
        pytest.importorskip("cocotb", reason="the cocotb line needs the [hw] extra")
    for earlier in tour_lines()[: tour_lines().index(line)]:  # what this line builds on
        if earlier not in shell.done and _runs_here(earlier):
            before = shell(earlier)
            assert before.returncode == 0, f"{line}: the earlier line {earlier!r} failed\n" + (
                f"{before.stdout[-3000:]}\n{before.stderr[-3000:]}"
            )
    done = shell(line)
    assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for key, files in LEAVES.items():
        if key in line:
            for name in files:
                assert (shell.cwd / name).exists(), f"{line} left no {name}"
