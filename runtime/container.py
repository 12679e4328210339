"""The one file format of TensorForge artifacts: magic, version, a JSON header, raw sections.

Program images (``TFPROG``) and compiled modules (``TFMOD``) are both written this way, so a
file is never unpickled and every parse error names the file and the byte offset:

    magic (8 bytes) | u32 format version | u32 header length | JSON header | payload

The header's ``sections`` list gives each raw section's name, offset (into the payload) and size.
The sections tile the payload exactly, in table order: a section that overlaps another, bytes
that belong to no section and bytes after the last one are errors. A writer that wants its
sections aligned (`pack`'s ``align``, recorded as the header's ``align``) starts every section at
the next multiple of ``align`` after the one before, with zero bytes between, and pads the JSON
header with spaces so that the payload itself starts at a multiple of ``align`` in the file: a
file read into a buffer aligned that way (`read_aligned`) has every section aligned in memory, so
arrays can be views of it. The reader accepts exactly that padding, zero bytes and no more.

The header's ``digest`` ("sha256:<hex>") is the SHA-256 of the magic, the version, the header's
canonical JSON without the digest field, and the payload (`digest`). `unpack` checks it before
it returns anything, so a damaged file (a flipped bit in code, weights or the header) is refused
before any of it is used. It protects against damage, not against an author who writes a
hostile file and its digest (docs/security.md). Format versions a caller lists as ``legacy``
were written before the digest existed and are read without it; those it lists as ``older``
carry a digest and are read with it.

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
import errno
import json
import os
import struct
import tempfile
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import dtypes
from . import ndarray as nd

Buffer = Any  # bytes-like: anything with the buffer protocol (collections.abc.Buffer in 3.12)
MAX_HEADER_BYTES = 16 << 20
#: the largest section alignment a header may ask for (one page)
MAX_ALIGN = 4096
_FIXED = struct.calcsize("<II")
DIGEST_KEY = "digest"
DIGEST_PREFIX = "sha256:"
#: dtypes an artifact's arrays may have: numeric, native byte order (never objects or records)
#: (ml_dtypes' narrow types included: bfloat16, float8_*, int4, ... runtime/dtypes.py)
DTYPES = dtypes.DTYPES
#: the most elements one array may have (zero dims count as ones): far past any memory, far
#: below where int64 shape arithmetic could wrap
MAX_ELEMENTS = 1 << 40
_UMASK = os.umask(0o022)  # read once, at import (os.umask can only be read by setting it)
os.umask(_UMASK)


def canonical_json(value: Any) -> bytes:
    """The JSON bytes the digest covers: sorted keys, no spaces, ASCII only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _hasher(magic: bytes, version: int, header: dict[str, Any]) -> Any:
    """SHA-256 fed with what comes before the payload: magic, version, header without digest."""
    import hashlib  # here, not at import: OpenSSL's libcrypto (3 MiB resident) loads with it,
    # and a process that compiles and runs a module without saving or loading one needs none

    body = canonical_json({k: v for k, v in header.items() if k != DIGEST_KEY})
    h = hashlib.sha256(magic)
    h.update(struct.pack("<IQ", version, len(body)))
    h.update(body)
    return h


def digest(magic: bytes, version: int, header: dict[str, Any], payload: Buffer) -> str:
    """``"sha256:<hex>"`` over magic, version, `header` without its digest field, and payload."""
    h = _hasher(magic, version, header)
    h.update(payload)
    return DIGEST_PREFIX + h.hexdigest()


