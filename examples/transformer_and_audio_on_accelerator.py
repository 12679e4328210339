"""Compile a transformer encoder layer and a keyword-spotting 1-D CNN for the accelerator: the
encoder's Linear layers ([tokens, dim] @ [dim, n] MatMuls of 3-D activations) and the audio
model's 1-D convolutions run on the GEMM core, as 2-D dense and conv (`passes/accel_forms.py`).
Check each module against its int8 graph on the numpy reference (the same up to the float
ops' rounding: attention, LayerNorm and GELU run as native float code, and a last-bit difference
there can move a later int8 rounding by one step) and against the float model."""

import numpy as np

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import audio_cnn_1d, transformer_encoder
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.compile_vta import quantize_for
from tensorforge.hw.config import HWConfig

rng = np.random.default_rng(0)
target = "vta -config=pynq -device=sim"
for model in (transformer_encoder(seq=16, dim=64, heads=4, ffn=128), audio_cnn_1d(length=2000)):
    graph = from_onnx(model)
    name = graph.inputs[0]
    shape = graph.types[name].shape
    calibration = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    module = tensorforge.compile(model, target=target, calibration=calibration)
    on_accel = [row[0] for row in module.stats["placement"] if row[2] == "vta"]
    x = {name: rng.standard_normal(shape).astype(np.float32)}
    got = module.run(x)[module.outputs[0]]
    q = quantize_for(graph, HWConfig.preset("pynq"), calibration, "mul")
    reference = run_graph(q, x)[q.outputs[0]]
    drift = np.linalg.norm(got - reference) / np.linalg.norm(reference)
    want = run_graph(graph, x)[graph.outputs[0]]
    error = np.linalg.norm(got - want) / np.linalg.norm(want)
    print(f"{graph.name}: {len(on_accel)} layers on the accelerator ({', '.join(on_accel[:3])}, "
          f"...), {module.stats['offloaded_macs']:.0%} of the conv/dense MACs; against the int8 "
          f"graph {drift:.1e}, against float {error:.3f}")  # fmt: skip
    assert on_accel and drift < 0.01 and error < 0.1
