"""Operator fusion by pattern kind, following TVM's FuseOps (post-dominator based).

Rules (phase 0 then phase 1, nodes in topological order):
- an out_elemwise_fusable op (Conv, Gemm, MatMul, pooling) fuses with its post-dominator when
  every path to it passes only elementwise/broadcast ops (conv + bias + relu + residual add);
- an elementwise/broadcast op fuses with its post-dominator when the paths are injective and
  the post-dominator is injective, a reduction, or a group anchored by an out-fusable op;
- an injective op (phase 1) fuses with its post-dominator when every group on the way, the
  post-dominator's included, is at most injective (so not into a reduction's group);
- reductions and opaque ops start groups but never fuse into later ones;
- a group holds at most `MAX_FUSE_NODES` nodes (TVM's max_fuse_depth): a kernel's expression
  nests about one level per fused op, and a chain of 400 element-wise ops nested past the
  recursion of the expression visitors and the 256 bracket levels of clang and NVRTC;
- a group's inlined expressions stay within `MAX_EXPR_NODES` counted as trees: an op that reads
  its operand n times (the erf polynomial reads it 21 times) copies the operand's expression n
  times into every visitor's walk, so a chain of such ops grows as n^depth (three Erfs: 20 s to
  compile, ten: never). Each op's growth comes from its lowering rule
  (`lower_te.expression_growth`); the group ends where the next op would pass the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..ir import Graph, GraphError, Node
from ..registry import Pattern, get_op

if TYPE_CHECKING:
    from ..lower_te import Growth


@dataclass(frozen=True, slots=True)
class FusedGroup:
    """Nodes (by name, in graph order) that run as one kernel; pattern is the strongest kind."""

    name: str
    nodes: tuple[str, ...]
    pattern: Pattern


MAX_FUSE_NODES = 64
# Tree nodes of any value's inlined expression in a group: a Conv + bias + Gelu epilogue is ~300,
# one Erf after another 3,300 (1 s to compile), three 68,000 (20 s).
MAX_EXPR_NODES = 2048


class _Group:
    __slots__ = ("members", "parent", "pattern", "size")

    def __init__(self, pattern: Pattern, index: int) -> None:
        self.parent: _Group | None = None
        self.pattern = pattern
        self.size = 1  # nodes in the group (kept at its root)
        self.members = [index]  # node indices in the group (kept at its root)

    def root(self) -> _Group:
        group = self
        while group.parent is not None:
            group = group.parent
        return group


@dataclass
class _DomNode:
    parent: int | None
    depth: int
    pattern: Pattern


class _Partitioner:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes = graph.nodes
        self.index = {n.name: i for i, n in enumerate(graph.nodes)}
        self.patterns = [get_op(n.op).pattern for n in graph.nodes]
        self.edges = self._edges()
        self.groups = [_Group(p, i) for i, p in enumerate(self.patterns)]
        self.dom = self._post_dominators()
        self.producer = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs if o}
        self.growth: dict[int, Growth | None] = {}  # node index -> its growth, when first needed

    def _edges(self) -> list[list[tuple[int, Pattern]]]:
        """For each node, (consumer index, edge pattern) in consumer order."""
        producer = {o: i for i, n in enumerate(self.nodes) for o in n.outputs if o}
        edges: list[list[tuple[int, Pattern]]] = [[] for _ in self.nodes]
        for j, node in enumerate(self.nodes):
            for name in dict.fromkeys(node.inputs):
                if name in producer:
                    edges[producer[name]].append((j, self._edge_pattern(node, name)))
        return edges

    def _edge_pattern(self, consumer: Node, value: str) -> Pattern:
        pattern = get_op(consumer.op).pattern
        out = self.graph.types[consumer.outputs[0]]
        if pattern == Pattern.BROADCAST and self.graph.types[value].shape == out.shape:
            return Pattern.ELEMWISE  # reading a full-shape operand is elementwise
        return pattern

    def _post_dominators(self) -> list[_DomNode]:
        outputs = set(self.graph.outputs)
        dom: list[_DomNode | None] = [None] * len(self.nodes)
        for i in reversed(range(len(self.nodes))):
            if any(o in outputs for o in self.nodes[i].outputs) or not self.edges[i]:
                dom[i] = _DomNode(None, 1, Pattern.OPAQUE)
                continue
            pattern = Pattern.ELEMWISE
            parent: int | None = self.edges[i][0][0]
            for consumer, edge in self.edges[i]:
                parent, pattern = self._lca(parent, consumer, pattern, dom)
                pattern = max(pattern, edge)
            depth = dom[parent].depth + 1 if parent is not None else 1
            dom[i] = _DomNode(parent, depth, pattern)
        return dom  # type: ignore[return-value]

    @staticmethod
    def _lca(a: int | None, b: int | None, pattern: Pattern, dom: list) -> tuple:
        while a != b:
            if a is None or b is None:
                return None, pattern
            if dom[a].depth < dom[b].depth:
                pattern, b = max(pattern, dom[b].pattern), dom[b].parent
            elif dom[b].depth < dom[a].depth:
                pattern, a = max(pattern, dom[a].pattern), dom[a].parent
            else:
                pattern = max(pattern, dom[a].pattern, dom[b].pattern)
                a, b = dom[a].parent, dom[b].parent
        return a, pattern

    def _check_path(self, src: int, sink: int, fcond) -> bool:
        visited: set[int] = set()

        def visit(i: int) -> bool:
            if i in visited:
                return True
            visited.add(i)
            if not fcond(self.groups[i].root().pattern, i == sink):
                return False
            return i == sink or all(visit(c) for c, _ in self.edges[i])

        return all(visit(c) for c, _ in self.edges[src])

    def _fits(self, src: int, sink: int) -> bool:
        """Whether the group `_commit(src, sink)` would make has at most `MAX_FUSE_NODES`."""
        roots = {id(self.groups[sink].root()): self.groups[sink].root()}
        visited: set[int] = set()

        def visit(i: int) -> None:
            if i == sink or i in visited:
                return
            visited.add(i)
            roots.setdefault(id(self.groups[i].root()), self.groups[i].root())
            for c, _ in self.edges[i]:
                visit(c)

        visit(src)
        if sum(g.size for g in roots.values()) > MAX_FUSE_NODES:
            return False
        return self._expr_nodes(sorted(i for g in roots.values() for i in g.members))

    def _expr_nodes(self, members: list[int]) -> bool:
        """Whether every value of a group of `members` (in topological order) has an inlined
        expression of at most `MAX_EXPR_NODES` tree nodes."""
        sizes: dict[int, int] = {}
        for i in members:
            if i not in self.growth:
                self.growth[i] = expression_growth(self.graph, self.nodes[i])
            growth = self.growth[i]
            if growth is None:  # an anchor (a real compute) or an op the lowering refuses
                sizes[i] = 1
                continue
            inputs = [sizes.get(self.producer.get(v, -1), 1) for v in self.nodes[i].inputs]
            sizes[i] = growth.size(inputs)
            if sizes[i] > MAX_EXPR_NODES:
                return False
        return True

    def _commit(self, src: int, sink: int) -> None:
        target, visited = self.groups[sink], set()

        def visit(i: int) -> None:
            if i == sink or i in visited:
                return
            visited.add(i)
            self._merge(self.groups[i], target)
            for c, _ in self.edges[i]:
                visit(c)

        visit(src)

    @staticmethod
    def _merge(child: _Group, parent: _Group) -> None:
        child, parent = child.root(), parent.root()
        if child is not parent:
            child.parent = parent
            parent.pattern = max(child.pattern, parent.pattern)
            parent.size += child.size
            parent.members += child.members

    def run(self) -> None:
        for phase in (0, 1):
            for i in range(len(self.nodes)):
                self._try_fuse(i, phase)

    def _try_fuse(self, i: int, phase: int) -> None:
        group, dom = self.groups[i], self.dom[i]
        if group.pattern == Pattern.OPAQUE or dom.parent is None:
            return
        if group.root() is self.groups[dom.parent].root():
            return
        if group.pattern == Pattern.OUT_ELEMWISE_FUSABLE:
            if phase == 0 and dom.pattern == Pattern.ELEMWISE:
                if self._check_path(
                    i, dom.parent, lambda k, sink: k <= Pattern.BROADCAST
                ) and self._fits(i, dom.parent):
                    self._commit(i, dom.parent)
        elif group.pattern <= Pattern.BROADCAST:
            if dom.pattern <= Pattern.INJECTIVE or dom.pattern == Pattern.COMM_REDUCE:
                if self._check_path(i, dom.parent, _broadcast_path) and self._fits(i, dom.parent):
                    self._commit(i, dom.parent)
        elif group.pattern == Pattern.INJECTIVE and phase == 1:
            if self._check_path(
                i, dom.parent, lambda k, sink: k <= Pattern.INJECTIVE
            ) and self._fits(i, dom.parent):
                self._commit(i, dom.parent)

    def result(self) -> tuple[FusedGroup, ...]:
        members: dict[int, list[int]] = {}
        roots: dict[int, _Group] = {}
        for i, group in enumerate(self.groups):
            root = group.root()
            members.setdefault(id(root), []).append(i)
            roots[id(root)] = root
        groups = []
        for k, (key, idx) in enumerate(members.items()):
            ops = "_".join(self.nodes[i].op.lower() for i in idx)
            names = tuple(self.nodes[i].name for i in idx)
            groups.append(FusedGroup(f"fused_{k}_{ops}", names, roots[key].pattern))
        return tuple(groups)


def expression_growth(graph: Graph, node: Node) -> Growth | None:
    # the lowering's rules say how each op's expression grows; imported here, as the lowering
    # imports this module (its `FusedGroup`)
    from ..lower_te import expression_growth as growth

    return growth(graph, node)


def _broadcast_path(kind: Pattern, is_sink: bool) -> bool:
    if not is_sink:
        return kind <= Pattern.INJECTIVE
    return kind <= Pattern.COMM_REDUCE or kind == Pattern.OUT_ELEMWISE_FUSABLE


def fuse_ops(graph: Graph) -> Graph:
    """Partition the nodes into fused groups (annotation `graph.groups`); nodes are unchanged.

    Before: `%c = Conv(%x, %w); %b = Add(%c, %bias); %r = Relu(%b); %s = Softmax(%r)`
    After:  groups `[Conv, Add, Relu]` (out_elemwise_fusable) and `[Softmax]` (opaque).
    """
    partitioner = _Partitioner(graph)
    partitioner.run()
    return graph.replace(groups=partitioner.result())


def group_order(graph: Graph) -> list[tuple[FusedGroup, list[Node]]]:
    """The groups of a fused graph in an order that respects their data dependencies."""
    if graph.groups is None:
        return [(FusedGroup(n.name, (n.name,), get_op(n.op).pattern), [n]) for n in graph.nodes]
    owner = {name: k for k, g in enumerate(graph.groups) for name in g.nodes}
    producer = {o: owner[n.name] for n in graph.nodes for o in n.outputs if o}
    deps: list[set[int]] = [set() for _ in graph.groups]
    for node in graph.nodes:
        k = owner[node.name]
        deps[k].update(producer[i] for i in node.inputs if i in producer and producer[i] != k)
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(graph.groups):
        ready = [k for k in range(len(graph.groups)) if k not in done and deps[k] <= done]
        if not ready:
            raise GraphError(f"fused groups of graph {graph.name!r} must form no cycle")
        order.append(ready[0])
        done.add(ready[0])
    by_name = {n.name: n for n in graph.nodes}
    return [(graph.groups[k], [by_name[n] for n in graph.groups[k].nodes]) for k in order]
