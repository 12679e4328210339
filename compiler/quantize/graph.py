"""Graph-level post-training int8 quantization: a float graph becomes an accelerator-exact one.

``quantize_graph`` runs the float graph on calibration inputs (the ``run_graph`` kernels, node
by node) to observe activation ranges, then rewrites every conv (batch norm already folded by
``optimize``) and dense (Gemm, or MatMul with constant weights) together with the bias add and
ReLU (or ReLU6 ``Clip``) that follow it into one ``tf.qconv2d``/``tf.qdense``; residual adds
of two int8 values become ``tf.qadd`` (with their ReLU), max pooling of an int8 value
``tf.qmaxpool``, and Flatten/Reshape/Identity of an int8 value run on the int8 data.
Everything else stays float; ``tf.quantize``/``tf.dequantize`` nodes are inserted where int8
and float parts meet, so the graph keeps its float inputs and outputs (under the same names).
A float value quantized for readers that are all dense layers or unpadded convs may carry an
offset (``x - c``, taken back in their biases) so that a one-sided range gets every int8
level. The integer semantics of the new ops are compiler.quantize's (see
compiler/graph/ops/qnn.py and docs/quantization.md).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ...hw.config import HWConfig
from ..graph.ir import Graph, GraphBuilder, GraphError, Node
from ..graph.ops.nn import window_geometry
from ..graph.ops.qnn import add_attrs, requant_attrs
from ..graph.reference import run_node
from .calibrate import AbsMaxObserver
from .requant import (
    MODES,
    WEIGHT_SCALES,
    RequantParams,
    default_mode,
    default_weight_scales,
    requant_params,
    requant_params_per_channel,
)
from .residual import add_params
from .scheme import (
    AccumulatorRangeError,
    QTensor,
    choose_scale,
    qrange,
    quantize_bias,
    quantize_weight,
    quantize_weight_per_channel,
)

__all__ = ["Observer", "float_layers", "quantize_graph", "rebatch"]

DATA_MOVES = ("Flatten", "Reshape", "Identity")  # run on int8 data unchanged (same scale)
OFFSET_GAIN = 0.9  # offset a boundary value when that shrinks its threshold below this share


class Observer(Protocol):
    """What quantize_graph needs of an observer (compiler.quantize.calibrate)."""

    def observe(self, x: np.ndarray) -> Any: ...

    def threshold(self) -> float: ...


@dataclass(frozen=True)
class _Unit:
    """One rewrite: `nodes` (first = anchor, then absorbed) become one op producing `out`."""

    kind: str  # "conv" | "dense" | "add" | "pool" | "move" | "float"
    nodes: tuple[Node, ...]
    out: str
    weight: np.ndarray | None = None  # conv: OIHW; dense: (M, K); float
    bias: np.ndarray | None = None
    relu: bool = False

    @property
    def node(self) -> Node:
        return self.nodes[0]


# ---- matching --------------------------------------------------------------------------------


#: which grouped convolutions (input channels, output channels, groups) become int8; a rule
#: with a ``refusal(c, o, groups)`` method (``compile_vta.AcceleratorGroups``) also says why not
GroupedRule = Callable[[int, int, int], bool]
#: the ops whose weights the quantizer absorbs (conv and dense layers)
LAYER_OPS = ("Conv", "Gemm", "MatMul")


class _Matcher:
    """Walks the float graph in order and decides which nodes become which int8 op."""

    def __init__(self, graph: Graph, grouped: GroupedRule, exact_scales: bool) -> None:
        self.graph, self.grouped = graph, grouped
        self.exact_scales = exact_scales  # scales are the thresholds / 127 (not powers of two)
        self.consumers = graph.consumers()
        self.int8: set[str] = set()  # values that will exist as int8

    def plan(self) -> list[_Unit]:
        units, absorbed = [], set()
        for node in self.graph.nodes:
            if node.name in absorbed:
                continue
            unit = self._match(node)
            if unit.kind != "float":
                self.int8.add(unit.out)
                absorbed.update(n.name for n in unit.nodes)
            units.append(unit)
        return units

    def _match(self, node: Node) -> _Unit:
        if node.op == "Conv" and self.conv_refusal(node) is None:
            return self._absorb("conv", node, self._const(node.inputs[1]))
        if node.op in ("Gemm", "MatMul"):
            weight, _ = self._dense_weight(node)
            if weight is not None:
                return self._absorb("dense", node, weight)
        if node.op == "Add" and self._is_residual_add(node):
            return self._with_relu(_Unit("add", (node,), node.outputs[0]))
        if node.op == "MaxPool" and self._is_quantizable_pool(node):
            return _Unit("pool", (node,), node.outputs[0])
        if node.op in DATA_MOVES and node.inputs[0] in self.int8:
            if all(i in self.graph.constants for i in node.inputs[1:] if i):
                return _Unit("move", (node,), node.outputs[0])
        return _Unit("float", (node,), node.outputs[0])

    def _const(self, name: str) -> np.ndarray | None:
        return self.graph.constants.get(name) if name else None

    def _is_float(self, name: str) -> bool:
        return self.graph.types[name].dtype == "float32"

    def refusal(self, node: Node) -> str | None:
        """Why the conv or dense layer `node` stays float (None: it becomes an int8 op)."""
        if node.op == "Conv":
            return self.conv_refusal(node)
        return self._dense_weight(node)[1]

    def conv_refusal(self, node: Node) -> str | None:
        w, attrs = self._const(node.inputs[1]), node.attr_dict
        group, dilations = attrs["group"], tuple(attrs.get("dilations") or (1, 1))
        if w is None:
            return "its weights are computed at run time (the accelerator's are constants)"
        if w.ndim != 4:
            return f"a {w.ndim - 2}-D convolution (the GEMM core computes 2-D ones)"
        if not self._is_float(node.inputs[0]):
            return f"its input is {self.graph.types[node.inputs[0]].dtype}, not float32"
        if group != 1 and not self.grouped(w.shape[1] * group, w.shape[0], group):
            explain = getattr(self.grouped, "refusal", None)
            why = explain(w.shape[1] * group, w.shape[0], group) if explain else None
            return why or f"a grouped convolution (group={group}) that stays float here"
        if any(d != 1 for d in dilations):
            return f"dilated (dilations {dilations}; the accelerator's convolutions are not)"
        if len(node.inputs) > 2 and node.inputs[2] and self._const(node.inputs[2]) is None:
            return "its bias is computed at run time"
        return None

    def _dense_weight(self, node: Node) -> tuple[np.ndarray | None, str | None]:
        """The (M, K) weight of a Gemm/MatMul the accelerator's dense can compute, or None and
        the reason it cannot."""
        x, w = self.graph.types[node.inputs[0]], self._const(node.inputs[1])
        if w is None:
            return None, "its second operand is computed at run time (no constant weight)"
        if w.ndim != 2:
            return None, f"a weight of rank {w.ndim} (the dense layer's is 2-D)"
        if len(x.shape) != 2:
            return None, f"an input of rank {len(x.shape)} (the dense layer's is 2-D)"
        if not self._is_float(node.inputs[0]):
            return None, f"its input is {x.dtype}, not float32"
        if node.op == "MatMul":
            return w.T, None
        a = node.attr_dict
        c = node.inputs[2] if len(node.inputs) > 2 else ""
        if a["transA"]:
            return None, "a Gemm with transA"
        if c and (a["beta"] != 1.0 or c not in self.graph.constants):
            return None, "a Gemm whose C is computed at run time or scaled by beta != 1"
        if c and self.graph.constants[c].size != w.shape[0 if a["transB"] else 1]:
            return None, "a Gemm whose C is not one bias per output column"
        weight = w if a["transB"] else w.T
        # alpha * (x @ B) is x @ (alpha * B): the constant weight takes it (the same sums)
        return (weight if a["alpha"] == 1.0 else weight * np.float32(a["alpha"])), None

    def _absorb(self, kind: str, node: Node, weight: np.ndarray) -> _Unit:
        bias = self._const(node.inputs[2]) if len(node.inputs) > 2 else None
        bias = None if bias is None else bias.reshape(-1).astype(np.float64)
        unit = _Unit(kind, (node,), node.outputs[0], weight, bias)
        nxt = self._sole_consumer(unit.out)
        channel_bias = self._channel_bias(nxt, unit) if nxt is not None else None
        if channel_bias is not None:
            bias = channel_bias if unit.bias is None else unit.bias + channel_bias
            unit = _Unit(kind, (node, nxt), nxt.outputs[0], weight, bias)
        return self._with_relu(unit)

    def _channel_bias(self, add: Node, unit: _Unit) -> np.ndarray | None:
        """A constant Add operand that is a per-output-channel bias of `unit`, flattened."""
        if add.op != "Add":
            return None
        other = [i for i in add.inputs if i != unit.out]
        c = self._const(other[0]) if len(other) == 1 else None
        channels = unit.weight.shape[0]
        want = (channels,) if unit.kind == "dense" else (channels, 1, 1)
        if c is None or c.shape[-len(want) :] != want or c.size != channels:
            return None
        return c.reshape(-1).astype(np.float64)

    def _with_relu(self, unit: _Unit) -> _Unit:
        nxt = self._sole_consumer(unit.out)
        if nxt is None or not (nxt.op == "Relu" or self._is_relu_clip(nxt)):
            return unit
        return _Unit(unit.kind, (*unit.nodes, nxt), nxt.outputs[0], unit.weight, unit.bias, True)

    def _is_relu_clip(self, node: Node) -> bool:
        """A Clip to [0, hi] with a constant hi > 0 (ReLU6): a ReLU whose output scale is
        calibrated after the clip, so the int8 range spans [0, <= hi] (saturating at 127 is
        the clip), not the conv's whole unclipped range. Not with power-of-two scales: one
        rounded up would saturate above hi (6 -> 127/16 = 7.94), and the clip would be lost."""
        if node.op != "Clip" or len(node.inputs) < 2 or not node.inputs[1]:
            return False
        if not self.exact_scales and len(node.inputs) > 2 and node.inputs[2]:
            return False
        lo = self._const(node.inputs[1])
        hi = self._const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if lo is None or lo.size != 1 or float(lo) != 0.0:
            return False
        return hi is None or (hi.size == 1 and float(hi) > 0.0)

    def _sole_consumer(self, value: str) -> Node | None:
        users = self.consumers.get(value, [])
        return users[0] if len(users) == 1 and value not in self.graph.outputs else None

    def _is_residual_add(self, node: Node) -> bool:
        a, b = node.inputs
        shapes = {self.graph.types[v].shape for v in (a, b, node.outputs[0])}
        return a != b and a in self.int8 and b in self.int8 and len(shapes) == 1

    def _is_quantizable_pool(self, node: Node) -> bool:
        a = node.attr_dict
        return (
            node.inputs[0] in self.int8
            and len(self.graph.types[node.inputs[0]].shape) == 4
            and a["ceil_mode"] == 0
            and a["storage_order"] == 0
            and all(d == 1 for d in a.get("dilations") or (1, 1))
        )


def float_layers(graph: Graph, grouped: bool | GroupedRule = False) -> dict[str, str]:
    """The conv and dense layers (Conv, Gemm, MatMul nodes) of a float graph that
    ``quantize_graph`` would leave float with this `grouped` rule: node name -> the reason.

    Example:
        >>> import numpy as np
        >>> from tensorforge.compiler.graph import GraphBuilder
        >>> b = GraphBuilder()
        >>> x = b.add_input("x", (1, 16, 8, 8), "float32")
        >>> w = b.add_constant("w", np.ones((16, 16, 3, 3), np.float32))
        >>> (y,) = b.add_node("Conv", [x, w], {"dilations": [2, 2]}, name="c")
        >>> float_layers(b.build([y]))
        {'c': "dilated (dilations (2, 2); the accelerator's convolutions are not)"}
    """
    rule = grouped if callable(grouped) else (lambda c, o, g: bool(grouped))
    matcher = _Matcher(graph, rule, exact_scales=True)
    reasons = {n.name: matcher.refusal(n) for n in graph.nodes if n.op in LAYER_OPS}
    return {name: why for name, why in reasons.items() if why is not None}


# ---- calibration -----------------------------------------------------------------------------


def _calibrated_values(units: list[_Unit]) -> list[str]:
    """Values whose range sets a scale: int8 op outputs and float values quantized for them."""
    int8: set[str] = set()
    needed: dict[str, None] = {}
    for unit in units:
        if unit.kind in ("conv", "dense") and unit.node.inputs[0] not in int8:
            needed[unit.node.inputs[0]] = None
        if unit.kind in ("conv", "dense", "add"):
            needed[unit.out] = None
        if unit.kind != "float":
            int8.add(unit.out)
    return list(needed)


def _offsettable_values(graph: Graph, units: list[_Unit]) -> list[str]:
    """Float values quantized at a boundary whose every int8 reader is a dense layer or a conv
    without padding: their int8 form may carry an offset ``c`` (``x - c`` is quantized) that
    the readers' biases take back (``w * x = w * (x - c) + c * sum(w)``). A padded conv would
    read the offset's padding as ``-c``, not 0."""
    int8: set[str] = set()
    readers: dict[str, list[_Unit]] = {}
    for unit in units:
        if unit.kind in ("conv", "dense") and unit.node.inputs[0] not in int8:
            readers.setdefault(unit.node.inputs[0], []).append(unit)
        if unit.kind != "float":
            int8.add(unit.out)
    return [v for v, us in readers.items() if all(_is_unpadded(graph, u) for u in us)]


