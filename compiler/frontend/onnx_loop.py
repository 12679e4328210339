"""ONNX Loop unrolled at import, and the sequences exporters thread through one, as lists.

A Loop whose trip count is a constant (or folds from static shapes) and whose condition folds to
a constant in every iteration becomes copies of its body, one per iteration: loop-carried values
threaded from one copy to the next, scan outputs stacked along a new axis 0. torch's TorchScript
exporter writes EmbeddingBag with offsets as such a Loop; its dynamo exporter writes a while-loop
(no trip count, a condition computed from a loop-carried counter) that appends to a sequence.

Sequences (SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase, SplitToSequence,
SequenceMap, SequenceAt, SequenceLength, ConcatFromSequence) exist only at import: a sequence is
a tuple of value names, SplitToSequence makes one of Slices, SequenceMap converts its body once
per item, SequenceLength is a constant, SequenceAt the item (at a position computed at run time:
a Gather from the items stacked, when they share one type) and ConcatFromSequence a Concat.
Optionals (Optional, OptionalHasElement, OptionalGetElement) are resolved at import too: an
optional is the name of its value or None when empty. A sequence or optional that
leaves the graph (a model output) or enters it (a model input) is refused by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..graph.registry import UnsupportedOpError

if TYPE_CHECKING:
    from .onnx import _Importer

# The most body nodes one Loop may unroll to (trip count x nodes in its body): past it the graph
# grows without bound; such a loop wants a run-time loop, which the graph IR does not have.
# (Compile time grows with it: EmbeddingBag's 200 bags, 800 nodes, compile in about 30 s.)
UNROLL_LIMIT = 2048
#: the cap when the import evaluates the model (`evaluate_onnx`): each iteration's values are
#: computed on the spot (and held until the import ends)
EVALUATE_LIMIT = 1 << 20
SEQUENCE_OPS = (
    "SequenceEmpty", "SequenceConstruct", "SequenceInsert", "ConcatFromSequence",
    "SplitToSequence", "SequenceMap", "Optional", "OptionalHasElement", "OptionalGetElement",
    "SequenceAt", "SequenceErase", "SequenceLength",
)  # fmt: skip


def _error(message: str) -> Exception:
    from .onnx import OnnxImportError  # (onnx.py imports this module)

    return OnnxImportError(message)


def _refuse(importer: _Importer, what: str, name: str) -> UnsupportedOpError:
    return UnsupportedOpError([(what, name, importer.opset)], where=importer.where)


def _scalar(importer: _Importer, value: str) -> np.ndarray | None:
    """The one-element constant `value`, or None when it is computed at run time."""
    array = importer.builder.constants.get(value)
    return array if array is not None and array.size == 1 else None


def unroll_loop(importer: _Importer, name: str, node: onnx.NodeProto, attrs: dict) -> None:
    """Convert Loop `node` as its body repeated: `for i in range(M) while cond: v = body(i, v)`.

    Before: `%v_out, %scan = Loop[body: (i, c, v) -> (c', v + 1, v * 2)](3, true, %v0)`
    After:  three copies of the body, `%v_out = Identity(%v3)`,
            `%scan = Concat[axis=0](Unsqueeze(%v0 * 2), Unsqueeze(%v1 * 2), Unsqueeze(%v2 * 2))`

    A loop whose trip count or condition is computed at run time, or that would unroll past
    UNROLL_LIMIT nodes, becomes one run-time `Loop` node instead (`onnx_runtime_loop`), when its
    scan outputs (if any) have a length known at import.

    Raises:
        UnsupportedOpError: scan outputs whose length is known only at run time, or no trip
            count and no condition (a loop without end), naming the node.
        OnnxImportError: a while loop with scan outputs past UNROLL_LIMIT unrolled body nodes,
            a scan output of a loop that runs zero times (its shape is unknown), a body that does
            not fit the node.
    """
    from .onnx_runtime_loop import runtime_loop

    body: onnx.GraphProto = attrs["body"]
    trip_name, cond_name = (list(node.input) + ["", ""])[:2]
    carried = len(node.input[2:])
    _check_body(importer, name, body, carried, len(node.output))
    if not trip_name and not cond_name:
        raise _refuse(importer, "Loop with neither a trip count nor a condition", name)
    trips, cond = _bounds(importer, trip_name, cond_name)
    if (trip_name and trips is None) or (cond_name and cond is None):
        runtime_loop(importer, name, node, body, trips, cond)
        return
    limit = None if trips is None else int(trips.reshape(()))
    running = True if cond is None else bool(cond.reshape(()))
    values, parts, i = list(node.input[2:]), [[] for _ in body.output[1 + carried :]], 0
    size = max(len(body.node), 1)
    # evaluated (a data-dependent tail, `evaluate_onnx`): each iteration's nodes fold as they
    # are read, so the loop runs unrolled whatever its length (a run-time Loop node could not
    # hold a body of data-dependent shapes: Mask R-CNN pastes each mask at its box's size)
    cap = EVALUATE_LIMIT if importer.evaluate else UNROLL_LIMIT
    if not cond_name and limit is not None and limit * size > cap:
        runtime_loop(importer, name, node, body, trips, cond)
        return
    checks = len(importer.checks)
    scans = any(node.output[carried:])
    while running and (limit is None or i < limit):
        if (i + 1) * size > cap:  # a condition might have ended it sooner
            if scans and limit is None:  # (a while loop's scan length is known only at its end)
                raise _too_big(importer, name, limit, size)
            del importer.checks[checks:]  # (the iterations converted so far are dead code)
            runtime_loop(importer, name, node, body, trips, cond)
            return
        results = _iteration(importer, name, body, i, running, values)
        values = results[1 : 1 + carried]
        for each, part in zip(parts, results[1 + carried :], strict=True):
            each.append(part)
        if cond_name:  # the condition out is honoured when the node has a condition in
            folded = _scalar(importer, results[0])
            if folded is None:
                del importer.checks[checks:]
                runtime_loop(importer, name, node, body, trips, cond)
                return
            running = bool(folded.reshape(()))
        i += 1
    outputs = list(node.output) + [""] * (len(body.output) - 1 - len(node.output))
    for out, value in zip(outputs[:carried], values, strict=True):
        if out:
            importer.alias(value, out, f"{name}/{out}")
    for out, each in zip(outputs[carried:], parts, strict=True):
        if out:
            _stack(importer, name, out, each)


def _bounds(
    importer: _Importer, trip_name: str, cond_name: str
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The Loop's trip count and initial condition, each a constant, or None when absent or
    computed at run time."""
    trips = _scalar(importer, trip_name) if trip_name else None
    cond = _scalar(importer, cond_name) if cond_name else None
    return trips, cond


