"""The CPU device: the thread pool for parallel loops and the compiled-function ABI.

Compiled kernels are C functions `void f(void *arg0, void *arg1, ...)` taking one data pointer
per parameter buffer (`CPUFunction` checks and passes them); parallel loops run on the
persistent pool of `pool.py` through `tf_parallel_for`.
"""

from __future__ import annotations

from .function import CPUFunction, ParamSpec
from .pool import (
    FOR_SYMBOL,
    LAUNCH_SYMBOL,
    MAX_THREADS,
    default_num_threads,
    launch_address,
    num_threads,
    set_num_threads,
    set_tasks_per_thread,
    tasks_per_thread,
)
from .pool import symbols as pool_symbols

__all__ = [
    "FOR_SYMBOL",
    "LAUNCH_SYMBOL",
    "MAX_THREADS",
    "CPUFunction",
    "ParamSpec",
    "default_num_threads",
    "launch_address",
    "num_threads",
    "pool_symbols",
    "set_num_threads",
    "set_tasks_per_thread",
    "tasks_per_thread",
]
