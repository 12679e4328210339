"""Models whose later part has shapes known only at run time (frontend/onnx_tail.py,
runtime/tail.py): the static part is compiled, the data-dependent tail (NonZero, Compress,
NonMaxSuppression, TopK or Reshape of computed values, and everything reading their results)
runs after it each run. Oracle: onnxruntime, which runs the same files."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import (
    OnnxImportError,
    UnsupportedOpError,
    from_onnx,
    from_onnx_split,
)
from tensorforge.runtime import container
from tensorforge.runtime.module import MAGIC, Module, ModuleFormatError
from tensorforge.runtime.tail import Tail, TailError

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(7)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) / 3


def _value(name: str, elem: int, shape: list | None = None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def _model(nodes: list, inputs: list, outputs: list, inits: dict | None = None) -> bytes:
    inits = {"w": W, "t": np.float32(0.4), **(inits or {})}
    graph = oh.make_graph(
        nodes,
        "g",
        inputs,
        outputs,
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],  # fmt: skip
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    return model.SerializeToString()


def _selection(channels: int = 3) -> bytes:
    """A conv, then the positions of its outputs above a threshold and their values (a
    detector's score threshold), beside a static output, with a static output last."""
    w = RNG.standard_normal((channels, channels, 3, 3)).astype(np.float32) / channels
    return _model(
        [
            oh.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
            oh.make_node("Relu", ["y"], ["r"]),
            oh.make_node("Greater", ["r", "t"], ["m"]),
            oh.make_node("NonZero", ["m"], ["nz"], name="keep"),
            oh.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
            oh.make_node("GatherND", ["r", "nzt"], ["g"]),
            oh.make_node("ReduceSum", ["r"], ["s"], keepdims=0),
            oh.make_node("Mul", ["g", "s"], ["gs"]),
            oh.make_node("ReduceMax", ["r"], ["top"], keepdims=0),
        ],
        [_value("x", F, [1, channels, 8, 8])],
        [_value("gs", F, None), _value("s", F, []), _value("nz", I64, None), _value("top", F, [])],
        {"w": w} if channels != 3 else None,
    )


def _check(model: bytes, inputs: dict, target: str = "llvm") -> Module:
    module = tensorforge.compile(model, target)
    got = module.run(inputs)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, inputs)
    names = [o.name for o in onnx.load_from_string(model).graph.output]
    assert list(got) == names
    for name, expected in zip(names, want, strict=True):
        assert got[name].shape == expected.shape, name
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)
    return module


@pytest.mark.parametrize(("seed", "target"), [(0, "llvm"), (1, "llvm"), (0, "opencl")])
def test_positions_above_a_threshold_match_onnxruntime(seed: int, target: str) -> None:
    x = np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)
    module = _check(_selection(), {"x": x}, target)
    assert module.tail is not None
    assert module.model_outputs == ("gs", "s", "nz", "top")
    # the compiled part computes the static outputs and what the tail reads, no more
    assert set(module.outputs) == {"s", "top", "r", "m"}
    assert set(module.tail.inputs) == {"m", "r", "s"}


def test_the_counts_change_from_run_to_run() -> None:
    """One module, inputs that keep 0, some and all positions: each run's shape is its own."""
    module = tensorforge.compile(_selection())
    session = ort.InferenceSession(_selection(), providers=["CPUExecutionProvider"])
    for scale in (-1.0, 0.05, 1.0, 50.0):
        x = np.abs(np.random.default_rng(3).standard_normal((1, 3, 8, 8))).astype(np.float32)
        x *= scale
        got = module.run({"x": x})
        want = session.run(None, {"x": x})
        assert got["nz"].shape == want[2].shape
        np.testing.assert_array_equal(got["nz"], want[2])
        np.testing.assert_allclose(got["gs"], want[0], rtol=1e-5, atol=1e-5)


def test_save_and_load_keep_the_tail() -> None:
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    module = tensorforge.compile(_selection())
    data = module.to_bytes()
    assert container.format_version(data, MAGIC) == 4
    loaded = Module.from_bytes(data)
    assert loaded.tail == module.tail
    want, got = module.run({"x": x}), loaded.run({"x": x})
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_module_without_a_tail_keeps_format_3() -> None:
    """Readers before the tail read every file that has none."""
    model = _model(
        [oh.make_node("Relu", ["x"], ["y"])], [_value("x", F, [4])], [_value("y", F, [4])]
    )
    module = tensorforge.compile(model)
    assert module.tail is None and module.model_outputs == ("y",)
    assert container.format_version(module.to_bytes(), MAGIC) == 3


