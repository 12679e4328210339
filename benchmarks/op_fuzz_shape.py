"""Data-movement case generators of the op fuzzer: Transpose, Reshape, Concat, Slice, Gather,
Pad, Split, Expand, Tile, ... over every dtype, with negative axes and indices, zero-size pieces
and steps (benchmarks/op_fuzz.py)."""

from __future__ import annotations

import numpy as np
from op_fuzz_cases import ALL, Gen, node


def _x(g: Gen, rank=None, zero=0.1) -> tuple[np.ndarray, str]:
    dtype = g.pick(ALL)
    return g.values(g.shape(rank, zero=zero), dtype), dtype


def transpose(g: Gen, op: str) -> tuple:
    x, _ = _x(g, g.pick((1, 2, 3, 4)))
    attrs = {} if g.coin(0.2) else {"perm": g.rng.permutation(x.ndim).tolist()}
    return [node(op, ["x"], **attrs)], {"x": x}, ["y"], {}


def reshape(g: Gen, op: str) -> tuple:
    x, _ = _x(g, zero=0.05)
    dims = list(x.shape)
    g.rng.shuffle(dims)
    if dims and g.coin(0.4):  # merge two neighbours
        i = int(g.rng.integers(len(dims)))
        dims[i : i + 2] = [int(np.prod(dims[i : i + 2]))]
    if g.coin(0.3):
        dims.insert(int(g.rng.integers(len(dims) + 1)), 1)
    if dims and x.size and g.coin(0.5):
        dims[int(g.rng.integers(len(dims)))] = -1
    attrs = {}
    shape = np.array(dims, np.int64)
    if x.ndim and len(dims) >= x.ndim and g.coin(0.3) and -1 not in dims:  # 0 copies the dim
        keep = [i for i in range(x.ndim) if shape[i] == x.shape[i]]
        if keep:
            shape[keep[0]] = 0
    elif 0 in dims and -1 not in dims and g.coin():
        attrs["allowzero"] = 1
    if int(np.prod([d for d in dims if d > 0] or [1])) == 0 and -1 in dims:
        shape[shape == -1] = 1
    return [node(op, ["x", "shape"], **attrs)], {"x": x}, ["y"], {"shape": shape}


def flatten(g: Gen, op: str) -> tuple:
    x, _ = _x(g, g.pick((1, 2, 3, 4)))
    axis = int(g.rng.integers(-x.ndim, x.ndim + 1))
    return [node(op, ["x"], axis=axis)], {"x": x}, ["y"], {}


def squeeze(g: Gen, op: str) -> tuple:
    x, _ = _x(g, g.pick((1, 2, 3, 4)))
    if op == "Unsqueeze":
        k = g.pick((1, 2))
        out_rank = x.ndim + k
        axes = g.rng.choice(out_rank, k, replace=False)
        axes = np.array([a - out_rank if g.coin() else a for a in axes], np.int64)
        return [node(op, ["x", "axes"])], {"x": x}, ["y"], {"axes": axes}
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if not ones or g.coin(0.2):
        return [node(op, ["x"])], {"x": x}, ["y"], {}
    axes = np.array([a - x.ndim if g.coin() else a for a in ones], np.int64)
    return [node(op, ["x", "axes"])], {"x": x}, ["y"], {"axes": axes}


def concat(g: Gen, op: str) -> tuple:
    dtype = g.pick(ALL)
    shape = g.shape(g.pick((1, 2, 3, 4)), zero=0.0)
    axis = g.axis(len(shape))
    feed = {}
    for i in range(g.pick((1, 2, 3))):
        s = list(shape)
        s[axis] = g.pick((0, 1, 2, 5, 17))
        feed[f"x{i}"] = g.values(tuple(s), dtype)
    return [node(op, list(feed), axis=axis)], feed, ["y"], {}


