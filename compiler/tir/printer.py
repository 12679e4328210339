"""The stable text form of the loop IR, used by golden tests and debugging.

    func f(A: float32[4], B: float32[4]) {
      for i in range(4) parallel {
        B[i] = A[i] + 1.0f
      }
    }

Distinct variables that share a name are printed with suffixes `_1`, `_2` in order of appearance.
"""

from __future__ import annotations

from ..schedule.stage import ForKind
from ..te.expr import Expr, IntImm, Var
from ..te.visitor import ATOM, ExprPrinter
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
    walk,
)


class _Names:
    def __init__(self) -> None:
        self.names: dict[Var, str] = {}
        self.taken: set[str] = set()

    def __call__(self, v: Var) -> str:
        name = self.names.get(v)
        if name is None:
            name, n = v.name, 1
            while name in self.taken:
                name, n = f"{v.name}_{n}", n + 1
            self.names[v], name = name, name
            self.taken.add(name)
        return name


class _LoopPrinter(ExprPrinter):
    def visit_BufferLoad(self, e: BufferLoad) -> tuple[str, int]:
        return f"{e.buffer.name}[{self._args(e.indices)}]", ATOM

    def visit_BufferPtr(self, e: BufferPtr) -> tuple[str, int]:
        offset = self.print(e.offset)
        return f'{e.buffer.name}.access_ptr("{e.mask}", {offset}, {e.extent})', ATOM


def _buffer_decl(buf: Buffer) -> str:
    return f"{buf.dtype}[{', '.join(str(n) for n in buf.shape)}]"


class _StmtPrinter:
    def __init__(self, node: Stmt | PrimFunc) -> None:
        self.names = _Names()
        root = node.body if isinstance(node, PrimFunc) else node
        for item in walk(root):  # loop variables get their names in nesting order
            if isinstance(item, For):
                self.names(item.var)
        self.expr = _LoopPrinter(self.names)
        self.lines: list[str] = []

    def e(self, expr: Expr) -> str:
        return self.expr.print(expr)

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def block(self, depth: int, head: str, body: Stmt) -> None:
        self.emit(depth, head + " {")
        self.stmt(body, depth + 1)
        self.emit(depth, "}")

    def stmt(self, s: Stmt, depth: int) -> None:
        if isinstance(s, SeqStmt):
            for child in s.stmts:
                self.stmt(child, depth)
        elif isinstance(s, For):
            self.block(depth, self._for_head(s), s.body)
        elif isinstance(s, BufferStore):
            self.emit(depth, f"{s.buffer.name}[{self.expr._args(s.indices)}] = {self.e(s.value)}")
        elif isinstance(s, IfThenElse):
            self.block(depth, f"if {self.e(s.condition)}", s.then_case)
            if s.else_case is not None:
                self.lines[-1] += " else {"
                self.stmt(s.else_case, depth + 1)
                self.emit(depth, "}")
        elif isinstance(s, Allocate):
            buf = s.buffer
            self.block(depth, f"allocate {buf.name}: {_buffer_decl(buf)} in {buf.scope}", s.body)
        elif isinstance(s, AttrStmt):
            self.block(depth, f"attr {s.key} = {_attr_value(s.value)}", s.body)
        elif isinstance(s, Evaluate):
            self.emit(depth, self.e(s.value))
        else:
            self.emit(depth, f"<{type(s).__name__}>")

    def _for_head(self, s: For) -> str:
        start = self.e(s.min)
        if isinstance(s.min, IntImm) and isinstance(s.extent, IntImm):
            span = (
                str(s.extent.value)
                if s.min.value == 0
                else f"{start}, {s.min.value + s.extent.value}"
            )
        else:
            span = f"{start}, {start} + {self.e(s.extent)}"
        head = f"for {self.names(s.var)} in range({span})"
        if s.kind is ForKind.THREAD_BINDING:
            return f'{head} thread("{s.thread_tag}")'
        return head if s.kind is ForKind.SERIAL else f"{head} {s.kind.value}"


def _attr_value(value: object) -> str:
    if isinstance(value, Buffer):
        return value.name
    if isinstance(value, tuple) and value and all(isinstance(v, Buffer) for v in value):
        return ", ".join(v.name for v in value)
    return repr(value)


def stmt_to_str(stmt: Stmt) -> str:
    printer = _StmtPrinter(stmt)
    printer.stmt(stmt, 0)
    return "\n".join(printer.lines)


def func_to_str(func: PrimFunc) -> str:
    printer = _StmtPrinter(func)
    params = ", ".join(f"{b.name}: {_buffer_decl(b)}" for b in func.params)
    printer.emit(0, f"func {func.name}({params}) {{")
    printer.stmt(func.body, 1)
    printer.emit(0, "}")
    return "\n".join(printer.lines)
