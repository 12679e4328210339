"""The reference interpreter of the loop IR: runs a `PrimFunc` on numpy arrays.

The IR is compiled once into nested Python closures, then run. Integers wrap exactly at their
width; floats are computed in double precision and rounded to the buffer's dtype when stored
(float32 and float16 rounding are exact, only intermediate values are more precise). Reads and
writes are bounds-checked and `select` evaluates both branches, so a schedule that reads out of
bounds fails here instead of silently succeeding. Works before and after storage_flatten.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from operator import itemgetter
from typing import Any

import numpy as np

from ..te import dtype as dt
from ..te.expr import (
    DOT_INTRINSICS,
    INT_INTRINSICS,
    BinOp,
    Call,
    CallKind,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Op,
    Select,
    Var,
)
from .gpu import BARRIER, is_block_root, is_shared, is_thread_loop
from .interp_gpu import _BlockCompiler
from .stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferLoad,
    BufferPtr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
)

Env = list[Any]
Fn = Callable[[Env], Any]

# name -> Python implementation of an extern call, for tensor intrinsics in tests
EXTERN_FUNCS: dict[str, Callable[..., Any]] = {}


class InterpretError(Exception):
    """The program failed at run time (out-of-bounds access, division by zero, ...)."""


def register_extern(name: str, fn: Callable[..., Any]) -> None:
    """Give the interpreter a Python implementation of extern call `name`."""
    EXTERN_FUNCS[name] = fn


def _safe(fn: Callable[..., float]) -> Callable[..., float]:
    def call(*args: float) -> float:
        try:
            return fn(*args)
        except OverflowError:
            return math.inf
        except (ValueError, ZeroDivisionError):
            return math.nan

    return call


_MATH: dict[str, Callable[..., float]] = {
    "exp": _safe(math.exp),
    "exp2": _safe(lambda x: 2.0**x),
    "log": _safe(lambda x: -math.inf if x == 0 else math.log(x)),
    "log2": _safe(lambda x: -math.inf if x == 0 else math.log2(x)),
    "log1p": _safe(math.log1p),
    "sqrt": _safe(math.sqrt),
    "rsqrt": _safe(lambda x: math.inf if x == 0 else 1.0 / math.sqrt(x)),
    "tanh": math.tanh,
    "sigmoid": _safe(lambda x: 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0),
    "erf": math.erf,
    "sin": _safe(math.sin),
    "cos": _safe(math.cos),
    "tan": _safe(math.tan),
    "asin": _safe(math.asin),
    "acos": _safe(math.acos),
    "atan": _safe(math.atan),
    "sinh": _safe(math.sinh),
    "cosh": _safe(math.cosh),
    "asinh": _safe(math.asinh),
    "acosh": _safe(math.acosh),
    "atanh": _safe(math.atanh),
    "floor": _safe(lambda x: float(math.floor(x))),
    "ceil": _safe(lambda x: float(math.ceil(x))),
    "round": _safe(lambda x: float(np.round(x))),
    "trunc": _safe(lambda x: float(math.trunc(x))),
    "fmod": _safe(math.fmod),
    "pow": _safe(math.pow),
}


def _reinterpret(e: Call, fx: Fn) -> Fn:
    """The operand's bits, in its dtype, read as the call's."""
    src, dst = e.args[0].dtype, e.dtype
    return lambda env: np.array(fx(env), src).view(dst).item()


def _dot(e: Call, fa: Fn, fb: Fn) -> Fn:
    """`dot_i16x2` / `dot_u8i8x4`: the words' int16 halves (bytes: `a`'s unsigned, `b`'s
    signed) multiplied lane by lane and summed, wrapping at int32."""
    pairs = e.name == "dot_i16x2"
    a_dt, b_dt = ("<i2", "<i2") if pairs else ("u1", "i1")  # the low half (byte) first

    def run(env: Env) -> int:
        a = np.array([fa(env)], "<i4").view(a_dt).astype(np.int64)
        b = np.array([fb(env)], "<i4").view(b_dt).astype(np.int64)
        return dt.wrap_int(int((a * b).sum()), "int32")

    return run


def _shift(e: Call, fx: Fn, fn: Fn) -> Fn:
    """shift_left wraps at the dtype's width; shift_right on Python ints is arithmetic (and
    logical for the non-negative values of unsigned dtypes)."""
    width, dtype, left = dt.bits(e.dtype), e.dtype, e.name == "shift_left"

    def run(env: Env) -> int:
        x, n = fx(env), fn(env)
        if not 0 <= n < width:
            raise InterpretError(f"{e.name} amount must be in [0, {width}), not {n}")
        return dt.wrap_int(x << n, dtype) if left else x >> n

    return run


def _rounder(dtype: str) -> Callable[[Any], Any] | None:
    """Conversion of a Python value to what a `dtype` buffer holds (None: unchanged)."""
    if dtype == "float32":
        cell = array("f", [0.0])

        def to_f32(x: float) -> float:
            cell[0] = x
            return cell[0]

        return to_f32
    if dtype == "float16":
        return lambda x: float(np.float16(x))
    return None


def _fdiv(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:
        if a == 0 or a != a:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _int_div(a: int, b: int) -> int:
    if b == 0:
        raise InterpretError("integer division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _checked(op: Callable[[int, int], int]) -> Callable[[int, int], int]:
    def run(a: int, b: int) -> int:
        if b == 0:
            raise InterpretError("integer division by zero")
        return op(a, b)

    return run


_INT_OPS: dict[Op, Callable[[Any, Any], Any]] = {
    Op.ADD: lambda a, b: a + b,
    Op.SUB: lambda a, b: a - b,
    Op.MUL: lambda a, b: a * b,
    Op.DIV: _int_div,
    Op.FLOORDIV: _checked(lambda a, b: a // b),
    Op.FLOORMOD: _checked(lambda a, b: a % b),
    Op.MIN: min,
    Op.MAX: max,
}
_FLOAT_OPS: dict[Op, Callable[[Any, Any], Any]] = {
    **_INT_OPS,
    Op.DIV: _fdiv,
    Op.FLOORDIV: lambda a, b: float(math.floor(_fdiv(a, b))),
    Op.FLOORMOD: lambda a, b: a - math.floor(_fdiv(a, b)) * b if b else math.nan,
}
# bitwise operators of two integers of one dtype: the result stays in the dtype's range
_BIT_OPS: dict[Op, Callable[[int, int], int]] = {
    Op.BIT_AND: lambda a, b: a & b,
    Op.BIT_OR: lambda a, b: a | b,
    Op.BIT_XOR: lambda a, b: a ^ b,
}
_CMP_OPS: dict[Op, Callable[[Any, Any], bool]] = {
    Op.EQ: lambda a, b: a == b,
    Op.NE: lambda a, b: a != b,
    Op.LT: lambda a, b: a < b,
    Op.LE: lambda a, b: a <= b,
    Op.GT: lambda a, b: a > b,
    Op.GE: lambda a, b: a >= b,
}


class Pointer:
    """What a `BufferPtr` evaluates to in the interpreter: a window on a buffer for extern
    implementations (`tir.register_extern`)."""

    def __init__(self, data: list[Any], offset: int, extent: int, mask: str, buf: Buffer) -> None:
        if offset < 0 or offset + extent > len(data):
            raise InterpretError(
                f"access_ptr of {buf.name} [{offset}, {offset + extent}) is out of bounds "
                f"(size {len(data)})"
            )
        self.data, self.offset, self.extent, self.mask, self.buffer = (
            data,
            offset,
            extent,
            mask,
            buf,
        )

    def read(self) -> np.ndarray:
        """The elements as a 1-D array (a copy)."""
        if "r" not in self.mask:
            raise InterpretError(f"access_ptr of {self.buffer.name} is write-only")
        return np.asarray(self.data[self.offset : self.offset + self.extent], self.buffer.dtype)

    def write(self, values: Any) -> None:
        """Store `values` (flattened, at most `extent` of them) from the first element on."""
        if "w" not in self.mask:
            raise InterpretError(f"access_ptr of {self.buffer.name} is read-only")
        flat = np.asarray(values, self.buffer.dtype).reshape(-1)
        if flat.size > self.extent:
            raise InterpretError(
                f"write of {flat.size} elements through an access_ptr of {self.extent}"
            )
        self.data[self.offset : self.offset + flat.size] = flat.tolist()


class _Compiler(_BlockCompiler):
    def __init__(self) -> None:
        self.slots: dict[int, int] = {}  # id(Var or Buffer) -> env slot
        self.keep: list[Any] = []  # keeps ids stable
        self.threads: dict[str, int] | None = None  # thread tag -> slot of the thread's index

    def slot(self, node: Any) -> int:
        key = id(node)
        if key not in self.slots:
            self.slots[key] = len(self.slots)
            self.keep.append(node)
        return self.slots[key]

    # ---- expressions ----------------------------------------------------------------------

    def expr(self, e: Expr) -> Fn:
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise InterpretError(f"cannot interpret expression node {type(e).__name__}")
        return method(e)

    def expr_IntImm(self, e: IntImm) -> Fn:
        value: Any = bool(e.value) if dt.is_bool(e.dtype) else e.value
        return lambda env: value

    def expr_FloatImm(self, e: FloatImm) -> Fn:
        value = e.value
        return lambda env: value

    def expr_Var(self, e: Var) -> Fn:
        return itemgetter(self.slot(e))

    def expr_BinOp(self, e: BinOp) -> Fn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        if e.op is Op.AND:
            return lambda env: fa(env) and fb(env)
        if e.op is Op.OR:
            return lambda env: fa(env) or fb(env)
        if e.op in _CMP_OPS:
            cmp = _CMP_OPS[e.op]
            return lambda env: cmp(fa(env), fb(env))
        if e.op in (Op.SHL, Op.SHR):  # numpy's at every amount (`dt.shift_int`)
            left, dtype, shift = e.op is Op.SHL, e.dtype, dt.shift_int
            return lambda env: shift(fa(env), fb(env), dtype, left)
        if e.op in _BIT_OPS:
            bop = _BIT_OPS[e.op]
            return lambda env: bop(fa(env), fb(env))
        if dt.is_float(e.dtype):
            fop = _FLOAT_OPS[e.op]
            return lambda env: fop(fa(env), fb(env))
        iop = _INT_OPS[e.op]
        if dt.is_bool(e.dtype):
            return lambda env: bool(iop(fa(env), fb(env)))
        lo, hi, dtype = dt.min_value(e.dtype), dt.max_value(e.dtype), e.dtype
        wrap = dt.wrap_int

        def run(env: Env) -> int:
            r = iop(fa(env), fb(env))
            return r if lo <= r <= hi else wrap(r, dtype)

        return run

    def expr_Not(self, e: Not) -> Fn:
        fa = self.expr(e.a)
        return lambda env: not fa(env)

    def expr_Select(self, e: Select) -> Fn:
        fc, ft, ff = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)

        def run(env: Env) -> Any:
            t, f = ft(env), ff(env)  # both branches are evaluated, as back-ends may
            return t if fc(env) else f

        return run

    def expr_Cast(self, e: Cast) -> Fn:
        fv, src, dst = self.expr(e.value), e.value.dtype, e.dtype
        if dt.is_bool(dst):
            return lambda env: bool(fv(env))
        if dt.is_float(dst):
            rnd = _rounder(dst) or (lambda x: x)
            return lambda env: rnd(float(fv(env)))
        wrap = dt.wrap_int

        def to_int(env: Env) -> int:
            x = fv(env)
            if dt.is_float(src):
                if not math.isfinite(x):
                    raise InterpretError(f"cast of {x} to {dst}")
                x = math.trunc(x)
            return wrap(int(x), dst)

        return to_int

    def expr_Call(self, e: Call) -> Fn:
        args = [self.expr(a) for a in e.args]
        if e.name == "if_then_else":
            fc, ft, ff = args
            return lambda env: ft(env) if fc(env) else ff(env)
        if e.kind is CallKind.PURE and e.name in INT_INTRINSICS:
            return _shift(e, *args)
        if e.kind is CallKind.PURE and e.name == "reinterpret":
            return _reinterpret(e, *args)
        if e.kind is CallKind.PURE and e.name in DOT_INTRINSICS:
            return _dot(e, *args)
        if e.kind is CallKind.PURE:
            fn = _MATH.get(e.name)
            if fn is None:
                raise InterpretError(f"unknown math intrinsic {e.name!r}")
            if len(args) == 1:
                (fa,) = args
                return lambda env: fn(fa(env))
            return lambda env: fn(*(f(env) for f in args))
        if e.name == BARRIER:  # a single thread never waits; blocks run barriers in _gen
            return lambda env: 0
        ext = EXTERN_FUNCS.get(e.name)
        if ext is None:
            raise InterpretError(
                f"no interpreter implementation of extern {e.name!r}; add one with "
                "tir.register_extern"
            )
        return lambda env: ext(*(f(env) for f in args))

    def _index(self, buf: Buffer, indices: tuple[Expr, ...]) -> Fn:
        fns = [self.expr(i) for i in indices]
        shape, name = buf.shape, buf.name
        if len(fns) == 1:
            (fi,) = fns
            size = shape[0]

            def flat(env: Env) -> int:
                i = fi(env)
                if not 0 <= i < size:
                    raise InterpretError(f"{name}[{i}] is out of bounds (size {size})")
                return i

            return flat
        strides = [int(np.prod(shape[k + 1 :])) for k in range(len(shape))]

        def multi(env: Env) -> int:
            offset = 0
            for f, n, stride in zip(fns, shape, strides, strict=True):
                i = f(env)
                if not 0 <= i < n:
                    idx = [g(env) for g in fns]
                    raise InterpretError(f"{name}{idx} is out of bounds (shape {list(shape)})")
                offset += i * stride
            return offset

        return multi

    def expr_BufferPtr(self, e: BufferPtr) -> Fn:
        offset, slot, buf = self.expr(e.offset), self.slot(e.buffer), e.buffer
        return lambda env: Pointer(env[slot], offset(env), e.extent, e.mask, buf)

    def expr_BufferLoad(self, e: BufferLoad) -> Fn:
        index, slot = self._index(e.buffer, e.indices), self.slot(e.buffer)
        return lambda env: env[slot][index(env)]

    # ---- statements -----------------------------------------------------------------------

    def stmt(self, s: Stmt) -> Fn:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise InterpretError(f"cannot interpret statement {type(s).__name__}")
        return method(s)

    def stmt_For(self, s: For) -> Fn:
        if self.threads is not None and is_thread_loop(s):
            return self._thread_loop(s, self.stmt(s.body))
        if self.threads is None and is_block_root(s, False):
            return self._block(s)
        fmin, fext, body, slot = (
            self.expr(s.min),
            self.expr(s.extent),
            self.stmt(s.body),
            self.slot(s.var),
        )

        def run(env: Env) -> None:
            lo = fmin(env)
            for v in range(lo, lo + fext(env)):
                env[slot] = v
                body(env)

        return run

    def stmt_BufferStore(self, s: BufferStore) -> Fn:
        index, value, slot = (
            self._index(s.buffer, s.indices),
            self.expr(s.value),
            self.slot(s.buffer),
        )
        rnd = _rounder(s.buffer.dtype)
        if rnd is None:

            def store(env: Env) -> None:
                env[slot][index(env)] = value(env)

            return store

        def store_rounded(env: Env) -> None:
            env[slot][index(env)] = rnd(value(env))

        return store_rounded

    def stmt_IfThenElse(self, s: IfThenElse) -> Fn:
        cond, then_case = self.expr(s.condition), self.stmt(s.then_case)
        else_case = self.stmt(s.else_case) if s.else_case is not None else None

        def run(env: Env) -> None:
            if cond(env):
                then_case(env)
            elif else_case is not None:
                else_case(env)

        return run

    def stmt_SeqStmt(self, s: SeqStmt) -> Fn:
        fns = [self.stmt(c) for c in s.stmts]

        def run(env: Env) -> None:
            for fn in fns:
                fn(env)

        return run

    def stmt_Allocate(self, s: Allocate) -> Fn:
        if self.threads is not None and is_shared(s.buffer):
            return self.stmt(s.body)  # allocated once per block by _block
        body, slot, size = self.stmt(s.body), self.slot(s.buffer), s.buffer.size
        poison = _poison(s.buffer.dtype)

        def run(env: Env) -> None:
            env[slot] = [poison] * size  # uninitialised memory reads as NaN / max value
            body(env)
            env[slot] = None

        return run

    def stmt_AttrStmt(self, s: AttrStmt) -> Fn:
        return self.stmt(s.body)

    def stmt_Evaluate(self, s: Evaluate) -> Fn:
        return self.expr(s.value)


def _poison(dtype: str) -> Any:
    if dt.is_float(dtype):
        return math.nan
    return dt.max_value(dtype)


def _bind_args(
    func: PrimFunc, args: Mapping[str, np.ndarray] | Sequence[np.ndarray]
) -> list[np.ndarray]:
    if isinstance(args, Mapping):
        missing = [b.name for b in func.params if b.name not in args]
        extra = sorted(set(args) - {b.name for b in func.params})
        if missing or extra:
            raise ValueError(f"interpret {func.name}: missing {missing}, unexpected {extra}")
        arrays = [args[b.name] for b in func.params]
    else:
        arrays = list(args)
        if len(arrays) != len(func.params):
            raise ValueError(
                f"interpret {func.name}: expected {len(func.params)} arrays, got {len(arrays)}"
            )
    for buf, shape, arr in zip(func.params, func.arg_shapes, arrays, strict=True):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"argument {buf.name} must be a numpy array, not {type(arr).__name__}")
        if arr.dtype != np.dtype(buf.dtype) or arr.shape != tuple(shape):
            raise ValueError(
                f"argument {buf.name} must be {buf.dtype}{list(shape)}, not "
                f"{arr.dtype}{list(arr.shape)}"
            )
    return arrays


@lru_cache(maxsize=4096)
def _compiled_expr(e: Expr) -> tuple[Fn, tuple[Any, ...]]:
    compiler = _Compiler()
    fn = compiler.expr(e)
    return fn, tuple(compiler.keep)


def evaluate(e: Expr, env: Mapping[Var, Any]) -> Any:
    """The value of expression `e` with its variables bound by `env`, with the interpreter's
    semantics (integers wrap at their width, comparisons give bools). The compiler evaluates
    index expressions with it (the accelerator's lowering runs its outer loops at compile time).

    Raises:
        InterpretError: a variable (or buffer) of `e` that `env` does not bind, or a fault
            evaluating it (division by zero).

    Example:
        >>> from tensorforge.compiler.te.expr import Var
        >>> i = Var("i")
        >>> evaluate((i + 3) // 2, {i: 4})
        3
    """
    fn, names = _compiled_expr(e)
    values = []
    for node in names:
        if not isinstance(node, Var) or node not in env:
            raise InterpretError(f"`{node.name}` is not bound here")
        values.append(env[node])
    return fn(values)


def compile_func(
    func: PrimFunc,
) -> Callable[[Mapping[str, np.ndarray] | Sequence[np.ndarray]], None]:
    """Compile `func` once; the result runs it on arrays like `interpret`."""
    compiler = _Compiler()
    param_slots = [compiler.slot(b) for b in func.params]
    body = compiler.stmt(func.body)

    def run(args: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> None:
        arrays = _bind_args(func, args)
        env: Env = [None] * len(compiler.slots)
        for slot, arr in zip(param_slots, arrays, strict=True):
            env[slot] = arr.reshape(-1).tolist()
        body(env)
        for slot, arr in zip(param_slots, arrays, strict=True):
            arr[...] = np.asarray(env[slot], dtype=arr.dtype).reshape(arr.shape)

    return run


def interpret(func: PrimFunc, args: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> None:
    """Run `func` on numpy arrays, writing outputs in place.

    Args:
        func: a lowered function.
        args: arrays by parameter name, or a list in parameter order; each must have the
            parameter's dtype and logical shape.

    Raises:
        InterpretError: on out-of-bounds accesses and other run-time faults.

    Example:
        >>> import numpy as np
        >>> from tensorforge.compiler import te, tir
        >>> A = te.placeholder((4,), name="A")
        >>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
        >>> f = tir.lower(te.create_schedule(B.op), [A, B])
        >>> b = np.zeros(4, "float32")
        >>> tir.interpret(f, {"A": np.arange(4, dtype="float32"), "B": b})
        >>> b.tolist()
        [0.0, 2.0, 4.0, 6.0]
    """
    compile_func(func)(args)