def slice_(g: Gen, op: str) -> tuple:
    x, _ = _x(g, g.pick((1, 2, 3)), zero=0.05)
    k = int(g.rng.integers(1, x.ndim + 1))
    axes = g.rng.choice(x.ndim, k, replace=False)
    starts, ends, steps = [], [], []
    for a in axes:
        n = x.shape[a]
        step = g.pick((1, 1, 2, 3, -1, -2))
        big = np.iinfo(np.int64).max
        s = int(g.rng.integers(-n - 2, n + 3))
        e = g.pick((int(g.rng.integers(-n - 2, n + 3)), big, -big))
        starts.append(s)
        ends.append(e)
        steps.append(step)
    consts = {
        "starts": np.array(starts, np.int64),
        "ends": np.array(ends, np.int64),
        "axes": np.array([a - x.ndim if g.coin() else a for a in axes], np.int64),
        "steps": np.array(steps, np.int64),
    }
    return [node(op, ["x", *consts])], {"x": x}, ["y"], consts


def gather(g: Gen, op: str) -> tuple:
    x, _ = _x(g, g.pick((1, 2, 3)), zero=0.0)
    axis = g.axis(x.ndim)
    n = x.shape[axis]
    ishape = g.shape(g.pick((0, 1, 2)), zero=0.1)
    idx = g.rng.integers(-n, n, ishape).astype(g.pick((np.int32, np.int64)))
    if op == "GatherElements":
        ishape = list(x.shape)
        ishape[axis] = g.pick((1, 2, 3))
        idx = g.rng.integers(-n, n, ishape).astype(np.int64)
    consts, feed = {}, {"x": x}
    if g.coin():
        consts["i"] = idx
    else:
        feed["i"] = idx
    return [node(op, ["x", "i"], axis=axis)], feed, ["y"], consts


def expand(g: Gen, op: str) -> tuple:
    s_in, s_out = g.broadcast_pair(2)
    x = g.values(s_in, g.pick(ALL))
    if g.coin(0.3) and s_out:  # the shape may be shorter than the input or hold 1s
        s_out = s_out[1:]
    return [node(op, ["x", "shape"])], {"x": x}, ["y"], {"shape": np.array(s_out, np.int64)}


def tile(g: Gen, op: str) -> tuple:
    x, _ = _x(g, g.pick((1, 2, 3)))
    reps = np.array([g.pick((0, 1, 1, 2, 3)) for _ in range(x.ndim)], np.int64)
    return [node(op, ["x", "reps"])], {"x": x}, ["y"], {"reps": reps}


def pad(g: Gen, op: str) -> tuple:
    dtype = g.pick(ALL)
    mode = g.pick(("constant", "constant", "reflect", "edge", "wrap"))
    shape = g.shape(g.pick((1, 2, 3, 4)), zero=0.0 if mode != "constant" else 0.1)
    x = g.values(shape, dtype)
    lim = [max(0, d - 1) if mode == "reflect" else d if mode == "wrap" else 3 for d in shape]
    pads = [int(g.rng.integers(0, lim[i] + 1)) for i in range(len(shape))] * 2
    if mode == "constant":
        pads = [p - int(g.coin(0.2)) if p > 0 else p for p in pads]  # negative pads crop
    consts = {"pads": np.array(pads, np.int64)}
    inputs = ["x", "pads"]
    if mode == "constant" and g.coin():
        consts["v"] = g.values((), dtype, special=False)
        inputs.append("v")
    return [node(op, inputs, mode=mode)], {"x": x}, ["y"], consts


def split(g: Gen, op: str) -> tuple:
    x, _ = _x(g, g.pick((1, 2, 3)), zero=0.0)
    axis = g.axis(x.ndim)
    n = x.shape[axis]
    count = g.pick((1, 2, 3))
    if g.coin() and n >= count:
        attrs, inputs, consts = {"num_outputs": count}, ["x"], {}
    else:
        cuts = np.sort(g.rng.integers(0, n + 1, count - 1))
        sizes = np.diff([0, *cuts, n]).astype(np.int64)
        attrs, inputs, consts = {}, ["x", "split"], {"split": sizes}
    outs = [f"y{i}" for i in range(count)]
    return [node(op, inputs, outs, axis=axis, **attrs)], {"x": x}, outs, consts


