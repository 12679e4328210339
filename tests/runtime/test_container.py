"""The shared artifact container: round trip, doctest, and errors that name file and offset."""

from __future__ import annotations

import doctest
import struct

import pytest

from tensorforge.runtime import container

MAGIC = b"TFTEST\x00\x01"


def test_round_trip_keeps_header_and_sections():
    data = container.pack(MAGIC, 3, {"k": [1, 2]}, [("a", b"\x00\x01"), ("b", b"")])
    header, sections = container.unpack(data, MAGIC, 3, "f.bin", "test file", ValueError)
    assert header["k"] == [1, 2]
    assert sections == {"a": b"\x00\x01", "b": b""}


def test_docstring_example_runs():
    assert doctest.testmod(container).failed == 0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: b"X" * 8 + d[8:], "f.bin: offset 0: not a TensorForge test file (bad magic)"),
        (lambda d: d[:8] + struct.pack("<I", 9) + d[12:], "offset 8: format version 9 is not"),
        (lambda d: d[:16] + b"[1]" + d[19:], "offset 16: malformed header"),
    ],
)
def test_bad_files_name_the_offset(mutate, message):
    data = mutate(container.pack(MAGIC, 3, {"k": 1}, [("a", b"xyz")]))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        container.unpack(data, MAGIC, 3, "f.bin", "test file", ValueError)
