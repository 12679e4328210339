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
    >>> len(task.space) > 100, task.space.default.values["bn"], task.unit
    (True, 32, 's')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .dispatch import workload_key
from .space import ConfigSpace


class TaskError(ValueError):
    """An unknown template, a malformed workload, or a target the template does not serve."""


@dataclass
class Artifact:
    """A built config, ready to run anywhere this package is installed.

    Attributes:
        kind: "llvm" (host object code) or "vta" (a program image).
        payload: the object file or the program image's bytes.
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
        kind: the target kind it serves ("llvm" or "vta").
        unit: the cost's unit, "s" (wall time) or "cycles".
        space: workload -> its config space.
        build: (workload, knob values, target, seed) -> Artifact.
        flops: workload -> operations per run (multiply-adds count 2).
        lower: (workload, knob values, target) -> the lowered loop IR (`PrimFunc`), for the
            cost model's loop features; None where the template has none.
    """

    name: str
    kind: str
    unit: str
    space: Callable[[dict[str, Any]], ConfigSpace]
    build: Callable[[dict[str, Any], dict[str, Any], str, int], Artifact]
    flops: Callable[[dict[str, Any]], int]
    lower: Callable[[dict[str, Any], dict[str, Any], str], Any] | None = None


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
        if kind != tmpl.kind:
            raise TaskError(
                f"template {self.template} is for {tmpl.kind} targets, not {self.target!r}"
            )
        try:
            json.dumps(dict(self.workload))
        except TypeError as exc:
            raise TaskError(f"task workload must be JSON data: {exc}") from exc

    @property
    def key(self) -> str:
        """The canonical text naming this workload: what logs and `ApplyBest` match on."""
        return workload_key(self.template, self.workload)

    @property
    def tmpl(self) -> Template:
        return get_template(self.template)

    @cached_property
    def space(self) -> ConfigSpace:
        try:
            return self.tmpl.space(dict(self.workload))
        except (KeyError, TypeError) as exc:
            raise TaskError(f"workload {dict(self.workload)} of {self.template} is malformed: "
                            f"{exc!r}") from exc  # fmt: skip

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
        if self.template == "x86.depthwise_conv2d":
            return (f"{self.template} {w['c']}x{w['h']}x{w['w']} {w['r']}x{w['s']} "
                    f"s{w['strides'][0]}")  # fmt: skip
        if "c" in w and "k" in w and "r" in w:
            return (f"{self.template} {w['c']}x{w['h']}x{w['w']} k{w['k']} {w['r']}x{w['s']} "
                    f"s{w['stride']}")  # fmt: skip
        if "ic" in w:
            return (f"{self.template} {w['ic']}x{w['h']}x{w['w']} oc{w['oc']} {w['kh']}x{w['kw']}"
                    f" s{w['stride_h']}{' +res' if w.get('residual') else ''}")  # fmt: skip
        if "m" in w:
            return f"{self.template} {w['m']}x{w['k']} n{w['n']}"
        return self.key
