"""Partitioning: which int8 ops of a quantized graph the accelerator runs, grouped into regions.

``partition_graph(graph, cfg)`` decides, for each node, whether the accelerator described by
``cfg`` can run it, and records the answer in the ``target`` attribute of the int8 ops
("vta" or "cpu"); float ops and the ``tf.quantize``/``tf.dequantize`` boundaries always run on
the CPU. ``accelerator_regions`` groups maximal runs of consecutive accelerator nodes (in the
graph's topological order, so each region is convex: no path leaves it and comes back), the
units a code generator compiles into one program. ``partition_report`` prints every layer and
where it runs, with the reason.

The rules, one function per op (``PLACEMENT``):

- ``tf.qconv2d``: input channels at least ``block_in`` (a first conv with 1 or 3 channels would
  waste most of the GEMM core on zero padding), zero padding that fits the LOAD pad fields
  (each side's amount its own: TensorFlow's "same" padding of strided convolutions too), a
  requantization the ALU has (MUL only with ``alu_mul``), the config's acc width;
  grouped (and depthwise) only with groups that fit the channel blocks
  (``compiler.vta.layout.group_blocks``: whole blocks per group, or whole groups per block with
  a block-diagonal weight tile) and unless ``grouped=False`` (none) or ``grouped="wide"``
  (only groups of more than one input channel: depthwise convolutions stay on the CPU, the vta
  target's ``-depthwise=cpu``).
- ``tf.qdense``: the reduction length at least ``block_in``; the same requantization rule.
- ``tf.qadd``: ALU ADD/SHR (and MUL with ``alu_mul``) on the accumulators.
- ``tf.qmaxpool``: ALU MAX over shifted windows; padding only when the input is >= 0 (a fused
  ReLU), where the DMA's zero padding equals the -inf padding of max pooling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ....hw.config import HWConfig
from ....hw.isa import MAX_PAD
from ..ir import Graph, Node

ACCEL, CPU = "vta", "cpu"


@dataclass(frozen=True)
class Placement:
    """Where one node runs and why."""

    node: str
    op: str
    target: str
    reason: str


@dataclass(frozen=True)
class Region:
    """Consecutive accelerator nodes, compiled and run as one unit."""

    name: str
    nodes: tuple[str, ...]


def _requant_problem(node: Node, cfg: HWConfig) -> str | None:
    a = node.attr_dict
    ops = [*a["requant_ops"], a.get("lhs_op", ""), a.get("rhs_op", "")]
    if ("MUL" in ops or a.get("channel_multipliers")) and not cfg.alu_mul:
        return f"requantization uses MUL but HWConfig {cfg.name!r} has alu_mul=False"
    if a["acc_width"] != cfg.acc_width:
        return f"acc_width {a['acc_width']} must be the config's {cfg.acc_width}"
    return None


def _data_layout(cfg: HWConfig) -> str:
    return f"NCHW{cfg.batch}n{cfg.block_in}c"


def _weight_layout(cfg: HWConfig) -> str:
    return f"OIHW{cfg.block_out}o{cfg.block_in}i"


def _padded(n: int, block: int) -> int:
    return -(-n // block) * block


def _place_conv(graph: Graph, node: Node, cfg: HWConfig) -> tuple[str, str]:
    c = graph.types[node.inputs[0]].shape[1]
    if c < cfg.block_in:
        waste = 1 - c / _padded(c, cfg.block_in)
        return CPU, f"{c} input channel(s) < block_in {cfg.block_in} ({waste:.0%} padding)"
    if max(node.attr("pads")) > MAX_PAD:  # the LOAD's four pad fields: any amount per side
        return CPU, f"padding {node.attr('pads')} must be at most {MAX_PAD} per side"
    problem = _requant_problem(node, cfg)
    if problem:
        return CPU, problem
    o, group = graph.types[node.inputs[1]].shape[0], node.attr_dict.get("group", 1)
    if group > 1:
        target, reason = _place_grouped(cfg, c, o, group)
        if target == CPU:
            return target, reason
    problem = fit_problem(graph, [node], cfg)
    if problem:
        return CPU, problem
    if group > 1:
        return target, reason
    return ACCEL, (
        f"GEMM {_data_layout(cfg)} x {_weight_layout(cfg)} "
        f"(C {c}->{_padded(c, cfg.block_in)}, O {o}->{_padded(o, cfg.block_out)}), "
        "bias+requant on the ALU"
    )


def _place_grouped(cfg: HWConfig, c: int, o: int, group: int) -> tuple[str, str]:
    from ...vta.layout import group_blocks  # the accelerator's code generator

    try:
        q, r = group_blocks(cfg, c, o, group)
    except ValueError as exc:
        return CPU, str(exc)
    kind = "depthwise" if group == c else f"{group} groups"
    used = o * (c // group) / (_padded(o, cfg.block_out) * r * cfg.block_in)  # useful / GEMM
    if used < 1:
        return ACCEL, (
            f"{kind}: block-diagonal {cfg.block_out}x{cfg.block_in} weight tiles, each output "
            f"block over {r} input block(s) ({used:.1%} of the GEMM's MACs are the conv's), "
            "bias+requant on the ALU"
        )
    return ACCEL, (f"{kind}: each output block over its group's {r} input block(s) of "
                   f"{cfg.block_in}, bias+requant on the ALU")  # fmt: skip


def _place_dense(graph: Graph, node: Node, cfg: HWConfig) -> tuple[str, str]:
    m, k = graph.types[node.inputs[1]].shape
    if k < cfg.block_in:
        return CPU, f"reduction length {k} < block_in {cfg.block_in}"
    problem = _requant_problem(node, cfg) or fit_problem(graph, [node], cfg)
    if problem:
        return CPU, problem
    return ACCEL, (
        f"GEMM as a 1x1 conv (K {k}->{_padded(k, cfg.block_in)}, "
        f"M {m}->{_padded(m, cfg.block_out)}), bias+requant on the ALU"
    )


def _place_add(graph: Graph, node: Node, cfg: HWConfig) -> tuple[str, str]:
    problem = _requant_problem(node, cfg)
    return (CPU, problem) if problem else (ACCEL, "ALU: scale, ADD, requant")


def _place_pool(graph: Graph, node: Node, cfg: HWConfig) -> tuple[str, str]:
    pads = node.attr("pads")
    if not any(pads):
        problem = fit_problem(graph, [node], cfg)
        return (CPU, problem) if problem else (ACCEL, "ALU MAX over the window")
    producer = graph.producers().get(node.inputs[0])
    non_negative = producer is not None and producer.attr_dict.get("out_lo", -1) >= 0
    if non_negative and max(pads) <= MAX_PAD and pads[:2] == pads[2:]:
        return ACCEL, "ALU MAX; zero padding is exact (input >= 0 after a fused ReLU)"
    return CPU, f"padding {pads} needs -inf fill (input may be negative)"


def fit_problem(graph: Graph, nodes: list[Node], cfg: HWConfig) -> str | None:
    """None when the accelerator kernel of `nodes` (a conv/dense with the add and max pooling
    fused after it, or a lone max pooling without padding) has a tiling that fits the SRAMs and
    instruction fields of `cfg`, else why not (the partition and the accelerator fusion leave
    such a layer on the CPU, or unfused, instead of failing to compile it)."""
    from ...vta.pool import PoolSchedule, PoolWorkload  # the accelerator's code generator
    from ...vta.schedule import Conv2dWorkload
    from ...vta.schedule import fit_problem as conv_fit_problem

    anchor = nodes[0]
    x = graph.types[anchor.inputs[0]].shape
    if anchor.op == "tf.qmaxpool":
        (kh, kw), (sh, sw) = anchor.attr("kernel_shape"), anchor.attr("strides")
        wl = PoolWorkload(*x, kh, kw, sh, sw)
        if PoolSchedule().fits(cfg, wl):
            return None
        return (f"no tiling of the {x[2]}x{x[3]} max pooling fits HWConfig {cfg.name!r}: one "
                f"output row needs {PoolSchedule().acc_elements(wl)} ACC elements of "
                f"{cfg.acc_depth} (or a transfer exceeds its field)")  # fmt: skip
    a = anchor.attr_dict
    scales = bool(a.get("channel_multipliers"))
    pool = next((n for n in nodes[1:] if n.op == "tf.qmaxpool"), None)
    window = tuple(pool.attr("kernel_shape")) if pool else (1, 1)
    residual = any(n.op == "tf.qadd" for n in nodes[1:])
    w = graph.types[anchor.inputs[1]].shape
    if anchor.op == "tf.qdense":
        wl = Conv2dWorkload(x[0], x[1], 1, 1, w[0], 1, 1, channel_scales=scales)
    else:
        (sh, sw), (top, left, bottom, right) = a["strides"], a["pads"]
        wl = Conv2dWorkload(*x, w[0], w[2], w[3], sh, sw, top, left, *window, scales,
                            a.get("group", 1), bottom, right)  # fmt: skip
    return conv_fit_problem(cfg, wl, residual)


def _place_boundary(graph: Graph, node: Node, cfg: HWConfig) -> tuple[str, str]:
    return CPU, "float <-> int8 boundary"


PLACEMENT: dict[str, Callable[[Graph, Node, HWConfig], tuple[str, str]]] = {
    "tf.qconv2d": _place_conv,
    "tf.qdense": _place_dense,
    "tf.qadd": _place_add,
    "tf.qmaxpool": _place_pool,
    "tf.quantize": _place_boundary,
    "tf.dequantize": _place_boundary,
}


def is_grouped(node: Node) -> bool:
    """Whether `node` is a grouped (or depthwise) int8 convolution."""
    return node.op == "tf.qconv2d" and node.attr_dict.get("group", 1) > 1


def is_depthwise(graph: Graph, node: Node) -> bool:
    """Whether `node` is a grouped int8 convolution with one input channel per group."""
    return is_grouped(node) and graph.types[node.inputs[1]].shape[1] == 1


Grouped = bool | str  # True: all grouped convs may be offloaded; "wide": not depthwise; False


def _kept_grouped(graph: Graph, node: Node, grouped: Grouped) -> str | None:
    if grouped is False and is_grouped(node):
        return "grouped conv kept on the CPU (grouped=False)"
    if grouped == "wide" and is_depthwise(graph, node):
        return "depthwise conv kept on the CPU (-depthwise=cpu)"
    return None


def place(graph: Graph, node: Node, cfg: HWConfig, grouped: Grouped = True) -> Placement:
    """Where `node` of `graph` runs for `cfg`, and why (`grouped`: whether grouped and
    depthwise convolutions may run on the accelerator: True, "wide" (not depthwise) or False)."""
    rule = PLACEMENT.get(node.op)
    kept = _kept_grouped(graph, node, grouped)
    if kept:
        target, reason = CPU, kept
    elif rule is not None:
        target, reason = rule(graph, node, cfg)
    elif any(graph.types[o].dtype == "int8" for o in node.outputs if o):
        target, reason = CPU, "int8 data movement (layout change between regions)"
    else:
        target, reason = CPU, "float op"
    return Placement(node.name, node.op, target, reason)


def partition_graph(graph: Graph, cfg: HWConfig, grouped: Grouped = True) -> Graph:
    """Set the ``target`` attribute of every int8 op to "vta" or "cpu" for `cfg` (`grouped`:
    whether grouped and depthwise convolutions may run on the accelerator, `place`'s).

    Before: `conv2: %y_q = tf.qconv2d(%x_q, ...) {target='cpu', ...}` (as quantize_graph writes)
    After:  `conv2: %y_q = tf.qconv2d(%x_q, ...) {target='vta', ...}` (16 input channels, pynq)
    """
    nodes = []
    for node in graph.nodes:
        if "target" in node.attr_dict:
            target = place(graph, node, cfg, grouped).target
            attrs = {**node.attr_dict, "target": target}
            node = Node(node.op, node.name, node.inputs, node.outputs, tuple(attrs.items()))
        nodes.append(node)
    return graph.replace(nodes=tuple(nodes))


def is_offloaded(node: Node) -> bool:
    """Whether a (partitioned) node runs on the accelerator."""
    return node.attr_dict.get("target") == ACCEL


def accelerator_regions(graph: Graph) -> tuple[Region, ...]:
    """Maximal runs of consecutive offloaded nodes of a partitioned graph, in order."""
    runs: list[list[str]] = []
    previous = False
    for node in graph.nodes:
        offloaded = is_offloaded(node)
        if offloaded and not previous:
            runs.append([])
        if offloaded:
            runs[-1].append(node.name)
        previous = offloaded
    return tuple(Region(f"vta_{i}", tuple(run)) for i, run in enumerate(runs))


# Every op whose work is multiply-accumulates: the int8 ops the accelerator may run and the
# float (or ONNX-quantized) ones left on the CPU, e.g. depthwise and grouped convolutions.
CONV_OPS = ("tf.qconv2d", "Conv", "QLinearConv")
MATMUL_OPS = ("tf.qdense", "Gemm", "MatMul", "QLinearMatMul")


def macs(graph: Graph, node: Node) -> int:
    """Multiply-accumulates of a conv/dense/matmul node, int8 or float (0 for other ops)."""
    out = graph.types[node.outputs[0]].shape if node.outputs else ()
    if node.op in CONV_OPS:  # weight O x C/group x kernel: one MAC per weight per output
        w = graph.types[node.inputs[3 if node.op == "QLinearConv" else 1]].shape
        return math.prod(out) * math.prod(w[1:])  # exact integers: no int64 wrap-around
    if node.op == "tf.qdense":  # weight M x K
        return math.prod(out) * graph.types[node.inputs[1]].shape[1]
    if node.op in MATMUL_OPS:  # the reduction is A's last axis (its first with Gemm transA)
        a = graph.types[node.inputs[0]].shape
        trans_a = node.op == "Gemm" and node.attr_dict.get("transA", 0)
        return math.prod(out) * (a[0] if trans_a or len(a) == 1 else a[-1])
    return 0


def layer_summary(graph: Graph, on_accelerator: Callable[[Node], bool]) -> tuple[int, int, float]:
    """(offloaded layers, conv/dense/matmul layers, share of all their MACs offloaded)."""
    layers = [n for n in graph.nodes if macs(graph, n)]
    total = sum(macs(graph, n) for n in layers)
    done = [n for n in layers if on_accelerator(n)]
    share = sum(macs(graph, n) for n in done) / total if total else 0.0
    return len(done), len(layers), share


def partition_report(graph: Graph, cfg: HWConfig, grouped: Grouped = True) -> str:
    """A table of every node (layer, op, output type, where it runs and why), the accelerator
    regions and the share of conv/dense MACs offloaded; partitions `graph` for `cfg` first."""
    graph = partition_graph(graph, cfg, grouped)
    rows = [place(graph, n, cfg, grouped) for n in graph.nodes]
    width = max([len(r.node) for r in rows] + [5])
    op_width = max(len(r.op) for r in rows) if rows else 2
    lines = [f"partition of graph {graph.name!r} for HWConfig {cfg.name!r} "
             f"({cfg.batch}x{cfg.block_in}x{cfg.block_out}, alu_mul={cfg.alu_mul}):"]  # fmt: skip
    lines.append(f"  {'layer':<{width}}  {'op':<{op_width}}  {'output':<24} {'runs on':<8}why")
    for node, row in zip(graph.nodes, rows, strict=True):
        out = str(graph.types[node.outputs[0]])
        lines.append(
            f"  {row.node:<{width}}  {row.op:<{op_width}}  {out:<24} {row.target:<8}{row.reason}"
        )
    regions = accelerator_regions(graph)
    lines.append("regions: " + ("; ".join(f"{r.name}: {', '.join(r.nodes)}" for r in regions)
                                or "none"))  # fmt: skip
    offloaded, layers, share = layer_summary(graph, is_offloaded)
    lines.append(
        f"offloaded: {offloaded} of {layers} conv/dense layers, {share:.1%} of their MACs; "
        f"{sum(1 for n in graph.nodes if is_offloaded(n))} of {len(graph.nodes)} nodes"
    )
    return "\n".join(lines)
