"""PyTorch importer: a module and example inputs -> the graph IR, through torch's ONNX export.

torch is an optional extra (`pip install 'tensorforge[torch]'`, which brings onnxscript too).
The module is exported in eval mode with torch's torch.export-based ONNX exporter at opset 18
(the older TorchScript exporter fails on modules such as TransformerEncoderLayer), and the ONNX
model goes through ``from_onnx``, so both frontends share one importer and one op list.

Example:
    >>> import torch                                             # doctest: +SKIP
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())  # doctest: +SKIP
    >>> graph = from_torch(net, (torch.zeros(1, 4),))            # doctest: +SKIP
"""

from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import onnx

from ..graph.ir import Graph
from .onnx import from_onnx

# torch's exporter writes opset 18; converting down to 17 left opset-18 attributes on the
# reductions (ReduceMean's noop_with_empty_axes: torch.var, std, logsumexp, prod), which
# onnxruntime rejects, and opset-18 ops (Col2Im) as they were
OPSET = 18


def export_onnx(
    module: Any, example_inputs: Sequence[Any], input_names: Sequence[str] | None = None
) -> onnx.ModelProto:
    """Export ``module`` (in eval mode for the export; its modules' modes are put back after)
    to an ONNX ModelProto with torch's exporter.

    Raises:
        ImportError: torch is not installed (says how to install it).
        TypeError: ``module`` is not a torch.nn.Module or the inputs are not tensors.
        ValueError: torch's exporter failed (its message is kept).
    """
    torch = _import_torch()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, not {type(module).__name__}")
    inputs = (
        tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    )
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"example_inputs[{i}] must be a torch.Tensor, not {type(x).__name__}")
    names = list(input_names or [f"input{i}" for i in range(len(inputs))])
    if len(names) != len(inputs):
        raise ValueError(f"input_names must name {len(inputs)} inputs, not {len(names)}")
    training = {m: m.training for m in module.modules()}  # put back after the export
    module.eval()
    try:
        # Not under no_grad: inference mode switches some modules (TransformerEncoderLayer)
        # to fused fast paths that have no ONNX form.
        # The exporter reports progress on stdout and stderr; a library import stays quiet.
        quiet = io.StringIO()
        logger = logging.getLogger("torch.onnx")
        level = logger.level
        try:
            logger.setLevel(logging.ERROR)
            with warnings.catch_warnings(), redirect_stdout(quiet), redirect_stderr(quiet):
                warnings.simplefilter("ignore")
                program = torch.onnx.export(
                    module,
                    inputs,
                    dynamo=True,
                    opset_version=OPSET,
                    input_names=names,
                    verbose=False,
                )
        finally:
            logger.setLevel(level)
            for m, mode in training.items():
                m.training = mode
        proto = program.model_proto
    except Exception as e:  # torch raises many types; keep its message, drop its traceback
        raise ValueError(
            f"torch.onnx.export failed for {type(module).__name__}: {type(e).__name__}: {e}"
        ) from None
    return proto


def from_torch(
    module: Any, example_inputs: Sequence[Any], input_names: Sequence[str] | None = None
) -> Graph:
    """Import a PyTorch module into the graph IR.

    Args:
        module: a torch.nn.Module (exported in eval mode).
        example_inputs: a tensor or a tuple of tensors; their shapes become the graph's static
            input shapes.
        input_names: graph input names (default ``input0``, ``input1``, ...).

    Returns:
        The ``Graph``, as ``from_onnx`` builds it.

    Raises:
        ImportError: torch is not installed.
        UnsupportedOpError: listing every op the export produced that the importer lacks.
    """
    return from_onnx(export_onnx(module, example_inputs, input_names))


def _import_torch() -> Any:
    from tensorforge.extras import require

    # torch first, so that a machine without either is told about torch.
    torch = require("torch", "from_torch")
    require("onnxscript", "from_torch (torch's ONNX exporter)")
    return torch
