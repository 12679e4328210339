"""Two builds of the compiler side by side: their saved modules and onnxruntime timed in rotation.

Where torch is not installed, benchmarks/zoo.py cannot export its torchvision models; this
script stands in with the builder models of compiler/frontend/onnx_builders.py (ResNet-18,
MobileNetV2, EfficientNet-B0 at 224x224, batch 1), their batch norms calibrated as zoo.py
calibrates torchvision's: each one's mean and variance set from the activations it sees on a
random input (onnxruntime, repeated until they settle), so that activations have the scale of a
trained network (uncalibrated, EfficientNet-B0's overflow to inf). Two steps:

    python benchmarks/ab_modules.py --save DIR [--models ...]
        compile each model with the TensorForge of the running Python (a checkout's .venv) and
        save DIR/<model>.tfm; the calibrated ONNX files are cached in build/ab/.
    python benchmarks/ab_modules.py --compare DIR1,DIR2 [--rounds 16] [--threads 1]
        load each DIR's modules into this process and time them and onnxruntime in rotation
        (`zoo.interleaved_ms`'s blocks: 100 ms of warm-up calls, then 5 timed calls, the order
        rotated every round), checking each module's output against onnxruntime's; prints the
        medians, each build's ratio to onnxruntime and DIR2's to DIR1's.

On a machine shared with other jobs only the ratios of one run count (all three runtimes are
slowed alike); repeat the run and quote each."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from machine import describe

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "ab"
MODELS = ("resnet18", "mobilenet_v2", "efficientnet_b0")
WARM_UP_S = 0.1
PER_BLOCK = 5


def calibrate_batch_norms(model: Any, inputs: dict[str, np.ndarray], rounds: int = 60) -> Any:
    """`model` with every BatchNormalization's mean and variance set from its input on
    `inputs` (per channel), recomputed until no statistic moves (each pass settles at least the
    next batch norm in depth)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    inits = {t.name: i for i, t in enumerate(probe.graph.initializer)}
    norms = [n for n in probe.graph.node if n.op_type == "BatchNormalization"]
    keep = len(probe.graph.output)
    for n in norms:
        probe.graph.output.append(helper.make_tensor_value_info(n.input[0], 1, None))
    for _ in range(rounds):
        sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        with np.errstate(over="ignore", invalid="ignore"):
            seen = sess.run([n.input[0] for n in norms], inputs)
            moved = False
            for n, value in zip(norms, seen, strict=True):
                stats = (value.mean(axis=(0, 2, 3)), value.var(axis=(0, 2, 3)) + 1e-5)
                for name, stat in zip(n.input[3:5], stats, strict=True):
                    tensor = probe.graph.initializer[inits[name]]
                    old = numpy_helper.to_array(tensor)
                    moved |= not np.allclose(old, stat, rtol=1e-3, atol=1e-6)
                    tensor.CopyFrom(numpy_helper.from_array(stat.astype(np.float32), name))
        if not moved:
            break
    del probe.graph.output[keep:]
    return probe


def model_path(name: str) -> Path:
    """The calibrated ONNX file of builder model `name` (built and cached on first use)."""
    import onnx

    from tensorforge.compiler.frontend import onnx_builders

    path = CACHE / f"{name}.onnx"
    if not path.exists():
        model = getattr(onnx_builders, name)()
        model = calibrate_batch_norms(model, inputs_of(model, seed=1))
        CACHE.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(path))
    return path


def inputs_of(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    value = model.graph.input[0]
    shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
    return {value.name: rng.standard_normal(shape).astype(np.float32)}


def save(folder: Path, names: list[str]) -> None:
    import tensorforge

    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        start = time.perf_counter()
        tensorforge.compile(str(model_path(name))).save(folder / f"{name}.tfm")
        print(f"{name}: compiled in {time.perf_counter() - start:.1f} s", flush=True)


def rotate(fns: dict[str, Any], rounds: int) -> dict[str, float]:
    """Median ms of each function, timed in blocks rotated among them (the order reversed every
    other round)."""
    keys, times = list(fns), {k: [] for k in fns}
    for r in range(rounds):
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        for key in order[::-1] if r % 2 else order:
            fn, start = fns[key], time.perf_counter()
            fn()
            while time.perf_counter() - start < WARM_UP_S:
                fn()
            for _ in range(PER_BLOCK):
                start = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - start)
    return {k: float(np.median(v) * 1e3) for k, v in times.items()}


def compare(folders: list[Path], names: list[str], rounds: int, threads: int) -> None:
    import onnx
    import onnxruntime as ort

    import tensorforge
    from tensorforge.runtime.device.cpu import set_num_threads

    set_num_threads(threads)
    print(f"machine: {describe()}; threads {threads}; builds: {', '.join(map(str, folders))}")
    for name in names:
        path = model_path(name)
        inputs = inputs_of(onnx.load(str(path)))
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        want = sess.run(None, inputs)[0]
        fns = {"ort": lambda s=sess, x=inputs: s.run(None, x)}
        for folder in folders:
            module = tensorforge.Module.load(folder / f"{name}.tfm")
            got = next(iter(module.run(inputs).values()))
            err = float(np.abs(got - want).max() / np.abs(want).max())
            if err > 1e-3:
                raise SystemExit(f"{name}: {folder} differs from onnxruntime by {err:.1e}")
            fns[str(folder)] = lambda m=module, x=inputs: m.run(x)
        ms = rotate(fns, rounds)
        cells = [f"{ms[str(f)]:8.3f} {ms[str(f)] / ms['ort']:.3f}x" for f in folders]
        last = (
            f" | 2nd/1st {ms[str(folders[1])] / ms[str(folders[0])]:.3f}"
            if len(folders) > 1
            else ""
        )
        print(f"{name:<16} load {os.getloadavg()[0]:4.1f}  ORT {ms['ort']:8.3f} | "
              f"{' | '.join(cells)}{last}", flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--save", metavar="DIR", help="compile and save the modules to DIR")
    parser.add_argument("--compare", metavar="DIR1,DIR2", help="time saved modules against ORT")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    names = args.models.split(",")
    if args.save:
        save(Path(args.save), names)
    if args.compare:
        compare([Path(f) for f in args.compare.split(",")], names, args.rounds, args.threads)
    if not (args.save or args.compare):
        parser.error("give --save DIR or --compare DIR1,DIR2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
