"""The ``vta`` kernel kind of a Module: program images launched on an accelerator device.

A compiled model (``runtime.module.Module``) calls every kernel with one data pointer per
parameter, in the graph's own layouts (int8 NCHW, or (M, K) for dense). A ``vta`` kernel's
payload is a program image (``runtime.program``) and its ``meta["operands"]`` says, per
parameter, which slot of the image it binds and the NCHW shape it has there; the launch packs
inputs into the accelerator's blocked layout (``layout.pack_nchw``), runs the image on the
module's device and unpacks the outputs into the caller's memory. A ``packed`` operand is a
tensor that flows only between accelerator kernels: the module's memory already holds it in the
blocked layout (the parameter's shape is the slot's), so it is copied as it is, never packed or
unpacked. Every kernel of a module shares one device, opened when the module first runs: ``sim``
by default, or what ``Module.use_device(backend, **options)`` names (``cyclesim``, ``rtl``).

Each launch keeps its last ``RunResult`` (counters, cycles), which ``Module.device_results()``
reports per layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...ndarray import view_at
from ...program import ProgramImage
from . import open_device
from .base import Device, DeviceError, LoadedProgram, RunResult
from .layout import pack_nchw, unpack_nchw

KIND = "vta"


@dataclass(frozen=True)
class Operand:
    """How one kernel parameter binds its program image's slot.

    ``nchw`` is the tensor's shape as NCHW (a dense operand (M, K) is (M, K, 1, 1)); inputs
    are packed with channel blocks of ``block`` (BLOCK_IN for an operator's input, BLOCK_OUT for
    data in an output's layout), outputs unpacked to ``nchw``. With ``packed`` the parameter is
    already in the slot's blocked layout and shape, and is bound as it is.

    Example:
        >>> Operand.from_json(Operand("X", (1, 32, 8, 8), 16, packed=True).to_json())
        Operand(slot='X', nchw=(1, 32, 8, 8), block=16, packed=True)
        >>> Operand.from_json({"slot": "Y", "nchw": [1, 32, 8, 8], "block": 0}).packed
        False
    """

    slot: str
    nchw: tuple[int, int, int, int]
    block: int = 0
    packed: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"slot": self.slot, "nchw": list(self.nchw), "block": self.block}
        return {**data, "packed": True} if self.packed else data

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Operand:
        n, c, h, w = (int(v) for v in data["nchw"])
        packed = data.get("packed", False)  # absent in modules saved before packed operands
        if not isinstance(packed, bool):
            raise ValueError(f"operand {data['slot']!r}: packed must be a bool, not {packed!r}")
        return Operand(str(data["slot"]), (n, c, h, w), int(data.get("block", 0)), packed)


def kernel_meta(operands: Sequence[Operand], device: str = "sim") -> dict[str, Any]:
    """The ``meta`` of a vta KernelImage: its operand bindings and the default device."""
    return {"device": device, "operands": [o.to_json() for o in operands]}


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
        for spec, op in zip(self.params, operands, strict=True):
            slot = program.slot(op.slot)  # raises for a slot the image lacks, naming its slots
            if op.packed and tuple(spec.shape) != tuple(slot.shape):
                raise DeviceError(
                    f"packed operand {spec.name} of vta kernel {program.image.name!r} must have "
                    f"the shape of slot {op.slot!r}, {tuple(slot.shape)}, not {tuple(spec.shape)}"
                )
        self._inputs = [k for k, op in enumerate(operands) if kinds[op.slot] == "input"]
        self._outputs = [k for k, op in enumerate(operands) if kinds[op.slot] == "output"]

    def __call__(self, *pointers: int) -> None:
        cfg = self.program.device.config
        inputs = {}
        for k in self._inputs:
            spec, op = self.params[k], self.operands[k]
            x = view_at(pointers[k], tuple(spec.shape), spec.dtype)
            if not op.packed:
                x = pack_nchw(cfg, x.reshape(op.nchw), op.block or cfg.block_in)
            inputs[op.slot] = x
        outputs, self.last = self.program.run(inputs)
        for k in self._outputs:
            spec, op = self.params[k], self.operands[k]
            y = outputs[op.slot]
            if not op.packed:
                y = unpack_nchw(cfg, y, op.nchw[0], op.nchw[1]).reshape(spec.shape)
            view_at(pointers[k], tuple(spec.shape), spec.dtype)[...] = y


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
