"""Activations real models use (PRelu with per-channel slopes, Mish, Softplus, ELU, SELU,
Softsign, Sum/Mean of branches, Sin/Cos of positions) inside conv and attention-like graphs,
where they fuse into the convolutions' epilogues and follow the blocked layout: compiled code
against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import OnnxModelBuilder

RNG = np.random.default_rng(0)


def _check(model, feed: dict) -> None:  # noqa: ANN001
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = list(tensorforge.compile(model).run(feed).values())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())


@pytest.mark.parametrize("act", ["PRelu", "Mish", "Softplus", "Elu", "Selu", "Softsign"])
def test_activation_between_convolutions(act: str) -> None:
    b = OnnxModelBuilder(f"net_{act}", opset=18)  # (Mish is new at 18)
    x = b.input("x", (1, 16, 12, 12))
    h = b.conv(x, 16, 32, 3, bias=True)
    if act == "PRelu":  # torch's nn.PReLU(32) exports a [C, 1, 1] slope
        slope = b.const(RNG.uniform(0.05, 0.3, (32, 1, 1)).astype(np.float32), "slope")
        h = b.op("PRelu", [h, slope])
    else:
        h = b.op(act, [h])
    h = b.conv(h, 32, 32, 3, bias=True)
    y = b.op("GlobalAveragePool", [b.op(act, [h]) if act != "PRelu" else b.op("Relu", [h])])
    x_value = RNG.standard_normal((1, 16, 12, 12)).astype(np.float32)
    _check(b.model([y]), {"x": x_value})


def test_sum_and_mean_of_branches() -> None:
    b = OnnxModelBuilder("branches")
    x = b.input("x", (1, 8, 10, 10))
    parts = [b.conv(x, 8, 8, k) for k in (1, 3, 5)]
    y = b.op("Mean", [b.op("Sum", parts), parts[0], b.op("Sigmoid", [parts[2]])])
    _check(b.model([y]), {"x": RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)})


def test_rotary_style_sin_cos_of_runtime_positions() -> None:
    b = OnnxModelBuilder("rotary")
    pos = b.input("pos", (16, 1))
    freq = b.const((1.0 / 10000 ** (np.arange(8) / 8)).astype(np.float32).reshape(1, 8), "freq")
    angle = b.op("Mul", [pos, freq])
    y = b.op("Concat", [b.op("Sin", [angle]), b.op("Cos", [angle]), b.op("Atan", [angle])], axis=1)
    positions = np.arange(16, dtype=np.float32).reshape(16, 1) * 3.7
    _check(b.model([y]), {"pos": positions})


@pytest.mark.parametrize("exponent", [2.0, 3.0, 4.0, 3])
def test_pow_by_a_small_constant_is_multiplications(exponent: float) -> None:
    """dynamo's tanh-GELU writes `Pow(x, 3)` and LLaMA's RMSNorm `x.pow(2)`: a float base raised
    to a constant 1 to 4 is multiplications, not libm's powf per vector lane (a GPT-2 MLP
    kernel 4x slower), and matches onnxruntime (negative bases, inf and NaN included)."""
    from tensorforge.compiler import tir
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph.lower_te import lower_group
    from tensorforge.compiler.graph.passes import optimize

    b = OnnxModelBuilder("gelu_pow", opset=18)
    x = b.input("x", (4, 16))
    h = b.op("MatMul", [x, b.weight((16, 32))])
    e = np.array(exponent, np.float32 if isinstance(exponent, float) else np.int32)
    y = b.op(
        "Add", [h, b.op("Mul", [b.op("Pow", [h, b.const(e, "e")]), b.const(np.float32(0.04))])]
    )
    model = b.model([y])
    value = RNG.standard_normal((4, 16)).astype(np.float32) * 3
    value[0, :3] = [np.inf, -np.inf, np.nan]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": value})[0]
    got = list(tensorforge.compile(model).run({"x": value}).values())[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    graph = optimize(from_onnx(model))
    for group in graph.groups:
        kernel = lower_group(graph, group)
        assert "pow" not in str(tir.lower(kernel.schedule, kernel.args, name="k"))
