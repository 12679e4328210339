"""The one file format of TensorForge artifacts: magic, version, a JSON header, raw sections.

Program images (``TFPROG``) and compiled modules (``TFMOD``) are both written this way, so a
file is never unpickled and every parse error names the file and the byte offset:

    magic (8 bytes) | u32 format version | u32 header length | JSON header | payload

The header's ``sections`` list gives each raw section's name, offset (into the payload) and size.
The sections tile the payload exactly, in table order: a section that overlaps another, bytes
that belong to no section and bytes after the last one are errors.

The header's ``digest`` ("sha256:<hex>") is the SHA-256 of the magic, the version, the header's
canonical JSON without the digest field, and the payload (`digest`). `unpack` checks it before
it returns anything, so a damaged file (a flipped bit in code, weights or the header) is refused
before any of it is used. It protects against damage, not against an author who writes a
hostile file and its digest (docs/security.md). Format versions a caller lists as ``legacy``
were written before the digest existed and are read without it.

`write_atomic` writes an artifact so that readers see the old file or the new one, never a mix.

Example:
    >>> magic = b"TFDEMO\\x00\\x01"
    >>> data = pack(magic, 1, {"name": "x"}, [("raw", b"abc")])
    >>> header, sections = unpack(data, magic, 1, "<bytes>", "demo file", ValueError)
    >>> header["name"], sections["raw"]
    ('x', b'abc')
    >>> unpack(data[:-1] + b"X", magic, 1, "f", "demo file", ValueError)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: f: offset 16: checksum mismatch: the file is damaged (its header records ...)
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import struct
import tempfile
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

MAX_HEADER_BYTES = 16 << 20
_FIXED = struct.calcsize("<II")
DIGEST_KEY = "digest"
DIGEST_PREFIX = "sha256:"
#: dtypes an artifact's arrays may have: numeric, native byte order (never objects or records)
DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
)  # fmt: skip
#: the most elements one array may have (zero dims count as ones): far past any memory, far
#: below where int64 shape arithmetic could wrap
MAX_ELEMENTS = 1 << 40
_UMASK = os.umask(0o022)  # read once, at import (os.umask can only be read by setting it)
os.umask(_UMASK)


def canonical_json(value: Any) -> bytes:
    """The JSON bytes the digest covers: sorted keys, no spaces, ASCII only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def digest(magic: bytes, version: int, header: dict[str, Any], payload: bytes) -> str:
    """``"sha256:<hex>"`` over magic, version, `header` without its digest field, and payload."""
    body = canonical_json({k: v for k, v in header.items() if k != DIGEST_KEY})
    h = hashlib.sha256(magic)
    h.update(struct.pack("<IQ", version, len(body)))
    h.update(body)
    h.update(payload)
    return DIGEST_PREFIX + h.hexdigest()


def pack(magic: bytes, version: int, header: dict[str, Any], sections: Sequence[tuple[str, bytes]]):
    """Serialize ``header`` (JSON-able) and named raw ``sections`` into one byte string, with the
    integrity digest in the header."""
    payload = bytearray()
    table = []
    for name, data in sections:
        table.append({"name": name, "offset": len(payload), "size": len(data)})
        payload += data
    full = {k: v for k, v in header.items() if k != DIGEST_KEY}
    full["sections"] = table
    # What the reader verifies is the header as it parses it back: hash that form.
    full = json.loads(json.dumps(full, sort_keys=True))
    full[DIGEST_KEY] = digest(magic, version, full, bytes(payload))
    raw = json.dumps(full, sort_keys=True).encode()
    return magic + struct.pack("<II", version, len(raw)) + raw + bytes(payload)


