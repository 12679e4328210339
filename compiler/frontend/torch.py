"""PyTorch importer: a module and example inputs -> the graph IR, through torch's ONNX export.

torch is an optional extra (`pip install 'tensorforge[torch]'`, which brings onnxscript too).
The module is exported in eval mode with torch's torch.export-based ONNX exporter at opset 18
(the older TorchScript exporter fails on modules such as TransformerEncoderLayer); where that
one fails (an aten op it has no ONNX function for, such as torch.cdist's), the TorchScript
exporter is tried, and where both fail the error gives both reasons. The ONNX
model goes through ``from_onnx``, so both frontends share one importer and one op list.

Example:
    >>> import torch                                             # doctest: +SKIP
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())  # doctest: +SKIP
    >>> graph = from_torch(net, (torch.zeros(1, 4),))            # doctest: +SKIP
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import onnx

from ..graph.ir import Graph
from ..native_output import captured
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
        ValueError: both of torch's exporters failed (both reasons are kept).
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
        try:
            return _export(torch, module, inputs, names, dynamo=True)
        except Exception as e:  # torch raises many types; keep its message, drop its traceback
            first = _exporter_message(e)
        try:
            return _export(torch, module, inputs, names, dynamo=False)
        except Exception as e:
            second = _exporter_message(e)
    finally:
        for m, mode in training.items():
            m.training = mode
    raise ValueError(
        f"torch.onnx.export failed for {type(module).__name__} with both of torch's exporters: "
        f"torch.export-based: {first}; TorchScript-based: {second}"
    ) from None


def _export(
    torch: Any, module: Any, inputs: tuple, names: list[str], dynamo: bool
) -> onnx.ModelProto:
    """One of torch's ONNX exporters, quietly: the torch.export-based one (`dynamo`), or the
    TorchScript-based one, tried when the first fails (it still knows ops such as
    aten::_cdist_forward that the newer one has no ONNX function for)."""
    # Not under no_grad: inference mode switches some modules (TransformerEncoderLayer)
    # to fused fast paths that have no ONNX form.
    # The exporters report progress on stdout and stderr; a library import stays quiet.
    # The TorchScript exporter prints its graph from C++ on failure: captured at the file
    # descriptors too.
    quiet = io.StringIO()
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    try:
        logger.setLevel(logging.ERROR)
        with (
            warnings.catch_warnings(),
            redirect_stdout(quiet),
            redirect_stderr(quiet),
            captured((1, 2)),
        ):
            warnings.simplefilter("ignore")
            if dynamo:
                program = torch.onnx.export(
                    module, inputs, dynamo=True, opset_version=OPSET, input_names=names,
                    verbose=False,
                )  # fmt: skip
                return program.model_proto
            buffer = io.BytesIO()
            torch.onnx.export(
                module, inputs, buffer, dynamo=False, opset_version=OPSET, input_names=names
            )
            return onnx.load_from_string(buffer.getvalue())
    finally:
        logger.setLevel(level)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _exporter_message(error: BaseException) -> str:
    """What an exporter's exception says, shortly: its type and message without terminal
    colours, and of the torch.export-based exporter's long report only its exception summary
    (the op it has no ONNX function for), not its boilerplate."""
    text = _ANSI.sub("", str(error)).strip()
    if "## Exception summary" in text:
        summary = text.split("## Exception summary", 1)[1].strip()
        text = summary.split("\n", 1)[0]
        text = re.sub(r"^<class '[\w.]*\.(\w+)'>", r"\1", text)
        return text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


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
