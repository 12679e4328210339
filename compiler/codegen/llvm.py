"""Loop IR -> LLVM IR (llvmlite): loops, vectorized loops as LLVM vectors, outlined parallel loops.

A `PrimFunc` becomes `void name(ptr arg0, ptr arg1, ...)`: one `noalias` data pointer per
parameter buffer (arguments must not overlap). Loops run as follows:

- serial / unrolled (what `unroll` left): an ordinary counted loop; one whose body loads, only
  under a condition, at an index that is no affine function of its variable (a Gather's
  table at `i % 4` inside a Pad's bounds test) is marked `llvm.loop.vectorize.enable false`:
  LLVM 22's loop vectorizer turns such a load into one contiguous masked load, reading
  other elements than the loop's (wrong answers, and crashes when the addresses leave the
  buffer: `torch.nn.Unfold` with padding and dilation, benchmarks/torch_catalog.py);
- vectorized with a constant extent whose body is stores of expressions: one iteration over
  `<extent x T>` vectors, in power-of-two runs when the extent is not one (contiguous accesses
  become vector loads/stores, others gathers and scatters); any other vectorized loop runs
  serially and is left to LLVM's loop vectorizer;
- parallel (the outermost one of a nest): the body is outlined into a task
  `void task(ptr closure, i32 task_id, i32 num_tasks)` that runs contiguous chunk `task_id` of
  `num_tasks` near-equal chunks of the iterations (sizes differ by one at most), started through
  `tf_parallel_for(task, closure, extent)` (the runtime's thread pool picks num_tasks).

`Allocate` becomes a 64-byte aligned stack slot up to `STACK_LIMIT` bytes, else `aligned_alloc`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llvmlite import ir

from ..schedule.stage import ForKind
from ..te import dtype as dt
from ..te.expr import Call, CallKind, Expr, IntImm, Var
from ..te.visitor import structural_key
from ..tir.arith import Analyzer
from ..tir.stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferLoad,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LoweringError,
    PrimFunc,
    SeqStmt,
    Stmt,
    const_int,
    walk,
)
from .llvm_expr import (
    I32,
    I64,
    PTR,
    ExprEmitter,
    VectorLoop,
    lanes_of,
    memory_type,
    scalar_type,
)

ALIGN = 64
STACK_LIMIT = 64 * 1024  # bytes; larger allocations go to the heap
MAX_LANES = 64  # wider vectorized loops run serially (left to LLVM)
LAUNCH = "tf_parallel_for"


@dataclass
class CodegenOptions:
    """Code generation switches.

    Attributes:
        fast_math: allow every float reassociation ("fast"); off by default.
        contract: allow fusing a*b+c into FMA ("contract"); on by default.
        vector_width: the preferred vector width in bits for LLVM's vectorizers.
        features: the target CPU's features ("+avx512vnni", ...: `llvm_jit.target_features`)
            that expressions may be emitted as target intrinsics for (the dot products of
            `te.dot_i16x2` / `te.dot_u8i8x4` as pmaddwd / vpdpbusd); none: portable code.
    """

    fast_math: bool = False
    contract: bool = True
    vector_width: int = 512
    features: frozenset[str] = frozenset()

    @property
    def flags(self) -> tuple[str, ...]:
        if self.fast_math:
            return ("fast",)
        return ("contract",) if self.contract else ()


@dataclass
class _FuncState:
    fn: ir.Function
    entry: ir.IRBuilder  # positioned in the entry block, for allocas
    vars: dict[Var, ir.Value] = field(default_factory=dict)
    bufs: dict[Buffer, ir.Value] = field(default_factory=dict)
    in_parallel: bool = False


class CodeGenLLVM(ExprEmitter):
    """Builds one LLVM module from loop-IR functions (after `tir.DEFAULT_PIPELINE`)."""

    def __init__(self, module_name: str = "tensorforge", options: CodegenOptions | None = None):
        self.module = ir.Module(name=module_name)
        self.options = options or CodegenOptions()
        self.fast_math = self.options.flags
        self.features = self.options.features
        self.vloop: VectorLoop | None = None
        self.ana = Analyzer()
        self.outlined = 0
        self._no_vectorize: ir.MDValue | None = None

    # ---- ExprEmitter hooks ------------------------------------------------------------------

    def lookup_var(self, var: Var) -> ir.Value:
        value = self.state.vars.get(var)
        if value is None:
            raise LoweringError(f"llvm codegen: variable {var.name!r} is used outside its loop")
        return value

    def buffer_ptr(self, buf: Buffer) -> ir.Value:
        ptr = self.state.bufs.get(buf)
        if ptr is None:
            raise LoweringError(f"llvm codegen: buffer {buf.name!r} is not allocated here")
        return ptr

    def linear_coeff(self, index: Expr, var: Var) -> int | None:
        got = self.ana.linear_in(index, var)
        return None if got is None else got[0]

    # ---- functions --------------------------------------------------------------------------

    def new_function(self, name: str, params: list[ir.Type], internal: bool) -> _FuncState:
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), params), name=name)
        if internal:
            fn.linkage = "internal"
        set.add(fn.attributes, f'"prefer-vector-width"="{self.options.vector_width}"')
        fn.attributes.add("nounwind")
        entry = ir.IRBuilder(fn.append_basic_block("entry"))
        self.builder = ir.IRBuilder(fn.append_basic_block("start"))
        return _FuncState(fn, entry)

    def finish_function(self, state: _FuncState) -> None:
        self.builder.ret_void()
        state.entry.branch(state.fn.blocks[1])

    def add_function(self, func: PrimFunc) -> None:
        """Emit `func` as an externally visible function of the module."""
        for buf in func.params:
            if len(buf.shape) != 1:
                raise LoweringError(
                    f"llvm codegen: parameter {buf.name!r} of {func.name!r} must be 1-D "
                    "(run tir.DEFAULT_PIPELINE first)"
                )
        self.state = self.new_function(func.name, [PTR] * len(func.params), internal=False)
        for arg, buf in zip(self.state.fn.args, func.params, strict=True):
            arg.name = buf.name
            arg.add_attribute("noalias")
            self.state.bufs[buf] = arg
        self.stmt(func.body)
        self.finish_function(self.state)

    # ---- statements -------------------------------------------------------------------------

    def stmt(self, s: Stmt) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise LoweringError(f"llvm codegen: statement {type(s).__name__} is not supported")
        method(s)

    def stmt_SeqStmt(self, s: SeqStmt) -> None:
        for child in s.stmts:
            self.stmt(child)

    def stmt_AttrStmt(self, s: AttrStmt) -> None:
        self.stmt(s.body)

    def stmt_Evaluate(self, s: Evaluate) -> None:
        if not isinstance(s.value, IntImm):
            self.emit(s.value)

    def stmt_IfThenElse(self, s: IfThenElse) -> None:
        cond = self.emit(s.condition)
        if s.else_case is None:
            with self.builder.if_then(cond):
                self.stmt(s.then_case)
            return
        with self.builder.if_else(cond) as (then, otherwise):
            with then:
                self.stmt(s.then_case)
            with otherwise:
                self.stmt(s.else_case)

    def stmt_BufferStore(self, s: BufferStore) -> None:
        (index,) = s.indices
        value = self.emit(s.value)
        buf, bld = s.buffer, self.builder
        if buf.dtype == "bool":
            value = self.bool_to_mem(value)
        align = _byte_size(buf.dtype)
        vl = self.vloop
        if vl is None:
            bld.store(value, self.element_ptr(buf, self.emit(index)), align=align)
            return
        value = self.broadcast(value, vl.lanes)
        if self.linear_coeff(index, vl.var) == 1:
            bld.store(value, self.element_ptr(buf, self.emit_at_base(index)), align=align)
            return
        stride = self.linear_coeff(index, vl.var)
        if stride:  # scatter at a constant stride: scalar addresses (`strided_indices`)
            indices = self.strided_indices(index, stride)
        else:
            idx = self.emit(index)  # scatter
            indices = [bld.extract_element(idx, I32(k)) for k in range(vl.lanes)]
        for k, at in enumerate(indices):
            lane = bld.extract_element(value, I32(k))
            bld.store(lane, self.element_ptr(buf, at), align=align)

    def bool_to_mem(self, value: ir.Value) -> ir.Value:
        lanes = lanes_of(value)
        ty = memory_type("bool") if lanes == 1 else ir.VectorType(memory_type("bool"), lanes)
        return self.builder.zext(value, ty)

    def stmt_Allocate(self, s: Allocate) -> None:
        buf = s.buffer
        elem = memory_type(buf.dtype)
        nbytes = buf.size * _byte_size(buf.dtype)
        state = self.state
        if nbytes <= STACK_LIMIT:
            slot = state.entry.alloca(elem, size=I32(buf.size), name=buf.name)
            slot.align = ALIGN
            state.bufs[buf] = state.entry.bitcast(slot, PTR)  # opaque, like parameters
            self.stmt(s.body)
            return
        alloc = self.declare("aligned_alloc", PTR, [I64, I64])
        free = self.declare("free", ir.VoidType(), [PTR])
        size = I64(-(-nbytes // ALIGN) * ALIGN)
        state.bufs[buf] = self.builder.call(alloc, [I64(ALIGN), size], name=buf.name)
        self.stmt(s.body)
        self.builder.call(free, [state.bufs.pop(buf)])

    def stmt_For(self, s: For) -> None:
        if s.kind is ForKind.THREAD_BINDING:
            raise LoweringError(
                f"llvm codegen: loop {s.var.name!r} is bound to {s.thread_tag!r}; thread-bound "
                "loops need a GPU target"
            )
        if s.kind is ForKind.PARALLEL and not self.state.in_parallel:
            self.parallel_loop(s)
        elif s.kind is ForKind.VECTORIZED and self.vloop is None and self.can_vectorize(s):
            self.vector_loop(s)
        else:
            start = self.emit(s.min)
            self.serial_loop(s, start, self.builder.add(start, self.emit(s.extent)))

    def serial_loop(self, s: For, start: ir.Value, end: ir.Value) -> None:
        bld = self.builder
        pre = bld.block
        header = bld.append_basic_block(f"{s.var.name}.head")
        body = bld.append_basic_block(f"{s.var.name}.body")
        exit_ = bld.append_basic_block(f"{s.var.name}.exit")
        bld.branch(header)
        bld.position_at_end(header)
        i = bld.phi(start.type, name=s.var.name)
        i.add_incoming(start, pre)
        bld.cbranch(bld.icmp_signed("<", i, end), body, exit_)
        bld.position_at_end(body)
        self.state.vars[s.var] = i
        self.stmt(s.body)
        nxt = bld.add(i, ir.Constant(i.type, 1))
        i.add_incoming(nxt, bld.block)
        back = bld.branch(header)
        if self.has_guarded_irregular_load(s):
            back.set_metadata("llvm.loop", self.no_vectorize_loop_id())
        bld.position_at_end(exit_)
        del self.state.vars[s.var]

    def has_guarded_irregular_load(self, s: For) -> bool:
        """Whether a load that runs only under a condition (an `if_then_else` branch, an
        `IfThenElse` statement) reads at an index that is not affine in `s`'s variable."""
        for node in walk(s.body):
            if isinstance(node, Call) and node.name == "if_then_else":
                branches: tuple = tuple(node.args[1:])
            elif isinstance(node, IfThenElse):
                branches = (node.then_case, node.else_case) if node.else_case else (node.then_case,)
            else:
                continue
            for branch in branches:
                for inner in walk(branch):
                    if isinstance(inner, BufferLoad) and any(
                        self.ana.linear_in(index, s.var) is None for index in inner.indices
                    ):
                        return True
        return False

    def no_vectorize_loop_id(self) -> ir.MDValue:
        """The loop ID (self-referential, as LLVM requires) that keeps LLVM's loop vectorizer
        off a loop (see the module docstring: its masked loads at irregular indices)."""
        if self._no_vectorize is None:
            hint = self.module.add_metadata(
                [ir.MetaDataString(self.module, "llvm.loop.vectorize.enable"), ir.IntType(1)(0)]
            )
            loop_id = self.module.add_metadata([hint])
            loop_id.operands = (loop_id, hint)
            self._no_vectorize = loop_id
        return self._no_vectorize

    # ---- vectorized loops -------------------------------------------------------------------

    def can_vectorize(self, s: For) -> bool:
        """A constant-extent loop of stores with no cross-lane dependence (else run serially).

        Every buffer the loop stores to must be stored and loaded at one index only, which moves
        with the loop variable: then lane j only ever touches its own element.
        """
        lanes = const_int(s.extent)
        if lanes is None or not 1 < lanes <= MAX_LANES:
            return False
        stored: dict[Buffer, set[object]] = {}
        for node in walk(s.body):
            if isinstance(node, For | IfThenElse | Allocate | Evaluate):
                return False
            if isinstance(node, Call) and (
                node.name == "if_then_else" or node.kind is CallKind.EXTERN
            ):
                return False
            if isinstance(node, BufferStore):
                got = self.ana.linear_in(node.indices[0], s.var)
                if got is None or got[0] == 0:
                    return False
                stored.setdefault(node.buffer, set()).add(structural_key(node.indices[0]))
        for node in walk(s.body):
            if isinstance(node, BufferLoad) and node.buffer in stored:
                stored[node.buffer].add(structural_key(node.indices[0]))
        return all(len(keys) == 1 for keys in stored.values())

    def vector_loop(self, s: For) -> None:
        """The body once per power-of-two run of lanes (48 lanes: 32, then 16): LLVM legalizes
        a vector of another width, such as <48 x float> or a 17-lane tail, through hundreds of
        element inserts and extracts (a 6x48 dense tile ran 30x slower than 6x32)."""
        lanes = const_int(s.extent)
        assert lanes is not None
        start, offset = self.emit(s.min), 0
        while offset < lanes:
            run = 1 << ((lanes - offset).bit_length() - 1)
            base = start if not offset else self.builder.add(start, ir.Constant(start.type, offset))
            if run == 1:  # the last lane alone: scalar code
                self.state.vars[s.var] = base
                self.stmt(s.body)
                del self.state.vars[s.var]
            else:
                self.vloop = VectorLoop(s.var, base, run)
                try:
                    self.stmt(s.body)
                finally:
                    self.vloop = None
            offset += run

    # ---- parallel loops ---------------------------------------------------------------------

    def parallel_loop(self, s: For) -> None:
        """Outline `s` into a task and launch it on the thread pool with a closure of its inputs."""
        cvars, cbufs = self.free_values(s)
        outer, bld = self.state, self.builder
        closure = outer.entry.alloca(I64, size=I32(max(len(cvars) + len(cbufs), 1)), name="closure")
        values = [_to_i64(bld, self.lookup_var(v)) for v in cvars]
        values += [bld.ptrtoint(self.buffer_ptr(b), I64) for b in cbufs]
        for k, value in enumerate(values):
            bld.store(value, bld.gep(closure, [I32(k)], source_etype=I64))
        task = self.outline(s, cvars, cbufs)
        self.builder, self.state = bld, outer
        extent = _to_i64(bld, self.emit(s.extent))
        big = bld.icmp_signed(">", extent, I64(2**31 - 1))  # tasks beyond i32 are never needed
        extent = bld.trunc(bld.select(big, I64(2**31 - 1), extent), I32)
        bld.call(self.declare(LAUNCH, ir.VoidType(), [PTR, PTR, I32]), [task, closure, extent])

    def outline(self, s: For, cvars: list[Var], cbufs: list[Buffer]) -> ir.Function:
        """`task(closure, task_id, num_tasks)`: unpacks the closure and calls the loop's body
        function, whose `noalias` buffer parameters keep alias information once it is inlined."""
        self.outlined += 1
        name = f"{self.state.fn.name}.par{self.outlined}"
        body = self.task_body(f"{name}.body", s, cvars, cbufs)
        state = self.new_function(name, [PTR, I32, I32], internal=True)
        closure, tid, ntasks = state.fn.args
        bld = self.builder
        args = []
        for k, item in enumerate([*cvars, *cbufs]):
            slot = bld.load(bld.gep(closure, [I64(k)], source_etype=I64), typ=I64)
            is_var = isinstance(item, Var)
            args.append(_from_i64(bld, slot, item.dtype) if is_var else bld.inttoptr(slot, PTR))
        bld.call(body, [*args, tid, ntasks])
        self.finish_function(state)
        return state.fn

    def task_body(self, name: str, s: For, cvars: list[Var], cbufs: list[Buffer]) -> ir.Function:
        """Chunk `task_id` of `num_tasks` near-equal chunks of the loop, run serially: they differ
        by one iteration at most (ceil-sized chunks left the last ones short or empty: 10
        iterations in 8 tasks were 5 of 2 and 3 of none)."""
        params = [scalar_type(v.dtype) for v in cvars] + [PTR] * len(cbufs) + [I32, I32]
        state = self.new_function(name, params, internal=True)
        state.fn.attributes.add("alwaysinline")
        state.in_parallel = True
        self.state = state
        args = state.fn.args
        state.vars.update(zip(cvars, args[: len(cvars)], strict=True))
        for buf, arg in zip(cbufs, args[len(cvars) : -2], strict=True):
            arg.add_attribute("noalias")
            state.bufs[buf] = arg
        bld = self.builder
        start, extent = self.emit(s.min), self.emit(s.extent)
        tid, ntasks = (_resize(bld, a, extent.type) for a in args[-2:])
        # extent = q * ntasks + r: the first r chunks get q + 1 iterations, the others q (no
        # product that could overflow, and one division of the extent's own width)
        q = bld.sdiv(extent, ntasks)
        r = bld.sub(extent, bld.mul(q, ntasks))
        begin, end = (
            bld.add(bld.mul(t, q), _smin(bld, t, r))
            for t in (tid, bld.add(tid, ir.Constant(extent.type, 1)))
        )
        self.serial_loop(s, bld.add(start, begin), bld.add(start, end))
        self.finish_function(state)
        return state.fn

    def free_values(self, s: For) -> tuple[list[Var], list[Buffer]]:
        bound: set[int] = set()
        allocated: set[int] = set()
        for node in walk(s):
            if isinstance(node, For):
                bound.add(id(node.var))
            elif isinstance(node, Allocate):
                allocated.add(id(node.buffer))
        cvars: dict[int, Var] = {}
        cbufs: dict[int, Buffer] = {}
        for node in walk(s):
            if isinstance(node, Var) and id(node) not in bound:
                cvars.setdefault(id(node), node)
            elif isinstance(node, BufferLoad | BufferStore) and id(node.buffer) not in allocated:
                cbufs.setdefault(id(node.buffer), node.buffer)
        return list(cvars.values()), list(cbufs.values())


