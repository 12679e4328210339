"""Loop: a loop that runs at run time, its body a graph of its own.

The ONNX importer unrolls a Loop whose trip count and condition fold at import
(`frontend/onnx_loop.py`). One whose trip count or condition is computed at run time, or that
would unroll past the cap, becomes this node, unless it has scan outputs whose length would be
known only at run time: every loop-carried value keeps its shape, so the graph stays static.
Its attribute `body` is the body as a self-contained ONNX model (base64 of its bytes):

    inputs:  iteration (int64 scalar), condition (bool scalar), the carried values, then the
             outer values the body reads (`captured`)
    outputs: the condition for the next iteration, the carried values, then the scan values

The node's inputs are the trip count (`has_trips`), the first condition (`has_cond`), the
carried values' first values and the captured values; its outputs the carried values' last
values. `for i in range(M) while cond: carried = body(i, cond, carried, captured)`. A loop with
a constant trip count and no condition (none given, or true from the start and in every
iteration) may also have `scans` scan outputs: the body's further outputs, stacked along a new
axis 0 over the M iterations.

Here it runs on the reference executor (the body imported once and run by `run_graph` per
iteration); the CPU back-end compiles the body into a module of its own, launched as a kernel of
kind "loop" (`compiler/graph/compile.py`, `runtime/loop.py`). A loop without a trip count that
keeps running past `WHILE_LIMIT` iterations raises `LoopLimitError` rather than hang.
"""

from __future__ import annotations

import base64
import functools
from typing import Any

import numpy as np

from ....runtime.loop import WHILE_LIMIT, LoopLimitError, iterate
from ..ir import Graph, TensorType
from ..registry import REQUIRED, Pattern, register


def encode_body(model_bytes: bytes) -> str:
    return base64.b64encode(model_bytes).decode("ascii")


@functools.lru_cache(maxsize=16)
def body_graph(body: str) -> Graph:
    """The body's graph (imported from its ONNX bytes, once per body)."""
    from ...frontend import from_onnx

    return from_onnx(base64.b64decode(body))


def _scan_types(attrs: dict[str, Any], trips: np.ndarray | None) -> list[TensorType]:
    """The scan outputs' types: the body's scan values stacked over the constant trip count."""
    if not attrs["scans"]:
        return []
    if trips is None or attrs["has_cond"]:
        raise ValueError(
            "a Loop with scan outputs must have a constant trip count and no condition"
        )
    graph = body_graph(attrs["body"])
    length = int(np.asarray(trips).reshape(-1)[0])
    values = graph.model_outputs[1 + attrs["carried"] :]
    return [
        TensorType((max(length, 0), *graph.types[v].shape), graph.types[v].dtype) for v in values
    ]


def _loop_types(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    fixed = int(attrs["has_trips"]) + int(attrs["has_cond"])
    carried = types[fixed : fixed + attrs["carried"]]
    if len(carried) != attrs["carried"]:
        raise ValueError(f"Loop must have {attrs['carried']} carried values, not {len(carried)}")
    scans = _scan_types(attrs, consts[0] if attrs["has_trips"] else None)
    return [TensorType(t.shape, t.dtype) for t in carried] + scans


def run_loop(attrs: dict[str, Any], *arrays: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """numpy: the loop on the reference executor."""
    from ..reference import run_graph

    graph = body_graph(attrs["body"])
    names, outs = list(graph.inputs), list(graph.model_outputs)
    fixed = int(attrs["has_trips"]) + int(attrs["has_cond"])
    values = [a for a in arrays[:fixed] if a is not None]
    trips = values.pop(0) if attrs["has_trips"] else None
    cond = values.pop(0) if attrs["has_cond"] else None
    carried = list(arrays[fixed : fixed + attrs["carried"]])
    captured = list(arrays[fixed + attrs["carried"] :])
    scans = [np.empty(t.shape, t.dtype) for t in _scan_types(attrs, trips)]

    def step(i: int, c: np.ndarray, state: list[np.ndarray]) -> list[np.ndarray]:
        feeds = dict(zip(names, [np.array(i, np.int64), c, *state, *captured], strict=True))
        result = run_graph(graph, feeds)
        return [result[name] for name in outs]

    return (*iterate(step, trips, cond, carried, attrs["name"], scans), *scans)


register(
    "Loop",
    Pattern.OPAQUE,
    _loop_types,
    run_loop,
    attrs={"body": REQUIRED, "carried": REQUIRED, "has_trips": REQUIRED, "has_cond": REQUIRED,
           "scans": 0, "name": ""},
    inputs=(0, 1 << 16),
    outputs=(0, 1 << 16),
)  # fmt: skip

__all__ = ["WHILE_LIMIT", "LoopLimitError", "body_graph", "encode_body", "run_loop"]
