"""Case generator of the accelerator fuzzer (benchmarks/vta_fuzz.py): random small float ONNX
models of the kinds users compile for the VTA-like accelerator, each with a hardware config
and target options.

A case is `make_case(seed, index)`, deterministic: a float32 ONNX model (opset 17, built with
graph_fuzz_cases.GraphBuilder, which infers every node's shapes), its inputs, calibration
batches (the inputs among them), a HWConfig (a preset, or a random valid variation of one:
batch rows, channel blocks, buffer sizes, bus width, queue depths, the ALU MUL and GEMM requant
extensions) and the target options (`-mode`, `-weights`, `-depthwise`, `-vthreads`,
`-device`). A few cases in a hundred ask for an option the config cannot give (`-mode=mul`
without the ALU MUL, `-weights=per-channel` with shifts): the compiler must refuse them by
name.

Models: CNNs (`[N, C, H, W]`, N 1-3, odd channel counts and image sizes) of convolutions with
strides, symmetric and asymmetric padding, groups and depthwise, 1x1 and rectangular kernels,
batch norm, ReLU/Clip, residual adds (a conv's output plus a branch), max pooling (fusable
2x2/2, padded 3x3/2, overlapping), average and global average pooling, channel Concat, then
Flatten and Gemm/MatMul layers; MLPs over rows or sequences (`[N, T, K] @ [K, M]`); and 1-D
CNNs (`[N, C, L]`, audio).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from graph_fuzz_cases import GraphBuilder, gen_activation, gen_batchnorm, pick_outputs
from onnx.shape_inference import InferenceError

PRESETS = ("tiny", "pynq", "ultra96", "kv260")
BAD_KNOB = "config.json: "  # the refusal of a bad knob in a config file names the file
SMALL = (1, 2, 3, 4, 5, 7, 8, 12)  # fewer than a pynq block: such layers mostly stay on the CPU
WIDE = (16, 17, 20, 24, 31, 32, 33, 40)


def _channels(rng: np.random.Generator) -> int:
    """A channel count or feature width, most often one the accelerator takes on every preset."""
    return int(rng.choice(WIDE if rng.random() < 0.7 else SMALL))


@dataclasses.dataclass
class VtaCase:
    """A model, its inputs and calibration batch, and how to compile it."""

    name: str
    model: onnx.ModelProto
    feed: dict[str, np.ndarray]
    calibration: list[dict[str, np.ndarray]]  # batches
    config: dict[str, Any]  # HWConfig knobs (a preset's own when `preset`)
    preset: str | None  # the preset name when the config is one, for -config=<name>
    options: dict[str, str]  # -mode, -weights, -depthwise, -vthreads, -device
    expect_refusal: str = ""  # what the refusal's message must say ("" when it must compile)

    def target(self, config_path: str | None = None) -> str:
        cfg = self.preset or config_path or "<config.json>"
        return f"vta -config={cfg} " + " ".join(f"-{k}={v}" for k, v in self.options.items())


# --- hardware configs and target options -------------------------------------------------------


def random_config(rng: np.random.Generator) -> tuple[dict[str, Any], str | None]:
    """(HWConfig knobs, preset name or None): a preset half the time, else a preset with some
    knobs redrawn (each one valid; the HWConfig may still refuse the combination, which
    `config_or_none` sorts out)."""
    from tensorforge.hw.config import HWConfig

    name = str(rng.choice(PRESETS))
    base = HWConfig.preset(name).to_dict()
    if rng.random() < 0.5:
        return base, name
    knobs = dict(base, name=f"{name}-fuzz", board="sim")
    draws = {
        "log_batch": lambda: int(rng.choice([0, 0, 1, 2])),
        "log_block_in": lambda: int(rng.choice([1, 2, 3, 4, 5])),
        "log_block_out": lambda: int(rng.choice([1, 2, 3, 4, 5])),
        "log_inp_buff_size": lambda: int(rng.integers(9, 16)),
        "log_wgt_buff_size": lambda: int(rng.integers(10, 19)),
        "log_acc_buff_size": lambda: int(rng.integers(10, 18)),
        "log_uop_buff_size": lambda: int(rng.integers(10, 16)),
        "axi_data_width": lambda: int(rng.choice([32, 64, 128, 256])),
        "alu_mul": lambda: bool(rng.random() < 0.7),
        "gemm_requant": lambda: bool(rng.random() < 0.5),
        "max_outstanding_reads": lambda: int(rng.choice([1, 2, 4])),
        "insn_queue_depth": lambda: int(rng.choice([8, 32, 512])),
        "dep_queue_depth": lambda: int(rng.choice([4, 32, 1024])),
    }
    for knob in rng.permutation(list(draws))[: int(rng.integers(1, 6))]:
        knobs[str(knob)] = draws[str(knob)]()
    if rng.random() < 0.4:  # SRAMs of a few entries: layers tile, or just fit, or do not
        elem = {"inp": knobs["log_batch"] + knobs["log_block_in"],
                "wgt": knobs["log_block_out"] + knobs["log_block_in"],
                "acc": knobs["log_batch"] + knobs["log_block_out"] + 2}  # fmt: skip
        for buf, bits in elem.items():
            knobs[f"log_{buf}_buff_size"] = bits + int(rng.integers(2, 9))
        knobs["log_uop_buff_size"] = int(rng.integers(7, 12))
    return knobs, None


def config_or_none(knobs: dict[str, Any]) -> Any:
    """The HWConfig of `knobs`, or None when HWConfig refuses them."""
    from tensorforge.hw.config import HWConfig

    try:
        return HWConfig.from_dict(knobs)
    except ValueError:
        return None


def random_options(rng: np.random.Generator, alu_mul: bool) -> tuple[dict[str, str], str]:
    """(target options, why they must be refused or ""): valid for the config, except in 6%
    of the cases (a config with a bad knob among them: `bad_knobs`)."""
    mode = str(rng.choice(["mul", "shift"])) if alu_mul else "shift"
    weights = str(rng.choice(["per-channel", "per-tensor"])) if mode == "mul" else "per-tensor"
    options = {
        "mode": mode,
        "weights": weights,
        "depthwise": str(rng.choice(["accel", "cpu"])),
        "vthreads": str(rng.choice([1, 2])),
        "device": str(rng.choice(["sim", "sim", "cyclesim"])),
    }
    draw, refusal = rng.random(), ""
    if draw < 0.02:
        options["mode"], options["weights"] = "shift", "per-channel"
        refusal = "-weights=per-channel needs -mode=mul"
    elif draw < 0.04 and not alu_mul:
        options["mode"] = "mul"
        refusal = "-mode=mul needs the ALU MUL"
    elif draw < 0.04:
        options["vthreads"] = "3"
        refusal = "-vthreads must be one of 1, 2"
    elif draw < 0.05:
        options["device"] = "fpga"
        refusal = "-device must be one of sim, cyclesim, rtl"
    elif draw < 0.06:
        refusal = BAD_KNOB
    return options, refusal


def bad_knobs(knobs: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """`knobs` with one knob out of its range, misspelt or of the wrong type."""
    bad = dict(knobs, name=f"{knobs['name']}-bad")
    kind = int(rng.integers(4))
    if kind == 0:
        bad["log_block_in"] = 7
    elif kind == 1:
        bad["log_blok_out"] = bad.pop("log_block_out")
    elif kind == 2:
        bad["alu_mul"] = "yes"
    else:
        bad["log_inp_buff_size"] = knobs["log_batch"] + knobs["log_block_in"] - 1  # < 1 element
    return bad


# --- model generators: each returns False when it does not apply to the graph so far ----------

GenFn = Callable[[GraphBuilder], bool]


def _on_value(rank: int | None = None) -> Callable[[Callable[[GraphBuilder, str], bool]], GenFn]:
    """A generator over one value of `rank` that `b.pick` draws."""

    def wrap(fn: Callable[[GraphBuilder, str], bool]) -> GenFn:
        @functools.wraps(fn)
        def generator(b: GraphBuilder) -> bool:
            x = b.pick(rank)
            return x is not None and fn(b, x)

        return generator

    return wrap


def _epilogue(b: GraphBuilder, y: str) -> str:
    """A ReLU or ReLU6 after a layer most of the time (the quantizer absorbs them)."""
    draw = b.rng.random()
    if draw < 0.5:
        (y,) = b.add("Relu", [y])
    elif draw < 0.65:
        (y,) = b.add("Clip", [y, b.const(np.float32(0.0)), b.const(np.float32(6.0))])
    return y


def _conv(b: GraphBuilder, x: str, rank: int) -> bool:
    """A Conv over the 2-D (rank 4) or 1-D (rank 3) value `x`, often with an epilogue."""
    shape = b.shapes[x]
    c, spatial = shape[1], shape[2:]
    r = b.rng
    groups = [g for g in (1, 1, 1, 2, 3, 4, c) if c % g == 0]
    group = int(r.choice(groups))
    cout = _channels(r)
    if group > 1:
        cout = group * int(r.choice([1, 1, 2])) if group == c else group * int(r.integers(1, 5))
    k = [int(r.choice([1, 1, 2, 3, 3, 5])) for _ in spatial]
    if rank == 4 and r.random() < 0.7:
        k[1] = k[0]
    stride = [int(r.choice([1, 1, 1, 2, 3])) for _ in spatial]
    pads = [int(r.integers(0, kk // 2 + 1)) for kk in k] * 2
    if r.random() < 0.3:  # asymmetric
        pads = [int(r.integers(0, kk)) for kk in k] + [int(r.integers(0, kk)) for kk in k]
    n = len(spatial)
    if any(spatial[i] + pads[i] + pads[i + n] < k[i] for i in range(n)):
        return False
    inputs = [x, b.weights((cout, c // group, *k), c // group * int(np.prod(k)))]
    if r.random() < 0.8:
        inputs.append(b.const(r.uniform(-0.3, 0.3, cout).astype(np.float32), "bias"))
    (y,) = b.add("Conv", inputs, kernel_shape=k, strides=stride, pads=pads, group=group)
    if r.random() < 0.2:
        gen_batchnorm_on(b, y)
        y = b.values[-1]
    _epilogue(b, y)
    return True


def gen_batchnorm_on(b: GraphBuilder, y: str) -> None:
    c = b.shapes[y][1]
    r = b.rng
    scale, bias = r.uniform(0.5, 1.5, c), r.uniform(-0.3, 0.3, c)
    mean, var = r.uniform(-0.3, 0.3, c), r.uniform(0.5, 2.0, c)
    params = [b.const(v.astype(np.float32), "bn") for v in (scale, bias, mean, var)]
    b.add("BatchNormalization", [y, *params], epsilon=1e-5)


@_on_value(4)
def gen_conv(b: GraphBuilder, x: str) -> bool:
    return _conv(b, x, 4)


@_on_value(3)
def gen_conv1d(b: GraphBuilder, x: str) -> bool:
    return _conv(b, x, 3)


@_on_value()
def gen_residual_add(b: GraphBuilder, x: str) -> bool:
    """x + another value of its shape (a conv's output plus the block's input), maybe ReLU;
    or, when none has the shape, a 3x3 (or 1-D 3-tap) conv of x added back to x."""
    shape = b.shapes[x]
    same = [v for v in b.values if b.shapes[v] == shape and v != x]
    if same:
        other = same[int(b.rng.integers(len(same)))]
    elif len(shape) in (3, 4):
        c = shape[1]
        k = (3,) * (len(shape) - 2)
        w, bias = b.weights((c, c, *k), 3 * c), b.const(np.zeros(c, np.float32))
        (other,) = b.add("Conv", [x, w, bias], kernel_shape=list(k), pads=[1] * 2 * len(k))
    else:
        return False
    (y,) = b.add("Add", [other, x] if b.rng.random() < 0.7 else [x, other])
    if b.rng.random() < 0.5:
        b.add("Relu", [y])
    return True


@_on_value(4)
def gen_pool(b: GraphBuilder, x: str) -> bool:
    h, w = b.shapes[x][2:]
    r = b.rng
    kind = str(r.choice(["fused", "fused", "padded", "overlap", "avg", "global"]))
    if kind == "global":
        b.add("GlobalAveragePool", [x])
        return True
    k, s, p = {"fused": (2, 2, 0), "padded": (3, 2, 1), "overlap": (3, 1, 0), "avg": (2, 2, 0)}[
        kind
    ]
    if h + 2 * p < k or w + 2 * p < k:
        return False
    op = "AveragePool" if kind == "avg" else "MaxPool"
    b.add(op, [x], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    return True


@_on_value(4)
def gen_concat(b: GraphBuilder, x: str) -> bool:
    """Channel Concat of x with values of its batch and image size."""
    n, _, h, w = b.shapes[x]
    fits = [v for v in b.values if len(b.shapes[v]) == 4 and b.shapes[v][::2] == (n, h)
            and b.shapes[v][3] == w]  # fmt: skip
    parts = [x, fits[int(b.rng.integers(len(fits)))]]
    if sum(b.shapes[p][1] for p in parts) > 48:
        return False
    b.add("Concat", parts, axis=1)
    return True


@_on_value(4)
def gen_flatten(b: GraphBuilder, x: str) -> bool:
    n, c, h, w = b.shapes[x]
    if c * h * w > 600:
        return False
    if b.rng.random() < 0.6:
        b.add("Flatten", [x], axis=1)
    else:
        b.add("Reshape", [x, b.const(np.array([n, -1], np.int64))])
    return True


def gen_dense(b: GraphBuilder) -> bool:
    """Gemm (transB, a bias, alpha) or MatMul by a 2-D weight, of a 2-D or N-D value."""
    r = b.rng
    x = b.pick(2) if r.random() < 0.7 else b.pick(3)
    if x is None:
        return False
    shape = b.shapes[x]
    f, k = shape[-1], _channels(r)
    if f > 640:
        return False
    if len(shape) == 2 and r.random() < 0.6:
        trans = int(r.integers(2))
        inputs = [x, b.weights((k, f) if trans else (f, k), f)]
        if r.random() < 0.8:
            inputs.append(b.const(r.uniform(-0.3, 0.3, k).astype(np.float32), "bias"))
        (y,) = b.add("Gemm", inputs, transB=trans, alpha=float(r.choice([1.0, 1.0, 0.5])))
    else:
        (y,) = b.add("MatMul", [x, b.weights((f, k), f)])
        if r.random() < 0.5:
            (y,) = b.add("Add", [y, b.const(r.uniform(-0.3, 0.3, k).astype(np.float32), "bias")])
    _epilogue(b, y)
    return True


def _conv_same(b: GraphBuilder, x: str, cout: int, k: int, stride: int = 1) -> str:
    """A k x k conv (k odd) with 'same' padding, a bias, to `cout` channels."""
    c = b.shapes[x][1]
    inputs = [x, b.weights((cout, c, k, k), c * k * k),
              b.const(b.rng.uniform(-0.3, 0.3, cout).astype(np.float32), "bias")]  # fmt: skip
    (y,) = b.add("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                 pads=[k // 2] * 4)  # fmt: skip
    return y


@_on_value(4)
def gen_res_block(b: GraphBuilder, x: str) -> bool:
    """A ResNet basic block: conv-ReLU-conv added to the input (or to a strided 1x1 conv of it,
    downsampling), then ReLU: the second conv's kernel absorbs the add."""
    c = b.shapes[x][1]
    r = b.rng
    stride = int(r.choice([1, 1, 2]))
    cout = c if stride == 1 and r.random() < 0.7 else _channels(r)
    (y,) = b.add("Relu", [_conv_same(b, x, cout, 3, stride)])
    y = _conv_same(b, y, cout, int(r.choice([1, 3])))
    short = x if stride == 1 and cout == c else _conv_same(b, x, cout, 1, stride)
    (y,) = b.add("Add", [y, short] if r.random() < 0.7 else [short, y])
    if r.random() < 0.8:
        b.add("Relu", [y])
    return True


