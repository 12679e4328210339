"""C source for GPU kernels from the loop IR: one printer, two thin dialects (CUDA C, OpenCL C).

The printer takes one *device kernel* (a loop nest whose outer loops are bound to `blockIdx.*`
and `threadIdx.*`, see `codegen.gpu.split_kernels`) and writes a kernel function. Everything a
dialect changes is in `Dialect`: qualifiers, thread and block indices, the barrier, type names,
math functions and how fp16 is spelled. Semantics follow the LLVM back-end's
(`codegen.llvm_expr`) so that CPU and GPU code of the same IR agree:

- integer division truncates (`Op.DIV`), `//` and `%` floor (helper functions);
- arithmetic on int8/int16/uint8/uint16 wraps to the type (a cast after each operation, C
  promotes; uint16 + - * run in unsigned int, where a product cannot overflow a signed int);
- unsigned types wrap modulo 2**bits, compare, divide and shift right as unsigned;
- `<<` and `>>` (`Op.SHL`/`Op.SHR`) are numpy's at every amount (helper functions: an amount
  past the width, or negative, gives 0 or the sign bits, where C is undefined); the
  `shift_left`/`shift_right` intrinsics, whose amounts are in range, are C's shifts;
- `min`/`max` of floats keep the first operand when a comparison with NaN fails (as `select`);
- `round` is half-to-even (`rint`), `rsqrt` is `1/sqrt`, `sigmoid` is `1/(1+exp(-x))`;
- float32 `tanh` is +-1 from |x| = 9.02 on, as the LLVM back-end's (`tf_tanh_float32`: the
  device's `tanh` may stop one ulp short of 1, as PoCL's does, even at infinity);
- bool buffers hold one byte per element (as numpy), bool values are C truths.

Example:
    >>> from tensorforge.compiler import te, tir
    >>> A = te.placeholder((64,), name="A")
    >>> B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    >>> s = te.create_schedule(B.op)
    >>> bx, tx = s[B].split(B.op.axis[0], factor=32)
    >>> s[B].bind(bx, te.thread_axis("blockIdx.x")); s[B].bind(tx, te.thread_axis("threadIdx.x"))
    >>> from tensorforge.compiler.codegen.gpu import split_kernels
    >>> (k,) = split_kernels(tir.lower(s, [A, B], name="double")).kernels
    >>> source = kernel_source(k, OPENCL)
    >>> source.split("(")[0], source.count("__global float*")
    ('__kernel void double_k0', 4)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..schedule.stage import ForKind
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
from ..tir.gpu import BARRIER, is_barrier
from ..tir.gpu_intrin import WMMA_SHAPES
from ..tir.stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferLoad,
    BufferPtr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LoweringError,
    SeqStmt,
    Stmt,
    const_int,
    walk,
)

if TYPE_CHECKING:
    from .gpu import DeviceKernel


@dataclass(frozen=True)
class Dialect:
    """What differs between CUDA C and OpenCL C."""

    name: str
    kernel_prefix: str  # before `void`
    global_ptr: str  # qualifier of a global pointer parameter
    shared: str  # qualifier of a shared-memory array
    barrier: str
    helper_prefix: str  # qualifiers of helper functions
    types: dict[str, str]
    math_suffix: str  # float32 math function suffix ("f" for CUDA's expf)
    index: dict[str, str]  # "blockIdx.x" -> expression
    offset_params: bool  # buffers passed as (base pointer, element offset: a 64-bit long)
    prelude: str = ""
    fp16_prelude: str = ""


_INDEX_AXES = "xyz"

CUDA = Dialect(
    name="cuda",
    kernel_prefix='extern "C" __global__',
    global_ptr="",
    shared="__shared__",
    barrier="__syncthreads();",
    helper_prefix="__device__ __forceinline__ static",
    types={
        "bool": "bool",
        "int8": "signed char",
        "uint8": "unsigned char",
        "int16": "short",
        "uint16": "unsigned short",
        "int32": "int",
        "uint32": "unsigned int",
        "int64": "long long",
        "uint64": "unsigned long long",
        "float16": "__half",
        "float32": "float",
        "float64": "double",
    },
    math_suffix="f",
    index={f"{k}.{a}": f"(int){k}.{a}" for k in ("blockIdx", "threadIdx") for a in _INDEX_AXES},
    offset_params=False,
    fp16_prelude="#include <cuda_fp16.h>\n",
)

OPENCL = Dialect(
    name="opencl",
    kernel_prefix="__kernel",
    global_ptr="__global ",
    shared="__local",
    barrier="barrier(CLK_LOCAL_MEM_FENCE);",
    helper_prefix="static inline",
    types={
        "bool": "bool",
        "int8": "char",
        "uint8": "uchar",
        "int16": "short",
        "uint16": "ushort",
        "int32": "int",
        "uint32": "uint",
        "int64": "long",
        "uint64": "ulong",
        "float16": "float",  # a half value, exact in a float register (vload/vstore_half)
        "float32": "float",
        "float64": "double",
    },
    math_suffix="",
    index={
        **{f"blockIdx.{a}": f"(int)get_group_id({k})" for k, a in enumerate(_INDEX_AXES)},
        **{f"threadIdx.{a}": f"(int)get_local_id({k})" for k, a in enumerate(_INDEX_AXES)},
    },
    offset_params=True,
    prelude="",
)

DIALECTS = {"cuda": CUDA, "opencl": OPENCL}

# math intrinsic -> C function name (float32 adds the dialect's suffix)
_MATH = {
    "exp": "exp",
    "exp2": "exp2",
    "log": "log",
    "log2": "log2",
    "log1p": "log1p",
    "sqrt": "sqrt",
    "tanh": "tanh",
    "erf": "erf",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "floor": "floor",
    "ceil": "ceil",
    "round": "rint",  # half to even, as numpy
    "trunc": "trunc",
    "fmod": "fmod",
    "pow": "pow",
}

_NARROW_INTS = ("int8", "uint8", "int16", "uint16", "bool")


# Words a kernel's names must not be: C and C++ keywords (NVRTC compiles C++, where `and`, `or`,
# `xor`, `not`, `bitand`, ... are operators) and OpenCL C's scalar type names and qualifiers
_RESERVED = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char class compl
    const constexpr continue default delete do double else enum explicit export extern false
    float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
    operator or or_eq private protected public register restrict return short signed sizeof
    static struct switch template this throw true try typedef typeid typename union unsigned
    using virtual void volatile while xor xor_eq uchar ushort uint ulong half size_t kernel
    global local constant __kernel __global __local __constant __private""".split()
)


