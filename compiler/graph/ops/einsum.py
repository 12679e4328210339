"""Einsum: the equation parsed once (`parse`), type inference from it, numpy's einsum as the
reference, and its expansion (`expand`, run by `passes.expand_composites`) into Transpose,
Reshape, MatMul, ReduceSum and Mul, which every back-end compiles (and fuses), so an attention
written with `torch.einsum` (MaxViT, many exported transformers) runs on the batched-MatMul
kernels of one written with `@`.

The expansion, per operand: a repeated label (a diagonal, `ii->i`) is a Mul by an identity mask
and a ReduceSum; a label that no other operand and not the output uses is summed at once. Then
the operands are contracted left to right, two at a time, each pair as one batched MatMul:
labels in both operands and still needed later are the batch axes, labels in both and needed no
more are the reduction (K), the rest are the rows (M, first operand) and columns (N, second);
Transpose and Reshape bring each operand to `[batch..., M, K]` / `[batch..., K, N]`, and
broadcast (ellipsis) batch axes of size 1 broadcast in MatMul. A last Transpose puts the labels
in the output's order."""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import REQUIRED, Pattern, register
from .emit import Emitter

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


Term = tuple[str, list[str]]  # a value and the labels of its axes


class _Expander(Emitter):
    def by_labels(self, term: Term, order: list[str]) -> str:
        value, labels = term
        return self.transpose(value, [labels.index(x) for x in order])

    def summed(self, term: Term, drop: list[str]) -> Term:
        value, labels = term
        axes = [i for i, x in enumerate(labels) if x in drop]
        return self.reduce_sum(value, axes), [x for x in labels if x not in drop]

    def diagonals(self, term: Term) -> Term:
        """Each repeated label down to one axis: a Mul by the identity over its two axes, then a
        ReduceSum of the second."""
        value, labels = term
        while len(set(labels)) != len(labels):
            first = next(x for x in labels if labels.count(x) > 1)
            i = labels.index(first)
            j = labels.index(first, i + 1)
            n = self.shape(value)[i]
            mask_shape = [1] * len(labels)
            mask_shape[i] = mask_shape[j] = n
            eye = np.eye(n, dtype=self.dtype(value)).reshape(mask_shape)
            value = self.reduce_sum(self.add("Mul", [value, self.const(eye, "eye")]), [j])
            labels = labels[:j] + labels[j + 1 :]
        return value, labels

    def contract(self, a: Term, b: Term, keep: set[str]) -> Term:
        sa = dict(zip(a[1], self.shape(a[0]), strict=True))
        sb = dict(zip(b[1], self.shape(b[0]), strict=True))
        # a summed label broadcast (1 against n) is summed in each operand on its own
        lone = [x for x in a[1] if x in b[1] and x not in keep and sa[x] != sb[x]]
        (va, la), (vb, lb) = self.summed(a, lone), self.summed(b, lone)
        batch = [x for x in la if x in lb and x in keep]
        red = [x for x in la if x in lb and x not in keep]
        rows = [x for x in la if x not in lb]
        cols = [x for x in lb if x not in la]
        m, k = math.prod(sa[x] for x in rows), math.prod(sa[x] for x in red)
        n = math.prod(sb[x] for x in cols)
        va = self.reshape(
            self.by_labels((va, la), batch + rows + red), [sa[x] for x in batch] + [m, k]
        )
        vb = self.reshape(
            self.by_labels((vb, lb), batch + red + cols), [sb[x] for x in batch] + [k, n]
        )
        out = self.add("MatMul", [va, vb])
        wide = [max(sa[x], sb[x]) for x in batch]
        out = self.reshape(out, wide + [sa[x] for x in rows] + [sb[x] for x in cols])
        return out, batch + rows + cols

    def emit(self) -> None:
        node = self.node
        shapes = [self.shape(v) for v in node.inputs]
        where = f"Einsum node {node.name!r}"
        eq = parse(node.attr("equation"), [len(s) for s in shapes], where)
        label_sizes(eq, shapes, where)
        terms = [
            self.diagonals((v, list(ls))) for v, ls in zip(node.inputs, eq.inputs, strict=True)
        ]
        out_labels = list(eq.output)
        for i, (_, labels) in enumerate(terms):
            elsewhere = {x for j, (_, ls) in enumerate(terms) if j != i for x in ls}
            drop = [x for x in labels if x not in elsewhere and x not in out_labels]
            terms[i] = self.summed(terms[i], drop)
        acc = terms[0]
        for i in range(1, len(terms)):
            keep = set(out_labels) | {x for _, ls in terms[i + 1 :] for x in ls}
            acc = self.contract(acc, terms[i], keep)
        value, labels = acc
        perm = [labels.index(x) for x in out_labels]
        self.add("Transpose", [value], {"perm": perm}, outputs=list(node.outputs[:1]))


def expand(b: GraphBuilder, node: Node) -> None:
    """Add the MatMul/Transpose/Reshape/ReduceSum/Mul form of Einsum `node` to `b`."""
    _Expander(b, node).emit()


register(
    "Einsum",
    Pattern.OPAQUE,
    _einsum_type,
    einsum,
    inputs=(1, 1 << 30),
    attrs={"equation": REQUIRED},
    expand=expand,
)

__all__ = ["Equation", "einsum", "expand", "label_sizes", "parse"]
