"""Capture what native code writes to the process's stdout and stderr (file descriptors 1 and
2), which Python's `contextlib.redirect_stdout` cannot: LLVM's notes on an unknown CPU, torch's
TorchScript exporter printing its graph from C++."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def captured(fds: tuple[int, ...] = (2,)) -> Iterator[list[str]]:
    """Send file descriptors `fds` to a temporary file inside the block; the list it yields
    holds what they got, as text, once the block has ended (also when it raised)."""
    text: list[str] = []
    with tempfile.TemporaryFile() as sink:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(fd) for fd in fds]
        try:
            for fd in fds:
                os.dup2(sink.fileno(), fd)
            yield text
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip(fds, saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            text.append(sink.read().decode("utf-8", "replace"))
