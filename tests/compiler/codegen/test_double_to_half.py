"""Casting float64 to float16 in compiled code: correctly rounded (numpy's astype), including the
values that a detour through float32 would round twice, and without compiler-rt's
`__truncdfhf2`, which the process lacks on CPUs without AVX512-FP16 (the kernel crashed)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

import tensorforge


def test_double_to_half_is_correctly_rounded() -> None:
    rng = np.random.default_rng(0)
    halves = rng.standard_normal(1000).astype(np.float16).astype(np.float64)
    ties = halves + np.abs(np.spacing(halves.astype(np.float16)).astype(np.float64)) / 2
    specials = [np.inf, -np.inf, np.nan, 1e39, -1e39, 1e-300, -1e-300, 0.0, -0.0, 65520.0,
                65519.99, 6e-8, 3e-8, 2.98e-8]  # fmt: skip
    x = np.concatenate([rng.standard_normal(1000) * 100, ties, ties * (1 + 1e-12),
                        ties * (1 - 1e-12), specials])  # fmt: skip
    n = len(x)
    graph = oh.make_graph(
        [oh.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)],
        "cast",
        [oh.make_tensor_value_info("x", TensorProto.DOUBLE, [n])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT16, [n])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    got = tensorforge.compile(model).run({"x": x})["y"]
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
        twice = x.astype(np.float32).astype(np.float16)
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (x[~same][:5], got[~same][:5], want[~same][:5])
    # the test has teeth: rounding through float32 gets hundreds of these wrong
    assert (twice.view(np.uint16) != want.view(np.uint16)).sum() > 100
