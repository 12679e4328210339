"""``tensorforge inspect FILE``: check a module (.tfm) or program image (.tfp) without running it.

tensorforge inspect model.tfm [--kernels]
tensorforge inspect matmul.tfp

A module holds native code (docs/security.md): loading one runs its author's code. This command
reads the file as data only: the container's layout and SHA-256 digest, every size in the header
against the kernels' parameters and the arena, and each kernel by kind (llvm: a well-formed ELF
relocatable object for this machine and CPU; vta: a valid program image; opencl/cuda: a payload
that parses and matches its parameters). It prints a summary and exits 0, or prints one error
line and exits 1. No kernel is linked, compiled or launched.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def add_inspect_command(sub: argparse._SubParsersAction) -> None:
    """Add ``inspect`` to the ``tensorforge`` sub-commands."""
    p = sub.add_parser(
        "inspect",
        help="check a module (.tfm) or program image (.tfp) without running any of its code",
    )
    p.add_argument("file", help="the .tfm or .tfp file")
    p.add_argument("--kernels", action="store_true", help="list every kernel of a module")


def run_inspect(args: argparse.Namespace) -> int:
    """Check ``args.file``; print a summary (exit 0) or one error line (exit 1)."""
    try:
        lines = inspect_file(args.file, kernels=getattr(args, "kernels", False))
    except (ValueError, RuntimeError, OSError) as e:
        print(f"tensorforge: error: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


def inspect_file(path: str | Path, kernels: bool = False) -> list[str]:
    """The summary lines of a checked module or program image.

    Raises:
        ModuleFormatError, ProgramImageError, ValueError: what is wrong, naming the file.
        OSError: when the file cannot be read.
    """
    from .runtime import module as module_mod
    from .runtime import program as program_mod

    path = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise OSError(f"{path}: cannot read: {e.strerror}") from None
    if data.startswith(module_mod.MAGIC):
        return _inspect_module(path, data, kernels)
    if data.startswith(program_mod.MAGIC):
        return _inspect_program(path, data)
    raise ValueError(f"{path}: offset 0: not a TensorForge module or program image (bad magic)")


def _digest_line(data: bytes, magic: bytes, legacy: tuple[int, ...], header: dict[str, Any]) -> str:
    from .runtime import container

    found = container.format_version(data, magic)
    if found in legacy:
        return (
            f"none (format version {found}, written before digests: damage cannot be detected; "
            "load and save it again to add one)"
        )
    return f"{header[container.DIGEST_KEY][:23]}... OK"


def _inspect_module(path: str, data: bytes, list_kernels: bool) -> list[str]:
    from .runtime import container
    from .runtime.checks import check_message
    from .runtime.module import (
        LEGACY_VERSIONS,
        MAGIC,
        OLDER_VERSIONS,
        VERSION,
        Module,
        ModuleFormatError,
    )

    header, _ = container.unpack(data, MAGIC, VERSION, path, "module", ModuleFormatError,
                                 LEGACY_VERSIONS, older=OLDER_VERSIONS)  # fmt: skip
    module = Module.from_bytes(data, path)  # the header's cross-checks (sizes, plan, calls)
    notes = []
    for k in module.kernels:
        try:
            notes.append(_check_kernel(k))
        except (ValueError, RuntimeError) as e:
            raise ModuleFormatError(f"{path}: kernel {k.name!r} ({k.kind}): {e}") from None
    kinds = Counter(k.kind for k in module.kernels)
    tensor = module.tensors
    lines = [
        f"{path}: TensorForge module (format {container.format_version(data, MAGIC)}), "
        f"target {module.target}",
        f"  digest     {_digest_line(data, MAGIC, LEGACY_VERSIONS, header)}",
        f"  inputs     {', '.join(f'{n}: {tensor[n]}' for n in module.inputs)}",
        f"  outputs    {', '.join(f'{n}: {tensor[n]}' for n in module.outputs)}",
        f"  kernels    {len(module.kernels)} "
        f"({', '.join(f'{kind} {n}' for kind, n in sorted(kinds.items()))})",
        f"  calls      {len(module.calls)}",
        f"  checks     {len(module.checks)}"
        + "".join(f"\n    {check_message(c)}" for c in module.checks),
        *_tail_lines(module),
        f"  arena      {module.arena_bytes} B, {len(module.slots)} slots",
        f"  constants  {len(module.constants)}, "
        f"{sum(v.nbytes for v in module.constants.values())} B",
    ]
    if list_kernels:
        for k, note in zip(module.kernels, notes, strict=True):
            params = ", ".join(f"{p.name}: {p.describe()}" for p in k.params)
            lines.append(f"    {k.name} [{k.kind}, {len(k.payload)} B] ({params}): {note}")
    lines.append("  OK: integrity and consistency checked; no code was run")
    return lines


def _tail_lines(module: Any) -> list[str]:
    """The data-dependent tail (`runtime.tail`): its ops and what it reads and gives, read as
    data (its ONNX model is parsed, not run)."""
    if module.tail is None:
        return []
    import onnx

    try:
        model = onnx.load_from_string(module.tail.model)
    except Exception as e:  # noqa: BLE001  (protobuf's DecodeError and others)
        raise ValueError(f"its tail is not an ONNX model: {type(e).__name__}: {e}") from None
    ops = Counter(n.op_type for n in model.graph.node)
    gives = [n for n in module.tail.outputs if n not in module.outputs]
    return [
        f"  tail       {len(model.graph.node)} ONNX nodes run at run time "
        f"({', '.join(f'{op} {n}' for op, n in ops.most_common())})",
        f"    reads    {', '.join(module.tail.inputs) or '(weights only)'}",
        f"    gives    {', '.join(gives)} (shapes known only at run time)",
    ]


def _check_kernel(k: Any) -> str:
    """Check one kernel's payload by kind, reading it as data; returns a short note."""
    if k.kind == "llvm":
        from .runtime.device.cpu.loader import check_host
        from .runtime.module import HOST_IS_ELF, elf_problem

        check_host(str(k.meta.get("triple", "")), str(k.meta.get("features", "")), "its code")
        if not HOST_IS_ELF:
            return "object code for this machine (its format is not checked on this platform)"
        problem = elf_problem(bytes(k.payload))
        if problem is not None:
            raise ValueError(f"object code is malformed: {problem}")
        return "ELF object for this machine"
    if k.kind == "vta":
        from .runtime.device.vta.launch import Operand
        from .runtime.program import ProgramImage

        image = ProgramImage.from_bytes(bytes(k.payload), "its program image")
        operands = [Operand.from_json(o) for o in k.meta.get("operands", [])]
        if len(operands) != len(k.params):
            raise ValueError(f"describes {len(operands)} operands for {len(k.params)} parameters")
        slots = {s.name for s in image.slots}
        missing = sorted({o.slot for o in operands} - slots)
        if missing:
            raise ValueError(
                f"operands bind slots {missing} that its image lacks ({sorted(slots)})"
            )
        return (
            f"program image {image.name!r}, {image.insn_count} instructions ({image.config.name})"
        )
    if k.kind in ("opencl", "cuda"):
        from .runtime.device.gpu import parse_payload

        payload = parse_payload(bytes(k.payload), k.name)  # matched to the params at load
        return f"{payload.get('dialect')} program, {len(payload['kernels'])} launches"
    if k.kind == "loop":
        from .runtime.loop import LoopLaunch, nested, read_body

        with nested(k.name):
            body = read_body(k)
            LoopLaunch(k, body)  # its meta against its parameters and the body's names
            notes = [_check_kernel(inner) for inner in body.kernels]  # (loops in it too)
        kinds = ", ".join(sorted({inner.kind for inner in body.kernels}))
        return (
            f"a loop run at run time: its body a module of {len(notes)} kernels ({kinds}), "
            f"{len(body.calls)} calls, all checked"
        )
    raise ValueError("kernel kind must be one of ['cuda', 'llvm', 'loop', 'opencl', 'vta']")


def _inspect_program(path: str, data: bytes) -> list[str]:
    from .runtime import container
    from .runtime.program import (
        FORMAT_VERSION,
        LEGACY_VERSIONS,
        MAGIC,
        ProgramImage,
        ProgramImageError,
    )

    header, _ = container.unpack(data, MAGIC, FORMAT_VERSION, path, "program image",
                                 ProgramImageError, LEGACY_VERSIONS)  # fmt: skip
    image = ProgramImage.from_bytes(data, path)
    slots = ", ".join(f"{s.name} ({s.kind}) {s.dtype}{list(s.shape)}" for s in image.slots)
    return [
        f"{path}: TensorForge program image (format {container.format_version(data, MAGIC)}) "
        f"{image.name!r}",
        f"  digest       {_digest_line(data, MAGIC, LEGACY_VERSIONS, header)}",
        f"  config       {image.config.name}",
        f"  instructions {image.insn_count}",
        f"  slots        {slots or '(none)'}",
        f"  blobs        {len(image.blobs)}, {sum(len(b.data) for b in image.blobs)} B",
        f"  relocations  {len(image.relocations)}",
        "  OK: integrity and consistency checked; no code was run",
    ]
