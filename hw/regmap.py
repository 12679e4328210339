"""The accelerator's AXI-Lite register map and launch protocol: one definition for RTL and drivers.

The RTL register block (hw/core), the cocotb tests and the PYNQ driver all read this module, so a
register's offset or a status bit is written down once. Registers are 32 bits, 4 bytes apart.

The identity registers answer a problem VTA's users hit often (vta_facts.md §7.1, issues 2 and
4): a bitstream built for another configuration silently computing garbage. ``HW_ID`` says
"this is a TensorForge accelerator", ``ISA_VERSION`` which ISA revision it decodes, and
``CONFIG_HASH`` which HWConfig it was built for; ``launch`` refuses to run on a mismatch.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> hex(config_hash(HWConfig.preset("pynq"))) == hex(config_hash(HWConfig.preset("pynq")))
    True
    >>> REGISTERS["INSN_COUNT"].offset
    16
"""

from __future__ import annotations

import enum
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import HWConfig

HW_ID_MAGIC = 0x54464131  # "TFA1"
ISA_VERSION = 1
REG_BYTES = 4


@dataclass(frozen=True, slots=True)
class Register:
    name: str
    offset: int
    access: str  # "rw", "ro", "wo"
    doc: str


class Ctrl(enum.IntFlag):
    """Bits of CTRL. START is write-one-to-start; the others read back the state."""

    START = 1 << 0  # write 1: latch INSN_ADDR/INSN_COUNT, clear DONE/ERROR, reset CYCLES, run
    DONE = 1 << 1  # set when FINISH retires; cleared by START
    BUSY = 1 << 2  # set from START until DONE or ERROR
    ERROR = 1 << 3  # set when the core stops on an error (STATUS says which)


class Status(enum.IntEnum):
    """Values of STATUS: why the core stopped."""

    OK = 0
    BAD_OPCODE = 1  # an instruction's opcode, memory_type or alu_opcode is not defined
    SRAM_RANGE = 2  # an index beyond a buffer's depth
    BAD_FLAGS = 3  # a dependency flag naming a stage the instruction's stage lacks
    AXI_ERROR = 4  # a SLVERR/DECERR response on the memory bus


_REGS = (
    Register("CTRL", 0x00, "rw", "START (w1), DONE, BUSY, ERROR bits (Ctrl)"),
    Register("STATUS", 0x04, "ro", "why the core stopped (Status)"),
    Register("INSN_ADDR_LO", 0x08, "rw", "physical address of the instruction stream, bits 31:0"),
    Register("INSN_ADDR_HI", 0x0C, "rw", "physical address bits 63:32 (0 on 32-bit buses)"),
    Register("INSN_COUNT", 0x10, "rw", "number of 128-bit instructions to fetch"),
    Register("CYCLES_LO", 0x14, "ro", "clock cycles from START to DONE, bits 31:0"),
    Register("CYCLES_HI", 0x18, "ro", "cycle count bits 63:32"),
    Register("HW_ID", 0x1C, "ro", f"constant {HW_ID_MAGIC:#010x} ('TFA1')"),
    Register("ISA_VERSION", 0x20, "ro", f"ISA revision the core decodes ({ISA_VERSION})"),
    Register("CONFIG_HASH", 0x24, "ro", "config_hash() of the HWConfig the core was built for"),
)
REGISTERS: dict[str, Register] = {r.name: r for r in _REGS}
REGMAP_BYTES = 0x40  # the address window the block decodes


class LaunchError(RuntimeError):
    """The device is not the expected accelerator, stopped on an error, or timed out."""


# Knobs that change what the hardware computes or how it is addressed; name, board and clock
# do not, so a bitstream runs any config that differs only in those.
_HASHED_KNOBS = (
    "log_batch", "log_block_in", "log_block_out", "log_inp_width", "log_wgt_width",
    "log_acc_width", "log_uop_buff_size", "log_inp_buff_size", "log_wgt_buff_size",
    "log_acc_buff_size", "axi_data_width", "alu_mul", "insn_queue_depth", "dep_queue_depth",
)  # fmt: skip
# Knobs added later, hashed only away from their default so that every earlier config keeps
# its CONFIG_HASH (bitstream manifests record it): gemm_requant changes what a GEMM computes,
# max_outstanding_reads the LOAD engines and so every CYCLES count.
_HASHED_UNLESS_DEFAULT = {"max_outstanding_reads": 1, "gemm_requant": False}


def config_hash(cfg: HWConfig) -> int:
    """A 32-bit fingerprint of the hardware-relevant knobs (CRC-32 of their canonical JSON)."""
    knobs = {k: getattr(cfg, k) for k in _HASHED_KNOBS}
    knobs.update({k: getattr(cfg, k) for k, default in _HASHED_UNLESS_DEFAULT.items()
                  if getattr(cfg, k) != default})  # fmt: skip
    return zlib.crc32(json.dumps(knobs, sort_keys=True).encode()) & 0xFFFF_FFFF


