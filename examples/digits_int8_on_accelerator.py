"""Quantize the shipped digits CNN to int8, partition it for the accelerator, run its offloaded
layers on the behavioural simulator (each checked bit for bit against its int8 reference) and
compare accuracy with float."""

import numpy as np

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.offload import OffloadRunner
from tensorforge.compiler.graph.passes import optimize, partition_graph
from tensorforge.compiler.quantize.graph import quantize_graph
from tensorforge.digits import load_digits_assets
from tensorforge.hw.config import HWConfig

cfg = HWConfig.preset("pynq").replace(alu_mul=False)  # VTA-compatible: requantize by shift
model, split = load_digits_assets()
x, labels = split["images"][:100], split["labels"][:100]
graph = optimize(from_onnx(str(model), input_shapes={"input": x.shape}))
q = partition_graph(quantize_graph(graph, {"input": split["calib_images"]}, cfg), cfg)

runner = OffloadRunner(q, cfg, backend="sim", vthreads=2, check=True)
outputs, layers = runner.run({"input": x})
float_acc = np.mean(run_graph(graph, {"input": x})[graph.outputs[0]].argmax(1) == labels)
int8_acc = np.mean(outputs[q.outputs[0]].argmax(1) == labels)
print(f"float {float_acc:.1%}, int8 {int8_acc:.1%}")
for layer in layers:
    print(f"  {layer.name:<18} {layer.runs_on}")
