"""Split a model's data-dependent tail off at import (`runtime/tail.py` runs it).

A node whose output shape would depend on a value computed at run time (NonZero, Compress,
Unique or NonMaxSuppression of a computed tensor, a Reshape, Expand, Range, Slice, TopK, ... whose
shape-deciding input is computed) cannot be a node of a static graph; nor, compiled, can a TopK
past the CPU lowering's limits (`beyond_lowering`). With `TailSplit`, the
importer sets such a node aside instead of refusing the model, and with it every later node that
reads a value set aside (directly, or from inside an If's branch or a Loop's body). The nodes
that remain form the static graph, which compiles as usual.

Before: `y = Conv(x); m = Greater(y, t); i = NonZero(m); g = GatherND(y, Transpose(i)); s = Sum(y)`
After:  graph `(x) -> (s, y, m)`, compiled, and the tail
        `(y, m) -> (g) = GatherND(y, Transpose(NonZero(m)))`, a model of its own that reads
        the graph's `y` and `m` at run time, the weights it reads folded in as initializers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...runtime.tail import Tail
from ..graph.ops.topk import MAX_K, MAX_SORT_N
from .onnx_runtime_loop import free_names, value_info

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .onnx import _Importer


class TailSplit:
    """The nodes set aside so far, in model order, and the values they define."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.names: list[str] = []  # node names, for messages
        self.dynamic: set[str] = set()

    def reads_tail(self, node: onnx.NodeProto) -> bool:
        """Whether `node` reads a value the tail defines (an input, or a name its sub-graphs
        read from outside)."""
        return bool(self.dynamic) and any(name in self.dynamic for name in _reads(node))

    @staticmethod
    def mark(importer: _Importer) -> tuple[int, ...]:
        """Where the import stands, for `undo`: how many nodes, values, constants and checks
        (the builder's dicts keep their insertion order)."""
        b = importer.builder
        return (len(b.nodes), len(b.types), len(b.constants), len(importer.checks),
                len(importer.sequences), len(importer.optionals))  # fmt: skip

    @staticmethod
    def undo(importer: _Importer, mark: tuple[int, ...]) -> None:
        """Drop what a node's conversion added before it failed (an If's branch converted up
        to a NonZero, an unrolled loop's first iterations), so that the node goes into the tail
        whole and the graph keeps no half of it."""
        b = importer.builder
        nodes, types, constants, checks, sequences, optionals = mark
        del b.nodes[nodes:]
        del importer.checks[checks:]
        for table, kept in (
            (b.types, types),
            (b.constants, constants),
            (importer.sequences, sequences),
            (importer.optionals, optionals),
        ):
            for key in list(table)[kept:]:
                del table[key]  # fmt: skip

    def add(self, node: onnx.NodeProto, name: str) -> None:
        self.nodes.append(node)
        self.names.append(name)
        self.dynamic.update(o for o in node.output if o)

    def __bool__(self) -> bool:
        return bool(self.nodes)


def _reads(node: onnx.NodeProto) -> list[str]:
    """The values `node` reads: its inputs, and what its sub-graphs read from outside."""
    read = [*node.input]
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            read += free_names(sub)
    return [name for name in read if name]


def beyond_lowering(node: onnx.NodeProto, importer: _Importer) -> bool:
    """Whether `node` is one the CPU lowering refuses at its size but numpy runs well: a TopK
    of K past the step-by-step selection over an axis past the ranking sort (Mask R-CNN's
    region proposals: K=1000 of 19200 anchors). It goes into the tail, as a node of a
    data-dependent shape does, and numpy's sort runs it."""
    if node.op_type != "TopK" or len(node.input) < 2:
        return False
    types, k = importer.builder.types, importer.builder.constants.get(node.input[1])
    if k is None or k.size != 1 or node.input[0] not in types:
        return False
    shape = types[node.input[0]].shape
    axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
    if not shape or not -len(shape) <= axis < len(shape):
        return False  # (the import names the error)
    return int(k.reshape(-1)[0]) > MAX_K and shape[axis] > MAX_SORT_N


def tail_boundary(split: TailSplit, importer: _Importer) -> list[str]:
    """The values defined before the tail that the tail reads, in order of first use.

    Raises:
        UnsupportedOpError: the tail reads a sequence or an optional value (named).
    """
    read: dict[str, None] = {}
    for node in split.nodes:
        for name in _reads(node):
            if name not in split.dynamic:
                read.setdefault(name)
    for name in read:
        if name in importer.sequences or name in importer.optionals:
            what = "sequence" if name in importer.sequences else "optional"
            importer.refuse(
                f"a {what} ({name!r}) read by the part of the model whose shapes are known only "
                "at run time", split.names[0])  # fmt: skip
    return list(read)


def build_tail(
    split: TailSplit,
    importer: _Importer,
    boundary: Sequence[str],
    outputs: Sequence[str],
) -> Tail:
    """The tail as a self-contained model: its inputs the boundary values computed before it
    (constants there become initializers), its outputs the model's outputs it defines.
    `outputs`: every output of the model, in order, as the compiled graph names them."""
    builder, where = importer.builder, f"{importer.where}: the data-dependent part"
    inputs, initializers, runtime = [], [], []
    for name in boundary:
        if name in builder.constants:
            initializers.append(numpy_helper.from_array(np.asarray(builder.constants[name]), name))
        elif name in builder.types:
            inputs.append(value_info(name, builder.types[name], where, narrow=True))
            runtime.append(name)
        else:
            raise importer_error(f"{where} reads {name!r}, which is not defined before it")
    declared = [v for v in importer.model.graph.output if v.name in split.dynamic]
    graph = helper.make_graph(split.nodes, "tail", inputs, declared, initializers)
    model = helper.make_model(graph, opset_imports=list(importer.model.opset_import))
    model.ir_version = importer.model.ir_version or onnx.IR_VERSION
    return Tail(model.SerializeToString(), tuple(runtime), tuple(outputs))


def importer_error(message: str) -> Exception:
    from .onnx import OnnxImportError  # (onnx.py imports this module)

    return OnnxImportError(message)
