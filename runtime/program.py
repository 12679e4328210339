"""Program images: what an accelerator kernel compiles to (DESIGN.md contract 3).

An image holds the encoded instruction stream, constant blobs (micro-ops, pre-packed weights),
a table of buffer slots (inputs, outputs, scratch) and relocations: each relocation names a
LOAD/STORE instruction whose ``dram_base`` is relative to a blob or slot, and the runtime adds that
buffer's address (in elements of the instruction's memory_type) once it has placed the buffer in
device memory. The same image runs unchanged on every device backend; it is tied to one HWConfig,
because the ISA's field widths depend on it.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> from tensorforge.hw.isa import FinishInsn
    >>> b = ProgramBuilder(HWConfig.preset("tiny"), name="empty")
    >>> _ = b.emit(FinishInsn())
    >>> image = b.build()
    >>> ProgramImage.from_bytes(image.to_bytes()) == image
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..hw.config import HWConfig
from ..hw.isa import (
    INSN_BYTES,
    Insn,
    MemInsn,
    MemType,
    Opcode,
    Uop,
    decode_program,
    describe,
    elem_bytes,
    encode,
    encode_uops,
)
from . import container

MAGIC = b"TFPROG\x00\x01"
FORMAT_VERSION = 2  # 2: the container carries an integrity digest
LEGACY_VERSIONS = (1,)  # read without a digest (written before it existed): docs/security.md
MAX_ALIGN = 1 << 20
MAX_NAME = 200  # characters in a slot name
SLOT_KINDS = ("input", "output", "scratch")
UOP_BLOB = "uops"


class ProgramImageError(ValueError):
    """A malformed program image, in memory or in a file (the message names where)."""


@dataclass(frozen=True)
class Slot:
    """A buffer the runtime places in device memory: an input, an output or scratch space.

    ``shape`` and ``dtype`` describe the bytes as the kernel lays them out (already packed into
    the accelerator's blocked layout); ``nbytes`` follows from them.
    """

    name: str
    kind: str
    shape: tuple[int, ...]
    dtype: str = "int8"
    align: int = 256

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize  # exact: Python ints


def slot_name_problem(name: Any) -> str | None:
    """Why `name` cannot name a slot, or None. Slot names become file names (`tensorforge sim
    run --output-dir D` writes D/NAME.npy), so they must be plain names: a non-empty string of
    at most MAX_NAME characters without '/', '\\', ':', '..', NUL or other control characters,
    and not '.'."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) > MAX_NAME:
        return f"must have at most {MAX_NAME} characters"
    if name == "." or ".." in name:
        return "must not be '.' or contain '..'"
    bad = sorted({c for c in name if c in "/\\:" or ord(c) < 32 or ord(c) == 127})
    if bad:
        return f"must be a plain file name, without {''.join(repr(c)[1:-1] for c in bad)!r}"
    return None


@dataclass(frozen=True)
class Blob:
    """Constant bytes placed in device memory once per load (micro-ops, packed weights)."""

    name: str
    data: bytes
    align: int = 256


@dataclass(frozen=True)
class Relocation:
    """Instruction ``insn`` has a dram_base relative to buffer ``target`` (a slot or blob)."""

    insn: int
    target: str


@dataclass(frozen=True)
class ProgramImage:
    """An accelerator program: instructions, blobs, slots and relocations for one HWConfig."""

    config: HWConfig
    insns: bytes
    blobs: tuple[Blob, ...] = ()
    slots: tuple[Slot, ...] = ()
    relocations: tuple[Relocation, ...] = ()
    name: str = "program"
    _decoded: list[Insn] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._validate()

    @property
    def insn_count(self) -> int:
        return len(self.insns) // INSN_BYTES

    def instructions(self) -> list[Insn]:
        if not self._decoded:
            self._decoded.extend(decode_program(self.insns, self.config))
        return list(self._decoded)

    def buffer(self, name: str) -> Slot | Blob:
        for b in (*self.slots, *self.blobs):
            if b.name == name:
                return b
        raise KeyError(f"program {self.name!r} has no slot or blob named {name!r}")

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random data for every input slot (for timing runs and smoke tests)."""
        rng = np.random.default_rng(seed)
        out = {}
        for slot in self.slots:
            if slot.kind == "input":
                dtype = np.dtype(slot.dtype)
                if dtype.kind in "iu":
                    info = np.iinfo(dtype)
                    out[slot.name] = rng.integers(info.min, info.max, slot.shape, dtype, True)
                else:
                    out[slot.name] = rng.standard_normal(slot.shape).astype(dtype)
        return out

    def _validate(self) -> None:
        where = f"program {self.name!r}"
        if len(self.insns) % INSN_BYTES:
            raise ProgramImageError(
                f"{where}: instruction bytes must be a multiple of {INSN_BYTES}, not "
                f"{len(self.insns)}"
            )
        names = [b.name for b in (*self.slots, *self.blobs)]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ProgramImageError(f"{where}: buffer names must be unique, not repeated {dupes}")
        for s in self.slots:
            problem = slot_name_problem(s.name)
            if problem:
                raise ProgramImageError(f"{where}: slot name {s.name!r} {problem}")
            if s.kind not in SLOT_KINDS:
                raise ProgramImageError(
                    f"{where}: slot {s.name!r} kind must be one of {SLOT_KINDS}, not {s.kind!r}"
                )
            try:
                container.check_array_spec(s.shape, s.dtype, f"{where}: slot {s.name!r}")
            except ValueError as e:
                raise ProgramImageError(str(e)) from None
            if s.nbytes <= 0:
                raise ProgramImageError(f"{where}: slot {s.name!r} must have a positive size")
        for b in (*self.slots, *self.blobs):
            if not isinstance(b.name, str):
                raise ProgramImageError(f"{where}: buffer names must be strings, not {b.name!r}")
            if (
                not isinstance(b.align, int)
                or not 0 < b.align <= MAX_ALIGN
                or b.align & (b.align - 1)
            ):
                raise ProgramImageError(
                    f"{where}: buffer {b.name!r} alignment must be a power of two of at most "
                    f"{MAX_ALIGN}, not {b.align}"
                )
        insns = self.instructions()
        for r in self.relocations:
            if not 0 <= r.insn < len(insns):
                raise ProgramImageError(
                    f"{where}: relocation targets instruction {r.insn}, but the program has "
                    f"{len(insns)}"
                )
            insn = insns[r.insn]
            if not isinstance(insn, MemInsn):
                raise ProgramImageError(
                    f"{where}: relocation of instruction {r.insn} ({describe(insn)}): only "
                    "LOAD/STORE instructions have a dram_base"
                )
            if r.target not in names:
                raise ProgramImageError(
                    f"{where}: relocation of instruction {r.insn} names unknown buffer "
                    f"{r.target!r}; buffers: {names}"
                )
            target = self.buffer(r.target)
            eb = elem_bytes(self.config, insn.memory_type)
            if target.align % eb:
                raise ProgramImageError(
                    f"{where}: buffer {r.target!r} (align {target.align}) is addressed by "
                    f"instruction {r.insn} ({describe(insn)}) in {eb}-byte elements: its "
                    f"alignment must be a multiple of {eb}"
                )

    def patch(self, addresses: dict[str, int]) -> bytes:
        """The instruction bytes with each relocation's buffer address added to its dram_base."""
        insns = self.instructions()
        for r in self.relocations:
            insn = insns[r.insn]
            assert isinstance(insn, MemInsn)
            eb = elem_bytes(self.config, insn.memory_type)
            addr = addresses[r.target]
            if addr % eb:
                raise ProgramImageError(
                    f"buffer {r.target!r} at {addr:#x} is not aligned to {eb} bytes"
                )
            insns[r.insn] = _replace_dram_base(insn, insn.dram_base + addr // eb)
        return b"".join(encode(insn, self.config, i) for i, insn in enumerate(insns))

    # ---- files ----------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        header = {
            "name": self.name,
            "config": self.config.to_dict(),
            "blobs": [{"name": b.name, "align": b.align} for b in self.blobs],
            "slots": [
                {
                    "name": s.name,
                    "kind": s.kind,
                    "shape": list(s.shape),
                    "dtype": s.dtype,
                    "align": s.align,
                }
                for s in self.slots
            ],  # fmt: skip
            "relocations": [[r.insn, r.target] for r in self.relocations],
        }
        sections = [("insns", self.insns), *((f"blob:{b.name}", b.data) for b in self.blobs)]
        return container.pack(MAGIC, FORMAT_VERSION, header, sections)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> ProgramImage:
        container.check_buffer(data, source, "program image")
        return _parse(bytes(data), source)

    def save(self, path: str | Path) -> None:
        """Write the image to one file (magic TFPROG, JSON header with a SHA-256 digest,
        sections), atomically: readers see the old file or the new one, never a mix."""
        container.write_atomic(path, self.to_bytes())

    @classmethod
    def load(cls, path: str | Path) -> ProgramImage:
        """Read a file written by `save`: its digest is checked (damage is refused) and the
        image validated (slot names and sizes, relocation targets); `LoadedProgram.load` keeps
        every DMA inside its buffer.

        Raises:
            ProgramImageError: naming the file and what is wrong.
        """
        path = container.file_path(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ProgramImageError(f"{path}: cannot read program image: {e.strerror}") from None
        return _parse(data, str(path))


def _replace_dram_base(insn: MemInsn, dram_base: int) -> MemInsn:
    from dataclasses import replace

    return replace(insn, dram_base=dram_base)


def _int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{where} must be an integer, not {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{where} must be a string, not {value!r}")
    return value


def _slot_dtype(cfg: HWConfig, memory_type: MemType) -> str | None:
    """The dtype of the values an instruction of `memory_type` moves (None when it has none
    numpy can name: micro-ops, sub-byte widths)."""
    bits = {
        MemType.INP: cfg.inp_width,
        MemType.WGT: cfg.wgt_width,
        MemType.ACC: cfg.acc_width,
        MemType.ACC_8BIT: 8,
        MemType.OUT: cfg.out_width,
    }.get(memory_type)
    return f"int{bits}" if bits in (8, 16, 32, 64) else None


def _check_slot_dtypes(image: ProgramImage) -> None:
    """A slot's dtype is the one its instructions move (int8 for INP/WGT/OUT of 8-bit configs,
    the accumulator width for ACC): the header cannot reinterpret what the program computes.
    Checked for images read from files."""
    insns = image.instructions()
    kinds = {s.name: s for s in image.slots}
    for r in image.relocations:
        insn = insns[r.insn]
        slot = kinds.get(r.target)
        if slot is None or not isinstance(insn, MemInsn):
            continue
        want = _slot_dtype(image.config, insn.memory_type)
        if want is not None and slot.dtype != want:
            raise ProgramImageError(
                f"program {image.name!r}: slot {slot.name!r} holds {want} values (instruction "
                f"{r.insn}, {describe(insn)}), not {slot.dtype}"
            )


def _check_outputs_written(image: ProgramImage) -> None:
    """Every byte of every output slot is written by a STORE relocated to it, so a run never
    returns bytes the program did not write (stale device memory). Checked for images read from
    files; the instruction stream has no loops, so the stores are all there is."""
    insns = image.instructions()
    starts: dict[str, list[np.ndarray]] = {}
    ends: dict[str, list[np.ndarray]] = {}
    for r in image.relocations:
        insn = insns[r.insn]
        if isinstance(insn, MemInsn) and insn.opcode == Opcode.STORE and insn.x_size:
            eb = elem_bytes(image.config, insn.memory_type)
            rows = (insn.dram_base + np.arange(insn.y_size, dtype=np.int64) * insn.x_stride) * eb
            starts.setdefault(r.target, []).append(rows)
            ends.setdefault(r.target, []).append(rows + insn.x_size * eb)
    for slot in image.slots:
        if slot.kind != "output":
            continue
        covered = 0
        if slot.name in starts:
            lo, hi = np.concatenate(starts[slot.name]), np.concatenate(ends[slot.name])
            order = np.argsort(lo, kind="stable")
            lo, reach = lo[order], np.maximum.accumulate(hi[order])
            gaps = np.nonzero(lo[1:] > reach[:-1])[0]
            if lo[0] > 0:
                covered = 0
            elif len(gaps):
                covered = int(reach[gaps[0]])
            else:
                covered = int(reach[-1])
        if covered < slot.nbytes:
            raise ProgramImageError(
                f"program {image.name!r}: output slot {slot.name!r} has {slot.nbytes} bytes, but "
                f"its STOREs write only bytes [0, {covered}) without a gap: a run would return "
                "bytes the program never wrote"
            )


def _parse(data: bytes, source: str) -> ProgramImage:
    header, sections = container.unpack(
        data, MAGIC, FORMAT_VERSION, source, "program image", ProgramImageError, LEGACY_VERSIONS
    )
    try:
        config = HWConfig.from_dict(header["config"])
        blobs = tuple(
            Blob(
                _str(b["name"], "blob name"),
                sections[f"blob:{b['name']}"],
                _int(b["align"], f"blob {b['name']!r} align"),
            )
            for b in header["blobs"]
        )
        slots = tuple(
            Slot(
                _str(s["name"], "slot name"),
                _str(s["kind"], f"slot {s['name']!r} kind"),
                tuple(_int(d, f"slot {s['name']!r} shape") for d in s["shape"]),
                _str(s["dtype"], f"slot {s['name']!r} dtype"),
                _int(s["align"], f"slot {s['name']!r} align"),
            )
            for s in header["slots"]
        )
        relocs = tuple(
            Relocation(_int(i, "relocation instruction"), _str(t, "relocation target"))
            for i, t in header["relocations"]
        )
        image = ProgramImage(
            config, sections["insns"], blobs, slots, relocs, _str(header["name"], "name")
        )
        _check_slot_dtypes(image)
        _check_outputs_written(image)
        return image
    except ProgramImageError as e:
        if str(e).startswith(source):
            raise
        raise ProgramImageError(f"{source}: {e}") from None
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        # Missing keys, wrong types, bad configs: name the header.
        raise container.header_error(source, len(MAGIC), e, ProgramImageError) from None


class ProgramBuilder:
    """Assembles a program image by hand (tests, the demo) or from the compiler's code generator.

    Instructions that address DRAM take ``reloc=`` the name of the slot or blob their dram_base is
    relative to. Micro-ops go into one blob, ``uops``; ``add_uops`` returns their element offset.
    """

    def __init__(self, cfg: HWConfig, name: str = "program") -> None:
        self.cfg = cfg
        self.name = name
        self.insns: list[Insn] = []
        self.relocations: list[Relocation] = []
        self.slots: list[Slot] = []
        self.blobs: list[Blob] = []
        self.uops: list[Uop] = []

    def slot(self, name: str, kind: str, shape: tuple[int, ...], dtype: str = "int8") -> str:
        problem = slot_name_problem(name)
        if problem:
            raise ProgramImageError(f"program {self.name!r}: slot name {name!r} {problem}")
        self.slots.append(Slot(name, kind, tuple(shape), str(np.dtype(dtype)), self._align()))
        return name

    def blob(self, name: str, data: bytes | np.ndarray) -> str:
        raw = np.ascontiguousarray(data).tobytes() if isinstance(data, np.ndarray) else bytes(data)
        self.blobs.append(Blob(name, raw, self._align()))
        return name

    def add_uops(self, uops: list[Uop]) -> int:
        """Append micro-ops to the uop blob; returns the offset of the first, in micro-ops."""
        start = len(self.uops)
        self.uops.extend(uops)
        return start

    def emit(self, insn: Insn, reloc: str | None = None) -> int:
        """Append an instruction; returns its index."""
        self.insns.append(insn)
        if reloc is not None:
            self.relocations.append(Relocation(len(self.insns) - 1, reloc))
        return len(self.insns) - 1

    def build(self) -> ProgramImage:
        blobs = list(self.blobs)
        if self.uops:
            blobs.append(Blob(UOP_BLOB, encode_uops(self.uops, self.cfg), self._align()))
        insns = b"".join(encode(insn, self.cfg, i) for i, insn in enumerate(self.insns))
        return ProgramImage(
            self.cfg, insns, tuple(blobs), tuple(self.slots), tuple(self.relocations), self.name
        )

    def _align(self) -> int:
        """Alignment that suits every element size of the config (and a cache line)."""
        c = self.cfg
        sizes = (c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes, c.out_elem_bytes, 64)
        return max(sizes)
