"""Import errors: unsupported ops listed at once, malformed files named, static-shape needs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tensorforge.compiler.frontend import (
    OnnxImportError,
    UnsupportedOpError,
    from_onnx,
    from_torch,
)
from tensorforge.compiler.frontend.onnx_builders import IR_VERSION, OnnxModelBuilder, mlp
from tensorforge.compiler.graph import run_graph


def _model(nodes: list, opset: int = 17, shape: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape or [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION
    )


def test_all_unsupported_ops_are_listed_in_one_error() -> None:
    nodes = [
        helper.make_node("TfIdfVectorizer", ["x"], ["a"], name="first_bad"),
        helper.make_node("Relu", ["a"], ["b"], name="fine"),
        # a broken node that conversion would trip over: the listing must come first
        helper.make_node("Reshape", ["b", "missing_shape"], ["c"], name="broken"),
        helper.make_node("StringNormalizer", ["c"], ["d"], name="second_bad"),
        helper.make_node("MyOp", ["d"], ["y"], name="custom", domain="com.example"),
    ]
    with pytest.raises(UnsupportedOpError) as info:
        from_onnx(_model(nodes))
    message = str(info.value)
    assert "<ModelProto> uses 3 unsupported op(s)" in message
    assert "TfIdfVectorizer (node 'first_bad', opset 17)" in message
    assert "StringNormalizer (node 'second_bad', opset 17)" in message
    assert "com.example.MyOp (node 'custom', opset None)" in message
    assert [item[0] for item in info.value.items] == [
        "TfIdfVectorizer",
        "StringNormalizer",
        "com.example.MyOp",
    ]


def test_data_dependent_shapes_are_named_once_with_the_reason() -> None:
    # a torchvision detector's box selection (TorchScript export): per class, the boxes whose
    # score passes a threshold, `NonZero(Greater(scores, t))` then `GatherND`; 180 such nodes
    # in SSDlite made 180 lines that never said why
    nodes = []
    for c in range(5):
        nodes += [
            helper.make_node("Greater", ["x", "t"], [f"keep{c}"], name=f"/Greater_{c}"),
            helper.make_node("NonZero", [f"keep{c}"], [f"idx{c}"], name=f"/NonZero_{c}"),
        ]
    nodes.append(helper.make_node("Concat", [f"idx{c}" for c in range(5)], ["y"], axis=1))
    model = _model(nodes)
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.float32(0.5), "t"))
    with pytest.raises(UnsupportedOpError) as info:
        from_onnx(model)
    message = str(info.value)
    assert "uses 5 unsupported op(s)" in message
    assert "NonZero (5 nodes: '/NonZero_0', '/NonZero_1', '/NonZero_2' and 2 more; opset 17)" in (
        message
    )
    assert "NonZero's output shape depends on its input's values, here computed at run" in message
    assert "tensorforge.compile runs such a node" in message
    assert len(message.splitlines()) == 3
    assert [name for _, name, _ in info.value.items] == [f"/NonZero_{c}" for c in range(5)]


def test_unsupported_variant_of_a_supported_op_is_listed() -> None:
    stats = ["s", "b", "m", "v"]
    node = helper.make_node("BatchNormalization", ["x", *stats], ["y", "rm"], name="bn")
    model = _model([node], shape=[1, 2, 3])
    model.graph.output.append(helper.make_tensor_value_info("rm", TensorProto.FLOAT, None))
    for name in stats:
        model.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(2, np.float32), name))
    with pytest.raises(UnsupportedOpError, match=r"running statistics outputs in inference mode "
                       r"\(node 'bn'"):  # fmt: skip
        from_onnx(model)


def test_window_attributes_of_the_wrong_length_are_named() -> None:
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[1])
    with pytest.raises(OnnxImportError, match=r"'pool': kernel_shape must have one value per "):
        from_onnx(_model([node]))
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", strides=[1])
    model = _model([node], shape=[1, 2, 3, 3])
    model.graph.initializer.append(
        onnx.numpy_helper.from_array(np.ones((1, 2, 1, 1), np.float32), "w")
    )
    with pytest.raises(OnnxImportError, match=r"'conv': strides must have one value per "):
        from_onnx(model)


def test_malformed_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07this is not a protobuf \xff\xff\xff")
    with pytest.raises(OnnxImportError) as info:
        from_onnx(path)
    assert str(info.value).startswith(f"{path}: is not a valid ONNX model: protobuf parse failed")
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_empty_and_missing_files_get_clear_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(
        OnnxImportError, match=r"empty.onnx: is not a valid ONNX model: the file is empty"
    ):
        from_onnx(empty)
    with pytest.raises(OnnxImportError, match=r"nope.onnx: cannot read the ONNX file"):
        from_onnx(tmp_path / "nope.onnx")


def test_truncated_model_file_is_rejected(tmp_path: Path) -> None:
    data = mlp().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(OnnxImportError, match=r"cut.onnx: is not a valid ONNX model"):
        from_onnx(path)


def test_model_file_round_trip(tmp_path: Path) -> None:
    model = mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    x = np.ones((2, 64), np.float32)
    assert np.array_equal(
        run_graph(from_onnx(path), {"x": x})[model.graph.output[0].name],
        run_graph(from_onnx(model), {"x": x})[model.graph.output[0].name],
    )


def test_old_opset_is_rejected_with_the_range() -> None:
    node = helper.make_node("Relu", ["x"], ["y"])  # (1 to 12 are upgraded: test_onnx_upgrade)
    with pytest.raises(
        OnnxImportError, match=r"opset of the default domain must be 13 to 21, not 0"
    ):
        from_onnx(_model([node], opset=0))


def test_symbolic_dims_need_input_shapes() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], shape=["batch", 3])
    with pytest.raises(OnnxImportError, match=r"input 'x' must have static dims, not 'batch'"):
        from_onnx(model)
    graph = from_onnx(model, input_shapes={"x": (4, 3)})
    assert graph.types["y"].shape == (4, 3)


def test_shape_mismatch_with_declared_output_is_a_warning_and_the_computed_shape_wins() -> None:
    # an error until onnx's shape inference was found writing wrong shapes (ceil_mode pools)
    # that onnxruntime only warns about
    b = OnnxModelBuilder("bad")
    x = b.input("x", (2, 3))
    y = b.op("Relu", [x])
    graph = helper.make_graph(
        b.nodes, "bad", b.inputs, [helper.make_tensor_value_info(y, TensorProto.FLOAT, [3, 2])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.warns(UserWarning, match=r"declared with shape \(3, 2\) but its ops give \(2, 3\)"):
        graph = from_onnx(model)
    assert graph.types[graph.outputs[0]].shape == (2, 3)


def test_node_errors_name_the_node() -> None:
    nodes = [helper.make_node("Concat", ["x", "x"], ["y"], name="cat")]  # axis is required
    with pytest.raises(
        OnnxImportError, match=r"attribute 'axis' of Concat must be given \(node 'cat'\)"
    ):
        from_onnx(_model(nodes))


def test_node_reading_an_undefined_value_names_file_and_node(tmp_path: Path) -> None:
    model = _model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")])
    path = tmp_path / "dangling.onnx"
    onnx.save(model, path)
    with pytest.raises(OnnxImportError) as info:
        from_onnx(path)
    assert str(info.value) == f"{path}: input of node 'adder' must be defined, not 'ghost'"


def test_from_torch_without_torch_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails, as without it
    wanted = r"from_torch needs torch, which is not installed: pip install 'tensorforge\[torch\]'"
    with pytest.raises(ImportError, match=wanted):
        from_torch(object(), ())


def _typed_model(op: str, dtype: int, opset: int, **attrs) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "x"], ["y"], name="n", **attrs)],
        "g",
        [helper.make_tensor_value_info("x", dtype, [4])],
        [helper.make_tensor_value_info("y", dtype, None)],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION
    )


@pytest.mark.parametrize(
    ("op", "dtype", "opset", "attrs", "message"),
    [
        # opset 11's BitShift has unsigned types only (onnxruntime refuses the model too)
        ("BitShift", TensorProto.INT32, 18, {"direction": "LEFT"}, r"at opset 18\), not int32"),
        ("BitwiseAnd", TensorProto.FLOAT, 18, {}, r"BitwiseAnd node 'n': .* not float32"),
        ("BitwiseXor", TensorProto.BOOL, 18, {}, r"BitwiseXor node 'n': .* not bool"),
        ("BitShift", TensorProto.UINT8, 18, {"direction": "UP"}, "direction must be LEFT or RIGHT"),
        ("BitShift", TensorProto.UINT8, 18, {}, "attribute 'direction' of BitShift must be given"),
    ],
)
def test_bitwise_ops_refuse_types_and_attributes_onnx_does_not_allow(
    op: str, dtype: int, opset: int, attrs: dict, message: str
) -> None:
    with pytest.raises(Exception, match=message) as info:
        from_onnx(_typed_model(op, dtype, opset, **attrs))
    assert info.type.__name__ in ("OnnxImportError", "GraphError")


def test_signed_bitshift_of_opset_28_imports_with_numpys_semantics() -> None:
    """BitShift-28 adds the signed types (its inputs are unchanged, so it imports): an amount
    past the width or negative gives the sign bits (-1 for a negative value shifted right)."""
    if onnx.defs.onnx_opset_version() < 28:
        pytest.skip("the installed onnx has no opset 28")
    graph = from_onnx(_typed_model("BitShift", TensorProto.INT8, 28, direction="RIGHT"))
    x = np.array([-128, -1, 64, 100], np.int8)
    (out,) = run_graph(graph, {"x": x}).values()
    np.testing.assert_array_equal(out, [-1, -1, 0, 0])  # x >> x: -128 and -1 are past 8 bits


def test_an_output_declared_with_another_element_type_is_named():
    # was compiled, the output float32 where the file declares float16 (onnxruntime: type error)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxImportError, match="'y' must have the declared element type float16, "
                       "not the inferred float32"):  # fmt: skip
        from_onnx(model)
