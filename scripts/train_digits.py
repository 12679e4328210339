"""Train the digits CNN (the main job's model) and write its ONNX file and test split.

The model is a small CNN on scikit-learn's bundled digits data set (1797 8x8 grey images,
10 classes)::

    conv3x3(1->16, pad 1) relu -> conv3x3(16->32, pad 1) relu -> maxpool 2x2
    -> conv3x3(32->32, pad 1) relu -> flatten (512) -> dense 512->10 (logits)

Channel counts after the first conv are multiples of 16 so that they tile onto a 16x16 GEMM
core; the first conv (1 input channel) is meant for the CPU. Inputs are ``pixels / 16`` as
float32 NCHW. The split and the training are fixed by ``--seed``.

Outputs (in ``--out``, default ``tensorforge/data``):
    digits_cnn.onnx: opset 17, IR version 8, written with ``onnx.helper`` from the trained
        weights (no dependency on torch's ONNX exporter).
    digits_test.npz: ``images`` (N x 1 x 8 x 8 float32), ``labels`` (int64), and
        ``calib_images`` (a calibration subset of the train split, float32).

Needs torch and scikit-learn, which the library itself does not::

    pip install torch scikit-learn     # or: pip install "tensorforge[torch]" scikit-learn

Run from the repository root::

    python scripts/train_digits.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tensorforge" / "data"
TEST_FRACTION = 0.25
CALIB_COUNT = 128


def _require():
    """Import torch and scikit-learn, or exit with the command that installs them."""
    try:
        import sklearn.datasets  # noqa: F401
        import sklearn.model_selection  # noqa: F401
        import torch
    except ModuleNotFoundError as err:
        sys.exit(
            f"train_digits.py needs torch and scikit-learn ({err}); install them with:\n"
            "    pip install torch scikit-learn"
        )
    return torch


def load_split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits data as (x_train, y_train, x_test, y_test), x float32 N x 1 x 8 x 8 in [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=seed, stratify=y
    )
    return x_tr, y_tr, x_te, y_te


def build_model(torch):
    """The CNN as a torch.nn.Sequential (layer order matches the ONNX graph)."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 10),
    )


def train(torch, model, x: np.ndarray, y: np.ndarray, epochs: int, seed: int) -> None:
    """Adam on cross-entropy, mini-batches of 64, shuffled by a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(len(xt), generator=gen)
        total = 0.0
        for start in range(0, len(xt), 64):
            idx = order[start : start + 64]
            opt.zero_grad()
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        if epoch % 10 == 9 or epoch == epochs - 1:
            print(f"epoch {epoch + 1:3d}: loss {total / len(xt):.4f}")
    model.eval()


def to_onnx(model) -> bytes:
    """Write the trained Sequential as an ONNX model (opset 17, IR version 8)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    conv1, _, conv2, _, _, conv3, _, _, dense = model
    inits = []

    def weight(name: str, tensor) -> str:
        inits.append(numpy_helper.from_array(tensor.detach().numpy().astype(np.float32), name))
        return name

    def conv(i: int, layer, src: str) -> list:
        w, b = weight(f"conv{i}.weight", layer.weight), weight(f"conv{i}.bias", layer.bias)
        return [
            helper.make_node(
                "Conv", [src, w, b], [f"conv{i}"], name=f"conv{i}",
                kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1],
            ),
            helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"], name=f"relu{i}"),
        ]  # fmt: skip

    nodes = conv(1, conv1, "input") + conv(2, conv2, "relu1")
    nodes.append(
        helper.make_node("MaxPool", ["relu2"], ["pool"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2])
    )  # fmt: skip
    nodes += conv(3, conv3, "pool")
    nodes.append(helper.make_node("Flatten", ["relu3"], ["flat"], name="flatten", axis=1))
    dw, db = weight("dense.weight", dense.weight), weight("dense.bias", dense.bias)
    nodes.append(helper.make_node("Gemm", ["flat", dw, db], ["logits"], name="dense", transB=1))
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=inits,
    )
    onnx_model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tensorforge"
    )
    onnx_model.ir_version = 8
    onnx.checker.check_model(onnx_model)
    return onnx_model.SerializeToString()


def onnx_accuracy(model_bytes: bytes, x: np.ndarray, y: np.ndarray) -> float:
    """Test accuracy of the written ONNX model under onnxruntime."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    logits = sess.run(None, {"input": x})[0]
    return float(np.mean(np.argmax(logits, axis=1) == y))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch = _require()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    x_tr, y_tr, x_te, y_te = load_split(args.seed)
    model = build_model(torch)
    train(torch, model, x_tr, y_tr, args.epochs, args.seed)
    with torch.no_grad():
        torch_acc = float((model(torch.from_numpy(x_te)).argmax(1).numpy() == y_te).mean())
    model_bytes = to_onnx(model)
    acc = onnx_accuracy(model_bytes, x_te, y_te)
    if abs(acc - torch_acc) > 1e-9:
        sys.exit(f"ONNX accuracy {acc:.4f} must equal torch accuracy {torch_acc:.4f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "digits_cnn.onnx").write_bytes(model_bytes)
    calib = np.random.default_rng(args.seed).permutation(len(x_tr))[:CALIB_COUNT]
    np.savez_compressed(
        args.out / "digits_test.npz", images=x_te, labels=y_te, calib_images=x_tr[calib]
    )
    print(f"train {len(x_tr)}, test {len(x_te)}, calibration {CALIB_COUNT} images")
    print(f"float test accuracy: {acc:.4f} ({int(round(acc * len(y_te)))}/{len(y_te)})")
    print(f"wrote {args.out / 'digits_cnn.onnx'} and {args.out / 'digits_test.npz'}")


if __name__ == "__main__":
    main()
