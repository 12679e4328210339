"""ONNX Scan (opsets 9 to 21) unrolled at import, as `onnx_loop` unrolls a Loop.

The number of iterations of a Scan is the length of its scan inputs along their scan axes, which
static shapes fix: the body is copied once per iteration, each copy reading the slice of every
scan input at that iteration (from the end for a reverse direction) and the state values of the
copy before it; the scan outputs are the copies' values stacked along their output axes (in
reverse order for a reverse direction).

Opset 8's Scan has a batch axis first (states [batch, ...], scan inputs [batch, sequence, ...],
scan outputs [batch, sequence, ...]) and optional sequence lengths; onnx's version converter
would drop the batch axis, so `onnx_upgrade` carries it past the converter under another name
(`BATCHED_SCAN`) and `unroll_batched_scan` unrolls it once per batch entry, stacking the
results along axis 0. Sequence lengths are honoured when they are constants equal to the full
length; others (a shorter entry, lengths computed at run time) are refused by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

from ..graph.registry import UnsupportedOpError
from .onnx_loop import UNROLL_LIMIT, _error
from .onnx_upgrade import BATCHED_SCAN

if TYPE_CHECKING:
    from .onnx import _Importer


def unroll_scan(importer: _Importer, name: str, node: onnx.NodeProto, attrs: dict) -> None:
    """Convert Scan `node` as its body repeated once per slice of its scan inputs.

    Before: `%s, %ys = Scan[body: (s, x) -> (s + x, s + x), num_scan_inputs=1](%s0, %xs)`
    After:  `%x_t = Gather[axis=0](%xs, t)` and a copy of the body for t = 0, 1, ...,
            `%s = Identity(%s_last)`, `%ys = Concat[axis=0](Unsqueeze(%y_0), Unsqueeze(%y_1), ...)`

    Raises:
        OnnxImportError: attributes that do not fit the node, scan inputs of different lengths,
            more than UNROLL_LIMIT unrolled body nodes, a scan output of zero iterations.
        UnsupportedOpError: an op in the body the importer does not convert.
    """
    where = f"{importer.where}: Scan node {name!r}"
    _unroll(importer, name, where, list(node.input), list(node.output), attrs)


def is_batched_scan(node: onnx.NodeProto) -> bool:
    """An opset-8 Scan as `onnx_upgrade` carries it past the version converter."""
    return (node.domain, node.op_type) == BATCHED_SCAN


def unroll_batched_scan(importer: _Importer, name: str, node: onnx.NodeProto, attrs: dict) -> None:
    """Convert opset 8's Scan (module docstring): per batch entry b, the Scan of opset 9 on the
    states and scan inputs at b, its outputs stacked along axis 0.

    Before: `%s, %ys = Scan-8[body, num_scan_inputs=1]("", %s0, %xs)` (batch 2)
    After:  `%s_b, %ys_b = Scan(%s0[b], %xs[b])` for b = 0, 1 (unrolled as `unroll_scan`),
            `%s = Concat[axis=0](Unsqueeze(%s_0), Unsqueeze(%s_1))`, and likewise `%ys`.
    """
    where = f"{importer.where}: Scan node {name!r} (opset 8)"
    lengths, inputs = (list(node.input[:1]) or [""])[0], list(node.input[1:])
    if not inputs:
        raise _error(f"{where} must have states or scan inputs after sequence_lens, not none")
    scan_attrs = {k: v for k, v in attrs.items() if k != "directions"}
    if "directions" in attrs:
        scan_attrs["scan_input_directions"] = attrs["directions"]
    batch = importer.builder.types[inputs[0]].shape[0]
    scans = attrs.get("num_scan_inputs") or 0
    if lengths:
        _check_full_lengths(importer, name, where, lengths, inputs[len(inputs) - scans :], batch)
    parts: list[list[str]] = [[] for _ in node.output]
    for b in range(batch):
        entry = [_slice(importer, f"{name}/batch", v, 0, b, batch, 0) for v in inputs]
        outs = [importer.builder.fresh(f"{name}/{b}/{o}") if o else "" for o in node.output]
        _unroll(importer, f"{name}/{b}", where, entry, outs, scan_attrs)
        for part, out in zip(parts, outs, strict=True):
            part.append(out)
    for out, part in zip(node.output, parts, strict=True):
        if out:
            _stack(importer, where, name, out, part, 0)


def _check_full_lengths(
    importer: _Importer, name: str, where: str, lengths: str, scans: list[str], batch: int
) -> None:
    """Opset 8's sequence_lens, which must be constants giving every entry its full length."""
    value = importer.builder.constants.get(lengths)
    full = importer.builder.types[scans[0]].shape[1] if scans else None
    if value is None or value.shape != (batch,) or (value != full).any():
        shown = "computed at run time" if value is None else f"{value.tolist()}"
        raise UnsupportedOpError(
            [(f"Scan as defined at opset 8 with sequence_lens {shown} (not all {full})", name,
              8)],
            where=importer.where,
        )  # fmt: skip