def trilu(g: Gen, op: str) -> tuple:
    x, _ = _x(g, g.pick((2, 3)))
    consts = {"k": np.array(int(g.rng.integers(-4, 5)), np.int64)}
    return [node(op, ["x", "k"], upper=int(g.coin()))], {"x": x}, ["y"], consts


def depth_to_space(g: Gen, op: str) -> tuple:
    b = g.pick((1, 2, 3))
    c = g.pick((1, 2, 3)) * (b * b if op == "DepthToSpace" else 1)
    h, w = (g.pick((1, 2, 5)) * (b if op == "SpaceToDepth" else 1) for _ in range(2))
    x = g.values((g.pick((1, 2)), c, h, w), g.pick(ALL))
    attrs = {"blocksize": b}
    if op == "DepthToSpace":
        attrs["mode"] = g.pick(("DCR", "CRD"))
    return [node(op, ["x"], **attrs)], {"x": x}, ["y"], {}


def shape_op(g: Gen, op: str) -> tuple:
    x, _ = _x(g)
    attrs = {}
    if op == "Shape" and g.coin():
        attrs = {"start": int(g.rng.integers(-5, 5)), "end": int(g.rng.integers(-5, 5))}
    return [node(op, ["x"], **attrs)], {"x": x}, ["y"], {}


def chain_movement(g: Gen, op: str) -> tuple:
    """Transpose/Reshape/Slice/Concat/Cast chains: what exporters write around attention."""
    dtype = g.pick(("float32", "float16", "int64", "int32", "uint8", "bool"))
    x = g.values((2, 3, g.pick((4, 6)), 5), dtype)
    n = [node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3])]
    n.append(node("Reshape", ["t", "s"], ["r"]))
    consts = {"s": np.array([2, -1, 5], np.int64)}
    consts.update(st=np.array([-1], np.int64), en=np.array([-100], np.int64),
                  ax=np.array([-2], np.int64), sp=np.array([-2], np.int64))  # fmt: skip
    n.append(node("Slice", ["r", "st", "en", "ax", "sp"], ["sl"]))
    n.append(node("Concat", ["sl", "r"], ["c"], axis=-2))
    if g.coin():
        n.append(node("Cast", ["c"], ["y"], to=1))
    else:
        n.append(node("Transpose", ["c"], ["y"], perm=[2, 0, 1]))
    return n, {"x": x}, ["y"], consts


def chain_broadcast_reduce(g: Gen, op: str) -> tuple:
    """A reduction after a broadcast and a Cast in between."""
    # not float16: onnxruntime drops the float16 rounding of a product cast to float32
    dtype = g.pick(("float32", "float64", "int32", "int64"))
    a, b = g.broadcast_pair(2)
    if not a and not b:
        a = (3, 1)
    feed = {"a": g.values(a, dtype, special=False), "b": g.values(b, dtype, special=False)}
    rank = max(len(a), len(b))
    axes = np.array([g.axis(rank)], np.int64)
    n = [node("Mul", ["a", "b"], ["m"]), node("Cast", ["m"], ["c"], to=1)]
    reducer = g.pick(("ReduceSum", "ReduceMax", "ReduceMean"))
    n.append(node(reducer, ["c", "axes"], ["y"], keepdims=int(g.coin())))
    return n, feed, ["y"], {"axes": axes}


SHAPE_OPS = {
    "Transpose": transpose, "Reshape": reshape, "Flatten": flatten, "Squeeze": squeeze,
    "Unsqueeze": squeeze, "Concat": concat, "Slice": slice_, "Gather": gather,
    "GatherElements": gather, "Expand": expand, "Tile": tile, "Pad": pad, "Split": split,
    "Trilu": trilu, "DepthToSpace": depth_to_space, "SpaceToDepth": depth_to_space,
    "Shape": shape_op, "Size": shape_op, "chain:movement": chain_movement,
    "chain:broadcast_reduce": chain_broadcast_reduce,
}  # fmt: skip