def _check_body(
    importer: _Importer, name: str, body: onnx.GraphProto, carried: int, outputs: int
) -> None:
    """The body fits the node (iteration, condition, carried values in; condition, carried
    values, scan outputs out) and every op in it is one the importer converts."""
    from .onnx import unsupported_nodes  # (onnx.py imports this module)

    if len(body.input) != 2 + carried or len(body.output) < 1 + carried:
        raise _error(
            f"{importer.where}: Loop node {name!r} has {carried} loop-carried values, so its body "
            f"must have {2 + carried} inputs and at least {1 + carried} outputs, not "
            f"{len(body.input)} and {len(body.output)}"
        )
    if outputs > len(body.output) - 1:
        raise _error(
            f"{importer.where}: Loop node {name!r} has {outputs} outputs, more than the "
            f"{len(body.output) - 1} its body gives (carried values and scan outputs)"
        )
    missing = unsupported_nodes(body.node, importer.opset)
    if missing:
        raise UnsupportedOpError(missing, where=f"{importer.where}: Loop node {name!r}")


def _too_big(importer: _Importer, name: str, limit: int | None, size: int) -> Exception:
    trips = "none (a while loop)" if limit is None else limit
    return _error(
        f"{importer.where}: Loop node {name!r} (trip count {trips}, {size} body nodes) unrolls "
        f"to more than the cap of {UNROLL_LIMIT} nodes"
    )


