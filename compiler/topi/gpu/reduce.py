"""Row reductions on GPUs with work-group cooperation: softmax, layer normalization and
reductions over a long innermost axis (the `gpu.row_reduce` tuning template).

One thread block reduces one row of `n` values with `threads` threads:

- thread `t` accumulates `x[t], x[t + threads], ...` in registers (neighbouring threads read
  neighbouring addresses) and stores its partial result in shared memory;
- the partials are combined in a tree through shared memory, each level halving the active
  threads (`partial[t] op partial[t + half]`, one shared buffer per level; the loop-IR pipeline
  puts a barrier between levels);
- on CUDA the last 32 partials are combined by one warp with `__shfl_xor_sync` (the
  `tf_warp_<op>` intrinsic, which the CUDA dialect prints and the OpenCL dialect refuses): a
  butterfly, so every lane holds the row's result and a reader at column `j` reads lane
  `j % 32` (the 32 lanes stay live through bound inference). OpenCL keeps the shared-memory
  tree down to one value; so does a reduction whose output is one value per row.

The row's result stays in shared memory, where every thread of the block reads it for what
follows (softmax's exponentials, layer norm's normalized row, spread over the block's threads)
or one thread writes it out (a reduction's output with its element-wise epilogue).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ... import te
from ...autotune.space import ConfigSpace, Knob
from ...schedule.schedule import Schedule
from ...te.expr import Call, CallKind
from ...te.tensor import Tensor

Row = Callable[[Any, Any], Any]  # (row, column) -> value
Result = Callable[[Any, Any], Any]  # (row, column) -> the row's reduced value (shared memory)

WARP = 32
MIN_ROW = 64  # rows longer than this get a block each (the strategies' threshold)
_REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min, "prod": te.prod}
_WARP_DTYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")
WARP_PREFIX = "tf_warp_"  # the warp-level reduction intrinsic: tf_warp_<op>(value)


@dataclass(frozen=True)
class RowReduceConfig:
    """Threads per block (per row): a power of two."""

    threads: int = 128


def _pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def default_config(n: int, max_threads: int = 256) -> RowReduceConfig:
    """About 4 values per thread, between one warp and 256 threads (or the target's limit)."""
    cap = _pow2_at_most(min(256, max_threads))
    threads = WARP
    while threads < cap and threads * 4 < n:
        threads *= 2
    return RowReduceConfig(min(threads, cap))


def config_space(n: int, max_threads: int = 256) -> ConfigSpace:
    """The `gpu.row_reduce` knob: threads per row, powers of two up to the target's limit."""
    d = default_config(n, max_threads)
    choices = {t for t in (32, 64, 128, 256, 512, 1024) if t <= max_threads} | {d.threads}
    return ConfigSpace("gpu.row_reduce", [Knob("threads", tuple(sorted(choices)))],
                       {"threads": d.threads})  # fmt: skip


def config_from(values: dict) -> RowReduceConfig:
    return RowReduceConfig(int(values["threads"]))


def uses_warp(target_kind: str, dtype: str) -> bool:
    """Whether the last 32 partials are combined with warp shuffles (CUDA, 32/64-bit types)."""
    return target_kind == "cuda" and dtype in _WARP_DTYPES


def warp_reduce(op: str, value: Any) -> Call:
    """The warp-collective reduction of `value` over the 32 lanes of a warp (every lane gets
    the result)."""
    return Call(f"{WARP_PREFIX}{op}", (value,), value.dtype, CallKind.EXTERN)


def block_reduce(
    f: Row, rows: int, n: int, op: str, threads: int, warp: bool, name: str
) -> tuple[Result, list[Tensor]]:
    """The `op` reduction of each row of `f` (`rows x n`) by `threads` threads: the row's result
    (`result(r, j)`: a read of the last stage by a thread working on column `j`) and the stages
    to schedule (`schedule_stages`)."""
    reducer = _REDUCERS[op]
    per = -(-n // threads)
    k = te.reduce_axis((0, per), f"{name}_k")

    def partial(r: Any, t: Any) -> Any:
        j = k * threads + t
        if per * threads == n:
            return reducer(f(r, j), axis=k)
        return reducer(f(r, te.min(j, n - 1)), axis=k, where=j < n)

    cur = te.compute((rows, threads), partial, name=f"{name}_part")
    stages, width = [cur], threads
    stop = WARP if warp and threads >= WARP else 1
    while width > stop:
        width //= 2
        cur = _tree_level(cur, width, reducer, f"{name}_{width}")
        stages.append(cur)
    if stop == WARP:
        prev = cur
        cur = te.compute((rows, WARP), lambda r, t: warp_reduce(op, prev[r, t]), name=f"{name}_w")
        stages.append(cur)
    last = cur
    if stop == WARP:
        return (lambda r, j: last[r, j % WARP]), stages
    return (lambda r, j: last[r, 0]), stages


def _tree_level(prev: Tensor, half: int, reducer: Any, name: str) -> Tensor:
    """One level of the tree: `half` threads each combine two partials of `prev`."""
    rows = int(prev.shape[0])
    return te.compute((rows, half), lambda r, t: reducer(prev[r, t], prev[r, t + half]), name=name)


def schedule_stages(s: Schedule, stages: list[Tensor], at: Tensor, axis: Any) -> None:
    """Each reduction stage in shared memory, computed in the block of `at` (at its block axis
    `axis`), its columns one per thread; the first stage accumulates in registers."""
    partials = [t for t in stages if t.op.reduce_axis]
    locals_ = [s.cache_write(t, "local") for t in partials]
    for t in stages:
        s[t].set_scope("shared")
        s[t].compute_at(s[at], axis)
        s[t].bind(s[t].op.axis[1], te.thread_axis("threadIdx.x"))
    for t, local in zip(partials, locals_, strict=True):
        s[local].compute_at(s[t], s[t].op.axis[1])


def schedule_row_output(s: Schedule, out: Tensor, stages: list[Tensor], threads: int) -> None:
    """`out` ([rows, n]): one block per row, its columns strided over the block's threads."""
    r, j = out.op.axis
    jo, ji = s[out].split(j, factor=threads)
    s[out].bind(r, te.thread_axis("blockIdx.x"))
    s[out].bind(ji, te.thread_axis("threadIdx.x"))
    schedule_stages(s, stages, out, r)
    del jo


def schedule_value_output(s: Schedule, out: Tensor, stages: list[Tensor]) -> None:
    """`out` (one value per row, any shape): one block per row, thread 0 writes the value (its
    reductions built without the warp stage, whose lanes a single reader would not keep)."""
    axes = list(out.op.axis)
    fused = s[out].fuse(*axes) if len(axes) > 1 else axes[0]
    row, one = s[out].split(fused, factor=1)
    s[out].bind(row, te.thread_axis("blockIdx.x"))
    s[out].bind(one, te.thread_axis("threadIdx.x"))
    schedule_stages(s, stages, out, row)


def softmax_rows(
    x: Tensor, config: RowReduceConfig, warp: bool, log: bool = False
) -> tuple[Tensor, list[Tensor]]:
    """(Log)softmax of each row of `x` ([rows, n]): the output and its reduction stages."""
    rows, n = (int(d) for d in x.shape)
    threads = config.threads
    mx, s1 = block_reduce(lambda r, j: x[r, j], rows, n, "max", threads, warp, "max")
    total, s2 = block_reduce(
        lambda r, j: te.exp(x[r, j] - mx(r, j)), rows, n, "sum", threads, warp, "sum"
    )
    if log:
        body = lambda r, j: x[r, j] - mx(r, j) - te.log(total(r, j))  # noqa: E731
    else:
        body = lambda r, j: te.exp(x[r, j] - mx(r, j)) / total(r, j)  # noqa: E731
    return te.compute((rows, n), body, name="softmax"), s1 + s2


def layer_norm_rows(
    x: Tensor,
    scale: Callable[[Any], Any] | None,
    bias: Callable[[Any], Any] | None,
    eps: float,
    config: RowReduceConfig,
    warp: bool,
) -> tuple[Tensor, list[Tensor]]:
    """Layer normalization of each row of `x` ([rows, n]), then `* scale(j) + bias(j)`: the
    mean and the variance (about the mean) are two block reductions."""
    rows, n = (int(d) for d in x.shape)
    threads, inv_n = config.threads, 1.0 / n
    total, s1 = block_reduce(lambda r, j: x[r, j], rows, n, "sum", threads, warp, "total")

    def centred(r: Any, j: Any) -> Any:
        return x[r, j] - total(r, j) * inv_n

    sq, s2 = block_reduce(
        lambda r, j: centred(r, j) * centred(r, j), rows, n, "sum", threads, warp, "sq"
    )

    def body(r: Any, j: Any) -> Any:
        v = centred(r, j) * te.rsqrt(sq(r, j) * inv_n + eps)
        v = v * scale(j) if scale is not None else v
        return v + bias(j) if bias is not None else v

    return te.compute((rows, n), body, name="layer_norm"), s1 + s2


def schedule_rows(out: Tensor, stages: list[Tensor], config: RowReduceConfig) -> Schedule:
    """The schedule of a row-wise output (softmax, layer norm) and its reduction stages."""
    s = te.create_schedule(out.op)
    schedule_row_output(s, out, stages, config.threads)
    return s


ROW_OPS = ("softmax", "log_softmax", "layer_norm", "sum", "max", "min", "prod")


def row_program(x: Tensor, op: str, config: RowReduceConfig, warp: bool) -> tuple[Tensor, Schedule]:
    """The template on its own (what the tuner measures): `op` (one of `ROW_OPS`) of each row of
    `x` ([rows, n]): a row-wise output, or one value per row for a plain reduction."""
    if op in ("softmax", "log_softmax"):
        out, stages = softmax_rows(x, config, warp, log=op == "log_softmax")
    elif op == "layer_norm":
        out, stages = layer_norm_rows(x, None, None, 1e-5, config, warp)
    else:
        rows, n = (int(d) for d in x.shape)
        total, stages = block_reduce(
            lambda r, j: x[r, j], rows, n, op, config.threads, False, "red"
        )
        out = te.compute((rows,), lambda r: total(r, 0), name="out")
        s = te.create_schedule(out.op)
        schedule_value_output(s, out, stages)
        return out, s
    return out, schedule_rows(out, stages, config)
