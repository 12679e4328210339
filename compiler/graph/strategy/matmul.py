"""Gemm and MatMul anchors: pre-packed dense from the x86 library, batched MatMul as a
reduction, and the GPU dense and batch-matmul templates."""

from typing import Any

import numpy as np

from ... import te
from ...autotune.dispatch import query as autotune_query
from ...te.tensor import Tensor
from ...tir.stmt import LoweringError
from ...topi.x86 import (  # the x86 operator library
    DenseConfig,
    dense,
    schedule_dense,
)
from ...topi.x86.dense import batch_dense, dense_prepacked, pack_panels, schedule_batch_dense
from ...topi.x86.dense import config_from as dense_config_from
from ...topi.x86.dense import default_config as dense_default
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Index, Lazy, Tail, unravel
from .elemwise import broadcast_read
from .nn import FLOATS, Result, full_attrs, reduce_kernel, tail_epilogue


def dense_config(data: Tensor, n: int, prepacked: bool) -> DenseConfig:
    """The knobs of topi's dense for `data [M, K] x [K, n]`: tuned (as `conv_config`) or
    `topi.x86.dense.default_config`."""
    m, k = (int(d) for d in data.shape)
    wl = {"m": m, "n": int(n), "k": k, "dtype": data.dtype, "prepacked": bool(prepacked)}
    values = autotune_query("x86.dense", wl)
    return dense_config_from(values) if values is not None else dense_default(m)


def packed_dense(
    ctx: GroupContext,
    data: Tensor,
    weight: str,
    layout: str,
    epilogue: Any,
    values: np.ndarray | None = None,
    transposed: bool = False,
    product: Any = None,
) -> Result:
    """topi's dense; constant float or integer weights are packed into its panels once, here,
    and the kernel reads them in place (`topi.x86.dense_prepacked`). `values`, when given, are
    the weights to pack instead of the constant `weight` (which then only names the packed
    copy), e.g. weights minus their zero point. Integer data (int8, int16, int32) accumulates in
    int32, as topi's dense does for int8. The knobs come from `dense_config`. `transposed`
    (CPU, with `values`): the output is `[N, M]`, `epilogue(value, i, j)` as before.
    `product` (CPU, with `values`): `dense_prepacked`'s (the int8 kernels' dot products of
    words; their knobs are the defaults: a tuning log measured the plain product)."""
    if transposed and (ctx.gpu or values is None):
        raise LoweringError("packed_dense: a transposed output needs `values` on the CPU")
    if ctx.gpu:
        return gpu_dense(ctx, data, weight, layout, epilogue, values)
    const = ctx.constant(weight) if values is None else values
    integer = data.dtype in ("int8", "int16", "int32")
    w_shape = ctx.type_of(weight).shape if values is None else values.shape
    n = w_shape[0] if layout == "NK" else w_shape[1]
    if values is None and (const is None or not integer and data.dtype not in FLOATS):
        config = dense_config(data, n, prepacked=False)
        op = dense(data, ctx.as_tensor(weight), None, epilogue, None, config, layout)
        return schedule_dense(op, config), [op.out]
    if product is not None and values is None:
        raise LoweringError("packed_dense: a product needs `values` (the weights' words)")
    if product is None:
        config = dense_config(data, n, prepacked=True)
    else:
        config = dense_default(int(data.shape[0]))
    panels = pack_panels(np.asarray(const), config.bn, layout)
    stored = ctx.add_constant(f"{weight}.panels{config.bn}{layout}", panels)
    op = dense_prepacked(data, stored, n, epilogue, transposed, product)
    ctx.inline.append(op.packed)
    return schedule_dense(op, config), [op.out]


def gpu_dense(
    ctx: GroupContext,
    data: Tensor,
    weight: str,
    layout: str,
    epilogue: Any,
    values: np.ndarray | None = None,
    transposed: bool = False,
) -> Result:
    """`packed_dense` for a GPU target: `topi.gpu.dense` with shared-memory tiles; constant
    weights are stored once as [K, N] (coalesced reads along N), others read in place. The knobs
    are the `gpu.dense` template's (tuned, or `default_config`)."""
    from ...codegen.gpu import Limits
    from ...target import Target
    from ...topi.gpu import dense as gpu

    const = ctx.constant(weight) if values is None else values
    transpose = False
    if const is not None:
        kn = np.asarray(const).T if layout == "NK" else np.asarray(const)
        b = ctx.add_constant(f"{weight}.kn", np.ascontiguousarray(kn))
    else:
        b, transpose = ctx.as_tensor(weight), layout == "NK"
    (m, k), n = (int(d) for d in data.shape), int(b.shape[0] if transpose else b.shape[1])
    limit = Limits.of(Target.parse(ctx.target)).max_threads
    wl = {"m": m, "n": n, "k": k, "dtype": data.dtype, "max_threads": limit}
    tuned = autotune_query("gpu.dense", wl)
    config = gpu.config_from(tuned) if tuned is not None else gpu.default_config(m, n, limit)
    acc, out = gpu.dense(data, b, epilogue, transpose)
    sched = te.create_schedule(out.op)
    gpu.schedule_dense(sched, out, None if acc is out else acc, config)
    return sched, [out]