@dataclass(frozen=True)
class LaunchResult:
    cycles: int
    polls: int


def launch(
    read32: Callable[[int], int],
    write32: Callable[[int, int], None],
    cfg: HWConfig,
    insn_addr: int,
    insn_count: int,
    timeout_s: float = 10.0,
    poll_interval_s: float = 0.0,
) -> LaunchResult:
    """Run an instruction stream through the register block, the one launch protocol.

    1. Check HW_ID, ISA_VERSION and CONFIG_HASH against ``cfg``.
    2. Write INSN_ADDR_LO/HI and INSN_COUNT, then CTRL = START.
    3. Poll CTRL until DONE or ERROR, at most ``timeout_s`` seconds (never forever).
    4. Read CYCLES.

    Args:
        read32, write32: register access at a byte offset (MMIO on a board, AXI-Lite in cocotb,
            a Python model in tests).

    Raises:
        ValueError: ``insn_count`` not 1 to 2**32 - 1 (0 fetches nothing, so DONE never comes),
            or ``insn_addr`` not a 16-byte aligned address below 2**64.
        LaunchError: naming the mismatch, the STATUS on error, or the timeout.
    """
    check_stream(insn_addr, insn_count)
    check_identity(read32, cfg)
    write32(REGISTERS["INSN_ADDR_LO"].offset, insn_addr & 0xFFFF_FFFF)
    write32(REGISTERS["INSN_ADDR_HI"].offset, insn_addr >> 32)
    write32(REGISTERS["INSN_COUNT"].offset, insn_count)
    write32(REGISTERS["CTRL"].offset, Ctrl.START)
    deadline = time.monotonic() + timeout_s
    polls = 0
    while True:
        ctrl = Ctrl(read32(REGISTERS["CTRL"].offset) & 0xF)
        polls += 1
        if ctrl & Ctrl.ERROR:
            status = read32(REGISTERS["STATUS"].offset)
            name = Status(status).name if status in Status._value2member_map_ else str(status)
            raise LaunchError(f"the accelerator stopped with STATUS {name} after {polls} polls")
        if ctrl & Ctrl.DONE:
            break
        if time.monotonic() > deadline:
            raise LaunchError(
                f"the accelerator did not finish within {timeout_s} s ({polls} polls, CTRL = "
                f"{int(ctrl):#x}); the program may deadlock on its dependency tokens"
            )
        if poll_interval_s:
            time.sleep(poll_interval_s)
    lo = read32(REGISTERS["CYCLES_LO"].offset)
    hi = read32(REGISTERS["CYCLES_HI"].offset)
    return LaunchResult(cycles=hi << 32 | lo, polls=polls)


def check_stream(insn_addr: int, insn_count: int) -> None:
    """Raise ValueError unless INSN_ADDR/INSN_COUNT can hold the stream and fetch can run it."""
    if not isinstance(insn_count, Integral) or not 0 < insn_count < 1 << 32:
        raise ValueError(
            "insn_count must be an int from 1 to 2**32 - 1 (INSN_COUNT; with 0 the core fetches "
            f"nothing and never sets DONE), not {insn_count!r}"
        )
    if not isinstance(insn_addr, Integral) or not 0 <= insn_addr < 1 << 64 or insn_addr % 16:
        raise ValueError(
            "insn_addr must be a 16-byte aligned address from 0 to 2**64 - 1 (INSN_ADDR_LO/HI; "
            f"instructions are 128 bits), not {insn_addr!r}"
        )


def check_identity(read32: Callable[[int], int], cfg: HWConfig) -> None:
    """Raise LaunchError unless the registers identify an accelerator built for ``cfg``."""
    hw_id = read32(REGISTERS["HW_ID"].offset)
    if hw_id != HW_ID_MAGIC:
        raise LaunchError(
            f"HW_ID must read {HW_ID_MAGIC:#010x}, not {hw_id:#010x}: this is not a TensorForge "
            "accelerator (wrong bitstream, or the overlay is not loaded)"
        )
    version = read32(REGISTERS["ISA_VERSION"].offset)
    if version != ISA_VERSION:
        raise LaunchError(
            f"the bitstream decodes ISA version {version}, this runtime {ISA_VERSION}"
        )
    got, want = read32(REGISTERS["CONFIG_HASH"].offset), config_hash(cfg)
    if got != want:
        raise LaunchError(
            f"the bitstream was built for another HWConfig (CONFIG_HASH {got:#010x}, expected "
            f"{want:#010x} for {cfg.name!r}, {cfg.bitstream_name}): rebuild one of them"
        )


def register_table() -> str:
    """The register map as a Markdown table (for docs/hardware.md and `tensorforge hw regs`)."""
    lines = ["| offset | register | access | meaning |", "|---|---|---|---|"]
    lines += [f"| {r.offset:#04x} | {r.name} | {r.access} | {r.doc} |" for r in _REGS]
    return "\n".join(lines) + "\n"
