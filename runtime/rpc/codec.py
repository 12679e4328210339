"""The RPC payload: JSON metadata, named numpy arrays and named byte blobs in one ``.npz``.

numpy's own archive format (a zip of ``.npy`` files) carries arrays of any shape and dtype and
is read with ``allow_pickle=False``, so a payload can never run code. Metadata travels as a
UTF-8 JSON array member (``__meta__``), blobs as ``uint8`` members (``blob:<name>``). Before
anything is decompressed, the archive's declared sizes are checked against a limit, so a small
request cannot expand into gigabytes (a zip bomb).

Example:
    >>> import numpy as np
    >>> data = pack({"op": "run"}, {"x": np.arange(3)}, {"image": b"TFPRG"})
    >>> meta, arrays, blobs = unpack(data)
    >>> meta, arrays["x"].tolist(), blobs["image"]
    ({'op': 'run'}, [0, 1, 2], b'TFPRG')
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...hw import jsontext

#: the most bytes a payload may expand to, and the most members it may have (defaults)
MAX_EXPANDED = 1 << 30
MAX_MEMBERS = 4096
_META = "__meta__"
_BLOB = "blob:"


class PayloadError(ValueError):
    """A payload that is not a valid archive, is too large, or holds a forbidden member."""


def pack(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None,
         blobs: Mapping[str, bytes] | None = None) -> bytes:  # fmt: skip
    """One payload of JSON metadata, arrays and blobs (names must not start with ``blob:``
    or be ``__meta__``)."""
    members: dict[str, np.ndarray] = {_META: np.frombuffer(json.dumps(meta).encode(), np.uint8)}
    for name, arr in (arrays or {}).items():
        if name == _META or name.startswith(_BLOB):
            raise ValueError(f"array name {name!r} is reserved")
        arr = np.asarray(arr)
        if arr.dtype.hasobject:
            raise ValueError(f"array {name!r} holds Python objects; only plain dtypes travel")
        members[name] = arr
    for name, blob in (blobs or {}).items():
        members[_BLOB + name] = np.frombuffer(bytes(blob), np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **members)
    return buf.getvalue()


def unpack(data: bytes, max_expanded: int = MAX_EXPANDED
           ) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, bytes]]:  # fmt: skip
    """(meta, arrays, blobs) of a payload.

    Raises:
        PayloadError: not an archive of ``.npy`` members, more than `max_expanded` bytes or
            `MAX_MEMBERS` members once expanded, an object array, or metadata that is not a
            JSON object.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_MEMBERS:
                raise PayloadError(f"payload has {len(infos)} members, more than {MAX_MEMBERS}")
            total = sum(i.file_size for i in infos)
            if total > max_expanded:
                raise PayloadError(f"payload expands to {total:,} bytes, more than the limit "
                                   f"of {max_expanded:,}")  # fmt: skip
            for i in infos:
                if not i.filename.endswith(".npy"):
                    raise PayloadError(f"payload member {i.filename!r} is not a .npy array")
    except zipfile.BadZipFile as exc:
        raise PayloadError(f"payload is not an .npz archive: {exc}") from None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            members = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise PayloadError(f"payload member is not a plain .npy array: {exc}") from None
    if _META not in members:
        raise PayloadError("payload has no __meta__ member")
    try:
        meta = jsontext.loads(members.pop(_META).tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"payload metadata is not JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise PayloadError("payload metadata must be a JSON object")
    arrays, blobs = {}, {}
    for name, arr in members.items():
        if name.startswith(_BLOB):
            blobs[name[len(_BLOB) :]] = arr.tobytes()
        else:
            arrays[name] = arr
    return meta, arrays, blobs
