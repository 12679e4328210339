"""The built-in tunable templates: x86 dense and NCHWc conv2d, the accelerator's conv2d/dense.

Each template's space is declared next to its schedule (`topi.x86.dense.config_space`,
`topi.x86.conv2d.config_space`, `vta.schedule.config_space`); this module says how one
config of a workload is compiled and checked. The kernels are the ones the graph strategies
build (`compiler.graph.strategy`), without the fused element-wise tail, which does not change
which schedule is best.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .task import Artifact, TaskError, Template, check_elements, check_fields, register

# ---- helpers -------------------------------------------------------------------------------------


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype.startswith("float"):
        return rng.uniform(-1, 1, shape).astype(dtype)
    bound = 100 if dtype in ("int8", "uint8") else 300
    low = 0 if dtype.startswith("u") else -bound
    return rng.integers(low, bound, shape).astype(dtype)


def _acc_dtype(dtype: str) -> str:
    return dtype if dtype.startswith("float") else "int32"


def _tolerance(dtype: str, terms: int) -> tuple[float, float]:
    """Exact for integers; for floats, room for a different summation order of `terms`."""
    if not dtype.startswith("float"):
        return 0.0, 0.0
    return 1e-3, 1e-4 * math.sqrt(terms)


def _llvm_artifact(func: Any, target: str, inputs: list[np.ndarray], expected: np.ndarray,
                   dtype: str, terms: int) -> Artifact:  # fmt: skip
    from ..build import build_object

    obj = build_object(func, target=target)
    params = [(b.name, b.dtype, tuple(int(d) for d in shape))
              for b, shape in zip(func.params, func.arg_shapes, strict=True)]  # fmt: skip
    rtol, atol = _tolerance(dtype, terms)
    return Artifact("llvm", obj, inputs, expected, symbol=func.name, params=params, rtol=rtol,
                    atol=atol)  # fmt: skip


# ---- x86 dense -----------------------------------------------------------------------------------


def _dense_space(wl: dict) -> Any:
    from ..topi.x86.dense import config_space

    return config_space(int(wl["m"]), int(wl["n"]), int(wl["k"]))


def _dense_lower(wl: dict, values: dict, target: str) -> Any:
    from .. import te
    from ..tir import lower
    from ..topi.x86.dense import config_from, dense, dense_prepacked, schedule_dense

    m, n, k, dtype = int(wl["m"]), int(wl["n"]), int(wl["k"]), str(wl["dtype"])
    config = config_from(values)
    data = te.placeholder((m, k), dtype, name="data")
    if wl.get("prepacked", True):
        panels = te.placeholder((-(-n // config.bn), k, config.bn), dtype, name="panels")
        op = dense_prepacked(data, panels, n)
        s = schedule_dense(op, config)
        s[op.packed].compute_inline()
    else:
        weight = te.placeholder((n, k), dtype, name="weight")
        op = dense(data, weight, None, None, _acc_dtype(dtype), config, "NK")
        s = schedule_dense(op, config)
    return lower(s, op.args, name="tuned_dense")


def _dense_build(wl: dict, values: dict, target: str, seed: int) -> Artifact:
    from ..topi.x86.dense import config_from, pack_panels

    m, n, k, dtype = int(wl["m"]), int(wl["n"]), int(wl["k"]), str(wl["dtype"])
    rng = _rng(seed)
    a, w = _random(rng, (m, k), dtype), _random(rng, (n, k), dtype)
    wide = np.float64 if dtype.startswith("float") else np.int64
    expected = (a.astype(wide) @ w.astype(wide).T).astype(_acc_dtype(dtype))
    func = _dense_lower(wl, values, target)
    second = pack_panels(w, config_from(values).bn) if wl.get("prepacked", True) else w
    return _llvm_artifact(func, target, [a, second], expected, dtype, k)


def _dense_check(wl: dict) -> None:
    check_fields("x86.dense", wl, {"m": "size", "n": "size", "k": "size", "dtype": "dtype",
                                   "prepacked": "flag?"})  # fmt: skip
    m, n, k = wl["m"], wl["n"], wl["k"]
    check_elements("x86.dense", {"data": (m, k), "weight": (n, k), "output": (m, n)})


register(Template(
    "x86.dense", "llvm", "s", _dense_space, _dense_build,
    lambda wl: 2 * int(wl["m"]) * int(wl["n"]) * int(wl["k"]), _dense_lower, _dense_check,
))  # fmt: skip


# ---- x86 conv2d NCHWc ----------------------------------------------------------------------------


def _conv_out(wl: dict) -> tuple[int, int]:
    oh = (wl["h"] + 2 * wl["pad"] - wl["dil"] * (wl["r"] - 1) - 1) // wl["stride"] + 1
    ow = (wl["w"] + 2 * wl["pad"] - wl["dil"] * (wl["s"] - 1) - 1) // wl["stride"] + 1
    return int(oh), int(ow)


def _conv_space(wl: dict) -> Any:
    from ..topi.x86.conv2d import config_space

    g = _groups(wl)
    return config_space(int(wl["c"]) // g, int(wl["k"]) // g, _conv_out(wl), int(wl["pad"]),
                        _blocks(wl))  # fmt: skip


def _groups(wl: dict) -> int:
    return int(wl.get("groups", 1))


#: the layouts of a blocked conv2d workload (`layout`, with `blocks` = [ic_bn, oc_bn]): input
#: and output NCHW[c]c, or an NCHW input (an RGB stem that packs its own) and a blocked output;
#: a workload without `layout` is the NCHW-in, NCHW-out kernel
CONV_LAYOUTS = ("NCHWc", "NCHW-NCHWc")


def _blocks(wl: dict) -> tuple[int, int] | None:
    return (int(wl["blocks"][0]), int(wl["blocks"][1])) if "layout" in wl else None


def _conv_lower(wl: dict, values: dict, target: str) -> Any:
    from .. import te
    from ..tir import lower
    from ..topi.x86.conv2d import (
        config_from,
        conv2d_nchwc,
        kernel_blocks,
        schedule_conv2d_nchwc,
    )

    config = config_from(values)
    dtype = str(wl["dtype"])
    n, c, h, w, k, r, s_ = (int(wl[f]) for f in ("n", "c", "h", "w", "k", "r", "s"))
    g = _groups(wl)
    ic_bn, oc_bn = kernel_blocks(c // g, k // g, config)
    blocked = wl.get("layout") == "NCHWc"
    shape = (n, c // ic_bn, h, w, ic_bn) if blocked else (n, c, h, w)
    data = te.placeholder(shape, dtype, name="data")
    kernel = te.placeholder((k // oc_bn, c // g // ic_bn, r, s_, ic_bn, oc_bn), dtype,
                            name="kernel")  # fmt: skip
    op = conv2d_nchwc(data, kernel, int(wl["stride"]), int(wl["pad"]), int(wl["dil"]), None,
                      None, config, _acc_dtype(dtype), g, blocked="layout" in wl)  # fmt: skip
    return lower(schedule_conv2d_nchwc(op, config), op.args, name="tuned_conv2d")


def conv2d_numpy(
    x: np.ndarray, w: np.ndarray, stride: int, pad: int, dil: int, groups: int = 1
) -> np.ndarray:
    """The NCHW x OIHW convolution in numpy (float64 or int64 accumulation): the oracle."""
    if groups > 1:  # each group on its own channels
        xs, ws = np.split(x, groups, axis=1), np.split(w, groups, axis=0)
        parts = [conv2d_numpy(a, b, stride, pad, dil) for a, b in zip(xs, ws, strict=True)]
        return np.concatenate(parts, axis=1)
    wide = np.float64 if x.dtype.kind == "f" else np.int64
    x = np.pad(x.astype(wide), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k, _, r, s = w.shape
    n, _, h, wd = x.shape
    oh, ow = (h - dil * (r - 1) - 1) // stride + 1, (wd - dil * (s - 1) - 1) // stride + 1
    out = np.zeros((n, k, oh, ow), wide)
    for y in range(r):
        for xx in range(s):
            patch = x[:, :, y * dil : y * dil + stride * (oh - 1) + 1 : stride,
                      xx * dil : xx * dil + stride * (ow - 1) + 1 : stride]  # fmt: skip
            out += np.einsum("nchw,kc->nkhw", patch, w[:, :, y, xx].astype(wide))
    return out


def _conv_build(wl: dict, values: dict, target: str, seed: int) -> Artifact:
    from ..graph.ops.layout import to_blocked
    from ..topi.x86.conv2d import config_from, kernel_blocks, pack_kernel

    dtype = str(wl["dtype"])
    n, c, h, w, k, r, s_ = (int(wl[f]) for f in ("n", "c", "h", "w", "k", "r", "s"))
    g = _groups(wl)
    rng = _rng(seed)
    x, weight = _random(rng, (n, c, h, w), dtype), _random(rng, (k, c // g, r, s_), dtype)
    expected = conv2d_numpy(x, weight, int(wl["stride"]), int(wl["pad"]), int(wl["dil"]), g)
    ic_bn, oc_bn = kernel_blocks(c // g, k // g, config_from(values))
    if "layout" in wl:  # the output in the blocked layout, and the input too unless a stem's
        expected = to_blocked(expected, oc_bn)
        x = to_blocked(x, ic_bn) if wl["layout"] == "NCHWc" else x
    func = _conv_lower(wl, values, target)
    packed = pack_kernel(weight, ic_bn, oc_bn)
    return _llvm_artifact(func, target, [x, packed], expected.astype(_acc_dtype(dtype)), dtype,
                          c // g * r * s_)  # fmt: skip


def _conv_flops(wl: dict) -> int:
    oh, ow = _conv_out(wl)
    return 2 * wl["n"] * wl["k"] * oh * ow * wl["c"] // _groups(wl) * wl["r"] * wl["s"]


def _conv_check(wl: dict) -> None:
    sizes = dict.fromkeys(("n", "c", "h", "w", "k", "r", "s", "stride", "dil"), "size")
    fields = {**sizes, "pad": "pad", "dtype": "dtype", "groups": "size?", "blocks": "size2?"}
    check_fields("x86.conv2d_nchwc", {f: v for f, v in wl.items() if f != "layout"}, fields)
    n, c, h, w, k, r, s_ = (wl[f] for f in ("n", "c", "h", "w", "k", "r", "s"))
    g = _groups(wl)
    if c % g or k % g:
        raise TaskError(f"x86.conv2d_nchwc: groups must divide c and k, not {wl}")
    _check_conv_layout(wl)
    check_elements("x86.conv2d_nchwc", {"data": (n, c, h, w), "kernel": (k, c // g, r, s_),
                                        "output": (n, k, *_conv_out(wl))})  # fmt: skip


def _check_conv_layout(wl: dict) -> None:
    """A blocked workload has a `layout` of `CONV_LAYOUTS` and `blocks` dividing c and k (no
    groups); an NCHW one has neither."""
    layout, blocks = wl.get("layout"), wl.get("blocks")
    if layout is None and blocks is None:
        return
    if layout not in CONV_LAYOUTS or blocks is None:
        raise TaskError(f"x86.conv2d_nchwc workload field 'layout' must be one of {CONV_LAYOUTS} "
                        f"with 'blocks' [ic_bn, oc_bn], not layout {layout!r}, blocks "
                        f"{blocks!r}")  # fmt: skip
    if wl["c"] % blocks[0] or wl["k"] % blocks[1] or _groups(wl) > 1:
        raise TaskError(f"x86.conv2d_nchwc workload field 'blocks' {blocks} must divide the "
                        f"channels c={wl['c']} and k={wl['k']} of an ungrouped conv2d")  # fmt: skip


register(Template("x86.conv2d_nchwc", "llvm", "s", _conv_space, _conv_build, _conv_flops,
                  _conv_lower, _conv_check))  # fmt: skip


# ---- x86 depthwise conv2d (the graph layer's own lowering) -------------------------------------


def _dw_graph(wl: dict, weight: np.ndarray) -> Any:
    from ..graph import GraphBuilder
    from ..graph.passes import optimize

    b = GraphBuilder("depthwise")
    x = b.add_input("x", (wl["n"], wl["c"], wl["h"], wl["w"]), str(wl["dtype"]))
    w = b.add_constant("w", weight)
    pads = list(wl["pads"])
    attrs = {"group": int(wl["c"]), "pads": tuple(pads), "strides": tuple(wl["strides"]),
             "dilations": tuple(wl["dil"])}  # fmt: skip
    (y,) = b.add_node("Conv", [x, w], attrs)
    return optimize(b.build([y]))


def _dw_kernel(wl: dict, values: dict, weight: np.ndarray) -> tuple[Any, Any]:
    """(graph, kernel) of the one-node depthwise graph lowered with these knob values."""
    from ..graph.lower_te import lower_group
    from .dispatch import ApplyBest, workload_key

    graph = _dw_graph(wl, weight)
    (group,) = graph.groups
    with ApplyBest({workload_key("x86.depthwise_conv2d", wl): dict(values)}) as ctx:
        kernel = lower_group(graph, group)
    if not ctx.applied:
        raise RuntimeError(f"the graph did not lower {wl} as x86.depthwise_conv2d")
    return graph, kernel


def _dw_weight(wl: dict, seed: int) -> np.ndarray:
    return _random(_rng(seed + 1), (int(wl["c"]), 1, int(wl["r"]), int(wl["s"])), wl["dtype"])


def _dw_lower(wl: dict, values: dict, target: str) -> Any:
    from ..tir import lower

    if "layout" in wl:
        return _dw_blocked_lower(wl, values, target)
    _, kernel = _dw_kernel(wl, values, _dw_weight(wl, 0))
    return lower(kernel.schedule, kernel.args, name="tuned_depthwise")


def _dw_blocked_lower(wl: dict, values: dict, target: str) -> Any:
    """The blocked kernel of a chain's depthwise layer (`layout` "NCHWc"): input, packed
    weights and output in blocks of `block` channels, as `graph.strategy.layout` builds it."""
    from .. import te
    from ..codegen.llvm_jit import vector_registers
    from ..tir import lower
    from ..topi.x86.depthwise import (
        DepthwiseConfig,
        depthwise_conv2d_nchwc,
        schedule_depthwise_nchwc,
    )

    n, c, h, w, r, s_, cb = (int(wl[f]) for f in ("n", "c", "h", "w", "r", "s", "block"))
    data = te.placeholder((n, c // cb, h, w, cb), wl["dtype"], name="data")
    kernel = te.placeholder((c // cb, r, s_, cb), wl["dtype"], name="kernel")
    op = depthwise_conv2d_nchwc(data, kernel, _dw_out(wl), wl["pads"][:2], wl["strides"],
                                wl["dil"], blocked=True)  # fmt: skip
    vec = max(1, vector_registers(target)[0] * 4 // np.dtype(wl["dtype"]).itemsize)
    config = DepthwiseConfig(cb, int(values["reg_n"]), bool(values["parallel"]), vec)
    return lower(schedule_depthwise_nchwc(op, config), op.args, name="tuned_depthwise")


def depthwise_numpy(
    x: np.ndarray, w: np.ndarray, pads: list, strides: list, dil: list
) -> np.ndarray:
    """Depthwise NCHW convolution with `w` of shape (C, 1, R, S) (float64): the oracle."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    _, _, r, s = w.shape
    oh = (xp.shape[2] - dil[0] * (r - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dil[1] * (s - 1) - 1) // strides[1] + 1
    out = np.zeros((x.shape[0], x.shape[1], oh, ow))
    for y in range(r):
        for xx in range(s):
            y0, x0 = y * dil[0], xx * dil[1]
            patch = xp[:, :, y0 : y0 + strides[0] * (oh - 1) + 1 : strides[0],
                       x0 : x0 + strides[1] * (ow - 1) + 1 : strides[1]]  # fmt: skip
            out += patch * w[None, :, 0, y, xx, None, None]
    return out


def _dw_build(wl: dict, values: dict, target: str, seed: int) -> Artifact:
    from ..graph.ops.layout import to_blocked
    from ..tir import lower
    from ..topi.x86.depthwise import pack_depthwise_kernel

    weight = _dw_weight(wl, seed)
    x = _random(_rng(seed), (wl["n"], wl["c"], wl["h"], wl["w"]), wl["dtype"])
    expected = depthwise_numpy(x, weight, wl["pads"], wl["strides"], wl["dil"])
    if "layout" in wl:  # the chain's blocked kernel: everything in blocks of `block` channels
        cb = int(wl["block"])
        func = _dw_blocked_lower(wl, values, target)
        inputs = [to_blocked(x, cb), pack_depthwise_kernel(weight, cb)]
        expected = to_blocked(expected, cb)
    else:
        graph, kernel = _dw_kernel(wl, values, weight)
        values_of = {"x": x, **graph.constants, **kernel.constants}
        inputs = [np.ascontiguousarray(values_of[p]) for p in kernel.params]
        func = lower(kernel.schedule, kernel.args, name="tuned_depthwise")
    return _llvm_artifact(func, target, inputs, expected.astype(wl["dtype"]), wl["dtype"],
                          int(wl["r"]) * int(wl["s"]))  # fmt: skip


def _dw_space(wl: dict) -> Any:
    from ..graph.strategy.nn import depthwise_space

    return depthwise_space(wl)


def _dw_out(wl: dict) -> tuple[int, int]:
    oh = wl["h"] + wl["pads"][0] + wl["pads"][2] - wl["dil"][0] * (wl["r"] - 1) - 1
    ow = wl["w"] + wl["pads"][1] + wl["pads"][3] - wl["dil"][1] * (wl["s"] - 1) - 1
    return oh // wl["strides"][0] + 1, ow // wl["strides"][1] + 1


def _dw_flops(wl: dict) -> int:
    oh, ow = _dw_out(wl)
    return 2 * wl["n"] * wl["c"] * oh * ow * wl["r"] * wl["s"]


def _dw_check(wl: dict) -> None:
    sizes = dict.fromkeys(("n", "c", "h", "w", "r", "s"), "size")
    fields = {**sizes, "pads": "pad4", "strides": "size2", "dil": "size2", "dtype": "dtype",
              "block": "size?"}  # fmt: skip
    check_fields("x86.depthwise_conv2d", {f: v for f, v in wl.items() if f != "layout"}, fields)
    layout, block = wl.get("layout"), wl.get("block")
    if (layout is None) != (block is None) or layout not in (None, "NCHWc"):
        raise TaskError(f"x86.depthwise_conv2d workload field 'layout' must be 'NCHWc' with "
                        f"a 'block', or both left out, not {layout!r} and {block!r}")  # fmt: skip
    if wl["c"] < 2:  # the graph lowers a one-channel "depthwise" conv as a plain conv2d
        raise TaskError(f"x86.depthwise_conv2d workload field 'c' must be at least 2 (one "
                        f"channel is an x86.conv2d_nchwc workload), not {wl['c']}")  # fmt: skip
    if block is not None and wl["c"] % block:
        raise TaskError(f"x86.depthwise_conv2d workload field 'block' {block} must divide the "
                        f"channels c={wl['c']}")  # fmt: skip
    n, c, h, w, r, s_ = (wl[f] for f in ("n", "c", "h", "w", "r", "s"))
    check_elements("x86.depthwise_conv2d", {"data": (n, c, h, w), "weight": (c, 1, r, s_),
                                            "output": (n, c, *_dw_out(wl))})  # fmt: skip
    _check_dw_end_pads(wl)


def _check_dw_end_pads(wl: dict) -> None:
    """The bottom and right pads must be those the last output row and column read, as the
    graph's workload has them (`strategy.conv.depthwise_workload`): a larger pad that no output
    reads gives the same convolution under another key, one no compile ever asks for, so no
    config of it could be lowered by the graph's template."""
    from ..graph.strategy.nn import pads_after

    spans = ((wl["r"], wl["s"]), wl["pads"][:2], wl["strides"], wl["dil"], (wl["h"], wl["w"]))
    ends = pads_after(_dw_out(wl), *spans)
    if list(wl["pads"][2:]) != ends:
        raise TaskError(f"x86.depthwise_conv2d workload field 'pads' {wl['pads']} must end with "
                        f"the padding its output reads, {ends} (bottom, right), not "
                        f"{wl['pads'][2:]}")  # fmt: skip


register(Template("x86.depthwise_conv2d", "llvm", "s", _dw_space, _dw_build, _dw_flops,
                  _dw_lower, _dw_check))  # fmt: skip


# ---- the accelerator's conv2d and dense ----------------------------------------------------------

from ..vta.kernel import SHAPE_FIELDS as _VTA_SHAPE  # noqa: E402  (one list of fields)


def _vta_workload(wl: dict) -> tuple[Any, Any]:
    from ...hw.config import HWConfig
    from ..vta.schedule import Conv2dWorkload

    shape = (int(wl[f]) for f in _VTA_SHAPE)
    channel_scales, groups = bool(wl.get("channel_scales", False)), int(wl.get("groups", 1))
    bottom, right = (int(wl[k]) if k in wl else None for k in ("pad_bottom", "pad_right"))
    cw = Conv2dWorkload(*shape, channel_scales=channel_scales, groups=groups, pad_bottom=bottom,
                        pad_right=right)  # fmt: skip
    return HWConfig.from_dict(dict(wl["hw"])), cw


def _vta_space(wl: dict) -> Any:
    from ..vta.schedule import config_space

    cfg, cw = _vta_workload(wl)
    return config_space(cfg, cw, bool(wl.get("residual", False)))


def _vta_build(wl: dict, values: dict, target: str, seed: int) -> Artifact:
    from ..quantize.requant import requant_params_per_channel
    from ..quantize.residual import add_params
    from ..vta.kernel import conv2d
    from ..vta.layout import INPUT, OUTPUT, RESIDUAL, pack_nchw
    from ..vta.schedule import schedule_from

    cfg, cw = _vta_workload(wl)
    rng = _rng(seed)
    x = rng.integers(-128, 128, (cw.n, cw.ic, cw.h, cw.w), dtype=np.int8)
    weight = rng.integers(-128, 128, (cw.oc, cw.ic // cw.groups, cw.kh, cw.kw), dtype=np.int8)
    bias = rng.integers(-2000, 2000, cw.oc, dtype=np.int32)
    shift = max(1, int(math.log2(128 * 128 * cw.ic // cw.groups * cw.kh * cw.kw) / 2))
    residual = add_params(0.5, 1.0, cfg, relu=True) if wl.get("residual") else None
    pool = (cw.pool_h, cw.pool_w) if cw.pooled else None
    requant = {"shift": shift, "relu": residual is None}
    if cw.channel_scales:  # per-channel multipliers around the same overall ratio
        bounds = 127 * np.abs(weight.astype(np.int64)).reshape(cw.oc, -1).sum(1) + np.abs(bias)
        ratios = 2.0**-shift * rng.uniform(0.5, 2.0, cw.oc)
        relu = residual is None
        requant = {"requant": requant_params_per_channel(ratios, cfg, acc_bounds=bounds, relu=relu)}
    kern = conv2d(cfg, (cw.n, cw.ic, cw.h, cw.w), weight, bias, stride=(cw.stride_h, cw.stride_w),
                  padding=cw.pads, schedule=schedule_from(values), residual=residual,
                  max_pool=pool, groups=cw.groups, **requant)  # fmt: skip
    inputs = {INPUT: kern.pack(x)}
    r = None
    if residual is not None:
        r = rng.integers(-128, 128, (cw.n, cw.oc, cw.oh, cw.ow), dtype=np.int8)
        inputs[RESIDUAL] = pack_nchw(cfg, r, cfg.block_out)
    expected = kern.reference(x, r)
    return Artifact("vta", kern.image.to_bytes(), inputs, expected, output=OUTPUT,
                    hw=cfg.to_dict())  # fmt: skip


def _vta_flops(wl: dict) -> int:
    _, cw = _vta_workload(wl)
    return 2 * cw.n * cw.oc * cw.oh * cw.ow * cw.ic // cw.groups * cw.kh * cw.kw


def _vta_check(wl: dict) -> None:
    fields = dict.fromkeys(_VTA_SHAPE, "size")
    fields.update(hw="dict", pad_h="pad", pad_w="pad", residual="flag?", channel_scales="flag?",
                  groups="size?", pad_bottom="pad?", pad_right="pad?")  # fmt: skip
    check_fields("vta.conv2d", wl, fields)
    try:
        _, cw = _vta_workload(wl)
    except ValueError as exc:  # the hardware config's or the conv2d's own checks
        raise TaskError(f"vta.conv2d workload: {exc}") from exc
    check_elements("vta.conv2d", {"input": (cw.n, cw.ic, cw.h, cw.w),
                                  "weight": (cw.oc, cw.ic // cw.groups, cw.kh, cw.kw),
                                  "output": (cw.n, cw.oc, cw.oh, cw.ow)})  # fmt: skip


register(Template("vta.conv2d", "vta", "cycles", _vta_space, _vta_build, _vta_flops, None,
                  _vta_check))  # fmt: skip


# ---- GPU dense (CUDA and OpenCL) -----------------------------------------------------------------


def _gpu_dense_space(wl: dict) -> Any:
    from ..topi.gpu.dense import config_space

    return config_space(int(wl["m"]), int(wl["n"]), int(wl["k"]), int(wl["max_threads"]))


def _gpu_dense_lower(wl: dict, values: dict, target: str) -> Any:
    from .. import te
    from ..tir import lower
    from ..topi.gpu.dense import batch_dense, config_from, dense, schedule_dense

    m, n, k, dtype = int(wl["m"]), int(wl["n"]), int(wl["k"]), str(wl["dtype"])
    batch = (int(wl["batch"]),) if "batch" in wl else ()  # a batched MatMul: [batch, m, k] @ ...
    data = te.placeholder((*batch, m, k), dtype, name="data")
    weight = te.placeholder((*batch, k, n), dtype, name="weight")
    acc, out = batch_dense(data, weight) if batch else dense(data, weight)
    s = schedule_dense(te.create_schedule(out.op), out, None, config_from(values))
    return lower(s, [data, weight, out], name="tuned_gpu_dense")


def _gpu_dense_build(wl: dict, values: dict, target: str, seed: int) -> Artifact:
    from ..codegen.gpu import encode_payload, gpu_payload, split_kernels
    from ..target import Target

    m, n, k, dtype = int(wl["m"]), int(wl["n"]), int(wl["k"]), str(wl["dtype"])
    batch = (int(wl["batch"]),) if "batch" in wl else ()
    rng = _rng(seed)
    a, w = _random(rng, (*batch, m, k), dtype), _random(rng, (*batch, k, n), dtype)
    wide = np.float64 if dtype.startswith("float") else np.int64
    expected = (a.astype(wide) @ w.astype(wide)).astype(_acc_dtype(dtype))
    func = _gpu_dense_lower(wl, values, target)
    payload = encode_payload(gpu_payload(split_kernels(func), Target.parse(target)))
    params = [(b.name, b.dtype, tuple(int(d) for d in shape))
              for b, shape in zip(func.params, func.arg_shapes, strict=True)]  # fmt: skip
    rtol, atol = _tolerance(dtype, k)
    return Artifact("gpu", payload, [a, w], expected, symbol=func.name, params=params, rtol=rtol,
                    atol=atol)  # fmt: skip


def _gpu_dense_check(wl: dict) -> None:
    check_fields("gpu.dense", wl, {"m": "size", "n": "size", "k": "size", "dtype": "dtype",
                                   "max_threads": "size", "batch": "size?"})  # fmt: skip
    m, n, k, b = wl["m"], wl["n"], wl["k"], wl.get("batch", 1)
    check_elements("gpu.dense", {"data": (b, m, k), "weight": (b, k, n), "output": (b, m, n)})


register(Template(
    "gpu.dense", "cuda|opencl", "s", _gpu_dense_space, _gpu_dense_build,
    lambda wl: 2 * int(wl.get("batch", 1)) * int(wl["m"]) * int(wl["n"]) * int(wl["k"]),
    _gpu_dense_lower,
    _gpu_dense_check,
))  # fmt: skip


# ---- GPU row reductions: softmax, layer norm, long reductions (CUDA and OpenCL) -----------------


def _gpu_rows_space(wl: dict) -> Any:
    from ..topi.gpu.reduce import config_space

    return config_space(int(wl["n"]), int(wl["max_threads"]))


def _gpu_rows_lower(wl: dict, values: dict, target: str) -> Any:
    from .. import te
    from ..target import Target
    from ..tir import lower
    from ..topi.gpu.reduce import config_from, row_program, uses_warp

    rows, n, dtype = int(wl["rows"]), int(wl["n"]), str(wl["dtype"])
    x = te.placeholder((rows, n), dtype, name="x")
    warp = uses_warp(Target.parse(target).kind, dtype)
    out, s = row_program(x, str(wl["op"]), config_from(values), warp)
    return lower(s, [x, out], name="tuned_gpu_rows")


def _rows_reference(op: str, x: np.ndarray) -> np.ndarray:
    """numpy's value of a `gpu.row_reduce` workload's op on rows `x` (float64)."""
    if op in ("softmax", "log_softmax"):
        shifted = x - x.max(axis=1, keepdims=True)
        logsum = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return shifted - logsum if op == "log_softmax" else np.exp(shifted - logsum)
    if op == "layer_norm":
        centred = x - x.mean(axis=1, keepdims=True)
        return centred / np.sqrt((centred * centred).mean(axis=1, keepdims=True) + 1e-5)
    return {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[op](x, axis=1)


def _gpu_rows_build(wl: dict, values: dict, target: str, seed: int) -> Artifact:
    from ..codegen.gpu import encode_payload, gpu_payload, split_kernels
    from ..target import Target

    rows, n, dtype, op = int(wl["rows"]), int(wl["n"]), str(wl["dtype"]), str(wl["op"])
    x = _random(_rng(seed), (rows, n), dtype)
    wide = np.float64 if dtype.startswith("float") else np.int64
    expected = _rows_reference(op, x.astype(wide)).astype(dtype)
    func = _gpu_rows_lower(wl, values, target)
    payload = encode_payload(gpu_payload(split_kernels(func), Target.parse(target)))
    params = [(b.name, b.dtype, tuple(int(d) for d in shape))
              for b, shape in zip(func.params, func.arg_shapes, strict=True)]  # fmt: skip
    rtol, atol = _tolerance(dtype, n)
    return Artifact("gpu", payload, [x], expected, symbol=func.name, params=params, rtol=rtol,
                    atol=atol)  # fmt: skip


def _gpu_rows_check(wl: dict) -> None:
    from ..topi.gpu.reduce import ROW_OPS

    if wl.get("op") not in ROW_OPS:
        raise TaskError(f"gpu.row_reduce workload field 'op' must be one of {ROW_OPS}, "
                        f"not {wl.get('op')!r}")  # fmt: skip
    rest = {k: v for k, v in wl.items() if k != "op"}
    check_fields("gpu.row_reduce", rest, {"rows": "size", "n": "size", "dtype": "dtype",
                                          "max_threads": "size"})  # fmt: skip
    check_elements("gpu.row_reduce", {"input": (wl["rows"], wl["n"])})


register(Template(
    "gpu.row_reduce", "cuda|opencl", "s", _gpu_rows_space, _gpu_rows_build,
    lambda wl: 4 * int(wl["rows"]) * int(wl["n"]), _gpu_rows_lower, _gpu_rows_check,
))  # fmt: skip


# ---- GPU convolutions: direct, implicit GEMM, depthwise; grouped, 2-D and 3-D (CUDA, OpenCL) ----


def _gpu_conv_space(template: str) -> Any:
    def space(wl: dict) -> Any:
        from ..topi.gpu.conv2d import config_space_of

        return config_space_of(template, wl)

    return space


def _gpu_conv_lower(template: str) -> Any:
    def lower_conv(wl: dict, values: dict, target: str) -> Any:
        from ..tir import lower
        from ..topi.gpu.conv2d import conv_program

        args, s = conv_program(template, wl, values)
        return lower(s, args, name="tuned_gpu_conv")

    return lower_conv


def _conv_reference(x: np.ndarray, w: np.ndarray, wl: dict) -> np.ndarray:
    """numpy's N-D convolution of a `gpu.conv2d` workload (grouped by the channel ratio:
    depthwise has one input channel per filter)."""
    pads, strides, dil, out = (wl[k] for k in ("pads", "strides", "dil", "out"))
    kernel, groups, inner = w.shape[2:], x.shape[1] // w.shape[1], x.shape[2:]
    spans = list(zip(inner, pads, strides, dil, out, kernel, strict=True))
    padded = np.zeros((*x.shape[:2], *(max(n + p, (o - 1) * s + (k - 1) * d + 1)
                                       for n, p, s, d, o, k in spans)), x.dtype)  # fmt: skip
    padded[(..., *(slice(p, p + n) for n, p, *_ in spans))] = x
    wg = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
    res = np.zeros((x.shape[0], groups, w.shape[0] // groups, *out), x.dtype)
    for tap in np.ndindex(*kernel):
        where = zip(tap, spans, strict=True)
        win = padded[(..., *(slice(t * d, t * d + (o - 1) * s + 1, s)
                             for t, (_, _, s, d, o, _) in where))]  # fmt: skip
        win = win.reshape(x.shape[0], groups, w.shape[1], -1)
        res += np.einsum("ngcp,gkc->ngkp", win, wg[(..., *tap)]).reshape(res.shape)
    return res.reshape(x.shape[0], w.shape[0], *out)


def _gpu_conv_build(template: str) -> Any:
    def build(wl: dict, values: dict, target: str, seed: int) -> Artifact:
        from ..codegen.gpu import encode_payload, gpu_payload, split_kernels
        from ..target import Target

        dtype, rng = str(wl["dtype"]), _rng(seed)
        x, w = _random(rng, tuple(wl["x"]), dtype), _random(rng, tuple(wl["w"]), dtype)
        expected = _conv_reference(x.astype(np.float64), w.astype(np.float64), wl).astype(dtype)
        func = _gpu_conv_lower(template)(wl, values, target)
        expected = expected.reshape(tuple(int(d) for d in func.arg_shapes[-1]))  # GEMM: 3-D
        payload = encode_payload(gpu_payload(split_kernels(func), Target.parse(target)))
        params = [(b.name, b.dtype, tuple(int(d) for d in shape))
                  for b, shape in zip(func.params, func.arg_shapes, strict=True)]  # fmt: skip
        rtol, atol = _tolerance(dtype, int(np.prod(wl["w"][1:])))
        return Artifact("gpu", payload, [x, w], expected, symbol=func.name, params=params,
                        rtol=rtol, atol=atol)  # fmt: skip

    return build


def _gpu_conv_check(template: str) -> Any:
    def check(wl: dict) -> None:
        x = wl.get("x")
        dims = len(x) - 2 if isinstance(x, list) and len(x) in (4, 5) else 2
        if template == "gpu.depthwise_conv2d":
            dims = 2
        n = str(dims)
        fields = {"x": "size" + str(dims + 2), "w": "size" + str(dims + 2), "out": "size" + n,
                  "pads": "pad" + n, "strides": "size" + n, "dil": "size" + n, "dtype": "dtype",
                  "max_threads": "size"}  # fmt: skip
        if template != "gpu.depthwise_conv2d":
            fields["groups"] = "size?"
        check_fields(template, wl, fields)
        x, w, out, groups = wl["x"], wl["w"], wl["out"], wl.get("groups", 1)
        if template == "gpu.depthwise_conv2d" and (w[1] != 1 or w[0] != x[1]):
            raise TaskError(f"{template} workload: weights {w} must be [channels, 1, r, s] for "
                            f"an input of {x[1]} channels")  # fmt: skip
        if template != "gpu.depthwise_conv2d" and w[1] * groups != x[1]:
            over = f" over {groups} groups" if groups > 1 else ""
            raise TaskError(f"{template} workload: weights {w} must have {x[1]} input "
                            f"channels{over}")  # fmt: skip
        if w[0] % groups:
            raise TaskError(f"{template} workload: weights {w} must have a multiple of "
                            f"{groups} groups as output channels")  # fmt: skip
        check_elements(template, {"input": tuple(x), "weight": tuple(w),
                                  "output": (x[0], w[0], *out)})  # fmt: skip

    return check


def _gpu_conv_flops(wl: dict) -> int:
    return 2 * int(np.prod(wl["out"])) * int(wl["x"][0]) * int(np.prod(wl["w"]))


for _name in ("gpu.conv2d", "gpu.conv2d_gemm", "gpu.depthwise_conv2d"):
    register(Template(_name, "cuda|opencl", "s", _gpu_conv_space(_name), _gpu_conv_build(_name),
                      _gpu_conv_flops, _gpu_conv_lower(_name), _gpu_conv_check(_name)))  # fmt: skip
