"""A loop whose length is decided at run time, built as ONNX, compiled for this CPU and checked
against onnxruntime.

`y = x; for i in range(steps) while max(|y|) < limit: y = tanh(y @ W) * 2 + i`: `steps` and
`limit` are model inputs, so the loop cannot be unrolled at compile time. It becomes one kernel
of kind "loop" whose body is a module of its own (docs/graph.md, "A Loop that runs at run
time"); a torch.jit.script `for`/`while` loop exported to ONNX compiles the same way.
"""

import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.runtime.module import Module

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
rng = np.random.default_rng(0)
body = helper.make_graph(
    [
        helper.make_node("MatMul", ["y_in", "W"], ["mm"]),
        helper.make_node("Tanh", ["mm"], ["t"]),
        helper.make_node("Mul", ["t", "two"], ["t2"]),
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Add", ["t2", "fi"], ["y_out"]),
        helper.make_node("Abs", ["y_out"], ["a"]),
        helper.make_node("ReduceMax", ["a"], ["top"], keepdims=0),
        helper.make_node("Less", ["top", "limit"], ["go_on"]),
    ],
    "body",
    [helper.make_tensor_value_info(n, t, s) for n, t, s in
     [("i", I64, []), ("cond", B, []), ("y_in", F, [2, 8])]],
    [helper.make_tensor_value_info("go_on", B, []),
     helper.make_tensor_value_info("y_out", F, [2, 8])],
)  # fmt: skip
graph = helper.make_graph(
    [helper.make_node("Loop", ["steps", "", "x"], ["y"], body=body, name="refine")],
    "refine",
    [helper.make_tensor_value_info("steps", I64, []), helper.make_tensor_value_info("limit", F, []),
     helper.make_tensor_value_info("x", F, [2, 8])],
    [helper.make_tensor_value_info("y", F, [2, 8])],
    [numpy_helper.from_array(rng.uniform(-0.5, 0.5, (8, 8)).astype(np.float32), "W"),
     numpy_helper.from_array(np.array(2.0, np.float32), "two")],
)  # fmt: skip
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)

module = tensorforge.compile(model)
print("kernels:", [(k.name, k.kind) for k in module.kernels])
session = ort.InferenceSession(model.SerializeToString())
x = rng.standard_normal((2, 8)).astype(np.float32)
for steps, limit in [(0, 100.0), (3, 100.0), (50, 100.0), (50, 6.0)]:
    feeds = {"steps": np.array(steps, np.int64), "limit": np.array(limit, np.float32), "x": x}
    got = module.run(feeds)["y"]
    np.testing.assert_allclose(got, session.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
    print(f"steps={steps:>2} limit={limit:>5}: max |y| = {np.abs(got).max():8.3f}, as onnxruntime")

with tempfile.TemporaryDirectory() as folder:  # saved and loaded like any module
    path = Path(folder) / "refine.tfm"
    module.save(path)
    again = Module.load(path).run(feeds)["y"]
    np.testing.assert_array_equal(again, got)
    print(f"saved and loaded: {path.name}, the same output")
