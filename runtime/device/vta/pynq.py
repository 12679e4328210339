"""The ``pynq`` backend: programs run on the accelerator in a PYNQ board's programmable logic.

``open_device("pynq", cfg, bitstream="tf_pynq.bit")`` loads the overlay (`pynq.Overlay`: the
``.bit`` with its ``.hwh`` beside it), finds the accelerator's AXI-Lite registers in the
overlay's ``ip_dict`` and maps them with `pynq.MMIO`. Device memory is `pynq.allocate`
buffers: physically contiguous, their ``device_address`` is what the accelerator reads. Each run
flushes every buffer from the CPU's caches before the launch and invalidates them after it, and
the launch itself is `hw.regmap.launch`: the same register sequence, identity check (HW_ID, ISA
version, CONFIG_HASH) and time-out as on the ``rtl`` backend.

`pynq` is imported only when a device opens (``pip install 'tensorforge[pynq]'``; it comes
preinstalled on PYNQ board images). Tests give ``pynq_module=`` a board model with the same API
over the exported Verilog (`pynq_model.BoardModel`), so this very code runs against the RTL.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ....hw.config import HWConfig
from ....hw.regmap import LaunchError, launch
from ....sim.memory import Allocation
from .base import DeviceError, RunResult

#: how the accelerator's block is recognized in an overlay's ip_dict: its name (the cell of
#: hw/bitstream.py's block design) or its VLNV (the module reference of its wrapper)
IP_NAME_PREFIX = "tensorforge"
IP_TYPE_MARKS = ("tf_accel", "tf_top")


def import_pynq() -> Any:
    from tensorforge.extras import require

    # board images ship pynq; elsewhere the extra installs it, but only a board can run it
    return require("pynq", "the pynq backend (on a PYNQ board)", DeviceError)


class PynqDevice:
    """The accelerator on a PYNQ board.

    Args:
        config: the HWConfig the bitstream was built for (checked against CONFIG_HASH).
        bitstream: the ``.bit`` file (its ``.hwh`` beside it); default: the one registered for
            `config` in bitstreams/manifest.json (``tensorforge hw bitstream``); or give
            `overlay`.
        overlay: an already loaded `pynq.Overlay`.
        ip_name: the accelerator's key in ``overlay.ip_dict`` (default: the one whose name
            starts with "tensorforge" or whose type names ``tf_top``).
        timeout_s: seconds one run may take before `DeviceError` (never waits forever).
        pynq_module: the `pynq` API to use (default: ``import pynq``; tests pass a board model).

    Raises:
        DeviceError: pynq is missing, no bitstream is given or registered for `config`, the
            overlay has no accelerator, or the loaded accelerator is not built for `config`.
    """

    backend = "pynq"

    def __init__(
        self,
        config: HWConfig,
        bitstream: str | None = None,
        overlay: Any = None,
        ip_name: str | None = None,
        timeout_s: float = 10.0,
        pynq_module: Any = None,
    ) -> None:
        self.config = config
        self.timeout_s = float(timeout_s)
        self.pynq = pynq_module if pynq_module is not None else import_pynq()
        if overlay is None:
            if bitstream is None:
                bitstream = _registered_bitstream(config)
            overlay = self.pynq.Overlay(str(bitstream))
        self.overlay = overlay
        name, ip = _find_ip(overlay.ip_dict, ip_name)
        self.ip_name = name
        self.mmio = self.pynq.MMIO(int(ip["phys_addr"]), int(ip.get("addr_range", 0x1000)))
        self._buffers: dict[int, Any] = {}
        try:
            from ....hw.regmap import check_identity

            check_identity(self._read32, config)
        except LaunchError as exc:
            raise DeviceError(f"overlay IP {name!r}: {exc}") from None

    def _read32(self, offset: int) -> int:
        return int(self.mmio.read(offset))

    def _write32(self, offset: int, value: int) -> None:
        self.mmio.write(offset, int(value))

    # ---- memory ------------------------------------------------------------------------------

    def alloc(self, nbytes: int, align: int = 64) -> Allocation:
        if nbytes <= 0:
            raise DeviceError(f"allocation size must be positive, not {nbytes}")
        buf = self.pynq.allocate(shape=(nbytes,), dtype=np.uint8)
        addr = int(buf.device_address)
        if addr % align:
            buf.freebuffer()
            raise DeviceError(f"pynq.allocate returned {addr:#x}, not aligned to {align} bytes")
        self._buffers[addr] = buf
        return Allocation(addr, nbytes)

    def free(self, block: Allocation) -> None:
        buf = self._buffers.pop(block.addr, None)
        if buf is not None:
            buf.freebuffer()

    def _buffer(self, block: Allocation, offset: int, nbytes: int) -> Any:
        buf = self._buffers.get(block.addr)
        if buf is None:
            raise DeviceError(f"no buffer at {block.addr:#x} on this device")
        if offset < 0 or nbytes < 0 or offset + nbytes > block.nbytes:
            raise DeviceError(f"access of {nbytes} bytes at offset {offset} is outside the "
                              f"{block.nbytes}-byte buffer at {block.addr:#x}")  # fmt: skip
        return buf

    def write(self, block: Allocation, data: bytes | np.ndarray, offset: int = 0) -> None:
        raw = np.frombuffer(data.tobytes() if isinstance(data, np.ndarray) else data, np.uint8)
        buf = self._buffer(block, offset, raw.size)
        buf[offset : offset + raw.size] = raw

    def read(self, block: Allocation, nbytes: int | None = None, offset: int = 0) -> bytes:
        nbytes = block.nbytes - offset if nbytes is None else nbytes
        buf = self._buffer(block, offset, nbytes)
        return bytes(buf[offset : offset + nbytes])

    # ---- runs --------------------------------------------------------------------------------

    def run(self, insns: Allocation, insn_count: int) -> RunResult:
        """Flush the buffers, launch, wait (at most `timeout_s`), invalidate the buffers.

        Raises:
            DeviceError: the accelerator stopped on an error or did not finish in time.
        """
        start = time.perf_counter()
        for buf in self._buffers.values():
            buf.flush()  # the CPU's writes reach DRAM before the accelerator reads it
        try:
            res = launch(self._read32, self._write32, self.config, insns.addr, insn_count,
                         timeout_s=self.timeout_s)  # fmt: skip
        except LaunchError as exc:
            raise DeviceError(f"pynq ({self.ip_name}): {exc}") from None
        for buf in self._buffers.values():
            buf.invalidate()  # the CPU then reads what the accelerator wrote, not stale lines
        wall = time.perf_counter() - start
        return RunResult({"cycles": res.cycles, "polls": res.polls}, wall, res.cycles,
                         self.backend)  # fmt: skip

    def close(self) -> None:
        for buf in self._buffers.values():
            buf.freebuffer()
        self._buffers.clear()


def _registered_bitstream(config: HWConfig) -> str:
    from ....hw.bitstream import MANIFEST, find_bitstream
    from ....hw.regmap import config_hash

    found = find_bitstream(config)
    if found is None:
        raise DeviceError(
            f"no bitstream for HWConfig {config.name!r} (config_hash {config_hash(config):#010x}) "
            f"in {MANIFEST}: pass bitstream=, or build one with `tensorforge hw bitstream "
            f"--board pynq-z2 --config {config.name}`"
        )
    return found


def _find_ip(ip_dict: dict[str, Any], name: str | None) -> tuple[str, dict[str, Any]]:
    if name is not None:
        if name not in ip_dict:
            raise DeviceError(f"the overlay has no IP {name!r}; it has {sorted(ip_dict)}")
        return name, ip_dict[name]
    found = [(k, v) for k, v in ip_dict.items()
             if k.startswith(IP_NAME_PREFIX)
             or any(m in str(v.get("type", "")) for m in IP_TYPE_MARKS)]  # fmt: skip
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise DeviceError(f"the overlay has {what} TensorForge accelerator IP (looked for names "
                          f"starting with {IP_NAME_PREFIX!r}); its IPs: {sorted(ip_dict)}; pass "
                          "ip_name=")  # fmt: skip
    return found[0]
