"""Handing back the resident pages of shared libraries' code that a process no longer runs.

Loading libllvmlite.so (178 MB, LLVM with every target linked in) runs LLVM's static
constructors: every target registers itself and every command-line option is built, which
touches about 36 MiB of the library's pages once. Compiling then runs the O3 pipeline and the
code generator (another 30-40 MiB of pages), and once the module is built none of that code
runs again. Those pages are clean, file-backed and shared with the page cache: the kernel drops
them itself under memory pressure, but until then they count in the process's resident set and
its high-water mark, which is what a user (and `benchmarks/zoo.py`) sees.

`release_code_pages` gives them back with `madvise(MADV_DONTNEED)` on the mappings where that
cannot change what the process reads: private, read-only mappings of shared-library files that
hold no page of their own (no copy-on-write page: `Anonymous: 0 kB` in /proc/self/smaps). Such a
mapping reads the file's bytes, so a page dropped there is read back from the page cache on its
next use (a minor fault, as after the kernel's own reclaim). Writable mappings, relocated
read-only ones (RELRO, which hold their own pages), devices, shared and anonymous mappings are
never touched.

Measured with `benchmarks/compile_memory.py` (docs/cpu_backend.md, "Memory while compiling").
`TENSORFORGE_KEEP_CODE_PAGES=1` turns it off.
"""

from __future__ import annotations

import ctypes
import os
import sys

MADV_DONTNEED = 4


def _droppable(header: list[str], anonymous: int, locked: int) -> bool:
    """Whether the mapping of one smaps header (`start-end perms offset dev inode path`) holds only
    the file's own bytes and is a shared library's."""
    if len(header) < 6 or anonymous or locked:
        return False
    perms, path = header[1], " ".join(header[5:])
    library = path.endswith(".so") or ".so." in path.rsplit("/", 1)[-1]
    return (
        perms[1] == "-"  # not writable
        and perms[3] == "p"  # private: never another process's memory
        and path.startswith("/")
        and not path.startswith("/dev/")
        and not path.endswith("(deleted)")
        and library
    )


def code_mappings(smaps: str) -> list[tuple[int, int]]:
    """(start, length) of the mappings in `smaps` (the text of /proc/<pid>/smaps) that
    `release_code_pages` hands back: see the module's docstring."""
    found: list[tuple[int, int]] = []
    header: list[str] | None = None
    fields: dict[str, int] = {}

    def close() -> None:
        if (
            header is not None
            and fields.get("Rss", 0)
            and _droppable(header, fields.get("Anonymous", 1), fields.get("Locked", 0))
        ):
            lo, hi = (int(x, 16) for x in header[0].split("-"))
            found.append((lo, hi - lo))

    for line in smaps.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0].endswith(":"):
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1])
            continue
        close()
        header, fields = parts, {}
    close()
    return found


def release_code_pages() -> int:
    """Drop this process's resident pages of shared-library code and constants (see the module's
    docstring); they are read back from the page cache when they run again. Returns the bytes
    of the mappings advised (0 where /proc/self/smaps or madvise is missing: not Linux)."""
    if not sys.platform.startswith("linux") or os.environ.get("TENSORFORGE_KEEP_CODE_PAGES"):
        return 0
    try:
        with open("/proc/self/smaps") as f:
            smaps = f.read()
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    total = 0
    for start, length in code_mappings(smaps):
        if madvise(start, length, MADV_DONTNEED) == 0:
            total += length
    return total
