"""Initializers read from the file into their constants (onnx_weights): the same values as onnx's
own numpy_helper (the oracle), left out of the parsed model, and bad data named."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx import OnnxImportError, read_model
from tensorforge.compiler.frontend.onnx_weights import MIN_RAW_BYTES, strip_raw_data

RNG = np.random.default_rng(0)
N = MIN_RAW_BYTES  # elements: every dtype below is at least MIN_RAW_BYTES of raw_data


def _model(arrays: dict[str, np.ndarray]) -> onnx.ModelProto:
    """One Identity per initializer, each initializer a graph output through it."""
    inits = [numpy_helper.from_array(a, name) for name, a in arrays.items()]
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"]) for n in arrays]
    outputs = [
        helper.make_tensor_value_info(f"{n}_out", i.data_type, a.shape)
        for (n, a), i in zip(arrays.items(), inits, strict=True)
    ]
    graph = helper.make_graph(nodes, "weights", [], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


ARRAYS = {
    "f32": RNG.standard_normal((16, N // 16)).astype(np.float32),
    "f16": RNG.standard_normal(N).astype(np.float16),
    "i64": RNG.integers(-(2**40), 2**40, N),
    "u8": RNG.integers(0, 255, N).astype(np.uint8),
    "flags": RNG.random(N) > 0.5,
    "small": np.arange(3, dtype=np.float32),  # stays in the parsed model
}


@pytest.mark.parametrize("as_file", [True, False])
def test_initializers_read_in_place_equal_onnx_own_values(tmp_path: Path, as_file: bool) -> None:
    model = _model(ARRAYS)
    path = tmp_path / "w.onnx"
    path.write_bytes(model.SerializeToString())
    graph = from_onnx(path if as_file else path.read_bytes())
    for tensor in model.graph.initializer:
        want, got = numpy_helper.to_array(tensor), graph.constants[tensor.name]
        assert got.dtype == want.dtype and got.shape == want.shape, tensor.name
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable and got.ctypes.data % 64 == 0, tensor.name


def test_large_raw_data_is_left_out_of_the_parsed_model(tmp_path: Path) -> None:
    path = tmp_path / "w.onnx"
    path.write_bytes(_model(ARRAYS).SerializeToString())
    proto, _, weights = read_model(path)
    assert weights is not None
    try:
        left = {t.name: bool(t.raw_data) for t in proto.graph.initializer}
    finally:
        weights.close()
    assert left == {name: name == "small" for name in ARRAYS}


def test_the_last_of_two_raw_data_fields_counts_as_in_protobuf() -> None:
    model = _model({"w": ARRAYS["f32"]})
    tensor = model.graph.initializer[0]
    second = RNG.standard_normal(ARRAYS["f32"].shape).astype(np.float32)
    extra = numpy_helper.from_array(second, "w").raw_data
    raw = TensorProto()
    raw.raw_data = extra
    tensor.MergeFromString(raw.SerializeToString())  # a second raw_data on the wire
    data = model.SerializeToString()
    _, spans = strip_raw_data(io.BytesIO(data), len(data))
    assert spans[0] is not None
    np.testing.assert_array_equal(from_onnx(data).constants["w"], second)
    np.testing.assert_array_equal(
        numpy_helper.to_array(onnx.load_from_string(data).graph.initializer[0]), second
    )


def test_raw_data_of_the_wrong_length_is_named_with_its_offset() -> None:
    model = _model({"w": ARRAYS["f32"]})
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:-4]
    with pytest.raises(
        OnnxImportError,
        match=r"<bytes>: initializer 'w' must hold data of its shape \(16, 256\): raw_data has "
        rf"{N * 4 - 4} bytes \(at byte \d+\), not {N * 4}",
    ):
        from_onnx(model.SerializeToString())


def test_a_file_cut_inside_raw_data_is_not_a_valid_model(tmp_path: Path) -> None:
    data = _model(ARRAYS).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxImportError, match=r"cut.onnx: is not a valid ONNX model"):
        from_onnx(path)
