"""Parsing JSON that comes from outside (files, logs, the network): every malformed text, one
nested too deeply for the parser or bytes that are not UTF-8 included, is a
`json.JSONDecodeError`.

Python's decoder recurses once per ``[`` or ``{`` and raises `RecursionError` (not a
`ValueError`) past the interpreter's limit, so ``"[" * 100_000`` would escape the readers'
``except json.JSONDecodeError`` and reach the user as a bare "maximum recursion depth exceeded"
with no file named. `loads` turns it into the same error as any other bad JSON, so each reader's
own message (naming its file and line) covers it.

Example:
    >>> loads('{"a": [1, 2]}')
    {'a': [1, 2]}
    >>> try:
    ...     loads("[" * 100_000)
    ... except json.JSONDecodeError as exc:
    ...     print(exc.msg)
    nested more deeply than the JSON parser allows
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes | bytearray) -> Any:
    """`json.loads`, except that nesting too deep to parse, and bytes that are not UTF-8, raise
    `json.JSONDecodeError`."""
    try:
        return json.loads(text)
    except UnicodeDecodeError as exc:  # bytes that are not UTF-8 (json.loads decodes bytes)
        doc = bytes(text[:1000]).decode("utf-8", "replace")
        raise json.JSONDecodeError(f"byte {exc.start} is not UTF-8 text", doc, 0) from None
    except RecursionError:
        doc = text if isinstance(text, str) else bytes(text[:1000]).decode("utf-8", "replace")
        raise json.JSONDecodeError(
            "nested more deeply than the JSON parser allows", doc[:1000], 0
        ) from None