def _round_up(offset: int, align: int) -> int:
    return -(-offset // align) * align


def pack(
    magic: bytes,
    version: int,
    header: dict[str, Any],
    sections: Sequence[tuple[str, Buffer]],
    align: int = 1,
) -> bytes:
    """Serialize ``header`` (JSON-able) and named raw ``sections`` into one byte string, with the
    integrity digest in the header.

    Args:
        sections: (name, bytes-like) pairs: bytes, or any C-contiguous buffer (a numpy array is
            read in place, never copied but into the result).
        align: a power of two up to MAX_ALIGN: every section starts at a multiple of it in the
            file (zero padding between sections, the header padded with spaces), recorded as
            the header's ``align``; 1 (no padding) leaves it out.
    """
    if not 1 <= align <= MAX_ALIGN or align & (align - 1):
        raise ValueError(f"align must be a power of two from 1 to {MAX_ALIGN}, not {align!r}")
    views = [(name, _byte_view(data)) for name, data in sections]
    table, end = [], 0
    for name, view in views:
        start = _round_up(end, align)
        table.append({"name": name, "offset": start, "size": view.nbytes})
        end = start + view.nbytes
    full = {k: v for k, v in header.items() if k != DIGEST_KEY}
    full["sections"] = table
    if align > 1:
        full["align"] = align
    # What the reader verifies is the header as it parses it back: hash that form.
    full = json.loads(json.dumps(full, sort_keys=True))
    pieces, end = [], 0
    for (_, view), entry in zip(views, table, strict=True):
        pieces += [bytes(entry["offset"] - end), view]
        end = entry["offset"] + entry["size"]
    h = _hasher(magic, version, full)
    for piece in pieces:
        h.update(piece)
    full[DIGEST_KEY] = DIGEST_PREFIX + h.hexdigest()
    raw = json.dumps(full, sort_keys=True).encode()
    raw += b" " * (-(len(magic) + _FIXED + len(raw)) % align)  # the payload starts aligned
    return b"".join([magic, struct.pack("<II", version, len(raw)), raw, *pieces])


def _byte_view(data: Buffer) -> memoryview:
    """`data`'s bytes as a flat view (no copy); an empty buffer of any shape is b""."""
    if isinstance(data, np.ndarray) and dtypes.is_narrow(str(data.dtype)):
        data = np.ascontiguousarray(data).view(np.uint8)  # ml_dtypes' types have no buffer format
    view = memoryview(data)
    return view.cast("B") if view.nbytes else memoryview(b"")


def file_path(path: Any, what: str = "a file path") -> Path:
    """`path` as a Path when it is a str or an os.PathLike, else a TypeError naming `what`
    (``open(3)`` would read, and then close, file descriptor 3 of this process)."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"{what} must be a str or os.PathLike, not {type(path).__name__} "
                        f"{path!r:.40}")  # fmt: skip
    return Path(path)


def check_buffer(data: Any, source: str, kind: str) -> None:
    """Refuse `data` that is not bytes-like with a TypeError naming what was expected
    (``bytes(n)`` of an int would allocate n zero bytes)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{source}: a {kind} is read from bytes (or a bytearray or "
                        f"memoryview), not {type(data).__name__}")  # fmt: skip


def read_aligned(path: str | Path, alignment: int = nd.ALIGNMENT) -> memoryview:
    """The bytes of the file at `path`, read into a new buffer that starts on an
    `alignment`-byte boundary, as a read-only view (nothing else refers to the buffer): the
    sections of a file packed with that ``align`` are then aligned in memory, so `unpack`'s
    views of them can be used as arrays in place.

    Raises:
        OSError: when the file cannot be read.
    """
    with open(file_path(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        buf = nd.empty((size,), "uint8", alignment).numpy()
        view, done = memoryview(buf), 0
        while done < size:  # one read returns at most ~2 GiB on Linux
            got = f.readinto(view[done:])
            if not got:
                break  # the file shrank meanwhile: what was read is what unpack checks
            done += got
    buf = buf[:done]
    buf.setflags(write=False)
    return memoryview(buf)


def unpack(
    data: Buffer,
    magic: bytes,
    version: int,
    source: str,
    kind: str,
    error: Callable[[str], Exception],
    legacy: Collection[int] = (),
    copy: bool = True,
    older: Collection[int] = (),
) -> tuple[dict[str, Any], dict[str, bytes | memoryview]]:
    """Parse a file written by ``pack``; errors are ``error("<source>: offset N: <why>")``.

    Args:
        data: the file's bytes: ``bytes``, or a read-only ``memoryview`` whose bytes nobody
            changes (`read_aligned`'s), used in place; any other buffer is copied first.
        copy: return each section as its own ``bytes``; ``False``: as a read-only view of
            ``data`` (no second copy of a large file in memory; the views keep it alive).
        magic, version: what the caller's format expects (the version it writes).
        source: the file name for messages.
        kind: what the file should be, for the bad-magic message ("program image").
        error: the exception type (or factory) to raise.
        legacy: older format versions, written before the digest, that are still read (their
            layout is checked, their integrity cannot be).
        older: older format versions with a digest that are still read (checked like
            ``version``).

    Returns:
        The JSON header (with its ``sections`` table and ``digest``) and the sections by name.
        Nothing is returned unless the layout holds and the digest matches.
    """

    def fail(offset: int, why: str) -> Exception:
        return error(f"{source}: offset {offset}: {why}")

    check_buffer(data, source, kind)
    if not isinstance(data, bytes) and not (isinstance(data, memoryview) and data.readonly):
        data = bytes(data)  # a buffer the caller may still change: verify and keep a copy
    data = memoryview(data).cast("B")
    if data[: len(magic)] != magic:
        raise fail(0, f"not a TensorForge {kind} (bad magic)")
    fixed = len(magic) + _FIXED
    if len(data) < fixed:
        raise fail(len(magic), "truncated header")
    found, header_len = struct.unpack_from("<II", data, len(magic))
    if found != version and found not in legacy and found not in older:
        raise fail(
            len(magic), f"format version {found} is not a version this TensorForge reads "
            f"({', '.join(map(str, sorted({version, *older, *legacy})))})"
        )  # fmt: skip
    if header_len > MAX_HEADER_BYTES or fixed + header_len > len(data):
        raise fail(len(magic) + 4, f"header length {header_len} exceeds the file ({len(data)} B)")
    try:
        header = json.loads(bytes(data[fixed : fixed + header_len]))
        if not isinstance(header, dict):
            raise TypeError(f"the header must be a JSON object, not {type(header).__name__}")
        table = [_section_entry(s) for s in header["sections"]]
        align = _align_entry(header.get("align", 1))
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise fail(fixed, f"malformed header: {type(e).__name__}: {e}") from None
    base = fixed + header_len
    payload = data[base:]
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
        start = _round_up(end, align)  # where the section begins, after the zero padding
        if off > start:
            raise fail(
                base + start, f"{off - start} bytes before section {name!r} belong to no section"
            )
        if off < start:
            raise fail(
                base + off, f"section {name!r} must start at a multiple of the header's align "
                f"({align}), at offset {base + start}"
            )  # fmt: skip
        if any(payload[end:off]):
            raise fail(base + end, f"the padding before section {name!r} must be zero bytes")
        view = payload[off : off + size]
        sections[name] = bytes(view) if copy else view
        end, last = off + size, name
    if end < len(payload):
        raise fail(base + end, f"{len(payload) - end} trailing bytes after the last section")
    if found not in legacy:
        recorded = header.get(DIGEST_KEY)
        if not isinstance(recorded, str) or not recorded.startswith(DIGEST_PREFIX):
            raise fail(fixed, f"checksum missing: the header must record a {DIGEST_PREFIX} digest")
        actual = digest(magic, found, header, payload)
        import hmac  # with hashlib (`_hasher`)

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


def _align_entry(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ALIGN:
        raise ValueError(f"align must be an integer from 1 to {MAX_ALIGN}, not {value!r}")
    if value & (value - 1):
        raise ValueError(f"align must be a power of two, not {value}")
    return value


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
    path = file_path(path)
    folder = path.parent
    if path.name in ("", ".", "..") or path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "a folder, not a file to write", str(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:  # name the file asked for, not the temporary one
        raise OSError(e.errno, e.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):  # mkstemp makes it 0600: keep the old file's mode
            mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_UMASK
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno is not None:
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable
        with contextlib.suppress(OSError):
            dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
