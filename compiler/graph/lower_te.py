"""Fused graph groups -> tensor expressions + schedules: one kernel per group (TVM's lowering).

Inside a group every value is a `Lazy`: a function from an output index to a scalar expression.
Elementwise, broadcast and injective ops compose as lazies, so they are inlined into whatever
reads them. The group's anchor (Conv, Gemm, MatMul, pooling, a reduction, Softmax,
LayerNormalization) becomes a real compute, from `compiler.topi.x86` where an operator exists
(its fused elementwise tail becomes the topi epilogue, computed at the anchor's output tile) or
from `compiler.graph.strategy` (conv.py, matmul.py, reduce.py, norm.py) otherwise. Ops without
a lowering raise `LoweringError` naming the op and node.

Example:
    >>> from tensorforge.compiler.frontend import from_onnx
    >>> from tensorforge.compiler.frontend.onnx_builders import mlp
    >>> from tensorforge.compiler.graph.passes import optimize
    >>> graph = optimize(from_onnx(mlp()))
    >>> lowered = [lower_group(graph, g) for g in graph.groups]
    >>> lowered[0].params[0], lowered[0].outputs
    ('x', ('relu_4',))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...runtime import ndarray as nd
from ...runtime.dtypes import storage_dtype
from .. import te
from ..schedule.schedule import Schedule
from ..te.tensor import Tensor
from ..te.visitor import children
from ..tir.stmt import LoweringError
from .ir import Graph, Node
from .passes.fuse_ops import FusedGroup
from .registry import Pattern

Index = tuple[Any, ...]


@dataclass
class Lazy:
    """A value inside a group: shape, dtype and `fn(index) -> expression`; `tensor` is set when
    the value is exactly a te tensor read at the same index (a kernel parameter or a compute)."""

    shape: tuple[int, ...]
    dtype: str
    fn: Callable[[Index], Any]
    tensor: Tensor | None = None

    def __call__(self, idx: Index) -> Any:
        return self.fn(tuple(idx))


def tensor_lazy(t: Tensor) -> Lazy:
    return Lazy(tuple(t.shape), t.dtype, lambda idx: t[idx], t)


@dataclass
class Kernel:
    """What one group lowers to: the schedule, its tensors in parameter order and, for each
    parameter, the graph value (or new constant) it binds to."""

    name: str
    schedule: Schedule
    args: list[Tensor]
    params: tuple[str, ...]  # values read (graph values, new constants); the outputs follow
    outputs: tuple[str, ...]
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # new constants (packed)
    nodes: tuple[str, ...] = ()

    @property
    def bindings(self) -> tuple[str, ...]:
        """Graph value names in kernel parameter order: inputs then outputs."""
        return self.params + self.outputs


class GroupContext:
    """The state of lowering one group: kernel parameters, lazies and tensors to inline."""

    def __init__(self, graph: Graph, group: FusedGroup, target: str = "llvm") -> None:
        self.graph, self.group, self.target = graph, group, target
        self.lazies: dict[str, Lazy] = {}
        self.params: dict[str, Tensor] = {}  # graph value -> placeholder
        self.inline: list[Tensor] = []
        self.constants: dict[str, np.ndarray] = {}

    @property
    def gpu(self) -> bool:
        """Whether the group is lowered for a GPU target (its anchors then build GPU computes
        and schedules, `compiler.topi.gpu`)."""
        return self.target.split()[0] in ("cuda", "opencl")

    def type_of(self, value: str) -> Any:
        return self.graph.types[value]

    def constant(self, value: str) -> np.ndarray | None:
        return self.graph.constants.get(value)

    def get(self, value: str) -> Lazy:
        """The lazy of `value`: computed in this group, a scalar constant, or a parameter."""
        if value in self.lazies:
            return self.lazies[value]
        ty, const = self.type_of(value), self.constant(value)
        if const is not None and const.size == 1:
            dtype = storage_dtype(ty.dtype)  # a narrow type's bits (runtime/dtypes.py)
            scalar = te.const(const.reshape(()).view(dtype).item(), dtype)
            return Lazy(ty.shape, dtype, lambda idx: scalar)
        bound = self.params.get(value)
        if bound is not None and tuple(bound.shape) != (tuple(ty.shape) or (1,)):
            # already a parameter viewed with another shape (an anchor's operand as a GEMM's
            # 2-D matrix, read again by the tail at its own shape): read those same bytes
            return reshape_lazy(tensor_lazy(bound), ty.shape)
        t = self.param(value)
        if not ty.shape:  # a 0-d value is passed as one element
            return Lazy((), t.dtype, lambda idx: t[0])
        return tensor_lazy(t)

    def param(self, value: str, shape: Sequence[int] | None = None) -> Tensor:
        """The placeholder of graph value `value` (its bytes viewed with `shape` if given)."""
        ty = self.type_of(value)
        shape = tuple(shape or ty.shape) or (1,)  # a 0-d value is passed as one element
        if value in self.params:
            if tuple(self.params[value].shape) == shape:
                return self.params[value]
            raise LoweringError(f"value {value!r} must be read with one shape per kernel")
        if ty.size == 0:
            self._refuse_empty(value)
        t = te.placeholder(shape, storage_dtype(ty.dtype), name=f"p{len(self.params)}")
        self.params[value] = t
        return t

    def _refuse_empty(self, value: str) -> None:
        """Zero-size values are constants that `fold_constants` folds away wherever they decide
        a node's whole result; one read as data here feeds a node that depends on other data
        too (e.g. a MatMul over a zero length)."""
        by_name = {n.name: n for n in self.graph.nodes}
        node = next(by_name[n] for n in self.group.nodes if value in by_name[n].inputs)
        raise LoweringError(
            f"input {value!r} of node {node.name!r} ({node.op}) must have elements to be "
            f"lowered, not shape {list(self.type_of(value).shape)}"
        )

    def add_constant(self, name: str, array: np.ndarray) -> Tensor:
        """A new constant (e.g. pre-packed weights) passed as a kernel parameter; kept
        64-byte aligned (`ndarray.aligned`), as the module's executor binds it in place."""
        self.constants[name] = array = nd.aligned(np.asarray(array))
        dtype = storage_dtype(str(array.dtype))
        t = te.placeholder(array.shape, dtype, name=f"p{len(self.params)}")
        self.params[name] = t
        return t

    def as_tensor(self, value: str, shape: Sequence[int] | None = None) -> Tensor:
        """`value` as a te tensor (of `shape`, a reshape): a parameter when it comes from outside
        the group, else a compute that the schedule inlines."""
        shape = tuple(shape or self.type_of(value).shape)
        const = self.constant(value)
        external = value not in self.lazies and (const is None or const.size > 1)
        if external and (value not in self.params or tuple(self.params[value].shape) == shape):
            return self.param(value, shape)
        lazy = self.get(value)
        if lazy.tensor is not None and tuple(lazy.tensor.shape) == shape:
            return lazy.tensor
        src = reshape_lazy(lazy, shape) if shape != lazy.shape else lazy
        t = te.compute(shape, lambda *i: src(i), name=f"in{len(self.inline)}")
        self.inline.append(t)
        return t


