"""GEMM and ALU statements of the accelerator lowering (``vta.lower``): a loop nest around the
tensorized GEMM, an accumulator reset or an ``alu`` pragma becomes one compute statement.
"""

from __future__ import annotations

from typing import Any

from ...hw.config import HWConfig
from ...hw.isa import AluOp
from ..te import dtype as dt
from ..te.expr import BinOp, Call, Cast, Expr, IntImm, Op
from ..te.visitor import expr_to_str, pre_order
from ..tir.stmt import (
    AttrStmt,
    BufferLoad,
    BufferStore,
    Stmt,
)
from . import tile as vt
from .intrin import GEMM_ATTR
from .lower_base import LoweringBase, NestLoop, ThreadView, last_update, loop_nest

_ALU_BINOPS = {Op.ADD: AluOp.ADD, Op.MUL: AluOp.MUL, Op.MIN: AluOp.MIN, Op.MAX: AluOp.MAX}
_COMMUTATIVE = (Op.ADD, Op.MUL, Op.MIN, Op.MAX)


class ComputeLowering(LoweringBase):
    # -- GEMM and ALU --

    def compute(self, s: Stmt, t: ThreadView, alu: bool) -> None:
        loops, leaf = loop_nest(s, t.env)
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
        inner, store = loop_nest(last_update(leaf.body))
        if leaf.value in (0, 1):
            self.gemm_reset(t, loops, store.buffer, store.indices[0], what, inner)
        if leaf.value in (0, 2):
            self.gemm(t, loops, inner, store, what)

    def _uops(self, t, loops, inner, exprs, units, what):  # type: ignore[no-untyped-def]
        env = {**t.env, **{lp.var: 0 for lp in inner}}
        tt = ThreadView(env, t.thread, t.names, t.clobbered)
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

    def alu(self, t: ThreadView, loops: list[NestLoop], leaf: BufferStore, what: str) -> None:
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


def merge_min_max(stmts: list[vt.Stmt]) -> list[vt.Stmt]:
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
