"""Module: a compiled model (kernels, call list, static memory plan, constants), run and saved.

What `tensorforge.compile(model, target)` returns (DESIGN.md contract 5). Kernels carry a kind;
each kind has a loader in `KERNEL_KINDS` that turns the kernels' payloads into callables ("llvm":
host object code, linked by `runtime.device.cpu.loader`; "vta": accelerator program images,
launched on a device by `runtime.device.vta.launch`). `save`/`load` write one file through
`runtime.container` (never pickle, written atomically, verified by its SHA-256 digest); every
size in a loaded header is cross-checked before any kernel runs. A module holds native code:
loading one is running its author's code (docs/security.md).

Example:
    >>> import numpy as np, tensorforge
    >>> from tensorforge.compiler.frontend.onnx_builders import mlp
    >>> module = tensorforge.compile(mlp())
    >>> out = module.run({"x": np.ones((2, 64), np.float32)})
    >>> [v.shape for v in out.values()]
    [(2, 10)]
"""

from __future__ import annotations

import math
import numbers
import struct
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import container
from . import ndarray as nd
from .checks import PREFIX, is_check, raise_failed
from .device.cpu.elf import HOST_IS_ELF, elf_problem
from .device.cpu.function import ParamSpec
from .dtypes import storage_dtype
from .executor import Executor, Launch, Profile
from .tail import SECTION as TAIL_SECTION
from .tail import Tail, TailError

MAGIC = b"TFMOD\x00\x00\x01"
# 2: the container carries an integrity digest; 3: sections 64-byte aligned; 4: a data-dependent
# tail (`runtime.tail`; only files with one are written as 4)
VERSION = 4
OLDER_VERSIONS = (2, 3)  # read with their digest (their constants are copied to aligned memory)
LEGACY_VERSIONS = (1,)  # read without a digest (written before it existed): docs/security.md

DTYPES = container.DTYPES  # what tensors, parameters and constants may have
MAX_ELEMENTS = container.MAX_ELEMENTS  # per tensor (2**40)
#: the memory planner's slot alignment: an arena is at most its slots' extent rounded up to it
ARENA_ALIGN = 64


class ModuleFormatError(ValueError):
    """A module file is not one this TensorForge reads; the message names file and offset."""


#: `Module.run` warns of an int8 model's input past its calibrated range when more than this
#: share of its values clip, or one lies past the range by more than CLIP_REACH of its
#: half-width (`CalibrationRangeWarning`)
CLIP_SHARE, CLIP_REACH = 0.01, 0.25


class CalibrationRangeWarning(UserWarning):
    """An input of an int8 model holds values outside the range its calibration covered: the
    model clips them (static quantization), so its answers may be far from the float model's."""


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
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize  # exact: Python ints

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


def check_spec(shape: Any, dtype: Any, where: str) -> None:
    """Raise ValueError unless `shape` is a tuple of ints >= 0 of at most MAX_ELEMENTS elements
    (zero dims counted as ones) and `dtype` one of DTYPES."""
    container.check_array_spec(shape, dtype, where)


def _read_only(array: np.ndarray) -> np.ndarray:
    """`array`, or a read-only view of it when it is writeable (the caller's flag is kept)."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.setflags(write=False)
    return view


def _count(value: Any, where: str) -> int:
    """`value` if it is an int >= 0 (not a bool, float or string), else ValueError."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{where} must be an integer >= 0, not {value!r}")
    return value


def _check_gpu_kernel(k: KernelImage) -> None:
    """A GPU kernel's payload parses (`parse_payload` checks every field), and the buffers it
    was compiled for (its non-workspace buffers, in order) are exactly its parameters: the same
    count, dtypes and element counts."""
    from .device.gpu import GPUError, parse_payload  # numpy only: no GPU driver is touched

    try:
        payload = parse_payload(bytes(k.payload), k.name)
    except GPUError as e:
        raise ValueError(str(e)) from None
    where = f"kernel {k.name!r}"
    bound = [b for b in payload["buffers"] if not b["workspace"]]
    if len(bound) != len(k.params):
        raise ValueError(
            f"{where}: its GPU program takes {len(bound)} buffers, but it has {len(k.params)} "
            "parameters"
        )
    for spec, b in zip(k.params, bound, strict=True):
        if b["dtype"] != spec.dtype or b["size"] != math.prod(spec.shape):
            raise ValueError(
                f"{where}: parameter {spec.name} is {spec.describe()}, but the GPU program was "
                f"compiled for {b['size']} elements of {b['dtype']}"
            )


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
        problem = elf_problem(k.payload) if HOST_IS_ELF else None
        if problem is not None:
            raise ValueError(f"kernel {k.name!r}: object code is malformed: {problem}")
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


