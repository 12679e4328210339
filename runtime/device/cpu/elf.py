"""Relocatable ELF objects: a structural check for any host, and a loader for x86-64 Linux.

`elf_problem` reads an object's bytes and says what is wrong with them (module loading checks
every kernel with it, and so does this loader). `Image` links x86-64 objects as the CPU back-end
emits them (position independent, small code model) into this process without LLVM: their
allocated sections are laid out in one anonymous mapping (code and read-only data, then the GOT
slots and jump stubs, on pages that end read+execute; writable data on their own read+write
pages; never both), symbols resolve to the objects' own definitions first, then to the
`externals` given (the thread pool's entry points), then to the process's libc/libm, and
the relocations are applied. A call to a far external symbol goes through a jump stub in the
mapping (a 32-bit displacement cannot reach libm). Anything else is an `ElfLinkError` naming the
object, section and symbol, raised before any code runs.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import platform
import struct
import sys
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class LoaderError(RuntimeError):
    """Object code cannot be loaded on this machine (other triple, missing CPU features)."""


class ElfLinkError(LoaderError):
    """An object the ELF loader cannot link: a relocation type, symbol or displacement it cannot
    resolve (the message names the object, section and symbol)."""


#: ELF e_machine of the hosts the llvm kernels run on (platform.machine() names)
_ELF_MACHINES = {
    "x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "riscv64": 243, "ppc64le": 21,
    "ppc64": 21, "s390x": 22,
}  # fmt: skip
EM_X86_64 = 62
#: whether this host's object code is ELF (Linux, the BSDs); elsewhere it is not checked here
HOST_IS_ELF = sys.platform.startswith(("linux", "freebsd", "netbsd", "openbsd"))
#: whether `Image` can load this host's object code (x86-64 Linux)
NATIVE = sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")

SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 1, 2, 3, 4, 8, 9
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_TLS = 0x1, 0x2, 0x4, 0x400
SHN_UNDEF, SHN_LORESERVE, SHN_ABS, SHN_COMMON = 0, 0xFF00, 0xFFF1, 0xFFF2
STB_LOCAL, STB_WEAK = 0, 2
_SHDR = struct.Struct("<IIQQQQIIQQ")  # name type flags addr offset size link info align entsize
_SYM = struct.Struct("<IBBHQQ")  # name info other shndx value size
_RELA = struct.Struct("<QQq")  # offset info addend

# x86-64 relocation types: the ones `Image` applies, and the bytes each patches
R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_GOTPCREL, R_X86_64_PC64 = 1, 2, 4, 9, 24
R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX = 41, 42
_GOT_RELOCS = (R_X86_64_GOTPCREL, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX)
_RELOCS = (R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_PC64, *_GOT_RELOCS)
#: bytes an x86-64 relocation patches, by type (R_X86_64_64, PC32, PLT32, 32, 32S, GOTPCREL...)
_X86_64_RELOC_BYTES = {1: 8, 2: 4, 4: 4, 9: 4, 10: 4, 11: 4, 24: 8, 26: 4, 41: 4, 42: 4}
_X86_64_RELOC_NAMES = {
    1: "R_X86_64_64", 2: "R_X86_64_PC32", 4: "R_X86_64_PLT32", 9: "R_X86_64_GOTPCREL",
    10: "R_X86_64_32", 11: "R_X86_64_32S", 24: "R_X86_64_PC64", 25: "R_X86_64_GOTOFF64",
    26: "R_X86_64_GOTPC32", 29: "R_X86_64_GOTPC64", 41: "R_X86_64_GOTPCRELX",
    42: "R_X86_64_REX_GOTPCRELX",
}  # fmt: skip


@dataclass(frozen=True)
class Section:
    name: int  # offset in the section-name table
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int


def host_elf_machine() -> int | None:
    """The ELF e_machine number of this host (None for an architecture not in the table)."""
    return _ELF_MACHINES.get(platform.machine().lower())


def _sections(data: bytes) -> list[Section]:
    e_shoff, e_shnum = struct.unpack_from("<Q", data, 40)[0], struct.unpack_from("<H", data, 60)[0]
    rows = (_SHDR.unpack_from(data, e_shoff + 64 * i) for i in range(e_shnum))
    return [Section(r[0], r[1], r[2], *r[4:]) for r in rows]


def _symbols(data: bytes, symtab: Section) -> list[tuple[int, int, int, int]]:
    """(name offset, info, section index, value) of each symbol in `symtab`."""
    rows = (_SYM.unpack_from(data, symtab.offset + 24 * j) for j in range(symtab.size // 24))
    return [(name, info, shndx, value) for name, info, _, shndx, value, _ in rows]


def _string(data: bytes, table: Section, offset: int) -> str:
    start = table.offset + offset
    end = data.find(b"\0", start, table.offset + table.size)
    return data[start : end if end >= 0 else table.offset + table.size].decode(errors="replace")


def elf_problem(data: bytes, machine: int | None = None) -> str | None:
    """What is wrong with a relocatable ELF object (64-bit, little-endian) for `machine`
    (default: this host's), or None when it is well formed: the header, the section table, every
    section's bytes inside the file, every symbol's name and section, every relocation's symbol
    and place inside its section. Reads the bytes only; never loads them."""
    machine = host_elf_machine() if machine is None else machine
    size = len(data)
    if size < 64 or data[:4] != b"\x7fELF":
        return "not an ELF object (bad magic)"
    if data[4] != 2 or data[5] != 1 or data[6] != 1:
        return "not a 64-bit little-endian ELF object of version 1"
    e_type, e_machine, e_version = struct.unpack_from("<HHI", data, 16)
    e_shoff, _, e_ehsize, _, _, e_shentsize, e_shnum, e_shstrndx = struct.unpack_from(
        "<QIHHHHHH", data, 40
    )
    if e_type != 1:
        return f"ELF type {e_type} is not a relocatable object (1)"
    if machine is not None and e_machine != machine:
        return f"ELF machine {e_machine} is not this host's ({machine}, {platform.machine()})"
    if e_version != 1 or e_ehsize != 64 or e_shentsize != 64:
        return "ELF header sizes are not those of ELF64"
    if not 0 < e_shnum < 0xFF00 or e_shoff + 64 * e_shnum > size or not e_shstrndx < e_shnum:
        return f"section table (offset {e_shoff}, {e_shnum} entries) does not fit the file"
    sections = _sections(data)
    for i, s in enumerate(sections):
        if s.type not in (0, SHT_NOBITS) and s.offset + s.size > size:
            end = s.offset + s.size
            return f"section {i} (bytes [{s.offset}, {end})) runs past the object's {size} B"
        if s.link >= e_shnum or (s.align & (s.align - 1)) or s.align > 1 << 16:
            return f"section {i} has a bad link ({s.link}) or alignment ({s.align})"
    names = sections[e_shstrndx]
    if names.type != SHT_STRTAB:
        return "the section-name table is not a string table"
    for i, s in enumerate(sections):
        if s.name >= max(names.size, 1):
            return f"section {i}'s name lies outside the section-name table"
    for i, s in enumerate(sections):
        if s.type == SHT_SYMTAB:
            strtab = sections[s.link]
            if s.entsize != 24 or s.size % 24 or strtab.type != SHT_STRTAB:
                return f"symbol table {i} has bad entries or string table"
            for j, (name, _, shndx, value) in enumerate(_symbols(data, s)):
                if name >= max(strtab.size, 1):
                    return f"symbol {j}'s name lies outside its string table"
                if 0 < shndx < SHN_LORESERVE and shndx >= e_shnum:
                    return f"symbol {j} names section {shndx} of {e_shnum}"
                if 0 < shndx < SHN_LORESERVE and value > sections[shndx].size:
                    return f"symbol {j} lies past the end of section {shndx}"
    for i, s in enumerate(sections):
        if s.type in (SHT_RELA, SHT_REL):
            width = 24 if s.type == SHT_RELA else 16
            if s.entsize != width or s.size % width or sections[s.link].type != SHT_SYMTAB:
                return f"relocation section {i} has bad entries or symbol table"
            if not 0 < s.info < e_shnum:
                return f"relocation section {i} applies to section {s.info} of {e_shnum}"
            target = sections[s.info].size
            nsyms = sections[s.link].size // 24
            widths = _X86_64_RELOC_BYTES if e_machine == EM_X86_64 else {}
            for j in range(s.size // width):
                r_offset, r_info = struct.unpack_from("<QQ", data, s.offset + width * j)
                if r_offset + widths.get(r_info & 0xFFFFFFFF, 1) > target:
                    return f"relocation {j} of section {i} patches past its target section"
                if r_info >> 32 >= nsyms:
                    return f"relocation {j} of section {i} names symbol {r_info >> 32} of {nsyms}"
    return None


# ---- anonymous memory, through libc ----------------------------------------------------------


@functools.cache
def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]  # fmt: skip
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _munmap(address: int, size: int) -> None:
    _libc().munmap(address, size)


class Pages:
    """Anonymous pages, read+write until `protect`; unmapped by `close` or when collected."""

    def __init__(self, size: int) -> None:
        self.size = -(-max(size, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
        rw, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        address = _libc().mmap(None, self.size, rw, flags, -1, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise LoaderError(f"mapping {self.size} B for code failed: {_errno()}")
        self.address: int = address
        self._unmap = weakref.finalize(self, _munmap, address, self.size)
        self._unmap.atexit = False  # at exit, pool threads may still run the code

    def write(self, offset: int, data: bytes) -> None:
        ctypes.memmove(self.address + offset, data, len(data))

    def protect(self, offset: int, size: int, prot: int) -> None:
        """Set the protection of the pages [offset, offset + size) (page-aligned offset)."""
        if size and _libc().mprotect(self.address + offset, size, prot) != 0:
            raise LoaderError(f"mprotect of the code pages failed: {_errno()}")

    def close(self) -> None:
        self._unmap()


def _errno() -> str:
    return os.strerror(ctypes.get_errno())


@functools.cache
def _libraries() -> list[Any]:
    libs = [ctypes.CDLL(None)]
    for name in ("libm.so.6", "libpthread.so.0"):
        try:
            libs.append(ctypes.CDLL(name))
        except OSError:
            pass
    return libs


def process_symbol(name: str) -> int | None:
    """The address of `name` in this process (libc, libm), or None."""
    for lib in _libraries():
        try:
            return ctypes.cast(lib[name], ctypes.c_void_p).value
        except AttributeError:
            continue
    return None


# ---- linking x86-64 objects --------------------------------------------------------------------


class _Object:
    """One checked object: its sections, their names, its symbols (name, bind, section, value)
    and its relocations by target section."""

    def __init__(self, name: str, data: bytes) -> None:
        problem = elf_problem(data, EM_X86_64)
        if problem is not None:
            raise ElfLinkError(f"{name}: {problem}")
        self.name, self.data = name, data
        self.sections = _sections(data)
        shstrndx = struct.unpack_from("<H", data, 62)[0]
        self.section_names = [_string(data, self.sections[shstrndx], s.name) for s in self.sections]
        symtabs = [s for s in self.sections if s.type == SHT_SYMTAB]
        self.symbols: list[tuple[str, int, int, int]] = []
        if symtabs:
            strtab = self.sections[symtabs[0].link]
            self.symbols = [(_string(data, strtab, n), info >> 4, shndx, value)
                            for n, info, shndx, value in _symbols(data, symtabs[0])]  # fmt: skip

    def relocations(self) -> list[tuple[int, int, int, int, int]]:
        """(target section, offset, type, symbol, addend) of each relocation of a loaded section."""
        out = []
        for s in self.sections:
            if s.type not in (SHT_RELA, SHT_REL) or not self.sections[s.info].flags & SHF_ALLOC:
                continue
            if s.type == SHT_REL:
                raise ElfLinkError(
                    f"{self.where(s.info)}: REL relocations (no addend) are not x86-64's"
                )
            for j in range(s.size // 24):
                offset, info, addend = _RELA.unpack_from(self.data, s.offset + 24 * j)
                out.append((s.info, offset, info & 0xFFFFFFFF, info >> 32, addend))
        return out

    def where(self, section: int, symbol: str | None = None) -> str:
        text = f"{self.name}, section {self.section_names[section]!r}"
        return text if symbol is None else f"{text}, symbol {symbol!r}"


class Image:
    """x86-64 objects linked in one mapping; `address(symbol)` finds a global definition.

    `objects` are (name for messages, ELF bytes); `externals` maps symbol names to addresses
    that are looked up before the process's libraries.
    """

    def __init__(self, objects: Sequence[tuple[str, bytes]], externals: Mapping[str, int]) -> None:
        objs = [_Object(name, bytes(data)) for name, data in objects]
        self._globals = _definitions(objs)
        self._place, sizes = _layout(objs)
        relocs, got, stubs = self._plan(objs, externals)
        # the mapping: sections, GOT slots and stubs (read+execute), then writable sections
        got_start = -(-sizes[False] // 8) * 8
        stub_start = got_start + 8 * len(got)
        self._rw = -(-(stub_start + 8 * len(stubs)) // mmap.PAGESIZE) * mmap.PAGESIZE
        self._pages = Pages(self._rw + sizes[True])
        base, write = self._pages.address, self._pages.write
        slot = {t: base + got_start + 8 * n for n, t in enumerate(got)}
        stub = {t: base + stub_start + 8 * n for n, t in enumerate(stubs)}
        try:
            for i, k in self._place:
                s = objs[i].sections[k]
                if s.type != SHT_NOBITS:
                    write(self._start(i, k), objs[i].data[s.offset : s.offset + s.size])
            for target, at in slot.items():
                write(at - base, struct.pack("<Q", self._address(target)))
            for target, at in stub.items():  # jmp *slot(%rip), int3 padding
                write(
                    at - base, b"\xff\x25" + struct.pack("<i", slot[target] - at - 6) + b"\xcc\xcc"
                )
            for i, sec, offset, rtype, target, addend, name in relocs:
                place = base + self._start(i, sec) + offset
                if rtype in _GOT_RELOCS:
                    value = slot[target] + addend - place
                elif rtype == R_X86_64_PLT32 and target in stub:
                    value = stub[target] + addend - place
                else:
                    value = self._address(target) + addend - (rtype != R_X86_64_64) * place
                if rtype in (R_X86_64_64, R_X86_64_PC64):
                    write(place - base, struct.pack("<Q", value % (1 << 64)))
                elif -(1 << 31) <= value < 1 << 31:
                    write(place - base, struct.pack("<i", value))
                else:
                    raise ElfLinkError(
                        f"{objs[i].where(sec, name)}: {_X86_64_RELOC_NAMES[rtype]} displacement "
                        f"{value:#x} does not fit 32 bits"
                    )
            self._pages.protect(0, self._rw, mmap.PROT_READ | mmap.PROT_EXEC)
        except BaseException:
            self._pages.close()
            raise
        self._addresses = {name: self._address(t) for name, t in self._globals.items()}

    def _plan(self, objs: list[_Object], externals: Mapping[str, int]) -> tuple[list, dict, dict]:
        """Each relocation with its resolved target, and the targets that need a GOT slot
        (GOT relocations, stubs) or a jump stub (PLT32 to a symbol outside the mapping)."""
        targets: dict[tuple[int, int], tuple] = {}  # (object, symbol) -> what it resolves to
        relocs, got, stubs = [], {}, {}  # got, stubs: ordered sets (dicts of None)
        for i, o in enumerate(objs):
            for sec, offset, rtype, sym, addend in o.relocations():
                name, _, shndx, _ = o.symbols[sym] if sym < len(o.symbols) else ("", 0, 0, 0)
                if not name and 0 < shndx < len(o.sections):  # a section symbol
                    name = o.section_names[shndx]
                where = o.where(sec, name)
                if rtype not in _RELOCS:
                    kind = _X86_64_RELOC_NAMES.get(rtype, f"type {rtype}")
                    raise ElfLinkError(f"{where}: relocation {kind} is not supported")
                if (i, sym) not in targets:
                    targets[i, sym] = self._resolve(objs, i, sym, externals, where)
                target = targets[i, sym]
                if rtype in _GOT_RELOCS or rtype == R_X86_64_PLT32 and target[0] == "ext":
                    got[target] = None
                if rtype == R_X86_64_PLT32 and target[0] == "ext":
                    stubs[target] = None
                relocs.append((i, sec, offset, rtype, target, addend, name))
        return relocs, got, stubs

    def _resolve(self, objs: list[_Object], i: int, sym: int, externals: Mapping[str, int],
                 where: str) -> tuple:  # fmt: skip
        """What symbol `sym` of object `i` is: ("sec", object, section, value) in the mapping,
        ("abs", value), or ("ext", name, address) outside it."""
        if sym == 0:
            return ("abs", 0)
        name, bind, shndx, value = objs[i].symbols[sym]
        if shndx == SHN_UNDEF and name in self._globals:
            return self._globals[name]
        if shndx == SHN_ABS:
            return ("abs", value)
        if shndx != SHN_UNDEF:
            if (i, shndx) not in self._place:
                raise ElfLinkError(f"{where}: the symbol lies in a section that is not loaded")
            return ("sec", i, shndx, value)
        address = externals[name] if name in externals else process_symbol(name)
        if address is None:
            if bind == STB_WEAK:
                return ("abs", 0)
            raise ElfLinkError(f"{where}: undefined symbol, not found in the objects or process")
        return ("ext", name, address)

    def _start(self, i: int, k: int) -> int:
        """Offset of section `k` of object `i` in the mapping."""
        writable, start = self._place[i, k]
        return start + (self._rw if writable else 0)

    def _address(self, target: tuple) -> int:
        if target[0] == "sec":
            _, i, k, value = target
            return self._pages.address + self._start(i, k) + value
        return target[-1]

    def address(self, name: str) -> int:
        if name not in self._addresses:
            raise LoaderError(f"function {name!r} must be defined in the loaded object code")
        return self._addresses[name]

    def close(self) -> None:
        """Unmap the code now (no function of it may run afterwards)."""
        self._pages.close()


def _definitions(objs: list[_Object]) -> dict[str, tuple]:
    """The objects' global definitions: name -> ("sec", object, section, value) or ("abs", v).
    A name defined twice is an error unless one of them is weak (the strong one wins)."""
    found: dict[str, tuple] = {}
    weak: dict[str, bool] = {}
    owner: dict[str, str] = {}
    for i, o in enumerate(objs):
        for name, bind, shndx, value in o.symbols:
            if bind == STB_LOCAL or shndx == SHN_UNDEF or not name:
                continue
            if shndx >= SHN_LORESERVE and shndx != SHN_ABS:
                raise ElfLinkError(f"{o.name}: symbol {name!r} is in special section {shndx:#x}")
            if name in found and not weak[name] and bind != STB_WEAK:
                raise ElfLinkError(f"{o.name}: symbol {name!r} is also defined in {owner[name]}")
            if name not in found or weak[name] and bind != STB_WEAK:
                found[name] = ("abs", value) if shndx == SHN_ABS else ("sec", i, shndx, value)
                weak[name], owner[name] = bind == STB_WEAK, o.name
    return found


def _layout(objs: list[_Object]) -> tuple[dict[tuple[int, int], tuple[bool, int]], dict]:
    """Where each allocated section goes: (object, section) -> (writable, offset in its part),
    and the size of each part ({False: read+execute, True: read+write})."""
    place: dict[tuple[int, int], tuple[bool, int]] = {}
    sizes = {False: 0, True: 0}
    for i, o in enumerate(objs):
        for k, s in enumerate(o.sections):
            if not s.flags & SHF_ALLOC:
                continue
            writable = bool(s.flags & SHF_WRITE)
            if s.flags & SHF_TLS or writable and s.flags & SHF_EXECINSTR:
                raise ElfLinkError(f"{o.where(k)}: a TLS or writable code section")
            if s.align > mmap.PAGESIZE:
                raise ElfLinkError(f"{o.where(k)}: alignment {s.align} exceeds a page")
            align = max(s.align, 1)
            place[i, k] = (writable, -(-sizes[writable] // align) * align)
            sizes[writable] = place[i, k][1] + s.size
    return place, sizes
