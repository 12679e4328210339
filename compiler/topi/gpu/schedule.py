"""A GPU schedule for any tensor program: injective stages inlined, every other stage's output
spread over thread blocks, reductions accumulated in registers and blocked for reuse.

This is the GPU side of the strategies: the graph layer lowers a fused group to the same tensor
expressions for every target (`compiler.graph.lower_te`), and `schedule_auto` replaces the CPU
schedule with one for thread blocks. Every stage that is not inlined or fused into its consumer
is computed at the root and becomes one kernel launch (`compiler.codegen.gpu.split_kernels`):

- a stage without a reduction that feeds others (a padding, a layout change) is inlined into
  its readers, as TVM's GPU schedules do, unless inlining would multiply the readers' expression
  trees past `INLINE_LIMIT` nodes (a coordinate rule read dozens of times per output, as
  GridSample's reflection is): such a stage is computed once per element in its own kernel;
- a reduction whose only reader is an element-wise output of its shape (a convolution and its
  bias + activation) is computed in registers (`local`) inside that output's thread: one kernel,
  no round trip through global memory;
- the remaining stages have their spatial axes fused and split into blocks of `threads` threads
  (`blockIdx.x`, `threadIdx.x`); a reduction accumulates in a `local` buffer;
- register blocking: a reduction's thread computes `block` outputs along the spatial axis that
  one of its inputs does not depend on (a convolution's output channels: each input value
  loaded once serves `block` outputs), the reduction loops outside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import te
from ...schedule.primitives import ScheduleError
from ...schedule.schedule import Schedule
from ...schedule.stage import AttachKind, Stage
from ...te.expr import ProducerLoad, Var
from ...te.tensor import ComputeOp, Tensor
from ...te.visitor import children, pre_order

INLINE_LIMIT = 4096
"""Most expression-tree nodes a stage's reads may cost its readers once it is inlined (its
size times the number of reads): past it the stage keeps its own kernel. Lowering, simplifying
and printing walk expressions as trees, so the size a shared subexpression reaches by inlining
is what they pay."""


@dataclass(frozen=True)
class GPUScheduleConfig:
    """Knobs of `schedule_auto`: threads per block, outputs per thread of a reduction (register
    blocking, 1 for none) and the unroll of the innermost reduction loop."""

    threads: int = 256
    block: int = 4
    unroll: int = 1


def _extent(iv: Any) -> int:
    return int(iv.dom.extent)


def _loads(op: ComputeOp) -> list[ProducerLoad]:
    bodies = [op.body, *op.extra_bodies]
    return [n for body in bodies for n in pre_order(body) if isinstance(n, ProducerLoad)]


def _uses(load: ProducerLoad, var: Var) -> bool:
    return any(n is var for index in load.indices for n in pre_order(index))


def _tree_size(expr: Any, expanded: dict[int, int], memo: dict[int, int]) -> int:
    """Nodes of `expr` counted as a tree (a shared subexpression once per use), a load of an
    inlined producer counted as that producer's own size (`expanded`, by operation id)."""
    key = id(expr)
    if key not in memo:
        own = 1
        if isinstance(expr, ProducerLoad):
            own = expanded.get(id(expr.producer.op), 1)
        memo[key] = own + sum(_tree_size(c, expanded, memo) for c in children(expr))
    return memo[key]


def _reads(expr: Any, op: ComputeOp, memo: dict[int, int]) -> int:
    """How many loads of `op`'s outputs `expr` makes, counted as a tree."""
    key = id(expr)
    if key not in memo:
        own = int(isinstance(expr, ProducerLoad) and expr.producer.op is op)
        memo[key] = own + sum(_reads(c, op, memo) for c in children(expr))
    return memo[key]


def _inline_cheap_stages(s: Schedule) -> None:
    """Inline every injective intermediate stage whose reads cost at most `INLINE_LIMIT` nodes
    (producers first, so a chain's sizes compound as they would)."""
    expanded: dict[int, int] = {}
    computes = [st for st in s.stages if st.is_compute]
    for stage in computes:
        op = stage.op
        size = sum(_tree_size(b, expanded, {}) for b in op.bodies)
        if not stage.is_output and not op.reduce_axis:
            reads = sum(
                _reads(b, op, {}) for other in computes if other is not stage
                for b in other.op.bodies
            )  # fmt: skip
            if reads <= 1 or size * reads <= INLINE_LIMIT:
                stage.compute_inline()
                expanded[id(op)] = size


