"""Damaged and lying artifacts (.tfm modules, .tfp program images) are refused with clear errors
before any native code runs; saves are atomic; `tensorforge inspect` checks without running.

Each family builds its bad inputs, asserts the specific error (naming the file) and that nothing
was written or lost. The fuzz tests mutate a real module and a real image (byte flips, including
inside native code, and header edits) and load and run every mutant in a subprocess: the outcome
must be a one-line error (exit 1) or the correct result (exit 0), never a signal, a hang or a
traceback. docs/security.md states what this guarantees and what it does not.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorforge
from tensorforge import cli_inspect
from tensorforge.compiler.frontend.onnx_builders import mlp
from tensorforge.demo import build_matmul, pack_inp
from tensorforge.hw.config import HWConfig
from tensorforge.runtime import container
from tensorforge.runtime import module as module_mod
from tensorforge.runtime import program as program_mod
from tensorforge.runtime.device.cpu import elf
from tensorforge.runtime.module import Module, ModuleFormatError
from tensorforge.runtime.program import ProgramBuilder, ProgramImage, ProgramImageError

TINY = HWConfig.preset("tiny")
X = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
MOD, PROG = module_mod.MAGIC, program_mod.MAGIC


@pytest.fixture(scope="module")
def module() -> Module:
    return tensorforge.compile(mlp(), progress=False)


@pytest.fixture(scope="module")
def kernel():
    return build_matmul(TINY, 16, 8, 8, tile_rows=4, seed=5)


# ---- helpers ----------------------------------------------------------------------------------


def split(data: bytes, magic: bytes) -> tuple[dict[str, Any], bytes]:
    """(header, payload) of a container file."""
    (length,) = struct.unpack_from("<I", data, len(magic) + 4)
    start = len(magic) + 8
    return json.loads(data[start : start + length]), data[start + length :]


def join(magic: bytes, header: dict[str, Any], payload: bytes, redigest: bool = True) -> bytes:
    """A container file from a (possibly edited) header and payload; with `redigest` the digest
    is recomputed, as a buggy or hostile writer would, so the checks behind it are reached."""
    version = module_mod.VERSION if magic == MOD else program_mod.FORMAT_VERSION
    header = dict(header)
    if redigest:
        header[container.DIGEST_KEY] = container.digest(magic, version, header, payload)
    raw = json.dumps(header, sort_keys=True).encode()
    return magic + struct.pack("<II", version, len(raw)) + raw + payload


def edited(data: bytes, magic: bytes, edit, redigest: bool = True) -> bytes:
    header, payload = split(data, magic)
    edit(header)
    return join(magic, header, payload, redigest)


def section_offset(data: bytes, magic: bytes, name: str) -> int:
    """The file offset of section `name`'s first byte."""
    header, payload = split(data, magic)
    entry = next(s for s in header["sections"] if s["name"] == name)
    return len(data) - len(payload) + entry["offset"]


def flip(data: bytes, offset: int, mask: int = 0x10) -> bytes:
    return data[:offset] + bytes([data[offset] ^ mask]) + data[offset + 1 :]


def refused_load(path: Path, data: bytes, loader, error, match: str):
    """Write `data` to `path`, assert `loader(path)` raises `error` matching `match` and naming
    the file, and that the folder and the file are as they were (nothing written or lost)."""
    path.write_bytes(data)
    before = sorted(p.name for p in path.parent.iterdir())
    with pytest.raises(error, match=match) as info:
        loader(path)
    assert str(path) in str(info.value)
    assert sorted(p.name for p in path.parent.iterdir()) == before
    assert path.read_bytes() == data
    return info.value


def load_module(path: Path) -> Module:
    return Module.load(path)


def load_image(path: Path) -> ProgramImage:
    return ProgramImage.load(path)


# ---- the container: overlap, gaps, trailing bytes, digest ------------------------------------


