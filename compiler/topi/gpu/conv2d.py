"""Convolutions on GPUs (NCHW, NCDHW; grouped): three templates, picked by shape
(`template_for`). A 1-D convolution is run as a 2-D one of height 1 (the graph strategy views
its tensors so); a 3-D one has its depth as a leading spatial axis; a grouped one (`groups` in
the `Geometry`) computes each group's output channels from that group's input channels.

Direct (`conv2d_direct`, tuning template `gpu.conv2d`): each block computes `tk * vthread`
output channels of one group by a `ty x tx` tile of one output plane (rows and columns; a 3-D
convolution's depth, like the images and groups, on the grid's z axis); the group's input
channels are walked `c_tile` at a time, the tile's input window (halo and padding included,
every depth tap of a 3-D one) and its weights copied into shared memory by the block's threads,
then each thread accumulates its outputs (virtual threads along the channels) in registers.

Implicit GEMM (`conv2d_gemm`, tuning template `gpu.conv2d_gemm`): per image `n` and group `g`,
`out[n, g, oc, p] = sum_k W[g, oc, k] * col[n, g, k, p]` with `k = (c, *taps)` and `p` the
output position: `col` is the im2col matrix, never stored: the dense template's cooperative
copies into shared memory read it straight from the (zero-padded) input, so each block stages a
`k_tile x cols` tile of input windows and a `rows x k_tile` tile of weights, and each thread
accumulates `vthread^2` outputs in registers. Images x groups are the grid's z axis
(`dense.batch_dense`); the output `[n * groups, oc / groups, pixels]` is NCHW as it is. The
knobs are the dense template's, for one group's `[oc/g, c/g*taps] x [c/g*taps, pixels]` product.

Depthwise (`depthwise_conv2d`, tuning template `gpu.depthwise_conv2d`; 2-D): each block
computes a `ty x tx` tile of one channel's output, its input window (the tile's receptive
field, halo included) copied into shared memory by the block's threads first; each thread then
reads its `r x s` taps from shared memory (neighbouring threads share most of them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ... import te
from ...autotune.space import ConfigSpace, Knob
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor
from . import dense as gpu_dense


@dataclass(frozen=True)
class Geometry:
    """Padding before, strides and dilations per spatial axis (a 3-D convolution's depth, then
    rows and columns), the output's spatial sizes, and the channel groups."""

    pads: tuple[int, ...]
    strides: tuple[int, ...]
    dil: tuple[int, ...]
    out: tuple[int, ...]
    groups: int = 1


def _window_read(
    x: Tensor, geo: Geometry, kernel: Sequence[int]
) -> Callable[[Any, Any, Sequence[Any], Sequence[Any]], Any]:
    """`read(n, c, pos, taps)`: the input under tap `taps` of output position `pos`, zero in
    the padding (the address clamped so that no read leaves the tensor)."""
    sizes = [int(d) for d in x.shape[2:]]
    spans = zip(sizes, geo.pads, geo.strides, geo.dil, geo.out, kernel, strict=True)
    guarded = any(p > 0 or (o - 1) * s + (k - 1) * d - p >= n for n, p, s, d, o, k in spans)

    def read(n: Any, c: Any, pos: Sequence[Any], taps: Sequence[Any]) -> Any:
        where = zip(pos, taps, geo.strides, geo.dil, geo.pads, strict=True)
        idx = [o * s + t * d - p for o, t, s, d, p in where]
        return _zero_outside(x, n, c, idx) if guarded else x[(n, c, *idx)]

    return read


def _zero_outside(x: Tensor, n: Any, c: Any, idx: Sequence[Any]) -> Any:
    """`x[n, c, *idx]`, zero where `idx` falls outside the input (`te.clamped_read`)."""
    return te.clamped_read(x.__getitem__, (n, c), idx, x.shape[2:], te.const(0, x.dtype))