def _iteration(
    importer: _Importer, name: str, body: onnx.GraphProto, i: int, running: bool, values: list
) -> list[str]:
    """Convert one copy of `body` (iteration `i`); the graph names of its outputs."""
    prefix = f"{name}/{i}"
    renamed: dict[str, str] = {}
    builder = importer.builder
    iteration = builder.add_constant(builder.fresh(f"{prefix}/iter"), np.array(i, np.int64))
    cond = builder.add_constant(builder.fresh(f"{prefix}/cond"), np.array(running))
    renamed[body.input[0].name], renamed[body.input[1].name] = iteration, cond
    renamed.update({inp.name: value for inp, value in zip(body.input[2:], values, strict=True)})
    return importer.convert_subgraph(body, prefix, renamed)


def _stack(importer: _Importer, name: str, out: str, parts: list[str]) -> None:
    """Scan output `out`: the iterations' values stacked along a new axis 0."""
    if not parts:
        raise _error(
            f"{importer.where}: Loop node {name!r} runs zero times, so its scan output {out!r} "
            "has no static shape"
        )
    axes = importer.builder.add_constant(
        importer.builder.fresh(f"{name}/{out}/axes"), np.array([0], np.int64)
    )
    rows = []
    for k, part in enumerate(parts):
        row = importer.builder.fresh(f"{name}/{out}/{k}")
        importer.emit("Unsqueeze", [part, axes], [row], f"{name}/{out}/unsqueeze_{k}")
        rows.append(row)
    importer.emit("Concat", rows, [out], f"{name}/{out}/concat", axis=0)


def convert_sequence_op(importer: _Importer, name: str, node: onnx.NodeProto, attrs: dict) -> None:
    """A sequence op at import: SequenceEmpty/Construct/Insert make a tuple of value names,
    ConcatFromSequence a Concat (after an Unsqueeze of each with `new_axis=1`)."""
    seqs, op, out = importer.sequences, node.op_type, node.output[0]
    if op == "SequenceEmpty":
        seqs[out] = ()
    elif op == "SequenceConstruct":
        seqs[out] = tuple(node.input)
    elif op == "SplitToSequence":
        seqs[out] = _split_to_sequence(importer, name, node, attrs)
    elif op == "SequenceMap":
        _sequence_map(importer, name, node, attrs)
    elif op.startswith("Optional"):
        _optional_op(importer, name, node)
    elif op == "SequenceInsert":
        items = list(_sequence(importer, name, node.input[0]))
        at = node.input[2] if len(node.input) > 2 and node.input[2] else None
        position = len(items) if at is None else _position(importer, name, at, len(items), op)
        items.insert(position, node.input[1])
        seqs[out] = tuple(items)
    elif op == "SequenceErase":
        items = list(_sequence(importer, name, node.input[0]))
        at = node.input[1] if len(node.input) > 1 and node.input[1] else None
        if not items:
            raise _error(f"{importer.where}: SequenceErase node {name!r} has an empty sequence")
        position = len(items) - 1 if at is None else _position(importer, name, at, len(items), op)
        del items[position]
        seqs[out] = tuple(items)
    elif op == "SequenceLength":
        items = _sequence(importer, name, node.input[0])
        importer.builder.add_constant(out, np.array(len(items), np.int64))
    elif op == "SequenceAt":
        _sequence_at(importer, name, node)
    else:
        _concat_from_sequence(importer, name, node, attrs)


def _sequence(importer: _Importer, name: str, value: str) -> tuple[str, ...]:
    if value not in importer.sequences:
        raise _error(
            f"{importer.where}: {name!r} must take a sequence made at import (SequenceEmpty, "
            f"SequenceConstruct, SequenceInsert), not {value!r}"
        )
    return importer.sequences[value]


