"""The public entry point `compile`: a model (ONNX or Graph) -> a runnable `Module`."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .runtime.module import Module

BUILT_TARGETS = ("llvm", "vta", "opencl", "cuda")


def _is_torch_module(model: Any) -> bool:
    """Whether `model` is a torch.nn.Module (without importing torch)."""
    return any(
        c.__name__ == "Module" and c.__module__.startswith("torch.nn") for c in type(model).__mro__
    )


def _as_graph(model: Any, input_shapes: Mapping[str, Sequence[int]] | None) -> tuple[Any, Any]:
    """The model's static graph, and its data-dependent tail (`runtime.tail`) or None."""
    from .compiler.frontend import from_onnx_split
    from .compiler.graph.ir import Graph

    if isinstance(model, Graph):
        if input_shapes:
            raise ValueError("input_shapes must be None for a Graph (its shapes are fixed)")
        return model, None
    if isinstance(model, str | Path | bytes) or type(model).__name__ == "ModelProto":
        return from_onnx_split(model, input_shapes=input_shapes)
    raise TypeError(
        f"model must be an ONNX path, bytes, ModelProto, a Graph or a torch.nn.Module, not "
        f"{type(model).__name__}"
    )


def compile(  # noqa: A001  (the public name mirrors tvm.relay.build / torch.compile)
    model: Any,
    target: str = "llvm",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    progress: bool = False,
    calibration: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    tuning_log: str | Path | Sequence[str | Path] | None = None,
    example_inputs: Any = None,
) -> Module:
    """Compile a whole model for a target.

    Args:
        model: an ONNX file path, its bytes, an `onnx.ModelProto`, a graph-layer `Graph`, or a
            `torch.nn.Module` (with `example_inputs`; exported with torch's ONNX exporter,
            `compiler.frontend.torch`, its inputs named ``input0``, ``input1``, ...).
        target: "llvm" (this CPU; "llvm -mcpu=..." to name features), or the accelerator,
            "vta -config=pynq -device=sim" (options: -config a preset or JSON file, -device
            sim/cyclesim/rtl, -mode shift/mul requantization, -vthreads 1/2; see
            docs/compile.md): the model is quantized to int8, its conv/dense layers (with
            residual adds and max pooling) run on the accelerator and the rest on this CPU.
            Other targets raise `NotImplementedError` until their back-ends exist.
        input_shapes: input name -> shape, for ONNX inputs with symbolic dimensions.
        progress: show a progress bar over the kernels being compiled.
        calibration: for a vta target and a float model: one batch of representative inputs
            (input name -> array) or a list of batches, to choose the int8 scales.
        tuning_log: one or more logs of `tensorforge tune` (`compiler.autotune`): each tuned
            operator uses the best config logged for its workload and target kind; the others
            keep their default config. `module.stats["tuning"]` says which were applied
            (`applied`, `default`: counts of kernels; `untuned`: workloads not in the log).
        example_inputs: for a torch module: a tensor or a tuple of tensors, whose shapes and
            dtypes become the model's.

    Returns:
        A `Module`: `run(inputs)`, `profile(inputs)`, `save(path)` / `Module.load(path)`;
        for a vta target also `use_device(backend)`, `device_results()`, `write_trace(path)`.

    Raises:
        UnsupportedOpError: listing every op of the model the importer does not support.
        LoweringError: for an op without a CPU kernel (op and node named).
        ValueError: a vta target without calibration for a float model, or bad options.
        NotImplementedError: for a target other than llvm and vta.

    Example:
        >>> import numpy as np, tensorforge
        >>> from tensorforge.compiler.frontend.onnx_builders import small_cnn
        >>> module = tensorforge.compile(small_cnn())
        >>> outputs = module.run({"x": np.zeros((1, 3, 32, 32), np.float32)})
        >>> [value.shape for value in outputs.values()]
        [(1, 10)]
    """
    from .compiler.target import Target  # the compiler loads on first use: runtime-only users
    # (Module.load) never import it

    tgt = Target.parse(target)
    if _is_torch_module(model):
        if example_inputs is None:
            raise ValueError(
                "a torch.nn.Module needs example_inputs (a tensor or a tuple of tensors) to be "
                "exported: tensorforge.compile(module, example_inputs=(x,))"
            )
        from .compiler.frontend.torch import export_onnx

        model = export_onnx(model, example_inputs)  # (imported below: a detector keeps its tail)
    elif example_inputs is not None:
        raise ValueError(
            f"example_inputs belong to a torch.nn.Module, not a {type(model).__name__}"
        )
    if tuning_log is not None:
        return _compile_tuned(model, tgt, input_shapes, progress, calibration, tuning_log)
    if tgt.kind not in BUILT_TARGETS:
        raise NotImplementedError(
            f"target {str(tgt)!r} is not built yet for whole models; targets must be one of "
            f"{', '.join(BUILT_TARGETS)}"
        )
    if calibration is not None and tgt.kind != "vta":
        raise ValueError(f"calibration belongs to vta targets, not {str(tgt)!r}")
    if tgt.kind not in ("vta", "opencl", "cuda") and not tgt.is_host:
        raise NotImplementedError(
            f"cross-compiling whole models (target {str(tgt)!r}) is not built yet; use 'llvm'"
        )
    graph, tail = _as_graph(model, input_shapes)
    # handed over, not held here: the compile drops each imported weight once the kernels that
    # pack it are built, which a reference in this frame would keep alive (ResNet-18's peak
    # 189 -> 231 MiB, ViT-B/16's weights twice)
    handed = [graph]
    del graph
    if tgt.kind == "vta":
        from .compiler.graph.compile_vta import compile_graph_vta

        module = compile_graph_vta(handed.pop(), tgt, calibration, progress=progress)
    elif tgt.kind in ("opencl", "cuda"):
        from .compiler.graph.compile_gpu import compile_graph_gpu

        module = compile_graph_gpu(handed.pop(), tgt, progress=progress)
    else:
        from .compiler.graph.compile import compile_graph

        module = compile_graph(handed.pop(), tgt, progress=progress)
    if tail is not None:  # the part whose shapes are known only at run time runs after it
        module.set_tail(tail)
    return module


