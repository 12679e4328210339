"""The forms of matrix products and convolutions the accelerator computes, for the ops models
write otherwise (run before quantization in `compile_vta.quantize_for`, not in the CPU pipeline).

The accelerator's GEMM core takes a 2-D dense (rows x K times K x N) and a 2-D convolution. Two
everyday forms were left in float on the CPU:

- a MatMul of an N-D activation by a 2-D weight, every Linear layer of a transformer or an MLP
  over a sequence (`[batch, tokens, K] @ [K, N]`): the rows are the leading dims flattened,
  `Reshape` to `[rows, K]`, the 2-D MatMul, `Reshape` back;
- a 1-D convolution (audio, keyword spotting, time series; weight `[O, I/group, k]`): a 2-D one
  over a height of 1, the input `Unsqueeze`d at axis 2, the weight `[O, I/group, 1, k]`, the
  result `Squeeze`d, with `pads`, `strides`, `dilations` and `kernel_shape` given the height's
  neutral values.

Both are the same arithmetic (each output is the same sum of the same products), so the float
graph's results do not change; the reshapes are data movement the CPU runs between regions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Graph, GraphBuilder, Node


def _rank3_matmul(graph: Graph, node: Node) -> bool:
    if node.op != "MatMul" or len(node.inputs) != 2:
        return False
    x, w = node.inputs
    weight = graph.constants.get(w)
    return (
        weight is not None
        and weight.ndim == 2
        and len(graph.types[x].shape) >= 3
        and graph.types[x].dtype == "float32"
    )


def _conv1d(graph: Graph, node: Node) -> bool:
    if node.op != "Conv":
        return False
    weight = graph.constants.get(node.inputs[1])
    return (
        weight is not None
        and weight.ndim == 3
        and graph.types[node.inputs[0]].dtype == "float32"
        and all(not b or b in graph.constants for b in node.inputs[2:])
    )


def _conv2d_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """A 1-D Conv's attributes for the same convolution over a height of 1."""
    out = dict(attrs)
    for key, neutral in (("strides", 1), ("dilations", 1), ("kernel_shape", 1)):
        if attrs.get(key) is not None:
            out[key] = (neutral, *attrs[key])
    if attrs.get("pads") is not None:
        begin, end = attrs["pads"]
        out["pads"] = (0, begin, 0, end)
    return out


def accelerator_forms(graph: Graph) -> Graph:
    """`graph` with N-D-by-2-D MatMuls as 2-D ones between Reshapes and 1-D Convs as 2-D ones
    between Unsqueeze and Squeeze (module docstring), so the quantizer can give them to the
    accelerator.

    Before: `%y = MatMul(%x, %w)` with `%x` float32[2, 5, 24], `%w` [24, 12]
    After:  `%x2 = Reshape(%x, [10, 24]); %y2 = MatMul(%x2, %w); %y = Reshape(%y2, [2, 5, 12])`
    """
    if not any(_rank3_matmul(graph, n) or _conv1d(graph, n) for n in graph.nodes):
        return graph
    b = GraphBuilder.sharing(graph)

    def unused(hint: str) -> str:  # a name neither the graph nor the builder has yet
        name, k = hint, 0
        while name in graph.types or name in b.types:
            k += 1
            name = f"{hint}_{k}"
        return name

    for node in graph.nodes:
        if _rank3_matmul(graph, node):
            x, w = node.inputs
            lead, k = graph.types[x].shape[:-1], graph.types[x].shape[-1]
            rows = b.add_constant(unused(f"{node.name}.rows"), np.array([-1, k], np.int64))
            (x2,) = b.add_node("Reshape", [x, rows], name=f"{node.name}.flatten",
                               outputs=[unused(f"{x}.rows")])  # fmt: skip
            (y2,) = b.add_node("MatMul", [x2, w], name=node.name,
                               outputs=[unused(f"{node.outputs[0]}.rows")])  # fmt: skip
            n = graph.constants[w].shape[1]
            # -1, not the batch: calibration batches may have another size (quantize's rebatch)
            back = np.array([-1, *lead[1:], n], np.int64)
            shape = b.add_constant(unused(f"{node.name}.shape"), back)
            b.add_node("Reshape", [y2, shape], name=f"{node.name}.unflatten",
                       outputs=list(node.outputs))  # fmt: skip
        elif _conv1d(graph, node):
            x, w, *rest = node.inputs
            axis = b.add_constant(unused(f"{node.name}.axis"), np.array([2], np.int64))
            (x4,) = b.add_node("Unsqueeze", [x, axis], name=f"{node.name}.unsqueeze",
                               outputs=[unused(f"{x}.2d")])  # fmt: skip
            w4 = b.add_constant(unused(f"{w}.2d"), graph.constants[w][:, :, None, :])
            y4 = unused(f"{node.outputs[0]}.2d")
            b.add_node("Conv", [x4, w4, *rest], _conv2d_attrs(node.attr_dict), name=node.name,
                       outputs=[y4])  # fmt: skip
            b.add_node("Squeeze", [y4, axis], name=f"{node.name}.squeeze",
                       outputs=list(node.outputs))  # fmt: skip
        else:
            b.add_node(node.op, node.inputs, node.attr_dict, name=node.name, outputs=node.outputs)
    return b.build(graph.outputs)


__all__ = ["accelerator_forms"]
