"""Graph -> Module: optimize, lower each fused group to a kernel, build it with LLVM, keep the plan.

Example:
    >>> from tensorforge.compiler.frontend import from_onnx
    >>> from tensorforge.compiler.frontend.onnx_builders import mlp
    >>> module = compile_graph(from_onnx(mlp()), progress=False)
    >>> module.stats["kernels"], module.outputs
    (4, ('softmax_12',))
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ...runtime import ndarray as nd
from ...runtime.checks import raise_failed, split_outputs
from ...runtime.device.cpu import ParamSpec
from ...runtime.device.cpu.loader import host_cpu
from ...runtime.dtypes import storage_dtype
from ...runtime.module import Call, KernelImage, Module, TensorSpec
from ..codegen.llvm import CodegenOptions, generate
from ..codegen.llvm_jit import emit_object, target_features
from ..target import Target
from ..tir import DEFAULT_PIPELINE, lower_schedule, run_pipeline
from ..tir.fingerprint import fingerprint
from .ir import Graph, GraphError, Node
from .lower_te import Kernel, lower_group
from .passes import FusedGroup, group_order, optimize
from .passes.alter_layout import CPU_BLOCK

# The helpers every back-end's graph compiler shares (compile_gpu.py, compile_vta.py).


def kernel_symbol(k: int, name: str) -> str:
    """The symbol of kernel number `k` of a fused group named `name` (C identifier characters)."""
    return f"tf_k{k}_" + re.sub(r"[^A-Za-z0-9_]", "_", name)[:48]


T = TypeVar("T")


def progress_bar(items: Iterable[T], progress: bool) -> Iterable[T]:
    """`items` under a tqdm bar over the kernels being compiled when `progress`, else as they
    are: tqdm (and the multiprocessing lock it makes even for a disabled bar) is imported only
    when a bar is shown, not in every compiling process."""
    if not progress:
        return items
    from tqdm import tqdm

    return tqdm(items, desc="compile", unit="kernel")


def is_optimized(graph: Graph) -> bool:
    """Whether `graph` has been through `optimize` (fused groups and a memory plan)."""
    return graph.groups is not None and graph.memory_plan is not None


def call_label(graph: Graph, kernel: Kernel) -> str:
    """A CPU kernel's call label (`label_nodes`, or the kernel's name when it has no nodes)."""
    return label_nodes(graph, kernel.nodes) if kernel.nodes else kernel.name


def label_nodes(graph: Graph, nodes: tuple[str, ...]) -> str:
    """A call's label: its ops and its first node, e.g. `tf.qconv2d+tf.qmaxpool (conv2)`."""
    return f"{'+'.join(graph.node(n).op for n in nodes)} ({nodes[0]})"


#: with this environment variable "1", `KernelCache.build_lowered` builds a repeat anyway and
#: checks that it comes to the same LLVM IR (the test suite sets it, tests/conftest.py)
CHECK_CACHE_ENV = "TENSORFORGE_CHECK_KERNEL_CACHE"


class KernelCacheError(AssertionError):
    """Two functions with one fingerprint that generated different code (a fingerprint that
    misses something the passes or the code generator read): a compiler bug."""


