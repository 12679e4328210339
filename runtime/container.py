"""The one file format of TensorForge artifacts: magic, version, a JSON header, raw sections.

Program images (``TFPROG``) and compiled modules (``TFMOD``) are both written this way, so a
file is never unpickled and every parse error names the file and the byte offset:

    magic (8 bytes) | u32 format version | u32 header length | JSON header | payload

The header's ``sections`` list gives each raw section's name, offset (into the payload) and size.

Example:
    >>> data = pack(b"TFDEMO\\x00\\x01", 1, {"name": "x"}, [("raw", b"abc")])
    >>> header, sections = unpack(data, b"TFDEMO\\x00\\x01", 1, "<bytes>", "demo file", ValueError)
    >>> header["name"], sections["raw"]
    ('x', b'abc')
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from typing import Any

MAX_HEADER_BYTES = 16 << 20
_FIXED = struct.calcsize("<II")


def pack(magic: bytes, version: int, header: dict[str, Any], sections: Sequence[tuple[str, bytes]]):
    """Serialize ``header`` (JSON-able) and named raw ``sections`` into one byte string."""
    payload = bytearray()
    table = []
    for name, data in sections:
        table.append({"name": name, "offset": len(payload), "size": len(data)})
        payload += data
    raw = json.dumps({**header, "sections": table}, sort_keys=True).encode()
    return magic + struct.pack("<II", version, len(raw)) + raw + bytes(payload)


def unpack(
    data: bytes,
    magic: bytes,
    version: int,
    source: str,
    kind: str,
    error: Callable[[str], Exception],
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Parse a file written by ``pack``; errors are ``error("<source>: offset N: <why>")``.

    Args:
        data: the file's bytes.
        magic, version: what the caller's format expects.
        source: the file name for messages.
        kind: what the file should be, for the bad-magic message ("program image").
        error: the exception type (or factory) to raise.

    Returns:
        The JSON header (with its ``sections`` table) and the sections by name.
    """

    def fail(offset: int, why: str) -> Exception:
        return error(f"{source}: offset {offset}: {why}")

    if data[: len(magic)] != magic:
        raise fail(0, f"not a TensorForge {kind} (bad magic)")
    fixed = len(magic) + _FIXED
    if len(data) < fixed:
        raise fail(len(magic), "truncated header")
    found, header_len = struct.unpack_from("<II", data, len(magic))
    if found != version:
        raise fail(
            len(magic), f"format version {found} is not the version this TensorForge reads "
            f"({version})"
        )  # fmt: skip
    if header_len > MAX_HEADER_BYTES or fixed + header_len > len(data):
        raise fail(len(magic) + 4, f"header length {header_len} exceeds the file ({len(data)} B)")
    try:
        header = json.loads(data[fixed : fixed + header_len])
        table = [(str(s["name"]), int(s["offset"]), int(s["size"])) for s in header["sections"]]
    except (ValueError, KeyError, TypeError) as e:
        raise fail(fixed, f"malformed header: {type(e).__name__}: {e}") from None
    payload = data[fixed + header_len :]
    sections = {}
    for name, off, size in table:
        if off < 0 or size < 0 or off + size > len(payload):
            raise fail(fixed + header_len + off, f"section {name!r} runs past the file end")
        sections[name] = payload[off : off + size]
    return header, sections


def header_error(source: str, data_magic_len: int, e: Exception, error: Callable[[str], Exception]):
    """The error for a header that parsed as JSON but does not hold what the format needs."""
    return error(
        f"{source}: offset {data_magic_len + _FIXED}: malformed header: {type(e).__name__}: {e}"
    )