def test_non_max_suppression_of_computed_boxes() -> None:
    """Boxes and scores computed by the model, then the boxes NMS keeps gathered: a
    detector's last step."""
    boxes = np.sort(RNG.uniform(0, 10, (1, 12, 4)).astype(np.float32).reshape(1, 12, 2, 2), axis=2)
    model = _model(
        [
            oh.make_node("Mul", ["b", "scale"], ["boxes"]),
            oh.make_node("Sigmoid", ["logits"], ["scores"]),
            oh.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou", "thr"], ["sel"]),
            oh.make_node("Gather", ["sel", "two"], ["idx"], axis=1),
            oh.make_node("Squeeze", ["boxes", "zero"], ["b2"]),
            oh.make_node("Gather", ["b2", "idx"], ["kept"], axis=0),
        ],
        [_value("b", F, [1, 12, 4]), _value("logits", F, [1, 2, 12])],
        [_value("kept", F, None), _value("sel", I64, None)],
        {"scale": np.float32(1.5), "k": np.int64(5), "iou": np.float32(0.3),
         "thr": np.float32(0.2), "two": np.int64(2), "zero": np.array([0], np.int64)},
    )  # fmt: skip
    logits = RNG.standard_normal((1, 2, 12)).astype(np.float32)
    module = _check(model, {"b": boxes.reshape(1, 12, 4), "logits": logits})
    assert module.tail is not None


def test_a_top_k_whose_k_is_computed() -> None:
    """K = the number of scores above a threshold (torchvision's `min(k, n)` pattern)."""
    model = _model(
        [
            oh.make_node("Greater", ["x", "t"], ["m"]),
            oh.make_node("Cast", ["m"], ["mi"], to=I64),
            oh.make_node("ReduceSum", ["mi", "axes"], ["k"], keepdims=1),
            oh.make_node("TopK", ["x", "k"], ["v", "i"], axis=0),
        ],
        [_value("x", F, [10])],
        [_value("v", F, None), _value("i", I64, None)],
        {"axes": np.array([0], np.int64)},
    )
    x = np.linspace(-1, 1, 10, dtype=np.float32)[::-1].copy()
    module = _check(model, {"x": x})
    assert module.tail is not None and module.tail.inputs == ("x", "k")
    assert "x" not in module.outputs  # the tail reads the module's input itself


def test_a_reshape_to_a_computed_shape_and_a_model_input_read_by_the_tail() -> None:
    """Reshape's shape computed from values (a run-time fact); the tail reads the model's
    input itself, which the compiled part hands over without a copy."""
    model = _model(
        [
            oh.make_node("ReduceMax", ["n"], ["c"], keepdims=1),
            oh.make_node("Concat", ["c", "minus1"], ["shape"], axis=0),
            oh.make_node("Reshape", ["x", "shape"], ["y"]),
            oh.make_node("Neg", ["x"], ["z"]),
        ],
        [_value("x", F, [12]), _value("n", I64, [3])],
        [_value("y", F, None), _value("z", F, [12])],
        {"minus1": np.array([-1], np.int64)},
    )
    x = np.arange(12, dtype=np.float32)
    for n in ([1, 3, 2], [4, 0, 0], [6, 6, 1]):
        _check(model, {"x": x, "n": np.array(n, np.int64)})


def test_an_if_in_the_tail_reading_its_values() -> None:
    """An If whose branch reads a value of the tail goes with the tail, whole."""
    then = oh.make_graph([oh.make_node("Neg", ["g"], ["o"])], "then", [], [_value("o", F, None)])
    other = oh.make_graph([oh.make_node("Abs", ["g"], ["o2"])], "else", [], [_value("o2", F, None)])
    model = _model(
        [
            oh.make_node("Greater", ["x", "t"], ["m"]),
            oh.make_node("Compress", ["x", "m"], ["g"]),
            oh.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            oh.make_node("Greater", ["s", "zero"], ["c"]),
            oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        ],
        [_value("x", F, [9])],
        [_value("y", F, None)],
        {"zero": np.float32(0)},
    )
    for sign in (1, -1):
        _check(model, {"x": sign * np.linspace(-0.5, 1.5, 9, dtype=np.float32)})


