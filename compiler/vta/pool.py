"""Max pooling on the accelerator's tensor ALU, written in TE and lowered by ``vta.lower``.

``pool_te(cfg, workload, schedule)`` declares it in TE and schedules it with the accelerator's
recipe (as ``operators.conv2d_te`` does conv2d): a zero stage (GEMM reset), then a stage per
window element, ``acc + x[...]`` for the first and ``max(acc, x[...])`` for the others (ALU
ADD and MAX, in place; ``vta.lower`` merges the MAX stages into one instruction with a
micro-op per element), computed in ``local.acc_buffer`` with ``pragma alu`` at tiles of one
batch block x ``tile_c`` channel blocks x ``tile_h`` output rows (all columns; the last tile
along a dimension may be smaller). A tile's input rows are copied into the accumulators by a
LOAD ``ACC_8BIT`` (``cache_read`` + ``pragma dma_copy``) through the input's flat rows x
columns view: one copy per tile. Two virtual threads split a dimension with an even number of
whole tiles.

Max pooling commutes with every monotonic requantization, so it runs on int8 values and equals
``compiler.quantize.max_pool2d_int8`` (no padding) bit for bit. Data use the blocked layout of
an operator's output, ``NCHW{batch}n{block_out}c`` (a conv's output feeds it unchanged).

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> x = np.random.default_rng(0).integers(-128, 128, (1, 8, 6, 6), dtype=np.int8)
    >>> k = max_pool2d(HWConfig.preset("tiny"), x.shape, 2, vthreads=2)
    >>> y, _ = k.run(x)
    >>> y.shape, bool(np.array_equal(y, k.reference(x)))
    ((1, 8, 3, 3), True)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...hw.config import HWConfig
from ...hw.isa import MAX_XFER
from ...runtime.device.vta import RunResult, run_image
from ...runtime.program import ProgramImage
from .. import te, tir
from ..schedule.primitives import ScheduleError
from .codegen import generate_program
from .layout import blocks, pack_nchw, unpack_nchw
from .lower import VTA_PIPELINE, lower_to_tile_program
from .passes import MAX_ITER
from .reference import max_pool2d_reference
from .schedule import check_thread_tokens, tile_sizes
from .tile import TileProgram

__all__ = ["PoolKernel", "PoolSchedule", "PoolWorkload", "default_pool_schedule", "max_pool2d"]

INPUT, OUTPUT = "X", "Y"
ACC = "local.acc_buffer"


@dataclass(frozen=True)
class PoolWorkload:
    """A max pooling: data (n, c, h, w), window (kh, kw), stride, no padding."""

    n: int
    c: int
    h: int
    w: int
    kh: int
    kw: int
    stride_h: int
    stride_w: int

    def __post_init__(self) -> None:
        for name in ("n", "c", "h", "w", "kh", "kw", "stride_h", "stride_w"):
            if getattr(self, name) < 1:
                raise ValueError(f"max_pool2d {name} must be >= 1, not {getattr(self, name)!r}")
        if self.kh > self.h or self.kw > self.w:
            raise ValueError(
                f"max_pool2d window {self.kh}x{self.kw} must fit the {self.h}x{self.w} input "
                "(no padding)"
            )

    @property
    def oh(self) -> int:
        return (self.h - self.kh) // self.stride_h + 1

    @property
    def ow(self) -> int:
        return (self.w - self.kw) // self.stride_w + 1

    def rows_in(self, tile_h: int) -> int:
        """Input rows that ``tile_h`` output rows read."""
        return (tile_h - 1) * self.stride_h + self.kh

    def span(self, tile_h: int) -> int:
        """Input elements per channel block that ``tile_h`` output rows read, in the flat
        (rows x columns) view: from a first row's first column to a last row's last column."""
        return (self.rows_in(tile_h) - 1) * self.w + (self.ow - 1) * self.stride_w + self.kw

    def blocked(self, cfg: HWConfig) -> tuple[int, int]:
        """(batch blocks, channel blocks) for ``cfg`` (channels in BLOCK_OUT blocks)."""
        return blocks(self.n, cfg.batch), blocks(self.c, cfg.block_out)


@dataclass(frozen=True)
class PoolSchedule:
    """Tiling knobs: channel blocks and output rows per tile, virtual threads."""

    tile_c: int = 1
    tile_h: int = 1
    vthreads: int = 1

    def check(self, cfg: HWConfig, wl: PoolWorkload) -> None:
        """Raise ScheduleError naming the knob when it is out of range."""
        _, cb = wl.blocked(cfg)
        for knob, value, dim, what in (
            ("tile_c", self.tile_c, cb, "channel blocks"),
            ("tile_h", self.tile_h, wl.oh, "output rows"),
        ):
            if not isinstance(value, int) or not 1 <= value <= dim:
                raise ScheduleError(
                    f"{knob} must be in [1, {dim}] (the {what} of the max_pool2d), not {value!r}"
                )
        if self.vthreads not in (1, 2):
            raise ScheduleError(f"vthreads must be 1 or 2, not {self.vthreads!r}")
        check_thread_tokens(cfg, self.vthreads)
        if self.vthreads > 1 and self.thread_axis(cfg, wl) is None:
            raise ScheduleError(
                f"max_pool2d: {self.vthreads} virtual threads need a dimension with an even "
                f"number of whole tiles (tile_c={self.tile_c} of {cb} channel blocks, tile_h="
                f"{self.tile_h} of {wl.oh} rows, {wl.blocked(cfg)[0]} batch blocks)"
            )

    def thread_axis(self, cfg: HWConfig, wl: PoolWorkload) -> int | None:
        """The tile dimension (0 batch, 1 channels, 2 rows) split between the virtual threads:
        the innermost whose tiles are whole and of a count that ``vthreads`` divides."""
        nb, cb = wl.blocked(cfg)
        sizes = ((1, nb), (self.tile_c, cb), (self.tile_h, wl.oh))
        ok = [d for d, (t, n) in enumerate(sizes) if n % t == 0 and (n // t) % self.vthreads == 0]
        return ok[-1] if ok else None

    def acc_elements(self, wl: PoolWorkload) -> int:
        """ACC elements of the input and output buffers, all virtual threads included."""
        per_c = wl.span(self.tile_h) + self.tile_h * wl.ow
        return self.vthreads * self.tile_c * per_c

    def fits(self, cfg: HWConfig, wl: PoolWorkload) -> bool:
        """Whether the buffers fit ACC and every copy and loop fits its instruction fields."""
        return (
            self.acc_elements(wl) <= cfg.acc_depth
            and max(wl.h * wl.w, wl.oh * wl.ow) <= MAX_XFER
            and max(self.tile_h, wl.ow) <= MAX_ITER
        )

    def tiles(self, cfg: HWConfig, wl: PoolWorkload) -> int:
        nb, cb = wl.blocked(cfg)
        return nb * blocks(cb, self.tile_c) * blocks(wl.oh, self.tile_h)


def default_pool_schedule(cfg: HWConfig, wl: PoolWorkload, vthreads: int = 1) -> PoolSchedule:
    """The fitting schedule with the fewest tiles (with 2 virtual threads, at least two, and a
    dimension of an even number of whole tiles; with none, one thread).

    Raises:
        ScheduleError: not even one output row of one channel block fits the ACC buffer.
    """
    if vthreads not in (1, 2):
        raise ScheduleError(f"vthreads must be 1 or 2, not {vthreads!r}")
    _, cb = wl.blocked(cfg)
    cands = [
        s
        for tc in tile_sizes(cb)
        for th in tile_sizes(wl.oh)
        if (s := PoolSchedule(tc, th, vthreads)).fits(cfg, wl)
    ]
    if vthreads > 1:
        cands = [s for s in cands if s.tiles(cfg, wl) > 1 and s.thread_axis(cfg, wl) is not None]
        cands = cands if vthreads <= cfg.dep_queue_depth else []  # a token per thread
        if not cands:
            return default_pool_schedule(cfg, wl, 1)
    if not cands:
        need = PoolSchedule(1, 1, vthreads).acc_elements(wl)
        raise ScheduleError(
            f"no tiling of {wl} fits HWConfig {cfg.name!r}: one output row needs {need} ACC "
            f"elements, the ACC buffer holds {cfg.acc_depth}"
        )
    return min(cands, key=lambda s: (s.tiles(cfg, wl), -s.tile_h))


def pool_te(cfg: HWConfig, wl: PoolWorkload, sched: PoolSchedule) -> tuple[Any, list[te.Tensor]]:
    """The TE schedule and parameters of a scheduled max pooling (see the module docstring).

    Raises:
        ScheduleError: a knob out of range.
    """
    sched.check(cfg, wl)
    nb, cb = wl.blocked(cfg)
    shape = (nb, cb, wl.oh, wl.ow, cfg.batch, cfg.block_out)
    x = te.placeholder((nb, cb, wl.h * wl.w, cfg.batch, cfg.block_out), "int8", name=INPUT)
    acc = zero = te.compute(shape, lambda *i: te.const(0, "int32"), name="pool")
    stages = []
    for i in range(wl.kh):
        for j in range(wl.kw):
            acc = te.compute(shape, _window_step(wl, x, acc, i, j), name=f"max{i}_{j}")
            stages.append(acc)
    y = te.compute(shape, lambda *i: te.cast(stages[-1][i], "int8"), name=OUTPUT)
    s = te.create_schedule(y.op)
    n, c, h, *_ = s[y].op.axis
    co, ci = s[y].split(c, factor=sched.tile_c)
    ho, hi = s[y].split(h, factor=sched.tile_h)
    s[y].reorder(n, co, ho, ci, hi)
    tile = ho
    if sched.vthreads > 1:
        axis = (n, co, ho)[sched.thread_axis(cfg, wl)]
        thread, inner = s[y].split(axis, nparts=sched.vthreads)
        s[y].bind(thread, te.thread_axis("vthread"))
        tile = inner if axis is ho else tile
    s[y].pragma(ci, "dma_copy")
    for t in (zero, *stages):
        s[t].set_scope(ACC)
        s[t].compute_at(s[y], tile)
    for t in stages:
        s[t].pragma(s[t].op.axis[0], "alu")
    win = s.cache_read(x, ACC, stages)
    s[win].compute_at(s[y], tile)
    s[win].pragma(s[win].op.axis[0], "dma_copy")
    # The copy before the reset (stages attached at one loop come in stage order): the ACC_8BIT
    # LOAD, which runs on the compute module, then overlaps the previous tile's STORE.
    s.stages.remove(s[win])
    s.stages.insert(s.stages.index(s[zero]), s[win])
    return s, [x, y]


def _window_step(wl: PoolWorkload, x: te.Tensor, acc: te.Tensor, i: int, j: int) -> Any:
    """The stage of window element (i, j): ``acc + x`` for the first one, else ``max(acc, x)``."""

    def f(n: Any, c: Any, oy: Any, ox: Any, b: Any, k: Any) -> Any:
        flat = (oy * wl.stride_h + i) * wl.w + ox * wl.stride_w + j
        v = te.cast(x[n, c, flat, b, k], "int32")
        return acc[n, c, oy, ox, b, k] + v if i == j == 0 else te.max(acc[n, c, oy, ox, b, k], v)

    return f


@dataclass
class PoolKernel:
    """A compiled max pooling: its program image and what it needs to run and check."""

    config: HWConfig
    workload: PoolWorkload
    schedule: PoolSchedule
    tile_program: TileProgram
    image: ProgramImage

    def pack(self, x: np.ndarray) -> np.ndarray:
        """NCHW int8 -> the packed input slot (``NCHW{batch}n{block_out}c``)."""
        x = np.asarray(x)
        wl = self.workload
        want = (wl.n, wl.c, wl.h, wl.w)
        if x.shape != want or x.dtype != np.int8:
            raise ValueError(f"max_pool2d input must be int8 of shape {want}, not {x.dtype} "
                             f"{x.shape}")  # fmt: skip
        return pack_nchw(self.config, x, self.config.block_out)

    def reference(self, x: np.ndarray) -> np.ndarray:
        """The int8 oracle (``compiler.quantize.max_pool2d_int8``)."""
        wl = self.workload
        return max_pool2d_reference(x, (wl.kh, wl.kw), (wl.stride_h, wl.stride_w))

    def run(
        self, x: np.ndarray, backend: str = "sim", **options: object
    ) -> tuple[np.ndarray, RunResult]:
        """Run on a device backend: (int8 NCHW output, the run's result)."""
        outputs, result = run_image(self.image, self.inputs(x), backend, **options)
        return self.unpack(outputs[OUTPUT]), result

    def inputs(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """The image's input slot for `x`, packed (what `run` gives the device; the output slot
        is ``Y``)."""
        return {INPUT: self.pack(x)}

    def unpack(self, y: np.ndarray) -> np.ndarray:
        """The packed output slot -> NCHW."""
        return unpack_nchw(self.config, y, self.workload.n, self.workload.c)


def _pair(v: int | tuple[int, int], what: str) -> tuple[int, int]:
    pair = (v, v) if isinstance(v, (int, np.integer)) else tuple(v)
    if len(pair) != 2:
        raise ValueError(f"max_pool2d {what} must be an int or a pair, not {v!r}")
    return int(pair[0]), int(pair[1])


def max_pool2d(
    cfg: HWConfig,
    data_shape: tuple[int, int, int, int],
    kernel: int | tuple[int, int] = 2,
    stride: int | tuple[int, int] | None = None,
    *,
    schedule: PoolSchedule | None = None,
    vthreads: int = 1,
) -> PoolKernel:
    """Compile an int8 max pooling (no padding; stride defaults to the window) to an image.

    Raises:
        ValueError: a bad shape, or a window that does not fit the input.
        ScheduleError: a schedule out of range, or no tiling fits the ACC buffer.
        LoweringError: a given schedule whose buffers overflow ACC.
    """
    (kh, kw) = _pair(kernel, "kernel")
    (sh, sw) = _pair(kernel if stride is None else stride, "stride")
    wl = PoolWorkload(*(int(d) for d in data_shape), kh, kw, sh, sw)
    sched = schedule if schedule is not None else default_pool_schedule(cfg, wl, vthreads)
    name = f"max_pool2d_{wl.n}x{wl.c}x{wl.h}x{wl.w}_k{kh}x{kw}s{sh}x{sw}_vt{sched.vthreads}"
    s, args = pool_te(cfg, wl, sched)
    prog = lower_to_tile_program(tir.lower(s, args, name=name, passes=VTA_PIPELINE), cfg, {}, name)
    # The input slot keeps its blocked NCHW shape (the flat view has the same bytes).
    prog = replace(prog, inputs=((INPUT, (*wl.blocked(cfg), wl.h, wl.w, cfg.batch,
                                          cfg.block_out), "int8"),))  # fmt: skip
    return PoolKernel(cfg, wl, sched, prog, generate_program(prog, cfg))
