"""The ``sim`` backend: device memory and runs on the bit-exact functional simulator."""

from __future__ import annotations

import numpy as np

from ....hw.config import HWConfig
from ....sim.functional import DEFAULT_MAX_STEPS, FunctionalSim
from ....sim.memory import Allocation, DeviceMemory
from .base import RunResult, timed

DEFAULT_MEMORY = 256 << 20


class HostMemory:
    """Device memory kept on the host (a ``sim.memory.DeviceMemory`` in ``self.memory``): the
    alloc/free/write/read half of the Device protocol, for the simulator backends."""

    memory: DeviceMemory
    #: the least alignment of every allocation (4096: each buffer on its own pages, as a PYNQ
    #: board's allocator places them; `pynq_model.PAGE_PLACEMENT`)
    min_align: int = 64

    def alloc(self, nbytes: int, align: int = 64) -> Allocation:
        return self.memory.alloc(nbytes, max(align, self.min_align))

    def free(self, block: Allocation) -> None:
        self.memory.free(block)

    def write(self, block: Allocation, data: bytes | np.ndarray, offset: int = 0) -> None:
        size = data.nbytes if isinstance(data, np.ndarray) else len(data)
        _check_range(block, offset, size)
        self.memory.write(block.addr + offset, data)

    def read(self, block: Allocation, nbytes: int | None = None, offset: int = 0) -> bytes:
        nbytes = block.nbytes - offset if nbytes is None else nbytes
        _check_range(block, offset, nbytes)
        return self.memory.read(block.addr + offset, nbytes)


class SimDevice(HostMemory):
    """Runs programs on ``tensorforge.sim.functional``; memory is a host numpy array."""

    backend = "sim"

    def __init__(self, config: HWConfig, memory_bytes: int = DEFAULT_MEMORY,
                 min_align: int = 64, max_steps: int = DEFAULT_MAX_STEPS) -> None:  # fmt: skip
        self.config = config
        self.memory = DeviceMemory(memory_bytes)
        self.min_align = int(min_align)
        self.sim = FunctionalSim(config, self.memory, max_steps)

    def run(self, insns: Allocation, insn_count: int) -> RunResult:
        stats, wall = timed(self.sim.run, insns.addr, insn_count)
        return RunResult(stats.as_dict(), wall, None, self.backend)

    def close(self) -> None:
        pass


def _check_range(block: Allocation, offset: int, nbytes: int) -> None:
    from .base import DeviceError

    if offset < 0 or nbytes < 0 or offset + nbytes > block.nbytes:
        raise DeviceError(
            f"access of {nbytes} bytes at offset {offset} is outside the {block.nbytes}-byte "
            f"buffer at {block.addr:#x}"
        )