def _to_i64(bld: ir.IRBuilder, value: ir.Value) -> ir.Value:
    return value if value.type.width == 64 else bld.sext(value, I64)


def _from_i64(bld: ir.IRBuilder, value: ir.Value, dtype: str) -> ir.Value:
    ty = scalar_type(dtype)
    return value if ty.width == 64 else bld.trunc(value, ty)


def _resize(bld: ir.IRBuilder, value: ir.Value, ty: ir.IntType) -> ir.Value:
    if value.type.width == ty.width:
        return value
    return bld.sext(value, ty) if ty.width > value.type.width else bld.trunc(value, ty)


def _smin(bld: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return bld.select(bld.icmp_signed("<", a, b), a, b)


def _byte_size(dtype: str) -> int:
    return 1 if dtype == "bool" else dt.bits(dtype) // 8


def generate(
    funcs: Sequence[PrimFunc], options: CodegenOptions | None = None, module_name: str = "tf"
) -> ir.Module:
    """Emit LLVM IR for `funcs` (lowered with `tir.DEFAULT_PIPELINE`) into one module.

    Raises:
        LoweringError: for constructs the CPU back-end does not support (thread-bound loops,
            extern calls without a CPU implementation, multi-dimensional parameters).
    """
    gen = CodeGenLLVM(module_name, options)
    for func in funcs:
        gen.add_function(func)
    return gen.module
