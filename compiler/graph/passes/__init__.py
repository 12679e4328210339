"""Graph passes, each a pure function Graph -> Graph, and the default pipeline."""

from __future__ import annotations

from ..ir import Graph
from .alter_layout import alter_layout
from .drop_padding_taps import drop_padding_taps
from .eliminate_dead_code import eliminate_dead_code
from .expand_composites import expand_composites
from .fold_batch_norm import fold_batch_norm, fold_conv_scale_shift
from .fold_constants import fold_constants
from .fold_pad import fold_pad_into_conv
from .fuse_ops import FusedGroup, fuse_ops, group_order
from .partition import (
    Placement,
    Region,
    accelerator_regions,
    partition_graph,
    partition_report,
)
from .plan_memory import MemoryPlan, Slot, plan_memory
from .sink_transposes import sink_transposes
from .widen_half import widen_half
from .widen_narrow import widen_narrow

PIPELINE = [
    widen_narrow,  # ops on bfloat16/float8/int4 compute in float32 (int8), only Casts convert
    expand_composites,  # Einsum, LSTM, GRU, RNN become ops the back-ends compile
    fold_constants,  # weights transformed by constant subgraphs become plain constants
    sink_transposes,  # NHWC Transposes around each conv (tf2onnx) meet their inverses
    fold_pad_into_conv,  # tf2onnx's Pad before a Conv becomes the Conv's own padding
    fold_batch_norm,  # inference batch norm disappears into the preceding Conv's weights
    fold_conv_scale_shift,  # tf2onnx's unfused batch norm (x * s + t) after a Conv, too
    drop_padding_taps,  # a dilated Conv's taps that read only padding (DeepLabV3's ASPP) go
    eliminate_dead_code,  # drops the parameters and nodes the folds left unused
    widen_half,  # float16 convolutions, products and reductions accumulate in float32
    fuse_ops,  # groups nodes into kernels by pattern kind
    plan_memory,  # arena offsets for the tensors that cross kernel boundaries
]


def optimize(graph: Graph, layout_block: int | None = None, chains_only: bool = False) -> Graph:
    """Run PIPELINE in order; with `layout_block`, convolutions move to NCHW[block]c
    (alter_layout, after the folds and before fusion, as TVM's AlterOpLayout; `chains_only`:
    only where the blocked layout flows from one to the next, as the CPU compile runs it)."""
    for graph_pass in PIPELINE:
        if graph_pass is fuse_ops and layout_block is not None:
            graph = alter_layout(graph, layout_block, chains_only)
        graph = graph_pass(graph)
    return graph


__all__ = [
    "PIPELINE",
    "alter_layout",
    "FusedGroup",
    "MemoryPlan",
    "Slot",
    "drop_padding_taps",
    "eliminate_dead_code",
    "expand_composites",
    "fold_batch_norm",
    "fold_conv_scale_shift",
    "fold_constants",
    "fold_pad_into_conv",
    "fuse_ops",
    "group_order",
    "optimize",
    "Placement",
    "Region",
    "accelerator_regions",
    "partition_graph",
    "partition_report",
    "plan_memory",
    "sink_transposes",
    "widen_half",
    "widen_narrow",
]
