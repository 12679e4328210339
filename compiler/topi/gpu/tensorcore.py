"""fp16 dense on tensor cores: the 16x16x16 product tensorized with the WMMA intrinsic.

`dense_fp16(a, b)` is `out[i, j] = sum_k float32(a[i, k]) * float32(b[k, j])` with float16
inputs and float32 accumulation and output (what tensor cores compute).
`schedule_dense_tensorcore` gives each thread block of one warp (32 threads along
`threadIdx.x`) a `tile_m x tile_n` tile of the output:

- the accumulator tile is a `cache_write(out, "shared")`: WMMA loads and stores are
  warp-collective, so the tile must sit where every lane sees it (see `tir.gpu_intrin`);
- for each 16 columns of the reduction, the `tile_m x 16` tile of `a` and the `16 x tile_n`
  tile of `b` are copied into shared memory by the 32 lanes together (cooperative fetch), then
  every 16x16 sub-tile of the accumulator gets one `tf_wmma_mma_16x16x16` (the tensorized
  stage: its 16x16x16 loops are replaced by the intrinsic);
- the warp copies the accumulator tile out to global memory.

The accumulator is zeroed by the stage's ordinary initialisation (a store loop that the
pipeline's cooperative fetch spreads over the lanes) when the reduction has more than one 16-wide
step, and by `tf_wmma_fill_16x16x16` when it has a single one. Barriers between the shared
writes and reads come from the loop-IR pipeline (`tir.insert_storage_sync`).

Every dimension must be a multiple of 16 (the WMMA tile); there are no partial tiles.

Example:
    >>> from tensorforge.compiler import te, tir
    >>> A = te.placeholder((32, 32), "float16", name="A")
    >>> B = te.placeholder((32, 16), "float16", name="B")
    >>> C = dense_fp16(A, B)
    >>> s = schedule_dense_tensorcore(te.create_schedule(C.op), C)
    >>> "tf_wmma_mma_16x16x16" in str(tir.lower(s, [A, B, C]))
    True
"""

from __future__ import annotations

from ... import te
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor
from ...tir.gpu_intrin import WARP_SIZE, wmma_intrin
from .dense import matmul

WMMA = 16  # the m, n and k of the WMMA shape used


def _check_multiples(what: str, **dims: int) -> None:
    bad = {name: n for name, n in dims.items() if n % WMMA or n <= 0}
    if bad:
        listed = ", ".join(f"{name}={n}" for name, n in dims.items())
        raise ValueError(
            f"{what}: tensor cores compute {WMMA}x{WMMA}x{WMMA} tiles, so every dimension must "
            f"be a positive multiple of {WMMA}; got {listed}"
        )


def dense_fp16(a: Tensor, b: Tensor, name: str = "dense") -> Tensor:
    """`a [m, k] @ b [k, n]` of float16 tensors, accumulated and returned in float32.

    Raises:
        ValueError: naming the tensor for an input that is not a 2-D float16 tensor, for inner
            dimensions that differ, or for a dimension that is not a multiple of 16.
    """
    for t in (a, b):
        if t.dtype != "float16" or len(t.shape) != 2:
            raise ValueError(
                f"dense_fp16: {t.name!r} must be a 2-D float16 tensor, not {t.dtype}{list(t.shape)}"
            )
    (m, k), (k2, n) = (int(d) for d in a.shape), (int(d) for d in b.shape)
    if k != k2:
        raise ValueError(
            f"dense_fp16: {a.name!r} {[m, k]} and {b.name!r} {[k2, n]} have different inner "
            "dimensions"
        )
    _check_multiples(f"dense_fp16 of {a.name!r} and {b.name!r}", m=m, n=n, k=k)
    return matmul(a, b, name, acc_dtype="float32")


def _default_tile(extent: int) -> int:
    """32 where it divides the extent (A and B tiles reused by two WMMA tiles each), else 16."""
    return 2 * WMMA if extent % (2 * WMMA) == 0 else WMMA


def schedule_dense_tensorcore(
    s: Schedule, out: Tensor, tile_m: int | None = None, tile_n: int | None = None
) -> Schedule:
    """Schedule `out = dense_fp16(a, b)` on tensor cores (see the module docstring); returns `s`.

    Args:
        s: a schedule holding `out`.
        out: the float32 product of two float16 tensors, as `dense_fp16` builds it.
        tile_m, tile_n: the rows and columns of the output one thread block (one warp) computes;
            multiples of 16 dividing the output's (default: 32 where it divides, else 16).

    Raises:
        ValueError: for an output or reduction dimension or a tile that is not a multiple of 16,
            or a tile that does not divide the output.
    """
    a, b = out.op.input_tensors
    (m, n), k = (int(d) for d in out.shape), int(a.shape[1])
    _check_multiples(f"schedule_dense_tensorcore of {out.name!r}", m=m, n=n, k=k)
    tm = _default_tile(m) if tile_m is None else tile_m
    tn = _default_tile(n) if tile_n is None else tile_n
    _check_multiples(f"schedule_dense_tensorcore of {out.name!r}", tile_m=tm, tile_n=tn)
    if m % tm or n % tn:
        raise ValueError(
            f"schedule_dense_tensorcore of {out.name!r}: the {tm}x{tn} tile must divide the "
            f"{m}x{n} output"
        )
    intrin = wmma_intrin(WMMA, WMMA, WMMA)
    aa = s.cache_read(a, "shared", [out])
    bb = s.cache_read(b, "shared", [out])
    acc = s.cache_write(out, "shared")
    # the output: one block per tile, its copy out of shared memory spread over the warp
    by, bx, i, j = s[out].tile(*s[out].op.axis, tm, tn)
    s[out].bind(by, te.thread_axis("blockIdx.y"))
    s[out].bind(bx, te.thread_axis("blockIdx.x"))
    _over_warp(s, out, s[out].fuse(i, j))
    # the accumulator: 16x16x16 steps, the inner one tensorized
    s[acc].compute_at(s[out], bx)
    ci, cj = s[acc].op.axis
    (rk,) = s[acc].op.reduce_axis
    io, ii = s[acc].split(ci, factor=WMMA)
    jo, ji = s[acc].split(cj, factor=WMMA)
    if k > WMMA:  # the A and B tiles of each 16-wide step of the reduction
        ko, ki = s[acc].split(rk, factor=WMMA)
        s[acc].reorder(ko, io, jo, ii, ji, ki)
        at_stage, at_axis = s[acc], ko
    else:  # one step: the intrinsic's own reset (fill) zeroes the accumulator
        s[acc].reorder(io, jo, ii, ji, rk)
        at_stage, at_axis = s[out], bx
    s[acc].tensorize(ii, intrin)
    for t in (aa, bb):
        s[t].compute_at(at_stage, at_axis)
        _over_warp(s, t, s[t].fuse(*s[t].op.axis))
    return s


def _over_warp(s: Schedule, t: Tensor, fused: te.IterVar) -> None:
    """Spread a loop over the 32 lanes of the block's warp (the tiles hold a multiple of 32)."""
    _, lane = s[t].split(fused, factor=WARP_SIZE)
    s[t].bind(lane, te.thread_axis("threadIdx.x"))