class KernelCache:
    """The kernels built so far in one compile, by what they compute: a fused group whose LLVM
    IR equals an earlier group's, but for its symbol, with parameters of the same dtypes and
    shapes, is a second call of that kernel rather than a second kernel. Repeated blocks lower
    to the same code: ResNet-50's 57 groups are 28 kernels, ViT-B/16's 197 are 19 (its encoder
    layers differ only in their weights, which are arguments). TVM's compile engine caches
    lowered functions by their structure the same way. The key is two hashes of the IR text
    (Python's keyed SipHash and CRC-32) and its length, so the cache holds no IR.

    `build_lowered` finds a repeat earlier, from the loop IR before the pass pipeline
    (`tir.fingerprint`), and skips the passes and code generation too: those were four fifths
    of the compile time of ViT-B/16's 178 repeated groups."""

    def __init__(self) -> None:
        self._built: dict[tuple[Any, ...], KernelImage] = {}
        self._lowered: dict[tuple[int, int, int], KernelImage] = {}
        self.pipeline_s = 0.0  # seconds in the pass pipeline (`build_lowered`)

    def build_lowered(self, func: Any, target: Target, meta: dict[str, Any]) -> KernelImage:
        """The kernel of `func`, loop IR before the pass pipeline (`tir.lower_schedule`): that
        of an earlier function with its fingerprint, else the pipeline's and LLVM's (`build`).
        With TENSORFORGE_CHECK_KERNEL_CACHE=1 a repeat is built anyway and must come to the
        earlier kernel's code (KernelCacheError)."""
        key = fingerprint(func)
        earlier = self._lowered.get(key) if key is not None else None
        if earlier is not None and os.environ.get(CHECK_CACHE_ENV) != "1":
            return earlier
        start = time.perf_counter()
        func = run_pipeline(func, DEFAULT_PIPELINE)
        self.pipeline_s += time.perf_counter() - start
        image = self.build(func, target, meta)
        if earlier is not None and image is not earlier:
            raise KernelCacheError(
                f"kernel cache: {func.name} has the fingerprint of {earlier.name} but lowers "
                "to other code"
            )
        if key is not None:
            self._lowered.setdefault(key, image)
        return image

    def build(self, func: Any, target: Target, meta: dict[str, Any]) -> KernelImage:
        """The kernel of lowered function `func`: built with LLVM, or the earlier equal one."""
        options = CodegenOptions(features=target_features(target))
        text = str(generate([func], options, func.name))
        params = param_specs(func)
        return self.shared(text, func.name, params, lambda: KernelImage(
            func.name, "llvm", params, emit_object(text, target), meta))  # fmt: skip

    def shared(
        self, code: str, symbol: str, params: tuple[ParamSpec, ...],
        make: Callable[[], KernelImage],
    ) -> KernelImage:  # fmt: skip
        """The kernel whose generated `code` (naming itself `symbol`) is `code`, with
        parameters of these dtypes and shapes: an earlier one, or `make()`'s."""
        code = code.replace(symbol, "\0")
        # two independent hashes and the length, not the text (hashlib would load OpenSSL)
        digest = (hash(code), zlib.crc32(code.encode()), len(code))
        key = (digest, tuple((p.dtype, p.shape) for p in params))
        image = self._built.get(key)
        if image is None:
            image = self._built[key] = make()
        return image


def param_specs(func: Any) -> tuple[ParamSpec, ...]:
    """The `ParamSpec`s of a lowered function's parameters (name, dtype, shape)."""
    return tuple(
        ParamSpec(buf.name, buf.dtype, tuple(shape))
        for buf, shape in zip(func.params, func.arg_shapes, strict=True)
    )


def compile_graph(graph: Graph, target: str | Target = "llvm", progress: bool = True) -> Module:
    """Compile `graph` for the host CPU.

    Args:
        graph: an imported graph (optimized here) or one already through `optimize`.
        target: an llvm target for this machine ("llvm", "llvm -mcpu=native").
        progress: show a tqdm bar over the fused groups.

    Returns:
        A `Module` with one kernel per fused group, the memory plan and compile statistics.

    Raises:
        LoweringError: when a group holds an op without a CPU lowering (op and node named).
    """
    tgt = Target.parse(target)
    if tgt.kind != "llvm" or not tgt.is_host:
        raise ValueError(f"compile_graph target must be an llvm target for this machine, not {tgt}")
    from ..codegen.llvm_jit import target_machine

    target_machine(tgt)  # an -mcpu or -mattr LLVM does not know fails here, before any work
    start = time.perf_counter()
    # chains of convolutions keep the blocked layout from one to the next (alter_layout)
    optimized = graph if is_optimized(graph) else optimize(graph, CPU_BLOCK, chains_only=True)
    del graph  # weights the folds replaced go now, unless the caller keeps the graph
    # The passes leave reference cycles (recursive closures over a pass's state, which holds
    # the graph it was given: fuse_ops' _Partitioner): collected now, they free the weights the
    # folds and layouts replaced, which otherwise lived until a collection came by itself, and
    # with them every OIHW weight beside its blocked copy below (compile peaks: ResNet-50 294
    # -> 251 MiB, Inception-v3 286 -> 249; whether a collection came in time varied by run)
    gc.collect()
    for name in view_constants(optimized):  # alter_layout's blocked weights: copied one by
        # one, each OIHW weight freed as its copy is made, before LLVM's code pages load
        optimized = materialize_view(optimized, name)
    t_opt = time.perf_counter() - start
    ranges = calibrated_ranges(optimized)  # (before the constants it reads are dropped)
    meta = cpu_meta(tgt)
    kernels: dict[str, KernelImage] = {}
    calls, constants, cache = [], {}, KernelCache()
    times = [0.0, 0.0]  # lowering, LLVM
    order = group_order(optimized)
    spent = last_readers(order)
    pending: set[str] = set()  # spent constants not dropped yet (small ones wait: below)
    with kernel_garbage_collection() as collect:
        for k, (group, _) in enumerate(progress_bar(order, progress)):
            image, call = build_cpu_group(optimized, group, k, tgt, meta, constants, times, cache)
            new = image.name not in kernels
            kernels.setdefault(image.name, image)
            calls.append(call)
            optimized = drop_spent(optimized, pending, spent.get(k, ()), constants)
            if new or k % COLLECT_EVERY == 0:  # (a group that reuses a kernel made no LLVM
                collect()  # objects: its garbage waits for the next collection)
    return assemble_module(
        optimized, str(tgt), list(kernels.values()), calls, constants, start, t_opt, *times,
        ranges=ranges,
    )  # fmt: skip


