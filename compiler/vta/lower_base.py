"""What the accelerator lowering's parts share (``vta.lower`` is the entry point): index
evaluation, the perfect loop nests of accelerator operations with their ragged-edge guards, and
``LoweringBase``, the state of one lowering with its helpers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ...hw.config import HWConfig
from ..schedule.stage import ForKind
from ..te.expr import BinOp, Expr, IntImm, Op, Var
from ..te.visitor import expr_to_str, pre_order
from ..tir.interp import InterpretError, evaluate
from ..tir.stmt import (
    AttrStmt,
    Buffer,
    BufferStore,
    For,
    IfThenElse,
    LoweringError,
    PrimFunc,
    SeqStmt,
    Stmt,
)
from . import tile as vt
from .intrin import GEMM_ATTR

DMA_COPY = "pragma_dma_copy"
ALU = "pragma_alu"
SCOPES = {"local.inp_buffer": "inp", "local.wgt_buffer": "wgt", "local.acc_buffer": "acc"}


def index_value(e: Expr, env: Mapping[Var, int]) -> int:
    """The value of an integer/boolean index expression with every variable bound."""
    try:
        return int(evaluate(e, env))
    except InterpretError as err:
        raise LoweringError(f"index `{expr_to_str(e)}`: {err}") from None


def mentions(e: Expr, variables: set[Var]) -> bool:
    return any(isinstance(n, Var) and n in variables for n in pre_order(e))


@dataclass
class ThreadView:
    """One virtual thread's view while walking: loop values and buffer names."""

    env: dict[Var, int]
    thread: int | None = None
    names: dict[Buffer, tuple[str, int]] = field(default_factory=dict)  # buffer -> (alloc, +off)
    clobbered: set[Buffer] = field(default_factory=set)  # overwritten in place by an alias

    def fork(self, var: Var, value: int) -> ThreadView:
        return ThreadView({**self.env, var: value}, self.thread, self.names, self.clobbered)


@dataclass(frozen=True)
class NestLoop:
    var: Var
    extent: int


class LoweringBase:
    def __init__(self, func: PrimFunc, cfg: HWConfig, constants: Mapping[str, np.ndarray]):
        self.func, self.cfg = func, cfg
        self.scopes = vt.memory_scopes(cfg)
        self.params = {b: shape for b, shape in zip(func.params, func.arg_shapes, strict=True)}
        unknown = set(constants) - {b.name for b in func.params}
        if unknown:
            raise LoweringError(
                f"constants {sorted(unknown)} are not parameters of {func.name!r} "
                f"(parameters: {[b.name for b in func.params]})"
            )
        self.constants = constants
        self.allocs: dict[str, vt.Alloc] = {}
        self.used: set[str] = set()
        self.stmts: list[vt.Stmt] = []
        self.read: set[str] = set()
        self.written: set[str] = set()

    # -- helpers --

    def fail(self, what: str, why: str) -> LoweringError:
        return LoweringError(f"{self.func.name}: {what}: {why}")

    def elem(self, buf: Buffer) -> int:
        """Elements of one SRAM entry of `buf`'s scope (a BATCH x BLOCK vector)."""
        return math.prod(self.scopes[SCOPES[buf.scope]].elem_shape)

    def sram(self, t: ThreadView, buf: Buffer, what: str) -> tuple[str, int]:
        if buf.scope not in SCOPES:
            raise self.fail(what, f"{buf.name!r} must be an on-chip buffer, not in {buf.scope!r}")
        name, off = t.names[buf]
        self.used.add(name)
        return name, off

    def index(self, e: Expr, t: ThreadView, loops: list[NestLoop], what: str):  # type: ignore[no-untyped-def]
        """(base, coefficient per loop) of an affine flat index, in elements; the loops start at
        0 and the other variables have their values in ``t``."""
        zero = {**t.env, **{lp.var: 0 for lp in loops}}
        base = index_value(e, zero)
        coeffs = []
        for lp in loops:
            c = index_value(e, {**zero, lp.var: 1}) - base if lp.extent > 1 else 0
            last = index_value(e, {**zero, lp.var: lp.extent - 1}) if lp.extent > 1 else base
            if last != base + c * (lp.extent - 1):
                raise self.fail(what, f"index `{expr_to_str(e)}` is not affine in {lp.var.name}")
            coeffs.append(c)
        return base, coeffs


