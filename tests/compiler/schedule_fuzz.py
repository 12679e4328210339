"""Differential schedule fuzzing: small multi-stage programs users write, random legal schedules.

A `Program` is a few tensor-expression stages with a numpy reference. `draw_schedule` applies a
random legal schedule to it (cache_read/cache_write, split/fuse/reorder/tile, compute_at at any
loop of a consumer, compute_inline, compute_root, then vectorize/parallel/unroll/pragma) from a
Hypothesis `data` object, so a failing draw prints as the list of primitives applied
(`s.primitives`). `draw_gpu_schedule` binds block and thread axes and stages inputs through
shared memory. The tests compare the loop-IR interpreter and a back-end with numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tensorforge.compiler import te
from tensorforge.compiler.schedule import Schedule, Stage
from tensorforge.compiler.schedule.stage import AttachKind

ODD = (1, 2, 3, 5, 7, 13, 17)


@dataclass
class Program:
    """Inputs then outputs (the lowering arguments), a numpy reference of the outputs from the
    inputs, and the compute stages (producers first) a schedule may transform."""

    name: str
    inputs: list[te.Tensor]
    outputs: list[te.Tensor]
    reference: Callable[..., list[np.ndarray]]
    stages: list[te.Tensor] = field(default_factory=list)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{t.name}: {t.dtype}{list(t.shape)}" for t in self.args)
        return f"Program({self.name}: {shapes})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    @property
    def args(self) -> list[te.Tensor]:
        return self.inputs + self.outputs


def random_array(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(dtype)
        lo, hi = max(int(info.min), -(2**15)), min(int(info.max), 2**15)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    return rng.uniform(-2.0, 2.0, size=shape).astype(dtype)


def tolerance(dtype: str) -> dict[str, float]:
    """Exact for integers and bools; a few ulps of accumulated rounding for floats."""
    if not np.issubdtype(np.dtype(dtype), np.floating):
        return {"rtol": 0.0, "atol": 0.0}
    return {
        "float16": {"rtol": 4e-3, "atol": 4e-3},
        "float32": {"rtol": 1e-5, "atol": 1e-5},
        "float64": {"rtol": 1e-12, "atol": 1e-12},
    }[dtype]


# ---- programs -------------------------------------------------------------------------------


def ew_matmul(n: int, m: int, p: int, dtype: str) -> Program:
    """E = A*2 + 1 (element-wise, wrapping for int8), C = sum_k E[i, k] * B[k, j]; int8 inputs
    accumulate in int32."""
    acc = "int32" if dtype == "int8" else dtype
    A = te.placeholder((n, m), dtype, name="A")
    B = te.placeholder((m, p), dtype, name="B")
    E = te.compute((n, m), lambda i, j: A[i, j] * 2 + 1, name="E")
    k = te.reduce_axis((0, m), "k")
    C = te.compute(
        (n, p),
        lambda i, j: te.sum(E[i, k].astype(acc) * B[k, j].astype(acc), axis=k),
        name="C",
    )

    def ref(a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        e = (a * a.dtype.type(2) + a.dtype.type(1)).astype(acc)
        return [(e @ b.astype(acc)).astype(acc)]

    return Program("ew_matmul", [A, B], [C], ref, [E, C])


def row_reduce(n: int, m: int, dtype: str, kind: str) -> Program:
    """E = A - 1, R = sum or max over each row of E, Y = R[i] + A[i, 0] (a reduction feeding an
    element-wise output, so both are producers a schedule can attach)."""
    A = te.placeholder((n, m), dtype, name="A")
    E = te.compute((n, m), lambda i, j: A[i, j] - 1, name="E")
    k = te.reduce_axis((0, m), "k")
    reducer = te.sum if kind == "sum" else te.max
    R = te.compute((n,), lambda i: reducer(E[i, k], axis=k), name="R")
    Y = te.compute((n,), lambda i: R[i] + A[i, 0], name="Y")

    def ref(a: np.ndarray) -> list[np.ndarray]:
        e = a - a.dtype.type(1)
        r = e.sum(axis=1, dtype=a.dtype) if kind == "sum" else e.max(axis=1)
        return [(r + a[:, 0]).astype(dtype)]

    return Program(f"row_{kind}", [A], [Y], ref, [E, R, Y])


def pad_conv(h: int, w: int, r: int, pad: int, stride: int, dil: int, dtype: str) -> Program:
    """P = zero padding with te.if_then_else, O = a one-channel 2-D correlation of P with W
    (stride, dilation), int8 accumulating in int32."""
    acc = "int32" if dtype == "int8" else dtype
    A = te.placeholder((h, w), dtype, name="A")
    W = te.placeholder((r, r), dtype, name="W")
    P = te.compute(
        (h + 2 * pad, w + 2 * pad),
        lambda y, x: te.if_then_else(
            te.all_of(y >= pad, y < h + pad, x >= pad, x < w + pad),
            A[y - pad, x - pad],
            te.const(0, dtype),
        ),
        name="P",
    )
    oh = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (r - 1) - 1) // stride + 1
    ry, rx = te.reduce_axis((0, r), "ry"), te.reduce_axis((0, r), "rx")
    O = te.compute(  # noqa: E741 - the output
        (oh, ow),
        lambda y, x: te.sum(
            P[y * stride + ry * dil, x * stride + rx * dil].astype(acc) * W[ry, rx].astype(acc),
            axis=[ry, rx],
        ),
        name="O",
    )

    def ref(a: np.ndarray, wt: np.ndarray) -> list[np.ndarray]:
        pa = np.pad(a, pad).astype(acc)
        out = np.zeros((oh, ow), acc)
        for y in range(r):
            for x in range(r):
                ys, xs = y * dil, x * dil
                win = pa[
                    ys : ys + stride * (oh - 1) + 1 : stride,
                    xs : xs + stride * (ow - 1) + 1 : stride,
                ]
                out += win * wt[y, x].astype(acc)
        return [out]

    return Program("pad_conv", [A, W], [O], ref, [P, O])


def broadcast_chain(n: int, m: int, dtype: str) -> Program:
    """Y1 = X + b[j], Y2 = Y1 * c[i], Y3 = max(Y2, Y1) - X: element-wise stages with row and
    column broadcasting, one stage read twice."""
    X = te.placeholder((n, m), dtype, name="X")
    b = te.placeholder((m,), dtype, name="b")
    c = te.placeholder((n,), dtype, name="c")
    Y1 = te.compute((n, m), lambda i, j: X[i, j] + b[j], name="Y1")
    Y2 = te.compute((n, m), lambda i, j: Y1[i, j] * c[i], name="Y2")
    Y3 = te.compute((n, m), lambda i, j: te.max(Y2[i, j], Y1[i, j]) - X[i, j], name="Y3")

    def ref(x: np.ndarray, bb: np.ndarray, cc: np.ndarray) -> list[np.ndarray]:
        y1 = x + bb[None, :]
        y2 = y1 * cc[:, None]
        return [(np.maximum(y2, y1) - x).astype(dtype)]

    return Program("broadcast_chain", [X, b, c], [Y3], ref, [Y1, Y2, Y3])


def multi_output(n: int, m: int, dtype: str) -> Program:
    """S, Q = (A + 1, A * A) from one stage, then Out[i, j] = S[i, j] - Q[i, m-1-j] (reads both
    outputs, one reversed)."""
    A = te.placeholder((n, m), dtype, name="A")
    S, Q = te.compute((n, m), lambda i, j: (A[i, j] + 1, A[i, j] * A[i, j]), name="T")
    Out = te.compute((n, m), lambda i, j: S[i, j] - Q[i, m - 1 - j], name="Out")

    def ref(a: np.ndarray) -> list[np.ndarray]:
        s, q = a + a.dtype.type(1), a * a
        return [(s - q[:, ::-1]).astype(dtype)]

    return Program("multi_output", [A], [Out], ref, [S, Out])


def uint8_wrap(n: int, m: int) -> Program:
    """uint8 arithmetic that wraps: E = A*3 + 200, F = E - A[i, m-1-j], with a uint8 sum."""
    A = te.placeholder((n, m), "uint8", name="A")
    E = te.compute((n, m), lambda i, j: A[i, j] * 3 + 200, name="E")
    F = te.compute((n, m), lambda i, j: E[i, j] - A[i, m - 1 - j], name="F")
    k = te.reduce_axis((0, m), "k")
    R = te.compute((n,), lambda i: te.sum(F[i, k], axis=k), name="R")

    def ref(a: np.ndarray) -> list[np.ndarray]:
        e = a * np.uint8(3) + np.uint8(200)
        f = e - a[:, ::-1]
        return [f.sum(axis=1, dtype="uint8")]

    return Program("uint8_wrap", [A], [R], ref, [E, F, R])


def index_arith(n: int, m: int, dtype: str) -> Program:
    """Index arithmetic: U = upsample by 2 with a rotated column (floor division and modulo),
    V = a 3-point stencil of U along rows (overlapping producer regions), reversed rows."""
    A = te.placeholder((n, m), dtype, name="A")
    U = te.compute((2 * n, m), lambda i, j: A[i // 2, (j * 3 + 1) % m] * 2, name="U")
    V = te.compute(
        (2 * n - 2, m),
        lambda i, j: U[i, j] + U[i + 1, j] - U[2 * n - 1 - i - 1, m - 1 - j],
        name="V",
    )

    def ref(a: np.ndarray) -> list[np.ndarray]:
        cols = (np.arange(m) * 3 + 1) % m
        u = np.repeat(a, 2, axis=0)[:, cols] * a.dtype.type(2)
        v = u[:-2] + u[1:-1] - u[::-1][1:-1, ::-1]
        return [v.astype(dtype)]

    return Program("index_arith", [A], [V], ref, [U, V])


def softmax_like(n: int, m: int, dtype: str) -> Program:
    """Mx = row max, E = X - Mx[i] (a reduction broadcast back), S = sum of E where E < 0.5
    (a reduction with where=), Y = E * S[i]."""
    X = te.placeholder((n, m), dtype, name="X")
    k1, k2 = te.reduce_axis((0, m), "k1"), te.reduce_axis((0, m), "k2")
    Mx = te.compute((n,), lambda i: te.max(X[i, k1], axis=k1), name="Mx")
    E = te.compute((n, m), lambda i, j: X[i, j] - Mx[i], name="E")
    S = te.compute((n,), lambda i: te.sum(E[i, k2], axis=k2, where=E[i, k2] > -1), name="S")
    Y = te.compute((n, m), lambda i, j: E[i, j] * S[i], name="Y")

    def ref(x: np.ndarray) -> list[np.ndarray]:
        e = x - x.max(axis=1, keepdims=True)
        ssum = np.where(e > -1, e, 0).sum(axis=1, dtype=dtype)
        return [(e * ssum[:, None]).astype(dtype)]

    return Program("softmax_like", [X], [Y], ref, [Mx, E, S, Y])


def argmax_rows(n: int, m: int) -> Program:
    """A tuple reduction (argmax of each row of E = A * A) as an intermediate, then
    Out = index * 10 + value."""
    A = te.placeholder((n, m), "int32", name="A")
    E = te.compute((n, m), lambda i, j: A[i, j] * A[i, j] % 97, name="E")
    argmax = te.comm_reducer(
        lambda x, y: (
            te.select(x[1] >= y[1], x[0], y[0]),
            te.select(x[1] >= y[1], x[1], y[1]),
        ),
        lambda ti, tv: (te.const(-1, ti), te.min_value(tv)),
        name="argmax",
    )
    k = te.reduce_axis((0, m), "k")
    idx, val = te.compute((n,), lambda i: argmax((k, E[i, k]), axis=k), name="Arg")
    Out = te.compute((n,), lambda i: idx[i] * 1000 + val[i], name="Out")

    def ref(a: np.ndarray) -> list[np.ndarray]:
        e = a * a % 97
        return [(e.argmax(axis=1) * 1000 + e.max(axis=1)).astype("int32")]

    return Program("argmax_rows", [A], [Out], ref, [E, idx, Out])


FLOATS = ("float32", "float64", "float16")


@st.composite
def programs(draw: Any) -> Program:
    """One small program of a random family, with odd shapes (1, primes) and dtype."""
    dim = st.sampled_from(ODD)
    family = draw(
        st.sampled_from(
            [
                "ew_matmul",
                "row_reduce",
                "pad_conv",
                "broadcast",
                "multi_output",
                "uint8",
                "index",
                "softmax",
                "argmax",
            ]
        )
    )
    if family == "ew_matmul":
        dtype = draw(st.sampled_from(("float32", "float64", "int8")))
        return ew_matmul(draw(dim), draw(dim), draw(dim), dtype)
    if family == "row_reduce":
        dtype = draw(st.sampled_from(("float32", "int32", "int8")))
        return row_reduce(draw(dim), draw(dim), dtype, draw(st.sampled_from(("sum", "max"))))
    if family == "pad_conv":
        r = draw(st.integers(1, 3))
        dil = draw(st.integers(1, 2))
        pad = draw(st.integers(0, 2))
        span = dil * (r - 1) + 1
        h = draw(st.integers(max(1, span - 2 * pad), 9))
        w = draw(st.integers(max(1, span - 2 * pad), 9))
        dtype = draw(st.sampled_from(("float32", "int8")))
        return pad_conv(h, w, r, pad, draw(st.integers(1, 3)), dil, dtype)
    if family == "broadcast":
        dtype = draw(st.sampled_from(FLOATS + ("int32",)))
        return broadcast_chain(draw(dim), draw(dim), dtype)
    if family == "multi_output":
        dtype = draw(st.sampled_from(("float32", "int16", "float64")))
        return multi_output(draw(dim), draw(dim), dtype)
    if family == "index":
        return index_arith(
            draw(st.sampled_from(ODD[1:])), draw(dim), draw(st.sampled_from(("float32", "int8")))
        )
    if family == "softmax":
        return softmax_like(draw(dim), draw(dim), draw(st.sampled_from(("float32", "float64"))))
    if family == "argmax":
        return argmax_rows(draw(dim), draw(dim))
    return uint8_wrap(draw(dim), draw(dim))


# ---- schedules ------------------------------------------------------------------------------


def _consumers(s: Schedule, stage: Stage) -> list[Stage]:
    return [
        c for c in s.stages if c.is_compute and any(t in c.op.input_tensors for t in stage.tensors)
    ]


def _is_multi(stage: Stage) -> bool:
    return getattr(stage.origin_op, "num_outputs", 1) > 1


def draw_legal_step(stage: Stage, data: Any) -> None:
    """One legal split (factor or nparts), fuse of adjacent leaves of one kind, reorder or
    tile of `stage`'s leaves (also tests/compiler/schedule/test_schedule_properties.py's)."""
    kind = data.draw(st.sampled_from(["split", "fuse", "reorder", "tile"]))
    _draw_step(stage, kind, data, most=5, tile_most=4, any_run=False)


def _draw_step(
    stage: Stage, kind: str, data: Any, most: int, tile_most: int, any_run: bool
) -> None:
    """A split of a factor (or parts) up to `most`, a fuse (of adjacent leaves of one kind, or
    with `any_run` of any run of leaves), a reorder or a tile of factors up to `tile_most`."""
    leaves = list(stage.leaf_iter_vars)
    if kind == "split":
        iv = data.draw(st.sampled_from(leaves))
        n = data.draw(st.integers(1, most))
        if data.draw(st.booleans()):
            stage.split(iv, factor=n)
        else:
            stage.split(iv, nparts=n)
    elif kind == "fuse" and any_run:
        start = data.draw(st.integers(0, len(leaves) - 1))
        stop = data.draw(st.integers(start + 1, len(leaves)))
        stage.fuse(*leaves[start:stop])
    elif kind == "fuse":
        pairs = [(a, b) for a, b in zip(leaves[:-1], leaves[1:], strict=True) if a.kind is b.kind]
        if pairs:
            stage.fuse(*data.draw(st.sampled_from(pairs)))
    elif kind == "reorder":
        stage.reorder(*data.draw(st.permutations(leaves)))
    elif len(leaves) >= 2:
        x, y = data.draw(st.lists(st.sampled_from(leaves), min_size=2, max_size=2, unique=True))
        stage.tile(x, y, data.draw(st.integers(1, tile_most)), data.draw(st.integers(1, tile_most)))


def _draw_loop_transforms(stage: Stage, data: Any) -> None:
    for _ in range(data.draw(st.integers(0, 3), label=f"{stage.name} transforms")):
        draw_legal_step(stage, data)


def _draw_attach(s: Schedule, stage: Stage, data: Any) -> None:
    """compute_inline, compute_at a loop of a consumer, compute_root, or nothing."""
    if stage.is_output:
        return
    consumers: list[Stage] = []
    todo = _consumers(s, stage)
    while todo:  # through inlined consumers to the stages that really read it
        c = todo.pop(0)
        if c.attach is AttachKind.INLINE:
            todo.extend(_consumers(s, c))
        elif c not in consumers:
            consumers.append(c)
    choices = ["keep", "root"]
    if not stage.op.reduce_axis and not _is_multi(stage):
        choices.append("inline")
    if len(consumers) == 1:
        choices.append("at")
    kind = data.draw(st.sampled_from(choices), label=f"{stage.name} attach")
    if kind == "inline":
        stage.compute_inline()
    elif kind == "root":
        stage.compute_root()
    elif kind == "at":
        parent = consumers[0]
        stage.compute_at(parent, data.draw(st.sampled_from(list(parent.leaf_iter_vars))))


def _draw_annotations(s: Schedule, stage: Stage, data: Any) -> None:
    leaves = stage.leaf_iter_vars
    if not leaves:
        return
    data_par = [iv for iv in leaves if iv.kind is te.IterVarKind.DATA_PAR]
    if data.draw(st.booleans(), label=f"{stage.name} vectorize") and leaves[-1] in data_par:
        stage.vectorize(leaves[-1])
    if (
        stage.attach is AttachKind.ROOT
        and leaves[0] in data_par
        and data.draw(st.booleans(), label=f"{stage.name} parallel")
    ):
        stage.parallel(leaves[0])
    if data.draw(st.booleans(), label=f"{stage.name} unroll"):
        iv = data.draw(st.sampled_from(leaves))
        if stage.annotation(iv).kind.value == "serial":
            stage.unroll(iv)
    if data.draw(st.booleans(), label=f"{stage.name} pragma"):
        stage.pragma(data.draw(st.sampled_from(leaves)), "fuzz_hint", 1)


def draw_schedule(prog: Program, data: Any) -> Schedule:
    """A random legal schedule of `prog` (every primitive recorded in `s.primitives`)."""
    s = te.create_schedule([t.op for t in prog.outputs])
    stages = [s[t] for t in prog.stages]
    # cache_write first (it must precede the stage's loop transforms), then cache_read.
    for stage in list(stages):
        if not _is_multi(stage) and data.draw(st.integers(0, 4), label="cache_write") == 0:
            cache = s[s.cache_write(stage.tensor, "local")]
            stages.insert(stages.index(stage), cache)
    for inp in prog.inputs:
        readers = [c for c in _consumers(s, s[inp]) if c in stages]
        if readers and data.draw(st.integers(0, 4), label=f"cache_read {inp.name}") == 0:
            reader = data.draw(st.sampled_from(readers))
            cache = s[s.cache_read(inp, "local", [reader.op])]
            stages.insert(stages.index(reader), cache)
    for stage in reversed(stages):  # consumers first: attach targets are final when used
        _draw_loop_transforms(stage, data)
    for stage in reversed(stages):
        _draw_attach(s, stage, data)
    for stage in stages:
        if stage.attach is not AttachKind.INLINE:
            _draw_annotations(s, stage, data)
    return s


# ---- anything goes: random primitives, legal or not ----------------------------------------

WILD = (
    "split",
    "fuse",
    "reorder",
    "tile",
    "compute_at",
    "compute_inline",
    "compute_root",
    "cache_read",
    "cache_write",
    "vectorize",
    "parallel",
    "unroll",
    "pragma",
    "set_scope",
)


def _apply_wild(s: Schedule, stage: Stage, kind: str, data: Any) -> None:
    leaves = list(stage.leaf_iter_vars)
    computes = [c for c in s.stages if c.is_compute]
    if kind in ("split", "fuse", "reorder", "tile"):
        if leaves:
            _draw_loop_transforms_once(stage, kind, data)
    elif kind == "compute_at":
        parent = data.draw(st.sampled_from(computes))
        if parent.leaf_iter_vars:
            stage.compute_at(parent, data.draw(st.sampled_from(list(parent.leaf_iter_vars))))
    elif kind == "compute_inline":
        stage.compute_inline()
    elif kind == "compute_root":
        stage.compute_root()
    elif kind == "cache_read":
        readers = _consumers(s, stage)
        if readers:
            chosen = data.draw(st.lists(st.sampled_from(readers), min_size=1, unique=True))
            scope = data.draw(st.sampled_from(("local", "global", "shared")))
            s.cache_read(stage.tensor, scope, [r.op for r in chosen])
    elif kind == "cache_write":
        s.cache_write(stage.tensor, data.draw(st.sampled_from(("local", "global"))))
    elif kind == "set_scope":
        stage.set_scope(data.draw(st.sampled_from(("local", "global", "shared"))))
    elif kind == "double_buffer":
        stage.double_buffer()
    elif leaves:
        iv = data.draw(st.sampled_from(leaves))
        if kind == "bind":
            from tensorforge.compiler.te import thread_axis

            stage.bind(iv, thread_axis(data.draw(st.sampled_from(THREAD_TAGS))))
        elif kind == "vectorize":
            stage.vectorize(iv)
        elif kind == "parallel":
            stage.parallel(iv)
        elif kind == "unroll":
            stage.unroll(iv)
        else:
            stage.pragma(iv, "fuzz_hint", 1)


def _draw_loop_transforms_once(stage: Stage, kind: str, data: Any) -> None:
    _draw_step(stage, kind, data, most=8, tile_most=6, any_run=True)


THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y", "vthread")
WILD_GPU = (*WILD, "bind", "bind", "bind", "double_buffer")


def draw_wild_schedule(
    prog: Program, data: Any, kinds: tuple[str, ...] = WILD, start: Schedule | None = None
) -> tuple[Schedule, list[str]]:
    """Random primitives on random stages; ones that raise ScheduleError are skipped (the
    schedule stays usable). Returns the schedule and the errors seen."""
    from tensorforge.compiler.schedule import ScheduleError

    s = te.create_schedule([t.op for t in prog.outputs]) if start is None else start
    errors: list[str] = []
    for _ in range(data.draw(st.integers(1, 10), label="steps")):
        computes = [c for c in s.stages if c.is_compute]
        stage = data.draw(st.sampled_from(computes))
        kind = data.draw(st.sampled_from(kinds))
        try:
            _apply_wild(s, stage, kind, data)
        except ScheduleError as err:
            assert str(err).startswith(f"{kind}: "), (kind, str(err))
            errors.append(str(err))
    return s, errors


# ---- GPU: block and thread bindings, shared-memory staging ----------------------------------


def _bind_spread(stage: Stage, data: Any, label: str) -> None:
    """Spread a stage's data-parallel loops over threads: fuse them, split by a drawn thread
    count and bind the inner part to threadIdx.x (a cooperative fetch)."""
    from tensorforge.compiler.te import thread_axis

    axes = [iv for iv in stage.leaf_iter_vars if iv.kind is te.IterVarKind.DATA_PAR]
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    _, tx = stage.split(fused, factor=data.draw(st.sampled_from((2, 3, 4, 8)), label=label))
    stage.bind(tx, thread_axis("threadIdx.x"))


def draw_gpu_schedule(prog: Program, data: Any) -> Schedule:
    """Bind the output's loops to blocks and threads; stage inputs through `shared` memory at the
    block loop (or a reduction's outer loop), producers inlined, shared or per-thread local."""
    from tensorforge.compiler.te import thread_axis

    (out,) = prog.outputs
    s = te.create_schedule(out.op)
    main = s[out]
    compute = main
    if main.op.reduce_axis and data.draw(st.booleans(), label="cache_write local"):
        compute = s[s.cache_write(out, "local")]
    readers = {t.name: s[t] for t in prog.stages}
    shared = []
    for inp in prog.inputs:
        users = [c for c in _consumers(s, s[inp]) if c.op.reduce_axis or c is compute]
        if users and data.draw(st.booleans(), label=f"cache_read {inp.name} shared"):
            shared.append(s[s.cache_read(inp, "shared", [users[0].op])])
    axes = list(main.op.axis)
    ty = tx = None
    if len(axes) >= 2 and data.draw(st.booleans(), label="2-D grid"):
        fy, fx = (data.draw(st.integers(1, 4), label=f"tile {a.name}") for a in axes[:2])
        by, bx, ty, tx = main.tile(axes[0], axes[1], fy, fx)
        main.bind(by, thread_axis("blockIdx.y"))
        main.bind(bx, thread_axis("blockIdx.x"))
        main.bind(ty, thread_axis("threadIdx.y"))
        main.bind(tx, thread_axis("threadIdx.x"))
        block = bx
    else:
        fused = main.fuse(*axes) if len(axes) > 1 else axes[0]
        block, tx = main.split(fused, factor=data.draw(st.integers(1, 8), label="threads"))
        main.bind(block, thread_axis("blockIdx.x"))
        main.bind(tx, thread_axis("threadIdx.x"))
    thread = tx
    anchor, anchor_axis = main, block
    if compute is not main:
        compute.compute_at(main, thread)
        if data.draw(st.booleans(), label="split reduction"):
            ko, _ = compute.split(
                compute.op.reduce_axis[0], factor=data.draw(st.integers(1, 4), label="k factor")
            )
            compute.reorder(ko, *[iv for iv in compute.leaf_iter_vars if iv is not ko])
            anchor, anchor_axis = compute, ko
    for cache in shared:
        where = data.draw(st.sampled_from(("block", "anchor")), label=f"{cache.name} at")
        if where == "block":
            cache.compute_at(main, block)
        else:
            cache.compute_at(anchor, anchor_axis)
        # inside the thread loop, binding more threads than it has is a ScheduleError; left
        # unbound, cooperative_fetch shares the copy among the threads there
        if where == "block" and data.draw(st.booleans(), label=f"{cache.name} bind"):
            _bind_spread(cache, data, f"{cache.name} threads")
    place: dict[Stage, str] = {main: "local", compute: "local"}
    for name, stage in reversed(readers.items()):  # consumers first
        if stage in place or stage.attach is not AttachKind.ROOT or _is_multi(stage):
            continue
        kind = data.draw(st.sampled_from(("inline", "shared", "local")), label=f"{name} place")
        users = [place.get(c, "root") for c in _consumers(s, stage)]
        if kind == "inline" and not stage.op.reduce_axis:
            stage.compute_inline()
            place[stage] = next((u for u in ("root", "shared") if u in users), "local")
        elif kind == "local" and all(u == "local" for u in users):
            stage.set_scope("local")
            stage.compute_at(main, thread)
            place[stage] = "local"
        elif kind in ("shared", "local") and "root" not in users:
            stage.set_scope("shared")
            stage.compute_at(main, block)
            _bind_spread(stage, data, f"{name} threads")
            place[stage] = "shared"
    return s