def _unroll(
    importer: _Importer, name: str, where: str, inputs: list[str], outputs: list[str], attrs: dict
) -> None:
    """`unroll_scan` of a Scan (opset 9 on) with these inputs and outputs."""
    body: onnx.GraphProto = attrs["body"]
    scans = attrs.get("num_scan_inputs")
    states = len(inputs) - (scans or 0)
    if scans is None or not 1 <= scans <= len(inputs):
        raise _error(f"{where}: num_scan_inputs must lie in [1, {len(inputs)}], not {scans}")
    outs = len(body.output) - states
    if len(body.input) != len(inputs) or outs < 0 or len(outputs) > len(body.output):
        raise _error(
            f"{where}: its body must take the {states} states and {scans} scan slices and give "
            f"the states and the scan outputs, not {len(body.input)} inputs and "
            f"{len(body.output)} outputs for {len(outputs)} node outputs"
        )
    _check_body(importer, name, body)
    in_axes = _ints(attrs, "scan_input_axes", scans, 0, where)
    in_dirs = _ints(attrs, "scan_input_directions", scans, 0, where)
    out_axes = _ints(attrs, "scan_output_axes", outs, 0, where)
    out_dirs = _ints(attrs, "scan_output_directions", outs, 0, where)
    sequences = inputs[states:]
    axes, steps = _scan_axes(importer, where, sequences, in_axes)
    if steps * max(len(body.node), 1) > UNROLL_LIMIT:
        raise _error(
            f"{where} ({steps} iterations, {len(body.node)} body nodes) unrolls to more than "
            f"the cap of {UNROLL_LIMIT} nodes"
        )
    values, parts = inputs[:states], [[] for _ in range(outs)]
    for t in range(steps):
        renamed = dict(zip([v.name for v in body.input[:states]], values, strict=True))
        for j, (seq, axis, rev) in enumerate(zip(sequences, axes, in_dirs, strict=True)):
            renamed[body.input[states + j].name] = _slice(importer, name, seq, axis, t, steps, rev)
        results = importer.convert_subgraph(body, f"{name}/{t}", renamed)
        values = results[:states]
        for part, result in zip(parts, results[states:], strict=True):
            part.append(result)
    outputs = outputs + [""] * (len(body.output) - len(outputs))
    for out, value in zip(outputs[:states], values, strict=True):
        if out:
            importer.alias(value, out, f"{name}/{out}")
    for out, part, axis, rev in zip(outputs[states:], parts, out_axes, out_dirs, strict=True):
        if out:
            _stack(importer, where, name, out, part[::-1] if rev else part, axis)


def _check_body(importer: _Importer, name: str, body: onnx.GraphProto) -> None:
    from .onnx import unsupported_nodes  # (onnx.py imports this module)

    missing = unsupported_nodes(body.node, importer.opset)
    if missing:
        raise UnsupportedOpError(missing, where=f"{importer.where}: Scan node {name!r}")


def _ints(attrs: dict, key: str, count: int, default: int, where: str) -> list[int]:
    values = list(attrs.get(key, [default] * count))
    if len(values) != count:
        raise _error(f"{where}: {key} must have {count} values, not {values}")
    if key.endswith("directions") and any(v not in (0, 1) for v in values):
        raise _error(f"{where}: {key} must hold 0 (forward) or 1 (reverse), not {values}")
    return values


def _scan_axes(
    importer: _Importer, where: str, sequences: list[str], in_axes: list[int]
) -> tuple[list[int], int]:
    """The scan inputs' axes (made non-negative) and their common length."""
    axes, lengths = [], []
    for seq, axis in zip(sequences, in_axes, strict=True):
        shape = importer.builder.types[seq].shape
        if not -len(shape) <= axis < len(shape):
            raise _error(
                f"{where}: scan_input_axes must lie in [{-len(shape)}, {len(shape) - 1}] for "
                f"input {seq!r} of shape {shape}, not {axis}"
            )
        axes.append(axis % len(shape))
        lengths.append(shape[axis])
    if len(set(lengths)) != 1:
        raise _error(f"{where}: scan inputs must have one length along their axes, not {lengths}")
    return axes, lengths[0]


def _slice(
    importer: _Importer, name: str, seq: str, axis: int, t: int, steps: int, reverse: int
) -> str:
    builder = importer.builder
    at = builder.add_constant(
        builder.fresh(f"{name}/{t}/at"), np.array(steps - 1 - t if reverse else t, np.int64)
    )
    out = builder.fresh(f"{name}/{t}/{seq}")
    importer.emit("Gather", [seq, at], [out], f"{name}/{t}/slice_{seq}", axis=axis)
    return out


def _stack(importer: _Importer, where: str, name: str, out: str, parts: list, axis: int) -> None:
    if not parts:
        raise _error(f"{where} runs zero times, so its scan output {out!r} has no static shape")
    rank = len(importer.builder.types[parts[0]].shape) + 1
    if not -rank <= axis < rank:
        raise _error(f"{where}: scan_output_axes must lie in [{-rank}, {rank - 1}], not {axis}")
    axes = importer.builder.add_constant(
        importer.builder.fresh(f"{name}/{out}/axes"), np.array([axis % rank], np.int64)
    )
    rows = []
    for k, part in enumerate(parts):
        rows.append(importer.builder.fresh(f"{name}/{out}/{k}"))
        importer.emit("Unsqueeze", [part, axes], [rows[-1]], f"{name}/{out}/unsqueeze_{k}")
    importer.emit("Concat", rows, [out], f"{name}/{out}/concat", axis=axis % rank)