def _position(importer: _Importer, name: str, at: str, length: int, op: str) -> int:
    """The constant position `at` of SequenceInsert (which may point one past the end),
    SequenceErase or SequenceAt in a sequence of `length` items, made non-negative."""
    folded = _scalar(importer, at)
    if folded is None:
        raise _refuse(importer, f"{op} at a position computed at run time", name)
    position = int(folded.reshape(()))
    last = length if op == "SequenceInsert" else length - 1
    if not -length <= position <= last:
        raise _error(
            f"{importer.where}: {op} node {name!r} position must lie in [{-length}, {last}], "
            f"not {position}"
        )
    return position + length if position < 0 else position


def _sequence_at(importer: _Importer, name: str, node: onnx.NodeProto) -> None:
    """SequenceAt: the item at a constant position, or, at a position computed at run time, a
    Gather (which takes negative positions as SequenceAt does) from the items stacked on a new
    axis 0, which needs one shape and dtype for all of them."""
    items = _sequence(importer, name, node.input[0])
    out, at = node.output[0], node.input[1]
    if not items:
        raise _error(f"{importer.where}: SequenceAt node {name!r} has an empty sequence")
    if _scalar(importer, at) is not None:
        importer.alias(items[_position(importer, name, at, len(items), "SequenceAt")], out, name)
        return
    types = {importer.builder.types[item] for item in items}
    if len(types) > 1:
        raise _refuse(
            importer, "SequenceAt at a run-time position over items of different types", name
        )
    stacked = importer.builder.fresh(f"{name}/stacked")
    _stack(importer, name, stacked, list(items))
    position = importer.builder.fresh(f"{name}/position")
    importer.emit("Reshape", [at, importer.builder.add_constant(
        importer.builder.fresh(f"{name}/scalar"), np.zeros(0, np.int64))], [position],
        f"{name}/position")  # fmt: skip
    importer.emit("Gather", [stacked, position], [out], name, axis=0)


def _concat_from_sequence(
    importer: _Importer, name: str, node: onnx.NodeProto, attrs: dict[str, Any]
) -> None:
    items = _sequence(importer, name, node.input[0])
    if not items:
        raise _error(f"{importer.where}: ConcatFromSequence node {name!r} has an empty sequence")
    axis = attrs.get("axis")
    if axis is None:
        raise _error(f"{importer.where}: ConcatFromSequence node {name!r} must have an axis")
    if attrs.get("new_axis", 0):
        axes = importer.builder.add_constant(
            importer.builder.fresh(f"{name}/axes"), np.array([axis], np.int64)
        )
        rows = []
        for k, item in enumerate(items):
            rows.append(importer.builder.fresh(f"{name}/{k}"))
            importer.emit("Unsqueeze", [item, axes], [rows[-1]], f"{name}/unsqueeze_{k}")
        items = tuple(rows)
    importer.emit("Concat", list(items), [node.output[0]], name, axis=axis)