def reshape_lazy(src: Lazy, shape: tuple[int, ...]) -> Lazy:
    """Row-major reshape. The dimensions split into runs that end where both shapes' prefix
    products agree; each run's output index is flattened and unravelled in the source's dims of
    the same run alone, so dims a reshape keeps pass through untouched. (A whole-tensor flat
    position, then divided back, left `(x + 28*y)//784`-style terms that the simplifier cannot
    cancel: ShuffleNet's channel shuffle ran 10x slower than a copy.)"""
    if int(np.prod(shape)) != int(np.prod(src.shape)):
        raise LoweringError(f"reshape must keep the size, not {src.shape} -> {shape}")
    runs = _reshape_runs(src.shape, shape)

    def fn(idx: Index) -> Any:
        out: list[Any] = []
        for (s0, s1), (o0, o1) in runs:
            out.extend(unravel(ravel(idx[o0:o1], shape[o0:o1]), src.shape[s0:s1]))
        return src(tuple(out))

    return Lazy(shape, src.dtype, fn)


def _reshape_runs(
    src: tuple[int, ...], out: tuple[int, ...]
) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """((src dims), (out dims)) ranges of equal size: cut wherever both prefix products agree
    (one run when the tensor is empty)."""
    if not int(np.prod(src)):
        return [((0, len(src)), (0, len(out)))]
    cut_src = {int(np.prod(src[:i])): i for i in range(len(src) + 1)}
    cut_out = {int(np.prod(out[:i])): i for i in range(len(out) + 1)}
    common = sorted(set(cut_src) & set(cut_out))
    bounds = [(0, 0)] + [(cut_src[p], cut_out[p]) for p in common]
    return [((a[0], b[0]), (a[1], b[1])) for a, b in zip(bounds, bounds[1:], strict=False)]


