"""Max pooling on the accelerator's tensor ALU: int8 windows loaded into ACC, MAX over them.

Each tile covers one batch block, up to ``tile_c`` channel blocks and up to ``tile_h`` output
rows (all columns; the last tile along a dimension may be smaller):
1. one LOAD ``ACC_8BIT`` brings the input rows the tile reads (int8, sign-extended) into the
   ACC buffer ``win`` laid out [c][row][col];
2. a GEMM reset zeroes the output buffer ``out`` ([c][row][col]); an ALU ADD copies each
   window's first element into it and one ALU MAX, with a micro-op per other window element,
   takes the maximum (loops walk channels, rows and columns with the strides);
3. a STORE writes the int8 OUT view.

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

from dataclasses import dataclass

import numpy as np

from ....hw.config import HWConfig
from ....runtime.device.vta import RunResult, run_image
from ....runtime.program import ProgramImage
from ...codegen.vta import generate_program
from ...codegen.vta_passes import MAX_ITER
from ...codegen.vta_tile import Alloc, Alu, AluOp, Gemm, Load, Loop, Store, TileProgram, Uop
from ...schedule.primitives import ScheduleError
from .layout import blocks, pack_nchw, unpack_nchw
from .reference import max_pool2d_reference
from .schedule import MAX_XFER, tile_sizes

__all__ = ["PoolKernel", "PoolSchedule", "PoolWorkload", "default_pool_schedule", "max_pool2d"]

INPUT, OUTPUT = "X", "Y"


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

    def acc_elements(self, wl: PoolWorkload) -> int:
        """ACC elements of the input and output buffers, all virtual threads included."""
        per_c = wl.rows_in(self.tile_h) * wl.w + self.tile_h * wl.ow
        return self.vthreads * self.tile_c * per_c

    def fits(self, cfg: HWConfig, wl: PoolWorkload) -> bool:
        """Whether the buffers fit ACC and every copy and loop fits its instruction fields."""
        rows = wl.rows_in(self.tile_h) * wl.w
        return (
            self.acc_elements(wl) <= cfg.acc_depth
            and max(rows, wl.h * wl.w, wl.oh * wl.ow) <= MAX_XFER
            and max(self.tile_h, wl.ow) <= MAX_ITER
        )

    def tiles(self, cfg: HWConfig, wl: PoolWorkload) -> int:
        nb, cb = wl.blocked(cfg)
        return nb * blocks(cb, self.tile_c) * blocks(wl.oh, self.tile_h)


def default_pool_schedule(cfg: HWConfig, wl: PoolWorkload, vthreads: int = 1) -> PoolSchedule:
    """The fitting schedule with the fewest tiles (at least two with 2 virtual threads).

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
        cands = [s for s in cands if s.tiles(cfg, wl) > 1] or cands
    if not cands:
        need = PoolSchedule(1, 1, vthreads).acc_elements(wl)
        raise ScheduleError(
            f"no tiling of {wl} fits HWConfig {cfg.name!r}: one output row needs {need} ACC "
            f"elements, the ACC buffer holds {cfg.acc_depth}"
        )
    return min(cands, key=lambda s: (s.tiles(cfg, wl), -s.tile_h))


def pool_tile_program(
    cfg: HWConfig, wl: PoolWorkload, sched: PoolSchedule, name: str = "max_pool2d"
) -> TileProgram:
    """The tile program of a scheduled max pooling (see the module docstring).

    Raises:
        ScheduleError: a knob out of range.
    """
    sched.check(cfg, wl)
    nb, cb = wl.blocked(cfg)
    win = sched.tile_c * wl.rows_in(sched.tile_h) * wl.w
    allocs = (Alloc("win", "acc", win), Alloc("out", "acc", sched.tile_c * sched.tile_h * wl.ow))
    tiles = tuple(
        _tile(wl, cb, n, c0, min(sched.tile_c, cb - c0), h0, min(sched.tile_h, wl.oh - h0))
        for n in range(nb)
        for c0 in range(0, cb, sched.tile_c)
        for h0 in range(0, wl.oh, sched.tile_h)
    )
    elem = (cfg.batch, cfg.block_out)
    return TileProgram(
        name,
        allocs,
        (),
        tiles,
        inputs=((INPUT, (nb, cb, wl.h, wl.w, *elem), "int8"),),
        outputs=((OUTPUT, (nb, cb, wl.oh, wl.ow, *elem), "int8"),),
        vthreads=sched.vthreads,
    )


def _tile(wl: PoolWorkload, cb: int, n: int, c0: int, tc: int, h0: int, th: int) -> tuple:
    """Phases: load and reset, the window reduction, the store."""
    rows_in, chan = wl.rows_in(th), th * wl.ow
    dram = ((n * cb + c0) * wl.h + h0 * wl.stride_h) * wl.w
    load = Load(INPUT, "win", 0, dram, tc, rows_in * wl.w, wl.h * wl.w, acc_8bit=True)
    reset = Gemm("out", "win", "win", (Uop(),), (Loop(tc * chan, 1, 0),), reset=True)
    loops = (
        Loop(tc, chan, rows_in * wl.w),
        Loop(th, wl.ow, wl.stride_h * wl.w),
        Loop(wl.ow, 1, wl.stride_w),
    )
    window = [Uop(0, i * wl.w + j, 0) for i in range(wl.kh) for j in range(wl.kw)]
    reduce = [Alu(AluOp.ADD, "out", (window[0],), loops, src="win")]
    if len(window) > 1:
        reduce.append(Alu(AluOp.MAX, "out", tuple(window[1:]), loops, src="win"))
    out_dram = ((n * cb + c0) * wl.oh + h0) * wl.ow
    store = Store(OUTPUT, "out", 0, out_dram, tc, chan, wl.oh * wl.ow)
    return ((load, reset), tuple(reduce), (store,))


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
        outputs, result = run_image(self.image, {INPUT: self.pack(x)}, backend,
                                    **options)  # fmt: skip
        return unpack_nchw(self.config, outputs[OUTPUT], self.workload.n, self.workload.c), result


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
    prog = pool_tile_program(cfg, wl, sched, name)
    return PoolKernel(cfg, wl, sched, prog, generate_program(prog, cfg))
