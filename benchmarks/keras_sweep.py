"""Keras sweep: keras.applications and hand-written Keras models, converted by tf2onnx, compiled
by TensorForge and checked against onnxruntime and against Keras itself.

Each model is built with random weights (`weights=None`, seeded; batch-norm statistics, scales
and offsets randomized so that a wrong normalization shows), at a small input where the
architecture allows it, and converted with `tf2onnx.convert.from_keras` (opset 17; the batch
dimension stays dynamic, `unk__N`, and is bound with `input_shapes`). Export runs in the
exporter's interpreter (`--tf-python`, default `.venv-tf/bin/python`: TensorFlow is never
installed beside TensorForge), which saves the .onnx file, the input and Keras's own output
under build/keras/. With `--slim` each file is also run through onnxslim (as users often do)
and checked as a row of its own. The check, in this interpreter and a child process per file,
compiles the file (`tensorforge.compile(path, input_shapes=...)`), runs it, and compares with
onnxruntime on the same file and with Keras's output (largest error relative to the output's
largest magnitude; top-1 agreement over the rows of a classifier's output), then times both
runtimes at one thread in alternating blocks (`zoo.interleaved_paired`: the median over rounds
of our block's median over theirs). The host is shared: the ratios are a rough indication.

Rows are appended to build/keras/rows.jsonl as they finish; a model already there is skipped
(delete the file to start over).

Usage:
    python benchmarks/keras_sweep.py [--models MobileNetV2,text_rnn] [--slim] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "keras"
ROWS = CACHE / "rows.jsonl"
TEST_DATA = ROOT / "tests" / "data" / "keras"
MATCH_RTOL = 1e-3
EXPORT_LIMIT_S = 300
CHECK_LIMIT_S = 900

# name -> input shape without the batch (keras.applications: their constructor's input_shape)
APPLICATIONS = {
    "MobileNet": (96, 96, 3),
    "MobileNetV2": (96, 96, 3),
    "MobileNetV3Small": (96, 96, 3),
    "MobileNetV3Large": (96, 96, 3),
    "EfficientNetB0": (96, 96, 3),
    "EfficientNetV2B0": (96, 96, 3),
    "ResNet50": (64, 64, 3),
    "ResNet50V2": (64, 64, 3),
    "DenseNet121": (64, 64, 3),
    "InceptionV3": (75, 75, 3),
    "Xception": (71, 71, 3),
    "NASNetMobile": (96, 96, 3),
    "ConvNeXtTiny": (64, 64, 3),
    "InceptionResNetV2": (75, 75, 3),  # (Keras 3 has no RegNet: tf.keras 2 had)
    "VGG16": (32, 32, 3),
}
TINY = ("tiny_mobilenet", "tiny_text", "tiny_transformer", "tiny_decoder", "tiny_mlp")
HAND_WRITTEN = (
    "text_rnn", "decoder", "transformer_block", "mlp", "separable", "depthwise_x2",
    "dense_batchnorm", "resize_crop_pad", "misc_conv", "misc_rnn",
)  # fmt: skip


# ---- export (runs in the exporter's interpreter: TensorFlow, tf2onnx) -------------------------


def _randomize_batch_norm(model: Any, rng: np.random.Generator) -> None:
    """Random moving statistics, scale and offset: Keras's initial ones make every
    BatchNormalization nearly the identity, and the check would not see a wrong one."""
    import keras

    for layer in model._flatten_layers() if hasattr(model, "_flatten_layers") else model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.set_weights(
                [
                    rng.uniform(0.5, 1.5, w.shape).astype(np.float32)
                    if "variance" in v.path or "gamma" in v.path
                    else rng.uniform(-0.2, 0.2, w.shape).astype(np.float32)
                    for v, w in zip(layer.weights, layer.get_weights(), strict=True)
                ]
            )


def _hand_written(name: str) -> Any:
    import keras
    from keras import layers

    if name == "text_rnn":  # Embedding, Conv1D, LSTM, GRU: a small text classifier
        ids = keras.Input((24,), dtype="int32", name="ids")
        x = layers.Embedding(100, 16)(ids)
        x = layers.Conv1D(32, 3, padding="same", activation="relu")(x)
        x = layers.LSTM(24, return_sequences=True)(x)
        x = layers.Bidirectional(layers.GRU(16))(x)
        return keras.Model(ids, layers.Dense(5)(x))
    if name == "decoder":  # Conv2DTranspose and UpSampling2D (nearest, bilinear)
        z = keras.Input((8, 8, 16), name="z")
        x = layers.Conv2DTranspose(32, 3, strides=2, padding="same", activation="relu")(z)
        x = layers.UpSampling2D(2)(x)
        x = layers.Conv2D(16, 3, padding="same", activation="relu")(x)
        x = layers.UpSampling2D(2, interpolation="bilinear")(x)
        x = layers.Conv2DTranspose(8, 4, strides=2, padding="valid")(x)
        return keras.Model(z, layers.Conv2D(3, 1, activation="sigmoid")(x))
    if name == "transformer_block":  # LayerNormalization, MultiHeadAttention, GELU MLP
        t = keras.Input((16, 32), name="tokens")
        h = layers.LayerNormalization()(t)
        x = t + layers.MultiHeadAttention(4, 8)(h, h)
        h = layers.LayerNormalization()(x)
        h = layers.Dense(64)(h)
        h = keras.activations.gelu(h, approximate=True)  # the exact one: Erfc, not converted
        x = x + layers.Dense(32)(h)
        x = layers.GlobalAveragePooling1D()(x)
        return keras.Model(t, layers.Dense(10)(x))
    if name == "mlp":
        v = keras.Input((20,), name="features")
        x = layers.Dense(64, activation="relu")(v)
        x = layers.Dense(32, activation="tanh")(x)
        return keras.Model(v, layers.Dense(4, activation="softmax")(x))
    if name == "separable":
        i = keras.Input((32, 32, 3), name="image")
        x = layers.SeparableConv2D(16, 3, padding="same", activation="relu")(i)
        x = layers.SeparableConv2D(32, 3, strides=2, depth_multiplier=2)(x)
        x = layers.MaxPooling2D()(x)
        x = layers.GlobalMaxPooling2D()(x)
        return keras.Model(i, layers.Dense(10)(x))
    if name == "depthwise_x2":
        i = keras.Input((32, 32, 8), name="image")
        x = layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same", use_bias=True)(i)
        x = layers.ReLU(6.0)(x)
        x = layers.DepthwiseConv2D(3, strides=2, depth_multiplier=2)(x)
        x = layers.AveragePooling2D(2)(x)
        return keras.Model(i, layers.Flatten()(x))
    if name == "dense_batchnorm":
        v = keras.Input((12,), name="features")
        x = layers.Dense(32)(v)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("swish")(x)
        x = layers.Dense(16)(x)
        x = layers.BatchNormalization()(x)
        return keras.Model(v, layers.Dense(3)(layers.LeakyReLU(0.1)(x)))
    if name == "resize_crop_pad":  # tf.image resizing, cropping, padding, permutes, reshapes
        i = keras.Input((20, 24, 4), name="image")
        x = layers.Resizing(30, 36, interpolation="bilinear")(i)
        x = layers.ZeroPadding2D(((1, 2), (3, 0)))(x)
        x = layers.Conv2D(8, 3, activation="hard_silu")(x)
        x = layers.Cropping2D(((2, 1), (0, 3)))(x)
        x = layers.Resizing(16, 16, interpolation="nearest")(x)
        x = layers.Permute((3, 1, 2))(x)
        x = layers.Reshape((8, 256))(x)
        return keras.Model(i, layers.Dense(6)(x))
    if name == "misc_conv":  # dilation, PReLU, ELU, GroupNormalization, bicubic, Concatenate
        i = keras.Input((24, 24, 4), name="image")
        a = layers.Conv2D(8, 3, dilation_rate=2, padding="same")(i)
        a = layers.PReLU(shared_axes=[1, 2])(a)
        b = layers.Conv2D(8, 3, strides=2, padding="same", activation="elu")(i)
        b = layers.Resizing(24, 24, interpolation="bicubic")(b)
        x = layers.Concatenate()([a, b])
        x = layers.GroupNormalization(4)(x)
        x = layers.Conv2D(6, 1, activation="softplus")(x)
        return keras.Model(i, layers.Softmax(axis=-1)(x))
    if name == "misc_rnn":  # bidirectional LSTM, SimpleRNN, TimeDistributed, Conv1DTranspose
        s = keras.Input((10, 6), name="series")
        x = layers.Bidirectional(layers.LSTM(8, return_sequences=True))(s)
        x = layers.SimpleRNN(8, return_sequences=True)(x)
        x = layers.TimeDistributed(layers.Dense(4, activation="tanh"))(x)
        x = layers.Conv1DTranspose(4, 3, strides=2)(x)
        return keras.Model(s, layers.GlobalMaxPooling1D()(x))
    return _tiny(name)


def _tiny(name: str) -> Any:
    """The small models whose tf2onnx files tests/data/keras/ holds (`--test-data`)."""
    import keras
    from keras import layers

    if name == "tiny_mobilenet":  # ZeroPadding + strided conv, unfused depthwise BN, ReLU6, SE
        i = keras.Input((20, 18, 3), name="image")
        x = layers.ZeroPadding2D(((0, 1), (0, 1)))(i)
        x = layers.Conv2D(8, 3, strides=2, use_bias=False)(x)
        x = layers.ReLU(6.0)(layers.BatchNormalization()(x))
        y = layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
        y = layers.Activation("hard_silu")(layers.BatchNormalization()(y))
        s = layers.GlobalAveragePooling2D(keepdims=True)(y)
        s = layers.Conv2D(8, 1, activation="hard_sigmoid")(
            layers.Conv2D(4, 1, activation="relu")(s)
        )
        y = layers.Conv2D(8, 1)(layers.Multiply()([y, s]))
        x = layers.Add()([x, layers.BatchNormalization()(y)])
        x = layers.Conv2D(8, 3, strides=2, padding="same")(x)
        return keras.Model(i, layers.Dense(5)(layers.GlobalAveragePooling2D()(x)))
    if name == "tiny_text":
        ids = keras.Input((12,), dtype="int32", name="ids")
        x = layers.Embedding(100, 8)(ids)
        x = layers.Conv1D(8, 3, padding="causal", activation="relu")(x)
        x = layers.LSTM(8, return_sequences=True)(x)
        return keras.Model(ids, layers.Dense(3)(layers.GRU(6)(x)))
    if name == "tiny_transformer":
        t = keras.Input((6, 16), name="tokens")
        h = layers.LayerNormalization(epsilon=1e-6)(t)
        x = t + layers.MultiHeadAttention(2, 8)(h, h)
        h = keras.activations.gelu(
            layers.Dense(32)(layers.LayerNormalization()(x)), approximate=True
        )
        return keras.Model(t, x + layers.Dense(16)(h))
    if name == "tiny_decoder":
        z = keras.Input((4, 5, 6), name="z")
        x = layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu")(z)
        x = layers.UpSampling2D(2, interpolation="bilinear")(x)
        x = layers.Resizing(10, 12, interpolation="nearest")(x)
        return keras.Model(z, layers.Conv2D(3, 3, padding="same", activation="sigmoid")(x))
    if name == "tiny_mlp":
        v = keras.Input((10,), name="features")
        x = layers.BatchNormalization()(layers.Dense(16)(v))
        x = layers.Dense(8, activation="swish")(layers.LeakyReLU(0.2)(x))
        return keras.Model(v, layers.Softmax()(layers.Dense(4)(x)))
    raise ValueError(
        f"model must be one of {HAND_WRITTEN + TINY} or {tuple(APPLICATIONS)}, not {name!r}"
    )


def build_keras(name: str) -> Any:
    import keras

    keras.utils.set_random_seed(0)
    if name in APPLICATIONS:
        ctor = getattr(keras.applications, name)
        kwargs = {"weights": None, "input_shape": APPLICATIONS[name]}
        kwargs["classifier_activation"] = None  # logits: a softmax of random ones is ~uniform
        model = ctor(**kwargs)
    else:
        model = _hand_written(name)
    _randomize_batch_norm(model, np.random.default_rng(1))
    return model


def _example(model: Any, rng: np.random.Generator, batch: int) -> np.ndarray:
    (inp,) = model.inputs
    shape = (batch, *inp.shape[1:])
    if "int" in str(inp.dtype):
        return rng.integers(0, 100, shape).astype(np.int32)
    return rng.uniform(0, 1, shape).astype(np.float32) * (255 if shape[-1] == 3 else 1)


def export(name: str, path: Path) -> None:
    """Build `name`, convert it with tf2onnx to `path`, save its input and Keras's output."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import tf2onnx

    model = build_keras(name)
    x = _example(model, np.random.default_rng(2), 2 if name in TINY else 1)
    want = np.asarray(model(x, training=False))
    (inp,) = model.inputs
    name_ = inp.name.split(":")[0]
    spec = (tf.TensorSpec((None, *inp.shape[1:]), inp.dtype, name=name_),)
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=17)
    path.write_bytes(proto.SerializeToString())
    np.save(path.with_suffix(".input.npy"), x)
    np.save(path.with_suffix(".keras.npy"), want)


