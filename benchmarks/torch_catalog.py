"""Torch catalog: one small module per torch.nn layer and common functional op, each in the
configurations users write by hand, exported to ONNX by torch, compiled by TensorForge and
checked against torch's own output and onnxruntime's.

Each case is exported by torch's dynamo exporter (opset 18) and, where that one fails, by its
TorchScript exporter (opset 17); the file, the inputs and torch's outputs are cached under
build/torch_catalog/. Each file is then compiled (`tensorforge.compile`, defaults) and run in a
child process of its own, so a crash or a hang is a row, not the end of the run. A row's
status is one of:

- ``ok``: every output within `RTOL` (relative to its largest magnitude) of torch's;
- ``refused``: a clear refusal (an unsupported op or lowering named, `UnsupportedOpError`,
  `LoweringError`, `NotImplementedError`; `OnnxImportError`: a file that breaks ONNX's rules,
  which onnxruntime refuses too);
- ``defect``: a wrong answer (``wrong``), an exception from inside (``crash``: TypeError,
  KeyError, AssertionError, IndexError, ...), a dead child (``signal``) or a hang
  (``timeout``);
- ``export-failed``: neither of torch's exporters wrote a file (not ours to fix);
- ``export-wrong``: our outputs equal onnxruntime's on the file, and both differ from
  torch's: the exporter wrote a graph that computes something else (not ours to fix).

Where onnxruntime disagrees with torch too, the row says so (the file itself is then suspect).

Needs the `zoo` extra (torch, onnxscript, onnxruntime).

Usage:
    python benchmarks/torch_catalog.py [--cases conv2d_groups_dil,lstm_bi_2layers_bf] [--list]
        [--fresh] [--markdown] [--recheck] [--exporters ts]

Rows go to build/torch_catalog/rows.jsonl (build/torch_catalog/ts/ with `--exporters ts`, which
runs every case through the TorchScript exporter alone); a case already there is not run
again unless named or `--recheck` (which reuses the exported files) is given.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "torch_catalog"  # build/torch_catalog/ts with --exporters ts
ROWS = CACHE / "rows.jsonl"
EXPORTERS = ("dynamo", "ts")  # tried in order: the first that writes a file is the case's
RTOL = 1e-4
EXPORT_LIMIT_S = 180
CHECK_LIMIT_S = 300

# A case: name -> a function returning (module, example inputs). Built lazily: torch is only
# imported in the exporting child.
CASES: dict[str, Callable[[], tuple[Any, tuple]]] = {}


def case(name: str) -> Callable:
    def register(fn: Callable) -> Callable:
        CASES[name] = fn
        return fn

    return register


def _fn(f: Callable, params: dict | None = None) -> Any:
    """A module whose forward is `f(self, *xs)`; `params` become its buffers."""
    import torch

    class Fn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for k, v in (params or {}).items():
                self.register_buffer(k, v)

        def forward(self, *xs: Any) -> Any:
            return f(self, *xs)

    return Fn()


def _r(*shape: int) -> Any:
    import torch

    return torch.randn(*shape)


def _define_cases() -> None:  # noqa: C901, PLR0915 - one table
    import torch
    import torch.nn as nn
    import torch.nn.functional as F  # noqa: N812

    def m(name: str, make: Callable[[], Any], *shapes: tuple[int, ...]) -> None:
        CASES[name] = lambda: (make(), tuple(_r(*s) for s in shapes))

    def f(name: str, fn: Callable, *shapes: tuple[int, ...], params: dict | None = None) -> None:
        CASES[name] = lambda: (_fn(fn, params), tuple(_r(*s) for s in shapes))

    # convolutions
    m("conv1d_basic", lambda: nn.Conv1d(4, 6, 3), (2, 4, 17))
    m("conv1d_same_dil", lambda: nn.Conv1d(4, 6, 3, padding="same", dilation=2), (2, 4, 17))
    m("conv1d_groups_stride", lambda: nn.Conv1d(4, 8, 5, stride=2, groups=2, padding=2), (1, 4, 19))
    m("conv1d_reflect", lambda: nn.Conv1d(3, 5, 3, padding=1, padding_mode="reflect"), (1, 3, 11))
    m("conv1d_circular", lambda: nn.Conv1d(3, 5, 5, padding=2, padding_mode="circular"), (1, 3, 11))
    m("conv2d_basic", lambda: nn.Conv2d(3, 8, 3, padding=1), (1, 3, 12, 12))
    m("conv2d_groups_dil", lambda: nn.Conv2d(6, 12, 3, groups=3, dilation=2), (1, 6, 13, 11))
    m("conv2d_depthwise_s2", lambda: nn.Conv2d(8, 8, 3, 2, 1, groups=8), (1, 8, 15, 15))
    m("conv2d_same_even_k", lambda: nn.Conv2d(3, 4, 4, padding="same"), (1, 3, 10, 9))
    m("conv2d_reflect", lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), (1, 3, 9, 9))
    m(
        "conv2d_replicate",
        lambda: nn.Conv2d(3, 4, 3, padding=2, padding_mode="replicate"),
        (1, 3, 8, 7),
    )
    m(
        "conv2d_circular",
        lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular"),
        (1, 3, 8, 8),
    )
    m(
        "conv2d_rect_nobias",
        lambda: nn.Conv2d(3, 5, (1, 5), (2, 1), (0, 2), bias=False),
        (2, 3, 9, 10),
    )
    m("conv3d_basic", lambda: nn.Conv3d(2, 4, 3, padding=1), (1, 2, 5, 6, 6))
    m(
        "conv3d_groups_stride",
        lambda: nn.Conv3d(4, 4, (1, 3, 3), (1, 2, 2), groups=2),
        (1, 4, 3, 9, 9),
    )
    m(
        "conv3d_replicate",
        lambda: nn.Conv3d(2, 3, 3, padding=1, padding_mode="replicate"),
        (1, 2, 4, 5, 5),
    )
    m("convt1d_basic", lambda: nn.ConvTranspose1d(4, 3, 3, stride=2), (1, 4, 7))
    m(
        "convt1d_outpad_groups",
        lambda: nn.ConvTranspose1d(4, 6, 4, 3, 1, output_padding=2, groups=2),
        (1, 4, 7),
    )
    m("convt2d_basic", lambda: nn.ConvTranspose2d(4, 3, 4, 2, 1), (1, 4, 6, 6))
    m("convt2d_outpad", lambda: nn.ConvTranspose2d(4, 3, 3, 2, 1, output_padding=1), (1, 4, 5, 7))
    m("convt2d_groups_dil", lambda: nn.ConvTranspose2d(4, 6, 3, groups=2, dilation=2), (1, 4, 5, 5))
    m("convt2d_depthwise", lambda: nn.ConvTranspose2d(6, 6, 2, 2, groups=6), (1, 6, 4, 5))
    m("convt3d_basic", lambda: nn.ConvTranspose3d(3, 2, 3, 2, 1, output_padding=1), (1, 3, 3, 4, 4))
    m(
        "convt3d_groups",
        lambda: nn.ConvTranspose3d(4, 4, (1, 2, 2), (1, 2, 2), groups=4),
        (1, 4, 2, 3, 3),
    )
    CASES["convt2d_output_size"] = lambda: (
        _fn(lambda s, x: s.c(x, output_size=[12, 12]), None),
        (_r(1, 4, 6, 6),),
    )
    _attach(CASES, "convt2d_output_size", "c", lambda: nn.ConvTranspose2d(4, 3, 3, 2, 1))

    # pooling
    m("maxpool1d", lambda: nn.MaxPool1d(3, 2), (1, 3, 16))
    m("maxpool1d_ceil_pad", lambda: nn.MaxPool1d(3, 2, 1, ceil_mode=True), (1, 3, 16))
    m("maxpool2d_basic", lambda: nn.MaxPool2d(2), (1, 3, 9, 9))
    m("maxpool2d_ceil", lambda: nn.MaxPool2d(3, 2, ceil_mode=True), (1, 3, 10, 10))
    m("maxpool2d_dil_pad", lambda: nn.MaxPool2d(3, 1, 1, dilation=2), (1, 3, 10, 10))
    m("maxpool3d_ceil", lambda: nn.MaxPool3d(2, 2, ceil_mode=True), (1, 2, 5, 5, 5))
    m("avgpool1d_pad", lambda: nn.AvgPool1d(3, 2, 1), (1, 3, 12))
    m(
        "avgpool2d_no_include_pad",
        lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False),
        (1, 3, 9, 9),
    )
    m("avgpool2d_ceil", lambda: nn.AvgPool2d(3, 2, ceil_mode=True), (1, 3, 10, 10))
    m("avgpool2d_ceil_pad_incl", lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True), (1, 3, 10, 10))
    m("avgpool2d_divisor", lambda: nn.AvgPool2d(2, divisor_override=3), (1, 3, 8, 8))
    m("avgpool3d", lambda: nn.AvgPool3d((1, 2, 2)), (1, 2, 3, 6, 6))
    m(
        "avgpool3d_ceil_nopad",
        lambda: nn.AvgPool3d(2, 2, 1, ceil_mode=True, count_include_pad=False),
        (1, 2, 5, 5, 5),
    )
    m("adaptive_avg1d", lambda: nn.AdaptiveAvgPool1d(5), (1, 3, 13))
    m("adaptive_avg2d_nondiv", lambda: nn.AdaptiveAvgPool2d((5, 3)), (1, 3, 13, 11))
    m("adaptive_avg2d_one", lambda: nn.AdaptiveAvgPool2d(1), (1, 3, 7, 7))
    m("adaptive_avg2d_none", lambda: nn.AdaptiveAvgPool2d((None, 4)), (1, 3, 6, 8))
    m("adaptive_avg3d", lambda: nn.AdaptiveAvgPool3d((2, 3, 3)), (1, 2, 5, 7, 7))
    m("adaptive_max1d", lambda: nn.AdaptiveMaxPool1d(4), (1, 3, 10))
    m("adaptive_max2d_nondiv", lambda: nn.AdaptiveMaxPool2d((3, 5)), (1, 3, 10, 11))
    m("adaptive_max2d_one", lambda: nn.AdaptiveMaxPool2d(1), (1, 3, 7, 5))
    m("adaptive_max3d", lambda: nn.AdaptiveMaxPool3d(2), (1, 2, 4, 5, 6))
    m("lppool1d", lambda: nn.LPPool1d(2, 3, 2), (1, 3, 12))
    m("lppool2d", lambda: nn.LPPool2d(2, 2), (1, 3, 8, 8))
    m("lppool2d_p3", lambda: nn.LPPool2d(3, (2, 3), (2, 1)), (1, 3, 8, 9))
    m("maxpool_unpool", lambda: _unpool(), (1, 2, 8, 8))

    # normalizations
    m("batchnorm1d_nc", lambda: _stats(nn.BatchNorm1d(6)), (4, 6))
    m("batchnorm1d_ncl", lambda: _stats(nn.BatchNorm1d(6)), (2, 6, 9))
    m("batchnorm2d", lambda: _stats(nn.BatchNorm2d(5)), (2, 5, 6, 7))
    m("batchnorm2d_noaffine", lambda: _stats(nn.BatchNorm2d(5, affine=False)), (2, 5, 4, 4))
    m("batchnorm3d", lambda: _stats(nn.BatchNorm3d(3)), (1, 3, 4, 5, 5))
    m("groupnorm", lambda: _stats(nn.GroupNorm(3, 6)), (2, 6, 5, 5))
    m("groupnorm_1d", lambda: _stats(nn.GroupNorm(2, 8)), (2, 8, 7))
    m("groupnorm_noaffine", lambda: nn.GroupNorm(4, 8, affine=False), (2, 8, 3, 3, 2))
    m("layernorm_last", lambda: _stats(nn.LayerNorm(16)), (2, 5, 16))
    m("layernorm_2dims", lambda: _stats(nn.LayerNorm([5, 6])), (2, 3, 5, 6))
    m("layernorm_nobias", lambda: _stats(nn.LayerNorm(8, bias=False)), (3, 8))
    m("layernorm_noaffine", lambda: nn.LayerNorm([4, 4], elementwise_affine=False), (2, 3, 4, 4))
    m("instancenorm1d", lambda: nn.InstanceNorm1d(4), (2, 4, 9))
    m("instancenorm2d_affine", lambda: _stats(nn.InstanceNorm2d(4, affine=True)), (2, 4, 6, 6))
    m(
        "instancenorm2d_stats",
        lambda: _stats(nn.InstanceNorm2d(4, track_running_stats=True)),
        (2, 4, 6, 6),
    )
    m("instancenorm3d", lambda: nn.InstanceNorm3d(3, affine=True), (1, 3, 3, 4, 4))
    m("lrn", lambda: nn.LocalResponseNorm(3), (1, 6, 5, 5))
    m("lrn_3d_input", lambda: nn.LocalResponseNorm(2, alpha=1e-2, beta=0.5, k=2.0), (2, 5, 7))
    m("rmsnorm", lambda: _stats(nn.RMSNorm(8)), (2, 4, 8))
    m("rmsnorm_2dims_eps", lambda: _stats(nn.RMSNorm([3, 8], eps=1e-5)), (2, 3, 8))
    m("rmsnorm_noaffine", lambda: nn.RMSNorm(6, elementwise_affine=False), (3, 6))
    f("f_normalize", lambda s, x: F.normalize(x, dim=1), (3, 5, 4))
    f("f_normalize_p1", lambda s, x: F.normalize(x, p=1.0, dim=-1), (3, 5))

    # activations
    for name, make in {
        "relu": nn.ReLU,
        "relu6": nn.ReLU6,
        "elu": lambda: nn.ELU(0.5),
        "selu": nn.SELU,
        "celu": lambda: nn.CELU(1.5),
        "gelu": nn.GELU,
        "gelu_tanh": lambda: nn.GELU("tanh"),
        "silu": nn.SiLU,
        "mish": nn.Mish,
        "hardswish": nn.Hardswish,
        "hardsigmoid": nn.Hardsigmoid,
        "hardtanh": lambda: nn.Hardtanh(-0.5, 2.0),
        "hardshrink": lambda: nn.Hardshrink(0.3),
        "softshrink": lambda: nn.Softshrink(0.4),
        "tanhshrink": nn.Tanhshrink,
        "leaky_relu": lambda: nn.LeakyReLU(0.2),
        "rrelu_eval": nn.RReLU,
        "sigmoid": nn.Sigmoid,
        "tanh": nn.Tanh,
        "logsigmoid": nn.LogSigmoid,
        "softplus": nn.Softplus,
        "softplus_beta_thr": lambda: nn.Softplus(beta=2.0, threshold=1.0),
        "softsign": nn.Softsign,
        "threshold": lambda: nn.Threshold(0.1, -2.0),
        "softmax_dim1": lambda: nn.Softmax(dim=1),
        "softmin": lambda: nn.Softmin(dim=-1),
        "logsoftmax": lambda: nn.LogSoftmax(dim=1),
        "softmax2d": nn.Softmax2d,
        "glu": nn.GLU,
        "glu_dim1": lambda: nn.GLU(dim=1),
        "prelu": nn.PReLU,
    }.items():
        m(f"act_{name}", make, (2, 6, 5, 4))
    m("act_prelu_channels", lambda: _prelu(6), (2, 6, 5, 4))
    m("act_prelu_channels_1d", lambda: _prelu(6), (3, 6))
    m("act_prelu_channels_ncl", lambda: _prelu(4), (2, 4, 7))
    f("f_gelu_erf_manual", lambda s, x: 0.5 * x * (1 + torch.erf(x / 1.41421356)), (3, 8))
    f("f_softmax_neg_dim", lambda s, x: F.softmax(x, dim=-2), (2, 5, 4))
    f("f_log_softmax_dim0", lambda s, x: F.log_softmax(x, dim=0), (5, 4))
    f("f_elu_inplace_chain", lambda s, x: F.elu(F.relu6(x * 4) - 3), (2, 8))

    # embeddings
    CASES["embedding"] = lambda: (nn.Embedding(10, 4), (torch.randint(0, 10, (2, 5)),))
    CASES["embedding_padding_idx"] = lambda: (
        nn.Embedding(10, 4, padding_idx=0),
        (torch.tensor([[0, 3, 9], [2, 0, 1]]),),
    )
    CASES["embeddingbag_mean"] = lambda: (
        nn.EmbeddingBag(10, 4, mode="mean"),
        (torch.randint(0, 10, (3, 4)),),
    )
    CASES["embeddingbag_sum"] = lambda: (
        nn.EmbeddingBag(10, 4, mode="sum"),
        (torch.randint(0, 10, (3, 4)),),
    )
    CASES["embeddingbag_max"] = lambda: (
        nn.EmbeddingBag(10, 4, mode="max"),
        (torch.randint(0, 10, (3, 4)),),
    )
    CASES["one_hot"] = lambda: (
        _fn(lambda s, i: F.one_hot(i, 6).float()),
        (torch.randint(0, 6, (2, 5)),),
    )

    # recurrent
    m("rnn_tanh", lambda: _first(nn.RNN(4, 6)), (5, 2, 4))
    m(
        "rnn_relu_2layers_bf",
        lambda: _first(nn.RNN(4, 6, 2, nonlinearity="relu", batch_first=True)),
        (2, 5, 4),
    )
    m("lstm_basic", lambda: _first(nn.LSTM(4, 6)), (5, 2, 4))
    m(
        "lstm_bi_2layers_bf",
        lambda: _first(nn.LSTM(4, 6, 2, batch_first=True, bidirectional=True)),
        (2, 5, 4),
    )
    m("lstm_proj", lambda: _first(nn.LSTM(4, 8, proj_size=3)), (5, 2, 4))
    m("lstm_all_outputs", lambda: _flat(nn.LSTM(4, 6, 2, bidirectional=True)), (5, 2, 4))
    m("lstm_nobias", lambda: _first(nn.LSTM(4, 6, bias=False)), (5, 2, 4))
    m("gru_basic", lambda: _first(nn.GRU(4, 6)), (5, 2, 4))
    m(
        "gru_bi_2layers_bf",
        lambda: _first(nn.GRU(4, 6, 2, batch_first=True, bidirectional=True)),
        (2, 5, 4),
    )
    m("gru_all_outputs", lambda: _flat(nn.GRU(4, 6, bidirectional=True)), (5, 2, 4))
    m("rnn_with_h0", lambda: _with_h0(nn.GRU(4, 6, 2)), (5, 2, 4), (2, 2, 6))
    m("lstm_cell", lambda: _cell(nn.LSTMCell(4, 6)), (3, 4))
    m("gru_cell", lambda: _cell(nn.GRUCell(4, 6)), (3, 4))
    m("rnn_cell", lambda: _cell(nn.RNNCell(4, 6)), (3, 4))

    # attention and transformers
    m("mha_self", lambda: _mha(nn.MultiheadAttention(16, 4)), (5, 2, 16))
    m("mha_batch_first", lambda: _mha(nn.MultiheadAttention(16, 2, batch_first=True)), (2, 5, 16))
    m(
        "mha_kdim_vdim",
        lambda: _mha_kv(nn.MultiheadAttention(16, 4, kdim=8, vdim=12, batch_first=True)),
        (2, 5, 16),
        (2, 7, 8),
        (2, 7, 12),
    )
    m(
        "mha_attn_mask",
        lambda: _mha_mask(nn.MultiheadAttention(16, 4, batch_first=True), 5, "attn"),
        (2, 5, 16),
    )
    m(
        "mha_causal_bool",
        lambda: _mha_mask(nn.MultiheadAttention(16, 2, batch_first=True), 6, "causal"),
        (2, 6, 16),
    )
    m(
        "mha_key_padding",
        lambda: _mha_mask(nn.MultiheadAttention(16, 2, batch_first=True), 6, "kpm"),
        (2, 6, 16),
    )
    m(
        "mha_weights",
        lambda: _mha_weights(nn.MultiheadAttention(16, 4, batch_first=True)),
        (2, 5, 16),
    )
    m(
        "mha_bias_kv",
        lambda: _mha(nn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=True)),
        (4, 2, 8),
    )
    m(
        "encoder_layer",
        lambda: nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0).eval(),
        (5, 2, 16),
    )
    m(
        "encoder_layer_norm_first_gelu",
        lambda: nn.TransformerEncoderLayer(
            16, 2, 32, 0.0, "gelu", batch_first=True, norm_first=True
        ).eval(),
        (2, 5, 16),
    )
    m("encoder_stack_causal", lambda: _encoder_causal(), (2, 6, 16))
    m(
        "decoder_layer",
        lambda: nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0).eval(),
        (5, 2, 16),
        (7, 2, 16),
    )
    m("decoder_layer_bf_masks", lambda: _decoder_masked(), (2, 5, 16), (2, 7, 16))
    m(
        "transformer_small",
        lambda: nn.Transformer(16, 2, 1, 1, 32, 0.0, batch_first=True).eval(),
        (2, 6, 16),
        (2, 4, 16),
    )
    f(
        "sdpa",
        lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v),
        (2, 2, 5, 8),
        (2, 2, 7, 8),
        (2, 2, 7, 8),
    )
    f(
        "sdpa_causal",
        lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        (2, 2, 5, 8),
        (2, 2, 5, 8),
        (2, 2, 5, 8),
    )
    f(
        "sdpa_float_mask_scale",
        lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=s.mask, scale=0.3),
        (1, 2, 4, 8),
        (1, 2, 6, 8),
        (1, 2, 6, 8),
        params={"mask": torch.randn(4, 6)},
    )

    # linear-ish
    m("linear", lambda: nn.Linear(8, 5), (3, 8))
    m("linear_3d_nobias", lambda: nn.Linear(8, 5, bias=False), (2, 3, 8))
    m("bilinear", lambda: nn.Bilinear(4, 5, 3), (6, 4), (6, 5))
    m("identity", lambda: nn.Sequential(nn.Identity(), nn.Linear(4, 4)), (2, 4))
    m("cosine_similarity", lambda: nn.CosineSimilarity(dim=1), (4, 6), (4, 6))
    m("cosine_similarity_bcast", lambda: nn.CosineSimilarity(dim=-1), (3, 1, 8), (1, 5, 8))
    m("pairwise_distance", lambda: nn.PairwiseDistance(), (4, 6), (4, 6))
    m("pairwise_distance_p1_keep", lambda: nn.PairwiseDistance(p=1.0, keepdim=True), (4, 6), (4, 6))
    f("cdist", lambda s, a, b: torch.cdist(a, b), (2, 5, 4), (2, 6, 4))

    # shape and pixel ops
    m("pixel_shuffle", lambda: nn.PixelShuffle(2), (1, 8, 3, 4))
    m("pixel_unshuffle", lambda: nn.PixelUnshuffle(2), (1, 2, 6, 4))
    m("channel_shuffle", lambda: nn.ChannelShuffle(3), (1, 6, 3, 3))
    m("flatten", lambda: nn.Flatten(), (2, 3, 4, 5))
    m("flatten_mid", lambda: nn.Flatten(1, 2), (2, 3, 4, 5))
    m("unflatten", lambda: nn.Unflatten(1, (2, 6)), (3, 12, 2))
    m("fold", lambda: nn.Fold((5, 6), (2, 3)), (2, 12, 16))
    m("fold_stride_pad", lambda: nn.Fold((6, 6), 3, padding=1, stride=2), (1, 18, 9))
    m("unfold", lambda: nn.Unfold((2, 3)), (2, 2, 5, 6))
    m("unfold_dil_pad_stride", lambda: nn.Unfold(3, dilation=2, padding=1, stride=2), (1, 2, 9, 9))
    f("tensor_unfold", lambda s, x: x.unfold(2, 3, 2), (2, 3, 9))

    # upsampling
    m("upsample_nearest2x", lambda: nn.Upsample(scale_factor=2), (1, 2, 4, 5))
    m("upsample_nearest_size", lambda: nn.Upsample(size=(7, 9)), (1, 2, 4, 5))
    m("upsample_bilinear", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), (1, 2, 4, 5))
    m(
        "upsample_bilinear_ac",
        lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
        (1, 2, 4, 5),
    )
    m("upsample_bicubic", lambda: nn.Upsample(scale_factor=2, mode="bicubic"), (1, 2, 4, 5))
    m(
        "upsample_bicubic_ac",
        lambda: nn.Upsample(size=(7, 6), mode="bicubic", align_corners=True),
        (1, 2, 4, 5),
    )
    m("upsample_linear1d", lambda: nn.Upsample(scale_factor=3, mode="linear"), (1, 2, 5))
    m("upsample_trilinear", lambda: nn.Upsample(scale_factor=2, mode="trilinear"), (1, 2, 3, 3, 4))
    m("upsample_nearest3d", lambda: nn.Upsample(scale_factor=(1, 2, 2)), (1, 2, 3, 3, 4))
    m("upsampling_nearest2d", lambda: nn.UpsamplingNearest2d(scale_factor=3), (1, 2, 3, 3))
    m("upsampling_bilinear2d", lambda: nn.UpsamplingBilinear2d(size=(6, 7)), (1, 2, 3, 3))
    f("interp_nearest_frac", lambda s, x: F.interpolate(x, scale_factor=1.5), (1, 2, 5, 6))
    f(
        "interp_nearest_exact",
        lambda s, x: F.interpolate(x, scale_factor=1.7, mode="nearest-exact"),
        (1, 2, 5, 6),
    )
    f(
        "interp_bilinear_frac",
        lambda s, x: F.interpolate(x, scale_factor=0.6, mode="bilinear"),
        (1, 2, 9, 10),
    )
    f(
        "interp_bilinear_frac_ac",
        lambda s, x: F.interpolate(x, scale_factor=1.3, mode="bilinear", align_corners=True),
        (1, 2, 5, 6),
    )
    f(
        "interp_bilinear_recompute",
        lambda s, x: F.interpolate(
            x, scale_factor=1.3, mode="bilinear", recompute_scale_factor=True
        ),
        (1, 2, 5, 6),
    )
    f(
        "interp_bicubic_down",
        lambda s, x: F.interpolate(x, size=(4, 3), mode="bicubic"),
        (1, 2, 9, 8),
    )
    f(
        "interp_bilinear_antialias",
        lambda s, x: F.interpolate(x, size=(4, 3), mode="bilinear", antialias=True),
        (1, 2, 9, 8),
    )
    f("interp_area", lambda s, x: F.interpolate(x, size=(3, 4), mode="area"), (1, 2, 9, 8))
    f("interp_nearest_1d_size", lambda s, x: F.interpolate(x, size=11), (1, 2, 5))

    # padding
    m("zeropad1d", lambda: nn.ZeroPad1d((1, 2)), (1, 2, 5))
    m("zeropad2d", lambda: nn.ZeroPad2d((1, 0, 2, 3)), (1, 2, 4, 4))
    m("zeropad3d", lambda: nn.ZeroPad3d(1), (1, 2, 3, 3, 3))
    m("constpad1d", lambda: nn.ConstantPad1d((2, 1), 1.5), (1, 2, 5))
    m("constpad2d", lambda: nn.ConstantPad2d((1, 1, 0, 2), -2.0), (1, 2, 4, 4))
    m("constpad3d", lambda: nn.ConstantPad3d((1, 0, 0, 1, 1, 1), 0.5), (1, 2, 3, 3, 3))
    m("reflectpad1d", lambda: nn.ReflectionPad1d((2, 3)), (1, 2, 6))
    m("reflectpad2d", lambda: nn.ReflectionPad2d((1, 2, 3, 0)), (1, 2, 5, 5))
    m("reflectpad3d", lambda: nn.ReflectionPad3d(1), (1, 2, 3, 4, 4))
    m("replpad1d", lambda: nn.ReplicationPad1d((3, 1)), (1, 2, 5))
    m("replpad2d", lambda: nn.ReplicationPad2d((1, 2, 0, 3)), (1, 2, 4, 4))
    m("replpad3d", lambda: nn.ReplicationPad3d((1, 1, 2, 0, 0, 1)), (1, 2, 3, 3, 3))
    m("circpad1d", lambda: nn.CircularPad1d((2, 1)), (1, 2, 5))
    m("circpad2d", lambda: nn.CircularPad2d((1, 2, 2, 1)), (1, 2, 4, 5))
    m("circpad3d", lambda: nn.CircularPad3d(1), (1, 2, 3, 3, 3))
    f("f_pad_negative", lambda s, x: F.pad(x, (-1, 2, 1, -1)), (1, 2, 5, 5))
    f("f_pad_last_dim_only", lambda s, x: F.pad(x, (1, 1)), (2, 3, 4))

    # dropout in eval, misc layers
    m(
        "dropout_eval",
        lambda: nn.Sequential(nn.Dropout(0.5), nn.Dropout2d(0.3), nn.AlphaDropout(0.2)).eval(),
        (2, 4, 3, 3),
    )

    # tensor ops
    f("cumsum", lambda s, x: torch.cumsum(x, 1), (3, 5, 2))
    f("cumsum_neg_dim", lambda s, x: x.cumsum(-1), (3, 5))
    f("cumprod", lambda s, x: torch.cumprod(x, 1), (3, 5))
    f("cummax", lambda s, x: torch.cummax(x, 1)[0], (3, 5))
    f("logcumsumexp", lambda s, x: torch.logcumsumexp(x, 0), (4, 3))
    f("flip", lambda s, x: torch.flip(x, (0, 2)), (2, 3, 4))
    f("roll", lambda s, x: torch.roll(x, 2, 1), (2, 5, 3))
    f("roll_multi", lambda s, x: torch.roll(x, (1, -2), (0, 2)), (3, 4, 5))
    f("roll_flat", lambda s, x: torch.roll(x, 3), (3, 4))
    f("tril", lambda s, x: torch.tril(x), (4, 5))
    f("triu_diag", lambda s, x: torch.triu(x, 1), (2, 4, 4))
    f("tril_neg", lambda s, x: torch.tril(x, -1), (5, 3))
    f("topk", lambda s, x: torch.topk(x, 3, dim=1), (2, 6, 3))
    f("topk_smallest", lambda s, x: torch.topk(x, 2, dim=-1, largest=False)[0], (3, 5))
    f("sort", lambda s, x: torch.sort(x, dim=1), (3, 5))
    f("sort_desc", lambda s, x: torch.sort(x, dim=0, descending=True)[0], (4, 3))
    f("argsort", lambda s, x: torch.argsort(x, dim=-1), (3, 5))
    f("argmax", lambda s, x: torch.argmax(x, dim=1), (3, 5, 2))
    f("argmax_keepdim", lambda s, x: torch.argmax(x, dim=-1, keepdim=True), (3, 5))
    f("argmax_flat", lambda s, x: torch.argmax(x), (3, 5))
    f("argmin", lambda s, x: torch.argmin(x, 0), (4, 3))
    f("max_dim", lambda s, x: torch.max(x, 1), (3, 5))
    f("min_dim_keep", lambda s, x: torch.min(x, -1, keepdim=True)[0], (3, 5))
    f("amax_multi", lambda s, x: torch.amax(x, (1, 2)), (2, 3, 4))
    f("median_dim", lambda s, x: torch.median(x, 1)[0], (3, 5))
    f("mean_std_var", lambda s, x: (x.mean(1), x.std(1), x.var(1, unbiased=False)), (3, 6))
    f("logsumexp", lambda s, x: torch.logsumexp(x, 1), (3, 6))
    f("norm_fro", lambda s, x: torch.linalg.vector_norm(x, 2, dim=-1), (3, 6))
    f("prod", lambda s, x: torch.prod(x, 1), (3, 4))
    f(
        "gather",
        lambda s, x: torch.gather(x, 1, s.idx),
        (3, 5),
        params={"idx": torch.tensor([[0, 4], [1, 1], [3, 2]])},
    )
    f("gather_neg_idx", lambda s, x: x[:, s.idx], (3, 5), params={"idx": torch.tensor([-1, 0, -2])})
    f(
        "scatter",
        lambda s, x, u: x.scatter(1, s.idx, u),
        (3, 5),
        (3, 2),
        params={"idx": torch.tensor([[0, 4], [1, 2], [3, 2]])},
    )
    f(
        "scatter_add",
        lambda s, x, u: x.scatter_add(0, s.idx, u),
        (3, 4),
        (2, 4),
        params={"idx": torch.tensor([[0, 1, 2, 0], [0, 1, 2, 0]])},
    )
    f(
        "scatter_reduce_amax",
        lambda s, x, u: x.scatter_reduce(1, s.idx, u, "amax"),
        (3, 5),
        (3, 2),
        params={"idx": torch.tensor([[0, 0], [1, 2], [4, 4]])},
    )
    f(
        "index_select",
        lambda s, x: torch.index_select(x, 1, s.idx),
        (3, 5),
        params={"idx": torch.tensor([4, 0, 0])},
    )
    f(
        "index_put",
        lambda s, x, v: x.index_put((s.idx,), v),
        (5, 3),
        (2, 3),
        params={"idx": torch.tensor([1, 3])},
    )
    f(
        "index_add",
        lambda s, x, v: x.index_add(0, s.idx, v),
        (5, 3),
        (2, 3),
        params={"idx": torch.tensor([1, 3])},
    )
    f(
        "index_fill",
        lambda s, x: x.index_fill(1, s.idx, -1.0),
        (3, 5),
        params={"idx": torch.tensor([0, 3])},
    )
    f(
        "advanced_index_2d",
        lambda s, x: x[s.i, s.j],
        (4, 5),
        params={"i": torch.tensor([0, 3, 1]), "j": torch.tensor([4, 0, 2])},
    )
    f(
        "bool_index_const",
        lambda s, x: x[:, s.keep],
        (3, 5),
        params={"keep": torch.tensor([True, False, True, True, False])},
    )
    f("slice_step", lambda s, x: x[:, 1::2, ::3], (2, 7, 8))
    f("slice_neg", lambda s, x: x[..., -3:-1], (2, 3, 6))
    f("masked_fill", lambda s, x: x.masked_fill(x > 0.5, -1e4), (3, 5))
    f(
        "masked_fill_const_mask",
        lambda s, x: x.masked_fill(s.mask, float("-inf")).softmax(-1),
        (2, 4, 4),
        params={"mask": torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)},
    )
    f("setitem_mask", lambda s, x: _setitem_mask(x), (3, 5))
    f("setitem_slice", lambda s, x: _setitem_slice(x), (3, 5))
    f("einsum_bmm", lambda s, a, b: torch.einsum("bij,bjk->bik", a, b), (2, 3, 4), (2, 4, 5))
    f(
        "einsum_attn",
        lambda s, q, k: torch.einsum("bhqd,bhkd->bhqk", q, k),
        (1, 2, 3, 4),
        (1, 2, 5, 4),
    )
    f(
        "einsum_outer_trace",
        lambda s, a, b: (torch.einsum("i,j->ij", a, b), torch.einsum("ii->", s.sq)),
        (4,),
        (3,),
        params={"sq": torch.randn(3, 3)},
    )
    f("einsum_sum_diag", lambda s, a: torch.einsum("bii->bi", a), (2, 3, 3))
    f("matmul_bcast", lambda s, a, b: torch.matmul(a, b), (2, 1, 3, 4), (5, 4, 6))
    f("matmul_vec", lambda s, a, b: (a @ b, b @ a.transpose(-1, -2)), (3, 4), (4,))
    f("bmm", lambda s, a, b: torch.bmm(a, b), (2, 3, 4), (2, 4, 5))
    f(
        "baddbmm",
        lambda s, c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0),
        (2, 3, 5),
        (2, 3, 4),
        (2, 4, 5),
    )
    f("addmm", lambda s, c, a, b: torch.addmm(c, a, b, beta=0.3, alpha=1.5), (5,), (3, 4), (4, 5))
    f("addcmul", lambda s, a, b, c: torch.addcmul(a, b, c, value=0.5), (3, 4), (3, 4), (1, 4))
    f("outer", lambda s, a, b: torch.outer(a, b), (4,), (3,))
    f("clamp_tensors", lambda s, x, lo, hi: torch.clamp(x, lo, hi), (3, 4), (3, 4), (1, 4))
    f("clamp_min_only", lambda s, x: torch.clamp(x, min=-0.2), (3, 4))
    f(
        "clamp_max_tensor",
        lambda s, x: torch.clamp(x, max=s.hi),
        (3, 4),
        params={"hi": torch.randn(4)},
    )
    f("where", lambda s, c, a, b: torch.where(c > 0, a, b), (3, 4), (3, 4), (1, 4))
    f("where_scalar", lambda s, x: torch.where(x > 0, x, 0.1 * x), (3, 4))
    f(
        "nonzero_const",
        lambda s, x: x[:, torch.nonzero(s.mask).squeeze(1)],
        (3, 5),
        params={"mask": torch.tensor([1, 0, 1, 1, 0])},
    )
    f("repeat_interleave", lambda s, x: torch.repeat_interleave(x, 2, dim=1), (2, 3, 2))
    f(
        "repeat_interleave_tensor",
        lambda s, x: torch.repeat_interleave(x, s.r, dim=0),
        (3, 2),
        params={"r": torch.tensor([1, 3, 2])},
    )
    f("repeat", lambda s, x: x.repeat(2, 1, 3), (2, 3, 2))
    f("expand", lambda s, x: x.expand(4, 3, 5) + 1, (3, 1))
    f("chunk_unequal", lambda s, x: torch.chunk(x, 3, dim=1), (2, 7))
    f("split_unequal", lambda s, x: torch.split(x, [1, 4, 2], dim=-1), (2, 3, 7))
    f("split_size", lambda s, x: torch.split(x, 3, dim=0), (8, 2))
    f("unbind", lambda s, x: torch.unbind(x, 1), (2, 3, 4))
    f("stack", lambda s, a, b: torch.stack([a, b, a * b], dim=1), (3, 4), (3, 4))
    f("cat_neg", lambda s, a, b: torch.cat([a, b], -2), (2, 3, 4), (2, 1, 4))
    f("diagonal", lambda s, x: torch.diagonal(x, 0, 1, 2), (2, 4, 4))
    f("diagonal_offset", lambda s, x: torch.diagonal(x, 1), (4, 5))
    f("diag_embed", lambda s, x: torch.diag_embed(x), (2, 3))
    f("trace", lambda s, x: torch.trace(x), (4, 4))
    f("transpose_permute", lambda s, x: x.transpose(0, 2).permute(1, 0, 2).contiguous(), (2, 3, 4))
    f("view_reshape", lambda s, x: x.view(2, -1).reshape(4, 3, 1).squeeze(-1).unsqueeze(0), (3, 4))
    f("movedim", lambda s, x: torch.movedim(x, 1, -1), (2, 3, 4))
    f("narrow", lambda s, x: torch.narrow(x, 1, 1, 3), (2, 5))
    f("fft_rfft", lambda s, x: torch.fft.rfft(x).abs(), (2, 8))
    f("fft_rfft_real_imag", lambda s, x: torch.view_as_real(torch.fft.rfft(x, dim=-1)), (2, 8))
    f("fft_irfft", lambda s, x: torch.fft.irfft(torch.fft.rfft(x)), (2, 8))
    f("arange_like", lambda s, x: x + torch.arange(x.shape[1]).float(), (2, 5))
    f(
        "zeros_ones_like",
        lambda s, x: torch.zeros_like(x) + torch.ones_like(x) * 2 + torch.full_like(x, 3.0),
        (2, 3),
    )
    f(
        "sign_abs_floor",
        lambda s, x: (torch.sign(x), x.abs().floor(), torch.ceil(x), torch.round(x * 3)),
        (3, 4),
    )
    f(
        "trunc_frac_fmod",
        lambda s, x: (
            torch.trunc(x * 3),
            torch.frac(x * 3),
            torch.fmod(x * 5, 2.0),
            torch.remainder(x * 5, 2.0),
        ),
        (3, 4),
    )
    f(
        "pow_sqrt_rsqrt",
        lambda s, x: (x.abs() ** 1.5, torch.sqrt(x.abs()), torch.rsqrt(x.abs() + 1)),
        (3, 4),
    )
    f(
        "exp_log_log1p",
        lambda s, x: (
            torch.exp(x),
            torch.log(x.abs() + 1),
            torch.log1p(x.abs()),
            torch.expm1(x),
            torch.log2(x.abs() + 1),
        ),
        (3, 4),
    )
    f(
        "trig",
        lambda s, x: (
            torch.sin(x),
            torch.cos(x),
            torch.tan(x * 0.5),
            torch.atan(x),
            torch.asin(x.clamp(-1, 1)),
            torch.atan2(x, x + 1),
        ),
        (3, 4),
    )
    f(
        "hyperbolic",
        lambda s, x: (
            torch.sinh(x),
            torch.cosh(x),
            torch.asinh(x),
            torch.acosh(x.abs() + 1),
            torch.atanh(x.clamp(-0.9, 0.9)),
        ),
        (3, 4),
    )
    f("erf_erfinv", lambda s, x: (torch.erf(x), torch.erfinv(x.clamp(-0.9, 0.9))), (3, 4))
    f("compare_logical", lambda s, a, b: ((a > b) & (a < 0.5) | ~(b >= 0)).float(), (3, 4), (3, 4))
    f(
        "isnan_isinf",
        lambda s, x: (
            torch.isnan(x).float(),
            torch.isinf(x / 0.0).float(),
            torch.nan_to_num(x / 0.0, posinf=1.0, neginf=-1.0),
        ),
        (3, 4),
    )
    f("minimum_maximum", lambda s, a, b: (torch.minimum(a, b), torch.maximum(a, b)), (3, 4), (1, 4))
    f("floor_divide", lambda s, x: torch.floor_divide(x * 5, 2.0), (3, 4))
    f("lerp", lambda s, a, b: torch.lerp(a, b, 0.3), (3, 4), (3, 4))
    f("int_arith", lambda s, x: (x.long() * 3 // 2 % 5).float(), (3, 4))
    f("cast_chain", lambda s, x: (x * 10).int().float() / 10 + x.half().float(), (3, 4))
    f("std_mean_unbiased", lambda s, x: torch.std_mean(x, dim=(0, 2)), (3, 4, 5))
    f("all_any", lambda s, x: ((x > 0).all(1).float(), (x > 1).any(-1).float()), (3, 4))
    f("count_nonzero", lambda s, x: torch.count_nonzero(x > 0, dim=1).float(), (3, 4))
    f(
        "bucketize",
        lambda s, x: torch.bucketize(x, s.b).float(),
        (3, 4),
        params={"b": torch.tensor([-1.0, 0.0, 0.5])},
    )
    f(
        "searchsorted",
        lambda s, x: torch.searchsorted(s.b, x).float(),
        (3, 4),
        params={"b": torch.tensor([-1.0, 0.0, 0.5])},
    )
    f("meshgrid", lambda s, a, b: torch.meshgrid(a, b, indexing="ij"), (3,), (4,))
    f(
        "grid_sample",
        lambda s, x, g: F.grid_sample(x, g.tanh(), align_corners=False),
        (1, 2, 5, 6),
        (1, 3, 4, 2),
    )
    f(
        "grid_sample_nearest_border",
        lambda s, x, g: F.grid_sample(
            x, g * 1.3, mode="nearest", padding_mode="border", align_corners=True
        ),
        (1, 2, 5, 6),
        (1, 3, 4, 2),
    )
    f("affine_grid", lambda s, t: F.affine_grid(t, [2, 1, 4, 5], align_corners=False), (2, 2, 3))
    f("cross", lambda s, a, b: torch.linalg.cross(a, b), (4, 3), (4, 3))
    f(
        "tensordot",
        lambda s, a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])),
        (2, 3, 4),
        (3, 4, 5),
    )
    f("kron", lambda s, a, b: torch.kron(a, b), (2, 3), (2, 2))
    f("cumsum_reverse_flip", lambda s, x: x.flip(1).cumsum(1).flip(1), (2, 5))

    # larger, odd sizes: the back-end's vector runs (32 + 16 + ... lanes) and parallel chunks
    m("big_conv2d_odd", lambda: nn.Conv2d(5, 7, 3, padding=1), (1, 5, 37, 29))
    m(
        "big_conv2d_reflect_s2",
        lambda: nn.Conv2d(3, 8, 5, 2, 2, padding_mode="reflect"),
        (1, 3, 41, 33),
    )
    m(
        "big_depthwise_dil",
        lambda: nn.Conv2d(12, 12, 3, padding=2, dilation=2, groups=12),
        (1, 12, 23, 35),
    )
    m("big_convt2d", lambda: nn.ConvTranspose2d(6, 5, 3, 2, 1, output_padding=1), (1, 6, 17, 13))
    m("big_unfold_dil_pad", lambda: nn.Unfold(3, dilation=2, padding=1, stride=1), (1, 3, 17, 19))
    m("big_unfold_stride", lambda: nn.Unfold((2, 3), padding=(1, 0), stride=(2, 3)), (2, 4, 21, 30))
    m("big_fold", lambda: nn.Fold((19, 17), 3, padding=1, stride=2), (1, 45, 90))
    m("big_maxpool_ceil", lambda: nn.MaxPool2d(3, 2, 1, ceil_mode=True), (1, 6, 37, 45))
    m("big_avgpool_nopad", lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), (1, 6, 37, 45))
    m("big_reflectpad2d", lambda: nn.ReflectionPad2d((3, 2, 1, 4)), (1, 3, 21, 33))
    m("big_circpad2d", lambda: nn.CircularPad2d((3, 2, 1, 4)), (1, 3, 21, 33))
    m("big_replpad3d", lambda: nn.ReplicationPad3d((2, 1, 1, 2, 1, 0)), (1, 2, 5, 19, 23))
    m("big_pixel_shuffle", lambda: nn.PixelShuffle(3), (1, 18, 13, 11))
    m("big_pixel_unshuffle", lambda: nn.PixelUnshuffle(3), (1, 2, 27, 33))
    m("big_channel_shuffle", lambda: nn.ChannelShuffle(4), (1, 24, 13, 17))
    m("big_groupnorm", lambda: _stats(nn.GroupNorm(4, 24)), (2, 24, 13, 11))
    m("big_layernorm", lambda: _stats(nn.LayerNorm(97)), (3, 37, 97))
    m("big_instancenorm", lambda: _stats(nn.InstanceNorm2d(5, affine=True)), (2, 5, 31, 29))
    m("big_lrn", lambda: nn.LocalResponseNorm(5), (1, 13, 17, 19))
    m("big_upsample_nearest", lambda: nn.Upsample(scale_factor=3), (1, 3, 13, 11))
    f(
        "big_interp_bilinear",
        lambda s, x: F.interpolate(x, scale_factor=1.7, mode="bilinear"),
        (1, 3, 23, 31),
    )
    f(
        "big_interp_bicubic_ac",
        lambda s, x: F.interpolate(x, size=(37, 29), mode="bicubic", align_corners=True),
        (1, 3, 19, 23),
    )
    f("big_interp_nearest_down", lambda s, x: F.interpolate(x, size=(13, 7)), (1, 3, 41, 33))
    f(
        "big_grid_sample",
        lambda s, x, g: F.grid_sample(x, g.tanh(), align_corners=True),
        (1, 3, 17, 19),
        (1, 13, 23, 2),
    )
    f(
        "big_gather_rows",
        lambda s, x: x[:, s.idx],
        (7, 53),
        params={"idx": torch.randint(0, 53, (37,))},
    )
    f("big_topk", lambda s, x: torch.topk(x, 7, dim=-1), (5, 133))
    f("big_cumsum", lambda s, x: torch.cumsum(x, -1), (3, 5, 131))
    f("big_roll", lambda s, x: torch.roll(x, (5, -7), (1, 2)), (2, 19, 37))
    f("big_tril_softmax", lambda s, x: torch.tril(x).softmax(-1), (2, 37, 37))
    f("big_transpose_reshape", lambda s, x: x.permute(0, 2, 3, 1).reshape(1, -1, 6), (1, 6, 17, 19))
    m("big_mha", lambda: _mha(nn.MultiheadAttention(48, 3, batch_first=True)), (2, 37, 48))
    m(
        "big_lstm_bi",
        lambda: _first(nn.LSTM(19, 23, batch_first=True, bidirectional=True)),
        (2, 13, 19),
    )
    CASES["big_embedding_bag"] = lambda: (
        nn.EmbeddingBag(101, 37, mode="mean"),
        (torch.randint(0, 101, (9, 13)),),
    )
    # other element types
    f(
        "i64_cumsum_argmax",
        lambda s, x: ((x * 10).long().cumsum(1), (x * 10).long().argmax(1)),
        (3, 7),
    )
    f("i32_arith", lambda s, x: ((x * 10).int() * 3 // 4 - (x * 5).int() % 3).float(), (3, 7))
    f(
        "f64_linear_gelu",
        lambda s, x: F.gelu(x.double() @ s.w.double().t()).float(),
        (3, 8),
        params={"w": torch.randn(5, 8)},
    )
    f("f64_softmax_log", lambda s, x: torch.log_softmax(x.double(), -1), (3, 9))
    f("bf16_round_trip", lambda s, x: x.bfloat16().float() * 2, (3, 8))
    f("f16_round_trip", lambda s, x: (x.half() * 3).float(), (3, 8))
    f("bool_output", lambda s, a, b: (a > b, torch.logical_xor(a > 0, b > 0)), (3, 5), (3, 5))
    f(
        "int_embedding_i32",
        lambda s, x: F.embedding((x.abs() * 3).int(), s.w),
        (4, 5),
        params={"w": torch.randn(10, 3)},
    )
    f("where_int", lambda s, x: torch.where(x > 0, (x * 4).long(), -1).float(), (3, 5))


def _attach(cases: dict, name: str, attr: str, make: Callable) -> None:
    """Give case `name`'s module a submodule `attr` (cases whose forward calls a layer)."""
    inner = cases[name]

    def build() -> tuple:
        module, xs = inner()
        setattr(module, attr, make())
        return module, xs

    cases[name] = build


