"""Case generator of the differential graph fuzzer (benchmarks/graph_fuzz.py): random ONNX DAGs
of float32 values (opset 17) built node by node with onnx.helper, each node's output shapes
from onnx's shape inference.

`make_case(seed, index, max_nodes)` is deterministic: the same arguments build the same model
and inputs, so a worker process rebuilds a case from its name alone.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.shape_inference import InferenceError
from op_fuzz_cases import Case

OPSET = 17
IR_VERSION = 8


class GraphBuilder:
    """A graph under construction: nodes, initializers, inputs and the float32 values (with
    their shapes, from onnx's shape inference) that later nodes may read."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.consts: dict[str, np.ndarray] = {}
        self.feed: dict[str, np.ndarray] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.values: list[str] = []  # float32 values a node may read
        self.reads: Counter[str] = Counter()

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{len(self.nodes) + len(self.consts) + len(self.feed)}"

    def const(self, array: np.ndarray, prefix: str = "c") -> str:
        name = self.fresh(prefix)
        self.consts[name] = np.asarray(array)
        return name

    def weights(self, shape: tuple[int, ...], fan_in: int) -> str:
        scale = 1.0 / np.sqrt(max(1, fan_in))
        return self.const(self.rng.uniform(-scale, scale, shape).astype(np.float32), "w")

    def graph_input(self, shape: tuple[int, ...], dtype=np.float32) -> str:
        name = f"in{len(self.feed)}"
        if dtype == np.bool_:
            self.feed[name] = self.rng.random(shape) < 0.5
        else:
            self.feed[name] = self.rng.uniform(-2, 2, shape).astype(dtype)
            self.values.append(name)
        self.shapes[name] = shape
        return name

    def add(self, op: str, inputs: list[str], n_out: int = 1, float_out=True, **attrs) -> list[str]:
        """Append a node; its outputs' shapes come from onnx's shape inference."""
        outs = [self.fresh(f"{op.lower()}_") + (f"_{i}" if n_out > 1 else "") for i in range(n_out)]
        name = f"n{len(self.nodes)}_{op.lower()}"
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        self.reads.update(i for i in inputs if i)
        shapes = self.infer(outs)
        for out in outs:
            self.shapes[out] = shapes[out]
            if float_out:
                self.values.append(out)
        return outs

    def infer(self, names: list[str]) -> dict[str, tuple[int, ...]]:
        model = self.model([])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        found = {}
        for vi in inferred.graph.value_info:
            if vi.name in names:
                found[vi.name] = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        missing = [n for n in names if n not in found]
        if missing:
            raise ValueError(f"no inferred shape for {missing}")
        return found

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        elem = helper.np_dtype_to_tensor_dtype
        inputs = [
            helper.make_tensor_value_info(k, elem(v.dtype), v.shape) for k, v in self.feed.items()
        ]
        inits = [numpy_helper.from_array(v, k) for k, v in self.consts.items()]
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
        graph = helper.make_graph(self.nodes, "graph_fuzz", inputs, outs, inits)
        return helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
        )

    def pick(self, rank: int | None = None, bias_recent: bool = True) -> str | None:
        """A value of `rank` (any when None), more often a recent one."""
        names = [v for v in self.values if rank is None or len(self.shapes[v]) == rank]
        if not names:
            return None
        read = [v for v in names if self.reads[v]]
        draw = self.rng.random()
        if read and draw < 0.25:  # one more reader of a value others read (branches)
            names = read
        elif bias_recent and draw < 0.75:  # deep chains
            names = names[-3:]
        return names[int(self.rng.integers(len(names)))]


