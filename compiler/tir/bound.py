"""Bound inference: how much of each stage to compute, and where its loops and guards come from.

Stages are visited consumers first. An output or root stage covers its whole domain; a stage
computed at loop L of stage P covers the union of the regions its consumers read during one
iteration of L: the consumers' index expressions with every loop variable inside L relaxed to
its range, the loop variables enclosing L kept symbolic. Regions are clamped to the domain; when
an extent is not constant its constant upper bound is used and a guard keeps the extra points
inside the domain.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from ..schedule.primitives import ScheduleError
from ..schedule.stage import AttachKind, FuseRelation, SplitRelation, Stage
from ..te.expr import BinOp, Expr, IntImm, Op, ProducerLoad, Var
from ..te.tensor import THREAD_TAGS, IterVar, IterVarKind, Tensor
from ..te.visitor import ExprMutator, pre_order, substitute
from .arith import Analyzer


@dataclass
class StageBounds:
    """What lowering needs to know about one (non-inlined compute) stage."""

    stage: Stage
    body: Expr  # the stage's expression with inlined producers substituted
    extra_bodies: tuple[Expr, ...] = ()  # the same for outputs 1, 2, ... of a multi-output op
    region: dict[IterVar, tuple[Expr, int]] = field(default_factory=dict)  # root -> (min, ext)
    extent: dict[IterVar, int] = field(default_factory=dict)  # every axis, loops start at 0
    loop_var: dict[IterVar, Var] = field(default_factory=dict)  # leaf axis -> its loop variable
    value: dict[IterVar, Expr] = field(default_factory=dict)  # axis -> expr of loop variables
    guards: list[tuple[Expr, bool]] = field(default_factory=list)  # (condition, is_reduce)

    def root_value(self, iv: IterVar) -> Expr:
        """The value of root axis `iv` inside the stage's loop nest."""
        lo, _ = self.region[iv]
        if isinstance(lo, IntImm) and lo.value == 0:
            return self.value[iv]
        return BinOp(Op.ADD, lo, self.value[iv], "int32")


class _Inliner(ExprMutator):
    def __init__(self, inline_bodies: dict[Tensor, Stage]) -> None:
        self.inline = inline_bodies

    def visit_ProducerLoad(self, e: ProducerLoad) -> Expr:
        indices = tuple(self.visit(i) for i in e.indices)
        stage = self.inline.get(e.producer)
        if stage is None:
            return ProducerLoad(e.producer, indices, e.dtype)
        mapping = {iv.var: idx for iv, idx in zip(stage.op.axis, indices, strict=True)}
        return substitute(self.visit(stage.op.body), mapping)


def effective_bodies(stages: list[Stage]) -> dict[Stage, tuple[Expr, ...]]:
    """Each lowered compute stage's expressions (one per output) with inlined stages
    substituted."""
    inline = {s.tensor: s for s in stages if s.attach is AttachKind.INLINE}
    inliner = _Inliner(inline)
    return {
        s: tuple(inliner.visit(b) for b in s.op.bodies)
        for s in stages
        if s.is_compute and s.attach is not AttachKind.INLINE
    }


def enclosing_loops(stage: Stage, bounds: dict[Stage, StageBounds]) -> list[Var]:
    """The loop variables around `stage`'s own loop nest, outermost first."""
    if stage.attach is not AttachKind.SCOPE:
        return []
    parent, ivar = stage.attach_stage, stage.attach_ivar
    assert parent is not None and ivar is not None
    upto = parent.leaf_iter_vars[: parent.leaf_iter_vars.index(ivar) + 1]
    return enclosing_loops(parent, bounds) + [bounds[parent].loop_var[iv] for iv in upto]


def relaxed_thread_tags(scope: str) -> tuple[str, ...]:
    """Thread tags over which a buffer of `scope` is shared, so bound inference relaxes them.

    A `shared` buffer is one per block: it covers every thread and virtual thread of the block
    (the cooperative fetch). A `global` one covers the whole grid. Anything else (`local`,
    accelerator scopes) is private to a thread.
    """
    if scope.startswith("shared"):
        return ("threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread")
    if scope == "global":
        return THREAD_TAGS
    return ()


def fixed_loops(stage: Stage, bounds: dict[Stage, StageBounds]) -> list[Var]:
    """The enclosing loop variables a stage's region may depend on: `enclosing_loops` minus the
    thread-bound loops its memory scope is shared across (see `relaxed_thread_tags`)."""
    return _loops_outside(stage, bounds, relaxed_thread_tags(stage.scope))