def _reuse_axis(op: ComputeOp, block: int) -> int | None:
    """The position of the spatial axis to block: one that some input does not depend on (its
    values are reused across the block), with an extent divisible by `block`; the largest such."""
    loads = _loads(op)
    best = None
    for k, iv in enumerate(op.axis):
        n = _extent(iv)
        if n < block or n % block or not any(not _uses(ld, iv.var) for ld in loads):
            continue
        if best is None or n > _extent(op.axis[best]):
            best = k
    return best


def _fusable_into(s: Schedule, reduce_stage: Stage) -> Stage | None:
    """The element-wise output stage that alone reads `reduce_stage`, at its own index."""
    tensor = reduce_stage.tensor
    readers = [
        st
        for st in s.stages
        if st.is_compute and st.attach is not AttachKind.INLINE and st is not reduce_stage
        and any(ld.producer is tensor for ld in _loads(st.op))
    ]  # fmt: skip
    if len(readers) != 1:
        return None
    (out,) = readers
    if not out.is_output or out.op.reduce_axis or out.op.num_outputs != 1:
        return None
    if tuple(out.op.shape) != tuple(reduce_stage.op.shape):
        return None
    axes = [iv.var for iv in out.op.axis]
    for ld in _loads(out.op):
        if ld.producer is tensor and not (
            len(ld.indices) == len(axes)
            and all(i is v for i, v in zip(ld.indices, axes, strict=True))
        ):
            return None
    return out


def _bind(stage: Stage, threads: int, block_at: int | None, block: int) -> Any:
    """Fuse a stage's spatial axes and spread them over blocks of `threads` threads; with
    `block_at`, that axis's inner `block` values stay in each thread (innermost). Returns the
    thread axis."""
    axes = list(stage.op.axis)
    inner = None
    if block_at is not None:
        outer, inner = stage.split(axes[block_at], factor=block)
        axes[block_at] = outer
        stage.reorder(*axes, inner)
    size = int(np.prod([_extent(ax) for ax in stage.op.axis])) // (block if inner else 1)
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    per_block = max(1, min(threads, size))
    bx, tx = stage.split(fused, factor=per_block)
    stage.bind(bx, te.thread_axis("blockIdx.x"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))
    if inner is not None:
        stage.unroll(inner)
    return tx


def _accumulate_at(s: Schedule, local: Stage, at: Stage, tx: Any, cfg: GPUScheduleConfig) -> None:
    """`local` (a reduction in registers) computed in thread `tx` of `at`, reduction loops
    outside its spatial ones (each loaded value serves every output of the thread)."""
    local.compute_at(at, tx)
    reduce_axes = list(local.op.reduce_axis)
    local.reorder(*reduce_axes, *local.op.axis)
    if cfg.unroll > 1:
        k = reduce_axes[-1]
        if _extent(k) % cfg.unroll == 0:
            _, ki = local.split(k, factor=cfg.unroll)
            local.unroll(ki)


def schedule_auto(outputs: Sequence[Tensor], config: GPUScheduleConfig | None = None) -> Schedule:
    """A GPU schedule of the program computing `outputs` (see the module docstring)."""
    cfg = config or GPUScheduleConfig()
    s = te.create_schedule([t.op for t in outputs])
    _inline_cheap_stages(s)
    done: set[int] = set()
    for stage in list(s.stages):
        if not stage.is_compute or stage.attach is not AttachKind.ROOT or id(stage) in done:
            continue
        if not stage.op.reduce_axis:
            _bind(stage, cfg.threads, None, 1)
            continue
        block_at = _reuse_axis(stage.op, cfg.block) if cfg.block > 1 else None
        out = _fusable_into(s, stage) if stage.op.num_outputs == 1 else None
        if out is not None:  # computed in registers inside its element-wise reader's thread
            stage.set_scope("local")
            tx = _bind(out, cfg.threads, block_at, cfg.block)
            _accumulate_at(s, stage, out, tx, cfg)
            done.add(id(out))
            continue
        local = None
        if stage.op.num_outputs == 1:
            try:
                local = s.cache_write(stage.tensor, "local")
            except ScheduleError:
                local = None
        tx = _bind(stage, cfg.threads, block_at if local is not None else None, cfg.block)
        if local is not None:
            _accumulate_at(s, s[local], stage, tx, cfg)
    return s