@pytest.mark.parametrize("magic", [MOD, PROG], ids=["tfm", "tfp"])
def test_overlapping_sections_are_refused(module, kernel, magic, tmp_path):
    data = module.to_bytes() if magic == MOD else kernel.image.to_bytes()

    def overlap(h):  # the second section starts one byte inside the first; the end is the same
        first, second = h["sections"][0], h["sections"][1]
        start = first["offset"] + first["size"] - 1  # (a module pads between the two)
        second["size"] += second["offset"] - start
        second["offset"] = start

    bad = edited(data, magic, overlap)
    name = split(data, magic)[0]["sections"][1]["name"]
    loader, error = (load_module, ModuleFormatError) if magic == MOD else (
        load_image, ProgramImageError)  # fmt: skip
    refused_load(tmp_path / "o.bin", bad, loader, error, f"section {name!r} overlaps section")


@pytest.mark.parametrize("magic", [MOD, PROG], ids=["tfm", "tfp"])
def test_trailing_garbage_and_gaps_are_refused(module, kernel, magic, tmp_path):
    data = module.to_bytes() if magic == MOD else kernel.image.to_bytes()
    loader, error = (load_module, ModuleFormatError) if magic == MOD else (
        load_image, ProgramImageError)  # fmt: skip
    refused_load(tmp_path / "t.bin", data + b"junk", loader, error,
                 rf"offset {len(data)}: 4 trailing bytes after the last section")  # fmt: skip

    def gap(h):  # every section after the first moves one byte on: a byte belongs to none
        for s in h["sections"][1:]:
            s["offset"] += 1

    header, payload = split(data, magic)
    cut = header["sections"][1]["offset"]
    gapped = edited(data[: len(data) - len(payload)] + payload[:cut] + b"\0" + payload[cut:],
                    magic, gap)  # fmt: skip
    refused_load(
        tmp_path / "g.bin", gapped, loader, error, "1 bytes before section .* belong to no"
    )


def test_a_flipped_bit_in_native_code_is_a_checksum_error(module, tmp_path):
    data = module.to_bytes()
    name = f"kernel:{module.kernels[0].name}"
    bad = flip(data, section_offset(data, MOD, name) + 100)  # inside the object code
    err = refused_load(tmp_path / "m.tfm", bad, load_module, ModuleFormatError, "checksum mismatch")
    assert "damaged" in str(err)


def test_a_flipped_bit_in_a_constant_or_the_header_is_a_checksum_error(module, tmp_path):
    data = module.to_bytes()
    const = f"const:{next(iter(module.constants))}"
    refused_load(tmp_path / "c.tfm", flip(data, section_offset(data, MOD, const) + 7, 0x01),
                 load_module, ModuleFormatError, "checksum mismatch")  # fmt: skip
    at = data.index(b'"target": "llvm') + len('"target": "')
    refused_load(tmp_path / "h.tfm", data[:at] + b"L" + data[at + 1 :], load_module,
                 ModuleFormatError, "offset 16: checksum mismatch")  # fmt: skip


def test_a_flipped_bit_in_an_image_is_a_checksum_error(kernel, tmp_path):
    data = kernel.image.to_bytes()
    bad = flip(data, section_offset(data, PROG, "insns") + 3)
    refused_load(tmp_path / "p.tfp", bad, load_image, ProgramImageError, "checksum mismatch")


def test_a_missing_digest_is_refused_and_version_1_files_are_read(module, tmp_path):
    data = module.to_bytes()
    no_digest = edited(data, MOD, lambda h: h.pop("digest"), redigest=False)
    refused_load(tmp_path / "n.tfm", no_digest, load_module, ModuleFormatError, "checksum missing")
    # Format 1 (before digests) is read with every other check: the compatibility rule.
    header, payload = split(data, MOD)
    header.pop("digest")
    raw = json.dumps(header).encode()
    old = MOD + struct.pack("<II", 1, len(raw)) + raw + payload
    np.testing.assert_array_equal(
        Module.from_bytes(old).run({"x": X})["softmax_12"], module.run({"x": X})["softmax_12"]
    )
    newer = module_mod.VERSION + 1
    with pytest.raises(ModuleFormatError, match=f"offset 8: format version {newer} is not"):
        Module.from_bytes(old[:8] + struct.pack("<I", newer) + old[12:])


# ---- lying headers (digest recomputed, so the cross-checks are what refuses them) -------------


