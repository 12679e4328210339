"""The data-dependent tail of a compiled model: the part whose shapes are known only at run time.

TensorForge compiles static shapes. A model whose later part depends on values computed at run
time (the boxes NonMaxSuppression keeps, the indices NonZero finds, a Reshape to a computed
shape, a TopK whose K is computed) is compiled up to that point; everything that depends on such
a value is its tail (`compiler/frontend/onnx_tail.py` splits it off at import). The compiled
part's outputs are then the model's outputs it computes and the values the tail reads.

A `Tail` holds that part as a self-contained ONNX model (its inputs the values it reads, its
weights initializers, its outputs the model's outputs it computes). Each run, `Tail.run`
evaluates it on those values node by node with the graph layer's reference ops
(`compiler.frontend.onnx.evaluate_onnx`, numpy), so every shape is known when a node needs it.
So running a module with a tail needs the compiler package (not LLVM), and its tail runs at
numpy's speed plus an import per run: for detectors' box selection after a compiled backbone,
not for a tail of heavy layers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


class TailError(ValueError):
    """A tail that does not fit its module (a value it reads that the module does not give)."""


@dataclass(frozen=True)
class Tail:
    """The run-time part of a module.

    Attributes:
        model: the ONNX model's bytes.
        inputs: the values it reads, each an output or an input of the compiled part (in the
            order of the ONNX model's inputs).
        outputs: every output of the model, in the model's order; those the compiled part
            computes are taken from it, the rest from the tail.
    """

    model: bytes
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.model, bytes) or not self.model:
            raise TailError("a tail's model must be the non-empty bytes of an ONNX model")
        for what in ("inputs", "outputs"):
            names = getattr(self, what)
            if not all(isinstance(n, str) and n for n in names):
                raise TailError(f"a tail's {what} must be non-empty names, not {names!r}")
            if len(set(names)) != len(names):
                raise TailError(f"a tail's {what} must be distinct, not {list(names)}")

    def check(self, given: Sequence[str], where: str = "the module") -> None:
        """Every value the tail reads is one of `given` (the compiled part's inputs and
        outputs)."""
        missing = [n for n in self.inputs if n not in given]
        if missing:
            raise TailError(f"{where}: its tail reads {missing}, which the compiled part does "
                            f"not give (it gives {sorted(given)})")  # fmt: skip

    def run(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The tail's outputs (name -> array), from the values it reads (name -> array).

        Raises:
            OnnxImportError, GraphError: the values make the tail invalid (an index outside its
                axis in a gather, shapes that do not broadcast), naming the node, as
                onnxruntime refuses such a run.
        """
        # The compiler is imported here, on first use: a module without a tail never needs it.
        from ..compiler.frontend.onnx import evaluate_onnx

        return evaluate_onnx(self.model, {name: np.asarray(values[name]) for name in self.inputs})

    def header(self) -> dict[str, Any]:
        """The JSON header entry of a module file (the model is a section of its own)."""
        return {"inputs": list(self.inputs), "outputs": list(self.outputs)}


#: the module file's section holding the tail's ONNX model
SECTION = "tail"
