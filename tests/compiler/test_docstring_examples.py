"""The examples in the compiler's public docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "tensorforge.compiler.te",
    "tensorforge.compiler.te.tensor",
    "tensorforge.compiler.te.reduce",
    "tensorforge.compiler.schedule.schedule",
    "tensorforge.compiler.tir.arith",
    "tensorforge.compiler.tir.lower",
    "tensorforge.compiler.tir.interp",
    "tensorforge.compiler.graph.compile_vta",
    "tensorforge.compiler.quantize.graph",
    "tensorforge.compiler.graph.accel_kernels",
    "tensorforge.compiler.vta.layout",
    "tensorforge.compiler.vta.operators",
    "tensorforge.compiler.vta.lower",
    "tensorforge.runtime.device.vta.layout",
    "tensorforge.sim.trace",
    "tensorforge.hw.tools",
    "tensorforge.compiler.autotune.space",
    "tensorforge.compiler.autotune.dispatch",
    "tensorforge.compiler.autotune.task",
    "tensorforge.compiler.autotune.pool",
    "tensorforge.compiler.autotune.log",
    "tensorforge.compiler.autotune.driver",
    "tensorforge.compiler.dse.space",
    "tensorforge.compiler.dse.area",
    "tensorforge.compiler.dse.sweep",
    "tensorforge.hw.synth",
    "tensorforge.hw.config",
    "tensorforge.compiler.build",
    "tensorforge.compiler.codegen.gpu",
    "tensorforge.compiler.codegen.gpu_source",
    "tensorforge.compiler.graph.compile_gpu",
    "tensorforge.compiler.tir.gpu_intrin",
    "tensorforge.compiler.topi.gpu.tensorcore",
    "tensorforge.compiler.frontend.onnx_weights",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_user_guide_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import re
    from pathlib import Path

    guide = Path(__file__).parents[2] / "docs" / "tensor_expressions.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, str(guide), "exec"), {})
    assert "for j.inner in range(4) vectorized {" in capsys.readouterr().out
