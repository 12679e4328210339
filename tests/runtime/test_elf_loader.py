"""The CPU back-end's own ELF loader: a saved model runs in a process that never imports
llvmlite, each supported x86-64 relocation links to working code, bad objects are refused
naming the object, section and symbol, and the shipped thread-pool object matches its IR."""

from __future__ import annotations

import ctypes
import gc
import math
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import OnnxModelBuilder
from tensorforge.runtime.device.cpu import elf, loader, pool

NATIVE = pytest.mark.skipif(not elf.NATIVE, reason="the ELF loader runs on x86-64 Linux")

LOCAL_IR = r"""
@table = internal constant [4 x float] [float 1.0, float 2.0, float 3.0, float 4.0]
define float @lookup(i32 %i) {
  %p = getelementptr [4 x float], ptr @table, i32 0, i32 %i
  %v = load float, ptr %p
  ret float %v
}
"""
IR = (
    LOCAL_IR
    + r"""
@counter = internal global i32 7
@ext_value = external global i32
@offset = global i64 sub (i64 ptrtoint (ptr @table to i64), i64 ptrtoint (ptr @offset to i64))
declare float @tanhf(float)
define ptr @table_at() {
  ret ptr @table
}
define i32 @bump() {
  %v = load i32, ptr @counter
  %v1 = add i32 %v, 1
  store i32 %v1, ptr @counter
  ret i32 %v1
}
define i32 @read_ext() {
  %v = load i32, ptr @ext_value
  ret i32 %v
}
define float @tanh(float %x) {
  %y = call float @tanhf(float %x)
  ret float %y
}
"""
)


def emit(ir: str, reloc: str = "pic", codemodel: str = "small") -> bytes:
    """`ir` built by LLVM for generic x86-64 Linux."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(ir)
    target = llvm.Target.from_triple("x86_64-unknown-linux-gnu")
    tm = target.create_target_machine(cpu="x86-64", opt=2, reloc=reloc, codemodel=codemodel)
    return tm.emit_object(mod)


def reloc_types(obj: bytes) -> dict[int, list[tuple[int, int]]]:
    """{relocation type: [(file offset of its r_info, symbol name)]} of an object."""
    out: dict[int, list] = {}
    o = elf._Object("t", obj)
    for s in o.sections:
        if s.type == elf.SHT_RELA:
            for j in range(s.size // 24):
                at = s.offset + 24 * j + 8
                (info,) = struct.unpack_from("<Q", obj, at)
                out.setdefault(info & 0xFFFFFFFF, []).append((at, o.symbols[info >> 32][0]))
    return out


def with_type(obj: bytes, at: int, rtype: int) -> bytes:
    (info,) = struct.unpack_from("<Q", obj, at)
    return obj[:at] + struct.pack("<Q", (info >> 32) << 32 | rtype) + obj[at + 8 :]


def check_functions(image: elf.Image, ext_value: ctypes.c_int32) -> None:
    """The four functions of IR, run: each reads what its relocations point at."""
    lookup = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int32)(image.address("lookup"))
    bump = ctypes.CFUNCTYPE(ctypes.c_int32)(image.address("bump"))
    read_ext = ctypes.CFUNCTYPE(ctypes.c_int32)(image.address("read_ext"))
    tanh = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(image.address("tanh"))
    assert [lookup(i) for i in range(4)] == [1.0, 2.0, 3.0, 4.0]
    assert (bump(), bump()) == (8, 9)  # .data is writable
    ext_value.value = 1234
    assert read_ext() == 1234
    assert tanh(0.5) == pytest.approx(math.tanh(0.5), rel=1e-6)  # libm through a stub
    table_at = ctypes.CFUNCTYPE(ctypes.c_void_p)(image.address("table_at"))()
    (offset,) = struct.unpack("<q", ctypes.string_at(image.address("offset"), 8))
    assert offset == table_at - image.address("offset")  # PC64: @table - @offset


@NATIVE
@pytest.mark.parametrize("reloc, codemodel", [("pic", "small"), ("static", "large")])
def test_each_supported_relocation_links_working_code(reloc, codemodel):
    obj = emit(IR, reloc, codemodel)
    types = reloc_types(obj)
    if reloc == "pic":  # what the back-end emits, plus the GOT for an external variable
        assert {2, 4, 24, 42} <= types.keys()
    else:  # absolute 64-bit addresses of data, code and external symbols
        assert {1, 24} <= types.keys()
    ext_value = ctypes.c_int32(0)
    image = elf.Image([("ir.o", obj)], {"ext_value": ctypes.addressof(ext_value)})
    check_functions(image, ext_value)
    image.close()


@NATIVE
@pytest.mark.parametrize("rtype", [elf.R_X86_64_GOTPCREL, elf.R_X86_64_GOTPCRELX])
def test_got_relocations_compute_the_slot_address(rtype):
    """GOTPCREL, GOTPCRELX and REX_GOTPCRELX differ only in what a linker may relax."""
    obj = emit(IR)
    (at, name), *_ = reloc_types(obj)[elf.R_X86_64_REX_GOTPCRELX]
    assert name == "ext_value"
    ext_value = ctypes.c_int32(0)
    image = elf.Image(
        [("ir.o", with_type(obj, at, rtype))], {"ext_value": ctypes.addressof(ext_value)}
    )
    check_functions(image, ext_value)


def _maps(lo: int, hi: int) -> list[str]:
    """The permissions of this process's mappings that overlap [lo, hi)."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            if start < hi and lo < end:
                out.append(perms)
    return out


