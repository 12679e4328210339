"""The loop IR: lowering from schedules, arithmetic, passes, printer, verifier, interpreter."""

from __future__ import annotations

from .arith import Analyzer
from .arith import simplify as simplify_expr
from .interp import EXTERN_FUNCS, InterpretError, compile_func, interpret, register_extern
from .lower import lower, lower_schedule
from .passes import (
    DEFAULT_PIPELINE,
    loop_partition,
    remove_no_op,
    run_pipeline,
    simplify,
    storage_flatten,
    substitute_stmt,
    unroll,
)
from .printer import func_to_str, stmt_to_str
from .stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LoweringError,
    PrimFunc,
    SeqStmt,
    Stmt,
    StmtMutator,
    seq,
    walk,
)
from .verify import INVARIANTS, VerifyError, verify_func

__all__ = [
    "DEFAULT_PIPELINE",
    "EXTERN_FUNCS",
    "INVARIANTS",
    "Allocate",
    "Analyzer",
    "AttrStmt",
    "Buffer",
    "BufferLoad",
    "BufferRegion",
    "BufferStore",
    "Evaluate",
    "For",
    "ForKind",
    "IfThenElse",
    "InterpretError",
    "LoweringError",
    "PrimFunc",
    "SeqStmt",
    "Stmt",
    "StmtMutator",
    "VerifyError",
    "compile_func",
    "func_to_str",
    "interpret",
    "loop_partition",
    "lower",
    "lower_schedule",
    "register_extern",
    "remove_no_op",
    "run_pipeline",
    "seq",
    "simplify",
    "simplify_expr",
    "stmt_to_str",
    "storage_flatten",
    "substitute_stmt",
    "unroll",
    "verify_func",
    "walk",
]
