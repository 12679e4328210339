"""Tensors, operations and iteration axes: `placeholder`, `compute`, `reduce_axis`."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import dtype as dt
from .expr import Expr, ExprOps, IntImm, ProducerLoad, Reduce, Var, as_expr
from .visitor import free_vars, pre_order


@dataclass(frozen=True, slots=True)
class Range:
    """The integer interval [min, min + extent)."""

    min: int
    extent: int

    @staticmethod
    def from_bounds(begin: int, end: int) -> Range:
        return Range(begin, end - begin)


class IterVarKind(enum.Enum):
    """What an iteration axis ranges over."""

    DATA_PAR = "data_par"  # an output axis: iterations are independent
    REDUCE = "reduce"  # a reduction axis: iterations combine into one value
    THREAD = "thread"  # a hardware thread axis, the target of `bind`


THREAD_TAGS = (
    "blockIdx.x",
    "blockIdx.y",
    "blockIdx.z",
    "threadIdx.x",
    "threadIdx.y",
    "threadIdx.z",
    "vthread",
)


@dataclass(frozen=True, slots=True, eq=False)
class IterVar(ExprOps):
    """An iteration axis: a variable, its domain (None until lowering for derived axes) and kind.

    Usable in arithmetic (it stands for its variable). Compared by identity.
    """

    var: Var
    dom: Range | None
    kind: IterVarKind
    thread_tag: str = ""

    @property
    def name(self) -> str:
        return self.var.name

    def as_expr(self) -> Var:
        return self.var

    def __repr__(self) -> str:
        dom = f", dom=[{self.dom.min}, {self.dom.min + self.dom.extent})" if self.dom else ""
        return f"IterVar({self.name!r}{dom}, {self.kind.value})"


class Operation:
    """Base of operations; an operation produces one output tensor."""

    __slots__ = ()
    name: str

    def output(self, index: int = 0) -> Tensor:
        if index != 0:
            raise IndexError(f"operation {self.name!r} has one output, not index {index}")
        return Tensor(self, 0)

    @property
    def input_tensors(self) -> list[Tensor]:
        return []


@dataclass(frozen=True, slots=True, eq=False)
class PlaceholderOp(Operation):
    """An input tensor of a given shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True, eq=False)
class ComputeOp(Operation):
    """`out[axis] = body`, where `body` may be a top-level `Reduce` over `reduce_axis`."""

    name: str
    axis: tuple[IterVar, ...]
    reduce_axis: tuple[IterVar, ...]
    body: Expr
    tag: str = ""
    attrs: Mapping[str, Any] = field(default_factory=dict)
    extra_bodies: tuple[Expr, ...] = ()  # outputs 1, 2, ... of a multi-output compute

    @property
    def bodies(self) -> tuple[Expr, ...]:
        """The expression of every output, in output order."""
        return (self.body, *self.extra_bodies)

    @property
    def num_outputs(self) -> int:
        return 1 + len(self.extra_bodies)

    def output(self, index: int = 0) -> Tensor:
        if not 0 <= index < self.num_outputs:
            raise IndexError(
                f"operation {self.name!r} has {self.num_outputs} output(s), not index {index}"
            )
        return Tensor(self, index)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(iv.dom.extent for iv in self.axis if iv.dom is not None)

    @property
    def dtype(self) -> str:
        return self.body.dtype

    @property
    def input_tensors(self) -> list[Tensor]:
        found: dict[Tensor, None] = {}
        for body in self.bodies:
            found.update(dict.fromkeys(producers_of(body)))
        return list(found)


def producers_of(expr: Expr) -> list[Tensor]:
    """The tensors `expr` reads, in first-appearance order."""
    found: dict[Tensor, None] = {}
    for node in pre_order(expr):
        if isinstance(node, ProducerLoad):
            found[node.producer] = None
    return list(found)


@dataclass(frozen=True, slots=True)
class Tensor:
    """The output of an operation; indexing it (`A[i, j]`) reads an element."""

    op: Operation
    value_index: int = 0

    @property
    def name(self) -> str:
        """The operation's name; output k > 0 of a multi-output compute is `name.v<k>`."""
        return self.op.name if self.value_index == 0 else f"{self.op.name}.v{self.value_index}"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.shape  # type: ignore[attr-defined]

    @property
    def dtype(self) -> str:
        if isinstance(self.op, ComputeOp):
            return self.op.bodies[self.value_index].dtype
        return self.op.dtype  # type: ignore[attr-defined]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices: Any) -> ProducerLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise IndexError(
                f"tensor {self.name!r} has {self.ndim} dimension(s), not {len(indices)} indices"
            )
        exprs = tuple(as_expr(i) for i in indices)
        for e in exprs:
            if not dt.is_int(e.dtype):
                raise TypeError(f"index of {self.name!r} must be an integer, not {e.dtype!r}")
        return ProducerLoad(self, exprs, self.dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, shape={self.shape}, dtype={self.dtype!r})"


def _check_shape(shape: int | Sequence[int], what: str) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    for n in shape:
        if isinstance(n, IntImm):
            n = n.value
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise ValueError(
                f"{what}: shape entries must be positive ints (symbolic shapes are not "
                f"supported yet), not {n!r}"
            )
    return tuple(int(getattr(n, "value", n)) for n in shape)