def points(loops: list[NestLoop]) -> list[dict[Var, int]]:
    pts: list[dict[Var, int]] = [{}]
    for lp in loops:
        pts = [{**p, lp.var: i} for p in pts for i in range(lp.extent)]
    return pts


def conjuncts(cond: Expr) -> list[Expr]:
    if isinstance(cond, BinOp) and cond.op is Op.AND:
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def loop_nest(s: Stmt, env: Mapping[Var, int] | None = None) -> tuple[list[NestLoop] | None, Stmt]:
    """The perfect loop nest at `s` (constant extents from 0) and the statement inside it.

    With ``env`` (the values of the loops outside), a guard in the nest (an ``if`` without
    else: the edge of a non-dividing split) is evaluated there and cuts each loop it tests to
    the prefix it keeps: a ragged edge tile's smaller extents. None: the guard keeps nothing.
    """
    loops: list[NestLoop] = []
    guards: list[Expr] = []
    while isinstance(s, For) or (env is not None and is_guard(s)):
        if isinstance(s, IfThenElse):
            guards += conjuncts(s.condition)
            s = s.then_case
            continue
        if not (isinstance(s.min, IntImm) and s.min.value == 0 and isinstance(s.extent, IntImm)):
            raise LoweringError(f"loop {s.var.name!r} of an accelerator operation must run from "
                                "0 to a constant")  # fmt: skip
        loops.append(NestLoop(s.var, s.extent.value))
        s = s.body
    return (clip_to_guards(loops, guards, env) if guards else loops), s


def is_guard(s: Stmt) -> bool:
    return isinstance(s, IfThenElse) and s.else_case is None


def clip_to_guards(
    loops: list[NestLoop], guards: list[Expr], env: Mapping[Var, int]
) -> list[NestLoop] | None:
    """``loops`` cut to the prefixes that ``guards`` (each testing at most one of them) keep."""
    extents = {lp.var: lp.extent for lp in loops}
    for g in guards:
        tested = [lp for lp in loops if mentions(g, {lp.var})]
        if len(tested) > 1:
            raise LoweringError(f"guard `{expr_to_str(g)}` of an accelerator operation must test "
                                f"one loop, not {[lp.var.name for lp in tested]}")  # fmt: skip
        if not tested:
            if not index_value(g, env):
                return None
            continue
        lp = tested[0]
        keep = [bool(index_value(g, {**env, lp.var: i})) for i in range(lp.extent)]
        n = keep.index(False) if False in keep else lp.extent
        if any(keep[n:]):
            raise LoweringError(f"guard `{expr_to_str(g)}` must keep a prefix of loop "
                                f"{lp.var.name!r}")  # fmt: skip
        extents[lp.var] = min(extents[lp.var], n)
    if not all(extents.values()):
        return None
    return [NestLoop(lp.var, extents[lp.var]) for lp in loops]


def is_reset(s: Stmt) -> bool:
    return (
        isinstance(s, BufferStore)
        and s.buffer.scope == "local.acc_buffer"
        and isinstance(s.value, IntImm)
        and s.value.value == 0
    )


def compute_leaf(s: Stmt) -> Stmt | None:
    """The GEMM attribute or accumulator reset a loop nest wraps, if it wraps only that."""
    while (isinstance(s, For) and s.kind is not ForKind.THREAD_BINDING) or is_guard(s):
        s = s.then_case if isinstance(s, IfThenElse) else s.body
    if isinstance(s, AttrStmt) and s.key == GEMM_ATTR:
        return s
    return s if is_reset(s) else None


def last_update(s: Stmt) -> Stmt:
    """The GEMM intrinsic body's update nest (its last statement)."""
    return s.stmts[-1] if isinstance(s, SeqStmt) else s
