"""Compile the shipped digits CNN for the accelerator: quantized to int8, its conv/dense layers
(and the max pooling one of them feeds) as program images on the behavioural simulator, the rest
as native CPU code. Check the module against the int8 graph's numpy reference bit for bit, then
compare accuracy with float and look at what the accelerator did; last, an input past the range
the calibration covered, which run() warns of (`tensorforge.CalibrationRangeWarning`)."""

import warnings

import numpy as np

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.compile_vta import quantize_for
from tensorforge.compiler.graph.passes import optimize
from tensorforge.digits import load_digits_assets
from tensorforge.hw.config import HWConfig

model, split = load_digits_assets()
x, labels = split["images"][:100], split["labels"][:100]
graph = optimize(from_onnx(str(model), input_shapes={"input": x.shape}))

# The int8 graph the compiler makes (VTA-compatible shift requantization), compiled as it is.
q = quantize_for(graph, HWConfig.preset("pynq"), {"input": split["calib_images"]}, mode="shift")
module = tensorforge.compile(q, target="vta -config=pynq -device=sim -vthreads=2")
logits = module.run({"input": x})[module.outputs[0]]
assert np.array_equal(logits, run_graph(q, {"input": x})[q.outputs[0]])  # bit for bit

float_acc = np.mean(run_graph(graph, {"input": x})[graph.outputs[0]].argmax(1) == labels)
int8_acc = np.mean(logits.argmax(1) == labels)
# the first 100 test images (the demo, `tensorforge demo`, scores all 450: another percentage)
print(f"first {len(labels)} test images: float {float_acc:.1%}, int8 {int8_acc:.1%}")
assert int8_acc >= float_acc - 0.02
for node, _op, where, why in module.stats["placement"]:
    print(f"  {node:<18} {where}  {why}")

module.use_device("cyclesim").run({"input": x})  # the same kernels, now with cycle counts
for label, result in module.device_results().items():
    print(f"  {label:<32} {result.cycles:>10,} cycles")

# Weight scales: one per output channel (the default with multiply+shift, `-weights=per-channel`:
# each channel's multiplier is an int32 vector the ALU multiplies by) or one per layer.
float_logits = run_graph(graph, {"input": x})[graph.outputs[0]]
for weights in ("per-channel", "per-tensor"):
    qw = quantize_for(graph, HWConfig.preset("pynq"), {"input": split["calib_images"]}, "mul",
                      weights)  # fmt: skip
    mw = tensorforge.compile(qw, target="vta -config=pynq -device=sim")
    out = mw.run({"input": x})[mw.outputs[0]]
    assert np.array_equal(out, run_graph(qw, {"input": x})[qw.outputs[0]])  # bit for bit
    error = np.linalg.norm(out - float_logits) / np.linalg.norm(float_logits)
    print(f"mul, {weights} weight scales: error against float {error:.4f}")

# Static quantization clips what the calibration did not see: an input far past the calibration
# images' range (here, images 4x as bright) makes run() warn, naming the input, once per module.
low, high = module.stats["calibrated_ranges"]["input"]
print(f"calibrated input range [{low:.3f}, {high:.3f}]")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", tensorforge.CalibrationRangeWarning)
    module.run({"input": 4 * x})
assert any(issubclass(w.category, tensorforge.CalibrationRangeWarning) for w in caught)
print(f"  {caught[0].message}")
