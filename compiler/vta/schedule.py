"""Conv2d/dense workloads for the accelerator, their schedule knobs, and the default chooser.

A workload is a quantized conv2d in blocked units (dense is the 1x1 conv of an Nx K x 1 x 1
input). A schedule tiles its output: ``tile_n`` batch blocks x ``tile_oc`` output-channel blocks
x ``tile_h`` output rows (all columns) per tile, the reduction in chunks of ``tile_ic``
input-channel blocks, over ``vthreads`` virtual threads; weights are either resident (loaded once)
or loaded per chunk. ``default_schedule`` picks the fitting schedule with the fewest
``estimated_cycles``.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> wl = Conv2dWorkload(n=1, ic=64, h=14, w=14, oc=64, kh=3, kw=3, pad_h=1, pad_w=1)
    >>> s = default_schedule(HWConfig.preset("pynq"), wl, vthreads=2)
    >>> s.vthreads, s.fits(HWConfig.preset("pynq"), wl)
    (2, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...hw.config import HWConfig
from ...hw.isa import MAX_PAD, MAX_XFER
from ..autotune.space import ConfigSpace, Knob
from ..schedule.primitives import ScheduleError
from .layout import blocks, group_blocks
from .passes import MAX_ITER
from .tile import memory_scopes


@dataclass(frozen=True)
class Conv2dWorkload:
    """A conv2d's shape: data (n, ic, h, w), weights (oc, ic, kh, kw), stride and zero padding
    (``pad_h`` rows above and ``pad_w`` columns left of the input; ``pad_bottom``/``pad_right``
    below and right of it, the same as above and left when None).

        ``pool_h``/``pool_w`` > 1: a non-overlapping max pooling (window = stride) fused after the
        epilogue; the output is then (ph, pw) = (oh // pool_h, ow // pool_w). ``channel_scales``:
        the requantization multiplies by one integer per output channel (per-channel weight scales),
        a second per-channel vector in the accumulator buffer beside the bias. ``groups`` > 1: a
        grouped (``groups == ic``: depthwise) conv whose weights are (oc, ic / groups, kh, kw); each
        output-channel block reduces only over the input-channel blocks of its groups
        (``layout.group_blocks``), and the schedule's ``tile_ic`` chunks that reduction.
    """

    n: int
    ic: int
    h: int
    w: int
    oc: int
    kh: int
    kw: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    pool_h: int = 1
    pool_w: int = 1
    channel_scales: bool = False
    groups: int = 1
    pad_bottom: int | None = None
    pad_right: int | None = None

    def __post_init__(self) -> None:
        names = ("n", "ic", "h", "w", "oc", "kh", "kw", "stride_h", "stride_w", "pool_h", "pool_w")
        for name in names:
            if getattr(self, name) < 1:
                raise ValueError(f"conv2d {name} must be >= 1, not {getattr(self, name)!r}")
        for name in ("pad_h", "pad_w", "pad_bottom", "pad_right"):
            pad = getattr(self, name)
            if pad is not None and not 0 <= pad <= MAX_PAD:  # None: as the top or left one
                raise ValueError(
                    f"conv2d {name} must be in [0, {MAX_PAD}] (the LOAD pad fields), not {pad!r}"
                )
        for name, same in (("pad_bottom", self.pad_h), ("pad_right", self.pad_w)):
            if getattr(self, name) == same:  # one form per padding: equal workloads compare equal
                object.__setattr__(self, name, None)
        if self.groups < 1 or self.ic % self.groups or self.oc % self.groups:
            raise ValueError(f"conv2d groups must be >= 1 and divide ic={self.ic} and "
                             f"oc={self.oc}, not {self.groups!r}")  # fmt: skip
        if self.oh < 1 or self.ow < 1:
            raise ValueError(f"conv2d output must be non-empty, not {self.oh}x{self.ow} ({self})")
        if self.pool_h > self.oh or self.pool_w > self.ow:
            raise ValueError(
                f"conv2d max_pool window {self.pool_h}x{self.pool_w} must fit the "
                f"{self.oh}x{self.ow} conv output"
            )

    @property
    def pad_b(self) -> int:
        """Zero rows below the input: ``pad_bottom``, or ``pad_h`` (symmetric) when None."""
        return self.pad_h if self.pad_bottom is None else self.pad_bottom

    @property
    def pad_r(self) -> int:
        """Zero columns right of the input: ``pad_right``, or ``pad_w`` when None."""
        return self.pad_w if self.pad_right is None else self.pad_right

    @property
    def symmetric(self) -> bool:
        return (self.pad_b, self.pad_r) == (self.pad_h, self.pad_w)

    @property
    def pads(self) -> tuple[int, int, int, int]:
        """(top, left, bottom, right), ONNX's order."""
        return self.pad_h, self.pad_w, self.pad_b, self.pad_r

    @property
    def oh(self) -> int:
        return (self.h + self.pad_h + self.pad_b - self.kh) // self.stride_h + 1

    @property
    def ow(self) -> int:
        return (self.w + self.pad_w + self.pad_r - self.kw) // self.stride_w + 1

    @property
    def ph(self) -> int:
        """Output rows after the fused pooling (``oh`` without pooling)."""
        return self.oh // self.pool_h

    @property
    def pw(self) -> int:
        """Output columns after the fused pooling (``ow`` without pooling)."""
        return self.ow // self.pool_w

    @property
    def pooled(self) -> bool:
        return self.pool_h * self.pool_w > 1

    @property
    def wp(self) -> int:
        """Columns of an input tile in INP: the padded width."""
        return self.w + self.pad_w + self.pad_r

    def rows_in(self, tile_h: int) -> int:
        """Input rows (padding included) that ``tile_h`` output rows read."""
        return (tile_h - 1) * self.stride_h + self.kh

    def blocked(self, cfg: HWConfig) -> tuple[int, int, int]:
        """(batch blocks, input-channel blocks, output-channel blocks) for ``cfg``."""
        return (
            blocks(self.n, cfg.batch),
            blocks(self.ic, cfg.block_in),
            blocks(self.oc, cfg.block_out),
        )

    def group_blocks(self, cfg: HWConfig) -> tuple[int, int]:
        """``(q, r)``: output block ``o`` reduces over input blocks ``(o // q) * r + j``, ``j <
        r`` (``layout.group_blocks``; raises ValueError when the groups do not fit the blocks).
        """
        return group_blocks(cfg, self.ic, self.oc, self.groups)

    def reduction_blocks(self, cfg: HWConfig) -> int:
        """Input-channel blocks each output block reduces over (all of them without groups)."""
        return self.group_blocks(cfg)[1]

    def in_blocks(self, cfg: HWConfig, tile_oc: int, tile_ic: int) -> int:
        """Input-channel blocks a tile of ``tile_oc`` output blocks loads per reduction chunk
        of ``tile_ic``: the chunk when the tile's output blocks share their input blocks
        (``q`` > 1: ``tile_oc`` divides ``q``); else output block ``o`` reads blocks
        ``o * r + [0, tile_ic)`` and the load covers the interval from the tile's first block
        to its last (the bound inference's region): ``(tile_oc - 1) * r + tile_ic`` blocks,
        those of the chunks in between included (depthwise, ``r`` = 1: ``tile_oc``)."""
        if self.groups == 1:
            return tile_ic
        q, r = self.group_blocks(cfg)
        if q > 1:
            return blocks(tile_oc, q) * tile_ic
        return (tile_oc - 1) * r + tile_ic


@dataclass(frozen=True)
class Conv2dSchedule:
    """The schedule knobs (what a tuner would search); see the module docstring."""

    tile_n: int = 1
    tile_h: int = 1
    tile_oc: int = 1
    tile_ic: int = 1
    vthreads: int = 1
    resident_weights: bool = False

    def check(self, cfg: HWConfig, wl: Conv2dWorkload) -> None:
        """Raise ScheduleError naming the knob when a tile is empty or larger than its dimension.

        Knobs need not divide their dimensions: the last tile along a dimension is then smaller
        (a ragged edge tile).
        """
        nb, _, ocb = wl.blocked(cfg)
        q, icb = wl.group_blocks(cfg)
        for knob, value, dim, what in (
            ("tile_n", self.tile_n, nb, "batch blocks"),
            ("tile_h", self.tile_h, wl.oh, "output rows"),
            ("tile_oc", self.tile_oc, ocb, "output-channel blocks"),
            ("tile_ic", self.tile_ic, icb, "input-channel blocks of a reduction"),
        ):
            if not isinstance(value, int) or not 1 <= value <= dim:
                raise ScheduleError(
                    f"{knob} must be in [1, {dim}] (the {what} of the conv2d), not {value!r}"
                )
        if wl.groups > 1 and q > 1 and q % self.tile_oc:  # one input span per tile: affine
            raise ScheduleError(
                f"tile_oc must divide the {q} output-channel blocks that read the same input "
                f"blocks (groups={wl.groups}), not {self.tile_oc}"
            )
        if self.vthreads not in (1, 2):
            raise ScheduleError(f"vthreads must be 1 or 2, not {self.vthreads!r}")
        check_thread_tokens(cfg, self.vthreads)
        if self.tile_n > 1 and self.tile_h * wl.ow > 1:
            raise ScheduleError(
                f"tile_n must be 1 when a tile has more than one output pixel "
                f"(tile_h={self.tile_h}, ow={wl.ow}), not {self.tile_n}"
            )
        if self.tile_h % wl.pool_h and self.tile_h != wl.oh:
            raise ScheduleError(
                f"tile_h must be a multiple of the fused pooling window's {wl.pool_h} rows "
                f"(or all {wl.oh} output rows), not {self.tile_h}"
            )
        counts = self.tile_counts(cfg, wl)
        several = [c for c in counts.values() if c > 1]
        if self.vthreads > 1 and several and all(c % self.vthreads for c in several):
            raise ScheduleError(
                f"{self.vthreads} virtual threads need a tile count along output channels, rows "
                f"or batch that they divide (the threads split one of them), not {counts}"
            )
        for h0 in range(0, wl.oh, self.tile_h):
            rows = input_rows(wl, h0, min(self.tile_h, wl.oh - h0))
            if rows[1] <= rows[0]:
                raise ScheduleError(
                    f"tile_h={self.tile_h} gives tiles made only of padding (output rows "
                    f"{h0}..{min(h0 + self.tile_h, wl.oh) - 1}); use a larger tile_h"
                )

    def footprint(
        self, cfg: HWConfig, wl: Conv2dWorkload, bias: bool = True, residual: bool = False
    ) -> dict[str, int]:
        """SRAM elements each scope needs, all virtual threads included, and micro-ops.

        ``residual``: a fused residual add, whose operand takes a second ACC tile.
        """
        _, _, ocb = wl.blocked(cfg)
        icb = wl.reduction_blocks(cfg)
        vt, kk = self.vthreads, wl.kh * wl.kw
        in_blocks = wl.in_blocks(cfg, self.tile_oc, self.tile_ic)
        inp = vt * self.tile_n * in_blocks * wl.rows_in(self.tile_h) * wl.wp
        acc_tile = self.tile_n * self.tile_oc * self.tile_h * wl.ow
        pool_tile = self.tile_n * self.tile_oc * (self.tile_h // wl.pool_h) * wl.pw
        acc = vt * (acc_tile * (2 if residual else 1) + (pool_tile if wl.pooled else 0))
        acc += (ocb if bias else 0) + (ocb if wl.channel_scales else 0)
        kernel = self.tile_oc * self.tile_ic * kk
        # A ragged edge along oc or ic adds micro-op kernels of its own shape.
        ragged = (1 + bool(ocb % self.tile_oc)) * (1 + bool(icb % self.tile_ic))
        if self.resident_weights:
            wgt = ocb * icb * kk
            kernels = vt * blocks(ocb, self.tile_oc) * blocks(icb, self.tile_ic)
        else:
            wgt, kernels = vt * kernel, vt * ragged
        return {"inp": inp, "wgt": wgt, "acc": acc, "uop": kernels * kernel + 8 * vt * ragged}

    def tile_counts(self, cfg: HWConfig, wl: Conv2dWorkload) -> dict[str, int]:
        """Tiles along output channels, rows and batch (ragged edge tiles included; with a
        fused pooling, rows past the last whole window are not computed)."""
        nb, _, ocb = wl.blocked(cfg)
        rows = blocks(wl.ph, self.tile_h // wl.pool_h)
        return {
            "tile_oc": blocks(ocb, self.tile_oc),
            "tile_h": rows,
            "tile_n": blocks(nb, self.tile_n),
        }

    def tiles(self, cfg: HWConfig, wl: Conv2dWorkload) -> int:
        """The number of output tiles."""
        return math.prod(self.tile_counts(cfg, wl).values())

    def fits(self, cfg: HWConfig, wl: Conv2dWorkload, residual: bool = False) -> bool:
        """Whether the buffers (modelled by ``footprint``) fit every SRAM of ``cfg``."""
        f = self.footprint(cfg, wl, residual=residual)
        scopes = memory_scopes(cfg)
        return all(f[k] <= scopes[k].depth for k in f) and _encodable(self, cfg, wl)


def check_thread_tokens(cfg: HWConfig, vthreads: int) -> None:
    """Raise ScheduleError when `cfg`'s token queues cannot hold a token per virtual thread:
    with one-token queues, two threads' streams deadlock (one thread's compute waits to push a
    token the load stage has not yet popped, while the fetch of that load waits behind it)."""
    if vthreads > cfg.dep_queue_depth:
        raise ScheduleError(
            f"{vthreads} virtual threads need token queues of at least {vthreads} entries (a "
            f"token per thread), but HWConfig {cfg.name!r} has dep_queue_depth="
            f"{cfg.dep_queue_depth}"
        )


def input_rows(wl: Conv2dWorkload, h0: int, th: int) -> tuple[int, int]:
    """The real (unpadded) input rows [lo, hi) that output rows h0..h0+th-1 read."""
    top = h0 * wl.stride_h - wl.pad_h
    return max(top, 0), min(top + wl.rows_in(th), wl.h)


def _encodable(s: Conv2dSchedule, cfg: HWConfig, wl: Conv2dWorkload) -> bool:
    """Field limits: loop extents, transfer sizes (merged copies are used only where they fit)."""
    return (
        s.tile_h <= MAX_ITER
        and wl.ow <= MAX_ITER
        and s.tile_h * wl.ow <= MAX_XFER
        and wl.oh * wl.ow <= MAX_XFER  # the output row stride of a tile's store
        and wl.w <= MAX_XFER
    )


def tile_sizes(n: int) -> list[int]:
    """Candidate tile sizes for a dimension of ``n``: ``ceil(n / k)`` for every tile count k.

    Every divisor is among them, and for each number of tiles the most even split (so a ragged
    edge tile is never needlessly small).
    """
    return sorted({blocks(n, k) for k in range(1, n + 1)})


# Cycles two threads lose handing buffers over with tokens, per instruction of a chunk and per
# chunk (fitted to cyclesim on ResNet-18's C2-C12 and the digits CNN's layers).
SYNC_CYCLES = 32
CHUNK_CYCLES = 96


def _split(dim: int, tile: int) -> list[tuple[int, int]]:
    """(count, extent) of the full tiles and the ragged edge tile of a dimension."""
    full, edge = divmod(dim, tile)
    return [(c, e) for c, e in ((full, tile), (1 if edge else 0, edge)) if c]


def estimated_cycles(cfg: HWConfig, wl: Conv2dWorkload, s: Conv2dSchedule) -> float:
    """A closed-form estimate of the program's cycles, for ranking schedules.

    Per tile: a GEMM reset, then per input-channel chunk its LOADs (per (n, ic) the input rows,
    unless resident the chunk's weights: latency per AXI burst, or mostly hidden behind the
    data with several bursts in flight, plus one beat per bus word) and its GEMM (a step per
    micro-op and pixel), then three ALU passes (with ``gemm_requant``: one requantizing GEMM
    step per output vector instead of those and the reset) and the STOREs. With one
    thread these run one after another (a tile's epilogue overlaps the next tile's first
    loads); with two, one thread's loads overlap the other's GEMM chunk by chunk, and each
    chunk costs ``CHUNK_CYCLES`` and each of its instructions ``SYNC_CYCLES`` of hand-over.
    """
    from ...sim.latency import TimingParams

    p = TimingParams.for_config(cfg)
    chunk = p.burst_bytes
    nb, _, ocb = wl.blocked(cfg)
    icb = wl.reduction_blocks(cfg)
    kk = wl.kh * wl.kw
    ib, wb, ob = cfg.inp_elem_bytes, cfg.wgt_elem_bytes, cfg.out_elem_bytes
    cols = min(wl.w, (wl.ow - 1) * wl.stride_w + wl.kw - wl.pad_w)  # the columns a tile reads

    def dma(rows: int, x: int, eb: int, contiguous: bool, latency: int, inflight: int = 1) -> float:
        bursts = -(-rows * x * eb // chunk) if contiguous else rows * -(-x * eb // chunk)
        data = rows * x * max(1, eb // p.bus_bytes)
        if inflight == 1 or bursts <= 1:
            return p.issue_cycles + bursts * latency + data
        # bursts in flight (sim/latency.py read_bursts_cycles): the latency once, then a burst
        # per max(its beats, (latency + its beats) / inflight) cycles
        u = data / bursts
        return p.issue_cycles + latency + u + (bursts - 1) * max(u, (latency + u) / inflight)

    reads = {"latency": p.dram_read_latency, "inflight": p.max_outstanding_reads}

    serial = pipelined = fill = last_store = 0.0
    for cn, tn in _split(nb, s.tile_n):
        for co, toc in _split(ocb, s.tile_oc):
            for ch, th in _split(wl.oh, s.tile_h):
                n = cn * co * ch
                pixels = tn * th * wl.ow
                rows = min(wl.rows_in(th), wl.h)
                loads = gemms = overlapped = 0.0
                for cc, tic in _split(icb, s.tile_ic):
                    ins = wl.in_blocks(cfg, toc, tic)
                    load = tn * ins * dma(rows, cols, ib, cols == wl.w, **reads)
                    per_row = tic < s.tile_ic  # a ragged chunk: a weight LOAD per output block
                    if not s.resident_weights:
                        wgt = dma(1 if per_row else toc, tic * kk, wb, False, **reads)
                        load += wgt * (toc if per_row else 1)
                    gemm = pixels * toc * tic * kk + p.gemm_latency + 1
                    loads, gemms = loads + cc * load, gemms + cc * gemm
                    insns = tn * ins + 2 + (toc - 1 if not s.resident_weights and per_row else 0)
                    # the hand-over costs at most what overlapping saves (a serial chunk)
                    sync = min(SYNC_CYCLES * insns + CHUNK_CYCLES, min(load, gemm))
                    overlapped += cc * (max(load, gemm) + sync)
                    fill = fill or min(load, gemm)  # the pipeline fills with one of them
                # a reset and three ALU passes, or (gemm_requant) the one requantizing step
                alu = (1 if cfg.gemm_requant else 4) * (toc * pixels + p.alu_latency + 2)
                last_store = tn * dma(toc, th * wl.ow, ob, th == wl.oh, p.dram_write_latency)
                serial += n * (loads + gemms + alu + last_store - min(alu + last_store, load))
                pipelined += n * (overlapped + alu)
    prologue = 0.0
    if s.resident_weights:
        prologue = dma(ocb, icb * kk, wb, True, **reads)
    if s.vthreads == 1:
        return prologue + serial
    return prologue + pipelined + fill + last_store


def candidate_schedules(
    cfg: HWConfig, wl: Conv2dWorkload, vthreads: int, residual: bool = False
) -> list[Conv2dSchedule]:
    """Every schedule with ``vthreads`` threads that passes ``check`` and fits the SRAMs.

    Tile sizes are ``tile_sizes`` of each dimension (divisors and even ragged splits).
    """
    nb, _, ocb = wl.blocked(cfg)
    icb = wl.reduction_blocks(cfg)
    out = []
    for tn in tile_sizes(nb) if wl.ow == 1 else [1]:
        for th in tile_sizes(wl.oh):
            for toc in tile_sizes(ocb):
                for tic in tile_sizes(icb):
                    for res in (True, False):
                        s = Conv2dSchedule(tn, th, toc, tic, vthreads, res)
                        try:
                            s.check(cfg, wl)
                        except ScheduleError:
                            continue
                        if s.fits(cfg, wl, residual):
                            out.append(s)
    return out


def default_schedule(
    cfg: HWConfig, wl: Conv2dWorkload, vthreads: int = 1, residual: bool = False
) -> Conv2dSchedule:
    """The fitting schedule with the least modelled cost (``residual``: a fused residual add).

    With 2 virtual threads, at least two tiles are required (or the second thread idles).

    Raises:
        ScheduleError: no schedule fits the SRAMs of ``cfg``.
    """
    if vthreads not in (1, 2):
        raise ScheduleError(f"vthreads must be 1 or 2, not {vthreads!r}")
    cands = candidate_schedules(cfg, wl, vthreads, residual)
    if vthreads > 1:
        cands = [s for s in cands if s.tiles(cfg, wl) > 1] or cands
    if not cands and vthreads > 1:  # a second thread's buffers do not fit: one thread
        return default_schedule(cfg, wl, 1, residual)
    if not cands:
        raise ScheduleError(f"no tiling of {wl} fits the SRAMs of HWConfig {cfg.name!r}: "
                            f"{fit_problem(cfg, wl, residual)}")  # fmt: skip
    return min(cands, key=lambda s: (estimated_cycles(cfg, wl, s), -s.tile_h, -s.tile_oc))


def fit_problem(cfg: HWConfig, wl: Conv2dWorkload, residual: bool = False) -> str | None:
    """None when some schedule of `wl` fits the SRAMs and instruction fields of `cfg` (one
    thread), else why the smallest tiles do not: a quick test for the partition, which must
    leave such a layer on the CPU rather than fail to compile it.

    The footprint grows with every knob, so the smallest tile (one block of each kind, weights
    streamed) decides, except that ``tile_h`` must hold whole pooling windows and may not
    cover only padding rows: every row count that passes ``check`` is tried.
    """
    first = None
    for th in tile_sizes(wl.oh):
        sched = Conv2dSchedule(1, th, 1, 1, 1, False)
        try:
            sched.check(cfg, wl)
        except ScheduleError:
            continue
        if sched.fits(cfg, wl, residual):
            return None
        first = first or sched
    if first is None:
        return "no row tiling passes the schedule checks"
    need = first.footprint(cfg, wl, residual=residual)
    scopes = memory_scopes(cfg)
    over = [f"{k} {need[k]} > {scopes[k].depth}" for k in need if need[k] > scopes[k].depth]
    if over:
        return (
            f"the smallest tile ({first.tile_h} output row(s), one channel block each way) "
            f"needs more SRAM entries than HWConfig {cfg.name!r} has: {', '.join(over)}"
        )
    fields = [
        (wl.ow, MAX_ITER, "output columns", "loop iterations"),
        (first.tile_h * wl.ow, MAX_XFER, "output pixels of one row tile", "elements a transfer"),
        (wl.oh * wl.ow, MAX_XFER, "output pixels (a store's row stride)", "elements a transfer"),
        (wl.w, MAX_XFER, "input columns", "elements a transfer"),
    ]
    over = [f"{n} {what} > {limit} {unit}" for n, limit, what, unit in fields if n > limit]
    return f"an instruction field overflows: {', '.join(over) or 'a loop or transfer'}"


def config_space(cfg: HWConfig, wl: Conv2dWorkload, residual: bool = False,
                 vthreads: int = 2) -> ConfigSpace:  # fmt: skip
    """The knobs a tuner searches for one accelerator conv2d/dense: the four tile sizes, virtual
    threads and resident weights. Points that fail ``Conv2dSchedule.check`` or overflow an SRAM
    are invalid. The default point is ``default_schedule(cfg, wl, vthreads, residual)``.
    """
    nb, _, ocb = wl.blocked(cfg)
    icb = wl.reduction_blocks(cfg)
    knobs = [
        Knob("tile_n", tuple(tile_sizes(nb)) if wl.ow == 1 else (1,)),
        Knob("tile_h", tuple(tile_sizes(wl.oh))),
        Knob("tile_oc", tuple(tile_sizes(ocb))),
        Knob("tile_ic", tuple(tile_sizes(icb))),
        Knob("vthreads", (1, 2)),
        Knob("resident_weights", (False, True)),
    ]

    def constraint(v: dict) -> str | None:
        sched = schedule_from(v)
        try:
            sched.check(cfg, wl)
        except ScheduleError as exc:
            return str(exc)
        if not sched.fits(cfg, wl, residual):
            return "the buffers overflow an SRAM"
        return None

    default = config_values(default_schedule(cfg, wl, vthreads, residual))
    # "lowering" chose between TE and a hand-written tile program until there was one lowering.
    return ConfigSpace("vta.conv2d", knobs, default, constraint, retired=("lowering",))


def schedule_from(values: dict) -> Conv2dSchedule:
    """The schedule of a point of ``config_space`` (other keys, such as the ``lowering`` of
    tuning logs written when there were two lowerings, are ignored)."""
    return Conv2dSchedule(int(values["tile_n"]), int(values["tile_h"]), int(values["tile_oc"]),
                          int(values["tile_ic"]), int(values["vthreads"]),
                          bool(values["resident_weights"]))  # fmt: skip


def config_values(sched: Conv2dSchedule) -> dict:
    """The point of ``config_space`` for a schedule."""
    return {"tile_n": sched.tile_n, "tile_h": sched.tile_h, "tile_oc": sched.tile_oc,
            "tile_ic": sched.tile_ic, "vthreads": sched.vthreads,
            "resident_weights": sched.resident_weights}  # fmt: skip
