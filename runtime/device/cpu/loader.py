"""Loading compiled host object code (ELF, from `compiler.build.build_object`).

On x86-64 Linux the objects of one module are linked by this package's own ELF loader
(`elf.Image`), without LLVM: importing llvmlite alone costs about 41 MiB of resident memory.
Elsewhere (aarch64 boards, ...), and for an object the ELF loader refuses, they are linked into
one MCJIT engine through llvmlite; `ObjectLoader.kind` says which ("elf" or "mcjit"). Either way
the parallel-loop entry points (`tf_parallel_for`, `tf_parallel_launch`) resolve to the thread
pool's and libc/libm symbols to the process's. The host must have the CPU features the code was
compiled for (`check_host`).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import struct
from collections.abc import Sequence
from typing import Any

from . import elf, pool
from .elf import ElfLinkError, LoaderError

__all__ = ["ElfLinkError", "LoaderError", "ObjectLoader", "check_host", "host_cpu", "host_triple"]


@functools.cache
def _llvm() -> Any:
    """llvmlite's binding, initialized for the host (imported only when it is needed)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for name, address in pool.symbols().items():
        llvm.add_symbol(name, address)
    return llvm


def host_triple() -> str:
    return _llvm().get_process_triple()


def host_cpu() -> tuple[str, str]:
    """(CPU name, feature string) of this machine, as LLVM names them."""
    llvm = _llvm()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


#: LLVM x86 feature names whose /proc/cpuinfo flag is spelled differently
_CPUINFO_RENAMED = {
    "sse3": "pni", "bmi": "bmi1", "lzcnt": "abm", "pclmul": "pclmulqdq", "rdrnd": "rdrand",
    "sahf": "lahf_lm", "sha": "sha_ni", "prfchw": "3dnowprefetch", "crc32": "sse4_2",
    "64bit": "lm", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16",
    "avx512fp16": "avx512_fp16", "avx512vbmi2": "avx512_vbmi2", "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq", "avxvnni": "avx_vnni",
    "avx512vp2intersect": "avx512_vp2intersect",
}  # fmt: skip
#: LLVM x86 features Linux lists in /proc/cpuinfo under the same name ('.' and '-' as '_')
_CPUINFO_SAME = set(
    "adx aes amx-bf16 amx-int8 amx-tile avx avx2 avx512bw avx512cd avx512dq avx512f avx512ifma "
    "avx512vbmi avx512vl bmi2 cldemote clflushopt clwb clzero cmov cx16 cx8 f16c fma fma4 "
    "fsgsbase fxsr gfni invpcid lwp mmx movbe movdir64b movdiri mwaitx pku popcnt rdpid rdpru "
    "rdseed rtm serialize sse sse2 sse4.1 sse4.2 sse4a ssse3 tbm tsxldtrk vaes vpclmulqdq "
    "waitpkg wbnoinvd xop xsave xsavec xsaveopt".split()
)
#: LLVM x86 features of system and special-purpose instructions, which LLVM emits only for their
#: own intrinsics and this compiler's kernels never call (xsaves is even privileged). A host need
#: not have them: Linux leaves some out of /proc/cpuinfo where CPUID reports them (xsaves on
#: AMD EPYC virtual machines), so requiring them refused every kernel built on such a host.
NOT_EMITTED = frozenset(
    "clflushopt cldemote clwb clzero enqcmd fsgsbase fxsr hreset invpcid kl lwp movdir64b "
    "movdiri mwaitx pku ptwrite rdpid rdpru rdrnd rdseed rtm serialize sgx shstk tsxldtrk uintr "
    "waitpkg wbnoinvd widekl xsave xsavec xsaveopt xsaves".split()
)
#: LLVM x86 features Linux does not list, read from CPUID the way LLVM's host detection does:
#: present when every (leaf, subleaf, register (eax ebx ecx edx = 0..3), mask) is non-zero
_CPUID_FEATURES = {
    "prefetchi": [(7, 1, 3, 1 << 14)],
    "avx10.1": [(7, 1, 3, 1 << 19), (0x24, 0, 1, 0xFF)],  # AVX10, version >= 1
    # a kernel may leave xsaves out of /proc/cpuinfo while CPUID has it (seen on a cloud VM)
    "xsaves": [(0xD, 1, 0, 1 << 3)],
}
# cpuid(leaf, subleaf, uint32 out[4]): push rbx; mov eax, edi; mov ecx, esi; mov r8, rdx; cpuid;
# mov [r8], eax; mov [r8+4], ebx; mov [r8+8], ecx; mov [r8+12], edx; pop rbx; ret
_CPUID_CODE = bytes.fromhex("53 89f8 89f1 4989d0 0fa2 418900 41895804 41894808 4189500c 5b c3")