def conv2d_gemm(
    x: Tensor, w: Tensor, geo: Geometry, epilogue: Callable[..., Any] | None = None
) -> tuple[Tensor, Tensor, list[Tensor]]:
    """(acc, out, inline) of the implicit GEMM: `acc` `[n * groups, oc / groups, pixels]`, `out`
    after the `epilogue(value, n, oc, *pos)`, and the operand views (`lhs`, `col`) to inline."""
    nb, (oc, cg, *kernel) = int(x.shape[0]), (int(d) for d in w.shape)
    g, taps = geo.groups, (cg, *kernel)
    per = oc // g
    read = _window_read(x, geo, kernel)

    def image(q: Any) -> Any:
        return q if g == 1 else q // g

    def channel(q: Any, i: Any, size: int) -> Any:  # of group q % g, its i-th
        return i if g == 1 else (q % g) * size + i

    def flhs(q: Any, i: Any, k: Any) -> Any:
        return w[(channel(q, i, per), *te.unravel(k, taps))]

    def fcol(q: Any, k: Any, p: Any) -> Any:
        c, *tap = te.unravel(k, taps)
        return read(image(q), channel(q, c, cg), te.unravel(p, geo.out), tap)

    lhs = te.compute((nb * g, per, math.prod(taps)), flhs, name="lhs")
    col = te.compute((nb * g, math.prod(taps), math.prod(geo.out)), fcol, name="col")
    epi = None
    if epilogue is not None:

        def epi(v: Any, q: Any, i: Any, p: Any) -> Any:
            return epilogue(v, image(q), channel(q, i, per), *te.unravel(p, geo.out))

    acc, out = gpu_dense.batch_dense(lhs, col, epi)
    return acc, out, [lhs, col]


def schedule_conv2d_gemm(
    s: Schedule, acc: Tensor, out: Tensor, inline: Sequence[Tensor], config: Any
) -> Schedule:
    """The dense template's schedule of the implicit GEMM (`config`: a `DenseGPUConfig`)."""
    gpu_dense.schedule_dense(s, out, None if acc is out else acc, config)
    for t in inline:
        s[t].compute_inline()
    return s


def gemm_shape(w_shape: Sequence[int], geo: Geometry) -> tuple[int, int, int]:
    """(m, n, k) of one group's implicit GEMM: output channels, output positions, taps per
    output."""
    oc, *taps = (int(d) for d in w_shape)
    return oc // geo.groups, math.prod(geo.out), math.prod(taps)


def conv2d_config_space(w_shape: Sequence[int], geo: Geometry, max_threads: int) -> ConfigSpace:
    """The `gpu.conv2d_gemm` knobs: the dense template's for the implicit GEMM."""
    m, n, k = gemm_shape(w_shape, geo)
    return gpu_dense.config_space(m, n, k, max_threads, name="gpu.conv2d_gemm")


# ---- direct ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DirectConvConfig:
    """A block's threads along output channels (`tk`), rows (`ty`) and columns (`tx`), virtual
    threads along output channels, and the input channels staged per shared-memory tile."""

    tk: int = 4
    ty: int = 4
    tx: int = 16
    vthread: int = 2
    c_tile: int = 4


# What a default direct or depthwise tile may stage in shared memory: half of OpenCL's default
# limit, so that a large kernel (a 3-D stem's 7x7x7 window) still fits every target's default.
DIRECT_SHARED_BUDGET = 16 * 1024


def staged_bytes(dtype: str) -> int:
    """Bytes per value a tile stages in shared memory (float16 is staged as float on OpenCL)."""
    return 8 if dtype.endswith("64") else 4


