"""Lowering a schedule to the loop IR: buffers, loop nests, guards, then the pass pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..schedule.primitives import ScheduleError
from ..schedule.schedule import Schedule
from ..schedule.stage import AttachKind, Stage
from ..te.expr import BinOp, Expr, IntImm, Op, ProducerLoad, Reduce, Var, all_of
from ..te.tensor import IterVar, IterVarKind, Tensor
from ..te.visitor import ExprMutator, substitute
from .arith import Analyzer
from .bound import StageBounds, infer_bounds
from .gpu import check_gpu_schedule
from .stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    For,
    IfThenElse,
    LoweringError,
    PrimFunc,
    Stmt,
    seq,
)
from .tensorize import tensorize_stmt


class _Context:
    def __init__(self, sch: Schedule, args: list[Tensor]) -> None:
        self.sch = sch
        self.bounds = infer_bounds(sch.stages, args)
        self.buffers: dict[Tensor, Buffer] = {}
        self.mins: dict[Tensor, tuple[Expr, ...]] = {}
        self.params: list[Buffer] = []
        self.ana = Analyzer(
            {
                info.loop_var[iv]: (0, info.extent[iv] - 1)
                for info in self.bounds.values()
                for iv in info.stage.leaf_iter_vars
            }
        )
        self._make_buffers(args)

    def _make_buffers(self, args: list[Tensor]) -> None:
        for t in args:
            stage = self.sch[t]
            if stage.attach is not AttachKind.ROOT and not stage.is_placeholder:
                raise ScheduleError(
                    f"lower: argument {t.name!r} must be computed at the root to be passed in, "
                    f"but it is {stage.attach.value}"
                )
            key = stage.tensors[t.value_index]
            buf = Buffer(_buffer_name(stage, t.value_index), t.dtype, t.shape)
            self.buffers[key] = buf
            self.mins[key] = tuple(IntImm(0) for _ in t.shape)
            self.params.append(buf)
        for stage, info in self.bounds.items():
            for k, key in enumerate(stage.tensors):
                if key in self.buffers:
                    continue
                if stage.is_output:
                    raise LoweringError(f"lower: output {key.name!r} must be in the arguments")
                shape = tuple(info.region[iv][1] for iv in stage.op.axis)
                name = _buffer_name(stage, k)
                self.buffers[key] = Buffer(name, stage.op.bodies[k].dtype, shape, stage.scope)
                self.mins[key] = tuple(info.region[iv][0] for iv in stage.op.axis)

    def load(self, e: ProducerLoad, indices: tuple[Expr, ...]) -> BufferLoad:
        buf = self.buffers.get(e.producer)
        if buf is None:
            raise LoweringError(
                f"lower: tensor {e.producer.name!r} is read but is neither an argument nor "
                "computed by this schedule"
            )
        offsets = self.mins[e.producer]
        rel = tuple(_sub(i, m) for i, m in zip(indices, offsets, strict=True))
        return BufferLoad(buf, rel, e.dtype)


def _buffer_name(stage: Stage, k: int) -> str:
    return stage.name if k == 0 else f"{stage.name}.v{k}"


def _sub(a: Expr, b: Expr) -> Expr:
    if isinstance(b, IntImm) and b.value == 0:
        return a
    return BinOp(Op.SUB, a, b, a.dtype)


class _LowerLoads(ExprMutator):
    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx

    def visit_ProducerLoad(self, e: ProducerLoad) -> Expr:
        return self.ctx.load(e, tuple(self.visit(i) for i in e.indices))


def _guarded(stmt: Stmt, conds: list[Expr]) -> Stmt:
    return IfThenElse(all_of(*conds), stmt) if conds else stmt


def _make_for(info: StageBounds, iv: IterVar, body: Stmt) -> Stmt:
    ann = info.stage.annotation(iv)
    loop: Stmt = For(
        info.loop_var[iv], IntImm(0), IntImm(info.extent[iv]), ann.kind, body, ann.thread_tag
    )
    for key, value in reversed(ann.pragmas):
        loop = AttrStmt(f"pragma_{key}", value, loop)
    return loop


def _stage_stmt(ctx: _Context, info: StageBounds) -> Stmt:
    """The loop nest of one stage with the stages computed at its loops inside it."""
    stage = info.stage
    bufs = [ctx.buffers[t] for t in stage.tensors]
    mapping = {iv.var: info.root_value(iv) for iv in stage.root_iter_vars}
    lower = _LowerLoads(ctx)
    mins = ctx.mins[stage.tensor]
    index = tuple(_sub(info.root_value(iv), m) for iv, m in zip(stage.op.axis, mins, strict=True))
    all_guards = [c for c, _ in info.guards]
    data_guards = [c for c, is_reduce in info.guards if not is_reduce]
    body = info.body
    init: Stmt | None = None
    if isinstance(body, Reduce):
        update, init = _reduce_update(
            body, bufs, index, lambda e: lower.visit(substitute(e, mapping))
        )
        inner = _guarded(update, all_guards)
        init = _guarded(init, data_guards)
    else:
        stores = [
            BufferStore(buf, lower.visit(substitute(b, mapping)), index)
            for buf, b in zip(bufs, (body, *info.extra_bodies), strict=True)
        ]
        inner = _guarded(seq(*stores), all_guards)
    leaves = stage.leaf_iter_vars
    first_reduce = next((p for p, iv in enumerate(leaves) if iv.kind is IterVarKind.REDUCE), None)
    stmt = inner
    for p in range(len(leaves) - 1, -1, -1):
        intrin = stage.annotation(leaves[p]).tensorize
        if intrin is not None:
            # The guards of a non-dividing split outside the intrinsic's loops (tensorize
            # rejects ones inside) keep the ragged edge tiles in the domain.
            stmt = _guarded(_tensorize(ctx, info, p, intrin, index), all_guards)
        else:
            stmt = _with_children(ctx, stage, leaves[p], stmt)
            stmt = _make_for(info, leaves[p], stmt)
        if init is not None and p == first_reduce and intrin is None:
            init_nest = init
            for iv in reversed(leaves[p + 1 :]):
                if iv.kind is not IterVarKind.REDUCE:
                    init_nest = _make_for(info, iv, init_nest)
            stmt = seq(init_nest, stmt)
    return stmt


def _reduce_update(
    body: Reduce, bufs: list[Buffer], index: tuple[Expr, ...], lower: Any
) -> tuple[Stmt, Stmt]:
    """The update and init statements of a reduction (a tuple reduction updates every output
    from the old values of all of them, through one-element temporaries)."""
    comb = body.combiner
    cond = lower(body.condition)
    if comb.arity == 1:
        acc = BufferLoad(bufs[0], index, body.dtype)
        value = substitute(comb.result, {comb.lhs: acc, comb.rhs: lower(body.source)})
        update: Stmt = BufferStore(bufs[0], value, index)
        init: Stmt = BufferStore(bufs[0], comb.identity, index)
    else:
        mapping: dict[Var, Expr] = {}
        for buf, lhs, rhs, src in zip(bufs, comb.lhs_all, comb.rhs_all, body.sources, strict=True):
            mapping[lhs] = BufferLoad(buf, index, buf.dtype)
            mapping[rhs] = lower(src)
        temps = [Buffer(f"{b.name}.new", b.dtype, (1,), "local") for b in bufs]
        zero = (IntImm(0),)
        update = seq(
            *(
                BufferStore(t, substitute(r, mapping), zero)
                for t, r in zip(temps, comb.results, strict=True)
            ),
            *(
                BufferStore(b, BufferLoad(t, zero, t.dtype), index)
                for b, t in zip(bufs, temps, strict=True)
            ),
        )
        for t in reversed(temps):
            update = Allocate(t, update)
        init = seq(*(BufferStore(b, i, index) for b, i in zip(bufs, comb.identities, strict=True)))
    if not (isinstance(cond, IntImm) and cond.value == 1):
        update = IfThenElse(cond, update)
    return update, init


def _tensorize(
    ctx: _Context, info: StageBounds, p: int, intrin: Any, index: tuple[Expr, ...]
) -> Stmt:
    stage = info.stage
    for child in ctx.sch.stages:
        if child.attach_stage is stage and child.attach_ivar in stage.leaf_iter_vars[p:]:
            raise ScheduleError(
                f"tensorize: stage {child.name!r} is computed inside the loops that intrinsic "
                f"{intrin.name!r} replaces"
            )

    def region(buf: Buffer, indices: tuple[Expr, ...], relax: set[Var]) -> BufferRegion:
        starts, extents = [], []
        for idx in indices:
            got = ctx.ana.symbolic_interval(idx, relax)
            extent = None if got is None else ctx.ana.simplify(got[1] - got[0] + 1)
            if got is None or not isinstance(extent, IntImm):
                raise ScheduleError(
                    f"tensorize: the tile of {buf.name} under intrinsic {intrin.name!r} has no "
                    "constant extent"
                )
            starts.append(got[0])
            extents.append(extent.value)
        return BufferRegion(buf, tuple(starts), tuple(extents))

    def region_of(load: ProducerLoad, mapping: dict, relax: set[Var]) -> BufferRegion:
        lowered = ctx.load(load, tuple(substitute(i, mapping) for i in load.indices))
        return region(lowered.buffer, lowered.indices, relax)

    def out_region(relax: set[Var]) -> BufferRegion:
        return region(ctx.buffers[stage.tensor], index, relax)

    return tensorize_stmt(info, p, intrin, region_of, out_region)


def _with_children(ctx: _Context, parent: Stage, ivar: IterVar, rest: Stmt) -> Stmt:
    children = [
        s
        for s in ctx.sch.stages
        if s.attach is AttachKind.SCOPE and s.attach_stage is parent and s.attach_ivar is ivar
    ]
    for child in reversed(children):
        rest = seq(_produce(ctx, child), rest)
        rest = _allocate(ctx, child, rest)
    return rest


def _produce(ctx: _Context, stage: Stage) -> Stmt:
    stmt = _stage_stmt(ctx, ctx.bounds[stage])
    if stage.is_double_buffered:
        stmt = AttrStmt("double_buffer_scope", ctx.buffers[stage.tensor].name, stmt)
    return stmt


def _allocate(ctx: _Context, stage: Stage, body: Stmt) -> Stmt:
    for key in reversed(stage.tensors):
        buf = ctx.buffers[key]
        body = body if buf in ctx.params else Allocate(buf, body)
    return body


def _check_private_threads(info: StageBounds) -> None:
    """A buffer private to each thread (`local`) cannot be filled by several threads: thread t
    would hold only the elements it computed, and a reader of the others reads garbage."""
    stage = info.stage
    if stage.scope.startswith("shared") or stage.is_output:
        return
    if stage.scope == "global" and stage.attach is not AttachKind.SCOPE:
        return  # a kernel of its own, its buffer global workspace
    # (a global stage computed inside a block is allocated there: one per thread, as local)
    for iv in stage.leaf_iter_vars:
        tag = stage.annotation(iv).thread_tag
        if tag.startswith("threadIdx"):  # even a loop of 1: threads 1, 2, ... skip it
            raise ScheduleError(
                f"bind: stage {stage.name!r} has scope {stage.scope!r}, private to each thread, "
                f"so its loop {iv.name!r} cannot be bound to {tag} (each thread would hold only "
                "its own part); give it scope 'shared', or compute it at its reader's thread loop"
            )


def _thread_loop_around(stage: Stage, prefixes: tuple[str, ...]) -> tuple[Stage, IterVar] | None:
    """(stage, loop) of the innermost loop bound to a tag of `prefixes` at or outside the loop
    where `stage` is computed (following compute_at up to a root stage); None when none is."""
    at = stage
    while at.attach is AttachKind.SCOPE and at.attach_stage is not None:
        parent, ivar = at.attach_stage, at.attach_ivar
        leaves = list(parent.leaf_iter_vars)
        outer = leaves[: leaves.index(ivar) + 1] if ivar in leaves else leaves
        for iv in reversed(outer):
            if parent.annotation(iv).thread_tag.startswith(prefixes):
                return parent, iv
        at = parent
    return None


def _check_shared_reductions(info: StageBounds) -> None:
    """A shared stage computed inside a thread loop covers the whole block's region in every
    thread (its bounds are relaxed over the threads): a copy would only be written alike by
    each thread, but a reduction's updates would add up once per thread."""
    stage = info.stage
    if not stage.scope.startswith("shared") or not getattr(stage.op, "reduce_axis", ()):
        return
    found = _thread_loop_around(stage, ("threadIdx",))
    if found is not None:
        parent, iv = found
        raise ScheduleError(
            f"set_scope: stage {stage.name!r} has scope 'shared' and a reduction, and is computed "
            f"inside thread loop {iv.name!r} of {parent.name!r}: every thread of the block would "
            "update all of it (a race); give it scope 'local', or compute it at the block loop "
            "with its own loops bound to threads"
        )


