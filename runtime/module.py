"""Module: a compiled model (kernels, call list, static memory plan, constants), run and saved.

What `tensorforge.compile(model, target)` returns (DESIGN.md contract 5). Kernels carry a kind;
each kind has a loader in `KERNEL_KINDS` that turns the kernels' payloads into callables ("llvm":
host object code, linked by `runtime.device.cpu.loader`; "vta": accelerator program images,
launched on a device by `runtime.device.vta.launch`). `save`/`load` write one file through
`runtime.container` (never pickle).

Example:
    >>> import numpy as np, tensorforge
    >>> from tensorforge.compiler.frontend.onnx_builders import mlp
    >>> module = tensorforge.compile(mlp())
    >>> out = module.run({"x": np.ones((2, 64), np.float32)})
    >>> [v.shape for v in out.values()]
    [(2, 10)]
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import container
from .device.cpu.function import ParamSpec
from .executor import Executor, Launch, Profile

MAGIC = b"TFMOD\x00\x00\x01"
VERSION = 1


class ModuleFormatError(ValueError):
    """A module file is not one this TensorForge reads; the message names file and offset."""


@dataclass(frozen=True)
class KernelImage:
    """One compiled kernel: its kind, symbol, parameters and payload (object code, program)."""

    name: str
    kind: str
    params: tuple[ParamSpec, ...]
    payload: bytes
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One kernel launch: the kernel and the value bound to each parameter; `label` names the
    fused graph nodes (the profile's row)."""

    kernel: str
    args: tuple[str, ...]
    label: str


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


KernelLoader = Callable[[Sequence[KernelImage], Mapping[str, Any]], dict[str, Launch]]
KERNEL_KINDS: dict[str, KernelLoader] = {}


def register_kernel_kind(kind: str, loader: KernelLoader) -> None:
    """Make kernels of `kind` loadable: `loader(kernels, device_options) -> {kernel name:
    launch(*pointers)}` (keys starting with `__` hold objects that must outlive the launches)."""
    KERNEL_KINDS[kind] = loader


def _load_llvm(kernels: Sequence[KernelImage], options: Mapping[str, Any]) -> dict[str, Launch]:
    import ctypes

    from .device.cpu.loader import ObjectLoader, check_host

    for k in kernels:
        check_host(k.meta.get("triple", ""), k.meta.get("features", ""), f"kernel {k.name!r}")
    loader = ObjectLoader([k.payload for k in kernels], [k.name for k in kernels])
    launches: dict[str, Launch] = {}
    for k in kernels:
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(k.params)))
        launches[k.name] = proto(loader.address(k.name))
    launches["__owner__"] = loader  # type: ignore[assignment]  (keeps the code mapped)
    return launches


def _load_vta(kernels: Sequence[KernelImage], options: Mapping[str, Any]) -> dict[str, Launch]:
    from .device.vta.launch import load_vta_kernels  # the simulators load only when needed

    return load_vta_kernels(kernels, options)


_GPU_KINDS = ("opencl", "cuda")  # device-resident: run by runtime.device.gpu.GPUExecutor

register_kernel_kind("llvm", _load_llvm)
register_kernel_kind("vta", _load_vta)


