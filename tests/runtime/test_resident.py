"""Handing back shared libraries' clean code pages (runtime/resident.py): which mappings it
touches, that a compile's process holds fewer resident pages for it, and that the code dropped
still runs right (compiled models against the reference executor)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tensorforge.runtime.resident import code_mappings, release_code_pages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")


def _mapping(lo: int, perms: str, path: str, rss: int = 64, anonymous: int = 0, locked: int = 0):
    return textwrap.dedent(
        f"""\
        {lo:x}-{lo + 0x10000:x} {perms} 00000000 08:01 1234 {path}
        Size:                 64 kB
        Rss:                 {rss} kB
        Anonymous:           {anonymous} kB
        Locked:              {locked} kB
        VmFlags: rd ex mr mw me
        """
    )


def test_only_read_only_private_library_mappings_without_pages_of_their_own() -> None:
    rows = [
        (0x1000000, "r-xp", "/venv/llvmlite/binding/libllvmlite.so", {}),  # code: taken
        (0x1100000, "r--p", "/usr/lib/x86_64-linux-gnu/libc.so.6", {}),  # constants: taken
        (0x1200000, "r--p", "/venv/libllvmlite.so", {"anonymous": 8}),  # RELRO, relocated
        (0x1300000, "rw-p", "/venv/libllvmlite.so", {}),  # writable data
        (0x1400000, "r--s", "/venv/libshared.so", {}),  # shared
        (0x1500000, "r-xp", "/dev/dri/renderD128", {}),  # a device
        (0x1600000, "r-xp", "/tmp/libgone.so (deleted)", {}),
        (0x1700000, "r--p", "/data/weights.bin", {}),  # not a library
        (0x1800000, "r-xp", "/venv/libnothing.so", {"rss": 0}),  # nothing resident
        (0x1900000, "r-xp", "/venv/liblocked.so", {"locked": 64}),
        (0x1A00000, "r--p", "", {}),  # anonymous
        (0x1B00000, "r-xp", "[vdso]", {}),
    ]
    smaps = "".join(_mapping(lo, perms, path, **kw) for lo, perms, path, kw in rows)
    assert code_mappings(smaps) == [(0x1000000, 0x10000), (0x1100000, 0x10000)]


def test_a_mapping_whose_fields_are_missing_is_left_alone() -> None:
    text = "1000-2000 r-xp 00000000 08:01 1 /lib/libx.so\nRss:  4 kB\n"  # no Anonymous line
    assert code_mappings(text) == []


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENSORFORGE_KEEP_CODE_PAGES", "1")
    assert release_code_pages() == 0


_CHILD = """
import numpy as np, tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import small_cnn
from tensorforge.compiler.graph import run_graph
from tensorforge.runtime.resident import release_code_pages

def rss_file():
    with open("/proc/self/status") as f:
        return [int(l.split()[1]) for l in f if l.startswith("RssFile")][0] / 1024

import llvmlite.binding  # loads libllvmlite.so and runs LLVM's static constructors
before = rss_file()
advised = release_code_pages()
after = rss_file()
model = small_cnn(16)
x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
got = tensorforge.compile(model).run({"x": x})
want = run_graph(from_onnx(model), {"x": x})
for name in want:
    np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
print(before, after, advised / 2**20)
"""


def test_a_process_holds_fewer_library_pages_and_still_compiles_right() -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    before, after, advised = (float(v) for v in out.stdout.split()[-3:])
    assert advised > 50  # libllvmlite.so's code alone is over 50 MiB of mappings
    assert after < before - 15, (before, after)  # LLVM's static constructors' pages went
