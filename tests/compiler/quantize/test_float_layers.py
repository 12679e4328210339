"""Why a conv or dense layer stays float for the accelerator: `float_layers` names the reason,
the placement table shows it, and a model with no layer the accelerator can compute compiles
for the CPU (with a warning naming each layer) instead of asking for calibration inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.compile_vta import (
    AcceleratorGroups,
    compile_graph_vta,
    quantize_for,
)
from tensorforge.compiler.quantize.graph import float_layers, quantize_graph
from tensorforge.hw.config import HWConfig

PYNQ = HWConfig.preset("pynq")
TARGET = "vta -config=pynq -device=sim"


def _conv(b: GraphBuilder, x: str, cin: int, cout: int, name: str, **attrs) -> str:  # noqa: ANN003
    rng = np.random.default_rng(len(name))
    group = attrs.get("group", 1)
    w = rng.standard_normal((cout, cin // group, 3, 3)).astype(np.float32) / 8
    (y,) = b.add_node("Conv", [x, b.add_constant(f"{name}_w", w)], {"pads": [1] * 4, **attrs},
                      name=name)  # fmt: skip
    return y


def _layers() -> GraphBuilder:
    """One layer of each kind the accelerator takes or leaves, 32 channels, 8x8."""
    b = GraphBuilder("layers")
    x = b.add_input("x", (1, 32, 8, 8), "float32")
    y = _conv(b, x, 32, 32, "plain")
    y = _conv(b, y, 32, 32, "depthwise", group=32)
    y = _conv(b, y, 32, 32, "dilated", dilations=[2, 2], pads=[2] * 4)
    y = _conv(b, y, 32, 32, "wide_groups", group=2)
    y = _conv(b, y, 32, 8, "narrow_groups", group=4)
    (y,) = b.add_node("Relu", [y], name="relu")
    return b.build([y])


def _x(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_each_refused_layer_has_its_reason() -> None:
    graph = _layers()
    cpu = float_layers(graph, AcceleratorGroups(PYNQ, "cpu"))
    assert set(cpu) == {"depthwise", "dilated", "narrow_groups"}
    assert "-depthwise=accel" in cpu["depthwise"]
    assert "dilations (2, 2)" in cpu["dilated"]
    assert "channel blocks" in cpu["narrow_groups"]
    accel = float_layers(graph, AcceleratorGroups(PYNQ, "accel"))
    assert set(accel) == {"dilated", "narrow_groups"}  # the depthwise conv fits then
    # quantize_graph's own default (grouped=False) leaves every grouped conv float
    assert set(float_layers(graph)) == {"depthwise", "dilated", "wide_groups", "narrow_groups"}


def test_dense_layers_name_what_the_dense_core_lacks() -> None:
    b = GraphBuilder("dense")
    x = b.add_input("x", (16, 16), "float32")
    v = b.add_input("v", (16, 16), "float32")
    w = b.add_constant("w", _x((16, 16), 1))
    (a,) = b.add_node("MatMul", [x, w], name="fits")
    (c,) = b.add_node("MatMul", [a, v], name="runtime_weight")
    (d,) = b.add_node("Gemm", [c, w], {"alpha": 0.5}, name="scaled")
    (e,) = b.add_node("Gemm", [d, w], {"transA": 1}, name="transposed")
    (f,) = b.add_node("Gemm", [w, e], name="const_first")
    reasons = float_layers(b.build([f]))
    assert set(reasons) == {"runtime_weight", "transposed", "const_first"}  # alpha: scaled B
    assert "computed at run time" in reasons["runtime_weight"]
    assert "computed at run time" in reasons["const_first"]
    assert "transA" in reasons["transposed"]


@pytest.mark.parametrize("trans_b", [0, 1])
def test_a_gemm_scaled_by_alpha_runs_on_the_accelerator(trans_b: int) -> None:
    """alpha * (x @ B) is x @ (alpha * B): such a Gemm (Keras and tf2onnx write them) stayed
    float on the CPU (benchmarks/vta_fuzz.py: 3% of its models). Its int8 form on the
    accelerator equals the int8 graph's reference bit for bit, and the float model closely."""
    b = GraphBuilder("scaled")
    x = b.add_input("x", (4, 32), "float32")
    w = _x((24, 32) if trans_b else (32, 24), 4) / 6
    bias = b.add_constant("c", _x((24,), 5))
    (y,) = b.add_node("Gemm", [x, b.add_constant("w", w), bias],
                      {"alpha": 0.25, "transB": trans_b}, name="scaled")  # fmt: skip
    graph = b.build([y])
    feed = {"x": _x((4, 32), 6)}
    module = compile_graph_vta(graph, TARGET, feed, progress=False)
    assert {r[0]: r[2] for r in module.stats["placement"]}["scaled"] == "vta"
    got = module.run(feed)[y]
    q = quantize_for(graph, PYNQ, feed, "mul")
    assert np.array_equal(got, run_graph(q, feed)[y])
    want = run_graph(graph, feed)[y]
    assert np.abs(got - want).max() < 0.02 * np.abs(want).max()


