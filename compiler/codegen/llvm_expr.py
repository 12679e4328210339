"""LLVM IR for loop-IR expressions: types, scalar and vector (one lane per vectorized iteration)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from ..te import dtype as dt
from ..te.expr import (
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
from ..tir.stmt import Buffer, BufferLoad, LoweringError
from .llvm_math import exp_f32, sigmoid_f32, tanh_f32

I1, I8, I16 = ir.IntType(1), ir.IntType(8), ir.IntType(16)
I32, I64 = ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()

_SCALAR = {
    "bool": I1,
    "int8": I8,
    "uint8": I8,
    "int16": I16,
    "uint16": I16,
    "int32": I32,
    "uint32": I32,
    "int64": I64,
    "uint64": I64,
    "float16": ir.HalfType(),
    "float32": ir.FloatType(),
    "float64": ir.DoubleType(),
}

# math intrinsic -> LLVM intrinsic base name (overloaded on the float type)
_LLVM_MATH = {
    "exp": "exp",
    "exp2": "exp2",
    "log": "log",
    "log2": "log2",
    "sqrt": "sqrt",
    "sin": "sin",
    "cos": "cos",
    "floor": "floor",
    "ceil": "ceil",
    "round": "roundeven",  # numpy rounds half to even
    "trunc": "trunc",
    "pow": "pow",
}
# C library functions, called per lane
_LIBM = ("tanh", "erf", "log1p", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
         "atanh")  # fmt: skip


def scalar_type(dtype: str) -> ir.Type:
    """The LLVM type of a value of `dtype` in registers (bool is i1)."""
    return _SCALAR[dt.check_dtype(dtype)]


def memory_type(dtype: str) -> ir.Type:
    """The LLVM type of a buffer element (bool is a byte, as in numpy)."""
    return I8 if dtype == "bool" else scalar_type(dtype)


def vector_of(ty: ir.Type, lanes: int) -> ir.Type:
    return ty if lanes == 1 else ir.VectorType(ty, lanes)


def lanes_of(value: ir.Value) -> int:
    return value.type.count if isinstance(value.type, ir.VectorType) else 1


def _is_trap_free_divisor(b: ir.Value, unsigned: bool) -> bool:
    """Whether `b` is a constant integer divisor that cannot trap: neither 0 nor, signed, -1
    (the index arithmetic's divisors are such constants and keep their plain division)."""
    if not isinstance(b, ir.Constant):
        return False
    values = b.constant if isinstance(b.constant, list | tuple) else [b.constant]
    values = [v.constant if isinstance(v, ir.Constant) else v for v in values]
    return all(isinstance(v, int) and v != 0 and (unsigned or v != -1) for v in values)


@dataclass
class VectorLoop:
    """The loop being vectorized: its variable stands for `base + <0, 1, ..., lanes-1>`."""

    var: Var
    base: ir.Value
    lanes: int
    at_base: bool = False  # while set, `var` reads as the scalar `base`


class ExprEmitter:
    """Emits expressions with `builder`; subclasses supply variables and buffer addresses."""

    builder: ir.IRBuilder
    module: ir.Module
    fast_math: tuple[str, ...]
    vloop: VectorLoop | None

    def lookup_var(self, var: Var) -> ir.Value:
        raise NotImplementedError

    def buffer_ptr(self, buf: Buffer) -> ir.Value:
        raise NotImplementedError

    def linear_coeff(self, index: Expr, var: Var) -> int | None:
        raise NotImplementedError

    # ---- helpers ----------------------------------------------------------------------------

    def broadcast(self, value: ir.Value, lanes: int) -> ir.Value:
        if lanes == 1 or lanes_of(value) == lanes:
            return value
        vec_ty = ir.VectorType(value.type, lanes)
        one = self.builder.insert_element(ir.Constant(vec_ty, ir.Undefined), value, I32(0))
        mask = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
        return self.builder.shuffle_vector(one, ir.Constant(vec_ty, ir.Undefined), mask)

    def unify(self, *values: ir.Value) -> list[ir.Value]:
        lanes = max(lanes_of(v) for v in values)
        return [self.broadcast(v, lanes) for v in values]

    def constant(self, dtype: str, value: Any, lanes: int = 1) -> ir.Value:
        c = ir.Constant(scalar_type(dtype), value)
        return c if lanes == 1 else ir.Constant(ir.VectorType(c.type, lanes), [value] * lanes)

    # ---- dispatch ---------------------------------------------------------------------------

    def emit(self, e: Expr) -> ir.Value:
        method = getattr(self, "emit_" + type(e).__name__, None)
        if method is None:
            raise LoweringError(f"llvm codegen: expression {type(e).__name__} is not supported")
        return method(e)

    def emit_at_base(self, e: Expr) -> ir.Value:
        """`e` evaluated for the first lane of the vectorized loop (a scalar)."""
        assert self.vloop is not None
        saved, self.vloop.at_base = self.vloop.at_base, True
        try:
            return self.emit(e)
        finally:
            self.vloop.at_base = saved

    def emit_IntImm(self, e: IntImm) -> ir.Value:
        return self.constant(e.dtype, e.value)

    def emit_FloatImm(self, e: FloatImm) -> ir.Value:
        return self.constant(e.dtype, e.value)

    def emit_Var(self, e: Var) -> ir.Value:
        vl = self.vloop
        if vl is not None and e is vl.var:
            if vl.at_base:
                return vl.base
            ramp = ir.Constant(ir.VectorType(vl.base.type, vl.lanes), list(range(vl.lanes)))
            return self.builder.add(self.broadcast(vl.base, vl.lanes), ramp)
        return self.lookup_var(e)

    def emit_Not(self, e: Not) -> ir.Value:
        a = self.emit(e.a)
        return self.builder.xor(a, self.constant("bool", 1, lanes_of(a)))

    def emit_Select(self, e: Select) -> ir.Value:
        c, t, f = self.unify(
            self.emit(e.condition), self.emit(e.true_value), self.emit(e.false_value)
        )
        return self.builder.select(c, t, f)

    def emit_Cast(self, e: Cast) -> ir.Value:
        return self.convert(self.emit(e.value), e.value.dtype, e.dtype)

    def _double_to_float_odd(self, v: ir.Value, lanes: int) -> ir.Value:
        """float32 `v` rounded to odd (toward zero, the last bit set when inexact), so that
        rounding it on to float16 gives the correctly rounded float16 of the double (24 bits
        are at least float16's 11 + 2). A direct double -> half `fptrunc` is a call to
        compiler-rt's `__truncdfhf2`, which the process does not have on CPUs without
        AVX512-FP16 (the module crashed there)."""
        b = self.builder
        f32, i32 = vector_of(ir.FloatType(), lanes), vector_of(I32, lanes)
        near = b.fptrunc(v, f32)
        back = b.fpext(near, v.type)
        bits = b.bitcast(near, i32)
        # |near| > |v|: one step toward zero (the magnitude's bits minus 1; not for inf/NaN)
        away = b.fcmp_ordered(">", self._fabs(back), self._fabs(v))
        bits = b.select(away, b.sub(bits, self.constant("int32", 1, lanes)), bits)
        inexact = b.fcmp_ordered("!=", b.fpext(b.bitcast(bits, f32), v.type), v)
        bits = b.select(inexact, b.or_(bits, self.constant("int32", 1, lanes)), bits)
        return b.bitcast(bits, f32)

    def _fabs(self, v: ir.Value) -> ir.Value:
        ty = v.type
        name = f"llvm.fabs.v{ty.count}f64" if isinstance(ty, ir.VectorType) else "llvm.fabs.f64"
        module = self.builder.module
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(ty, [ty]), name)
        return self.builder.call(fn, [v])

    def convert(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        b, lanes = self.builder, lanes_of(v)
        to = vector_of(scalar_type(dst), lanes)
        if src == dst:
            return v
        if dst == "bool":
            zero = self.constant(src, 0.0 if dt.is_float(src) else 0, lanes)
            return (
                b.fcmp_unordered("!=", v, zero)
                if dt.is_float(src)
                else b.icmp_unsigned("!=", v, zero)
            )
        if dt.is_float(src) and dt.is_float(dst):
            if dt.bits(dst) > dt.bits(src):
                return b.fpext(v, to)
            if dt.bits(src) == 64 and dt.bits(dst) == 16:
                return b.fptrunc(self._double_to_float_odd(v, lanes), to)
            return b.fptrunc(v, to)
        if dt.is_float(src):
            # 8- and 16-bit results go through int32, as C casts do on x86 (onnxruntime's
            # static_cast, numpy's astype): an out-of-range value wraps, NaN and infinities
            # become 0. A direct fptosi to i8 is poison there, and LLVM's vector code saturated
            # where its scalar code wrapped.
            if dt.bits(dst) < 32:
                return b.trunc(b.fptosi(v, vector_of(I32, lanes)), to)
            return b.fptoui(v, to) if dt.is_uint(dst) else b.fptosi(v, to)
        unsigned = src == "bool" or dt.is_uint(src)
        if dt.is_float(dst):
            return b.uitofp(v, to) if unsigned else b.sitofp(v, to)
        if dt.bits(dst) < dt.bits(src):
            return b.trunc(v, to)
        if dt.bits(dst) == dt.bits(src):
            return v
        return b.zext(v, to) if unsigned else b.sext(v, to)

    # ---- arithmetic -------------------------------------------------------------------------

    def emit_BinOp(self, e: BinOp) -> ir.Value:
        a, b = self.unify(self.emit(e.a), self.emit(e.b))
        dtype = e.a.dtype
        if e.op in (Op.AND, Op.OR):
            return self.builder.and_(a, b) if e.op is Op.AND else self.builder.or_(a, b)
        if e.op in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE):
            return self.compare(e.op.value, a, b, dtype)
        if dt.is_float(dtype):
            return self.float_op(e.op, a, b, dtype)
        return self.int_op(e.op, a, b, dtype)

    def compare(self, op: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        if dt.is_float(dtype):
            if op == "!=":
                return self.builder.fcmp_unordered(op, a, b)
            return self.builder.fcmp_ordered(op, a, b)
        if dtype == "bool" or dt.is_uint(dtype):
            return self.builder.icmp_unsigned(op, a, b)
        return self.builder.icmp_signed(op, a, b)

    def float_op(self, op: Op, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        bld, fm = self.builder, self.fast_math
        if op is Op.ADD:
            return bld.fadd(a, b, flags=fm)
        if op is Op.SUB:
            return bld.fsub(a, b, flags=fm)
        if op is Op.MUL:
            return bld.fmul(a, b, flags=fm)
        if op is Op.DIV:
            return bld.fdiv(a, b, flags=fm)
        if op is Op.MIN:
            return bld.select(bld.fcmp_ordered("<", b, a), b, a)
        if op is Op.MAX:
            return bld.select(bld.fcmp_ordered(">", b, a), b, a)
        if op not in (Op.FLOORDIV, Op.FLOORMOD):
            raise LoweringError(f"llvm codegen: {op.value} of {dtype} operands is not defined")
        q = self.math_call("floor", [bld.fdiv(a, b, flags=fm)], dtype)
        if op is Op.FLOORDIV:
            return q
        return bld.fsub(a, bld.fmul(q, b, flags=fm), flags=fm)  # FLOORMOD

    def int_op(self, op: Op, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        bld = self.builder
        unsigned = dt.is_uint(dtype) or dtype == "bool"
        simple = {Op.ADD: bld.add, Op.SUB: bld.sub, Op.MUL: bld.mul}
        if op in simple:
            return simple[op](a, b)
        if op is Op.MIN:
            return bld.select(self.compare("<", b, a, dtype), b, a)
        if op is Op.MAX:
            return bld.select(self.compare(">", b, a, dtype), b, a)
        bitwise = {Op.BIT_AND: bld.and_, Op.BIT_OR: bld.or_, Op.BIT_XOR: bld.xor}
        if op in bitwise:
            return bitwise[op](a, b)
        if op in (Op.SHL, Op.SHR):
            return self.checked_shift(op, a, b, dtype)
        if not _is_trap_free_divisor(b, unsigned):
            return self.guarded_divide(op, a, b, dtype, unsigned)
        return self.divide(op, a, b, unsigned)

    def checked_shift(self, op: Op, x: ir.Value, n: ir.Value, dtype: str) -> ir.Value:
        """`x << n` / `x >> n` at every amount, as numpy and onnxruntime: LLVM's shl/lshr/ashr
        by `bits` or more are poison, so the amount is read as unsigned and one past the
        width gives 0 (`<<`, unsigned `>>`) or the sign bits (signed `>>`: an ashr by
        bits - 1). In range, the masked amount is the amount itself."""
        bld, lanes = self.builder, lanes_of(x)
        width = dt.bits(dtype)
        in_range = bld.icmp_unsigned("<", n, self.constant(dtype, width, lanes))
        if op is Op.SHR and not dt.is_uint(dtype):
            return bld.ashr(x, bld.select(in_range, n, self.constant(dtype, width - 1, lanes)))
        masked = bld.and_(n, self.constant(dtype, width - 1, lanes))
        shifted = bld.shl(x, masked) if op is Op.SHL else bld.lshr(x, masked)
        return bld.select(in_range, shifted, self.constant(dtype, 0, lanes))

    def divide(self, op: Op, a: ir.Value, b: ir.Value, unsigned: bool) -> ir.Value:
        bld = self.builder
        if unsigned:
            return bld.udiv(a, b) if op in (Op.DIV, Op.FLOORDIV) else bld.urem(a, b)
        if op is Op.DIV:
            return bld.sdiv(a, b)
        return self.floor_divmod(op, a, b)

    def guarded_divide(
        self, op: Op, a: ir.Value, b: ir.Value, dtype: str, unsigned: bool
    ) -> ir.Value:
        """An integer division by a divisor known only at run time. x86's div traps (SIGFPE:
        the whole process) on a zero divisor and on a signed minimum divided by -1; here a
        quotient or remainder by 0 is 0 (numpy's) and a signed division by -1 is the negation
        (wrapping at the minimum, numpy's) with remainder 0."""
        bld, lanes = self.builder, lanes_of(a)
        zero, one = self.constant(dtype, 0, lanes), self.constant(dtype, 1, lanes)
        by_zero = bld.icmp_unsigned("==", b, zero)
        if unsigned:
            return bld.select(by_zero, zero, self.divide(op, a, bld.select(by_zero, one, b), True))
        by_minus_one = bld.icmp_signed("==", b, self.constant(dtype, -1, lanes))
        safe = bld.select(bld.or_(by_zero, by_minus_one), one, b)
        by_minus_one_result = zero if op is Op.FLOORMOD else bld.sub(zero, a)
        result = bld.select(by_minus_one, by_minus_one_result, self.divide(op, a, safe, False))
        return bld.select(by_zero, zero, result)

    def floor_divmod(self, op: Op, a: ir.Value, b: ir.Value) -> ir.Value:
        """Floor division/modulo from C's truncating ones: adjust when the signs differ."""
        bld = self.builder
        q, r = bld.sdiv(a, b), bld.srem(a, b)
        zero = ir.Constant(a.type, None)
        differ = bld.icmp_signed("<", bld.xor(r, b), zero)
        adjust = bld.and_(bld.icmp_signed("!=", r, zero), differ)
        if op is Op.FLOORDIV:
            return bld.sub(q, bld.zext(adjust, a.type))
        return bld.select(adjust, bld.add(r, b), r)

    # ---- calls ------------------------------------------------------------------------------

    def emit_Call(self, e: Call) -> ir.Value:
        if e.name == "if_then_else":
            return self.lazy_select(e)
        if e.kind is CallKind.EXTERN:
            raise LoweringError(
                f"llvm codegen: extern call {e.name!r} has no CPU implementation "
                "(tensor intrinsics for the CPU are not built yet)"
            )
        args = self.unify(*(self.emit(a) for a in e.args))
        if e.name in INT_INTRINSICS:
            return self.shift(e.name, args[0], args[1], e.dtype)
        if e.name == "reinterpret":
            to = vector_of(scalar_type(e.dtype), lanes_of(args[0]))
            return self.builder.bitcast(args[0], to)
        return self.math_call(e.name, args, e.dtype)

    def shift(self, name: str, x: ir.Value, n: ir.Value, dtype: str) -> ir.Value:
        """shl / ashr / lshr; the amount is in [0, bits) by the intrinsic's contract."""
        if name == "shift_left":
            return self.builder.shl(x, n)
        return self.builder.lshr(x, n) if dt.is_uint(dtype) else self.builder.ashr(x, n)

    def math_call(self, name: str, args: list[ir.Value], dtype: str) -> ir.Value:
        if dtype == "float16":  # compute in float32, as C does
            wide = [self.convert(a, "float16", "float32") for a in args]
            return self.convert(self.math_call(name, wide, "float32"), "float32", "float16")
        bld, fm = self.builder, self.fast_math
        one = self.constant(dtype, 1.0, lanes_of(args[0]))
        if name == "rsqrt":
            return bld.fdiv(one, self.math_call("sqrt", args, dtype), flags=fm)
        if name == "sigmoid" and dtype == "float32":
            return sigmoid_f32(bld, args[0])
        if name == "sigmoid":
            neg = bld.fsub(self.constant(dtype, 0.0, lanes_of(args[0])), args[0], flags=fm)
            denom = bld.fadd(one, self.math_call("exp", [neg], dtype), flags=fm)
            return bld.fdiv(one, denom, flags=fm)
        if name == "exp" and dtype == "float32":  # stays vector code (no libm call per lane)
            return exp_f32(bld, args[0])
        if name == "tanh" and dtype == "float32":  # vector code too (GELU's tanh form)
            return tanh_f32(bld, args[0])
        if name == "fmod":  # LLVM's frem is C's fmod
            return bld.frem(args[0], args[1])
        if name in _LIBM:
            return self.per_lane(lambda xs: self.libm_call(name, xs, dtype), args)
        if name not in _LLVM_MATH:
            raise LoweringError(f"llvm codegen: math intrinsic {name!r} is not supported")
        ty = args[0].type
        fn = self.declare(f"llvm.{_LLVM_MATH[name]}.{_mangle(ty)}", ty, [ty] * len(args))
        return bld.call(fn, args, fastmath=fm)

    def libm_call(self, name: str, args: list[ir.Value], dtype: str) -> ir.Value:
        cname = name + ("f" if dtype == "float32" else "")
        ty = args[0].type
        return self.builder.call(self.declare(cname, ty, [ty] * len(args)), args)

    def per_lane(self, fn: Any, args: list[ir.Value]) -> ir.Value:
        lanes = lanes_of(args[0])
        if lanes == 1:
            return fn(args)
        bld = self.builder
        values = [fn([bld.extract_element(a, I32(k)) for a in args]) for k in range(lanes)]
        out = ir.Constant(ir.VectorType(values[0].type, lanes), ir.Undefined)
        for k, lane in enumerate(values):
            out = bld.insert_element(out, lane, I32(k))
        return out

    def declare(self, name: str, ret: ir.Type, params: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, params), name=name)

    def lazy_select(self, e: Call) -> ir.Value:
        """`if_then_else`: only the chosen branch runs (scalar; vector loops never reach here)."""
        cond = self.emit(e.args[0])
        if lanes_of(cond) != 1:
            raise LoweringError("llvm codegen: if_then_else inside a vector lane (internal)")
        bld = self.builder
        with bld.if_else(cond) as (then, otherwise):
            with then:
                t = self.emit(e.args[1])
                t_block = bld.block
            with otherwise:
                f = self.emit(e.args[2])
                f_block = bld.block
        phi = bld.phi(t.type)
        phi.add_incoming(t, t_block)
        phi.add_incoming(f, f_block)
        return phi

    # ---- memory -----------------------------------------------------------------------------

    def element_ptr(self, buf: Buffer, index: ir.Value) -> ir.Value:
        idx = self.builder.sext(index, I64) if index.type != I64 else index
        ptr = self.builder.gep(
            self.buffer_ptr(buf), [idx], inbounds=True, source_etype=memory_type(buf.dtype)
        )
        ptr.type = PTR  # llvmlite types the result; keep it opaque so vectors can be stored
        return ptr

    def emit_BufferLoad(self, e: BufferLoad) -> ir.Value:
        (index,) = e.indices
        buf, mem_ty = e.buffer, memory_type(e.buffer.dtype)
        align = max(dt.bits(buf.dtype) // 8, 1)
        vl = self.vloop
        coeff = None if vl is None or vl.at_base else self.linear_coeff(index, vl.var)
        if vl is not None and not vl.at_base and coeff == 1:
            ptr = self.element_ptr(buf, self.emit_at_base(index))
            value = self.builder.load(ptr, typ=ir.VectorType(mem_ty, vl.lanes), align=align)
        else:
            idx = self.emit(index)
            if lanes_of(idx) == 1:
                value = self.builder.load(self.element_ptr(buf, idx), typ=mem_ty, align=align)
            else:  # gather
                value = self.per_lane(
                    lambda i: self.builder.load(self.element_ptr(buf, i[0]), typ=mem_ty), [idx]
                )
        if buf.dtype == "bool":
            return self.convert(value, "int8", "bool")
        return value


def _mangle(ty: ir.Type) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_mangle(ty.element)}"
    names = {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}
    return names[type(ty)]