LIES = {
    "tensor shape": (lambda h: h["tensors"]["x"].__setitem__(0, [4, 64]),
                     r"argument p0 of kernel .* must be float32\[2, 64\]"),
    "param shape": (lambda h: h["kernels"][0]["params"][0].__setitem__(2, [1, 64]),
                    r"argument p0 of kernel .* must be float32\[1, 64\]"),
    "negative dim": (lambda h: h["tensors"]["x"].__setitem__(0, [-2, -64]),
                     r"tensor 'x': shape must be a list of integers >= 0"),
    "huge dims": (lambda h: h["kernels"][0]["params"][0].__setitem__(2, [1 << 21, 1 << 21]),
                  r"has more than 1099511627776 \(2\*\*40\) elements"),
    "float dim": (lambda h: h["tensors"]["x"].__setitem__(0, [2.0, 64]),
                  r"shape must be a list of integers"),
    "object dtype": (lambda h: h["tensors"]["x"].__setitem__(1, "object"),
                     r"tensor 'x': dtype must be one of"),
    "slot past the arena": (lambda h: h["slots"].__setitem__("x", h["arena_bytes"]),
                            r"slot of 'x': bytes \[\d+, \d+\) .* must lie inside the arena"),
    "negative slot offset": (lambda h: h["slots"].__setitem__("x", -64),
                             r"slot of 'x': offset must be an integer >= 0"),
    "misaligned slot": (lambda h: h["slots"].__setitem__("x", h["slots"]["x"] + 2),
                        r"must be a multiple of its element size"),
    "huge arena": (lambda h: h.__setitem__("arena_bytes", 1 << 50),
                   r"arena_bytes 1125899906842624 must not exceed what its slots span"),
    "constant size": (lambda h: h["constants"][0].__setitem__("shape", [1, 1]),
                      r"offset \d+: constant '.*' must have 4 bytes"),
    "constant dtype": (lambda h: h["constants"][0].__setitem__("dtype", "float64"),
                       r"constant '.*' must have \d+ bytes \(float64"),
    "unknown input": (lambda h: h.__setitem__("inputs", ["nope"]),
                      r"input 'nope' must be one of the module's tensors"),
    "unknown output": (lambda h: h.__setitem__("outputs", ["nope"]),
                       r"output 'nope' must be one of the module's tensors"),
    "missing argument": (lambda h: h["calls"][0][1].pop(),
                         r"must bind 4 arguments, not 3"),
}  # fmt: skip


@pytest.mark.parametrize("lie", sorted(LIES))
def test_lying_module_headers_are_refused(module, lie, tmp_path):
    edit, match = LIES[lie]
    bad = edited(module.to_bytes(), MOD, edit)
    refused_load(tmp_path / "lie.tfm", bad, load_module, ModuleFormatError, match)


def test_live_tensors_sharing_arena_bytes_are_refused(module, tmp_path):
    """Move the first call's input onto its output: both live during that call."""
    data = module.to_bytes()
    first = module.calls[0]
    inp, out = first.args[0], first.args[-1]
    bad = edited(data, MOD, lambda h: h["slots"].__setitem__(inp, h["slots"][out]))
    refused_load(tmp_path / "ov.tfm", bad, load_module, ModuleFormatError,
                 r"slots of .* overlap while both are live")  # fmt: skip


def test_a_gpu_payload_compiled_for_other_sizes_is_refused(module):
    payload = {
        "dialect": "opencl", "source": "", "kernels": [{"name": "k", "args": [0, 1],
                                                        "grid": [1, 1, 1], "block": [1, 1, 1],
                                                        "shared_bytes": 0}],
        "buffers": [{"name": "a", "dtype": "float32", "size": 64, "workspace": False},
                    {"name": "b", "dtype": "float32", "size": 64, "workspace": False}],
    }  # fmt: skip
    spec = module_mod.ParamSpec
    image = module_mod.KernelImage(
        "k",
        "opencl",
        (spec("a", "float32", (2, 64)), spec("b", "float32", (2, 64))),
        json.dumps(payload).encode(),
    )
    with pytest.raises(ValueError, match=r"parameter a is float32\[2, 64\], but the GPU program "
                       r"was compiled for 64 elements of float32"):  # fmt: skip
        Module(target="opencl", inputs=[], outputs=[], tensors={}, kernels=[image], calls=[],
               slots={}, arena_bytes=0, constants={})  # fmt: skip