def test_the_placement_table_gives_the_reasons() -> None:
    graph = _layers()
    x = _x((1, 32, 8, 8))
    module = compile_graph_vta(graph, TARGET, {"x": x}, progress=False)
    rows = {r[0]: r for r in module.stats["placement"]}
    assert rows["plain"][2] == rows["wide_groups"][2] == "vta"
    for name in ("depthwise", "dilated", "narrow_groups"):
        assert rows[name][2] == "cpu" and rows[name][3].startswith("float layer: "), rows[name]
    assert "-depthwise=accel" in rows["depthwise"][3]
    assert rows["relu"][3] == "float op"
    # the module still computes the int8 graph's reference (the float layers on the CPU)
    q = quantize_for(graph, PYNQ, {"x": x}, "mul")
    want = run_graph(q, {"x": x})[graph.outputs[0]]
    np.testing.assert_allclose(module.run({"x": x})[graph.outputs[0]], want, rtol=1e-5,
                               atol=1e-5 * float(np.abs(want).max()))  # fmt: skip


def _nothing_fits() -> tuple:
    """A dilated conv, a depthwise one and a 3-D conv: no layer the accelerator computes."""
    b = GraphBuilder("nothing")
    x = b.add_input("x", (1, 16, 6, 6), "float32")
    y = _conv(b, x, 16, 16, "dilated", dilations=[2, 2], pads=[2] * 4)
    y = _conv(b, y, 16, 16, "depthwise", group=16)
    (y,) = b.add_node("Unsqueeze", [y, b.add_constant("ax", np.array([2], np.int64))])
    w3 = b.add_constant("w3", _x((4, 16, 1, 3, 3), 2) / 8)
    (y,) = b.add_node("Conv", [y, w3], {"pads": [0, 1, 1, 0, 1, 1]}, name="conv3d")
    return b.build([y]), _x((1, 16, 6, 6), 3)


def test_a_model_with_nothing_for_the_accelerator_compiles_for_the_cpu() -> None:
    graph, x = _nothing_fits()
    want = run_graph(graph, {"x": x})[graph.outputs[0]]
    with pytest.warns(UserWarning, match="nothing in this model runs on the accelerator") as rec:
        module = compile_graph_vta(graph, TARGET, None, progress=False)  # no calibration needed
    message = str(rec[0].message)
    assert "'dilated'" in message and "'depthwise'" in message and "3-D convolution" in message
    assert {k.kind for k in module.kernels} == {"llvm"}
    assert module.stats["offloaded_macs"] == 0
    np.testing.assert_allclose(module.run({"x": x})[graph.outputs[0]], want, rtol=1e-5,
                               atol=1e-6)  # fmt: skip


def test_quantize_graph_output_without_int8_ops_compiles_without_calibration() -> None:
    """quantize_graph of such a model changes nothing; compiling its output for the
    accelerator used to ask for calibration inputs it had already been given."""
    graph, x = _nothing_fits()
    q = quantize_graph(graph, {"x": x}, PYNQ)
    assert not any(n.op.startswith("tf.") for n in q.nodes)
    with pytest.warns(UserWarning, match="no conv or dense layer fits"):
        module = compile_graph_vta(q, TARGET, progress=False)
    np.testing.assert_allclose(module.run({"x": x})[q.outputs[0]],
                               run_graph(graph, {"x": x})[graph.outputs[0]], rtol=1e-5,
                               atol=1e-6)  # fmt: skip


def test_a_model_with_layers_that_fit_still_needs_calibration() -> None:
    with pytest.raises(ValueError, match="needs calibration inputs"):
        compile_graph_vta(_layers(), TARGET, None, progress=False)
