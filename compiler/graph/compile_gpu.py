"""Graph -> Module for GPUs (targets ``cuda`` and ``opencl``): the CPU's graph passes and tensor
expressions, GPU schedules, CUDA C or OpenCL C.

Every fused group is lowered by the same `lower_te.lower_group` as on the CPU; its compute
definitions are rescheduled for thread blocks (`compiler.topi.gpu.schedule_auto`), lowered with
the one loop-IR pipeline (virtual threads, double buffering, cooperative fetching and barriers
are its passes), split into device kernels and printed in the target's dialect
(`compiler.codegen.gpu`). A module holds one kernel per group, of kind ``opencl`` or ``cuda``,
whose payload carries the source (and, for CUDA where NVRTC is installed, the PTX), so a module
compiled here runs on a GPU machine: `runtime.device.gpu` keeps the arena on the device.

Example:
    >>> import numpy as np
    >>> from tensorforge.compiler.frontend import from_onnx
    >>> from tensorforge.compiler.frontend.onnx_builders import mlp
    >>> module = compile_graph_gpu(from_onnx(mlp()), "opencl")
    >>> [k.kind for k in module.kernels]
    ['opencl', 'opencl', 'opencl', 'opencl']
"""

from __future__ import annotations

import time
from typing import Any

from ...runtime.module import Call, KernelImage, Module
from ..codegen.gpu import add_ptx, encode_payload, gpu_payload, split_kernels
from ..schedule.stage import ForKind
from ..target import Target
from ..tir import lower
from ..tir.stmt import LoweringError
from ..topi.gpu import GPUScheduleConfig, schedule_auto
from .compile import (
    KernelCache,
    assemble_module,
    call_label,
    is_optimized,
    kernel_symbol,
    param_specs,
    progress_bar,
)
from .ir import Graph
from .lower_te import lower_group
from .passes import FusedGroup, group_order, optimize


def compile_graph_gpu(
    graph: Graph, target: str | Target = "opencl", progress: bool = False
) -> Module:
    """Compile `graph` for a GPU target ("opencl", "cuda -arch=sm_90").

    Raises:
        LoweringError: for an op without a lowering (op and node named), or a kernel over the
            target's limits (`codegen.gpu.GPULimitError`).
        NVRTCError: when NVRTC rejects the generated CUDA C (a bug: please report it).
    """
    tgt = Target.parse(target)
    if tgt.kind not in ("cuda", "opencl"):
        raise ValueError(f"compile_graph_gpu target must be cuda or opencl, not {tgt}")
    loops = [n.name for n in graph.nodes if n.op == "Loop"]
    if loops:
        raise LoweringError(
            f"Loop node {loops[0]!r} runs at run time (its trip count or condition is computed "
            f"then): the {tgt.kind} back-end does not run such loops; compile for 'llvm'"
        )
    start = time.perf_counter()
    optimized = graph if is_optimized(graph) else optimize(graph)
    t_opt = time.perf_counter() - start
    kernels: dict[str, KernelImage] = {}
    calls, constants, cache = [], {}, KernelCache()  # groups of the same code share a kernel
    times = [0.0, 0.0]
    for k, (group, _) in enumerate(progress_bar(group_order(optimized), progress)):
        image, call = build_gpu_group(optimized, group, k, tgt, constants, times, cache=cache)
        kernels.setdefault(image.name, image)
        calls.append(call)
    images = list(kernels.values())
    module = assemble_module(optimized, str(tgt), images, calls, constants, start, t_opt, *times)
    module.stats["device_kernels"] = sum(k.meta["launches"] for k in images)
    return module


def build_gpu_group(
    graph: Graph,
    group: FusedGroup,
    k: int,
    target: Target,
    constants: dict[str, Any],
    times: list[float],
    config: GPUScheduleConfig | None = None,
    cache: KernelCache | None = None,
) -> tuple[KernelImage, Call]:
    """Lower group number `k` for a GPU: its kernel image (source, launches) and its call
    (with a `cache`, the kernel of an earlier group whose code is the same)."""
    t0 = time.perf_counter()
    kernel = lower_group(graph, group, target=str(target))
    sched = kernel.schedule
    if not _gpu_scheduled(sched):  # the anchor has no GPU template: the generic schedule
        outputs = kernel.args[len(kernel.params) :]
        sched = schedule_auto(outputs, config or _threads(target))
    func = lower(sched, kernel.args, name=kernel_symbol(k, group.name))
    t1 = time.perf_counter()
    payload = gpu_payload(split_kernels(func), target, ptx=False)
    params = param_specs(func)
    meta = {"target": str(target), "launches": len(payload["kernels"])}
    # the code: the source and launches (buffers by dtype and size, not by name)
    code = encode_payload({**payload, "buffers": [{**b, "name": ""} for b in payload["buffers"]]})

    def make() -> KernelImage:  # (for CUDA, NVRTC compiles only a kernel not seen before)
        built = encode_payload(add_ptx(payload, target, func.name))
        return KernelImage(func.name, target.kind, params, built, meta)

    image = (cache or KernelCache()).shared(code.decode(), func.name, params, make)
    times[0] += t1 - t0
    times[1] += time.perf_counter() - t1
    for name in kernel.params:
        if name in kernel.constants or name in graph.constants:
            constants[name] = kernel.constants.get(name, graph.constants.get(name))
    return image, Call(image.name, kernel.bindings, call_label(graph, kernel))


def _gpu_scheduled(sched: Any) -> bool:
    """Whether a schedule already binds loops to GPU threads (a GPU template built it)."""
    return any(
        ann.kind is ForKind.THREAD_BINDING
        for stage in sched.stages
        for ann in stage.annotations.values()
    )


def _threads(target: Target) -> GPUScheduleConfig:
    from ..codegen.gpu import Limits

    return GPUScheduleConfig(threads=min(256, Limits.of(target).max_threads))
