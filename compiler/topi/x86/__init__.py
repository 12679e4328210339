"""x86 operators: compute definitions plus schedules with knobs a tuner can search."""

from __future__ import annotations

from .conv2d import Conv2dConfig, Conv2dOp, conv2d_nchwc, schedule_conv2d_nchwc
from .dense import DenseConfig, DenseOp, dense, schedule_dense
from .depthwise import (
    DepthwiseConfig,
    DepthwiseOp,
    depthwise_conv2d_nchwc,
    pack_depthwise_kernel,
    schedule_depthwise_nchwc,
)
from .nn import (
    LANES_MIN_ROW,
    RowConfig,
    broadcast_op,
    depthwise_conv2d,
    layer_norm,
    pool2d,
    row_reduce,
    schedule_depthwise_conv2d,
    schedule_elementwise,
    schedule_layer_norm,
    schedule_pool2d,
    schedule_row_reduce,
    schedule_softmax,
    schedule_softmax_inner,
    softmax,
    softmax_inner,
)

__all__ = [
    "LANES_MIN_ROW",
    "Conv2dConfig",
    "Conv2dOp",
    "DenseConfig",
    "DenseOp",
    "DepthwiseConfig",
    "DepthwiseOp",
    "RowConfig",
    "broadcast_op",
    "conv2d_nchwc",
    "dense",
    "depthwise_conv2d",
    "depthwise_conv2d_nchwc",
    "layer_norm",
    "pack_depthwise_kernel",
    "pool2d",
    "row_reduce",
    "schedule_conv2d_nchwc",
    "schedule_dense",
    "schedule_depthwise_conv2d",
    "schedule_depthwise_nchwc",
    "schedule_elementwise",
    "schedule_layer_norm",
    "schedule_pool2d",
    "schedule_row_reduce",
    "schedule_softmax",
    "schedule_softmax_inner",
    "softmax",
    "softmax_inner",
]
