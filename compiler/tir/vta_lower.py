"""Lowering an accelerator schedule's loop IR to a tile program (then ``codegen.vta`` encodes it).

A schedule for the accelerator (compiler/topi/vta/te_ops.py) is ordinary TE: the data live in
the memory scopes ``local.inp_buffer``, ``local.wgt_buffer`` and ``local.acc_buffer``; copy
stages carry ``pragma(axis, "dma_copy")``; the GEMM stage is tensorized with the config's
intrinsic (``vta_intrin.gemm_intrin``); each element-wise stage in the accumulator scope carries
``pragma(axis, "alu")``; virtual threads are an axis bound to ``te.thread_axis("vthread")``.
``tir.lower(..., passes=VTA_PIPELINE)`` gives its loop IR, and ``lower_to_tile_program`` turns
that into the tile program of ``codegen.vta_tile``:

- loops outside the accelerator's operations are **run at compile time** (a program image is a
  static instruction stream; VTA's runtime ran them on the host at every call instead); a
  guard inside an operation's loop nest (the edge tile of a non-dividing split) is evaluated
  there and cuts the loops it tests to the edge tile's extents;
- a ``dma_copy`` loop nest becomes LOAD/STORE statements: the innermost loops covering one
  SRAM element (a ``BATCH x BLOCK`` vector) are its lanes, the next two loops the DMA's x and y
  (a zero-padding guard ``if_then_else(in_bounds, X[...], 0)`` becomes the pad fields), and any
  further loop one copy per iteration;
- a loop nest around one GEMM micro-op (the tensorized stage), around a store of zero into the
  accumulators (the reduction's init: a GEMM reset), or under an ``alu`` pragma (``ACC =
  op(ACC, imm or ACC)``: ``+ - * min max``, ``shift_right``/``shift_left`` by a constant) is
  one compute instruction; its loops become micro-op loops (``vta_passes.fold_uop_loops`` then
  keeps two and unrolls the rest into micro-ops);
- an ALU stage that writes a new accumulator buffer from an old one at the same index reuses
  the old one's storage (in place), as long as nothing reads the old values afterwards;
- a ``vthread`` loop lowers each virtual thread's iterations into a stream of its own, in which
  buffers allocated inside the loop get a copy per thread (``pad.inp@0``, ``pad.inp@1``); the
  streams are cut into phases (loads with the GEMM that uses them, a tile's epilogue with its
  last GEMM) and interleaved phase by phase, so the load of one thread overlaps the GEMM of the
  other once dependency tokens are inserted (what ``tir.inject_virtual_threads`` achieves on
  loop IR, with each phase an indivisible unit).

What cannot run on the accelerator is a ``LoweringError`` naming the statement and the reason.

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> from tensorforge.compiler.codegen.vta_tile import format_stmt
    >>> from tensorforge.compiler.topi.vta import Conv2dSchedule, Conv2dWorkload
    >>> from tensorforge.compiler.topi.vta.te_ops import conv2d_te
    >>> cfg = HWConfig.preset("tiny")
    >>> wl = Conv2dWorkload(1, 4, 4, 4, 4, 3, 3, pad_h=1, pad_w=1)   # one block in and out
    >>> op = conv2d_te(cfg, wl, Conv2dSchedule(tile_h=4), np.zeros((1, 1, 3, 3, 4, 4), np.int8))
    >>> prog = lower_to_tile_program(op.lower(), cfg, op.constants)
    >>> for s in prog.stmts:
    ...     print(format_stmt(s))
    GEMM.reset C uops=1 loops=[4:d4,s0 4:d1,s0]
    LOAD X[0] -> pad.inp[0] 4x4/4 pad=(1, 1, 1, 1)
    LOAD W[0] -> W.wgt[0] 1x9/9 pad=(0, 0, 0, 0)
    GEMM C += pad.inp.W.wgt uops=1 loops=[4:d4,s6 4:d1,s1 3:d0,s6,w3 3:d0,s1,w1]
    ALU MAX C imm=-127 uops=1 loops=[4:d4,s0 4:d1,s0]
    ALU MIN C imm=127 uops=1 loops=[4:d4,s0 4:d1,s0]
    STORE C[0] -> Y[0] 1x16/16
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...hw.config import HWConfig
from ...hw.isa import AluOp
from ..codegen import vta_tile as vt
from ..schedule.stage import ForKind
from ..te import dtype as dt
from ..te.expr import BinOp, Call, Cast, Expr, IntImm, Op, Var
from ..te.visitor import expr_to_str, pre_order
from .interp import InterpretError, evaluate
from .passes import remove_no_op, simplify, storage_flatten
from .stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferLoad,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LoweringError,
    PrimFunc,
    SeqStmt,
    Stmt,
)
from .vta_intrin import GEMM_ATTR

DMA_COPY = "pragma_dma_copy"
ALU = "pragma_alu"
SCOPES = {"local.inp_buffer": "inp", "local.wgt_buffer": "wgt", "local.acc_buffer": "acc"}

# The pipeline of ``tir.lower`` for accelerator schedules: the default one without the GPU
# passes, without virtual-thread injection, which ``lower_to_tile_program`` performs itself, and
# without loop partitioning: it evaluates a ragged edge's guards per tile itself (``_nest``).
VTA_PIPELINE = (simplify, storage_flatten, simplify, remove_no_op)

_ALU_BINOPS = {Op.ADD: AluOp.ADD, Op.MUL: AluOp.MUL, Op.MIN: AluOp.MIN, Op.MAX: AluOp.MAX}
_COMMUTATIVE = (Op.ADD, Op.MUL, Op.MIN, Op.MAX)


# ---- integer evaluation ---------------------------------------------------------------------


def _ev(e: Expr, env: Mapping[Var, int]) -> int:
    """The value of an integer/boolean index expression with every variable bound."""
    try:
        return int(evaluate(e, env))
    except InterpretError as err:
        raise LoweringError(f"index `{expr_to_str(e)}`: {err}") from None


def _mentions(e: Expr, variables: set[Var]) -> bool:
    return any(isinstance(n, Var) and n in variables for n in pre_order(e))


# ---- the walk --------------------------------------------------------------------------------


@dataclass
class _Thread:
    """One virtual thread's view while walking: loop values and buffer names."""

    env: dict[Var, int]
    thread: int | None = None
    names: dict[Buffer, tuple[str, int]] = field(default_factory=dict)  # buffer -> (alloc, +off)
    clobbered: set[Buffer] = field(default_factory=set)  # overwritten in place by an alias

    def fork(self, var: Var, value: int) -> _Thread:
        return _Thread({**self.env, var: value}, self.thread, self.names, self.clobbered)