def placeholder(
    shape: int | Sequence[int], dtype: str = "float32", name: str = "placeholder"
) -> Tensor:
    """An input tensor.

    Example:
        >>> A = placeholder((4, 8), "float32", name="A")
        >>> A.shape
        (4, 8)
    """
    return PlaceholderOp(
        name, _check_shape(shape, f"placeholder {name!r}"), dt.check_dtype(dtype)
    ).output()


def reduce_axis(dom: tuple[int, int] | Range, name: str = "rv") -> IterVar:
    """A reduction axis over `dom` = (begin, end), end exclusive, as in `range`."""
    rng = dom if isinstance(dom, Range) else Range.from_bounds(int(dom[0]), int(dom[1]))
    if rng.extent <= 0:
        raise ValueError(f"reduce_axis {name!r}: domain must be non-empty, not {dom!r}")
    return IterVar(Var(name), rng, IterVarKind.REDUCE)


def thread_axis(tag: str, name: str | None = None) -> IterVar:
    """A hardware thread axis to `bind` loops to (blockIdx.x, threadIdx.y, vthread, ...)."""
    if tag not in THREAD_TAGS:
        raise ValueError(f"thread tag must be one of {', '.join(THREAD_TAGS)}, not {tag!r}")
    return IterVar(Var(name or tag), None, IterVarKind.THREAD, tag)


def _axis_names(fcompute: Callable[..., Any], ndim: int) -> list[str]:
    params = list(inspect.signature(fcompute).parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return [f"i{d}" for d in range(ndim)]
    if len(params) != ndim:
        raise ValueError(f"fcompute must take {ndim} index argument(s), not {len(params)}")
    return [p.name for p in params]


def compute(
    shape: int | Sequence[int],
    fcompute: Callable[..., Any],
    name: str = "compute",
    tag: str = "",
    attrs: Mapping[str, Any] | None = None,
) -> Tensor:
    """A tensor whose element at each index is `fcompute(*index)`.

    Args:
        shape: the output shape (positive ints).
        fcompute: takes one index variable per dimension and returns an expression; a reduction
            (`sum`, `max`, ...) may only be the top-level expression. Returning a tuple makes
            a multi-output compute: one loop nest computing every output (of the same shape),
            and `compute` returns a tuple of tensors (output k > 0 is named `name.v<k>`).
        name: the tensor name (stage, buffer and loop-IR name).

    Example:
        >>> A = placeholder((4, 8), name="A")
        >>> k = reduce_axis((0, 8), "k")
        >>> from tensorforge.compiler.te.reduce import sum as te_sum
        >>> B = compute((4,), lambda i: te_sum(A[i, k], axis=k), name="B")
        >>> B.op.reduce_axis[0].name
        'k'
    """
    dims = _check_shape(shape, f"compute {name!r}")
    names = _axis_names(fcompute, len(dims))
    axis = tuple(
        IterVar(Var(n), Range(0, d), IterVarKind.DATA_PAR) for n, d in zip(names, dims, strict=True)
    )
    result = fcompute(*(iv.var for iv in axis))
    if not isinstance(result, list | tuple):
        body = as_expr(result)
        reduce_axes = body.axis if isinstance(body, Reduce) else ()
        if isinstance(body, Reduce) and body.combiner.arity > 1:
            raise ValueError(
                f"compute {name!r}: a tuple reduction ({body.combiner.name}) needs one output "
                "per component; return the whole tuple from fcompute"
            )
        _validate_body(name, body, axis, reduce_axes)
        return ComputeOp(name, axis, tuple(reduce_axes), body, tag, dict(attrs or {})).output()
    bodies = tuple(as_expr(r) for r in result)
    if not bodies:
        raise ValueError(f"compute {name!r}: fcompute must return at least one expression")
    reduce_axes = _common_reduction(name, bodies)
    for body in bodies:
        _validate_body(name, body, axis, reduce_axes)
    op = ComputeOp(name, axis, tuple(reduce_axes), bodies[0], tag, dict(attrs or {}), bodies[1:])
    return tuple(op.output(k) for k in range(len(bodies)))  # type: ignore[return-value]


def _common_reduction(name: str, bodies: tuple[Expr, ...]) -> tuple[IterVar, ...]:
    """The reduction axes of a multi-output compute: none, or one tuple reduction's."""
    reduces = [b for b in bodies if isinstance(b, Reduce)]
    if not reduces:
        return ()
    first = reduces[0]
    same = all(
        isinstance(b, Reduce) and b.combiner is first.combiner and b.value_index == k
        for k, b in enumerate(bodies)
    )
    if not same or len(bodies) != first.combiner.arity:
        raise ValueError(
            f"compute {name!r}: the outputs of a multi-output reduction must be the components "
            "of one tuple reduction, in order (e.g. `argmax((A[i, k], k), axis=k)`)"
        )
    return first.axis


def _validate_body(name: str, body: Expr, axis: tuple[IterVar, ...], reduce_axes: tuple) -> None:
    nested = [n for n in pre_order(body) if isinstance(n, Reduce) and n is not body]
    if nested:
        raise ValueError(f"compute {name!r}: a reduction may only be the top-level expression")
    names = [iv.name for iv in (*axis, *reduce_axes)]
    for n in names:
        if names.count(n) > 1:
            raise ValueError(f"compute {name!r}: axis names must be unique, {n!r} is used twice")
    bound = {iv.var for iv in (*axis, *reduce_axes)}
    for v in free_vars(body):
        if v not in bound:
            raise ValueError(
                f"compute {name!r}: variable {v.name!r} is neither an axis of this compute nor "
                "one of its reduction axes (a reduce_axis must be used inside te.sum/max/...)"
            )
