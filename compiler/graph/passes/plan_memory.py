"""Static memory planning: liveness over the (fused) execution order and buffer reuse in one
arena, plus the planned executor that runs a graph out of that arena."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, GraphError
from .fuse_ops import group_order

ALIGN = 64  # bytes; every buffer starts on a cache line


@dataclass(frozen=True, slots=True)
class Slot:
    """A tensor's bytes in the arena and the steps during which it is live (inclusive)."""

    value: str
    offset: int
    nbytes: int
    first: int
    last: int

    def overlaps(self, other: Slot) -> bool:
        live = self.first <= other.last and other.first <= self.last
        placed = (
            self.offset < other.offset + other.nbytes and other.offset < self.offset + self.nbytes
        )
        return live and placed and self.nbytes > 0 and other.nbytes > 0


@dataclass(frozen=True)
class MemoryPlan:
    """Where every non-constant tensor that crosses a step (group) boundary lives.

    `steps` are the node names of each step in execution order; `peak_bytes` is the arena size;
    `naive_bytes` the sum of the same tensors' sizes with no reuse."""

    steps: tuple[tuple[str, ...], ...]
    slots: tuple[Slot, ...]
    peak_bytes: int
    naive_bytes: int

    def slot(self, value: str) -> Slot:
        for slot in self.slots:
            if slot.value == value:
                return slot
        raise KeyError(f"memory plan has no slot for {value!r}")

    def problems(self, graph: Graph) -> list[str]:
        """Broken invariants: too-small slots, live tensors sharing bytes, arena overflow."""
        found = []
        for slot in self.slots:
            if slot.nbytes < graph.types[slot.value].nbytes:
                found.append(
                    f"slot of {slot.value!r} must hold {graph.types[slot.value].nbytes} bytes"
                )
            if slot.offset < 0 or slot.offset + slot.nbytes > self.peak_bytes:
                found.append(f"slot of {slot.value!r} must fit in the arena")
        for i, a in enumerate(self.slots):
            found += [
                f"live tensors {a.value!r} and {b.value!r} must not share bytes"
                for b in self.slots[i + 1 :]
                if a.overlaps(b)
            ]
        return found


def _lifetimes(graph: Graph, steps: list[list[str]]) -> dict[str, list[int]]:
    """value -> [first, last] step for values that need a buffer: graph inputs and outputs and
    values read by a later step; values read only inside their own step stay in the kernel."""
    step_of = {name: k for k, names in enumerate(steps) for name in names}
    made = {name: 0 for name in graph.inputs}
    made.update({o: step_of[n.name] for n in graph.nodes for o in n.outputs if o})
    spans = {name: [0, 0] for name in graph.inputs}
    for node in graph.nodes:
        k = step_of[node.name]
        for name in node.inputs:
            if name in made and (k != made[name] or name in graph.inputs):
                span = spans.setdefault(name, [made[name], made[name]])
                span[1] = max(span[1], k)
    for name in graph.outputs:
        if name in made:
            spans.setdefault(name, [made[name], made[name]])[1] = len(steps)
    for node in graph.nodes:  # a run-time Loop's kernel writes every output, read or not
        if node.op == "Loop":
            for name in node.outputs:
                spans.setdefault(name, [made[name], made[name]])
    return spans


def _place(sizes: dict[str, int], spans: dict[str, list[int]]) -> list[Slot]:
    """Greedy by size: each tensor at the lowest offset free for its whole lifetime."""
    placed: list[Slot] = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], spans[n][0], n)):
        first, last = spans[name]
        size = -(-sizes[name] // ALIGN) * ALIGN
        busy = sorted(
            (s.offset, s.offset + s.nbytes) for s in placed if s.first <= last and first <= s.last
        )
        offset = 0
        for start, end in busy:
            if offset + size <= start:
                break
            offset = max(offset, -(-end // ALIGN) * ALIGN)
        placed.append(Slot(name, offset, size, first, last))
    return sorted(placed, key=lambda s: (s.first, s.value))


def plan_memory(graph: Graph) -> Graph:
    """Annotate `graph.memory_plan`: every tensor crossing a step boundary (a fused group if
    `fuse_ops` ran, else a node) gets arena bytes; tensors whose lifetimes do not overlap reuse
    the same bytes.

    Before: `%a = Relu(%x); %b = Exp(%a); %c = Neg(%b)`  (3 buffers, naive sum)
    After:  `%c` reuses the bytes of `%a`, dead once `%b` is computed.
    """
    steps = [[n.name for n in nodes] for _, nodes in group_order(graph)]
    spans = _lifetimes(graph, steps)
    sizes = {name: graph.types[name].nbytes for name in spans if name not in graph.constants}
    slots = _place(sizes, {n: spans[n] for n in sizes})
    peak = max((s.offset + s.nbytes for s in slots), default=0)
    largest = max(sizes.values(), default=0)
    if peak < largest:  # sizes are exact ints, bounded by MAX_TENSOR_BYTES: cannot happen
        raise GraphError(f"memory plan arena ({peak} B) must hold its largest tensor ({largest} B)")
    naive = sum(-(-size // ALIGN) * ALIGN for size in sizes.values())
    plan = MemoryPlan(tuple(tuple(s) for s in steps), tuple(slots), peak, naive)
    return graph.replace(memory_plan=plan)


def run_planned(graph: Graph, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a planned graph: step by step, group boundary tensors live only in the arena."""
    from ..reference import run_node

    plan = graph.memory_plan
    if plan is None:
        raise GraphError(f"graph {graph.name!r} must have a memory plan (run plan_memory)")
    arena = np.zeros(plan.peak_bytes, np.uint8)
    slots = {s.value: s for s in plan.slots}

    def view(name: str) -> np.ndarray:
        ty, slot = graph.types[name], slots[name]
        return arena[slot.offset : slot.offset + ty.nbytes].view(ty.dtype).reshape(ty.shape)

    for name in graph.inputs:
        if name in slots:
            view(name)[...] = env[name]
    by_name = {n.name: n for n in graph.nodes}
    for step in plan.steps:
        local: dict[str, np.ndarray] = {}
        for node in (by_name[n] for n in step):
            reads = {
                i: local[i] if i in local else env[i] if i in graph.constants else view(i)
                for i in node.inputs
                if i
            }
            local.update(run_node(graph, node, reads))
        for name, value in local.items():
            if name in slots:
                view(name)[...] = value
    return {
        name: np.array(env[name] if name in graph.constants else view(name))
        for name in graph.outputs
    }
