"""Run a quantized, partitioned graph with its offloaded layers on an accelerator device backend.

The graph comes from ``quantize_graph`` and ``partition_graph``: every int8 conv/dense whose
``target`` attribute is "vta" is compiled once (per input shape) by the accelerator code
generator (``compiler.topi.vta``) into a program image and run on a device backend (``sim``,
``cyclesim``, later ``rtl``/``pynq``); every other node runs on the graph's numpy reference
kernels. It is the reference path of the accelerator flow: ``tensorforge.compile`` for a VTA
target will package the same kernels, with native CPU kernels for the rest, into a Module.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> OffloadRunner.__name__                                   # see tensorforge/demo.py
    'OffloadRunner'
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ...hw.config import HWConfig
from .ir import Graph, Node
from .passes.partition import is_offloaded
from .reference import run_node

#: the int8 ops the accelerator code generator compiles today
COMPILED_OPS = ("tf.qconv2d", "tf.qdense")


class OffloadMismatchError(AssertionError):
    """An offloaded layer's device output differs from its int8 reference kernel."""


@dataclass
class LayerStats:
    """What one layer did in one run: where it ran, the device's counters, its cycles."""

    name: str
    op: str
    runs_on: str  # "vta" or "cpu"
    counters: dict[str, int] = field(default_factory=dict)
    cycles: int | None = None
    wall_s: float = 0.0
    waiting_for_kernel: bool = False  # placed on the accelerator, no kernel for it yet


class OffloadRunner:
    """Executes a partitioned int8 graph, offloaded layers on a VTA device backend.

    Args:
        graph: the output of ``partition_graph(quantize_graph(...), cfg)``.
        cfg: the accelerator's HWConfig (the one the graph was partitioned for).
        backend: a device backend name (``sim``, ``cyclesim``).
        vthreads: virtual threads for the compiled kernels (1 or 2).
        check: also run each offloaded layer's int8 reference kernel on the same input and
            raise ``OffloadMismatchError`` unless the device's output equals it bit for bit.

    Raises:
        ValueError: an offloaded layer the code generator cannot express (named).
    """

    def __init__(
        self,
        graph: Graph,
        cfg: HWConfig,
        backend: str = "sim",
        vthreads: int = 1,
        check: bool = False,
    ) -> None:
        self.graph, self.cfg, self.backend, self.vthreads = graph, cfg, backend, vthreads
        self.check = check
        self._kernels: dict[tuple[str, tuple[int, ...]], object] = {}

    def offloaded(self) -> list[Node]:
        """The nodes that run on the accelerator."""
        return [n for n in self.graph.nodes if n.op in COMPILED_OPS and is_offloaded(n)]

    def run(
        self, inputs: Mapping[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[LayerStats]]:
        """Run the graph once; returns its outputs and per-layer statistics."""
        env: dict[str, np.ndarray] = {**self.graph.constants, **inputs}
        stats = []
        for node in self.graph.nodes:
            t0 = time.perf_counter()
            if node.op in COMPILED_OPS and is_offloaded(node):
                out, layer = self._run_on_device(node, env)
                env[node.outputs[0]] = out
            else:
                env.update(run_node(self.graph, node, env))
                # A node placed on the accelerator whose kernel the code generator lacks yet
                # runs on the CPU, and says so.
                waiting = is_offloaded(node)
                layer = LayerStats(node.name, node.op, "cpu", waiting_for_kernel=waiting)
            layer.wall_s = time.perf_counter() - t0
            stats.append(layer)
        return {name: env[name] for name in self.graph.outputs}, stats

    def _run_on_device(self, node: Node, env: dict[str, np.ndarray]):
        x = env[node.inputs[0]]
        kernel = self._kernel(node, env, x.shape)
        y, result = kernel.run(x, backend=self.backend)
        # The code generator clips to [-128, 127] (or [0, 127]); the graph's scheme to
        # [out_lo, out_hi]. Until the generator takes the bounds, the narrower clip is applied
        # here (exact: both clips are monotone and out_lo >= -128).
        a = node.attr_dict
        y = np.clip(y, a["out_lo"], a["out_hi"]).astype(np.int8)
        if self.check:
            want = run_node(self.graph, node, env)[node.outputs[0]]
            if not np.array_equal(y, want):
                bad = int(np.count_nonzero(y != want))
                raise OffloadMismatchError(
                    f"layer {node.name!r} ({node.op}) on backend {self.backend}: {bad} of "
                    f"{y.size} outputs differ from the int8 reference"
                )
        counters = dict(result.stats)
        return y, LayerStats(node.name, node.op, "vta", counters, result.cycles)

    def _kernel(self, node: Node, env: dict[str, np.ndarray], shape: tuple[int, ...]):
        key = (node.name, tuple(shape))
        if key not in self._kernels:
            self._kernels[key] = compile_layer(self.cfg, node, env, shape, self.vthreads)
        return self._kernels[key]


def compile_layer(
    cfg: HWConfig, node: Node, env: Mapping[str, np.ndarray], shape: tuple[int, ...], vthreads: int
):
    """The accelerator kernel of one offloaded tf.qconv2d / tf.qdense node for input ``shape``.

    Rounding requantization is folded into the bias (exact: adding ``2**(shift-1)`` before or
    after the accumulation gives the same sum), so the generator's shift-only ALU program
    realizes it.
    """
    from ..topi import vta  # the accelerator code generator (imports the device runtime)

    a = node.attr_dict
    shift = int(a["shift"])
    if a["multiplier"] != 1 or shift < 0:
        raise ValueError(
            f"node {node.name!r} ({node.op}): the accelerator code generator realizes only "
            f"shift requantization, not multiplier {a['multiplier']} >> {shift}; quantize "
            "with mode='shift'"
        )
    bias = env[node.inputs[2]].astype(np.int64)
    if a["rounding"] and shift > 0:
        bias = bias + (1 << (shift - 1))
    if np.abs(bias).max(initial=0) >= 2**31:
        raise ValueError(f"node {node.name!r}: bias plus rounding constant overflows int32")
    w, relu = env[node.inputs[1]], a["out_lo"] == 0
    if node.op == "tf.qdense":
        return vta.dense(
            cfg, shape[0], w, bias.astype(np.int32), shift=shift, relu=relu, vthreads=vthreads
        )
    top, left, bottom, right = a["pads"]
    if (top, left) != (bottom, right):
        raise ValueError(
            f"node {node.name!r}: the accelerator needs symmetric padding, not {a['pads']}"
        )
    return vta.conv2d(
        cfg, tuple(shape), w, bias.astype(np.int32), stride=tuple(a["strides"]),
        padding=(top, left), shift=shift, relu=relu, vthreads=vthreads,
    )  # fmt: skip