def _split_to_sequence(
    importer: _Importer, name: str, node: onnx.NodeProto, attrs: dict
) -> tuple[str, ...]:
    """The chunks of SplitToSequence's input: of the sizes its (constant) split gives, of one
    size and a shorter last one (a scalar split), or of one element each, squeezed unless
    `keepdims` (no split)."""
    x, builder = node.input[0], importer.builder
    shape = builder.types[x].shape
    axis = attrs.get("axis", 0)
    where = f"{importer.where}: SplitToSequence node {name!r}"
    if not -len(shape) <= axis < len(shape):
        raise _error(f"{where}: axis must lie in [{-len(shape)}, {len(shape) - 1}], not {axis}")
    axis %= len(shape)
    dim = shape[axis]
    split_name = node.input[1] if len(node.input) > 1 else ""
    split = builder.constants.get(split_name) if split_name else None
    if split_name and split is None:
        raise _refuse(importer, "SplitToSequence with a split computed at run time", name)
    squeeze = split is None and not attrs.get("keepdims", 1)
    if split is None:
        sizes = [1] * dim
    elif split.ndim == 0:
        step = int(split)
        if step < 1:
            raise _error(f"{where}: split must be positive, not {step}")
        sizes = [min(step, dim - start) for start in range(0, dim, step)]
    else:
        sizes = [int(v) for v in split]
        if sum(sizes) != dim or min(sizes, default=0) < 0:
            raise _error(f"{where}: split must hold sizes that sum to {dim}, not {sizes}")
    items, start = [], 0
    for k, size in enumerate(sizes):
        consts = [
            builder.add_constant(builder.fresh(f"{name}/{k}/{hint}"), np.array([v], np.int64))
            for hint, v in (("start", start), ("end", start + size), ("axis", axis))
        ]
        items.append(builder.fresh(f"{name}/{k}"))
        importer.emit("Slice", [x, *consts], [items[-1]], f"{name}/slice_{k}")
        if squeeze:
            squeezed = builder.fresh(f"{name}/{k}/squeezed")
            importer.emit("Squeeze", [items[-1], consts[2]], [squeezed], f"{name}/squeeze_{k}")
            items[-1] = squeezed
        start += size
    return tuple(items)


def _sequence_map(importer: _Importer, name: str, node: onnx.NodeProto, attrs: dict) -> None:
    """SequenceMap: its body converted once per item of its sequences (a tensor input is passed
    whole to each copy); each body output collected into an output sequence."""
    from .onnx import unsupported_nodes  # (onnx.py imports this module)

    body: onnx.GraphProto = attrs["body"]
    where = f"{importer.where}: SequenceMap node {name!r}"
    if len(body.input) != len(node.input) or len(body.output) != len(node.output):
        raise _error(
            f"{where}: its body must have one input per node input and one output per node "
            f"output, not {len(body.input)} and {len(body.output)}"
        )
    missing = unsupported_nodes(body.node, importer.opset)
    if missing:
        raise UnsupportedOpError(missing, where=where)
    seqs = importer.sequences
    length = len(_sequence(importer, name, node.input[0]))
    lengths = {len(seqs[v]) for v in node.input if v in seqs}
    if lengths != {length}:
        raise _error(f"{where}: its sequences must have one length, not {sorted(lengths)}")
    if length * max(len(body.node), 1) > UNROLL_LIMIT:
        raise _error(f"{where} unrolls to more than the cap of {UNROLL_LIMIT} nodes")
    results: list[list[str]] = [[] for _ in node.output]
    for i in range(length):
        renamed = {
            formal.name: seqs[value][i] if value in seqs else value
            for formal, value in zip(body.input, node.input, strict=True)
        }
        outs = importer.convert_subgraph(body, f"{name}/{i}", renamed)
        for collected, out in zip(results, outs, strict=True):
            collected.append(out)
    for out, items in zip(node.output, results, strict=True):
        seqs[out] = tuple(items)


def _optional_op(importer: _Importer, name: str, node: onnx.NodeProto) -> None:
    """Optional wraps a value (or none), OptionalHasElement becomes a constant and
    OptionalGetElement the wrapped value; a plain tensor or sequence counts as a full optional."""
    optionals, op = importer.optionals, node.op_type
    value = node.input[0] if node.input else ""
    held = optionals.get(value, value) if value else None
    if op == "Optional":
        optionals[node.output[0]] = held
    elif op == "OptionalHasElement":
        builder = importer.builder
        builder.add_constant(node.output[0], np.array(held is not None))
    elif held is None:
        raise _error(
            f"{importer.where}: OptionalGetElement node {name!r} must take an optional that holds "
            f"a value, not an empty one ({value or 'no input'!r})"
        )
    else:
        importer.alias(held, node.output[0], name)