@_on_value(4)
def gen_conv_pool(b: GraphBuilder, x: str) -> bool:
    """conv (ReLU) then a max pooling whose window equals its stride, without padding: the conv's
    kernel absorbs it."""
    h, w = b.shapes[x][2:]
    k = int(b.rng.choice([2, 2, 3]))
    y = _conv_same(b, x, _channels(b.rng), int(b.rng.choice([1, 3])))
    if b.rng.random() < 0.7:
        (y,) = b.add("Relu", [y])
    if min(h, w) < k:
        return False
    b.add("MaxPool", [y], kernel_shape=[k, k], strides=[k, k])
    return True


@_on_value(2)
def gen_dense_residual(b: GraphBuilder, x: str) -> bool:
    """x + Gemm(x) (a square layer), maybe ReLU: the dense kernel absorbs the add."""
    f = b.shapes[x][1]
    r = b.rng
    inputs = [x, b.weights((f, f), f), b.const(r.uniform(-0.3, 0.3, f).astype(np.float32))]
    (y,) = b.add("Gemm", inputs)
    if r.random() < 0.5:
        (y,) = b.add("Relu", [y])
    (y,) = b.add("Add", [y, x])
    if r.random() < 0.5:
        b.add("Relu", [y])
    return True


GENERATORS: dict[str, tuple[GenFn, int]] = {
    "res_block": (gen_res_block, 3), "conv_pool": (gen_conv_pool, 3),
    "dense_residual": (gen_dense_residual, 1),
    "conv": (gen_conv, 8), "conv1d": (gen_conv1d, 6), "residual": (gen_residual_add, 3),
    "pool": (gen_pool, 3), "concat": (gen_concat, 1), "flatten": (gen_flatten, 1),
    "dense": (gen_dense, 4), "activation": (gen_activation, 1), "batchnorm": (gen_batchnorm, 1),
}  # fmt: skip


