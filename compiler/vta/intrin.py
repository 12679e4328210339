"""The accelerator's GEMM tensor intrinsic, declared from a HWConfig (separately from schedules).

``gemm_intrin(cfg)`` computes ``out[BATCH, BLOCK_OUT] += inp[BATCH, BLOCK_IN] . wgt[BLOCK_OUT,
BLOCK_IN]^T`` with int8 inputs and int32 accumulation. Its lowering is the loop IR of that
computation (so the loop-IR interpreter runs tensorized schedules) wrapped in an
``AttrStmt("vta_gemm", ...)`` marking the region a GEMM micro-op covers. The program-image path
of this increment (compiler/vta/codegen.py) does not go through it yet; see docs/vta_compiler.md.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> intrin = gemm_intrin(HWConfig.preset("tiny"))
    >>> intrin.name, [list(t.shape) for t in intrin.inputs], list(intrin.op.shape)
    ('vta_gemm_1x4_i8w8a32_12_10_12_12', [[1, 4], [4, 4]], [1, 4])
"""

from __future__ import annotations

from typing import Any

from ...hw.config import HWConfig
from .. import te
from ..tir import stmt as tir

GEMM_ATTR = "vta_gemm"


def gemm_intrin(cfg: HWConfig) -> te.TensorIntrin:
    """Declare (and register) the GEMM intrinsic of ``cfg``; returns body, reset and update."""
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    inp = te.placeholder((b, bi), "int8", name="inp")
    wgt = te.placeholder((bo, bi), "int8", name="wgt")
    k = te.reduce_axis((0, bi), "k")
    out = te.compute(
        (b, bo),
        lambda i, j: te.sum(te.cast(inp[i, k], "int32") * te.cast(wgt[j, k], "int32"), axis=k),
        name="out",
    )

    def lower(ins: list[Any], outs: list[Any]) -> tuple[Any, Any, Any]:
        (x, w), (y,) = ins, outs
        i, j, r = te.var("i.gemm"), te.var("j.gemm"), te.var("k.gemm")

        def at(region: Any, *offsets: Any) -> tuple[Any, ...]:
            # A blocked tensor's tile: leading unit dimensions, then the intrinsic's own.
            lead = len(region.starts) - len(offsets)
            trailing = zip(region.starts[lead:], offsets, strict=True)
            return (*region.starts[:lead], *(s + o for s, o in trailing))

        def loops(body: Any, *extents: tuple[Any, int]) -> Any:
            for v, n in reversed(extents):
                body = tir.For(v, te.const(0), te.const(n), tir.ForKind.SERIAL, body)
            return body

        acc = tir.BufferLoad(y.buffer, at(y, i, j), "int32")
        a = te.cast(tir.BufferLoad(x.buffer, at(x, i, r), "int8"), "int32")
        c = te.cast(tir.BufferLoad(w.buffer, at(w, j, r), "int8"), "int32")
        update = loops(
            tir.BufferStore(y.buffer, acc + a * c, at(y, i, j)), (i, b), (j, bo), (r, bi)
        )
        reset = loops(tir.BufferStore(y.buffer, te.const(0, "int32"), at(y, i, j)), (i, b), (j, bo))
        return (
            tir.AttrStmt(GEMM_ATTR, 0, tir.seq(reset, update)),
            tir.AttrStmt(GEMM_ATTR, 1, reset),
            tir.AttrStmt(GEMM_ATTR, 2, update),
        )

    return te.decl_tensor_intrin(out, lower, name=f"vta_gemm_{cfg.bitstream_name}")