class Module:
    """A compiled model.

    Attributes:
        inputs, outputs: value names with `tensors[name]` giving shape and dtype.
        kernels: the compiled kernels; calls: the launches in execution order.
        slots: value -> arena offset (the static memory plan); arena_bytes: its size.
        constants: value -> array (weights, pre-packed where the kernels want it).
        stats: compile-time statistics (seconds per phase, kernel count, bytes).
    """

    def __init__(
        self,
        *,
        target: str,
        inputs: Sequence[str],
        outputs: Sequence[str],
        tensors: Mapping[str, TensorSpec],
        kernels: Sequence[KernelImage],
        calls: Sequence[Call],
        slots: Mapping[str, int],
        arena_bytes: int,
        constants: Mapping[str, np.ndarray],
        stats: Mapping[str, Any] | None = None,
    ) -> None:
        self.target = target
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.tensors = dict(tensors)
        self.kernels = list(kernels)
        self.calls = list(calls)
        self.slots, self.arena_bytes = dict(slots), int(arena_bytes)
        self.constants = {k: np.asarray(v) for k, v in constants.items()}
        self.stats = dict(stats or {})
        self._check_calls()
        self._executor: Executor | None = None
        self._launches: dict[str, Launch] | None = None
        self._device_options: dict[str, Any] = {}

    def _check_calls(self) -> None:
        by_name = {k.name: k for k in self.kernels}
        for call in self.calls:
            kernel = by_name.get(call.kernel)
            if kernel is None:
                raise ValueError(f"call {call.label!r} must name a kernel, not {call.kernel!r}")
            if len(kernel.params) != len(call.args):
                raise ValueError(
                    f"call of {call.kernel!r} must bind {len(kernel.params)} arguments, "
                    f"not {len(call.args)}"
                )
            for spec, value in zip(kernel.params, call.args, strict=True):
                have = self.tensors[value]
                want = TensorSpec(spec.shape, spec.dtype)
                if have.dtype != want.dtype or have.nbytes != want.nbytes:
                    raise ValueError(
                        f"argument {spec.name} of kernel {call.kernel!r} must be {want} "
                        f"(or a reshape of it), not {value!r}: {have}"
                    )
                if value not in self.slots and value not in self.constants:
                    raise ValueError(f"value {value!r} must be in the arena or a constant")

    # ---- running ------------------------------------------------------------------------------

    def _load(self) -> Executor:
        if self._executor is None and any(k.kind in _GPU_KINDS for k in self.kernels):
            self._executor = self._load_gpu()  # type: ignore[assignment]
        if self._executor is None:
            launches: dict[str, Launch] = {}
            for kind in dict.fromkeys(k.kind for k in self.kernels):
                if kind not in KERNEL_KINDS:
                    known = sorted([*KERNEL_KINDS, *_GPU_KINDS])
                    raise ValueError(f"kernel kind must be one of {known}, not {kind!r}")
                of_kind = [k for k in self.kernels if k.kind == kind]
                launches.update(KERNEL_KINDS[kind](of_kind, self._device_options))
            self._launches = launches
            slots = {
                name: (offset, self.tensors[name].shape, self.tensors[name].dtype)
                for name, offset in self.slots.items()
            }
            calls = [(c.label, c.kernel, launches[c.kernel], c.args) for c in self.calls]
            self._executor = Executor(self.arena_bytes, slots, self.constants, calls)
        return self._executor

    def _load_gpu(self) -> Any:
        """The device-resident executor of a GPU module (every kernel of one GPU kind)."""
        from .device.gpu import GPUExecutor

        kinds = sorted({k.kind for k in self.kernels})
        if len(kinds) != 1:
            raise ValueError(f"a GPU module must hold kernels of one kind, not {kinds}")
        slots = {
            name: (offset, self.tensors[name].shape, self.tensors[name].dtype)
            for name, offset in self.slots.items()
        }
        calls = [(c.label, c.kernel, c.args) for c in self.calls]
        return GPUExecutor(
            kinds[0],
            self.kernels,
            self.arena_bytes,
            slots,
            self.constants,
            calls,
            self.inputs,
            self.outputs,
            self._device_options,
        )

    def _bind_inputs(self, inputs: Mapping[str, Any]) -> Executor:
        unknown = [n for n in inputs if n not in self.inputs]
        missing = [n for n in self.inputs if n not in inputs]
        if unknown or missing:
            raise ValueError(
                f"inputs must be exactly {list(self.inputs)}, not {sorted(inputs)} "
                f"(missing {missing}, unknown {unknown})"
            )
        executor = self._load()
        for name in self.inputs:
            value, spec = np.asarray(inputs[name]), self.tensors[name]
            if value.shape != spec.shape or str(value.dtype) != spec.dtype:
                raise ValueError(
                    f"input {name!r} must be {spec}, not {value.dtype}{list(value.shape)}"
                )
            if name in executor.views:
                executor.views[name][...] = value
        return executor

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run the model: input name -> array in, output name -> array (a fresh copy) out.

        One module owns one arena: calls from two Python threads at once must use two modules
        (`Module.from_bytes(module.to_bytes())`)."""
        executor = self._bind_inputs(inputs)
        executor.run()
        return {name: np.array(executor.views[name]) for name in self.outputs}

    def profile(self, inputs: Mapping[str, Any], repeat: int = 10) -> Profile:
        """Per-layer (per-kernel) median times over `repeat` runs; `str(profile)` is a table."""
        executor = self._bind_inputs(inputs)
        executor.run()  # warm up: page in the arena and the code
        return executor.profile(repeat)

    # ---- accelerator devices ------------------------------------------------------------------

    def use_device(self, backend: str, **options: Any) -> Module:
        """Run the accelerator kernels on device backend `backend` ("sim", "cyclesim", "rtl")
        with its options (`runtime.device.vta.open_device`) from the next run on; returns self.

        Example:
            >>> module.use_device("cyclesim").run(inputs)           # doctest: +SKIP
            >>> module.device_results()["conv2 (tf.qconv2d)"].cycles  # doctest: +SKIP
        """
        self._device_options = {"device": backend, **options}
        self._executor = self._launches = None  # reloaded (and the device reopened) on demand
        return self

    def device_results(self) -> dict[str, Any]:
        """Call label -> the accelerator's `RunResult` (counters, cycles) of the last run, for
        every call of an accelerator kernel that has run."""
        if self._launches is None:
            return {}
        results = {}
        for call in self.calls:
            last = getattr(self._launches[call.kernel], "last", None)
            if last is not None:
                results[call.label] = last
        return results

    def write_trace(self, path: str | Path) -> Path:
        """Write the last run's accelerator layers, one after another, as one Chrome trace
        (needs the cyclesim device: `use_device("cyclesim")`).

        Raises:
            ValueError: when the last run has no cycle-accurate results to trace.
        """
        runs = [(label, getattr(r, "timing", None)) for label, r in self.device_results().items()]
        if not runs or any(timing is None for _, timing in runs):
            raise ValueError(
                "write_trace needs a run of the accelerator layers on the cyclesim device "
                "(module.use_device('cyclesim') before run)"
            )
        from ..sim.trace import write_chrome_trace_sequence

        return write_chrome_trace_sequence(runs, path)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {self.tensors[n]}" for n in self.inputs)
        return (
            f"Module({self.target}, inputs {ins}, {len(self.calls)} kernel calls, arena "
            f"{self.arena_bytes} B, constants {sum(v.nbytes for v in self.constants.values())} B)"
        )

    # ---- files --------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The module file's bytes (see `save`)."""
        sections: list[tuple[str, bytes]] = []
        kernels = []
        for k in self.kernels:
            sections.append((f"kernel:{k.name}", bytes(k.payload)))
            params = [[p.name, p.dtype, list(p.shape)] for p in k.params]
            kernels.append({"name": k.name, "kind": k.kind, "params": params, "meta": k.meta})
        consts = []
        for name, value in self.constants.items():
            sections.append((f"const:{name}", np.ascontiguousarray(value).tobytes()))
            consts.append({"name": name, "dtype": str(value.dtype), "shape": list(value.shape)})
        header = {
            "target": self.target,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "tensors": {n: [list(t.shape), t.dtype] for n, t in self.tensors.items()},
            "kernels": kernels,
            "calls": [[c.kernel, list(c.args), c.label] for c in self.calls],
            "slots": self.slots,
            "arena_bytes": self.arena_bytes,
            "constants": consts,
            "stats": self.stats,
        }
        return container.pack(MAGIC, VERSION, header, sections)

    def save(self, path: str | Path) -> None:
        """Write the module to one file: magic TFMOD, JSON header, kernel and constant sections."""
        Path(path).write_bytes(self.to_bytes())

    @staticmethod
    def load(path: str | Path) -> Module:
        """Read a file written by `save`.

        Raises:
            ModuleFormatError: for a file that is not a module or is damaged, naming the file
                and the byte offset of the problem.
            OSError: when the file cannot be read.
        """
        return Module.from_bytes(Path(path).read_bytes(), str(path))

    @staticmethod
    def from_bytes(data: bytes, source: str = "<bytes>") -> Module:
        header, sections = container.unpack(
            data, MAGIC, VERSION, source, "module", ModuleFormatError
        )
        try:
            return _from_header(header, sections, data, source)
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, ModuleFormatError):
                raise
            raise container.header_error(source, len(MAGIC), e, ModuleFormatError) from None


