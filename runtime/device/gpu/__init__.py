"""GPU kernels of a Module (kinds ``opencl``, ``cuda``): devices and the device-resident executor.

A GPU module keeps everything on the device: the memory plan's arena is one device buffer, each
constant and each kernel's workspace its own, uploaded or allocated once when the module loads.
A run copies the inputs in, launches every kernel of every call in order and copies the outputs
back; nothing else crosses the bus.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ....hw import jsontext
from ...container import DTYPES
from ...executor import Profile
from .base import DeviceInfo, GPUDevice, GPUError, check_program

KINDS = ("opencl", "cuda")
_DEVICES: dict[tuple[str, tuple[tuple[str, Any], ...]], GPUDevice] = {}

__all__ = [
    "KINDS",
    "DeviceInfo",
    "GPUDevice",
    "GPUError",
    "GPUExecutor",
    "GPUFunction",
    "open_device",
]


def open_device(kind: str, **options: Any) -> GPUDevice:
    """The device of `kind` ("opencl" or "cuda"), shared by every module that asks for it with
    the same options (`platform=`/`device=` for OpenCL, `device=` for CUDA).

    Raises:
        GPUError: when the platform, driver or device is missing (the message says which).
    """
    key = (kind, tuple(sorted(options.items())))
    if key not in _DEVICES:
        if kind == "opencl":
            from .opencl import OpenCLDevice

            _DEVICES[key] = OpenCLDevice(**options)
        elif kind == "cuda":
            from .cuda import CUDADevice

            _DEVICES[key] = CUDADevice(**options)
        else:
            raise ValueError(f"GPU device kind must be one of {KINDS}, not {kind!r}")
    return _DEVICES[key]


_MAX_ELEMENTS = 1 << 40


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def _count(value: Any, low: int, high: int, what: str) -> int:
    _need(isinstance(value, int) and not isinstance(value, bool), f"{what} must be an integer")
    _need(low <= value <= high, f"{what} must be in [{low}, {high}], not {value}")
    return int(value)


def parse_payload(data: bytes, kernel: str) -> dict[str, Any]:
    """A GPU kernel's payload (JSON written by `compiler.codegen.gpu`), every field checked
    (types, ranges, buffer indices; parameters before workspace) before anything is built.

    Raises:
        GPUError: naming the kernel and the damaged field.
    """
    try:
        payload = jsontext.loads(data.decode())
        _need(isinstance(payload, dict), "the payload must be a JSON object")
        _need(payload.get("dialect") in KINDS, f"dialect must be one of {KINDS}")
        _need(isinstance(payload.get("source"), str), "source must be a string")
        buffers = payload.get("buffers")
        _need(isinstance(buffers, list), "buffers must be a list")
        seen_workspace = False
        for n, b in enumerate(buffers):
            _need(isinstance(b, dict), f"buffer {n} must be an object")
            _need(isinstance(b.get("name"), str), f"buffer {n}: name must be a string")
            _need(b.get("dtype") in DTYPES, f"buffer {n}: dtype must be one of {DTYPES}")
            _count(b.get("size"), 0, _MAX_ELEMENTS, f"buffer {n}: size")
            _need(isinstance(b.get("workspace"), bool), f"buffer {n}: workspace must be a bool")
            _need(b["workspace"] or not seen_workspace, "parameters must come before workspace")
            seen_workspace = seen_workspace or b["workspace"]
        kernels = payload.get("kernels")
        _need(isinstance(kernels, list) and kernels, "kernels must be a non-empty list")
        for k in kernels:
            _need(isinstance(k, dict), "each kernel must be an object")
            name = k.get("name")
            _need(isinstance(name, str) and name.isidentifier(), f"kernel name {name!r}")
            _need(isinstance(k.get("args"), list), f"kernel {name}: args must be a list")
            for i in k["args"]:
                _count(i, 0, len(buffers) - 1, f"kernel {name}: argument index")
            for field in ("grid", "block"):
                sizes = k.get(field)
                _need(isinstance(sizes, list) and len(sizes) == 3, f"kernel {name}: {field}")
                for v in sizes:
                    _count(v, 1, 2**31 - 1, f"kernel {name}: {field} size")
            _count(k.get("shared_bytes"), 0, 1 << 30, f"kernel {name}: shared_bytes")
        _need(payload.get("offset_bits", 32) in (32, 64), "offset_bits must be 32 or 64")
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
        raise GPUError(f"kernel {kernel!r}: GPU program payload is damaged: {e}") from None
    return payload


class _Call:
    """One call of a module: its GPU program and the device memory each launch reads."""

    def __init__(self, label: str, kernel: str, program: Any, launches: list[tuple]) -> None:
        self.label, self.kernel, self.program, self.launches = label, kernel, program, launches


class GPUExecutor:
    """Runs a module's GPU calls with the arena, constants and workspaces on the device.

    `views` holds host arrays for the inputs and outputs only (what `Module.run` writes and
    reads); `run` copies them across. The kernels are a `Module`'s, whose construction checked
    every payload against its kernel's parameters and every call's values.
    """

    def __init__(
        self,
        kind: str,
        kernels: Sequence[Any],
        arena_bytes: int,
        slots: Mapping[str, tuple[int, tuple[int, ...], str]],
        constants: Mapping[str, np.ndarray],
        calls: Sequence[tuple[str, str, Sequence[str]]],
        inputs: Sequence[str],
        outputs: Sequence[str],
        options: Mapping[str, Any],
    ) -> None:
        opts = dict(options)
        backend = opts.pop("device", kind)  # Module.use_device(kind, platform=..., index=...)
        if backend != kind:
            raise GPUError(f"a module compiled for {kind} cannot run on device {backend!r}")
        if "index" in opts:
            opts["device"] = opts.pop("index")
        self.device = dev = open_device(kind, **opts)
        self.arena = dev.alloc(arena_bytes)
        self.places: dict[str, tuple[Any, int]] = {
            n: (self.arena, off) for n, (off, _, _) in slots.items()
        }
        for name, value in constants.items():
            buf = dev.alloc(value.nbytes)
            dev.write(buf, 0, np.ascontiguousarray(value))
            self.places[name] = (buf, 0)
        self.specs = {n: (shape, dtype) for n, (_, shape, dtype) in slots.items()}
        self.views = {n: np.empty(*self.specs[n]) for n in [*inputs, *outputs] if n in self.specs}
        self.inputs = [n for n in inputs if n in self.specs]
        self.outputs = [n for n in outputs if n in self.specs]
        self.const_outputs = {n: np.asarray(constants[n]) for n in outputs if n in constants}
        self.views.update({n: v.copy() for n, v in self.const_outputs.items()})
        programs = {}
        for k in kernels:
            payload = json.loads(k.payload)  # checked by Module (`parse_payload`) already
            check_program(payload, dev.info, kind)
            programs[k.name] = (payload, dev.build(payload))
        self.calls = []
        for label, kernel, args in calls:
            payload, program = programs[kernel]
            # Module checked that the parameter buffers come first and match the kernel's
            # parameters, and those the values each call binds (count, dtype, bytes)
            buffers: list[tuple[Any, int, int]] = []
            for spec in payload["buffers"]:
                item = np.dtype(spec["dtype"]).itemsize
                if spec["workspace"]:
                    buffers.append((dev.alloc(spec["size"] * item), 0, item))
                else:
                    buf, off = self.places[args[len(buffers)]]
                    buffers.append((buf, off, item))
            launches = [
                (k["name"], tuple(k["grid"]), tuple(k["block"]), [buffers[i] for i in k["args"]])
                for k in payload["kernels"]
            ]
            self.calls.append(_Call(label, kernel, program, launches))

    def _launch(self, call: _Call) -> None:
        for name, grid, block, args in call.launches:
            self.device.launch(call.program, name, grid, block, args)

    def run(self) -> None:
        dev = self.device
        for name in self.inputs:
            buf, off = self.places[name]
            dev.write(buf, off, self.views[name])
        for call in self.calls:
            self._launch(call)
        for name in self.outputs:
            buf, off = self.places[name]
            dev.read(buf, off, self.views[name])
        dev.synchronize()

    def profile(self, repeat: int = 10) -> Profile:
        """Median device time of each call over `repeat` runs (each call waited for)."""
        times = np.zeros((repeat, len(self.calls)))
        for r in range(repeat):
            for k, call in enumerate(self.calls):
                start = time.perf_counter()
                self._launch(call)
                self.device.synchronize()
                times[r, k] = time.perf_counter() - start
        return Profile.of([(c.label, c.kernel) for c in self.calls], times)


class GPUFunction:
    """One compiled GPU program called like a CPU function: numpy arrays in, outputs written.

    What `compiler.build.build(..., target="opencl")` returns; the arrays are copied to the
    device and back at each call (a Module keeps its data on the device instead).

    Attributes:
        payload: the program (source, buffers, launches); source: its C source.
    """

    def __init__(self, payload: Mapping[str, Any], **options: Any) -> None:
        self.payload = dict(payload)
        self.source: str = self.payload["source"]
        kind = self.payload["dialect"]
        self.device = open_device(kind, **options)
        check_program(self.payload, self.device.info, kind)
        self.program = self.device.build(self.payload)
        self.workspace = [
            self.device.alloc(b["size"] * np.dtype(b["dtype"]).itemsize)
            for b in self.payload["buffers"]
            if b["workspace"]
        ]

    def __call__(self, *arrays: Any) -> None:
        bufs, hosts = self._upload(arrays)
        self._launch(bufs)
        for (buf, _, _), host in zip(bufs, hosts, strict=True):
            if host.flags.writeable:
                self.device.read(buf, 0, host)
        self.device.synchronize()

    def measure(self, arrays: Sequence[Any], number: int = 1, repeat: int = 3) -> list[float]:
        """Seconds per call of the kernels alone (arguments uploaded once, each repeat of
        `number` calls waited for), one figure per repeat."""
        bufs, _ = self._upload(arrays)
        self._launch(bufs)
        self.device.synchronize()
        costs = []
        for _ in range(max(1, repeat)):
            start = time.perf_counter()
            for _ in range(max(1, number)):
                self._launch(bufs)
            self.device.synchronize()
            costs.append((time.perf_counter() - start) / max(1, number))
        return costs

    def _launch(self, bufs: list[tuple[Any, int, int]]) -> None:
        every = bufs + [(w, 0, 1) for w in self.workspace]
        for k in self.payload["kernels"]:
            args = [every[i] for i in k["args"]]
            self.device.launch(self.program, k["name"], tuple(k["grid"]), tuple(k["block"]), args)

    def _upload(self, arrays: Sequence[Any]) -> tuple[list[tuple[Any, int, int]], list[np.ndarray]]:
        specs = [b for b in self.payload["buffers"] if not b["workspace"]]
        if len(arrays) != len(specs):
            raise ValueError(f"GPU function must get {len(specs)} arrays, not {len(arrays)}")
        dev, bufs = self.device, []
        hosts = []
        for spec, array in zip(specs, arrays, strict=True):
            host = np.asarray(array)
            want = np.dtype(spec["dtype"])
            if host.dtype != want or host.size != spec["size"] or not host.flags.c_contiguous:
                raise ValueError(
                    f"argument {spec['name']!r} must be a C-contiguous {spec['dtype']} array of "
                    f"{spec['size']} elements, not {host.dtype}{list(host.shape)}"
                )
            buf = dev.alloc(host.nbytes)
            dev.write(buf, 0, host)
            bufs.append((buf, 0, want.itemsize))
            hosts.append(host)
        return bufs, hosts
