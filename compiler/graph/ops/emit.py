"""`Emitter`: the small node-building vocabulary that composite ops' `expand` functions share
(Transpose, Reshape, ReduceSum, Slice, ... with fresh names under one node's name)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node


class Emitter:
    """Adds nodes for the expansion of `node` to `b`, each named after it."""

    def __init__(self, b: GraphBuilder, node: Node) -> None:
        self.b, self.node = b, node

    def shape(self, value: str) -> tuple[int, ...]:
        return self.b.types[value].shape

    def dtype(self, value: str) -> str:
        return self.b.types[value].dtype

    def add(self, op: str, inputs: Sequence[str], attrs: dict | None = None, **kw: Any) -> str:
        """`op(inputs)`'s first output; `outputs=[name]` gives it a name."""
        (out, *_) = self.b.add_node(
            op, list(inputs), attrs, name=f"{self.node.name}_{op.lower()}", **kw
        )
        return out

    def float32_input(self) -> tuple[str, Callable[..., None]]:
        """The node's first input, cast to float32 if it is float16, and `finish(op, inputs,
        attrs)`, which adds the last op, writing the node's output (cast back to float16): for
        expansions that square, exponentiate or sum, which onnxruntime computes in float32 for
        float16 (ReduceL2 of 1e4 is 1e4, not the square's inf)."""
        x, y = self.node.inputs[0], self.node.outputs[0]
        half = self.dtype(x) == "float16"

        def finish(op: str, inputs: Sequence[str], attrs: dict | None = None) -> None:
            if half:
                self.add("Cast", [self.add(op, inputs, attrs)], {"to": "float16"}, outputs=[y])
            else:
                self.add(op, inputs, attrs, outputs=[y])

        return (self.add("Cast", [x], {"to": "float32"}) if half else x), finish

    def const(self, value: Any, hint: str, dtype: str | None = None) -> str:
        name = self.b.fresh(f"{self.node.name}_{hint}")
        return self.b.add_constant(name, np.asarray(value, dtype))

    def ints(self, values: Sequence[int], hint: str) -> str:
        return self.const(np.asarray(values, np.int64), hint)

    def transpose(self, value: str, perm: Sequence[int]) -> str:
        if list(perm) == list(range(len(perm))):
            return value
        return self.add("Transpose", [value], {"perm": list(perm)})

    def reshape(self, value: str, shape: Sequence[int]) -> str:
        if list(self.shape(value)) == list(shape):
            return value
        return self.add("Reshape", [value, self.ints(shape, "shape")])

    def reduce_sum(self, value: str, axes: Sequence[int]) -> str:
        if not axes:
            return value
        return self.add("ReduceSum", [value, self.ints(axes, "axes")], {"keepdims": 0})

    def slice(self, value: str, axis: int, start: int, stop: int) -> str:
        """`value[..., start:stop, ...]` along `axis`."""
        if start == 0 and stop == self.shape(value)[axis]:
            return value
        starts, ends = self.ints([start], "starts"), self.ints([stop], "ends")
        return self.add("Slice", [value, starts, ends, self.ints([axis], "axes")])

    def take(self, value: str, axis: int, index: int) -> str:
        """`value` at `index` along `axis`, that axis dropped."""
        part = self.slice(value, axis, index, index + 1)
        shape = [d for i, d in enumerate(self.shape(part)) if i != axis]
        return self.reshape(part, shape)

    def unstack(self, value: str, axis: int) -> list[str]:
        """`value`'s slices along `axis`, that axis dropped: one Split (one kernel writing every
        slice), not a Slice per index, whose offset would make each a kernel of its own."""
        shape = self.shape(value)
        if shape[axis] == 1:
            return [self.take(value, axis, 0)]
        n = shape[axis]
        parts = self.b.add_node("Split", [value], {"axis": axis, "num_outputs": n},
                                name=f"{self.node.name}_split", num_outputs=n)  # fmt: skip
        rest = [d for i, d in enumerate(shape) if i != axis]
        return [self.reshape(part, rest) for part in parts]

    def stack(self, values: Sequence[str], axis: int, **kw: Any) -> str:
        """`values` (one shape) stacked along a new `axis`."""
        shape = list(self.shape(values[0]))
        one = [*shape[:axis], 1, *shape[axis:]]
        parts = [self.reshape(v, one) for v in values]
        if len(parts) == 1 and not kw:
            return parts[0]
        return self.add("Concat", parts, {"axis": axis}, **kw)

    def rename(self, value: str, name: str) -> None:
        """Make `name` (one of the node's outputs) hold `value`."""
        self.add("Identity", [value], outputs=[name])


__all__ = ["Emitter"]