@dataclass(frozen=True)
class _Loop:
    var: Var
    extent: int


class _Lowering:
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

    def sram(self, t: _Thread, buf: Buffer, what: str) -> tuple[str, int]:
        if buf.scope not in SCOPES:
            raise self.fail(what, f"{buf.name!r} must be an on-chip buffer, not in {buf.scope!r}")
        name, off = t.names[buf]
        self.used.add(name)
        return name, off

    def index(self, e: Expr, t: _Thread, loops: list[_Loop], what: str):  # type: ignore[no-untyped-def]
        """(base, coefficient per loop) of an affine flat index, in elements; the loops start at
        0 and the other variables have their values in ``t``."""
        zero = {**t.env, **{lp.var: 0 for lp in loops}}
        base = _ev(e, zero)
        coeffs = []
        for lp in loops:
            c = _ev(e, {**zero, lp.var: 1}) - base if lp.extent > 1 else 0
            last = _ev(e, {**zero, lp.var: lp.extent - 1}) if lp.extent > 1 else base
            if last != base + c * (lp.extent - 1):
                raise self.fail(what, f"index `{expr_to_str(e)}` is not affine in {lp.var.name}")
            coeffs.append(c)
        return base, coeffs

    # -- statements --

    def walk(self, s: Stmt, t: _Thread) -> None:
        if isinstance(s, SeqStmt):
            for c in s.stmts:
                self.walk(c, t)
        elif isinstance(s, Allocate):
            self.allocate(s, t)
        elif isinstance(s, AttrStmt):
            if s.key == DMA_COPY:
                self.dma(s.body, t)
            elif s.key == ALU:
                self.compute(s.body, t, alu=True)
            elif s.key == GEMM_ATTR:
                self.compute(s, t, alu=False)
            else:
                self.walk(s.body, t)
        elif isinstance(s, For):
            self.loop(s, t)
        elif isinstance(s, IfThenElse):
            branch = s.then_case if _ev(s.condition, t.env) else s.else_case
            if branch is not None:
                self.walk(branch, t)
        elif isinstance(s, BufferStore) and _is_reset(s):
            self.compute(s, t, alu=False)
        elif isinstance(s, BufferStore | Evaluate):
            raise self.fail(
                f"statement `{str(s).strip()}`",
                "it is not an accelerator operation: copies need pragma dma_copy, element-wise "
                "stages in local.acc_buffer pragma alu, the GEMM tensorize",
            )
        else:  # pragma: no cover - every Stmt kind is handled above
            raise self.fail(type(s).__name__, "unsupported statement")

    def allocate(self, s: Allocate, t: _Thread) -> None:
        buf = s.buffer
        if buf.scope not in SCOPES:
            raise self.fail(
                f"buffer {buf.name!r}",
                f"a kernel's intermediate must live in {sorted(SCOPES)}, not {buf.scope!r}",
            )
        unit = self.elem(buf)
        if buf.size % unit:
            raise self.fail(f"buffer {buf.name!r}", f"{buf.size} elements are not whole "
                            f"{unit}-element entries of {SCOPES[buf.scope]}")  # fmt: skip
        short = _short_name(buf)
        name = short if t.thread is None else f"{short}@{t.thread}"  # a thread's copy
        alloc = vt.Alloc(name, SCOPES[buf.scope], buf.size // unit)
        if self.allocs.setdefault(name, alloc).size < alloc.size:
            self.allocs[name] = alloc
        t.names[buf] = (name, 0)
        self.walk(s.body, t)

    def loop(self, s: For, t: _Thread) -> None:
        lo, n = _ev(s.min, t.env), _ev(s.extent, t.env)
        if s.kind is ForKind.THREAD_BINDING:
            self.virtual_threads(s, t, lo, n)
        elif _compute_leaf(s) is not None:
            self.compute(s, t, alu=False)
        else:
            for i in range(lo, lo + n):
                self.walk(s.body, t.fork(s.var, i))

    def virtual_threads(self, s: For, t: _Thread, lo: int, n: int) -> None:
        """Lower each thread's iterations into a stream of its own (buffers allocated inside
        get a copy per thread), then interleave the streams phase by phase."""
        if not s.thread_tag.startswith("vthread"):
            raise self.fail(f"loop {s.var.name!r}", f"the accelerator has no {s.thread_tag!r} "
                            "threads (bind to te.thread_axis('vthread'))")  # fmt: skip
        if t.thread is not None:
            raise self.fail(f"loop {s.var.name!r}", "virtual threads cannot nest")
        outer, streams = self.stmts, []
        for k in range(n):
            self.stmts = []
            self.walk(s.body, _Thread({**t.env, s.var: lo + k}, k, dict(t.names)))
            streams.append(_phases(self.stmts))
        self.stmts = outer
        for i in range(max(len(p) for p in streams)):
            for phases in streams:
                self.stmts.extend(phases[i] if i < len(phases) else ())

    # -- DMA --

    def dma(self, body: Stmt, t: _Thread) -> None:
        loops, leaf = _nest(body, t.env)
        what = f"dma_copy `{str(leaf).strip()}`"
        if loops is None:
            return  # a ragged edge's guard keeps none of it
        if not isinstance(leaf, BufferStore):
            raise self.fail(what, "a copy must be a loop nest around one store")
        value, cond = leaf.value, None
        if isinstance(value, Call) and value.name == "if_then_else":
            cond, value, pad = value.args
            if not (isinstance(pad, IntImm) and pad.value == 0):
                raise self.fail(what, "the DMA pads with zeros only")
        if isinstance(value, Cast):
            value = value.value
        if not isinstance(value, BufferLoad):
            raise self.fail(what, "a copy's value must be a load (optionally cast or padded)")
        dst, src = leaf.buffer, value.buffer
        if dst.scope in SCOPES and src.scope not in SCOPES:
            self.load(t, loops, leaf, value, cond, what)
        elif src.scope == "local.acc_buffer" and dst.scope not in SCOPES:
            if cond is not None:
                raise self.fail(what, "a store cannot pad")
            if dst.dtype != f"int{self.cfg.out_width}":
                raise self.fail(what, f"a STORE writes int{self.cfg.out_width}, not {dst.dtype}")
            self.store(t, loops, leaf, value, what)
        else:
            raise self.fail(what, f"copies run DRAM -> SRAM or acc -> DRAM, not {src.scope} -> "
                            f"{dst.scope}")  # fmt: skip

    def _lanes(self, loops: list[_Loop], dc: list[int], sc: list[int], unit: int, what: str):  # type: ignore[no-untyped-def]
        """Split copy loops into element loops (coefficients in entries) and the lanes."""
        items = [(lp, d, s) for lp, d, s in zip(loops, dc, sc, strict=True) if lp.extent > 1]
        lanes, size = [], 1
        while items and size < unit:
            lp, d, s = items.pop()
            if d != size or s != size:
                raise self.fail(
                    what, f"loop {lp.var.name} must walk one {unit}-element entry contiguously"
                )
            lanes.append(lp)
            size *= lp.extent
        if size != unit:
            raise self.fail(what, f"the innermost loops must cover whole {unit}-element entries")
        els = []
        for lp, d, s in items:
            if d % unit or s % unit:
                raise self.fail(what, f"loop {lp.var.name} does not step whole entries")
            els.append((lp, d // unit, s // unit))
        return els, lanes

    def _xy(self, els: list[tuple[_Loop, int, int]], keep: set[Var] = frozenset()):  # type: ignore[no-untyped-def,assignment]
        """(rest, y, x) of the element loops, each (loop, sram coefficient, dram coefficient).

        Adjacent loops contiguous on both sides are fused first (the inner loop's variable
        stands for the fused one, so ``keep``, the loops a padding guard tests, are not fused);
        then the innermost loop contiguous on both sides is the DMA's x and the next one, dense
        in SRAM, its y (with the DRAM stride).
        """
        fused: list[tuple[_Loop, int, int]] = []
        for lp, d, s in els:
            if fused and lp.var not in keep:
                o, od, os_ = fused[-1]
                if o.var not in keep and od == d * lp.extent and os_ == s * lp.extent:
                    fused[-1] = (_Loop(lp.var, o.extent * lp.extent), d, s)
                    continue
            fused.append((lp, d, s))
        x = fused.pop() if fused and fused[-1][1] == 1 and fused[-1][2] == 1 else None
        xn = x[0].extent if x else 1
        y = fused.pop() if fused and fused[-1][1] == xn else None
        return fused, y, x

    def load(self, t: _Thread, loops, leaf, value, cond, what) -> None:  # type: ignore[no-untyped-def]
        dst, src = leaf.buffer, value.buffer
        name, off = self.sram(t, dst, what)
        acc8 = dst.scope == "local.acc_buffer" and dst.dtype == "int8"
        if dst.scope == "local.acc_buffer" and not acc8 and dst.dtype != "int32":
            raise self.fail(what, f"accumulators hold int32 (or int8 loaded), not {dst.dtype}")
        unit = self.elem(dst)
        dbase, dc = self.index(leaf.indices[0], t, loops, what)
        # Where the guard pads, the source index points outside the tensor; being affine, it
        # still gives the first real element's address from its coefficients.
        sbase, sc = self.index(value.indices[0], t, loops, what)
        els, lanes = self._lanes(loops, dc, sc, unit, what)
        guarded = set() if cond is None else {v for v in pre_order(cond) if isinstance(v, Var)}
        if guarded & {lp.var for lp in lanes}:
            raise self.fail(what, "padding must cover whole entries")
        rest, y, x = self._xy(els, guarded)
        if sbase % unit:
            raise self.fail(what, f"the DRAM address {sbase} is not a whole entry")
        self.written.add(name)
        for point in _points([lp for lp, _, _ in rest]):
            env = {**t.env, **point}
            sram = dbase // unit + sum(d * point[lp.var] for lp, d, _ in rest)
            ny, y0, y1 = self._span(cond, env, y, x, "y", what)
            nx, x0, x1 = self._span(cond, env, x, y, "x", what)
            dram = sbase // unit + sum(s * point[lp.var] for lp, _, s in rest)
            dram += (y[2] * y0 if y else 0) + (x0 if x else 0)
            stride = y[2] if y else nx
            self.stmts.append(vt.Load(
                src.name, name, off + sram, dram, y1 - y0, x1 - x0, stride,
                y0, ny - y1, x0, nx - x1, acc_8bit=acc8,
            ))  # fmt: skip
        self.read.add(src.name)
        t.clobbered.discard(dst)

    def _span(self, cond, env, axis, other, label, what):  # type: ignore[no-untyped-def]
        """(extent, first valid, end valid) of the x or y loop under the padding guard."""
        if axis is None:
            return 1, 0, 1
        lp = axis[0]
        n = lp.extent
        if cond is None:
            return n, 0, n
        conj = [c for c in _conjuncts(cond) if _mentions(c, {lp.var})]
        if other is not None and any(_mentions(c, {other[0].var}) for c in conj):
            raise self.fail(what, "the padding condition must treat rows and columns separately")
        ok = [all(_ev(c, {**env, lp.var: i}) for c in conj) for i in range(n)]
        if not any(ok):
            raise self.fail(what, f"a copy whose {label} range is all padding cannot be a LOAD")
        first = ok.index(True)
        end = n - ok[::-1].index(True)
        if not all(ok[first:end]):
            raise self.fail(what, "the padding must be at the edges of the copy")
        return n, first, end

    def store(self, t: _Thread, loops, leaf, value, what) -> None:  # type: ignore[no-untyped-def]
        name, off = self.sram(t, value.buffer, what)
        if value.buffer in t.clobbered:
            raise self.fail(what, f"{value.buffer.name!r} was overwritten in place before")
        unit = self.elem(value.buffer)
        sbase, sc = self.index(value.indices[0], t, loops, what)
        dbase, dc = self.index(leaf.indices[0], t, loops, what)
        els, _ = self._lanes(loops, sc, dc, unit, what)
        rest, y, x = self._xy(els)
        for point in _points([lp for lp, _, _ in rest]):
            if dbase % unit:
                raise self.fail(what, f"the DRAM address {dbase} is not a whole entry")
            sram = sbase // unit + sum(s * point[lp.var] for lp, s, _ in rest)
            dram = dbase // unit + sum(d * point[lp.var] for lp, _, d in rest)
            nx = x[0].extent if x else 1
            ny = y[0].extent if y else 1
            stride = y[2] if y else nx
            self.stmts.append(vt.Store(leaf.buffer.name, name, off + sram, dram, ny, nx,
                                       stride))  # fmt: skip
        self.written.add(leaf.buffer.name)

    # -- GEMM and ALU --

    def compute(self, s: Stmt, t: _Thread, alu: bool) -> None:
        loops, leaf = _nest(s, t.env)
        what = f"`{str(leaf).strip()}`"
        if loops is None:
            return
        if alu:
            if not isinstance(leaf, BufferStore):
                raise self.fail(f"alu {what}", "an ALU stage must be a loop nest around one store")
            self.alu(t, loops, leaf, f"alu {what}")
            return
        if isinstance(leaf, BufferStore):  # a zero store: the reduction's init
            self.gemm_reset(t, loops, leaf.buffer, leaf.indices[0], what)
            return
        assert isinstance(leaf, AttrStmt) and leaf.key == GEMM_ATTR
        inner, store = _nest(_last_update(leaf.body))
        if leaf.value in (0, 1):
            self.gemm_reset(t, loops, store.buffer, store.indices[0], what, inner)
        if leaf.value in (0, 2):
            self.gemm(t, loops, inner, store, what)

    def _uops(self, t, loops, inner, exprs, units, what):  # type: ignore[no-untyped-def]
        env = {**t.env, **{lp.var: 0 for lp in inner}}
        tt = _Thread(env, t.thread, t.names, t.clobbered)
        out = []
        for e, unit in zip(exprs, units, strict=True):
            base, coeffs = self.index(e, tt, loops, what)
            if base % unit or any(c % unit for c in coeffs):
                raise self.fail(what, f"index `{expr_to_str(e)}` does not address whole entries")
            out.append((base // unit, [c // unit for c in coeffs]))
        return out

    def gemm_reset(self, t, loops, buf, index, what, inner=()) -> None:  # type: ignore[no-untyped-def]
        name, off = self.sram(t, buf, what)
        unit = self.elem(buf)
        outer, lanes = _strip_lanes(loops, index, unit, self, t, what) if not inner else (loops, [])
        ((d, dc),) = self._uops(t, outer, [*inner, *lanes], [index], [unit], what)
        loops_ = tuple(vt.Loop(lp.extent, c, 0) for lp, c in zip(outer, dc, strict=True))
        self.stmts.append(vt.Gemm(name, "", "", (vt.Uop(d + off, 0, 0),), loops_, reset=True))
        self.written.add(name)
        t.clobbered.discard(buf)

    def gemm(self, t, loops, inner, store, what) -> None:  # type: ignore[no-untyped-def]
        loads = [n for n in pre_order(store.value) if isinstance(n, BufferLoad)]
        x = next((ld for ld in loads if ld.buffer.scope == "local.inp_buffer"), None)
        w = next((ld for ld in loads if ld.buffer.scope == "local.wgt_buffer"), None)
        if x is None or w is None or store.buffer.scope != "local.acc_buffer":
            raise self.fail(what, "the GEMM reads local.inp_buffer and local.wgt_buffer and "
                            "accumulates into local.acc_buffer")  # fmt: skip
        names = [self.sram(t, b.buffer if isinstance(b, BufferLoad) else b, what)
                 for b in (store.buffer, x, w)]  # fmt: skip
        units = [self.elem(b) for b in (store.buffer, x.buffer, w.buffer)]
        exprs = [store.indices[0], x.indices[0], w.indices[0]]
        (d, dc), (s_, sc), (g, gc) = self._uops(t, loops, inner, exprs, units, what)
        loops_ = tuple(vt.Loop(lp.extent, *c) for lp, *c in zip(loops, dc, sc, gc, strict=True))
        uop = vt.Uop(d + names[0][1], s_ + names[1][1], g + names[2][1])
        self.stmts.append(vt.Gemm(names[0][0], names[1][0], names[2][0], (uop,), loops_))
        self.written.add(names[0][0])
        t.clobbered.discard(store.buffer)

    def alu(self, t: _Thread, loops: list[_Loop], leaf: BufferStore, what: str) -> None:
        op, a, b = _alu_parts(leaf.value, self.cfg, lambda why: self.fail(what, why))
        if a.buffer.scope != "local.acc_buffer" or leaf.buffer.scope != "local.acc_buffer":
            raise self.fail(what, "ALU stages read and write local.acc_buffer")
        if a.buffer in t.clobbered or (isinstance(b, BufferLoad) and b.buffer in t.clobbered):
            raise self.fail(what, "it reads a buffer that was overwritten in place before")
        unit = self.elem(a.buffer)
        outer, lanes = _strip_lanes(loops, leaf.indices[0], unit, self, t, what)
        exprs, units = [leaf.indices[0], a.indices[0]], [unit, unit]
        if isinstance(b, BufferLoad):
            exprs.append(b.indices[0])
            units.append(unit)
        got = self._uops(t, outer, lanes, exprs, units, what)
        (d, dc), (s_, sc) = got[0], got[1]
        src_name, src_off = self.sram(t, a.buffer, what)
        if leaf.buffer is not a.buffer:
            # A new buffer computed from an old one: reuse the old storage in place.
            if dc != sc:
                raise self.fail(what, "an ALU stage writing a new buffer must read the old one "
                                "at the same index")  # fmt: skip
            t.names[leaf.buffer] = (src_name, src_off + s_ - d)
            t.clobbered.add(a.buffer)
            t.clobbered.discard(leaf.buffer)
        dst_name, dst_off = self.sram(t, leaf.buffer, what)
        if (dst_name, dst_off + d) != (src_name, src_off + s_) or dc != sc:
            raise self.fail(what, "the ALU computes ACC = op(ACC, operand) in place: the result "
                            "must overwrite its first operand")  # fmt: skip
        if isinstance(b, BufferLoad):
            (o, oc) = got[2]
            bname, boff = self.sram(t, b.buffer, what)
            loops_ = tuple(
                vt.Loop(lp.extent, c, c2) for lp, c, c2 in zip(outer, dc, oc, strict=True)
            )
            uop = vt.Uop(d + dst_off, o + boff, 0)
            self.stmts.append(vt.Alu(op, dst_name, (uop,), loops_, src=bname))
        else:
            loops_ = tuple(vt.Loop(lp.extent, c, 0) for lp, c in zip(outer, dc, strict=True))
            self.stmts.append(vt.Alu(op, dst_name, (vt.Uop(d + dst_off, 0, 0),), loops_, imm=b))
        self.written.add(dst_name)

    # -- the program --

    def program(self, name: str) -> vt.TileProgram:
        self.walk(self.func.body, _Thread({}))
        inputs, outputs, blobs = [], [], []
        for buf, shape in self.params.items():
            spec = (buf.name, tuple(shape), buf.dtype)
            if buf.name in self.constants:
                arr = np.asarray(self.constants[buf.name])
                if arr.shape != tuple(shape):
                    raise self.fail(f"constant {buf.name!r}",
                                    f"shape {arr.shape} must be {tuple(shape)}")  # fmt: skip
                blobs.append((buf.name, arr.astype(np.dtype(buf.dtype)).tobytes()))
            elif buf.name in self.written:
                outputs.append(spec)
            elif buf.name in self.read:
                inputs.append(spec)
        allocs = tuple(a for n, a in self.allocs.items() if n in self.used)
        stmts = tuple(_merge_min_max(self.stmts))
        return vt.TileProgram(name, allocs, stmts, tuple(inputs), tuple(outputs), tuple(blobs))


def _short_name(buf: Buffer) -> str:
    """``pad.local.inp_buffer`` (a cache stage's buffer) -> ``pad.inp``; others unchanged."""
    suffix = f".{buf.scope}"
    if buf.name.endswith(suffix):
        return f"{buf.name[: -len(suffix)]}.{SCOPES[buf.scope]}"
    return buf.name


def _phases(stmts: list[vt.Stmt]) -> list[list[vt.Stmt]]:
    """One virtual thread's stream cut after each GEMM update and after each run of STOREs: the
    units in which the threads' streams interleave (loads with the GEMM that uses them). A
    tile's epilogue (ALU stages and stores: no load, no GEMM) stays with its last GEMM, so that
    one thread's epilogue runs while the other thread's loads finish instead of after them."""
    phases: list[list[vt.Stmt]] = [[]]
    for i, st in enumerate(stmts):
        phases[-1].append(st)
        nxt = stmts[i + 1] if i + 1 < len(stmts) else None
        gemm = isinstance(st, vt.Gemm) and not st.reset
        stored = isinstance(st, vt.Store) and not isinstance(nxt, vt.Store)
        if gemm or stored:
            phases.append([])
    out: list[list[vt.Stmt]] = []
    for p in filter(None, phases):
        feeds = any(isinstance(s, vt.Load) or (isinstance(s, vt.Gemm) and not s.reset) for s in p)
        if out and not feeds:
            out[-1] += p
        else:
            out.append(p)
    return out


def _merge_min_max(stmts: list[vt.Stmt]) -> list[vt.Stmt]:
    """Adjacent ALU MIN (or MAX) statements that differ only in their micro-ops become one with
    all of them: min and max combine in any order, and the operand buffer is not the one they
    write, so interleaving their micro-ops changes no result (a max pooling's window: one MAX
    with a micro-op per window element, not one instruction per element)."""
    out: list[vt.Stmt] = []
    for st in stmts:
        prev = out[-1] if out else None
        if (
            isinstance(st, vt.Alu)
            and isinstance(prev, vt.Alu)
            and st.op in (AluOp.MIN, AluOp.MAX)
            and st.src not in (None, st.dst)
            and (prev.op, prev.dst, prev.src, prev.loops) == (st.op, st.dst, st.src, st.loops)
        ):
            out[-1] = vt.Alu(st.op, st.dst, prev.uops + st.uops, st.loops, st.src)
        else:
            out.append(st)
    return out


def _points(loops: list[_Loop]) -> list[dict[Var, int]]:
    pts: list[dict[Var, int]] = [{}]
    for lp in loops:
        pts = [{**p, lp.var: i} for p in pts for i in range(lp.extent)]
    return pts


def _conjuncts(cond: Expr) -> list[Expr]:
    if isinstance(cond, BinOp) and cond.op is Op.AND:
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _nest(s: Stmt, env: Mapping[Var, int] | None = None) -> tuple[list[_Loop] | None, Stmt]:
    """The perfect loop nest at `s` (constant extents from 0) and the statement inside it.

    With ``env`` (the values of the loops outside), a guard in the nest (an ``if`` without
    else: the edge of a non-dividing split) is evaluated there and cuts each loop it tests to
    the prefix it keeps: a ragged edge tile's smaller extents. None: the guard keeps nothing.
    """
    loops: list[_Loop] = []
    guards: list[Expr] = []
    while isinstance(s, For) or (env is not None and _is_guard(s)):
        if isinstance(s, IfThenElse):
            guards += _conjuncts(s.condition)
            s = s.then_case
            continue
        if not (isinstance(s.min, IntImm) and s.min.value == 0 and isinstance(s.extent, IntImm)):
            raise LoweringError(f"loop {s.var.name!r} of an accelerator operation must run from "
                                "0 to a constant")  # fmt: skip
        loops.append(_Loop(s.var, s.extent.value))
        s = s.body
    return (_clip(loops, guards, env) if guards else loops), s


def _is_guard(s: Stmt) -> bool:
    return isinstance(s, IfThenElse) and s.else_case is None


def _clip(loops: list[_Loop], guards: list[Expr], env: Mapping[Var, int]) -> list[_Loop] | None:
    """``loops`` cut to the prefixes that ``guards`` (each testing at most one of them) keep."""
    extents = {lp.var: lp.extent for lp in loops}
    for g in guards:
        tested = [lp for lp in loops if _mentions(g, {lp.var})]
        if len(tested) > 1:
            raise LoweringError(f"guard `{expr_to_str(g)}` of an accelerator operation must test "
                                f"one loop, not {[lp.var.name for lp in tested]}")  # fmt: skip
        if not tested:
            if not _ev(g, env):
                return None
            continue
        lp = tested[0]
        keep = [bool(_ev(g, {**env, lp.var: i})) for i in range(lp.extent)]
        n = keep.index(False) if False in keep else lp.extent
        if any(keep[n:]):
            raise LoweringError(f"guard `{expr_to_str(g)}` must keep a prefix of loop "
                                f"{lp.var.name!r}")  # fmt: skip
        extents[lp.var] = min(extents[lp.var], n)
    if not all(extents.values()):
        return None
    return [_Loop(lp.var, extents[lp.var]) for lp in loops]


def _is_reset(s: Stmt) -> bool:
    return (
        isinstance(s, BufferStore)
        and s.buffer.scope == "local.acc_buffer"
        and isinstance(s.value, IntImm)
        and s.value.value == 0
    )


def _compute_leaf(s: Stmt) -> Stmt | None:
    """The GEMM attribute or accumulator reset a loop nest wraps, if it wraps only that."""
    while (isinstance(s, For) and s.kind is not ForKind.THREAD_BINDING) or _is_guard(s):
        s = s.then_case if isinstance(s, IfThenElse) else s.body
    if isinstance(s, AttrStmt) and s.key == GEMM_ATTR:
        return s
    return s if _is_reset(s) else None


def _last_update(s: Stmt) -> Stmt:
    """The GEMM intrinsic body's update nest (its last statement)."""
    return s.stmts[-1] if isinstance(s, SeqStmt) else s


def _strip_lanes(loops, index, unit, low, t, what):  # type: ignore[no-untyped-def]
    """Split the innermost loops covering one entry (the lanes) off a compute nest."""
    _, coeffs = low.index(index, t, loops, what)
    outer, size, k = list(loops), 1, len(loops)
    while k and size < unit:
        k -= 1
        lp, c = loops[k], coeffs[k]
        if lp.extent == 1:
            continue
        if c != size:
            raise low.fail(what, f"loop {lp.var.name} must walk one {unit}-lane entry contiguously")
        size *= lp.extent
    if size != unit:
        raise low.fail(what, f"the innermost loops must cover whole {unit}-lane entries")
    return outer[:k], outer[k:]


def _alu_parts(value: Expr, cfg: HWConfig, fail: Any) -> tuple[AluOp, BufferLoad, Any]:
    """(op, first operand, immediate or second operand) of an ALU stage's value."""

    def load(e: Expr) -> BufferLoad | None:
        if isinstance(e, Cast) and dt.is_int(e.dtype):
            e = e.value
        return e if isinstance(e, BufferLoad) else None

    if isinstance(value, Call) and value.name in ("shift_right", "shift_left"):
        a, n = value.args
        if load(a) is None or not isinstance(n, IntImm):
            raise fail(f"{value.name} must shift an accumulator by a constant")
        return AluOp.SHR, load(a), n.value if value.name == "shift_right" else -n.value
    if isinstance(value, BinOp) and value.op in (*_ALU_BINOPS, Op.SUB):
        a, b = value.a, value.b
        if load(a) is None and value.op in _COMMUTATIVE:
            a, b = b, a
        if load(a) is None:
            raise fail("the first operand must be an accumulator")
        if isinstance(b, IntImm):
            imm = -b.value if value.op is Op.SUB else b.value
            op = AluOp.ADD if value.op is Op.SUB else _ALU_BINOPS[value.op]
        elif load(b) is not None and value.op is not Op.SUB:
            imm, op = load(b), _ALU_BINOPS[value.op]
        else:
            raise fail("the second operand must be a constant or an accumulator")
        if op is AluOp.MUL and not cfg.alu_mul:
            raise fail(f"MUL needs the ALU MUL extension, which HWConfig {cfg.name!r} lacks")
        return op, load(a), imm
    raise fail("an ALU stage computes one of + - * min max shift_right shift_left of an "
               "accumulator")  # fmt: skip


def lower_to_tile_program(
    func: PrimFunc,
    cfg: HWConfig,
    constants: Mapping[str, np.ndarray] | None = None,
    name: str | None = None,
) -> vt.TileProgram:
    """The tile program of an accelerator schedule's loop IR (``tir.lower(..., VTA_PIPELINE)``).

    ``constants`` maps parameters to their values: they become blobs of the image (packed
    weights, bias); the other parameters read are input slots and those written output slots.

    Raises:
        LoweringError: a statement the accelerator cannot run, naming it and why.
    """
    return _Lowering(func, cfg, constants or {}).program(name or func.name)