def _input_shape(rng: np.random.Generator) -> tuple[int, ...]:
    """A CNN image, a 1-D signal, rows or a sequence of an MLP."""
    n = int(rng.choice([1, 1, 2, 3]))
    kind = rng.random()
    if kind < 0.1:  # a larger image, for tiling
        return (1, int(rng.choice(SMALL + WIDE[:4])), int(rng.integers(13, 21)),
                int(rng.integers(13, 21)))  # fmt: skip
    if kind < 0.55:
        return (n, _channels(rng), int(rng.integers(3, 13)), int(rng.integers(3, 13)))
    if kind < 0.75:
        return (n, _channels(rng), int(rng.integers(4, 25)))
    if kind < 0.9:
        return (n, _channels(rng) + int(rng.choice([0, 24])))
    return (n, int(rng.integers(2, 6)), _channels(rng))


def make_model(rng: np.random.Generator, max_nodes: int) -> tuple[GraphBuilder, list[str]]:
    """A graph of up to `max_nodes` nodes (at least one conv or dense layer) and its outputs."""
    b = GraphBuilder(rng)
    first = b.graph_input(_input_shape(rng))
    if rng.random() < 0.2:  # a second input of the same shape (added, concatenated)
        b.graph_input(b.shapes[first])
    target = int(rng.integers(2, max_nodes + 1))
    names = list(GENERATORS)
    weights = np.array([GENERATORS[k][1] for k in names], float)
    tries = 0
    while (len(b.nodes) < target or not _has_layer(b)) and tries < 30 * max_nodes:
        tries += 1
        gen = GENERATORS[names[int(rng.choice(len(names), p=weights / weights.sum()))]][0]
        before = (len(b.nodes), dict(b.consts), list(b.values), dict(b.feed), Counter(b.reads))
        try:
            ok = gen(b) and all(_small(b.shapes[v]) for v in b.values[-3:])
        except (ValueError, InferenceError):
            ok = False
        if not ok:
            del b.nodes[before[0] :]
            b.consts, b.values, b.feed, b.reads = before[1:]
    return b, pick_outputs(b, first)


