"""Run-time index checks (`runtime.checks`, `frontend.onnx_index_checks`): an index outside its
axis, given at run time, raises `CheckFailed` naming the node wherever onnxruntime refuses the
run, and only there; in-range indices compute what onnxruntime computes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import run_graph
from tensorforge.runtime.checks import CheckFailed
from tensorforge.runtime.module import Module

F, I64 = TensorProto.FLOAT, TensorProto.INT64
DATA = np.arange(60, dtype=np.float32).reshape(3, 4, 5)

# op, attrs, indices shape, an in-range draw, a run with one index out of range, updates shape
CASES = {
    "Gather-axis1": ("Gather", {"axis": 1}, [2, 2], [[0, -4], [3, 1]], [[0, 4], [3, 1]], None),
    "Gather-negative": ("Gather", {"axis": 2}, [3], [-5, 4, 0], [-6, 4, 0], None),
    "GatherElements": (
        "GatherElements", {"axis": 0}, [2, 4, 5], np.zeros((2, 4, 5), int) - 3,
        np.full((2, 4, 5), 2) + np.eye(1, 40, 17, dtype=int).reshape(2, 4, 5), None,
    ),
    "GatherND": ("GatherND", {}, [2, 2], [[2, 3], [-3, -4]], [[2, 3], [1, 4]], None),
    "GatherND-batch": (
        "GatherND", {"batch_dims": 1}, [3, 1], [[3], [0], [-4]], [[3], [0], [-5]], None,
    ),
    "ScatterElements": (
        "ScatterElements", {"axis": 2}, [1, 1, 2], [[[4, -5]]], [[[4, 5]]], [1, 1, 2],
    ),
    "ScatterND": ("ScatterND", {}, [1, 3], [[2, 3, 4]], [[2, -5, 4]], [1]),
}  # fmt: skip


def _model(op: str, attrs: dict, index_shape: list[int], updates: list[int] | None) -> bytes:
    inputs = ["x", "i"] + (["u"] if updates is not None else [])
    values = [
        helper.make_tensor_value_info("x", F, list(DATA.shape)),
        helper.make_tensor_value_info("i", I64, index_shape),
    ]
    if updates is not None:
        values.append(helper.make_tensor_value_info("u", F, updates))
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], name="pick", **attrs)], "checks", values,
        [helper.make_tensor_value_info("y", F, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def _feeds(case: tuple, index: object) -> dict[str, np.ndarray]:
    _, _, _, _, _, updates = case
    feed = {"x": DATA, "i": np.array(index, np.int64)}
    if updates is not None:
        feed["u"] = -np.ones(updates, np.float32)
    return feed


@pytest.mark.parametrize("name", list(CASES))
def test_out_of_range_run_time_index_raises_where_onnxruntime_does(name: str) -> None:
    case = CASES[name]
    op, attrs, shape, good, bad, updates = case
    model = _model(op, attrs, shape, updates)
    session = ort.InferenceSession(model)
    module = tensorforge.compile(model)
    (want,) = session.run(None, _feeds(case, good))
    np.testing.assert_array_equal(module.run(_feeds(case, good))["y"], want)
    with pytest.raises(Exception, match="(?i)out of|bounds|invalid"):  # the oracle refuses too
        session.run(None, _feeds(case, bad))
    message = rf"{op} node 'pick': input 'i' holds an index outside"
    with pytest.raises(CheckFailed, match=message):
        module.run(_feeds(case, bad))
    with pytest.raises(CheckFailed, match=message):  # the reference executor checks alike
        run_graph(from_onnx(model), _feeds(case, bad))
    np.testing.assert_array_equal(module.run(_feeds(case, good))["y"], want)  # still usable


def test_a_saved_module_keeps_its_checks() -> None:
    op, attrs, shape, good, bad, updates = case = CASES["Gather-axis1"]
    module = tensorforge.compile(_model(op, attrs, shape, updates))
    loaded = Module.from_bytes(module.to_bytes(), "memory")
    assert loaded.checks == module.checks and len(module.checks) == 1
    assert loaded.outputs == ("y",)
    np.testing.assert_array_equal(loaded.run(_feeds(case, good))["y"], DATA[:, [[0, 0], [3, 1]]])
    with pytest.raises(CheckFailed, match=r"\[-4, 3\] along axis 1"):
        loaded.run(_feeds(case, bad))


def test_constant_indices_are_checked_at_import_and_leave_no_run_time_check() -> None:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="take", axis=1)], "c",
        [helper.make_tensor_value_info("x", F, list(DATA.shape))],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array([3, -4], np.int64), "i")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = tensorforge.compile(model.SerializeToString())
    assert module.checks == ()
    np.testing.assert_array_equal(module.run({"x": DATA})["y"], DATA[:, [3, 0]])


def _guarded_model() -> bytes:
    """`y = W[i] if i < 10 else 0`: an If on a run-time condition, which is compiled as both
    branches and a Where; the Gather's check holds only when its branch is taken."""
    w = np.arange(40, dtype=np.float32).reshape(10, 4)
    take = helper.make_node("Gather", ["W", "i"], ["t"], name="take")
    then = helper.make_graph([take], "then", [], [helper.make_tensor_value_info("t", F, [4])])
    zero = helper.make_node("Mul", ["row", "zero"], ["e"])
    other = helper.make_graph([zero], "else", [], [helper.make_tensor_value_info("e", F, [4])])
    graph = helper.make_graph(
        [helper.make_node("Less", ["i", "ten"], ["c"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="guard")],
        "guarded", [helper.make_tensor_value_info("i", I64, [])],
        [helper.make_tensor_value_info("y", F, [4])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(10), "ten"),
         numpy_helper.from_array(w[0], "row"), numpy_helper.from_array(np.float32(0), "zero")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("i", [3, -10, 12, 10**6, -11])
def test_a_gather_in_an_untaken_branch_is_not_checked(i: int) -> None:
    model = _guarded_model()
    module = tensorforge.compile(model)
    feed = {"i": np.array(i, np.int64)}
    session = ort.InferenceSession(model)
    if i < -10:  # the then branch is taken with an index out of range
        with pytest.raises(Exception, match="out of|bounds"):
            session.run(None, feed)
        with pytest.raises(CheckFailed, match="node 'guard/then/take'"):
            module.run(feed)
        return
    (want,) = session.run(None, feed)
    np.testing.assert_array_equal(module.run(feed)["y"], want)


def test_a_module_refuses_a_check_that_is_not_a_uint8_scalar() -> None:
    module = tensorforge.compile(_model(*CASES["Gather-axis1"][:3], None))
    with pytest.raises(ValueError, match="must be a uint8 scalar"):
        Module(
            target=module.target, inputs=module.inputs, outputs=("y",), checks=["i"],
            tensors=module.tensors, kernels=module.kernels, calls=module.calls,
            slots=module.slots, arena_bytes=module.arena_bytes, constants=module.constants,
        )  # fmt: skip


def test_inspect_lists_a_saved_modules_checks(tmp_path, capsys) -> None:
    import argparse

    from tensorforge import cli_inspect

    path = tmp_path / "g.tfm"
    tensorforge.compile(_model(*CASES["Gather-axis1"][:3], None)).save(path)
    parser = argparse.ArgumentParser()
    cli_inspect.add_inspect_command(parser.add_subparsers(dest="command"))
    assert cli_inspect.run_inspect(parser.parse_args(["inspect", str(path)])) == 0
    out = capsys.readouterr().out
    assert "  checks     1\n    Gather node 'pick': input 'i' holds an index outside [-4, 3]" in out


def test_many_failed_checks_name_the_first_few_and_count_the_rest() -> None:
    from tensorforge.runtime.checks import SHOWN, check_name, raise_failed

    names = [check_name(k, f"node {k} failed") for k in range(2 * SHOWN + 2)]
    values = {name: np.uint8(k % 2) for k, name in enumerate(names)}  # even ones fail
    with pytest.raises(CheckFailed) as info:
        raise_failed(values, names)
    shown = "; ".join(f"node {k} failed" for k in range(0, 2 * SHOWN, 2))
    assert str(info.value) == f"{shown}; and 1 more"
    raise_failed({name: np.uint8(1) for name in names}, names)  # none fails: no error


def test_the_cli_reports_a_failed_check_in_one_line(tmp_path, capsys) -> None:
    from tensorforge.cli import main

    op, attrs, shape, good, bad, updates = case = CASES["Gather-axis1"]
    path = tmp_path / "pick.onnx"
    path.write_bytes(_model(op, attrs, shape, updates))
    for name, value in _feeds(case, bad).items():
        np.save(tmp_path / f"{name}.npy", value)
    argv = ["run", str(path), "--input", f"x={tmp_path / 'x.npy'}"]
    assert main([*argv, "--input", f"i={tmp_path / 'i.npy'}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tensorforge: error: Gather node 'pick': input 'i' holds an index")
    assert err.count("\n") == 1 and "Traceback" not in err