ELF_HOST = pytest.mark.skipif(not module_mod.HOST_IS_ELF, reason="the host's objects are not ELF")


@ELF_HOST
def test_malformed_object_code_is_refused_before_linking(module):
    code = module.kernels[0].payload
    assert module_mod.elf_problem(code) is None
    assert "machine" in module_mod.elf_problem(code[:18] + b"\x28\x00" + code[20:])  # ARM
    assert "does not fit" in module_mod.elf_problem(code[: len(code) // 2])
    assert "bad magic" in module_mod.elf_problem(b"\x7fELX" + code[4:])
    shoff = struct.unpack_from("<Q", code, 40)[0]
    moved = code[:40] + struct.pack("<Q", shoff + len(code)) + code[48:]
    kernels = [module_mod.KernelImage(k.name, k.kind, k.params,
                                      moved if i == 0 else k.payload, k.meta)
               for i, k in enumerate(module.kernels)]  # fmt: skip
    other = Module(target=module.target, inputs=module.inputs, outputs=module.outputs,
                   tensors=module.tensors, kernels=kernels, calls=module.calls,
                   slots=module.slots, arena_bytes=module.arena_bytes,
                   constants=module.constants)  # fmt: skip
    with pytest.raises(ValueError, match="object code is malformed: section table"):
        other.run({"x": X})


IMAGE_LIES = {
    "negative slot dim": (lambda h: h["slots"][0].__setitem__("shape", [-16, 2, 1, 4]),
                          r"slot 'A': shape must be a list of integers >= 0"),
    "huge slot": (lambda h: h["slots"][0].__setitem__("shape", [1 << 30, 1 << 30]),
                  r"more than 1099511627776 \(2\*\*40\) elements"),
    "object slot": (lambda h: h["slots"][0].__setitem__("dtype", "object"),
                    r"slot 'A': dtype must be one of"),
    "float dim": (lambda h: h["slots"][0].__setitem__("shape", [16.5, 2, 1, 4]),
                  r"slot 'A' shape must be an integer"),
    "relocation past the program": (lambda h: h["relocations"][0].__setitem__(0, 10_000),
                                    r"relocation targets instruction 10000"),
    "relocation of an unknown buffer": (lambda h: h["relocations"][0].__setitem__(1, "Z"),
                                        r"names unknown buffer 'Z'"),
    "output larger than its stores": (
        lambda h: h["slots"][1].__setitem__("shape", [16, 2, 2, 4]),
        r"output slot 'C' has 256 bytes, but its STOREs write only bytes \[0, 128\)",
    ),
    "reinterpreted output": (
        lambda h: h["slots"][1].__setitem__("dtype", "uint8"),
        r"slot 'C' holds int8 values \(instruction \d+, STORE OUT.*\), not uint8",
    ),
    "huge alignment": (lambda h: h["slots"][0].__setitem__("align", 1 << 40),
                       r"alignment must be a power of two of at most"),
}  # fmt: skip


@pytest.mark.parametrize("lie", sorted(IMAGE_LIES))
def test_lying_image_headers_are_refused(kernel, lie, tmp_path):
    edit, match = IMAGE_LIES[lie]
    bad = edited(kernel.image.to_bytes(), PROG, edit)
    refused_load(tmp_path / "lie.tfp", bad, load_image, ProgramImageError, match)


# ---- slot names become file names ----------------------------------------------------------

UNSAFE = ["../evil", "a/b", "/abs", "..", ".", "c:\\x", "x\x00y", "", "a\nb", "x" * 300]


@pytest.mark.parametrize("name", UNSAFE, ids=[repr(n)[:12] for n in UNSAFE])
def test_unsafe_slot_names_are_refused_when_built(name):
    b = ProgramBuilder(TINY, "p")
    with pytest.raises(ProgramImageError, match="slot name .* must"):
        b.slot(name, "output", (1, 1, 1, 4))
    with pytest.raises(ProgramImageError, match="slot name .* must"):
        ProgramImage(TINY, b"", slots=(program_mod.Slot(name, "output", (1, 4)),))


@pytest.mark.parametrize("name", ["../../escape", "/tmp/abs", "..\\x"])
def test_unsafe_slot_names_are_refused_when_loaded(kernel, name, tmp_path):
    def rename(h):
        for s in h["slots"]:
            if s["name"] == "C":
                s["name"] = name
        h["relocations"] = [[i, name if t == "C" else t] for i, t in h["relocations"]]

    bad = edited(kernel.image.to_bytes(), PROG, rename)
    refused_load(tmp_path / "n.tfp", bad, load_image, ProgramImageError, "slot name .* must")


def test_sim_run_output_dir_never_writes_outside(kernel, tmp_path):
    """A good image writes only DIR/NAME.npy for its output slots."""
    from tensorforge.cli import main

    path, out = tmp_path / "mm.tfp", tmp_path / "out"
    kernel.image.save(path)
    np.save(tmp_path / "a.npy", pack_inp(TINY, kernel.a))
    assert main(["sim", "run", str(path), "--input",
                 f"A={tmp_path / 'a.npy'}", "--output-dir", str(out)]) == 0  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == ["C.npy"]


# ---- atomic saves ----------------------------------------------------------------------------


def _temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("what", ["module", "image"])
@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_save_leaves_the_old_file_and_no_temp_files(
    module, kernel, what, failing, tmp_path, monkeypatch
):
    obj = module if what == "module" else kernel.image
    path = tmp_path / "artifact.bin"
    path.write_bytes(b"the old file")
    os.chmod(path, 0o640)

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(container.os, failing, boom)
    with pytest.raises(OSError, match="No space left"):
        obj.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == b"the old file"
    assert _temp_files(tmp_path) == []
    obj.save(path)  # a save that works replaces it whole and keeps its mode
    assert path.read_bytes() == obj.to_bytes() and (path.stat().st_mode & 0o777) == 0o640
    assert _temp_files(tmp_path) == []


def test_a_save_into_a_missing_folder_fails_cleanly(module, tmp_path):
    with pytest.raises(OSError):
        module.save(tmp_path / "missing" / "m.tfm")
    assert list(tmp_path.iterdir()) == []


def test_concurrent_saves_never_leave_a_torn_file(module, tmp_path):
    """Two writers and a reader: every read is one whole file (digest checked by the load)."""
    path = tmp_path / "same.tfm"
    variants = []
    for k in range(2):
        m = Module.from_bytes(module.to_bytes())
        m.stats = {**m.stats, "writer": k, "pad": "x" * 100_000 * (k + 1)}  # different lengths
        variants.append(m)
    variants[0].save(path)
    stop = threading.Event()

    def writer(m: Module) -> None:
        while not stop.is_set():
            m.save(path)

    threads = [threading.Thread(target=writer, args=(m,)) for m in variants]
    for t in threads:
        t.start()
    try:
        for _ in range(40):
            assert Module.load(path).stats["writer"] in (0, 1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert _temp_files(tmp_path) == []


# ---- tensorforge inspect ---------------------------------------------------------------------


def _inspect(path: Path, capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    cli_inspect.add_inspect_command(parser.add_subparsers(dest="command"))
    code = cli_inspect.run_inspect(parser.parse_args(["inspect", str(path), "--kernels"]))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_inspect_checks_without_running_any_code(module, kernel, tmp_path, capsys, monkeypatch):
    from tensorforge.runtime.device.cpu import loader

    def never(*args, **kwargs):
        raise AssertionError("inspect must not load object code")

    monkeypatch.setattr(loader.ObjectLoader, "__init__", never)
    module.save(tmp_path / "m.tfm")
    code, out, err = _inspect(tmp_path / "m.tfm", capsys)
    assert code == 0 and err == ""
    assert "digest     sha256:" in out and "... OK" in out and "kernels    4 (llvm 4)" in out
    assert "for this machine" in out and "no code was run" in out
    kernel.image.save(tmp_path / "p.tfp")
    code, out, err = _inspect(tmp_path / "p.tfp", capsys)
    assert code == 0 and "program image" in out and "instructions 36" in out


def test_inspect_reports_damage_in_one_line(module, tmp_path, capsys):
    data = module.to_bytes()
    bad = flip(data, section_offset(data, MOD, f"kernel:{module.kernels[1].name}") + 64)
    (tmp_path / "bad.tfm").write_bytes(bad)
    code, out, err = _inspect(tmp_path / "bad.tfm", capsys)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "bad.tfm" in err and "checksum mismatch" in err
    (tmp_path / "x.txt").write_text("hello")
    code, _, err = _inspect(tmp_path / "x.txt", capsys)
    assert code == 1 and "not a TensorForge module or program image" in err
    code, _, err = _inspect(tmp_path / "none.tfm", capsys)
    assert code == 1 and "cannot read" in err


@ELF_HOST
def test_inspect_refuses_object_code_for_another_machine(module, tmp_path, capsys):
    if elf.host_elf_machine() == 183:
        pytest.skip("the host is AArch64")
    kernels = [
        module_mod.KernelImage(
            k.name, k.kind, k.params, k.payload[:18] + b"\xb7\x00" + k.payload[20:], k.meta
        )
        for k in module.kernels
    ]  # fmt: skip  (e_machine 183: AArch64)
    other = Module(target=module.target, inputs=module.inputs, outputs=module.outputs,
                   tensors=module.tensors, kernels=kernels, calls=module.calls,
                   slots=module.slots, arena_bytes=module.arena_bytes,
                   constants=module.constants)  # fmt: skip
    other.save(tmp_path / "arm.tfm")
    code, _, err = _inspect(tmp_path / "arm.tfm", capsys)
    assert code == 1 and "ELF machine 183 is not this host's" in err


# ---- fuzz: mutate, then load and run in a subprocess ------------------------------------------

DRIVER = r"""
import sys
import numpy as np
kind, path, inp, want = sys.argv[1:5]
try:
    if kind == "module":
        from tensorforge.runtime.module import Module
        got = Module.load(path).run({"x": np.load(inp)}).get("softmax_12")
    else:
        from tensorforge.runtime.device.vta import LoadedProgram, open_device
        from tensorforge.runtime.program import ProgramImage
        image = ProgramImage.load(path)
        outputs, _ = LoadedProgram.load(open_device("sim", image.config), image).run(
            {"A": np.load(inp)})
        got = outputs.get("C")
except (ValueError, RuntimeError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
if got is None or got.shape != np.load(want).shape or not np.array_equal(got, np.load(want)):
    print("WRONG RESULT", file=sys.stderr)
    sys.exit(2)
print("OK")
"""

BAD_VALUES = [None, True, 1.5, "7", [], -1, 0, 1 << 40, 1 << 62, -(1 << 63)]
BAD_DTYPES = ["float64", "int8", "bool", "object", "V8", ">f4", "<U4", ""]
SKIP_KEYS = {"config", "stats", "meta", "label"}  # semantics the digest alone binds (see docs)


def _leaves(obj: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every int and dtype-like string in a header (outside SKIP_KEYS)."""
    found = []
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for key, value in items:
        if key in SKIP_KEYS:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            found.append((*path, key))
        elif isinstance(value, str) and value in container.DTYPES:
            found.append((*path, key))
        else:
            found += _leaves(value, (*path, key))
    return found


def _dict_keys(obj: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every key of every object in a header (for deletions)."""
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key not in SKIP_KEYS:
                found.append((*path, key))
                found += _dict_keys(value, (*path, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found += _dict_keys(value, (*path, i))
    return found


def _get(obj: Any, path: tuple) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def mutate(data: bytes, magic: bytes, code_section: str, rng: random.Random) -> tuple[str, bytes]:
    """One seeded mutant: bit flips anywhere or inside native code (digest kept: damage), a
    cut or appended tail, or a header edit with the digest recomputed (a lying header)."""
    header, payload = split(data, magic)
    choice = rng.randrange(6)
    if choice <= 1:  # flips anywhere in the file, or inside the code section
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            if choice == 0:
                at = rng.randrange(len(out))
            else:
                entry = next(s for s in header["sections"] if s["name"].startswith(code_section))
                at = len(data) - len(payload) + entry["offset"] + rng.randrange(entry["size"])
            out[at] ^= 1 << rng.randrange(8)
        return f"flip{'-code' if choice else ''}", bytes(out)
    if choice == 2:
        if rng.random() < 0.5:
            return "truncate", data[: rng.randrange(len(data))]
        return "append", data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 9)))
    edited_header = copy.deepcopy(header)
    if choice == 3:
        path = rng.choice(_dict_keys(edited_header))
        del _get(edited_header, path[:-1])[path[-1]]
        return f"delete {path}", join(magic, edited_header, payload)
    path = rng.choice(_leaves(edited_header))
    old = _get(edited_header, path)
    if isinstance(old, str):
        new: Any = rng.choice(BAD_DTYPES)
    else:
        new = rng.choice([old + 1, old - 1, old * 2, old // 2, *BAD_VALUES])
    _get(edited_header, path[:-1])[path[-1]] = new
    return f"set {path} {old!r}->{new!r}", join(magic, edited_header, payload)


def _run_mutants(kind: str, data: bytes, magic: bytes, code: str, inp, want, seed: int, count: int,
                 folder: Path) -> dict[str, int]:  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "in.npy", inp)
    np.save(folder / "want.npy", want)
    rng = random.Random(seed)
    mutants = [mutate(data, magic, code, rng) for _ in range(count)]

    def run(k: int) -> tuple[str, subprocess.CompletedProcess | str]:
        what, blob = mutants[k]
        path = folder / f"mutant{k}.bin"
        path.write_bytes(blob)
        try:
            proc = subprocess.run(
                [sys.executable, "-c", DRIVER, kind, str(path), str(folder / "in.npy"),
                 str(folder / "want.npy")],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return what, "timed out"
        return what, proc

    outcomes = {"ok": 0, "error": 0}
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        for k, (what, proc) in enumerate(pool.map(run, range(count))):
            where = f"mutant {k} (seed {seed}, {what})"
            assert not isinstance(proc, str), f"{where}: {proc}"
            assert proc.returncode >= 0, f"{where}: killed by signal {-proc.returncode}"
            assert "Traceback" not in proc.stderr, f"{where}: {proc.stderr}"
            if proc.returncode == 0:
                assert proc.stdout.strip() == "OK", f"{where}: {proc.stdout}"
                outcomes["ok"] += 1
            else:
                assert proc.returncode == 1, f"{where}: exit {proc.returncode}: {proc.stderr}"
                lines = proc.stderr.strip().splitlines()
                assert len(lines) == 1 and lines[0].startswith("error: "), f"{where}: {lines}"
                outcomes["error"] += 1
    return outcomes


def test_fuzzed_modules_fail_cleanly_or_run_correctly(module, tmp_path):
    outcomes = _run_mutants("module", module.to_bytes(), MOD, "kernel:", X,
                            module.run({"x": X})["softmax_12"], 1, 40, tmp_path)  # fmt: skip
    assert outcomes["error"] > 20


def test_fuzzed_images_fail_cleanly_or_run_correctly(kernel, tmp_path):
    outcomes = _run_mutants("image", kernel.image.to_bytes(), PROG, "insns",
                            pack_inp(TINY, kernel.a), _packed_reference(kernel), 2, 40,
                            tmp_path)  # fmt: skip
    assert outcomes["error"] > 20


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_more_fuzzed_modules_and_images(module, kernel, seed, tmp_path):
    _run_mutants("module", module.to_bytes(), MOD, "kernel:", X,
                 module.run({"x": X})["softmax_12"], seed, 150, tmp_path / "m")  # fmt: skip
    _run_mutants("image", kernel.image.to_bytes(), PROG, "insns", pack_inp(TINY, kernel.a),
                 _packed_reference(kernel), seed, 150, tmp_path / "p")  # fmt: skip


def _packed_reference(kernel) -> np.ndarray:
    out, _ = kernel.run_on("sim")  # equals kernel.reference(), checked in test_program_image
    assert np.array_equal(out, kernel.reference())
    from tensorforge.runtime.device.vta import LoadedProgram, open_device

    outputs, _ = LoadedProgram.load(open_device("sim", TINY), kernel.image).run(
        {"A": pack_inp(TINY, kernel.a)}
    )
    return outputs["C"]
