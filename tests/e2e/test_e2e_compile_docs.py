"""docs/compile.md's example runs as written (it checks itself against onnxruntime)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "compile.md"


def test_compile_guide_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None
    source = code.group(1).replace("/tmp/resnet18.tfm", str(tmp_path / "resnet18.tfm"))
    namespace: dict = {}
    exec(compile(source, str(DOC), "exec"), namespace)  # noqa: S102  (our own doc)
    assert (tmp_path / "resnet18.tfm").read_bytes()[:5] == b"TFMOD"
    assert namespace["module"].stats["calls"] == 24
