"""Fixtures shared by the test tree: the RTL simulators the `rtl` tests run on; and the write
checks of compiled kernels (runtime/guard.py) on for the whole suite, so a kernel that writes
outside its arguments fails the test that ran it (set TENSORFORGE_CHECK_WRITES=0 to compare),
the loop-IR verifier after every pass of the lowering pipeline (TENSORFORGE_VERIFY_EACH_PASS;
compiles outside the suite check before the first pass and after the last), and the kernel
cache's fingerprints checked against the code a repeat generates (TENSORFORGE_CHECK_KERNEL_CACHE,
compile.KernelCache.build_lowered)."""

from __future__ import annotations

import os
import shutil
import zlib

import numpy as np
import pytest

os.environ.setdefault("TENSORFORGE_CHECK_WRITES", "1")
os.environ.setdefault("TENSORFORGE_VERIFY_EACH_PASS", "1")  # the loop-IR verifier after each pass
os.environ.setdefault("TENSORFORGE_CHECK_KERNEL_CACHE", "1")  # repeats built and compared anyway

_TOOLS = {"icarus": "iverilog", "verilator": "verilator"}


def _skip_without(simulator: str) -> str:
    tool = _TOOLS[simulator]
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not on PATH (`make setup` installs it; run through `make test`)")
    pytest.importorskip("cocotb_tools.runner", reason="cocotb 2.x is not installed")
    pytest.importorskip("cocotbext.axi", reason="cocotbext-axi is not installed")
    return simulator


@pytest.fixture(params=["icarus", pytest.param("verilator", marks=pytest.mark.slow)])
def rtl_simulator(request: pytest.FixtureRequest) -> str:
    """Each RTL simulator in turn (Verilator's builds are slow: its case is marked `slow`);
    skips with the reason when the simulator or cocotb is missing."""
    return _skip_without(request.param)


@pytest.fixture
def icarus() -> str:
    """Icarus Verilog, for RTL tests that need one simulator; skips when it is missing."""
    return _skip_without("icarus")


@pytest.fixture(autouse=True)
def _reseed_module_rng(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test module's shared `RNG` generator starts each test from a seed of the test's own id,
    so a test's random data does not depend on which tests ran before it on its worker (which
    `make test`'s two workers and CI's share out differently): a failure seen anywhere is
    reproduced by running that one test."""
    module = getattr(request, "module", None)
    if isinstance(getattr(module, "RNG", None), np.random.Generator):
        test_id = request.node.nodeid.split("@", 1)[0]
        monkeypatch.setattr(module, "RNG", np.random.default_rng(zlib.crc32(test_id.encode())))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep `xdist_group` working (`make test`'s `--dist loadgroup`). pytest-xdist 3.8 groups a
    test by appending `@group` to `item._nodeid` on each worker, which pytest 9.2 no longer
    reads (a node's id is `item._id`), so every group was ignored: the compiled node suite and
    the onnx model data, whose tests share one cached run, ran it again on the other worker
    (8 minutes of a 48-minute suite). Here the suffix is put where pytest reads it, unless
    xdist already managed to."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                 for m in item.iter_markers("xdist_group")}  # fmt: skip
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            from _pytest.nodes import coerce_node_id

            item._id = coerce_node_id(item.nodeid + suffix)
