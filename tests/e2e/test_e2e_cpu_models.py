"""Whole models compiled for the CPU (tensorforge.compile) against onnxruntime, float32."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tensorforge
from tensorforge.cli import main
from tensorforge.compiler.frontend import UnsupportedOpError
from tensorforge.compiler.frontend import onnx_builders as ob
from tensorforge.runtime.module import Module

# (builder, args, atol as a fraction of the largest reference magnitude). rtol is 1e-4
# everywhere. ResNet-18's random-weight logits reach ~150: float32 sums over 20 layers in
# another order (blocked channels, FMA) differ by ~1e-6 of that scale, so its atol scales.
# MobileNetV2's 52 convolutions (with batch norms of random statistics) drift further: against
# the same graph evaluated in float64, onnxruntime is 6.8e-6 (at 64x64) and 1.2e-5 (96x96) of
# the logits' scale away and we are 6.1e-6 and 7.6e-6, so we differ from onnxruntime by
# ~8e-6 of that scale; 3e-5 leaves a margin.
MOBILENET_ATOL = 3e-5
MODELS = {
    "mlp": (ob.mlp, (), 0.0),
    "small_cnn": (ob.small_cnn, (), 0.0),
    "mobilenet_v2_block": (ob.mobilenet_v2_block, (), 0.0),
    "mobilenet_v2_96": (ob.mobilenet_v2, (96,), MOBILENET_ATOL),
    "transformer_encoder": (ob.transformer_encoder, (), 0.0),
    "resnet18_64": (ob.resnet18, (64,), 2e-6),
}


def _inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    result = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        result[value.name] = rng.standard_normal(shape).astype(np.float32)
    return result


def _onnxruntime(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString()).run(None, inputs)


def _check(module: Module, model: onnx.ModelProto, scale_atol: float, seed: int = 0) -> None:
    inputs = _inputs(model, seed)
    ours = module.run(inputs)
    wants = _onnxruntime(model, inputs)
    assert list(ours) == [o.name for o in model.graph.output]
    for got, want in zip(ours.values(), wants, strict=True):
        atol = max(1e-5, scale_atol * float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)


@pytest.fixture(scope="module")
def compiled() -> dict[str, tuple[onnx.ModelProto, Module]]:
    result = {}
    for name, (builder, args, _) in MODELS.items():
        model = builder(*args)
        result[name] = (model, tensorforge.compile(model))
    return result


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_onnxruntime(compiled: dict, name: str) -> None:
    model, module = compiled[name]
    _check(module, model, MODELS[name][2])
    _check(module, model, MODELS[name][2], seed=1)  # a second run reuses the arena


def test_every_fused_group_is_one_kernel_call(compiled: dict) -> None:
    _, module = compiled["resnet18_64"]
    # the blocked layout from the stem (which packs the input itself) to the global pool: its
    # one transform out fuses with the Flatten
    assert module.stats["calls"] == len(module.calls) == 24
    # the blocks that lower to the same code share a kernel (compile.KernelCache)
    assert module.stats["kernels"] == len(module.kernels) == len({c.kernel for c in module.calls})
    assert module.stats["kernels"] < 24
    assert [c.label.split(" ")[0] for c in module.calls][-2] == "LayoutTransform+Flatten"
    assert sum("Conv+Add+Relu" in c.label or "ConvNCHWc+Add+Relu" in c.label
               for c in module.calls) == 8  # fmt: skip
    assert module.arena_bytes < module.stats["naive_bytes"]


def test_save_load_round_trip_gives_identical_outputs(compiled: dict, tmp_path: Path) -> None:
    model, module = compiled["transformer_encoder"]
    path = tmp_path / "encoder.tfm"
    module.save(path)
    loaded = Module.load(path)
    inputs = _inputs(model)
    before, after = module.run(inputs), loaded.run(inputs)
    assert list(before) == list(after)
    for key in before:
        np.testing.assert_array_equal(before[key], after[key])
    assert path.read_bytes()[:8] == b"TFMOD\x00\x00\x01"


def test_profile_has_one_row_per_kernel_call(compiled: dict) -> None:
    model, module = compiled["small_cnn"]
    profile = module.profile(_inputs(model), repeat=3)
    assert [r.label for r in profile.rows] == [c.label for c in module.calls]
    assert all(r.median_ms > 0 for r in profile.rows)
    assert abs(sum(r.share for r in profile.rows) - 1.0) < 1e-6
    table = profile.table()
    assert "ConvNCHWc+Relu" in table and "median ms" in table  # the blocked layout's conv


def test_module_compiled_from_a_file_path(tmp_path: Path) -> None:
    model = ob.mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    _check(tensorforge.compile(str(path)), model, 0.0)


def test_unsupported_op_gets_the_importers_listing_error() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("TfIdfVectorizer", ["x"], ["a"], name="hm"),
            helper.make_node("StringNormalizer", ["a"], ["y"], name="det"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ob.IR_VERSION
    )
    with pytest.raises(UnsupportedOpError) as info:
        tensorforge.compile(model)
    assert "uses 2 unsupported op(s)" in str(info.value)
    assert "TfIdfVectorizer (node 'hm', opset 17)" in str(info.value)
    assert "StringNormalizer (node 'det', opset 17)" in str(info.value)


def test_targets_not_built_yet_raise_a_clear_error() -> None:
    with pytest.raises(NotImplementedError, match="cross-compiling whole models"):
        tensorforge.compile(ob.mlp(), target="llvm -mtriple=aarch64-linux-gnu")


def test_cli_compile_then_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model = ob.small_cnn()
    onnx_path, tfm, x = tmp_path / "cnn.onnx", tmp_path / "cnn.tfm", tmp_path / "x.npy"
    onnx.save(model, onnx_path)
    inputs = _inputs(model)
    np.save(x, inputs["x"])
    assert main(["compile", str(onnx_path), "-o", str(tfm), "--no-progress"]) == 0
    assert "7 kernels" in capsys.readouterr().out
    assert main(["run", str(tfm), "--input", f"x={x}", "--profile", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    want = _onnxruntime(model, inputs)[0]
    name = model.graph.output[0].name
    assert f"{name}: float32[1, 10] min {want.min():.4g} max {want.max():.4g}" in out
    assert "MaxPool (" in out and "total (sum of medians)" in out
    assert main(["run", str(onnx_path), "--input", str(x)]) == 0  # compiles first
    assert f"max {want.max():.4g}" in capsys.readouterr().out


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.tfm"
    bad.write_bytes(b"TFMOD\x00\x00\x01" + b"\x01\x00\x00\x00" + b"\xff\xff\x00\x00")
    assert main(["run", str(bad), "--input", "x.npy"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{bad}: offset 12: header length" in err


def test_cli_lists_unsupported_ops(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    graph = helper.make_graph(
        [helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="hm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "hm.onnx"
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ob.IR_VERSION
    )
    onnx.save(model, path)
    assert main(["compile", str(path), "-o", str(tmp_path / "hm.tfm")]) == 1
    assert "TfIdfVectorizer (node 'hm', opset 17)" in capsys.readouterr().err
    assert not (tmp_path / "hm.tfm").exists()


@pytest.mark.slow
def test_resnet18_at_224_matches_onnxruntime() -> None:
    model = ob.resnet18()
    _check(tensorforge.compile(model), model, 2e-6)


@pytest.mark.slow
def test_mobilenet_v2_at_224_matches_onnxruntime() -> None:
    model = ob.mobilenet_v2()
    _check(tensorforge.compile(model), model, MOBILENET_ATOL)


@pytest.mark.parametrize(
    "build",
    [lambda: ob.audio_cnn_1d(1600), lambda: ob.r3d_block(4, 14, 16)],
    ids=["audio_cnn_1d", "r3d_block"],
)
def test_1d_and_3d_convolution_models_match_onnxruntime(build) -> None:
    model = build()
    _check(tensorforge.compile(model), model, 1e-5)
