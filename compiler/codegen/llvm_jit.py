"""LLVM target machines, the O3 pipeline, host JIT and object files for other triples."""

from __future__ import annotations

import functools
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from ...runtime.device import cpu
from ..target import Target

# ELF e_machine values of the triples we cross-compile for (checked by tests).
ELF_MACHINE = {"x86_64": 62, "armv7": 40, "arm": 40, "aarch64": 183}


@functools.cache
def _init_native() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for name, address in cpu.pool_symbols().items():
        llvm.add_symbol(name, address)


@functools.cache
def _init_all() -> None:
    _init_native()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def target_machine(target: Target | str, jit: bool = False) -> Any:
    """An llvmlite TargetMachine for `target` (the host's CPU and features unless told).

    `jit`: for code MCJIT loads (`JITModule`), in x86-64's large code model. MCJIT maps each
    section on its own, so a kernel's constant pool can land more than 2 GiB from its code in a
    long-lived process whose address space has holes, and the small model's 32-bit RIP-relative
    references then abort the process in LLVM's relocation ("isInt<32>(RealOffset)"). The ELF
    loader maps an object's sections together, so objects keep the small model."""
    target = Target.parse(target)
    if target.kind != "llvm":
        raise ValueError(f"target must be an llvm target, not {str(target)!r}")
    if target.is_host:
        _init_native()
        triple = llvm.get_process_triple()
        native = target.mcpu in ("", "native")
        cpu_name = llvm.get_host_cpu_name() if native else target.mcpu
        features = target.mattr or (llvm.get_host_cpu_features().flatten() if native else "")
        reloc = "pic"
    else:
        _init_all()
        triple, cpu_name, features, reloc = target.triple, target.mcpu, target.mattr, "pic"
    if target.mcpu not in ("", "native") or target.mattr:
        _check_known(target, triple, cpu_name, features)
    codemodel = "large" if jit and triple.startswith("x86_64") else "default"
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu_name, features=features, opt=3, reloc=reloc, codemodel=codemodel
    )


def _check_known(target: Target, triple: str, cpu_name: str, features: str) -> None:
    notes = _llvm_notes(triple, cpu_name, features)
    if "is not a recognized processor" in notes:
        raise ValueError(
            f"-mcpu={cpu_name}: LLVM knows no CPU {cpu_name!r} for {triple} (in "
            f"{str(target)!r}); name one such as 'x86-64-v3', 'skylake' or 'cortex-a72', or "
            "leave -mcpu off for this machine's CPU"
        )
    unknown = [f for f in features.split(",") if f and f"'{f}' is not a recognized" in notes]
    if unknown:
        raise ValueError(f"-mattr: LLVM knows no feature(s) {unknown} for {triple} (in "
                         f"{str(target)!r}); features look like +avx2,+fma")  # fmt: skip


@functools.cache
def _llvm_notes(triple: str, cpu_name: str, features: str) -> str:
    """What LLVM prints on stderr while making a target machine. It ignores an unknown CPU or
    feature with only a note there, then builds for a bare CPU, which on x86-64 aborts the
    whole process ("64-bit code requested on a subtarget that doesn't support it")."""
    from ..native_output import captured

    with captured((2,)) as err:
        llvm.Target.from_triple(triple).create_target_machine(cpu=cpu_name, features=features)
    return err[0]


def vector_registers(target: Target | str = "llvm") -> tuple[int, int]:
    """(float32 lanes per vector register, vector registers) of `target`'s CPU: what a
    register-tiled micro-kernel may hold (`topi.x86.conv2d.register_tile`). The host's
    features unless `-mattr` names them (AVX-512: 16 lanes x 32 zmm; AVX/AVX2: 8 x 16 ymm;
    AArch64: 4 x 32; otherwise SSE's or 32-bit NEON's 4 x 16); another `-mcpu` alone is
    taken as AVX2."""
    target = Target.parse(target)
    if target.triple.startswith("aarch64"):
        return 4, 32
    if target.triple or target.kind != "llvm":
        return 4, 16
    features = target.mattr
    if not features:
        if target.mcpu not in ("", "native"):
            return 8, 16
        features = _host_features()
    words = set(features.split(","))
    if "+avx512f" in words:
        return 16, 32
    return (8, 16) if words & {"+avx", "+avx2"} else (4, 16)


@functools.cache
def _host_features() -> str:
    return llvm.get_host_cpu_features().flatten()


#: x86 features and one each implies (LLVM's own implications, as far as the code generator's
#: choices need them: `target_features` closes a -mattr list under them)
_IMPLIES = {
    "+avx512vnni": "+avx512f", "+avx512bw": "+avx512f", "+avx512vl": "+avx512f",
    "+avx512f": "+avx2", "+avxvnni": "+avx2", "+avx2": "+avx", "+avx": "+sse4.2",
    "+sse4.2": "+sse4.1", "+sse4.1": "+ssse3", "+ssse3": "+sse3", "+sse3": "+sse2",
}  # fmt: skip


