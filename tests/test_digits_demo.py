"""The main job: the digits CNN in int8 with its layers on the simulated accelerator."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from tensorforge import api
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph.passes import optimize
from tensorforge.digits import load_digits_assets, run_digits_demo
from tensorforge.hw.config import HWConfig
from tensorforge.report import dram_bytes
from tensorforge.sim.latency import TimingParams


def test_int8_accuracy_on_the_accelerator_is_within_two_points_of_float(capsys):
    acc = run_digits_demo("pynq", backend="sim")
    model, split = load_digits_assets()
    session = ort.InferenceSession(str(model))
    logits = session.run(None, {"input": split["images"]})[0]
    assert acc["float"] == (logits.argmax(1) == split["labels"]).mean()  # onnxruntime agrees
    assert acc["int8"] >= acc["float"] - 0.02
    out = capsys.readouterr().out
    assert "on the accelerator: 3 of 4 conv/dense layers" in out
    assert "int8 requantization: mul (multiply+shift)" in out  # pynq has the ALU MUL
    for call in ("tf.qconv2d+tf.qmaxpool (conv2)", "tf.qconv2d (conv3)", "tf.qdense (dense)"):
        assert f"  {call} " in out


def _compile_digits(backend: str, x: np.ndarray):
    """The demo's accelerator module for ``tiny`` (2 virtual threads), compiled independently."""
    model, split = load_digits_assets()
    graph = optimize(from_onnx(str(model), input_shapes={"input": x.shape}))
    target = f"vta -config=tiny -device={backend} -vthreads=2"
    return api.compile(graph, target, calibration={"input": split["calib_images"]})


def test_cycle_accurate_backend_reports_the_cycle_models_cycles_per_layer(capsys, tmp_path):
    n = 8
    acc = run_digits_demo("tiny", backend="cyclesim", images=n, trace=str(tmp_path / "t.json"))
    out = capsys.readouterr().out
    assert (tmp_path / "t.json").stat().st_size > 0
    _, split = load_digits_assets()
    x, labels = split["images"][:n], split["labels"][:n]
    # The functional simulator is the oracle of the int8 results: bit-exact, so same accuracy.
    sim = _compile_digits("sim", x)
    predicted = sim.run({"input": x})[sim.outputs[0]].argmax(1)
    assert acc["int8"] == np.mean(predicted == labels)
    timed = _compile_digits("cyclesim", x)
    assert np.array_equal(timed.run({"input": x})[timed.outputs[0]].argmax(1), predicted)
    cfg = HWConfig.preset("tiny")
    bus_bytes = TimingParams.for_config(cfg).bus_bytes
    results = timed.device_results()
    assert len(results) == 3
    for label, r in results.items():
        # The report prints the cycle model's count for each layer ...
        row = next(line for line in out.splitlines() if line.startswith(f"  {label} "))
        assert row.split()[-1] == f"{r.cycles:,}"
        # ... which respects the roofline: one GEMM/ALU step and one bus beat per cycle at most.
        steps = r.stats["gemm_counter"] + r.stats["alu_counter"]
        assert r.cycles >= max(steps, dram_bytes(r.stats) / bus_bytes) > 0
    total = sum(r.cycles for r in results.values())
    assert f"{total:,} cycles = {total / cfg.clock_mhz / 1e3:.3f} ms of accelerator time" in out
