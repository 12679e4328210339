"""Tensorization: replace the loop nest under an axis with a declared tensor intrinsic."""

from __future__ import annotations

from typing import Any

from ..schedule.primitives import ScheduleError
from ..te.expr import Expr, ProducerLoad, Reduce, Var
from ..te.intrin import TensorIntrin
from ..te.tensor import IterVar, IterVarKind
from ..te.visitor import expr_to_str, field_names, pre_order, substitute
from .arith import Analyzer
from .bound import StageBounds
from .stmt import BufferRegion, Stmt


def _shape_key(expr: Expr) -> Any:
    """Structure of an expression, ignoring which tensors are read and at which indices."""
    if isinstance(expr, ProducerLoad):
        return ("load", expr.dtype)
    if isinstance(expr, Var):
        return ("var", expr.dtype)
    if isinstance(expr, Reduce):
        # The number of reduction axes is not compared: axes outside the tensorized loops
        # (a conv's input-channel blocks and kernel window) stay loops around the intrinsic;
        # the tile and stride checks match the ones inside.
        return ("reduce", expr.combiner.name, _shape_key(expr.source))
    parts: list[Any] = [type(expr).__name__]
    for name in field_names(expr):
        value = getattr(expr, name)
        if isinstance(value, Expr):
            parts.append(_shape_key(value))
        elif isinstance(value, tuple):
            parts.append(tuple(_shape_key(v) for v in value if isinstance(v, Expr)))
        else:
            parts.append(getattr(value, "value", value))
    return tuple(parts)


def _error(info: StageBounds, intrin: TensorIntrin, reason: str) -> ScheduleError:
    return ScheduleError(
        f"tensorize: stage {info.stage.name!r} cannot use intrinsic {intrin.name!r}: {reason}"
    )


def tensorize_stmt(
    info: StageBounds,
    position: int,
    intrin: TensorIntrin,
    region_of: Any,
    out_region: Any,
) -> Stmt:
    """The statement replacing leaves[position:] of a stage.

    `region_of(load, mapping, relax)` and `out_region(relax)` give the BufferRegions touched
    while the loop variables in `relax` range over their loops (`mapping`: root var -> value).
    """
    stage = info.stage
    leaves = stage.leaf_iter_vars
    inner = leaves[position:]
    relax = {info.loop_var[iv] for iv in inner}
    if any(_mentions(cond, relax) for cond, _ in info.guards):
        raise _error(info, intrin, "the loops under the axis need guards (non-divisible split)")
    body = info.body
    if _shape_key(body) != _shape_key(intrin.op.body):
        raise _error(info, intrin, "its expression does not match the intrinsic's")
    loads = [n for n in pre_order(body) if isinstance(n, ProducerLoad)]
    if len(loads) != len(intrin.inputs):
        raise _error(
            info, intrin, f"it reads {len(loads)} tensors, the intrinsic {len(intrin.inputs)}"
        )
    mapping = {r.var: info.root_value(r) for r in stage.root_iter_vars}
    if info.extra_bodies:
        raise _error(info, intrin, "tensorizing a multi-output compute is not supported yet")
    _check_strides(info, intrin, inner, loads, mapping)
    ins: list[BufferRegion] = []
    for load, formal in zip(loads, intrin.inputs, strict=True):
        region = region_of(load, mapping, relax)
        if not _fits(region.extents, formal.shape):
            raise _error(
                info,
                intrin,
                f"it reads a {list(region.extents)} tile of {load.producer.name}, the intrinsic "
                f"takes {list(formal.shape)}",
            )
        ins.append(region)
    out = out_region(relax)
    if not _fits(out.extents, intrin.op.shape):
        raise _error(
            info,
            intrin,
            f"it writes a {list(out.extents)} tile, the intrinsic {list(intrin.op.shape)}",
        )
    lowered = intrin.lower(ins, [out])
    outer_reduce = any(iv.kind is IterVarKind.REDUCE for iv in leaves[:position])
    if isinstance(lowered, tuple):
        body_stmt, _reset, update = lowered
        return update if outer_reduce else body_stmt
    if outer_reduce:
        raise _error(
            info,
            intrin,
            "reduction loops outside the axis need the intrinsic to return (body, reset, update)",
        )
    return lowered