def _check_blocks_of_attached_stages(info: StageBounds) -> None:
    """A stage computed at a loop inside a thread block (a block or thread loop, or one inside
    them) runs within each block: binding one of its own loops to a blockIdx would make each
    block compute only its own slice of it, while the block's readers read all of it."""
    stage = info.stage
    bound = [
        (iv, stage.annotation(iv).thread_tag)
        for iv in stage.leaf_iter_vars
        if stage.annotation(iv).thread_tag.startswith("blockIdx")
    ]
    found = _thread_loop_around(stage, ("blockIdx", "threadIdx", "vthread")) if bound else None
    if found is not None:
        (iv, tag), (parent, loop) = bound[0], found
        raise ScheduleError(
            f"bind: stage {stage.name!r} is computed inside loop {loop.name!r} of "
            f"{parent.name!r}, in a thread block, so its loop {iv.name!r} cannot be bound to "
            f"{tag} (each block would compute only its own slice of it); bind it to "
            "threadIdx, or leave it serial"
        )


def lower_schedule(sch: Schedule, args: Sequence[Tensor], name: str = "main") -> PrimFunc:
    """The loop IR of a schedule before any pass: one loop nest per root stage, in order.

    Raises:
        ScheduleError: for primitives that are only found illegal with the whole schedule
            (a stage computed at a loop its consumers are outside of, a thread loop bound
            inside a shorter loop of the same tag, a shared stage outside every block, a
            block loop of a stage computed inside a block, a shared reduction computed
            inside a thread loop).
        LoweringError: for arguments that do not match the schedule.
    """
    args = list(args)
    names = [t.name for t in args]
    for t in args:
        if not isinstance(t, Tensor):
            raise TypeError(f"lower: arguments must be tensors, not {t!r}")
        if names.count(t.name) > 1:
            raise LoweringError(f"lower: argument names must be unique, {t.name!r} repeats")
    ctx = _Context(sch, args)
    for info in ctx.bounds.values():
        _check_private_threads(info)
        _check_blocks_of_attached_stages(info)
        _check_shared_reductions(info)
    roots = [
        s for s in sch.stages if s.is_compute and s.attach is AttachKind.ROOT and s in ctx.bounds
    ]
    body = seq(*(_produce(ctx, s) for s in roots))
    for stage in reversed(roots):
        body = _allocate(ctx, stage, body)
    shapes = tuple(t.shape for t in args)
    func = PrimFunc(name, tuple(ctx.params), body, shapes)
    message = check_gpu_schedule(func)  # thread bindings that nest wrongly are the schedule's
    if message is not None:
        raise ScheduleError(message)
    return func


def lower(
    sch: Schedule,
    args: Sequence[Tensor],
    name: str = "main",
    passes: Sequence[Any] | None = None,
) -> PrimFunc:
    """Lower a schedule to the loop IR and run the default pass pipeline.

    Args:
        sch: the schedule.
        args: the function's tensors, in parameter order (inputs and outputs).
        name: the function name.
        passes: the pipeline to run (default `passes.DEFAULT_PIPELINE`; `[]` for the raw IR).

    Example:
        >>> from tensorforge.compiler import te
        >>> A = te.placeholder((4,), name="A")
        >>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
        >>> f = lower(te.create_schedule(B.op), [A, B], name="add_one")
        >>> print(f)
        func add_one(A: float32[4], B: float32[4]) {
          for i in range(4) {
            B[i] = A[i] + 1.0f
          }
        }
    """
    from .passes import DEFAULT_PIPELINE, run_pipeline

    func = lower_schedule(sch, args, name)
    return run_pipeline(func, DEFAULT_PIPELINE if passes is None else passes)
