"""The int8 graph ops (compiler/graph/ops/qnn.py) and the residual add's ALU semantics
(compiler/quantize/residual.py) against independent oracles: exact rational arithmetic
(fractions.Fraction) and the float ONNX kernels evaluated on integer values."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.compiler.graph import GraphBuilder, GraphError, get_op, run_graph
from tensorforge.compiler.graph.ops.nn import conv, max_pool
from tensorforge.compiler.graph.ops.qnn import (
    add_attrs,
    add_from_attrs,
    requant_attrs,
    requant_from_attrs,
)
from tensorforge.compiler.graph.verify import verify_graph
from tensorforge.compiler.quantize import requant_params
from tensorforge.compiler.quantize.residual import add_int8, add_params
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluOp

PYNQ = HWConfig.preset("pynq")
NO_MUL = PYNQ.replace(alu_mul=False)
RNG = np.random.default_rng(7)


def _round_half_up(x: Fraction) -> int:
    return math.floor(x + Fraction(1, 2))


def _gain(step) -> Fraction:
    if step is None:
        return Fraction(1)
    if step.op == AluOp.MUL:
        return Fraction(step.imm)
    return Fraction(2) ** -step.imm  # SHR by a negative amount is a left shift


# ---- the residual add ------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    ea=st.integers(-6, 6),
    eb=st.integers(-6, 6),
    relu=st.booleans(),
    a=st.lists(st.integers(-127, 127), min_size=1, max_size=20),
    seed=st.integers(0, 1000),
)
def test_shift_add_equals_rational_rounding(ea: int, eb: int, relu: bool, a, seed: int) -> None:
    p = add_params(2.0**ea, 2.0**eb, NO_MUL, relu=relu)
    b = np.random.default_rng(seed).integers(-127, 128, len(a))
    got = add_int8(np.array(a, np.int8), b.astype(np.int8), p).tolist()
    for x, y, out in zip(a, b.tolist(), got, strict=True):
        exact = Fraction(x) * Fraction(2) ** ea + Fraction(y) * Fraction(2) ** eb
        # ratios within 2**16 of each other are exact; the result rounds half up and clips
        assert out == min(max(_round_half_up(exact), 0 if relu else -127), 127)


@settings(max_examples=200, deadline=None)
@given(
    ra=st.floats(2.0**-4, 8.0),
    rb=st.floats(2.0**-4, 8.0),
    a=st.lists(st.integers(-127, 127), min_size=1, max_size=20),
)
def test_mul_add_is_exact_for_its_multipliers_and_close_to_the_real_ratios(ra, rb, a) -> None:
    p = add_params(ra, rb, PYNQ, mode="mul")
    b = list(reversed(a))
    got = add_int8(np.array(a, np.int8), np.array(b, np.int8), p).tolist()
    n = p.requant.shift
    for x, y, out in zip(a, b, got, strict=True):
        exact = (x * _gain(p.lhs) + y * _gain(p.rhs)) / Fraction(2) ** n
        assert out == min(max(_round_half_up(exact), -127), 127)
        real = x * Fraction(ra) + y * Fraction(rb)
        if -127 <= real <= 127:  # multipliers of ~15 bits: within 0.5 LSB plus a little
            assert abs(out - real) <= Fraction(1, 2) + 254 * max(ra, rb) / 2**14


def test_add_params_pick_shifts_in_shift_mode_and_mul_only_when_needed() -> None:
    p = add_params(2.0**-1, 2.0**2, NO_MUL)
    assert (p.lhs, p.rhs and (p.rhs.op, p.rhs.imm), p.requant.shift) == (None, (AluOp.SHR, -3), 1)
    q = add_params(0.75, 0.5, PYNQ, mode="mul")
    assert q.lhs.op == AluOp.MUL and q.rhs.op == AluOp.SHR
    assert Fraction(q.lhs.imm, 2**q.requant.shift) == Fraction(3, 4)


def test_add_params_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="ratio_a must be a power of two in mode 'shift'"):
        add_params(0.75, 1.0, NO_MUL)
    with pytest.raises(ValueError, match="needs the ALU MUL extension.*alu_mul=False"):
        add_params(0.75, 1.0, NO_MUL, mode="mul")
    with pytest.raises(ValueError, match="ratio_b must be a positive finite number"):
        add_params(1.0, 0.0, PYNQ)
    with pytest.raises(TypeError, match="add_int8: b must be int8, not int32"):
        add_int8(np.zeros(2, np.int8), np.zeros(2, np.int32), add_params(1.0, 1.0, PYNQ))


# ---- attributes ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["shift", "mul"])
def test_requant_and_add_attributes_round_trip(mode: str) -> None:
    p = requant_params(0.0123 if mode == "mul" else 2.0**-9, PYNQ, mode=mode, acc_bound=1 << 20)
    assert requant_from_attrs(requant_attrs(p)) == p
    a = add_params(0.3, 1.7, PYNQ, mode="mul")
    assert add_from_attrs(add_attrs(a)) == a


# ---- the ops in a graph, against float kernels on integer values ------------------------------


def _requant_oracle(acc: np.ndarray, multiplier: int, shift: int, lo: int) -> np.ndarray:
    ratio = Fraction(multiplier, 2**shift) if shift >= 0 else Fraction(multiplier * 2**-shift)
    flat = [min(max(_round_half_up(int(v) * ratio), lo), 127) for v in acc.ravel()]
    return np.array(flat, np.int64).reshape(acc.shape)


def _qconv_graph(x, w, b, pads, strides, params):
    g = GraphBuilder("qconv")
    xi = g.add_input("x", x.shape, "int8")
    wi, bi = g.add_constant("w", w), g.add_constant("b", b)
    attrs = {"pads": pads, "strides": strides, **requant_attrs(params)}
    attrs.update(in_scale=1.0, weight_scale=1.0, out_scale=1.0)
    (y,) = g.add_node("tf.qconv2d", [xi, wi, bi], attrs)
    return g.build([y])


@pytest.mark.parametrize(
    ("pads", "strides", "mode"),
    [((1, 1, 1, 1), (1, 1), "shift"), ((0, 1, 2, 0), (2, 1), "mul"), ((2, 2, 2, 2), (2, 2), "mul")],
)
def test_qconv2d_equals_float_conv_of_integers_then_rational_requant(pads, strides, mode) -> None:
    x = RNG.integers(-127, 128, (2, 5, 7, 6)).astype(np.int8)
    w = RNG.integers(-127, 128, (4, 5, 3, 3)).astype(np.int8)
    b = RNG.integers(-5000, 5000, 4).astype(np.int32)
    ratio = 2.0**-11 if mode == "shift" else 0.000371
    params = requant_params(ratio, PYNQ, mode=mode, acc_bound=45 * 127 * 127 + 5000)
    graph = _qconv_graph(x, w, b, pads, strides, params)
    verify_graph(graph)
    got = run_graph(graph, {"x": x})[graph.outputs[0]]
    attrs = {"pads": pads, "strides": strides, "group": 1, "auto_pad": "NOTSET"}
    acc = conv(attrs, x.astype(np.float64), w.astype(np.float64), b.astype(np.float64))
    want = _requant_oracle(acc.astype(np.int64), params.multiplier, params.shift, -127)
    assert got.dtype == np.int8 and np.array_equal(got, want)


def test_qdense_and_qmaxpool_equal_their_float_counterparts_on_integers() -> None:
    g = GraphBuilder("qdense_pool")
    x = RNG.integers(-127, 128, (1, 3, 5, 5)).astype(np.int8)
    xi = g.add_input("x", x.shape, "int8")
    pool = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}
    (p,) = g.add_node("tf.qmaxpool", [xi], {**pool, "scale": 1.0})
    (f,) = g.add_node("Flatten", [p])
    w = RNG.integers(-127, 128, (6, 27)).astype(np.int8)
    params = requant_params(2.0**-8, PYNQ, relu=True, acc_bound=27 * 127 * 127)
    attrs = {**requant_attrs(params), "in_scale": 1.0, "weight_scale": 1.0, "out_scale": 1.0}
    (y,) = g.add_node("tf.qdense", [f, g.add_constant("w", w)], attrs)
    graph = g.build([p, y])
    verify_graph(graph)
    out = run_graph(graph, {"x": x})
    want_pool = max_pool({**pool, "ceil_mode": 0, "auto_pad": "NOTSET"}, x.astype(np.float64))
    assert np.array_equal(out[p], want_pool.astype(np.int8))
    acc = want_pool.reshape(1, -1).astype(np.int64) @ w.T.astype(np.int64)
    assert np.array_equal(out[y], _requant_oracle(acc, 1, 8, 0))


def test_quantize_and_dequantize_ops_use_the_scheme() -> None:
    g = GraphBuilder("qdq")
    x = g.add_input("x", (4,), "float32")
    (q,) = g.add_node("tf.quantize", [x], {"scale": 0.5})
    (d,) = g.add_node("tf.dequantize", [q], {"scale": 0.5})
    out = run_graph(g.build([q, d]), {"x": np.array([0.2, -0.8, 100.0, 1.25], np.float32)})
    assert out[q].tolist() == [0, -2, 127, 2]  # half to even, narrow-range saturation
    assert out[d].tolist() == [0.0, -1.0, 63.5, 1.0]


def test_int8_op_type_errors_name_the_node_and_operand() -> None:
    g = GraphBuilder("bad")
    x = g.add_input("x", (1, 4, 3, 3), "float32")
    w = g.add_constant("w", np.zeros((2, 4, 1, 1), np.int8))
    attrs = {**requant_attrs(requant_params(1.0, PYNQ)), "in_scale": 1.0, "weight_scale": 1.0}
    with pytest.raises(GraphError, match=r"tf.qconv2d node 'c'.*input must be int8, not float32"):
        g.add_node("tf.qconv2d", [x, w], {**attrs, "out_scale": 1.0}, name="c")
    with pytest.raises(GraphError, match=r"attribute 'out_scale' of tf.qconv2d must be given"):
        g.add_node("tf.qconv2d", [x, w], attrs, name="c")
    a = g.add_input("a", (2, 3), "int8")
    b = g.add_input("b", (3, 2), "int8")
    with pytest.raises(GraphError, match=r"tf.qadd operands must have one shape"):
        add = add_attrs(add_params(1.0, 1.0, PYNQ))
        g.add_node("tf.qadd", [a, b], {**add, "lhs_scale": 1.0, "rhs_scale": 1.0, "out_scale": 1.0})
    assert get_op("tf.qconv2d").const_inputs == (1, 2)
