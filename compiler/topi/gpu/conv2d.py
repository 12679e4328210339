"""2-D convolutions on GPUs (NCHW): an implicit GEMM through the dense template, and depthwise
convolution with the input tile in shared memory.

Implicit GEMM (`conv2d_gemm`, tuning template `gpu.conv2d`): per image `n`,
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
    """The `gpu.conv2d` knobs: the dense template's for the implicit GEMM."""
    m, n, k = gemm_shape(w_shape, geo)
    return gpu_dense.config_space(m, n, k, max_threads, name="gpu.conv2d")


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


def conv_program(wl: dict, values: dict, depthwise: bool) -> tuple[list[Tensor], Schedule]:
    """A tuning workload's convolution on its own (what the tuner measures): `[x, w, out]` and
    the template's schedule with the knob `values`."""
    geo = geometry_of(wl)
    x = te.placeholder(tuple(wl["x"]), str(wl["dtype"]), name="x")
    w = te.placeholder(tuple(wl["w"]), str(wl["dtype"]), name="w")
    if depthwise:
        pad, red, out = depthwise_conv2d(x, w, geo)
        s = schedule_depthwise(te.create_schedule(out.op), pad, red, out,
                               depthwise_config_from(values))  # fmt: skip
        return [x, w, out], s
    acc, out, inline = conv2d_gemm(x, w, geo)
    s = schedule_conv2d_gemm(te.create_schedule(out.op), acc, out, inline,
                             gpu_dense.config_from(values))  # fmt: skip
    return [x, w, out], s


def depthwise_conv2d(
    x: Tensor, w: Tensor, geo: Geometry, epilogue: Callable[..., Any] | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """(pad, red, out): the zero-padded input (to stage in shared memory), the depthwise
    convolution `red[n, c, oy, ox]` (weights `[c, 1, r, s]`) and its output after `epilogue(value,
    n, c, oy, ox)` (`out is red` without one)."""
    nb, ch, h, wd = (int(d) for d in x.shape)
    r, s = int(w.shape[2]), int(w.shape[3])
    (py, px), (sy, sx), (dy, dx) = geo.pads, geo.strides, geo.dil
    ph = max(h + py, (geo.out[0] - 1) * sy + (r - 1) * dy + 1)
    pw = max(wd + px, (geo.out[1] - 1) * sx + (s - 1) * dx + 1)

    def fpad(n: Any, c: Any, y: Any, xx: Any) -> Any:
        iy, ix = y - py, xx - px
        inside = te.all_of(iy >= 0, iy < h, ix >= 0, ix < wd)
        clamped = x[n, c, te.min(te.max(iy, 0), h - 1), te.min(te.max(ix, 0), wd - 1)]
        return te.select(inside, clamped, te.const(0, x.dtype))

    pad = te.compute((nb, ch, ph, pw), fpad, name="pad")
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
