"""Dense / matrix multiplication on GPUs with shared-memory tiles (TVM's schedule of §4.2).

`acc[i, j] = sum_k A[i, k] * B[k, j]`: each thread block computes a
`(ty*vthread) x (tx*vthread)` tile of the output from `A` and `B` tiles staged through shared
memory, `k_tile` columns at a time; each of its `ty x tx` threads accumulates `vthread^2`
outputs in registers (`local`), interleaved as virtual threads so that neighbouring threads touch
neighbouring addresses. The copies into shared memory are spread over the block's threads
(cooperative fetching). Barriers between the shared-memory writes and reads are inserted by the
loop-IR pipeline (`tir.gpu`). An element-wise epilogue (bias, activation, the fused graph tail)
is applied where each accumulator is written out.

The knobs form the tuner's `gpu.dense` config space (`config_space`); `default_config` is the
point used without a tuning log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ... import te
from ...autotune.space import ConfigSpace, Knob
from ...schedule.schedule import Schedule
from ...te import dtype as dt
from ...te.tensor import Tensor

Epilogue = Callable[[Any, Any, Any], Any]


@dataclass(frozen=True)
class DenseGPUConfig:
    """Threads of a block along rows (`ty`) and columns (`tx`), virtual threads per axis, and
    the reduction columns staged per shared-memory tile."""

    ty: int = 8
    tx: int = 16
    vthread: int = 2
    k_tile: int = 8


def default_config(m: int, n: int, max_threads: int = 256) -> DenseGPUConfig:
    """A sound default: few row threads for few rows (a batch-1 layer), 16x16 blocks otherwise;
    within `max_threads` threads."""
    ty = 1
    while ty < 16 and ty < m and 2 * ty <= max_threads:
        ty *= 2
    tx = max(1, min(16 if ty > 2 else 64, max_threads // ty))
    vthread = 2 if m >= 32 and n >= 64 else 1
    return DenseGPUConfig(ty, tx, vthread, 8)


def config_space(
    m: int, n: int, k: int, max_threads: int = 256, name: str = "gpu.dense"
) -> ConfigSpace:
    """The `gpu.dense` knobs for an `[m, k] x [k, n]` dense: the block's thread shape, virtual
    threads and the reduction tile; blocks over `max_threads` threads are rejected. `name`: the
    template (`gpu.conv2d` is an implicit GEMM with the same knobs)."""
    d = default_config(m, n, max_threads)
    tys = sorted({t for t in (1, 2, 4, 8, 16) if t <= max(1, 2 * m)} | {d.ty})
    txs = sorted({t for t in (8, 16, 32, 64) if t <= max(8, 2 * n)} | {d.tx})
    knobs = [
        Knob("ty", tuple(tys)),
        Knob("tx", tuple(txs)),
        Knob("vthread", (1, 2)),
        Knob("k_tile", tuple(sorted({t for t in (4, 8, 16, 32) if t <= max(4, k)} | {d.k_tile}))),
    ]

    def constraint(v: dict) -> str | None:
        if v["ty"] * v["tx"] > max_threads:
            return f"a block of {v['ty']} x {v['tx']} threads > {max_threads}"
        return None

    default = {"ty": d.ty, "tx": d.tx, "vthread": d.vthread, "k_tile": d.k_tile}
    return ConfigSpace(name, knobs, default, constraint)


def config_from(values: dict) -> DenseGPUConfig:
    return DenseGPUConfig(
        int(values["ty"]), int(values["tx"]), int(values["vthread"]), int(values["k_tile"])
    )


def matmul(
    a: Tensor,
    b: Tensor,
    name: str = "C",
    transpose_b: bool = False,
    acc_dtype: str | None = None,
) -> Tensor:
    """`a [m, k] @ b [k, n]` (or `b [n, k]` transposed) accumulated in `acc_dtype` (default:
    `a`'s dtype; int32 for integers narrower than 32 bits)."""
    (m, k), n = a.shape, (b.shape[0] if transpose_b else b.shape[1])
    narrow = dt.is_int(a.dtype) and dt.bits(a.dtype) < 32
    acc = acc_dtype or ("int32" if narrow else a.dtype)
    rk = te.reduce_axis((0, k), "k")

    def rhs(kk: Any, j: Any) -> Any:
        return b[j, kk] if transpose_b else b[kk, j]

    return te.compute(
        (m, n),
        lambda i, j: te.sum(a[i, rk].astype(acc) * rhs(rk, j).astype(acc), axis=rk),
        name=name,
    )


def dense(
    a: Tensor,
    b: Tensor,
    epilogue: Epilogue | None = None,
    transpose_b: bool = False,
    acc_dtype: str | None = None,
) -> tuple[Tensor, Tensor]:
    """(acc, out): the product and, with an `epilogue(value, i, j)`, the output stage after it
    (`out is acc` without one)."""
    acc = matmul(a, b, "acc", transpose_b, acc_dtype)
    if epilogue is None:
        return acc, acc
    out = te.compute(acc.shape, lambda i, j: epilogue(acc[i, j], i, j), name="out")
    return acc, out


def batch_dense(
    a: Tensor, b: Tensor, epilogue: Callable[..., Any] | None = None
) -> tuple[Tensor, Tensor]:
    """(acc, out) of a batched product `a [B, m, k] @ b [B, k, n]`: `dense` with a leading batch
    axis (the epilogue takes `(value, batch, i, j)`), which `schedule_dense` binds to
    `blockIdx.z`."""
    (nb, m, k), n = a.shape, b.shape[2]
    narrow = dt.is_int(a.dtype) and dt.bits(a.dtype) < 32
    acc_dtype = "int32" if narrow else a.dtype
    rk = te.reduce_axis((0, k), "k")
    acc = te.compute(
        (nb, m, n),
        lambda q, i, j: te.sum(a[q, i, rk].astype(acc_dtype) * b[q, rk, j].astype(acc_dtype), rk),
        name="acc",
    )
    if epilogue is None:
        return acc, acc
    out = te.compute(acc.shape, lambda q, i, j: epilogue(acc[q, i, j], q, i, j), name="out")
    return acc, out


def spread_copy(s: Schedule, t: Tensor, ty: int, tx: int) -> None:
    """Spread a copy into shared memory over the block's ty x tx threads (cooperative fetch)."""
    stage = s[t]
    fused = stage.fuse(*stage.op.axis)
    rest, x = stage.split(fused, factor=tx)
    if ty > 1:
        _, y = stage.split(rest, factor=ty)
        stage.bind(y, te.thread_axis("threadIdx.y"))
    stage.bind(x, te.thread_axis("threadIdx.x"))


def schedule_dense(
    s: Schedule,
    out: Tensor,
    acc: Tensor | None = None,
    config: DenseGPUConfig | None = None,
    cooperative: bool = True,
) -> Schedule:
    """Schedule the product `acc` (default: `out` itself) and its output stage `out` (see the
    module docstring); returns `s`. With `cooperative=False` the copies into shared memory are
    left unbound and the loop-IR pipeline's `cooperative_fetch` pass shares them out."""
    cfg = config or DenseGPUConfig()
    acc = out if acc is None else acc
    a, b = acc.op.input_tensors
    aa = s.cache_read(a, "shared", [acc])
    bb = s.cache_read(b, "shared", [acc])
    if acc is out:
        local = s.cache_write(out, "local")
    else:
        s[acc].set_scope("local")
        local = acc
    v = cfg.vthread
    *batch, i, j = s[out].op.axis
    (m, n) = (int(d) for d in out.shape[-2:])
    rows, cols = min(cfg.ty * v, m), min(cfg.tx * v, n)  # a tile no larger than the output
    ty_n, tx_n = -(-rows // v), -(-cols // v)  # the block's threads along each axis
    by, bx, iin, jin = s[out].tile(i, j, rows, cols)
    vy, ty = s[out].split(iin, nparts=v)
    vx, tx = s[out].split(jin, nparts=v)
    s[out].reorder(*batch, by, bx, vy, vx, ty, tx)
    if batch:  # a batched product: one grid layer per matrix
        s[out].bind(batch[0], te.thread_axis("blockIdx.z"))
    s[out].bind(by, te.thread_axis("blockIdx.y"))
    s[out].bind(bx, te.thread_axis("blockIdx.x"))
    if v > 1:
        s[out].bind(vy, te.thread_axis("vthread"))
        s[out].bind(vx, te.thread_axis("vthread"))
    s[out].bind(ty, te.thread_axis("threadIdx.y"))
    s[out].bind(tx, te.thread_axis("threadIdx.x"))
    s[local].compute_at(s[out], tx)
    *lb, ic, jc = s[local].op.axis
    ko, ki = s[local].split(s[local].op.reduce_axis[0], factor=cfg.k_tile)
    s[local].reorder(ko, ki, *lb, ic, jc)
    for t in (aa, bb):
        s[t].compute_at(s[local], ko)
        if cooperative:
            spread_copy(s, t, ty_n, tx_n)
    return s


def schedule_matmul(
    s: Schedule,
    c: Tensor,
    tile: int = 8,
    vthread: int = 1,
    k_tile: int = 4,
    cooperative: bool = True,
) -> Schedule:
    """`schedule_dense` of a plain matmul `c` with square `tile x tile` thread blocks."""
    return schedule_dense(s, c, None, DenseGPUConfig(tile, tile, vthread, k_tile), cooperative)
