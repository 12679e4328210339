"""Program images: build, relocate, save/load with clear errors; the sim device runs them."""

import struct

import numpy as np
import pytest

from tensorforge.demo import build_matmul, pack_inp, unpack_out
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import FinishInsn, GemmInsn, MemInsn, MemType, Opcode
from tensorforge.runtime.device.vta import DeviceError, LoadedProgram, open_device
from tensorforge.runtime.program import (
    MAGIC,
    ProgramBuilder,
    ProgramImage,
    ProgramImageError,
    Relocation,
)

TINY = HWConfig.preset("tiny")


@pytest.fixture(scope="module")
def kernel():
    return build_matmul(TINY, 16, 8, 8, tile_rows=4, seed=5)


def test_save_load_round_trip_runs_identically(kernel, tmp_path):
    path = tmp_path / "mm.tfp"
    kernel.image.save(path)
    loaded = ProgramImage.load(path)
    assert loaded == kernel.image
    device = open_device("sim", TINY)
    outputs, result = LoadedProgram.load(device, loaded).run({"A": pack_inp(TINY, kernel.a)})
    assert np.array_equal(unpack_out(TINY, outputs["C"]), kernel.reference())
    assert result.backend == "sim" and result.stats["insn_count"] == loaded.insn_count


def test_relocations_add_the_buffer_address_in_elements(kernel):
    device = open_device("sim", TINY)
    prog = LoadedProgram.load(device, kernel.image)
    insns = kernel.image.instructions()
    patched = ProgramImage(TINY, prog.image.patch({n: b.addr for n, b in prog.buffers.items()}))
    for r in kernel.image.relocations:
        before, after = insns[r.insn], patched.instructions()[r.insn]
        eb = {MemType.UOP: 4, MemType.INP: 4, MemType.WGT: 16, MemType.ACC: 16, MemType.OUT: 4}
        assert (
            after.dram_base - before.dram_base
            == prog.buffers[r.target].addr // eb[before.memory_type]
        )


def test_a_loaded_program_runs_twice_with_new_inputs(kernel):
    prog = LoadedProgram.load(open_device("sim", TINY), kernel.image)
    for seed in (1, 2):
        a = np.random.default_rng(seed).integers(-128, 128, kernel.a.shape, dtype=np.int8)
        out, _ = prog.run({"A": pack_inp(TINY, a)})
        kernel.a = a
        assert np.array_equal(unpack_out(TINY, out["C"]), kernel.reference())
    prog.free()
    assert prog.device.memory.allocations == []


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: b"NOTAPROG" + d[8:], "offset 0: not a TensorForge program image"),
        (lambda d: d[:10], "offset 8: truncated header"),
        (lambda d: d[:8] + struct.pack("<I", 99) + d[12:], "format version 99 is not a version"),
        (lambda d: d[:12] + struct.pack("<I", 1 << 30) + d[16:], "offset 12: header length"),
        (lambda d: d[:16] + b"]" + d[17:], "offset 16: malformed header: JSONDecodeError"),
        (lambda d: d[:-5], "section 'blob:uops' runs past the file end"),
    ],
)
def test_corrupt_files_get_errors_naming_file_and_offset(kernel, tmp_path, mutate, message):
    path = tmp_path / "bad.tfp"
    path.write_bytes(mutate(kernel.image.to_bytes()))
    with pytest.raises(ProgramImageError, match=f"{path}: .*{message}".replace("(", r"\(")):
        ProgramImage.load(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ProgramImageError, match="cannot read program image: No such file"):
        ProgramImage.load(tmp_path / "nope.tfp")


def test_bad_relocations_are_rejected():
    b = ProgramBuilder(TINY)
    b.emit(GemmInsn(), reloc="A")
    b.emit(FinishInsn())
    with pytest.raises(ProgramImageError, match=r"only LOAD/STORE instructions have a dram_base"):
        b.build()
    b = ProgramBuilder(TINY)
    b.emit(MemInsn(Opcode.LOAD, MemType.INP), reloc="nowhere")
    with pytest.raises(ProgramImageError, match="names unknown buffer 'nowhere'"):
        b.build()
    image = ProgramBuilder(TINY).build()
    with pytest.raises(ProgramImageError, match="relocation targets instruction 3"):
        ProgramImage(TINY, image.insns, relocations=(Relocation(3, "x"),))


def test_device_checks_config_slots_and_inputs(kernel):
    with pytest.raises(DeviceError, match="was built for HWConfig 'tiny'.*device runs 'pynq'"):
        LoadedProgram.load(open_device("sim", "pynq"), kernel.image)
    prog = LoadedProgram.load(open_device("sim", TINY), kernel.image)
    with pytest.raises(DeviceError, match=r"slot 'A' .* must get shape \(16, 2, 1, 4\) and dtype "
                       r"int8, not shape \(16, 8\)"):  # fmt: skip
        prog.run({"A": kernel.a})
    with pytest.raises(
        DeviceError, match=r"takes inputs \['A'\]; missing \['A'\]; unknown \['B'\]"
    ):
        prog.run({"B": kernel.a})
    with pytest.raises(DeviceError, match="pynq"):  # no pynq package, or no bitstream given
        open_device("pynq", TINY)
    with pytest.raises(DeviceError, match="must be one of"):
        open_device("fpga", TINY)


def test_magic_is_versioned():
    assert MAGIC.startswith(b"TFPROG")