@contextlib.contextmanager
def kernel_garbage_collection() -> Iterator[Callable[[], Any]]:
    """A `collect()` to call after each new kernel: a full collection of the objects made since
    entry, then the free heap pages handed back (`heap_trimmer`). A kernel's LLVM IR
    (llvmlite.ir) and schedule are reference cycles that live through several young collections
    while it is built, so they reached the oldest generation and waited there for a full
    collection, kernel after kernel (8 MiB of MobileNetV3-small's peak). The objects alive at
    entry are frozen (`gc.freeze`) for the duration, so each collection scans only the new ones
    (0.4 s over its 74 kernels, against 3.4 s unfrozen). With the collector disabled or objects
    already frozen by someone else, `collect()` only trims the heap."""
    trim = heap_trimmer()
    if not gc.isenabled() or gc.get_freeze_count():
        yield trim
        return
    gc.collect()
    gc.freeze()
    try:
        yield lambda: (gc.collect(), trim())
    finally:
        gc.unfreeze()


def heap_trimmer() -> Callable[[], Any]:
    """glibc's `malloc_trim(0)` (a no-op where the C library has none): hands the pages of free
    heap memory back to the system. The largest kernels' LLVM working set, once freed, stayed
    resident under every later kernel (5 MiB of MobileNetV3-small's peak, 3 of ShuffleNetV2's)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return (lambda: trim(0)) if trim is not None else (lambda: None)


def last_readers(order: list[tuple[FusedGroup, list[Any]]]) -> dict[int, list[str]]:
    """Position k in `order` (`group_order`) -> the values that group k is the last to read."""
    last: dict[str, int] = {}
    for k, (_, nodes) in enumerate(order):
        for node in nodes:
            last.update((value, k) for value in node.inputs if value)
    readers: dict[int, list[str]] = {}
    for value, k in last.items():
        readers.setdefault(k, []).append(value)
    return readers


#: compile_graph collects garbage after each new kernel and every this many groups
COLLECT_EVERY = 16
#: spent constants smaller than this wait (up to DROP_BATCH of them) to be dropped together:
#: each drop copies the graph's mappings, which cost 45 s over the 5,758 groups of an unrolled
#: LSTM (timm's Sequencer) when every group dropped its scalars
DROP_BYTES, DROP_BATCH = 4096, 512


def drop_spent(
    graph: Graph, pending: set[str], spent: Sequence[str], kept: Mapping[str, Any]
) -> Graph:
    """`drop_constants` of `spent` and the constants still `pending`, once one of them is a
    weight (DROP_BYTES or more) or DROP_BATCH of them wait; `pending` is updated."""
    pending.update(v for v in spent if v in graph.constants and v not in kept)
    batch = len(pending) >= DROP_BATCH
    dropped = drop_constants(graph, pending, kept, min_bytes=0 if batch else DROP_BYTES)
    if dropped is not graph or batch:
        pending.clear()
    return dropped


def drop_constants(
    graph: Graph, spent: Iterable[str], kept: Mapping[str, Any], min_bytes: int = 0
) -> Graph:
    """`graph` without the constants among `spent` (values no later kernel reads) that the
    module does not keep (`kept`: a kernel reads them as they are) and that are not outputs:
    the original of each pre-packed weight, freed as soon as its packed copy is built rather
    than at the end of the compile (the two together were the compile's peak memory). `graph`
    itself when none is, or when none has `min_bytes` or more."""
    done = {v for v in spent if v in graph.constants and v not in kept and v not in graph.outputs}
    if not done or max(graph.constants[v].nbytes for v in done) < min_bytes:
        return graph
    return graph.replace(constants={n: a for n, a in graph.constants.items() if n not in done})


def view_constants(graph: Graph) -> list[str]:
    """The constants of `graph` that are views, not aligned arrays of their own (alter_layout's
    blocked weights, `GraphBuilder.add_constant(view=True)`)."""
    return [name for name, array in graph.constants.items() if not _is_aligned(array)]


def _is_aligned(array: Any) -> bool:
    return array.flags.c_contiguous and array.ctypes.data % nd.ALIGNMENT == 0


def materialize_view(graph: Graph, name: str) -> Graph:
    """`graph` with view constant `name` replaced by an aligned read-only copy. When the caller
    holds no other reference to `graph`, the array under the view (an OIHW weight) is freed as
    the new graph replaces it: copying the views one by one holds one weight twice at most
    (docs/cpu_backend.md, "Memory while compiling")."""
    copy = nd.aligned(graph.constants[name])
    copy.setflags(write=False)
    return graph.replace(constants={**graph.constants, name: copy})


def cpu_meta(target: Target) -> dict[str, Any]:
    """The meta of host CPU kernels: triple, CPU name and features (checked when loading)."""
    cpu, features = host_cpu()
    return {"triple": _triple(), "cpu": target.mcpu or cpu, "features": target.mattr or features}


def build_cpu_group(
    graph: Graph,
    group: FusedGroup,
    k: int,
    target: Target,
    meta: dict[str, Any],
    constants: dict[str, Any],
    times: list[float],
    cache: KernelCache | None = None,
) -> tuple[KernelImage, Call]:
    """Lower group number `k` of `graph` and build it with LLVM: its kernel and its call.

    Adds the constants the kernel reads to `constants` and the seconds spent lowering and in
    LLVM to `times[0]` and `times[1]`. With a `cache`, a group that lowers to the code of an
    earlier one gets that kernel (the caller keeps each kernel once)."""
    t0 = time.perf_counter()
    if len(group.nodes) == 1 and graph.node(group.nodes[0]).op == "Loop":
        image, call = build_loop_kernel(graph, graph.node(group.nodes[0]), k, target)
        for name in call.args:
            if name in graph.constants:
                constants[name] = graph.constants[name]
        times[1] += time.perf_counter() - t0
        return image, call
    kernel = lower_group(graph, group, target=str(target))  # its features pick int8 kernels
    func = lower_schedule(kernel.schedule, kernel.args, name=kernel_symbol(k, group.name))
    cache = cache or KernelCache()
    t1, pipeline_s = time.perf_counter(), cache.pipeline_s
    image = cache.build_lowered(func, target, meta)
    pipeline_s = cache.pipeline_s - pipeline_s
    times[0] += t1 - t0 + pipeline_s
    times[1] += time.perf_counter() - t1 - pipeline_s
    for name in kernel.params:
        if name in kernel.constants or name in graph.constants:
            constants[name] = kernel.constants.get(name, graph.constants.get(name))
    return image, Call(image.name, kernel.bindings, call_label(graph, kernel))


def build_loop_kernel(graph: Graph, node: Node, k: int, target: Target) -> tuple[KernelImage, Call]:
    """A run-time `Loop` node (`graph/ops/loop.py`) as a kernel of kind "loop": its body
    compiled into a module of its own, the payload (`runtime/loop.py` runs it)."""
    from .ops.loop import body_graph

    body = compile_graph(body_graph(node.attr_dict["body"]), target, progress=False)
    values = [v for v in node.inputs if v] + list(node.outputs)
    params = tuple(
        ParamSpec(f"p{i}", storage_dtype(graph.types[v].dtype), graph.types[v].shape)
        for i, v in enumerate(values)
    )
    attrs = node.attr_dict
    meta = {
        "has_trips": int(attrs["has_trips"]),
        "has_cond": int(attrs["has_cond"]),
        "carried": int(attrs["carried"]),
        "scans": int(attrs.get("scans", 0)),
        "node": str(attrs.get("name") or node.name),
        "inputs": list(body_graph(attrs["body"]).inputs),
        "outputs": list(body.outputs),
    }
    name = kernel_symbol(k, node.name)
    image = KernelImage(name, "loop", params, body.to_bytes(), meta)
    return image, Call(name, tuple(values), label_nodes(graph, (node.name,)))


def _triple() -> str:
    from ...runtime.device.cpu.loader import host_triple

    return host_triple()


def assemble_module(
    graph: Graph,
    target: str,
    kernels: list[KernelImage],
    calls: list[Call],
    constants: dict[str, Any],
    start: float,
    *times: float,
    ranges: Mapping[str, list[float]] | None = None,
) -> Module:
    """The `Module` of a compiled graph: its kernels and calls, the memory plan's slots, the
    constants and tensor specs, and the compile statistics (`times`: optimize, lower, codegen
    seconds; `start`: the compile's `perf_counter` start; `ranges`: `calibrated_ranges` of the
    graph before its constants were dropped, kept as `stats["calibrated_ranges"]`)."""
    plan = graph.memory_plan
    if plan is None:
        raise GraphError(f"graph {graph.name!r} must have a memory plan")
    outputs, checks = split_outputs(graph.outputs)
    # a check the folds decided: one that fails fails every run; one that holds is dropped
    raise_failed(graph.constants, [c for c in checks if c in graph.constants])
    checks = tuple(c for c in checks if c not in graph.constants)
    for name in outputs:
        if name in graph.constants:
            constants[name] = graph.constants[name]
    placed = {s.value for s in plan.slots}
    tensors = {
        name: TensorSpec(graph.types[name].shape, graph.types[name].dtype)
        for name in [*graph.types]
        if name in constants or name in placed
    }
    for name, value in constants.items():
        tensors.setdefault(name, TensorSpec(tuple(value.shape), str(value.dtype)))
    stats = {
        "kernels": len(kernels),
        "calls": len(calls),
        "optimize_s": round(times[0], 4),
        "lower_s": round(times[1], 4),
        "llvm_s": round(times[2], 4),
        "total_s": round(time.perf_counter() - start, 4),
        "arena_bytes": plan.peak_bytes,
        "naive_bytes": plan.naive_bytes,
        "constant_bytes": int(sum(v.nbytes for v in constants.values())),
        "code_bytes": sum(len(k.payload) for k in kernels),
    }
    if ranges:
        stats["calibrated_ranges"] = dict(ranges)
    return Module(
        target=target,
        inputs=graph.inputs,
        outputs=outputs,
        checks=checks,
        tensors=tensors,
        kernels=kernels,
        calls=calls,
        slots={s.value: s.offset for s in plan.slots},
        arena_bytes=plan.peak_bytes,
        constants=constants,
        stats=stats,
    )


def calibrated_ranges(graph: Graph) -> dict[str, list[float]]:
    """Graph input -> [low, high]: the float values its int8 form represents without clipping,
    where the graph quantizes the input itself (`quantize_graph`'s `tf.quantize` of the input,
    or of the input minus a scalar constant offset; narrow int8, rounded to nearest). A run's
    input outside that range clips (`Module.run` warns, `CalibrationRangeWarning`)."""
    from ..quantize.scheme import qrange

    quantizers = [node for node in graph.nodes if node.op == "tf.quantize"]
    if not quantizers:  # (a float model: no producer table built)
        return {}
    producers = graph.producers()
    low, high = qrange(8)
    ranges: dict[str, list[float]] = {}
    for node in quantizers:
        value, offset = node.inputs[0], 0.0
        sub = producers.get(value)
        if sub is not None and sub.op == "Sub" and sub.inputs[1] in graph.constants:
            constant = graph.constants[sub.inputs[1]]
            if constant.size != 1:
                continue
            value, offset = sub.inputs[0], float(constant.reshape(()))
        if value not in graph.inputs:
            continue
        scale = float(node.attr("scale"))
        ranges[value] = [offset + (low - 0.5) * scale, offset + (high + 0.5) * scale]
    return ranges
