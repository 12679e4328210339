"""Auto-tune a model's operators, then compile it with the tuning log.

Tunes the small CNN's two convolutions and its dense layer on this CPU (a few trials each: real
budgets are hundreds), checks that the tuned module still matches onnxruntime, and tunes the
digits CNN's accelerator layers on the cycle-accurate model (cycles as the cost, no board).
"""

import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

import tensorforge
from tensorforge.compiler.autotune import (
    Builder,
    LocalRunner,
    SimRunner,
    extract_tasks,
    tune_tasks,
)
from tensorforge.compiler.frontend.onnx_builders import small_cnn
from tensorforge.digits import load_digits_assets

log = Path(tempfile.mkdtemp()) / "tune.jsonl"
model = small_cnn().SerializeToString()

# 1. The CPU: one task per distinct conv/dense workload, wall time as the cost.
tasks = extract_tasks(model, "llvm")
with LocalRunner(repeat=3) as runner:
    builder = Builder(n_parallel=2)
    for s in tune_tasks(tasks, 6, builder, runner, log=log, tuner="xgb", progress=False):
        print(
            f"{s.task.describe():<42} default {s.default_cost * 1e6:8.1f} us  "
            f"best {s.best_cost * 1e6:8.1f} us  ({s.trials} trials, {s.failures} failed)"
        )

module = tensorforge.compile(model, tuning_log=log)
print("tuned kernels:", module.stats["tuning"]["applied"])
x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
want = ort.InferenceSession(model).run(None, {"x": x})[0]
np.testing.assert_allclose(module.run({"x": x})[module.outputs[0]], want, rtol=1e-4, atol=1e-5)
print("the tuned module matches onnxruntime")

# 2. The accelerator: cycles of the cycle-accurate model, deterministic.
onnx_path, split = load_digits_assets()
target = "vta -config=tiny"
calib = {"input": split["calib_images"]}
vta_tasks = extract_tasks(str(onnx_path), target, {"input": (4, 1, 8, 8)}, calib)
with SimRunner("cyclesim", n_parallel=2) as runner:
    for s in tune_tasks(vta_tasks, 8, builder, runner, log=log, tuner="random", progress=False):
        print(
            f"{s.task.describe():<42} default {s.default_cost:8,.0f} cycles  "
            f"best {s.best_cost:8,.0f} cycles"
        )
        assert s.best_cost <= s.default_cost
builder.close()