def ravel(idx: Index, shape: tuple[int, ...]) -> Any:
    """The row-major flat position of `idx` in `shape` (size-1 dims add nothing)."""
    flat: Any = None
    stride = 1
    for i, d in reversed(list(zip(idx, shape, strict=True))):
        if d != 1:
            term = i * stride if stride > 1 else i
            flat = term if flat is None else term + flat
        stride *= d
    return 0 if flat is None else flat


unravel = te.unravel  # the row-major index of a flat position, for the strategies


# ---- the group driver ---------------------------------------------------------------------------

Rule = Callable[[GroupContext, Node], list[Lazy]]
AnchorRule = Callable[[GroupContext, Node, "Tail"], tuple[Schedule, list[Tensor]]]


@dataclass
class Tail:
    """The elementwise nodes after an anchor: `epilogue(value, index)` evaluates the group's
    output at `index` given the anchor's value there. `outputs` lists every value the group
    produces: `(output,)`, or several outputs of a multi-output anchor with no tail (its rule
    returns one tensor per entry)."""

    ctx: GroupContext
    anchor: Node
    nodes: list[Node]
    output: str
    outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.outputs = tuple(self.outputs) or (self.output,)

    def epilogue(self, value: Any, idx: Index) -> Any:
        if not self.nodes:
            return value
        shape = self.ctx.type_of(self.anchor.outputs[0]).shape
        ctx = self.ctx
        ctx.lazies[self.anchor.outputs[0]] = Lazy(shape, value.dtype, lambda _i: value)
        for node in self.nodes:
            run_rule(ctx, node)
        return ctx.lazies[self.output](idx)


def _rules() -> tuple[dict[str, Rule], dict[str, AnchorRule]]:
    from .strategy import ANCHORS, ELEMENTWISE

    return ELEMENTWISE, ANCHORS


def run_rule(ctx: GroupContext, node: Node) -> None:
    lazy_rules, _ = _rules()
    rule = lazy_rules.get(node.op)
    if rule is None:
        raise LoweringError(
            f"op {node.op} (node {node.name!r}) has no CPU lowering yet (group {ctx.group.name!r})"
        )
    for name, lazy in zip(node.outputs, rule(ctx, node), strict=False):
        if name:
            ctx.lazies[name] = lazy


def tree_size(expr: Any) -> int:
    """The nodes of `expr` counted as a tree (a shared subexpression once per use): what the
    expression visitors walk. One pass over the DAG, memoized by node identity."""
    return _tree_counts(expr, ())[0]


def _tree_counts(expr: Any, leaves: Sequence[Any]) -> tuple[int, list[int]]:
    """`expr`'s tree size and how many times each of `leaves` (by identity) occurs in it."""
    slot = {id(v): k for k, v in enumerate(leaves)}
    done: dict[int, tuple[int, list[int]]] = {}
    stack = [expr]
    while stack:
        node = stack[-1]
        kids = children(node)
        todo = [k for k in kids if id(k) not in done]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        size, uses = 1, [0] * len(leaves)
        if id(node) in slot:
            uses[slot[id(node)]] = 1
        for kid in kids:
            size += done[id(kid)][0]
            uses = [a + b for a, b in zip(uses, done[id(kid)][1], strict=True)]
        done[id(node)] = (size, uses)
    return done[id(expr)]


@dataclass(frozen=True)
class Growth:
    """How a node's inlined expression grows: `own` nodes of its own, plus `reads[k]` copies of
    input k's expression (0 for a constant or absent input)."""

    own: int
    reads: tuple[int, ...]

    def size(self, inputs: Sequence[int]) -> int:
        """The tree size of the node's value given each input's tree size."""
        return self.own + sum(r * n for r, n in zip(self.reads, inputs, strict=True))


def expression_growth(graph: Graph, node: Node) -> Growth | None:
    """`node`'s `Growth`, from its lowering rule applied to one symbolic leaf per input (the
    largest over its outputs); None for an anchor or an op whose rule refuses it."""
    rule = _rules()[0].get(node.op)
    if rule is None:
        return None
    ctx = GroupContext(graph, FusedGroup(node.name, (node.name,), Pattern.ELEMWISE))
    leaves: dict[str, Any] = {}
    for k, name in enumerate(node.inputs):
        if name and name not in graph.constants and name not in leaves:
            ty = graph.types[name]
            leaves[name] = leaf = te.var(f"leaf{k}", storage_dtype(ty.dtype))
            ctx.lazies[name] = Lazy(ty.shape, leaf.dtype, lambda _idx, v=leaf: v)
    try:
        lazies = rule(ctx, node)
        exprs = [lz(tuple(te.var(f"i{d}") for d in range(len(lz.shape)))) for lz in lazies]
    except Exception:  # noqa: BLE001 (the lowering reports it with the group; fuse as before)
        return None
    own, reads = 0, [0] * len(node.inputs)
    for expr in exprs:
        size, uses = _tree_counts(expr, list(leaves.values()))
        own = max(own, size - sum(uses))
        for k, name in enumerate(node.inputs):
            if name in leaves:
                reads[k] = max(reads[k], uses[list(leaves).index(name)])
    return Growth(own, tuple(reads))