def _materialize(ctx: GroupContext, lazy: Lazy, name: str) -> Tensor:
    t = te.compute(lazy.shape, lambda *i: lazy(i), name=name)
    ctx.inline.append(t)
    return t


def _gemm(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    attrs = full_attrs(node)
    m, n = ctx.type_of(node.outputs[0]).shape
    if attrs["transA"]:
        a = ctx.get(node.inputs[0])
        lazy = Lazy((a.shape[1], a.shape[0]), a.dtype, lambda i: a((i[1], i[0])))
        data = _materialize(ctx, lazy, "a_t")
    else:
        data = ctx.as_tensor(node.inputs[0])
    c = ctx.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    alpha, beta = attrs["alpha"], attrs["beta"]

    def epilogue(v: Any, i: Any, j: Any) -> Any:
        if alpha != 1.0:
            v = v * alpha
        if c is not None and beta != 0.0:
            cv = broadcast_read(c, (m, n))((i, j))
            v = v + (cv * beta if beta != 1.0 else cv)
        return tail.epilogue(v, (i, j))

    simple = alpha == 1.0 and c is None and not tail.nodes
    layout = "NK" if attrs["transB"] else "KN"
    return packed_dense(ctx, data, node.inputs[1], layout, None if simple else epilogue)


def _matmul(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    a_ty, b_ty = ctx.type_of(node.inputs[0]), ctx.type_of(node.inputs[1])
    if len(a_ty.shape) < 2 or len(b_ty.shape) != 2:
        return _batch_matmul(ctx, node, tail)
    lead, k = a_ty.shape[:-1], a_ty.shape[-1]
    rows = int(np.prod(lead))
    data = ctx.as_tensor(node.inputs[0], (rows, k))
    epi = tail_epilogue(tail, lambda i, j: (*unravel(i, lead), j))
    return packed_dense(ctx, data, node.inputs[1], "KN", epi)


def batch_index(x: Lazy, idx: Index) -> Index:
    """The batch part of an operand's index, for output index `idx` of a batched matmul: numpy's
    broadcasting (missing leading dims dropped, size-1 dims read at 0)."""
    own, batch = len(x.shape) - 2, len(idx) - 2
    keep = idx[batch - own : batch] if own else ()
    return tuple(0 if d == 1 else i for d, i in zip(x.shape[:own], keep, strict=True))


def _as_matrix(x: Lazy, row: bool) -> Lazy:
    """A 1-D MatMul operand as numpy promotes it: [K] -> [1, K] (`row`) or [K, 1]."""
    if len(x.shape) != 1:
        return x
    if row:
        return Lazy((1, x.shape[0]), x.dtype, lambda i: x((i[-1],)))
    return Lazy((x.shape[0], 1), x.dtype, lambda i: x((i[-2],)))


def _batch_matmul(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """MatMul with numpy's semantics: batch dims broadcast; a 1-D operand gains a dim of 1 (in
    front for the first, behind for the second) that the output then drops."""
    a, b = ctx.get(node.inputs[0]), ctx.get(node.inputs[1])
    has_m, has_n = len(a.shape) > 1, len(b.shape) > 1
    a, b = _as_matrix(a, row=True), _as_matrix(b, row=False)
    shape = ctx.type_of(node.outputs[0]).shape
    batch = len(shape) - has_m - has_n
    if ctx.gpu and has_m and has_n and batch:
        return _gpu_batch_matmul(ctx, a, b, shape, tail)
    if has_m and has_n and batch and a.dtype == b.dtype == "float32" and a.shape[-1] >= 8:
        return _cpu_batch_matmul(ctx, a, b, shape, tail)
    rk = te.reduce_axis((0, a.shape[-1]), "k")

    def body(*i: Any) -> Any:
        full = (*i[:batch], i[batch] if has_m else 0, i[-1] if has_n else 0)
        lhs, rhs = (
            a((*batch_index(a, full), full[-2], rk)),
            b((*batch_index(b, full), rk, full[-1])),
        )
        return te.sum(lhs * rhs, axis=rk)

    return reduce_kernel(te.compute(shape or (1,), body, name="matmul"), tail)


def _cpu_batch_matmul(ctx: GroupContext, a: Lazy, b: Lazy, shape: tuple, tail: Tail) -> Result:
    """A batched float32 MatMul on the CPU: the batch dims flattened, one register-tiled dense
    per matrix with its B packed into panels at run time (`topi.x86.batch_dense`), the tail
    fused into the store; the knobs are `x86.dense`'s for one matrix (tuned, or the default).
    As a plain reduction, attention's `Q K^T` (12 x 197 x 64 x 197) took 5x onnxruntime's time."""
    lead, (m, n), k = shape[:-2], shape[-2:], a.shape[-1]
    nb = int(np.prod(lead))

    def full(q: Any, i: Any, j: Any) -> Index:
        return (*unravel(q, lead), i, j)

    def read_a(q: Any, i: Any, kk: Any) -> Any:
        return a((*batch_index(a, full(q, i, kk)), i, kk))

    def read_b(q: Any, kk: Any, j: Any) -> Any:
        return b((*batch_index(b, full(q, kk, j)), kk, j))

    wl = {"m": m, "n": n, "k": k, "dtype": a.dtype, "prepacked": False}
    values = autotune_query("x86.dense", wl)
    config = dense_config_from(values) if values is not None else _batch_default(m, n)
    epi = tail_epilogue(tail, full)
    op = batch_dense(read_a, read_b, (nb, m, k, n), a.dtype, epi, config)
    return schedule_batch_dense(op, config), [op.out]


def _batch_default(m: int, n: int) -> DenseConfig:
    """The untuned knobs of a batched MatMul: 4 x 64 register tiles where 64 columns exist and
    the tile fits the vector registers (AVX-512), else `dense`'s default. Attention's matrices
    have short reductions (K = 64 in ViT-B/16's `Q K^T`), where a wider tile feeds more
    accumulators per broadcast value: 12 x 197 x 64 x 197 took 0.51 ms as 6 x 32, 0.39 as 4 x 64
    (onnxruntime 0.29; AMD EPYC with AVX-512, one thread)."""
    from ...codegen.llvm_jit import vector_registers

    lanes, count = vector_registers()
    vecs = -(-64 // lanes)
    if n >= 48 and 4 * vecs + vecs + 1 <= count:
        return DenseConfig(mr=4, bn=64)
    return dense_default(m)


def _gpu_batch_matmul(ctx: GroupContext, a: Lazy, b: Lazy, shape: tuple, tail: Tail) -> Result:
    """A batched MatMul on a GPU: both operands viewed as [batch, rows, cols] (broadcast batch
    dims read in place, fused producers inlined) and `topi.gpu.dense`'s shared-memory tiles with
    the batch bound to the grid's z axis; the knobs are `gpu.dense`'s for one matrix."""
    from ...codegen.gpu import Limits
    from ...target import Target
    from ...topi.gpu import dense as gpu

    lead, (m, n), k = tuple(shape[:-2]), shape[-2:], a.shape[-1]
    nb = int(np.prod(lead))

    def operand(x: Lazy, rows: int, cols: int, name: str) -> Tensor:
        def read(q: Any, i: Any, j: Any) -> Any:
            full = (*unravel(q, lead), i, j)
            return x((*batch_index(x, full), i, j))

        t = te.compute((nb, rows, cols), read, name=name)
        ctx.inline.append(t)
        return t

    lhs, rhs = operand(a, m, k, "lhs"), operand(b, k, n, "rhs")
    epi = tail_epilogue(tail, lambda q, i, j: (*unravel(q, lead), i, j))
    limit = Limits.of(Target.parse(ctx.target)).max_threads
    wl = {"m": m, "n": n, "k": k, "batch": nb, "dtype": lhs.dtype, "max_threads": limit}
    tuned = autotune_query("gpu.dense", wl)
    config = gpu.config_from(tuned) if tuned is not None else gpu.default_config(m, n, limit)
    acc, out = gpu.batch_dense(lhs, rhs, epi)
    sched = te.create_schedule(out.op)
    gpu.schedule_dense(sched, out, None if acc is out else acc, config)
    return sched, [out]


ANCHORS: dict[str, AnchorRule] = {
    "Gemm": _gemm,
    "MatMul": _matmul,
}
