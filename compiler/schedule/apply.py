"""One function per schedule primitive record: check legality, then transform the stages."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..te.expr import ProducerLoad
from ..te.intrin import INTRINSICS
from ..te.tensor import ComputeOp, IterVar, IterVarKind, Range, Tensor
from ..te.visitor import ExprMutator, substitute
from . import primitives as P
from .primitives import ScheduleError
from .stage import AttachKind, ForKind, FuseRelation, SplitRelation, Stage

if TYPE_CHECKING:
    from .schedule import Schedule

_SCOPE = re.compile(r"^(global|shared|local|warp)(\.[A-Za-z0-9_]+)*$")


def _fresh_axis(stage: Stage, name: str, kind: IterVarKind) -> IterVar:
    from ..te.expr import Var

    taken = {iv.name for iv in stage.all_iter_vars}
    unique, n = name, 1
    while unique in taken:
        unique, n = f"{name}_{n}", n + 1
    iv = IterVar(Var(unique), None, kind)
    stage.all_iter_vars.append(iv)
    return iv


def _positive(value: Any, what: str, primitive: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ScheduleError(f"{primitive}: {what} must be a positive int, not {value!r}")
    return value


def _check_transformable(stage: Stage, primitive: str) -> None:
    if not stage.is_compute:
        raise ScheduleError(f"{primitive}: stage {stage.name!r} is a placeholder, not a compute")


def apply_split(sch: Schedule, r: P.Split) -> tuple[IterVar, IterVar]:
    stage = sch.stage(r.stage, "split")
    _check_transformable(stage, "split")
    if (r.factor is None) == (r.nparts is None):
        raise ScheduleError("split: give exactly one of factor and nparts")
    _positive(r.factor if r.factor is not None else r.nparts, "factor/nparts", "split")
    parent = stage.find_axis(r.axis, "split")
    outer = _fresh_axis(stage, f"{parent.name}.outer", parent.kind)
    inner = _fresh_axis(stage, f"{parent.name}.inner", parent.kind)
    stage.relations.append(SplitRelation(parent, outer, inner, r.factor, r.nparts))
    pos = stage.leaf_iter_vars.index(parent)
    stage.leaf_iter_vars[pos : pos + 1] = [outer, inner]
    return outer, inner


def apply_fuse(sch: Schedule, r: P.Fuse) -> IterVar:
    stage = sch.stage(r.stage, "fuse")
    _check_transformable(stage, "fuse")
    if not r.axes:
        raise ScheduleError("fuse: needs at least one axis")
    axes = [stage.find_axis(name, "fuse") for name in r.axes]
    first = stage.leaf_iter_vars.index(axes[0])
    for offset, iv in enumerate(axes):
        if stage.leaf_iter_vars.index(iv) != first + offset:
            names = ", ".join(repr(a.name) for a in axes)
            raise ScheduleError(
                f"fuse: axes {names} of stage {stage.name!r} must be adjacent leaves, outermost "
                "first"
            )
        if iv.kind is not axes[0].kind:
            raise ScheduleError(
                f"fuse: cannot fuse reduction and data-parallel axes ({axes[0].name!r} and "
                f"{iv.name!r})"
            )
    fused = axes[0]
    for inner in axes[1:]:
        new = _fresh_axis(stage, f"{fused.name}.{inner.name}.fused", fused.kind)
        stage.relations.append(FuseRelation(fused, inner, new))
        fused = new
    stage.leaf_iter_vars[first : first + len(axes)] = [fused]
    return fused


def apply_reorder(sch: Schedule, r: P.Reorder) -> None:
    stage = sch.stage(r.stage, "reorder")
    _check_transformable(stage, "reorder")
    axes = [stage.find_axis(name, "reorder") for name in r.axes]
    if len(set(r.axes)) != len(r.axes):
        raise ScheduleError(f"reorder: axes must be distinct, not {list(r.axes)}")
    positions = sorted(stage.leaf_iter_vars.index(iv) for iv in axes)
    for pos, iv in zip(positions, axes, strict=True):
        stage.leaf_iter_vars[pos] = iv


def apply_tile(sch: Schedule, r: P.Tile) -> tuple[IterVar, IterVar, IterVar, IterVar]:
    if r.x == r.y:
        raise ScheduleError(f"tile: x and y must be different axes, not both {r.x!r}")
    stage = sch.stage(r.stage, "tile")
    for name in (r.x, r.y):
        stage.find_axis(name, "tile")
    _positive(r.x_factor, "x_factor", "tile")
    _positive(r.y_factor, "y_factor", "tile")
    xo, xi = apply_split(sch, P.Split(r.stage, r.x, r.x_factor))
    yo, yi = apply_split(sch, P.Split(r.stage, r.y, r.y_factor))
    apply_reorder(sch, P.Reorder(r.stage, (xo.name, yo.name, xi.name, yi.name)))
    return xo, yo, xi, yi


def apply_compute_at(sch: Schedule, r: P.ComputeAt) -> None:
    stage = sch.stage(r.stage, "compute_at")
    parent = sch.stage(r.parent, "compute_at")
    _check_transformable(stage, "compute_at")
    if stage is parent:
        raise ScheduleError(f"compute_at: stage {stage.name!r} cannot be computed at itself")
    if stage.is_output:
        raise ScheduleError(f"compute_at: output stage {stage.name!r} must stay at the root")
    if parent.attach is AttachKind.INLINE:
        raise ScheduleError(f"compute_at: parent stage {parent.name!r} is inlined")
    ivar = parent.find_axis(r.axis, "compute_at")
    walk: Stage | None = parent
    while walk is not None:
        if walk is stage:
            raise ScheduleError(
                f"compute_at: stage {parent.name!r} is already computed inside {stage.name!r}"
            )
        walk = walk.attach_stage
    stage.attach, stage.attach_stage, stage.attach_ivar = AttachKind.SCOPE, parent, ivar


def apply_compute_inline(sch: Schedule, r: P.ComputeInline) -> None:
    stage = sch.stage(r.stage, "compute_inline")
    _check_transformable(stage, "compute_inline")
    _single_output(stage, "compute_inline")
    if stage.is_output:
        raise ScheduleError(f"compute_inline: output stage {stage.name!r} cannot be inlined")
    if stage.op.reduce_axis:
        raise ScheduleError(
            f"compute_inline: stage {stage.name!r} is a reduction and cannot be inlined"
        )
    stage.attach, stage.attach_stage, stage.attach_ivar = AttachKind.INLINE, None, None


def apply_compute_root(sch: Schedule, r: P.ComputeRoot) -> None:
    stage = sch.stage(r.stage, "compute_root")
    _check_transformable(stage, "compute_root")
    stage.attach, stage.attach_stage, stage.attach_ivar = AttachKind.ROOT, None, None


class _ReplaceLoads(ExprMutator):
    def __init__(self, old: Tensor, new: Tensor) -> None:
        self.old, self.new = old, new

    def visit_ProducerLoad(self, e: ProducerLoad) -> ProducerLoad:
        indices = tuple(self.visit(i) for i in e.indices)
        producer = self.new if e.producer == self.old else e.producer
        return ProducerLoad(producer, indices, e.dtype)


def _with_body(
    op: ComputeOp,
    body: Any,
    reduce_axis: tuple[IterVar, ...] | None = None,
    extra_bodies: tuple[Any, ...] | None = None,
):
    axes = op.reduce_axis if reduce_axis is None else reduce_axis
    extra = op.extra_bodies if extra_bodies is None else extra_bodies
    return ComputeOp(op.name, op.axis, axes, body, op.tag, op.attrs, extra)


def _single_output(stage: Stage, primitive: str) -> None:
    if getattr(stage.origin_op, "num_outputs", 1) > 1:
        raise ScheduleError(
            f"{primitive}: stage {stage.name!r} has several outputs; {primitive} of a "
            "multi-output compute is not supported yet"
        )


def _check_scope(scope: str, primitive: str) -> str:
    if not isinstance(scope, str) or not _SCOPE.match(scope):
        raise ScheduleError(
            f"{primitive}: scope must be global, shared, local or warp (optionally with a "
            f"'.tag' suffix such as 'local.inp_buffer'), not {scope!r}"
        )
    return scope


def _copy_op(name: str, tensor: Tensor, axis_names: list[str]) -> ComputeOp:
    from ..te.expr import Var

    axis = tuple(
        IterVar(Var(n), Range(0, d), IterVarKind.DATA_PAR)
        for n, d in zip(axis_names, tensor.shape, strict=True)
    )
    return ComputeOp(name, axis, (), tensor[tuple(iv.var for iv in axis)])


def apply_cache_read(sch: Schedule, r: P.CacheRead) -> Tensor:
    source = sch.stage(r.tensor, "cache_read")
    _single_output(source, "cache_read")
    _check_scope(r.scope, "cache_read")
    if not r.readers:
        raise ScheduleError("cache_read: needs at least one reader")
    readers = [sch.stage(name, "cache_read") for name in r.readers]
    for reader in readers:
        if not reader.is_compute or source.tensor not in reader.op.input_tensors:
            raise ScheduleError(f"cache_read: stage {reader.name!r} does not read {source.name!r}")
    name = sch.unique_name(f"{source.name}.{r.scope}")
    op = _copy_op(name, source.tensor, [f"ax{d}" for d in range(source.tensor.ndim)])
    cache = sch.insert_stage(op, name, after=source)
    cache.scope = r.scope
    for reader in readers:
        replace_loads = _ReplaceLoads(source.tensor, cache.tensor)
        body, *extra = (replace_loads.visit(b) for b in reader.op.bodies)
        reader.op = _with_body(reader.op, body, extra_bodies=tuple(extra))
    return cache.tensor


def apply_cache_write(sch: Schedule, r: P.CacheWrite) -> Tensor:
    from ..te.expr import Var

    stage = sch.stage(r.tensor, "cache_write")
    _check_transformable(stage, "cache_write")
    _single_output(stage, "cache_write")
    _check_scope(r.scope, "cache_write")
    if stage.relations or stage.attach is AttachKind.INLINE:
        raise ScheduleError(
            f"cache_write: stage {stage.name!r} must not be split, fused or inlined before "
            "cache_write"
        )
    op = stage.op
    name = sch.unique_name(f"{stage.name}.{r.scope}")
    axis = tuple(IterVar(Var(f"{iv.name}.c"), iv.dom, iv.kind) for iv in op.axis)
    body = substitute(op.body, {old.var: new.var for old, new in zip(op.axis, axis, strict=True)})
    cache_op = ComputeOp(name, axis, op.reduce_axis, body, op.tag, op.attrs)
    cache = sch.insert_stage(cache_op, name, before=stage)
    cache.scope = r.scope
    stage.op = _with_body(op, cache.tensor[tuple(iv.var for iv in op.axis)], ())
    stage.reset_axes()
    stage.annotations = {}
    return cache.tensor


def apply_set_scope(sch: Schedule, r: P.SetScope) -> None:
    stage = sch.stage(r.stage, "set_scope")
    _check_transformable(stage, "set_scope")
    if stage.is_output:
        raise ScheduleError(f"set_scope: output {stage.name!r} lives in its argument buffer")
    stage.scope = _check_scope(r.scope, "set_scope")


def _annotate(sch: Schedule, r: Any, primitive: str, **changes: Any) -> tuple[Stage, IterVar]:
    stage = sch.stage(r.stage, primitive)
    _check_transformable(stage, primitive)
    iv = stage.find_axis(r.axis, primitive)
    old, kind = stage.annotation(iv), changes.get("kind")
    bound = ForKind.THREAD_BINDING
    if kind is not None and kind is not old.kind and bound in (kind, old.kind):
        # a loop runs one way: bound to a thread, or vectorized/unrolled/parallel, not both
        if old.kind is bound or old.kind is not ForKind.SERIAL:
            was = f"bound to {old.thread_tag}" if old.kind is bound else old.kind.value
            raise ScheduleError(
                f"{primitive}: axis {r.axis!r} of stage {stage.name!r} is already {was}; a "
                "loop cannot be both"
            )
    stage.annotations[iv] = replace(old, **changes)
    return stage, iv


def _no_reduce(stage: Stage, axis: str, primitive: str) -> None:
    iv = stage.find_axis(axis, primitive)
    if iv.kind is IterVarKind.REDUCE:
        raise ScheduleError(
            f"{primitive}: axis {axis!r} of stage {stage.name!r} is a reduction axis; its "
            "iterations depend on each other"
        )


def apply_vectorize(sch: Schedule, r: P.Vectorize) -> None:
    _no_reduce(sch.stage(r.stage, "vectorize"), r.axis, "vectorize")
    _annotate(sch, r, "vectorize", kind=ForKind.VECTORIZED)


def apply_unroll(sch: Schedule, r: P.Unroll) -> None:
    _annotate(sch, r, "unroll", kind=ForKind.UNROLLED)


def apply_parallel(sch: Schedule, r: P.Parallel) -> None:
    _no_reduce(sch.stage(r.stage, "parallel"), r.axis, "parallel")
    _annotate(sch, r, "parallel", kind=ForKind.PARALLEL)


def apply_bind(sch: Schedule, r: P.Bind) -> None:
    from ..te.tensor import THREAD_TAGS

    stage = sch.stage(r.stage, "bind")
    if r.thread not in THREAD_TAGS:
        raise ScheduleError(
            f"bind: thread must be one of {', '.join(THREAD_TAGS)}, not {r.thread!r}"
        )
    _no_reduce(stage, r.axis, "bind")
    for iv, ann in stage.annotations.items():
        if ann.thread_tag == r.thread and r.thread != "vthread" and iv.name != r.axis:
            raise ScheduleError(
                f"bind: {r.thread} is already bound to axis {iv.name!r} of stage {stage.name!r}"
            )
    _annotate(sch, r, "bind", kind=ForKind.THREAD_BINDING, thread_tag=r.thread)


def apply_pragma(sch: Schedule, r: P.Pragma) -> None:
    if not r.key or not r.key.replace("_", "").isalnum():
        raise ScheduleError(f"pragma: key must be an identifier, not {r.key!r}")
    stage = sch.stage(r.stage, "pragma")
    iv = stage.find_axis(r.axis, "pragma")
    pragmas = (*stage.annotation(iv).pragmas, (r.key, r.value))
    _annotate(sch, r, "pragma", pragmas=pragmas)


def apply_tensorize(sch: Schedule, r: P.Tensorize) -> None:
    intrin = INTRINSICS.get(r.intrin)
    if intrin is None:
        raise ScheduleError(f"tensorize: no tensor intrinsic named {r.intrin!r} is declared")
    _annotate(sch, r, "tensorize", tensorize=intrin)


def apply_double_buffer(sch: Schedule, r: P.DoubleBuffer) -> None:
    stage = sch.stage(r.stage, "double_buffer")
    _check_transformable(stage, "double_buffer")
    if stage.is_output:
        raise ScheduleError(f"double_buffer: output {stage.name!r} lives in its argument buffer")
    stage.is_double_buffered = True


APPLY: dict[type, Callable[[Schedule, Any], Any]] = {
    P.Split: apply_split,
    P.Fuse: apply_fuse,
    P.Reorder: apply_reorder,
    P.Tile: apply_tile,
    P.ComputeAt: apply_compute_at,
    P.ComputeInline: apply_compute_inline,
    P.ComputeRoot: apply_compute_root,
    P.CacheRead: apply_cache_read,
    P.CacheWrite: apply_cache_write,
    P.SetScope: apply_set_scope,
    P.Vectorize: apply_vectorize,
    P.Unroll: apply_unroll,
    P.Parallel: apply_parallel,
    P.Bind: apply_bind,
    P.Pragma: apply_pragma,
    P.Tensorize: apply_tensorize,
    P.DoubleBuffer: apply_double_buffer,
}