@NATIVE
def test_code_pages_end_read_execute_data_pages_read_write_and_unmap_on_close_or_collection():
    image = elf.Image([("ir.o", emit(IR))], {"ext_value": 0})
    lo, hi = image._pages.address, image._pages.address + image._pages.size
    perms = _maps(lo, hi)
    assert perms and all(p in ("r-xp", "rw-p") for p in perms) and "r-xp" in perms
    image.close()
    assert _maps(lo, hi) == []
    image = elf.Image([("ir.o", emit(IR))], {"ext_value": 0})
    lo, hi = image._pages.address, image._pages.address + image._pages.size
    del image  # collected: unmapped too
    gc.collect()
    assert _maps(lo, hi) == []


@NATIVE
def test_bad_objects_are_refused_naming_object_section_and_symbol():
    obj = emit(IR)
    (at, name), *_ = reloc_types(obj)[elf.R_X86_64_PLT32]
    with pytest.raises(elf.ElfLinkError, match=r"ir\.o, section '\.text', symbol 'tanhf': "
                       r"relocation R_X86_64_32 is not supported"):  # fmt: skip
        elf.Image([("ir.o", with_type(obj, at, 10))], {"ext_value": 0})
    with pytest.raises(elf.ElfLinkError, match=r"ir\.o, section '\.text', symbol 'ext_value': "
                       "undefined symbol"):  # fmt: skip
        elf.Image([("ir.o", obj)], {})
    (at, _), *_ = reloc_types(obj)[elf.R_X86_64_REX_GOTPCRELX]  # ext_value: make it direct
    with pytest.raises(elf.ElfLinkError, match=r"symbol 'ext_value': R_X86_64_PC32 displacement"):
        elf.Image([("ir.o", with_type(obj, at, elf.R_X86_64_PC32))], {"ext_value": 0x1000})
    assert issubclass(elf.ElfLinkError, loader.LoaderError)
    with pytest.raises(elf.ElfLinkError, match=r"other\.o: symbol '\w+' is also defined in ir\.o"):
        elf.Image([("ir.o", obj), ("other.o", obj)], {"ext_value": 0})


@NATIVE
def test_system_features_the_os_hides_are_not_required(monkeypatch):
    """Linux may leave xsaves out of /proc/cpuinfo while CPUID (and so LLVM's host detection)
    reports it; kernels never contain such instructions, so code built here must load here.
    A vector feature the host lacks is still refused."""
    flags = loader._cpuinfo_flags() - {"xsaves", "avx512f"}
    monkeypatch.setattr(loader, "_cpuinfo_flags", lambda: flags)
    loader.missing_features.cache_clear()
    try:
        assert loader.missing_features("+sse2,+xsaves,+xsave") == ()
        assert loader.missing_features("+sse2,+avx512f,+xsaves") == ("avx512f",)
        with pytest.raises(loader.LoaderError, match="missing avx512f"):
            loader.check_host(loader.host_triple(), "+avx512f,+xsaves", "kernel 'k'")
    finally:
        loader.missing_features.cache_clear()


