"""Loop-IR features for the tuner's cost model (the TVM paper's section 5.2, itervar features).

`loop_features(func)` turns a lowered `PrimFunc` into a fixed-length float32 vector, so configs of
any template with loop IR share one feature space (what lets a model learned on one operator
rank configs of another). The vector has three parts:

- the *main nest*: the loop nest around the store that runs most often (the reduction's
  update in a conv2d or dense), one block of fields per loop level, innermost level first,
  padded or truncated to `N_LEVELS`;
- a *summary*: the same block averaged over every store of the function, weighted by how often
  each store runs;
- *global* fields: arithmetic operations times iterations, loop and store counts, loops per
  kind, allocations and their bytes per memory scope, guarded (padded) work, parameter bytes.

Each loop level has: log2 of its extent; a one-hot of its kind (`KINDS`); log2 of the product
of the extents from the root down to it (top-down) and from it down to the innermost loop
(bottom-up); and for each of `N_BUFFERS` buffers the nest touches (the stored buffer first,
then the others by the bytes they touch, largest first) the access stride with respect to the
level's loop variable (elements), the bytes touched inside the level and the reuse there
(accesses / distinct elements), all log-scaled. A nest block ends with scalars: log2 of the
store's iterations, its operations and loads per iteration, how many sibling stores share its
loops (register tiles unrolled by the lowering), its depth, the width of a vectorized innermost
loop and whether it is guarded.

Strides are the coefficients of the loop variables in the (flattened) index, read off the
affine part of the expression: a floor division by a constant divides a coefficient, a modulo
keeps it, a non-affine term keeps the largest coefficient of its operands. Anything the
extractor does not understand contributes zeros; it never raises.

Example:
    >>> from tensorforge.compiler import te
    >>> from tensorforge.compiler.tir import lower
    >>> A = te.placeholder((64, 64), name="A")
    >>> B = te.compute((64, 64), lambda i, j: A[j, i] * 2.0, name="B")
    >>> s = te.create_schedule(B.op)
    >>> f = lower(s, [A, B], name="transpose")
    >>> v = loop_features(f)
    >>> v.shape == (FEATURE_LENGTH,), v.dtype
    (True, dtype('float32'))
    >>> names = feature_names()
    >>> float(v[names.index("main.L0.extent")])  # the inner loop runs 64 times: log2(64)
    6.0
    >>> float(v[names.index("main.L0.buf1.stride")])  # A[j, i] strides 64 elements in j
    6.022367...
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..schedule.stage import ForKind
from ..te.expr import BinOp, Call, Cast, Expr, FloatImm, IntImm, Not, Op, Select, Var
from ..tir.stmt import (
    Allocate,
    AttrStmt,
    BufferLoad,
    BufferPtr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
)

#: loop levels per nest block (innermost first; deeper nests are truncated, shallower padded)
N_LEVELS = 8
#: buffers per loop level (the stored buffer first, then by bytes touched)
N_BUFFERS = 4
#: the loop kinds of the one-hot, "other" being anything else (thread bindings)
KINDS = ("serial", "parallel", "vectorized", "unrolled", "other")
#: the memory scopes of the allocation fields, "other" being anything else
SCOPES = ("global", "local", "shared", "other")

_BUFFER_FIELDS = ("stride", "bytes", "reuse")
_LEVEL_FIELDS = (
    "extent",
    *(f"kind.{k}" for k in KINDS),
    "topdown",
    "bottomup",
    *(f"buf{b}.{f}" for b in range(N_BUFFERS) for f in _BUFFER_FIELDS),
)
_NEST_FIELDS = ("iterations", "ops", "loads", "siblings", "depth", "vector_width", "guarded")
_GLOBAL_FIELDS = (
    "flops",
    "store_iterations",
    "loops",
    "stores",
    *(f"loops.{k}" for k in KINDS),
    *(f"alloc.{s}.{f}" for s in SCOPES for f in ("count", "bytes")),
    "guarded_iterations",
    "param_bytes",
    "extern_calls",
)
_LEVEL_LEN = len(_LEVEL_FIELDS)
_BLOCK_LEN = N_LEVELS * _LEVEL_LEN + len(_NEST_FIELDS)


def feature_names() -> list[str]:
    """The name of each field of `loop_features`' vector, in order (for inspection)."""
    names: list[str] = []
    for part in ("main", "all"):
        for lvl in range(N_LEVELS):
            names.extend(f"{part}.L{lvl}.{f}" for f in _LEVEL_FIELDS)
        names.extend(f"{part}.{f}" for f in _NEST_FIELDS)
    names.extend(f"global.{f}" for f in _GLOBAL_FIELDS)
    return names


