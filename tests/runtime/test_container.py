"""The shared artifact container: round trip, doctest, and errors that name file and offset."""

from __future__ import annotations

import doctest
import json
import struct

import numpy as np
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


def _payload_base(data: bytes) -> int:
    (length,) = struct.unpack_from("<I", data, len(MAGIC) + 4)
    return len(MAGIC) + 8 + length


def test_aligned_sections_start_at_multiples_of_align_in_the_file():
    sections = [("a", b"\x01" * 5), ("b", b""), ("c", b"\x02" * 70), ("d", b"\x03")]
    data = container.pack(MAGIC, 3, {"k": 1}, sections, align=64)
    header, got = container.unpack(data, MAGIC, 3, "f.bin", "test file", ValueError)
    assert header["align"] == 64 and got == dict(sections)
    base = _payload_base(data)
    assert base % 64 == 0 and [s["offset"] % 64 for s in header["sections"]] == [0] * 4
    for s, (name, raw) in zip(header["sections"], sections, strict=True):
        assert data[base + s["offset"] : base + s["offset"] + s["size"]] == raw, name


def _edited(data: bytes, edit) -> bytes:
    """`data` with its payload and header edited by `edit(header, payload) -> payload`, the
    digest recomputed (so the layout checks, not the digest, must catch the edit)."""
    base = _payload_base(data)
    header = json.loads(data[len(MAGIC) + 8 : base])
    payload = edit(header, bytearray(data[base:]))
    header["digest"] = container.digest(MAGIC, 3, header, bytes(payload))
    raw = json.dumps(header).encode()
    return MAGIC + struct.pack("<II", 3, len(raw)) + raw + bytes(payload)


def _poke_padding(header, payload):
    payload[header["sections"][0]["size"]] = 7  # the first padding byte after section "a"
    return payload


def _misalign(header, payload):
    header["sections"][1]["offset"] -= 1  # inside the padding: no overlap, but not aligned
    return (
        payload[: header["sections"][1]["offset"]]
        + payload[header["sections"][1]["offset"] + 1 :]
        + b"\0"
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_poke_padding, r"offset \d+: the padding before section 'b' must be zero bytes"),
        (_misalign, r"section 'b' must start at a multiple of the header's align \(64\)"),
        (lambda h, p: h.update(align=48) or p, r"offset 16: malformed header: .*power of two"),
        (lambda h, p: h.update(align=8192) or p, r"offset 16: malformed header: .*from 1 to"),
        (lambda h, p: h.update(align=True) or p, r"offset 16: malformed header: .*from 1 to"),
    ],
    ids=["padding", "misaligned", "align48", "align8192", "align-bool"],
)
def test_bad_padding_and_align_are_refused(edit, message):
    data = container.pack(MAGIC, 3, {"k": 1}, [("a", b"xyz"), ("b", b"uvw")], align=64)
    with pytest.raises(ValueError, match=message):
        container.unpack(_edited(data, edit), MAGIC, 3, "f.bin", "test file", ValueError)


def test_pack_refuses_a_bad_align():
    with pytest.raises(ValueError, match="align must be a power of two from 1 to 4096, not 3"):
        container.pack(MAGIC, 3, {}, [("a", b"x")], align=3)


def test_read_aligned_views_sections_in_place_on_aligned_addresses(tmp_path):
    data = container.pack(MAGIC, 3, {}, [("a", b"\x01" * 3), ("b", b"\x02" * 9)], align=64)
    (tmp_path / "f.bin").write_bytes(data)
    view = container.read_aligned(tmp_path / "f.bin")
    assert view.readonly and bytes(view) == data
    _, sections = container.unpack(view, MAGIC, 3, "f.bin", "test file", ValueError, copy=False)
    for name, raw in (("a", b"\x01" * 3), ("b", b"\x02" * 9)):
        array = np.frombuffer(sections[name], np.uint8)
        assert bytes(array) == raw and array.ctypes.data % 64 == 0
        assert np.shares_memory(array, np.frombuffer(view, np.uint8))


def test_a_writable_buffer_is_copied_before_it_is_checked():
    data = bytearray(container.pack(MAGIC, 3, {}, [("a", b"abc")]))
    _, sections = container.unpack(data, MAGIC, 3, "f.bin", "test file", ValueError, copy=False)
    data[-1:] = b"X"  # the caller changes its buffer after the check: the sections do not
    assert bytes(sections["a"]) == b"abc"


def test_older_versions_are_read_with_their_digest():
    data = container.pack(MAGIC, 2, {}, [("a", b"abc")])
    _, sections = container.unpack(data, MAGIC, 3, "f.bin", "test file", ValueError, older=(2,))
    assert sections == {"a": b"abc"}
    with pytest.raises(ValueError, match="offset 16: checksum mismatch"):
        container.unpack(data[:-1] + b"X", MAGIC, 3, "f.bin", "test file", ValueError, older=(2,))
    with pytest.raises(ValueError, match=r"format version 2 is not a version .* reads \(3\)"):
        container.unpack(data, MAGIC, 3, "f.bin", "test file", ValueError)


def test_arrays_of_any_shape_are_packed_in_place_as_their_bytes():
    arrays = [np.zeros((2, 0, 3), np.float32), np.float32(1.5).reshape(()), np.eye(3)[:, :2].copy()]
    data = container.pack(MAGIC, 3, {}, [(str(k), a) for k, a in enumerate(arrays)], align=64)
    _, sections = container.unpack(data, MAGIC, 3, "f.bin", "test file", ValueError)
    assert [sections[str(k)] for k in range(3)] == [a.tobytes() for a in arrays]


def test_write_atomic_errors_name_the_file_asked_for_and_leave_nothing(tmp_path) -> None:
    """Not the temporary name: a user never asked for '.m.tfm.x1y2.tmp'."""
    with pytest.raises(IsADirectoryError, match=f"a folder, not a file to write: '{tmp_path}'"):
        container.write_atomic(tmp_path, b"data")
    missing = tmp_path / "no" / "such" / "m.tfm"
    with pytest.raises(FileNotFoundError, match=f"No such file or directory: '{missing}'$"):
        container.write_atomic(missing, b"data")
    (tmp_path / "m.tfm").mkdir()
    with pytest.raises(IsADirectoryError, match="m.tfm'$"):
        container.write_atomic(tmp_path / "m.tfm", b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tfm"]