def _stats(layer: Any) -> Any:
    """`layer` with random affine parameters and running statistics, so a wrong one shows."""
    import torch

    with torch.no_grad():
        for name, p in list(layer.named_parameters()) + list(layer.named_buffers()):
            if p.dtype.is_floating_point:
                p.copy_(
                    torch.rand_like(p) + 0.5
                    if "var" in name or name == "weight"
                    else torch.randn_like(p)
                )
    return layer.eval()


def _prelu(n: int) -> Any:
    import torch

    layer = torch.nn.PReLU(n)
    with torch.no_grad():
        layer.weight.copy_(torch.linspace(-0.5, 0.8, n))
    return layer


def _first(rnn: Any) -> Any:
    return _Sub(rnn, lambda r, x: r(x)[0])


def _flat(rnn: Any) -> Any:
    def run(r: Any, x: Any) -> Any:
        y, h = r(x)
        return (y, *h) if isinstance(h, tuple) else (y, h)

    return _Sub(rnn, run)


def _with_h0(rnn: Any) -> Any:
    return _Sub(rnn, lambda r, x, h: r(x, h))


def _cell(cell: Any) -> Any:
    import torch

    def run(c: Any, x: Any) -> Any:
        h = None
        for _ in range(3):
            h = c(x, h)
            x = torch.tanh(x)
        return h

    return _Sub(cell, run)


