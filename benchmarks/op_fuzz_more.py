"""More case generators of the op fuzzer: selection and scatter ops (TopK, OneHot, GatherND,
ScatterElements, ScatterND), Resize, Einsum, the composite normalizations and the ops that
build constants from sizes (Range, ConstantOfShape, EyeLike) (benchmarks/op_fuzz.py)."""

from __future__ import annotations

import numpy as np
from op_fuzz_cases import ALL, FLOATS, Gen, node, schema_dtypes


def topk(g: Gen, op: str) -> tuple:
    dtype = g.pick(schema_dtypes(op, "T"))
    shape = g.shape(g.pick((1, 2, 3)), zero=0.0)
    axis = g.axis(len(shape))
    n = shape[axis]
    x = g.values(shape, dtype, special=g.coin(0.2), low=-3, high=3)  # ties
    k = np.array([int(g.rng.integers(0, n + 1))], np.int64)
    attrs = {"axis": axis, "largest": int(g.coin(0.7)), "sorted": 1}
    return [node(op, ["x", "k"], ["v", "i"], **attrs)], {"x": x}, ["v", "i"], {"k": k}


def one_hot(g: Gen, op: str) -> tuple:
    depth = g.pick((1, 3, 7, 17))
    shape = g.shape(g.pick((1, 2, 3)), zero=0.1)
    idx = g.rng.integers(-depth - 2, depth + 2, shape).astype(np.int64)
    vdtype = g.pick(("float32", "int64", "int32", "float16", "uint8"))
    values = g.values((2,), vdtype, special=False)
    consts = {"d": np.array(depth, np.int64), "v": values}
    axis = int(g.rng.integers(-len(shape) - 1, len(shape) + 1))
    return [node(op, ["i", "d", "v"], axis=axis)], {"i": np.asarray(idx)}, ["y"], consts


def gather_nd(g: Gen, op: str) -> tuple:
    dtype = g.pick(ALL)
    shape = tuple(g.pick((1, 2, 3, 5)) for _ in range(g.pick((1, 2, 3))))
    batch = g.pick((0, 0, 1)) if len(shape) > 1 else 0
    last = int(g.rng.integers(1, len(shape) - batch + 1))
    ishape = (*shape[:batch], *g.shape(g.pick((0, 1)), zero=0.0), last)
    idx = np.stack(
        [g.rng.integers(-shape[batch + j], shape[batch + j], ishape[:-1]) for j in range(last)],
        axis=-1,
    ).astype(np.int64)
    x = g.values(shape, dtype)
    return [node(op, ["x", "i"], batch_dims=batch)], {"x": x}, ["y"], {"i": idx}


def scatter_elements(g: Gen, op: str) -> tuple:
    dtype = g.pick(FLOATS + ("int32", "int64"))
    shape = g.shape(g.pick((1, 2, 3)), zero=0.0)
    axis = g.axis(len(shape))
    n = shape[axis]
    ishape = [min(d, g.pick((1, 2, d))) for d in shape]
    reduction = g.pick(("none", "add", "mul", "max", "min"))
    if reduction == "none":  # distinct targets: duplicates have no defined order
        ishape[axis] = min(ishape[axis], n)
        perm = np.argsort(g.rng.random((*ishape[:axis], n, *ishape[axis + 1 :])), axis=axis)
        idx = np.take(perm, np.arange(ishape[axis]), axis=axis)
    else:
        idx = g.rng.integers(-n, n, ishape)
    feed = {"x": g.values(shape, dtype, special=False, low=-3, high=3)}
    feed["u"] = g.values(tuple(ishape), dtype, special=False, low=-3, high=3)
    consts = {"i": idx.astype(np.int64)}
    return [node(op, ["x", "i", "u"], axis=axis, reduction=reduction)], feed, ["y"], consts


def scatter_nd(g: Gen, op: str) -> tuple:
    dtype = g.pick(FLOATS + ("int32", "int64", "bool", "uint8"))
    shape = tuple(g.pick((2, 3, 5)) for _ in range(g.pick((1, 2, 3))))
    last = int(g.rng.integers(1, len(shape) + 1))
    cells = list(np.ndindex(*shape[:last]))
    count = int(g.rng.integers(1, len(cells) + 1))
    picked = [cells[i] for i in g.rng.permutation(len(cells))[:count]]  # distinct
    idx = np.array(picked, np.int64).reshape(count, last)
    feed = {"x": g.values(shape, dtype), "u": g.values((count, *shape[last:]), dtype)}
    return [node(op, ["x", "i", "u"])], feed, ["y"], {"i": idx}


