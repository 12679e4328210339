"""Rewrites of exporters' ONNX idioms that need a data-dependent shape as written but not in
effect, applied to the model before import.

torch's exporter writes `x[mask] = v` (index_put with a boolean mask) as
`ScatterND(x, Transpose(NonZero(mask)), Reshape(Expand(v, count)))`: NonZero's output length is
the number of true elements, known only at run time, but the whole is `Where(mask, v, x)` (the
mask broadcast over the dims it does not index), which has static shapes.

Older exporters (PyTorch at opsets 7-11, Caffe2's converter) give Dropout a mask output and
MaxPool an Indices output that nothing reads; those outputs are dropped, so that the node is
the inference-time op the importer implements (onnxruntime computes the same first output).
A Dropout's `training_mode` input that is a constant false is dropped for the same reason.

ONNX requires a graph's nodes in topological order, but onnxruntime sorts them itself, and
files edited by hand or by graph tools that append nodes come out of order: `sort_nodes` puts
them in order first (every subgraph too), keeping the written order wherever it allows.
"""

from __future__ import annotations

import heapq

import onnx
from onnx import helper, numpy_helper

#: ops through which a one-element value is only broadcast or reshaped into the updates
_BROADCASTS = ("Expand", "Reshape", "Identity")


def sort_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its graph's and subgraphs' nodes in topological order: itself when they
    are in order already, else a sorted copy. Where several nodes are ready the one written
    first goes first; nodes in a cycle, or reading a value nothing defines, keep their written
    order at the end (the importer then names the value)."""
    if _in_order(model.graph):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _sort_graph(copy.graph)
    return copy


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for a in node.attribute for g in ([a.g] if a.HasField("g") else list(a.graphs))]


def _outer_reads(node: onnx.NodeProto) -> set[str]:
    """The values `node` reads from its graph: its inputs and what its subgraphs read of the
    scopes around them."""
    names = {i for i in node.input if i}
    for graph in _subgraphs(node):
        local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        local |= {o for inner in graph.node for o in inner.output}
        for inner in graph.node:
            names |= _outer_reads(inner) - local
    return names


def _in_order(graph: onnx.GraphProto) -> bool:
    made = {o for node in graph.node for o in node.output if o}
    done: set[str] = set()
    for node in graph.node:
        if any(v in made and v not in done for v in _outer_reads(node)):
            return False
        if not all(_in_order(g) for g in _subgraphs(node)):
            return False
        done.update(node.output)
    return True


def _sort_graph(graph: onnx.GraphProto) -> None:
    """Sort `graph`'s nodes in place (Kahn's algorithm, the written order breaking ties)."""
    nodes = list(graph.node)
    producer = {o: k for k, node in enumerate(nodes) for o in node.output if o}
    waits = [{producer[v] for v in _outer_reads(node) if v in producer} - {k}
             for k, node in enumerate(nodes)]  # fmt: skip
    readers: list[list[int]] = [[] for _ in nodes]
    for k, deps in enumerate(waits):
        for d in deps:
            readers[d].append(k)
    ready = [k for k, deps in enumerate(waits) if not deps]
    heapq.heapify(ready)
    order, placed = [], [False] * len(nodes)
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        placed[k] = True
        for r in readers[k]:
            waits[r].discard(k)
            if not waits[r]:
                heapq.heappush(ready, r)
    order += [k for k in range(len(nodes)) if not placed[k]]  # a cycle: left for the importer
    sorted_nodes = [nodes[k] for k in order]
    for node in sorted_nodes:
        for sub in _subgraphs(node):
            if not _in_order(sub):
                _sort_graph(sub)
    if order != list(range(len(nodes))):
        copies = [onnx.NodeProto() for _ in sorted_nodes]
        for copy, node in zip(copies, sorted_nodes, strict=True):
            copy.CopyFrom(node)
        del graph.node[:]
        graph.node.extend(copies)


def rewrite_masked_assignments(model: onnx.ModelProto) -> onnx.ModelProto:
    """`ScatterND(data, Transpose[1, 0](NonZero(mask)), broadcast(v))` -> `Where(mask', v, data)`.

    Returns the model itself when it has no such node, else a rewritten copy without the
    nodes only the rewritten ones read (the run-time count of the mask).

    Before: `%i = NonZero(%m); %t = Transpose[perm=[1, 0]](%i); %y = ScatterND(%x, %t, %u)`
    After:  `%y = Where(%m', %v', %x)` with `%m'` the mask reshaped to the data's rank.
    """
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output if out}
    scalars = _one_element_values(graph)
    rewrites: dict[int, list[onnx.NodeProto]] = {}
    for index, node in enumerate(graph.node):
        found = _masked_assignment(node, producer, scalars)
        if found is not None:
            rewrites[index] = _where_nodes(node, *found)
    if not rewrites:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        nodes.extend(rewrites.get(index, [node]))
    del copy.graph.node[:]
    copy.graph.node.extend(_live(nodes, [o.name for o in graph.output]))
    return copy


#: ops whose optional outputs past the first do not change the first, when nothing reads them
#: (BatchNormalization's do: with them onnxruntime normalizes by the batch's statistics)
_UNREAD_OUTPUTS_DROPPED = ("Dropout", "MaxPool")


def drop_unread_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Dropout's mask and MaxPool's Indices blanked where no node or graph output reads them.

    Returns the model itself when there are none, else a copy.

    Before: `%y, %mask = Dropout(%x)` (`%mask` read by nothing)
    After:  `%y = Dropout(%x)`
    """
    graph = model.graph
    read = {o.name for o in graph.output}
    for node in graph.node:
        read |= _reads(node)
    found = [
        (index, slot)
        for index, node in enumerate(graph.node)
        if node.op_type in _UNREAD_OUTPUTS_DROPPED and node.domain in ("", "ai.onnx")
        for slot, out in enumerate(node.output)
        if slot and out and out not in read
    ]
    if not found:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for index, slot in found:
        copy.graph.node[index].output[slot] = ""
    for node in copy.graph.node:  # trailing blank outputs are left out, as exporters write them
        while len(node.output) > 1 and not node.output[-1]:
            del node.output[-1]
    return copy