#: the length of every vector `loop_features` returns
FEATURE_LENGTH = 2 * _BLOCK_LEN + len(_GLOBAL_FIELDS)

_KIND_INDEX = {ForKind.SERIAL: 0, ForKind.PARALLEL: 1, ForKind.VECTORIZED: 2, ForKind.UNROLLED: 3}
_ADD_SUB = (Op.ADD, Op.SUB)
_DIVS = (Op.DIV, Op.FLOORDIV)
_ITEMSIZE: dict[str, int] = {}


def _log(x: float) -> float:
    return math.log2(1.0 + x) if x > 0 else 0.0


def _itemsize(dtype: str) -> int:
    size = _ITEMSIZE.get(dtype)
    if size is None:
        try:
            size = max(1, np.dtype("bool" if dtype == "bool" else dtype).itemsize)
        except TypeError:
            size = 4
        _ITEMSIZE[dtype] = size
    return size


def _const(e: Any) -> float | None:
    t = type(e)
    if t is IntImm or t is FloatImm:
        return float(e.value)
    if t is Cast:
        return _const(e.value)
    return None


def _union(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    """Coefficients of a non-affine combination: the larger magnitude of each variable's."""
    if not a:
        return b
    if not b:
        return a
    out = dict(a)
    for k, v in b.items():
        if abs(v) > abs(out.get(k, 0.0)):
            out[k] = v
    return out


def _coefs(e: Any) -> dict[int, float]:
    """{id(var): coefficient} of the variables in an index expression (see the module doc)."""
    t = type(e)
    if t is Var:
        return {id(e): 1.0}
    if t is BinOp:
        op = e.op
        if op in _ADD_SUB:
            a, b = _coefs(e.a), _coefs(e.b)
            if not b:
                return a
            out = dict(a)
            sign = 1.0 if op is Op.ADD else -1.0
            for k, v in b.items():
                out[k] = out.get(k, 0.0) + sign * v
            return out
        if op is Op.MUL:
            cb = _const(e.b)
            if cb is not None:
                return {k: v * cb for k, v in _coefs(e.a).items()}
            ca = _const(e.a)
            if ca is not None:
                return {k: v * ca for k, v in _coefs(e.b).items()}
            return _union(_coefs(e.a), _coefs(e.b))
        if op in _DIVS:
            c = _const(e.b)
            inner = _coefs(e.a)
            return {k: v / c for k, v in inner.items()} if c else inner
        if op is Op.FLOORMOD:
            return _coefs(e.a)
        return _union(_coefs(e.a), _coefs(e.b))  # min, max, comparisons
    if t is Cast:
        return _coefs(e.value)
    if t is Select:
        return _union(_coefs(e.true_value), _coefs(e.false_value))
    if t is Call:
        out: dict[int, float] = {}
        for a in e.args:
            out = _union(out, _coefs(a))
        return out
    return {}  # constants, loads (indirect indices), unknown nodes


class _Access:
    """The accesses of one buffer in one store: the largest stride per loop, how many."""

    __slots__ = ("name", "itemsize", "size", "coefs", "count", "is_store")

    def __init__(self, name: str, itemsize: int, size: int, is_store: bool) -> None:
        self.name, self.itemsize, self.size, self.is_store = name, itemsize, size, is_store
        self.coefs: dict[int, float] = {}
        self.count = 0


def _flat_coefs(buffer: Any, indices: tuple[Expr, ...]) -> dict[int, float]:
    if len(indices) == 1:
        return _coefs(indices[0])
    shape = tuple(getattr(buffer, "shape", ()))
    strides = [1] * len(indices)
    if len(shape) == len(indices):
        acc = 1
        for d in range(len(shape) - 1, -1, -1):
            strides[d] = acc
            acc *= int(shape[d])
    out: dict[int, float] = {}
    for idx, stride in zip(indices, strides, strict=True):
        for k, v in _coefs(idx).items():
            out[k] = out.get(k, 0.0) + v * stride
    return out


def _add_access(accesses: dict[str, _Access], buffer: Any, indices: Any, store: bool) -> None:
    name = str(getattr(buffer, "name", "?"))
    acc = accesses.get(name)
    if acc is None:
        try:
            size = int(math.prod(buffer.shape))
        except (AttributeError, TypeError, ValueError):
            size = 0
        acc = accesses[name] = _Access(name, _itemsize(str(getattr(buffer, "dtype", ""))), size,
                                       store)  # fmt: skip
    acc.is_store = acc.is_store or store
    acc.count += 1
    try:
        coefs = _flat_coefs(buffer, tuple(indices))
    except (TypeError, ValueError, ZeroDivisionError, RecursionError):
        coefs = {}
    for k, v in coefs.items():
        if abs(v) > acc.coefs.get(k, 0.0):
            acc.coefs[k] = abs(v)


def _scan_value(e: Any, accesses: dict[str, _Access]) -> tuple[int, int, bool]:
    """(operations, loads, has a select) of a stored value; loads go into `accesses`."""
    ops = loads = 0
    select = False
    stack = [e]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is BufferLoad:
            loads += 1
            _add_access(accesses, node.buffer, node.indices, False)
        elif t is BinOp:
            ops += 1
            stack.append(node.a)
            stack.append(node.b)
        elif t is Cast:
            stack.append(node.value)
        elif t is Call:
            ops += 1
            stack.extend(node.args)
        elif t is Select:
            select = True
            stack.extend((node.condition, node.true_value, node.false_value))
        elif t is Not:
            ops += 1
            stack.append(node.a)
        elif t is BufferPtr:
            loads += 1
    return ops, loads, select


class _Store:
    __slots__ = ("loops", "accesses", "ops", "loads", "guarded", "iterations", "sibling_key")

    def __init__(self, loops: tuple[tuple[int, int, int, int], ...]) -> None:
        self.loops = loops  # (id(var), extent, kind index, id(For)) outer -> inner
        self.accesses: dict[str, _Access] = {}
        self.ops = self.loads = 0
        self.guarded = False
        self.iterations = math.prod(e for _, e, _, _ in loops) if loops else 1
        self.sibling_key = tuple(f for _, _, _, f in loops[:-1]) if loops else ()


class _Collector:
    """One walk over the statements: the stores with their loop nests, and the counts."""

    def __init__(self) -> None:
        self.stores: list[_Store] = []
        self.n_loops = 0
        self.kind_counts = [0] * len(KINDS)
        self.alloc_count = [0] * len(SCOPES)
        self.alloc_bytes = [0] * len(SCOPES)
        self.extern_calls = 0

    def visit(self, s: Any, loops: list[tuple[int, int, int, int]], guarded: bool) -> None:
        t = type(s)
        if t is SeqStmt:
            for c in s.stmts:
                self.visit(c, loops, guarded)
        elif t is For:
            extent = _const(s.extent)
            ext = int(extent) if extent is not None and extent >= 1 else 1
            kind = _KIND_INDEX.get(s.kind, 4)
            self.n_loops += 1
            self.kind_counts[kind] += 1
            loops.append((id(s.var), ext, kind, id(s)))
            self.visit(s.body, loops, guarded)
            loops.pop()
        elif t is BufferStore:
            self._store(s, loops, guarded)
        elif t is IfThenElse:
            self.visit(s.then_case, loops, True)
            if s.else_case is not None:
                self.visit(s.else_case, loops, True)
        elif t is Allocate:
            buf = s.buffer
            scope = SCOPES.index(buf.scope) if buf.scope in SCOPES else len(SCOPES) - 1
            self.alloc_count[scope] += 1
            try:
                self.alloc_bytes[scope] += int(math.prod(buf.shape)) * _itemsize(buf.dtype)
            except (TypeError, ValueError):
                pass
            self.visit(s.body, loops, guarded)
        elif t is AttrStmt:
            if isinstance(s.body, Stmt):
                self.visit(s.body, loops, guarded)
        elif t is Evaluate:
            if type(s.value) is Call:
                self.extern_calls += 1
        # any other statement contributes nothing

    def _store(self, s: BufferStore, loops: list[tuple[int, int, int, int]], guarded: bool) -> None:
        rec = _Store(tuple(loops))
        _add_access(rec.accesses, s.buffer, s.indices, True)
        rec.ops, rec.loads, select = _scan_value(s.value, rec.accesses)
        rec.guarded = guarded or select
        self.stores.append(rec)


def _nest_block(st: _Store, siblings: int, out: np.ndarray) -> None:
    """Fill `out` (length `_BLOCK_LEN`) with the features of one store's loop nest."""
    loops = st.loops
    depth = len(loops)
    ext = [e for _, e, _, _ in loops]
    # bottom-up[j]: iterations of loops j..depth-1; top-down[j]: of loops 0..j
    bottom = [1] * (depth + 1)
    for j in range(depth - 1, -1, -1):
        bottom[j] = bottom[j + 1] * ext[j]
    top = 1
    tops = []
    for e in ext:
        top *= e
        tops.append(top)
    # buffers: the stored one first, then by the bytes they touch in the whole nest
    accs = list(st.accesses.values())

    def footprint(a: _Access, j: int) -> float:
        """Distinct elements of `a` touched by loops j..depth-1."""
        span = 1.0
        box = 1.0
        for k in range(j, depth):
            c = a.coefs.get(loops[k][0], 0.0)
            if c:
                span += (ext[k] - 1) * c
                box *= ext[k]
        fp = min(span, box)
        return min(fp, float(a.size)) if a.size else fp

    whole = {a.name: footprint(a, 0) * a.itemsize for a in accs}
    accs.sort(key=lambda a: (not a.is_store, -whole[a.name], a.name))
    accs = accs[:N_BUFFERS]
    for lvl in range(min(depth, N_LEVELS)):
        j = depth - 1 - lvl
        var, e, kind, _ = loops[j]
        base = lvl * _LEVEL_LEN
        out[base] = math.log2(e)
        out[base + 1 + kind] = 1.0
        out[base + 6] = math.log2(tops[j])
        out[base + 7] = math.log2(bottom[j])
        for b, a in enumerate(accs):
            fp = footprint(a, j)
            off = base + 8 + 3 * b
            out[off] = _log(a.coefs.get(var, 0.0))
            out[off + 1] = _log(fp * a.itemsize)
            out[off + 2] = _log(a.count * bottom[j] / max(fp, 1.0))
    tail = N_LEVELS * _LEVEL_LEN
    out[tail] = math.log2(st.iterations) if st.iterations > 1 else 0.0
    out[tail + 1] = _log(st.ops)
    out[tail + 2] = _log(st.loads)
    out[tail + 3] = _log(siblings)
    out[tail + 4] = float(depth)
    inner_vec = depth and loops[-1][2] == 2
    out[tail + 5] = math.log2(ext[-1]) if inner_vec else 0.0
    out[tail + 6] = 1.0 if st.guarded else 0.0


def _features(body: Stmt, params: tuple[Any, ...]) -> np.ndarray:
    col = _Collector()
    col.visit(body, [], False)
    out = np.zeros(FEATURE_LENGTH, np.float64)
    stores = col.stores
    if stores:
        siblings: dict[tuple[int, ...], int] = {}
        for st in stores:
            siblings[st.sibling_key] = siblings.get(st.sibling_key, 0) + 1
        main = max(range(len(stores)), key=lambda k: (stores[k].iterations, stores[k].ops, -k))
        total = 0.0
        summary = np.zeros(_BLOCK_LEN, np.float64)
        for k, st in enumerate(stores):
            block = np.zeros(_BLOCK_LEN, np.float64)
            _nest_block(st, siblings[st.sibling_key], block)
            if k == main:
                out[:_BLOCK_LEN] = block
            summary += st.iterations * block
            total += st.iterations
        out[_BLOCK_LEN : 2 * _BLOCK_LEN] = summary / max(total, 1.0)
    g = 2 * _BLOCK_LEN
    flops = sum(st.ops * st.iterations for st in stores)
    out[g] = _log(flops)
    out[g + 1] = _log(sum(st.iterations for st in stores))
    out[g + 2] = _log(col.n_loops)
    out[g + 3] = _log(len(stores))
    for k, c in enumerate(col.kind_counts):
        out[g + 4 + k] = _log(c)
    g += 4 + len(KINDS)
    for s in range(len(SCOPES)):
        out[g + 2 * s] = _log(col.alloc_count[s])
        out[g + 2 * s + 1] = _log(col.alloc_bytes[s])
    g += 2 * len(SCOPES)
    out[g] = _log(sum(st.iterations for st in stores if st.guarded))
    param_bytes = 0
    for p in params:
        try:
            param_bytes += int(math.prod(p.shape)) * _itemsize(p.dtype)
        except (AttributeError, TypeError, ValueError):
            pass
    out[g + 1] = _log(param_bytes)
    out[g + 2] = _log(col.extern_calls)
    return out.astype(np.float32)


def loop_features(func: PrimFunc | Stmt | None) -> np.ndarray:
    """The feature vector (float32, length `FEATURE_LENGTH`) of a lowered function or statement.

    None (a template without loop IR) and anything that cannot be analysed give zeros; this
    never raises.
    """
    try:
        if isinstance(func, PrimFunc):
            return _features(func.body, func.params)
        if isinstance(func, Stmt):
            return _features(func, ())
    except (RecursionError, ValueError, TypeError, ArithmeticError, AttributeError):
        pass
    return np.zeros(FEATURE_LENGTH, np.float32)
