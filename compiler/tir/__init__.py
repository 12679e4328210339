"""The loop IR: lowering from schedules, arithmetic, passes, printer, verifier, interpreter."""

from __future__ import annotations

from .arith import Analyzer
from .arith import simplify as simplify_expr
from .gpu import (
    BARRIER,
    inject_double_buffer,
    inject_virtual_threads,
    insert_storage_sync,
    single_thread_writes,
    storage_sync,
)
from .gpu_fetch import cooperative_fetch
from .interp import (
    EXTERN_FUNCS,
    InterpretError,
    Pointer,
    compile_func,
    interpret,
    register_extern,
)
from .lower import lower, lower_schedule
from .passes import (
    DEFAULT_PIPELINE,
    hoist_invariant_guards,
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
    BufferPtr,
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
    "BARRIER",
    "DEFAULT_PIPELINE",
    "EXTERN_FUNCS",
    "INVARIANTS",
    "Allocate",
    "Analyzer",
    "AttrStmt",
    "Buffer",
    "BufferLoad",
    "BufferPtr",
    "BufferRegion",
    "BufferStore",
    "Evaluate",
    "For",
    "ForKind",
    "IfThenElse",
    "InterpretError",
    "Pointer",
    "LoweringError",
    "PrimFunc",
    "SeqStmt",
    "Stmt",
    "StmtMutator",
    "VerifyError",
    "compile_func",
    "cooperative_fetch",
    "func_to_str",
    "inject_double_buffer",
    "inject_virtual_threads",
    "insert_storage_sync",
    "single_thread_writes",
    "hoist_invariant_guards",
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
    "storage_sync",
    "substitute_stmt",
    "unroll",
    "verify_func",
    "walk",
]