def unpack(
    data: bytes,
    magic: bytes,
    version: int,
    source: str,
    kind: str,
    error: Callable[[str], Exception],
    legacy: Collection[int] = (),
    copy: bool = True,
) -> tuple[dict[str, Any], dict[str, bytes | memoryview]]:
    """Parse a file written by ``pack``; errors are ``error("<source>: offset N: <why>")``.

    Args:
        data: the file's bytes.
        copy: return each section as its own ``bytes``; ``False``: as a read-only view of
            ``data`` (no second copy of a large file in memory; the views keep it alive).
        magic, version: what the caller's format expects.
        source: the file name for messages.
        kind: what the file should be, for the bad-magic message ("program image").
        error: the exception type (or factory) to raise.
        legacy: older format versions, written before the digest, that are still read (their
            layout is checked, their integrity cannot be).

    Returns:
        The JSON header (with its ``sections`` table and ``digest``) and the sections by name.
        Nothing is returned unless the layout holds and the digest matches.
    """

    def fail(offset: int, why: str) -> Exception:
        return error(f"{source}: offset {offset}: {why}")

    data = bytes(data)
    if data[: len(magic)] != magic:
        raise fail(0, f"not a TensorForge {kind} (bad magic)")
    fixed = len(magic) + _FIXED
    if len(data) < fixed:
        raise fail(len(magic), "truncated header")
    found, header_len = struct.unpack_from("<II", data, len(magic))
    if found != version and found not in legacy:
        raise fail(
            len(magic), f"format version {found} is not the version this TensorForge reads "
            f"({version})"
        )  # fmt: skip
    if header_len > MAX_HEADER_BYTES or fixed + header_len > len(data):
        raise fail(len(magic) + 4, f"header length {header_len} exceeds the file ({len(data)} B)")
    try:
        header = json.loads(data[fixed : fixed + header_len])
        if not isinstance(header, dict):
            raise TypeError(f"the header must be a JSON object, not {type(header).__name__}")
        table = [_section_entry(s) for s in header["sections"]]
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise fail(fixed, f"malformed header: {type(e).__name__}: {e}") from None
    base = fixed + header_len
    payload = memoryview(data)[base:]
    sections: dict[str, bytes | memoryview] = {}
    end, last = 0, None
    for name, off, size in table:
        if name in sections:
            raise fail(base + off, f"section {name!r} appears twice in the section table")
        if off + size > len(payload):
            raise fail(base + off, f"section {name!r} runs past the file end")
        if off < end:
            raise fail(
                base + off, f"section {name!r} overlaps section {last!r} (which ends at offset "
                f"{base + end})"
            )  # fmt: skip
        if off > end:
            raise fail(
                base + end, f"{off - end} bytes before section {name!r} belong to no section"
            )
        view = payload[off : off + size]
        sections[name] = bytes(view) if copy else view
        end, last = off + size, name
    if end < len(payload):
        raise fail(base + end, f"{len(payload) - end} trailing bytes after the last section")
    if found == version:
        recorded = header.get(DIGEST_KEY)
        if not isinstance(recorded, str) or not recorded.startswith(DIGEST_PREFIX):
            raise fail(fixed, f"checksum missing: the header must record a {DIGEST_PREFIX} digest")
        actual = digest(magic, found, header, payload)
        if not hmac.compare_digest(recorded.encode(), actual.encode()):
            raise fail(
                fixed, "checksum mismatch: the file is damaged (its header records "
                f"{recorded[:23]}..., its contents hash to {actual[:23]}...)"
            )  # fmt: skip
    return header, sections


def _section_entry(entry: Any) -> tuple[str, int, int]:
    name, off, size = entry["name"], entry["offset"], entry["size"]
    if not isinstance(name, str):
        raise TypeError(f"section name must be a string, not {name!r}")
    for what, value in (("offset", off), ("size", size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"section {name!r} {what} must be an integer >= 0, not {value!r}")
    return name, off, size


def check_array_spec(shape: Any, dtype: Any, where: str) -> None:
    """Raise ValueError unless `shape` is a tuple of ints >= 0 with at most MAX_ELEMENTS elements
    (zero dims counted as ones; the product is exact) and `dtype` is one of DTYPES."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"{where}: dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    if not isinstance(shape, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise ValueError(f"{where}: shape must be a list of integers >= 0, not {shape!r}")
    count = 1
    for d in shape:
        count *= max(d, 1)
        if count > MAX_ELEMENTS:
            raise ValueError(
                f"{where}: shape {list(shape)} has more than {MAX_ELEMENTS} (2**40) elements"
            )


def format_version(data: bytes, magic: bytes) -> int | None:
    """The format version a file says it has (None when it is too short or the magic differs)."""
    if data[: len(magic)] != magic or len(data) < len(magic) + 4:
        return None
    return struct.unpack_from("<I", data, len(magic))[0]


def header_error(source: str, data_magic_len: int, e: Exception, error: Callable[[str], Exception]):
    """The error for a header that parsed as JSON but does not hold what the format needs."""
    return error(
        f"{source}: offset {data_magic_len + _FIXED}: malformed header: {type(e).__name__}: {e}"
    )


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so that no reader ever sees a partial file.

    The bytes go to a temporary file in the same folder, are flushed to disk (fsync), and the
    temporary file is renamed over `path` (`os.replace`, atomic on POSIX and Windows). Two
    writers at once leave one complete file, the last one renamed. On any failure the temporary
    file is removed and `path` is left as it was.

    Raises:
        OSError: when the folder cannot be written (the old file, if any, is intact).
    """
    path = Path(path)
    folder = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):  # mkstemp makes it 0600: keep the old file's mode
            mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_UMASK
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable
        with contextlib.suppress(OSError):
            dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