def _mha(layer: Any) -> Any:
    return _Sub(layer.eval(), lambda a, x: a(x, x, x, need_weights=False)[0])


def _mha_kv(layer: Any) -> Any:
    return _Sub(layer.eval(), lambda a, q, k, v: a(q, k, v)[0])


def _mha_weights(layer: Any) -> Any:
    return _Sub(layer.eval(), lambda a, x: a(x, x, x, average_attn_weights=True))


def _mha_mask(layer: Any, n: int, kind: str) -> Any:
    import torch

    if kind == "attn":
        mask = torch.randn(n, n)
        return _Sub(layer.eval(), lambda a, x: a(x, x, x, attn_mask=mask.to(x))[0])
    if kind == "causal":
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        return _Sub(layer.eval(), lambda a, x: a(x, x, x, attn_mask=mask)[0])
    pad = torch.zeros(2, n, dtype=torch.bool)
    pad[1, -2:] = True
    return _Sub(layer.eval(), lambda a, x: a(x, x, x, key_padding_mask=pad)[0])


def _encoder_causal() -> Any:
    import torch
    import torch.nn as nn

    layer = nn.TransformerEncoderLayer(16, 2, 32, 0.0, batch_first=True)
    stack = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    mask = nn.Transformer.generate_square_subsequent_mask(6)
    return _Sub(stack, lambda e, x: e(x, mask=mask.to(x.dtype), is_causal=True) + torch.zeros(1))


