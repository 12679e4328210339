"""The GPU's tensor-core intrinsic (CUDA WMMA), declared like the accelerator's GEMM intrinsic.

``wmma_intrin(16, 16, 16)`` computes ``C[m, n] (float32) += A[m, k] (float16) . B[k, n]
(float16)``, the matrix-multiply-accumulate one warp performs with `nvcuda::wmma` (TVM §4.3 uses
the same declaration to target TensorCores). Its lowering is not a loop nest but EXTERN calls on
pointers to the tiles (`BufferRegion.access_ptr`) and their row strides (leading dimensions):

- reset:  ``tf_wmma_fill_16x16x16(c_ptr, ldc)`` stores zeros into the C tile;
- update: ``tf_wmma_mma_16x16x16(a_ptr, lda, b_ptr, ldb, c_ptr, ldc, lane)`` loads the three
  tiles into fragments, multiplies-accumulates and stores C back.

The tiles live in shared memory: the A and B tiles are staged there with ``cache_read(...,
"shared")`` and the accumulator tile is a ``cache_write(..., "shared")`` (see
`topi.gpu.tensorcore`). Shared, not local, because a WMMA load or store is warp-collective: each
lane moves a part of the tile that the hardware chooses, through one address that every lane of
the warp must see; a `local` buffer is private to a thread.

WMMA operations need all 32 lanes of a warp, so each call is wrapped in a loop bound to
`threadIdx.x` with extent 32 (the tensorized stage runs on one warp; every lane calls). The
loop's variable, the lane, is the last argument of the update: the CUDA helper ignores it, and
the loop-IR interpreter's Python implementation (registered with `tir.register_extern`) does the
whole product in lane 0 only, since the interpreter runs the lanes one after the other. The
fill is idempotent and takes no lane. In CUDA C the calls become device functions of the
printer's WMMA prelude (`codegen.gpu_source`); OpenCL has no tensor cores and refuses them.

Example:
    >>> intrin = wmma_intrin()
    >>> intrin.name, [(list(t.shape), t.dtype) for t in intrin.inputs], intrin.op.dtype
    ('gpu_wmma_16x16x16_f16f32', [([16, 16], 'float16'), ([16, 16], 'float16')], 'float32')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import te
from ..schedule.stage import ForKind
from . import stmt as tir
from .interp import InterpretError, Pointer, register_extern

WARP_SIZE = 32
# (m, n, k) shapes nvcuda::wmma offers for float16 inputs with a float32 accumulator
WMMA_SHAPES = ((16, 16, 16), (32, 8, 16), (8, 32, 16))
FILL_PREFIX = "tf_wmma_fill_"
MMA_PREFIX = "tf_wmma_mma_"


def shape_suffix(m: int, n: int, k: int) -> str:
    """How the calls and the intrinsic name a WMMA shape: "16x16x16"."""
    return f"{m}x{n}x{k}"


def wmma_intrin(m: int = 16, n: int = 16, k: int = 16) -> te.TensorIntrin:
    """Declare (and register, with the interpreter's implementations of its calls) the
    `m x n x k` WMMA intrinsic; its lowering returns (body, reset, update).

    Raises:
        ValueError: for a shape WMMA does not offer for float16 x float16 -> float32.
    """
    if (m, n, k) not in WMMA_SHAPES:
        offered = ", ".join(shape_suffix(*s) for s in WMMA_SHAPES)
        raise ValueError(
            f"wmma_intrin: shape {shape_suffix(m, n, k)} is not a WMMA shape for float16 inputs "
            f"and a float32 accumulator (offered: {offered})"
        )
    suffix = shape_suffix(m, n, k)
    a = te.placeholder((m, k), "float16", name="a")
    b = te.placeholder((k, n), "float16", name="b")
    r = te.reduce_axis((0, k), "k")
    c = te.compute(
        (m, n),
        lambda i, j: te.sum(a[i, r].astype("float32") * b[r, j].astype("float32"), axis=r),
        name="c",
    )
    fill_name, mma_name = FILL_PREFIX + suffix, MMA_PREFIX + suffix

    def lower(ins: list[Any], outs: list[Any]) -> tuple[Any, Any, Any]:
        (ra, rb), (rc,) = ins, outs

        def on_warp(name: str, *args: Any, lane_arg: bool = False) -> tir.Stmt:
            # every lane of the warp calls (WMMA is warp-collective); the lane is the loop var
            lane = te.var("wmma.lane")
            call = te.call_extern(name, *args, *([lane] if lane_arg else []))
            body = tir.Evaluate(call)
            return tir.For(
                lane, te.const(0), te.const(WARP_SIZE), ForKind.THREAD_BINDING, body, "threadIdx.x"
            )

        ldc = te.const(_row_stride(rc))
        reset = on_warp(fill_name, rc.access_ptr("w"), ldc)
        update = on_warp(
            mma_name,
            ra.access_ptr("r"),
            te.const(_row_stride(ra)),
            rb.access_ptr("r"),
            te.const(_row_stride(rb)),
            rc.access_ptr("rw"),
            ldc,
            lane_arg=True,
        )
        return tir.seq(reset, update), reset, update

    register_extern(fill_name, _fill_impl(m, n))
    register_extern(mma_name, _mma_impl(m, n, k))
    return te.decl_tensor_intrin(c, lower, name=f"gpu_wmma_{suffix}_f16f32")


def _row_stride(region: tir.BufferRegion) -> int:
    """Elements between consecutive rows of a 2-D tile of `region`'s row-major buffer (WMMA's
    leading dimension): the size of the buffer's last dimension."""
    return int(region.buffer.shape[-1])


def _rows(p: Pointer, ld: int, rows: int, cols: int, mask: str) -> list[Pointer]:
    """One pointer per row of a `rows x cols` tile with row stride `ld` starting at `p`."""
    if ld < cols or (rows - 1) * ld + cols > p.extent:
        raise InterpretError(
            f"a {rows}x{cols} tile with leading dimension {ld} does not fit the access_ptr of "
            f"{p.buffer.name} ({p.extent} elements)"
        )
    return [Pointer(p.data, p.offset + r * ld, cols, mask, p.buffer) for r in range(rows)]


def _fill_impl(m: int, n: int) -> Any:
    def fill(c: Pointer, ldc: int) -> None:
        """C tile = 0 (every lane may do it: the result is the same)."""
        for row in _rows(c, ldc, m, n, "w"):
            row.write(np.zeros(n, np.float32))

    return fill


def _mma_impl(m: int, n: int, k: int) -> Any:
    def mma(a: Pointer, lda: int, b: Pointer, ldb: int, c: Pointer, ldc: int, lane: int) -> None:
        """C tile += A tile . B tile, float16 products accumulated in float32, by lane 0 only
        (the others of the warp take part in the CUDA operation, here they have nothing to do)."""
        if lane != 0:
            return
        ta = np.stack([p.read() for p in _rows(a, lda, m, k, "r")]).astype(np.float32)
        tb = np.stack([p.read() for p in _rows(b, ldb, k, n, "r")]).astype(np.float32)
        rows = _rows(c, ldc, m, n, "rw")
        tc = np.stack([p.read() for p in rows]).astype(np.float32)
        tc += ta @ tb
        for p, values in zip(rows, tc, strict=True):
            p.write(values)

    return mma
