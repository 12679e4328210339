"""Neural-network ops: Conv, ConvTranspose, pooling, Gemm, MatMul, BatchNormalization, Softmax,
LayerNormalization. Float kernels accumulate in the input dtype through BLAS."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ir import TensorType, broadcast_shapes
from ..registry import Pattern, get_op, register
from .pool_indices import expand_max_pool_indices, max_pool_indices
from .shape import nan_first

_CONV_ATTRS = {
    "auto_pad": "NOTSET",
    "dilations": None,
    "group": 1,
    "kernel_shape": None,
    "pads": None,
    "strides": None,
}


def _same_pads(size: int, stride: int, extent: int, upper: bool) -> tuple[int, int, int]:
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + extent - size)
    small = total // 2
    return (small, total - small, out) if upper else (total - small, small, out)


def _window_attrs(
    attrs: dict[str, Any], nd: int, kernel: tuple[int, ...]
) -> tuple[list[int], list[int]]:
    """(strides, dilations) of a sliding-window op over `nd` spatial dims (default 1), each
    window attribute checked to hold one value per spatial dim (pads two)."""
    strides = list(attrs.get("strides") or (1,) * nd)
    dilations = list(attrs.get("dilations") or (1,) * nd)
    given = {"kernel_shape": kernel, "strides": strides, "dilations": dilations}
    if attrs.get("auto_pad", "NOTSET") == "NOTSET" and attrs.get("pads"):
        given["pads"] = list(attrs["pads"])
    for key, values in given.items():
        if len(values) != (2 * nd if key == "pads" else nd):
            raise ValueError(
                f"{key} must have {'two values' if key == 'pads' else 'one value'} per spatial "
                f"dim ({nd} for an input of rank {nd + 2}), not {list(values)}"
            )
    return strides, dilations


def window_geometry(
    attrs: dict[str, Any], spatial: tuple[int, ...], kernel: tuple[int, ...], ceil: bool = False
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(pads_begin, pads_end, strides, dilations, output sizes) of a sliding-window op."""
    nd = len(spatial)
    strides, dilations = _window_attrs(attrs, nd, kernel)
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        geo = [
            _same_pads(n, s, e, auto_pad == "SAME_UPPER")
            for n, s, e in zip(spatial, strides, extents, strict=True)
        ]
        return [g[0] for g in geo], [g[1] for g in geo], strides, dilations, [g[2] for g in geo]
    if auto_pad not in ("NOTSET", "VALID"):
        raise ValueError(
            f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, not {auto_pad!r}"
        )
    pads = list(attrs.get("pads") or (0,) * 2 * nd) if auto_pad == "NOTSET" else [0] * 2 * nd
    begin, end = pads[:nd], pads[nd:]
    outs = []
    for n, b, e, s, x in zip(spatial, begin, end, strides, extents, strict=True):
        span = n + b + e - x
        # in ceil mode a window may hang over the end (a 2-wide one over 1 column: 1 output)
        if span < 0 and not (ceil and span > -s):
            raise ValueError(
                f"the window (kernel extent {x}) must fit in the padded input "
                f"({n} + pads {b} + {e}), spatial {tuple(spatial)}, kernel {tuple(kernel)}"
            )
        out = (-(-span // s) if ceil else span // s) + 1
        if ceil and (out - 1) * s >= n + b:
            out -= 1  # a window may not start in the end padding
        outs.append(out)
    return begin, end, strides, dilations, outs


def _windows(
    xp: np.ndarray, outs: list[int], strides: list[int], dilations: list[int], kernel: tuple
) -> np.ndarray:
    """(N, C, *outs, *kernel) view of the windows of padded `xp`."""
    nd = len(outs)
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    win = sliding_window_view(xp, extents, axis=tuple(range(2, 2 + nd)))
    index = (slice(None), slice(None))
    index += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(outs, strides, strict=True))
    index += tuple(slice(None, None, d) for d in dilations)
    return win[index]


def _check_conv_shapes(attrs: dict[str, Any], x: tuple, w: tuple, transpose: bool) -> None:
    """Ranks, channel counts, group divisibility and kernel_shape of Conv/ConvTranspose."""
    if len(x) < 3 or len(w) != len(x):
        raise ValueError(f"input {x} and weight {w} must have one rank of at least 3")
    group = attrs["group"]
    channels = w[0] if transpose else w[1] * group
    if x[1] != channels:
        what = "weight dim 0" if transpose else "weight dim 1 x group"
        raise ValueError(f"input channels must be {channels} ({what}), not {x[1]}")
    count, what = (x[1], "input channels") if transpose else (w[0], "weight dim 0 (outputs)")
    if count % group:
        raise ValueError(f"{what} must be a multiple of group {group}, not {count}")
    kernel = attrs.get("kernel_shape")
    if kernel is not None and tuple(kernel) != tuple(w[2:]):
        raise ValueError(f"kernel_shape {tuple(kernel)} must match the weight's {tuple(w[2:])}")


def _check_param(types: list, index: int, want: tuple[int, ...], what: str) -> None:
    """An optional per-channel input (a bias, a BatchNormalization statistic) has shape `want`:
    a kernel indexes it by channel, so a shorter one would be read past its end."""
    if len(types) > index and types[index] is not None and types[index].shape != want:
        raise ValueError(f"{what} must have shape {want}, not {types[index].shape}")


def _check_broadcasts_to(shape: tuple[int, ...], out: tuple[int, ...], what: str) -> None:
    """`shape` broadcasts to `out` one way (ONNX unidirectional broadcasting)."""
    try:
        fits = len(shape) <= len(out) and broadcast_shapes(shape, out) == tuple(out)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{what} of shape {shape} must broadcast to {tuple(out)}")


def _conv_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, w = types[0], types[1]
    _check_conv_shapes(attrs, x.shape, w.shape, transpose=False)
    _check_param(types, 2, (w.shape[0],), "Conv bias")
    *_, outs = window_geometry(attrs, x.shape[2:], w.shape[2:])
    return [TensorType((x.shape[0], w.shape[0], *outs), x.dtype)]


def conv(attrs: dict[str, Any], x: np.ndarray, w: np.ndarray, b: Any = None) -> np.ndarray:
    """N-d grouped convolution (ONNX Conv) on numpy arrays."""
    nd, group = x.ndim - 2, attrs["group"]
    begin, end, strides, dilations, outs = window_geometry(attrs, x.shape[2:], w.shape[2:])
    xp = np.pad(x, [(0, 0), (0, 0), *zip(begin, end, strict=True)])
    win = _windows(xp, outs, strides, dilations, w.shape[2:])
    k_axes = list(range(2 + nd, 2 + 2 * nd))
    if group == 1:
        y = np.tensordot(win, w, axes=([1, *k_axes], [1, *range(2, 2 + nd)]))
        y = np.moveaxis(y, -1, 1)
    else:
        n, c = x.shape[:2]
        wg = w.reshape(group, w.shape[0] // group, *w.shape[1:])
        xg = win.reshape(n, group, c // group, *win.shape[2:])
        o, k = "opq"[:nd], "uvw"[:nd]
        y = np.einsum(f"ngc{o}{k},gmc{k}->ngm{o}", xg, wg, optimize=True)
        y = y.reshape(n, w.shape[0], *outs)
    if b is not None:
        y = y + b.reshape(1, -1, *(1,) * nd)
    return np.ascontiguousarray(y, dtype=x.dtype)


register("Conv", Pattern.OUT_ELEMWISE_FUSABLE, _conv_type, conv, attrs=_CONV_ATTRS, inputs=(2, 3))


def transpose_geometry(
    attrs: dict[str, Any], spatial: tuple[int, ...], kernel: tuple[int, ...]
) -> tuple[list[int], list[int]]:
    """(pads_begin, output sizes) of ConvTranspose, following the ONNX definition."""
    nd = len(spatial)
    strides, dilations = _window_attrs(attrs, nd, kernel)
    out_pad = list(attrs.get("output_padding") or (0,) * nd)
    full = [
        s * (n - 1) + op + (k - 1) * d + 1
        for n, s, op, k, d in zip(spatial, strides, out_pad, kernel, dilations, strict=True)
    ]
    pads, auto_pad, out_shape = attrs.get("pads"), attrs["auto_pad"], attrs.get("output_shape")
    if out_shape is not None or pads is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # an output_shape overrides pads (ONNX); it may name the batch and channel dims too
        outs = list(out_shape or [n * s for n, s in zip(spatial, strides, strict=True)])[-nd:]
        if out_shape and (len(out_shape) not in (nd, nd + 2) or min(outs) < 1):
            raise ValueError(f"output_shape must hold {nd} positive sizes, not {list(out_shape)}")
        totals = [f - o for f, o in zip(full, outs, strict=True)]
        upper = auto_pad == "SAME_UPPER"
        return [t // 2 if upper else t - t // 2 for t in totals], outs
    pads = list(pads or (0,) * 2 * nd)
    return pads[:nd], [f - pads[i] - pads[nd + i] for i, f in enumerate(full)]


def _conv_transpose_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, w = types[0], types[1]
    _check_conv_shapes(attrs, x.shape, w.shape, transpose=True)
    _check_param(types, 2, (w.shape[1] * attrs["group"],), "ConvTranspose bias")
    _, outs = transpose_geometry(attrs, x.shape[2:], w.shape[2:])
    return [TensorType((x.shape[0], w.shape[1] * attrs["group"], *outs), x.dtype)]


def conv_transpose(
    attrs: dict[str, Any], x: np.ndarray, w: np.ndarray, b: Any = None
) -> np.ndarray:
    """N-d grouped transposed convolution (ONNX ConvTranspose): scatter-add per kernel tap."""
    nd, group = x.ndim - 2, attrs["group"]
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    kernel, m_g = w.shape[2:], w.shape[1]
    strides = list(attrs.get("strides") or (1,) * nd)
    dilations = list(attrs.get("dilations") or (1,) * nd)
    begin, outs = transpose_geometry(attrs, spatial, kernel)
    # negative padding (SAME with a kernel shorter than the stride) reads zeros before the start
    lead = [max(0, -b) for b in begin]
    size = [
        max(s * (i - 1) + (k - 1) * d + 1, b + o) + z
        for i, s, k, d, b, o, z in zip(
            spatial, strides, kernel, dilations, begin, outs, lead, strict=True
        )
    ]
    y = np.zeros((n, group, m_g, *size), np.float64)
    xg = x.reshape(n, group, c // group, *spatial).astype(np.float64)
    wg = w.reshape(group, c // group, m_g, *kernel).astype(np.float64)
    for tap in itertools.product(*(range(k) for k in kernel)):
        part = np.einsum("ngc...,gcm->ngm...", xg, wg[(slice(None),) * 3 + tap])
        index = tuple(
            slice(z + t * d, z + t * d + s * (i - 1) + 1, s)
            for t, d, s, i, z in zip(tap, dilations, strides, spatial, lead, strict=True)
        )
        y[(slice(None),) * 3 + index] += part
    y = y.reshape(n, group * m_g, *size)
    y = y[
        (slice(None), slice(None))
        + tuple(slice(b + z, b + z + o) for b, o, z in zip(begin, outs, lead, strict=True))
    ]
    if b is not None:
        y = y + b.reshape(1, -1, *(1,) * nd)
    return np.ascontiguousarray(y, dtype=x.dtype)


register(
    "ConvTranspose",
    Pattern.OUT_ELEMWISE_FUSABLE,
    _conv_transpose_type,
    conv_transpose,
    attrs={**_CONV_ATTRS, "output_padding": None, "output_shape": None},
    inputs=(2, 3),
)


def check_pool_same_dilated(attrs: dict[str, Any]) -> None:
    """Refuse a pool with auto_pad SAME_* and a dilation above 1: onnxruntime pads it for the
    undilated kernel (fewer outputs than ONNX's `ceil(size / stride)`), so no answer would
    agree with both; explicit pads say which is meant."""
    dilations = attrs.get("dilations") or ()
    if attrs.get("auto_pad") in ("SAME_UPPER", "SAME_LOWER") and any(d > 1 for d in dilations):
        raise ValueError(
            f"a pool with auto_pad {attrs['auto_pad']} must have dilations of 1, not "
            f"{list(dilations)}: onnxruntime and ONNX pad it differently; give explicit pads"
        )


def _pool_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    check_pool_same_dilated(attrs)
    ceil = bool(attrs["ceil_mode"])
    *_, outs = window_geometry(attrs, x.shape[2:], tuple(attrs["kernel_shape"]), ceil)
    return [TensorType((*x.shape[:2], *outs), x.dtype)]


def _pool_pads(attrs: dict[str, Any], x: np.ndarray) -> tuple:
    kernel = tuple(attrs["kernel_shape"])
    begin, end, strides, dilations, outs = window_geometry(
        attrs, x.shape[2:], kernel, bool(attrs["ceil_mode"])
    )
    extra = [
        max(0, (o - 1) * s + (k - 1) * d + 1 - (n + b + e))
        for o, s, k, d, n, b, e in zip(
            outs, strides, kernel, dilations, x.shape[2:], begin, end, strict=True
        )
    ]
    return kernel, begin, end, extra, strides, dilations, outs


def _max_pool_padded(attrs: dict[str, Any], x: np.ndarray) -> tuple:
    """(Y, the padded input, the window geometry). onnxruntime's semantics, which the compiled
    pools follow (`strategy/reduce.py`): the padding is the lowest finite value (-inf in a
    dilated window), and a float max skips NaN unless the window's first tap inside the
    image is NaN (ReduceMax's rule), so a window of NaN only gives NaN."""
    geometry = _pool_pads(attrs, x)
    kernel, begin, end, extra, strides, dilations, outs = geometry
    floating = x.dtype.kind == "f"
    if floating:
        low = -np.inf if max(dilations) > 1 else np.finfo(x.dtype).min
    else:
        low = np.iinfo(x.dtype).min
    widths = [(b, e + ex) for b, e, ex in zip(begin, end, extra, strict=True)]
    xp = np.pad(x, [(0, 0), (0, 0), *widths], constant_values=low)
    win = _windows(xp, outs, strides, dilations, kernel)
    axes = tuple(range(-len(kernel), 0))
    if not floating:
        return np.ascontiguousarray(win.max(axis=axes)), xp, geometry
    y = np.fmax.reduce(win, axis=axes)  # (NaN skipped)
    firsts = []
    for o, st, d, p, size in zip(outs, strides, dilations, begin, x.shape[2:], strict=True):
        start = np.arange(o) * st - p  # the first tap inside the image: start + r * d >= 0
        first = start + np.maximum(-(start // d), 0) * d
        firsts.append(np.minimum(first, size - 1))  # (a ceil_mode window may start past it)
    at = x[(slice(None), slice(None), *np.ix_(*firsts))]
    return np.ascontiguousarray(np.where(np.isnan(at), at, y)), xp, geometry


def max_pool(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return _max_pool_padded(attrs, x)[0]


def _max_pool_outputs(attrs: dict[str, Any], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Y, Indices): ONNX's flat indices of the maxima (`pool_indices.py`)."""
    y, xp, geometry = _max_pool_padded(attrs, x)
    return y, max_pool_indices(x, xp, y, geometry, attrs.get("storage_order", 0))


def _max_pool_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    (y,) = _pool_type(attrs, types, consts)
    return [y, TensorType(y.shape, "int64")]


def _expand_max_pool(b: Any, node: Any) -> bool:
    """A MaxPool whose Indices output is asked for: `pool_indices.expand_max_pool_indices`;
    the plain MaxPool stays (False)."""
    if len(node.outputs) < 2 or not node.outputs[1]:
        return False
    x = np.broadcast_to(np.uint8(0), b.types[node.inputs[0]].shape)
    expand_max_pool_indices(b, node, _pool_pads(get_op("MaxPool").full_attrs(node), x))
    return True


def average_pool(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    kernel, begin, end, extra, strides, dilations, outs = _pool_pads(attrs, x)
    widths = [(b, e + ex) for b, e, ex in zip(begin, end, extra, strict=True)]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *widths])
    # the divisor counts real elements, plus explicit pads if count_include_pad, never the
    # extra end padding that ceil_mode adds
    inside = np.pad(
        np.ones(x.shape[2:]),
        list(zip(begin, end, strict=True)),
        constant_values=float(attrs["count_include_pad"]),
    )
    inside = np.pad(inside, [(0, ex) for ex in extra])[None, None]
    axes = tuple(range(-len(kernel), 0))
    total = _windows(xp, outs, strides, dilations, kernel).sum(axis=axes)
    count = _windows(inside, outs, strides, dilations, kernel).sum(axis=axes)
    return (total / count).astype(x.dtype)


_POOL_ATTRS = {
    "auto_pad": "NOTSET",
    "ceil_mode": 0,
    "dilations": None,
    "kernel_shape": None,
    "pads": None,
    "strides": None,
}
register(
    "MaxPool",
    Pattern.OUT_ELEMWISE_FUSABLE,
    _max_pool_type,
    _max_pool_outputs,
    attrs={**_POOL_ATTRS, "storage_order": 0},
    outputs=(1, 2),
    expand=_expand_max_pool,
)
register(
    "AveragePool",
    Pattern.OUT_ELEMWISE_FUSABLE,
    _pool_type,
    average_pool,
    attrs={**_POOL_ATTRS, "count_include_pad": 0},
)


def _global_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    return [TensorType((*x.shape[:2], *(1,) * (len(x.shape) - 2)), x.dtype)]


def _global(fn: Any) -> Any:
    def compute(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
        axes = tuple(range(2, x.ndim))
        return fn(x.astype(np.float64), axis=axes, keepdims=True).astype(x.dtype)

    return compute


register("GlobalAveragePool", Pattern.OUT_ELEMWISE_FUSABLE, _global_type, _global(np.mean))


def _global_max(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """ReduceMax over the spatial axes, its NaN rule included (`shape.nan_first`, as the
    compiled pool): NaN skipped unless the image's first value is NaN."""
    axes = tuple(range(2, x.ndim))
    if x.dtype.kind != "f":
        return x.max(axis=axes, keepdims=True)
    return nan_first(x.astype(np.float64), axes, np.max, {"keepdims": 1}).astype(x.dtype)


register("GlobalMaxPool", Pattern.OUT_ELEMWISE_FUSABLE, _global_type, _global_max)


def _gemm_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    a, b = types[0].shape, types[1].shape
    if len(a) != 2 or len(b) != 2:
        raise ValueError(f"Gemm inputs A and B must be matrices, not shapes {a} and {b}")
    m = a[1] if attrs["transA"] else a[0]
    n = b[0] if attrs["transB"] else b[1]
    k_a, k_b = (a[0] if attrs["transA"] else a[1]), (b[1] if attrs["transB"] else b[0])
    if k_a != k_b:
        raise ValueError(f"Gemm reduction sizes must agree, not {k_a} and {k_b}")
    if len(types) > 2 and types[2] is not None:
        _check_broadcasts_to(types[2].shape, (m, n), "Gemm C")
    return [TensorType((m, n), types[0].dtype)]


def gemm(attrs: dict[str, Any], a: np.ndarray, b: np.ndarray, c: Any = None) -> np.ndarray:
    a = a.T if attrs["transA"] else a
    b = b.T if attrs["transB"] else b
    y = attrs["alpha"] * (a @ b) if attrs["alpha"] != 1.0 else a @ b
    if c is not None:
        y = y + (attrs["beta"] * c if attrs["beta"] != 1.0 else c)
    return np.ascontiguousarray(y, dtype=a.dtype)


register(
    "Gemm",
    Pattern.OUT_ELEMWISE_FUSABLE,
    _gemm_type,
    gemm,
    inputs=(2, 3),
    attrs={"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
)


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's result shape, with its error as a ValueError."""
    if not a or not b:
        raise ValueError(f"MatMul inputs must have a rank of at least 1, not shapes {a} and {b}")
    a2, b2 = (1, *a) if len(a) == 1 else a, (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ValueError(f"MatMul reduction sizes must agree, not {a2[-1]} and {b2[-2]}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    shape = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape


def _matmul_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [TensorType(matmul_shape(types[0].shape, types[1].shape), types[0].dtype)]


register(
    "MatMul",
    Pattern.OUT_ELEMWISE_FUSABLE,
    _matmul_type,
    lambda attrs, a, b: np.matmul(a, b),
    inputs=(2, 2),
)


def _bn_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    if attrs["training_mode"]:
        raise ValueError("BatchNormalization training_mode must be 0 (inference), not 1")
    x = types[0].shape
    if len(x) < 2:
        raise ValueError(f"BatchNormalization input must have a channel dim, not shape {x}")
    for i, what in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
        _check_param(types, i, (x[1],), f"BatchNormalization {what}")
    return [types[0]]


def batch_norm(
    attrs: dict[str, Any],
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
) -> np.ndarray:
    shape = (1, -1, *(1,) * (x.ndim - 2))
    factor = scale / np.sqrt(var.astype(np.float64) + attrs["epsilon"])
    y = (x - mean.reshape(shape)) * factor.reshape(shape) + bias.reshape(shape)
    return y.astype(x.dtype)


register(
    "BatchNormalization",
    Pattern.BROADCAST,
    _bn_type,
    batch_norm,
    inputs=(5, 5),
    attrs={"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0},
)


def softmax(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    if x.size == 0:  # (no max of an empty row: nothing to compute)
        return x.copy()
    z = x.astype(np.float64)
    z = np.exp(z - z.max(axis=attrs["axis"], keepdims=True))
    return (z / z.sum(axis=attrs["axis"], keepdims=True)).astype(x.dtype)


def _log_softmax(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    z = x.astype(np.float64)
    z = z - z.max(axis=attrs["axis"], keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=attrs["axis"], keepdims=True))).astype(x.dtype)


def _same(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    rank = len(types[0].shape)
    if not -rank <= attrs["axis"] < rank:
        raise ValueError(f"axis must be in [{-rank}, {rank - 1}], not {attrs['axis']}")
    return [types[0]]


register("Softmax", Pattern.OPAQUE, _same, softmax, attrs={"axis": -1})
register("LogSoftmax", Pattern.OPAQUE, _same, _log_softmax, attrs={"axis": -1})


def _ln_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    rank = len(x.shape)
    if not -rank <= attrs["axis"] < rank:
        raise ValueError(f"LayerNormalization axis must be in [{-rank}, {rank - 1}]")
    axis = attrs["axis"] % rank
    if attrs["stash_type"] != 1:  # the statistics' type: 16 would be bfloat16, not built
        raise ValueError(
            f"LayerNormalization stash_type must be 1 (float32 statistics), not "
            f"{attrs['stash_type']!r}"
        )
    for i, what in ((1, "Scale"), (2, "B")):
        if len(types) > i and types[i] is not None:
            _check_broadcasts_to(types[i].shape, x.shape[axis:], f"LayerNormalization {what}")
    stat = TensorType((*x.shape[:axis], *(1,) * (len(x.shape) - axis)), "float32")
    return [x, stat, stat]


def layer_norm(attrs: dict[str, Any], x: np.ndarray, scale: np.ndarray, bias: Any = None) -> tuple:
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    z = x.astype(np.float64)
    mean = z.mean(axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(((z - mean) ** 2).mean(axis=axes, keepdims=True) + attrs["epsilon"])
    y = (z - mean) * inv_std * scale
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype), mean.astype(np.float32), inv_std.astype(np.float32)


register(
    "LayerNormalization",
    Pattern.OPAQUE,
    _ln_type,
    layer_norm,
    inputs=(2, 3),
    outputs=(1, 3),
    attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1},
)
