"""Neural-network case generators of the op fuzzer: convolutions and pools with every padding
form (explicit, asymmetric, auto_pad), strides, dilations, groups and ceil_mode; MatMul and
Gemm over their dtypes; normalizations; and Conv chains with element-wise epilogues that the
CPU back-end compiles in the blocked NCHWc layout (benchmarks/op_fuzz.py)."""

from __future__ import annotations

import numpy as np
from op_fuzz_cases import FLOATS, Gen, node, schema_dtypes


def _window_attrs(g: Gen, spatial: int, kernel: list[int], pool: bool) -> dict:
    attrs: dict = {}
    if g.coin(0.6):
        attrs["strides"] = [g.pick((1, 2, 3)) for _ in range(spatial)]
    if g.coin(0.4) and not (pool and g.coin()):
        attrs["dilations"] = [g.pick((1, 2)) for _ in range(spatial)]
    mode = g.pick(("pads", "pads", "none", "SAME_UPPER", "SAME_LOWER", "VALID"))
    if mode == "pads":
        limit = kernel if pool else [k + 1 for k in kernel]  # pools: pad < kernel
        attrs["pads"] = [int(g.rng.integers(0, max(1, lim))) for lim in limit * 2]
    elif mode != "none":
        attrs["auto_pad"] = mode
    return attrs


def _image(g: Gen, spatial: int, channels: int, kernel: list[int], dtype: str) -> np.ndarray:
    dims = [g.pick((k, k + 1, 5, 7, 13, 17)) for k in kernel]
    return g.values((g.pick((1, 2)), channels, *dims), dtype, special=False)


