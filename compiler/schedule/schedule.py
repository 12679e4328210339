"""Schedules: the stages of a tensor program and the replayable list of primitives applied."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..te.tensor import Operation, Tensor
from . import primitives as P
from .apply import APPLY
from .primitives import ScheduleError
from .stage import Stage


def _as_ops(outputs: Any) -> list[Operation]:
    items = outputs if isinstance(outputs, Sequence) else [outputs]
    ops = []
    for item in items:
        op = item.op if isinstance(item, Tensor) else item
        if not isinstance(op, Operation):
            raise TypeError(f"outputs must be tensors or operations, not {item!r}")
        ops.append(op)
    if not ops:
        raise ValueError("a schedule needs at least one output")
    return ops


def _post_order(ops: list[Operation]) -> list[Operation]:
    order: list[Operation] = []
    seen: set[int] = set()
    stack: list[tuple[Operation, bool]] = [(op, False) for op in reversed(ops)]
    while stack:
        op, expanded = stack.pop()
        if expanded:
            order.append(op)
            continue
        if id(op) in seen:
            continue
        seen.add(id(op))
        stack.append((op, True))
        stack.extend((t.op, False) for t in reversed(op.input_tensors) if id(t.op) not in seen)
    return order


class Schedule:
    """How to compute some output tensors: one `Stage` per operation, in dependency order.

    `s[tensor]` is the tensor's stage; primitives on stages and `cache_read`/`cache_write` here
    are recorded in `s.primitives`, which `to_json`/`from_json` save and replay.
    """

    def __init__(self, outputs: list[Operation]) -> None:
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self.primitives: list[Any] = []
        self._by_op: dict[int, Stage] = {}
        for op in _post_order(self.outputs):
            self._add(Stage(self, op, self.unique_name(op.name)), len(self.stages))
        for op in self.outputs:
            self._by_op[id(op)].is_output = True

    def _add(self, stage: Stage, position: int) -> Stage:
        self.stages.insert(position, stage)
        self._by_op[id(stage.origin_op)] = stage
        return stage

    def unique_name(self, name: str) -> str:
        taken = {s.name for s in self.stages}
        unique, n = name, 1
        while unique in taken:
            unique, n = f"{name}_{n}", n + 1
        return unique

    def insert_stage(
        self, op: Operation, name: str, after: Stage | None = None, before: Stage | None = None
    ) -> Stage:
        anchor = after if after is not None else before
        assert anchor is not None
        position = self.stages.index(anchor) + (1 if after is not None else 0)
        return self._add(Stage(self, op, name), position)

    def __getitem__(self, key: Tensor | Operation) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        stage = self._by_op.get(id(op))
        if stage is None:
            for candidate in self.stages:
                if candidate.op is op:
                    return candidate
            raise KeyError(f"{getattr(op, 'name', op)!r} is not an operation of this schedule")
        return stage

    def stage(self, name: str, primitive: str = "schedule") -> Stage:
        """The stage called `name`, or ScheduleError naming `primitive`."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise ScheduleError(f"{primitive}: no stage named {name!r}")

    def _stage_name(self, key: Any, primitive: str) -> str:
        try:
            return self[key].name
        except (KeyError, AttributeError):
            raise ScheduleError(f"{primitive}: {key!r} is not a tensor of this schedule") from None

    def apply(self, record: Any) -> Any:
        """Apply one primitive record and append it to `primitives`; returns its result."""
        handler = APPLY.get(type(record))
        if handler is None:
            raise ScheduleError(f"unknown schedule primitive {record!r}")
        result = handler(self, record)
        self.primitives.append(record)
        return result

    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Any]) -> Tensor:
        """Copy `tensor` into a `scope` buffer that `readers` read instead; returns the copy."""
        names = tuple(self._stage_name(r, "cache_read") for r in readers)
        return self.apply(P.CacheRead(self._stage_name(tensor, "cache_read"), scope, names))

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute `tensor` into a `scope` buffer, then copy it out; returns the cache tensor."""
        return self.apply(P.CacheWrite(self._stage_name(tensor, "cache_write"), scope))

    def to_json(self) -> str:
        """The applied primitives as JSON (replay with `Schedule.from_json`)."""
        return P.records_to_json(self.primitives)

    @classmethod
    def replay(cls, outputs: Any, records: Sequence[Any]) -> Schedule:
        """A fresh schedule for `outputs` with `records` applied in order."""
        sch = create_schedule(outputs)
        for record in records:
            sch.apply(record)
        return sch

    @classmethod
    def from_json(cls, text: str, outputs: Any) -> Schedule:
        return cls.replay(outputs, P.records_from_json(text))

    def __repr__(self) -> str:
        return f"Schedule({', '.join(s.name for s in self.stages)})"


def create_schedule(outputs: Any) -> Schedule:
    """A default schedule (every stage at the root, loops in axis order) for the outputs.

    Args:
        outputs: an operation, a tensor, or a list of either.

    Example:
        >>> from tensorforge.compiler import te
        >>> A = te.placeholder((4,), name="A")
        >>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B.op)
        >>> [st.name for st in s.stages]
        ['A', 'B']
    """
    return Schedule(_as_ops(outputs))
