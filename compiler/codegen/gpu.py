"""GPU programs from the loop IR: host/device split, launch sizes, limits, CUDA C / OpenCL C.

A lowered function for a GPU (`tir.lower` of a schedule whose stages are bound to
`blockIdx.*`/`threadIdx.*`) is a sequence of root loop nests, one per stage computed at the
root, with global buffers for the intermediate stages. `split_kernels` makes each nest one
*device kernel* (TVM's split_host_device): its grid and block sizes are the extents of its
block and thread loops, its parameters the global buffers it touches; the intermediates become
*workspace* buffers that the runtime allocates once. `check_limits` rejects a kernel larger than
the target allows, naming it; `build_gpu` prints the program in the target's dialect
(`gpu_source`) and, for CUDA, compiles it with NVRTC where available.

Example:
    >>> from tensorforge.compiler import te, tir
    >>> A = te.placeholder((1000,), name="A")
    >>> B = te.compute((1000,), lambda i: A[i] + 1.0, name="B")
    >>> s = te.create_schedule(B.op)
    >>> bx, tx = s[B].split(B.op.axis[0], factor=128)
    >>> s[B].bind(bx, te.thread_axis("blockIdx.x")); s[B].bind(tx, te.thread_axis("threadIdx.x"))
    >>> prog = split_kernels(tir.lower(s, [A, B], name="inc"))
    >>> [(k.name, k.grid, k.block) for k in prog.kernels]
    [('inc_k0', (8, 1, 1), (128, 1, 1))]
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..schedule.stage import ForKind
from ..target import Target
from ..tir.gpu import is_thread_loop, thread_extents
from ..tir.stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferLoad,
    BufferPtr,
    BufferStore,
    For,
    LoweringError,
    PrimFunc,
    SeqStmt,
    Stmt,
    const_int,
    is_no_op,
    walk,
)
from .gpu_source import DIALECTS, program_source

AXES = "xyz"
MAX_ELEMENTS = 2**31 - 1
"""The most elements of one buffer: kernels index with `int` (their loop variables' int32)."""


class GPULimitError(LoweringError):
    """A kernel needs more threads, grid blocks or shared memory than the target allows."""


@dataclass(frozen=True)
class Limits:
    """What one thread block may use on a target (defaults are every CUDA GPU since sm_30's and
    a common OpenCL floor; `-max_threads=` and `-max_shared=` target options override them)."""

    max_threads: int = 1024
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_shared: int = 48 * 1024

    @staticmethod
    def of(target: Target) -> Limits:
        base = Limits() if target.kind == "cuda" else Limits(max_threads=256, max_shared=32 * 1024)
        threads = int(target.get("max_threads", str(base.max_threads)))
        shared = int(target.get("max_shared", str(base.max_shared)))
        return Limits(threads, base.max_block, base.max_grid, shared)


@dataclass(frozen=True)
class DeviceKernel:
    """One kernel launch: a loop nest run by `grid` blocks of `block` threads."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    fold: tuple[int, int, int] | None = None
    """When the launch folds block indices into x (`fold_grid`): the body's grid extents along
    x, y and z (x exact; y and z rounded up to whole launches, the excess blocks guarded)."""

    @property
    def threads(self) -> int:
        return int(np.prod(self.block))

    @property
    def launch_extents(self) -> dict[str, int]:
        """The extent of each block and thread index as the body sees it."""
        grid = self.grid if self.fold is None else self.fold
        extents = {f"blockIdx.{a}": n for a, n in zip(AXES, grid, strict=True)}
        extents.update({f"threadIdx.{a}": n for a, n in zip(AXES, self.block, strict=True)})
        return extents


@dataclass(frozen=True)
class GPUProgram:
    """A lowered function as device kernels: `params` are the function's buffers (its
    arguments), `workspace` the global intermediates, `kernels` the launches in order."""

    name: str
    params: tuple[Buffer, ...]
    arg_shapes: tuple[tuple[int, ...], ...]
    workspace: tuple[Buffer, ...]
    kernels: tuple[DeviceKernel, ...]

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        return self.params + self.workspace


def _roots(s: Stmt, workspace: list[Buffer]) -> Iterator[Stmt]:
    """The root statements of a function body; global allocations go to `workspace`."""
    if isinstance(s, SeqStmt):
        for child in s.stmts:
            yield from _roots(child, workspace)
    elif isinstance(s, Allocate) and s.buffer.scope == "global":
        workspace.append(s.buffer)
        yield from _roots(s.body, workspace)
    elif isinstance(s, AttrStmt):
        yield from _roots(s.body, workspace)
    elif not is_no_op(s):
        yield s


def _block_extents(body: Stmt) -> dict[str, int]:
    found: dict[str, int] = {}
    for node in walk(body):
        if isinstance(node, For) and is_thread_loop(node, "blockIdx"):
            n = const_int(node.extent)
            if n is None:
                raise LoweringError(f"block loop {node.var.name!r} must have a constant extent")
            found[node.thread_tag] = max(found.get(node.thread_tag, 0), n)
    return found


def _check_bindings(root: Stmt, name: str) -> None:
    for node in walk(root):
        if isinstance(node, For) and node.kind is ForKind.PARALLEL:
            raise LoweringError(
                f"kernel {name!r}: loop {node.var.name!r} is parallel; on a GPU bind it to "
                "blockIdx/threadIdx instead"
            )
        if isinstance(node, Allocate) and node.buffer.scope == "global":
            raise LoweringError(
                f"kernel {name!r}: stage {node.buffer.name!r} is computed inside a GPU kernel "
                "in global memory; give it scope 'shared' or 'local', or compute it at the root"
            )


def split_kernels(func: PrimFunc) -> GPUProgram:
    """Split a lowered function into device kernels (see the module docstring).

    A root nest without thread loops runs as one thread (grid and block of 1); the strategies
    bind every stage, so this happens only for scalars.

    Raises:
        LoweringError: for a parallel loop, a global allocation inside a kernel, or a thread loop
            with a non-constant extent.
    """
    workspace: list[Buffer] = []
    roots = list(_roots(func.body, workspace))
    known = list(func.params) + workspace
    kernels = []
    for k, root in enumerate(roots):
        name = f"{func.name}_k{k}"
        _check_bindings(root, name)
        blocks, threads = _block_extents(root), thread_extents(root)
        grid = tuple(blocks.get(f"blockIdx.{a}", 1) for a in AXES)
        block = tuple(threads.get(f"threadIdx.{a}", 1) for a in AXES)
        used: dict[Buffer, None] = {}
        shared = 0
        for node in walk(root):
            if (
                isinstance(node, (BufferLoad, BufferStore, BufferPtr))
                and node.buffer.scope == "global"
            ):
                used[node.buffer] = None
            if isinstance(node, Allocate) and node.buffer.scope.startswith("shared"):
                shared += node.buffer.size * np.dtype(_np_dtype(node.buffer.dtype)).itemsize
        params = tuple(b for b in known if b in used)
        kernels.append(DeviceKernel(name, params, root, grid, block, shared))  # type: ignore[arg-type]
    return GPUProgram(func.name, func.params, func.arg_shapes, tuple(workspace), tuple(kernels))


def _np_dtype(dtype: str) -> str:
    return "uint8" if dtype == "bool" else dtype


def fold_grid(kernel: DeviceKernel, limits: Limits) -> DeviceKernel:
    """`kernel` launched with its y and z block counts past `limits.max_grid` folded into x.

    The body keeps its block indices: with `fy` (`fz`) launches of `gy / fy` blocks along y
    (z), block `(x, y, z)` of the launch is `(x % gx, y + gy' * (x / gx % fy), z + gz' * (x / gx
    / fy))` of the body (`gpu_source` prints the arithmetic); the blocks past the body's extent
    are idle (the printer's guards, uniform per block, so barriers stay legal). A batched
    MatMul of 70000 matrices, or a depthwise convolution of 64 images x 1152 channels, binds
    more blocks to z than CUDA's 65535.
    """
    gx, gy, gz = kernel.grid
    fy, fz = (-(-g // top) for g, top in zip((gy, gz), limits.max_grid[1:], strict=True))
    if fy == 1 and fz == 1:
        return kernel
    py, pz = -(-gy // fy), -(-gz // fz)
    return dataclasses.replace(kernel, grid=(gx * fy * fz, py, pz), fold=(gx, py * fy, pz * fz))


def check_limits(program: GPUProgram, limits: Limits, device: str = "the target") -> None:
    """Raise `GPULimitError` for a kernel that exceeds `limits`, naming it and the limit."""
    for k in program.kernels:
        for buf in k.params:
            if buf.size > MAX_ELEMENTS:
                raise GPULimitError(
                    f"kernel {k.name!r}: buffer {buf.name!r} has {buf.size} elements, more than "
                    f"the {MAX_ELEMENTS} that a kernel's 32-bit indices address"
                )
        if k.threads > limits.max_threads:
            raise GPULimitError(
                f"kernel {k.name!r} needs {k.threads} threads per block {list(k.block)}, more than "
                f"the {limits.max_threads} {device} allows"
            )
        for axis, n, top in zip(AXES, k.block, limits.max_block, strict=True):
            if n > top:
                raise GPULimitError(
                    f"kernel {k.name!r}: threadIdx.{axis} extent {n} exceeds {device}'s {top}"
                )
        for axis, n, top in zip(AXES, k.grid, limits.max_grid, strict=True):
            if n > top:
                raise GPULimitError(
                    f"kernel {k.name!r}: blockIdx.{axis} extent {n} exceeds {device}'s {top}"
                )
        if k.shared_bytes > limits.max_shared:
            raise GPULimitError(
                f"kernel {k.name!r} needs {k.shared_bytes} bytes of shared memory, more than the "
                f"{limits.max_shared} {device} allows"
            )


def gpu_payload(program: GPUProgram, target: Target, ptx: bool = True) -> dict[str, Any]:
    """The JSON-able description of a program for the runtime: source, buffers and launches
    (for CUDA with the PTX NVRTC compiles where it is installed, unless `ptx` is False:
    `add_ptx` adds it later).

    Raises:
        GPULimitError: for a kernel over the target's limits.
        LoweringError: for IR the dialect cannot print.
    """
    if target.kind not in DIALECTS:
        raise ValueError(f"GPU target must be cuda or opencl, not {target.kind!r}")
    limits = Limits.of(target)
    kernels = tuple(fold_grid(k, limits) for k in program.kernels)
    program = dataclasses.replace(program, kernels=kernels)
    check_limits(program, limits, f"target {target}")
    source = program_source(list(program.kernels), DIALECTS[target.kind])
    index = {id(b): i for i, b in enumerate(program.buffers)}
    payload: dict[str, Any] = {
        "offset_bits": 64,  # OpenCL's buffer offsets are `long`s
        "dialect": target.kind,
        "target": str(target),
        "source": source,
        "buffers": [
            {
                "name": b.name,
                "dtype": b.dtype,
                "size": b.size,
                "workspace": i >= len(program.params),
            }
            for i, b in enumerate(program.buffers)
        ],
        "kernels": [
            {
                "name": k.name,
                "args": [index[id(b)] for b in k.params],
                "grid": list(k.grid),
                "block": list(k.block),
                "shared_bytes": k.shared_bytes,
            }
            for k in program.kernels
        ],
    }
    return add_ptx(payload, target, program.name) if ptx else payload


def add_ptx(payload: dict[str, Any], target: Target, name: str) -> dict[str, Any]:
    """`payload` with the PTX of its CUDA source (NVRTC, where installed; other targets and
    machines without NVRTC: as it is)."""
    if target.kind == "cuda":
        from ...runtime.device.gpu import nvrtc

        arch = target.get("arch", nvrtc.DEFAULT_ARCH)
        if nvrtc.available():
            payload["ptx"] = nvrtc.compile_ptx(payload["source"], arch, name)
            payload["arch"] = arch
    return payload


def encode_payload(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True).encode()