def _loops_outside(
    stage: Stage, bounds: dict[Stage, StageBounds], relaxed: tuple[str, ...]
) -> list[Var]:
    if stage.attach is not AttachKind.SCOPE:
        return []
    parent, ivar = stage.attach_stage, stage.attach_ivar
    assert parent is not None and ivar is not None
    upto = parent.leaf_iter_vars[: parent.leaf_iter_vars.index(ivar) + 1]
    own = [
        bounds[parent].loop_var[iv]
        for iv in upto
        if parent.annotation(iv).thread_tag not in relaxed
    ]
    return _loops_outside(parent, bounds, relaxed) + own


def is_inside(consumer: Stage, parent: Stage, ivar: IterVar) -> bool:
    """Whether `consumer`'s computation happens inside loop `ivar` of `parent`."""
    node: Stage | None = consumer
    position: IterVar | None = None
    while node is not None:
        if node is parent:
            leaves = parent.leaf_iter_vars
            return position is None or leaves.index(position) >= leaves.index(ivar)
        position, node = node.attach_ivar, node.attach_stage
    return False


class _Relaxed(Collection):
    """Every variable except the fixed ones."""

    def __init__(self, fixed: list[Var]) -> None:
        self.fixed = {id(v) for v in fixed}

    def __contains__(self, v: object) -> bool:
        return id(v) not in self.fixed

    def __iter__(self):  # pragma: no cover - never iterated
        raise TypeError("the relaxed set is only queried")

    def __len__(self) -> int:  # pragma: no cover
        return 0


def _check_attach(stage: Stage) -> None:
    parent = stage.attach_stage
    if stage.attach is AttachKind.SCOPE and parent is not None:
        if parent.attach is AttachKind.INLINE:
            raise ScheduleError(
                f"compute_at: stage {stage.name!r} is attached to {parent.name!r}, which is inlined"
            )
        if stage.attach_ivar not in parent.leaf_iter_vars:
            raise ScheduleError(
                f"compute_at: axis {stage.attach_ivar.name!r} of {parent.name!r} is no longer a "
                f"leaf (split or fused after {stage.name!r} was attached to it)"
            )


def infer_bounds(stages: list[Stage], args: list[Tensor]) -> dict[Stage, StageBounds]:
    """Regions, loop extents, axis values and guards of every lowered compute stage."""
    bodies = effective_bodies(stages)
    ana = Analyzer()
    result: dict[Stage, StageBounds] = {}
    arg_set = set(args)
    for stage in reversed(stages):
        if stage not in bodies:
            continue
        _check_attach(stage)
        info = StageBounds(stage, bodies[stage][0], bodies[stage][1:])
        full = (
            stage.is_output
            or stage.attach is AttachKind.ROOT
            or any(t in arg_set for t in stage.tensors)
        )
        for iv in stage.op.axis:
            dom = iv.dom
            assert dom is not None
            if full:
                info.region[iv] = (IntImm(dom.min), dom.extent)
            else:
                info.region[iv] = _requested(stage, iv, stages, bodies, result, ana)
        for iv in stage.op.reduce_axis:
            assert iv.dom is not None
            info.region[iv] = (IntImm(iv.dom.min), iv.dom.extent)
        _pass_down(info)
        _pass_up(info)
        for iv in stage.leaf_iter_vars:
            ana.bounds[info.loop_var[iv]] = (0, info.extent[iv] - 1)
        _domain_guards(info, ana)
        result[stage] = info
    return result