def _payload_offset(data: bytes, header: Mapping[str, Any], name: str) -> int:
    (header_len,) = struct.unpack_from("<I", data, len(MAGIC) + 4)
    base = len(MAGIC) + 8 + header_len
    return base + next(int(s["offset"]) for s in header["sections"] if s["name"] == name)


def _from_header(
    header: Mapping[str, Any], sections: Mapping[str, bytes], data: bytes, source: str
) -> Module:
    def section(name: str) -> bytes:
        if name not in sections:
            raise ModuleFormatError(
                f"{source}: offset {len(MAGIC) + 8}: section {name!r} must be present"
            )
        return sections[name]

    kernels = [
        KernelImage(
            k["name"],
            k["kind"],
            tuple(ParamSpec(p[0], p[1], tuple(p[2])) for p in k["params"]),
            section(f"kernel:{k['name']}"),
            dict(k.get("meta", {})),
        )
        for k in header["kernels"]
    ]
    constants = {}
    for c in header["constants"]:
        raw, spec = section(f"const:{c['name']}"), TensorSpec(tuple(c["shape"]), c["dtype"])
        if len(raw) != spec.nbytes:
            offset = _payload_offset(data, header, f"const:{c['name']}")
            raise ModuleFormatError(
                f"{source}: offset {offset}: constant {c['name']!r} must have {spec.nbytes} "
                f"bytes ({spec}), not {len(raw)}"
            )
        constants[c["name"]] = np.frombuffer(raw, spec.dtype).reshape(spec.shape)
    tensors = {n: TensorSpec(tuple(s), d) for n, (s, d) in header["tensors"].items()}
    return Module(
        target=header["target"],
        inputs=header["inputs"],
        outputs=header["outputs"],
        tensors=tensors,
        kernels=kernels,
        calls=[Call(k, tuple(a), label) for k, a, label in header["calls"]],
        slots={n: int(o) for n, o in header["slots"].items()},
        arena_bytes=header["arena_bytes"],
        constants=constants,
        stats=header.get("stats", {}),
    )
