"""ONNX patterns that torch's exporters write, rebuilt with onnx.helper (no torch needed), compiled
and checked against onnxruntime: each was a failure of a model users bring from PyTorch."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import UnsupportedOpError


def _model(nodes, inputs, outputs, initializers=(), opset=17):  # noqa: ANN001, ANN202
    graph = oh.make_graph(nodes, "exported", inputs, outputs, list(initializers))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _float(name: str, shape) -> object:  # noqa: ANN001
    return oh.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _check(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # noqa: ANN001
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    module = tensorforge.compile(model)
    got = module.run(feeds)
    assert len(got) == len(want)
    for ours, theirs in zip(got.values(), want, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    return got


def test_a_value_returned_twice_is_two_outputs() -> None:
    # `return y, y` (and `return x, y, y` with x the input): one value listed as two outputs
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    model = _model(
        [oh.make_node("MatMul", ["x", "w"], ["y"])],
        [_float("x", [2, 3])],
        [_float("x", [2, 3]), _float("y", [2, 4]), _float("y", [2, 4]), _float("x", [2, 3])],
        [w],
    )
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = _check(model, {"x": x})
    assert list(got)[:2] == ["x", "y"]


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_with_computed_indices(reduction: str) -> None:
    # torch's scatter / scatter_add / scatter_reduce at the positions of a TopK (a sampler's
    # top-k filter): the indices are computed at run time; updates smaller than the data off
    # the axis leave the other rows alone
    nodes = [
        oh.make_node("TopK", ["x", "k"], ["top", "where"], axis=1),
        oh.make_node("Slice", ["where", "zero", "two", "zero"], ["rows"]),
        oh.make_node("Slice", ["u", "zero", "two", "zero"], ["part"]),
        oh.make_node("ScatterElements", ["x", "rows", "part"], ["y"], axis=1, reduction=reduction),
    ]
    ints = {"k": [2], "zero": [0], "two": [2]}
    model = _model(
        nodes,
        [_float("x", [3, 7]), _float("u", [3, 2])],
        [_float("y", [3, 7])],
        [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()],
        opset=18,
    )
    rng = np.random.default_rng(1)
    x, u = (rng.standard_normal(s).astype(np.float32) for s in ((3, 7), (3, 2)))
    _check(model, {"x": x, "u": u})


def test_scatter_elements_repeated_index_keeps_the_last_update() -> None:
    nodes = [oh.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0)]
    model = _model(
        nodes,
        [
            _float("x", [4, 2]),
            oh.make_tensor_value_info("i", TensorProto.INT64, [3, 2]),
            _float("u", [3, 2]),
        ],
        [_float("y", [4, 2])],
    )
    x = np.zeros((4, 2), np.float32)
    u = np.arange(6, dtype=np.float32).reshape(3, 2) + 1
    i = np.array([[1, -1], [1, 0], [2, -1]], np.int64)  # negative: from the end
    got = _check(model, {"x": x, "i": i, "u": u})
    np.testing.assert_array_equal(got["y"], [[0, 4], [3, 0], [5, 0], [0, 6]])


def test_an_if_output_may_declare_the_branch_not_taken() -> None:
    # torch's TorchScript exporter guards scatter_reduce on a 0-d input with an If whose
    # condition is a constant; the output is declared with the flattening branch's shape
    flat = oh.make_graph(
        [oh.make_node("Reshape", ["y", "minus_one"], ["f"])], "then", [], [_float("f", [6])]
    )
    keep = oh.make_graph([oh.make_node("Identity", ["y"], ["k"])], "else", [], [_float("k", None)])
    nodes = [
        oh.make_node("Relu", ["x"], ["y"]),
        oh.make_node("If", ["is_scalar"], ["out"], then_branch=flat, else_branch=keep),
    ]
    model = _model(
        nodes,
        [_float("x", [2, 3])],
        [_float("out", [6])],
        [
            numpy_helper.from_array(np.array(False), "is_scalar"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        ],
    )
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    got = tensorforge.compile(model).run(x)
    np.testing.assert_array_equal(got["out"], np.maximum(x, 0))


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_with_computed_indices(reduction: str) -> None:
    # torch's `y[rows, 1] = v` / index_put_(accumulate=True) with rows computed at run time
    # (an ArgMax here): ScatterND whose indices are no constant; a repeated row keeps the
    # last update (none) or combines them
    nodes = [
        oh.make_node("ArgMax", ["x"], ["best"], axis=1, keepdims=1),  # [4, 1] in [0, 5)
        oh.make_node("Mod", ["best", "three"], ["row"]),
        oh.make_node("Concat", ["row", "one"], ["at"], axis=1),  # [4, 2]: (row, 1)
        oh.make_node("ScatterND", ["d", "at", "v"], ["y"], reduction=reduction),
    ]
    model = _model(
        nodes,
        [_float("x", [4, 5]), _float("d", [3, 4, 2]), _float("v", [4, 2])],
        [_float("y", [3, 4, 2])],
        [
            numpy_helper.from_array(np.array(3, np.int64), "three"),
            numpy_helper.from_array(np.ones((4, 1), np.int64), "one"),
        ],
        opset=18,
    )
    rng = np.random.default_rng(3)
    x = np.array([[0, 9, 0, 0, 0], [0, 0, 0, 9, 0], [9, 0, 0, 0, 0], [0, 0, 0, 0, 9]], np.float32)
    feeds = {"x": x, "d": rng.standard_normal((3, 4, 2)), "v": rng.standard_normal((4, 2))}
    _check(model, {k: np.asarray(v, np.float32) for k, v in feeds.items()})


@pytest.mark.parametrize(
    "scale,transform,rounding",
    [
        (0.6, "asymmetric", "floor"),  # F.interpolate(scale_factor=0.6, mode="nearest")
        (0.7, "asymmetric", "floor"),
        (0.6, "half_pixel", "round_prefer_floor"),  # mode="nearest-exact"
        (1.4, "pytorch_half_pixel", "round_prefer_ceil"),
    ],
)
def test_nearest_resize_sizes_and_picks_as_float32_does(scale, transform, rounding) -> None:  # noqa: ANN001
    # the output length and a nearest pick's source coordinate are computed in float32
    # (onnxruntime; torch agrees from its unrounded factor): 10 * 0.7f is 7 there but
    # 6.99999988 in float64 (one row short), 3 / 0.6f is 5 but 4.9999998 (the pixel before)
    nodes = [
        oh.make_node(
            "Resize",
            ["x", "", "scales"],
            ["y"],
            mode="nearest",
            coordinate_transformation_mode=transform,
            nearest_mode=rounding,
        )
    ]
    scales = numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "scales")
    model = _model(nodes, [_float("x", [1, 2, 10, 13])], [_float("y", None)], [scales])
    x = np.arange(260, dtype=np.float32).reshape(1, 2, 10, 13)
    _check(model, {"x": x})


@pytest.mark.parametrize("rows_only", [False, True])
def test_masked_assignment_through_nonzero_is_a_where(rows_only: bool) -> None:
    # torch's exporter writes `x[mask] = v` as ScatterND at Transpose(NonZero(mask)) of v
    # expanded to the (run-time) count of the mask: a Where in effect. With a mask over the
    # rows only (`x[rows] = v`) each update is a row.
    mask_shape = [4] if rows_only else [4, 3]
    nodes = [
        oh.make_node("NonZero", ["mask"], ["nz"]),
        oh.make_node("Transpose", ["nz"], ["at"], perm=[1, 0]),
        oh.make_node("Reshape", ["mask", "minus_one"], ["flat"]),
        oh.make_node("Cast", ["flat"], ["mask_int"], to=TensorProto.INT64),
        oh.make_node("ReduceSum", ["mask_int"], ["count"], keepdims=1),
        oh.make_node("Concat", ["count", "row"] if rows_only else ["count"], ["shape"], axis=0),
        oh.make_node("Expand", ["v", "shape"], ["spread"]),
        oh.make_node("ScatterND", ["x", "at", "spread"], ["y"]),
    ]
    model = _model(
        nodes,
        [_float("x", [4, 3]), oh.make_tensor_value_info("mask", TensorProto.BOOL, mask_shape)],
        [_float("y", [4, 3])],
        [
            numpy_helper.from_array(np.array(-1.5, np.float32), "v"),
            numpy_helper.from_array(np.array([3], np.int64), "row"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        ],
    )
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    mask = rng.standard_normal(mask_shape) > 0
    got = _check(model, {"x": x, "mask": mask})
    want = x.copy()
    want[mask] = -1.5
    np.testing.assert_array_equal(got["y"], want)


def test_eye_like_of_a_computed_value() -> None:
    # torch.diag(v) / torch.diagonal through the dynamo exporter: EyeLike of a run-time value,
    # which reads only its static shape
    nodes = [
        oh.make_node("Relu", ["x"], ["r"]),
        oh.make_node("EyeLike", ["r"], ["eye"], k=1),
        oh.make_node("EyeLike", ["r"], ["eye_int"], dtype=TensorProto.INT64),
        oh.make_node("Mul", ["eye", "x"], ["y"]),
    ]
    model = _model(
        nodes,
        [_float("x", [3, 4])],
        [_float("y", [3, 4]), oh.make_tensor_value_info("eye_int", TensorProto.INT64, [3, 4])],
    )
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    got = _check(model, {"x": x})
    np.testing.assert_array_equal(got["eye_int"], np.eye(3, 4, dtype=np.int64))


@pytest.mark.parametrize("opset", [12, 13])
@pytest.mark.parametrize("constant_node", [False, True])
def test_dropout_with_a_constant_false_training_mode_is_inference(
    opset: int, constant_node: bool
) -> None:
    """Dropout(x, ratio, training_mode=false), its mask unread: the identity, as onnxruntime."""
    false = numpy_helper.from_array(np.array(False), "train")
    nodes = [oh.make_node("Dropout", ["x", "ratio", "train"], ["y", "mask"])]
    inits = [numpy_helper.from_array(np.array(0.4, np.float32), "ratio")]
    if constant_node:
        nodes.insert(0, oh.make_node("Constant", [], ["train"], value=false))
    else:
        inits.append(false)
    model = _model(nodes, [_float("x", [2, 5])], [_float("y", [2, 5])], inits, opset=opset)
    _check(model, {"x": np.arange(10, dtype=np.float32).reshape(2, 5)})


@pytest.mark.parametrize(
    "image,block,attrs",
    [
        ([4, 5], [2, 3], {"strides": [1, 2], "pads": [1, 1, 1, 1]}),  # nn.Fold(padding, stride)
        ([7, 6], [3, 2], {"strides": [2, 2], "dilations": [2, 1]}),  # blocks short of the edge
        ([5, 4, 3], [2, 2, 1], {"pads": [0, 1, 0, 1, 0, 0]}),  # a volume
    ],
)
def test_col2im_sums_the_overlapping_blocks(image, block, attrs) -> None:  # noqa: ANN001
    # torch's F.fold / nn.Fold through the dynamo exporter: Col2Im (opset 18) with constant
    # image and block shapes
    nd = len(image)
    strides, dilations = attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd)
    pads = attrs.get("pads", [0] * 2 * nd)
    blocks = np.prod(
        [
            (i + pads[a] + pads[nd + a] - dilations[a] * (k - 1) - 1) // strides[a] + 1
            for a, (i, k) in enumerate(zip(image, block, strict=True))
        ]
    )
    depth = 3 * int(np.prod(block))
    model = _model(
        [oh.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)],
        [_float("x", [2, depth, int(blocks)])],
        [_float("y", [2, 3, *image])],
        [
            numpy_helper.from_array(np.array(image, np.int64), "image"),
            numpy_helper.from_array(np.array(block, np.int64), "block"),
        ],
        opset=18,
    )
    x = np.random.default_rng(6).standard_normal((2, depth, int(blocks))).astype(np.float32)
    _check(model, {"x": x})


@pytest.mark.parametrize(
    "mode,scales",
    [("linear", [1, 1, 1.5, 0.6]), ("cubic", [1, 1, 1.5, 0.6]), ("linear", [1, 1, 2, 1.5, 2])],
)
def test_align_corners_resize_to_a_fractional_length(mode: str, scales) -> None:  # noqa: ANN001
    # F.interpolate(scale_factor=..., align_corners=True) through either exporter: Resize by
    # scales whose lengths are not whole (3 * 1.5 = 4.5 rows); the corners map onto the
    # truncated output's, as in torch and onnxruntime
    shape = [1, 2, 3, 5] if len(scales) == 4 else [1, 1, 2, 3, 3]
    node = oh.make_node(
        "Resize",
        ["x", "", "scales"],
        ["y"],
        mode=mode,
        coordinate_transformation_mode="align_corners",
    )
    scale = numpy_helper.from_array(np.array(scales, np.float32), "scales")
    model = _model([node], [_float("x", shape)], [_float("y", None)], [scale])
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    _check(model, {"x": x})


@pytest.mark.parametrize("running", [False, True])
def test_training_mode_batch_norm_uses_the_batch_statistics(running: bool) -> None:
    # torch's BatchNorm with track_running_stats=False normalizes by the batch's statistics in
    # eval mode too: the TorchScript exporter writes BatchNormalization(training_mode=1) with
    # the running statistics as further (unused) outputs
    outputs = ["y", "mean_out", "var_out"] if running else ["y"]  # the graph's
    node = oh.make_node(
        "BatchNormalization",
        ["x", "scale", "bias", "mean", "var"],
        ["y", "mean_out", "var_out"],
        epsilon=1e-3,
        momentum=0.8,
        training_mode=1,
    )
    rng = np.random.default_rng(8)
    params = {
        "scale": rng.uniform(0.5, 2, 3),
        "bias": rng.standard_normal(3),
        "mean": rng.standard_normal(3),
        "var": rng.uniform(0.5, 2, 3),
    }
    model = _model(
        [node],
        [_float("x", [2, 3, 4, 5])],
        [_float("y", [2, 3, 4, 5])] + [_float(v, [3]) for v in outputs[1:]],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items()],
        opset=15,
    )
    x = (rng.standard_normal((2, 3, 4, 5)) * 3 + 1).astype(np.float32)
    _check(model, {"x": x})


def test_batch_norm_below_opset_14_with_statistics_outputs_is_training_mode() -> None:
    # the same module through the TorchScript exporter at opsets 9 to 13: BatchNormalization-9
    # has no training_mode; its five outputs (the saved statistics unread) say it
    rng = np.random.default_rng(9)
    params = {k: rng.uniform(0.5, 2, 3).astype(np.float32) for k in ("s", "b", "m", "v")}
    outs = ["y", "running_mean", "running_var", "saved_mean", "saved_var"]
    model = _model(
        [oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outs, momentum=0.7)],
        [_float("x", [2, 3, 4])],
        [_float("y", [2, 3, 4])],
        [numpy_helper.from_array(v, k) for k, v in params.items()],
        opset=13,
    )
    x = (rng.standard_normal((2, 3, 4)) * 2 - 1).astype(np.float32)
    _check(model, {"x": x})
    model.graph.output.append(_float("saved_var", [3]))
    with pytest.raises(UnsupportedOpError, match="saved statistics outputs"):
        tensorforge.compile(model)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 2, 4]])
def test_affine_grid_of_a_computed_matrix(size, align_corners: int) -> None:  # noqa: ANN001
    # F.affine_grid through the TorchScript exporter at opset 20 (a spatial transformer): the
    # affine matrices come from the network, the size is constant
    nd = len(size) - 2
    nodes = [
        oh.make_node("Tanh", ["t"], ["theta"]),
        oh.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align_corners),
    ]
    model = _model(
        nodes,
        [_float("t", [2, nd, nd + 1])],
        [_float("grid", [2, *size[2:], nd])],
        [numpy_helper.from_array(np.array(size, np.int64), "size")],
        opset=20,
    )
    t = np.random.default_rng(10).standard_normal((2, nd, nd + 1)).astype(np.float32)
    _check(model, {"t": t})


def test_aspp_on_a_map_smaller_than_its_dilations() -> None:
    # torchvision's DeepLabV3 head at a small input (a 90x70 image: a 6x5 map): the 3x3 branches
    # dilated 12, 24 and 36 reach the map with their centre tap alone (drop_padding_taps), the
    # 2 dilated 4 with all nine; 1x1 branch, image pooling, concat and projection as exported
    rng = np.random.default_rng(3)
    inits, nodes, branches = [], [], []

    def weight(name: str, shape: tuple) -> str:
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        return name

    for i, d in enumerate((1, 2, 12, 24, 36)):
        k = 1 if d == 1 else 3
        attrs = {"kernel_shape": [k, k], "dilations": [d, d], "pads": [d * (k // 2)] * 4}
        w, b = weight(f"w{i}", (8, 16, k, k)), weight(f"b{i}", (8,))
        nodes.append(oh.make_node("Conv", ["x", w, b], [f"c{i}"], name=f"aspp{i}", **attrs))
        nodes.append(oh.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        branches.append(f"r{i}")
    nodes += [
        oh.make_node("GlobalAveragePool", ["x"], ["pool"]),
        oh.make_node("Conv", ["pool", weight("wp", (8, 16, 1, 1))], ["pc"]),
        oh.make_node("Expand", ["pc", "hw"], ["pe"]),
        oh.make_node("Concat", [*branches, "pe"], ["cat"], axis=1),
        oh.make_node("Conv", ["cat", weight("wo", (8, 48, 1, 1))], ["y"]),
    ]
    inits.append(numpy_helper.from_array(np.array([1, 8, 6, 5], np.int64), "hw"))
    model = _model(nodes, [_float("x", [1, 16, 6, 5])], [_float("y", [1, 8, 6, 5])], inits)
    _check(model, {"x": rng.standard_normal((1, 16, 6, 5)).astype(np.float32)})


def test_unfold_with_padding_and_dilation_as_the_dynamo_exporter_writes_it() -> None:
    # torch.nn.Unfold(3, dilation=2, padding=1, stride=2) on a 2x9x9 map (torch 2.14, dynamo):
    # Pad, a Gather of the rows and one of the columns (2-D index tables), Transpose, Reshape.
    # One injective kernel reads the column table at a modulo index under the padding's test,
    # which LLVM 22's loop vectorizer miscompiled (benchmarks/torch_catalog.py)
    taps = np.array([[0, 2, 4, 6], [2, 4, 6, 8], [4, 6, 8, 10]], np.int64)  # kernel x output
    nodes = [
        oh.make_node("Pad", ["x", "pads"], ["xp"], mode="constant"),
        oh.make_node("Gather", ["xp", "taps"], ["rows"], axis=2),
        oh.make_node("Gather", ["rows", "taps"], ["cols"], axis=4),
        oh.make_node("Transpose", ["cols"], ["t"], perm=[0, 1, 2, 4, 3, 5]),
        oh.make_node("Reshape", ["t", "shape"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(taps, "taps"),
        numpy_helper.from_array(np.array([1, 18, -1], np.int64), "shape"),
    ]
    model = _model(nodes, [_float("x", [1, 2, 9, 9])], [_float("y", [1, 18, 16])], inits, 18)
    _check(model, {"x": np.random.default_rng(4).standard_normal((1, 2, 9, 9), np.float32)})


def _squeeze_excitation(pool: str):  # noqa: ANN202
    # MobileNetV3's block between 1x1 convolutions; the dynamo exporter writes its
    # adaptive_avg_pool2d(x, 1) as ReduceMean over axes [-1, -2], TorchScript as GlobalAveragePool
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) / 4, n)
        for n, s in (
            ("w0", (16, 16, 3, 3)),
            ("w1", (32, 16, 1, 1)),
            ("w2", (8, 32, 1, 1)),
            ("w3", (32, 8, 1, 1)),
            ("w5", (16, 16, 1, 1)),
        )
    ]
    inits += [
        numpy_helper.from_array(rng.standard_normal((16, 32, 3, 3)).astype(np.float32) / 8, "w4"),
        numpy_helper.from_array(np.array([-1, -2], np.int64), "axes"),
    ]
    mean = (
        oh.make_node("ReduceMean", ["r", "axes"], ["m"], keepdims=1)
        if pool == "ReduceMean"
        else oh.make_node("GlobalAveragePool", ["r"], ["m"])
    )
    nodes = [
        oh.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c0"], ["r0"]),
        oh.make_node("Conv", ["r0", "w1"], ["c"]),
        oh.make_node("Relu", ["c"], ["r"]),
        mean,
        oh.make_node("Conv", ["m", "w2"], ["s1"]),
        oh.make_node("Relu", ["s1"], ["s2"]),
        oh.make_node("Conv", ["s2", "w3"], ["s3"]),
        oh.make_node("HardSigmoid", ["s3"], ["gate"], alpha=1 / 6),
        oh.make_node("Mul", ["r", "gate"], ["se"]),
        oh.make_node("Conv", ["se", "w4"], ["c4"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c4"], ["r4"]),
        oh.make_node("Conv", ["r4", "w5"], ["y"]),
    ]
    return _model(nodes, [_float("x", [1, 16, 12, 12])], [_float("y", [1, 16, 12, 12])], inits, 18)


def test_squeeze_excitation_by_reduce_mean_stays_blocked() -> None:
    # a ReduceMean over rows and columns left the blocked layout of the convolutions around it
    # and came back (two more layout transforms per block, ~10-15% of MobileNetV3's time)
    x = np.random.default_rng(5).standard_normal((1, 16, 12, 12)).astype(np.float32)
    _check(_squeeze_excitation("ReduceMean"), {"x": x})
    labels = {
        pool: [c.label for c in tensorforge.compile(_squeeze_excitation(pool)).calls]
        for pool in ("ReduceMean", "GlobalAveragePool")
    }
    transforms = {p: sum("LayoutTransform" in lb for lb in ls) for p, ls in labels.items()}
    assert transforms["ReduceMean"] == transforms["GlobalAveragePool"], labels


def test_nodes_out_of_topological_order_are_sorted_as_onnxruntime_does() -> None:
    """Graph tools that append nodes write files out of order; onnxruntime sorts a graph's
    nodes, and so do we, a branch reading a value defined after its If included; we sort a
    branch's own nodes too (onnxruntime refuses those: compared with the branch in order)."""
    from tensorforge.compiler.frontend.onnx_patterns import sort_nodes

    def model(branches_in_order: bool) -> object:
        def branch(name: str, op: str) -> object:
            nodes = [oh.make_node(op, ["late"], ["t"]), oh.make_node("Neg", ["t"], ["o"])]
            nodes = nodes if branches_in_order else nodes[::-1]
            return oh.make_graph(nodes, name, [], [_float("o", [2, 3])])

        nodes = [
            oh.make_node(
                "If",
                ["c"],
                ["y"],
                then_branch=branch("then", "Relu"),
                else_branch=branch("else", "Sigmoid"),
            ),  # fmt: skip
            oh.make_node("Mul", ["a", "a"], ["late"]),  # the branches read it: after the If
            oh.make_node("Exp", ["x"], ["a"]),
            oh.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            oh.make_node("Greater", ["s", "zero"], ["c"]),
        ]
        zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
        return _model(nodes, [_float("x", [2, 3])], [_float("y", [2, 3])], [zero])

    ours = tensorforge.compile(model(branches_in_order=False))
    for sign in (1, -1):
        x = sign * (np.arange(6, dtype=np.float32).reshape(2, 3) / 4 + 0.1)
        want = _check(model(branches_in_order=True), {"x": x})
        np.testing.assert_allclose(ours.run({"x": x})["y"], want["y"], rtol=1e-6)
    in_order = sort_nodes(model(branches_in_order=False))
    assert sort_nodes(in_order) is in_order  # sorted files are read as they are
    assert [n.op_type for n in in_order.graph.node] == ["Exp", "Mul", "ReduceSum", "Greater", "If"]
    branches = {a.name: a.g for a in in_order.graph.node[-1].attribute}
    assert [n.op_type for n in branches["then_branch"].node] == ["Relu", "Neg"]


def test_a_cycle_of_nodes_is_refused_naming_the_value() -> None:
    nodes = [oh.make_node("Relu", ["b"], ["a"]), oh.make_node("Neg", ["a"], ["b"]),
             oh.make_node("Add", ["x", "a"], ["y"])]  # fmt: skip
    model = _model(nodes, [_float("x", [2])], [_float("y", [2])])
    with pytest.raises(Exception, match="must be defined, not 'b'"):
        tensorforge.compile(model)