def drop_false_training_modes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Dropout's `training_mode` input left out where it is a constant false (an initializer
    or a Constant node), as some exporters write an inference model's Dropout.

    Returns the model itself when there are none, else a copy.

    Before: `%y = Dropout(%x, %ratio, %false)`
    After:  `%y = Dropout(%x, %ratio)`
    """
    graph = model.graph
    false = _false_constants(graph)
    found = [
        index
        for index, node in enumerate(graph.node)
        if node.op_type == "Dropout"
        and node.domain in ("", "ai.onnx")
        and len(node.input) > 2
        and node.input[2] in false
    ]
    if not found:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for index in found:
        del copy.graph.node[index].input[2:]
    return copy


def _false_constants(graph: onnx.GraphProto) -> set[str]:
    """Names of the graph's one-element constants that are false."""
    tensors = {t.name: t for t in graph.initializer if _size(t.dims) == 1}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            if _size(node.attribute[0].t.dims) == 1:
                tensors[node.output[0]] = node.attribute[0].t
    return {n for n, t in tensors.items() if not numpy_helper.to_array(t).reshape(-1)[0]}


def _one_element_values(graph: onnx.GraphProto) -> set[str]:
    """Values known to hold one element: initializers and Constant outputs of that size, and
    inputs and intermediate values declared so."""
    known = {t.name for t in graph.initializer if _size(t.dims) == 1}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute:
            attr = node.attribute[0]
            if attr.name in ("value_float", "value_int") or (
                attr.name == "value" and _size(attr.t.dims) == 1
            ):
                known.add(node.output[0])
    for value in [*graph.input, *graph.value_info]:
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.dim_value == 1 for d in dims):
            known.add(value.name)
    return known


def _size(dims) -> int:  # noqa: ANN001
    size = 1
    for d in dims:
        size *= d
    return size


def _masked_assignment(
    node: onnx.NodeProto, producer: dict[str, onnx.NodeProto], scalars: set[str]
) -> tuple[str, str] | None:
    """(mask, one-element value) when `node` is a masked assignment, else None."""
    if node.op_type != "ScatterND" or len(node.input) != 3:
        return None
    if any(a.name == "reduction" and a.s not in (b"", b"none") for a in node.attribute):
        return None
    transpose = producer.get(node.input[1])
    if transpose is None or transpose.op_type != "Transpose":
        return None
    if [list(a.ints) for a in transpose.attribute if a.name == "perm"] != [[1, 0]]:
        return None
    nonzero = producer.get(transpose.input[0])
    if nonzero is None or nonzero.op_type != "NonZero":
        return None
    value = node.input[2]
    while value not in scalars:
        source = producer.get(value)
        if source is None or source.op_type not in _BROADCASTS:
            return None
        value = source.input[0]
    return nonzero.input[0], value


def _where_nodes(node: onnx.NodeProto, mask: str, value: str) -> list[onnx.NodeProto]:
    """The Where, the value as a scalar, and the mask with ones appended to its shape up to the
    data's rank (shape arithmetic the importer folds)."""
    data, out = node.input[0], node.output[0]

    def name(hint: str) -> str:
        return f"{out}/masked_{hint}"

    def ints(hint: str, values: list[int]) -> onnx.NodeProto:
        tensor = helper.make_tensor(name(hint), onnx.TensorProto.INT64, [len(values)], values)
        return helper.make_node("Constant", [], [name(hint)], name=name(hint), value=tensor)

    def op(kind: str, inputs: list[str], hint: str, **attrs: object) -> onnx.NodeProto:
        return helper.make_node(kind, inputs, [name(hint)], name=name(hint), **attrs)

    return [
        ints("scalar_shape", []),
        ints("one", [1]),
        op("Reshape", [value, name("scalar_shape")], "scalar"),
        op("Shape", [mask], "mask_shape"),
        op("Shape", [data], "data_shape"),
        op("Size", [name("mask_shape")], "mask_rank"),
        op("Size", [name("data_shape")], "data_rank"),
        op("Sub", [name("data_rank"), name("mask_rank")], "lanes"),
        op("Reshape", [name("lanes"), name("one")], "lanes_1d"),
        op("Expand", [name("one"), name("lanes_1d")], "ones"),
        op("Concat", [name("mask_shape"), name("ones")], "shape", axis=0),
        op("Cast", [mask], "mask_bool", to=onnx.TensorProto.BOOL),  # NonZero takes any type
        op("Reshape", [name("mask_bool"), name("shape")], "mask"),
        helper.make_node(
            "Where", [name("mask"), name("scalar"), data], [out], name=node.name or out
        ),
    ]


def _live(nodes: list[onnx.NodeProto], outputs: list[str]) -> list[onnx.NodeProto]:
    """`nodes` (in order) without those no output needs (an If's branches read outer values
    that are not its inputs)."""
    needed, keep = set(outputs), []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(_reads(node))
    return keep[::-1]


def _reads(node: onnx.NodeProto) -> set[str]:
    names = {i for i in node.input if i}
    for attr in node.attribute:
        for graph in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in graph.node:
                names |= _reads(inner)
    return names


__all__ = [
    "drop_false_training_modes", "drop_unread_outputs", "rewrite_masked_assignments", "sort_nodes",
]  # fmt: skip
