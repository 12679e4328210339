"""The ``vta`` kernel kind of a Module: program images launched on an accelerator device.

A compiled model (``runtime.module.Module``) calls every kernel with one data pointer per
parameter, in the graph's own layouts (int8 NCHW, or (M, K) for dense). A ``vta`` kernel's
payload is a program image (``runtime.program``) and its ``meta["operands"]`` says, per
parameter, which slot of the image it binds and the NCHW shape it has there; the launch packs
inputs into the accelerator's blocked layout (``layout.pack_nchw``), runs the image on the
module's device and unpacks the outputs into the caller's memory. Every kernel of a module shares
one device, opened when the module first runs: ``sim`` by default, or what
``Module.use_device(backend, **options)`` names (``cyclesim``, ``rtl``).

Each launch keeps its last ``RunResult`` (counters, cycles), which ``Module.device_results()``
reports per layer.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...program import ProgramImage
from . import open_device
from .base import Device, DeviceError, LoadedProgram, RunResult
from .layout import pack_nchw, unpack_nchw

KIND = "vta"


@dataclass(frozen=True)
class Operand:
    """How one kernel parameter binds its program image's slot.

    ``nchw`` is the parameter's shape as NCHW (a dense operand (M, K) is (M, K, 1, 1)); inputs
    are packed with channel blocks of ``block`` (BLOCK_IN for an operator's input, BLOCK_OUT for
    data in an output's layout), outputs unpacked to ``nchw``.
    """

    slot: str
    nchw: tuple[int, int, int, int]
    block: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"slot": self.slot, "nchw": list(self.nchw), "block": self.block}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Operand:
        n, c, h, w = (int(v) for v in data["nchw"])
        return Operand(str(data["slot"]), (n, c, h, w), int(data.get("block", 0)))


def kernel_meta(operands: Sequence[Operand], device: str = "sim") -> dict[str, Any]:
    """The ``meta`` of a vta KernelImage: its operand bindings and the default device."""
    return {"device": device, "operands": [o.to_json() for o in operands]}


def _view(pointer: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A numpy array over memory the caller owns (the module's arena)."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = (ctypes.c_uint8 * (count * dt.itemsize)).from_address(pointer)
    return np.frombuffer(raw, dtype=dt).reshape(shape)


class AcceleratorLaunch:
    """One vta kernel placed on a device: call it with one data pointer per parameter."""

    def __init__(self, program: LoadedProgram, params: Sequence[Any], operands: Sequence[Operand]):
        if len(params) != len(operands):
            raise DeviceError(
                f"vta kernel {program.image.name!r} must describe {len(params)} operands, "
                f"not {len(operands)}"
            )
        self.program, self.params, self.operands = program, list(params), list(operands)
        self.last: RunResult | None = None
        kinds = {s.name: s.kind for s in program.image.slots}
        for op in operands:
            if op.slot not in kinds:
                program.slot(op.slot)  # raises, naming the image's slots
        self._inputs = [k for k, op in enumerate(operands) if kinds[op.slot] == "input"]
        self._outputs = [k for k, op in enumerate(operands) if kinds[op.slot] == "output"]

    def __call__(self, *pointers: int) -> None:
        cfg = self.program.device.config
        inputs = {}
        for k in self._inputs:
            spec, op = self.params[k], self.operands[k]
            x = _view(pointers[k], tuple(spec.shape), spec.dtype).reshape(op.nchw)
            inputs[op.slot] = pack_nchw(cfg, x, op.block or cfg.block_in)
        outputs, self.last = self.program.run(inputs)
        for k in self._outputs:
            spec, op = self.params[k], self.operands[k]
            y = unpack_nchw(cfg, outputs[op.slot], op.nchw[0], op.nchw[1])
            _view(pointers[k], tuple(spec.shape), spec.dtype)[...] = y.reshape(spec.shape)


class DeviceOwner:
    """Keeps a module's device (and the programs on it) alive as long as its launches."""

    def __init__(self, device: Device) -> None:
        self.device = device

    def __del__(self) -> None:
        try:
            self.device.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown: nothing left to report to)
            pass


def load_vta_kernels(kernels: Sequence[Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The Module loader of ``vta`` kernels: one device for all of them, each image placed once.

    ``options``: ``device`` (a backend name; default the kernels' own ``meta["device"]``) and
    the backend's options (``open_device``).
    """
    images = [ProgramImage.from_bytes(bytes(k.payload), f"kernel {k.name!r}") for k in kernels]
    configs = {img.config for img in images}
    if len(configs) != 1:
        names = sorted(c.name for c in configs)
        raise DeviceError(f"a module's vta kernels must share one HWConfig, not {names}")
    opts = dict(options)
    backend = opts.pop("device", None) or kernels[0].meta.get("device", "sim")
    device = open_device(backend, images[0].config, **opts)
    launches: dict[str, Any] = {"__vta_device__": DeviceOwner(device)}
    for kernel, image in zip(kernels, images, strict=True):
        operands = [Operand.from_json(o) for o in kernel.meta.get("operands", [])]
        launches[kernel.name] = AcceleratorLaunch(
            LoadedProgram.load(device, image), kernel.params, operands
        )
    return launches
