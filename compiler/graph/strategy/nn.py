"""What the anchor lowerings share: the result type, reduction kernels and their schedules,
padding and window helpers, flat-index helpers, the depthwise config space and the GPU row
reduction's knobs.

The anchors: conv.py (convolution), matmul.py (Gemm, MatMul), reduce.py (pooling and
reductions), norm.py (Softmax, LogSoftmax, LayerNormalization). They use the x86 operator
library (`compiler.topi.x86`) where it has the operator (conv2d with pre-packed weights, dense,
pool2d, softmax), with the group's elementwise tail as its epilogue; the other cases
(convolutions with runtime weights, 3-D depthwise ones, batched MatMul, exclusive-pad average
pooling, reductions, LayerNormalization) are computes written here.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import te
from ...autotune.dispatch import query as autotune_query
from ...autotune.space import ConfigSpace, Knob
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor
from ...topi.gpu import reduce as gpu_reduce
from ...topi.x86.depthwise import (
    default_depthwise_config,
)
from ..ir import Node
from ..lower_te import GroupContext, Index, Lazy, Tail, schedule_rows
from ..registry import get_op

Result = tuple[Schedule, list[Tensor]]
FLOATS = ("float32", "float64")


@dataclass(frozen=True)
class ReduceConfig:
    """The knobs of `reduce_kernel` (the schedule of depthwise convolutions and other
    reductions): vector lanes along the last axis, thread-pool use (for stages of at least 2048
    elements), and unrolling the innermost reduction axis (the kernel's taps)."""

    lanes: int = 16
    parallel: bool = True
    unroll_taps: bool = False


def depthwise_space(wl: dict[str, Any]) -> ConfigSpace:
    """The config space of a depthwise conv2d (the `x86.depthwise_conv2d` template): `layout`
    "nchwc" (topi's blocked template, channels in vector lanes: knobs `cb`, `reg_n`) or "rows"
    (the reduction along output rows: the `ReduceConfig` knobs `lanes`, `unroll_taps`), and
    `parallel` for both. Default: "nchwc" with `default_depthwise_config` (benchmarks/dwconv.py:
    2-2.5x faster than "rows" at 7x7 and 14x14, where a row fills no vector, 1.2x at stride 2
    and 5x5, level at 3x3 on 56x56 and 112x112), `ReduceConfig()`'s knobs for "rows".

    A blocked workload (`layout` "NCHWc", a layer of a blocked chain) has its chain's `block`
    as its only `cb` and "nchwc" as its only layout: `reg_n` and `parallel` vary. An integer
    one (int8/int16) has "rows" only: the strategy lowers every integer depthwise conv as the
    reduction, so "nchwc" points would all be the same program as the "rows" default."""
    out_w = _out_width(wl)
    b = default_depthwise_config(wl["c"], out_w)
    regs = tuple(sorted({1, 2, 4, 7, 8, 14, 16} & set(range(1, out_w + 1)) | {b.reg_n}))
    d, block = ReduceConfig(), wl.get("block")
    layouts, blocks = (("nchwc", "rows"), (8, 16, 32)) if block is None else (("nchwc",), (block,))
    if block is None and wl["dtype"] not in FLOATS:  # the strategy reduces other dtypes by rows
        layouts = ("rows",)
    rows_knobs = ((4, 8, 16, 32), (False, True)) if block is None else ((d.lanes,), (False,))
    knobs = [Knob("layout", layouts), Knob("cb", blocks), Knob("reg_n", regs),
             Knob("lanes", rows_knobs[0]), Knob("parallel", (True, False)),
             Knob("unroll_taps", rows_knobs[1])]  # fmt: skip
    default = {"layout": layouts[0], "cb": block or 8, "reg_n": b.reg_n, "lanes": d.lanes,
               "parallel": d.parallel, "unroll_taps": d.unroll_taps}  # fmt: skip

    def constraint(v: dict) -> str | None:  # each layout's knobs vary, the other's stay put
        fixed = ("lanes", "unroll_taps") if v["layout"] == "nchwc" else ("cb", "reg_n")
        moved = [k for k in fixed if v[k] != default[k]]
        return f"{', '.join(moved)} only apply to the other layout" if moved else None

    return ConfigSpace("x86.depthwise_conv2d", knobs, default, constraint)


def _out_width(wl: dict[str, Any]) -> int:
    span = (
        int(wl["w"])
        + int(wl["pads"][1])
        + int(wl["pads"][3])
        - int(wl["dil"][1]) * (int(wl["s"]) - 1)
    )
    return max(1, (span - 1) // int(wl["strides"][1]) + 1)


def full_attrs(node: Node) -> dict[str, Any]:
    return get_op(node.op).full_attrs(node)


def tail_epilogue(tail: Tail, index: Callable[..., Index] | None = None) -> Any:
    if not tail.nodes:
        return None
    index = index or (lambda *i: i)
    return lambda v, *i: tail.epilogue(v, index(*i))


def reduce_kernel(
    red: Tensor,
    tail: Tail,
    post: Callable[[Any, Index], Any] | None = None,
    extra: Sequence[Tensor] = (),
    config: ReduceConfig | None = None,
) -> Result:
    """A reduction stage plus the elementwise result (post-processing, then the tail), computed
    row by row: the reduction at each output row, its last axis in vector lanes; `extra` stages
    (padding) run first, at the root. `config`: the knobs (default `ReduceConfig()`)."""
    config = config or ReduceConfig()
    out = red
    if post is not None or tail.nodes:
        post = post or (lambda v, i: v)
        out = te.compute(red.shape, lambda *i: tail.epilogue(post(red[i], i), i), name="out")
    s = te.create_schedule(out.op)
    threshold = 2048 if config.parallel else 1 << 62
    for stage in extra:
        schedule_rows(s, stage, config.lanes, threshold)
        if stage.op.reduce_axis:
            vectorize_reduction(s, stage, config)
    row = schedule_rows(s, out, config.lanes, threshold)
    if out is not red and row is not None:
        s[red].compute_at(s[out], row)
        s[red].set_scope("local")
    # (a reduction over no axes, noop_with_empty_axes, is a copy that schedule_rows vectorized)
    reduces = out is not red or bool(red.op.reduce_axis)
    if reduces and (out is red or row is not None):
        vectorize_reduction(s, red, config)
    return s, [out]


def vectorize_reduction(s: Schedule, red: Tensor, config: ReduceConfig) -> None:
    """The last axis of reduction `red` split into vector lanes innermost, inside the reduction
    loops (each lane its own accumulator); the last reduction axis unrolled if configured."""
    if red.shape[-1] <= 1:
        return
    xo, xi = s[red].split(red.op.axis[-1], factor=config.lanes)
    s[red].reorder(xo, *red.op.reduce_axis, xi)
    s[red].vectorize(xi)
    if config.unroll_taps and red.op.reduce_axis:
        s[red].unroll(red.op.reduce_axis[-1])


def pad_image(x: Lazy, before: Sequence[int], after: Sequence[int], fill: Any) -> Tensor:
    """x (`[N, C, *spatial]`) with `fill` around its spatial axes, as its own stage: the window
    loops that read it then index affinely (vector loads) instead of clamping every lane."""
    spatial = x.shape[2:]
    shape = (*x.shape[:2], *(d + b + a for d, b, a in zip(spatial, before, after, strict=True)))
    return te.compute(shape, lambda n, c, *pos: _padded(x, before, fill, n, c, pos), name="pad")


def _padded(x: Lazy, before: Sequence[int], fill: Any, n: Any, c: Any, pos: Sequence) -> Any:
    """x at spatial position `pos` of its padded copy (`fill` outside x): `te.clamped_read`, an
    always in-bounds read that vectorizes."""
    src = [p - b for p, b in zip(pos, before, strict=True)]
    return te.clamped_read(x, (n, c), src, x.shape[2:], fill)


def pads_after(
    out_hw: Sequence[int], kernel: Sequence[int], pads: Sequence[int], st: Sequence[int],
    dil: Sequence[int], in_hw: Sequence[int],
) -> list[int]:  # fmt: skip
    """The padding a window op reads after the input (bottom, right): what the last output
    row and column reach past the input, given the padding before."""
    shapes = zip(out_hw, st, kernel, dil, pads, in_hw, strict=True)
    return [max(0, (o - 1) * s + (k - 1) * d - p - (n - 1)) for o, s, k, d, p, n in shapes]


def window_source(
    x: Lazy, out: tuple, kernel: tuple, pads: list, st: list, dil: list, fill: Any
) -> tuple[Callable[..., Any], list[Tensor]]:
    """A reader `(n, c, *position) -> value` of `[N, C, *spatial]` x with padding applied (the
    window's input positions, before padding), and the extra stages it needs."""
    after = pads_after(out[2:], kernel, pads, st, dil, x.shape[2:])
    if not any(pads) and not any(after):
        return (lambda n, c, *pos: x((n, c, *pos))), []
    shift = lambda pos: [p + b for p, b in zip(pos, pads, strict=True)]  # noqa: E731
    if st[-1] == 1:
        padded = pad_image(x, pads, after, fill)
        return (lambda n, c, *pos: padded[(n, c, *shift(pos))]), [padded]
    phased = _pad_phases(x, pads, after, st[-1], fill)

    def read(n: Any, c: Any, *pos: Any) -> Any:
        *rows, col = shift(pos)  # x * stride + rx * dilation: the phase depends on rx alone
        return phased[(n, c, *rows, col % st[-1], col // st[-1])]

    return read, [phased]


def _pad_phases(x: Lazy, before: list, after: list, stride: int, fill: Any) -> Tensor:
    """The padded image with its columns (last axis) dealt into `stride` phases, `[n, c,
    *rows, column % stride, column // stride]`: a strided window then reads consecutive
    outputs from consecutive addresses (vector loads instead of gathers)."""
    sizes = [d + b + a for d, b, a in zip(x.shape[2:], before, after, strict=True)]
    shape = (*x.shape[:2], *sizes[:-1], stride, -(-sizes[-1] // stride))

    def fpad(n: Any, c: Any, *pos: Any) -> Any:
        *rows, phase, j = pos
        return _padded(x, before, fill, n, c, (*rows, j * stride + phase))

    return te.compute(shape, fpad, name="pad_phases")


def rows_of(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    return int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))


def gpu_row_config(ctx: GroupContext, rows: int, n: int, op: str, dtype: str) -> Any:
    """The `gpu.row_reduce` knobs (tuned, or the default) and whether warp shuffles combine the
    last 32 partials (CUDA)."""
    from ...codegen.gpu import Limits
    from ...target import Target

    target = Target.parse(ctx.target)
    limit = Limits.of(target).max_threads
    wl = {"rows": rows, "n": n, "op": op, "dtype": dtype, "max_threads": limit}
    tuned = autotune_query("gpu.row_reduce", wl)
    config = gpu_reduce.config_from(tuned) if tuned else gpu_reduce.default_config(n, limit)
    return config, gpu_reduce.uses_warp(target.kind, dtype)


def direct_conv_taps(
    w_shape: Sequence[int],
    group: int,
    pads: Sequence[Any],
    strides: Sequence[int],
    dil: Sequence[int],
) -> tuple[list[Any], Callable[..., tuple[Any, tuple, Any, tuple]]]:
    """The reduction axes of a direct (grouped) convolution of any number of spatial axes with
    weights ``w_shape`` = [k, cg, *taps], and ``taps(kk, *pos) -> (c, at, ci, tap)``: the input
    channel and position ``at`` that output channel ``kk`` reads at output position ``pos``,
    and the weight's indices ``(kk, ci, *tap)``."""
    k, cg, *kernel = w_shape
    per_group = k // group
    rc = te.reduce_axis((0, cg), "rc")
    tap = tuple(te.reduce_axis((0, n), f"r{a}") for a, n in enumerate(kernel))
    ci = rc if cg > 1 else 0

    def taps(kk: Any, *pos: Any) -> tuple[Any, tuple, Any, tuple]:
        if group == 1:
            c = ci
        elif per_group == 1 and cg == 1:
            c = kk  # depthwise
        else:
            c = (kk // per_group) * cg + ci
        spans = zip(pos, tap, strides, dil, pads, strict=True)
        return c, tuple(o * s + r * d - p for o, r, s, d, p in spans), ci, tap

    return ([rc, *tap] if cg > 1 else list(tap)), taps
