"""Hostile but valid-looking ONNX models: every one is rejected at import with an error naming
the node (or input) and the problem, before any allocation or native code.

Each test builds its bad model itself with onnx.helper. Families: shape arithmetic that would
wrap in int64 or exceed what memory can hold (Reshape, Expand, Concat, Pad, graph inputs,
initializers, Constants, input_shapes), opsets the importer cannot know, inputs without a
shape, mismatched or disallowed input dtypes, and non-positive window attributes.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorforge.compiler.frontend import OnnxImportError, UnsupportedOpError, from_onnx
from tensorforge.compiler.frontend.onnx_builders import IR_VERSION
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.ir import (
    MAX_TENSOR_BYTES,
    GraphBuilder,
    GraphError,
    ShapeError,
    TensorType,
)
from tensorforge.compiler.graph.passes.plan_memory import plan_memory

FLOAT, DOUBLE = TensorProto.FLOAT, TensorProto.DOUBLE
# 2 * 3 * 3074457345618258603 = 2**64 + 2: an int64 product wraps to 2
WRAPS_TO_2 = [2, 3, 3074457345618258603]


def _vi(name: str, shape: list | None, elem: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(
    nodes: list,
    inputs: list,
    inits: list | None = None,
    opset: int = 17,
    outputs: tuple[str, ...] = ("y",),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "hostile",
        inputs,
        [helper.make_tensor_value_info(o, FLOAT, None) for o in outputs],
        initializer=inits or [],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION
    )


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _reshape_model(target: list[int], shape: list[int], allowzero: int = 0) -> onnx.ModelProto:
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape_bad", allowzero=allowzero)
    return _model([node], [_vi("x", shape)], [_ints("s", target)])


# ---- shape arithmetic: exact, bounded -------------------------------------------------------


def test_reshape_whose_int64_product_wraps_is_rejected_naming_the_node() -> None:
    assert int(np.prod(np.array(WRAPS_TO_2, np.int64))) == 2  # the trap: numpy wraps
    with pytest.raises(OnnxImportError) as info:
        from_onnx(_reshape_model(WRAPS_TO_2, [1, 2]))
    message = str(info.value)
    assert "Reshape node 'reshape_bad'" in message
    assert "must keep the element count 2" in message
    assert f"({2**64 + 2} elements)" in message


def test_overflowing_model_fails_cleanly_in_a_fresh_process(tmp_path: Path) -> None:
    # compile and run in a child process, as the issue did: an error (exit 3), never a crash
    # by a signal (a regression would compile, then fault when the module runs)
    path = tmp_path / "overflow.onnx"
    path.write_bytes(_reshape_model(WRAPS_TO_2, [1, 2]).SerializeToString())
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, tensorforge
        try:
            module = tensorforge.compile({str(path)!r}, progress=False)
        except ValueError as exc:
            print(type(exc).__name__, exc)
            sys.exit(3)
        module.run({{"x": np.ones((1, 2), np.float32)}})
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert "OnnxImportError" in proc.stdout
    assert "Reshape node 'reshape_bad'" in proc.stdout


@pytest.mark.parametrize(
    ("target", "shape", "allowzero", "message"),
    [
        ([-1, -1], [2, 3], 0, r"at most one -1"),
        ([-2, 3], [2, 3], 0, r"dims >= -1, not \[-2, 3\]"),
        ([4, -1], [2, 3], 0, r"the -1 dim cannot be inferred \(6 elements over 4\)"),
        ([0, 0, 0], [2, 3], 0, r"copies \(0\) a dim the input \(2, 3\) lacks"),
        ([0, -1], [0, 3], 1, r"allowzero=1 must not hold both 0 and -1"),
        ([0, -1], [0, 3], 0, r"the -1 dim cannot be inferred \(0 elements over 0\)"),
        ([7], [2, 3], 0, r"must keep the element count 6, not give \[7\]"),
    ],
)
def test_reshape_targets_follow_onnx_rules(
    target: list[int], shape: list[int], allowzero: int, message: str
) -> None:
    with pytest.raises(OnnxImportError, match=rf"Reshape node 'reshape_bad': .*{message}"):
        from_onnx(_reshape_model(target, shape, allowzero))


def test_reshape_zero_and_minus_one_still_work() -> None:
    graph = from_onnx(_reshape_model([0, -1], [2, 3, 4]))
    assert graph.types["y"].shape == (2, 12)
    graph = from_onnx(_reshape_model([0, 3], [0, 3], allowzero=1))
    assert graph.types["y"].shape == (0, 3)


def test_expand_past_the_memory_limit_names_the_node_and_shape() -> None:
    node = helper.make_node("Expand", ["x", "s"], ["y"], name="expand_big")
    model = _model([node], [_vi("x", [1])], [_ints("s", [2**40, 2**30])])
    with pytest.raises(OnnxImportError) as info:
        from_onnx(model)
    message = str(info.value)
    assert "Expand node 'expand_big'" in message
    assert f"shape ({2**40}, {2**30}) of float32" in message
    assert f"MAX_TENSOR_BYTES = {MAX_TENSOR_BYTES}" in message


def test_expand_with_a_negative_dim_is_rejected() -> None:
    node = helper.make_node("Expand", ["x", "s"], ["y"], name="expand_neg")
    model = _model([node], [_vi("x", [3])], [_ints("s", [-1, 3])])
    with pytest.raises(OnnxImportError, match=r"Expand node 'expand_neg': .*non-negative dims"):
        from_onnx(model)


@pytest.mark.parametrize("indices", [[3], [0, -4], [[1, 2], [9, 0]]])
def test_gather_with_constant_indices_out_of_range_names_the_node(indices: list) -> None:
    """onnxruntime refuses such a model when it runs; a compiled one would read past the axis."""
    node = helper.make_node("Gather", ["x", "i"], ["y"], name="take", axis=0)
    model = _model([node], [_vi("x", [3, 4])], [_ints("i", indices)])
    with pytest.raises(OnnxImportError, match=r"Gather node 'take': .*\[-3, 2\] along axis 0"):
        from_onnx(model)


def test_gather_with_negative_constant_indices_in_range_still_works() -> None:
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    model = _model([node], [_vi("x", [3, 4])], [_ints("i", [-1, 0, -4])])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = run_graph(from_onnx(model), {"x": x}).values()
    np.testing.assert_array_equal(y, x[:, [3, 0, 0]])


def test_concat_whose_total_passes_the_limit_names_the_node() -> None:
    # each input is legal (2**39 float32 = 2 TiB), three of them are not; nothing is allocated
    big = 2**39
    node = helper.make_node("Concat", ["a", "b", "c"], ["y"], name="cat", axis=0)
    model = _model([node], [_vi(n, [big]) for n in "abc"])
    with pytest.raises(OnnxImportError, match=rf"Concat node 'cat': shape \({3 * big},\)"):
        from_onnx(model)


def test_pad_to_a_negative_size_names_the_node() -> None:
    node = helper.make_node("Pad", ["x", "p"], ["y"], name="crop_too_much")
    model = _model([node], [_vi("x", [2, 3])], [_ints("p", [0, -2, 0, -2])])
    with pytest.raises(OnnxImportError, match=r"Pad node 'crop_too_much': .*non-negative dims"):
        from_onnx(model)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([2**35, 2**35], rf"input 'x': shape \({2**35}, {2**35}\) of float32 spans {2**72} bytes"),
        ([0, 2**62], rf"input 'x': shape \(0, {2**62}\) of float32"),  # zero dims do not hide
        ([2, -3], r"input 'x': shape must have non-negative dims, not \(2, -3\)"),
    ],
)
def test_graph_inputs_with_impossible_shapes_are_named(shape: list[int], message: str) -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", shape)])
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(model)


def test_a_2_to_the_70_element_input_is_rejected_not_planned_as_an_empty_arena() -> None:
    # 2**70 wraps to 0 in int64: the old element count, and so the arena, was 0 B
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", [2**35] * 2)])
    with pytest.raises(OnnxImportError, match=rf"input 'x': shape \({2**35}, {2**35}\)"):
        from_onnx(model)
    with pytest.raises(ShapeError, match="MAX_TENSOR_BYTES"):
        TensorType((2**70,), "float32")
    shapeless = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", None)])
    with pytest.raises(OnnxImportError, match=r"input 'x': .*MAX_TENSOR_BYTES"):
        from_onnx(shapeless, input_shapes={"x": (2**70,)})  # input_shapes may hold any int


def test_input_shapes_are_bounded_and_must_fit_the_declared_shape() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", ["n", 3])])
    with pytest.raises(OnnxImportError, match=r"input 'x': shape \(.*\) of float32 spans"):
        from_onnx(model, input_shapes={"x": (2**62, 3)})
    with pytest.raises(
        OnnxImportError, match=r"gives \(4, 3, 1\), which does not fit .*\('\?', 3\)"
    ):
        from_onnx(model, input_shapes={"x": (4, 3, 1)})
    with pytest.raises(OnnxImportError, match=r"gives \(4, 5\), which does not fit"):
        from_onnx(model, input_shapes={"x": (4, 5)})
    assert from_onnx(model, input_shapes={"x": (4, 3)}).types["y"].shape == (4, 3)


def _empty_tensor(name: str, dims: list[int]) -> onnx.TensorProto:
    # helper.make_tensor refuses such dims itself; a hostile file need not
    tensor = onnx.TensorProto(name=name, data_type=FLOAT)
    tensor.dims.extend(dims)
    return tensor


def test_initializer_with_huge_dims_is_rejected_before_reading_it() -> None:
    node = helper.make_node("Add", ["x", "b"], ["y"], name="add")
    model = _model([node], [_vi("x", [2])], [_empty_tensor("b", [2**40, 2**20])])
    with pytest.raises(OnnxImportError, match=rf"initializer 'b': shape \({2**40}, {2**20}\)"):
        from_onnx(model)


def test_initializer_whose_data_does_not_fill_its_dims_is_named() -> None:
    tensor = _empty_tensor("b", [3])
    tensor.float_data.append(1.0)
    node = helper.make_node("Add", ["x", "b"], ["y"], name="add")
    with pytest.raises(
        OnnxImportError, match=r"initializer 'b' must hold data of its shape \(3,\)"
    ):
        from_onnx(_model([node], [_vi("x", [3])], [tensor]))


def test_constant_node_with_huge_dims_is_named() -> None:
    node = helper.make_node("Constant", [], ["y"], name="k", value=_empty_tensor("v", [2**50, 8]))
    with pytest.raises(OnnxImportError, match=rf"Constant node 'k': shape \({2**50}, 8\)"):
        from_onnx(_model([node], []))


def test_memory_plan_arena_holds_its_largest_tensor_at_terabyte_sizes() -> None:
    # planning only: shapes near the limit are exact, nothing is allocated
    n = 2**38  # 1 TiB of float32
    b = GraphBuilder("big")
    x = b.add_input("x", (n,), "float32")
    (r,) = b.add_node("Relu", [x])
    (e,) = b.add_node("Exp", [r])
    plan = plan_memory(b.build([e])).memory_plan
    assert plan is not None
    assert plan.peak_bytes >= 4 * n
    assert all(s.nbytes >= 4 * n for s in plan.slots)


def test_graph_builder_names_the_node_of_an_oversized_result() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (2**30,), "float32")
    y = b.add_input("y", (2**30, 1), "float32")
    with pytest.raises(ShapeError, match=r"Add node 'outer': shape \(1073741824, 1073741824\)"):
        b.add_node("Add", [x, y], name="outer")


# ---- opsets ------------------------------------------------------------------------------


def test_opset_newer_than_onnx_knows_is_rejected_naming_it() -> None:
    newest = onnx.defs.onnx_opset_version()
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], opset=99)
    with pytest.raises(
        OnnxImportError,
        match=rf"opset 99 of the default domain is newer than the installed onnx .* \(up to "
        rf"{newest}\); the importer supports opsets 13 to {newest}",
    ):
        from_onnx(model)


def test_newest_known_opset_still_imports_where_ops_are_unchanged() -> None:
    newest = onnx.defs.onnx_opset_version()
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], opset=newest)
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(run_graph(from_onnx(model), {"x": x})["y"], [0.0, 2.0])


def test_conflicting_default_domain_opsets_are_rejected() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])])
    model.opset_import.append(helper.make_opsetid("ai.onnx", 13))
    with pytest.raises(OnnxImportError, match=r"import the default ONNX domain once, not at"):
        from_onnx(model)


def test_op_redefined_after_the_supported_opsets_is_listed_as_unsupported(monkeypatch) -> None:
    # no supported op changed its inputs between opset 21 and the installed onnx's newest, so
    # count any new definition as a change: the node is listed, not imported under a meaning
    # it may no longer have
    from tensorforge.compiler.frontend import onnx_checks as importer

    monkeypatch.setattr(importer, "_signature", lambda s: s.since_version)
    model = _model([helper.make_node("HardSwish", ["x"], ["y"], name="hs")], [_vi("x", [2])])
    model.opset_import[0].version = 22  # HardSwish got a new definition (types) at 22
    with pytest.raises(UnsupportedOpError, match=r"HardSwish as redefined at opset 22 \(node 'hs'"):
        from_onnx(model)


# ---- inputs without a shape -----------------------------------------------------------------


def test_input_without_a_shape_is_an_error_not_a_scalar() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", None)])
    with pytest.raises(OnnxImportError) as info:
        from_onnx(model)
    message = str(info.value)
    assert "input 'x' must have a shape, not an unknown rank" in message
    assert "input_shapes={'x': (d0, d1, ...)}" in message and "--shape x=d0,d1,..." in message
    assert from_onnx(model, input_shapes={"x": (2, 5)}).types["y"].shape == (2, 5)


def test_declared_scalar_input_is_still_a_scalar() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [])])
    assert from_onnx(model).types["y"].shape == ()


# ---- dtypes -----------------------------------------------------------------------------


def _two_input(op: str, a: int, b: int, **attrs: object) -> onnx.ModelProto:
    node = helper.make_node(op, ["a", "b"], ["y"], name=f"{op.lower()}_node", **attrs)
    return _model([node], [_vi("a", [3, 3], a), _vi("b", [3, 3], b)])


@pytest.mark.parametrize("op", ["MatMul", "Add", "Sub", "Mul", "Div", "Gemm", "Max", "Min"])
def test_float32_with_float64_is_a_type_error_naming_node_and_dtypes(op: str) -> None:
    with pytest.raises(
        OnnxImportError,
        match=rf"{op} node '{op.lower()}_node': inputs of type parameter T must have one "
        r"dtype, not 'a' float32, 'b' float64",
    ):
        from_onnx(_two_input(op, FLOAT, DOUBLE))


def test_conv_with_a_float64_weight_is_a_type_error() -> None:
    w = numpy_helper.from_array(np.ones((2, 3, 1, 1)), "w")  # float64
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    model = _model([node], [_vi("x", [1, 3, 4, 4])], [w])
    with pytest.raises(OnnxImportError, match=r"Conv node 'conv': .*'x' float32, 'w' float64"):
        from_onnx(model)


def test_variadic_concat_and_where_check_every_input_of_the_parameter() -> None:
    node = helper.make_node("Concat", ["a", "b", "c"], ["y"], name="cat", axis=0)
    model = _model([node], [_vi("a", [1]), _vi("b", [1]), _vi("c", [1], DOUBLE)])
    with pytest.raises(OnnxImportError, match=r"Concat node 'cat': .*'c' float64"):
        from_onnx(model)
    node = helper.make_node("Where", ["c", "a", "b"], ["y"], name="sel")
    inputs = [_vi("c", [2], TensorProto.BOOL), _vi("a", [2]), _vi("b", [2], DOUBLE)]
    with pytest.raises(OnnxImportError, match=r"Where node 'sel': .*'a' float32, 'b' float64"):
        from_onnx(_model([node], inputs))


def test_dtype_outside_the_schema_is_a_type_error() -> None:
    # ONNX MatMul has no int8 version (that is MatMulInteger): onnxruntime rejects the model
    with pytest.raises(
        OnnxImportError, match=r"MatMul node 'matmul_node': input 'a' \(A\) must have a type of T"
    ):
        from_onnx(_two_input("MatMul", TensorProto.INT8, TensorProto.INT8))


def test_graph_layer_rejects_mixed_dtypes_too() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (2, 3), "float32")
    w = b.add_constant("w", np.ones((3, 4)))  # float64
    with pytest.raises(GraphError, match=r"MatMul node 'mm': .*'x' float32, 'w' float64"):
        b.add_node("MatMul", [x, w], name="mm")


# ---- window attributes --------------------------------------------------------------------


_W = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
_WT = numpy_helper.from_array(np.ones((3, 4, 3, 3), np.float32), "w")


@pytest.mark.parametrize(
    ("op", "attrs", "bad"),
    [
        ("Conv", {"strides": [0, 1]}, "strides must hold positive integers, not (0, 1)"),
        ("Conv", {"strides": [-1, 1]}, "strides must hold positive integers"),
        ("Conv", {"dilations": [1, 0]}, "dilations must hold positive integers"),
        ("Conv", {"group": 0}, "group must hold positive integers, not 0"),
        ("Conv", {"kernel_shape": [0, 3]}, "kernel_shape must hold positive integers"),
        ("Conv", {"pads": [-1, 0, 0, 0]}, "pads must hold non-negative integers"),
        ("ConvTranspose", {"strides": [0, 2]}, "strides must hold positive integers"),
        ("ConvTranspose", {"output_padding": [-1, 0]}, "output_padding must hold non-negative"),
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [0, 0]}, "strides must hold positive"),
        ("MaxPool", {"kernel_shape": [0, 2]}, "kernel_shape must hold positive integers"),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 0]}, "strides must hold"),
        ("AveragePool", {"kernel_shape": [2, 2], "pads": [0, 0, -2, 0]}, "pads must hold"),
    ],
)
def test_non_positive_window_attributes_name_the_node_and_attribute(
    op: str, attrs: dict, bad: str
) -> None:
    inputs = ["x", "w"] if op.startswith("Conv") else ["x"]
    inits = [_W if op == "Conv" else _WT] if op.startswith("Conv") else []
    node = helper.make_node(op, inputs, ["y"], name="window", **attrs)
    model = _model([node], [_vi("x", [1, 3, 8, 8])], inits)
    with pytest.raises(OnnxImportError) as info:
        from_onnx(model)
    message = str(info.value)
    assert f"{op} node 'window': attribute {bad}" in message
    assert not isinstance(info.value.__cause__, ZeroDivisionError)


def test_window_larger_than_the_padded_input_is_named() -> None:
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[5, 5])
    model = _model([node], [_vi("x", [1, 1, 3, 3])])
    with pytest.raises(OnnxImportError, match=r"MaxPool node 'pool': the window .* must fit"):
        from_onnx(model)


def test_conv_group_must_divide_the_output_channels() -> None:
    w = numpy_helper.from_array(np.ones((3, 2, 1, 1), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="grouped", group=2)
    model = _model([node], [_vi("x", [1, 4, 4, 4])], [w])
    with pytest.raises(OnnxImportError, match=r"'grouped': .*multiple of group 2, not 3"):
        from_onnx(model)


# ---- parameter shapes a kernel would read past ---------------------------------------------


def test_per_channel_parameters_must_have_the_channel_count() -> None:
    x = [_vi("x", [1, 3, 4, 4])]
    stats = [
        numpy_helper.from_array(np.ones(n, np.float32), f"p{i}") for i, n in enumerate((3, 3, 2, 3))
    ]
    bn = helper.make_node("BatchNormalization", ["x", "p0", "p1", "p2", "p3"], ["y"], name="bn")
    with pytest.raises(
        OnnxImportError,
        match=r"'bn': BatchNormalization input_mean must have shape \(3,\), not \(2,\)",
    ):
        from_onnx(_model([bn], x, stats))
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    b = numpy_helper.from_array(np.ones(2, np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")
    with pytest.raises(
        OnnxImportError, match=r"'conv': Conv bias must have shape \(4,\), not \(2,\)"
    ):
        from_onnx(_model([conv], x, [w, b]))


def test_gemm_c_must_broadcast_to_the_product() -> None:
    c = numpy_helper.from_array(np.ones((3,), np.float32), "c")
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm")
    model = _model([node], [_vi("a", [2, 4]), _vi("b", [4, 5])], [c])
    with pytest.raises(OnnxImportError, match=r"'gemm': Gemm C of shape \(3,\) must broadcast"):
        from_onnx(model)


def test_external_data_is_read_beside_the_model_only(tmp_path, monkeypatch) -> None:
    """Tensors in ONNX external data files come from the model's folder; a model given as bytes
    may have none, and a location naming a file elsewhere (the working directory) is refused."""
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(2, 2), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(model, str(folder / "m.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="w.bin", size_threshold=0)  # fmt: skip
    np.testing.assert_array_equal(
        from_onnx(str(folder / "m.onnx")).constants["w"], numpy_helper.to_array(w)
    )
    with pytest.raises(OnnxImportError, match="tensor 'w' keeps its data in an external file"):
        from_onnx((folder / "m.onnx").read_bytes())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secret.bin").write_bytes(np.ones(4, np.float32).tobytes())
    evil = onnx.load(str(folder / "m.onnx"), load_external_data=False)
    for entry in evil.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "secret.bin"  # a file in the working directory, not beside the model
    (folder / "evil.onnx").write_bytes(evil.SerializeToString())
    with pytest.raises(OnnxImportError, match="external data of tensor 'w' cannot be read"):
        from_onnx(str(folder / "evil.onnx"))


# ---- found by fuzzing: type codes and left-out inputs -----------------------------------------


@pytest.mark.parametrize("code", [40, 99, 999])
def test_a_type_code_no_onnx_defines_is_an_unsupported_dtype(code: int) -> None:
    # a KeyError from onnx.helper before; a code onnx knows but we lack (string) was already named
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", [2], code)])
    with pytest.raises(OnnxImportError, match=rf"input 'x' .*not 'unknown type code {code}'"):
        from_onnx(model)
    weight = numpy_helper.from_array(np.ones(2, np.float32), "w")
    weight.data_type = code
    add = helper.make_node("Add", ["x", "w"], ["y"], name="a")
    with pytest.raises(OnnxImportError, match=rf"initializer 'w' .*'unknown type code {code}'"):
        from_onnx(_model([add], [_vi("x", [2])], [weight]))


def test_a_required_input_left_out_is_named_not_an_attribute_error() -> None:
    # "" is how ONNX leaves out an optional input; for Softmax's only input it reached the
    # shape function as None (AttributeError: 'NoneType' object has no attribute 'shape')
    model = _model([helper.make_node("Softmax", [""], ["y"], name="sm")], [_vi("x", [2])])
    with pytest.raises(OnnxImportError, match="input 0 of Softmax node 'sm' must be given"):
        from_onnx(model)


def test_optional_inputs_may_still_be_left_out() -> None:
    clip = helper.make_node("Clip", ["x", "", "hi"], ["y"], name="c")
    model = _model([clip], [_vi("x", [3])], [numpy_helper.from_array(np.float32(1), "hi")])
    x = np.array([-2.0, 0.5, 3.0], np.float32)
    (y,) = run_graph(from_onnx(model), {"x": x}).values()
    np.testing.assert_array_equal(y, np.minimum(x, 1))


def test_input_shapes_must_be_a_mapping_of_the_models_inputs() -> None:
    # a list reached `.get` (AttributeError); a misspelt name was silently ignored
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", ["n", 4])])
    with pytest.raises(OnnxImportError, match="input_shapes must map input names to shapes"):
        from_onnx(model, input_shapes=[[2, 4]])
    with pytest.raises(OnnxImportError, match=r"names \['X'\], which the model does not take"):
        from_onnx(model, input_shapes={"X": [2, 4]})
    assert from_onnx(model, input_shapes={"x": [2, 4]}) is not None


@pytest.mark.parametrize(
    ("op", "missing"),
    [("Loop", "'body' of Loop must be given (node 'cf')"),
     ("Scan", "'body' of Scan must be given (node 'cf'); so must ['num_scan_inputs']"),
     ("If", "'else_branch' of If must be given (node 'cf'); so must ['then_branch']")],
)  # fmt: skip
def test_a_control_flow_node_without_its_body_is_named(op: str, missing: str) -> None:
    # found by fuzzing: a Loop without its body was KeyError: 'body' from the unroller
    node = helper.make_node(op, ["x"], ["y"], name="cf")
    with pytest.raises(OnnxImportError, match=f"attribute {re.escape(missing)}"):
        from_onnx(_model([node], [_vi("x", [1], TensorProto.BOOL)]))
