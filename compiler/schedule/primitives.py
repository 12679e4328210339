"""Schedule primitives as small records, and their JSON form.

A schedule is the list of records applied to a fresh `create_schedule(outputs)`; records name
stages and axes by their (unique, deterministic) names so that a saved list replays exactly.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from typing import Any


class ScheduleError(Exception):
    """An illegal schedule primitive; the message starts with the primitive's name."""


def check_positive_knobs(config: object, names: tuple[str, ...], op: str) -> None:
    """A template's integer knobs `names` of `config` must be positive ints (ScheduleError)."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or value < 1:
            raise ScheduleError(f"{op}: knob {name} must be a positive int, not {value!r}")


def _record(cls: type) -> type:
    return dataclass(frozen=True, slots=True)(cls)


@_record
class Split:
    """Split `axis` into outer and inner axes by inner `factor` or outer `nparts`."""

    stage: str
    axis: str
    factor: int | None = None
    nparts: int | None = None


@_record
class Fuse:
    """Fuse adjacent leaf `axes` (outermost first) into one axis."""

    stage: str
    axes: tuple[str, ...]


@_record
class Reorder:
    """Put leaf `axes` in this order, in the positions they occupy."""

    stage: str
    axes: tuple[str, ...]


@_record
class Tile:
    """Split `x` and `y` and order the result as x.outer, y.outer, x.inner, y.inner."""

    stage: str
    x: str
    y: str
    x_factor: int
    y_factor: int


@_record
class ComputeAt:
    """Compute `stage` inside loop `axis` of stage `parent`, only the region it needs."""

    stage: str
    parent: str
    axis: str


@_record
class ComputeInline:
    """Substitute the stage's expression into its consumers."""

    stage: str


@_record
class ComputeRoot:
    """Compute the stage at the top level (undoes compute_at / compute_inline)."""

    stage: str


@_record
class CacheRead:
    """Add a stage copying `tensor` into `scope`, read by `readers` instead of `tensor`."""

    tensor: str
    scope: str
    readers: tuple[str, ...]


@_record
class CacheWrite:
    """Compute `tensor` into a `scope` buffer first, then copy it to `tensor`."""

    tensor: str
    scope: str


@_record
class SetScope:
    """Allocate the stage's buffer in memory `scope`."""

    stage: str
    scope: str


@_record
class Vectorize:
    stage: str
    axis: str


@_record
class Unroll:
    stage: str
    axis: str


@_record
class Parallel:
    stage: str
    axis: str


@_record
class Bind:
    """Bind `axis` to the hardware thread axis `thread` (blockIdx.x, threadIdx.x, vthread...)."""

    stage: str
    axis: str
    thread: str


@_record
class Pragma:
    """Attach pragma `key` (= `value`) to loop `axis`, e.g. a DMA copy marker."""

    stage: str
    axis: str
    key: str
    value: int | str | None = None


@_record
class Tensorize:
    """Replace the loop nest under `axis` with the registered tensor intrinsic `intrin`."""

    stage: str
    axis: str
    intrin: str


@_record
class DoubleBuffer:
    """Double-buffer the stage's buffer so loads of the next iteration overlap compute."""

    stage: str


PRIMITIVES: tuple[type, ...] = (
    Split,
    Fuse,
    Reorder,
    Tile,
    ComputeAt,
    ComputeInline,
    ComputeRoot,
    CacheRead,
    CacheWrite,
    SetScope,
    Vectorize,
    Unroll,
    Parallel,
    Bind,
    Pragma,
    Tensorize,
    DoubleBuffer,
)


def primitive_name(record: Any) -> str:
    """The snake_case name of a record's primitive, as used in errors and JSON (`compute_at`)."""
    cls = record if isinstance(record, type) else type(record)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


_BY_NAME = {primitive_name(cls): cls for cls in PRIMITIVES}


def record_to_dict(record: Any) -> dict[str, Any]:
    return {"primitive": primitive_name(record), **asdict(record)}


def record_from_dict(data: dict[str, Any]) -> Any:
    data = dict(data)
    name = data.pop("primitive", None)
    cls = _BY_NAME.get(name)  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown schedule primitive {name!r}; known: {', '.join(_BY_NAME)}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{name}: unknown field(s) {unknown}")
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return cls(**args)


def records_to_json(records: list[Any]) -> str:
    """A stable JSON text of a primitive list."""
    return json.dumps([record_to_dict(r) for r in records], indent=1)


def records_from_json(text: str) -> list[Any]:
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError(f"a schedule JSON must be a list of primitives, not {type(data).__name__}")
    return [record_from_dict(item) for item in data]