def test_a_data_dependent_op_inside_an_if_branch_takes_the_if_into_the_tail() -> None:
    """The If's branches were half converted when the NonZero failed: that half is dropped
    and the If runs in the tail, whole."""
    then = oh.make_graph(
        [oh.make_node("Neg", ["x"], ["n"]), oh.make_node("NonZero", ["n"], ["o"], name="inner")],
        "then", [], [_value("o", I64, None)],
    )  # fmt: skip
    other = oh.make_graph(
        [oh.make_node("NonZero", ["x"], ["o2"], name="inner2")], "else", [],
        [_value("o2", I64, None)],
    )  # fmt: skip
    model = _model(
        [
            oh.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            oh.make_node("Greater", ["s", "t"], ["c"]),
            oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
            oh.make_node("Abs", ["x"], ["z"]),
        ],
        [_value("x", F, [4])],
        [_value("y", I64, None), _value("z", F, [4])],
    )
    for x in ([1, 0, 2, 0], [-1, 0, 0, 0], [0, 0, 0, 0]):
        module = _check(model, {"x": np.array(x, np.float32)})
    assert module.tail is not None
    assert [n.op_type for n in onnx.load_from_string(module.tail.model).graph.node] == ["If"]
    assert len(module.kernels) <= 3  # nothing of the branches was left in the compiled part


def test_from_onnx_still_refuses_and_the_split_names_the_parts() -> None:
    """`from_onnx` gives static graphs only; `from_onnx_split` gives the graph and tail."""
    with pytest.raises(UnsupportedOpError, match=r"NonZero \(node 'keep'"):
        from_onnx(_selection())
    graph, tail = from_onnx_split(_selection())
    assert tail is not None
    assert graph.model_outputs[:2] == ("s", "top")
    assert tail.outputs == ("gs", "s", "nz", "top")
    nodes = [n.op_type for n in onnx.load_from_string(tail.model).graph.node]
    assert nodes == ["NonZero", "Transpose", "GatherND", "Mul"]


def test_a_bad_index_in_the_tail_is_the_error_onnxruntime_gives() -> None:
    """A Gather in the tail at an index its values put out of range: refused, naming the
    node, as onnxruntime refuses the run."""
    model = _model(
        [
            oh.make_node("NonZero", ["x"], ["nz"]),
            oh.make_node("ReduceMax", ["nz"], ["mx"], keepdims=0),
            oh.make_node("Add", ["mx", "off"], ["at"]),
            oh.make_node("Gather", ["x", "at"], ["y"], name="pick"),
        ],
        [_value("x", F, [5])],
        [_value("y", F, None)],
        {"off": np.int64(3)},
    )
    module = tensorforge.compile(model)
    np.testing.assert_array_equal(module.run({"x": np.array([1, 0, 0, 0, 0], np.float32)})["y"],
                                  np.float32(0))  # fmt: skip
    with pytest.raises((OnnxImportError, IndexError), match="pick"):
        module.run({"x": np.array([0, 0, 0, 0, 1], np.float32)})
    with pytest.raises(Exception):  # noqa: B017 (onnxruntime's own error type)
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
            None, {"x": np.array([0, 0, 0, 0, 1], np.float32)}
        )


def test_a_tail_that_reads_a_value_the_module_lacks_is_refused() -> None:
    module = tensorforge.compile(_selection())
    assert module.tail is not None
    bad = Tail(module.tail.model, ("nowhere",), module.tail.outputs)
    with pytest.raises(TailError, match="nowhere"):
        module.set_tail(bad)
    data = module.to_bytes()
    header, sections = container.unpack(data, MAGIC, 4, "m", "module", ModuleFormatError, copy=True)
    header["tail"]["inputs"] = ["nowhere"]
    forged = container.pack(MAGIC, 4, {k: v for k, v in header.items()
                                       if k not in ("sections", "digest", "align")},
                            list(sections.items()), align=64)  # fmt: skip
    with pytest.raises(ModuleFormatError, match="nowhere"):
        Module.from_bytes(forged)