def group_outputs(graph: Graph, nodes: Sequence[Node]) -> tuple[str, ...]:
    """Values computed in the group that later groups or the graph's outputs read."""
    inside = {n.name for n in nodes}
    outputs = set(graph.outputs)
    return tuple(
        o
        for n in nodes
        for o in n.outputs
        if o and (o in outputs or not graph.readers(o) <= inside)
    )


def lower_group(
    graph: Graph, group: FusedGroup, name: str | None = None, target: str = "llvm"
) -> Kernel:
    """Lower one fused group of `graph` to a kernel (schedule + parameter bindings).

    For a GPU `target` ("cuda ...", "opencl ...") anchors with a GPU template (dense, matmul)
    return a GPU schedule and convolutions use the plain NCHW compute; the others return their
    CPU schedule, which `compile_gpu` replaces with `topi.gpu.schedule_auto`.

    Raises:
        LoweringError: for an op without a CPU lowering (naming op and node) or a group shape
            the lowering does not handle.
    """
    nodes = [graph.node(n) for n in group.nodes]
    outputs = group_outputs(graph, nodes)
    for value in outputs:
        if graph.types[value].size == 0:
            raise LoweringError(
                f"group {group.name!r}: value {value!r} has no elements (shape "
                f"{list(graph.types[value].shape)}); zero-size tensors have no native lowering yet"
            )
    ctx = GroupContext(graph, group, str(target))
    _, anchors = _rules()
    anchor_at = next((k for k, n in enumerate(nodes) if n.op in anchors), None)
    if anchor_at is None:
        sched, out_tensors = _lower_injective(ctx, nodes, outputs)
    else:
        sched, out_tensors = _lower_anchored(ctx, nodes, anchor_at, outputs)
    staged = {id(stage.op) for stage in sched.stages}
    # a view built but never read is no operation of the schedule: a 1-D convolution's weights
    # of one element (a constant folded into a compute) as they lie, beside their 2-D view
    for t in ctx.inline:
        if id(t.op) in staged:
            sched[t].compute_inline()
    # a parameter the computes never read (Gather's indices along an axis of size 1, where
    # every index is 0) is left out: it is no operation of the schedule
    params = tuple(p for p, t in ctx.params.items() if id(t.op) in staged)
    args = [ctx.params[p] for p in params] + out_tensors
    return Kernel(name or group.name, sched, args, params, outputs, ctx.constants, group.nodes)


def _lower_injective(
    ctx: GroupContext, nodes: list[Node], outputs: tuple[str, ...]
) -> tuple[Schedule, list[Tensor]]:
    for node in nodes:
        run_rule(ctx, node)
    outs = []
    for k, value in enumerate(outputs):
        lazy = ctx.lazies[value]
        if lazy.dtype != storage_dtype(ctx.type_of(value).dtype):
            raise LoweringError(f"value {value!r} lowered to {lazy.dtype}, not its graph dtype")
        outs.append(te.compute(lazy.shape or (1,), _indexer(lazy), name=f"out{k}"))
    sched = te.create_schedule([t.op for t in outs])
    for t in outs:
        schedule_rows(sched, t, fuse_short=True, rows_to=_concat_axis(ctx, nodes, t.shape))
    return sched, outs


def _concat_axis(ctx: GroupContext, nodes: list[Node], shape: tuple) -> int | None:
    """The axis of a Concat in `nodes` whose result has the kernel's output `shape`, in the
    blocked layout (5-D) and not its last axis (`schedule_rows` then ends its row loop there;
    an NCHW Concat's short rows are better fused, its choice of input linear either way)."""
    for node in nodes:
        if node.op != "Concat":
            continue
        out = ctx.type_of(node.outputs[0]).shape
        if tuple(out) == tuple(int(d) for d in shape):
            axis = int(node.attr("axis")) % len(out)
            return axis if len(out) == 5 and axis < len(out) - 1 else None
    return None


