"""DMA copies of the accelerator lowering (``vta.lower``): a ``dma_copy`` loop nest becomes
LOAD/STORE statements (lanes, the DMA's x and y loops, padding from the zero-padding guard).
"""

from __future__ import annotations

from ..te.expr import Call, Cast, IntImm, Var
from ..te.visitor import pre_order
from ..tir.stmt import (
    BufferLoad,
    BufferStore,
    Stmt,
)
from . import tile as vt
from .lower_base import (
    SCOPES,
    LoweringBase,
    NestLoop,
    ThreadView,
    conjuncts,
    index_value,
    loop_nest,
    mentions,
    points,
)


class DmaLowering(LoweringBase):
    # -- DMA --

    def dma(self, body: Stmt, t: ThreadView) -> None:
        loops, leaf = loop_nest(body, t.env)
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

    def _lanes(self, loops: list[NestLoop], dc: list[int], sc: list[int], unit: int, what: str):  # type: ignore[no-untyped-def]
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

    def _xy(self, els: list[tuple[NestLoop, int, int]], keep: set[Var] = frozenset()):  # type: ignore[no-untyped-def,assignment]
        """(rest, y, x) of the element loops, each (loop, sram coefficient, dram coefficient).

        Adjacent loops contiguous on both sides are fused first (the inner loop's variable
        stands for the fused one, so ``keep``, the loops a padding guard tests, are not fused);
        then the innermost loop contiguous on both sides is the DMA's x and the next one, dense
        in SRAM, its y (with the DRAM stride).
        """
        fused: list[tuple[NestLoop, int, int]] = []
        for lp, d, s in els:
            if fused and lp.var not in keep:
                o, od, os_ = fused[-1]
                if o.var not in keep and od == d * lp.extent and os_ == s * lp.extent:
                    fused[-1] = (NestLoop(lp.var, o.extent * lp.extent), d, s)
                    continue
            fused.append((lp, d, s))
        x = fused.pop() if fused and fused[-1][1] == 1 and fused[-1][2] == 1 else None
        xn = x[0].extent if x else 1
        y = fused.pop() if fused and fused[-1][1] == xn else None
        return fused, y, x

    def load(self, t: ThreadView, loops, leaf, value, cond, what) -> None:  # type: ignore[no-untyped-def]
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
        for point in points([lp for lp, _, _ in rest]):
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
        conj = [c for c in conjuncts(cond) if mentions(c, {lp.var})]
        if other is not None and any(mentions(c, {other[0].var}) for c in conj):
            raise self.fail(what, "the padding condition must treat rows and columns separately")
        ok = [all(index_value(c, {**env, lp.var: i}) for c in conj) for i in range(n)]
        if not any(ok):
            raise self.fail(what, f"a copy whose {label} range is all padding cannot be a LOAD")
        first = ok.index(True)
        end = n - ok[::-1].index(True)
        if not all(ok[first:end]):
            raise self.fail(what, "the padding must be at the edges of the copy")
        return n, first, end

    def store(self, t: ThreadView, loops, leaf, value, what) -> None:  # type: ignore[no-untyped-def]
        name, off = self.sram(t, value.buffer, what)
        if value.buffer in t.clobbered:
            raise self.fail(what, f"{value.buffer.name!r} was overwritten in place before")
        unit = self.elem(value.buffer)
        sbase, sc = self.index(value.indices[0], t, loops, what)
        dbase, dc = self.index(leaf.indices[0], t, loops, what)
        els, _ = self._lanes(loops, sc, dc, unit, what)
        rest, y, x = self._xy(els)
        for point in points([lp for lp, _, _ in rest]):
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
