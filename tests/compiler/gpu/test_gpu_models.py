"""Whole models through `tensorforge.compile(model, target="opencl")`, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import tensorforge
from tensorforge.compiler.frontend import onnx_builders as B
from tensorforge.runtime.module import Module

MODELS = {
    "mlp": B.mlp,
    "small_cnn": B.small_cnn,
    "mobilenet_v2_block": B.mobilenet_v2_block,
    "regnet_y_block": lambda: B.regnet_y_block(size=28),  # grouped 3x3 (direct, implicit GEMM)
    "transformer_encoder": B.transformer_encoder,
    "resnet18_32px": lambda: B.resnet18(size=32, classes=10),
}


def _feeds(model, seed: int = 0) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
            np.float32
        )
        for i in sess.get_inputs()
    }


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString())
    return sess.run(None, feeds)


@pytest.mark.parametrize("name", MODELS)
def test_model_on_opencl_matches_onnxruntime(name: str) -> None:
    model = MODELS[name]()
    feeds = _feeds(model)
    module = tensorforge.compile(model, target="opencl")
    assert {k.kind for k in module.kernels} == {"opencl"}
    got = module.run(feeds)
    for ref, out in zip(_reference(model, feeds), got.values(), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_saved_module_carries_its_kernels_and_runs_again(tmp_path) -> None:
    model = B.small_cnn()
    module = tensorforge.compile(model, target="opencl")
    path = tmp_path / "cnn.tfm"
    module.save(path)
    loaded = Module.load(path)
    assert loaded.target == "opencl"
    feeds = _feeds(model, seed=1)
    (ref,) = _reference(model, feeds)
    for m in (loaded, loaded):  # the second run reuses the device-resident arena
        (out,) = m.run(feeds).values()
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    rows = loaded.profile(feeds, repeat=2).rows
    assert len(rows) == len(loaded.calls) and all(r.median_ms > 0 for r in rows)


def test_a_module_for_opencl_refuses_another_device() -> None:
    module = tensorforge.compile(B.mlp(), target="opencl")
    module.use_device("cuda")
    with pytest.raises(Exception, match="compiled for opencl cannot run on device 'cuda'"):
        module.run(_feeds(B.mlp()))


def _with_payload(module, edit):
    import dataclasses
    import json

    first = module.kernels[0]
    payload = json.loads(first.payload)
    edit(payload)
    kernels = [dataclasses.replace(first, payload=json.dumps(payload).encode())]
    return Module(
        target=module.target,
        inputs=module.inputs,
        outputs=module.outputs,
        tensors=module.tensors,
        kernels=kernels + module.kernels[1:],
        calls=module.calls,
        slots=module.slots,
        arena_bytes=module.arena_bytes,
        constants=module.constants,
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda p: p["buffers"][0].update(size=p["buffers"][0]["size"] * 2),
            "holds .* but|compiled for 256",
        ),
        (lambda p: p["kernels"][0].update(grid=[0, 1, 1]), "grid size must be in"),
        (lambda p: p["kernels"][0]["args"].append(99), "argument index must be in"),
        (lambda p: p["buffers"][0].update(dtype="complex64"), "dtype must be one of"),
        (lambda p: p.pop("source"), "source must be a string"),
    ],
)
def test_a_damaged_gpu_kernel_is_refused_before_anything_runs(edit, message) -> None:
    """A kernel whose payload lies about its buffers would write past the arena's tensors."""
    from tensorforge.runtime.device.gpu import GPUError

    module = tensorforge.compile(B.mlp(), target="opencl")
    with pytest.raises((GPUError, ValueError), match=message):  # at construction or load
        _with_payload(module, edit).run(_feeds(B.mlp()))