def c_name(name: str) -> str:
    """A C identifier for `name` (other characters become `_`; a keyword gets a `_`)."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    ident = ident if ident and not ident[0].isdigit() else "v_" + ident
    return ident + "_" if ident in _RESERVED else ident


def memory_type(dialect: Dialect, dtype: str, scope: str = "global") -> str:
    """The C type of a buffer element (bool is one byte, as in numpy; an OpenCL float16 buffer
    in global memory is `half`, read and written with vload_half/vstore_half, which need no
    extension; on chip it holds floats)."""
    if dtype == "float16" and dialect is OPENCL and scope == "global":
        return "half"
    return dialect.types["uint8"] if dtype == "bool" else dialect.types[dtype]


@dataclass
class _Names:
    """C names for variables and buffers, unique by identity."""

    taken: set[str] = field(default_factory=set)
    by_id: dict[int, str] = field(default_factory=dict)

    def of(self, node: object, name: str) -> str:
        found = self.by_id.get(id(node))
        if found is not None:
            return found
        self.by_id[id(node)] = unique = self.fresh(name)
        return unique

    def fresh(self, name: str) -> str:
        """A name no other variable has (for the printer's own variables)."""
        base = c_name(name)
        unique, n = base, 1
        while unique in self.taken:
            unique, n = f"{base}_{n}", n + 1
        self.taken.add(unique)
        return unique


class KernelPrinter:
    """Prints one device kernel in `dialect`; `helpers` collects the helper functions it uses."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect
        self.names = _Names()
        self.helpers: dict[str, str] = {}
        self.uses_fp16 = False
        self.lines: list[str] = []
        self.launch: dict[str, int] = {}
        self.index = dict(dialect.index)  # thread tag -> its C expression in this kernel

    # ---- types -------------------------------------------------------------------------------

    def ctype(self, dtype: str) -> str:
        if dtype == "float16":
            self.uses_fp16 = True
        return self.d.types[dt.check_dtype(dtype)]

    # ---- expressions -------------------------------------------------------------------------

    def expr(self, e: Expr) -> str:
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise LoweringError(
                f"{self.d.name} codegen: expression {type(e).__name__} is not supported"
            )
        return method(e)

    def expr_IntImm(self, e: IntImm) -> str:
        if e.dtype == "bool":
            return "true" if e.value else "false"
        if e.dtype in ("int32", "int64"):
            suffix = "" if e.dtype == "int32" else "LL" if self.d is CUDA else "L"
            if e.value == -(2 ** (dt.bits(e.dtype) - 1)):  # the literal's magnitude overflows
                return f"({e.value + 1}{suffix} - 1)"
            return f"{e.value}{suffix}"
        if e.dtype in ("uint32", "uint64"):  # past the signed range a literal needs the suffix
            long = "ULL" if self.d is CUDA else "UL"
            return f"{e.value}{'U' if e.dtype == 'uint32' else long}"
        return f"(({self.ctype(e.dtype)}){e.value})"

    def expr_FloatImm(self, e: FloatImm) -> str:
        v = e.value
        if math.isnan(v):
            text = "(0.0f / 0.0f)"
        elif math.isinf(v):
            text = "(1.0f / 0.0f)" if v > 0 else "(-1.0f / 0.0f)"
        elif e.dtype == "float64":
            return f"{v!r}"
        else:
            text = f"{float(v)!r}f" if "e" in repr(float(v)) or "." in repr(float(v)) else f"{v}.0f"
        if e.dtype == "float16" and self.d is OPENCL:  # rounded here: a float literal
            return f"{float(np.float16(v))!r}f" if math.isfinite(v) else text
        if e.dtype == "float16":
            return self.convert(text, "float32", "float16")
        if e.dtype == "float64":
            return f"(double){text}"
        return text

    def expr_Var(self, e: Var) -> str:
        return self.names.of(e, e.name)

    def expr_Not(self, e: Not) -> str:
        return f"(!{self.expr(e.a)})"

    def expr_Select(self, e: Select) -> str:
        return (
            f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"
        )

    def expr_Cast(self, e: Cast) -> str:
        return self.convert(self.expr(e.value), e.value.dtype, e.dtype)

    def convert(self, text: str, src: str, dst: str) -> str:
        if src == dst:
            return text
        if dst == "bool":
            zero = "0" if not dt.is_float(src) else "0.0f"
            if src == "float16":
                text, zero = self.convert(text, "float16", "float32"), "0.0f"
            return f"({text} != {zero})"
        if "float16" in (src, dst):
            self.uses_fp16 = True
            if src == "float16":
                as_float = self.half_to_float(text)
                if dst == "float32":
                    return as_float
                if dt.is_int(dst):
                    return self.float_to_int(as_float, "float32", dst, via_int64=dst == "uint32")
                return f"(({self.ctype(dst)}){as_float})"
            return self.float_to_half(text if src == "float32" else f"((float){text})")
        if dt.is_float(src) and dt.is_int(dst):
            return self.float_to_int(text, src, dst)
        return f"(({self.ctype(dst)}){text})"

    def float_to_int(self, text: str, src: str, dst: str, via_int64: bool = False) -> str:
        """A float converted to an integer as C casts do on x86-64, as the CPU back-end does
        (`llvm_expr` `_float_to_int`: onnxruntime's static_cast, numpy's astype): C leaves
        out-of-range values, infinities and NaN undefined, and PoCL gave 4294967295 for NaN
        into uint32 and -32768 for 3e9 into int16 (from float64; 0 from float32).

        - int32/int64: truncation inside the type; outside it, or NaN, the type's lowest value
          (x86's `cvtt`);
        - 8- and 16-bit: the int32 result's low bits;
        - uint32/uint64: that of `x` below 2**(bits-1), else that of `x - 2**(bits-1)` with the
          top bit flipped; `via_int64` (float16 into uint32): the int64 result's low bits.
        """
        bits = 64 if dt.bits(dst) == 64 or via_int64 else 32
        name = f"tf_f2i_{src}_{dst}{'_via64' if via_int64 else ''}"
        if name not in self.helpers:
            f, t = self.ctype(src), self.ctype(dst)
            wide = self.ctype("int64" if bits == 64 else "int32")
            half = f"{float(2 ** (bits - 1))!r}{'' if src == 'float64' else 'f'}"
            lowest = f"(({wide})(-{2 ** (bits - 1) - 1} - 1))"

            def cvtt(x: str) -> str:
                return f"(({x}) >= -{half} && ({x}) < {half} ? ({wide})({x}) : {lowest})"

            if dt.is_uint(dst) and dt.bits(dst) >= 32 and not via_int64:
                top = f"(({t})1 << {bits - 1})"
                body = (
                    f"return a >= {half} ? ({t}){cvtt(f'a - {half}')} ^ {top} : ({t}){cvtt('a')};"
                )
            else:
                body = f"return ({t}){cvtt('a')};"
            self.helpers[name] = f"{self.d.helper_prefix} {t} {name}({f} a) {{ {body} }}"
        return f"{name}({text})"

    def half_to_float(self, text: str) -> str:
        return f"__half2float({text})" if self.d is CUDA else text

    def float_to_half(self, text: str) -> str:
        """Round a float to float16 (to nearest even, as numpy)."""
        if self.d is CUDA:
            return f"__float2half_rn({text})"
        return f"{self.helper('round', 'float16')}({text})"

    def expr_BinOp(self, e: BinOp) -> str:
        a, b, dtype = self.expr(e.a), self.expr(e.b), e.a.dtype
        if e.op in (Op.AND, Op.OR) or e.op in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE):
            if dtype == "float16":
                a, b = self.convert(a, dtype, "float32"), self.convert(b, dtype, "float32")
            return f"({a} {e.op.value} {b})"
        if dtype == "float16":  # arithmetic in float, rounded per operation
            fa, fb = self.convert(a, dtype, "float32"), self.convert(b, dtype, "float32")
            return self.convert(self._arith(e.op, fa, fb, "float32"), "float32", "float16")
        return self._arith(e.op, a, b, dtype)

    def _arith(self, op: Op, a: str, b: str, dtype: str) -> str:
        if op in (Op.ADD, Op.SUB, Op.MUL) and dtype == "uint16":  # not in (signed) int
            text = f"(({self.ctype('uint32')}){a} {op.value} {b})"
        elif op in (Op.ADD, Op.SUB, Op.MUL) or (op is Op.DIV and (dt.is_float(dtype))):
            text = f"({a} {op.value} {b})"
        elif op is Op.DIV:
            text = f"({a} / {b})"
        elif op in (Op.MIN, Op.MAX):
            text = f"{self.helper(op.value, dtype)}({a}, {b})"
        elif op in (Op.BIT_AND, Op.BIT_OR, Op.BIT_XOR) and dt.is_int(dtype):
            text = f"({a} {op.value} {b})"
        elif op in (Op.SHL, Op.SHR) and dt.is_int(dtype):
            text = f"{self.helper('shl' if op is Op.SHL else 'shr', dtype)}({a}, {b})"
        elif op in (Op.FLOORDIV, Op.FLOORMOD):
            if dt.is_float(dtype):
                fn = f"floor{self.d.math_suffix if dtype == 'float32' else ''}"
                q = f"{fn}({a} / {b})"
                text = q if op is Op.FLOORDIV else f"({a} - {q} * {b})"
            elif dt.is_uint(dtype) or dtype == "bool":
                text = f"({a} {'/' if op is Op.FLOORDIV else '%'} {b})"
            else:
                kind = "floordiv" if op is Op.FLOORDIV else "floormod"
                text = f"{self.helper(kind, dtype)}({a}, {b})"
        else:
            raise LoweringError(
                f"{self.d.name} codegen: operator {op.value} of {dtype} is not supported"
            )
        return f"(({self.ctype(dtype)}){text})" if dtype in _NARROW_INTS else text

    def helper(self, kind: str, dtype: str) -> str:
        """The name of helper function `kind` for `dtype`, defining it on first use."""
        name = f"tf_{kind}_{dtype}"
        if name not in self.helpers:
            t, p = self.ctype(dtype), self.d.helper_prefix
            body = {
                "min": "return b < a ? b : a;",
                "max": "return b > a ? b : a;",
                "floordiv": (
                    f"{t} q = a / b, r = a % b; return (r != 0 && ((r ^ b) < 0)) ? q - 1 : q;"
                ),
                "floormod": f"{t} r = a % b; return (r != 0 && ((r ^ b) < 0)) ? r + b : r;",
                # OpenCL float16 rounding through a private half: vstore_half_rte needs no
                # cl_khr_fp16
                "round": (
                    "ushort h; vstore_half_rte(a, 0, (__private half*)&h); "
                    "return vload_half(0, (__private const half*)&h);"
                ),
                # float32 tanh is +-1 from |a| = 9.02 on (and at +-inf); PoCL's tanh stops at
                # 0.99999994, so a tanh-GELU of -1e6 was -0.03 and of -inf -inf (not -0, NaN)
                "tanh": (
                    f"return fabs{self.d.math_suffix}(a) >= 9.02f ? "
                    f"copysign{self.d.math_suffix}(1.0f, a) : tanh{self.d.math_suffix}(a);"
                ),
            }.get(kind) or self._shift_body(kind, dtype)
            if dtype == "float16" and self.d is CUDA and kind in ("min", "max"):
                cmp = "<" if kind == "min" else ">"
                body = f"return __half2float(b) {cmp} __half2float(a) ? b : a;"
            args = f"{t} a" if kind in ("round", "tanh") else f"{t} a, {t} b"
            self.helpers[name] = f"{p} {t} {name}({args}) {{ {body} }}"
        return name

    def _shift_body(self, kind: str, dtype: str) -> str:
        """numpy's shift at every amount (C's `<<`/`>>` by the width or more, or by a negative
        amount, are undefined; OpenCL masks the amount): the amount read as unsigned, one past
        the width giving 0 or the sign bits (a signed `>>` by bits - 1). A left shift runs in
        the unsigned type (a signed one that overflows is undefined in C); C promotes 8- and
        16-bit operands to int, where their shifts below the width cannot overflow."""
        t, width = self.ctype(dtype), dt.bits(dtype)
        unsigned = self.ctype(dtype if dt.is_uint(dtype) else "u" + dtype)
        in_range = f"b < {width}" if dt.is_uint(dtype) else f"b >= 0 && b < {width}"
        if kind == "shl":
            return f"return ({in_range}) ? ({t})(({unsigned})a << b) : ({t})0;"
        if dt.is_uint(dtype):
            return f"return ({in_range}) ? ({t})(a >> b) : ({t})0;"
        return f"return ({t})(a >> (({in_range}) ? b : {width - 1}));"

    def expr_Call(self, e: Call) -> str:
        if e.name == "if_then_else":
            c, t, f = (self.expr(a) for a in e.args)
            return f"({c} ? {t} : {f})"
        if e.kind is CallKind.EXTERN and e.name.startswith(_WMMA_PREFIX):
            return self.wmma_call(e)
        if e.kind is CallKind.EXTERN and e.name.startswith(_WARP_PREFIX):
            return self.warp_call(e)
        if e.kind is CallKind.EXTERN:
            raise LoweringError(
                f"{self.d.name} codegen: extern call {e.name!r} has no GPU implementation"
            )
        if e.name in DOT_INTRINSICS:  # chosen only for x86 CPU targets (strategy/qlinear.py)
            raise LoweringError(f"{self.d.name} codegen: {e.name} has no GPU implementation")
        args = [self.expr(a) for a in e.args]
        if e.name in INT_INTRINSICS:
            text = f"({args[0]} {'<<' if e.name == 'shift_left' else '>>'} {args[1]})"
            return f"(({self.ctype(e.dtype)}){text})"
        if e.name == "reinterpret":
            return self.reinterpret(args[0], e.args[0].dtype, e.dtype)
        if e.dtype == "float16":
            wide = [self.convert(a, "float16", "float32") for a in args]
            return self.convert(self._math(e.name, wide, "float32"), "float32", "float16")
        return self._math(e.name, args, e.dtype)

    def reinterpret(self, x: str, src: str, dst: str) -> str:
        """OpenCL's `as_<type>`; CUDA's bit-cast intrinsics (float and double only)."""
        if self.d.name == "opencl":
            return f"as_{self.ctype(dst)}({x})"
        cuda = {
            ("float32", "int32"): "__float_as_int",
            ("int32", "float32"): "__int_as_float",
            ("float32", "uint32"): "__float_as_uint",
            ("uint32", "float32"): "__uint_as_float",
            ("float64", "int64"): "__double_as_longlong",
            ("int64", "float64"): "__longlong_as_double",
        }
        if (src, dst) not in cuda:
            raise LoweringError(
                f"{self.d.name} codegen: reinterpret of {src} as {dst} is not built"
            )
        return f"{cuda[src, dst]}({x})"

    def _math(self, name: str, args: list[str], dtype: str) -> str:
        suffix = self.d.math_suffix if dtype == "float32" else ""
        one = "1.0" if dtype == "float64" else "1.0f"
        if name == "rsqrt":
            return f"({one} / sqrt{suffix}({args[0]}))"
        if name == "sigmoid":
            return f"({one} / ({one} + exp{suffix}(-{args[0]})))"
        if name == "tanh" and dtype == "float32":
            return f"{self.helper('tanh', dtype)}({args[0]})"
        if name not in _MATH:
            raise LoweringError(f"{self.d.name} codegen: math intrinsic {name!r} is not supported")
        return f"{_MATH[name]}{suffix}({', '.join(args)})"

    def expr_BufferLoad(self, e: BufferLoad) -> str:
        (index,) = e.indices
        if self._half_in_memory(e.buffer):
            return f"vload_half({self.expr(index)}, {self.buffer(e.buffer)})"
        text = f"{self.buffer(e.buffer)}[{self.expr(index)}]"
        return f"({text} != 0)" if e.buffer.dtype == "bool" else text

    def _half_in_memory(self, buf: Buffer) -> bool:
        """An OpenCL float16 buffer in global memory (`half`: only vload/vstore_half reach it)."""
        return self.d is OPENCL and buf.dtype == "float16" and buf.scope == "global"

    def wmma_call(self, e: Call) -> str:
        """A tensor-core intrinsic call (`tir.gpu_intrin`): CUDA only, its device function and
        the WMMA prelude defined on first use."""
        if self.d is not CUDA:
            raise LoweringError(
                f"{self.d.name} codegen: tensor-core intrinsic {e.name!r} needs the cuda target "
                "(nvcuda::wmma); schedule this operator without it for OpenCL"
            )
        m = _WMMA_CALL.fullmatch(e.name)
        shape = None if m is None else (int(m["m"]), int(m["n"]), int(m["k"]))
        if m is None or shape not in WMMA_SHAPES:
            raise LoweringError(
                f"cuda codegen: unknown tensor-core intrinsic {e.name!r} (expected "
                "tf_wmma_fill_MxNxK or tf_wmma_mma_MxNxK with a float16 WMMA shape)"
            )
        want = 2 if m["op"] == "fill" else 7
        if len(e.args) != want:
            raise LoweringError(
                f"cuda codegen: tensor-core intrinsic {e.name!r} takes {want} arguments, "
                f"not {len(e.args)}"
            )
        self.uses_fp16 = True  # the fragments of A and B hold __half
        self.helpers.setdefault("tf_wmma", _WMMA_PRELUDE)
        self.helpers.setdefault(e.name, _wmma_helper(m["op"], e.name, shape, self.d))
        return f"{e.name}({', '.join(self.expr(a) for a in e.args)})"

    def warp_call(self, e: Call) -> str:
        """A warp-level reduction (`topi.gpu.reduce`): CUDA only, a `__shfl_xor_sync` butterfly
        over the 32 lanes of a warp, the result in every lane."""
        op = e.name[len(_WARP_PREFIX) :]
        if self.d is not CUDA:
            raise LoweringError(
                f"{self.d.name} codegen: warp intrinsic {e.name!r} needs the cuda target "
                "(__shfl_xor_sync); OpenCL reduces through shared memory"
            )
        combine = {"sum": "v + w", "prod": "v * w", "max": "w > v ? w : v", "min": "w < v ? w : v"}
        if op not in combine or len(e.args) != 1 or e.dtype not in _WARP_DTYPES:
            raise LoweringError(
                f"cuda codegen: unknown warp intrinsic {e.name!r} of {e.dtype} (expected "
                f"tf_warp_sum/prod/max/min of one {'/'.join(_WARP_DTYPES)} value)"
            )
        name, t = f"{e.name}_{e.dtype}", self.ctype(e.dtype)
        body = (
            "for (int o = 16; o > 0; o >>= 1) { "
            f"{t} w = __shfl_xor_sync(0xffffffffu, v, o); v = {combine[op]}; }} return v;"
        )
        self.helpers.setdefault(name, f"{self.d.helper_prefix} {t} {name}({t} v) {{ {body} }}")
        return f"{name}({self.expr(e.args[0])})"

    def expr_BufferPtr(self, e: BufferPtr) -> str:
        if self.d is CUDA:  # `offset` counts elements of the flattened buffer
            return f"(&{self.buffer(e.buffer)}[{self.expr(e.offset)}])"
        raise LoweringError(
            f"{self.d.name} codegen: a pointer to buffer {e.buffer.name!r} (an extern or tensor "
            "intrinsic call) has no GPU implementation"
        )

    def buffer(self, buf: Buffer) -> str:
        return self.names.of(buf, buf.name)

    # ---- statements --------------------------------------------------------------------------

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("  " * depth + line)

    def stmt(self, s: Stmt, depth: int) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise LoweringError(
                f"{self.d.name} codegen: statement {type(s).__name__} is not supported"
            )
        method(s, depth)

    def stmt_SeqStmt(self, s: SeqStmt, depth: int) -> None:
        for child in s.stmts:
            self.stmt(child, depth)

    def stmt_AttrStmt(self, s: AttrStmt, depth: int) -> None:
        self.stmt(s.body, depth)

    def stmt_Evaluate(self, s: Evaluate, depth: int) -> None:
        if isinstance(s.value, Call) and s.value.name == BARRIER:
            self.emit(self.d.barrier, depth)
        elif isinstance(s.value, IntImm):
            return
        else:
            self.emit(f"{self.expr(s.value)};", depth)

    def stmt_BufferStore(self, s: BufferStore, depth: int) -> None:
        (index,) = s.indices
        value = self.expr(s.value)
        if s.buffer.dtype == "bool":
            value = f"({memory_type(self.d, 'bool')})({value})"
        if self._half_in_memory(s.buffer):  # the value is already a float16 (rounded)
            self.emit(f"vstore_half({value}, {self.expr(index)}, {self.buffer(s.buffer)});", depth)
            return
        self.emit(f"{self.buffer(s.buffer)}[{self.expr(index)}] = {value};", depth)

    def stmt_IfThenElse(self, s: IfThenElse, depth: int) -> None:
        self.emit(f"if ({self.expr(s.condition)}) {{", depth)
        self.stmt(s.then_case, depth + 1)
        if s.else_case is not None:
            self.emit("} else {", depth)
            self.stmt(s.else_case, depth + 1)
        self.emit("}", depth)

    def stmt_Allocate(self, s: Allocate, depth: int) -> None:
        buf = s.buffer
        if buf.scope.startswith("shared"):  # declared at kernel scope (`_print_kernel`)
            self.stmt(s.body, depth)
            return
        if buf.scope.startswith("local"):  # a scope of its own: passes may copy the nest
            self.emit("{", depth)
            ty = memory_type(self.d, buf.dtype, buf.scope)
            self.emit(f"{ty} {self.buffer(buf)}[{buf.size}];", depth + 1)
            self.stmt(s.body, depth + 1)
            self.emit("}", depth)
            return
        else:
            raise LoweringError(
                f"{self.d.name} codegen: buffer {buf.name!r} in scope {buf.scope!r} cannot be "
                "allocated inside a GPU kernel (only shared and local)"
            )
        self.stmt(s.body, depth)

    def stmt_For(self, s: For, depth: int) -> None:
        var = self.expr(s.var)
        extent = self.expr(s.extent)
        lo = self.expr(s.min)
        if s.kind is ForKind.THREAD_BINDING:
            if s.thread_tag not in self.index:
                raise LoweringError(
                    f"{self.d.name} codegen: loop {s.var.name!r} is bound to {s.thread_tag!r}, "
                    "which GPU kernels do not have (virtual threads are injected before)"
                )
            index = self.index[s.thread_tag]
            start = index if const_int(s.min) == 0 else f"({lo} + {index})"
            n = const_int(s.extent)
            guard = n is None or n < self.launch.get(s.thread_tag, 0)
            # a scope of its own: passes may copy a loop nest, and its variables with it
            self.emit(f"if ({index} < {extent}) {{" if guard else "{", depth)
            self.emit(f"const int {var} = {start};", depth + 1)
            self.stmt(s.body, depth + 1)
            self.emit("}", depth)
            return
        if s.kind is ForKind.PARALLEL:
            raise LoweringError(
                f"{self.d.name} codegen: loop {s.var.name!r} is parallel; on a GPU bind it to "
                "blockIdx/threadIdx instead"
            )
        if s.kind in (ForKind.UNROLLED, ForKind.VECTORIZED):
            self.emit("#pragma unroll", depth)
        ty = self.ctype(s.var.dtype)
        end = extent if const_int(s.min) == 0 else f"({lo} + {extent})"
        self.emit(f"for ({ty} {var} = {lo}; {var} < {end}; ++{var}) {{", depth)
        self.stmt(s.body, depth + 1)
        self.emit("}", depth)
        if self.d is OPENCL and any(is_barrier(n) for n in walk(s.body) if isinstance(n, Stmt)):
            # PoCL (3.1) loses the stores of work-items that take a branch between a loop's
            # last barrier and its back edge; a barrier after the loop (which every thread
            # reaches: the loop holds a barrier) keeps them. tests/compiler/gpu checks it.
            self.emit(self.d.barrier, depth)


_WMMA_PREFIX = "tf_wmma_"
_WARP_PREFIX = "tf_warp_"  # topi.gpu.reduce.warp_reduce
_WARP_DTYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")
_WMMA_CALL = re.compile(r"tf_wmma_(?P<op>fill|mma)_(?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)")

# Emitted once before the helper device functions of the tensor-core intrinsics.
_WMMA_PRELUDE = """#include <mma.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "tensor-core intrinsics (tf_wmma_*) need compute capability 7.0 (sm_70) or newer"
#endif"""


def _wmma_helper(op: str, name: str, shape: tuple[int, int, int], d: Dialect) -> str:
    """The device function of a tensor-core intrinsic (`tir.gpu_intrin` says what it does).

    Tiles are row-major with leading dimensions `ld*`, in shared memory, 32-byte aligned. Every
    lane of the warp calls; `__syncwarp` orders the lanes' earlier shared-memory accesses to
    the tiles before the collective loads and stores (each lane moves a part of a tile that the
    hardware picks, not the part it wrote or read itself).
    """
    m, n, k = shape
    w = "nvcuda::wmma"
    acc = f"{w}::fragment<{w}::accumulator, {m}, {n}, {k}, float> acc;"
    store = f"{w}::store_matrix_sync(c, acc, ldc, {w}::mem_row_major);"
    if op == "fill":
        lines = ["  __syncwarp();", f"  {acc}", f"  {w}::fill_fragment(acc, 0.0f);", f"  {store}"]
        return "\n".join([f"{d.helper_prefix} void {name}(float* c, int ldc) {{", *lines, "}"])
    params = "const __half* a, int lda, const __half* b, int ldb, float* c, int ldc, int lane"
    lines = [
        "  (void)lane;  // the loop-IR interpreter does the product in lane 0; here all take part",
        "  __syncwarp();",
        f"  {w}::fragment<{w}::matrix_a, {m}, {n}, {k}, __half, {w}::row_major> fa;",
        f"  {w}::fragment<{w}::matrix_b, {m}, {n}, {k}, __half, {w}::row_major> fb;",
        f"  {acc}",
        f"  {w}::load_matrix_sync(fa, a, lda);",
        f"  {w}::load_matrix_sync(fb, b, ldb);",
        f"  {w}::load_matrix_sync(acc, c, ldc, {w}::mem_row_major);",
        f"  {w}::mma_sync(acc, fa, fb, acc);",
        f"  {store}",
    ]
    return "\n".join([f"{d.helper_prefix} void {name}({params}) {{", *lines, "}"])


def kernel_source(kernel: DeviceKernel, dialect: Dialect) -> str:
    """The C source of one device kernel, helpers first (see `program_source` for a program)."""
    return program_source([kernel], dialect)


def _print_kernel(kernel: DeviceKernel, dialect: Dialect) -> tuple[str, dict[str, str], bool]:
    p = KernelPrinter(dialect)
    p.launch = dict(kernel.launch_extents)
    params = []
    setup = []
    for buf in kernel.params:
        name, ty = p.buffer(buf), memory_type(dialect, buf.dtype)
        if buf.dtype == "float16":
            p.uses_fp16 = dialect is CUDA
        if dialect.offset_params:
            params += [f"{dialect.global_ptr}{ty}* {name}_b", f"const long {name}_o"]
            setup.append(f"{dialect.global_ptr}{ty}* {name} = {name}_b + {name}_o;")
        else:
            params.append(f"{ty}* {name}")
    for s in setup:
        p.emit(s, 1)
    if kernel.fold is not None:
        _unfold_blocks(p, kernel.fold, kernel.grid)
    # shared arrays at kernel scope (OpenCL requires it of __local), once per buffer (a copied
    # nest allocates the same buffer again); aligned for vector and tensor-core accesses
    shared = {
        id(n.buffer): n.buffer
        for n in walk(kernel.body)
        if isinstance(n, Allocate) and n.buffer.scope.startswith("shared")
    }
    align = " __align__(32)" if dialect is CUDA else ""
    for buf in shared.values():
        ty = memory_type(dialect, buf.dtype, buf.scope)
        p.emit(f"{dialect.shared}{align} {ty} {p.buffer(buf)}[{buf.size}];", 1)
    p.stmt(kernel.body, 1)
    head = f"{dialect.kernel_prefix} void {c_name(kernel.name)}({', '.join(params)}) {{"
    return "\n".join([head, *p.lines, "}"]) + "\n", p.helpers, p.uses_fp16


def _unfold_blocks(p: KernelPrinter, fold: tuple[int, int, int], grid: tuple[int, ...]) -> None:
    """The body's block indices of a launch whose y and z blocks are folded into x
    (`codegen.gpu.fold_grid`), as `const int`s that the thread loops then read."""
    bx, by, bz = (p.d.index[f"blockIdx.{a}"] for a in _INDEX_AXES)
    gx, fy = fold[0], fold[1] // grid[1]
    names = [p.names.fresh(f"block_{a}") for a in _INDEX_AXES]
    rest = p.names.fresh("block_fold")
    p.emit(f"const int {rest} = {bx} / {gx};", 1)
    p.emit(f"const int {names[0]} = {bx} % {gx};", 1)
    p.emit(f"const int {names[1]} = {by} + {grid[1]} * ({rest} % {fy});", 1)
    p.emit(f"const int {names[2]} = {bz} + {grid[2]} * ({rest} / {fy});", 1)
    p.index.update({f"blockIdx.{a}": n for a, n in zip(_INDEX_AXES, names, strict=True)})


def program_source(kernels: list[DeviceKernel], dialect: Dialect) -> str:
    """One translation unit holding every kernel of a program (helpers defined once)."""
    helpers: dict[str, str] = {}
    bodies = []
    fp16 = False
    for k in kernels:
        body, hs, uses = _print_kernel(k, dialect)
        helpers.update(hs)
        bodies.append(body)
        fp16 = fp16 or uses
    pre = dialect.prelude + (dialect.fp16_prelude if fp16 else "")
    return pre + "".join(h + "\n" for h in helpers.values()) + "\n".join(bodies)