def _decoder_masked() -> Any:
    import torch
    import torch.nn as nn

    layer = nn.TransformerDecoderLayer(16, 2, 32, 0.0, batch_first=True).eval()
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, -3:] = True
    return _Sub(layer, lambda d, t, mem: d(t, mem, tgt_mask=mask, memory_key_padding_mask=pad))


def _unpool() -> Any:
    import torch.nn as nn

    pool = nn.MaxPool2d(2, return_indices=True)
    unpool = nn.MaxUnpool2d(2)
    return _Sub(nn.ModuleList([pool, unpool]), lambda ms, x: ms[1](*ms[0](x)))


def _setitem_mask(x: Any) -> Any:
    y = x.clone()
    y[y < 0] = 0.0
    return y


def _setitem_slice(x: Any) -> Any:
    y = x.clone()
    y[:, 1:3] = 2.0
    y[0] = y[0] * 3
    return y


def _Sub(inner: Any, fn: Callable) -> Any:  # noqa: N802 - a module factory: torch is lazy
    import torch

    class Sub(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *xs: Any) -> Any:
            return fn(self.inner, *xs)

    return Sub().eval()


# -- export (torch) ----------------------------------------------------------------------------


def export(name: str) -> dict[str, Any]:
    """Write build/torch_catalog/<name>.onnx and .npz (inputs, torch's outputs); say how."""
    import torch

    if not CASES:
        _define_cases()
    torch.manual_seed(0)
    module, xs = CASES[name]()
    module = module.eval()
    try:
        with torch.no_grad():
            want = module(*xs)
    except Exception as exc:  # noqa: BLE001 - a case torch itself rejects
        return {"exporter": "-", "error": f"torch: {_first_line(exc)}"}
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    path = CACHE / f"{name}.onnx"
    errors = []
    for exporter in EXPORTERS:
        try:
            with torch.no_grad():
                if exporter in ("ts", "ts-dynamic"):
                    torch.backends.mha.set_fastpath_enabled(False)
                    names = [f"input{k}" for k in range(len(xs))]
                    dynamic = {n: {0: "batch"} for n in names} if exporter != "ts" else None
                    torch.onnx.export(
                        module,
                        xs,
                        str(path),
                        opset_version=17,
                        dynamo=False,
                        input_names=names,
                        dynamic_axes=dynamic,
                    )
                else:
                    shapes = None
                    if exporter == "dynamo-dynamic":  # the exporter decides which stay symbolic
                        shapes = tuple({0: torch.export.Dim.AUTO} if x.dim() else {} for x in xs)
                    program = torch.onnx.export(
                        module, xs, dynamo=True, opset_version=18, dynamic_shapes=shapes
                    )
                    program.save(str(path))
            break
        except Exception as exc:  # noqa: BLE001 - an exporter's failure is a row
            errors.append(f"{exporter}: {_first_line(exc)}")
            path.unlink(missing_ok=True)
    else:
        return {"exporter": "-", "error": "; ".join(errors)}
    arrays = {f"in{i}": x.numpy() for i, x in enumerate(xs)}
    arrays |= {f"out{i}": y.detach().numpy() for i, y in enumerate(want)}
    np.savez(CACHE / f"{name}.npz", **arrays)
    return {"exporter": exporter, "export_note": "; ".join(errors)}


