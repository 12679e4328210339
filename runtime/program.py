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

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..hw.config import HWConfig
from ..hw.isa import (
    INSN_BYTES,
    Insn,
    MemInsn,
    Uop,
    decode_program,
    describe,
    elem_bytes,
    encode,
    encode_uops,
)
from . import container

MAGIC = b"TFPROG\x00\x01"
FORMAT_VERSION = 1
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
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


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
            if s.kind not in SLOT_KINDS:
                raise ProgramImageError(
                    f"{where}: slot {s.name!r} kind must be one of {SLOT_KINDS}, not {s.kind!r}"
                )
            if s.nbytes <= 0:
                raise ProgramImageError(f"{where}: slot {s.name!r} must have a positive size")
        for b in (*self.slots, *self.blobs):
            if b.align <= 0 or b.align & (b.align - 1):
                raise ProgramImageError(
                    f"{where}: buffer {b.name!r} alignment must be a power of two, not {b.align}"
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
        return _parse(bytes(data), source)

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, path: str | Path) -> ProgramImage:
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ProgramImageError(f"{path}: cannot read program image: {e.strerror}") from None
        return _parse(data, str(path))


def _replace_dram_base(insn: MemInsn, dram_base: int) -> MemInsn:
    from dataclasses import replace

    return replace(insn, dram_base=dram_base)


def _parse(data: bytes, source: str) -> ProgramImage:
    header, sections = container.unpack(
        data, MAGIC, FORMAT_VERSION, source, "program image", ProgramImageError
    )
    try:
        config = HWConfig.from_dict(header["config"])
        blobs = tuple(
            Blob(b["name"], sections[f"blob:{b['name']}"], int(b["align"])) for b in header["blobs"]
        )
        slots = tuple(
            Slot(
                s["name"], s["kind"], tuple(int(d) for d in s["shape"]), s["dtype"], int(s["align"])
            )
            for s in header["slots"]
        )
        relocs = tuple(Relocation(int(i), str(t)) for i, t in header["relocations"])
        return ProgramImage(config, sections["insns"], blobs, slots, relocs, str(header["name"]))
    except ProgramImageError:
        raise
    except (ValueError, KeyError, TypeError) as e:
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
