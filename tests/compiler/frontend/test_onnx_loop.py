"""A Loop whose trip count and condition fold at import is unrolled (loop-carried values threaded,
scan outputs stacked on a new axis 0); sequences threaded through it are lists at import; a loop
decided at run time, or one past the unroll cap, is refused by name. torch's EmbeddingBag, as
both of its exporters write it, runs against torch and onnxruntime."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, UnsupportedOpError, from_onnx
from tensorforge.compiler.graph import run_graph

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _value(name: str, elem: int, shape: list | None = None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def _model(nodes: list, inputs: list, outputs: list, inits: dict) -> onnx.ModelProto:
    graph = oh.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _counting_body(cond_out: list) -> onnx.GraphProto:
    """(i, c, acc) -> (cond_out, acc * 0.5 + x[i], x[i] * i): x a [4, 3] outer value."""
    nodes = [
        oh.make_node("Gather", ["x", "i"], ["row"], axis=0),
        oh.make_node("Mul", ["acc", "half"], ["scaled"]),
        oh.make_node("Add", ["scaled", "row"], ["acc_out"]),
        oh.make_node("Cast", ["i"], ["i_f"], to=F),
        oh.make_node("Mul", ["row", "i_f"], ["scan"]),
        *cond_out,
    ]
    return oh.make_graph(
        nodes,
        "body",
        [_value("i", I64, []), _value("c", B, []), _value("acc", F, [3])],
        [_value("c_out", B, []), _value("acc_out", F, [3]), _value("scan", F, [3])],
    )


def _check(model: onnx.ModelProto, feed: dict, constant_inputs: dict | None = None) -> None:
    """The compiled model matches onnxruntime on every output."""
    ref = ort.InferenceSession(model.SerializeToString()).run(
        None, {**feed, **(constant_inputs or {})}
    )
    graph = from_onnx(model, constant_inputs=constant_inputs)
    got = tensorforge.compile(graph).run(feed)
    for name, want in zip([o.name for o in model.graph.output], ref, strict=True):
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
        assert got[name].shape == want.shape


def _for_model(trips: int, cond: bool = True, cond_out: str = "Identity") -> onnx.ModelProto:
    """`acc, scan = Loop(trips from x's shape, cond)` over `_counting_body`."""
    body_cond = [oh.make_node(cond_out, ["c"] if cond_out == "Identity" else [], ["c_out"])]
    if cond_out == "runtime":  # the body's condition: a test on the data
        body_cond = [
            oh.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            oh.make_node("Less", ["total", "limit"], ["c_out"]),
        ]
    nodes = [
        oh.make_node("Shape", ["x"], ["shape"]),
        oh.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
        oh.make_node("Sub", ["rows", "skip"], ["trips"]),
        oh.make_node(
            "Loop", ["trips", "cond", "acc0"], ["acc", "scans"], body=_counting_body(body_cond),
            name="loop",
        ),
    ]  # fmt: skip
    inits = {
        "zero": np.array(0, np.int64),
        "skip": np.array(4 - trips, np.int64),
        "cond": np.array(cond),
        "acc0": np.array([1.0, -2.0, 0.5], np.float32),
        "half": np.array(0.5, np.float32),
        "limit": np.array(3.0, np.float32),
    }
    return _model(
        nodes, [_value("x", F, [4, 3])], [_value("acc", F, [3]), _value("scans", F, None)], inits
    )


X = np.arange(12, dtype=np.float32).reshape(4, 3) / 7 - 0.6


def test_loop_with_a_static_trip_count_threads_values_and_stacks_scans() -> None:
    _check(_for_model(4), {"x": X})
    _check(_for_model(2), {"x": X})  # a trip count folded from the shape: 4 - 2


def test_loop_whose_condition_starts_false_keeps_the_initial_values() -> None:
    model = _for_model(3, cond=False)
    loop = model.graph.node[-1]  # without its scan output: no iterations, no static shape
    del loop.output[1], loop.attribute[0].g.output[2], model.graph.output[1]
    _check(model, {"x": X})


def test_loop_scan_output_of_zero_iterations_is_refused() -> None:
    with pytest.raises(OnnxImportError, match="runs zero times.*'scans'"):
        from_onnx(_for_model(0))


def test_loop_decided_at_run_time_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedOpError, match="body computes its condition at run time.*'loop'"):
        from_onnx(_for_model(3, cond_out="runtime"))
    model = _for_model(3)
    model.graph.input.append(_value("n", I64, []))
    model.graph.node[-1].input[0] = "n"
    with pytest.raises(UnsupportedOpError, match="trip count computed at run time.*'loop'"):
        from_onnx(model)
    model = _for_model(3)
    model.graph.node[-1].input[:2] = ["", ""]
    with pytest.raises(UnsupportedOpError, match="neither a trip count nor a condition.*'loop'"):
        from_onnx(model)


def test_loop_body_that_does_not_fit_the_node_is_refused_by_name() -> None:
    model = _for_model(4)
    model.graph.node[-1].output.append("extra")
    with pytest.raises(OnnxImportError, match="'loop' has 3 outputs, more than the 2"):
        from_onnx(model)
    model = _for_model(4)
    model.graph.node[-1].input.append("acc0")
    with pytest.raises(OnnxImportError, match="'loop' has 2 loop-carried values"):
        from_onnx(model)


def test_loop_computing_a_shape_that_a_reshape_reads() -> None:
    """A carried value that folds (a dim doubled twice) is a constant after the loop."""
    body = oh.make_graph(
        [oh.make_node("Mul", ["d", "two"], ["d2"]), oh.make_node("Identity", ["c"], ["c_out"])],
        "double",
        [_value("i", I64, []), _value("c", B, []), _value("d", I64, [1])],
        [_value("c_out", B, []), _value("d2", I64, [1])],
    )
    nodes = [
        oh.make_node("Loop", ["trips", "true", "one"], ["cols"], body=body),
        oh.make_node("Concat", ["minus_one", "cols"], ["shape"], axis=0),
        oh.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = {
        "trips": np.array(2, np.int64),
        "true": np.array(True),
        "one": np.array([1], np.int64),
        "two": np.array(2, np.int64),
        "minus_one": np.array([-1], np.int64),
    }
    model = _model(nodes, [_value("x", F, [4, 3])], [_value("y", F, None)], inits)
    _check(model, {"x": X})


def _branch(name: str, op: str, x: str, out: str) -> onnx.GraphProto:
    return oh.make_graph([oh.make_node(op, [x], [out])], name, [], [_value(out, F, None)])


def _while_model(limit: int) -> onnx.ModelProto:
    """As torch's dynamo exporter writes a loop over bags: no trip count, a counter carried,
    `cond = counter + 1 < limit`, an If on the counter (Exp of the first row, Neg of the
    others), each iteration appending a row to a sequence that ConcatFromSequence joins after
    the loop."""
    body = oh.make_graph(
        [
            oh.make_node("Gather", ["x", "k"], ["row"], axis=0),
            oh.make_node("Unsqueeze", ["row", "axes"], ["row2"]),
            oh.make_node("Equal", ["k", "zero"], ["at_first"]),
            oh.make_node(
                "If", ["at_first"], ["e"],
                then_branch=_branch("first", "Exp", "row2", "e1"),
                else_branch=_branch("later", "Neg", "row2", "e2"),
            ),
            oh.make_node("SequenceInsert", ["seq", "e"], ["seq_out"]),
            oh.make_node("Add", ["k", "one"], ["k_out"]),
            oh.make_node("Less", ["k_out", "limit"], ["c_out"]),
        ],
        "while_body",
        [_value("i", I64, []), _value("c", B, []),
         oh.make_tensor_sequence_value_info("seq", F, None), _value("k", I64, [])],
        [_value("c_out", B, []), oh.make_tensor_sequence_value_info("seq_out", F, None),
         _value("k_out", I64, [])],
    )  # fmt: skip
    nodes = [
        oh.make_node("SequenceEmpty", [], ["seq0"], dtype=F),
        oh.make_node("Loop", ["", "true", "seq0", "zero"], ["rows", "count"], body=body, name="w"),
        oh.make_node("ConcatFromSequence", ["rows"], ["y"], axis=0),
    ]
    inits = {
        "true": np.array(True),
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "limit": np.array(limit, np.int64),
        "axes": np.array([0], np.int64),
    }
    return _model(nodes, [_value("x", F, [4, 3])], [_value("y", F, None)], inits)


def test_while_loop_on_a_folded_counter_appending_to_a_sequence() -> None:
    _check(_while_model(3), {"x": X})


def test_concat_from_sequence_with_a_new_axis() -> None:
    model = _while_model(2)
    model.graph.node[-1].CopyFrom(
        oh.make_node("ConcatFromSequence", ["rows"], ["y"], axis=1, new_axis=1)
    )
    _check(model, {"x": X})


def test_sequence_as_a_model_output_is_refused() -> None:
    model = _while_model(2)
    del model.graph.node[-1]
    model.graph.output[0].CopyFrom(oh.make_tensor_sequence_value_info("rows", F, None))
    with pytest.raises(UnsupportedOpError, match="a sequence as a model output.*'rows'"):
        from_onnx(model)


INDICES = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 7], np.int64)
OFFSETS = np.array([0, 2, 2, 6], np.int64)  # an empty bag (2:2) too


def _embedding_bag_model(reduce: str) -> onnx.ModelProto:
    """torch's TorchScript exporter's EmbeddingBag with offsets, rebuilt with onnx.helper: a
    Loop over the bags (trip count from the offsets' shape), each slicing its indices
    `indices[offsets[i]:ends[i]]`, gathering their rows and reducing them to one."""
    body = oh.make_graph(
        [
            oh.make_node("Gather", ["starts", "i"], ["start"], axis=0),
            oh.make_node("Gather", ["ends", "i"], ["end"], axis=0),
            oh.make_node("Unsqueeze", ["start", "axis0"], ["start1"]),
            oh.make_node("Unsqueeze", ["end", "axis0"], ["end1"]),
            oh.make_node("Slice", ["indices", "start1", "end1", "axis0"], ["bag"]),
            oh.make_node("Gather", ["weight", "bag"], ["rows"], axis=0),
            oh.make_node(reduce, ["rows", "axis0"], ["row"], keepdims=0)
            if reduce == "ReduceSum"  # (the others' axes are an attribute before opset 18)
            else oh.make_node(reduce, ["rows"], ["row"], axes=[0], keepdims=0),
            oh.make_node("Cast", ["true"], ["c_out"], to=B),
        ],
        "bag_body",
        [_value("i", I64, []), _value("c", B, [])],
        [_value("c_out", B, []), _value("row", F, None)],
    )
    nodes = [
        oh.make_node("Shape", ["indices"], ["n_shape"]),
        oh.make_node("Gather", ["n_shape", "zero"], ["n"], axis=0),
        oh.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
        oh.make_node("Concat", ["offsets", "n1"], ["starts"], axis=0),
        oh.make_node("Slice", ["starts", "one", "big", "axis0"], ["ends"]),
        oh.make_node("Shape", ["ends"], ["bags_shape"]),
        oh.make_node("Gather", ["bags_shape", "zero"], ["bags"], axis=0),
        oh.make_node("Loop", ["bags", "true"], ["y"], body=body, name="/Loop"),
    ]
    inits = {
        "weight": np.linspace(-1, 1, 30, dtype=np.float32).reshape(10, 3) ** 3,
        "zero": np.array(0, np.int64),
        "axis0": np.array([0], np.int64),
        "one": np.array([1], np.int64),
        "big": np.array([2**62], np.int64),
        "true": np.array(True),
    }
    inputs = [_value("indices", I64, [len(INDICES)]), _value("offsets", I64, [len(OFFSETS)])]
    return _model(nodes, inputs, [_value("y", F, None)], inits)


@pytest.mark.parametrize("reduce", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_embedding_bag_loop_as_torchscript_writes_it(reduce: str) -> None:
    model = _embedding_bag_model(reduce)
    _check(model, {"indices": INDICES}, {"offsets": OFFSETS})
    weight = numpy_helper.to_array(model.graph.initializer[0])
    ends = [*OFFSETS[1:], len(INDICES)]
    fn = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max}[reduce]
    graph = from_onnx(model, constant_inputs={"offsets": OFFSETS})
    got = tensorforge.compile(graph).run({"indices": INDICES})["y"]
    for bag, (start, end) in enumerate(zip(OFFSETS, ends, strict=True)):
        if end > start:  # (an empty bag: the reduction's empty value, checked by _check)
            want = fn(weight[INDICES[start:end]], axis=0)
            np.testing.assert_allclose(got[bag], want, rtol=1e-6)


def test_embedding_bag_of_more_bags_than_import_folds_floats() -> None:
    """70 bags: the offsets (71 int64) fold at import, where the loop slices by them."""
    offsets = np.arange(70, dtype=np.int64) * 2
    indices = np.random.default_rng(5).integers(0, 10, 143)
    model = _embedding_bag_model("ReduceSum")
    for value, array in zip(model.graph.input, (indices, offsets), strict=True):
        value.type.tensor_type.shape.dim[0].dim_value = len(array)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(
        None, {"indices": indices, "offsets": offsets}
    )
    graph = from_onnx(model, constant_inputs={"offsets": offsets})
    np.testing.assert_allclose(run_graph(graph, {"indices": indices})["y"], want, rtol=1e-6)


def test_embedding_bag_with_offsets_at_run_time_is_refused_by_name() -> None:
    with pytest.raises(OnnxImportError, match="Slice node '/Loop/0/.*must be a constant"):
        from_onnx(_embedding_bag_model("ReduceSum"))


# EmbeddingBag through torch's two exporters: a Loop over the bags. The bags' sizes decide the
# shapes of each iteration's rows, so the offsets are bound as constants.


def _embedding_bag(mode: str, dynamo: bool) -> tuple[onnx.ModelProto, np.ndarray]:
    torch = pytest.importorskip(
        "torch", reason="torch is an optional extra: pip install '.[torch]'"
    )
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 3, mode=mode).eval()
    args = (torch.from_numpy(INDICES), torch.from_numpy(OFFSETS))
    f = io.BytesIO()
    with torch.no_grad():
        want = bag(*args).numpy()
        torch.onnx.export(
            bag, args, f, opset_version=17, dynamo=dynamo, input_names=["indices", "offsets"]
        )
    return onnx.load_from_string(f.getvalue()), want


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_matches_torch_and_onnxruntime(mode: str, dynamo: bool) -> None:
    if dynamo:
        pytest.importorskip("onnxscript")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, want = _embedding_bag(mode, dynamo)
    assert "Loop" in [n.op_type for n in model.graph.node]
    feed = {"indices": INDICES}
    _check(model, feed, {"offsets": OFFSETS})
    graph = from_onnx(model, constant_inputs={"offsets": OFFSETS})
    got = tensorforge.compile(graph).run(feed)[graph.outputs[0]]
    # torch's max of an empty bag is 0; the TorchScript exporter writes a plain ReduceMax, whose
    # empty max is -inf in onnxruntime (and here): that row is the exporter's, not compared
    rows = [0, 2, 3] if mode == "max" and not dynamo else [0, 1, 2, 3]
    np.testing.assert_allclose(got[rows], want[rows], rtol=1e-5, atol=1e-6)
