"""A program image's DMAs must stay inside the slot or blob each one is relocated to: a STORE
past its output slot or a LOAD from a neighbouring buffer is refused before anything runs."""

from __future__ import annotations

import dataclasses

import pytest

from tensorforge.demo import build_matmul
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import MemInsn, MemType, Opcode, encode
from tensorforge.runtime.device.vta import open_device
from tensorforge.runtime.device.vta.base import DeviceError, LoadedProgram
from tensorforge.runtime.program import ProgramImage

TINY = HWConfig.preset("tiny")


def _edited(image: ProgramImage, pick, **changes) -> ProgramImage:
    insns = image.instructions()
    index = next(i for i, insn in enumerate(insns) if pick(insn))
    insns[index] = dataclasses.replace(insns[index], **changes)
    raw = b"".join(encode(insn, image.config, i) for i, insn in enumerate(insns))
    return ProgramImage(image.config, raw, image.blobs, image.slots, image.relocations, image.name)


def _is(opcode, memory_type):
    return lambda i: isinstance(i, MemInsn) and i.opcode == opcode and i.memory_type == memory_type


def test_a_store_past_its_output_slot_is_refused() -> None:
    kern = build_matmul(TINY, 4, 32, 16, shift=5)
    store = next(i for i in kern.image.instructions() if _is(Opcode.STORE, MemType.OUT)(i))
    bad = _edited(kern.image, _is(Opcode.STORE, MemType.OUT), dram_base=store.dram_base + 1)
    device = open_device("sim", TINY)
    with pytest.raises(DeviceError, match=r"instruction \d+ \(STORE.*of 'C', which holds"):
        LoadedProgram.load(device, bad)


def test_a_load_reading_a_neighbouring_buffer_is_refused() -> None:
    kern = build_matmul(TINY, 4, 32, 16, shift=5)
    bad = _edited(kern.image, _is(Opcode.LOAD, MemType.WGT), y_size=2)  # twice the weights
    with pytest.raises(DeviceError, match=r"\(LOAD.*moves bytes \[0, \d+\) of 'W', which holds"):
        LoadedProgram.load(open_device("sim", TINY), bad)


def test_a_dma_without_a_relocation_is_refused() -> None:
    kern = build_matmul(TINY, 4, 32, 16, shift=5)
    insns = kern.image.instructions()
    index = next(i for i, insn in enumerate(insns) if _is(Opcode.LOAD, MemType.INP)(insn))
    relocs = tuple(r for r in kern.image.relocations if r.insn != index)
    img = kern.image
    bad = ProgramImage(img.config, img.insns, img.blobs, img.slots, relocs, img.name)
    with pytest.raises(DeviceError, match=f"instruction {index} .*without a relocation"):
        LoadedProgram.load(open_device("sim", TINY), bad)


def test_the_untouched_program_still_runs() -> None:
    kern = build_matmul(TINY, 4, 32, 16, shift=5)
    out, _ = kern.run_on("sim")
    assert (out == kern.reference()).all()
