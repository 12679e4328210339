"""The main job: the digits CNN quantized to int8 and run with its layers on the accelerator.

``run_digits_demo`` imports the shipped ONNX model (tensorforge/data/digits_cnn.onnx, trained by
scripts/train_digits.py on scikit-learn's digits), optimizes it, calibrates and quantizes it to
int8 with the accelerator's arithmetic, partitions it for the HWConfig, compiles every offloaded
conv/dense layer to a program image, runs the test split with those layers on a simulator
backend and the rest on the graph's reference kernels, and prints float vs int8 accuracy, where
each layer ran and the accelerator's counters.
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
    config: str | HWConfig = "pynq",
    backend: str = "sim",
    images: int | None = None,
    vthreads: int = 2,
    mode: str = "shift",
) -> dict[str, float]:
    """Compile the digits CNN for the accelerator, run the test split, print a report.

    Args:
        config: the HWConfig (preset name, JSON path or object).
        backend: the device backend of the offloaded layers ("sim" or "cyclesim").
        images: how many test images (default all 450).
        vthreads: virtual threads of the compiled kernels.
        mode: requantization, "shift" (VTA-compatible) or "mul" (needs alu_mul).

    Returns:
        {"float": accuracy, "int8": accuracy}.
    """
    from .compiler.frontend import from_onnx
    from .compiler.graph import run_graph
    from .compiler.graph.offload import OffloadRunner
    from .compiler.graph.passes import optimize, partition_graph, partition_report
    from .compiler.quantize.graph import quantize_graph

    cfg = HWConfig.load(config)
    model, split = load_digits_assets()
    x, labels = split["images"], split["labels"]
    if images is not None:
        x, labels = x[:images], labels[:images]
    t0 = time.perf_counter()
    graph = optimize(from_onnx(str(model), input_shapes={"input": x.shape}))
    float_logits = run_graph(graph, {"input": x})[graph.outputs[0]]
    quantized = quantize_graph(graph, {"input": split["calib_images"]}, cfg, mode=mode)
    q = partition_graph(quantized, cfg)
    runner = OffloadRunner(q, cfg, backend=backend, vthreads=vthreads)
    outputs, layers = runner.run({"input": x})
    wall = time.perf_counter() - t0
    acc = {
        "float": float(np.mean(np.argmax(float_logits, 1) == labels)),
        "int8": float(np.mean(np.argmax(outputs[q.outputs[0]], 1) == labels)),
    }
    _print_report(cfg, backend, q, layers, acc, len(labels), wall, partition_report(q, cfg))
    return acc


def _print_report(cfg, backend, graph, layers, acc, n, wall, partition) -> None:
    print(f"TensorForge main job: digits CNN ({MODEL}), {n} test images")
    print(f"  HWConfig {cfg.name!r} ({cfg.bitstream_name}), offloaded layers on backend {backend}")
    print(f"  float accuracy {acc['float']:.2%}   int8 accuracy {acc['int8']:.2%}")
    print("\n".join("  " + line for line in partition.splitlines()))
    offloaded = [layer for layer in layers if layer.runs_on == "vta"]
    print(f"  {'accelerator layer':<18}{'op':<12}{'GEMM ops':>12}{'ALU ops':>10}"
          f"{'DRAM bytes':>12}{'cycles':>12}")  # fmt: skip
    for layer in offloaded:
        c = layer.counters
        cycles = f"{layer.cycles:,}" if layer.cycles is not None else "-"
        print(f"  {layer.name:<18}{layer.op:<12}{c.get('gemm_counter', 0):>12,}"
              f"{c.get('alu_counter', 0):>10,}{_dram_bytes(c):>12,}{cycles:>12}")  # fmt: skip
    total = {
        "instructions": sum(layer.counters.get("insn_count", 0) for layer in offloaded),
        "GEMM ops": sum(layer.counters.get("gemm_counter", 0) for layer in offloaded),
        "ALU ops": sum(layer.counters.get("alu_counter", 0) for layer in offloaded),
        "DRAM bytes": sum(_dram_bytes(layer.counters) for layer in offloaded),
    }
    line = ", ".join(f"{k} {v:,}" for k, v in total.items())
    if offloaded and all(layer.cycles is not None for layer in offloaded):
        cycles = sum(layer.cycles for layer in offloaded)
        line += (
            f", {cycles:,} cycles = {cycles / cfg.clock_mhz / 1e3:.2f} ms at {cfg.clock_mhz:g} MHz"
        )
    print(f"  accelerator total: {line}")
    cpu = [layer.name for layer in layers if layer.runs_on == "cpu"]
    print(f"  on the CPU (graph reference kernels): {', '.join(cpu)}")
    waiting = [layer.name for layer in layers if layer.waiting_for_kernel]
    if waiting:
        print(f"  placed on the accelerator but run on the CPU until the code generator has "
              f"their kernels: {', '.join(waiting)}")  # fmt: skip
    print(f"  compiled and ran in {wall:.1f} s")


def _dram_bytes(counters: dict[str, int]) -> int:
    """Bytes the layer's DMA moved (the functional simulator's *_nbytes counters)."""
    return sum(v for k, v in counters.items() if k.endswith("_nbytes"))
