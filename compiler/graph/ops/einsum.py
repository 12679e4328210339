"""Einsum: the equation parsed once (`parse`), type inference from it, numpy's einsum as the
reference. No kernel lowers it: the `expand_einsum` pass rewrites every Einsum into Transpose,
Reshape, MatMul, ReduceSum and Mul, which the back-ends already compile (and fuse)."""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import TensorType
from ..registry import REQUIRED, Pattern, register

_LETTERS = set(string.ascii_letters)


@dataclass(frozen=True)
class Equation:
    """An Einsum equation for operands of given ranks: each operand's labels (ellipsis axes as
    ".0", ".1", ... counted from the first broadcast axis) and the output's labels."""

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]


def _term_labels(term: str, rank: int | None, width: int, where: str) -> tuple[str, ...]:
    """The labels of one side of the equation; the ellipsis becomes `width` labels (the last
    `rank - letters` of them for an operand of `rank`)."""
    if term.count("...") > 1 or term.replace("...", "").count(".") != 0:
        raise ValueError(f"{where}: a term must hold at most one ellipsis '...', not {term!r}")
    head, dots, tail = term.partition("...")
    for ch in head + tail:
        if ch not in _LETTERS:
            raise ValueError(f"{where}: labels must be letters, not {ch!r} in {term!r}")
    if rank is None:  # the output
        return (*head, *(f".{i}" for i in range(width) if dots), *tail)
    letters = len(head) + len(tail)
    if (not dots and rank != letters) or (dots and rank < letters):
        raise ValueError(
            f"{where}: term {term!r} names {letters} axes, but its operand has rank {rank}"
        )
    own = rank - letters if dots else 0
    return (*head, *(f".{i}" for i in range(width - own, width)), *tail)


def parse(equation: str, ranks: list[int], where: str = "Einsum") -> Equation:
    """The labels of `equation` (ONNX/numpy syntax, spaces ignored) for operands of `ranks`; a
    ValueError naming `where` for a malformed equation or one that does not fit the ranks."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(
            f"{where}: equation {equation!r} has {len(terms)} input term(s) for {len(ranks)} "
            "operand(s)"
        )
    width = 0
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            width = max(width, rank - len(term.replace("...", "")))
    inputs = tuple(_term_labels(t, r, width, where) for t, r in zip(terms, ranks, strict=True))
    if arrow:  # broadcast axes left out of an explicit output are summed (numpy, ONNX)
        output = _term_labels(rhs, None, width, where)
    else:  # implicit: the ellipsis, then the letters used once, in alphabetical order
        counts: dict[str, int] = {}
        for labels in inputs:
            for label in labels:
                counts[label] = counts.get(label, 0) + 1
        letters = sorted(x for x, n in counts.items() if n == 1 and not x.startswith("."))
        output = (*(f".{i}" for i in range(width)), *letters)
    used = {x for labels in inputs for x in labels}
    for label in output:
        if label not in used:
            raise ValueError(f"{where}: output label {label!r} of {equation!r} is in no input")
    if len(set(output)) != len(output):
        raise ValueError(f"{where}: output labels of {equation!r} must not repeat")
    return Equation(inputs, output)


def label_sizes(eq: Equation, shapes: list[tuple[int, ...]], where: str) -> dict[str, int]:
    """Each label's size; ellipsis axes broadcast (1 against n), letters must agree."""
    sizes: dict[str, int] = {}
    for labels, shape in zip(eq.inputs, shapes, strict=True):
        for label, dim in zip(labels, shape, strict=True):
            have = sizes.get(label)
            if have is None or have == dim:
                sizes[label] = dim
            elif label.startswith(".") and 1 in (have, dim):
                sizes[label] = max(have, dim)
            else:
                raise ValueError(
                    f"{where}: label {label.lstrip('.')!r} has sizes {have} and {dim} in "
                    f"different operands"
                )
    return sizes


def _einsum_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise ValueError(f"Einsum operands must have one dtype, not {sorted(dtypes)}")
    shapes = [t.shape for t in types]
    eq = parse(attrs["equation"], [len(s) for s in shapes])
    sizes = label_sizes(eq, shapes, "Einsum")
    return [TensorType(tuple(sizes[x] for x in eq.output), types[0].dtype)]


def einsum(attrs: dict[str, Any], *operands: np.ndarray) -> np.ndarray:
    dtype = operands[0].dtype
    wide = [x.astype(np.float64) if dtype.kind == "f" else x for x in operands]
    return np.array(np.einsum(attrs["equation"], *wide), dtype=dtype, order="C")  # 0-d stays 0-d


register(
    "Einsum",
    Pattern.OPAQUE,
    _einsum_type,
    einsum,
    inputs=(1, 1 << 30),
    attrs={"equation": REQUIRED},
)

__all__ = ["Equation", "einsum", "label_sizes", "parse"]
