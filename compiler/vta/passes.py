"""Passes over the accelerator's tile program and instruction stream (pure functions).

Pipeline order (``vta.generate_program`` runs them):
1. ``constant_adds_to_gemm``: an ALU ADD of a constant accumulator vector (the bias) becomes a
   GEMM against one constant input entry, one step per cycle instead of two.
2. ``requant_into_gemm`` and ``drop_zero_resets`` (HWConfig ``gemm_requant``): the bias GEMM
   step requantizes on writeback in place of the ALU passes after it, and the resets of
   accumulators it left at 0 go.
3. ``fold_uop_loops``: drop unit loops, fuse contiguous ones, keep at most two (the GEMM/ALU
   ``iter_out``/``iter_in`` fields) and unroll the rest into micro-ops.
4. ``stream_resident_loads``: resident weights are loaded in parts, each before the GEMM that
   first reads it, with hazards per part (a GEMM waits for its parts, not all the weights).
5. ``check_sram_capacity``: every buffer fits its SRAM, every access stays inside its buffer.
6. ``dedupe_uop_kernels``: one copy of each distinct micro-op kernel in the micro-op blob.
7. ``insert_dependency_tokens``: push/pop flags for every cross-stage hazard.
8. ``verify_tokens``: the stream runs to FINISH with balanced tokens (no deadlock).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ...hw.config import HWConfig
from ...hw.isa import (
    LOOP_ITER_WIDTH,
    AluOp,
    FinishInsn,
    Insn,
    MemInsn,
    MemType,
    Opcode,
    Stage,
    Uop,
    describe,
    stage_of,
)
from ...hw.tokens import LINKS
from ...sim.functional import SimError, TokenStepper, validate_program
from ..tir.stmt import LoweringError
from .tile import (
    SCOPES,
    Alloc,
    Alu,
    Gemm,
    GemmRequant,
    Load,
    Loop,
    Stmt,
    Store,
    TileProgram,
    memory_scopes,
)

MAX_LOOPS = 2  # the GEMM/ALU instruction has two loop levels around its micro-ops
MAX_ITER = (1 << LOOP_ITER_WIDTH) - 1


# ---- 1. constant additions on the GEMM core ------------------------------------------------

# The constant input entry of ``constant_adds_to_gemm``: lane 0 holds 1, the others this.
GEMM_ADD_LANE = 127


def constant_adds_to_gemm(prog: TileProgram, cfg: HWConfig) -> TileProgram:
    """Turn each ALU ADD of a constant accumulator buffer (the bias) into a GEMM.

    A tensor-tensor ALU ADD issues one step every two cycles (its operand takes the ACC read
    port a second time: ``hw.timing.alu_ii``), a GEMM one per cycle. A constant ``c`` (BATCH
    rows alike) is ``sum_k v[k] * w[k]`` for the input entry ``v = (1, 127, ..., 127)`` and
    int8 weights ``w`` (``gemm_add_weights``), so ``acc[d] += c[s]`` becomes a GEMM step with
    src the one ``v`` entry and wgt entry ``s`` of a weight buffer laid out as the constant
    buffer was. The GEMM core accumulates int32 with the same wrap-around as the ALU's ADD, and
    additions commute, so results are bit-exact.

    Applies to an acc buffer that only whole-entry LOADs without padding from constant blobs
    write and only ALU ADDs read as their operand, whose every value ``gemm_add_weights``
    represents, when the new INP and WGT buffers fit their SRAMs and the ADD steps saved
    outweigh the larger LOADs (``_gemm_add_pays``); any other program is returned unchanged.
    """
    blobs = dict(prog.constants)
    names = {a.name for a in prog.allocs}
    scopes = memory_scopes(cfg)
    used = {sc: sum(a.size for a in prog.allocs if a.scope == sc) for sc in SCOPES}
    for a in prog.allocs:
        if a.scope != "acc":
            continue
        loads = [s for s in prog.stmts if isinstance(s, Load) and s.buf == a.name]
        adds = [s for s in prog.stmts if isinstance(s, Alu) and s.src == a.name]
        other = [s for s in prog.stmts if s not in loads and s not in adds and a.name in
                 _buffers(s)]  # fmt: skip
        if not loads or not adds or other or any(s.op != AluOp.ADD for s in adds):
            continue
        if any(s.acc_8bit or s.tensor not in blobs or _padded(s) for s in loads):
            continue
        values = _loaded_entries(a.size, loads, blobs, cfg)
        weights = None if values is None else gemm_add_weights(values, cfg)
        wname, vname = f"{a.name}.wgt", f"{a.name}.ones"
        if weights is None or {wname, vname} & names or f"{wname}.blob" in blobs:
            continue
        if used["wgt"] + a.size > scopes["wgt"].depth or used["inp"] + 1 > scopes["inp"].depth:
            continue
        if not _gemm_add_pays(loads, adds, cfg):
            continue
        ones = np.full((cfg.batch, cfg.block_in), GEMM_ADD_LANE, np.int8)
        ones[:, 0] = 1
        wblob, vblob = f"{wname}.blob", f"{vname}.blob"
        stmts: list[Stmt] = []
        for s in prog.stmts:
            if s in loads:
                if s is loads[0]:
                    stmts.append(Load(vblob, vname, 0, 0, 1, 1, 1))
                stmts.append(replace(s, tensor=wblob, buf=wname))
            elif s in adds:
                uops = tuple(Uop(u.dst_idx, 0, u.src_idx) for u in s.uops)
                loops = tuple(Loop(lp.extent, lp.dst, 0, lp.src) for lp in s.loops)
                stmts.append(Gemm(s.dst, vname, wname, uops, loops))
            else:
                stmts.append(s)
        allocs = tuple(x for x in prog.allocs if x.name != a.name) + (
            Alloc(vname, "inp", 1), Alloc(wname, "wgt", a.size))  # fmt: skip
        constants = (*prog.constants, (vblob, ones.tobytes()), (wblob, weights.tobytes()))
        return constant_adds_to_gemm(
            replace(prog, allocs=allocs, stmts=tuple(stmts), constants=constants), cfg
        )
    return prog


def gemm_add_weights(values: np.ndarray, cfg: HWConfig) -> np.ndarray | None:
    """int8 weight entries ``w`` with ``sum_k v[k] * w[e, o, k] == values[e, b, o]`` for the
    input entry ``v = (1, 127, ..., 127)`` of ``constant_adds_to_gemm``; None when the BATCH
    rows of an entry differ or a value is out of the representable range (about +-127 * 128 *
    (BLOCK_IN - 1))."""
    if values.ndim != 3 or (values != values[:, :1]).any():
        return None
    c = values[:, 0, :].astype(np.int64)  # (entries, BLOCK_OUT)
    n = cfg.block_in - 1
    if n == 0:  # the input entry is (1,): each value must itself be an int8
        return c[..., None].astype(np.int8) if ((c >= -128) & (c <= 127)).all() else None
    q = np.floor_divide(c + GEMM_ADD_LANE // 2, GEMM_ADD_LANE)  # nearest multiple of 127
    r = c - GEMM_ADD_LANE * q  # in [-63, 63]: lane 0's weight
    if (q > 127 * n).any() or (q < -128 * n).any():
        return None
    w = np.zeros((*c.shape, cfg.block_in), np.int64)
    w[..., 0] = r
    left = q.copy()
    for k in range(1, n + 1):  # greedy: each lane takes what it can
        take = np.clip(left, -128, 127)
        w[..., k] = take
        left -= take
    assert not left.any() and (w[..., 0] + GEMM_ADD_LANE * w[..., 1:].sum(-1) == c).all()
    return w.astype(np.int8)


def _gemm_add_pays(loads: list[Load], adds: list[Alu], cfg: HWConfig) -> bool:
    """Whether the GEMM form saves more cycles than it adds (sim/latency.py's formulas).

    It saves one cycle per ADD step (with ``gemm_requant`` four: ``requant_into_gemm`` then
    folds the requantization passes and the reset into it) and the compute stage's ACC LOADs
    of the constants; it adds
    the load stage's WGT LOADs, whose entries (BLOCK_OUT x BLOCK_IN int8) are larger than the
    ACC entries they replace: a layer with few output pixels per channel (ResNet-18's 7x7
    layers) adds fewer steps than it loads bytes, and its load stage is its bottleneck.
    """
    from ...sim.latency import TimingParams, load_cycles

    p = TimingParams.for_config(cfg)

    def cycles(mt: MemType) -> int:
        return sum(load_cycles(MemInsn(Opcode.LOAD, mt, 0, s.dram_offset, s.y_size, s.x_size,
                                       s.x_stride), cfg, p) for s in loads)  # fmt: skip

    steps = sum(len(s.uops) * math.prod(lp.extent for lp in s.loops) for s in adds)
    if cfg.gemm_requant:  # the GEMM form then also takes the SHR/MAX/MIN passes and the reset
        steps *= 4
    return steps + cycles(MemType.ACC) > cycles(MemType.WGT)


# ---- 2. requantization on the GEMM's writeback ----------------------------------------------


def requant_into_gemm(prog: TileProgram, cfg: HWConfig) -> TileProgram:
    """Fold the requantization ALU passes after a GEMM into the GEMM (``Gemm.requant``).

    Before: ``GEMM C += ones.bias; ALU ADD C imm=32; ALU SHR C imm=6; ALU MAX C imm=0;
    ALU MIN C imm=127``. After: ``GEMM C += ones.bias requant(>>6 round relu)``.

    The requantizing GEMM (HWConfig ``gemm_requant``, hw/isa.py) writes OUT with the clipped
    value the passes would have left there and 0 to ACC, in its own steps: a 1x1 conv's
    epilogue of 3-4 ALU passes per output vector (plus the reset ``drop_zero_resets`` then
    removes) is gone. Applies to a non-reset GEMM whose loops have no src steps and that writes
    each of its accumulators once, followed at once by immediate ALU passes on exactly those
    accumulators: ``[ADD 2**(s-1),] SHR s, MAX lo, MIN hi`` with ``hi`` the int8 maximum and
    ``lo`` 0 or ``-hi``; and only when no later statement reads those accumulators (only OUT,
    through a STORE) before a reset or LOAD overwrites them, since they hold 0 instead of the
    clipped values. Without ``gemm_requant`` the program is returned unchanged.
    """
    if not cfg.gemm_requant:
        return prog
    stmts = list(prog.stmts)
    out: list[Stmt] = []
    i = 0
    while i < len(stmts):
        s = stmts[i]
        fused = _fused_requant(stmts, i, cfg) if isinstance(s, Gemm) else None
        if fused is None:
            out.append(s)
            i += 1
            continue
        rq, n = fused
        out.append(replace(s, requant=rq))
        i += 1 + n
    return replace(prog, stmts=tuple(out))


def _fused_requant(stmts: list[Stmt], i: int, cfg: HWConfig) -> tuple[GemmRequant, int] | None:
    """(requantization, ALU statements it replaces) for the GEMM at ``i``, or None."""
    g = stmts[i]
    assert isinstance(g, Gemm)
    if g.reset or g.requant is not None or any(lp.src for lp in g.loops):
        return None
    if len({u.src_idx for u in g.uops}) != 1:
        return None  # the requantizing GEMM keeps micro-op src indices, no src steps: fine,
        # but one src per step keeps the pattern to the bias GEMM it is meant for
    entries = _entries(g.uops, g.loops, "dst_idx", "dst")
    if np.unique(entries).size != entries.size:
        return None
    hi = (1 << (cfg.out_width - 1)) - 1
    ops: list[tuple[AluOp, int]] = []
    k = i + 1
    while k < len(stmts) and len(ops) < 4:
        a = stmts[k]
        if not isinstance(a, Alu) or a.dst != g.dst or a.imm is None:
            break
        mine = _entries(a.uops, a.loops, "dst_idx", "dst")
        if mine.size != entries.size or not np.array_equal(np.sort(mine), np.sort(entries)):
            break
        ops.append((a.op, a.imm))
        k += 1
    for n in (4, 3):
        if len(ops) < n:
            continue
        head, (shr, mx, mn) = ops[: n - 3], ops[n - 3 : n]
        if shr[0] != AluOp.SHR or not 0 <= shr[1] < cfg.acc_width:
            continue
        rnd = bool(head)
        if rnd and (shr[1] == 0 or head[0] != (AluOp.ADD, 1 << (shr[1] - 1))):
            continue
        if mx[0] != AluOp.MAX or mx[1] not in (0, -hi) or mn != (AluOp.MIN, hi):
            continue
        if not _unread_until_overwritten(stmts, i + 1 + n, g.dst, entries):
            continue
        return GemmRequant(shr[1], rnd, mx[1] == 0), n
    return None


def _unread_until_overwritten(stmts: list[Stmt], k: int, buf: str, entries: np.ndarray) -> bool:
    """Whether no statement from ``k`` on reads accumulators ``entries`` of ``buf`` before a
    reset or LOAD overwrites them (a STORE reads OUT, which is unchanged)."""
    pending = set(entries.tolist())
    for s in stmts[k:]:
        if not pending:
            return True
        if isinstance(s, Store) or buf not in _buffers(s):
            continue
        if isinstance(s, Load):
            if s.buf == buf and not _padded(s) and s.y_size * s.x_size:
                pending -= set(range(s.sram_offset, s.sram_offset + s.footprint))
            continue
        touched = set(_entries(s.uops, s.loops, "dst_idx", "dst").tolist())
        if isinstance(s, Alu) and s.src == buf:
            touched |= set(_entries(s.uops, s.loops, "src_idx", "src").tolist())
        if isinstance(s, Gemm) and s.reset and s.dst == buf:
            pending -= touched
        elif touched & pending:
            return False
    return True


def drop_zero_resets(prog: TileProgram) -> TileProgram:
    """Remove each reset GEMM whose accumulators are all known to hold 0 already.

    Before: ``GEMM C += ones.bias requant(...); STORE C; GEMM.reset C; GEMM C += x.w``.
    After: ``GEMM C += ones.bias requant(...); STORE C; GEMM C += x.w``.

    An accumulator is known to be 0 after a reset or a requantizing GEMM wrote it, until any
    other statement writes it; nothing is known at the start of a program.
    """
    zero: dict[str, set[int]] = {}
    out: list[Stmt] = []
    for s in prog.stmts:
        if isinstance(s, Load):
            if s.buf in zero:
                zero[s.buf] -= set(range(s.sram_offset, s.sram_offset + s.footprint))
            out.append(s)
            continue
        if isinstance(s, Store):
            out.append(s)
            continue
        written = set(_entries(s.uops, s.loops, "dst_idx", "dst").tolist())
        known = zero.setdefault(s.dst, set())
        if isinstance(s, Gemm) and s.reset and written <= known:
            continue
        if isinstance(s, Gemm) and (s.reset or s.requant is not None):
            known |= written
        else:
            known -= written
        out.append(s)
    return replace(prog, stmts=tuple(out))


def _entries(uops: tuple[Uop, ...], loops: tuple[Loop, ...], field: str, step: str) -> np.ndarray:
    """Every buffer index a micro-op nest addresses through ``field``, in step order."""
    idx = np.array([getattr(u, field) for u in uops], np.int64)
    for lp in reversed(loops):
        idx = (getattr(lp, step) * np.arange(lp.extent)[:, None] + idx[None, :]).ravel()
    return idx


def _buffers(s: Stmt) -> tuple[str | None, ...]:
    if isinstance(s, (Load, Store)):
        return (s.buf,)
    if isinstance(s, Gemm):
        return (s.dst, s.src, s.wgt)
    return (s.dst, s.src)


def _padded(s: Load) -> bool:
    return bool(s.y_pad_0 or s.y_pad_1 or s.x_pad_0 or s.x_pad_1)


def _loaded_entries(
    size: int, loads: list[Load], blobs: dict[str, bytes], cfg: HWConfig
) -> np.ndarray | None:
    """(size, BATCH, BLOCK_OUT) int32 values the LOADs leave in an acc buffer (None when some
    entry is not written or a LOAD reads past its blob)."""
    out = np.zeros((size, cfg.batch, cfg.block_out), np.int64)
    written = np.zeros(size, bool)
    for s in loads:
        data = np.frombuffer(blobs[s.tensor], np.int32).reshape(-1, cfg.batch, cfg.block_out)
        for y in range(s.y_size):
            src = s.dram_offset + y * s.x_stride
            dst = s.sram_offset + y * s.x_size
            if src + s.x_size > len(data) or dst + s.x_size > size:
                return None
            out[dst : dst + s.x_size] = data[src : src + s.x_size]
            written[dst : dst + s.x_size] = True
    return out if written.all() else None


# ---- 3. resident weights streamed in by first use -----------------------------------------


def stream_resident_loads(prog: TileProgram) -> tuple[TileProgram, dict[int, tuple[str, ...]]]:
    """``stream_resident_load`` applied to every WGT buffer it applies to (the weights, and the
    bias's weights of ``constant_adds_to_gemm``)."""
    names: dict[int, tuple[str, ...]] = {}
    done: set[str] = set()
    while True:
        prog, buf, more = stream_resident_load(prog, done, names)
        if buf is None:
            return prog, names
        done.add(buf)
        names = more


def stream_resident_load(
    prog: TileProgram, skip: set[str], names: dict[int, tuple[str, ...]]
) -> tuple[TileProgram, str | None, dict[int, tuple[str, ...]]]:
    """Split the one LOAD of resident weights into LOADs placed before the GEMM that first
    reads each part, and name, per statement index, the regions a LOAD writes or a GEMM reads
    (for ``insert_dependency_tokens``, in place of the buffer's name).

    ``skip`` names buffers already split and ``names`` their region names by statement index
    (carried over to the new indices); returns the program, the buffer split (None: none
    left) and the region names.

    Resident weights (``Conv2dSchedule.resident_weights``) were loaded whole before the first
    GEMM, which waited for all of them: on ResNet-18's C11 (128 KB of weights) 43k of 78k
    cycles. Each part now goes to the load stage in program order next to the input rows of its
    first GEMM, and a GEMM waits only for the parts it reads. Applies to a WGT buffer that one
    contiguous LOAD without padding writes before any GEMM reads it and nothing else writes;
    the parts are the entries each GEMM reads first, one LOAD per run of consecutive entries.
    """
    scopes = {a.name: a.scope for a in prog.allocs}
    stmts = list(prog.stmts)
    for i, ld in enumerate(stmts):
        if not isinstance(ld, Load) or scopes.get(ld.buf) != "wgt" or _padded(ld):
            continue
        if ld.buf in skip:
            continue
        if ld.y_size > 1 and ld.x_stride != ld.x_size:
            continue
        writers = [s for s in stmts if isinstance(s, Load) and s.buf == ld.buf]
        gemms = [k for k, s in enumerate(stmts) if isinstance(s, Gemm) and not s.reset
                 and s.wgt == ld.buf]  # fmt: skip
        if len(writers) != 1 or not gemms or gemms[0] < i:
            continue
        lo, n = ld.sram_offset, ld.y_size * ld.x_size
        seen: set[int] = set()
        parts: dict[int, list[int]] = {}
        reads: dict[int, set[int]] = {}
        for k in gemms:
            touched = set(_wgt_entries(stmts[k]).tolist())
            if not all(lo <= e < lo + n for e in touched):
                break
            parts[k] = sorted(touched - seen)
            seen |= touched
            reads[k] = touched
        else:
            left = sorted(set(range(lo, lo + n)) - seen)  # read by no GEMM: with the first part
            parts[gemms[0]] = sorted(parts[gemms[0]] + left)
            region = {e: f"{ld.buf}#{k}" for k, es in parts.items() for e in es}
            out: list[Stmt] = []
            new: dict[int, tuple[str, ...]] = {}
            for k, s in enumerate(stmts):
                if k == i:
                    continue
                for a, b in _runs(parts.get(k, [])):
                    new[len(out)] = (region[a],)
                    out.append(replace(ld, sram_offset=a, dram_offset=ld.dram_offset + a - lo,
                                       y_size=1, x_size=b - a, x_stride=b - a))  # fmt: skip
                if k in names:
                    new[len(out)] = names[k]
                if k in reads:  # with the regions of another split buffer it reads
                    mine = {region[e] for e in reads[k]}
                    new[len(out)] = tuple(sorted(mine | set(new.get(len(out), ()))))
                out.append(s)
            return replace(prog, stmts=tuple(out)), ld.buf, new
    return prog, None, names


def _wgt_entries(s: Gemm) -> np.ndarray:
    """The WGT indices (relative to the buffer) a GEMM's micro-op nest reads."""
    idx = np.unique(np.array([u.wgt_idx for u in s.uops], np.int64))
    for lp in s.loops:
        if lp.wgt:
            idx = np.unique((idx[None, :] + lp.wgt * np.arange(lp.extent)[:, None]).ravel())
    return idx


def _runs(entries: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of consecutive sorted entries."""
    out: list[tuple[int, int]] = []
    for e in entries:
        if out and out[-1][1] == e:
            out[-1] = (out[-1][0], e + 1)
        else:
            out.append((e, e + 1))
    return out


# ---- 1. micro-op loops ---------------------------------------------------------------------


def fold_loops(
    uops: tuple[Uop, ...], loops: tuple[Loop, ...]
) -> tuple[tuple[Uop, ...], tuple[Loop, ...]]:
    """Fit a micro-op nest into the instruction's two loop levels without changing its steps.

    Unit loops are dropped; an outer loop whose steps equal the inner loop's steps times its
    extent is fused with it; loops beyond the outer two are unrolled into the micro-ops.

    Before: ``uops=[u], loops=[1, 4:d8, 8:d1]``. After: ``uops=[u], loops=[32:d1]``.
    """
    kept = [lp for lp in loops if lp.extent != 1]
    fused: list[Loop] = []
    for lp in kept:
        if fused and _fusable(fused[-1], lp):
            fused[-1] = Loop(fused[-1].extent * lp.extent, lp.dst, lp.src, lp.wgt)
        else:
            fused.append(lp)
    hw, unrolled = fused[:MAX_LOOPS], fused[MAX_LOOPS:]
    for lp in reversed(unrolled):
        uops = tuple(
            Uop(u.dst_idx + i * lp.dst, u.src_idx + i * lp.src, u.wgt_idx + i * lp.wgt)
            for i in range(lp.extent)
            for u in uops
        )
    for lp in hw:
        if lp.extent > MAX_ITER:
            raise LoweringError(
                f"a micro-op loop extent must be at most {MAX_ITER} (iter_out/iter_in), "
                f"not {lp.extent}: use a smaller tile"
            )
    return uops, tuple(hw)


def _fusable(outer: Loop, inner: Loop) -> bool:
    n = inner.extent
    same = (outer.dst, outer.src, outer.wgt) == (inner.dst * n, inner.src * n, inner.wgt * n)
    return same and outer.extent * n <= MAX_ITER


def fold_uop_loops(prog: TileProgram) -> TileProgram:
    """Apply ``fold_loops`` to every GEMM and ALU statement of the program."""

    def fold(s: Stmt) -> Stmt:
        if isinstance(s, (Gemm, Alu)):
            uops, loops = fold_loops(s.uops, s.loops)
            return replace(s, uops=uops, loops=loops)
        return s

    return replace(prog, stmts=tuple(fold(s) for s in prog.stmts))


# ---- verification --------------------------------------------------------------------------


def verify_tile_program(prog: TileProgram, folded: bool, after: str) -> None:
    """Check what every pass keeps true: each statement names allocated buffers of the scopes
    its instruction addresses (a GEMM accumulates inp x wgt into acc, the ALU and STOREs work on
    acc, ``acc_8bit`` loads go to acc), has micro-ops and positive loop extents, and once
    ``folded`` at most the instruction's two loop levels.

    Raises:
        LoweringError: naming the statement, what is wrong, and the pass that produced it.
    """
    scopes = {a.name: a.scope for a in prog.allocs}

    def fail(s: Stmt, why: str) -> LoweringError:
        return LoweringError(f"tile program {prog.name!r} after {after}: `{_fmt(s)}` {why}")

    for s in prog.stmts:
        if isinstance(s, (Load, Store)):
            want = "acc" if isinstance(s, Store) or s.acc_8bit else "inp|wgt|acc"
            uses = [(s.buf, want)]
        elif isinstance(s, Gemm):
            uses = [(s.dst, "acc")] + ([] if s.reset else [(s.src, "inp"), (s.wgt, "wgt")])
        else:
            uses = [(s.dst, "acc")] + ([(s.src, "acc")] if s.src is not None else [])
            if (s.src is None) == (s.imm is None):
                raise fail(s, "must have either an immediate or a source buffer")
        for name, want in uses:
            if scopes.get(name) not in want.split("|"):
                raise fail(s, f"must use a buffer in {want}, not {name!r} "
                           f"({scopes.get(name, 'not allocated')})")  # fmt: skip
        if isinstance(s, (Gemm, Alu)):
            if not s.uops or any(lp.extent < 1 for lp in s.loops):
                raise fail(s, "must have micro-ops and loop extents of at least 1")
            if folded and len(s.loops) > MAX_LOOPS:
                raise fail(s, f"must have at most {MAX_LOOPS} loop levels")


# ---- 2. capacities -------------------------------------------------------------------------


def check_sram_capacity(prog: TileProgram, cfg: HWConfig) -> dict[str, int]:
    """Place the buffers of each scope one after another; returns each buffer's base index.

    Raises:
        LoweringError: a scope's buffers overflow its SRAM (naming each buffer and its size),
            or a statement addresses elements outside its buffer.
    """
    bases: dict[str, int] = {}
    for scope in SCOPES:
        mine = [a for a in prog.allocs if a.scope == scope]
        total = sum(a.size for a in mine)
        depth = memory_scopes(cfg)[scope].depth
        if total > depth:
            sizes = ", ".join(f"{a.name}: {a.size}" for a in mine)
            raise LoweringError(
                f"the {scope.upper()} buffer must hold at most {depth} elements on HWConfig "
                f"{cfg.name!r}, not {total} ({sizes}) in tile program {prog.name!r}: "
                "use smaller tiles or fewer virtual threads"
            )
        base = 0
        for a in mine:
            bases[a.name] = base
            base += a.size
    for s in prog.stmts:
        _check_bounds(prog, s)
    return bases


def _span(uops: tuple[Uop, ...], loops: tuple[Loop, ...], field: str, step: str) -> tuple[int, int]:
    """(min, max) index a micro-op nest touches through ``field``."""
    base = [getattr(u, field) for u in uops]
    lo, hi = min(base), max(base)
    for lp in loops:
        d = getattr(lp, step) * (lp.extent - 1)
        lo, hi = lo + min(d, 0), hi + max(d, 0)
    return lo, hi


def _check_bounds(prog: TileProgram, s: Stmt) -> None:
    spans: list[tuple[str, int, int]] = []
    if isinstance(s, Load):
        spans.append((s.buf, s.sram_offset, s.sram_offset + s.footprint - 1))
    elif isinstance(s, Store):
        spans.append((s.buf, s.sram_offset, s.sram_offset + s.y_size * s.x_size - 1))
    else:
        spans.append((s.dst, *_span(s.uops, s.loops, "dst_idx", "dst")))
        if isinstance(s, Gemm) and not s.reset:
            spans.append((s.src, *_span(s.uops, s.loops, "src_idx", "src")))
            spans.append((s.wgt, *_span(s.uops, s.loops, "wgt_idx", "wgt")))
        elif isinstance(s, Alu) and s.src is not None:
            spans.append((s.src, *_span(s.uops, s.loops, "src_idx", "src")))
    for name, lo, hi in spans:
        size = prog.alloc(name).size
        if lo < 0 or hi >= size:
            raise LoweringError(
                f"statement `{_fmt(s)}` must address buffer {name!r} within [0, {size}), "
                f"not [{lo}, {hi + 1}) (tile program {prog.name!r})"
            )


def _fmt(s: Stmt) -> str:
    from .tile import format_stmt

    return format_stmt(s)


# ---- 3. micro-op kernels -------------------------------------------------------------------


def dedupe_uop_kernels(
    kernels: Sequence[tuple[Uop, ...]], cfg: HWConfig
) -> tuple[list[Uop], list[int]]:
    """Lay out micro-op kernels in one blob, storing each distinct kernel once.

    Returns the blob's micro-ops and each kernel's offset in it.

    Raises:
        LoweringError: the distinct kernels do not fit the micro-op buffer.
    """
    blob: list[Uop] = []
    where: dict[tuple[Uop, ...], int] = {}
    offsets = []
    for k in kernels:
        if k not in where:
            where[k] = len(blob)
            blob.extend(k)
        offsets.append(where[k])
    if len(blob) > cfg.uop_depth:
        raise LoweringError(
            f"the UOP buffer must hold at most {cfg.uop_depth} micro-ops on HWConfig "
            f"{cfg.name!r}, not {len(blob)} ({len(where)} distinct kernels): use smaller tiles, "
            "non-resident weights or fewer virtual threads"
        )
    return blob, offsets


# ---- 4. dependency tokens ------------------------------------------------------------------


@dataclass(frozen=True)
class Emitted:
    """One instruction with the buffers it reads and writes (for hazard detection)."""

    insn: Insn
    reloc: str | None = None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()


def insert_dependency_tokens(stream: Sequence[Emitted]) -> list[Emitted]:
    """Set push/pop flags so every cross-stage hazard waits; append FINISH after everything.

    Each instruction waits for the latest earlier instruction of another stage that wrote what
    it reads or writes (RAW, WAW) or read what it writes (WAR). A wait is a token pushed by that
    producer itself, so that unrelated work of its stage is not waited for; a wait already
    implied by an earlier token (the stages' knowledge is tracked as vector clocks) is skipped.
    Then every token is popped exactly once, and pushes and pops pair up in queue order: an
    unskipped producer is later than every earlier push of its queue, whose consumers it would
    otherwise be known to.

    Before: ``LOAD INP -> inp; GEMM reads inp``.
    After: ``LOAD INP (push_next); GEMM (pop_prev); FINISH (pop_prev)``.

    Raises:
        LoweringError: a hazard between the load and store stages, which share no token queue.
    """
    out = list(stream) + [Emitted(FinishInsn())]
    stages = [stage_of(e.insn) for e in out]
    know: dict[Stage, dict[Stage, int]] = {s: {} for s in Stage}
    know_at: list[dict[Stage, int]] = []
    last_in: dict[Stage, int] = {}
    writer: dict[str, int] = {}
    readers: dict[str, dict[Stage, int]] = {}
    for i, e in enumerate(out):
        stage = stages[i]
        needs = _hazards(e, stage, stages, writer, readers, last_in, i)
        for producer, pos in needs.items():
            if know[stage].get(producer, -1) >= pos:
                continue
            _link(out, stages, i, producer, pos)
            for s, q in know_at[pos].items():
                know[stage][s] = max(know[stage].get(s, -1), q)
        for b in e.reads:
            readers.setdefault(b, {})[stage] = i
        for b in e.writes:
            writer[b] = i
            readers[b] = {}
        last_in[stage] = i
        know[stage][stage] = i
        know_at.append(dict(know[stage]))
    return out


def _hazards(
    e: Emitted,
    stage: Stage,
    stages: list[Stage],
    writer: dict[str, int],
    readers: dict[str, dict[Stage, int]],
    last_in: dict[Stage, int],
    i: int,
) -> dict[Stage, int]:
    """Producer stage -> the latest instruction of it this one must wait for."""
    needs: dict[Stage, int] = {}

    def need(pos: int) -> None:
        s = stages[pos]
        if s != stage:
            needs[s] = max(needs.get(s, -1), pos)

    if isinstance(e.insn, FinishInsn):
        for s in (Stage.LOAD, Stage.STORE):
            if s in last_in:
                need(last_in[s])
        return needs
    for b in (*e.reads, *e.writes):
        if b in writer:
            need(writer[b])
    for b in e.writes:
        for pos in readers.get(b, {}).values():
            need(pos)
    for s in needs:
        if (s, stage) not in LINKS:
            raise LoweringError(
                f"instruction {i} ({describe(e.insn)}) depends on the {s.name.lower()} stage, "
                f"but the {stage.name.lower()} and {s.name.lower()} stages share no token "
                "queue: route the dependency through the compute stage"
            )
    return needs


def _link(out: list[Emitted], stages: list[Stage], i: int, producer: Stage, p: int) -> None:
    """Producer instruction ``p`` pushes a token that instruction ``i`` pops."""
    link = LINKS[(producer, stages[i])]
    push, pop = link.push, link.pop
    assert not getattr(out[p].insn, push), f"instruction {p} already pushes {push}"
    out[p] = dataclasses.replace(out[p], insn=replace(out[p].insn, **{push: True}))
    out[i] = dataclasses.replace(out[i], insn=replace(out[i].insn, **{pop: True}))


# ---- 5. token verification -----------------------------------------------------------------


def verify_tokens(insns: Sequence[Insn], cfg: HWConfig, name: str = "program") -> None:
    """Run the token protocol without data: reject deadlocks and unbalanced tokens.

    The stepping is the simulators' own (sim/functional.py ``TokenStepper``: bounded command
    queues of ``insn_queue_depth``, token queues of ``dep_queue_depth``, pop before push, as the
    RTL does), so a stream is accepted exactly when the functional simulator runs it.

    Raises:
        LoweringError: naming the stuck instructions, or the tokens left over at FINISH.
    """
    try:
        validate_program(insns)
        TokenStepper(insns, cfg.insn_queue_depth, cfg.dep_queue_depth).run()
    except SimError as e:
        raise LoweringError(f"{name}: the dependency tokens are wrong: {e}") from None
