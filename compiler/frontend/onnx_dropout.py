"""Dropout at import: the inference op (output = input, mask all true), and training mode with
a ratio of 0, which is the same; training mode with a ratio above 0 draws at random, which no
compiled model reproduces (onnxruntime's draw is its own), so it is refused by name, as are the
random ops (Bernoulli, RandomUniform, ...)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

#: ops whose outputs are random draws: refused with the reason
RANDOM_OPS = (
    "Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
    "RandomUniformLike",
)  # fmt: skip
RANDOM_REASON = "a random draw, which compiled code cannot reproduce"


def convert_dropout(importer: Any, name: str, node: onnx.NodeProto) -> None:
    """`y = x` and a mask of trues, for inference (no or a false `training_mode`) and for
    training with a ratio of 0; `importer` is the ONNX `_Importer`."""
    consts = importer.builder.constants
    x, ratio, training = [*node.input, "", ""][:3]
    out, mask = [*node.output, ""][:2]
    if training and training not in consts:
        importer.refuse("Dropout with a training_mode computed at run time", name)
    if training and bool(consts[training].reshape(-1)[0]):
        if ratio and ratio not in consts:
            importer.refuse("Dropout in training mode with a ratio computed at run time", name)
        value = float(consts[ratio].reshape(-1)[0]) if ratio else 0.5
        if value != 0:
            variant = f"Dropout in training mode with ratio {value:g} ({RANDOM_REASON})"
            importer.refuse(variant, name)
    importer.alias(x, out, f"{name}/output")
    if mask:
        shape = importer.builder.fresh(f"{name}_shape")
        importer.builder.add_constant(shape, np.array(importer.builder.types[x].shape, np.int64))
        true = helper.make_tensor("true", onnx.TensorProto.BOOL, [1], [True])
        ones = importer.builder.fresh(f"{name}_ones")
        importer.emit("ConstantOfShape", [shape], [ones], f"{name}/mask", value=true)
        importer.alias(ones, mask, f"{name}/mask_output")


__all__ = ["RANDOM_OPS", "RANDOM_REASON", "convert_dropout"]