def _host_arch() -> str:
    return "x86_64" if elf.NATIVE else host_triple().split("-")[0]


@functools.cache
def _cpuinfo_flags() -> frozenset[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@functools.cache
def cpuid(leaf: int, subleaf: int = 0) -> tuple[int, int, int, int]:
    """(eax, ebx, ecx, edx) of the CPUID instruction on this x86-64 host."""
    pages = elf.Pages(len(_CPUID_CODE))
    try:
        pages.write(0, _CPUID_CODE)
        pages.protect(0, pages.size, mmap.PROT_READ | mmap.PROT_EXEC)
        out = (ctypes.c_uint32 * 4)()
        proto = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p)
        proto(pages.address)(leaf, subleaf, ctypes.addressof(out))
        return struct.unpack("<4I", bytes(out))
    finally:
        pages.close()


def _has_feature(name: str) -> bool | None:
    """Whether this x86-64 Linux host has the LLVM feature `name` (None: no way to tell here)."""
    if name in _CPUINFO_RENAMED or name in _CPUINFO_SAME:
        flag = _CPUINFO_RENAMED.get(name, name.replace(".", "_").replace("-", "_"))
        return flag in _cpuinfo_flags()
    if name in _CPUID_FEATURES:
        top = cpuid(0)[0]
        return all(
            leaf <= top and cpuid(leaf, sub)[reg] & mask
            for leaf, sub, reg, mask in _CPUID_FEATURES[name]
        )
    return None


@functools.cache  # every kernel of a module carries the same string
def missing_features(features: str) -> tuple[str, ...]:
    """The '+' features of an LLVM feature string that this host lacks (those of `NOT_EMITTED`
    are not required: compiled kernels contain none of their instructions)."""
    need = sorted({f[1:] for f in features.split(",") if f.startswith("+")} - NOT_EMITTED)
    if elf.NATIVE:
        known = {f: _has_feature(f) for f in need}
        if None not in known.values():
            return tuple(f for f in need if not known[f])
    have = {f[1:] for f in host_cpu()[1].split(",") if f.startswith("+")}
    return tuple(f for f in need if f not in have)


def check_host(triple: str, features: str, where: str) -> None:
    """Raise `LoaderError` when code built for (`triple`, `features`) cannot run here."""
    if triple.split("-")[0] != _host_arch():
        raise LoaderError(
            f"{where}: code must be built for this machine ({_host_arch()}), not {triple!r}"
        )
    missing = missing_features(features)
    if missing:
        raise LoaderError(
            f"{where}: this CPU must have the features the code was built for; missing "
            f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}"
        )


class ObjectLoader:
    """Host object files linked together; `address(symbol)` finds a function.

    `kind` is "elf" (this package's loader, x86-64 Linux) or "mcjit" (llvmlite's, elsewhere or
    when the ELF loader refused an object: `fallback_reason` says why).

    Example:
        >>> loader = ObjectLoader([])      # objects from build_object(..., target="llvm")
        >>> loader.symbols()
        []
    """

    def __init__(self, objects: Sequence[bytes], names: Sequence[str] = ()) -> None:
        self._names = list(names)
        self.fallback_reason: str | None = None
        if elf.NATIVE:
            labels = [*self._names, *(f"object {i}" for i in range(len(names), len(objects)))]
            try:
                self._image: elf.Image | None = elf.Image(
                    list(zip(labels, objects, strict=False)), pool.symbols()
                )
                self.kind = "elf"
                return
            except ElfLinkError as exc:
                self.fallback_reason = str(exc)
        self._image, self.kind = None, "mcjit"
        llvm = _llvm()
        triple = llvm.get_process_triple()
        cpu, features = host_cpu()
        tm = llvm.Target.from_triple(triple).create_target_machine(
            cpu=cpu, features=features, opt=3, reloc="pic"
        )
        module = llvm.parse_assembly("")
        module.triple = triple
        self._tm, self._engine = tm, llvm.create_mcjit_compiler(module, tm)
        for obj in objects:
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(bytes(obj)))
        self._engine.finalize_object()

    def close(self) -> None:
        """Unmap the code now ("elf"; MCJIT's lives as long as its engine): no function of it
        may run afterwards. Otherwise it is unmapped when the loader is collected."""
        if self._image is not None:
            self._image.close()

    def symbols(self) -> list[str]:
        return list(self._names)

    def address(self, name: str) -> int:
        if self._image is not None:
            return self._image.address(name)
        addr = self._engine.get_function_address(name)
        if not addr:
            raise LoaderError(f"function {name!r} must be defined in the loaded object code")
        return addr
