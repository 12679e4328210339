"""A GRU followed by an einsum attention-style projection, built as ONNX, compiled for this CPU
(both are composite ops the compiler rewrites into MatMuls and element-wise kernels) and checked
against onnxruntime."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import tensorforge

SEQ, BATCH, INPUT, HIDDEN = 6, 2, 8, 16
rng = np.random.default_rng(0)
weights = {
    "W": rng.uniform(-0.4, 0.4, (1, 3 * HIDDEN, INPUT)),
    "R": rng.uniform(-0.4, 0.4, (1, 3 * HIDDEN, HIDDEN)),
    "B": rng.uniform(-0.2, 0.2, (1, 6 * HIDDEN)),
    "P": rng.uniform(-0.5, 0.5, (HIDDEN, 4)),
}
nodes = [
    helper.make_node(
        "GRU", ["x", "W", "R", "B"], ["y", "y_h"], hidden_size=HIDDEN, linear_before_reset=1
    ),  # fmt: skip
    # y: [seq, directions, batch, hidden] -> per (seq, batch) a projection to 4 scores
    helper.make_node("Einsum", ["y", "P"], ["scores"], equation="sdbh,hk->bsk"),
    helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
]
graph = helper.make_graph(
    nodes, "gru_einsum",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, (SEQ, BATCH, INPUT))],
    [helper.make_tensor_value_info("probs", TensorProto.FLOAT, None)],
    [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
)  # fmt: skip
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)

module = tensorforge.compile(model, progress=False)
x = rng.standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)
got = module.run({"x": x})["probs"]
want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
print(f"GRU + Einsum: {len(module.calls)} kernels, output {got.shape} matches onnxruntime")
