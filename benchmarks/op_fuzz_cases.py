"""Case generators of the differential op fuzzer (benchmarks/op_fuzz.py): small ONNX graphs of one
op, or a short chain, over the dtypes the op's ONNX schema allows, unusual shapes (rank 0, dims
of 1, zero-size dims, odd sizes around the 16-lane vectors, broadcasting in every direction)
and attribute values (negative axes, asymmetric pads, auto_pad, groups, keepdims, ...).

`make_case(op, seed, index)` is deterministic: the same arguments build the same model and
inputs, so a worker process rebuilds a case from its name alone and a finding reproduces from
`op:seed:index`.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

# dtypes the fuzzer feeds (bfloat16, float8 and int4 are another engineer's work: left out)
FLOATS = ("float32", "float16", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
ALL = (*FLOATS, *INTS, "bool")
OPSET = 21
IR_VERSION = 10


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    feed: dict[str, np.ndarray]


def schema_dtypes(op: str, param: str = "T", opset: int = OPSET) -> tuple[str, ...]:
    """The dtypes among ALL that the ONNX schema of `op` allows for type parameter `param`."""
    schema = onnx.defs.get_schema(op, opset, "")
    for c in schema.type_constraints:
        if c.type_param_str == param:
            allowed = {s.removeprefix("tensor(").removesuffix(")") for s in c.allowed_type_strs}
            names = {"double": "float64", "float": "float32", "float16": "float16"}
            allowed = {names.get(a, a) for a in allowed}
            return tuple(d for d in ALL if d in allowed)
    raise KeyError(f"{op} has no type parameter {param!r}")


class Gen:
    """Random choices and values for one case."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def coin(self, p: float = 0.5) -> bool:
        return bool(self.rng.random() < p)

    def shape(self, rank: int | None = None, zero: float = 0.1) -> tuple[int, ...]:
        rank = self.pick((0, 1, 1, 2, 2, 3, 3, 4)) if rank is None else rank
        dims = [int(self.pick((1, 1, 2, 3, 5, 7, 13, 16, 17))) for _ in range(rank)]
        if rank and self.coin(zero):
            dims[int(self.rng.integers(rank))] = 0
        return tuple(dims)

    def values(self, shape, dtype: str, special: bool = True, low=None, high=None) -> np.ndarray:
        """Random values: negative, zero, large; NaN/Inf in floats when `special`."""
        rng = self.rng
        if dtype == "bool":
            return np.asarray(rng.random(shape) < 0.5)
        if dtype in FLOATS:
            lo, hi = (-4.0, 4.0) if low is None else (low, high)
            x = rng.uniform(lo, hi, shape)
            if x.size and self.coin(0.3):
                x.flat[rng.integers(x.size, size=max(1, x.size // 8))] = 0.0
            if x.size and self.coin(0.2) and low is None:
                big = 1e4 if dtype == "float16" else 1e6
                x.flat[rng.integers(x.size)] = self.pick((big, -big))
            if special and x.size and self.coin(0.3):
                idx = rng.integers(x.size, size=max(1, x.size // 6))
                x.flat[idx] = rng.choice([np.nan, np.inf, -np.inf], size=len(idx))
            return np.asarray(x).astype(dtype)
        info = np.iinfo(dtype)
        lo = max(info.min, -100 if low is None else low)
        hi = min(info.max, 100 if high is None else high)
        x = np.asarray(rng.integers(lo, hi, shape, endpoint=True)).astype(dtype)
        if x.size and low is None and self.coin(0.3):  # extremes: wraparound, sign bits
            x.flat[rng.integers(x.size)] = self.pick((info.min, info.max))
        return x

    def broadcast_pair(self, n: int = 2) -> list[tuple[int, ...]]:
        """`n` shapes that broadcast together, each possibly lower-rank or with dims of 1."""
        out = self.shape(self.pick((0, 1, 2, 3, 4)))
        shapes = []
        for _ in range(n):
            dims = list(out)
            if dims and self.coin(0.4):
                dims = dims[int(self.rng.integers(len(dims) + 1)) :]
            dims = [1 if self.coin(0.3) else d for d in dims]
            shapes.append(tuple(dims))
        return shapes

    def axis(self, rank: int) -> int:
        a = int(self.rng.integers(rank)) if rank else 0
        return a - rank if self.coin() else a


def build(
    name: str,
    nodes: list[onnx.NodeProto],
    feed: dict[str, np.ndarray],
    outputs: list[str],
    consts: dict[str, np.ndarray] | None = None,
    opset: int = OPSET,
) -> Case:
    """A model of `nodes` whose graph inputs are `feed` and initializers `consts`."""
    elem = helper.np_dtype_to_tensor_dtype
    inputs = [helper.make_tensor_value_info(k, elem(v.dtype), v.shape) for k, v in feed.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (consts or {}).items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    for i, node in enumerate(nodes):
        node.name = node.name or f"{node.op_type.lower()}_{i}"
    graph = helper.make_graph(nodes, "fuzz", inputs, outs, inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION
    )
    try:  # declare the output element types, as exporters do (not the shapes: where onnx's
        # shape inference and onnxruntime disagree, our importer refuses the declared one)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        for out in inferred.graph.output:
            out.type.tensor_type.ClearField("shape")
        model = inferred
    except Exception:  # noqa: BLE001  (onnxruntime then decides)
        pass
    return Case(name, model, feed)


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs or ["y"], **attrs)


# ---- element-wise -------------------------------------------------------------------------

UNARY = (
    "Abs Neg Relu Exp Log Sqrt Reciprocal Sigmoid Tanh Sin Cos Tan Asin Acos Atan Sinh Cosh "
    "Asinh Acosh Atanh Erf Floor Ceil Round Sign Softplus Softsign Elu Selu Celu LeakyRelu "
    "HardSigmoid HardSwish Mish ThresholdedRelu Shrink Gelu IsNaN IsInf Not BitwiseNot Identity"
).split()


def _unary_attrs(g: Gen, op: str) -> dict:
    if op in ("Elu", "Celu", "LeakyRelu", "ThresholdedRelu") and g.coin():
        return {"alpha": g.pick((0.0, 0.5, 1.5, -0.3))}
    if op == "HardSigmoid" and g.coin():
        return {"alpha": g.pick((0.1, 0.5)), "beta": g.pick((0.2, 0.6))}
    if op == "Shrink" and g.coin():
        return {"bias": g.pick((0.0, 0.5, 2.0)), "lambd": g.pick((0.0, 0.5, 1.5))}
    if op == "Gelu" and g.coin():
        return {"approximate": "tanh"}
    if op == "IsInf" and g.coin():
        return {"detect_negative": int(g.coin()), "detect_positive": int(g.coin())}
    return {}


def unary(g: Gen, op: str) -> tuple:
    param = {"IsNaN": "T1", "IsInf": "T1", "Identity": "V"}.get(op, "T")
    dtype = g.pick(schema_dtypes(op, param))
    # Shrink of an integer near its type's top: onnxruntime rounds x - bias through float32
    low, high = (-1000, 1000) if op == "Shrink" and dtype not in FLOATS else (None, None)
    # Sign of a float16 NaN: onnxruntime gives 0 (NaN in float32 and float64)
    special = not (op == "Sign" and dtype == "float16")
    x = g.values(g.shape(), dtype, special=special, low=low, high=high)
    return [node(op, ["x"], **_unary_attrs(g, op))], {"x": x}, ["y"], {}


BINARY = (
    "Add Sub Mul Div Pow Mod Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor BitShift "
    "BitwiseAnd BitwiseOr BitwiseXor PRelu Max Min Sum Mean"
).split()


def binary(g: Gen, op: str) -> tuple:
    dtype = g.pick(schema_dtypes(op, "T"))
    count = g.pick((1, 2, 3)) if op in ("Max", "Min", "Sum", "Mean") else 2
    shapes = g.broadcast_pair(count)
    if op == "PRelu":  # the slope broadcasts to X (unidirectionally)
        shapes[0] = tuple(max(a, b) for a, b in zip(shapes[0], shapes[1], strict=False))
        shapes[0] = shapes[0] if len(shapes[0]) >= len(shapes[1]) else shapes[1]
    names = [f"x{i}" for i in range(count)]
    feed = {n: g.values(s, dtype) for n, s in zip(names, shapes, strict=True)}
    attrs = {}
    if op == "Pow":
        feed["x1"] = g.values(shapes[1], g.pick(schema_dtypes(op, "T1")), low=-3, high=3)
        if dtype not in FLOATS:
            feed["x0"] = g.values(shapes[0], dtype, low=-9, high=9)
    if op in ("Div", "Mod") and dtype not in FLOATS:
        feed["x1"][feed["x1"] == 0] = 1  # integer division by zero is undefined
    if op == "Mod":
        attrs["fmod"] = 1 if dtype in FLOATS else int(g.coin())
    if op == "BitShift":
        attrs["direction"] = g.pick(("LEFT", "RIGHT"))
        feed["x1"] = g.values(shapes[1], dtype, low=0, high=np.iinfo(dtype).bits - 1)
    return [node(op, names, **attrs)], feed, ["y"], {}


def where(g: Gen, op: str) -> tuple:
    dtype = g.pick(schema_dtypes(op, "T"))
    sc, sx, sy = g.broadcast_pair(3)
    feed = {"c": g.values(sc, "bool"), "x": g.values(sx, dtype), "z": g.values(sy, dtype)}
    return [node("Where", ["c", "x", "z"])], feed, ["y"], {}


def clip(g: Gen, op: str) -> tuple:
    dtype = g.pick(schema_dtypes(op, "T"))
    feed = {"x": g.values(g.shape(), dtype)}
    consts = {}
    inputs = ["x", "", ""]
    lo, hi = sorted(g.values((2,), dtype, special=False).tolist())
    if g.coin(0.7):
        consts["lo"], inputs[1] = np.array(lo, dtype), "lo"
    if g.coin(0.7):
        consts["hi"], inputs[2] = np.array(hi, dtype), "hi"
    while inputs and not inputs[-1]:
        inputs.pop()
    return [node("Clip", inputs)], feed, ["y"], consts


def cast(g: Gen, op: str) -> tuple:
    src, dst = g.pick(ALL), g.pick(ALL)
    x = g.values(g.shape(), src, special=dst in FLOATS)
    if src in FLOATS and dst not in FLOATS and dst != "bool":  # out of range is undefined
        info = np.iinfo(dst)
        x = np.clip(np.nan_to_num(x), max(info.min, -1e4), min(info.max, 6e4)).astype(src)
    if op == "CastLike":
        like = np.zeros((), dst)
        return [node("CastLike", ["x", "like"])], {"x": x}, ["y"], {"like": like}
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    return [node("Cast", ["x"], to=to)], {"x": x}, ["y"], {}


# ---- reductions -----------------------------------------------------------------------------

REDUCE = (
    "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
    "ReduceLogSumExp ReduceSumSquare"
).split()


def reduce(g: Gen, op: str) -> tuple:
    dtype = g.pick(schema_dtypes(op, "T"))
    shape = g.shape(g.pick((1, 2, 3, 4)), zero=0.05)
    special = op in ("ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean") and g.coin(0.3)
    low, high = (-3, 3) if op in ("ReduceProd", "ReduceLogSumExp") else (None, None)
    if dtype not in FLOATS and low is None:  # no overflow: onnxruntime's wraps differ
        low, high = -100, 100
    if op in ("ReduceLogSum",):
        low, high = (0.1, 4) if dtype in FLOATS else (1, 9)
    x = g.values(shape, dtype, special=special, low=low, high=high)
    attrs = {"keepdims": int(g.coin())}
    inputs, consts = ["x"], {}
    if g.coin(0.8) and shape:
        k = int(g.rng.integers(1, len(shape) + 1))
        axes = sorted(g.rng.choice(len(shape), k, replace=False).tolist())
        consts["axes"] = np.array([a - len(shape) if g.coin() else a for a in axes], np.int64)
        inputs.append("axes")
    elif g.coin():
        attrs["noop_with_empty_axes"] = 1
        if g.coin():
            consts["axes"], inputs = np.zeros((0,), np.int64), ["x", "axes"]
    return [node(op, inputs, **attrs)], {"x": x}, ["y"], consts


def argmax(g: Gen, op: str) -> tuple:
    dtype = g.pick(schema_dtypes(op, "T"))
    shape = g.shape(g.pick((1, 2, 3)), zero=0.0)
    x = g.values(shape, dtype, special=g.coin(0.2), low=-2, high=2)  # ties
    attrs = {"axis": g.axis(len(shape)), "keepdims": int(g.coin()),
             "select_last_index": int(g.coin())}  # fmt: skip
    return [node(op, ["x"], **attrs)], {"x": x}, ["y"], {}


def softmax(g: Gen, op: str) -> tuple:
    dtype = g.pick(FLOATS)
    shape = g.shape(g.pick((1, 2, 3, 4)), zero=0.05)
    # NaN in Hardmax: onnxruntime's vector lanes decide (docs/graph.md), not followed
    x = g.values(shape, dtype, special=g.coin(0.2) and op != "Hardmax")
    return [node(op, ["x"], axis=g.axis(len(shape)))], {"x": x}, ["y"], {}


def cumsum(g: Gen, op: str) -> tuple:
    dtype = g.pick(schema_dtypes(op, "T"))
    shape = g.shape(g.pick((1, 2, 3)), zero=0.05)
    x = g.values(shape, dtype, special=False)
    consts = {"axis": np.array(g.axis(len(shape)), g.pick((np.int32, np.int64)))}
    attrs = {"exclusive": int(g.coin()), "reverse": int(g.coin())}
    return [node(op, ["x", "axis"], **attrs)], {"x": x}, ["y"], consts


def pick_family() -> dict[str, Callable]:
    from op_fuzz_more import MORE_OPS
    from op_fuzz_nn import NN_OPS
    from op_fuzz_shape import SHAPE_OPS

    table: dict[str, Callable] = {op: unary for op in UNARY}
    table.update({op: binary for op in BINARY})
    table.update({op: reduce for op in REDUCE})
    table.update(
        Where=where, Clip=clip, Cast=cast, CastLike=cast, ArgMax=argmax, ArgMin=argmax,
        Softmax=softmax, LogSoftmax=softmax, Hardmax=softmax, CumSum=cumsum,
    )  # fmt: skip
    table.update(SHAPE_OPS)
    table.update(NN_OPS)
    table.update(MORE_OPS)
    return table


def make_case(op: str, seed: int, index: int) -> Case:
    """Case `index` of `op` for `seed`, the same every time."""
    rng = np.random.default_rng([seed, zlib.crc32(op.encode()), index])
    nodes, feed, outputs, consts = pick_family()[op](Gen(rng), op)
    return build(f"{op}:{seed}:{index}", nodes, feed, outputs, consts)
