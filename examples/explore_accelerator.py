"""Hardware-software design-space exploration: sweep accelerator configs for a model.

Four configs around the `tiny` preset (GEMM core 4 or 8 outputs wide, 2 or 4 KiB of ACC) on a
PYNQ-Z2's xc7z020: each candidate's accelerator tasks are retuned on the cycle-accurate model, its
latency measured with default and with tuned schedules, and the Pareto front of latency against
DSPs and block RAM drawn. Yosys is skipped here (`synth=False`: DSP and block-RAM lower bounds) to
keep the example quick; `tensorforge dse` synthesizes each candidate by default.
"""

import tempfile

import numpy as np

from tensorforge.compiler.dse import explore
from tensorforge.compiler.frontend.onnx_builders import small_cnn

model = small_cnn(16)
x = model.graph.input[0]
calib = {x.name: np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
space = {
    "base": "tiny",
    "part": "xc7z020",
    "knobs": {"log_block_out": [2, 3], "log_acc_buff_size": [11, 12]},
    "presets": ["tiny"],
}
out = tempfile.mkdtemp(prefix="dse_")
result = explore(model, space, out, trials=4, calibration=calib, synth=False, progress=False)
print(result.table())
for r in result.records:
    if r["error"]:  # a candidate the model cannot be compiled for is recorded, with the reason
        print(f"{r['config']['name']}: {r['error']}: {r['message'][:90]}")
best = result.best()
assert best is not None and best["cycles"] <= best["cycles_default"]
print(
    f"fastest fitting: {best.get('preset') or best['config']['name']}, "
    f"{best['latency_ms']:.3f} ms; files: {', '.join(f.name for f in result.files)}"
)
