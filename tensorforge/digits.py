"""The main job: the digits CNN quantized to int8 and run with its layers on the accelerator.

``run_digits_demo`` imports the shipped ONNX model (tensorforge/data/digits_cnn.onnx, trained by
scripts/train_digits.py on scikit-learn's digits), optimizes it, calibrates and quantizes it to
int8 with the accelerator's arithmetic, partitions it for the HWConfig, compiles every offloaded
conv/dense layer (with the max pooling it feeds) to a program image and the rest to native CPU
code (``tensorforge.compile(..., target="vta ...")``), runs the test split with the accelerator
layers on a simulator device, and prints float vs int8 accuracy, where each layer ran and the
accelerator's counters.
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Any

import numpy as np

from .hw.config import HWConfig

MODEL = "digits_cnn.onnx"
TEST_SPLIT = "digits_test.npz"


def load_digits_assets() -> tuple[Any, dict[str, np.ndarray]]:
    """The shipped model's path and the test split (images, labels, calib_images)."""
    data = resources.files("tensorforge") / "data"
    with np.load(data / TEST_SPLIT) as npz:
        split = {k: npz[k] for k in npz.files}
    return data / MODEL, split


def run_digits_demo(
    config: str = "pynq",
    backend: str = "sim",
    images: int | None = None,
    vthreads: int = 2,
    mode: str | None = None,
    trace: str | None = None,
) -> dict[str, float]:
    """Compile the digits CNN for the accelerator, run the test split, print a report.

    Args:
        config: the HWConfig (a preset name or a JSON file).
        backend: the accelerator device ("sim", "cyclesim" or "rtl").
        images: how many test images (default all 450).
        vthreads: virtual threads of the accelerator kernels.
        mode: requantization, "shift" (VTA-compatible) or "mul" (needs alu_mul); default:
            the config's most accurate (``compiler.quantize.default_mode``).
        trace: write the accelerator layers' Chrome trace there (needs "cyclesim").

    Returns:
        {"float": accuracy, "int8": accuracy}.
    """
    from . import api
    from .compiler.frontend import from_onnx
    from .compiler.graph import run_graph
    from .compiler.graph.passes import optimize

    cfg = HWConfig.load(config)
    model, split = load_digits_assets()
    x, labels = split["images"], split["labels"]
    if images is not None:
        x, labels = x[:images], labels[:images]
    t0 = time.perf_counter()
    graph = optimize(from_onnx(str(model), input_shapes={"input": x.shape}))
    float_logits = run_graph(graph, {"input": x})[graph.outputs[0]]
    target = f"vta -config={config} -device={backend} -vthreads={vthreads}"
    target += f" -mode={mode}" if mode else ""
    module = api.compile(graph, target, calibration={"input": split["calib_images"]})
    logits = module.run({"input": x})[module.outputs[0]]
    wall = time.perf_counter() - t0
    acc = {
        "float": float(np.mean(np.argmax(float_logits, 1) == labels)),
        "int8": float(np.mean(np.argmax(logits, 1) == labels)),
    }
    _print_report(cfg, backend, module, acc, len(labels), wall)
    if trace:
        module.write_trace(trace)
        print(f"  trace written to {trace} (open it in https://ui.perfetto.dev)")
    return acc


def _print_report(cfg: HWConfig, backend: str, module: Any, acc: dict, n: int, wall: float):
    from .report import device_table, placement_table

    print(f"TensorForge main job: digits CNN ({MODEL}), {n} test images")
    print(f"  HWConfig {cfg.name!r} ({cfg.bitstream_name}), accelerator device {backend}")
    print(f"  float accuracy {acc['float']:.2%}   int8 accuracy {acc['int8']:.2%}")
    print("\n".join("  " + line for line in placement_table(module).splitlines()))
    print(f"  one run over the whole batch of {n} images (counts are totals for all of them):")
    table = device_table(module.device_results(), cfg.clock_mhz)
    print("\n".join("  " + line for line in table.splitlines()))
    print(f"  compiled and ran in {wall:.1f} s")
