"""Whole models on the accelerator (cycle-accurate model) next to the same models on the CPU.

For each model, batch 1: `tensorforge.compile(model, target="vta -config=... -vthreads=N")`,
one run on the `cyclesim` device. Printed per model and virtual-thread count: accelerator
kernels, the share of conv/dense MACs they run, the accelerator's cycles summed over its layers
and that time at the config's clock, the achieved GOPS and MAC utilization over those cycles,
the host CPU's share (the native int8/float kernels between accelerator calls, median ms), and
in the same run the float model on this CPU: TensorForge (`target="llvm"`) and onnxruntime.
The accelerator numbers are the timing model's predictions (its DRAM latencies are assumptions,
docs/simulators.md), not measurements on a board; they are deterministic.

Models: the shipped digits CNN (8x8 images), ResNet-18 (fixed random weights, 224x224 by
default; calibrated on 4 random images), and any model of benchmarks/zoo.py (exported by torch
into build/zoo/ on first use, calibrated on 2 random images), e.g. mobilenet_v2,
efficientnet_b0, regnet_y_400mf. ``--depthwise accel,cpu`` compiles each model both ways (the
vta target's -depthwise option: grouped and depthwise convs on the accelerator or float on the
CPU).

Usage:
    python benchmarks/vta_models.py [--models digits,resnet18,mobilenet_v2] [--size 224]
                                    [--config pynq] [--vthreads 1,2] [--depthwise accel]
                                    [--repeat 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
from machine import describe, median_ms

MODELS = ("digits", "resnet18")


def _model(name: str, size: int) -> tuple[Any, dict[str, np.ndarray], Any]:
    """(ONNX model, one input batch of batch size 1, calibration batches)."""
    import onnx

    rng = np.random.default_rng(0)
    if name == "digits":
        from tensorforge.digits import load_digits_assets

        path, split = load_digits_assets()
        model = onnx.load(str(path))
        dims = model.graph.input[0].type.tensor_type.shape.dim
        dims[0].dim_value = 1  # the batch dimension is symbolic in the shipped file
        return model, {"input": split["images"][:1]}, {"input": split["calib_images"]}
    if name == "resnet18":
        from tensorforge.compiler.frontend.onnx_builders import resnet18

        def image() -> np.ndarray:
            return rng.standard_normal((1, 3, size, size)).astype(np.float32)

        return resnet18(size), {"x": image()}, [{"x": image()} for _ in range(4)]
    import zoo

    if name in zoo.MODELS:
        model = onnx.load(str(zoo.ensure_exported(name)))
        side, x = zoo.MODELS[name][1], model.graph.input[0].name

        def sample() -> dict[str, np.ndarray]:
            return {x: rng.standard_normal((1, 3, side, side)).astype(np.float32)}

        return model, sample(), [sample() for _ in range(2)]
    raise ValueError(f"model must be one of {', '.join(MODELS)} or a zoo model, not {name!r}")


def _cpu_peers(model: Any, inputs: dict, repeat: int) -> dict[str, float]:
    import onnxruntime as ort

    import tensorforge

    cpu = tensorforge.compile(model)
    session = ort.InferenceSession(model.SerializeToString())
    return {
        "tf_cpu_ms": median_ms(lambda: cpu.run(inputs), repeat, warmup=1),
        "ort_ms": median_ms(lambda: session.run(None, inputs), repeat, warmup=1),
    }


def run_model(
    name: str, size: int, config: str, vthreads: int, repeat: int, depthwise: str = "accel"
) -> dict:
    import tensorforge
    from tensorforge.hw.config import HWConfig

    model, inputs, calib = _model(name, size)
    cfg = HWConfig.load(config)
    t0 = time.perf_counter()
    module = tensorforge.compile(
        model,
        f"vta -config={config} -vthreads={vthreads} -depthwise={depthwise}",
        calibration=calib,
    )
    compile_s = time.perf_counter() - t0
    module.use_device("cyclesim")
    t0 = time.perf_counter()
    module.run(inputs)
    sim_s = time.perf_counter() - t0
    results = module.device_results()
    cycles = sum(r.cycles for r in results.values())
    macs = sum(r.stats.get("gemm_counter", 0) for r in results.values())
    by_kernel = {k.name: k.kind for k in module.kernels}
    cpu_rows = [
        r for r in module.profile(inputs, repeat=repeat).rows if by_kernel[r.kernel] == "llvm"
    ]
    seconds = cycles / (cfg.clock_mhz * 1e6)
    return {
        "model": name if name != "resnet18" else f"resnet18 {size}",
        "config": cfg.name,
        "vthreads": vthreads,
        "depthwise": depthwise,
        "kernels": len(results),
        "offloaded_macs": module.stats["offloaded_macs"],
        "cycles": cycles,
        "accel_ms": seconds * 1e3,
        # gemm_counter counts micro-op steps, each BATCH x BLOCK_IN x BLOCK_OUT MACs
        "gops": 2 * macs * cfg.batch * cfg.block_in * cfg.block_out / seconds / 1e9,
        "utilization": macs / cycles,
        "host_ms": sum(r.median_ms for r in cpu_rows),
        "compile_s": compile_s,
        "sim_s": sim_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--size", type=int, default=224, help="ResNet-18 input size")
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--vthreads", default="1,2")
    ap.add_argument("--depthwise", default="cpu", help="cpu (the default), accel or accel,cpu")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for name in args.models.split(","):
        model, inputs, _ = _model(name, args.size)
        peers = _cpu_peers(model, inputs, args.repeat)
        for vt in (int(v) for v in args.vthreads.split(",")):
            for dw in args.depthwise.split(","):
                row = run_model(name, args.size, args.config, vt, args.repeat, dw)
                rows.append({**row, **peers})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"machine: {describe()}")
    head = (f"{'model':<16}{'cfg':<6}{'vt':>3}{'dw':>6}{'kern':>5}{'MACs on':>8}{'cycles':>12}"
            f"{'accel ms':>9}{'GOPS':>7}{'util':>6}{'host ms':>8} | {'CPU: TF ms':>10}"
            f"{'ORT ms':>8} | {'compile s':>9}{'sim s':>7}")  # fmt: skip
    print(head)
    for r in rows:
        print(f"{r['model']:<16}{r['config']:<6}{r['vthreads']:>3}{r['depthwise']:>6}"
              f"{r['kernels']:>5}"
              f"{r['offloaded_macs']:>8.1%}{r['cycles']:>12,}{r['accel_ms']:>9.2f}"
              f"{r['gops']:>7.1f}{r['utilization']:>6.0%}{r['host_ms']:>8.2f} | "
              f"{r['tf_cpu_ms']:>10.2f}{r['ort_ms']:>8.2f} | "
              f"{r['compile_s']:>9.1f}{r['sim_s']:>7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
