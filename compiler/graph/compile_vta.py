"""Graph -> Module for the accelerator: quantize, partition, fuse, then one kernel per group.

``compile_graph_vta(graph, "vta -config=pynq -device=sim", calibration)`` quantizes a float
graph to int8 with the accelerator's arithmetic (``compiler.quantize``; an int8 graph is taken
as it is), places every int8 op (``partition_graph``), fuses (``fuse_ops``, then
``fuse_accelerator_ops``: conv + residual add + max pooling), keeps the tensors that flow only
between accelerator kernels in the accelerator's blocked layout (``packed_tensors``), plans
memory, and compiles each group: accelerator groups to program images (``vta`` kernels, run by
the module's device), the rest (the float/int8 boundaries, layers the accelerator cannot run,
float ops) to native code for this CPU. The module's outputs equal the int8 graph's reference
executor bit for bit.

Example:
    >>> import numpy as np
    >>> from tensorforge.compiler.frontend import from_onnx
    >>> from tensorforge.compiler.frontend.onnx_builders import small_cnn
    >>> x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    >>> module = compile_graph_vta(from_onnx(small_cnn()), "vta -config=pynq", {"x": x},
    ...                            progress=False)
    >>> sorted({k.kind for k in module.kernels})
    ['llvm', 'vta']
    >>> module.run({"x": x})[module.outputs[0]].shape
    (1, 10)
    >>> [module.tensors[v].shape for v in module.stats["packed_tensors"]]  # conv -> conv
    [(1, 1, 16, 16, 1, 16)]
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...hw.config import HWConfig
from ...runtime.device.cpu import ParamSpec
from ...runtime.device.vta.launch import KIND, kernel_meta
from ...runtime.module import Call, KernelImage, Module
from ..quantize.graph import LAYER_OPS, float_layers, quantize_graph
from ..quantize.requant import MODES, WEIGHT_SCALES, default_mode, default_weight_scales
from ..target import Target
from .accel_kernels import accelerator_kernel, has_accelerator_kernel, packed_tensors
from .compile import (
    KernelCache,
    assemble_module,
    build_cpu_group,
    calibrated_ranges,
    cpu_meta,
    kernel_symbol,
    label_nodes,
    progress_bar,
)
from .ir import Graph, TensorType
from .passes import FusedGroup, fuse_ops, group_order, optimize, partition_graph, plan_memory
from .passes.accel_forms import accelerator_forms
from .passes.fuse_accel import fuse_accelerator_ops
from .passes.partition import Grouped, layer_summary, place

DEVICES = ("sim", "cyclesim", "rtl")
DEPTHWISE = ("accel", "cpu")  # where depthwise convolutions run (-depthwise=); default cpu
QUANTIZED_OPS = ("tf.quantize", "tf.qconv2d", "tf.qdense")


def is_quantized(graph: Graph) -> bool:
    """Whether `graph` already holds the int8 ops of ``quantize_graph``."""
    return any(n.op in QUANTIZED_OPS for n in graph.nodes)


def vta_options(target: Target, config: HWConfig | None = None) -> tuple[HWConfig, str, str, int]:
    """(config, device, mode, vthreads) of a vta target: ``-config=`` (a preset or JSON file,
    default pynq), ``-device=`` (sim, cyclesim or rtl; default sim), ``-mode=`` (shift or mul;
    default ``default_mode(config)``: mul where the config has the ALU MUL, else shift),
    ``-vthreads=`` (1 or 2; default 2).

    Raises:
        ValueError: for an option value out of its set (named), or -mode=mul on a config
            without the ALU MUL.
    """
    cfg = config or HWConfig.load(target.get("config") or "pynq")
    device, mode = target.get("device") or "sim", target.get("mode") or default_mode(cfg)
    vthreads = target.get("vthreads") or "2"
    for key, value, allowed in (
        ("device", device, DEVICES),
        ("mode", mode, MODES),
        ("vthreads", vthreads, ("1", "2")),
    ):
        if value not in allowed:
            raise ValueError(f"target option -{key} must be one of {', '.join(allowed)}, "
                             f"not {value!r} (in {str(target)!r})")  # fmt: skip
    if mode == "mul" and not cfg.alu_mul:  # else refused per layer, or not at all without one
        raise ValueError(f"target option -mode=mul needs the ALU MUL extension, and HWConfig "
                         f"{cfg.name!r} has alu_mul=False: use -mode=shift (in "
                         f"{str(target)!r})")  # fmt: skip
    return cfg, device, mode, int(vthreads)


def weight_scales(target: Target, mode: str) -> str:
    """The ``-weights=`` option of a vta target: ``per-channel`` (one weight scale per output
    channel; mode mul only) or ``per-tensor``; default per-channel in mode mul, else
    per-tensor.

    Raises:
        ValueError: for another value, or per-channel with mode shift.
    """
    weights = target.get("weights") or default_weight_scales(mode)
    if weights not in WEIGHT_SCALES:
        raise ValueError(f"target option -weights must be one of {', '.join(WEIGHT_SCALES)}, "
                         f"not {weights!r} (in {str(target)!r})")  # fmt: skip
    if weights == "per-channel" and mode != "mul":
        raise ValueError(f"target option -weights=per-channel needs -mode=mul (one multiplier "
                         f"per channel), not -mode={mode} (in {str(target)!r})")  # fmt: skip
    return weights


def depthwise_placement(target: Target) -> str:
    """The ``-depthwise=`` option of a vta target: ``cpu`` (default: depthwise convolutions, one
    input channel per group, stay float on the CPU) or ``accel`` (they are quantized and run on
    the accelerator as block-diagonal weight tiles). Grouped convolutions with wider groups that
    fit the channel blocks run on the accelerator either way.

    ``cpu`` is the default for accuracy: a depthwise conv reads the output of a ReLU6, HardSwish
    or SiLU, one-sided values that symmetric int8 gives 128 levels of 256, and on MobileNetV3
    and LR-ASPP that took the int8 error to 1.15-1.20x onnxruntime's (whose activations are
    asymmetric); with them float it is 0.84-1.01x (docs/compile_vta.md).

    Raises:
        ValueError: for another value.
    """
    where = target.get("depthwise") or "cpu"
    if where not in DEPTHWISE:
        raise ValueError(f"target option -depthwise must be one of {', '.join(DEPTHWISE)}, "
                         f"not {where!r} (in {str(target)!r})")  # fmt: skip
    return where


class AcceleratorGroups:
    """``quantize_graph``'s ``grouped`` rule for `cfg`: the grouped convolutions (input
    channels, output channels, groups) whose groups fit the accelerator's channel blocks;
    depthwise ones (one input channel per group) only with `depthwise` "accel". `refusal`
    says why a convolution does not pass (for the placement table)."""

    def __init__(self, cfg: HWConfig, depthwise: str = "accel") -> None:
        self.cfg, self.depthwise = cfg, depthwise

    def __call__(self, c: int, o: int, groups: int) -> bool:
        return self.refusal(c, o, groups) is None

    def refusal(self, c: int, o: int, groups: int) -> str | None:
        from ..vta.layout import group_blocks  # the accelerator's code generator

        if c == groups and self.depthwise != "accel":
            return "a depthwise convolution, kept float on the CPU (-depthwise=accel offloads it)"
        if c < self.cfg.block_in:
            return f"{c} input channels, fewer than the accelerator's block of {self.cfg.block_in}"
        try:
            group_blocks(self.cfg, c, o, groups)
        except ValueError as exc:
            return f"its groups do not fit the accelerator's channel blocks ({exc})"
        return None


def quantize_for(
    graph: Graph,
    cfg: HWConfig,
    calibration: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]] | None,
    mode: str,
    weights: str | None = None,
    depthwise: str = "cpu",
) -> Graph:
    """The partitioned int8 graph of `graph` for `cfg` (quantized first unless it is int8;
    `weights`: ``quantize_graph``'s weight scales, default per its mode; `depthwise`:
    ``depthwise_placement``'s, whether depthwise convolutions that fit go to the accelerator;
    grouped ones with wider groups do when they fit).

    A float graph with no conv or dense layer the accelerator can compute is not quantized (no
    calibration needed): a warning names each layer and why, and every op runs on the CPU.
    """
    grouping: Grouped = True if depthwise == "accel" else "wide"
    if is_quantized(graph):
        return partition_graph(graph, cfg, grouped=grouping)
    # N-D MatMuls by 2-D weights and 1-D convs in the 2-D forms the GEMM core computes
    graph = accelerator_forms(optimize(graph))
    rule = AcceleratorGroups(cfg, depthwise)
    left = float_layers(graph, rule)
    if len(left) == sum(1 for n in graph.nodes if n.op in LAYER_OPS):
        layers = "; ".join(f"{name!r}: {why}" for name, why in left.items())
        warnings.warn(
            "nothing in this model runs on the accelerator, every op stays float on the CPU: "
            + (f"no conv or dense layer fits ({layers})" if left else "it has no conv or "
               "dense layer"),
            stacklevel=3,
        )  # fmt: skip
        return partition_graph(graph, cfg, grouped=grouping)
    if calibration is None:
        raise ValueError(
            "compiling a float model for the accelerator needs calibration inputs: "
            "tensorforge.compile(model, target='vta ...', calibration={input name: array})"
        )
    graph = quantize_graph(graph, calibration, cfg, mode=mode, weights=weights, grouped=rule)
    return partition_graph(graph, cfg, grouped=grouping)


def compile_graph_vta(
    graph: Graph,
    target: str | Target = "vta",
    calibration: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]] | None = None,
    progress: bool = True,
    config: HWConfig | None = None,
) -> Module:
    """Compile `graph` for the accelerator (and this CPU for the rest).

    Args:
        graph: a float graph (quantized here with `calibration`) or an int8 graph from
            ``quantize_graph``.
        target: a vta target (see ``vta_options``).
        calibration: one batch (input name -> array) or a list of batches, for a float graph.
        progress: show a tqdm bar over the groups.
        config: a HWConfig object instead of the target's ``-config`` (a preset or JSON file).

    Returns:
        A `Module` whose accelerator calls run on the target's device
        (``module.use_device`` changes it); ``module.stats["placement"]`` lists each node with
        where it runs and why.

    Raises:
        ValueError: without calibration for a float graph, or for bad target options.
        LoweringError: for a CPU op without a native lowering (op and node named).
    """
    tgt = Target.parse(target)
    if tgt.kind != "vta":
        raise ValueError(f"compile_graph_vta target must be a vta target, not {str(tgt)!r}")
    cfg, device, mode, vthreads = vta_options(tgt, config)
    weights, depthwise = weight_scales(tgt, mode), depthwise_placement(tgt)
    start = time.perf_counter()
    q = quantize_for(graph, cfg, calibration, mode, weights, depthwise)
    q = fuse_accelerator_ops(fuse_ops(q), cfg)
    packed = packed_tensors(q, cfg)
    stored = plan_memory(storage_graph(q, packed))  # the arena holds packed tensors blocked
    t_opt = time.perf_counter() - start
    host = Target.parse("llvm")
    meta = cpu_meta(host)
    kernels: dict[str, KernelImage] = {}
    calls: list[Call] = []
    constants: dict[str, Any] = {}
    cache = KernelCache()  # CPU groups that lower to the same code share a kernel
    times = [0.0, 0.0]  # lowering (and accelerator code generation), LLVM
    for k, (group, nodes) in enumerate(progress_bar(group_order(q), progress)):
        if has_accelerator_kernel(q, nodes):
            t0 = time.perf_counter()
            image, call = build_accelerator_group(q, group, k, cfg, device, vthreads, packed)
            times[0] += time.perf_counter() - t0
        else:
            image, call = build_cpu_group(q, group, k, host, meta, constants, times, cache)
        kernels.setdefault(image.name, image)
        calls.append(call)
    images = list(kernels.values())
    module = assemble_module(
        stored, str(tgt), images, calls, constants, start, t_opt, *times,
        ranges=calibrated_ranges(q),
    )  # fmt: skip
    module.stats.update(_accelerator_stats(q, cfg, images, depthwise))
    module.stats["requant_mode"] = "given" if is_quantized(graph) else mode
    module.stats["weight_scales"] = "given" if is_quantized(graph) else weights
    module.stats["packed_tensors"] = list(packed)
    module.stats["depthwise"] = depthwise
    return module


def storage_graph(graph: Graph, packed: Mapping[str, tuple[int, ...]]) -> Graph:
    """`graph` with each packed tensor (``packed_tensors``) typed by its blocked shape: the
    types of the module's arena and tensors (the nodes' semantics stay NCHW)."""
    blocked = {v: TensorType(shape, graph.types[v].dtype) for v, shape in packed.items()}
    return graph.replace(types={**graph.types, **blocked})


def build_accelerator_group(
    graph: Graph,
    group: FusedGroup,
    k: int,
    cfg: HWConfig,
    device: str,
    vthreads: int,
    packed: Mapping[str, tuple[int, ...]] | None = None,
) -> tuple[KernelImage, Call]:
    """Compile group number `k` of `graph` to a program image: its `vta` kernel and its call.

    The values in `packed` (value -> blocked shape, ``packed_tensors``) are parameters of their
    blocked shape, bound as they are."""
    packed = packed or {}
    nodes = [graph.node(n) for n in group.nodes]
    compiled = accelerator_kernel(cfg, graph, nodes, vthreads, packed)
    params = tuple(
        ParamSpec(f"p{i}", graph.types[v].dtype, tuple(packed.get(v, graph.types[v].shape)))
        for i, v in enumerate(compiled.values)
    )
    name = kernel_symbol(k, group.name)
    meta = kernel_meta(compiled.operands, device)
    image = KernelImage(name, KIND, params, compiled.kernel.image.to_bytes(), meta)
    return image, Call(name, compiled.values, label_nodes(graph, group.nodes))


def _accelerator_stats(
    graph: Graph, cfg: HWConfig, kernels: list[KernelImage], depthwise: str
) -> dict:
    grouped: Grouped = True if depthwise == "accel" else "wide"
    placements = [place(graph, n, cfg, grouped) for n in graph.nodes]
    left = float_layers(graph, AcceleratorGroups(cfg, depthwise))  # why a layer stayed float
    vta_nodes = {  # node -> the first node of its accelerator kernel
        name: g.nodes[0] for (g, nodes) in group_order(graph)
        if has_accelerator_kernel(graph, nodes) for name in g.nodes
    }  # fmt: skip
    done, layers, share = layer_summary(graph, lambda n: n.name in vta_nodes)
    return {
        "config": cfg.name,
        "clock_mhz": cfg.clock_mhz,
        "accelerator_kernels": sum(1 for k in kernels if k.kind == KIND),
        "offloaded_macs": round(share, 4),  # of every conv/dense/matmul MAC, float ones too
        "offloaded_layers": [done, layers],
        "placement": [_placement_row(p, vta_nodes, left) for p in placements],
    }


def _placement_row(p: Any, vta_nodes: dict[str, str], left: Mapping[str, str]) -> list[str]:
    if p.node in vta_nodes:
        anchor = vta_nodes[p.node]
        fused = f"fused into {anchor}'s kernel: " if anchor != p.node else ""
        return [p.node, p.op, "vta", fused + p.reason]
    if p.target == "vta":  # placeable, but no kernel of the code generator covers it alone
        return [p.node, p.op, "cpu", f"no accelerator kernel for it alone ({p.reason})"]
    if p.op in LAYER_OPS:  # a conv or dense layer the quantizer left float
        why = left.get(p.node, "no int8 form at the calibration's scales, or left float by "
                               "whoever quantized the graph")  # fmt: skip
        return [p.node, p.op, "cpu", f"float layer: {why}"]
    return [p.node, p.op, "cpu", p.reason]