def resize(g: Gen, op: str) -> tuple:
    dtype = g.pick(("float32", "float16", "uint8", "int8", "int32"))
    spatial = g.pick((1, 2))
    shape = (1, g.pick((1, 3)), *(g.pick((1, 3, 5, 7)) for _ in range(spatial)))
    x = g.values(shape, dtype, special=False)
    mode = g.pick(("nearest", "linear", "cubic"))
    attrs = {"mode": mode}
    attrs["coordinate_transformation_mode"] = g.pick(
        ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
    )
    if mode == "nearest":
        attrs["nearest_mode"] = g.pick(("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))
    if mode == "cubic" and g.coin():
        attrs["cubic_coeff_a"] = -0.5
    consts = {}
    if g.coin():
        scales = [1.0, 1.0, *(g.pick((0.5, 1.0, 1.5, 2.0, 3.0)) for _ in range(spatial))]
        consts["scales"] = np.array(scales, np.float32)
        inputs = ["x", "", "scales"]
    else:
        sizes = [*shape[:2], *(g.pick((1, 2, 4, 6, 9)) for _ in range(spatial))]
        consts["sizes"] = np.array(sizes, np.int64)
        inputs = ["x", "", "", "sizes"]
    return [node(op, inputs, **attrs)], {"x": x}, ["y"], consts


def einsum(g: Gen, op: str) -> tuple:
    eq, shapes = g.pick(
        (
            ("ij,jk->ik", [(3, 5), (5, 7)]),
            ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
            ("ii->i", [(4, 4)]),
            ("ij->ji", [(3, 17)]),
            ("i,i->", [(13,), (13,)]),
            ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
            ("...ij,...jk", [(2, 3, 4), (4, 2)]),
            ("ij,ij->i", [(3, 5), (3, 5)]),
        )
    )
    dtype = g.pick(("float32", "float64", "int32", "int64"))
    low, high = (-3, 3) if dtype not in FLOATS else (None, None)
    feed = {f"x{i}": g.values(s, dtype, special=False, low=low, high=high)
            for i, s in enumerate(shapes)}  # fmt: skip
    return [node(op, list(feed), equation=eq)], feed, ["y"], {}


def composite_norm(g: Gen, op: str) -> tuple:
    dtype = g.pick(FLOATS) if op != "LRN" else "float32"
    spatial = 2 if op == "LRN" else g.pick((1, 2))  # onnxruntime's LRN takes 4-D only
    shape = (g.pick((1, 2)), g.pick((2, 4, 6)), *g.shape(spatial, zero=0.0))
    x = g.values(shape, dtype, special=False)
    if op == "GroupNormalization":
        groups = g.pick((1, 2))
        consts = {"s": g.values((shape[1],), dtype, special=False),
                  "b": g.values((shape[1],), dtype, special=False)}  # fmt: skip
        attrs = {"num_groups": groups, "epsilon": 1e-3, "stash_type": 1}
        return [node(op, ["x", "s", "b"], **attrs)], {"x": x}, ["y"], consts
    if op == "LpNormalization":
        attrs = {"axis": g.axis(len(shape)), "p": g.pick((1, 2))}
        return [node(op, ["x"], **attrs)], {"x": x}, ["y"], {}
    if op == "LRN":
        attrs = {"size": g.pick((1, 3, 5)), "alpha": 1e-3, "beta": 0.75, "bias": 1.0}
        return [node(op, ["x"], **attrs)], {"x": x}, ["y"], {}
    return [node(op, ["x"], axes=g.pick(([0, 2], [2], [1, 2])))], {"x": x}, ["y"], {}


def sized_constant(g: Gen, op: str) -> tuple:
    """Range, ConstantOfShape, EyeLike: values from sizes, added to an input so they run."""
    if op == "Range":
        dtype = g.pick(("float32", "int32", "int64", "float64", "int16"))
        start, step = g.pick((0, -3, 5)), g.pick((1, 2, -1, 3))
        limit = start + step * g.pick((0, 1, 7, 13))
        consts = {k: np.array(v, dtype) for k, v in (("a", start), ("l", limit), ("d", step))}
        n = [node(op, ["a", "l", "d"], ["r"])]
        size = max(0, -(-(limit - start) // step))
        x = g.values((size,), dtype, special=False)
    elif op == "ConstantOfShape":
        shape = g.shape(g.pick((0, 1, 2)), zero=0.1)
        dtype = g.pick(ALL)
        value = g.values((1,), dtype, special=False)
        from onnx import numpy_helper

        consts = {"s": np.array(shape, np.int64)}
        n = [node(op, ["s"], ["r"], value=numpy_helper.from_array(value))]
        x = g.values(shape, dtype)
    else:
        dtype = g.pick(("float32", "float64", "int32", "int64"))
        shape = (g.pick((1, 3, 4)), g.pick((1, 3, 5)))
        n = [node(op, ["x"], ["r"], k=int(g.rng.integers(-3, 4)))]
        x, consts = g.values(shape, dtype), {}
        if dtype != "bool":
            return [*n, node("Add", ["r", "x"], ["y"])], {"x": x}, ["y"], consts
        return [*n, node("Xor", ["r", "x"], ["y"])], {"x": x}, ["y"], consts
    combine = "Or" if dtype == "bool" else "Add"
    return [*n, node(combine, ["r", "x"], ["y"])], {"x": x}, ["y"], consts


MORE_OPS = {
    "TopK": topk, "OneHot": one_hot, "GatherND": gather_nd,
    "ScatterElements": scatter_elements, "ScatterND": scatter_nd, "Resize": resize,
    "Einsum": einsum, "GroupNormalization": composite_norm, "LpNormalization": composite_norm,
    "LRN": composite_norm, "MeanVarianceNormalization": composite_norm, "Range": sized_constant,
    "ConstantOfShape": sized_constant, "EyeLike": sized_constant,
}  # fmt: skip
