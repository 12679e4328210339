"""The ``pynq`` backend: the board driver code, run against the exported Verilog through the
board model (the `pynq` API over cocotb), and its errors.

Oracles: numpy (the demo kernel's and the compiled conv's reference), the functional simulator
(outputs bit for bit),
and the cycle model with the RAM model's latencies (`rtl.matched_timing`) and the board's buffer
placement (page-aligned, as XRT allocates: `PAGE_PLACEMENT`) for the CYCLES register.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import small_cnn
from tensorforge.demo import build_matmul, pack_inp, unpack_out
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.vta import DeviceError, open_device
from tensorforge.runtime.device.vta.pynq_model import (
    DRAM_BASE,
    PAGE_PLACEMENT,
    BoardModel,
    run_on_board_model,
)
from tensorforge.runtime.device.vta.rtl import check_simulator, matched_timing

TINY = HWConfig.preset("tiny")


def _needs_icarus():
    try:
        check_simulator("icarus")
    except DeviceError as exc:
        pytest.skip(str(exc))


@pytest.mark.rtl
def test_program_on_the_board_model_is_bit_exact_and_cycle_equal():
    _needs_icarus()
    k = build_matmul(TINY, 16, 8, 8, seed=5)
    inputs = {"A": pack_inp(TINY, k.a)}
    out, report = run_on_board_model(TINY, "program", k.image.to_bytes(), inputs)
    got = unpack_out(TINY, out["C"])
    np.testing.assert_array_equal(got, k.reference())
    sim, _ = k.run_on("sim")
    np.testing.assert_array_equal(got, sim)
    _, timed = k.run_on("cyclesim", timing=matched_timing(TINY), **PAGE_PLACEMENT)
    assert report["cycles"] == timed.cycles
    assert report["overlays"] == ["testbench.bit"] and report["flushes"] >= 3


@pytest.fixture(scope="module")
def cnn():
    """The small int8 CNN compiled for `tiny` on the functional simulator, its input name, an
    input and the module's outputs for it (the `sim` oracle)."""
    model = small_cnn(16)
    name = model.graph.input[0].name
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    module = tensorforge.compile(model, "vta -config=tiny -device=sim", calibration={name: x})
    return module, name, x, module.run({name: x})


@pytest.mark.rtl
def test_whole_model_on_the_board_model(cnn):
    _needs_icarus()
    module, name, x, want = cnn
    module = tensorforge.Module.from_bytes(module.to_bytes())
    out, report = run_on_board_model(TINY, "module", module.to_bytes(), {name: x})
    for k, v in want.items():
        np.testing.assert_array_equal(out[k], v)
    module.use_device("cyclesim", timing=matched_timing(TINY), **PAGE_PLACEMENT).run({name: x})
    assert report["calls"] == {k: r.cycles for k, r in module.device_results().items()}
    assert len(report["calls"]) >= 2


@pytest.mark.rtl
def test_board_built_for_another_config_is_refused():
    _needs_icarus()
    k = build_matmul(TINY, 4, 8, 8)
    other = TINY.replace(name="tiny_big_acc", log_acc_buff_size=13)
    with pytest.raises(DeviceError, match="CONFIG_HASH.*tiny_big_acc"):
        run_on_board_model(TINY, "program", k.image.to_bytes(), {"A": pack_inp(TINY, k.a)},
                           device_config=other)  # fmt: skip


def test_model_buffers_behave_like_cached_memory():
    dram = {}

    def dram_write(addr, data):
        dram[addr] = bytes(data)

    def dram_read(addr, n):
        return dram.get(addr, bytes(n))[:n]

    board = BoardModel(lambda off: 0, lambda off, v: None, dram_read, dram_write)
    a, b = board.allocate((100,), np.uint8), board.allocate((10,), np.uint8)
    assert a.device_address == DRAM_BASE and b.device_address == DRAM_BASE + 4096
    a[:] = 7
    assert dram_read(a.device_address, 100) == bytes(100)  # not flushed: DRAM is stale
    a.flush()
    assert dram_read(a.device_address, 100) == bytes([7]) * 100
    dram_write(a.device_address, bytes([9]) * 100)  # the accelerator writes
    assert int(a[0]) == 7  # the CPU still sees its cached copy
    a.invalidate()
    assert int(a[0]) == 9


def test_pynq_backend_errors():
    if importlib.util.find_spec("pynq") is None:
        with pytest.raises(DeviceError, match=r"tensorforge\[pynq\]"):
            open_device("pynq", TINY, bitstream="x.bit")
    board = BoardModel(lambda off: 0, lambda off, v: None, lambda a, n: bytes(n),
                       lambda a, d: None)  # fmt: skip
    with pytest.raises(DeviceError, match="no bitstream for HWConfig 'tiny'.*hw bitstream"):
        open_device("pynq", TINY, pynq_module=board)
    # registers that read 0: not a TensorForge accelerator
    with pytest.raises(DeviceError, match="HW_ID"):
        open_device("pynq", TINY, pynq_module=board, bitstream="x.bit")


