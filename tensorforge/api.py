"""The public entry point `compile`: a model (ONNX or Graph) -> a runnable `Module`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .runtime.module import Module

BUILT_TARGETS = ("llvm",)


def _as_graph(model: Any, input_shapes: Mapping[str, Sequence[int]] | None) -> Any:
    from .compiler.frontend import from_onnx
    from .compiler.graph.ir import Graph

    if isinstance(model, Graph):
        if input_shapes:
            raise ValueError("input_shapes must be None for a Graph (its shapes are fixed)")
        return model
    if isinstance(model, str | Path | bytes) or type(model).__name__ == "ModelProto":
        return from_onnx(model, input_shapes=input_shapes)
    raise TypeError(
        f"model must be an ONNX path, bytes, ModelProto or a Graph, not {type(model).__name__}"
    )


def compile(  # noqa: A001  (the public name mirrors tvm.relay.build / torch.compile)
    model: Any,
    target: str = "llvm",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    progress: bool = False,
) -> Module:
    """Compile a whole model for a target.

    Args:
        model: an ONNX file path, its bytes, an `onnx.ModelProto`, or a graph-layer `Graph`.
        target: "llvm" (this CPU; "llvm -mcpu=..." to name features). Other targets raise
            `NotImplementedError` until their back-ends exist.
        input_shapes: input name -> shape, for ONNX inputs with symbolic dimensions.
        progress: show a progress bar over the kernels being compiled.

    Returns:
        A `Module`: `run(inputs)`, `profile(inputs)`, `save(path)` / `Module.load(path)`.

    Raises:
        UnsupportedOpError: listing every op of the model the importer does not support.
        LoweringError: for an op without a CPU kernel (op and node named).
        NotImplementedError: for a target other than llvm.

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
    if tgt.kind not in BUILT_TARGETS:
        raise NotImplementedError(
            f"target {str(tgt)!r} is not built yet for whole models; targets must be one of "
            f"{', '.join(BUILT_TARGETS)}"
        )
    if not tgt.is_host:
        raise NotImplementedError(
            f"cross-compiling whole models (target {str(tgt)!r}) is not built yet; use 'llvm'"
        )
    from .compiler.graph.compile import compile_graph

    return compile_graph(_as_graph(model, input_shapes), tgt, progress=progress)
