"""quantize_graph on the shipped digits CNN: from_onnx -> optimize -> quantize_graph -> run_graph.

Oracles: onnxruntime-free float accuracy of the same graph; an independent layer-by-layer int8
computation with compiler/quantize/reference.py called directly (its own calibration, scales,
weights and requantization), which the graph's int8 values must equal bit for bit."""

from __future__ import annotations

import re
from pathlib import Path

import compiler_ops as ops
import numpy as np
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import GraphBuilder, GraphError, run_graph
from tensorforge.compiler.graph.compile_vta import vta_options
from tensorforge.compiler.graph.passes import fuse_ops, optimize, partition_report, plan_memory
from tensorforge.compiler.graph.reference import run_node
from tensorforge.compiler.graph.verify import verify_graph
from tensorforge.compiler.quantize import (
    AbsMaxObserver,
    PercentileObserver,
    choose_scale,
    conv2d_int8,
    conv2d_nchw,
    dense_int8,
    max_pool2d_int8,
    quantize,
    quantize_bias,
    quantize_weight,
    requant_params,
)
from tensorforge.compiler.quantize.graph import quantize_graph
from tensorforge.compiler.target import Target
from tensorforge.hw.config import HWConfig

DATA = Path(__file__).resolve().parents[3] / "tensorforge" / "data"
N_TEST = 450


