"""LLVM IR for loop-IR expressions: types, scalar and vector (one lane per vectorized iteration)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llvmlite import ir

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
    features: frozenset[str] = frozenset()  # the target's "+feature" words (x86 intrinsics)

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

    def _float_to_int(self, v: ir.Value, src: str, dst: str, lanes: int) -> ir.Value:
        """A float converted to an integer as C casts do on x86-64 (onnxruntime's static_cast,
        numpy's astype), out-of-range values, infinities and NaN included. LLVM's
        fptosi/fptoui make poison of those, and its vector and scalar code then gave different
        answers within one tensor (uint32: 4294967295 in vector lanes, 0 in the scalar tail).

        - int32/int64: `cvtt` (truncation; outside the type, or NaN, its lowest value);
        - 8- and 16-bit: the int32 result's low bits (3e9 -> 0, -1.0 -> 255 for uint8);
        - uint32/uint64: `cvtt(x)` below 2**(bits-1), else `cvtt(x - 2**(bits-1))` with the top
          bit flipped (3e9 -> 3000000000, -1.0 -> 2**bits - 1, 5e9 and inf -> 0, NaN -> 2**31);
          from float16 to uint32, the int64 result's low bits (NaN and infinities -> 0).
        """
        b = self.builder
        half_to_u32 = dt.bits(src) < 32 and dst == "uint32"  # (their C cast: via int64)
        if dt.bits(src) < 32:  # (half: exact in float32, where 2**31 is a number)
            v, src = b.fpext(v, vector_of(ir.FloatType(), lanes)), "float32"
        bits = 64 if dt.bits(dst) == 64 or half_to_u32 else 32
        wide = vector_of(I64 if bits == 64 else I32, lanes)
        half = self.constant(src, float(2 ** (bits - 1)), lanes)

        def cvtt(x: ir.Value) -> ir.Value:
            inside = b.and_(
                b.fcmp_ordered(">=", x, b.fneg(half)), b.fcmp_ordered("<", x, half)
            )  # (NaN: false)
            lowest = self.constant("int64" if bits == 64 else "int32", -(2 ** (bits - 1)), lanes)
            return b.select(inside, b.fptosi(x, wide), lowest)

        if dt.is_uint(dst) and dt.bits(dst) >= 32 and not half_to_u32:
            top = self.constant("int64" if bits == 64 else "int32", -(2 ** (bits - 1)), lanes)
            high = b.xor(cvtt(b.fsub(v, half)), top)
            return b.select(b.fcmp_ordered(">=", v, half), high, cvtt(v))
        result = cvtt(v)
        return (
            result if dt.bits(dst) == bits else b.trunc(result, vector_of(scalar_type(dst), lanes))
        )

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
            return self._float_to_int(v, src, dst, lanes)
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
        if e.op is Op.ADD and e.dtype == "int32":  # acc + dot(...): one vpdpbusd
            for acc, dot in ((e.a, e.b), (e.b, e.a)):
                if isinstance(dot, Call) and dot.name in DOT_INTRINSICS:
                    return self.dot(dot, self.emit(acc))
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
        if e.name in DOT_INTRINSICS:
            return self.dot(e)
        args = self.unify(*(self.emit(a) for a in e.args))
        if e.name in INT_INTRINSICS:
            return self.shift(e.name, args[0], args[1], e.dtype)
        if e.name == "reinterpret":
            to = vector_of(scalar_type(e.dtype), lanes_of(args[0]))
            return self.builder.bitcast(args[0], to)
        return self.math_call(e.name, args, e.dtype)

    # ---- dot products of packed integers ------------------------------------------------------

    def dot(self, e: Call, acc: ir.Value | None = None) -> ir.Value:
        """`te.dot_i16x2` / `te.dot_u8i8x4` of int32 words, plus `acc` when given: x86's
        pmaddwd (an add after it, which LLVM folds into vpdpwssd on VNNI CPUs) or vpdpbusd
        (accumulating in place; the non-saturating form, so the sum wraps as an int32 add;
        without VNNI two pmaddwd of the even and odd bytes widened to int16) over the vector in
        chunks of the widest instruction that divides the lanes; a vector no instruction
        divides (the 1- and 2-lane tails of a 3-column tile) is padded to the narrowest one
        and its lanes taken back. Only targets without them (no x86 features) get the
        arithmetic written out. (Leaving short tails to that arithmetic, LLVM's SLP vectorizer
        merged them into vectors of mixed operations that its x86 back-end then miscompiled in
        the small code model of object files: wrong sums in a 3-column QLinearMatMul.)"""
        values = [self.emit(a) for a in e.args] + ([acc] if acc is not None else [])
        values = self.unify(*values)
        a, b = values[:2]
        acc = values[2] if acc is not None else None
        lanes = lanes_of(a)
        plan = self._dot_plan(e.name)
        if not plan:
            value = self._dot_arithmetic(e.name, a, b)
            return value if acc is None else self.builder.add(acc, value)
        for width, intrinsic in plan:
            count = lanes // width
            if lanes % width == 0 and count & (count - 1) == 0:
                return self._dot_chunks(e.name, intrinsic, width, a, b, acc)
        width, intrinsic = plan[-1]  # pad to a power of two lanes, a multiple of the narrowest
        padded = max(width, 1 << (lanes - 1).bit_length())
        parts = [None if v is None else self._padded(v, padded) for v in (a, b, acc)]
        value = self._dot_chunks(e.name, intrinsic, width, *parts)
        if lanes == 1:
            return self.builder.extract_element(value, I32(0))
        return self._lanes(value, 0, lanes)

    def _dot_plan(self, name: str) -> list[tuple[int, str]]:
        """(int32 lanes, LLVM intrinsic) of the x86 instructions for dot intrinsic `name` on
        this target, widest first: pmaddwd's (SSE2, AVX2, AVX-512BW), and for `dot_u8i8x4`
        vpdpbusd's (AVX-512 VNNI, and AVX-VNNI or VNNI with VL for 256 and 128 bits), else
        pmaddwd's too (two per word); none off x86."""
        f = self.features
        pairs = [
            (16, "llvm.x86.avx512.pmaddw.d.512", "+avx512bw" in f),
            (8, "llvm.x86.avx2.pmadd.wd", "+avx2" in f),
            (4, "llvm.x86.sse2.pmadd.wd", "+sse2" in f),
        ]
        pairs = [(w, i) for w, i, ok in pairs if ok]
        if name == "dot_i16x2":
            return pairs
        narrow = "+avxvnni" in f or {"+avx512vnni", "+avx512vl"} <= f
        quads = [
            (16, "llvm.x86.avx512.vpdpbusd.512", "+avx512vnni" in f),
            (8, "llvm.x86.avx512.vpdpbusd.256", narrow),
            (4, "llvm.x86.avx512.vpdpbusd.128", narrow),
        ]
        quads = [(w, i) for w, i, ok in quads if ok]
        widths = {w for w, _ in quads}
        return quads + [(w, i) for w, i in pairs if w < min(widths, default=64)]

    def _dot_chunks(
        self, name: str, intrinsic: str, width: int, a: ir.Value, b: ir.Value,
        acc: ir.Value | None,
    ) -> ir.Value:  # fmt: skip
        """The dot of vectors whose lanes are a power-of-two multiple of `width`, one call of
        `intrinsic` per `width` lanes, the results concatenated."""
        lanes = lanes_of(a)
        parts = []
        for start in range(0, lanes, width):
            ak, bk = (self._lanes(v, start, width) for v in (a, b))
            ck = None if acc is None else self._lanes(acc, start, width)
            parts.append(self._dot_call(name, intrinsic, width, ak, bk, ck))
        while len(parts) > 1:  # concatenated pairwise
            n = lanes_of(parts[0])
            mask = ir.Constant(ir.VectorType(I32, 2 * n), list(range(2 * n)))
            pairs = zip(parts[::2], parts[1::2], strict=True)
            parts = [self.builder.shuffle_vector(x, y, mask) for x, y in pairs]
        return parts[0]

    def _padded(self, v: ir.Value, lanes: int) -> ir.Value:
        """`v` (a scalar or a shorter vector) as the first lanes of a `lanes`-lane vector; the
        other lanes are zeros."""
        vec = ir.VectorType(v.type if lanes_of(v) == 1 else v.type.element, lanes)
        if lanes_of(v) == 1:
            return self.builder.insert_element(ir.Constant(vec, None), v, I32(0))
        count = lanes_of(v)
        mask = ir.Constant(ir.VectorType(I32, lanes),
                           [k if k < count else count for k in range(lanes)])  # fmt: skip
        return self.builder.shuffle_vector(v, ir.Constant(v.type, None), mask)

    def _dot_call(
        self, name: str, intrinsic: str, width: int, a: ir.Value, b: ir.Value, acc: ir.Value | None
    ) -> ir.Value:
        bld, i32 = self.builder, ir.VectorType(I32, width)
        i16 = ir.VectorType(I16, 2 * width)
        if "pmadd" in intrinsic:
            fn = self.declare(intrinsic, i32, [i16, i16])
            if name == "dot_i16x2":
                value = bld.call(fn, [bld.bitcast(a, i16), bld.bitcast(b, i16)])
            else:  # u8 x s8 without VNNI: even and odd bytes widened to int16 halves
                low = ir.Constant(i32, [0x00FF00FF] * width)
                eight = ir.Constant(i16, [8] * (2 * width))
                b16 = bld.bitcast(b, i16)
                a_odd = bld.and_(bld.lshr(a, ir.Constant(i32, [8] * width)), low)
                a_even = bld.and_(a, low)
                b_even, b_odd = bld.ashr(bld.shl(b16, eight), eight), bld.ashr(b16, eight)
                value = bld.add(bld.call(fn, [bld.bitcast(a_even, i16), b_even]),
                                bld.call(fn, [bld.bitcast(a_odd, i16), b_odd]))  # fmt: skip
            return value if acc is None else bld.add(acc, value)
        i8 = ir.VectorType(I8, 4 * width)  # LLVM 22's signature (i32 words before)
        fn = self.declare(intrinsic, i32, [i32, i8, i8])
        acc = ir.Constant(i32, None) if acc is None else acc
        return bld.call(fn, [acc, bld.bitcast(a, i8), bld.bitcast(b, i8)])

    def _dot_arithmetic(self, name: str, a: ir.Value, b: ir.Value) -> ir.Value:
        """The dot intrinsic as shifts, multiplies and adds of int32 (vector) values."""
        bld, lanes = self.builder, lanes_of(a)

        def const(v: int) -> ir.Value:
            return self.constant("int32", v, lanes)

        if name == "dot_i16x2":  # sign-extended halves
            lo = [bld.ashr(bld.shl(v, const(16)), const(16)) for v in (a, b)]
            hi = [bld.ashr(v, const(16)) for v in (a, b)]
            return bld.add(bld.mul(*lo), bld.mul(*hi))
        total = None
        for j in range(4):  # a's bytes zero-extended, b's sign-extended
            ua = bld.and_(bld.lshr(a, const(8 * j)), const(255))
            sb = bld.ashr(bld.shl(b, const(24 - 8 * j)), const(24))
            product = bld.mul(ua, sb)
            total = product if total is None else bld.add(total, product)
        assert total is not None
        return total

    def strided_indices(self, index: Expr, stride: int) -> list[ir.Value]:
        """Each lane's `index` in the vectorized loop, whose lanes are `stride` apart: the first
        lane's scalar plus constants, scalars all. Gathers and scatters address their lanes with
        these (an immediate offset each); the vector of them, built and taken apart lane by lane,
        cost a vpextrd per lane on x86 (a third of a 14-column tile transpose's time)."""
        assert self.vloop is not None
        base = self.emit_at_base(index)
        return [base if k == 0 else self.builder.add(base, ir.Constant(base.type, k * stride))
                for k in range(self.vloop.lanes)]  # fmt: skip

    def _lanes(self, v: ir.Value, start: int, count: int) -> ir.Value:
        """Lanes [start, start + count) of vector `v` (`v` itself when that is all of it)."""
        if start == 0 and count == lanes_of(v):
            return v
        mask = ir.Constant(ir.VectorType(I32, count), list(range(start, start + count)))
        return self.builder.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), mask)

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
        elif vl is not None and coeff:  # a constant stride: lane k at base + k * stride
            loads = [self.builder.load(self.element_ptr(buf, i), typ=mem_ty, align=align)
                     for i in self.strided_indices(index, coeff)]  # fmt: skip
            value = ir.Constant(ir.VectorType(mem_ty, len(loads)), ir.Undefined)
            for k, lane in enumerate(loads):
                value = self.builder.insert_element(value, lane, I32(k))
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
