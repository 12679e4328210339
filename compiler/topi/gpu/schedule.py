"""A GPU schedule for any tensor program: injective stages inlined, every other stage's output
spread over thread blocks, reductions accumulated in registers.

This is the GPU side of the strategies: the graph layer lowers a fused group to the same tensor
expressions for every target (`compiler.graph.lower_te`), and `schedule_auto` replaces the CPU
schedule with one for thread blocks. Every stage that is not inlined is computed at the root
and becomes one kernel launch (`compiler.codegen.gpu.split_kernels`):

- a stage without a reduction that feeds others (a padding, a layout change) is inlined into
  its readers, as TVM's GPU schedules do;
- the remaining stages (the outputs and every reduction) have their spatial axes fused and split
  into blocks of `threads` threads (`blockIdx.x`, `threadIdx.x`), one output element per thread;
- a reduction accumulates in a `local` buffer (`cache_write`), so the sum lives in a register
  and global memory is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import te
from ...schedule.primitives import ScheduleError
from ...schedule.schedule import Schedule
from ...schedule.stage import Stage
from ...te.tensor import Tensor


@dataclass(frozen=True)
class GPUScheduleConfig:
    """Knobs of `schedule_auto`: threads per block, and the unroll of the reduction loop."""

    threads: int = 256
    unroll: int = 1


def _bind_flat(s: Schedule, stage: Stage, threads: int) -> None:
    """Fuse a stage's spatial axes and spread them over blocks of `threads` threads."""
    axes = list(stage.op.axis)
    size = int(np.prod([int(ax.dom.extent) for ax in axes])) if axes else 1
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    per_block = max(1, min(threads, size))
    bx, tx = stage.split(fused, factor=per_block)
    stage.bind(bx, te.thread_axis("blockIdx.x"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))
    return tx


def schedule_auto(outputs: Sequence[Tensor], config: GPUScheduleConfig | None = None) -> Schedule:
    """A GPU schedule of the program computing `outputs` (see the module docstring)."""
    cfg = config or GPUScheduleConfig()
    s = te.create_schedule([t.op for t in outputs])
    for stage in list(s.stages):
        if stage.is_compute and not stage.is_output and not stage.op.reduce_axis:
            stage.compute_inline()
    for stage in list(s.stages):
        if not stage.is_compute or stage.attach.name == "INLINE" or stage.scope != "global":
            continue
        if not stage.op.reduce_axis:
            _bind_flat(s, stage, cfg.threads)
            continue
        local = None
        if stage.op.num_outputs == 1:
            try:
                local = s.cache_write(stage.tensor, "local")
            except ScheduleError:
                local = None
        tx = _bind_flat(s, stage, cfg.threads)
        if local is not None:
            inner = s[local]
            inner.compute_at(stage, tx)
            if cfg.unroll > 1:
                k = inner.op.reduce_axis[-1]
                if int(k.dom.extent) % cfg.unroll == 0:
                    _, ki = inner.split(k, factor=cfg.unroll)
                    inner.unroll(ki)
    return s