# -- check (no torch) --------------------------------------------------------------------------

REFUSALS = (
    "UnsupportedOpError",
    "LoweringError",
    "NotImplementedError",
    "UnsupportedDtypeError",
    "OnnxImportError",  # a file that breaks ONNX's rules, named (onnxruntime refuses it too)
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _rel_error(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return float("inf")
    if want.dtype == bool or got.dtype == bool:
        return float(np.any(got != want))
    got, want = got.astype(np.float64), want.astype(np.float64)
    same_nan = np.isnan(got) == np.isnan(want)
    if not same_nan.all():
        return float("inf")
    ok = ~np.isnan(want)
    inf_w = np.isinf(want) & ok
    if (got[inf_w] != want[inf_w]).any():
        return float("inf")
    ok &= ~inf_w
    if not ok.any():
        return 0.0
    return float(np.abs(got[ok] - want[ok]).max() / max(float(np.abs(want[ok]).max()), 1e-6))


def check(name: str) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort

    import tensorforge

    path = CACHE / f"{name}.onnx"
    data = np.load(CACHE / f"{name}.npz")
    model = onnx.load(str(path))
    inputs = [
        i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}
    ]
    feeds = {n: data[f"in{k}"] for k, n in enumerate(inputs)}
    want = [data[f"out{k}"] for k in range(len([f for f in data.files if f.startswith("out")]))]
    row: dict[str, Any] = {}
    try:
        theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, feeds
        )
        row["ort_vs_torch"] = max(_rel_error(t, w) for t, w in zip(theirs, want, strict=True))
    except Exception as exc:  # noqa: BLE001
        row["ort_vs_torch"] = _first_line(exc)
    start = time.perf_counter()
    try:
        # a symbolic dimension (ts-dynamic's "batch") is bound to the example's size
        module = tensorforge.compile(str(path), input_shapes={n: feeds[n].shape for n in feeds})
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        kind = "refused" if type(exc).__name__ in REFUSALS else "crash"
        return row | {"status": kind, "error": f"compile: {_first_line(exc)}"}
    row["compile_s"] = round(time.perf_counter() - start, 1)
    try:
        got = list(module.run(feeds).values())
    except Exception as exc:  # noqa: BLE001
        return row | {"status": "crash", "error": f"run: {_first_line(exc)}"}
    if len(got) != len(want):
        return row | {"status": "wrong", "error": f"{len(got)} outputs, torch has {len(want)}"}
    row["rel_error"] = max(_rel_error(g, w) for g, w in zip(got, want, strict=True))
    row["status"] = "ok" if row["rel_error"] <= RTOL else "wrong"
    if row["status"] == "wrong" and isinstance(row["ort_vs_torch"], float):
        row["vs_ort"] = max(_rel_error(g, t) for g, t in zip(got, theirs, strict=True))
        if row["vs_ort"] <= RTOL:  # the file says something else than torch computed
            row["status"] = "export-wrong"
    if row["status"] == "wrong":
        shapes = [
            (g.shape, g.dtype.name, w.shape, w.dtype.name) for g, w in zip(got, want, strict=True)
        ]
        row["error"] = f"rel. error {row['rel_error']:.2e}; (ours, torch's) shapes {shapes}"[:300]
    return row


