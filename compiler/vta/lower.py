"""Lowering an accelerator schedule's loop IR to a tile program (then ``vta.codegen`` encodes it).

A schedule for the accelerator (compiler/vta/operators.py) is ordinary TE: the data live in
the memory scopes ``local.inp_buffer``, ``local.wgt_buffer`` and ``local.acc_buffer``; copy
stages carry ``pragma(axis, "dma_copy")``; the GEMM stage is tensorized with the config's
intrinsic (``intrin.gemm_intrin``); each element-wise stage in the accumulator scope carries
``pragma(axis, "alu")``; virtual threads are an axis bound to ``te.thread_axis("vthread")``.
``tir.lower(..., passes=VTA_PIPELINE)`` gives its loop IR, and ``lower_to_tile_program`` turns
that into the tile program of ``vta.tile``:

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
  one compute instruction; its loops become micro-op loops (``passes.fold_uop_loops`` then
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
The walk and the virtual threads are here; the DMA copies are ``lower_dma.py``'s, the GEMM and
ALU statements ``lower_compute.py``'s, what they share ``lower_base.py``'s.

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> from tensorforge.compiler.vta.tile import format_stmt
    >>> from tensorforge.compiler.vta import Conv2dSchedule, Conv2dWorkload
    >>> from tensorforge.compiler.vta.operators import conv2d_te
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

from collections.abc import Mapping

import numpy as np

from ...hw.config import HWConfig
from ..schedule.stage import ForKind
from ..tir.passes import remove_no_op, simplify, storage_flatten
from ..tir.stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
)
from . import tile as vt
from .intrin import GEMM_ATTR
from .lower_base import ALU, DMA_COPY, SCOPES, ThreadView, compute_leaf, index_value, is_reset
from .lower_compute import ComputeLowering, merge_min_max
from .lower_dma import DmaLowering

# The pipeline of ``tir.lower`` for accelerator schedules: the default one without the GPU
# passes, without virtual-thread injection, which ``lower_to_tile_program`` performs itself, and
# without loop partitioning: it evaluates a ragged edge's guards per tile itself (``loop_nest``).
VTA_PIPELINE = (simplify, storage_flatten, simplify, remove_no_op)


class _Lowering(DmaLowering, ComputeLowering):
    """The walk over the loop IR: loops run at compile time, accelerator operations become
    statements, virtual threads interleave; ``program`` assembles the tile program."""

    # -- statements --

    def walk(self, s: Stmt, t: ThreadView) -> None:
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
            branch = s.then_case if index_value(s.condition, t.env) else s.else_case
            if branch is not None:
                self.walk(branch, t)
        elif isinstance(s, BufferStore) and is_reset(s):
            self.compute(s, t, alu=False)
        elif isinstance(s, BufferStore | Evaluate):
            raise self.fail(
                f"statement `{str(s).strip()}`",
                "it is not an accelerator operation: copies need pragma dma_copy, element-wise "
                "stages in local.acc_buffer pragma alu, the GEMM tensorize",
            )
        else:  # pragma: no cover - every Stmt kind is handled above
            raise self.fail(type(s).__name__, "unsupported statement")

    def allocate(self, s: Allocate, t: ThreadView) -> None:
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

    def loop(self, s: For, t: ThreadView) -> None:
        lo, n = index_value(s.min, t.env), index_value(s.extent, t.env)
        if s.kind is ForKind.THREAD_BINDING:
            self.virtual_threads(s, t, lo, n)
        elif compute_leaf(s) is not None:
            self.compute(s, t, alu=False)
        else:
            for i in range(lo, lo + n):
                self.walk(s.body, t.fork(s.var, i))

    def virtual_threads(self, s: For, t: ThreadView, lo: int, n: int) -> None:
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
            self.walk(s.body, ThreadView({**t.env, s.var: lo + k}, k, dict(t.names)))
            streams.append(_phases(self.stmts))
        self.stmts = outer
        for i in range(max(len(p) for p in streams)):
            for phases in streams:
                self.stmts.extend(phases[i] if i < len(phases) else ())

    # -- the program --

    def program(self, name: str) -> vt.TileProgram:
        self.walk(self.func.body, ThreadView({}))
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
        stmts = tuple(merge_min_max(self.stmts))
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