@pytest.mark.parametrize("bad", [b"", "text"])
def test_a_tail_must_be_model_bytes(bad: object) -> None:
    with pytest.raises(TailError, match="bytes of an ONNX model"):
        Tail(bad, (), ("y",))  # type: ignore[arg-type]


def test_a_tail_on_the_accelerator_target() -> None:
    """The conv runs on the simulated accelerator in int8, the selection after it on the CPU.
    The oracle: numpy's selection over the compiled part's own values."""
    x = np.random.default_rng(5).standard_normal((1, 16, 8, 8)).astype(np.float32)
    model = _selection(16)
    module = tensorforge.compile(model, "vta -config=tiny -device=sim", calibration={"x": x})
    assert module.tail is not None
    assert any(k.kind == "vta" for k in module.kernels)
    got = module.run({"x": x})
    assert list(got) == ["gs", "s", "nz", "top"]
    tail, module.tail = module.tail, None
    part = module.run({"x": x})  # the compiled part alone
    module.tail = tail
    r, m = part["r"], part["m"]
    np.testing.assert_array_equal(got["nz"], np.array(np.nonzero(m)))
    np.testing.assert_allclose(got["gs"], r[m] * part["s"], rtol=1e-6)
    np.testing.assert_array_equal(got["s"], part["s"])
    assert 0 < got["nz"].shape[1] < m.size  # the threshold keeps some, not all


def test_inspect_names_the_tail(tmp_path, capsys) -> None:  # noqa: ANN001
    import argparse

    from tensorforge import cli_inspect

    path = tmp_path / "m.tfm"
    tensorforge.compile(_selection()).save(path)
    parser = argparse.ArgumentParser()
    cli_inspect.add_inspect_command(parser.add_subparsers(dest="command"))
    assert cli_inspect.run_inspect(parser.parse_args(["inspect", str(path)])) == 0
    out = capsys.readouterr().out
    assert "(format 4)" in out
    ops = "(NonZero 1, Transpose 1, GatherND 1, Mul 1)"
    assert f"tail       4 ONNX nodes run at run time {ops}" in out
    assert "gives    gs, nz (shapes known only at run time)" in out


def test_the_command_line_compiles_and_runs_a_model_with_a_tail(tmp_path, capsys) -> None:  # noqa: ANN001
    """`tensorforge compile` then `tensorforge run` on the .tfm: the tail's outputs are
    printed with the rest (their shapes differ from run to run)."""
    from tensorforge.cli import main

    model, tfm, x = tmp_path / "m.onnx", tmp_path / "m.tfm", tmp_path / "x.npy"
    model.write_bytes(_selection())
    image = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(x, image)
    assert main(["compile", str(model), "-o", str(tfm), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["run", str(tfm), "--input", str(x)]) == 0
    out = capsys.readouterr().out
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"x": image}
    )
    assert f"nz: int64{list(want[2].shape)}" in out
    assert f"gs: float32{list(want[0].shape)}" in out


def test_an_output_from_nowhere_is_named() -> None:
    module = tensorforge.compile(_selection())
    assert module.tail is not None
    module.tail = Tail(module.tail.model, module.tail.inputs, (*module.tail.outputs, "ghost"))
    with pytest.raises(TailError, match=r"\['ghost'\] come from neither"):
        module.run({"x": np.zeros((1, 3, 8, 8), np.float32)})


#: ops of the ONNX node suite whose cases pass a shape-deciding input (the suite's own harness
#: binds those as constants, tests/compiler/frontend/test_onnx_node_suite.py)
DECIDING_OPS = ("NonZero Compress Unique NonMaxSuppression Reshape Expand Range ConstantOfShape "
                "Tile TopK OneHot Slice").split()  # fmt: skip


