"""Regressions of the defect families the differential op fuzzer (benchmarks/op_fuzz.py) found,
each checked against onnxruntime, compiled for the CPU: Slice's clamping of starts and ends,
pools with auto_pad SAME and dilations, Celu with alpha 0; and of the graph fuzzer
(benchmarks/graph_fuzz.py): a dilated max pool's padding, max pool windows of NaN only."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError

I64 = np.iinfo(np.int64).max
I32 = np.iinfo(np.int32).max


def _model(node: onnx.NodeProto, x: np.ndarray, inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [node],
        "family",
        [helper.make_tensor_value_info("x", elem, x.shape)],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _onnxruntime(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 4  # onnx's shape inference disagrees with it on some slices
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feed)[0]


# (axis length, start, end, step): a start before the axis with a negative step clamps to 0
# (numpy's slicing gives nothing), an end of INT32_MAX/INT64_MAX slices to the end in the
# step's direction (onnxruntime), a zero-length axis
SLICES = [
    (1, -2, -I64, -1),
    (3, -5, -I64, -1),
    (7, -9, -9, -2),
    (7, -3, I64, -2),
    (7, 2, I32, -1),
    (7, 9, -I64, -3),
    (5, -1, I64, 1),
    (5, 1, -I64, 2),
    (0, 0, I64, -1),
    (17, 20, 3, -4),
]


@pytest.mark.parametrize(("n", "start", "end", "step"), SLICES)
def test_slice_clamps_starts_and_ends_like_onnxruntime(n, start, end, step) -> None:
    x = np.arange(2 * n, dtype=np.float32).reshape(2, n)
    inits = {k: np.array([v], np.int64) for k, v in
             (("s", start), ("e", end), ("a", -1), ("t", step))}  # fmt: skip
    model = _model(helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"]), x, inits)
    want = _onnxruntime(model, {"x": x})
    got = tensorforge.compile(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_pool_with_same_padding_and_dilation_is_refused_by_name(op: str) -> None:
    x = np.zeros((1, 1, 7), np.float32)
    attrs = {"kernel_shape": [3], "dilations": [2], "auto_pad": "SAME_UPPER"}
    model = _model(helper.make_node(op, ["x"], ["y"], name="pool7", **attrs), x, {})
    with pytest.raises(OnnxImportError, match=r"'pool7'.*dilations of 1, not \[2\]"):
        tensorforge.compile(model)


def test_pool_with_same_padding_undilated_matches_onnxruntime() -> None:
    x = np.random.default_rng(0).standard_normal((1, 2, 13)).astype(np.float32)
    attrs = {"kernel_shape": [2], "strides": [3], "auto_pad": "SAME_LOWER"}
    model = _model(helper.make_node("AveragePool", ["x"], ["y"], **attrs), x, {})
    got = tensorforge.compile(model).run({"x": x})["y"]
    np.testing.assert_allclose(got, _onnxruntime(model, {"x": x}), rtol=1e-6)


def test_celu_with_alpha_zero_is_refused_by_name() -> None:
    x = np.zeros((3,), np.float32)
    model = _model(helper.make_node("Celu", ["x"], ["y"], name="celu0", alpha=0.0), x, {})
    with pytest.raises(OnnxImportError, match=r"'celu0'.*alpha must be non-zero"):
        tensorforge.compile(model)


@pytest.mark.parametrize(("op", "attrs"), [("Tanh", {}), ("Gelu", {"approximate": "tanh"})])
def test_float32_tanh_saturates_to_one_like_onnxruntime(op: str, attrs: dict) -> None:
    # the vector tanh stopped at 0.99999994 beyond |x| = 9, so tanh-GELU gave -0.03 for -1e6
    # and -inf for -inf (onnxruntime: -0 and NaN)
    x = np.array([-np.inf, -1e6, -30, -9.5, 9.03, 12, 1e6, np.inf, np.nan], np.float32)
    x = np.concatenate([x, -x[:4], np.linspace(-20, 20, 23, dtype=np.float32)])
    model = _model(helper.make_node(op, ["x"], ["y"], **attrs), x, {})
    got = tensorforge.compile(model).run({"x": x})["y"]
    want = _onnxruntime(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7 * np.abs(x[np.isfinite(x)]).max())
    np.testing.assert_array_equal(got[np.abs(x) > 9.5], want[np.abs(x) > 9.5])


def _run_both(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> tuple:
    got = tensorforge.compile(model).run(feed)["y"]
    return got, _onnxruntime(model, feed)


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_max_min_propagate_nan_of_any_operand_like_onnxruntime(op: str, dtype: type) -> None:
    # te.max keeps its first operand when unordered, so a NaN in the second was dropped
    a = np.array([np.nan, 1, np.nan, 2, -np.inf, 0] * 3, dtype)
    b = np.array([1, np.nan, np.nan, 3, np.nan, -0.0] * 3, dtype)
    c = np.array([0, 0, 0, np.nan, 5, 1] * 3, dtype)
    elem = helper.np_dtype_to_tensor_dtype(a.dtype)
    graph = helper.make_graph(
        [helper.make_node(op, ["a", "b", "c"], ["y"])],
        "nan",
        [helper.make_tensor_value_info(k, elem, [18]) for k in "abc"],
        [helper.make_empty_tensor_value_info("y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    got, want = _run_both(model, {"a": a, "b": b, "c": c})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceSum", "ReduceMin"])
def test_reduction_over_no_axes_of_a_long_row_is_a_copy(op: str) -> None:
    # noop_with_empty_axes: a "reduction" without reduce axes, its rows vectorized twice
    # (ScheduleError: axis 'i2' is not a leaf axis)
    x = np.random.default_rng(1).standard_normal((5, 3, 17)).astype(np.float32)
    model = _model(helper.make_node(op, ["x"], ["y"], noop_with_empty_axes=1), x, {})
    got, want = _run_both(model, {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("ReduceL2", {"keepdims": 0}),
        ("ReduceLogSumExp", {"keepdims": 1}),
        ("ReduceLogSum", {"keepdims": 0}),
        ("LpPool", {"kernel_shape": [2], "p": 2}),
        ("LpPool", {"kernel_shape": [3], "p": 3, "pads": [1, 1]}),
    ],
)
def test_float16_squares_and_exponentials_are_computed_in_float32(op: str, attrs: dict) -> None:
    # 300^2 and 1e4^2 overflow float16; onnxruntime squares and sums them in float32
    x = np.array([[[1e4, 2, -3, 0.5, 300, -50, 7]]], np.float16)
    inits = {"axes": np.array([-1], np.int64)} if op.startswith("Reduce") else {}
    model = _model(helper.make_node(op, ["x", *inits], ["y"], **attrs), x, inits)
    got, want = _run_both(model, {"x": x})
    assert got.dtype == np.float16 and np.isfinite(want).all()
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3)


def test_float16_mean_variance_normalization_like_onnxruntime() -> None:
    # the squares of 1e4 overflowed float16; a group of one element is 0 / 0 = NaN (ONNX casts
    # the 1e-9 epsilon to float16, where it is 0)
    x = np.array([[[1e4, 2, -3, 0.5, 300, -50, 7]], [[1.5, -2, 3, 0, 4, 1, 2]]], np.float16)
    for axes in ([0, 2], [1]):
        node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=axes)
        got, want = _run_both(_model(node, x, {}), {"x": x})
        assert np.isfinite(want).all() == (axes == [0, 2])
        np.testing.assert_allclose(
            got.astype(np.float32), want.astype(np.float32), rtol=4e-3, atol=2e-3
        )


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
@pytest.mark.parametrize("transform", ["half_pixel", "pytorch_half_pixel"])
def test_integer_linear_resize_truncates_like_onnxruntime(dtype: type, transform: str) -> None:
    # integers were rounded half to even; onnxruntime's kernels truncate toward zero
    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    x = rng.integers(max(info.min, -100), min(info.max, 200), (1, 2, 5, 3)).astype(dtype)
    sizes = np.array([1, 2, 9, 7], np.int64)
    attrs = {"mode": "linear", "coordinate_transformation_mode": transform}
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    got, want = _run_both(_model(node, x, {"sizes": sizes}), {"x": x})
    # onnxruntime in float32: the interpolated values themselves (to 1e-5)
    wide = x.astype(np.float32)
    exact = _onnxruntime(_model(node, wide, {"sizes": sizes}), {"x": wide}).astype(np.float64)
    fractional = np.abs(exact - np.rint(exact)) > 1e-3
    assert fractional.mean() > 0.3
    np.testing.assert_array_equal(got[fractional], want[fractional])
    np.testing.assert_array_equal(got, np.where(fractional, np.trunc(exact), np.rint(exact)))


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceLogSum"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_l2_and_log_sum_like_onnxruntime(op: str, dtype: type) -> None:
    # were refused (float only); onnxruntime sums in the type, then truncates the root or log
    low = -100 if op == "ReduceL2" else 1
    x = np.random.default_rng(5).integers(low, 100, (3, 17)).astype(dtype)
    inits = {"axes": np.array([-1], np.int64)}
    model = _model(helper.make_node(op, ["x", "axes"], ["y"], keepdims=0), x, inits)
    got, want = _run_both(model, {"x": x})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bounds", [["x"], ["x", "lo"], ["x", "", "hi"]])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_clip_absent_bound_is_the_finite_extreme_like_onnxruntime(bounds, dtype) -> None:
    # ONNX's default bounds are the type's lowest and largest values: infinities clip to them
    x = np.array([-np.inf, np.inf, np.nan, 3, -7, 0.5], dtype)
    inits = {"lo": np.array(-1, dtype), "hi": np.array(1, dtype)}
    model = _model(
        helper.make_node("Clip", bounds, ["y"]), x, {k: inits[k] for k in bounds[1:] if k}
    )
    got, want = _run_both(model, {"x": x})
    np.testing.assert_array_equal(got, want)


def _reference(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feed)


@pytest.mark.parametrize("kernel", [2, 3])
def test_dilated_max_pool_padding_is_minus_infinity(kernel: int) -> None:
    # (graph fuzzer) a dilated max pool padded with the lowest finite value, so a padded window
    # of -inf gave -3.4e38 (onnxruntime's dilated kernel and ONNX's reference evaluator: -inf;
    # undilated, onnxruntime's pools give -3.4e38 there, which ours keep:
    # tests/compiler/gpu/test_gpu_edge_cases.py)
    x = np.full((1, 2, 5, 6), -np.inf, np.float32)
    x[0, 1, 2:, 3:] = np.arange(9, dtype=np.float32).reshape(3, 3)
    attrs = {"kernel_shape": [kernel] * 2, "pads": [1] * 4, "dilations": [2, 2]}
    model = _model(helper.make_node("MaxPool", ["x"], ["y"], **attrs), x, {})
    got = tensorforge.compile(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, _reference(model, {"x": x})[0])
    np.testing.assert_array_equal(got, _onnxruntime(model, {"x": x}))


# (kernel, dilation, pads, rank): the separable pool (undilated 2-D), the generic one (dilated,
# 1-D), with and without padding
NAN_POOLS = [(2, 1, 0, 2), (3, 1, 1, 2), (2, 2, 1, 2), (3, 1, 1, 1), (2, 1, 0, 1)]


@pytest.mark.parametrize(("kernel", "dilation", "pad", "rank"), NAN_POOLS)
def test_max_pool_window_of_nan_only_is_nan(kernel, dilation, pad, rank) -> None:
    # (graph fuzzer, seed 3 case 145: a batch norm of negative variance) a window of NaN only
    # gave -inf, or -3.4e38 padded; onnxruntime gives NaN for the 2-D undilated and dilated
    # windows, but -3.4e38 (a scan from the lowest finite value) for 1-D ones and 2-D windows
    # that overlap the padding, and onnx's reference evaluator fails on them; ours is NaN, as
    # numpy's max. A NaN among numbers follows ReduceMax's rule (first in the window wins)
    # where onnxruntime's vector lanes decide, so a whole NaN channel is compared, next to
    # NaN-free ones
    x = np.random.default_rng(1).standard_normal((2, 3, *[7] * rank)).astype(np.float32)
    x[0, 1] = np.nan
    attrs = {"kernel_shape": [kernel] * rank, "pads": [pad] * 2 * rank,
             "dilations": [dilation] * rank}  # fmt: skip
    model = _model(helper.make_node("MaxPool", ["x"], ["y"], **attrs), x, {})
    got = tensorforge.compile(model).run({"x": x})["y"]
    want = _onnxruntime(model, {"x": x})
    assert np.isnan(got[0, 1]).all()
    if rank == 2 and (dilation > 1 or not pad):
        assert np.isnan(want[0, 1]).all()
    got[0, 1], want[0, 1] = 0, 0
    np.testing.assert_array_equal(got, want)


def _blocked_pool_chain(shift: np.ndarray) -> tuple[onnx.ModelProto, np.ndarray]:
    """conv -> add `shift` per channel -> padded max pool -> conv, kept in NCHW16c on the CPU;
    outputs the pool's `y` and the last conv's `z`."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 5, 5)).astype(np.float32)
    inits = {"w1": rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1,
             "w2": rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1,
             "shift": shift}  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1] * 4),
        helper.make_node("Add", ["c", "shift"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["y", "w2"], ["z"], pads=[1] * 4),
    ]
    graph = helper.make_graph(
        nodes, "blocked", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("z")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, x


def test_blocked_max_pool_window_of_nan_only_is_nan() -> None:
    shift = np.zeros((16, 1, 1), np.float32)
    shift[5] = np.nan
    model, x = _blocked_pool_chain(shift)
    got = tensorforge.compile(model).run({"x": x})["y"]
    want = _onnxruntime(model, {"x": x})
    assert np.isnan(want[0, 5]).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("kernel", "stride", "pad", "dilation", "ceil"),
    [(2, 1, 1, 1, 0), (3, 2, 1, 1, 1), (3, 1, 2, 1, 0), (3, 2, 2, 2, 0), (2, 2, 1, 2, 1)],
)
def test_reference_max_pool_follows_the_compiled_rules(kernel, stride, pad, dilation, ceil) -> None:
    """The reference executor's max pool (`ops/nn.py`) takes the compiled pools' rules: padding
    the lowest finite value (-inf dilated), NaN skipped unless a window's first tap inside the
    image is NaN. It padded with -inf and let any NaN win, so it disagreed with the code it
    is the oracle for on windows of -inf beside padding and on NaN among numbers."""
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph import run_graph

    rng = np.random.default_rng(kernel * 7 + pad)
    x = rng.standard_normal((1, 2, 7, 6)).astype(np.float32)
    x[0, 0, rng.random((7, 6)) < 0.3] = np.nan
    x[0, 1, rng.random((7, 6)) < 0.4] = -np.inf
    x[0, 0, :3, :3], x[0, 1, :3, :3] = np.nan, -np.inf
    attrs = {"kernel_shape": [kernel] * 2, "strides": [stride] * 2, "pads": [pad] * 4,
             "dilations": [dilation] * 2, "ceil_mode": ceil}  # fmt: skip
    model = _model(helper.make_node("MaxPool", ["x"], ["y"], **attrs), x, {})
    ref = run_graph(from_onnx(model), {"x": x})["y"]
    got = tensorforge.compile(model).run({"x": x})["y"]
    np.testing.assert_array_equal(ref, got)  # (NaN where NaN)
    finite = np.where(np.isfinite(x), x, np.float32(0.5))  # and onnxruntime's on numbers
    np.testing.assert_array_equal(
        run_graph(from_onnx(model), {"x": finite})["y"], _onnxruntime(model, {"x": finite})
    )


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_global_max_pool_follows_reduce_max_on_nan(rank: int) -> None:
    """GlobalMaxPool is ReduceMax over the spatial axes, NaN rule included: an image of NaN only
    gave -inf compiled (onnxruntime: NaN) and any NaN won in the reference executor."""
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph import run_graph

    x = np.random.default_rng(rank).standard_normal((2, 4, *[3] * rank)).astype(np.float32)
    flat = x.reshape(2, 4, -1)
    flat[0, 0] = np.nan  # NaN only
    flat[0, 1, 1:] = np.nan  # NaN after a number: skipped
    flat[0, 2, 0] = np.nan  # NaN first: the result
    flat[1, 3, :-1] = np.nan  # (and -inf alone among NaN, NaN first)
    flat[1, 3, -1] = -np.inf
    model = _model(helper.make_node("GlobalMaxPool", ["x"], ["y"]), x, {})
    got = tensorforge.compile(model).run({"x": x})["y"]
    ref = run_graph(from_onnx(model), {"x": x})["y"]
    np.testing.assert_array_equal(got, ref)
    reduce_max = np.where(
        np.isnan(flat[..., :1]),
        np.nan,
        np.nanmax(np.where(np.isnan(flat), -np.inf, flat), axis=-1, keepdims=True),
    )
    np.testing.assert_array_equal(got.reshape(2, 4, 1), reduce_max)
    want = _onnxruntime(model, {"x": x})
    assert np.isnan(got[0, 0]).all()
    if rank > 1:  # (onnxruntime's 1-D pool scans from the lowest finite value: -3.4e38 there)
        assert np.isnan(want[0, 0]).all()
    np.testing.assert_array_equal(got[1, :3], want[1, :3])  # (NaN-free channels)


