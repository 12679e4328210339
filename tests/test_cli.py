"""The command line: version, ISA table, config, demo, sim run, and clean errors."""

import json

import numpy as np

from tensorforge import __version__
from tensorforge.cli import main
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import layout_table


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert __version__ in capsys.readouterr().out


def test_isa_prints_the_generated_table(capsys):
    assert main(["isa", "--config", "tiny"]) == 0
    assert capsys.readouterr().out == layout_table(HWConfig.preset("tiny"))


def test_config_prints_json_and_derived_sizes(capsys):
    assert main(["config", "--config", "pynq"]) == 0
    out = capsys.readouterr().out
    assert "WGT buffer" in out and "262144 B = 1024 x 256 B" in out
    assert json.loads(out[: out.index("}") + 1]) == HWConfig.preset("pynq").to_dict()


def test_demo_saves_a_program_that_sim_run_executes(capsys, tmp_path):
    path = tmp_path / "mm.tfp"
    assert main(["demo", "--job", "matmul", "--config", "tiny", "--save", str(path)]) == 0
    assert "vs numpy: bit-exact" in capsys.readouterr().out
    a = np.zeros((256, 16, 1, 4), np.int8)
    np.save(tmp_path / "a.npy", a)
    out_dir = tmp_path / "out"
    rc = main(["sim", "run", str(path), "--input", f"A={tmp_path / 'a.npy'}", "--json",
               "--output-dir", str(out_dir)])  # fmt: skip
    assert rc == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["gemm_counter"] == 256 * 16 * 8
    c = np.load(out_dir / "C.npy")
    assert c.shape == (256, 8, 1, 4)


def test_errors_are_one_line_not_tracebacks(capsys, tmp_path):
    assert main(["isa", "--config", "nosuch"]) == 1
    assert capsys.readouterr().err.startswith("tensorforge: error: unknown HWConfig preset")
    bad = tmp_path / "x.tfp"
    bad.write_bytes(b"garbage")
    assert main(["sim", "run", str(bad)]) == 1
    assert "not a TensorForge program image" in capsys.readouterr().err


def test_hw_synth_names_an_unknown_part(capsys):
    assert main(["hw", "synth", "--config", "tiny", "--part", "xc9z999"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tensorforge: error: part must be one of xc7z010") and "xc9z999" in err


def test_demo_runs_the_digits_main_job_by_default(capsys):
    assert main(["demo", "--config", "tiny", "--images", "12"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("TensorForge main job: digits CNN") and "int8 accuracy" in out
    assert main(["demo", "--save", "m.tfp"]) == 1
    assert "--save belongs to --job matmul" in capsys.readouterr().err


def test_sim_trace_writes_a_perfetto_trace_with_the_cycle_count(capsys, tmp_path):
    from tensorforge.runtime.device.vta import run_image
    from tensorforge.runtime.program import ProgramImage

    path = tmp_path / "mm.tfp"
    assert main(["demo", "--job", "matmul", "--config", "tiny", "--save", str(path)]) == 0
    capsys.readouterr()
    trace = tmp_path / "trace.json"
    assert main(["sim", "trace", str(path), "-o", str(trace)]) == 0
    out = capsys.readouterr().out
    image = ProgramImage.load(path)
    _, result = run_image(image, image.random_inputs(), "cyclesim")  # the cycle model, directly
    assert out.startswith(f"{result.cycles:,} cycles; trace written to {trace}")
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {"fetch", "load", "compute", "store"}
    gemms = [e for e in events if e["ph"] == "X" and e["name"].startswith("GEMM")]
    assert len(gemms) == sum(1 for i in image.instructions() if type(i).__name__ == "GemmInsn")


def test_readme_tour_runs_on_the_sample(tmp_path, monkeypatch, capsys):
    """The README tour's model commands, as written, on the files `tensorforge sample` writes."""
    import numpy as np
    import onnxruntime as ort

    monkeypatch.chdir(tmp_path)
    assert main(["sample"]) == 0
    x = np.load("x.npy")
    want = ort.InferenceSession("model.onnx").run(None, {"input": x})[0]
    assert main(["compile", "model.onnx", "-o", "model.tfm", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["run", "model.tfm", "--input", "x.npy"]) == 0
    out = capsys.readouterr().out
    assert f"max {want.max():.4g}" in out  # the CPU module agrees with onnxruntime
    assert main(["run", "model.onnx", "--target", "vta -config=pynq", "--input", "x.npy"]) == 0
    assert "tf.qdense (dense)" in capsys.readouterr().out  # int8 layers ran on the accelerator


def test_inputs_may_be_onnx_tensor_proto_files(tmp_path, capsys):
    """`--input input_0.pb` (the model zoo's and onnx's test_data_set files) reads the same
    array as its .npy: the outputs printed are the same."""
    import onnx
    from onnx import numpy_helper

    from tensorforge.cli import load_array
    from tensorforge.compiler.frontend.onnx_builders import mlp

    for array in (np.arange(6, dtype=np.float16).reshape(2, 3), np.array([-1, 7], np.int64)):
        pb = tmp_path / "a.pb"
        pb.write_bytes(numpy_helper.from_array(array, "a").SerializeToString())
        got = load_array(str(pb))
        assert got.dtype == array.dtype and np.array_equal(got, array)
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp(), model)
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "x.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    printed = []
    for name in ("x.npy", "x.pb"):
        assert main(["run", str(model), "--input", str(tmp_path / name)]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] and "float32[2, 10]" in printed[0]