@NATIVE
def test_an_object_the_elf_loader_refuses_falls_back_to_mcjit():
    obj = emit(LOCAL_IR, "pic", "large")  # GOTOFF64, GOTPC64: MCJIT links them, elf.py not
    code = loader.ObjectLoader([obj], ["lookup"])
    assert code.kind == "mcjit" and "R_X86_64_GOTPC64 is not supported" in code.fallback_reason
    lookup = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int32)(code.address("lookup"))
    assert lookup(2) == 3.0


@NATIVE
def test_the_host_features_read_without_llvm_are_llvms():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    for name, has in llvm.get_host_cpu_features().items():
        if name in loader.NOT_EMITTED:  # not required; Linux may hide some (xsaves in VMs)
            continue
        ours = loader._has_feature(name)
        assert ours is None or ours == has, name
    _, ebx, ecx, edx = loader.cpuid(0)
    with open("/proc/cpuinfo") as f:
        vendor = next(line.split(":")[1].strip() for line in f if line.startswith("vendor_id"))
    assert struct.pack("<3I", ebx, edx, ecx).decode() == vendor


def test_the_shipped_pool_object_is_built_from_todays_ir():
    """Fails when the pool IR changes without `python -m tensorforge.runtime.device.cpu.pool
    --emit` (the recorded hash, not the object's bytes: LLVM versions differ)."""
    recorded = pool.SHIPPED_DIGEST.read_text().split()[0]
    assert recorded == pool.ir_digest(pool.pool_ir("x86_64"))
    assert elf.elf_problem(pool.SHIPPED_OBJECT.read_bytes(), elf.EM_X86_64) is None
    assert pool._pool().kind == ("elf" if elf.NATIVE else "mcjit")


# ---- a real model, in a process where llvmlite cannot be imported ---------------------------

BLOCK_LLVMLITE = """
import sys
class _NoLLVM:
    def find_spec(self, name, path=None, target=None):
        if name == "llvmlite" or name.startswith("llvmlite."):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, _NoLLVM())
"""

CHILD = """
import sys
import numpy as np
from tensorforge.runtime.module import Module
from tensorforge.runtime.device.cpu import pool
module = Module.load(sys.argv[1])
out = module.run({"x": np.load(sys.argv[2])})
np.save(sys.argv[3], next(iter(out.values())))
assert module._launches["__owner__"].kind == "elf" and pool._pool().kind == "elf"
assert not [m for m in sys.modules if m.split(".")[0] == "llvmlite"], "llvmlite was imported"
"""


def tanh_net() -> object:
    """Convolutions (parallel loops), atanf and powf from libm (float32 tanh is vector code of
    our own since 2026-11-29), a dense layer."""
    b = OnnxModelBuilder("tanh_net")
    x = b.input("x", (1, 3, 16, 16))
    y = b.op("Atan", [b.conv_bn(x, 3, 16, 3)])
    y = b.op("Add", [b.op("Abs", [y]), b.const(np.float32(1))])
    y = b.op("Pow", [y, b.const(np.float32(1.7))])
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    return b.model([b.dense(y, 16, 10)])


@NATIVE
def test_a_saved_model_runs_in_a_process_that_never_imports_llvmlite(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model = tanh_net()
    module = tensorforge.compile(model)
    externals = set()
    for k in module.kernels:
        o = elf._Object(k.name, k.payload)
        externals |= {n for n, _, shndx, _ in o.symbols if n and shndx == elf.SHN_UNDEF}
    assert {"atanf", "powf", pool.FOR_SYMBOL} <= externals
    module.save(tmp_path / "m.tfm")
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(textwrap.dedent(BLOCK_LLVMLITE))
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    args = [str(tmp_path / n) for n in ("m.tfm", "x.npy", "y.npy")]
    run = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)