def _has_layer(b: GraphBuilder) -> bool:
    return any(n.op_type in ("Conv", "Gemm", "MatMul") for n in b.nodes)


def _small(shape: tuple[int, ...]) -> bool:
    return all(d >= 1 for d in shape) and int(np.prod(shape)) <= 3 * 48 * 12 * 12


def make_case(seed: int, index: int, max_nodes: int = 8) -> VtaCase:
    """Case `index` of `seed`, the same every time."""
    rng = np.random.default_rng([seed, index, max_nodes, 0x57A])
    knobs, preset = random_config(rng)
    while config_or_none(knobs) is None:  # a combination HWConfig refuses: redraw
        knobs, preset = random_config(rng)
    options, refusal = random_options(rng, knobs["alu_mul"])
    if refusal == BAD_KNOB:
        knobs, preset = bad_knobs(knobs, rng), None
    b, outputs = make_model(rng, max_nodes)
    # calibration: the inputs themselves and 1-3 more batches (of another batch size now and
    # then, where no Reshape bakes in the graph's), so the int8 error measures the arithmetic
    # rather than values outside the calibrated ranges
    rebatch = not any(n.op_type == "Reshape" for n in b.nodes)
    calibration = [dict(b.feed)]
    for _ in range(int(rng.integers(1, 4))):
        n = int(rng.choice([0, 4])) if rebatch else 0  # 0: the graph's batch size
        calibration.append({
            k: rng.uniform(-2, 2, (n or v.shape[0], *v.shape[1:])).astype(v.dtype)
            for k, v in b.feed.items()
        })  # fmt: skip
    return VtaCase(f"{seed}:{index}", b.model(outputs), dict(b.feed), calibration, knobs,
                   preset, options, refusal)  # fmt: skip