def target_features(target: Target | str = "llvm") -> frozenset[str]:
    """The CPU features (LLVM's "+name" words) that code for `target` may rely on, as
    `vector_registers` reads them: -mattr's when given (closed under the x86 implications
    that matter here: +avx512bw gives +avx2 and +sse2), else the host's for the host CPU;
    another -mcpu alone gives "+sse2" where the host is x86-64 (every x86-64 CPU has it; LLVM
    knows the named CPU's features, this function does not) and nothing elsewhere, as does any
    non-host triple. What the code generator picks target instructions by
    (`CodegenOptions.features`: pmaddwd, vpdpbusd) and `graph.strategy.qlinear` its integer
    kernels by: never more than the target machine has."""
    target = Target.parse(target)
    if target.kind != "llvm" or target.triple:
        return frozenset()
    if target.mattr:
        words = {w.strip() for w in target.mattr.split(",")}
    elif target.mcpu not in ("", "native"):
        words = {"+sse2"} if llvm.get_process_triple().startswith("x86_64") else set()
    else:
        words = set(_host_features().split(","))
    words = {w for w in words if w.startswith("+")}
    todo = list(words)
    while todo:
        implied = _IMPLIES.get(todo.pop())
        if implied and implied not in words:
            words.add(implied)
            todo.append(implied)
    return frozenset(words)


def optimize(module: ir.Module | str, tm: Any, context: Any = None) -> Any:
    """Parse, verify and run the O3 pipeline (with loop and SLP vectorization) on `module` (or
    its text), in `context` (an `llvm.create_context()`; default LLVM's global one, which keeps
    the types and constants of every module parsed into it for the life of the process)."""
    mod = llvm.parse_assembly(module if isinstance(module, str) else str(module), context)
    try:
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pb = llvm.create_pass_builder(tm, pto)
        mpm = pb.getModulePassManager()
        try:
            mpm.run(mod, pb)
        finally:
            free_pass_manager(mpm)
    except BaseException:
        # Freed now, not by the garbage collector: a traceback kept in a reference cycle would
        # leave the module and its context to be finalized in any order, and a context freed
        # first deletes the module with it (the module's own free is then a double free).
        mod.close()
        raise
    return mod


def free_pass_manager(mpm: Any) -> None:
    """Free an llvmlite pass manager now. llvmlite's `ModulePassManager` and
    `FunctionPassManager` list `ObjectRef` before `NewPassManager` among their bases, so
    `ObjectRef`'s empty `_dispose` hides the one that deletes the LLVM object: a pass manager
    was never freed, and with it every pass of the O3 pipeline and what each kept of the module
    it ran on (GVN's value tables, InstCombine's worklist, ...), 0.1-0.6 MiB per kernel,
    15.7 MiB over MobileNetV3-small's 74 kernels (heaptrack shows the passes' allocations as
    leaks; malloc's in-use bytes grew by that much). Where an llvmlite resolves
    `_dispose` to its own, closing is enough."""
    if type(mpm)._dispose is not llvm.ffi.ObjectRef._dispose:
        mpm.close()
    elif not mpm.closed:
        llvm.NewPassManager._dispose(mpm)
        mpm.detach()


class JITModule:
    """Machine code for the host, loaded in this process (kept alive by this object)."""

    def __init__(self, module: ir.Module, target: Target | str = "llvm") -> None:
        self.tm = target_machine(target, jit=True)
        self.llvm_module = optimize(module, self.tm)
        self.engine = llvm.create_mcjit_compiler(self.llvm_module, self.tm)
        self.engine.finalize_object()
        self.engine.run_static_constructors()

    def address(self, name: str) -> int:
        addr = self.engine.get_function_address(name)
        if not addr:
            raise KeyError(f"function {name!r} is not in the compiled module")
        return addr

    def assembly(self) -> str:
        """The generated assembly (for inspection: vector registers, FMA instructions)."""
        return self.tm.emit_assembly(self.llvm_module)


def emit_object(module: ir.Module | str, target: Target | str) -> bytes:
    """An ELF relocatable object for `target` (any triple LLVM was built with) from `module`
    or its text."""
    tm = target_machine(target)
    # A context of its own, not the global one that keeps every module's types and constants
    # kernel after kernel (2 MiB of MobileNetV3-small's compile peak). Both are freed here, the
    # module first: LLVM deletes a context's remaining modules with it, so a module outliving
    # its context (the garbage collector's order) would be freed twice.
    context = llvm.create_context()
    try:
        mod = optimize(module, tm, context)
        try:
            return tm.emit_object(mod)
        finally:
            mod.close()
    finally:
        context.close()


def emit_assembly(module: ir.Module, target: Target | str) -> str:
    tm = target_machine(target)
    return tm.emit_assembly(optimize(module, tm))


def elf_machine(obj: bytes) -> tuple[int, int]:
    """(EI_CLASS: 1 = 32-bit, 2 = 64-bit, e_machine) read from an ELF header."""
    if obj[:4] != b"\x7fELF":
        raise ValueError(f"object must start with the ELF magic, not {obj[:4]!r}")
    order = "little" if obj[5] == 1 else "big"
    return obj[4], int.from_bytes(obj[18:20], order)
