"""An ONNX `If` whose condition is computed at run time, as a select between its branches.

Both branches are converted (each a tensor subgraph without side effects: ONNX has none, and
the random ops are refused) and each output is `Where(cond, then, else)` with the condition as
a scalar, so the compiled module computes both branches and keeps one. That needs the branches'
outputs to have one shape and dtype each; branches whose shapes differ, or that give
sequences or optionals, are refused by name with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..graph.registry import UnsupportedOpError

if TYPE_CHECKING:
    from .onnx import _Importer


def select_branches(importer: _Importer, name: str, node: onnx.NodeProto, attrs: dict) -> None:
    """Convert If `node` (condition computed at run time) as both branches and a Where per
    output.

    Before: `%y = If[then_branch: () -> (%a), else_branch: () -> (%b)](%c)`
    After:  the branches' nodes, then `%y = Where(Reshape(%c, []), %a', %b')`

    Raises:
        UnsupportedOpError: a condition that is not one bool, branches giving sequences or
            optionals, or outputs whose shapes or dtypes differ between the branches (node
            named); an op in a branch the importer does not convert.
    """
    from .onnx import unsupported_nodes  # (onnx.py imports this module)

    cond = node.input[0]
    ctype = importer.builder.types[cond]
    if ctype.dtype != "bool" or ctype.size != 1:
        _refuse(importer, name, f"a condition of one bool, not {ctype.dtype} {list(ctype.shape)}")
    branches = [attrs["then_branch"], attrs["else_branch"]]
    for branch in branches:
        missing = unsupported_nodes(branch.node, importer.opset)
        if missing:
            raise UnsupportedOpError(missing, where=f"{importer.where}: If node {name!r}")
    scalar = importer.builder.fresh(f"{name}/cond_shape")
    importer.builder.add_constant(scalar, np.zeros(0, np.int64))
    flag = importer.builder.fresh(f"{name}/cond")
    importer.emit("Reshape", [cond, scalar], [flag], f"{name}/cond")
    taken = _taken(importer, name, flag)
    results = [_convert(importer, name, node, branch, hint, when) for branch, hint, when in
               zip(branches, ("then", "else"), taken, strict=True)]  # fmt: skip
    for out, then, other in zip(node.output, *results, strict=True):
        if out:
            _check_alike(importer, name, out, then, other)
            importer.emit("Where", [flag, then, other], [out], f"{name}/{out}")


def _taken(importer: _Importer, name: str, flag: str) -> tuple[str, str]:
    """The bool scalars under which the then and the else branch are taken, inside the
    branches of the Ifs around this one (their index checks hold only then)."""
    b = importer.builder
    (other,) = b.add_node("Not", [flag], name=f"{name}/else_taken")
    if not importer.taken:
        return flag, other
    outer = importer.taken[-1]
    (then,) = b.add_node("And", [outer, flag], name=f"{name}/then_taken")
    (other,) = b.add_node("And", [outer, other], name=f"{name}/else_taken")
    return then, other


def _convert(
    importer: _Importer,
    name: str,
    node: onnx.NodeProto,
    branch: onnx.GraphProto,
    hint: str,
    taken: str,
) -> list[str]:
    if len(branch.output) != len(node.output):
        _refuse(importer, name, f"branches of {len(node.output)} outputs, not {hint}_branch's "
                f"{len(branch.output)}")  # fmt: skip
    importer.taken.append(taken)
    try:
        results = importer.convert_subgraph(branch, f"{name}/{hint}", {})
    finally:
        importer.taken.pop()
    for result in results:
        if result in importer.sequences or result in importer.optionals:
            kind = "a sequence" if result in importer.sequences else "an optional"
            _refuse(importer, name, f"tensor branches, not {hint}_branch giving {kind}")
    return results


def _check_alike(importer: _Importer, name: str, out: str, then: str, other: str) -> None:
    a, b = importer.builder.types[then], importer.builder.types[other]
    if a.shape != b.shape or a.dtype != b.dtype:
        _refuse(importer, name, f"output {out!r} of one shape and dtype in both branches, not "
                f"{a.dtype} {list(a.shape)} and {b.dtype} {list(b.shape)}")  # fmt: skip


def _refuse(importer: Any, name: str, need: str) -> None:
    raise UnsupportedOpError(
        [(f"If with a condition computed at run time (selecting needs {need})", name,
          importer.opset)],
        where=importer.where,
    )  # fmt: skip


__all__ = ["select_branches"]