@pytest.fixture(scope="module")
def split() -> dict[str, np.ndarray]:
    with np.load(DATA / "digits_test.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def float_graph():
    shapes = {"input": (N_TEST, 1, 8, 8)}
    return optimize(from_onnx(DATA / "digits_cnn.onnx", input_shapes=shapes))


def _cfg(alu_mul: bool) -> HWConfig:
    return HWConfig.preset("pynq").replace(alu_mul=alu_mul)


def _values(graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    env = {**graph.constants, **inputs}
    for node in graph.nodes:
        env.update(run_node(graph, node, env))
    return env


def _accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def _multiplies(q) -> bool:
    """Whether some requantization of `q` multiplies (a MUL step or per-channel multipliers)."""
    steps = [op for n in q.nodes for op in n.attr_dict.get("requant_ops", ())]
    return "MUL" in steps or any(n.attr_dict.get("channel_multipliers") for n in q.nodes)


@pytest.mark.parametrize(
    ("mode", "alu_mul", "observer", "weights"),
    [
        ("shift", False, AbsMaxObserver, None),
        ("shift", False, PercentileObserver, None),
        ("mul", True, AbsMaxObserver, "per-tensor"),
        ("mul", True, AbsMaxObserver, None),
    ],
)
def test_digits_int8_accuracy_is_within_two_points_of_float(
    float_graph, split, mode: str, alu_mul: bool, observer, weights
) -> None:
    calib = {"input": split["calib_images"]}
    q = quantize_graph(float_graph, calib, _cfg(alu_mul), mode, observer, weights=weights)
    verify_graph(q)
    assert q.inputs == float_graph.inputs and q.outputs == float_graph.outputs
    ops = [n.op for n in q.nodes]
    assert ops == ["tf.quantize", "tf.qconv2d", "tf.qconv2d", "tf.qmaxpool", "tf.qconv2d",
                   "Flatten", "tf.qdense", "tf.dequantize"]  # fmt: skip
    assert _multiplies(q) == (mode == "mul")
    per_channel = [bool(n.attr_dict.get("channel_multipliers")) for n in q.nodes]
    assert any(per_channel) == (mode == "mul" and weights is None)  # the default in mode mul
    float_acc = _accuracy(
        run_graph(float_graph, {"input": split["images"]})["logits"], split["labels"]
    )
    int8_acc = _accuracy(run_graph(q, {"input": split["images"]})["logits"], split["labels"])
    assert float_acc > 0.9
    assert int8_acc >= float_acc - 0.02, (mode, observer.__name__, int8_acc, float_acc)


def _independent_int8_logits(split, mode: str, cfg: HWConfig) -> np.ndarray:
    """The digits chain quantized by hand: abs-max calibration on a numpy float forward pass,
    then compiler/quantize/reference.py layer by layer (mirrors docs/quantization.md)."""
    from onnx import load, numpy_helper

    initializers = load(DATA / "digits_cnn.onnx").graph.initializer
    weights = {t.name: numpy_helper.to_array(t) for t in initializers}
    pow2 = mode == "shift"

    def scale(x: np.ndarray) -> float:
        return choose_scale(AbsMaxObserver().observe(x).threshold(), power_of_two=pow2)

    def float_conv(x, name):
        y = conv2d_nchw(x, weights[f"{name}.weight"], 1, 1) + weights[f"{name}.bias"][:, None, None]
        return np.maximum(y, 0)

    calib = split["calib_images"].astype(np.float64)
    f1 = float_conv(calib, "conv1")
    f2 = float_conv(f1, "conv2")
    f3 = float_conv(f2.reshape(-1, 32, 4, 2, 4, 2).max(axis=(3, 5)), "conv3")
    f4 = f3.reshape(len(f3), -1) @ weights["dense.weight"].T + weights["dense.bias"]
    scales = [scale(v) for v in (calib, f1, f2, f3, f4)]
    s_pool = scales[2]

    def layer(x, name, s_in, s_out, relu, conv=True):
        qw = quantize_weight(weights[f"{name}.weight"], power_of_two=pow2)
        qb = quantize_bias(weights[f"{name}.bias"], s_in * qw.scale).values
        rows = np.abs(qw.values.astype(np.int64)).reshape(len(qb), -1).sum(axis=1)
        bound = 127 * int(rows.max()) + int(np.abs(qb).max())
        p = requant_params(s_in * qw.scale / s_out, cfg, mode=mode, relu=relu, acc_bound=bound)
        if conv:
            return conv2d_int8(x, qw.values, qb, padding=1, requant=p)
        return dense_int8(x, qw.values, qb, requant=p)

    x = quantize(split["images"], scales[0])
    x = layer(x, "conv1", scales[0], scales[1], True)
    x = max_pool2d_int8(layer(x, "conv2", scales[1], scales[2], True), 2, 2)
    x = layer(x, "conv3", s_pool, scales[3], True)
    return layer(x.reshape(len(x), -1), "dense", scales[3], scales[4], False, conv=False)


@pytest.mark.parametrize(("mode", "alu_mul"), [("shift", False), ("mul", True)])
def test_digits_int8_logits_equal_an_independent_layer_by_layer_computation(
    float_graph, split, mode: str, alu_mul: bool
) -> None:
    cfg = _cfg(alu_mul)
    q = quantize_graph(
        float_graph, {"input": split["calib_images"]}, cfg, mode, weights="per-tensor"
    )
    logits_q = _values(q, {"input": split["images"]})["logits_q"]
    want = _independent_int8_logits(split, mode, cfg)
    assert logits_q.dtype == np.int8 and np.array_equal(logits_q, want)


def test_each_int8_node_equals_the_reference_called_on_its_inputs(float_graph, split) -> None:
    # per node: requant_params rebuilt from the node's scales, not from its stored steps
    cfg = _cfg(True)
    q = quantize_graph(
        float_graph, {"input": split["calib_images"]}, cfg, "mul", weights="per-tensor"
    )
    env = _values(q, {"input": split["images"]})
    checked = 0
    for node in q.nodes:
        a = node.attr_dict
        if node.op not in ("tf.qconv2d", "tf.qdense"):
            continue
        x, w, b = (env[i] for i in node.inputs)
        k = int(np.abs(w.astype(np.int64)).reshape(len(w), -1).sum(axis=1).max())
        ratio = a["in_scale"] * a["weight_scale"] / a["out_scale"]
        p = requant_params(ratio, cfg, mode="mul", relu=a["out_lo"] == 0,
                           acc_bound=127 * k + int(np.abs(b).max()))  # fmt: skip
        if node.op == "tf.qconv2d":
            want = conv2d_int8(x, w, b, stride=1, padding=1, requant=p)
        else:
            want = dense_int8(x, w, b, requant=p)
        assert np.array_equal(env[node.outputs[0]], want), node.name
        checked += 1
    assert checked == 4


def test_per_channel_nodes_requantize_each_channel_by_its_own_ratio(float_graph, split) -> None:
    # oracle: exact integer arithmetic in Python ints, floor(floor((acc_c + bias_c) / 2**p) * m_c
    # / 2**shift), each m_c the nearest integer to in_scale * weight_scale[c] / out_scale *
    # 2**(shift + p), the stored bias = the float bias at the accumulator scale + the rounding
    # term h_c = 2**(shift + p - 1) / m_c + (2**p - 1) / 2 (round half up, to a fraction of an
    # LSB), and the pre-shift p's floor costing at most 1/16 of an output step
    q = quantize_graph(float_graph, {"input": split["calib_images"]}, _cfg(True))
    env = _values(q, {"input": split["images"]})
    float_nodes = {n.name: n for n in float_graph.nodes}
    checked = 0
    for node in q.nodes:
        if node.op not in ("tf.qconv2d", "tf.qdense"):
            continue
        a = node.attr_dict
        x, w, b = (env[i] for i in node.inputs)
        m, shift, pre = a["channel_multipliers"], a["shift"], a["pre_shift"]
        assert len(m) == len(w) == len(a["weight_scale"]) and a["rounding"] == 0
        ratios = [a["in_scale"] * s / a["out_scale"] for s in a["weight_scale"]]
        assert 2**pre * max(ratios) <= 1 / 16
        float_bias = float_graph.constants[float_nodes[node.name].inputs[2]]
        for c, ratio in enumerate(ratios):  # the nearest multiplier at the common shift
            assert abs(m[c] - ratio * 2 ** (shift + pre)) <= 0.5 + 1e-9, (node.name, c)
            if m[c] == 0:  # a near-dead channel: its outputs are all 0
                continue
            h = int(b[c]) - round(float(float_bias[c]) / (a["in_scale"] * a["weight_scale"][c]))
            assert abs(h - 2 ** (shift + pre - 1) / m[c] - (2**pre - 1) / 2) <= 0.5 + 1e-9
        # the common shift is as large as the accumulator allows: no product may wrap
        bounds = 127 * np.abs(w.astype(np.int64)).reshape(len(w), -1).sum(axis=1) + np.abs(b)
        products = [int(mc) * -(-int(bc) // 2**pre) for mc, bc in zip(m, bounds, strict=True)]
        assert 2**28 < max(products) <= 2**30, node.name
        if node.op == "tf.qconv2d":
            acc = conv2d_int8(x, w, b, stride=1, padding=1)
        else:
            acc = dense_int8(x, w, b)
        want = ops.per_channel_requant(acc, m, shift, pre, a["out_lo"], a["out_hi"])
        assert np.array_equal(env[node.outputs[0]], want), node.name
        checked += 1
    assert checked == 4


def test_quantized_graph_runs_fused_and_memory_planned(float_graph, split) -> None:
    q = quantize_graph(float_graph, {"input": split["calib_images"]}, _cfg(False))
    planned = plan_memory(fuse_ops(q))
    verify_graph(planned)
    images = {"input": split["images"]}
    assert np.array_equal(run_graph(planned, images)["logits"], run_graph(q, images)["logits"])


def test_calibration_batches_may_differ_from_the_graph_batch(float_graph, split) -> None:
    calib = split["calib_images"]
    one = quantize_graph(float_graph, {"input": calib}, _cfg(False))
    two = quantize_graph(float_graph, [{"input": calib[:50]}, {"input": calib[50:]}], _cfg(False))
    assert [n.attrs for n in one.nodes] == [n.attrs for n in two.nodes]  # abs-max: same scales


def test_bad_inputs_raise_clear_errors(float_graph, split) -> None:
    calib = {"input": split["calib_images"]}
    with pytest.raises(ValueError, match="calibration_inputs must be a mapping .* non-empty list"):
        quantize_graph(float_graph, [], _cfg(False))
    with pytest.raises(ValueError, match=r"calibration batch 0 must include inputs \['input'\]"):
        quantize_graph(float_graph, {"x": split["calib_images"]}, _cfg(False))
    with pytest.raises(ValueError, match="calibration batch 0 must hold at least one sample"):
        quantize_graph(float_graph, {"input": split["calib_images"][:0]}, _cfg(False))
    with pytest.raises(ValueError, match="quantize_graph mode must be one of"):
        quantize_graph(float_graph, calib, _cfg(False), mode="float16")
    with pytest.raises(
        ValueError, match=r"node 'conv1' \(Conv\): requant mode 'mul' needs the ALU MUL.*'pynq'"
    ):
        quantize_graph(float_graph, calib, _cfg(False), mode="mul", weights="per-tensor")
    with pytest.raises(ValueError, match=r"node 'conv1' \(Conv\): per-channel .* ALU MUL.*'pynq'"):
        quantize_graph(float_graph, calib, _cfg(False), mode="mul")
    with pytest.raises(ValueError, match="weights 'per-channel' needs mode 'mul'"):
        quantize_graph(float_graph, calib, _cfg(True), mode="shift", weights="per-channel")
    with pytest.raises(ValueError, match="weights must be one of"):
        quantize_graph(float_graph, calib, _cfg(True), weights="per-row")


def test_rebatching_a_graph_with_a_baked_batch_size_names_the_node() -> None:
    b = GraphBuilder("baked")
    x = b.add_input("x", (4, 6), "float32")
    (y,) = b.add_node("Reshape", [x, b.add_constant("shape", np.array([4, 3, 2]))], name="rs")
    (y,) = b.add_node("Relu", [y])
    with pytest.raises(GraphError, match=r"node 'rs' \(Reshape\) does not"):
        quantize_graph(b.build([y]), {"x": np.ones((2, 6), np.float32)}, _cfg(False))


def test_matmul_bias_relu_becomes_one_qdense_and_softmax_stays_float() -> None:
    rng = np.random.default_rng(5)
    b = GraphBuilder("mlp")
    x = b.add_input("x", (4, 32), "float32")
    w = b.add_constant("w", rng.standard_normal((32, 16)).astype(np.float32) * 0.3)
    (y,) = b.add_node("MatMul", [x, w])
    (y,) = b.add_node("Add", [y, b.add_constant("b", rng.standard_normal(16).astype(np.float32))])
    (y,) = b.add_node("Relu", [y])
    (y,) = b.add_node("Softmax", [y], name="softmax")
    graph = b.build([y])
    xs = rng.standard_normal((4, 32)).astype(np.float32)
    q = quantize_graph(graph, {"x": rng.standard_normal((64, 32)).astype(np.float32)}, _cfg(True))
    verify_graph(q)
    assert [n.op for n in q.nodes] == ["tf.quantize", "tf.qdense", "tf.dequantize", "Softmax"]
    dense = q.nodes[1]
    assert len(dense.inputs) == 3 and dense.attr("out_lo") == 0  # bias and ReLU absorbed
    assert np.array_equal(q.constants[dense.inputs[1]].shape, (16, 32))  # (M, K): w transposed
    want, got = run_graph(graph, {"x": xs})[y], run_graph(q, {"x": xs})[y]
    np.testing.assert_allclose(got, want, atol=0.03)
    report = partition_report(q, _cfg(True))
    assert re.search(r"softmax\s+Softmax\s+float32\[4, 16\]\s+cpu\s+float op", report)
    assert re.search(r"\n  matmul\s+tf.qdense .* vta ", report)


@pytest.mark.parametrize("mode", ["mul", "shift"])
def test_a_layer_whose_bias_overflows_the_accumulators_stays_float(mode: str) -> None:
    """Inputs of about 1e-6 and weights of about 0.1 give an accumulator scale near 1e-10, at
    which a bias of 1 is about 1e10: no int32 form. That layer stays float (with a warning
    naming it); the next one, with a bias at its own scale, is still int8."""
    rng = np.random.default_rng(8)
    b = GraphBuilder("tiny_inputs")
    x = b.add_input("x", (1, 16, 4, 4), "float32")
    for i in (1, 2):
        w = b.add_constant(f"w{i}", (rng.standard_normal((16, 16, 1, 1)) / 4).astype(np.float32))
        bias = b.add_constant(f"b{i}", np.full(16, 1.0, np.float32))
        (x,) = b.add_node("Relu", [b.add_node("Conv", [x, w, bias], name=f"conv{i}")[0]])
    graph = b.build([x])
    xs = (rng.standard_normal((1, 16, 4, 4)) * 1e-6).astype(np.float32)
    with pytest.warns(UserWarning, match="node 'conv1' .Conv. stays float: quantized bias must"):
        q = quantize_graph(graph, {"x": xs}, _cfg(True), mode=mode)
    verify_graph(q)
    assert [n.op for n in q.nodes][:2] == ["Conv", "Relu"] and "tf.qconv2d" in [
        n.op for n in q.nodes
    ]
    want, got = run_graph(graph, {"x": xs})[x], run_graph(q, {"x": xs})[x]
    np.testing.assert_allclose(got, want, atol=0.02 * np.abs(want).max())


@pytest.mark.parametrize(("alu_mul", "mode"), [(True, "mul"), (False, "shift")])
def test_default_mode_is_the_most_accurate_the_config_runs(
    float_graph, split, alu_mul: bool, mode: str
) -> None:
    calib = {"input": split["calib_images"]}
    default = quantize_graph(float_graph, calib, _cfg(alu_mul))
    explicit = quantize_graph(float_graph, calib, _cfg(alu_mul), mode)
    assert [n.attrs for n in default.nodes] == [n.attrs for n in explicit.nodes]
    assert _multiplies(default) == alu_mul
    target = Target.parse("vta -config=pynq")
    assert vta_options(target, _cfg(alu_mul))[2] == mode
    assert vta_options(Target.parse("vta -mode=shift"), _cfg(alu_mul))[2] == "shift"


def _conv_clip(clip: tuple[float, float] | None) -> tuple:
    """conv -> Clip(lo, hi) (or the conv alone), the conv's outputs reaching well beyond hi."""
    rng = np.random.default_rng(7)
    b = GraphBuilder("conv_clip")
    x = b.add_input("x", (8, 16, 6, 6), "float32")
    w = b.add_constant("w", rng.standard_normal((8, 16, 3, 3)).astype(np.float32))
    (y,) = b.add_node("Conv", [x, w], {"pads": (1, 1, 1, 1)}, name="conv")
    if clip is not None:
        bounds = [
            b.add_constant(n, np.array(v, np.float32)) for n, v in zip("lh", clip, strict=True)
        ]
        (y,) = b.add_node("Clip", [y, *bounds], name="clip")
    return b.build([y]), y, rng.standard_normal((8, 16, 6, 6)).astype(np.float32)


def test_relu6_clip_is_absorbed_and_calibrated_after_the_clip() -> None:
    graph, y, xs = _conv_clip((0.0, 6.0))
    q = quantize_graph(graph, {"x": xs}, _cfg(True))
    verify_graph(q)
    assert [n.op for n in q.nodes] == ["tf.quantize", "tf.qconv2d", "tf.dequantize"]
    conv = q.nodes[1]
    assert conv.attr("out_lo") == 0
    assert conv.attr("out_scale") * 127 == pytest.approx(6.0)  # the clip's range, not the conv's
    want, got = run_graph(graph, {"x": xs})[y], run_graph(q, {"x": xs})[y]
    assert got.min() >= 0 and got.max() <= 6.0
    # below the rounding error alone of one step over the unclipped conv's range (~40)
    bare, out, _ = _conv_clip(None)
    unclipped = float(np.abs(run_graph(bare, {"x": xs})[out]).max())
    assert np.sqrt(np.mean((got - want) ** 2)) < unclipped / 127 / np.sqrt(12)


def test_a_clip_that_is_not_relu6_stays_float() -> None:
    graph, _, xs = _conv_clip((-1.0, 1.0))
    q = quantize_graph(graph, {"x": xs}, _cfg(True))
    assert [n.op for n in q.nodes] == ["tf.quantize", "tf.qconv2d", "tf.dequantize", "Clip"]
    assert q.nodes[1].attr("out_lo") == -127


def _relu_then_convs(kernels: tuple[int, ...]) -> tuple:
    """x -> Sigmoid-scaled ReLU (float: no int8 producer) -> one conv per kernel size (pad
    k // 2), summed; the convs' input is one-sided, in [0, max]."""
    rng = np.random.default_rng(11)
    b = GraphBuilder("relu_convs")
    x = b.add_input("x", (8, 16, 5, 5), "float32")
    (h,) = b.add_node("Relu", [x], name="relu")
    (h,) = b.add_node("Mul", [h, b.add_node("Sigmoid", [x], name="gate")[0]], name="scale")
    outs = []
    for i, k in enumerate(kernels):
        w = b.add_constant(f"w{i}", rng.standard_normal((8, 16, k, k)).astype(np.float32))
        bias = b.add_constant(f"b{i}", rng.standard_normal(8).astype(np.float32))
        pads = (k // 2,) * 4
        outs.append(b.add_node("Conv", [h, w, bias], {"pads": pads}, name=f"conv{i}")[0])
    y = outs[0]
    for other in outs[1:]:
        (y,) = b.add_node("Add", [y, other], name="sum")
    return b.build([y]), y, h, rng.standard_normal((8, 16, 5, 5)).astype(np.float32)


@pytest.mark.parametrize("alu_mul", [True, False])
def test_a_one_sided_input_of_unpadded_convs_is_offset_into_all_int8_levels(alu_mul) -> None:
    graph, y, h, xs = _relu_then_convs((1,))
    q = quantize_graph(graph, {"x": xs}, _cfg(alu_mul))
    verify_graph(q)
    sub = next(n for n in q.nodes if n.op == "Sub")
    quant = next(n for n in q.nodes if n.op == "tf.quantize")
    assert quant.inputs == sub.outputs and sub.inputs[0] == h
    hs = np.maximum(xs, 0) / (1 + np.exp(-xs))  # the float input of the conv: [0, max]
    offset = float(q.constants[sub.inputs[1]])
    assert offset == pytest.approx(hs.max() / 2, rel=1e-6)
    # half the step abs-max calibration gives (mul mode; shift rounds both up to powers of 2)
    step = quant.attr("scale")
    assert step <= hs.max() / 127 / 2 * (1 + 1e-6) * (1 if alu_mul else 2)
    want, got = run_graph(graph, {"x": xs})[y], run_graph(q, {"x": xs})[y]
    # the bias takes the offset back (wrongly, it would shift them by ~offset * sum|w| ~ 20)
    assert abs(float(np.mean(got - want))) < 0.01 * float(np.std(want))
    assert np.sqrt(np.mean((got - want) ** 2)) < 0.02 * float(np.sqrt(np.mean(want**2)))


def test_a_padded_conv_reading_the_value_keeps_it_without_offset() -> None:
    graph, _, _, xs = _relu_then_convs((1, 3))  # the 3x3 conv pads with 0: not with -offset
    q = quantize_graph(graph, {"x": xs}, _cfg(True))
    assert "Sub" not in [n.op for n in q.nodes]


def test_relu6_stays_a_float_clip_with_power_of_two_scales() -> None:
    graph, y, xs = _conv_clip((0.0, 6.0))
    q = quantize_graph(graph, {"x": xs}, _cfg(False), mode="shift")
    # a power-of-two output scale would saturate at 127/16 = 7.94, not at the clip's 6
    assert [n.op for n in q.nodes] == ["tf.quantize", "tf.qconv2d", "tf.dequantize", "Clip"]
    assert run_graph(q, {"x": xs})[y].max() <= 6.0
