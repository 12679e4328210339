"""Stages: the per-operation state a schedule's primitives transform."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..te.intrin import TensorIntrin
from ..te.tensor import ComputeOp, IterVar, IterVarKind, Operation, PlaceholderOp, Tensor
from . import primitives as P
from .primitives import ScheduleError

if TYPE_CHECKING:
    from .schedule import Schedule


class ForKind(enum.Enum):
    """How a loop runs; set on leaf axes by primitives, carried by loop-IR `For` nodes."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


class AttachKind(enum.Enum):
    """Where a stage's computation is placed."""

    ROOT = "root"  # at the top level, over its whole domain
    INLINE = "inline"  # substituted into its consumers
    SCOPE = "scope"  # inside a loop of another stage, over the region it needs there


@dataclass(frozen=True, slots=True)
class SplitRelation:
    """parent = outer * factor + inner (factor derived from nparts at lowering if given)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(frozen=True, slots=True)
class FuseRelation:
    """fused = outer * extent(inner) + inner."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(frozen=True, slots=True)
class Annotation:
    """Per-leaf-axis lowering hints."""

    kind: ForKind = ForKind.SERIAL
    thread_tag: str = ""
    pragmas: tuple[tuple[str, Any], ...] = ()
    tensorize: TensorIntrin | None = None


class Stage:
    """The schedule state of one operation: its axes, loop order, placement and buffer scope.

    Primitives are methods (`split`, `fuse`, ...) that record themselves on the schedule.
    """

    def __init__(self, schedule: Schedule, op: Operation, name: str) -> None:
        self.schedule = schedule
        self.origin_op = op
        self.op = op
        self.name = name
        self.is_output = False
        self.attach = AttachKind.ROOT
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.scope = "global"
        self.is_double_buffered = False
        self.relations: list[SplitRelation | FuseRelation] = []
        self.annotations: dict[IterVar, Annotation] = {}
        self.reset_axes()

    def reset_axes(self) -> None:
        axes = list(self.op.axis) + list(self.op.reduce_axis) if self.is_compute else []
        self.all_iter_vars: list[IterVar] = list(axes)
        self.leaf_iter_vars: list[IterVar] = list(axes)
        self.relations = []

    @property
    def is_compute(self) -> bool:
        return isinstance(self.op, ComputeOp)

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def tensor(self) -> Tensor:
        """The tensor consumers read (the original operation's output)."""
        return self.origin_op.output(0)

    @property
    def tensors(self) -> list[Tensor]:
        """Every output of the stage's operation (several for a multi-output compute)."""
        n = getattr(self.origin_op, "num_outputs", 1)
        return [self.origin_op.output(k) for k in range(n)]

    @property
    def root_iter_vars(self) -> list[IterVar]:
        return list(self.op.axis) + list(self.op.reduce_axis) if self.is_compute else []

    def find_axis(self, name: str, primitive: str, leaf: bool = True) -> IterVar:
        """The axis called `name` (a leaf one unless `leaf` is False), or ScheduleError."""
        for iv in self.all_iter_vars:
            if iv.name == name:
                if leaf and iv not in self.leaf_iter_vars:
                    raise ScheduleError(
                        f"{primitive}: axis {name!r} of stage {self.name!r} is not a leaf axis "
                        "(it was already split or fused)"
                    )
                return iv
        raise ScheduleError(f"{primitive}: stage {self.name!r} has no axis {name!r}")

    def axis_name(self, axis: Any, primitive: str) -> str:
        if not isinstance(axis, IterVar):
            raise ScheduleError(f"{primitive}: axis must be an IterVar, not {axis!r}")
        if not any(axis is iv for iv in self.all_iter_vars):
            raise ScheduleError(
                f"{primitive}: axis {axis.name!r} does not belong to stage {self.name!r}"
            )
        return axis.name

    def annotation(self, iv: IterVar) -> Annotation:
        return self.annotations.get(iv, Annotation())

    def is_reduce(self, iv: IterVar) -> bool:
        return iv.kind is IterVarKind.REDUCE

    def __repr__(self) -> str:
        return f"Stage({self.name!r}, leaves=[{', '.join(iv.name for iv in self.leaf_iter_vars)}])"

    # ---- primitives (each records itself on the schedule) ---------------------------------

    def split(self, axis: IterVar, factor: int | None = None, nparts: int | None = None):
        """Split `axis` by inner `factor` (or outer `nparts`); returns (outer, inner)."""
        name = self.axis_name(axis, "split")
        return self.schedule.apply(P.Split(self.name, name, factor, nparts))

    def fuse(self, *axes: IterVar) -> IterVar:
        """Fuse adjacent leaf axes (outermost first) into one; returns the fused axis."""
        names = tuple(self.axis_name(a, "fuse") for a in axes)
        return self.schedule.apply(P.Fuse(self.name, names))

    def reorder(self, *axes: IterVar) -> None:
        """Reorder leaf axes: they take the positions they occupy, in the given order."""
        names = tuple(self.axis_name(a, "reorder") for a in axes)
        self.schedule.apply(P.Reorder(self.name, names))

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int):
        """Tile two axes; returns (x.outer, y.outer, x.inner, y.inner)."""
        xn, yn = self.axis_name(x, "tile"), self.axis_name(y, "tile")
        return self.schedule.apply(P.Tile(self.name, xn, yn, x_factor, y_factor))

    def compute_at(self, parent: Stage, axis: IterVar) -> None:
        """Compute this stage inside loop `axis` of `parent`, only the region needed there."""
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at: parent must be a Stage (s[T]), not {parent!r}")
        name = parent.axis_name(axis, "compute_at")
        self.schedule.apply(P.ComputeAt(self.name, parent.name, name))

    def compute_inline(self) -> None:
        self.schedule.apply(P.ComputeInline(self.name))

    def compute_root(self) -> None:
        self.schedule.apply(P.ComputeRoot(self.name))

    def set_scope(self, scope: str) -> None:
        self.schedule.apply(P.SetScope(self.name, scope))

    def vectorize(self, axis: IterVar) -> None:
        self.schedule.apply(P.Vectorize(self.name, self.axis_name(axis, "vectorize")))

    def unroll(self, axis: IterVar) -> None:
        self.schedule.apply(P.Unroll(self.name, self.axis_name(axis, "unroll")))

    def parallel(self, axis: IterVar) -> None:
        self.schedule.apply(P.Parallel(self.name, self.axis_name(axis, "parallel")))

    def bind(self, axis: IterVar, thread: IterVar) -> None:
        """Bind `axis` to a `te.thread_axis(...)`."""
        if not isinstance(thread, IterVar) or thread.kind is not IterVarKind.THREAD:
            raise ScheduleError(f"bind: thread must be a te.thread_axis, not {thread!r}")
        self.schedule.apply(P.Bind(self.name, self.axis_name(axis, "bind"), thread.thread_tag))

    def pragma(self, axis: IterVar, key: str, value: int | str | None = None) -> None:
        self.schedule.apply(P.Pragma(self.name, self.axis_name(axis, "pragma"), key, value))

    def tensorize(self, axis: IterVar, intrin: TensorIntrin) -> None:
        """Replace the loop nest under `axis` with `intrin` (see te.decl_tensor_intrin)."""
        if not isinstance(intrin, TensorIntrin):
            raise ScheduleError(f"tensorize: intrin must be a TensorIntrin, not {intrin!r}")
        name = self.axis_name(axis, "tensorize")
        self.schedule.apply(P.Tensorize(self.name, name, intrin.name))

    def double_buffer(self) -> None:
        self.schedule.apply(P.DoubleBuffer(self.name))