def _compile_tuned(
    model: Any,
    target: Any,
    input_shapes: Mapping[str, Sequence[int]] | None,
    progress: bool,
    calibration: Any,
    tuning_log: str | Path | Sequence[str | Path],
) -> Module:
    """`compile` with the best configs of a tuning log applied; stats say what was used."""
    from .compiler.autotune.dispatch import ApplyBest
    from .compiler.autotune.log import load_best

    logs = [tuning_log] if isinstance(tuning_log, str | os.PathLike) else tuning_log
    if not isinstance(logs, Sequence) or not all(isinstance(p, str | os.PathLike) for p in logs):
        raise TypeError(f"tuning_log must be a log's path or a list of paths, not "
                        f"{type(tuning_log).__name__} {tuning_log!r:.60}")  # fmt: skip
    logs = list(logs)
    with ApplyBest(load_best(logs, str(target))) as ctx:
        module = compile(model, str(target), input_shapes, progress, calibration)
    untuned = sorted(set(ctx.fallback))
    module.stats["tuning"] = {"logs": [str(p) for p in logs], "applied": len(ctx.applied),
                              "default": len(ctx.fallback), "untuned": untuned}  # fmt: skip
    if untuned and not ctx.applied:  # a stale log, or one for another model or target
        warnings.warn(
            f"the tuning log {', '.join(map(str, logs))} has a config for none of the "
            f"{len(untuned)} tunable workloads of this model on {target!s}; every kernel uses "
            f"its default config (module.stats['tuning']['untuned'] lists the workloads)",
            stacklevel=3,
        )
    return module