def slim(src: Path, dst: Path) -> None:
    import onnxslim

    onnxslim.slim(str(src), str(dst))


# ---- check (runs in TensorForge's interpreter) ------------------------------------------------


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return float("inf")
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-12))


def check(path: Path, keras_path: Path) -> dict[str, Any]:
    """Compile `path`, compare with onnxruntime and with Keras, time both at one thread."""
    import onnx
    import onnxruntime as ort
    from zoo import interleaved_paired

    import tensorforge
    from tensorforge.runtime.device.cpu import set_num_threads

    x = np.load(keras_path.with_suffix(".input.npy"))
    keras_out = np.load(keras_path.with_suffix(".keras.npy"))
    model = onnx.load(str(path), load_external_data=False)
    (inp,) = [
        i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}
    ]
    feeds = {inp.name: x}
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - tf2onnx can leave TensorFlow ops in the file
        session, refused = None, f"; onnxruntime refuses it too ({_first_line(exc)[:120]})"
    start = time.perf_counter()
    try:
        module = tensorforge.compile(str(path), input_shapes={inp.name: x.shape}, progress=False)
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        return {"error": f"compile: {_first_line(exc)}{refused if session is None else ''}"}
    if session is None:
        return {"error": f"onnxruntime: {refused[2:]}"}
    want = session.run(None, feeds)
    row: dict[str, Any] = {"compile_s": round(time.perf_counter() - start, 1)}
    got = list(module.run(feeds).values())
    row["ort_error"] = max(_rel(g, w) for g, w in zip(got, want, strict=True))
    row["keras_error"] = _rel(got[0], keras_out)
    flat_g, flat_k = got[0].reshape(-1, got[0].shape[-1]), keras_out.reshape(-1, got[0].shape[-1])
    row["top1"] = float(np.mean(flat_g.argmax(-1) == flat_k.argmax(-1)))
    set_num_threads(1)
    start = time.perf_counter()
    session.run(None, feeds)
    repeat = int(min(24, max(4, 3.0 / max(time.perf_counter() - start, 1e-4))))
    tf_ms, ort_ms, ratio = interleaved_paired(
        lambda: module.run(feeds), lambda: session.run(None, feeds), repeat, rounds=4
    )
    row.update(tf_ms=tf_ms, ort_ms=ort_ms, ratio=ratio)
    return row