def _is_unpadded(graph: Graph, unit: _Unit) -> bool:
    if unit.kind == "dense":
        return True
    x = graph.types[unit.node.inputs[0]]
    begin, end, _, _, _ = window_geometry(unit.node.attr_dict, x.shape[2:], unit.weight.shape[2:])
    return not any(begin) and not any(end)


def _batches(graph: Graph, calibration_inputs: Any) -> list[dict[str, np.ndarray]]:
    batches = [calibration_inputs] if isinstance(calibration_inputs, Mapping) else None
    if batches is None and isinstance(calibration_inputs, Sequence):
        batches = list(calibration_inputs)
    if not batches or not all(isinstance(b, Mapping) for b in batches):
        raise ValueError(
            "calibration_inputs must be a mapping input name -> array, or a non-empty list of "
            f"them, not {type(calibration_inputs).__name__} {calibration_inputs!r:.80}"
        )
    result = []
    for i, batch in enumerate(batches):
        missing = [n for n in graph.inputs if n not in batch]
        if missing:
            raise ValueError(f"calibration batch {i} must include inputs {missing!r}")
        arrays = {n: np.asarray(batch[n], dtype=graph.types[n].dtype) for n in graph.inputs}
        if any(a.shape[:1] == (0,) for a in arrays.values()):
            raise ValueError(f"calibration batch {i} must hold at least one sample, not 0")
        for name, a in arrays.items():
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                bad = int((~np.isfinite(a)).sum())
                raise ValueError(
                    f"calibration input {name!r} (batch {i}) holds {bad} NaN or infinite "
                    "value(s): int8 scales cannot be chosen from them"
                )
        result.append(arrays)
    for name in graph.inputs:
        if all(not np.any(b[name]) for b in result):
            warnings.warn(
                f"calibration input {name!r} is zero everywhere: the int8 scales of the layers "
                "it feeds are chosen from nothing; calibrate with representative data",
                stacklevel=3,
            )
    return result