def _indexer(lazy: Lazy) -> Callable[..., Any]:
    if not lazy.shape:
        return lambda *i: lazy(())
    return lambda *i: lazy(i)


def _lower_anchored(
    ctx: GroupContext, nodes: list[Node], at: int, outputs: tuple[str, ...]
) -> tuple[Schedule, list[Tensor]]:
    anchor = nodes[at]
    # the nodes after the anchor in graph order that do not read it (a bias computed from other
    # inputs, `MatMul(x, w) + (a + b)`) are operands of the tail, computed inline like the
    # nodes before it; the tail is what depends on the anchor
    downstream, tail_nodes, before = set(anchor.outputs), [], list(nodes[:at])
    for node in nodes[at + 1 :]:
        if any(i in downstream for i in node.inputs):
            tail_nodes.append(node)
            downstream.update(o for o in node.outputs if o)
        else:
            before.append(node)
    for node in before:
        run_rule(ctx, node)
    several = not tail_nodes and set(outputs) <= set(anchor.outputs)
    if len(outputs) != 1 and not several:
        raise LoweringError(
            f"group {ctx.group.name!r} must have one output to lower with anchor "
            f"{anchor.op} (node {anchor.name!r}), not {len(outputs)}: {list(outputs)}"
        )
    shape = ctx.type_of(anchor.outputs[0]).shape
    _, anchors = _rules()
    for node in tail_nodes:
        if node.op in anchors:
            raise LoweringError(
                f"group {ctx.group.name!r} must have one anchor, not {anchor.op} (node "
                f"{anchor.name!r}) and {node.op} (node {node.name!r})"
            )
        for value in node.outputs:
            if value and ctx.type_of(value).shape != shape:
                raise LoweringError(
                    f"node {node.name!r} ({node.op}) after anchor {anchor.name!r} must keep the "
                    f"anchor's shape {list(shape)}, not {list(ctx.type_of(value).shape)}"
                )
    tail = Tail(ctx, anchor, tail_nodes, outputs[0], outputs)
    sched, tensors = anchors[anchor.op](ctx, anchor, tail)
    if len(tensors) != len(outputs):
        raise LoweringError(
            f"anchor {anchor.op} (node {anchor.name!r}) must compute the group's outputs "
            f"{list(outputs)}, not {len(tensors)} tensor(s)"
        )
    return sched, tensors


def schedule_rows(
    s: Schedule,
    out: Tensor,
    lanes: int = 16,
    min_parallel: int = 2048,
    fuse_short: bool = False,
    rows_to: int | None = None,
) -> Any:
    """Outer axes fused and run in parallel (when big enough), the last axis in vector lanes;
    returns the fused outer loop (or None for a 1-D tensor). `fuse_short` (element-wise and
    injective kernels): while the last axis is shorter than 4 vectors, the one before it joins
    it, so that a 55-wide image row is not 3 vectors and a 7-lane tail per row (a Concat of
    55x55 images: 1.5x faster), but for the channel block of the blocked layout (a 5-D
    result's last axis, whole vectors): fused with the columns, a per-channel operand's index
    became a modulo, gathered lane by lane (a Concat with a batch norm 4x slower). `rows_to`
    (a Concat's axis): the row loop ends at that axis and the later ones stay loops inside it,
    so the Concat's choice of input is linear in the row loop and `loop_partition` gives each
    input its own loop (a blocked Concat of 24 inputs otherwise chose among them per vector)."""
    axes = list(out.op.axis)
    shape = [int(d) for d in out.shape]
    if fuse_short and not out.op.reduce_axis:
        whole = len(shape) == 5 and shape[-1] % lanes == 0
        while len(axes) > 2 and shape[-1] < 4 * lanes and not whole:
            axes[-2:] = [s[out].fuse(axes[-2], axes[-1])]
            shape[-2:] = [shape[-2] * shape[-1]]
    size = int(np.prod(out.shape))
    row = None
    if rows_to is not None and len(axes) > rows_to + 1:
        row = s[out].fuse(*axes[: rows_to + 1]) if rows_to > 0 else axes[0]
        if size >= min_parallel:
            s[out].parallel(row)
    elif len(axes) > 1:
        row = s[out].fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
        if size >= min_parallel:
            s[out].parallel(row)
    last = axes[-1]
    extent = shape[-1]
    if out.op.reduce_axis:
        return row
    if extent > lanes:
        _, inner = s[out].split(last, factor=lanes)
        s[out].vectorize(inner)
    elif extent > 1:
        s[out].vectorize(last)
    return row