def _axis_pairs(
    info: StageBounds, intrin: TensorIntrin, inner: list[IterVar]
) -> list[tuple[Var, Var]] | None:
    """(stage loop variable, intrinsic axis variable) for the tensorized loops, matched in order
    by kind (data-parallel, then reduction), ignoring loops of extent one; None when the counts
    differ (the tile checks then decide)."""
    pairs: list[tuple[Var, Var]] = []
    for kind, formal in (
        (IterVarKind.DATA_PAR, intrin.op.axis),
        (IterVarKind.REDUCE, intrin.op.reduce_axis),
    ):
        mine = [iv for iv in inner if iv.kind is kind and info.extent[iv] > 1]
        theirs = [iv for iv in formal if iv.dom is not None and iv.dom.extent > 1]
        if len(mine) != len(theirs):
            return None
        pairs.extend((info.loop_var[a], b.var) for a, b in zip(mine, theirs, strict=True))
    return pairs


def _check_strides(
    info: StageBounds,
    intrin: TensorIntrin,
    inner: list[IterVar],
    loads: list[ProducerLoad],
    mapping: dict[Var, Expr],
) -> None:
    """Every index of the tile must be affine in the tensorized loops, with the coefficients
    (strides) the intrinsic's own compute has for the matching axes."""
    ana = Analyzer(
        {info.loop_var[iv]: (0, info.extent[iv] - 1) for iv in info.stage.leaf_iter_vars}
    )
    pairs = _axis_pairs(info, intrin, inner)
    formal_loads = [n for n in pre_order(intrin.op.body) if isinstance(n, ProducerLoad)]
    accesses = [
        (load.producer.name, tuple(substitute(i, mapping) for i in load.indices), formal.indices)
        for load, formal in zip(loads, formal_loads, strict=True)
    ]
    out_index = tuple(info.root_value(iv) for iv in info.stage.op.axis)
    accesses.append((info.stage.name, out_index, tuple(iv.var for iv in intrin.op.axis)))
    variables = [info.loop_var[iv] for iv in inner]
    for tensor, indices, formal_indices in accesses:
        lead = len(indices) - len(formal_indices)
        for dim, index in enumerate(indices):
            formal = formal_indices[dim - lead] if dim >= lead else None
            message = _stride_mismatch(ana, index, formal, variables, pairs)
            if message is not None:
                raise _error(
                    info,
                    intrin,
                    f"index {dim} of {tensor} (`{expr_to_str(ana.simplify(index))}`) must be "
                    f"affine in the tensorized axes with the strides the intrinsic declares, "
                    f"but {message}",
                )


def _stride_mismatch(
    ana: Analyzer,
    index: Expr,
    formal: Expr | None,
    variables: list[Var],
    pairs: list[tuple[Var, Var]] | None,
) -> str | None:
    formal_of = dict(pairs) if pairs is not None else {}
    for v in variables:
        got = ana.linear_in(index, v)
        if got is None:
            return f"it is not affine in {v.name!r}"
        if pairs is None or v not in formal_of:
            continue
        want = 0
        if formal is not None:
            declared = Analyzer().linear_in(formal, formal_of[v])
            want = declared[0] if declared is not None else 0
        if got[0] != want:
            return f"its stride along {v.name!r} is {got[0]}, the intrinsic's {want}"
    return None


def _fits(extents: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """A tile matches an intrinsic operand of ``shape``: equal, or leading unit dimensions
    followed by ``shape`` (a tile of a blocked, higher-rank tensor; the lowering indexes the
    trailing dimensions)."""
    lead = len(extents) - len(shape)
    return (
        lead >= 0 and tuple(extents[lead:]) == tuple(shape) and all(e == 1 for e in extents[:lead])
    )


def _mentions(expr: Expr, variables: set[Var]) -> bool:
    return any(isinstance(n, Var) and n in variables for n in pre_order(expr))
