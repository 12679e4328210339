"""ONNX Loops that run at run time (frontend/onnx_runtime_loop.py, graph/ops/loop.py,
runtime/loop.py): a trip count or condition computed at run time, or a loop past the unroll
cap, compiled as one kernel of kind "loop" whose body is a module of its own. Oracles:
onnxruntime (which runs the same files) and numpy."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, UnsupportedOpError, from_onnx
from tensorforge.compiler.frontend.onnx_loop import UNROLL_LIMIT
from tensorforge.compiler.graph import run_graph
from tensorforge.runtime import loop as runtime_loop
from tensorforge.runtime.module import Module

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
X = np.arange(6, dtype=np.float32).reshape(2, 3) / 5 - 0.4


def _value(name: str, elem: int, shape: list | None = None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def _body(extra: list | None = None, cond: str = "data") -> onnx.GraphProto:
    """(i, c, y) -> (sum(y') < limit, y' = y * w + i): `w` a weight, `limit` an outer value."""
    nodes = [
        oh.make_node("Mul", ["y_in", "w"], ["t"]),
        oh.make_node("Cast", ["i"], ["fi"], to=F),
        oh.make_node("Add", ["t", "fi"], ["y_out"]),
        *(extra or []),
    ]
    if cond == "data":
        nodes += [
            oh.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
            oh.make_node("Less", ["s", "limit"], ["c_out"]),
        ]
    else:
        nodes.append(oh.make_node("Identity", ["c"], ["c_out"]))
    return oh.make_graph(
        nodes,
        "body",
        [_value("i", I64, []), _value("c", B, []), _value("y_in", F, [2, 3])],
        [_value("c_out", B, []), _value("y_out", F, [2, 3])],
    )


def _model(
    loop_inputs: list[str], body: onnx.GraphProto, inputs: list, inits: dict | None = None
) -> onnx.ModelProto:
    inits = {"w": np.full((2, 3), 1.25, np.float32), **(inits or {})}
    graph = oh.make_graph(
        [oh.make_node("Loop", loop_inputs, ["y"], body=body, name="loop")],
        "g",
        inputs,
        [_value("y", F, [2, 3])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


X_INPUT = _value("x", F, [2, 3])
RUNTIME_INPUTS = [
    _value("M", I64, []),
    _value("c0", B, []),
    _value("x", F, [2, 3]),
    _value("limit", F, []),
]


def _feeds(m: int, c0: bool, limit: float) -> dict:
    return {
        "M": np.array(m, np.int64),
        "c0": np.array(c0),
        "x": X,
        "limit": np.array(limit, np.float32),
    }


def _check(model: onnx.ModelProto, feeds_list: list[dict]) -> Module:
    """The compiled module and the reference executor match onnxruntime on every feed."""
    session = ort.InferenceSession(model.SerializeToString())
    graph = from_onnx(model)
    module = tensorforge.compile(model)
    assert [k.kind for k in module.kernels].count("loop") == 1
    for feeds in feeds_list:
        want = session.run(None, feeds)[0]
        np.testing.assert_allclose(module.run(feeds)["y"], want, rtol=1e-6)
        np.testing.assert_allclose(run_graph(graph, feeds)["y"], want, rtol=1e-6)
    return module


def test_trip_count_and_condition_given_at_run_time() -> None:
    model = _model(["M", "c0", "x"], _body(), RUNTIME_INPUTS)
    feeds = [
        _feeds(5, True, 1e9),  # the trip count ends it
        _feeds(0, True, 1e9),  # zero iterations: the first values
        _feeds(40, True, 60.0),  # the body's condition ends it
        _feeds(3, False, 1e9),  # a false first condition
    ]
    _check(model, feeds)


def test_while_loop_without_a_trip_count() -> None:
    model = _model(["", "c0", "x"], _body(), RUNTIME_INPUTS[1:])
    feeds = [{k: v for k, v in _feeds(0, True, limit).items() if k != "M"} for limit in (3, 200)]
    _check(model, feeds)


def test_trip_count_only_and_a_body_reading_outer_values_in_a_nested_if() -> None:
    """No condition input; the body reads a run-time outer value (`limit`) and a weight inside
    an If of its own."""
    then = oh.make_graph(
        [oh.make_node("Mul", ["y_out", "w"], ["z"])], "then", [], [_value("z", F, [2, 3])]
    )
    other = oh.make_graph(
        [oh.make_node("Sub", ["y_out", "limit"], ["z2"])], "else", [], [_value("z2", F, [2, 3])]
    )
    extra = [
        oh.make_node("ReduceMax", ["y_out"], ["top"], keepdims=0),
        oh.make_node("Less", ["top", "limit"], ["small"]),
        oh.make_node("If", ["small"], ["picked"], then_branch=then, else_branch=other),
    ]
    body = _body(extra, cond="pass")
    body.output[1].name = "picked"
    inputs = [RUNTIME_INPUTS[0], RUNTIME_INPUTS[2], RUNTIME_INPUTS[3]]
    model = _model(["M", "", "x"], body, inputs)
    feeds = [{k: v for k, v in _feeds(m, True, 2.0).items() if k != "c0"} for m in (1, 4, 9)]
    _check(model, feeds)


def test_a_constant_trip_count_past_the_unroll_cap_runs_as_a_loop() -> None:
    trips = UNROLL_LIMIT  # a body of 3 nodes: three times the cap unrolled
    model = _model(["many", "", "x"], _body(cond="pass"), [RUNTIME_INPUTS[2]],
                   {"many": np.array(trips, np.int64)})  # fmt: skip
    w = np.float32(1.25)
    module = tensorforge.compile(model)
    got = module.run({"x": X})["y"]
    assert np.isinf(got).all()  # 1.25**2048 overflows float32, as numpy's loop does:
    y = X.copy()
    with np.errstate(over="ignore"):
        for i in range(trips):
            y = (y * w + np.float32(i)).astype(np.float32)
    np.testing.assert_array_equal(got, y)


def test_a_loop_saved_and_loaded_runs_the_same() -> None:
    model = _model(["M", "c0", "x"], _body(), RUNTIME_INPUTS)
    module = tensorforge.compile(model)
    feeds = _feeds(6, True, 1e9)
    again = Module.from_bytes(module.to_bytes())
    np.testing.assert_array_equal(again.run(feeds)["y"], module.run(feeds)["y"])


def test_a_loop_inside_a_run_time_loop() -> None:
    inner_body = _body(cond="pass")
    outer = oh.make_graph(
        [
            oh.make_node("Loop", ["k", "", "y_in"], ["y_out"], body=inner_body),
            oh.make_node("Identity", ["c"], ["c_out"]),
        ],
        "outer",
        [_value("j", I64, []), _value("c", B, []), _value("y_in", F, [2, 3])],
        [_value("c_out", B, []), _value("y_out", F, [2, 3])],
    )
    inputs = [RUNTIME_INPUTS[0], _value("k", I64, []), RUNTIME_INPUTS[2]]
    model = _model(["M", "", "x"], outer, inputs)
    feeds = [{"M": np.array(m, np.int64), "k": np.array(k, np.int64), "x": X}
             for m, k in ((2, 3), (3, 0), (1, 5))]  # fmt: skip
    _check(model, feeds)


def test_loops_nested_past_the_limit_are_refused_not_a_recursion_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    import argparse

    from tensorforge import cli_inspect
    from tensorforge.runtime.module import ModuleFormatError

    outer = oh.make_graph(
        [
            oh.make_node("Loop", ["k", "", "y_in"], ["y_out"], body=_body(cond="pass")),
            oh.make_node("Identity", ["c"], ["c_out"]),
        ],
        "outer",
        [_value("j", I64, []), _value("c", B, []), _value("y_in", F, [2, 3])],
        [_value("c_out", B, []), _value("y_out", F, [2, 3])],
    )
    model = _model(["M", "", "x"], outer, [RUNTIME_INPUTS[0], _value("k", I64, []), X_INPUT])
    path = tmp_path / "nested.tfm"
    tensorforge.compile(model).save(path)
    monkeypatch.setattr(runtime_loop, "MAX_NESTING", 1)  # (32 by default)
    feeds = {"M": np.array(2, np.int64), "k": np.array(2, np.int64), "x": X}
    with pytest.raises(ModuleFormatError, match="nests loops more than 1 deep"):
        Module.load(path).run(feeds)
    parser = argparse.ArgumentParser()
    cli_inspect.add_inspect_command(parser.add_subparsers(dest="command"))
    assert cli_inspect.run_inspect(parser.parse_args(["inspect", str(path)])) != 0


def test_a_runaway_while_loop_stops_with_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_loop, "WHILE_LIMIT", 50)
    model = _model(["", "c0", "x"], _body(cond="pass"), RUNTIME_INPUTS[1:3])
    feeds = {"c0": np.array(True), "x": X}
    with pytest.raises(runtime_loop.LoopLimitError, match="'loop' ran 50 iterations"):
        tensorforge.compile(model).run(feeds)
    with pytest.raises(runtime_loop.LoopLimitError, match="'loop' ran 50 iterations"):
        run_graph(from_onnx(model), feeds)
    feeds["c0"] = np.array(False)  # zero iterations: fine
    np.testing.assert_array_equal(tensorforge.compile(model).run(feeds)["y"], X)


def test_a_carried_value_that_changes_shape_is_refused_by_name() -> None:
    body = _body(cond="pass")
    body.node.append(oh.make_node("Concat", ["y_out", "y_out"], ["wide"], axis=0))
    body.output[1].name = "wide"
    model = _model(["M", "", "x"], body, [RUNTIME_INPUTS[0], RUNTIME_INPUTS[2]])
    with pytest.raises(OnnxImportError, match=r"'loop': loop-carried value 0 .*float32\[2, 3\].*"
                       r"float32\[4, 3\]"):  # fmt: skip
        from_onnx(model)


def _scan_model(trips: int, cond: str) -> onnx.ModelProto:
    """y, rows = Loop(trips, cond)(x): rows[i] = y_i + i (cond "" none, "const" torch's
    scripted for loop: a constant true in and a Constant true out)."""
    body = _body(cond="pass")
    body.node.append(oh.make_node("Add", ["y_in", "fi"], ["row"]))
    body.output.append(_value("row", F, [2, 3]))
    if cond == "const":
        del body.node[3]  # the Identity: a Constant true instead
        body.node.append(
            oh.make_node(
                "Constant", [], ["c_out"], value=numpy_helper.from_array(np.array(True), "t")
            )
        )
    graph = oh.make_graph(
        [oh.make_node("Loop", ["M", cond and "yes", "x"], ["y", "rows"], body=body, name="loop")],
        "g",
        [RUNTIME_INPUTS[2]],
        [_value("y", F, [2, 3]), _value("rows", F, [trips, 2, 3])],
        [numpy_helper.from_array(np.full((2, 3), 0.999, np.float32), "w"),
         numpy_helper.from_array(np.array(trips, np.int64), "M"),
         numpy_helper.from_array(np.array(True), "yes")],
    )  # fmt: skip
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("cond", ["", "const"])
def test_scan_outputs_of_a_loop_past_the_unroll_cap(cond: str) -> None:
    model = _scan_model(UNROLL_LIMIT, cond)  # 4 body nodes: four times the cap unrolled
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})
    module = tensorforge.compile(model)
    assert [k.kind for k in module.kernels] == ["loop"]
    got = module.run({"x": X})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5)
    np.testing.assert_allclose(got["rows"], want[1], rtol=1e-5)
    assert got["rows"].shape == (UNROLL_LIMIT, 2, 3)
    small = _scan_model(5, cond)  # (unrolled: the same answers)
    ref = run_graph(from_onnx(small), {"x": X})
    np.testing.assert_allclose(ref["rows"], want[1][:5], rtol=1e-6)


def test_the_reference_executor_runs_scan_outputs_of_a_run_time_loop() -> None:
    model = _scan_model(UNROLL_LIMIT + 1, "")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})
    graph = from_onnx(model)
    assert [n.op for n in graph.nodes] == ["Loop"]
    got = run_graph(graph, {"x": X})
    np.testing.assert_allclose(got["rows"], want[1], rtol=1e-5)


def test_scan_outputs_of_a_run_time_length_are_refused_by_name() -> None:
    body = _body(cond="pass")
    body.output.append(_value("t", F, [2, 3]))
    graph = oh.make_graph(
        [oh.make_node("Loop", ["M", "", "x"], ["y", "rows"], body=body, name="loop")],
        "g",
        [RUNTIME_INPUTS[0], RUNTIME_INPUTS[2]],
        [_value("y", F, [2, 3]), _value("rows", F, None)],
        [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(UnsupportedOpError, match="scan outputs and a trip count computed at run"):
        from_onnx(model)


def test_a_body_that_reads_neither_the_iteration_nor_the_condition() -> None:
    body = oh.make_graph(
        [
            oh.make_node("Mul", ["y_in", "w"], ["y_out"]),
            oh.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
            oh.make_node("Less", ["s", "limit"], ["c_out"]),
        ],
        "body",
        [_value("i", I64, []), _value("c", B, []), _value("y_in", F, [2, 3])],
        [_value("c_out", B, []), _value("y_out", F, [2, 3])],
    )
    model = _model(["M", "c0", "x"], body, RUNTIME_INPUTS)
    _check(model, [_feeds(9, True, 1e9), _feeds(50, True, 4.0)])


def test_inspect_checks_a_loop_kernel_and_its_body(tmp_path, capsys) -> None:
    import argparse

    from tensorforge import cli_inspect

    path = tmp_path / "loop.tfm"
    tensorforge.compile(_model(["M", "c0", "x"], _body(), RUNTIME_INPUTS)).save(path)
    parser = argparse.ArgumentParser()
    cli_inspect.add_inspect_command(parser.add_subparsers(dest="command"))
    assert cli_inspect.run_inspect(parser.parse_args(["inspect", str(path), "--kernels"])) == 0
    out = capsys.readouterr().out
    assert "kernels    1 (loop 1)" in out
    assert "[loop, " in out and "its body a module of 3 kernels (llvm)" in out


def test_a_loop_kernel_whose_meta_does_not_fit_is_refused() -> None:
    module = tensorforge.compile(_model(["M", "c0", "x"], _body(), RUNTIME_INPUTS))
    (kernel,) = module.kernels
    bad = Module(
        target=module.target,
        inputs=module.inputs,
        outputs=module.outputs,
        tensors=module.tensors,
        kernels=[type(kernel)(**{**kernel.__dict__, "meta": {**kernel.meta, "carried": 2}})],
        calls=module.calls,
        slots=module.slots,
        arena_bytes=module.arena_bytes,
        constants=module.constants,
    )
    with pytest.raises(ValueError, match="loop kernel 'tf_k0_loop': its meta .* does not fit"):
        bad.run(_feeds(2, True, 1e9))


def test_a_while_loop_with_scan_outputs_past_the_cap_names_the_cap() -> None:
    """Its scan outputs' length is known only when it ends (here: never)."""
    model = _scan_model(4, "")
    model.graph.node[0].input[:2] = ["", "yes"]  # no trip count, a condition that stays true
    with pytest.raises(OnnxImportError, match=f"trip count none.*cap of {UNROLL_LIMIT}"):
        from_onnx(model)


def test_an_index_outside_its_axis_inside_the_body_is_an_error_naming_the_node() -> None:
    """The body's own run-time index checks hold inside the loop (onnxruntime refuses too)."""
    body = oh.make_graph(
        [
            oh.make_node("Gather", ["table", "i"], ["row"], axis=0, name="pick"),
            oh.make_node("Add", ["y_in", "row"], ["y_out"]),
            oh.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [_value("i", I64, []), _value("c", B, []), _value("y_in", F, [3])],
        [_value("c_out", B, []), _value("y_out", F, [3])],
    )
    graph = oh.make_graph(
        [oh.make_node("Loop", ["M", "", "y0"], ["y"], body=body, name="loop")],
        "g",
        [_value("M", I64, []), _value("y0", F, [3])],
        [_value("y", F, [3])],
        [numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    module = tensorforge.compile(model)
    y0 = np.zeros(3, np.float32)
    session = ort.InferenceSession(model.SerializeToString())
    want = session.run(None, {"M": np.array(4, np.int64), "y0": y0})[0]
    np.testing.assert_array_equal(module.run({"M": np.array(4, np.int64), "y0": y0})["y"], want)
    with pytest.raises(Exception):  # noqa: B017  (onnxruntime's own error type)
        session.run(None, {"M": np.array(5, np.int64), "y0": y0})
    with pytest.raises(IndexError, match="Gather node 'pick'.*outside \\[-4, 3\\]"):
        module.run({"M": np.array(5, np.int64), "y0": y0})


def test_a_carried_value_nothing_reads_after_the_loop_still_has_its_memory() -> None:
    """torch.jit.script's `for ...: if ...: break` carries a flag the graph never reads after
    the loop: the loop kernel writes it all the same (it had no slot in the memory plan)."""
    body = _body(cond="pass")
    body.input.append(_value("k_in", I64, []))
    body.node.append(oh.make_node("Add", ["k_in", "i"], ["k_out"]))
    body.output.append(_value("k_out", I64, []))
    model = _model(["M", "", "x", "k0"], body, [RUNTIME_INPUTS[0], RUNTIME_INPUTS[2]],
                   {"k0": np.array(0, np.int64)})  # fmt: skip
    model.graph.node[0].output.append("k_unread")
    onnx.checker.check_model(model)
    _check(model, [{"M": np.array(m, np.int64), "x": X} for m in (0, 3)])


# torch.jit.script's loops, through its TorchScript exporter (torch: an optional extra). Oracle:
# torch itself.


def _scripted(kind: str):
    torch = pytest.importorskip(
        "torch", reason="torch is an optional extra: pip install '.[torch]'"
    )

    class Accumulate(torch.nn.Module):
        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            acc = torch.zeros_like(x)
            for i in range(n):
                acc = acc + x * i
            return acc

    class Break(torch.nn.Module):
        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            y = x
            for _ in range(n):
                y = y + 1
                if bool(y.max() > 10):
                    break
            return y

    class Halve(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x
            while bool(y.abs().sum() > 1.0):
                y = y * 0.5
            return y

    return torch, {"accumulate": Accumulate, "break": Break, "halve": Halve}[kind]()


@pytest.mark.parametrize(("kind", "n"), [("accumulate", 6), ("break", 30), ("halve", None)])
def test_scripted_torch_loops_match_torch(kind: str, n: int | None) -> None:
    import io
    import warnings

    torch, module = _scripted(kind)
    x = torch.from_numpy(X * 9)
    args = (x,) if n is None else (x, torch.tensor(n))
    names = ["x"] if n is None else ["x", "n"]
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(module)
        torch.onnx.export(scripted, args, f, input_names=names, opset_version=17, dynamo=False)
        want = scripted(x) if n is None else scripted(x, n)
    compiled = tensorforge.compile(f.getvalue())
    assert "loop" in [k.kind for k in compiled.kernels]
    got = compiled.run({k: a.numpy() for k, a in zip(names, args, strict=True)})
    np.testing.assert_allclose(next(iter(got.values())), want.numpy(), rtol=1e-6, atol=1e-6)


def test_a_run_time_loop_carrying_a_list_is_refused_by_name() -> None:
    """`outs.append(...)` in a loop of a run-time length: the list's length is a run-time fact
    (it was a KeyError)."""
    body = oh.make_graph(
        [
            oh.make_node("SequenceInsert", ["seq_in", "x"], ["seq_out"]),
            oh.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [_value("i", I64, []), _value("c", B, []),
         oh.make_tensor_sequence_value_info("seq_in", F, [2, 3])],
        [_value("c_out", B, []), oh.make_tensor_sequence_value_info("seq_out", F, [2, 3])],
    )  # fmt: skip
    graph = oh.make_graph(
        [
            oh.make_node("SequenceEmpty", [], ["empty"], dtype=F),
            oh.make_node("Loop", ["M", "", "empty"], ["seq"], body=body, name="loop"),
            oh.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, new_axis=1),
        ],
        "g",
        [RUNTIME_INPUTS[0], RUNTIME_INPUTS[2]],
        [_value("y", F, None)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(UnsupportedOpError, match="carrying a sequence or optional.*'loop'"):
        from_onnx(model)


def test_errors_of_the_body_name_the_loop() -> None:
    """An op of the body that only the body's own import refuses (a NonZero of run-time data)
    is listed as such, and any other error of the body's import names the loop (rebuilding the
    error raised a TypeError for some error types)."""
    body = _body(cond="pass")
    body.node.append(oh.make_node("NonZero", ["y_out"], ["nz"]))
    body.node.append(oh.make_node("ReduceSum", ["nz"], ["count"], keepdims=0))
    model = _model(["M", "", "x"], body, [RUNTIME_INPUTS[0], X_INPUT])
    with pytest.raises(UnsupportedOpError, match="NonZero's output shape depends") as info:
        from_onnx(model)
    assert [op for op, _, _ in info.value.items] == ["NonZero"]
    body = _body(cond="pass")
    body.node.append(oh.make_node("Reshape", ["y_out", "bad_shape"], ["flat"]))
    model = _model(["M", "", "x"], body, [RUNTIME_INPUTS[0], X_INPUT],
                   {"bad_shape": np.array([4], np.int64)})  # fmt: skip
    with pytest.raises(OnnxImportError, match="Loop node 'loop', in its body: .*Reshape"):
        from_onnx(model)


def test_a_loop_of_constants_folds_only_when_its_trip_count_is_small(monkeypatch) -> None:
    """A run-time Loop whose inputs are all constants folds at compile time with a trip count
    of at most LOOP_FOLD_TRIPS; a while loop of constants (no trip count) stays a loop, which
    folding could have run for its 2**24 iterations."""
    import importlib

    fold = importlib.import_module("tensorforge.compiler.graph.passes.fold_constants")
    monkeypatch.setattr(fold, "LOOP_FOLD_TRIPS", UNROLL_LIMIT + 1)
    inits = {"many": np.array(UNROLL_LIMIT, np.int64), "x": X}
    model = _model(["many", "", "x"], _body(cond="pass"), [], inits)
    graph = from_onnx(model)
    assert [n.op for n in graph.nodes] == ["Loop"]  # past the unroll cap: a loop at import
    module = tensorforge.compile(graph)
    assert module.kernels == [] and "y" in module.constants  # folded
    monkeypatch.setattr(fold, "LOOP_FOLD_TRIPS", UNROLL_LIMIT - 1)
    assert [k.kind for k in tensorforge.compile(from_onnx(model)).kernels] == ["loop"]
    with np.errstate(over="ignore"):
        y = X.copy()
        for i in range(UNROLL_LIMIT):
            y = (y * np.float32(1.25) + np.float32(i)).astype(np.float32)
    np.testing.assert_array_equal(module.constants["y"], y)
    endless = {"yes": np.array(True), "x": X}  # a condition passed through: it never ends
    model = _model(["", "yes", "x"], _body(cond="pass"), [], endless)
    assert [k.kind for k in tensorforge.compile(model).kernels] == ["loop"]  # (not run)
