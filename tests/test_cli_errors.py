"""Bad command lines end in one line on stderr and a non-zero exit, never a traceback
(`--debug` shows it)."""

from __future__ import annotations

import subprocess
import sys

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
    [
        ("", "target must be a non-empty string"),
        ("vta -confg=tiny", "unknown option 'confg'"),
        ("llvm -mcpu=nope", "-mcpu=nope: LLVM knows no CPU 'nope' for"),  # LLVM aborted the run
        ("llvm -mattr=+avx2,+nope", "-mattr: LLVM knows no feature(s) ['+nope']"),
        ("vta -config=nope", "unknown HWConfig preset 'nope'"),
        ("cuda -arch=sm_1", "must be a CUDA arch such as sm_80"),
    ],
)
def test_bad_targets_are_one_line_errors(tmp_path, capsys, target, message) -> None:
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp().SerializeToString())
    err = _one_line_error(["compile", str(model), "-o", str(tmp_path / "m.tfm"), "--target",
                           target], capsys)  # fmt: skip
    assert message in err and not (tmp_path / "m.tfm").exists()


@pytest.fixture
def mlp_file(tmp_path):
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp().SerializeToString())
    return model


def test_an_output_that_is_an_input_or_a_folder_is_refused_and_the_input_kept(
    mlp_file, tmp_path, capsys
) -> None:
    before = mlp_file.read_bytes()
    err = _one_line_error(["compile", str(mlp_file), "-o", str(mlp_file)], capsys)
    assert f"-o {mlp_file} would overwrite the model" in err
    assert mlp_file.read_bytes() == before
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 64), np.float32))
    err = _one_line_error(["run", str(mlp_file), "--input", str(x), "--trace", str(x)], capsys)
    assert f"--trace {x} would overwrite --input {x}" in err
    err = _one_line_error(["compile", str(mlp_file), "-o", str(tmp_path)], capsys)
    assert f"-o {tmp_path} is a folder" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not a .npy array file (the file is empty)"),
        (b"\x93NUMPY\x01\x00v\x00{'descr'", "not a .npy array file (EOF"),
        ("npz", "an .npz archive (of ['a']), not one .npy array"),
        ("object", "not a .npy array file (Object arrays cannot be loaded"),
        (None, "cannot read it: Is a directory"),
    ],
)
def test_bad_npy_files_are_one_line_errors_naming_flag_and_file(
    mlp_file, tmp_path, capsys, content, message
) -> None:
    x = tmp_path / "x.npy"
    if content == "npz":
        with open(x, "wb") as f:
            np.savez(f, a=np.ones(2))
    elif content == "object":
        np.save(x, np.array([None, 1], dtype=object), allow_pickle=True)
    elif content is None:
        x.mkdir()
    else:
        x.write_bytes(content)
    err = _one_line_error(["run", str(mlp_file), "--input", str(x)], capsys)
    assert f"--input {x}: {message}" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not an ONNX TensorProto file (no data type)"),
        (b"\xff\xff\xff", "not an ONNX TensorProto file (Error parsing message"),
        ("strings", "a tensor of strings, not of numbers"),
        ("external", "the tensor's data is in another file; save it as .npy"),
    ],
)
def test_bad_tensor_proto_files_are_one_line_errors(
    mlp_file, tmp_path, capsys, content, message
) -> None:
    import onnx
    from onnx import helper

    x = tmp_path / "input_0.pb"
    if content == "strings":
        proto = helper.make_tensor("x", onnx.TensorProto.STRING, [1], [b"a"])
        x.write_bytes(proto.SerializeToString())
    elif content == "external":
        proto = helper.make_tensor("x", onnx.TensorProto.FLOAT, [2], [1.0, 2.0])
        proto.data_location = onnx.TensorProto.EXTERNAL
        x.write_bytes(proto.SerializeToString())
    else:
        x.write_bytes(content)
    err = _one_line_error(["run", str(mlp_file), "--input", str(x)], capsys)
    assert f"--input {x}: {message}" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--shape", "nope=2,64"], "--shape nope=2,64: the model has no input 'nope'; its inputs"),
        (["--calibrate", "nope=x.npy"], "--calibrate nope=x.npy: the model has no input 'nope'"),
        (["--input", "X", "--input", "X"], "--input gives input 'x' twice"),
        (["--shape", "2,64", "--shape", "2,64"], "--shape gives input 'x' twice"),
    ],
)
def test_arrays_and_shapes_must_name_each_model_input_once(
    mlp_file, tmp_path, capsys, extra, message
) -> None:
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 64), np.float32))
    argv = ["run", str(mlp_file), *(str(x) if a == "X" else a for a in extra)]
    assert message in _one_line_error(argv, capsys)


def test_files_of_the_wrong_kind_name_the_file(mlp_file, tmp_path, capsys) -> None:
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 64), np.float32))
    err = _one_line_error(["config", "--config", str(x)], capsys)
    assert f"{x}: not a JSON HWConfig (byte 0 is not UTF-8 text)" in err
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    err = _one_line_error(["compile", str(empty), "-o", str(tmp_path / "m.tfm")], capsys)
    assert f"{empty}: is not a valid ONNX model: the file is empty" in err
    err = _one_line_error(["compile", str(mlp_file), "-o", str(tmp_path / "m.tfm"), "--shape",
                           "x=2,3"], capsys)  # fmt: skip
    assert f"{mlp_file}: input 'x'" in err and "<ModelProto>" not in err


def test_profile_repeats_are_bounded(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "m.onnx", "--profile", "--repeat", "10000000000000000000000"])
    assert info.value.code == 2 and "--repeat: must be at most 1,000,000" in capsys.readouterr().err


def test_an_output_folder_that_is_a_file_is_refused(tmp_path, capsys) -> None:
    f = tmp_path / "x.npy"
    f.write_bytes(b"keep")
    err = _one_line_error(["sample", "-o", str(f)], capsys)
    assert f"-o {f} is a file; give a folder to write into" in err
    assert f.read_bytes() == b"keep"


def test_rpc_serve_on_a_port_out_of_range_or_in_use(capsys) -> None:
    import socket

    err = _one_line_error(["rpc", "serve", "--port", "99999"], capsys)
    assert "port must be an integer from 0 to 65535, not 99999" in err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        err = _one_line_error(["rpc", "serve", "--port", str(port)], capsys)
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in err


def test_warnings_are_one_line_naming_the_problem_not_the_source(tmp_path, capsys) -> None:
    from tensorforge.compiler.autotune.log import TuningLog
    from tensorforge.compiler.autotune.measure import MeasureResult
    from tensorforge.compiler.autotune.task import Task

    task = Task("x86.dense", {"m": 1, "n": 8, "k": 8, "dtype": "float32", "prepacked": True},
                "llvm")  # fmt: skip
    log = tmp_path / "tune.jsonl"
    with TuningLog(log) as f:
        f.write(task, MeasureResult(task.space.default.values, 2e-6, [2e-6]), trial=0)
    with open(log, "a") as f:
        f.write("{not json\n")
    with pytest.warns(UserWarning, match="skipped, not JSON"):  # recorded as ever under pytest
        assert main(["tune", "--plot", str(log), "-o", str(tmp_path / "c.png")]) == 0
    done = subprocess.run([sys.executable, "-m", "tensorforge.cli", "tune", "--plot", str(log),
                           "-o", str(tmp_path / "c.png")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        done.stderr == f"tensorforge: warning: {log}:2: skipped, not JSON (Expecting "
        "property name enclosed in double quotes)\n"
    ), done.stderr
