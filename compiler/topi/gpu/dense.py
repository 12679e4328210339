"""Matrix multiplication on GPUs with shared-memory tiles (TVM's schedule of §4.2).

`C[i, j] = sum_k A[i, k] * B[k, j]`: each thread block computes a `(tile*vthread)^2` tile of C
from `A` and `B` tiles staged through shared memory, `k_tile` columns at a time; each of its
`tile x tile` threads accumulates `vthread^2` outputs in registers (`local`), interleaved as
virtual threads so that neighbouring threads touch neighbouring addresses. Barriers between the
shared-memory writes and reads are inserted by the loop-IR pipeline (`tir.gpu`).
"""

from __future__ import annotations

from ... import te
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor


def matmul(a: Tensor, b: Tensor, name: str = "C") -> Tensor:
    """`a [n, m] @ b [m, p]` as a tensor expression."""
    (n, m), (_, p) = a.shape, b.shape
    k = te.reduce_axis((0, m), "k")
    return te.compute((n, p), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name=name)


def spread_copy(s: Schedule, t: Tensor, ty: int, tx: int) -> None:
    """Spread a copy into shared memory over the block's ty x tx threads (cooperative fetch)."""
    stage = s[t]
    fused = stage.fuse(*stage.op.axis)
    rest, x = stage.split(fused, factor=tx)
    _, y = stage.split(rest, factor=ty)
    stage.bind(y, te.thread_axis("threadIdx.y"))
    stage.bind(x, te.thread_axis("threadIdx.x"))


def schedule_matmul(
    s: Schedule,
    c: Tensor,
    tile: int = 8,
    vthread: int = 1,
    k_tile: int = 4,
    cooperative: bool = True,
) -> Schedule:
    """Schedule the matmul `c` (see the module docstring); returns `s`.

    With `cooperative=False` the copies into shared memory are left unbound and the
    `cooperative_fetch` pass of the loop-IR pipeline shares them out.
    """
    a, b = c.op.input_tensors
    aa = s.cache_read(a, "shared", [c])
    bb = s.cache_read(b, "shared", [c])
    cl = s.cache_write(c, "local")
    i, j = s[c].op.axis
    by, bx, iin, jin = s[c].tile(i, j, tile * vthread, tile * vthread)
    vy, ty = s[c].split(iin, nparts=vthread)
    vx, tx = s[c].split(jin, nparts=vthread)
    s[c].reorder(by, bx, vy, vx, ty, tx)
    s[c].bind(by, te.thread_axis("blockIdx.y"))
    s[c].bind(bx, te.thread_axis("blockIdx.x"))
    if vthread > 1:
        s[c].bind(vy, te.thread_axis("vthread"))
        s[c].bind(vx, te.thread_axis("vthread"))
    s[c].bind(ty, te.thread_axis("threadIdx.y"))
    s[c].bind(tx, te.thread_axis("threadIdx.x"))
    s[cl].compute_at(s[c], tx)
    ic, jc, k = *s[cl].op.axis, s[cl].op.reduce_axis[0]
    ko, ki = s[cl].split(k, factor=k_tile)
    s[cl].reorder(ko, ki, ic, jc)
    for t in (aa, bb):
        s[t].compute_at(s[cl], ko)
        if cooperative:
            spread_copy(s, t, tile, tile)
    return s