def rebatch(graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> Graph:
    """The same graph with other input shapes, every type re-inferred (calibration batches may
    differ from the graph's batch size).

    Raises:
        GraphError: naming the node, if an op cannot take the new shapes (e.g. a Reshape whose
            target shape bakes in the old batch size).
    """
    b = GraphBuilder(graph.name)
    for name in graph.inputs:
        b.add_input(name, shapes.get(name, graph.types[name].shape), graph.types[name].dtype)
    for name, value in graph.constants.items():
        b.add_constant(name, value)
    for node in graph.nodes:
        try:
            b.add_node(node.op, node.inputs, node.attr_dict, name=node.name, outputs=node.outputs)
        except GraphError as exc:
            raise GraphError(
                f"calibration inputs must have the graph's input shapes, or shapes every node "
                f"accepts; node {node.name!r} ({node.op}) does not: {exc}"
            ) from exc
    return b.build(graph.outputs)


def _observe(
    graph: Graph, batches: list[dict[str, np.ndarray]], values: list[str], observer: Callable
) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """(threshold per value, (min, max) per value) from running the float graph on every
    batch."""
    observers = {v: observer() for v in values}
    extremes = {v: (math.inf, -math.inf) for v in values}

    def see(v: str, x: np.ndarray) -> None:
        observers[v].observe(x)
        if x.size:
            lo, hi = extremes[v]
            extremes[v] = (min(lo, float(x.min())), max(hi, float(x.max())))

    for batch in batches:
        shapes = {n: a.shape for n, a in batch.items()}
        g = graph
        if any(shapes[n] != graph.types[n].shape for n in graph.inputs):
            g = rebatch(graph, shapes)
        env: dict[str, np.ndarray] = {**g.constants, **batch}
        for v in [v for v in values if v in batch]:
            see(v, batch[v])
        for node in g.nodes:
            out = run_node(g, node, env)
            env.update(out)
            for v in [v for v in node.outputs if v in observers]:
                see(v, out[v])
    return {v: float(o.threshold()) for v, o in observers.items()}, extremes


# ---- emission --------------------------------------------------------------------------------


class _Emitter:
    """Builds the quantized graph; int8 values are named `<float name>_q`, and a float value
    that is needed but only exists as int8 is dequantized under its original name."""

    def __init__(
        self,
        graph: Graph,
        scales: dict[str, float],
        cfg: HWConfig,
        mode: str,
        per_channel: bool,
        offsets: dict[str, float],
    ):
        self.src, self.scales, self.cfg, self.mode = graph, scales, cfg, mode
        self.offsets = offsets  # float value -> c: its int8 form is quantize(x - c)
        self.per_channel = per_channel
        self.b = GraphBuilder(graph.name)
        self.taken = set(graph.types) | {n.name for n in graph.nodes}
        self.q: dict[str, str] = {}  # float value -> its int8 value
        for name in graph.inputs:
            self.b.add_input(name, graph.types[name].shape, graph.types[name].dtype)

    def fresh(self, hint: str) -> str:
        name, i = hint, 0
        while name in self.taken:
            i += 1
            name = f"{hint}_{i}"
        self.taken.add(name)
        return name

    def value(self, name: str) -> str:
        """`name` as a float value of the new graph (a constant, or dequantized)."""
        if not name or name in self.b.types:
            return name
        if name in self.src.constants:
            return self.b.add_constant(name, self.src.constants[name])
        attrs = {"scale": self.scales[name]}
        node = self.fresh(f"{name}_dequantize")
        return self.b.add_node("tf.dequantize", [self.q[name]], attrs, name=node, outputs=[name])[0]

    def qvalue(self, name: str) -> str:
        """`name` as an int8 value (quantizing the float value when it has no int8 form)."""
        if name not in self.q:
            x = self.value(name)
            if name in self.offsets:
                c = self.b.add_constant(self.fresh(f"{name}.offset"),
                                        np.array(self.offsets[name], np.float32))  # fmt: skip
                node, out = self.fresh(f"{name}_offset"), self.fresh(f"{name}_offset")
                (x,) = self.b.add_node("Sub", [x, c], name=node, outputs=[out])
            out, node = self.fresh(f"{name}_q"), self.fresh(f"{name}_quantize")
            attrs = {"scale": self.scales[name]}
            self.q[name] = self.b.add_node("tf.quantize", [x], attrs, name=node, outputs=[out])[0]
        return self.q[name]

    def emit(self, unit: _Unit) -> None:
        getattr(self, f"_emit_{unit.kind}")(unit)

    def _add(self, op: str, unit: _Unit, inputs: list[str], attrs: dict[str, Any]) -> None:
        out = self.fresh(f"{unit.out}_q")
        self.b.add_node(op, inputs, attrs, name=unit.node.name, outputs=[out])
        self.q[unit.out] = out

    def _emit_float(self, unit: _Unit) -> None:
        node = unit.node
        inputs = [self.value(i) for i in node.inputs]
        self.b.add_node(node.op, inputs, node.attr_dict, name=node.name, outputs=node.outputs)

    def _emit_move(self, unit: _Unit) -> None:
        node = unit.node
        inputs = [self.qvalue(node.inputs[0]), *(self.value(i) for i in node.inputs[1:])]
        self._add(node.op, unit, inputs, node.attr_dict)

    def _emit_pool(self, unit: _Unit) -> None:
        x, a = unit.node.inputs[0], unit.node.attr_dict
        kernel = tuple(a["kernel_shape"])
        begin, end, strides, _, _ = window_geometry(a, self.src.types[x].shape[2:], kernel)
        attrs = {"kernel_shape": kernel, "strides": tuple(strides), "pads": (*begin, *end)}
        self._add("tf.qmaxpool", unit, [self.qvalue(x)], {**attrs, "scale": self.scales[x]})

    def _emit_add(self, unit: _Unit) -> None:
        lhs, rhs = unit.node.inputs
        s_a, s_b, s_y = self.scales[lhs], self.scales[rhs], self.scales[unit.out]
        try:
            params = add_params(s_a / s_y, s_b / s_y, self.cfg, mode=self.mode, relu=unit.relu)
        except ValueError as exc:
            raise ValueError(f"quantize_graph: node {unit.node.name!r} (Add): {exc}") from exc
        attrs = {**add_attrs(params), "lhs_scale": s_a, "rhs_scale": s_b, "out_scale": s_y}
        self._add("tf.qadd", unit, [self.qvalue(lhs), self.qvalue(rhs)], attrs)

    def _emit_conv(self, unit: _Unit) -> None:
        node = unit.node
        x_type = self.src.types[node.inputs[0]]
        begin, end, strides, _, _ = window_geometry(
            node.attr_dict, x_type.shape[2:], unit.weight.shape[2:]
        )
        geometry = {"strides": tuple(strides), "pads": (*begin, *end)}
        if node.attr_dict["group"] > 1:
            geometry["group"] = node.attr_dict["group"]
        self._emit_compute("tf.qconv2d", unit, geometry)

    def _emit_dense(self, unit: _Unit) -> None:
        self._emit_compute("tf.qdense", unit, {})

    def _emit_compute(self, op: str, unit: _Unit, geometry: dict[str, Any]) -> None:
        x, name = unit.node.inputs[0], unit.node.name
        s_in, s_out = self.scales[x], self.scales[unit.out]
        pow2 = self.mode == "shift"
        try:
            if self.per_channel:
                qw = quantize_weight_per_channel(unit.weight)
            else:
                qw = quantize_weight(unit.weight, power_of_two=pow2)
            qb, bias = None, unit.bias
            if x in self.offsets:  # the readers take the input's offset back in their bias,
                # through the int8 weights: w_q * (x - c) + c * sum(w_q) keeps w_q * x's error
                rows = qw.values.reshape(len(qw.values), -1).sum(axis=1, dtype=np.int64)
                taken = self.offsets[x] * rows * np.asarray(qw.scale, np.float64)
                bias = taken if bias is None else bias + taken
            if bias is not None:
                qb = quantize_bias(bias, s_in * qw.scale, self.cfg.acc_width).values
            if self.per_channel:
                params, qb = _per_channel_requant(qw, qb, s_in * qw.scale / s_out, unit.relu,
                                                  self.cfg)  # fmt: skip
            else:
                params = requant_params(
                    s_in * qw.scale / s_out, self.cfg, mode=self.mode, relu=unit.relu,
                    acc_bound=_acc_bound(qw.values, qb, self.cfg),
                )  # fmt: skip
        except AccumulatorRangeError as exc:  # no int8 form at these scales: stays float
            warnings.warn(f"quantize_graph: node {name!r} ({unit.node.op}) stays float: {exc}",
                          stacklevel=2)  # fmt: skip
            for node in unit.nodes:
                self._emit_float(_Unit("float", (node,), node.outputs[0]))
            return
        except ValueError as exc:
            raise ValueError(f"quantize_graph: node {name!r} ({unit.node.op}): {exc}") from exc
        inputs = [self.qvalue(x), self.b.add_constant(self.fresh(f"{name}.qweight"), qw.values)]
        if qb is not None:
            inputs.append(self.b.add_constant(self.fresh(f"{name}.qbias"), qb))
        attrs = {**geometry, **requant_attrs(params), "in_scale": s_in, "out_scale": s_out}
        w_scale = tuple(float(v) for v in qw.scale) if self.per_channel else qw.scale
        self._add(op, unit, inputs, {**attrs, "weight_scale": w_scale})


def _per_channel_requant(
    qw: QTensor, qb: np.ndarray | None, ratios: np.ndarray, relu: bool, cfg: HWConfig
) -> tuple[RequantParams, np.ndarray]:
    """(requantization, int32 bias) of a layer with per-channel weight scales.

    Precision: the multipliers are bounded by ``2**30 / acc_bound``, and the worst-case bound of
    a large layer leaves them 5 to 7 bits (0.5-1% error in a channel's ratio on ResNet-18's last
    stage). A pre-shift of ``p`` bits (floor) divides the bound by ``2**p`` and buys the
    multipliers ``p`` bits; it is chosen so that the multipliers get at least 12 bits while the
    floor costs at most ``2**p * ratio <= 1/16`` of an output step, and is 0 where they already
    have them.

    Rounding: the multipliers sit between the bias and the rounding, so the rounding ADD cannot
    move into the bias exactly (``accel_kernels.fold_rounding``) and would cost an ALU pass per
    tile. The bias carries it instead, in accumulator units: ``h_c = rint(2**(shift + p - 1) /
    m_c + (2**p - 1) / 2)`` (the second term offsets the pre-shift's mean floor), so
    ``floor(floor((acc + bias_c + h_c) / 2**p) * m_c / 2**shift)`` rounds half up to within
    ``2**p * ratio_c`` of an output step. The bounds the multipliers are chosen for include
    ``h_c``.
    """
    top_pre = max(0, math.floor(math.log2(1.0 / (16.0 * float(ratios.max())))))
    bounds = (
        _acc_bounds(qw.values, qb, cfg) + np.ceil(1.0 / ratios).astype(np.int64) + (1 << top_pre)
    )

    def params_for(pre: int) -> RequantParams:
        return requant_params_per_channel(ratios, cfg, relu=relu, acc_bounds=bounds,
                                          rounding=False, pre_shift=pre)  # fmt: skip

    params = params_for(0)
    pre = min(top_pre, max(0, 12 - max(params.channel_multipliers).bit_length()))
    if pre:
        params = params_for(pre)
    m = np.asarray(params.channel_multipliers, dtype=np.float64)
    total = params.shift + pre
    half = np.zeros_like(m)
    if total > 0:
        np.divide(2.0 ** (total - 1), m, out=half, where=m > 0)
        half = np.rint(half + ((1 << pre) - 1) / 2)
    bias = (np.zeros(len(m), np.int64) if qb is None else qb.astype(np.int64)) + half.astype(
        np.int64
    )
    if np.abs(bias).max(initial=0) >= 2 ** (cfg.acc_width - 1):
        raise AccumulatorRangeError(
            f"the bias with the rounding term must fit {cfg.acc_width}-bit accumulators"
        )
    return params, bias.astype(np.int32)


def _acc_bound(w: np.ndarray, bias: np.ndarray | None, cfg: HWConfig) -> int:
    """One bound for every channel: ``127 * max_o sum|w_o| + max_o |bias_o|``."""
    rows = np.abs(w.astype(np.int64)).reshape(w.shape[0], -1).sum(axis=1)
    b = int(np.abs(bias.astype(np.int64)).max(initial=0)) if bias is not None else 0
    return max(1, qrange(cfg.inp_width)[1] * int(rows.max(initial=0)) + b)


def _acc_bounds(w: np.ndarray, bias: np.ndarray | None, cfg: HWConfig) -> np.ndarray:
    """Per output channel, the largest |accumulator| for int8 inputs in the narrow range:
    ``127 * sum|w_o| + |bias_o|`` (at least 1)."""
    x_max = qrange(cfg.inp_width)[1]
    rows = np.abs(w.astype(np.int64)).reshape(w.shape[0], -1).sum(axis=1)
    b = np.abs(bias.astype(np.int64)) if bias is not None else 0
    return np.maximum(1, x_max * rows + b)


def _offsets(
    thresholds: dict[str, float],
    extremes: dict[str, tuple[float, float]],
    values: list[str],
) -> dict[str, float]:
    """The offset ``c`` of each value of `values` whose observed range, clipped to the
    observer's threshold, is lopsided: ``[lo, hi]`` is quantized as ``c +- (hi - lo) / 2``
    with ``c`` its middle, so a ReLU's output gets all 255 levels instead of 128. Each offset
    value's entry in `thresholds` is narrowed to ``(hi - lo) / 2`` in place."""
    offsets = {}
    for v in values:
        t = thresholds[v]
        lo, hi = max(extremes[v][0], -t), min(extremes[v][1], t)
        if lo < hi and (hi - lo) / 2 < OFFSET_GAIN * t:
            offsets[v], thresholds[v] = float(np.float32((hi + lo) / 2)), (hi - lo) / 2
    return offsets


def _scales(units: list[_Unit], thresholds: dict[str, float], pow2: bool) -> dict[str, float]:
    scales = {v: choose_scale(t, power_of_two=pow2) for v, t in thresholds.items()}
    for unit in units:  # max pooling and data movement keep their input's scale
        if unit.kind in ("pool", "move"):
            scales[unit.out] = scales[unit.node.inputs[0]]
    return scales


def quantize_graph(
    graph: Graph,
    calibration_inputs: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
    cfg: HWConfig,
    mode: str | None = None,
    observer: Callable[[], Observer] = AbsMaxObserver,
    weights: str | None = None,
    grouped: bool | GroupedRule = False,
) -> Graph:
    """Post-training int8 quantization of a float graph for the accelerator described by cfg.

    Args:
        graph: a float graph (e.g. ``optimize(from_onnx(model))``: batch norm folded).
        calibration_inputs: one batch (input name -> array) or a list of batches. A batch may
            have another batch size than the graph's inputs (types are re-inferred for it).
        cfg: the accelerator config: accumulator width, and ``alu_mul`` for mode ``"mul"``.
        mode: ``"shift"``: power-of-two scales, requantization by shifts (every config);
            ``"mul"``: scales from the observer as is, multiply+shift (needs ``alu_mul``);
            None (default): ``default_mode(cfg)``, i.e. ``"mul"`` where the config has
            ``alu_mul`` (power-of-two scales cost up to twice the error), else ``"shift"``.
        observer: a factory of observers (``AbsMaxObserver``, ``PercentileObserver``,
            ``lambda: PercentileObserver(99.9)``, ...), one per calibrated tensor.
        weights: ``"per-channel"``: one weight scale per output channel, requantized by one
            multiplier per channel (a tensor-tensor ALU MUL; mode ``"mul"`` only);
            ``"per-tensor"``: one weight scale per layer; None (default): per-channel in
            mode ``"mul"``, per-tensor in mode ``"shift"``.
        grouped: which grouped (and depthwise) convolutions become ``tf.qconv2d`` (with a
            ``group`` attribute): False (default) none, they stay float; True all; or a
            predicate of (input channels, output channels, groups), e.g. whether the
            accelerator's channel blocks fit them (``compile_vta.quantize_for``).

    Returns:
        A new graph with the same float inputs and outputs in which conv/dense layers (with
        their bias and ReLU), residual adds and max pooling are int8 ops (``tf.qconv2d``,
        ``tf.qdense``, ``tf.qadd``, ``tf.qmaxpool``) between ``tf.quantize``/``tf.dequantize``;
        every int8 op's ``target`` is "cpu" until ``partition_graph`` assigns it.

    Raises:
        ValueError: for no or malformed calibration data, an unknown mode, or a layer whose
            requantization the config cannot express (named by its node).

    Example:
        >>> import numpy as np
        >>> from tensorforge.compiler.graph import GraphBuilder, run_graph
        >>> b = GraphBuilder()
        >>> x = b.add_input("x", (1, 4), "float32")
        >>> w = b.add_constant("w", np.eye(4, dtype=np.float32))
        >>> (y,) = b.add_node("MatMul", [x, w])
        >>> (y,) = b.add_node("Relu", [y])
        >>> xs = np.array([[0.5, -2.0, 2.0, 1.0]], np.float32)
        >>> q = quantize_graph(b.build([y]), {"x": xs}, HWConfig.preset("pynq"))
        >>> [n.op for n in q.nodes]
        ['tf.quantize', 'tf.qdense', 'tf.dequantize']
        >>> len(q.nodes[1].attr_dict["channel_multipliers"])  # pynq has the ALU MUL: mode
        4
        >>> # "mul" with per-channel weight scales, one multiplier per output channel
        >>> step = 2.0 / 127  # the scales: the calibrated max |x| over the int8 range
        >>> bool(np.abs(run_graph(q, {"x": xs})[y] - np.maximum(xs, 0)).max() <= step / 2)
        True
    """
    if not isinstance(cfg, HWConfig):
        raise TypeError(f"quantize_graph cfg must be a HWConfig, not {type(cfg).__name__}")
    mode = default_mode(cfg) if mode is None else mode
    if mode not in MODES:
        raise ValueError(f"quantize_graph mode must be one of {MODES}, not {mode!r}")
    weights = default_weight_scales(mode) if weights is None else weights
    if weights not in WEIGHT_SCALES:
        raise ValueError(f"quantize_graph weights must be one of {WEIGHT_SCALES}, not {weights!r}")
    if weights == "per-channel" and mode != "mul":
        raise ValueError("quantize_graph weights 'per-channel' needs mode 'mul' (a multiplier per "
                         "channel; power-of-two shifts are one per layer)")  # fmt: skip
    batches = _batches(graph, calibration_inputs)
    rule = grouped if callable(grouped) else (lambda c, o, g: bool(grouped))
    units = _Matcher(graph, rule, exact_scales=mode != "shift").plan()
    thresholds, extremes = _observe(graph, batches, _calibrated_values(units), observer)
    offsets = _offsets(thresholds, extremes, _offsettable_values(graph, units))
    emitter = _Emitter(graph, _scales(units, thresholds, mode == "shift"), cfg, mode,
                       weights == "per-channel", offsets)  # fmt: skip
    for unit in units:
        emitter.emit(unit)
    outputs = [emitter.value(o) for o in graph.outputs]
    return emitter.b.build(outputs)
