"""A tiny detector, built as ONNX: a convolutional head scores a grid of boxes, then keeps the
boxes that pass a score threshold and that NonMaxSuppression keeps. How many boxes survive is
known only at run time, so this part cannot be a static graph.

`tensorforge.compile` compiles the head for this CPU and runs the box selection after it, each
run, as the module's data-dependent tail (docs/compile.md, "Data-dependent shapes"); a
torchvision detector (SSDlite, Faster R-CNN, RetinaNet, FCOS) exported to ONNX compiles the
same way (benchmarks/detectors.py). Checked against onnxruntime.
"""

import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.runtime.module import Module

F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(0)
GRID = 8  # an 8x8 grid of cells, one box per cell, 32x32 pixels each
cells = np.stack(np.meshgrid(np.arange(GRID), np.arange(GRID), indexing="ij"), -1).reshape(-1, 2)
anchors = np.concatenate([cells * 32, cells * 32 + 48], axis=1).astype(np.float32)  # y1 x1 y2 x2

nodes = [
    # the head: a feature conv, then per cell one score and four box offsets
    helper.make_node("Conv", ["image", "w1"], ["f"], pads=[1, 1, 1, 1], strides=[2, 2]),
    helper.make_node("Relu", ["f"], ["fr"]),
    helper.make_node("Conv", ["fr", "w2"], ["head"], strides=[2, 2]),  # [1, 5, 8, 8]
    helper.make_node("Reshape", ["head", "flat"], ["hf"]),  # [5, 64]
    helper.make_node("Split", ["hf", "split"], ["logit", "offsets"], axis=0),
    helper.make_node("Sigmoid", ["logit"], ["score"]),  # [1, 64]
    helper.make_node("Transpose", ["offsets"], ["ot"], perm=[1, 0]),  # [64, 4]
    helper.make_node("Mul", ["ot", "step"], ["shift"]),
    helper.make_node("Add", ["anchors", "shift"], ["boxes"]),  # [64, 4]
    # the box selection: shapes decided by the data
    helper.make_node("Unsqueeze", ["boxes", "zero"], ["b3"]),
    helper.make_node("Unsqueeze", ["score", "zero"], ["s3"]),
    helper.make_node(
        "NonMaxSuppression", ["b3", "s3", "max_boxes", "iou", "threshold"], ["selected"]
    ),  # fmt: skip
    helper.make_node("Gather", ["selected", "two"], ["index"], axis=1),
    helper.make_node("Gather", ["boxes", "index"], ["kept_boxes"], axis=0),
    helper.make_node("Squeeze", ["score", "zero"], ["s1"]),
    helper.make_node("Gather", ["s1", "index"], ["kept_scores"], axis=0),
]
weights = {
    "w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) / 4,
    "w2": rng.standard_normal((5, 8, 2, 2)).astype(np.float32) / 4,
    "flat": np.array([5, -1], np.int64),
    "split": np.array([1, 4], np.int64),
    "step": np.float32(8.0),
    "anchors": anchors,
    "zero": np.array([0], np.int64),
    "max_boxes": np.array([100], np.int64),
    "iou": np.array([0.15], np.float32),
    "threshold": np.array([0.5], np.float32),
    "two": np.array(2, np.int64),
}
graph = helper.make_graph(
    nodes,
    "tiny_detector",
    [helper.make_tensor_value_info("image", F, [1, 3, 32, 32])],
    [helper.make_tensor_value_info("kept_boxes", F, None),
     helper.make_tensor_value_info("kept_scores", F, None),
     helper.make_tensor_value_info("score", F, [1, 64])],
    [numpy_helper.from_array(np.asarray(v), k) for k, v in weights.items()],
)  # fmt: skip
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)

module = tensorforge.compile(model)
print("compiled kernels:", len(module.kernels), "| compiled part gives:", ", ".join(module.outputs))
print("run after it, each run:", len(module.tail.inputs), "values in ->", ", ".join(
    n for n in module.model_outputs if n not in module.outputs))  # fmt: skip
session = ort.InferenceSession(model.SerializeToString())
for seed in range(3):
    image = np.random.default_rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = module.run({"image": image})
    want = dict(
        zip(
            ["kept_boxes", "kept_scores", "score"], session.run(None, {"image": image}), strict=True
        )
    )
    for name, value in got.items():
        assert value.shape == want[name].shape, (name, value.shape, want[name].shape)
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-4)
    print(f"image {seed}: {len(got['kept_boxes'])} boxes kept of 64, as onnxruntime keeps")

with tempfile.TemporaryDirectory() as folder:  # saved and loaded like any module
    path = Path(folder) / "detector.tfm"
    module.save(path)
    loaded = Module.load(path)
    image = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    assert np.array_equal(loaded.run({"image": image})["kept_boxes"],
                          module.run({"image": image})["kept_boxes"])  # fmt: skip
    print(f"saved and loaded {path.name} ({path.stat().st_size} bytes): same boxes")
