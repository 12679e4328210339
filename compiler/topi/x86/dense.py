"""Dense / matmul for x86: packed weights, a register-blocked micro-kernel, parallel panels.

`C[m, n] = sum_k A[m, k] * W[n, k]` (dense, weights as rows) or `A @ B` (matmul). The weights
are packed inside the kernel into panels `P[n // bn, k, n % bn]` (zero-padded) so that the
micro-kernel reads `bn` contiguous values per `k`; each panel is packed by the task that uses
it, right before its tiles (it stays in cache; with row blocks, `mc`, all panels are packed
first). The micro-kernel keeps an `mr x bn` tile of C in a local accumulator (vector registers
once unrolled), broadcasting one `A[m, k]` per row; the outermost panel loop runs in parallel.
An element-wise epilogue (bias, activation, requantize) is fused into the store of each tile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ....runtime import ndarray as nd
from ... import te
from ...autotune.space import ConfigSpace, Knob
from ...schedule.primitives import ScheduleError, check_positive_knobs
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor

Epilogue = Callable[..., te.Expr]  # (value, m, n) -> expression
Product = Callable[[te.Expr, te.Expr], te.Expr]  # (data value, weight value) -> summed term


@dataclass(frozen=True)
class DenseConfig:
    """The schedule's knobs (what a tuner searches).

    Attributes:
        mr: rows of the register tile (accumulators = mr * bn / vector lanes).
        bn: columns of the register tile and width of a weight panel (a multiple of the lanes).
        kunroll: unroll factor of the reduction loop inside the micro-kernel (1: none).
        mc: rows per cache block, swept over every weight panel before the next block
            (0: no row blocking, the whole of A per panel).
        parallel: run weight panels on the thread pool.
    """

    mr: int = 6
    bn: int = 32
    kunroll: int = 1
    mc: int = 0
    parallel: bool = True

    def check(self) -> None:
        check_positive_knobs(self, ("mr", "bn", "kunroll"), "dense")
        if not isinstance(self.mc, int) or self.mc < 0 or self.mc % self.mr:
            raise ScheduleError(
                f"dense: knob mc must be 0 or a positive multiple of mr={self.mr}, not {self.mc!r}"
            )


def default_config(m: int, registers: tuple[int, int] | None = None) -> DenseConfig:
    """The hand-chosen knobs (the default point of `config_space`), fitted to `registers` =
    (float32 lanes per vector, vector registers) (the host's: `codegen.llvm_jit.vector_registers`).

    An `mr x bn` tile holds `mr * bn / lanes` accumulators and needs `bn / lanes` weight vectors
    and one broadcast value besides; the rule keeps all of them in registers. Rows: 6, or 7, 8,
    5 or 4 where that divides the rows and 6 does not (a 7x7 image's 49 pixels as rows: no
    ragged last tile, 1.05-1.1x faster), the first that fits with 16-lane panels; columns: 32
    per panel where that fits too, else 16. AVX-512 (16 x 32): 6 x 32 (7 x 32, 8 x 32); AVX2
    (8 x 16): 6 x 16 (4 x 16 for 64 rows), 1 x 32 for one row. On AVX2 the 6 x 32 tile of
    before needed 24 accumulators for 16 registers and spilled: 1.5x onnxruntime's time on
    ViT's 196 x 768 x 768 against 1.0x for 6 x 16 (2026-11-25, AMD EPYC)."""
    from ...codegen.llvm_jit import vector_registers

    lanes, count = registers or vector_registers()

    def fits(mr: int, bn: int) -> bool:
        vecs = -(-bn // lanes)
        return mr * vecs + vecs + 1 <= count

    rows = [r for r in (6, 7, 8, 5, 4) if m % r == 0 and fits(r, 16)]
    mr = rows[0] if rows else min(6, m)
    while mr > 1 and not fits(mr, 16):
        mr -= 1
    mr = max(1, mr)
    return DenseConfig(mr=mr, bn=32 if fits(mr, 32) else 16)


def config_space(m: int, n: int, k: int) -> ConfigSpace:
    """The knobs a tuner searches for an `[m, k] x [k, n]` dense: register tile rows and
    columns, reduction unrolling, row blocking (in register tiles) and thread-pool use. The
    default point is `default_config`."""
    d = default_config(m)
    mrs = sorted({r for r in (1, 2, 3, 4, 6, 8) if r <= m} | {d.mr})
    bns = sorted({b for b in (8, 16, 32, 48, 64) if b <= max(16, 2 * n)} | {d.bn})
    knobs = [
        Knob("mr", tuple(mrs)),
        Knob("bn", tuple(bns)),
        Knob("kunroll", tuple(u for u in (1, 2, 4, 8) if u <= k)),
        Knob("mc_tiles", (0, 2, 4, 8, 16)),
        Knob("parallel", (True, False)),
    ]

    def constraint(v: dict) -> str | None:
        if v["mc_tiles"] and v["mc_tiles"] * v["mr"] >= m:
            return "a row block as large as all the rows (same as no blocking)"
        if v["mr"] * v["bn"] > 512:
            return "a register tile of mr x bn > 512 accumulators"
        return None

    default = {"mr": d.mr, "bn": d.bn, "kunroll": 1, "mc_tiles": 0, "parallel": True}
    return ConfigSpace("x86.dense", knobs, default, constraint)


def config_from(values: dict) -> DenseConfig:
    """The `DenseConfig` of a point of `config_space`."""
    v = dict(values)
    mr = int(v["mr"])
    return DenseConfig(mr=mr, bn=int(v["bn"]), kunroll=int(v["kunroll"]),
                       mc=int(v["mc_tiles"]) * mr, parallel=bool(v["parallel"]))  # fmt: skip


def pack_panels(weight: np.ndarray, bn: int, layout: str = "NK") -> np.ndarray:
    """Constant weights -> the `[ceil(n / bn), k, bn]` panels the micro-kernel reads (numpy; the
    graph layer packs constants once, ahead of time), written straight into a 64-byte aligned
    buffer: the one copy a kernel's constant needs (no padded and transposed temporaries)."""
    w = np.asarray(weight) if layout == "NK" else np.asarray(weight).T
    n, k = w.shape
    full, rest = divmod(n, bn)
    panels = nd.empty((full + (rest > 0), k, bn), str(w.dtype)).numpy()
    panels[:full] = w[: full * bn].reshape(full, bn, k).transpose(0, 2, 1)
    if rest:
        panels[full] = 0
        panels[full, :, :rest] = w[full * bn :].T
    return panels


@dataclass
class DenseOp:
    """The tensors of one dense operator: arguments in parameter order and the stages."""

    args: list[Tensor]
    packed: Tensor
    acc: Tensor  # the reduction, before the epilogue
    out: Tensor
    transposed: bool = False  # out is [N, M]


def _pack(weight: Tensor, n: int, k: int, bn: int, rows_are_n: bool) -> Tensor:
    panels = -(-n // bn)

    def fpack(no: te.Expr, kk: te.Expr, ni: te.Expr) -> te.Expr:
        col = no * bn + ni
        value = weight[col, kk] if rows_are_n else weight[kk, col]
        if n % bn == 0:
            return value
        return te.if_then_else(col < n, value, te.const(0, weight.dtype))

    return te.compute((panels, k, bn), fpack, name="packed")


def dense(
    data: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    epilogue: Epilogue | None = None,
    out_dtype: str | None = None,
    config: DenseConfig | None = None,
    weight_layout: str = "NK",
) -> DenseOp:
    """The compute of `data[M, K] x weight -> [M, N]` with an optional fused epilogue.

    Args:
        data: `[M, K]` input.
        weight: `[N, K]` (layout "NK", dense) or `[K, N]` (layout "KN", matmul).
        bias: optional `[N]`, added after the reduction.
        epilogue: optional `f(value, m, n) -> expr` applied last (relu, requantize, ...).
        out_dtype: accumulation and output dtype (default: the data dtype; int32 for int8).
        config: the knobs (the weight panel width is part of the packed layout).
        weight_layout: "NK" or "KN".

    Raises:
        ValueError: for mismatched shapes or an unknown layout.
    """
    config = config or DenseConfig()
    config.check()
    if weight_layout not in ("NK", "KN"):
        raise ValueError(f"dense: weight_layout must be 'NK' or 'KN', not {weight_layout!r}")
    m, k = data.shape
    n, k2 = weight.shape if weight_layout == "NK" else weight.shape[::-1]
    if k != k2:
        raise ValueError(
            f"dense: weight's reduction extent must equal data's ({k}), not {k2} "
            f"(weight {list(weight.shape)}, layout {weight_layout})"
        )
    acc_dtype = out_dtype or ("int32" if data.dtype in ("int8", "uint8") else data.dtype)
    packed = _pack(weight, n, k, config.bn, weight_layout == "NK")
    acc = _panel_product(data, packed, acc_dtype)

    def value(i: te.Expr, j: te.Expr) -> te.Expr:
        v = acc[i, j] + bias[j].astype(acc_dtype) if bias is not None else acc[i, j]
        return epilogue(v, i, j) if epilogue is not None else v

    out = _store(acc, n, value, bias is not None or epilogue is not None)
    args = [data, weight] + ([bias] if bias is not None else []) + [out]
    return DenseOp(args, packed, acc, out)


def _panel_product(
    data: Tensor, packed: Tensor, acc_dtype: str, product: Product | None = None
) -> Tensor:
    """`acc[m, j] = sum_k data[m, k] * packed[j // bn, k, j % bn]`, accumulated in `acc_dtype`,
    over whole panels (`j` up to the zero-padded width): a register tile of the last panel then
    computes full vectors, and only its store is cut to the columns that exist. A reduction cut
    to them instead left odd-width vectors (17 of 32 lanes on a 7x7 image) that LLVM keeps in
    memory: such a tile ran about 10x slower. `product(a, w)` replaces the multiplication."""
    panels, k, bn = packed.shape
    rk = te.reduce_axis((0, k), "k")

    def term(i: te.Expr, j: te.Expr) -> te.Expr:
        a, w = data[i, rk], packed[j // bn, rk, j % bn]
        return product(a, w) if product else a.astype(acc_dtype) * w.astype(acc_dtype)

    return te.compute(
        (data.shape[0], panels * bn), lambda i, j: te.sum(term(i, j), axis=rk), name="acc"
    )


def _store(acc: Tensor, n: int, value: Epilogue, fused: bool) -> Tensor:
    """The `[M, n]` output of the padded `acc`: `value(i, j)` (bias, epilogue) when `fused`,
    else `acc` itself when its panels divide `n`, else a copy of its first `n` columns."""
    if not fused and acc.shape[1] == n:
        return acc
    return te.compute((acc.shape[0], n), value, name="out")


def dense_prepacked(
    data: Tensor,
    panels: Tensor,
    n: int,
    epilogue: Epilogue | None = None,
    transposed: bool = False,
    product: Product | None = None,
) -> DenseOp:
    """The compute of `data[M, K] x W^T` whose weights come pre-packed (`pack_panels`) as the
    parameter `panels`; integer data accumulates in int32. The `packed` stage only reads the
    parameter: inline it after scheduling (`s[op.packed].compute_inline()`). `transposed`: the
    output is `[N, M]` (`out[j, i] = epilogue(acc[i, j], i, j)`), each register tile stored
    with a stride of M between its lanes. `product(a, w)`: the summed term of a data value and
    a weight value (default their product in the accumulation dtype): the int8 kernels'
    `te.dot_u8i8x4` / `te.dot_i16x2` of int32 words of K (`graph.strategy.qlinear`)."""
    integer = data.dtype in ("int8", "int16", "int32", "uint8")
    acc_dtype = "int32" if integer else data.dtype
    packed = te.compute(panels.shape, lambda a, b, c: panels[a, b, c], name="packed")
    acc = _panel_product(data, packed, acc_dtype, product)

    def value(i: te.Expr, j: te.Expr) -> te.Expr:
        return epilogue(acc[i, j], i, j) if epilogue is not None else acc[i, j]

    if transposed:
        out = te.compute((n, acc.shape[0]), lambda j, i: value(i, j), name="out")
    else:
        out = _store(acc, n, value, epilogue is not None)
    return DenseOp([data, panels, out], packed, acc, out, transposed)


def schedule_dense(op: DenseOp, config: DenseConfig | None = None) -> Schedule:
    """The x86 schedule of `op`: panels in parallel, `mr x bn` register tiles, vector columns."""
    config = config or DenseConfig()
    config.check()
    s = te.create_schedule(op.out.op)
    out, local = op.out, _local_acc(s, op)
    m, n = out.op.axis[::-1] if op.transposed else out.op.axis
    no, ni = s[out].split(n, factor=config.bn)
    if config.mc:  # row blocks outermost: a block of A stays in cache across all panels
        mco, m = s[out].split(m, factor=config.mc)
    mo, mi = s[out].split(m, factor=config.mr)
    if config.mc:
        s[out].reorder(mco, no, mo, mi, ni)
        outer = s[out].fuse(mco, no)
    else:
        s[out].reorder(no, mo, mi, ni)
        outer = no
    s[out].vectorize(ni)
    if config.parallel:
        s[out].parallel(outer)
    if not config.mc:
        s[op.packed].compute_at(s[out], outer)
    s[local].compute_at(s[out], mo)
    _schedule_tile(s, local, config)
    _schedule_pack(s, op.packed, config)
    return s


def _local_acc(s: Schedule, op: DenseOp) -> Tensor:
    """The stage that accumulates a register tile: `acc` itself in local scope when an output
    stage follows it, else a local cache of it."""
    if op.out is op.acc:
        return s.cache_write(op.acc, "local")
    s[op.acc].set_scope("local")
    return op.acc


def _schedule_tile(s: Schedule, local: Tensor, config: DenseConfig) -> None:
    """The micro-kernel: the reduction outermost (unrolled by `kunroll`), then the tile's rows
    unrolled and its columns as vectors (leading axes of extent 1 at this point stay first)."""
    *lead, lm, ln = s[local].op.axis
    (lk,) = s[local].op.reduce_axis
    if config.kunroll > 1:
        ko, ki = s[local].split(lk, factor=config.kunroll)
        s[local].reorder(*lead, ko, ki, lm, ln)
        s[local].unroll(ki)
    else:
        s[local].reorder(*lead, lk, lm, ln)
    s[local].unroll(lm)
    s[local].vectorize(ln)


def _schedule_pack(s: Schedule, packed: Tensor, config: DenseConfig) -> None:
    no, _, ni = packed.op.axis
    s[packed].vectorize(ni)
    if config.parallel and config.mc:
        s[packed].parallel(no)


Read3 = Callable[[te.Expr, te.Expr, te.Expr], te.Expr]  # (batch, row, col) -> expression


def batch_dense(
    a: Read3,
    b: Read3,
    shape: tuple[int, int, int, int],
    dtype: str,
    epilogue: Epilogue | None = None,
    config: DenseConfig | None = None,
) -> DenseOp:
    """`out[q, i, j] = epilogue(sum_k a(q, i, k) * b(q, k, j), q, i, j)` for `shape = (batches,
    M, K, N)`: one dense per batch entry, both operands computed at run time (attention's
    `Q K^T` and `P V`). Each entry's B is packed into `[N // bn, K, bn]` panels by the task that
    uses the panel, right before its tiles, as `dense` does for one matrix; `a` and `b` are
    read functions (views of the operands: broadcast batch dims, folded transposes)."""
    config = config or DenseConfig()
    config.check()
    nb, m, k, n = shape
    bn = config.bn
    panels = -(-n // bn)

    def fpack(q: te.Expr, no: te.Expr, kk: te.Expr, ni: te.Expr) -> te.Expr:
        col = no * bn + ni
        if n % bn == 0:
            return b(q, kk, col)
        return te.if_then_else(col < n, b(q, kk, col), te.const(0, dtype))

    packed = te.compute((nb, panels, k, bn), fpack, name="packed")
    rk = te.reduce_axis((0, k), "k")
    acc = te.compute(
        (nb, m, panels * bn),
        lambda q, i, j: te.sum(a(q, i, rk) * packed[q, j // bn, rk, j % bn], axis=rk),
        name="acc",
    )
    if epilogue is None and panels * bn == n:
        out = acc
    else:
        value = epilogue or (lambda v, *_: v)
        out = te.compute((nb, m, n), lambda q, i, j: value(acc[q, i, j], q, i, j), name="out")
    return DenseOp([], packed, acc, out)


def schedule_batch_dense(op: DenseOp, config: DenseConfig | None = None) -> Schedule:
    """`schedule_dense` for `batch_dense`: (batch entry, panel) pairs in parallel, each packing
    its panel, then `mr x bn` register tiles down the rows."""
    config = config or DenseConfig()
    config.check()
    s = te.create_schedule(op.out.op)
    out, local = op.out, _local_acc(s, op)
    q, m, n = out.op.axis
    no, ni = s[out].split(n, factor=config.bn)
    mo, mi = s[out].split(m, factor=config.mr)
    s[out].reorder(q, no, mo, mi, ni)
    outer = s[out].fuse(q, no)
    s[out].vectorize(ni)
    if config.parallel:
        s[out].parallel(outer)
    s[op.packed].compute_at(s[out], outer)
    s[local].compute_at(s[out], mo)
    _schedule_tile(s, local, config)
    s[op.packed].vectorize(op.packed.op.axis[-1])
    return s
