"""Bad command lines end in one line on stderr and a non-zero exit, never a traceback
(`--debug` shows it)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.cli import main
from tensorforge.compiler.frontend.onnx_builders import mlp


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--images", "-3"], "argument --images: must be at least 1, not -3"),
        (["run", "m.onnx", "--profile", "--repeat", "0"], "--repeat: must be at least 1, not 0"),
    ],
)
def test_counts_must_be_positive_integers(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def _one_line_error(argv, capsys) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tensorforge: error: "), err
    assert "Traceback" not in err
    return err


def test_a_config_that_is_not_a_json_object(tmp_path, capsys) -> None:
    path = tmp_path / "cfg.json"
    path.write_text("[1, 2]")
    err = _one_line_error(["config", "--config", str(path)], capsys)
    assert "a HWConfig must be a JSON object, not list" in err


def test_compiler_errors_are_one_line_and_debug_shows_the_traceback(tmp_path, capsys) -> None:
    """A compiler error (here: a GPU kernel over the target's shared memory) prints as one line
    and writes nothing."""
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp().SerializeToString())
    argv = ["compile", str(model), "-o", str(tmp_path / "m.tfm"), "--no-progress",
            "--target", "opencl -max_shared=64"]  # fmt: skip
    err = _one_line_error(argv, capsys)
    assert "bytes of shared memory, more than the 64 target" in err
    assert not (tmp_path / "m.tfm").exists()
    with pytest.raises(ValueError, match="bytes of shared memory"):  # raised: a traceback
        main(["--debug", *argv])


def test_profile_prints_numbers_for_one_repeat(tmp_path, capsys) -> None:
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp().SerializeToString())
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 64), np.float32))
    assert main(["run", str(model), "--input", str(x), "--profile", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "total (sum of medians)" in out and "nan" not in out.lower()


@pytest.mark.parametrize(
    ("target", "message"),
    [("", "target must be a non-empty string"), ("vta -confg=tiny", "unknown option 'confg'")],
)
def test_bad_targets_are_one_line_errors(tmp_path, capsys, target, message) -> None:
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp().SerializeToString())
    err = _one_line_error(["compile", str(model), "-o", str(tmp_path / "m.tfm"), "--target",
                           target], capsys)  # fmt: skip
    assert message in err and not (tmp_path / "m.tfm").exists()
