"""ONNX initializer weights read straight from the file into aligned arrays.

protobuf copies every byte of a model it parses, and numpy copies the weights out of that
again: the weights were held twice (three times while the file's bytes were in memory too),
which was the peak of importing a large model. Here the model is walked at the protobuf wire
level (ModelProto.graph -> GraphProto.initializer -> TensorProto.raw_data), parsed without the
initializers' raw_data, and each tensor's bytes are read from the file into its final buffer
when the importer reaches it. A model this walker cannot follow is parsed whole, as before.

Example:
    >>> import io
    >>> from tensorforge.compiler.frontend.onnx_builders import mlp
    >>> data = mlp().SerializeToString()
    >>> stripped, spans = strip_raw_data(io.BytesIO(data), len(data))
    >>> len(stripped) < len(data), len(spans), spans[0] is not None
    (True, 6, True)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import BinaryIO

MODEL_GRAPH, GRAPH_INITIALIZER = 7, 5  # field numbers in onnx.proto
TENSOR_DATA_TYPE, TENSOR_RAW_DATA = 2, 9
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5  # protobuf wire types
# TensorProto data types whose raw_data is numpy's little-endian layout of the same dtype
# (float, uint8, int8, uint16, int16, int32, int64, bool, float16, double, uint32, uint64).
RAW_LAYOUT_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13})
MIN_RAW_BYTES = 4096  # smaller raw_data stays in the parsed model (shape constants, biases)

Span = tuple[int, int]  # (offset in the file, length) of one tensor's raw_data


class WireError(ValueError):
    """Bytes this walker cannot follow; the caller parses the whole model instead (whose
    error, if any, is the one reported)."""


def _varint(f: BinaryIO) -> int:
    result = shift = 0
    while True:
        byte = f.read(1)
        if not byte:
            raise WireError("varint runs past the end")
        result |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return result
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(f: BinaryIO, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field, wire type, key offset, value offset, end offset) of each field in [start, end)."""
    pos = start
    while pos < end:
        f.seek(pos)
        key = _varint(f)
        field, wire = key >> 3, key & 7
        value = f.tell()
        if wire == _VARINT:
            _varint(f)
            stop = f.tell()
        elif wire in (_I64, _I32):
            stop = value + (8 if wire == _I64 else 4)
        elif wire == _LEN:
            length = _varint(f)
            value = f.tell()
            stop = value + length
        else:
            raise WireError(f"wire type {wire} at byte {pos}")
        if field == 0 or stop > end:
            raise WireError(f"field {field} at byte {pos} runs past its message")
        yield field, wire, pos, value, stop
        pos = stop


def _copy(f: BinaryIO, start: int, stop: int) -> bytes:
    f.seek(start)
    return f.read(stop - start)


def _nested(field: int, body: bytes) -> bytes:
    return _encode_varint(field << 3 | _LEN) + _encode_varint(len(body)) + body


def _strip_tensor(f: BinaryIO, start: int, end: int) -> tuple[bytes, Span | None]:
    out, raw, data_type = bytearray(), None, None
    for field, wire, key, value, stop in _fields(f, start, end):
        if field == TENSOR_DATA_TYPE and wire == _VARINT:
            f.seek(value)
            data_type = _varint(f)
        if field == TENSOR_RAW_DATA and wire == _LEN:
            if raw is not None:
                out += _nested(TENSOR_RAW_DATA, _copy(f, *raw))  # the last one counts
            raw = (value, stop)
        else:
            out += _copy(f, key, stop)
    if raw is None:
        return bytes(out), None
    if data_type not in RAW_LAYOUT_TYPES or raw[1] - raw[0] < MIN_RAW_BYTES:
        return bytes(out + _nested(TENSOR_RAW_DATA, _copy(f, *raw))), None
    return bytes(out), (raw[0], raw[1] - raw[0])


def _strip_graph(f: BinaryIO, start: int, end: int, spans: list[Span | None]) -> bytes:
    out = bytearray()
    for field, wire, key, value, stop in _fields(f, start, end):
        if field == GRAPH_INITIALIZER and wire == _LEN:
            body, span = _strip_tensor(f, value, stop)
            out += _nested(GRAPH_INITIALIZER, body)
            spans.append(span)
        else:
            out += _copy(f, key, stop)
    return bytes(out)


def strip_raw_data(f: BinaryIO, size: int) -> tuple[bytes, list[Span | None]]:
    """The serialized model in `f` (`size` bytes) without its initializers' raw_data, and for
    each initializer of the graph, in order, where its raw_data lies in `f` (None: it stayed in
    the model: small, not a plain numeric layout, or no raw_data).

    Raises:
        WireError: the bytes are not protobuf this walker follows (or a big-endian host).
    """
    if sys.byteorder != "little":
        raise WireError("raw_data is little-endian; this host is not")
    out, spans = bytearray(), []
    for field, wire, key, value, stop in _fields(f, 0, size):
        if field == MODEL_GRAPH and wire == _LEN:
            out += _nested(MODEL_GRAPH, _strip_graph(f, value, stop, spans))
        else:
            out += _copy(f, key, stop)
    return bytes(out), spans


def read_span(f: BinaryIO, span: Span, out: memoryview) -> None:
    """Read the raw_data at `span` into `out` (a writable byte view of exactly its length)."""
    f.seek(span[0])
    if f.readinto(out) != span[1]:
        raise WireError(f"raw_data at byte {span[0]} runs past the end of the file")