def _child(args: list[str], limit_s: float) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, __file__, *args, "--exporters", ",".join(EXPORTERS)],
            capture_output=True,
            text=True,
            timeout=limit_s,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"{args[0][2:]}: over {limit_s:.0f} s"}
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()] or ["(no output)"]
        errors = [ln for ln in lines if "Error" in ln and ":" in ln and not ln.startswith(" ")]
        return {
            "status": "signal" if done.returncode < 0 else "crash",
            "error": f"{args[0][2:]} (exit {done.returncode}): {(errors or lines)[-1][:300]}",
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


def export_all(names: list[str]) -> None:
    """Export every case of `names` without a file yet, in one child (torch starts once); a
    case that kills or hangs the child is recorded as failed and the rest go on in a new one."""
    pending = [n for n in names if not (CACHE / f"{n}.export.json").exists()]
    while pending:
        print(f"[catalog] exporting {len(pending)} cases", file=sys.stderr, flush=True)
        result = _child(["--export", ",".join(pending)], EXPORT_LIMIT_S * len(pending))
        left = [n for n in pending if not (CACHE / f"{n}.export.json").exists()]
        if left and "error" in result:
            stuck = {"exporter": "-", "error": f"export of the case: {result['error']}"}
            (CACHE / f"{left[0]}.export.json").write_text(json.dumps(stuck))
            left = left[1:]
        pending = left


def run(name: str) -> dict[str, Any]:
    row: dict[str, Any] = {"case": name}
    row |= json.loads((CACHE / f"{name}.export.json").read_text())
    if "error" in row:
        return row | {"status": "export-failed"}
    print(f"[catalog] {name}: compiling and checking", file=sys.stderr, flush=True)
    return row | _child(["--check", name], CHECK_LIMIT_S)


def _kind(status: str) -> str:
    kinds = ("ok", "refused", "export-failed", "export-wrong")
    return status if status in kinds else "defect"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | exporter | status | detail |", "|---|---|---|---|"]
    for r in rows:
        status = r.get("status", "?")
        kind = _kind(status)
        label = kind if kind != "defect" else f"defect: {status}"
        detail = r.get("error", "") or f"rel. error {r.get('rel_error', 0):.1e}"
        if status == "export-wrong":
            detail = (
                f"ours equal onnxruntime's ({r['vs_ort']:.1e}), both {r['rel_error']:.1e} from "
                "torch's: the exported file computes something else"
            )
        ort = r.get("ort_vs_torch")
        if kind != "ok" and isinstance(ort, float) and ort > RTOL:
            detail += f" (onnxruntime vs torch: {ort:.1e})"
        elif kind != "ok" and isinstance(ort, str):
            detail += f" (onnxruntime: {ort[:80]})"
        lines.append(f"| {r['case']} | {r.get('exporter', '-')} | {label} | {detail} |")
    counts: dict[str, int] = {}
    for r in rows:
        counts[_kind(r.get("status", "?"))] = counts.get(_kind(r.get("status", "?")), 0) + 1
    lines.append("")
    lines.append(f"{len(rows)} cases: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", help="comma-separated names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the case names and stop")
    parser.add_argument("--fresh", action="store_true", help="forget the saved rows")
    parser.add_argument("--recheck", action="store_true", help="check again the saved rows' cases")
    parser.add_argument("--markdown", action="store_true", help="print the saved rows' table")
    parser.add_argument(
        "--exporters",
        default="dynamo,ts",
        help="torch exporters to try in order (default dynamo, then ts where it fails); "
        "'ts' alone runs the catalog through the TorchScript exporter (build/torch_catalog/ts), "
        "'ts-dynamic' through it with every input's first dimension symbolic ('batch'), "
        "'dynamo-dynamic' through the dynamo one with each first dimension Dim.AUTO",
    )
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--check", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global CACHE, ROWS, EXPORTERS  # noqa: PLW0603 - one run, one setting, read by the children
    EXPORTERS = tuple(args.exporters.split(","))
    if EXPORTERS != ("dynamo", "ts"):
        CACHE = CACHE / "_".join(EXPORTERS)
        ROWS = CACHE / "rows.jsonl"
    CACHE.mkdir(parents=True, exist_ok=True)
    if args.export:
        for name in args.export.split(","):
            row = export(name)
            (CACHE / f"{name}.export.json").write_text(json.dumps(row))
        print(json.dumps({}))
        return 0
    if args.check:
        print(json.dumps(check(args.check)))
        return 0
    saved = {}
    if ROWS.exists() and not args.fresh:
        saved = {r["case"]: r for r in map(json.loads, ROWS.read_text().splitlines())}
    if args.markdown:
        print(table(list(saved.values())))
        return 0
    _define_cases()
    names = args.cases.split(",") if args.cases else list(CASES)
    if args.list:
        print("\n".join(names))
        return 0
    names = [n for n in names if n not in saved or args.recheck or args.cases]
    export_all(names)
    rows = []
    for name in names:
        rows.append(run(name))
        print(
            f"[catalog] {name}: {rows[-1].get('status')} {rows[-1].get('error', '')}",
            file=sys.stderr,
            flush=True,
        )
        saved[name] = rows[-1]
        ROWS.write_text("".join(json.dumps(r) + "\n" for r in saved.values()))
    print(table(rows))
    return 1 if any(_kind(r.get("status", "?")) == "defect" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
