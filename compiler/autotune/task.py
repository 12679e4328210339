"""Tuning tasks: one tunable workload of a template, and the templates themselves.

A `Task` is a template name (e.g. ``x86.conv2d_nchwc``), a workload (a JSON dict of shapes,
dtypes and, for the accelerator, the hardware config) and the target it is tuned for. Its
`space` is the template's config space (declared next to the schedule in `compiler.topi`);
`build(values)` compiles one config into an `Artifact` that carries its own random inputs and
the expected output from an independent oracle (numpy, or the accelerator's int8 reference),
so a runner can time it and reject a config that computes wrong numbers.

Example:
    >>> task = Task("x86.dense", {"m": 4, "n": 32, "k": 64, "dtype": "float32",
    ...                           "prepacked": True}, "llvm")
    >>> len(task.space) > 100, sorted(task.space.default.values), task.unit
    (True, ['bn', 'kunroll', 'mc_tiles', 'mr', 'parallel'], 's')

The default config's tile sizes depend on the host's vector registers (16 lanes x 32 registers
on AVX-512, 8 x 16 on AVX2), so it is the space's shape, not its default, that is fixed here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .dispatch import workload_key
from .space import ConfigSpace


class TaskError(ValueError):
    """An unknown template, a malformed workload, or a target the template does not serve."""


#: the largest workload dimension, and the most elements of one tensor of a workload: bounds far
#: above the operators tuned so far that keep a corrupt log's sizes (or a typo's) from building a
#: space or a kernel too large to hold
MAX_DIM = 1 << 20
MAX_ELEMENTS = 1 << 31


def _bad_field(template: str, name: str, kind: str, value: Any) -> TaskError:
    return TaskError(f"{template} workload field {name!r} must be {kind}, not {value!r}")


def check_fields(template: str, workload: Mapping[str, Any], fields: Mapping[str, str]) -> None:
    """Check a workload against its template's fields: `fields` maps each name to its kind,
    "size" (an int in [1, MAX_DIM]), "pad" (an int in [0, MAX_DIM]), "size2" or "pad4" (a list
    of 2 sizes or 4 pads), "dtype" (a numpy dtype name), "flag" (a bool) or "dict" (a JSON
    object); a kind ending in "?" may be left out. Fields not named are an error.

    Raises:
        TaskError: naming the template, the field and its value.
    """
    unknown = sorted(set(workload) - set(fields))
    if unknown:
        raise TaskError(f"{template} workload has unknown fields {unknown}; its fields are "
                        f"{sorted(fields)}")  # fmt: skip
    for name, kind in fields.items():
        if kind.endswith("?"):
            kind = kind[:-1]
            if name not in workload:
                continue
        if name not in workload:
            raise TaskError(f"{template} workload misses the field {name!r}")
        value = workload[name]
        base = kind.rstrip("0123456789")
        count = int(kind[len(base) :] or 0)
        if base in ("size", "pad"):
            low = 1 if base == "size" else 0
            what = f"an int in [{low}, {MAX_DIM}]"
            items = value if count else [value]
            if count:
                what = f"a list of {count} ints in [{low}, {MAX_DIM}]"
                if not isinstance(value, list) or len(value) != count:
                    raise _bad_field(template, name, what, value)
            for v in items:
                if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_DIM:
                    raise _bad_field(template, name, what, value)
        elif base == "dtype":
            try:
                ok = isinstance(value, str) and np.dtype(value).name == value
            except TypeError:
                ok = False
            if not ok:
                raise _bad_field(template, name, "a numpy dtype name such as 'float32'", value)
        elif base == "flag" and not isinstance(value, bool):
            raise _bad_field(template, name, "true or false", value)
        elif base == "dict" and not isinstance(value, dict):
            raise _bad_field(template, name, "a JSON object", value)


def check_elements(template: str, tensors: Mapping[str, tuple[int, ...]]) -> None:
    """Check that each tensor of a workload (name -> shape) is non-empty and has at most
    `MAX_ELEMENTS` elements.

    Raises:
        TaskError: naming the template, the tensor and its shape.
    """
    for name, shape in tensors.items():
        n = math.prod(shape)
        if min(shape, default=1) < 1 or n > MAX_ELEMENTS:
            raise TaskError(f"{template} workload: the {name} of shape {tuple(shape)} must have "
                            f"between 1 and {MAX_ELEMENTS} elements")  # fmt: skip


@dataclass
class Artifact:
    """A built config, ready to run anywhere this package is installed.

    Attributes:
        kind: "llvm" (host object code), "vta" (a program image) or "gpu" (a GPU program:
            `compiler.codegen.gpu` payload JSON, run on the local device of its dialect).
        payload: the object file, the program image's bytes or the GPU program's JSON.
        symbol: the function to call (llvm).
        params: (name, dtype, shape) of each parameter, inputs then the output (llvm).
        inputs: the input arrays (llvm: in parameter order; vta: slot name -> packed array).
        expected: the output the oracle computes for `inputs`.
        output: the output slot (vta).
        rtol, atol: the tolerance of the comparison (0 for exact integer results).
        hw: the hardware config as a dict (vta).
    """

    kind: str
    payload: bytes
    inputs: Any
    expected: np.ndarray
    symbol: str = ""
    params: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)
    output: str = ""
    rtol: float = 0.0
    atol: float = 0.0
    hw: dict[str, Any] | None = None


@dataclass(frozen=True)
class Template:
    """A tunable operator template: its space, its builder, and how it is measured.

    Attributes:
        name: the template name workloads are keyed by.
        kind: the target kind it serves ("llvm", "vta"; "cuda|opencl" for both GPU kinds).
        unit: the cost's unit, "s" (wall time) or "cycles".
        space: workload -> its config space.
        build: (workload, knob values, target, seed) -> Artifact.
        flops: workload -> operations per run (multiply-adds count 2).
        lower: (workload, knob values, target) -> the lowered loop IR (`PrimFunc`), for the
            cost model's loop features; None where the template has none.
        check: workload -> None, raising `TaskError` naming a malformed field (wrong type,
            missing, unknown, a size out of range); None: only JSON data is required.
    """

    name: str
    kind: str
    unit: str
    space: Callable[[dict[str, Any]], ConfigSpace]
    build: Callable[[dict[str, Any], dict[str, Any], str, int], Artifact]
    flops: Callable[[dict[str, Any]], int]
    lower: Callable[[dict[str, Any], dict[str, Any], str], Any] | None = None
    check: Callable[[dict[str, Any]], None] | None = None

    def serves(self, kind: str) -> bool:
        """Whether tasks of target kind `kind` ("llvm", "opencl", ...) use this template."""
        return kind in self.kind.split("|")


TEMPLATES: dict[str, Template] = {}


def register(template: Template) -> Template:
    TEMPLATES[template.name] = template
    return template


def get_template(name: str) -> Template:
    from . import templates  # noqa: F401  (registers the built-in templates)

    if name not in TEMPLATES:
        raise TaskError(f"template must be one of {sorted(TEMPLATES)}, not {name!r}")
    return TEMPLATES[name]


@dataclass(frozen=True)
class Task:
    """One workload of a template to tune for a target; `weight`: how often the model runs it."""

    template: str
    workload: Mapping[str, Any]
    target: str
    weight: int = 1

    def __post_init__(self) -> None:
        tmpl = get_template(self.template)
        kind = str(self.target).split()[0] if str(self.target).strip() else ""
        if not tmpl.serves(kind):
            raise TaskError(
                f"template {self.template} is for {tmpl.kind} targets, not {self.target!r}"
            )
        if not isinstance(self.workload, Mapping):
            raise TaskError(f"task workload must be a JSON object (a dict), not "
                            f"{type(self.workload).__name__}")  # fmt: skip
        try:
            json.dumps(dict(self.workload), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TaskError(f"task workload must be JSON data: {exc}") from exc
        if isinstance(self.weight, bool) or not isinstance(self.weight, int) or self.weight < 1:
            raise TaskError(f"task weight must be a positive int, not {self.weight!r}")
        if tmpl.check is not None:
            tmpl.check(dict(self.workload))

    @property
    def key(self) -> str:
        """The canonical text naming this workload: what logs and `ApplyBest` match on."""
        return workload_key(self.template, self.workload)

    @property
    def tmpl(self) -> Template:
        return get_template(self.template)

    @cached_property
    def space(self) -> ConfigSpace:
        from ..schedule.primitives import ScheduleError

        try:
            return self.tmpl.space(dict(self.workload))
        except (KeyError, TypeError, ValueError, ScheduleError) as exc:
            if isinstance(exc, TaskError):
                raise
            raise TaskError(f"workload {dict(self.workload)} of {self.template} has no config "
                            f"space: {exc!r}") from exc  # fmt: skip

    @property
    def unit(self) -> str:
        return self.tmpl.unit

    @cached_property
    def flops(self) -> int:
        return int(self.tmpl.flops(dict(self.workload)))

    def build(self, values: Mapping[str, Any], seed: int = 0) -> Artifact:
        """Compile the config with these knob values (checked against the space)."""
        config = self.space.from_values(values)
        reason = self.space.why_invalid(config.values)
        if reason:
            raise TaskError(f"config {config.values} is not valid for {self.template}: {reason}")
        return self.tmpl.build(dict(self.workload), config.values, self.target, seed)

    def lower(self, values: Mapping[str, Any]) -> Any:
        """The loop IR of a config (None where the template has no loop IR)."""
        if self.tmpl.lower is None:
            return None
        return self.tmpl.lower(dict(self.workload), dict(values), self.target)

    def to_json(self) -> dict[str, Any]:
        return {"template": self.template, "workload": dict(self.workload),
                "target": self.target, "weight": self.weight}  # fmt: skip

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Task:
        try:
            return Task(str(data["template"]), dict(data["workload"]), str(data["target"]),
                        int(data.get("weight", 1)))  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, TaskError):
                raise
            raise TaskError(
                f"a task must have template, workload and target, not {data!r}"
            ) from exc

    def describe(self) -> str:
        """A short human name, e.g. ``x86.conv2d_nchwc 64x56x56 k64 3x3 s1``."""
        w = self.workload
        blocked = f" {w['layout']} {w.get('blocks', w.get('block'))}" if "layout" in w else ""
        groups = f" g{w['groups']}" if "groups" in w else ""  # two tasks may differ by it alone
        if self.template == "x86.depthwise_conv2d":
            return (f"{self.template} {w['c']}x{w['h']}x{w['w']} {w['r']}x{w['s']} "
                    f"s{w['strides'][0]}{blocked}")  # fmt: skip
        if "c" in w and "k" in w and "r" in w:
            return (f"{self.template} {w['c']}x{w['h']}x{w['w']} k{w['k']} {w['r']}x{w['s']} "
                    f"s{w['stride']}{groups}{blocked}")  # fmt: skip
        if "ic" in w:  # the accelerator's conv2d/dense; groups and a fused pooling tell apart
            # tasks of one shape (e.g. vta.conv2d 48x9x9 oc48 3x3 s1 g3 +pool2x2 +res)
            groups = f" g{w['groups']}" if w.get("groups", 1) > 1 else ""
            pool = (f" +pool{w['pool_h']}x{w['pool_w']}"
                    if w.get("pool_h", 1) * w.get("pool_w", 1) > 1 else "")  # fmt: skip
            res = " +res" if w.get("residual") else ""
            return (f"{self.template} {w['ic']}x{w['h']}x{w['w']} oc{w['oc']} {w['kh']}x{w['kw']}"
                    f" s{w['stride_h']}{groups}{pool}{res}")  # fmt: skip
        if "m" in w:
            return f"{self.template} {w['m']}x{w['k']} n{w['n']}"
        if "x" in w and "w" in w:  # the GPU convolutions, e.g. gpu.conv2d 8x14x14 k16 3x3 s1x1 g2
            dims = lambda v: "x".join(str(d) for d in v)  # noqa: E731
            return (f"{self.template} {dims(w['x'][1:])} k{w['w'][0]} {dims(w['w'][2:])} "
                    f"s{dims(w['strides'])}{groups}")  # fmt: skip
        return self.key