def conv(g: Gen, op: str) -> tuple:
    dtype = g.pick(FLOATS)
    spatial = g.pick((1, 2, 2, 2, 3))
    group = g.pick((1, 1, 2, 3))
    cin, cout = group * g.pick((1, 2, 3)), group * g.pick((1, 2, 5))
    if g.coin(0.2):  # depthwise
        group, cin, cout = 4, 4, 4 * g.pick((1, 2))
    kernel = [g.pick((1, 2, 3)) for _ in range(spatial)]
    attrs = _window_attrs(g, spatial, kernel, pool=False)
    attrs["group"] = group
    x = _image(g, spatial, cin, [(k - 1) * 2 + 1 for k in kernel], dtype)
    consts = {}
    if op == "ConvTranspose":
        w = g.values((cin, cout // group, *kernel), dtype, special=False)
        if attrs.get("strides") and g.coin(0.3):
            attrs["output_padding"] = [g.pick((0, s - 1)) for s in attrs["strides"]]
            attrs.pop("dilations", None)
    else:
        w = g.values((cout, cin // group, *kernel), dtype, special=False)
    if g.coin():
        attrs["kernel_shape"] = kernel
    inputs = ["x", "w"]
    if g.coin(0.6):
        consts["b"] = g.values((cout,), dtype, special=False)
        inputs.append("b")
    consts["w"] = w
    return [node(op, inputs, **attrs)], {"x": x}, ["y"], consts


def pool(g: Gen, op: str) -> tuple:
    dtype = g.pick(FLOATS + (("int8", "uint8") if op == "MaxPool" else ()))
    spatial = g.pick((1, 2, 2, 3))
    kernel = [g.pick((1, 2, 3)) for _ in range(spatial)]
    x = _image(g, spatial, g.pick((1, 3, 17)), [(k - 1) * 2 + 1 for k in kernel], dtype)
    if op.startswith("Global"):
        return [node(op, ["x"])], {"x": x}, ["y"], {}
    attrs = _window_attrs(g, spatial, kernel, pool=True)
    attrs["kernel_shape"] = kernel
    if op == "AveragePool" and g.coin():
        attrs["count_include_pad"] = 1
    if op == "LpPool":
        attrs["p"] = g.pick((1, 2, 3))
    elif g.coin(0.4) and "auto_pad" not in attrs:
        attrs["ceil_mode"] = 1
    return [node(op, ["x"], **attrs)], {"x": x}, ["y"], {}


def matmul(g: Gen, op: str) -> tuple:
    dtype = g.pick(schema_dtypes(op, "T"))
    m, k, n = (g.pick((1, 3, 7, 16, 17)) for _ in range(3))
    batch_a, batch_b = g.broadcast_pair(2) if g.coin() else ((), ())
    batch_a, batch_b = batch_a[:2], batch_b[:2]
    a_shape = (*batch_a, m, k) if g.coin(0.85) else (k,)
    b_shape = (*batch_b, k, n) if g.coin(0.85) else (k,)
    low, high = (-3, 3) if dtype not in FLOATS else (None, None)
    feed = {"a": g.values(a_shape, dtype, special=False, low=low, high=high)}
    consts = {}
    b = g.values(b_shape, dtype, special=False, low=low, high=high)
    if g.coin():
        consts["b"] = b
    else:
        feed["b"] = b
    return [node(op, ["a", "b"])], feed, ["y"], consts


def gemm(g: Gen, op: str) -> tuple:
    dtype = g.pick(schema_dtypes(op, "T"))
    m, k, n = (g.pick((1, 3, 7, 17)) for _ in range(3))
    ta, tb = int(g.coin()), int(g.coin())
    low, high = (-3, 3) if dtype not in FLOATS else (None, None)
    feed = {"a": g.values((k, m) if ta else (m, k), dtype, special=False, low=low, high=high)}
    consts = {"b": g.values((n, k) if tb else (k, n), dtype, special=False, low=low, high=high)}
    attrs = {"transA": ta, "transB": tb}
    if dtype in FLOATS and g.coin():
        attrs.update(alpha=g.pick((0.5, -1.0, 2.0)), beta=g.pick((0.0, 1.0, 0.25)))
    inputs = ["a", "b"]
    if g.coin(0.7):
        consts["c"] = g.values(g.pick(((), (n,), (1, n), (m, 1), (m, n))), dtype, special=False)
        inputs.append("c")
    return [node(op, inputs, **attrs)], feed, ["y"], consts


def norm(g: Gen, op: str) -> tuple:
    dtype = g.pick(FLOATS)
    shape = (g.pick((1, 2)), g.pick((1, 3, 17)), *g.shape(g.pick((0, 1, 2)), zero=0.0))
    x = g.values(shape, dtype, special=False)
    c = shape[1]
    consts = {"s": g.values((c,), dtype, special=False), "b": g.values((c,), dtype, special=False)}
    attrs = {"epsilon": g.pick((1e-5, 1e-2))}
    if op == "BatchNormalization":
        consts["m"] = g.values((c,), dtype, special=False)
        consts["v"] = g.values((c,), dtype, special=False, low=0.1, high=3)
        return [node(op, ["x", "s", "b", "m", "v"], **attrs)], {"x": x}, ["y"], consts
    if op == "LayerNormalization":
        axis = g.axis(len(shape))
        attrs["axis"] = axis
        inner = shape[axis:]
        consts = {"s": g.values(inner, dtype, special=False)}
        if g.coin():
            consts["b"] = g.values(inner, dtype, special=False)
        return [node(op, ["x", *consts], **attrs)], {"x": x}, ["y"], consts
    return [node(op, ["x", "s", "b"], **attrs)], {"x": x}, ["y"], consts


def chain_conv_epilogue(g: Gen, op: str) -> tuple:
    """Conv -> bias Add -> activation -> residual (-> Conv): chains the CPU back-end runs in the
    blocked NCHWc layout (channels of 16 and 32), with odd spatial sizes."""
    dtype = "float32"
    c = g.pick((16, 32))
    hw = g.pick((5, 7, 13, 17))
    x = g.values((1, c, hw, hw), dtype, special=False)
    consts = {"w1": g.values((c, c, 3, 3), dtype, special=False) / 8}
    n = [node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1])]
    consts["bias"] = g.values(g.pick(((c, 1, 1), (1, c, 1, 1), (1,), ())), dtype, special=False)
    n.append(node("Add", ["c1", "bias"], ["a1"]))
    act = g.pick(("Relu", "Sigmoid", "Tanh", "HardSwish", "Clip"))
    n.append(node(act, ["a1"], ["r1"]))
    n.append(node(g.pick(("Add", "Mul", "Sub")), ["r1", "x"], ["s1"]))
    if g.coin():
        consts["w2"] = g.values((c, 1, 3, 3), dtype, special=False)
        n.append(node("Conv", ["s1", "w2"], ["c2"], group=c, auto_pad="SAME_UPPER"))
        n.append(node("Relu", ["c2"], ["y"]))
    else:
        n.append(node("Conv", ["s1", "w1"], ["y"], strides=[2, 2], pads=[0, 1, 1, 0]))
    return n, {"x": x}, ["y"], consts


NN_OPS = {
    "Conv": conv, "ConvTranspose": conv, "MaxPool": pool, "AveragePool": pool, "LpPool": pool,
    "GlobalAveragePool": pool, "GlobalMaxPool": pool, "MatMul": matmul, "Gemm": gemm,
    "BatchNormalization": norm, "InstanceNormalization": norm, "LayerNormalization": norm,
    "chain:conv_epilogue": chain_conv_epilogue,
}  # fmt: skip