def direct_default(
    w_shape: Sequence[int], geo: Geometry, max_threads: int = 256, dtype: str = "float32"
) -> DirectConvConfig:
    """16 (8 for narrow outputs) columns by 4 rows of threads, the channel threads that fit
    (and that one group's output channels fill); fewer staged input channels, then rows, while
    the tile's shared memory exceeds `DIRECT_SHARED_BUDGET`."""
    oc, c = int(w_shape[0]) // geo.groups, int(w_shape[1])
    out = geo.out
    tx = min(16 if out[-1] > 8 else 8, max_threads)
    ty = max(1, min(4, out[-2], max_threads // tx))
    tk = 1
    while tk < 8 and 2 * tk <= oc and 2 * tk * ty * tx <= max_threads:
        tk *= 2
    vthread = 2 if oc >= 4 * tk else 1
    config = DirectConvConfig(tk, ty, tx, vthread, min(4, c))
    while direct_shared_bytes(w_shape, geo, config, dtype) > DIRECT_SHARED_BUDGET:
        if config.c_tile > 1:
            config = replace(config, c_tile=config.c_tile // 2)
        elif config.ty > 1:
            config = replace(config, ty=config.ty // 2)
        else:
            break  # one row of one channel: the target's limit decides (GPULimitError)
    return config


def direct_shared_bytes(
    w_shape: Sequence[int], geo: Geometry, config: DirectConvConfig, dtype: str = "float32"
) -> int:
    """The bytes a direct tile stages in shared memory: the input window of `c_tile` channels
    (every tap of the leading axes, `ty` rows and `tx` columns of outputs) and the weights of
    `tk * vthread` output channels."""
    kernel = [int(d) for d in w_shape[2:]]
    tiles = [1] * (len(kernel) - 2) + [config.ty, config.tx]
    spans = zip(tiles, geo.strides, kernel, geo.dil, strict=True)
    window = math.prod((t - 1) * s + (k - 1) * d + 1 for t, s, k, d in spans)
    weights = config.tk * config.vthread * math.prod(kernel)
    return staged_bytes(dtype) * config.c_tile * (window + weights)


def direct_config_space(
    w_shape: Sequence[int], geo: Geometry, max_threads: int, dtype: str = "float32"
) -> ConfigSpace:
    """The `gpu.conv2d` knobs; blocks over `max_threads` threads are rejected."""
    d = direct_default(w_shape, geo, max_threads, dtype)
    knobs = [
        Knob("tk", tuple(sorted({1, 2, 4, 8} | {d.tk}))),
        Knob("ty", tuple(sorted({1, 2, 4, 8} | {d.ty}))),
        Knob("tx", tuple(sorted({8, 16, 32} | {d.tx}))),
        Knob("vthread", (1, 2)),
        Knob("c_tile", tuple(sorted({1, 2, 4, 8} | {d.c_tile}))),
    ]

    def constraint(v: dict) -> str | None:
        if v["tk"] * v["ty"] * v["tx"] > max_threads:
            return f"a block of {v['tk']} x {v['ty']} x {v['tx']} threads > {max_threads}"
        return None

    default = {"tk": d.tk, "ty": d.ty, "tx": d.tx, "vthread": d.vthread, "c_tile": d.c_tile}
    return ConfigSpace("gpu.conv2d", knobs, default, constraint)


def direct_config_from(values: dict) -> DirectConvConfig:
    return DirectConvConfig(*(int(values[k]) for k in ("tk", "ty", "tx", "vthread", "c_tile")))


def padded(x: Tensor, geo: Geometry, kernel: Sequence[int]) -> Tensor:
    """The zero-padded input, as large as the windows reach (a compute to inline: its reads
    clamped into the input)."""
    sizes = [int(d) for d in x.shape[2:]]
    spans = zip(sizes, geo.pads, geo.strides, geo.dil, geo.out, kernel, strict=True)
    shape = [max(n + p, (o - 1) * s + (k - 1) * d + 1) for n, p, s, d, o, k in spans]

    def fpad(n: Any, c: Any, *pos: Any) -> Any:
        return _zero_outside(x, n, c, [i - p for i, p in zip(pos, geo.pads, strict=True)])

    return te.compute((*(int(d) for d in x.shape[:2]), *shape), fpad, name="pad")


def conv2d_direct(
    x: Tensor, w: Tensor, geo: Geometry, epilogue: Callable[..., Any] | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """(pad, red, out): the padded input, the convolution `red[n, g, k, *pos]` (output channel
    `g * oc / groups + k`; NCHW's bytes) and its output after `epilogue(value, n, oc, *pos)`
    (`out is red` without one)."""
    oc, cg, *kernel = (int(d) for d in w.shape)
    g = geo.groups
    per = oc // g
    pad = padded(x, geo, kernel)
    rc = te.reduce_axis((0, cg), "rc")
    taps = [te.reduce_axis((0, k), f"r{i}") for i, k in enumerate(kernel)]

    def body(n: Any, gi: Any, k: Any, *pos: Any) -> Any:
        where = zip(pos, taps, geo.strides, geo.dil, strict=True)
        at = [o * s + t * d for o, t, s, d in where]
        return te.sum(pad[(n, gi * cg + rc, *at)] * w[(gi * per + k, rc, *taps)], axis=[rc, *taps])

    red = te.compute((int(x.shape[0]), g, per, *geo.out), body, name="conv")
    if epilogue is None:
        return pad, red, red

    def fout(n: Any, gi: Any, k: Any, *pos: Any) -> Any:
        return epilogue(red[(n, gi, k, *pos)], n, gi * per + k, *pos)

    return pad, red, te.compute(red.shape, fout, name="out")


def schedule_direct(
    s: Schedule, pad: Tensor, red: Tensor, out: Tensor, config: DirectConvConfig
) -> Schedule:
    """Each block: `tk * vthread` output channels of one group by `ty x tx` pixels of one
    output plane (image, group, channel block and leading spatial axes on `blockIdx.z`); per
    tile of `c_tile` input channels, the input window and the weights are copied into shared
    memory by the block's threads, then each thread accumulates its `vthread` outputs in
    registers."""
    local = red if red is not out else s.cache_write(red, "local")
    n, gi, k, *lead, y, xx = s[out].op.axis
    per, (oh, ow) = int(out.shape[2]), (int(d) for d in out.shape[-2:])
    v = config.vthread
    tk, ty, tx = min(config.tk, -(-per // v)), min(config.ty, oh), min(config.tx, ow)
    ko, kin = s[out].split(k, factor=tk * v)
    vk, kt = s[out].split(kin, nparts=v)
    yo, yi = s[out].split(y, factor=ty)
    xo, xi = s[out].split(xx, factor=tx)
    s[out].reorder(n, gi, ko, *lead, yo, xo, vk, kt, yi, xi)
    nk = s[out].fuse(n, gi, ko, *lead)
    pix = s[out].fuse(yi, xi)
    s[out].bind(nk, te.thread_axis("blockIdx.z"))
    s[out].bind(yo, te.thread_axis("blockIdx.y"))
    s[out].bind(xo, te.thread_axis("blockIdx.x"))
    if v > 1:
        s[out].bind(vk, te.thread_axis("vthread"))
    s[out].bind(kt, te.thread_axis("threadIdx.y"))
    s[out].bind(pix, te.thread_axis("threadIdx.x"))
    s[local].set_scope("local")
    s[local].compute_at(s[out], pix)
    rc, *taps = s[local].op.reduce_axis
    rco, rci = s[local].split(rc, factor=config.c_tile)
    s[local].reorder(rco, rci, *taps, *s[local].op.axis)
    for t in (pad, red.op.input_tensors[1]):
        shared = s.cache_read(t, "shared", [local])
        s[shared].compute_at(s[local], rco)
        gpu_dense.spread_copy(s, shared, tk, ty * tx)
    s[pad].compute_inline()
    return s


# ---- depthwise ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DepthwiseConfig:
    """The output tile of a block: `ty` rows by `tx` columns of one channel, a thread each."""

    ty: int = 8
    tx: int = 16


def depthwise_default(
    out: tuple[int, int],
    max_threads: int = 256,
    w_shape: Sequence[int] = (1, 1, 1, 1),
    geo: Geometry | None = None,
    dtype: str = "float32",
) -> DepthwiseConfig:
    """A tile no larger than the output, 16 columns (8 for narrow outputs) by up to 16 rows;
    fewer rows, then columns, while its input window exceeds `DIRECT_SHARED_BUDGET` (a large
    dilated kernel's window spans far more inputs than the tile has outputs)."""
    tx = min(16 if out[1] > 8 else 8, max_threads)
    ty = 1
    while ty < 16 and ty < out[0] and 2 * ty * tx <= max_threads:
        ty *= 2
    config = DepthwiseConfig(ty, tx)
    while geo is not None and depthwise_shared_bytes(w_shape, geo, config, dtype) > (
        DIRECT_SHARED_BUDGET
    ):
        if config.ty == 1 and config.tx == 1:
            break  # one output's window: the target's limit decides (`fits_shared`)
        half = {"ty": config.ty // 2} if config.ty > 1 else {"tx": config.tx // 2}
        config = replace(config, **half)
    return config


def depthwise_shared_bytes(
    w_shape: Sequence[int], geo: Geometry, config: DepthwiseConfig, dtype: str = "float32"
) -> int:
    """The bytes a depthwise tile stages in shared memory: its input window."""
    tiles = (min(config.ty, geo.out[0]), min(config.tx, geo.out[1]))
    spans = zip(tiles, geo.strides, w_shape[2:], geo.dil, strict=True)
    return staged_bytes(dtype) * math.prod(
        (t - 1) * s + (int(k) - 1) * d + 1 for t, s, k, d in spans
    )


def depthwise_config_space(
    out: tuple[int, int],
    max_threads: int,
    w_shape: Sequence[int] = (1, 1, 1, 1),
    geo: Geometry | None = None,
    dtype: str = "float32",
) -> ConfigSpace:
    d = depthwise_default(out, max_threads, w_shape, geo, dtype)
    knobs = [Knob("ty", tuple(sorted({1, 2, 4, 8, 16} | {d.ty}))),
             Knob("tx", tuple(sorted({8, 16, 32} | {d.tx})))]  # fmt: skip

    def constraint(v: dict) -> str | None:
        if v["ty"] * v["tx"] > max_threads:
            return f"a block of {v['ty']} x {v['tx']} threads > {max_threads}"
        return None

    return ConfigSpace("gpu.depthwise_conv2d", knobs, {"ty": d.ty, "tx": d.tx}, constraint)


def depthwise_config_from(values: dict) -> DepthwiseConfig:
    return DepthwiseConfig(int(values["ty"]), int(values["tx"]))


def geometry_of(wl: dict) -> Geometry:
    """The geometry of a `gpu.conv2d` / `gpu.conv2d_gemm` / `gpu.depthwise_conv2d` workload."""
    spans = (tuple(int(v) for v in wl[k]) for k in ("pads", "strides", "dil", "out"))
    return Geometry(*spans, groups=int(wl.get("groups", 1)))


def workload_of(
    template: str, x_shape: Sequence[int], w_shape: Sequence[int], geo: Geometry, dtype: str,
    max_threads: int,
) -> dict:  # fmt: skip
    """The tuning workload of a convolution by `template` (`geometry_of` reads it back):
    `groups` only when above 1 and not depthwise (where it is implied)."""
    wl = {"x": [int(d) for d in x_shape], "w": [int(d) for d in w_shape], "out": list(geo.out),
          "pads": list(geo.pads), "strides": list(geo.strides), "dil": list(geo.dil),
          "dtype": dtype, "max_threads": int(max_threads)}  # fmt: skip
    if geo.groups > 1 and template != "gpu.depthwise_conv2d":
        wl["groups"] = geo.groups
    return wl


TEMPLATES = ("gpu.conv2d", "gpu.conv2d_gemm", "gpu.depthwise_conv2d")


def template_for(w_shape: Sequence[int], group: int, out: Sequence[int]) -> str:
    """The template the GPU strategy uses for a 2-D or 3-D convolution (a 1-D one viewed as 2-D
    of height 1), by its shape: depthwise for one filter per channel of a 2-D one; the implicit
    GEMM for 1x1 kernels (a plain GEMM) and small output planes (rows x columns under 64: a
    direct tile would idle most of its threads); the direct template otherwise (its shared
    input window serves the overlapping windows of neighbouring outputs), grouped or not."""
    oc, cg, *kernel = (int(d) for d in w_shape)
    if len(kernel) == 2 and group > 1 and cg == 1 and group == oc:
        return "gpu.depthwise_conv2d"
    if math.prod(kernel) == 1 or out[-2] * out[-1] < 64:
        return "gpu.conv2d_gemm"
    return "gpu.conv2d"


def config_space_of(template: str, wl: dict) -> ConfigSpace:
    """The knobs of a convolution template for workload `wl`."""
    geo, limit = geometry_of(wl), int(wl["max_threads"])
    if template == "gpu.depthwise_conv2d":
        return depthwise_config_space(geo.out, limit, wl["w"], geo, str(wl["dtype"]))
    if template == "gpu.conv2d_gemm":
        return conv2d_config_space(wl["w"], geo, limit)
    return direct_config_space(wl["w"], geo, limit, str(wl["dtype"]))


def default_of(
    template: str, w_shape: Sequence[int], geo: Geometry, limit: int, dtype: str = "float32"
) -> Any:
    """The default config of a convolution template (`config_space_of`'s default)."""
    if template == "gpu.depthwise_conv2d":
        return depthwise_default(geo.out, limit, w_shape, geo, dtype)
    if template == "gpu.conv2d_gemm":
        m, n, _ = gemm_shape(w_shape, geo)
        return gpu_dense.default_config(m, n, limit)
    return direct_default(w_shape, geo, limit, dtype)


def fits_shared(
    template: str, w_shape: Sequence[int], geo: Geometry, config: Any, dtype: str, limit: int
) -> bool:
    """Whether `config`'s shared-memory tiles fit `limit` bytes. The implicit GEMM's always do
    (its tiles do not grow with the kernel); a direct or depthwise window may not, as the
    window of a 9x9 kernel dilated by 16 does even for one output."""
    if template == "gpu.depthwise_conv2d":
        return depthwise_shared_bytes(w_shape, geo, config, dtype) <= limit
    if template == "gpu.conv2d":
        return direct_shared_bytes(w_shape, geo, config, dtype) <= limit
    return True


def config_of(template: str, values: dict) -> Any:
    return {"gpu.depthwise_conv2d": depthwise_config_from, "gpu.conv2d_gemm":
            gpu_dense.config_from, "gpu.conv2d": direct_config_from}[template](values)  # fmt: skip


def conv2d(
    template: str, x: Tensor, w: Tensor, geo: Geometry, config: Any,
    epilogue: Callable[..., Any] | None = None,
) -> tuple[Tensor, Schedule]:  # fmt: skip
    """The convolution `x * w` (and `epilogue(value, n, k, *pos)`) by `template` with its
    `config`: the output tensor (NCHW's bytes: `[n * groups, k / groups, pixels]` for the
    implicit GEMM, `[n, groups, k / groups, *out]` for the direct template, NCHW for depthwise)
    and its schedule."""
    if template == "gpu.conv2d_gemm":
        acc, out, inline = conv2d_gemm(x, w, geo, epilogue)
        return out, schedule_conv2d_gemm(te.create_schedule(out.op), acc, out, inline, config)
    build, schedule = {"gpu.depthwise_conv2d": (depthwise_conv2d, schedule_depthwise),
                       "gpu.conv2d": (conv2d_direct, schedule_direct)}[template]  # fmt: skip
    pad, red, out = build(x, w, geo, epilogue)
    return out, schedule(te.create_schedule(out.op), pad, red, out, config)


def conv_program(template: str, wl: dict, values: dict) -> tuple[list[Tensor], Schedule]:
    """A tuning workload's convolution on its own (what the tuner measures): `[x, w, out]` and
    the template's schedule with the knob `values`."""
    x = te.placeholder(tuple(wl["x"]), str(wl["dtype"]), name="x")
    w = te.placeholder(tuple(wl["w"]), str(wl["dtype"]), name="w")
    out, s = conv2d(template, x, w, geometry_of(wl), config_of(template, values))
    return [x, w, out], s


def depthwise_conv2d(
    x: Tensor, w: Tensor, geo: Geometry, epilogue: Callable[..., Any] | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """(pad, red, out): the zero-padded input (to stage in shared memory), the depthwise
    convolution `red[n, c, oy, ox]` (weights `[c, 1, r, s]`) and its output after `epilogue(value,
    n, c, oy, ox)` (`out is red` without one)."""
    nb, ch = int(x.shape[0]), int(x.shape[1])
    r, s = int(w.shape[2]), int(w.shape[3])
    (sy, sx), (dy, dx) = geo.strides, geo.dil
    pad = padded(x, geo, (r, s))
    ry, rx = te.reduce_axis((0, r), "ry"), te.reduce_axis((0, s), "rx")
    red = te.compute(
        (nb, ch, *geo.out),
        lambda n, c, y, xx: te.sum(
            pad[n, c, y * sy + ry * dy, xx * sx + rx * dx] * w[c, 0, ry, rx], axis=[ry, rx]
        ),
        name="dwconv",
    )
    if epilogue is None:
        return pad, red, red
    out = te.compute(red.shape, lambda *i: epilogue(red[i], *i), name="out")
    return pad, red, out


def schedule_depthwise(
    s: Schedule, pad: Tensor, red: Tensor, out: Tensor, config: DepthwiseConfig
) -> Schedule:
    """Blocks of `ty x tx` outputs of one (image, channel) (`blockIdx.z`), the padded input
    window copied into shared memory by the block's threads, the taps summed in registers."""
    local = red if red is not out else s.cache_write(red, "local")
    n, c, y, xx = s[out].op.axis
    oh, ow = (int(d) for d in out.shape[2:])
    ty, tx = min(config.ty, oh), min(config.tx, ow)
    by, bx, yi, xi = s[out].tile(y, xx, ty, tx)
    nc = s[out].fuse(n, c)
    s[out].reorder(nc, by, bx, yi, xi)
    s[out].bind(nc, te.thread_axis("blockIdx.z"))
    s[out].bind(by, te.thread_axis("blockIdx.y"))
    s[out].bind(bx, te.thread_axis("blockIdx.x"))
    s[out].bind(yi, te.thread_axis("threadIdx.y"))
    s[out].bind(xi, te.thread_axis("threadIdx.x"))
    s[local].set_scope("local")
    s[local].compute_at(s[out], xi)
    shared = s.cache_read(pad, "shared", [local])
    s[shared].compute_at(s[out], bx)
    gpu_dense.spread_copy(s, shared, ty, tx)
    s[pad].compute_inline()
    return s
