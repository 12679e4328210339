"""`build`: a schedule or lowered function -> a compiled CPU function (or an object file)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..runtime.device.cpu import CPUFunction, ParamSpec
from .codegen.llvm import CodegenOptions, generate
from .codegen.llvm_jit import JITModule, emit_object, target_features
from .schedule.schedule import Schedule
from .target import Target
from .tir import PrimFunc, lower


class BuiltModule:
    """What `build` returns for the host: callable like its function, plus the generated code.

    Attributes:
        func: the lowered `PrimFunc`.
        llvm_ir: the LLVM IR text before optimization.
    """

    def __init__(self, func: PrimFunc, ir_module: Any, target: Target) -> None:
        self.func, self.target = func, target
        self.llvm_ir = str(ir_module)
        self.jit = JITModule(ir_module, target)
        params = [
            ParamSpec(buf.name, buf.dtype, tuple(shape))
            for buf, shape in zip(func.params, func.arg_shapes, strict=True)
        ]
        self.function = CPUFunction(func.name, self.jit.address(func.name), params, self.jit)

    def __call__(self, *args: Any) -> None:
        """Run on NDArrays or numpy arrays (shapes and dtypes checked, outputs written)."""
        self.function(*args)

    def __getitem__(self, name: str) -> CPUFunction:
        if name != self.func.name:
            raise KeyError(f"function must be {self.func.name!r}, not {name!r}")
        return self.function

    def assembly(self) -> str:
        """The optimized machine code as assembly text."""
        return self.jit.assembly()


def _as_func(sched: Schedule | PrimFunc, args: Sequence[Any] | None, name: str) -> PrimFunc:
    if isinstance(sched, PrimFunc):
        return sched
    if not isinstance(sched, Schedule):
        raise TypeError(f"build needs a Schedule or a PrimFunc, not {type(sched).__name__}")
    if args is None:
        raise TypeError("build of a Schedule needs `args` (the tensors in parameter order)")
    return lower(sched, list(args), name=name)


def build(
    sched: Schedule | PrimFunc,
    args: Sequence[Any] | None = None,
    target: str | Target = "llvm",
    name: str = "main",
    fast_math: bool = False,
) -> BuiltModule:
    """Compile for the host CPU and load the code into this process.

    Args:
        sched: a schedule (lowered with `tir.lower(sched, args, name)`) or a lowered PrimFunc.
        args: the tensors in parameter order (inputs, then outputs); not needed for a PrimFunc.
        target: an llvm target for this machine ("llvm", "llvm -mcpu=native", "-mattr=..."),
            or a GPU target ("opencl", "cuda -arch=sm_90"): see `build_gpu`.
        name: the function name.
        fast_math: allow float reassociation (FMA contraction is always allowed).

    Raises:
        ValueError: for a target that does not run on this machine (use `build_object`).

    Example:
        >>> import numpy as np
        >>> from tensorforge.compiler import te
        >>> from tensorforge.compiler.build import build
        >>> A = te.placeholder((8,), name="A")
        >>> B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
        >>> f = build(te.create_schedule(B.op), [A, B], name="double")
        >>> a, b = np.arange(8, dtype="float32"), np.empty(8, "float32")
        >>> f(a, b)
        >>> b[:3].tolist()
        [0.0, 2.0, 4.0]
    """
    tgt = Target.parse(target)
    if tgt.kind in ("cuda", "opencl"):
        return build_gpu(sched, args, tgt, name)  # type: ignore[return-value]
    if not tgt.is_host:
        raise ValueError(
            f"build target must run on this machine (llvm without -mtriple), not {str(tgt)!r}; "
            "use build_object for other triples"
        )
    func = _as_func(sched, args, name)
    options = CodegenOptions(fast_math=fast_math, features=target_features(tgt))
    module = generate([func], options, func.name)
    return BuiltModule(func, module, tgt)


def build_object(
    sched: Schedule | PrimFunc,
    args: Sequence[Any] | None = None,
    target: str | Target = "llvm",
    name: str = "main",
) -> bytes:
    """Compile to an ELF relocatable object for `target` (e.g. the Cortex-A9 of a PYNQ board).

    Parallel loops call `tf_parallel_launch`, which the device runtime must provide.
    """
    func = _as_func(sched, args, name)
    options = CodegenOptions(features=target_features(target))
    return emit_object(generate([func], options, func.name), target)


def build_gpu(
    sched: Schedule | PrimFunc,
    args: Sequence[Any] | None = None,
    target: str | Target = "opencl",
    name: str = "main",
    **device_options: Any,
) -> Any:
    """Compile for a GPU target and load the program on this machine's device of that kind.

    The schedule's stages must be bound to `blockIdx`/`threadIdx` (a stage left unbound runs on
    one thread). Returns a `runtime.device.gpu.GPUFunction`: call it with numpy arrays (inputs,
    then outputs, which are written); `.source` is the generated CUDA C or OpenCL C.

    Raises:
        GPULimitError: a kernel over the target's threads per block or shared memory.
        GPUError: no OpenCL platform or CUDA driver on this machine (the message says which).

    Example:
        >>> import numpy as np
        >>> from tensorforge.compiler import te
        >>> A = te.placeholder((100,), name="A")
        >>> B = te.compute((100,), lambda i: A[i] * 2.0, name="B")
        >>> s = te.create_schedule(B.op)
        >>> bx, tx = s[B].split(B.op.axis[0], factor=32)
        >>> s[B].bind(bx, te.thread_axis("blockIdx.x"))
        >>> s[B].bind(tx, te.thread_axis("threadIdx.x"))
        >>> f = build_gpu(s, [A, B], "opencl", name="double")
        >>> a, b = np.arange(100, dtype="float32"), np.zeros(100, "float32")
        >>> f(a, b)
        >>> b[:3].tolist()
        [0.0, 2.0, 4.0]
    """
    from ..runtime.device.gpu import GPUFunction
    from .codegen.gpu import gpu_payload, split_kernels

    tgt = Target.parse(target)
    func = _as_func(sched, args, name)
    return GPUFunction(gpu_payload(split_kernels(func), tgt), **device_options)