def _requested(
    stage: Stage,
    iv: IterVar,
    stages: list[Stage],
    bodies: dict[Stage, tuple[Expr, ...]],
    done: dict[Stage, StageBounds],
    ana: Analyzer,
) -> tuple[Expr, int]:
    dim = stage.op.axis.index(iv)
    dom = iv.dom
    assert dom is not None and stage.attach_stage is not None and stage.attach_ivar is not None
    if stage.attach_stage not in done:
        raise ScheduleError(
            f"compute_at: stage {stage.name!r} is attached to {stage.attach_stage.name!r}, which "
            "does not read it (directly or through its producers)"
        )
    fixed = fixed_loops(stage, done)
    relax = _Relaxed(fixed)
    lows: list[Expr] = []
    highs: list[Expr] = []
    for consumer, exprs in bodies.items():
        loads = [
            n
            for body in exprs
            for n in pre_order(body)
            if isinstance(n, ProducerLoad) and n.producer.op is stage.origin_op
        ]
        if not loads:
            continue
        if not is_inside(consumer, stage.attach_stage, stage.attach_ivar):
            raise ScheduleError(
                f"compute_at: stage {stage.name!r} is computed inside "
                f"{stage.attach_stage.name}.{stage.attach_ivar.name} but its consumer "
                f"{consumer.name!r} runs outside that loop"
            )
        cinfo = done[consumer]
        mapping = {r.var: cinfo.root_value(r) for r in consumer.root_iter_vars}
        for load in loads:
            got = ana.symbolic_interval(substitute(load.indices[dim], mapping), relax)
            if got is None:
                return IntImm(dom.min), dom.extent
            lows.append(got[0])
            highs.append(got[1])
    if not lows:  # no consumer reads it (cannot happen for a stage of the schedule)
        return IntImm(dom.min), dom.extent
    lo, hi = lows[0], highs[0]
    for other_lo, other_hi in zip(lows[1:], highs[1:], strict=True):
        lo = ana.simplify(BinOp(Op.MIN, lo, other_lo, "int32"))
        hi = ana.simplify(BinOp(Op.MAX, hi, other_hi, "int32"))
    extent = ana.simplify(BinOp(Op.ADD, BinOp(Op.SUB, hi, lo, "int32"), IntImm(1), "int32"))
    upper = extent.value if isinstance(extent, IntImm) else ana.interval(extent)[1]
    if upper is None or upper >= dom.extent:
        return IntImm(dom.min), dom.extent
    # Points below the domain are dropped by moving the start up; ones above are guarded.
    lo = ana.simplify(BinOp(Op.MAX, lo, IntImm(dom.min), "int32"))
    if ana.interval(lo)[1] is None:
        return IntImm(dom.min), dom.extent
    return lo, max(upper, 1)


def _pass_down(info: StageBounds) -> None:
    ext = info.extent
    for iv, (_, extent) in info.region.items():
        ext[iv] = extent
    for rel in info.stage.relations:
        if isinstance(rel, SplitRelation):
            total = ext[rel.parent]
            if rel.factor is not None:
                ext[rel.inner] = min(rel.factor, total)
                ext[rel.outer] = -(-total // ext[rel.inner])
            else:
                ext[rel.outer] = min(rel.nparts or 1, total)
                ext[rel.inner] = -(-total // ext[rel.outer])
        elif isinstance(rel, FuseRelation):
            ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
    for iv in info.stage.leaf_iter_vars:
        info.loop_var[iv] = Var(iv.name)


def _pass_up(info: StageBounds) -> None:
    value, ext = info.value, info.extent
    for iv, var in info.loop_var.items():
        value[iv] = var
    for rel in reversed(info.stage.relations):
        if isinstance(rel, SplitRelation):
            outer = BinOp(Op.MUL, value[rel.outer], IntImm(ext[rel.inner]), "int32")
            value[rel.parent] = BinOp(Op.ADD, outer, value[rel.inner], "int32")
            if ext[rel.outer] * ext[rel.inner] != ext[rel.parent]:
                cond = BinOp(Op.LT, value[rel.parent], IntImm(ext[rel.parent]), "bool")
                info.guards.append((cond, rel.parent.kind is IterVarKind.REDUCE))
        elif isinstance(rel, FuseRelation):
            inner = IntImm(ext[rel.inner])
            value[rel.outer] = BinOp(Op.FLOORDIV, value[rel.fused], inner, "int32")
            value[rel.inner] = BinOp(Op.FLOORMOD, value[rel.fused], inner, "int32")


def _domain_guards(info: StageBounds, ana: Analyzer) -> None:
    """Guards keeping a region that was widened to a constant extent inside the domain."""
    for iv in info.stage.op.axis:
        lo, extent = info.region[iv]
        dom = iv.dom
        assert dom is not None
        lo_min, lo_max = ana.interval(lo)
        value = info.root_value(iv)
        if lo_max is None or lo_max + extent > dom.min + dom.extent:
            cond = BinOp(Op.LT, value, IntImm(dom.min + dom.extent), "bool")
            info.guards.append((cond, False))
        if lo_min is None or lo_min < dom.min:
            info.guards.append((BinOp(Op.GE, value, IntImm(dom.min), "bool"), False))
