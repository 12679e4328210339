"""Loading compiled host object code (ELF, from `compiler.build.build_object`) without the compiler.

The objects of one module are linked into one MCJIT engine; the symbols they need from the
runtime (`tf_parallel_launch` for parallel loops) are registered first, libc/libm ones resolve
from the process. The host must have the CPU features the code was compiled for.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import llvmlite.binding as llvm

from .pool import LAUNCH_SYMBOL, launch_address


class LoaderError(RuntimeError):
    """Object code cannot be loaded on this machine (other triple, missing CPU features)."""


@functools.cache
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.add_symbol(LAUNCH_SYMBOL, launch_address())


def host_triple() -> str:
    return llvm.get_process_triple()


def host_cpu() -> tuple[str, str]:
    """(CPU name, feature string) of this machine, as LLVM names them."""
    _init()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def check_host(triple: str, features: str, where: str) -> None:
    """Raise `LoaderError` when code built for (`triple`, `features`) cannot run here."""
    if triple.split("-")[0] != host_triple().split("-")[0]:
        raise LoaderError(
            f"{where}: code must be built for this machine ({host_triple()}), not {triple!r}"
        )
    have = {f[1:] for f in host_cpu()[1].split(",") if f.startswith("+")}
    need = {f[1:] for f in features.split(",") if f.startswith("+")}
    missing = sorted(need - have)
    if missing:
        raise LoaderError(
            f"{where}: this CPU must have the features the code was built for; missing "
            f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}"
        )


class ObjectLoader:
    """Host object files linked into one engine; `address(symbol)` finds a function.

    Example:
        >>> loader = ObjectLoader([])      # objects from build_object(..., target="llvm")
        >>> loader.symbols()
        []
    """

    def __init__(self, objects: Sequence[bytes], names: Sequence[str] = ()) -> None:
        _init()
        target = llvm.Target.from_triple(host_triple())
        cpu, features = host_cpu()
        self._tm = target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic")
        module = llvm.parse_assembly("")
        module.triple = host_triple()
        self._engine = llvm.create_mcjit_compiler(module, self._tm)
        for obj in objects:
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(bytes(obj)))
        self._engine.finalize_object()
        self._names = list(names)

    def symbols(self) -> list[str]:
        return list(self._names)

    def address(self, name: str) -> int:
        addr = self._engine.get_function_address(name)
        if not addr:
            raise LoaderError(f"function {name!r} must be defined in the loaded object code")
        return addr
