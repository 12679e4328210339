"""A PYNQ board model: the subset of the `pynq` API the ``pynq`` backend uses, over the RTL.

`BoardModel` offers ``Overlay``, ``allocate`` and ``MMIO`` as `pynq` does, implemented over the
exported Verilog under cocotb (Icarus or Verilator): registers are AXI-Lite transactions of a
cocotbext-axi master, DRAM is the cocotbext-axi RAM model behind the top's AXI4 masters. Its
buffers model the CPU's caches: a buffer is the CPU's view, and only ``flush()`` copies it to
DRAM and only ``invalidate()`` copies DRAM back, so a driver that forgets either reads stale
data here as it would on a board.

`run_on_board_model` runs a program image or a whole module through the real ``pynq`` backend
(`pynq.PynqDevice`) on the model, in a child simulator process (``pynq_bench.py``), and returns
its outputs and cycles.

What the model cannot test: the PS's DDR and interconnect timing (the RAM model answers in 2
cycles, as `rtl.matched_timing` describes), real cache behaviour beyond flush/invalidate, the
XRT allocator's placement, bitstream download and PL clock set-up from the ``.hwh``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ....hw.config import HWConfig
from ....sim.memory import DEFAULT_BASE

#: where the model's accelerator registers live (a PYNQ-Z2's GP0 window); its buffers are
#: page-aligned (as XRT's are) from the simulators' default DRAM base
REG_BASE = 0x43C0_0000
DRAM_BASE = DEFAULT_BASE
#: the device option under which `sim` and `cyclesim` place buffers as the board model does
PAGE_PLACEMENT = {"min_align": 4096}
IP_NAME = "tensorforge_0"


class ModelBuffer(np.ndarray):
    """A `pynq.allocate` buffer of the model: the CPU's view of a DRAM range."""

    device_address: int
    _board: BoardModel

    @property
    def physical_address(self) -> int:
        return self.device_address

    def flush(self) -> None:
        self._board.dram_write(self.device_address, self.tobytes())

    def invalidate(self) -> None:
        self[...] = np.frombuffer(self._board.dram_read(self.device_address, self.nbytes),
                                  self.dtype).reshape(self.shape)  # fmt: skip

    sync_to_device = flush
    sync_from_device = invalidate

    def freebuffer(self) -> None:
        self._board.freed += 1


class _Overlay:
    def __init__(self, board: BoardModel, path: str) -> None:
        if not path.endswith(".bit"):
            raise ValueError(f"Overlay needs a .bit file, not {path!r}")
        self.bitfile_name = path
        self.ip_dict = {IP_NAME: {"phys_addr": REG_BASE, "addr_range": 0x1000,
                                  "type": "tensorforge:accel:tf_top:1.0"}}  # fmt: skip
        board.overlays.append(path)


class _MMIO:
    def __init__(self, board: BoardModel, base: int, length: int) -> None:
        if base != REG_BASE:
            raise ValueError(f"MMIO at {base:#x}: the model's registers are at {REG_BASE:#x}")
        self.board, self.length = board, length

    def read(self, offset: int = 0, length: int = 4) -> int:
        if offset % 4 or length != 4 or not 0 <= offset < self.length:
            raise MemoryError(f"MMIO read of {length} bytes at offset {offset:#x}")
        return self.board.read32(offset)

    def write(self, offset: int, data: int) -> None:
        if offset % 4 or not 0 <= offset < self.length:
            raise MemoryError(f"MMIO write at offset {offset:#x}")
        self.board.write32(offset, int(data))


class BoardModel:
    """`pynq`'s Overlay/allocate/MMIO over a register bus and a DRAM model.

    Args:
        read32, write32: blocking register access at a byte offset (AXI-Lite through cocotb).
        dram_read, dram_write: DRAM access at a physical address.
    """

    def __init__(self, read32: Callable[[int], int], write32: Callable[[int, int], None],
                 dram_read: Callable[[int, int], bytes],
                 dram_write: Callable[[int, bytes], None]) -> None:  # fmt: skip
        self.read32, self.write32 = read32, write32
        self.dram_read, self.dram_write = dram_read, dram_write
        self._next = DRAM_BASE
        self.overlays: list[str] = []
        self.freed = 0

    def Overlay(self, path: str, *args: Any, **kwargs: Any) -> _Overlay:  # noqa: N802 - pynq's
        return _Overlay(self, path)

    def MMIO(self, base: int, length: int = 4) -> _MMIO:  # noqa: N802 - pynq's name
        return _MMIO(self, base, length)

    def allocate(self, shape: Any, dtype: Any = "u4", **kwargs: Any) -> ModelBuffer:
        buf = np.zeros(shape, dtype).view(ModelBuffer)
        buf.device_address = self._next
        buf._board = self
        self._next += -(-buf.nbytes // 4096) * 4096  # page-aligned, as XRT's buffers are
        return buf


def run_on_board_model(cfg: HWConfig, kind: str, payload: bytes, inputs: dict[str, np.ndarray],
                       simulator: str = "icarus", timeout_s: float = 600.0,
                       device_config: HWConfig | None = None
                       ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:  # fmt: skip
    """Run a program image (`kind` "program") or a module (`kind` "module", its bytes) through
    the ``pynq`` backend on the board model; (outputs, report) with the report's ``cycles``
    (programs) or ``calls`` (per accelerator call, modules), ``flushes`` and ``overlays``.
    The RTL is built for `cfg`; `device_config` (default `cfg`) is the config the backend is
    opened with (programs), to check what a board built for another config says.

    Raises:
        DeviceError: the simulation failed, hung past `timeout_s`, or the backend raised (its
            message).
    """
    from .base import DeviceError
    from .rtl import build_rtl, simulate_bench

    build = build_rtl(cfg, simulator)
    with tempfile.TemporaryDirectory(prefix="tf_pynq_model_") as tmp:
        run_dir = Path(tmp)
        (run_dir / "payload.bin").write_bytes(payload)
        np.savez(run_dir / "inputs.npz", **inputs)
        case = {"config": (device_config or cfg).to_dict(), "kind": kind,
                "payload": str(run_dir / "payload.bin"), "inputs": str(run_dir / "inputs.npz"),
                "outputs": str(run_dir / "outputs.npz"),
                "result": str(run_dir / "result.json"), "timeout_s": timeout_s}  # fmt: skip
        report = simulate_bench(build, run_dir, case, timeout_s + 60,
                                bench="tensorforge.runtime.device.vta.pynq_bench")  # fmt: skip
        if report.get("state") != "done":
            raise DeviceError(f"the pynq backend on the board model ({simulator}): "
                              f"{report.get('message')}")  # fmt: skip
        with np.load(run_dir / "outputs.npz", allow_pickle=False) as npz:
            outputs = {k: npz[k] for k in npz.files}
    return outputs, report


__all__ = ["BoardModel", "ModelBuffer", "run_on_board_model"]
