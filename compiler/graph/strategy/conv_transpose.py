"""ConvTranspose (1-D, 2-D, 3-D; strides, pads, dilations, groups, output padding and shape) as a
gather over its input, split by output phase so that no multiply is spent on the zeros a
scatter or a zero-inserted input would add.

Output position `o` (per spatial axis, with stride `s`, dilation `d`, padding before `pad`)
receives `x[i] * w[k]` for every tap with `i * s + k * d == o + pad`. Writing `o = q * s + p`
(`p` the phase), the taps of phase `p` are `k = k0(p) + (s/g) * j` with `g = gcd(s, d)`, and
they read `i = q + off(p) - j * (d/g)`: for each phase an ordinary stride-1 correlation over
the input. The lowering computes them all as one reduction `phased[n, m, *p, *q]` (vector lanes
along the last `q`, contiguous reads of the padded input), then deals the phases out into the
output with the bias and the group's elementwise tail. For `s = 2, k = 4` (the usual
upsampling decoder) every phase has exactly 2 taps per axis, the multiplies a direct convolution
of the output would need; a phase with fewer taps than its neighbours adds 0 for the missing
ones (selected, not a zero weight: x * 0 is NaN where x is infinite or NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ... import te
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Tail, schedule_rows
from ..ops.nn import transpose_geometry
from ..registry import get_op
from .nn import Result, pad_image


@dataclass(frozen=True)
class PhaseAxis:
    """The phase decomposition of one spatial axis (see the module's docstring)."""

    stride: int
    dilation: int
    pad: int  # padding before
    kernel: int
    size: int  # input extent
    out: int  # output extent

    @property
    def g(self) -> int:
        return math.gcd(self.stride, self.dilation)

    @property
    def taps(self) -> int:
        """Taps per phase (`j`'s extent): the most any phase has."""
        return -(-self.kernel // (self.stride // self.g))

    @property
    def steps(self) -> int:
        """Output positions per phase (`q`'s extent)."""
        return -(-self.out // self.stride)

    def first_tap(self, p: Any) -> Any:
        """k0(p): the smallest tap reaching phase `p` (meaningful where `is_live(p)`)."""
        sg, dg = self.stride // self.g, self.dilation // self.g
        if sg == 1:
            return 0
        return ((p + self.pad) // self.g * pow(dg, -1, sg)) % sg

    def offset(self, p: Any) -> Any:
        """off(p): the input position of tap k0(p) at q = 0."""
        return (p + self.pad - self.first_tap(p) * self.dilation) // self.stride

    def is_live(self, p: Any) -> Any:
        """Whether any tap reaches phase `p` (always, unless gcd(s, d) > 1)."""
        return True if self.g == 1 else (p + self.pad) % self.g == 0

    def has_dead_taps(self) -> bool:
        """Whether some (phase, j) pairs fall outside the kernel or in a dead phase."""
        return self.g > 1 or self.taps * (self.stride // self.g) != self.kernel

    def padding(self) -> tuple[int, int]:
        """(before, after) zeros the input needs so that every read is in bounds."""
        offsets = [self.offset(p) for p in range(self.stride)]
        low = min(offsets) - (self.taps - 1) * (self.dilation // self.g)
        high = self.steps - 1 + max(offsets)
        return max(0, -low), max(0, high - (self.size - 1))


def _axes(attrs: dict[str, Any], x_shape: tuple, w_shape: tuple) -> list[PhaseAxis]:
    nd = len(x_shape) - 2
    begin, outs = transpose_geometry(attrs, x_shape[2:], w_shape[2:])
    strides = attrs.get("strides") or (1,) * nd
    dilations = attrs.get("dilations") or (1,) * nd
    fields = zip(strides, dilations, begin, w_shape[2:], x_shape[2:], outs, strict=True)
    return [PhaseAxis(*(int(v) for v in f)) for f in fields]


def _conv_transpose(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    attrs = get_op(node.op).full_attrs(node)
    x, w = ctx.get(node.inputs[0]), ctx.get(node.inputs[1])
    axes = _axes(attrs, x.shape, w.shape)
    nd, group = len(axes), attrs["group"]
    c_g, m_g = w.shape[0] // group, w.shape[1]
    pads = [a.padding() for a in axes]
    padded = None
    if any(b or a for b, a in pads):
        padded = pad_image(x, [b for b, _ in pads], [a for _, a in pads], te.const(0, x.dtype))
    read = x if padded is None else (lambda idx: padded[idx])
    rc = te.reduce_axis((0, c_g), "rc")
    rj = [te.reduce_axis((0, a.taps), f"rj{k}") for k, a in enumerate(axes)]

    def tap(c: Any, m: Any, phases: tuple, js: list) -> tuple[Any, Any]:
        """(the tap's weight, its liveness or None when every tap is live)."""
        ks = [
            a.first_tap(p) + (a.stride // a.g) * j for a, p, j in zip(axes, phases, js, strict=True)
        ]
        if not any(a.has_dead_taps() for a in axes):
            return w((c, m % m_g, *ks)), None
        clamped = [te.min(k, a.kernel - 1) for k, a in zip(ks, axes, strict=True)]
        live = [a.is_live(p) for a, p in zip(axes, phases, strict=True)]
        live += [k < a.kernel for k, a in zip(ks, axes, strict=True) if a.has_dead_taps()]
        live = [v for v in live if v is not True]
        return w((c, m % m_g, *clamped)), (te.all_of(*live) if live else None)

    def body(n: Any, m: Any, *pq: Any) -> Any:
        phases, steps = pq[:nd], pq[nd:]
        c = rc if group == 1 else (m // m_g) * c_g + rc
        pos = [
            q + a.offset(p) - j * (a.dilation // a.g) + b
            for a, p, q, j, (b, _) in zip(axes, phases, steps, rj, pads, strict=True)
        ]
        weight, live = tap(c, m, phases, rj)
        product = read((n, c, *pos)) * weight
        if live is not None:  # a dead tap adds 0, not x * 0 (NaN where x is inf or NaN)
            product = te.select(live, product, te.const(0, x.dtype))
        return te.sum(product, axis=[rc, *rj])

    shape = (x.shape[0], m_g * group, *(a.stride for a in axes), *(a.steps for a in axes))
    phased = te.compute(shape, body, name="conv_transpose")
    bias = ctx.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None

    def deal(n: Any, m: Any, *o: Any) -> Any:
        p = [i % a.stride if a.stride > 1 else 0 for i, a in zip(o, axes, strict=True)]
        q = [i // a.stride if a.stride > 1 else i for i, a in zip(o, axes, strict=True)]
        v = phased[(n, m, *p, *q)]
        v = v + bias((m,)) if bias is not None else v
        return tail.epilogue(v, (n, m, *o))

    out = te.compute(ctx.type_of(node.outputs[0]).shape, deal, name="out")
    return _schedule(out, phased, padded), [out]


def _schedule(out: Any, phased: Any, padded: Any, lanes: int = 16) -> Any:
    """Each stage at the root, rows in parallel. The reduction's innermost step is a tile of
    `block` output channels x `lanes` positions (unrolled, vector lanes): each input vector it
    loads feeds `block` FMAs."""
    s = te.create_schedule(out.op)
    if padded is not None:
        schedule_rows(s, padded)
    n, m, *rest = phased.op.axis
    block = max(b for b in range(1, 9) if phased.shape[1] % b == 0)
    mo, mi = s[phased].split(m, factor=block)
    xo, xi = s[phased].split(rest[-1], factor=lanes)
    s[phased].reorder(n, mo, *rest[:-1], xo, *phased.op.reduce_axis, mi, xi)
    rows = s[phased].fuse(n, mo, *rest[:-1])
    if math.prod(phased.shape) >= 2048:
        s[phased].parallel(rows)
    s[phased].unroll(mi)
    s[phased].vectorize(xi)
    schedule_rows(s, out)
    return s


ANCHORS: dict[str, AnchorRule] = {"ConvTranspose": _conv_transpose}
