"""Reading an ONNX model (`onnx.py`): a file, bytes or a ModelProto parsed and checked, the large
initializers' raw_data left out of the parse and read later straight into each constant
(`RawWeights`, `onnx_weights`), external data read from the model's own folder."""

from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx

from ...runtime import ndarray as nd
from ..graph.ir import ShapeError, check_shape
from .onnx_checks import PACKED_4BIT, OnnxImportError, np_dtype
from .onnx_weights import Span, WireError, read_span, strip_raw_data


def load_model(model: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """Parse and check a model; returns it with a name for messages (the file name)."""
    proto, where, _ = read_model(model, in_place=False)
    return proto, where


def read_model(
    model: str | Path | bytes | onnx.ModelProto, in_place: bool = True
) -> tuple[onnx.ModelProto, str, RawWeights | None]:
    """`load_model`; with `in_place` the large initializers' raw_data is left out of the parsed
    model and read later, straight into each constant (`RawWeights`, to be closed). A model
    the wire walker cannot follow is parsed whole (`onnx_weights`)."""
    if isinstance(model, onnx.ModelProto):
        return model, "<ModelProto>", None
    where = str(model) if isinstance(model, str | Path) else "<bytes>"
    f = _open_model(model, where)
    weights = None
    try:
        size = f.seek(0, io.SEEK_END)
        if not size:
            raise OnnxImportError(f"{where}: is not a valid ONNX model: the file is empty")
        proto, weights = _parse_in_place(f, size) if in_place else (None, None)
        if proto is None:
            f.seek(0)
            proto = _parse(f.read(), where)
    finally:
        if weights is None:
            f.close()
    if not proto.HasField("graph") or not proto.graph.output:
        if weights is not None:
            weights.close()
        raise OnnxImportError(f"{where}: is not a valid ONNX model: it has no graph outputs")
    _load_external_data(proto, where, Path(model).parent if where != "<bytes>" else None)
    return proto, where, weights


def _open_model(model: str | Path | bytes, where: str) -> BinaryIO:
    if not isinstance(model, str | Path):
        return io.BytesIO(model)
    try:
        return open(model, "rb")  # noqa: SIM115  (closed by read_model or RawWeights.close)
    except OSError as exc:
        raise OnnxImportError(f"{where}: cannot read the ONNX file: {exc.strerror}") from None


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    try:
        return onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise OnnxImportError(
            f"{where}: is not a valid ONNX model: protobuf parse failed ({type(exc).__name__}: "
            f"{exc})"
        ) from None


def _parse_in_place(f: BinaryIO, size: int) -> tuple[onnx.ModelProto | None, RawWeights | None]:
    """The model parsed without its large raw_data, and where that lies; (None, None) when the
    wire walker or protobuf cannot take it (the whole model is parsed then, for its error)."""
    try:
        stripped, spans = strip_raw_data(f, size)
        proto = onnx.load_model_from_string(stripped)
    except Exception:  # noqa: BLE001  (WireError, DecodeError: the full parse decides)
        return None, None
    if not any(spans):
        return proto, None
    return proto, RawWeights(f, spans)


class RawWeights:
    """The open model file and, per initializer, where its raw_data lies (`onnx_weights`)."""

    def __init__(self, f: BinaryIO, spans: list[Span | None]) -> None:
        self.f, self.spans = f, spans

    def array(self, index: int, tensor: onnx.TensorProto, where: str) -> np.ndarray | None:
        """Initializer number `index` as a read-only aligned array read from the file (None when
        its data stayed in the parsed model); its dims are checked before any allocation."""
        span = self.spans[index] if index < len(self.spans) else None
        external = tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.HasField("raw_data")
        if span is None or external:  # (raw_data now: read from an external data file)
            return None
        dtype = np_dtype(tensor.data_type, where)
        try:
            check_shape(list(tensor.dims), dtype)
        except ShapeError as exc:
            raise OnnxImportError(f"{where}: {exc}") from None
        shape = tuple(tensor.dims)
        count = int(np.prod(shape, dtype=np.int64))
        packed = dtype in PACKED_4BIT  # two values a byte in the file, one a byte in memory
        expected = (count + 1) // 2 if packed else count * np.dtype(dtype).itemsize
        if span[1] != expected:
            raise OnnxImportError(
                f"{where} must hold data of its shape {shape}: raw_data has {span[1]} bytes "
                f"(at byte {span[0]}), not {expected}"
            )
        array = nd.empty(shape, dtype).numpy()
        raw = np.empty(expected, np.uint8) if packed else array.reshape(-1).view(np.uint8)
        try:
            read_span(self.f, span, memoryview(raw))
        except WireError as exc:
            raise OnnxImportError(f"{where}: {exc}") from None
        if packed:  # the first value in the low 4 bits, as onnx.numpy_helper unpacks them
            nibbles = array.reshape(-1).view(np.uint8)
            nibbles[0::2] = raw[: (count + 1) // 2] & 0xF
            nibbles[1::2] = raw[: count // 2] >> 4
        array.setflags(write=False)
        return array

    def close(self) -> None:
        self.f.close()


def _load_external_data(proto: onnx.ModelProto, where: str, folder: Path | None) -> None:
    """Read tensors kept in ONNX external data files from the model's own folder (never the
    working directory); a model given as bytes has no folder, so it may not have any."""
    from onnx import external_data_helper as ext

    tensors = [t for t in ext._get_all_tensors(proto) if ext.uses_external_data(t)]
    if not tensors:
        return
    if folder is None:
        raise OnnxImportError(
            f"{where}: tensor {tensors[0].name!r} keeps its data in an external file; load the "
            "model from its path, so that the file is read beside it"
        )
    try:
        ext.load_external_data_for_model(proto, str(folder))
    except Exception as exc:  # noqa: BLE001  (missing file, a path out of the folder, ...)
        raise OnnxImportError(
            f"{where}: external data of tensor {tensors[0].name!r} cannot be read from "
            f"{folder}: {type(exc).__name__}: {exc}"
        ) from None
