"""GatherND as torch exports advanced indexing (each sequence's last token, per-batch picks),
compiled with run-time indices, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

import tensorforge


def _model(data: tuple, indices: tuple, batch_dims: int):  # noqa: ANN202
    graph = oh.make_graph(
        [oh.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)],
        "gather_nd",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, data),
            oh.make_tensor_value_info("i", TensorProto.INT64, indices),
        ],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "data,indices,batch_dims",
    [((4, 7, 16), (4, 2), 0), ((2, 5, 6, 3), (2, 4, 2), 1), ((3, 4, 5), (2, 3, 3), 0)],
    ids=["last_tokens", "per_batch", "scalars"],
)
def test_gather_nd_with_run_time_indices(data: tuple, indices: tuple, batch_dims: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(data).astype(np.float32)
    dims = np.array(data[batch_dims : batch_dims + indices[-1]])
    i = rng.integers(-dims, dims, indices).astype(np.int64)  # negative ones count from the end
    model = _model(data, indices, batch_dims)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "i": i})
    got = tensorforge.compile(model).run({"x": x, "i": i})["y"]
    np.testing.assert_array_equal(got, want)


_OUT_OF_RANGE = """
import json, sys
import numpy as np
from onnx import TensorProto, helper as oh
import tensorforge
op, index = sys.argv[1], int(sys.argv[2])
x = np.arange(12, dtype=np.float32).reshape(3, 4)
if op == "Gather":
    i, attrs = np.array([[0, index], [2, -1]], np.int64), {"axis": 0}
elif op == "GatherElements":
    i, attrs = np.array([[0, index, 1, 3]] * 3, np.int64), {"axis": 1}
else:
    i, attrs = np.array([[0, 1], [index, 2]], np.int64), {}
graph = oh.make_graph(
    [oh.make_node(op, ["x", "i"], ["y"], **attrs)], "oob",
    [oh.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
     oh.make_tensor_value_info("i", TensorProto.INT64, i.shape)],
    [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)])
model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
module = tensorforge.compile(model)
print(json.dumps(module.run({"x": x, "i": i % 3})["y"].tolist()))  # in range: computed
try:
    module.run({"x": x, "i": i})
except IndexError as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
"""


@pytest.mark.parametrize("index", [10**9, -(10**9), 2**32 + 1])
@pytest.mark.parametrize("op", ["Gather", "GatherElements", "GatherND"])
def test_run_time_indices_out_of_range_raise_and_never_read_outside_the_data(op, index) -> None:
    """An index outside [-n, n) is an error for onnxruntime, and the run raises
    `CheckFailed` naming the node and the range (`runtime.checks`); the kernels themselves
    clamp it into its axis, so they never read past the data on the way (an index of 10**9
    read far outside it and crashed the process; 2**32 + 1 wrapped to 1). The same module
    then computes in-range indices exactly. In a child process, so a crash is a failure."""
    import json
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _OUT_OF_RANGE, op, str(index)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    got = np.array(json.loads(lines[-2]), np.float32)
    kind, message = json.loads(lines[-1])
    assert kind == "CheckFailed"
    assert f"{op} node" in message and "input 'i' holds an index outside" in message
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    if op == "Gather":
        want = x[np.array([[0, index], [2, -1]]) % 3]
    elif op == "GatherElements":
        want = np.take_along_axis(x, np.array([[0, index, 1, 3]] * 3) % 3, axis=1)
    else:
        i = np.array([[0, 1], [index, 2]]) % 3
        want = x[i[:, 0], i[:, 1]]
    np.testing.assert_array_equal(got, want)
