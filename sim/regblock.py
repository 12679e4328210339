"""A Python model of the accelerator's register block (hw/regmap.py), the reference for the RTL's.

It answers register reads and writes as the hardware does and, on START, runs the program
through a backend's ``execute(insn_addr, insn_count) -> cycles`` function. An error stops the
model with CTRL.ERROR and a STATUS code; a deadlocked program leaves it BUSY forever, exactly as
the hardware would hang, so a driver's timeout is what reports it. Errors only software can see
(a FINISH that could overtake work, leftover tokens) propagate as exceptions.
"""

from __future__ import annotations

from collections.abc import Callable

from ..hw.config import HWConfig
from ..hw.isa import IsaError
from ..hw.regmap import HW_ID_MAGIC, ISA_VERSION, REGISTERS, Ctrl, Status, config_hash
from .functional import DeadlockError, DepFlagError, DramRangeError, SramRangeError

_OFF = {name: reg.offset for name, reg in REGISTERS.items()}


class RegisterBlockModel:
    """Register-level model of one accelerator.

    Args:
        cfg: the config the modelled bitstream was built for (sets CONFIG_HASH).
        execute: runs a program and returns its cycle count (0 when the backend has no timing).
    """

    def __init__(self, cfg: HWConfig, execute: Callable[[int, int], int | None]) -> None:
        self.cfg = cfg
        self.execute = execute
        self.regs = {name: 0 for name in REGISTERS}
        self.regs["HW_ID"] = HW_ID_MAGIC
        self.regs["ISA_VERSION"] = ISA_VERSION
        self.regs["CONFIG_HASH"] = config_hash(cfg)
        self.last_error: Exception | None = None

    def read32(self, offset: int) -> int:
        return self.regs[self._name(offset)]

    def write32(self, offset: int, value: int) -> None:
        name = self._name(offset)
        if REGISTERS[name].access == "ro":
            return  # writes to read-only registers are ignored, as on the bus
        if name == "CTRL":
            if value & Ctrl.START and not self.regs["CTRL"] & Ctrl.BUSY:
                self._start()
            return
        self.regs[name] = value & 0xFFFF_FFFF

    def _name(self, offset: int) -> str:
        for name, off in _OFF.items():
            if off == offset:
                return name
        raise ValueError(f"register offset must be one of {sorted(_OFF.values())}, not {offset:#x}")

    def _start(self) -> None:
        addr = self.regs["INSN_ADDR_HI"] << 32 | self.regs["INSN_ADDR_LO"]
        self.regs.update(CTRL=Ctrl.BUSY, STATUS=Status.OK, CYCLES_LO=0, CYCLES_HI=0)
        try:
            cycles = self.execute(addr, self.regs["INSN_COUNT"]) or 0
        except DeadlockError as e:
            self.last_error = e  # the hardware hangs: BUSY stays set
            return
        except (IsaError, SramRangeError, DepFlagError, DramRangeError) as e:
            self.last_error = e
            self.regs["CTRL"] = Ctrl.ERROR
            self.regs["STATUS"] = _status_of(e)
            return
        self.regs.update(CTRL=Ctrl.DONE, CYCLES_LO=cycles & 0xFFFF_FFFF, CYCLES_HI=cycles >> 32)


def _status_of(error: Exception) -> Status:
    if isinstance(error, IsaError):
        return Status.BAD_OPCODE
    if isinstance(error, SramRangeError):
        return Status.SRAM_RANGE
    if isinstance(error, DepFlagError):
        return Status.BAD_FLAGS
    return Status.AXI_ERROR  # a DRAM access outside memory