def _load_loop(kernels: Sequence[KernelImage], options: Mapping[str, Any]) -> dict[str, Launch]:
    from .loop import load_loop_kernels

    return load_loop_kernels(kernels, options)


_GPU_KINDS = ("opencl", "cuda")  # device-resident: run by runtime.device.gpu.GPUExecutor

register_kernel_kind("llvm", _load_llvm)
register_kernel_kind("vta", _load_vta)
register_kernel_kind("loop", _load_loop)


class Module:
    """A compiled model.

    Attributes:
        inputs, outputs: value names with `tensors[name]` giving shape and dtype.
        checks: the run-time checks (`runtime.checks`): uint8 scalars in the arena, read after
            each run; one that is 0 raises `CheckFailed` with its message (an index outside
            its axis).
        kernels: the compiled kernels; calls: the launches in execution order.
        slots: value -> arena offset (the static memory plan); arena_bytes: its size.
        constants: value -> array (weights, pre-packed where the kernels want it), read-only,
            C-contiguous and 64-byte aligned, held once: the executor binds these arrays
            themselves. An array given that way is kept as is (a loaded module's constants
            are views of the file's bytes); any other is copied once (`ndarray.aligned`).
        stats: compile-time statistics (seconds per phase, kernel count, bytes).
        tail: the model's data-dependent part (`runtime.tail`), run after the compiled part by
            `run`, or None. With a tail, `outputs` are the compiled part's (the model's outputs
            it computes and the values the tail reads) and `model_outputs` the model's.
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
        checks: Sequence[str] = (),
        tail: Tail | None = None,
    ) -> None:
        self.target = target
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.checks = tuple(checks)
        self.tail = tail
        if tail is not None:
            tail.check([*self.inputs, *self.outputs])
        self.tensors = dict(tensors)
        self.kernels = list(kernels)
        self.calls = list(calls)
        self.slots, self.arena_bytes = dict(slots), _count(arena_bytes, "arena_bytes")
        self.constants = {k: np.asarray(v) for k, v in constants.items()}
        self.stats = dict(stats or {})
        self._check_tensors()
        self._ranges = self._calibrated_ranges()  # (checked once, as a file loads)
        self._check_calls()
        self._check_plan()
        # Checked first (an object array cannot be viewed as bytes); the executor binds these.
        self.constants = {k: _read_only(nd.aligned(v)) for k, v in self.constants.items()}
        self._executor: Executor | None = None
        self._launches: dict[str, Launch] | None = None
        self._device_options: dict[str, Any] = {}
        self._lock = threading.RLock()  # one run at a time over the one arena
        self._warned_ranges: set[str] = set()  # inputs already warned of (calibration ranges)

    def _check_tensors(self) -> None:
        """Every tensor, parameter and constant has a valid shape and dtype; names resolve."""
        if not isinstance(self.target, str):
            raise ValueError(f"target must be a string, not {self.target!r}")
        for name, spec in self.tensors.items():
            if not isinstance(name, str) or not isinstance(spec, TensorSpec):
                raise ValueError(f"tensor {name!r} must map a name to a TensorSpec")
            check_spec(spec.shape, spec.dtype, f"tensor {name!r}")
        for what, names in (("input", self.inputs), ("output", self.outputs)):
            for name in names:
                if not isinstance(name, str) or name not in self.tensors:
                    raise ValueError(f"{what} {name!r} must be one of the module's tensors")
            if len(set(names)) != len(names):
                raise ValueError(f"{what}s must be distinct, not {list(names)}")
        for name in self.inputs:
            if name in self.constants:
                raise ValueError(f"input {name!r} must not be a constant")
        for name in self.checks:
            spec = self.tensors.get(name) if isinstance(name, str) else None
            if not is_check(name) or spec is None or (spec.shape, spec.dtype) != ((), "uint8"):
                raise ValueError(f"check {name!r} must be a uint8 scalar named {PREFIX}...")
            if name not in self.slots or name in self.outputs:
                raise ValueError(f"check {name!r} must be in the arena and not an output")
        for name in self.outputs:
            if name not in self.slots and name not in self.constants:
                raise ValueError(f"output {name!r} must be in the arena or a constant")
        names = [k.name for k in self.kernels]
        if len(set(names)) != len(names):
            raise ValueError(f"kernel names must be distinct, not {names}")
        for k in self.kernels:
            if not isinstance(k.name, str) or not isinstance(k.kind, str):
                raise ValueError(f"kernel {k.name!r}: name and kind must be strings")
            if not isinstance(k.meta, Mapping):
                raise ValueError(f"kernel {k.name!r}: meta must be a mapping")
            for p in k.params:
                check_spec(p.shape, p.dtype, f"parameter {p.name!r} of kernel {k.name!r}")
            if k.kind in _GPU_KINDS:
                _check_gpu_kernel(k)
        for name, value in self.constants.items():
            where = f"constant {name!r}"
            check_spec(tuple(value.shape), str(value.dtype), where)
            if value.dtype.byteorder == ">":
                raise ValueError(f"{where} must be in native byte order")
            spec = self.tensors.get(name)
            if spec is not None and (spec.dtype != str(value.dtype) or spec.nbytes != value.nbytes):
                raise ValueError(
                    f"{where} holds {value.dtype}{list(value.shape)}, but its tensor is {spec}"
                )

    def _check_plan(self) -> None:
        """Every arena slot lies inside the arena, aligned to its element size, and tensors
        that are live at the same time (from the first to the last call that binds them; inputs
        from the start, outputs to the end) never share bytes."""
        extent = 0
        spans: dict[str, tuple[int, int]] = {}
        for name, offset in self.slots.items():
            where = f"slot of {name!r}"
            if name not in self.tensors:
                raise ValueError(f"{where}: the value must be one of the module's tensors")
            if name in self.constants:
                raise ValueError(f"{where}: a constant must not also have an arena slot")
            spec = self.tensors[name]
            _count(offset, f"{where}: offset")
            if offset % np.dtype(spec.dtype).itemsize:
                raise ValueError(
                    f"{where}: offset {offset} must be a multiple of its element size "
                    f"({np.dtype(spec.dtype).itemsize} B, {spec.dtype})"
                )
            if offset + spec.nbytes > self.arena_bytes:
                raise ValueError(
                    f"{where}: bytes [{offset}, {offset + spec.nbytes}) ({spec}) must lie inside "
                    f"the arena of {self.arena_bytes} B"
                )
            extent = max(extent, offset + spec.nbytes)
            spans[name] = (offset, offset + spec.nbytes)
        if self.arena_bytes > -(-extent // ARENA_ALIGN) * ARENA_ALIGN:
            raise ValueError(
                f"arena_bytes {self.arena_bytes} must not exceed what its slots span ({extent} B, "
                f"rounded up to {ARENA_ALIGN})"
            )
        live: dict[str, list[int]] = {name: [-1, -1] for name in self.inputs}
        for k, call in enumerate(self.calls):
            for arg in call.args:
                live.setdefault(arg, [k, k])[1] = k
        for name in (*self.outputs, *self.checks):
            if name in self.slots and name not in live:
                raise ValueError(f"output {name!r} must be an input or bound by a kernel call")
            live.setdefault(name, [len(self.calls), len(self.calls)])[1] = len(self.calls)
        placed = sorted((start, end, name) for name, (start, end) in spans.items() if end > start)
        for i, (start, end, name) in enumerate(placed):
            for other_start, other_end, other in placed[i + 1 :]:
                if other_start >= end:
                    break
                a, b = live.get(name), live.get(other)
                if a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]:
                    raise ValueError(
                        f"slots of {name!r} (bytes [{start}, {end})) and {other!r} (bytes "
                        f"[{other_start}, {other_end})) overlap while both are live"
                    )

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
                if not isinstance(value, str) or value not in self.tensors:
                    raise ValueError(
                        f"argument {spec.name} of kernel {call.kernel!r} must be one of the "
                        f"module's tensors, not {value!r}"
                    )
                if value in self.constants:
                    const = self.constants[value]
                    have = TensorSpec(tuple(const.shape), str(const.dtype))
                else:
                    have = self.tensors[value]
                want = TensorSpec(spec.shape, spec.dtype)
                # (a narrow tensor, bfloat16 or float8, is its storage integer in kernels)
                if storage_dtype(have.dtype) != want.dtype or have.nbytes != want.nbytes:
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
            try:
                self._executor = Executor(self.arena_bytes, slots, self.constants, calls)
            except MemoryError:
                raise ValueError(
                    f"cannot allocate the module's arena of {self.arena_bytes} B"
                ) from None
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
            (*self.outputs, *self.checks),
            self._device_options,
        )

    def _named_inputs(self, inputs: Any) -> Mapping[str, Any]:
        """`inputs` as name -> value: a mapping as it is, one array for a one-input model, or a
        list/tuple of arrays in the order of `self.inputs`."""
        if isinstance(inputs, Mapping):
            return inputs
        names = list(self.inputs)
        if isinstance(inputs, (list, tuple)) and len(names) == 1 and self._is_value(inputs):
            return {names[0]: inputs}  # a one-input model's value as a nested list (x.tolist())
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != len(names):
                raise ValueError(
                    f"the model takes {len(names)} input(s) {names}, not {len(inputs)} values"
                )
            return dict(zip(names, inputs, strict=True))
        if hasattr(inputs, "__array__") or isinstance(inputs, (int, float, np.generic)):
            if len(names) != 1:
                raise ValueError(
                    f"the model takes {len(names)} inputs {names}: pass a dict name -> array "
                    "(or a list in that order), not one array"
                )
            return {names[0]: inputs}
        raise TypeError(
            f"inputs must be a dict name -> array (or one array, or a list of arrays in the "
            f"order {names}), not {type(inputs).__name__}"
        )

    def _is_value(self, inputs: list | tuple) -> bool:
        """Whether a list is the one input's value itself rather than a list of inputs: its
        nested shape is the input's (a list of inputs has one more leading axis, so the two
        readings never both fit)."""
        (name,) = self.inputs
        try:
            shape = np.shape(inputs)
        except ValueError:  # ragged: not an array's value
            return False
        return shape == tuple(self.tensors[name].shape)

    def _bind_inputs(self, inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray) -> Executor:
        inputs = self._named_inputs(inputs)
        unknown = [n for n in inputs if n not in self.inputs]
        missing = [n for n in self.inputs if n not in inputs]
        if unknown or missing:
            raise ValueError(
                f"inputs must be exactly {list(self.inputs)}, not {sorted(inputs)} "
                f"(missing {missing}, unknown {unknown})"
            )
        executor = self._load()
        quantized = any(k.kind == "vta" for k in self.kernels)
        ranges = self._ranges
        for name in self.inputs:
            spec = self.tensors[name]
            value = _as_input(inputs[name], spec.dtype)
            if value.shape != spec.shape or str(value.dtype) != spec.dtype:
                raise ValueError(
                    f"input {name!r} must be {spec}, not {value.dtype}{list(value.shape)}"
                )
            if quantized and value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ValueError(  # int8 has no NaN or infinity: they would become numbers
                    f"input {name!r} holds {int((~np.isfinite(value)).sum())} NaN or infinite "
                    "value(s), which the model's int8 layers cannot represent"
                )
            if name in ranges and name not in self._warned_ranges:
                self._warn_outside_calibration(name, value, ranges[name])
            if name in executor.views:
                executor.views[name][...] = value
        return executor

    def _calibrated_ranges(self) -> dict[str, tuple[float, float]]:
        """`stats["calibrated_ranges"]` (input name -> [low, high], `compile.calibrated_ranges`)
        checked: inputs of this module, two finite numbers each, low below high.

        Raises:
            ValueError: naming the entry that is not so (a damaged or hand-made file).
        """
        raw = self.stats.get("calibrated_ranges")
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            raise ValueError(f"module stats 'calibrated_ranges' must be a mapping, not {raw!r:.80}")
        ranges = {}
        for name, bounds in raw.items():
            pair = tuple(bounds) if isinstance(bounds, list | tuple) else ()
            if (
                name not in self.inputs
                or len(pair) != 2
                or not all(isinstance(b, int | float) and math.isfinite(b) for b in pair)
                or not pair[0] < pair[1]
            ):
                raise ValueError(
                    f"module stats 'calibrated_ranges': {name!r}: {bounds!r:.80} must be an "
                    f"input of the module ({list(self.inputs)}) with [low, high], two finite "
                    "numbers, low below high"
                )
            ranges[name] = (float(pair[0]), float(pair[1]))
        return ranges

    def _warn_outside_calibration(
        self, name: str, value: np.ndarray, bounds: tuple[float, float]
    ) -> None:
        """A `CalibrationRangeWarning` (once per input and module) when `value` leaves the
        range its int8 form represents (`stats["calibrated_ranges"]`) by much: more than
        CLIP_SHARE of its values, or any by more than CLIP_REACH of the range's half-width
        (those clip to its ends). A few values just past it are a fresh sample's tail, which
        calibration on a finite set, or a percentile observer by design, leaves out."""
        if value.size == 0 or value.dtype.kind != "f":
            return
        low, high = bounds
        smallest, largest = float(value.min()), float(value.max())
        if math.isnan(smallest) or math.isnan(largest):  # (NaN has no range to leave)
            value = value[~np.isnan(value)]
            if value.size == 0:
                return
            smallest, largest = float(value.min()), float(value.max())
        if low <= smallest and largest <= high:  # (two reductions per run, no copy)
            return
        center, half = (low + high) / 2, (high - low) / 2
        distance = np.abs(value.astype(np.float64) - center)
        count = int((distance > half).sum())
        farthest = float(distance.max()) / half if half > 0 else math.inf
        if count <= CLIP_SHARE * value.size and farthest <= 1 + CLIP_REACH:
            return
        self._warned_ranges.add(name)
        reach = (
            f"up to {farthest:.3g}x its half-width from its center"
            if math.isfinite(farthest)
            else "infinities among them"
        )
        warnings.warn(
            CalibrationRangeWarning(
                f"input {name!r}: {count} of {value.size} values lie outside "
                f"[{low:.6g}, {high:.6g}], the range the int8 calibration covered, {reach} "
                f"(values from {smallest:.6g} to {largest:.6g} here); they clip to its ends. "
                "Calibrate with inputs like these (quantize_graph's calibration_inputs, "
                "`tensorforge.compile(..., calibration=...)`)"
            ),
            stacklevel=4,
        )

    def run(self, inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray) -> dict[str, np.ndarray]:
        """Run the model: input name -> array in (or, in the order of `inputs`, a list of arrays,
        or one array for a one-input model), output name -> array (a fresh copy) out. An
        array may have any strides or byte order; a nested list takes the input's dtype when
        that keeps its values' kind (and, for integers, the values).

        One module owns one arena, so runs from several Python threads take turns (a lock);
        for runs in parallel, give each thread its own module
        (`Module.from_bytes(module.to_bytes())`).

        Raises:
            CheckFailed: (an IndexError) an index given at run time lies outside its axis
                (Gather, GatherElements, GatherND, ScatterElements, ScatterND), as onnxruntime
                refuses it: the message names the node, its input and the valid range.
        """
        with self._lock:
            executor = self._bind_inputs(inputs)
            executor.run()
            raise_failed(executor.views, self.checks)
            results = {name: np.array(executor.views[name]) for name in self.outputs}
        if self.tail is None:
            return results
        return self._run_tail(results, self._named_inputs(inputs))

    def set_tail(self, tail: Tail) -> None:
        """Run `tail` after the compiled part (`runtime.tail`); it must read only the
        compiled part's inputs and outputs."""
        tail.check([*self.inputs, *self.outputs])
        self.tail = tail

    @property
    def model_outputs(self) -> tuple[str, ...]:
        """The names `run` returns: the model's outputs (`outputs`, without a tail)."""
        return self.outputs if self.tail is None else self.tail.outputs

    def _run_tail(
        self, results: dict[str, np.ndarray], inputs: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        """The model's outputs: the tail run on the compiled part's results (and inputs)."""
        assert self.tail is not None
        values = dict(results)
        for name in self.tail.inputs:
            if name not in values:  # one of the module's inputs (checked by _bind_inputs)
                values[name] = _as_input(inputs[name], self.tensors[name].dtype)
        computed = self.tail.run(values)
        missing = [n for n in self.tail.outputs if n not in computed and n not in results]
        if missing:  # (a damaged or hand-made file: the digest cannot tell who wrote it)
            raise TailError(f"the module's outputs {missing} come from neither its compiled "
                            "part nor its tail")  # fmt: skip
        return {n: computed[n] if n in computed else results[n] for n in self.tail.outputs}

    def run_views(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """Run on `inputs` that already have the inputs' exact shapes and dtypes, unchecked (for
        a caller that made them so: a loop kernel running its body, `runtime/loop.py`, where
        `run`'s checks and copies cost more than a small body). Returns the arena's views by
        value name, overwritten by the next run; the caller holds the module's lock if threads
        share it."""
        executor = self._load()
        views = executor.views
        for name in self.inputs:
            if name in views:  # (an input no kernel reads has no slot)
                views[name][...] = inputs[name]
        executor.run()
        raise_failed(views, self.checks)
        return views

    def profile(
        self, inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray, repeat: int = 10
    ) -> Profile:
        """Per-layer (per-kernel) median times over `repeat` runs; `str(profile)` is a table.
        A data-dependent tail (`runtime.tail`) is one row last, timed on the compiled part's
        results."""
        if isinstance(repeat, bool) or not isinstance(repeat, numbers.Integral) or repeat < 1:
            raise ValueError(f"repeat must be an int of at least 1, not {repeat!r}")
        with self._lock:
            executor = self._bind_inputs(inputs)
            executor.run()  # warm up: page in the arena and the code
            profile = executor.profile(repeat)
            if self.tail is None:
                return profile
            results = {name: np.array(executor.views[name]) for name in self.outputs}
        named, times = self._named_inputs(inputs), []
        for _ in range(repeat):
            start = time.perf_counter()
            self._run_tail(results, named)
            times.append(time.perf_counter() - start)
        label = f"data-dependent tail ({len(self.tail.inputs)} values in, reference ops)"
        return profile.with_row(label, "tail", float(np.median(times)) * 1e3)

    # ---- accelerator devices ------------------------------------------------------------------

    def use_device(self, backend: str, **options: Any) -> Module:
        """Run the accelerator kernels on device backend `backend` ("sim", "cyclesim", "rtl")
        with its options (`runtime.device.vta.open_device`) from the next run on; returns self.

        Example:
            >>> module.use_device("cyclesim").run(inputs)           # doctest: +SKIP
            >>> module.device_results()["conv2 (tf.qconv2d)"].cycles  # doctest: +SKIP

        Raises:
            ValueError: when no kernel of the module runs on a device (every kernel is host
                CPU code: there is nothing to select), or `backend` is not one of the
                accelerator's backends (`runtime.device.vta.BACKENDS`) for a module with
                accelerator kernels.
        """
        kinds = {k.kind for k in self.kernels}
        if "vta" not in kinds and not kinds & set(_GPU_KINDS):
            raise ValueError(
                f"use_device selects where accelerator or GPU kernels run, and this module "
                f"(target {self.target!r}) has none: all its kernels run on the host CPU"
            )
        if "vta" in kinds:
            from .device.vta import BACKENDS

            if backend not in BACKENDS:
                raise ValueError(f"device backend must be one of {BACKENDS}, not {backend!r}")
        with self._lock:
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
        sections: list[tuple[str, Any]] = []
        kernels = []
        for k in self.kernels:
            sections.append((f"kernel:{k.name}", bytes(k.payload)))
            params = [[p.name, p.dtype, list(p.shape)] for p in k.params]
            kernels.append({"name": k.name, "kind": k.kind, "params": params, "meta": k.meta})
        consts = []
        for name, value in self.constants.items():
            sections.append((f"const:{name}", np.ascontiguousarray(value)))  # no copy but pack's
            consts.append({"name": name, "dtype": str(value.dtype), "shape": list(value.shape)})
        if self.tail is not None:
            sections.append((TAIL_SECTION, self.tail.model))
        header = {
            "target": self.target,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "checks": list(self.checks),
            **({"tail": self.tail.header()} if self.tail is not None else {}),
            "tensors": {n: [list(t.shape), t.dtype] for n, t in self.tensors.items()},
            "kernels": kernels,
            "calls": [[c.kernel, list(c.args), c.label] for c in self.calls],
            "slots": self.slots,
            "arena_bytes": self.arena_bytes,
            "constants": consts,
            "stats": self.stats,
        }
        # A file with a tail is version 4, which readers before it refuse (they would return the
        # compiled part's outputs as the model's); any other file stays version 3.
        version = VERSION if self.tail is not None else 3
        return container.pack(MAGIC, version, header, sections, align=nd.ALIGNMENT)

    def save(self, path: str | Path) -> None:
        """Write the module to one file: magic TFMOD, JSON header (with a SHA-256 digest), kernel
        and constant sections, each at a 64-byte multiple in the file (so that `load` uses the
        constants in place). The write is atomic: readers see the old file or the new one."""
        container.write_atomic(path, self.to_bytes())

    @staticmethod
    def load(path: str | Path) -> Module:
        """Read a file written by `save`.

        The file holds native code: loading one is running its author's code (docs/security.md).
        Before anything is used, its digest is checked (damage is refused) and every size in
        its header is cross-checked against the kernels' parameters and the arena.

        The file is read once into a 64-byte aligned buffer (`container.read_aligned`) and the
        constants are read-only arrays over it: the weights are in memory once, and the
        executor binds them in place. (A file written before format 3 has unaligned sections:
        its constants are copied once, and the file's buffer is then freed.)

        Raises:
            ModuleFormatError: for a file that is not a module or is damaged, naming the file
                and the byte offset of the problem.
            OSError: when the file cannot be read.
        """
        return Module.from_bytes(container.read_aligned(path), str(path))

    @staticmethod
    def from_bytes(data: bytes | memoryview, source: str = "<bytes>") -> Module:
        """A module from a file's bytes (see `load`): ``bytes``, or a read-only memoryview whose
        bytes nobody changes (any other buffer is copied first)."""
        # Sections stay views of `data`: the constants are arrays over the file's bytes, so a
        # module's weights are in memory once, not twice (when `data` is 64-byte aligned, as
        # `load` reads it; else Module copies them to aligned memory and `data` can be freed).
        header, sections = container.unpack(
            data, MAGIC, VERSION, source, "module", ModuleFormatError, LEGACY_VERSIONS,
            copy=False, older=OLDER_VERSIONS,
        )  # fmt: skip
        try:
            return _from_header(header, sections, data, source)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            if isinstance(e, ModuleFormatError):
                raise
            raise container.header_error(source, len(MAGIC), e, ModuleFormatError) from None


def _as_input(value: Any, dtype: str) -> np.ndarray:
    """An input value as an array: a non-native byte order becomes native (the same numbers),
    and a list or scalar takes the input's dtype when numpy converts it without changing its
    kind (a list of floats for a float32 input; never floats into an integer input)."""
    if not isinstance(value, np.ndarray):
        array = np.asarray(value)
        integer = np.dtype(dtype).kind in "iu" or dtype in ("int4", "uint4")
        if integer and array.dtype.kind == "f":  # (ml_dtypes lets floats cast to int4)
            return array
        if array.dtype.kind in "biuf" and np.can_cast(array.dtype, dtype, "same_kind"):
            converted = array.astype(dtype)
            exact = not integer or np.array_equal(converted, array)
            return converted if exact else array  # [300] is no int8: the dtype error says so
        return array
    if not value.dtype.isnative and value.dtype.newbyteorder("=") == np.dtype(dtype):
        return value.astype(dtype)
    return value


def _payload_offset(data: bytes, header: Mapping[str, Any], name: str) -> int:
    (header_len,) = struct.unpack_from("<I", data, len(MAGIC) + 4)
    base = len(MAGIC) + 8 + header_len
    return base + next(int(s["offset"]) for s in header["sections"] if s["name"] == name)


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{where} must be a string, not {value!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{where} must be a list, not {value!r}")
    return value


def _shape(value: Any, where: str) -> tuple[int, ...]:
    """A shape from JSON: a list of ints (range-checked by `check_spec`)."""
    dims = tuple(_list(value, f"{where} shape"))
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise TypeError(f"{where} shape must be a list of integers, not {value!r}")
    return dims


def _from_header(
    header: Mapping[str, Any], sections: Mapping[str, bytes], data: bytes, source: str
) -> Module:
    def section(name: str) -> bytes | memoryview:
        if name not in sections:
            raise ModuleFormatError(
                f"{source}: offset {len(MAGIC) + 8}: section {name!r} must be present"
            )
        return sections[name]

    kernels = []
    for k in _list(header["kernels"], "kernels"):
        name = _str(k["name"], "kernel name")
        params = []
        for p in _list(k["params"], f"kernel {name!r} params"):
            pname, dtype, shape = _list(p, f"a parameter of kernel {name!r}")
            where = f"parameter {pname!r} of kernel {name!r}"
            params.append(ParamSpec(_str(pname, where), _str(dtype, where), _shape(shape, where)))
            check_spec(params[-1].shape, dtype, where)
        meta = k.get("meta", {})
        if not isinstance(meta, dict):
            raise TypeError(f"kernel {name!r} meta must be an object, not {meta!r}")
        kind = _str(k["kind"], f"kernel {name!r} kind")
        payload = bytes(section(f"kernel:{name}"))
        kernels.append(KernelImage(name, kind, tuple(params), payload, meta))
    constants = {}
    for c in _list(header["constants"], "constants"):
        name = _str(c["name"], "constant name")
        spec = TensorSpec(_shape(c["shape"], f"constant {name!r}"), c["dtype"])
        check_spec(spec.shape, spec.dtype, f"constant {name!r}")
        raw = section(f"const:{name}")
        if len(raw) != spec.nbytes:
            offset = _payload_offset(data, header, f"const:{name}")
            raise ModuleFormatError(
                f"{source}: offset {offset}: constant {name!r} must have {spec.nbytes} "
                f"bytes ({spec}), not {len(raw)}"
            )
        constants[name] = np.frombuffer(raw, spec.dtype).reshape(spec.shape)
    tensors = {}
    for n, value in header["tensors"].items():
        shape, dtype = _list(value, f"tensor {n!r}")
        tensors[n] = TensorSpec(_shape(shape, f"tensor {n!r}"), _str(dtype, f"tensor {n!r}"))
        check_spec(tensors[n].shape, dtype, f"tensor {n!r}")
    calls = []
    for call in _list(header["calls"], "calls"):
        kernel, args, label = _list(call, "a call")
        args = [_str(a, f"an argument of call {label!r}") for a in _list(args, "call arguments")]
        calls.append(Call(_str(kernel, "call kernel"), tuple(args), _str(label, "call label")))
    slots = header["slots"]
    if not isinstance(slots, dict):
        raise TypeError(f"slots must be an object, not {slots!r}")
    stats = header.get("stats", {})
    if not isinstance(stats, dict):
        raise TypeError(f"stats must be an object, not {stats!r}")
    return Module(
        target=_str(header["target"], "target"),
        inputs=[_str(n, "an input") for n in _list(header["inputs"], "inputs")],
        outputs=[_str(n, "an output") for n in _list(header["outputs"], "outputs")],
        tensors=tensors,
        kernels=kernels,
        calls=calls,
        slots=slots,
        arena_bytes=header["arena_bytes"],
        constants=constants,
        stats=stats,
        checks=[_str(n, "a check") for n in _list(header.get("checks", []), "checks")],
        tail=_tail(header, section) if "tail" in header else None,
    )


def _tail(header: Mapping[str, Any], section: Callable[[str], bytes | memoryview]) -> Tail:
    entry = header["tail"]
    if not isinstance(entry, dict):
        raise TypeError(f"tail must be an object, not {entry!r}")
    inputs = [_str(n, "a tail input") for n in _list(entry["inputs"], "tail inputs")]
    outputs = [_str(n, "a tail output") for n in _list(entry["outputs"], "tail outputs")]
    return Tail(bytes(section(TAIL_SECTION)), tuple(inputs), tuple(outputs))