@pytest.mark.rtl
def test_remote_run_on_the_board_model(tmp_path, cnn):
    """The laptop-to-board path without a board: RPC to a server whose device is the pynq
    backend on the board model."""
    _needs_icarus()
    from tensorforge.runtime.rpc import connect
    from tensorforge.runtime.rpc.server import RPCServer

    module, name, x, want = cnn
    module = tensorforge.Module.from_bytes(module.to_bytes())
    k = build_matmul(TINY, 16, 8, 8, seed=6)
    with RPCServer("pynq-model", port=0, token="board-model-token", work_dir=tmp_path,
                   run_timeout=300) as server:  # fmt: skip
        remote = connect(*server.address, token="board-model-token", timeout=600)
        assert remote.info()["device"] == "pynq-model"
        out, meta = remote.run_module(module, {name: x})
        prog_out, prog_meta = remote.run_program(k.image, {"A": pack_inp(TINY, k.a)})
    for key, value in want.items():
        np.testing.assert_array_equal(out[key], value)
    module.use_device("cyclesim", timing=matched_timing(TINY), **PAGE_PLACEMENT).run({name: x})
    assert meta["calls"] == {c: r.cycles for c, r in module.device_results().items()}
    np.testing.assert_array_equal(unpack_out(TINY, prog_out["C"]), k.reference())
    _, timed = k.run_on("cyclesim", timing=matched_timing(TINY), **PAGE_PLACEMENT)
    assert prog_meta["cycles"] == timed.cycles


@pytest.mark.rtl
def test_compiled_conv_over_rpc_on_the_board_model():
    """A `compiler.vta.conv2d` program image (3x3, per-channel requantization as the compiler
    quantizes by default, 2 virtual threads) uploaded over RPC to a ``pynq-model`` server: the
    small-shape twin of `benchmarks/rpc.py`'s ResNet-18 layer."""
    _needs_icarus()
    from tensorforge.compiler.quantize.requant import requant_params_per_channel
    from tensorforge.compiler.vta import conv2d
    from tensorforge.compiler.vta.layout import INPUT, OUTPUT
    from tensorforge.runtime.rpc import connect
    from tensorforge.runtime.rpc.server import RPCServer

    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8)
    b = rng.integers(-3000, 3000, 8, dtype=np.int32)
    bounds = 127 * np.abs(w.astype(np.int64)).reshape(8, -1).sum(1) + np.abs(b)
    requant = requant_params_per_channel(rng.uniform(0.5, 3.0, 8) * 1e-3, TINY,
                                         acc_bounds=bounds, relu=True)  # fmt: skip
    k = conv2d(TINY, (1, 8, 6, 6), w, b, padding=1, requant=requant, vthreads=2)
    x = rng.integers(0, 128, (1, 8, 6, 6), dtype=np.int8)
    with RPCServer("pynq-model", port=0, token="board-model-token", run_timeout=300,
                   device_options={"timeout_s": 240}) as server:  # fmt: skip
        remote = connect(*server.address, token="board-model-token", timeout=600)
        out, meta = remote.run_program(k.image, {INPUT: k.pack(x)})
    got = k.unpack(out[OUTPUT])
    want = k.reference(x)
    assert len(np.unique(want)) > 8  # the requantization keeps a range, not all 0 or 127
    np.testing.assert_array_equal(got, want)
    sim, _ = k.run(x, "sim")
    np.testing.assert_array_equal(got, sim)
    _, timed = k.run(x, "cyclesim", timing=matched_timing(TINY), **PAGE_PLACEMENT)
    assert meta["device"] == "pynq-model" and meta["cycles"] == timed.cycles


@pytest.mark.rtl
def test_board_model_time_out_is_the_servers_option(tmp_path):
    """``device_options={"timeout_s": ...}`` bounds each board-model simulation: a launch that
    cannot finish within it is reported as a failed run naming the limit, and the server goes
    on serving."""
    _needs_icarus()
    from tensorforge.runtime.rpc import RPCError, connect
    from tensorforge.runtime.rpc.server import RPCServer

    k = build_matmul(TINY, 16, 8, 8, seed=8)
    with RPCServer("pynq-model", port=0, token="board-model-token", work_dir=tmp_path,
                   run_timeout=300, device_options={"timeout_s": 0.001}) as server:  # fmt: skip
        remote = connect(*server.address, token="board-model-token", timeout=600)
        with pytest.raises(RPCError, match="did not finish within 0.001 s") as err:
            remote.run_program(k.image, {"A": pack_inp(TINY, k.a)})
        assert err.value.kind == "run_error"
        assert remote.info()["device"] == "pynq-model"
