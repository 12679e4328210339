"""2-D convolutions on GPUs (NCHW): three templates, picked by shape (`template_for`).

Direct (`conv2d_direct`, tuning template `gpu.conv2d`): each block computes `tk * vthread`
output channels by a `ty x tx` pixel tile of one image; the input channels are walked `c_tile`
at a time, the tile's input window (halo and padding included) and its weights copied into
shared memory by the block's threads, then each thread accumulates its outputs (virtual
threads along the channels) in registers.

Implicit GEMM (`conv2d_gemm`, tuning template `gpu.conv2d_gemm`): per image `n`,
`out[n, oc, p] = sum_k W[oc, k] * col[n, k, p]` with `k = (c, ry, rx)` and `p = (oy, ox)`:
`col` is the im2col matrix, never stored: the dense template's cooperative copies into shared
memory read it straight from the (zero-padded) input, so each block stages a `k_tile x cols`
tile of input windows and a `rows x k_tile` tile of weights, and each thread accumulates
`vthread^2` outputs in registers. The batch is the grid's z axis (`dense.batch_dense`); the
output `[n, oc, oh * ow]` is NCHW as it is. The knobs are the dense template's, for the
`[oc, c*r*s] x [c*r*s, oh*ow]` product.

Depthwise (`depthwise_conv2d`, tuning template `gpu.depthwise_conv2d`): each block computes a
`ty x tx` tile of one channel's output, its input window (the tile's receptive field, halo
included) copied into shared memory by the block's threads first; each thread then reads its
`r x s` taps from shared memory (neighbouring threads share most of them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ... import te
from ...autotune.space import ConfigSpace, Knob
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor
from . import dense as gpu_dense


@dataclass(frozen=True)
class Geometry:
    """Padding before (top, left), strides and dilations (y, x), and the output's height and
    width."""

    pads: tuple[int, int]
    strides: tuple[int, int]
    dil: tuple[int, int]
    out: tuple[int, int]


def _window_read(
    x: Tensor, geo: Geometry, kernel: tuple[int, int]
) -> Callable[[Any, Any, Any, Any, Any, Any], Any]:
    """`read(n, c, oy, ox, ry, rx)`: the input under tap (ry, rx) of output (oy, ox), zero in
    the padding (the address clamped so that no read leaves the tensor)."""
    h, w = int(x.shape[2]), int(x.shape[3])
    (py, px), (sy, sx), (dy, dx) = geo.pads, geo.strides, geo.dil
    last_y = (geo.out[0] - 1) * sy + (kernel[0] - 1) * dy - py
    last_x = (geo.out[1] - 1) * sx + (kernel[1] - 1) * dx - px
    guarded = py > 0 or px > 0 or last_y >= h or last_x >= w

    def read(n: Any, c: Any, oy: Any, ox: Any, ry: Any, rx: Any) -> Any:
        iy, ix = oy * sy + ry * dy - py, ox * sx + rx * dx - px
        if not guarded:
            return x[n, c, iy, ix]
        inside = te.all_of(iy >= 0, iy < h, ix >= 0, ix < w)
        clamped = x[n, c, te.min(te.max(iy, 0), h - 1), te.min(te.max(ix, 0), w - 1)]
        return te.select(inside, clamped, te.const(0, x.dtype))

    return read


def conv2d_gemm(
    x: Tensor, w: Tensor, geo: Geometry, epilogue: Callable[..., Any] | None = None
) -> tuple[Tensor, Tensor, list[Tensor]]:
    """(acc, out, inline) of the implicit GEMM: `acc` `[n, oc, oh * ow]`, `out` after the
    `epilogue(value, n, oc, oy, ox)`, and the operand views (`lhs`, `col`) to inline."""
    nb, (oc, c, r, s) = int(x.shape[0]), (int(d) for d in w.shape)
    oh, ow = geo.out
    read = _window_read(x, geo, (r, s))
    lhs = te.compute(
        (nb, oc, c * r * s), lambda q, i, k: w[i, k // (r * s), (k // s) % r, k % s], name="lhs"
    )

    def fcol(q: Any, k: Any, p: Any) -> Any:
        return read(q, k // (r * s), p // ow, p % ow, (k // s) % r, k % s)

    col = te.compute((nb, c * r * s, oh * ow), fcol, name="col")
    epi = None
    if epilogue is not None:
        epi = lambda v, q, i, p: epilogue(v, q, i, p // ow, p % ow)  # noqa: E731
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
    """(m, n, k) of the implicit GEMM: output channels, output pixels, taps per output."""
    oc, c, r, s = (int(d) for d in w_shape)
    return oc, geo.out[0] * geo.out[1], c * r * s


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


def direct_default(
    w_shape: Sequence[int], out: tuple[int, int], max_threads: int = 256
) -> DirectConvConfig:
    """16 (8 for narrow outputs) columns by 4 rows of threads, the channel threads that fit."""
    oc, c = int(w_shape[0]), int(w_shape[1])
    tx = 16 if out[1] > 8 else 8
    ty = min(4, out[0])
    tk = 1
    while tk < 8 and 2 * tk <= oc and 2 * tk * ty * tx <= max_threads:
        tk *= 2
    vthread = 2 if oc >= 4 * tk else 1
    return DirectConvConfig(tk, ty, tx, vthread, min(4, c))


def direct_config_space(
    w_shape: Sequence[int], out: tuple[int, int], max_threads: int
) -> ConfigSpace:
    """The `gpu.conv2d` knobs; blocks over `max_threads` threads are rejected."""
    d = direct_default(w_shape, out, max_threads)
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


def padded(x: Tensor, geo: Geometry, kernel: tuple[int, int]) -> Tensor:
    """The zero-padded input, as large as the windows reach (a compute to inline: its reads
    clamped into the input)."""
    nb, ch, h, wd = (int(d) for d in x.shape)
    (py, px), (sy, sx), (dy, dx) = geo.pads, geo.strides, geo.dil
    ph = max(h + py, (geo.out[0] - 1) * sy + (kernel[0] - 1) * dy + 1)
    pw = max(wd + px, (geo.out[1] - 1) * sx + (kernel[1] - 1) * dx + 1)

    def fpad(n: Any, c: Any, y: Any, xx: Any) -> Any:
        iy, ix = y - py, xx - px
        inside = te.all_of(iy >= 0, iy < h, ix >= 0, ix < wd)
        clamped = x[n, c, te.min(te.max(iy, 0), h - 1), te.min(te.max(ix, 0), wd - 1)]
        return te.select(inside, clamped, te.const(0, x.dtype))

    return te.compute((nb, ch, ph, pw), fpad, name="pad")


def conv2d_direct(
    x: Tensor, w: Tensor, geo: Geometry, epilogue: Callable[..., Any] | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """(pad, red, out): the padded input, the convolution `red[n, k, oy, ox]` and its output
    after `epilogue(value, n, k, oy, ox)` (`out is red` without one)."""
    c, r, s = (int(d) for d in w.shape[1:])
    (sy, sx), (dy, dx) = geo.strides, geo.dil
    pad = padded(x, geo, (r, s))
    rc, ry, rx = (
        te.reduce_axis((0, c), "rc"),
        te.reduce_axis((0, r), "ry"),
        te.reduce_axis((0, s), "rx"),
    )
    red = te.compute(
        (int(x.shape[0]), int(w.shape[0]), *geo.out),
        lambda n, k, y, xx: te.sum(
            pad[n, rc, y * sy + ry * dy, xx * sx + rx * dx] * w[k, rc, ry, rx], axis=[rc, ry, rx]
        ),
        name="conv",
    )
    if epilogue is None:
        return pad, red, red
    return pad, red, te.compute(red.shape, lambda *i: epilogue(red[i], *i), name="out")


def schedule_direct(
    s: Schedule, pad: Tensor, red: Tensor, out: Tensor, config: DirectConvConfig
) -> Schedule:
    """Each block: `tk * vthread` output channels by `ty x tx` pixels of one image; per tile of
    `c_tile` input channels, the input window and the weights are copied into shared memory by
    the block's threads, then each thread accumulates its `vthread` outputs in registers."""
    local = red if red is not out else s.cache_write(red, "local")
    n, k, y, xx = s[out].op.axis
    oc, (oh, ow) = int(out.shape[1]), (int(d) for d in out.shape[2:])
    v = config.vthread
    tk, ty, tx = min(config.tk, -(-oc // v)), min(config.ty, oh), min(config.tx, ow)
    ko, kin = s[out].split(k, factor=tk * v)
    vk, kt = s[out].split(kin, nparts=v)
    yo, yi = s[out].split(y, factor=ty)
    xo, xi = s[out].split(xx, factor=tx)
    s[out].reorder(n, ko, yo, xo, vk, kt, yi, xi)
    nk = s[out].fuse(n, ko)
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
    rc, ry, rx = s[local].op.reduce_axis
    rco, rci = s[local].split(rc, factor=config.c_tile)
    s[local].reorder(rco, rci, ry, rx, *s[local].op.axis)
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


def depthwise_default(out: tuple[int, int], max_threads: int = 256) -> DepthwiseConfig:
    """A tile no larger than the output, 16 columns (8 for narrow outputs) by up to 16 rows."""
    tx = 16 if out[1] > 8 else 8
    ty = 1
    while ty < 16 and ty < out[0] and 2 * ty * tx <= max_threads:
        ty *= 2
    return DepthwiseConfig(ty, tx)


def depthwise_config_space(out: tuple[int, int], max_threads: int) -> ConfigSpace:
    d = depthwise_default(out, max_threads)
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
    """The geometry of a `gpu.conv2d` / `gpu.depthwise_conv2d` workload."""
    return Geometry(*(tuple(int(v) for v in wl[k]) for k in ("pads", "strides", "dil", "out")))


TEMPLATES = ("gpu.conv2d", "gpu.conv2d_gemm", "gpu.depthwise_conv2d")


def template_for(w_shape: Sequence[int], group: int, out: tuple[int, int]) -> str | None:
    """The template the GPU strategy uses for a 2-D convolution, by its shape: depthwise for one
    filter per channel; the implicit GEMM for 1x1 kernels (a plain GEMM) and small outputs
    (fewer than 64 pixels: a direct tile would idle most of its threads); the direct template
    otherwise (its shared input window serves the overlapping windows of neighbouring outputs);
    None (the generic schedule) for other groupings."""
    oc, cg, r, s = (int(d) for d in w_shape)
    if group > 1:
        return "gpu.depthwise_conv2d" if cg == 1 and group == oc else None
    if r * s == 1 or out[0] * out[1] < 64:
        return "gpu.conv2d_gemm"
    return "gpu.conv2d"


def config_space_of(template: str, wl: dict) -> ConfigSpace:
    """The knobs of a convolution template for workload `wl`."""
    geo, limit = geometry_of(wl), int(wl["max_threads"])
    if template == "gpu.depthwise_conv2d":
        return depthwise_config_space(geo.out, limit)
    if template == "gpu.conv2d_gemm":
        return conv2d_config_space(wl["w"], geo, limit)
    return direct_config_space(wl["w"], geo.out, limit)


def default_of(template: str, w_shape: Sequence[int], geo: Geometry, limit: int) -> Any:
    """The default config of a convolution template (`config_space_of`'s default)."""
    if template == "gpu.depthwise_conv2d":
        return depthwise_default(geo.out, limit)
    if template == "gpu.conv2d_gemm":
        m, n, _ = gemm_shape(w_shape, geo)
        return gpu_dense.default_config(m, n, limit)
    return direct_default(w_shape, geo.out, limit)


def config_of(template: str, values: dict) -> Any:
    return {"gpu.depthwise_conv2d": depthwise_config_from, "gpu.conv2d_gemm":
            gpu_dense.config_from, "gpu.conv2d": direct_config_from}[template](values)  # fmt: skip


def conv2d(
    template: str, x: Tensor, w: Tensor, geo: Geometry, config: Any,
    epilogue: Callable[..., Any] | None = None,
) -> tuple[Tensor, Schedule]:  # fmt: skip
    """The convolution `x * w` (and `epilogue(value, n, k, oy, ox)`) by `template` with its
    `config`: the output tensor (`[n, k, oh * ow]` for the implicit GEMM, else NCHW) and its
    schedule."""
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