@pytest.mark.parametrize("case", ["gelu", "erf", "gather_nd"])
def test_reference_executor_on_rank_zero_results(case: str) -> None:
    """The reference executor computed a 0-d Gelu/Erf as a Python float (`.astype` failed) and
    reshaped a GatherND's scalar result with no dims (`reshape()` failed); the compiled code
    and onnxruntime ran both."""
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph import run_graph

    if case == "gather_nd":
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        node = helper.make_node("GatherND", ["x", "i"], ["y"])
        consts = {"i": np.array([1, 2], np.int64)}
    else:
        x = np.array(0.75, np.float32)
        node = helper.make_node("Gelu" if case == "gelu" else "Erf", ["x"], ["y"])
        consts = {}
    model = _model(node, x, consts)
    ref = run_graph(from_onnx(model), {"x": x})["y"]
    got = tensorforge.compile(model).run({"x": x})["y"]
    want = _onnxruntime(model, {"x": x})
    assert ref.shape == want.shape == ()
    np.testing.assert_allclose(ref, want, rtol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize(("kernel", "stride", "dilation"), [(1, 3, 1), (3, 2, 1), (2, 2, 2)])
def test_conv_transpose_tap_that_reaches_nothing_adds_zero_not_nan(
    kernel, stride, dilation
) -> None:
    """A phase with fewer taps than its neighbours (kernel not a multiple of the stride, or
    gcd(stride, dilation) > 1) multiplied the input by a zero weight there: an infinite input
    made NaN in outputs it does not reach (onnxruntime: the bias)."""
    rng = np.random.default_rng(kernel + stride)
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    x[0, 0, 2, 3], x[0, 1, 1, 4], x[0, 1, 4, 0] = np.inf, -np.inf, np.nan
    w = rng.standard_normal((2, 3, kernel, kernel)).astype(np.float32)
    attrs = {"strides": [stride] * 2, "dilations": [dilation] * 2}
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    model = _model(node, x, {"w": w, "b": np.array([0.5, -1.0, 2.0], np.float32)})
    got = tensorforge.compile(model).run({"x": x})["y"]
    want = _onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reverse", [0, 1])
def test_reference_exclusive_cumsum_is_the_sums_before_each_position(reverse: int) -> None:
    """The reference executor computed an exclusive CumSum as the inclusive one minus x: an
    infinite x made NaN from there on (onnxruntime and the compiled code: finite before it),
    and finite sums rounded differently from theirs."""
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph import run_graph

    x = np.random.default_rng(reverse).standard_normal((3, 7)).astype(np.float32)
    x[1, 3], x[2, 5] = np.inf, -np.inf
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=1, reverse=reverse)
    model = _model(node, x, {"axis": np.array(1, np.int64)})
    ref = run_graph(from_onnx(model), {"x": x})["y"]
    want = _onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(np.isfinite(ref), np.isfinite(want))
    np.testing.assert_allclose(ref, want, rtol=1e-6, atol=1e-6)  # (its reverse sums differently)
    np.testing.assert_allclose(ref, tensorforge.compile(model).run({"x": x})["y"], rtol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_reference_softmax_of_a_zero_size_tensor(op: str) -> None:
    """(op fuzzer, reference oracle: Softmax:1:7) the reference executor took the max of an
    empty row and raised; onnxruntime and the compiled code give the empty result."""
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph import run_graph

    x = np.zeros((0, 3), np.float32)
    model = _model(helper.make_node(op, ["x"], ["y"], axis=0), x, {})
    ref = run_graph(from_onnx(model), {"x": x})["y"]
    assert ref.shape == _onnxruntime(model, {"x": x}).shape == (0, 3)
    assert tensorforge.compile(model).run({"x": x})["y"].shape == (0, 3)


def test_padded_conv_channels_stay_zero_when_the_input_is_infinite() -> None:
    """(graph fuzzer, reference oracle with specials: 5:63:30) a conv whose 30 output channels
    are padded to a vector block of 32 computed the padded ones as 0 x its input: NaN beside an
    infinite input, which the next conv's zero weights carried into real outputs. Here every
    real channel there is -inf, so the Relu makes it 0 and onnxruntime's result is finite."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    x[0, 3, 2, 2] = np.inf
    w1 = rng.standard_normal((30, 8, 3, 3)).astype(np.float32) * 0.2
    w1[:, 3] = -np.abs(w1[:, 3]) - 0.1  # the infinite channel gives -inf everywhere it reaches
    w2 = rng.standard_normal((16, 30, 1, 1)).astype(np.float32) * 0.2
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "padded", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    want = _onnxruntime(model, {"x": x})
    assert np.isfinite(want).all()
    module = tensorforge.compile(model)
    assert any("ConvNCHWc" in c.label for c in module.calls), (
        "the chain should run blocked (padded to 32 channels)"
    )
    np.testing.assert_allclose(module.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


CAST_SPECIALS = [np.nan, np.inf, -np.inf, 3e9, -3e9, 5e9, -1.0, 1e19, 2.5e19, -1e19, 1.5, -2.7,
                 2147483520.0, 4294967040.0, 65504.0, -65504.0, 300.7, -129.5, 0.0]  # fmt: skip


@pytest.mark.parametrize("src", ["float32", "float64", "float16"])
@pytest.mark.parametrize(
    "to", ["int32", "uint32", "int64", "uint64", "int16", "uint16", "int8", "uint8"]
)
def test_cast_of_out_of_range_floats_is_cs_on_x86(src: str, to: str) -> None:
    """(op fuzzer, reference oracle with specials: Cast:1:4) LLVM's fptosi/fptoui are poison
    for NaN, infinities and values outside the type: uint32 gave 4294967295 in vector lanes
    and 0 in the scalar tail of one tensor. Casts now follow x86-64's C casts, as onnxruntime's
    static_cast and numpy's astype (the oracle here; checked equal to onnxruntime's)."""
    x = np.array(CAST_SPECIALS * 3, dtype=src)  # vector lanes and a scalar tail
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(to))
    model = _model(helper.make_node("Cast", ["x"], ["y"], to=elem), x, {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (numpy: invalid value in cast)
        want = x.astype(to)
    np.testing.assert_array_equal(tensorforge.compile(model).run({"x": x})["y"], want)
    if src == "float32":
        np.testing.assert_array_equal(_onnxruntime(model, {"x": x}), want)