def _broadcasts(small: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether `small` broadcasts to `shape` (and is not it)."""
    if len(small) > len(shape) or small == shape:
        return False
    return all(a in (1, c) for a, c in zip(small[::-1], shape[::-1], strict=False))


def _same_but(one: tuple[int, ...], other: tuple[int, ...], axis: int) -> bool:
    """Whether two shapes of one rank agree on every axis but `axis` (Concat's operands)."""
    if len(one) != len(other):
        return False
    return all(a == c or i == axis for i, (a, c) in enumerate(zip(one, other, strict=True)))


def _size_ok(shape: tuple[int, ...]) -> bool:
    return all(d >= 1 for d in shape) and int(np.prod(shape)) <= 24 * 24 * 24 * 2


# --- one generator per op family: returns False when it does not apply to the graph so far

GenFn = Callable[["GraphBuilder"], bool]


def _on_value(*pick: Any) -> Callable[[Callable[[GraphBuilder, str], bool]], GenFn]:
    """A generator over one value `b.pick(*pick)` draws: it does not apply when there is none."""

    def wrap(fn: Callable[[GraphBuilder, str], bool]) -> GenFn:
        @functools.wraps(fn)
        def generator(b: GraphBuilder) -> bool:
            x = b.pick(*pick)
            return x is not None and fn(b, x)

        return generator

    return wrap


@_on_value(4)
def gen_conv(b: GraphBuilder, x: str) -> bool:
    n, c, h, w = b.shapes[x]
    r = b.rng
    group = int(r.choice([g for g in (1, 2, 3, 4, c) if c % g == 0]))
    widths = [4, 8, 12, 15, 16, 17, 24, 30, 32]
    cout = group * int(r.choice([1, 2, 3])) if group > 1 else int(r.choice(widths))
    if group == c and r.random() < 0.5:
        cout = c  # depthwise
    k = int(r.choice([1, 1, 3, 3, 2, 5]))
    stride = int(r.choice([1, 1, 2]))
    dil = int(r.choice([1, 1, 1, 2]))
    pads = [int(r.integers(0, k // 2 + 1)) for _ in range(4)]
    if r.random() < 0.6:
        pads = [pads[0], pads[1], pads[0], pads[1]]
    span = dil * (k - 1) + 1
    if h + pads[0] + pads[2] < span or w + pads[1] + pads[3] < span:
        return False
    kw = k if r.random() < 0.8 else int(r.choice([1, 3]))
    if w + pads[1] + pads[3] < dil * (kw - 1) + 1:
        return False
    inputs = [x, b.weights((cout, c // group, k, kw), c // group * k * kw)]
    if r.random() < 0.7:
        inputs.append(b.const(r.uniform(-0.5, 0.5, cout).astype(np.float32), "bias"))
    padding = {"pads": pads} if r.random() < 0.85 else {"auto_pad": "SAME_UPPER"}
    if "auto_pad" in padding:
        stride, dil = 1, 1
    b.add("Conv", inputs, kernel_shape=[k, kw], strides=[stride, stride],
          dilations=[dil, dil], group=group, **padding)  # fmt: skip
    return True


@_on_value(4)
def gen_batchnorm(b: GraphBuilder, x: str) -> bool:
    c = b.shapes[x][1]
    r = b.rng
    scale, bias = r.uniform(0.5, 1.5, c), r.uniform(-0.5, 0.5, c)
    mean, var = r.uniform(-0.5, 0.5, c), r.uniform(0.5, 2.0, c)
    params = [b.const(v.astype(np.float32), "bn") for v in (scale, bias, mean, var)]
    b.add("BatchNormalization", [x, *params], epsilon=1e-5)
    return True


@_on_value()
def gen_activation(b: GraphBuilder, x: str) -> bool:
    op = str(b.rng.choice(["Relu", "Relu", "Sigmoid", "HardSwish", "Clip", "Clip"]))
    if op == "Clip":
        low = b.const(np.float32(b.rng.choice([0.0, -1.0])))
        high = b.const(np.float32(b.rng.choice([6.0, 1.0])))
        bounds = [low, high] if b.rng.random() < 0.8 else [low]
        b.add("Clip", [x, *bounds])
    else:
        b.add(op, [x])
    return True


@_on_value(4)
def gen_pool(b: GraphBuilder, x: str) -> bool:
    r = b.rng
    op = str(r.choice(["MaxPool", "AveragePool", "GlobalAveragePool"]))
    if op == "GlobalAveragePool":
        b.add(op, [x])
        return True
    h, w = b.shapes[x][2:]
    k = int(r.choice([2, 3]))
    stride = int(r.choice([1, 2]))
    p = int(r.integers(0, k // 2 + 1))
    if h + 2 * p < k or w + 2 * p < k:
        return False
    attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [p, p, p, p]}
    if r.random() < 0.3:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and r.random() < 0.5:
        attrs["count_include_pad"] = 1
    b.add(op, [x], **attrs)
    return True


def _positive(b: GraphBuilder, x: str) -> str:
    """sigmoid(x) + 0.5: a branch safe to divide by."""
    (s,) = b.add("Sigmoid", [x])
    (p,) = b.add("Add", [s, b.const(np.float32(0.5))])
    return p


@_on_value()
def gen_binary(b: GraphBuilder, x: str) -> bool:
    r = b.rng
    shape = b.shapes[x]
    op = str(r.choice(["Add", "Add", "Mul", "Sub", "Div"]))
    kind = str(r.choice(["channel", "scalar", "branch", "branch", "row"]))
    same = [v for v in b.values if b.shapes[v] == shape and v != x]
    if r.random() < 0.4:  # a branch that broadcasts: [N, 1, H, W], [N, C, 1, 1], ...
        same += [v for v in b.values if _broadcasts(b.shapes[v], shape) and v != x]
    if kind == "branch" and same:
        other = same[int(r.integers(len(same)))]
        if op == "Div":
            other = _positive(b, other)
    elif kind == "channel" and len(shape) == 4:
        values = r.uniform(0.5, 1.5, (shape[1], 1, 1)) * r.choice([-1, 1], (shape[1], 1, 1))
        other = b.const(values.astype(np.float32))
    elif kind == "row" and len(shape) >= 2:
        values = r.uniform(0.5, 1.5, shape[-1]) * r.choice([-1, 1], shape[-1])
        other = b.const(values.astype(np.float32))
    else:
        other = b.const(np.float32(r.choice([0.5, -1.5, 2.0, 3.0])))
    inputs = [x, other] if op == "Div" or r.random() < 0.7 else [other, x]
    if op == "Div" and inputs[1] == x:
        return False
    b.add(op, inputs)
    return True


@_on_value()
def gen_concat(b: GraphBuilder, x: str) -> bool:
    shape = b.shapes[x]
    r = b.rng
    axis = int(r.integers(len(shape)))
    if len(shape) == 4 and r.random() < 0.6:
        axis = 1
    fits = [v for v in b.values if _same_but(b.shapes[v], shape, axis)]
    parts = [x] + [fits[int(r.integers(len(fits)))] for _ in range(int(r.integers(1, 4)))]
    total = sum(b.shapes[p][axis] for p in parts)
    if total > 48:
        return False
    if r.random() < 0.5:
        axis -= len(shape)
    b.add("Concat", parts, axis=axis)
    return True


@_on_value()
def gen_split(b: GraphBuilder, x: str) -> bool:
    shape = b.shapes[x]
    axes = [i for i, d in enumerate(shape) if d >= 2]
    if not axes:
        return False
    r = b.rng
    axis = 1 if 1 in axes and r.random() < 0.6 else axes[int(r.integers(len(axes)))]
    d = shape[axis]
    if r.random() < 0.5 and d % 2 == 0:
        b.add("Split", [x], n_out=2, axis=axis)
    else:
        first = int(r.integers(1, d))
        b.add("Split", [x, b.const(np.array([first, d - first], np.int64))], n_out=2, axis=axis)
    return True


@_on_value()
def gen_slice(b: GraphBuilder, x: str) -> bool:
    shape = b.shapes[x]
    r = b.rng
    axis = int(r.integers(len(shape)))
    d = shape[axis]
    if d < 2:
        return False
    step = int(r.choice([1, 1, 2, -1]))
    if step > 0:
        start, end = int(r.integers(0, d - 1)), int(r.integers(2, d + 2))
        if end <= start:
            start, end = 0, d
    else:
        start, end = -1, -d - 1
    ints = [np.array([v], np.int64) for v in (start, end, axis - len(shape) * (r.random() < 0.3))]
    b.add("Slice", [x, *(b.const(v) for v in ints), b.const(np.array([step], np.int64))])
    return True


@_on_value()
def gen_reshape(b: GraphBuilder, x: str) -> bool:
    shape = b.shapes[x]
    r = b.rng
    if len(shape) == 4 and r.random() < 0.4:
        b.add("Flatten", [x], axis=1)
        return True
    total = int(np.prod(shape))
    if len(shape) == 4:
        target = [shape[0], shape[1], -1] if r.random() < 0.5 else [shape[0], -1]
    elif len(shape) == 2 and shape[1] % 4 == 0:
        target = [shape[0], shape[1] // 4, 2, 2]
    elif len(shape) == 3:
        target = [shape[0], shape[1], shape[2], 1] if r.random() < 0.5 else [0, -1]
    else:
        target = [total]
    b.add("Reshape", [x, b.const(np.array(target, np.int64))])
    return True


def gen_transpose(b: GraphBuilder) -> bool:
    x = b.pick()
    if x is None or len(b.shapes[x]) < 2:
        return False
    rank = len(b.shapes[x])
    perm = [int(p) for p in b.rng.permutation(rank)]
    if rank == 4 and b.rng.random() < 0.5:
        perm = [0, 2, 3, 1] if b.rng.random() < 0.5 else [0, 1, 3, 2]
    b.add("Transpose", [x], perm=perm)
    return True


@_on_value()
def gen_squeeze(b: GraphBuilder, x: str) -> bool:
    shape = b.shapes[x]
    ones = [i for i, d in enumerate(shape) if d == 1]
    if ones and b.rng.random() < 0.6:
        b.add("Squeeze", [x, b.const(np.array(ones, np.int64))])
    elif len(shape) < 4:
        axis = int(b.rng.integers(-len(shape) - 1, len(shape) + 1))
        b.add("Unsqueeze", [x, b.const(np.array([axis], np.int64))])
    else:
        return False
    return True


@_on_value()
def gen_reduce(b: GraphBuilder, x: str) -> bool:
    rank = len(b.shapes[x])
    r = b.rng
    choices = [[1], [2, 3], [1, 2, 3], [-1]] if rank == 4 else [[-1], [0]]
    axes = choices[int(r.integers(len(choices)))]
    if any(a >= rank for a in axes):
        axes = [-1]
    keep = int(r.integers(2))
    if r.random() < 0.5:
        b.add("ReduceMean", [x], axes=axes, keepdims=keep)
    else:
        b.add("ReduceSum", [x, b.const(np.array(axes, np.int64))], keepdims=keep)
    return True


def gen_matmul(b: GraphBuilder) -> bool:
    r = b.rng
    x = b.pick(2) if r.random() < 0.6 else b.pick()
    if x is None or len(b.shapes[x]) < 2:
        return False
    shape = b.shapes[x]
    f = shape[-1]
    k = int(r.choice([3, 8, 10, 16]))
    if len(shape) == 2 and r.random() < 0.6:
        trans = int(r.integers(2))
        wshape = (k, f) if trans else (f, k)
        inputs = [x, b.weights(wshape, f)]
        if r.random() < 0.7:
            inputs.append(b.const(r.uniform(-1, 1, k if r.random() < 0.7 else (1, k))
                                  .astype(np.float32)))  # fmt: skip
        b.add("Gemm", inputs, transB=trans, alpha=float(r.choice([1.0, 0.5])))
        return True
    same = [v for v in b.values if len(b.shapes[v]) == len(shape) and b.shapes[v][-2] == f
            and b.shapes[v][:-2] == shape[:-2]]  # fmt: skip
    if same and r.random() < 0.4:
        b.add("MatMul", [x, same[int(r.integers(len(same)))]])
    else:
        b.add("MatMul", [x, b.weights((f, k), f)])
    return True


@_on_value()
def gen_softmax(b: GraphBuilder, x: str) -> bool:
    axis = -1 if b.rng.random() < 0.6 else int(b.rng.integers(len(b.shapes[x])))
    b.add("Softmax", [x], axis=axis)
    return True


@_on_value()
def gen_where(b: GraphBuilder, x: str) -> bool:
    shape = b.shapes[x]
    r = b.rng
    cond_shape = tuple(d if r.random() < 0.6 else 1 for d in shape)
    if r.random() < 0.5:
        cond = b.graph_input(cond_shape, np.bool_)
    else:
        src = b.graph_input(cond_shape)
        (cond,) = b.add("Greater", [src, b.const(np.float32(0.0))], float_out=False)
    same = [v for v in b.values if b.shapes[v] == shape and v != x]
    other = same[int(r.integers(len(same)))] if same and r.random() < 0.6 else b.const(
        np.float32(r.choice([0.0, -1.0])))  # fmt: skip
    b.add("Where", [cond, x, other] if r.random() < 0.5 else [cond, other, x])
    return True


@_on_value()
def gen_cast(b: GraphBuilder, x: str) -> bool:
    (d,) = b.add("Cast", [x], float_out=False, to=TensorProto.DOUBLE)
    if b.rng.random() < 0.5:
        (d,) = b.add("Relu", [d], float_out=False)
    b.add("Cast", [d], to=TensorProto.FLOAT)
    return True


def gen_resize(b: GraphBuilder) -> bool:
    x = b.pick(4)
    if x is None or max(b.shapes[x][2:]) > 6:
        return False
    r = b.rng
    mode = str(r.choice(["nearest", "linear"]))
    scales = b.const(np.array([1, 1, 2, 2], np.float32))
    attrs = {"mode": mode}
    if mode == "linear" and r.random() < 0.5:
        attrs["coordinate_transformation_mode"] = "align_corners"
    b.add("Resize", [x, "", scales], **attrs)
    return True


@_on_value(4)
def gen_pad(b: GraphBuilder, x: str) -> bool:
    h, w = b.shapes[x][2:]
    r = b.rng
    mode = str(r.choice(["constant", "constant", "reflect", "edge"]))
    limit = 2 if mode != "reflect" else min(2, h - 1, w - 1)
    if limit < 1:
        mode, limit = "constant", 2
    p = [0, 0] + [int(r.integers(0, limit + 1)) for _ in range(2)]
    q = [0, 0] + [int(r.integers(0, limit + 1)) for _ in range(2)]
    inputs = [x, b.const(np.array(p + q, np.int64))]
    if mode == "constant" and r.random() < 0.5:
        inputs.append(b.const(np.float32(r.choice([0.5, -1.0]))))
    b.add("Pad", inputs, mode=mode)
    return True


def gen_residual(b: GraphBuilder) -> bool:
    """conv -> bn -> relu -> conv added back to its input (a ResNet block)."""
    x = b.pick(4)
    if x is None:
        return False
    c = b.shapes[x][1]
    (y,) = b.add("Conv", [x, b.weights((c, c, 3, 3), 9 * c)], kernel_shape=[3, 3],
                 pads=[1, 1, 1, 1])  # fmt: skip
    (y,) = b.add("Relu", [y])
    (y,) = b.add("Conv", [y, b.weights((c, c, 1, 1), c), b.const(np.zeros(c, np.float32))],
                 kernel_shape=[1, 1])  # fmt: skip
    b.add("Add", [y, x] if b.rng.random() < 0.5 else [x, y])
    return True


def gen_squeeze_excite(b: GraphBuilder) -> bool:
    """x * sigmoid(fc(relu(fc(mean(x)))))."""
    x = b.pick(4)
    if x is None:
        return False
    c = b.shapes[x][1]
    mid = max(1, c // 4)
    (s,) = b.add("GlobalAveragePool", [x]) if b.rng.random() < 0.5 else b.add(
        "ReduceMean", [x], axes=[2, 3], keepdims=1)  # fmt: skip
    (s,) = b.add("Conv", [s, b.weights((mid, c, 1, 1), c)], kernel_shape=[1, 1])
    (s,) = b.add("Relu", [s])
    (s,) = b.add("Conv", [s, b.weights((c, mid, 1, 1), mid)], kernel_shape=[1, 1])
    (s,) = b.add("Sigmoid", [s]) if b.rng.random() < 0.5 else b.add("HardSigmoid", [s])
    b.add("Mul", [x, s])
    return True


def gen_shuffle(b: GraphBuilder) -> bool:
    """A ShuffleNet channel shuffle: reshape to groups, transpose, reshape back."""
    x = b.pick(4)
    if x is None or b.shapes[x][1] % 2:
        return False
    n, c, h, w = b.shapes[x]
    g = 2 if c % 4 else int(b.rng.choice([2, 4]))
    (y,) = b.add("Reshape", [x, b.const(np.array([n, g, c // g, h, w], np.int64))])
    (y,) = b.add("Transpose", [y], perm=[0, 2, 1, 3, 4])
    b.add("Reshape", [y, b.const(np.array([n, c, h, w], np.int64))])
    return True


def gen_conv_chain(b: GraphBuilder) -> bool:
    """conv -> (activation | batch norm | pool | per-channel op) -> conv: a chain the CPU keeps
    in the blocked NCHWc layout, channel counts that pad (15, 30) among them."""
    x = b.pick(4)
    if x is None or min(b.shapes[x][2:]) < 3:
        return False
    r = b.rng
    c = b.shapes[x][1]
    mid = int(r.choice([8, 15, 16, 24, 30, 32]))
    (y,) = b.add("Conv", [x, b.weights((mid, c, 3, 3), 9 * c)], kernel_shape=[3, 3],
                 pads=[1, 1, 1, 1])  # fmt: skip
    step = str(r.choice(["act", "bn", "pool", "channel", "pad", "resize", "slice", "self"]))
    if step == "pad":  # a value other than 0 (fold_pad_into_conv must keep it)
        pads = b.const(np.array([0, 0, 1, 0, 0, 0, 0, 1], np.int64))
        (y,) = b.add("Pad", [y, pads, b.const(np.float32(r.choice([0.0, 0.5])))])
    elif step == "resize":
        scales = b.const(np.array([1, 1, 2, 2], np.float32))
        (y,) = b.add("Resize", [y, "", scales], mode=str(r.choice(["nearest", "linear"])))
    elif step == "slice":
        ints = [b.const(np.array(v, np.int64)) for v in ([1, 0], [100, -1], [2, 3])]
        (y,) = b.add("Slice", [y, *ints])
    elif step == "self":  # one value read twice by a node, then its channels halved again
        (y,) = b.add("Concat", [y, y], axis=1)
        (y,) = b.add("Split", [y], n_out=2, axis=1)[:1]
    elif step == "act":
        (y,) = b.add(str(r.choice(["Relu", "Sigmoid", "HardSwish"])), [y])
    elif step == "bn":
        gen = [r.uniform(0.5, 1.5, mid), r.uniform(-0.5, 0.5, mid)]
        gen += [r.uniform(-0.5, 0.5, mid), r.uniform(0.5, 2.0, mid)]  # mean, variance
        (y,) = b.add("BatchNormalization", [y, *(b.const(v.astype(np.float32)) for v in gen)])
    elif step == "pool":
        (y,) = b.add(str(r.choice(["MaxPool", "AveragePool"])), [y], kernel_shape=[2, 2],
                     strides=[1, 1], pads=[0, 0, 1, 1])  # fmt: skip
    else:
        values = r.uniform(0.5, 1.5, (mid, 1, 1)).astype(np.float32)
        (y,) = b.add(str(r.choice(["Add", "Mul", "Sub", "Div"])), [y, b.const(values)])
    group = mid if r.random() < 0.3 else 1
    out = mid if group > 1 else int(r.choice([8, 15, 16, 24, 30]))
    b.add("Conv", [y, b.weights((out, mid // group, 3, 3), 9 * mid // group)],
          kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=group)  # fmt: skip
    return True


def gen_dynamic_flatten(b: GraphBuilder) -> bool:
    """PyTorch's export of `x.view(x.size(0), -1)`: Shape -> Gather -> Unsqueeze -> Concat ->
    Reshape, the shape subgraph folded at compile time, its constants as Constant nodes."""
    x = b.pick()
    if x is None or len(b.shapes[x]) < 2:
        return False
    (shape,) = b.add("Shape", [x], float_out=False)
    (zero,) = b.add("Constant", [], float_out=False, value=numpy_helper.from_array(
        np.array(0, np.int64)))  # fmt: skip
    (n,) = b.add("Gather", [shape, zero], float_out=False, axis=0)
    (n,) = b.add("Unsqueeze", [n, b.const(np.array([0], np.int64))], float_out=False)
    (rest,) = b.add("Constant", [], float_out=False, value=numpy_helper.from_array(
        np.array([-1], np.int64)))  # fmt: skip
    (target,) = b.add("Concat", [n, rest], float_out=False, axis=0)
    b.add("Reshape", [x, target])
    return True


def gen_passthrough(b: GraphBuilder) -> bool:
    """Identity or an inference Dropout: nodes the importer removes."""
    x = b.pick()
    if x is None:
        return False
    if b.rng.random() < 0.5:
        b.add("Identity", [x])
    else:
        b.add("Dropout", [x])
    return True


GENERATORS = {
    "conv_chain": (gen_conv_chain, 3),
    "dynamic_flatten": (gen_dynamic_flatten, 1),
    "passthrough": (gen_passthrough, 1),
    "conv": (gen_conv, 6), "batchnorm": (gen_batchnorm, 2), "activation": (gen_activation, 4),
    "pool": (gen_pool, 2), "binary": (gen_binary, 5), "concat": (gen_concat, 3),
    "split": (gen_split, 1), "slice": (gen_slice, 1), "reshape": (gen_reshape, 1),
    "transpose": (gen_transpose, 1), "squeeze": (gen_squeeze, 1), "reduce": (gen_reduce, 1),
    "matmul": (gen_matmul, 1), "softmax": (gen_softmax, 1), "where": (gen_where, 1),
    "cast": (gen_cast, 1), "resize": (gen_resize, 1), "pad": (gen_pad, 1),
    "residual": (gen_residual, 2), "squeeze_excite": (gen_squeeze_excite, 1),
    "shuffle": (gen_shuffle, 1),
}  # fmt: skip


def make_case(seed: int, index: int, max_nodes: int = 30) -> Case:
    """Case `index` of `seed`, the same every time: a DAG of 5 to `max_nodes` nodes."""
    rng = np.random.default_rng([seed, index, max_nodes])
    b = GraphBuilder(rng)
    n = int(rng.choice([1, 1, 2]))
    c = int(rng.choice([1, 3, 4, 8, 12, 15, 16, 17, 24, 30]))
    h, w = int(rng.integers(1, 13)), int(rng.integers(1, 13))
    first = b.graph_input((n, c, h, w))
    if rng.random() < 0.5:
        b.graph_input((n, c, h, w) if rng.random() < 0.5 else (1, c, 1, 1))
    low = 5 if rng.random() < 0.3 else max(5, max_nodes // 2)
    target = int(rng.integers(low, max(low, max_nodes) + 1))
    names = list(GENERATORS)
    weights = np.array([GENERATORS[k][1] for k in names], float)
    tries = 0
    while len(b.nodes) < target and tries < 20 * max_nodes:
        tries += 1
        gen = GENERATORS[names[int(rng.choice(len(names), p=weights / weights.sum()))]][0]
        before = (len(b.nodes), dict(b.consts), list(b.values), dict(b.feed), Counter(b.reads))
        try:
            ok = gen(b)
            if ok and any(not _size_ok(b.shapes[v]) for v in b.values[-2:]):
                ok = False
        except (ValueError, InferenceError):  # onnx rejected the node (a shape the
            ok = False  # generator did not foresee: a Softmax of a scalar)
        if not ok:
            del b.nodes[before[0] :]
            b.consts, b.values, b.feed, b.reads = before[1:]
    return Case(f"{seed}:{index}", b.model(pick_outputs(b, first)), dict(b.feed))


def pick_outputs(b: GraphBuilder, first_input: str) -> list[str]:
    """Every float32 value no node reads, plus now and then a graph input, an initializer, one
    value twice and an intermediate that a later node reads."""
    r = b.rng
    produced = [v for v in b.values if v not in b.feed]
    leaves = [v for v in produced if b.reads[v] == 0]
    outputs = leaves[-4:] or produced[-1:]
    read = [v for v in produced if b.reads[v] > 0]
    if read and r.random() < 0.5:
        outputs.append(read[int(r.integers(len(read)))])
    if r.random() < 0.2:
        outputs.append(first_input)
    floats = [k for k, v in b.consts.items() if v.dtype == np.float32 and v.ndim > 0]
    if floats and r.random() < 0.15:
        outputs.append(floats[int(r.integers(len(floats)))])
    if r.random() < 0.15:
        outputs.append(outputs[0])
    return outputs