def _first_line(exc: BaseException) -> str:
    """The error's type and first line (an unsupported-op listing's first op too)."""
    text = str(exc).strip().splitlines()
    listed = f" {text[1].strip()}" if text[0].endswith("unsupported op(s):") else ""
    return f"{type(exc).__name__}: {text[0] if text else ''}{listed}"[:300]


def _child(python: str, args: list[str], limit_s: float) -> dict[str, Any]:
    step = args[0][2:].split("-")[0]
    try:
        done = subprocess.run(
            [python, __file__, *args], capture_output=True, text=True, timeout=limit_s
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{step}: over {limit_s:.0f} s"}
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()] or ["(no output)"]
        errors = [ln for ln in lines if "Error" in ln and ":" in ln and not ln.startswith(" ")]
        return {"error": f"{step} (exit {done.returncode}): {(errors or lines)[-1][:300]}"}
    return json.loads(done.stdout.strip().splitlines()[-1]) if args[0] == "--check" else {}


def run(name: str, variant: str, tf_python: str) -> dict[str, Any]:
    path = CACHE / f"{name}.onnx"
    row: dict[str, Any] = {"model": name, "variant": variant}
    if not path.exists():
        print(f"[keras] {name}: exporting", file=sys.stderr, flush=True)
        row.update(_child(tf_python, ["--export", name, str(path)], EXPORT_LIMIT_S))
        if "error" in row:
            return row
    checked = path
    if variant == "slim":
        checked = CACHE / f"{name}.slim.onnx"
        if not checked.exists():
            row.update(_child(tf_python, ["--slim-file", str(path), str(checked)], EXPORT_LIMIT_S))
            if "error" in row:
                return row
    print(f"[keras] {name} ({variant}): compiling and checking", file=sys.stderr, flush=True)
    row.update(_child(sys.executable, ["--check", str(checked), str(path)], CHECK_LIMIT_S))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | file | rel. error vs ORT | vs Keras | top-1 vs Keras | compile s | "
             "TF/ORT (1 thread) | result |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['variant']} | | | | | | {r['error']} |")
            continue
        ok = r["ort_error"] <= MATCH_RTOL and r["keras_error"] <= MATCH_RTOL
        lines.append(
            f"| {r['model']} | {r['variant']} | {r['ort_error']:.1e} | {r['keras_error']:.1e} | "
            f"{r['top1']:.0%} | {r['compile_s']} | {r['ratio']:.2f}x | "
            f"{'matches' if ok else 'MISMATCH'} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--slim", action="store_true", help="also check onnxslim's output")
    parser.add_argument("--markdown", action="store_true", help="print the saved rows' table")
    parser.add_argument("--test-data", action="store_true", help=f"export {TINY} to {TEST_DATA}")
    parser.add_argument("--tf-python", default=str(ROOT / ".venv-tf" / "bin" / "python"))
    parser.add_argument("--export", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--slim-file", nargs=2, dest="slim_file", help=argparse.SUPPRESS)
    parser.add_argument("--check", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export:
        export(args.export[0], Path(args.export[1]))
        return 0
    if args.slim_file:
        slim(Path(args.slim_file[0]), Path(args.slim_file[1]))
        return 0
    if args.check:
        print(json.dumps(check(Path(args.check[0]), Path(args.check[1]))))
        return 0
    if args.test_data:
        for name in TINY:
            path = TEST_DATA / f"{name}.onnx"
            print(name, _child(args.tf_python, ["--export", name, str(path)], EXPORT_LIMIT_S))
        return 0
    saved = [json.loads(ln) for ln in ROWS.read_text().splitlines()] if ROWS.exists() else []
    if args.markdown:
        print(table(saved))
        return 0
    names = args.models.split(",") if args.models else [*APPLICATIONS, *HAND_WRITTEN]
    CACHE.mkdir(parents=True, exist_ok=True)
    done = {(r["model"], r["variant"]) for r in saved}
    rows = []
    for name in names:
        for variant in ("tf2onnx", "slim") if args.slim else ("tf2onnx",):
            if (name, variant) in done:
                continue
            rows.append(run(name, variant, args.tf_python))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
            with ROWS.open("a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
    print(table(rows))
    return 1 if any("error" in r or max(r["ort_error"], r["keras_error"]) > MATCH_RTOL
                    for r in rows) else 0  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
