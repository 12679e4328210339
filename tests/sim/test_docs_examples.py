"""docs/simulators.md's Python example runs as written, on a small matmul of the demo.

Oracles: the functional simulator's outputs (the documented example's cycle-accurate run must
equal them) and the trace file it says it writes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tensorforge.demo import build_matmul, pack_inp
from tensorforge.hw.config import HWConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"


def python_blocks(doc: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / doc).read_text(), re.S)


def test_simulators_guide_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the example writes run.json
    k = build_matmul(HWConfig.preset("pynq"), 16, 32, 32, seed=1)
    inputs = {"A": pack_inp(k.config, k.a)}
    _, want = k.run_on("cyclesim")
    (block,) = python_blocks("simulators.md")
    namespace = {"image": k.image, "inputs": inputs}
    exec(compile(block, "docs/simulators.md", "exec"), namespace)  # noqa: S102 (our own doc)
    result = namespace["result"]  # the last run: run_image on random inputs
    assert result.backend == "cyclesim" and result.cycles == want.cycles  # data-independent
    assert namespace["outputs"]["C"].shape == k.image.buffer("C").shape
    assert json.loads((tmp_path / "run.json").read_text())["traceEvents"]