@pytest.mark.parametrize("op", DECIDING_OPS)
def test_node_suite_cases_with_shapes_given_at_run_time(op: str) -> None:
    """Every case of the op whose shape-deciding inputs the suite binds as constants, here
    given at run time instead: the compiled module's tail runs them, against the suite's
    outputs."""
    import sys
    import warnings
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import test_onnx_node_suite as suite

    checked = 0
    for case in suite._cases().get(op, []):
        ((inputs, expected),) = case.data_sets
        inputs, expected = [suite._array(v) for v in inputs], [suite._array(v) for v in expected]
        model = suite._lift_opset(case.model)
        if model is None or not suite._shape_inputs(model, list(inputs)):
            continue
        if case.name in suite.ONNXRUNTIME_OVER_REFERENCE:
            expected = suite._onnxruntime_outputs(model, inputs)
        names = [v.name for v in model.graph.input]
        feed = dict(zip(names, inputs, strict=False))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (declared output shapes the cases leave out)
            module = tensorforge.compile(model.SerializeToString())
        assert module.tail is not None, case.name
        got = module.run(feed)
        for name, want in zip(module.model_outputs, expected, strict=True):
            assert got[name].dtype == want.dtype, (case.name, name)
            np.testing.assert_allclose(got[name], want, rtol=max(case.rtol, 1e-5),
                                       atol=max(case.atol, 1e-6), err_msg=case.name)  # fmt: skip
        checked += 1
    assert checked, f"no case of {op} has a shape-deciding input"


def test_the_profile_has_a_row_for_the_tail() -> None:
    module = tensorforge.compile(_selection())
    profile = module.profile({"x": np.ones((1, 3, 8, 8), np.float32)}, repeat=3)
    last = profile.rows[-1]
    assert last.kernel == "tail" and last.label.startswith("data-dependent tail (3 values in")
    assert last.median_ms > 0 and abs(sum(r.share for r in profile.rows) - 1) < 1e-9
    assert len(profile.rows) == len(module.calls) + 1


def test_a_top_k_past_the_cpu_lowering_runs_in_the_tail() -> None:
    """K=100 of 20,000 scores (Mask R-CNN's region proposals take 1000 of 19,200): more than
    the CPU's selection steps and ranking sort take; numpy's sort runs it in the tail."""
    model = _model(
        [
            oh.make_node("Sigmoid", ["x"], ["s"]),
            oh.make_node("TopK", ["s", "k"], ["v", "i"], axis=1),
            oh.make_node("Neg", ["v"], ["nv"]),
        ],
        [_value("x", F, [1, 20_000])],
        [_value("nv", F, [1, 100]), _value("i", I64, [1, 100])],
        {"k": np.array([100], np.int64)},
    )
    x = np.random.default_rng(4).standard_normal((1, 20_000)).astype(np.float32)
    module = _check(model, {"x": x})
    assert module.tail is not None and module.tail.inputs == ("s",)


def test_a_run_time_loop_whose_body_has_data_dependent_shapes_runs_in_the_tail() -> None:
    """`for i in range(n): acc += count(x > i)` with NonZero inside, `n` computed: the body
    cannot be a module of its own, so the loop runs in the tail, unrolled as it is evaluated."""
    body = oh.make_graph(
        [
            oh.make_node("Cast", ["i"], ["fi"], to=F),
            oh.make_node("Greater", ["x", "fi"], ["m"]),
            oh.make_node("NonZero", ["m"], ["nz"]),
            oh.make_node("Shape", ["nz"], ["shape"]),
            oh.make_node("Cast", ["shape"], ["count"], to=F),
            oh.make_node("ReduceSum", ["count"], ["k"], keepdims=0),
            oh.make_node("Add", ["acc", "k"], ["acc_out"]),
            oh.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [_value("i", I64, []), _value("c", B, []), _value("acc", F, [])],
        [_value("c_out", B, []), _value("acc_out", F, [])],
    )
    model = _model(
        [
            oh.make_node("ReduceMax", ["x"], ["top"], keepdims=0),
            oh.make_node("Cast", ["top"], ["n"], to=I64),
            oh.make_node("Loop", ["n", "", "zero"], ["total"], body=body, name="count_loop"),
        ],
        [_value("x", F, [6])],
        [_value("total", F, [])],
        {"zero": np.float32(0)},
    )
    with pytest.raises(UnsupportedOpError, match="NonZero's output shape depends"):
        from_onnx(model)  # (a graph: refused by name, as before)
    for x in ([0.5, 3, 2, 7, 1, 0], [4, 4, 4, 4, 4, 4], [0] * 6):
        module = _check(model, {"x": np.array(x, np.float32)})
    assert module.tail is not None
