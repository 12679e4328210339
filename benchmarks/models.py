"""Whole-model benchmark: TensorForge vs onnxruntime (and torch, apache-tvm when importable).

ResNet-18 (224x224), MobileNetV2 (224x224), two MobileNetV2 inverted-residual blocks alone
(56x56) and a BERT-style encoder layer (sequence 128, width 256, 4 heads, FFN 1024), batch 1,
float32, fixed random weights (compiler/frontend/onnx_builders.py). For each model: the compile
time (TensorForge: import + optimize + lower + LLVM; onnxruntime: session creation; apache-tvm:
Relax ONNX frontend and `tvm.compile` with its default pipeline, untuned), the median run time,
and TensorForge's largest error against onnxruntime relative to the output's magnitude. Every
framework runs with its default thread count, or all with `--threads N`. Prints the machine
first.

apache-tvm is used when `import tvm` works, or from the folder named by `TVM_PYTHONPATH`
(appended to sys.path, e.g. after `pip install --target DIR apache-tvm`); torch when installed
(torchvision's ResNet-18 and MobileNetV2, nn.TransformerEncoderLayer and torchvision's
InvertedResidual, with their own random weights: timing only; this path is untested, torch is
not installed on the development machine).

Usage:
    python benchmarks/models.py [--models resnet18,mobilenet_v2,mobilenet_v2_blocks,encoder]
                                [--repeat 20] [--threads N] [--no-tvm] [--json]

Runs on the development machine (2 vCPUs of an AMD EPYC with AVX-512, shared with other jobs:
medians move by 2x between runs); more in docs/compile.md. One run on 2026-11-23, without
apache-tvm:

    machine: AMD EPYC, 2 CPUs, load (0.42, 0.78, 0.94); threads: default
    model               tensorforge onnxruntime  ratio   torch apache-tvm | compile s: tf   ort
    resnet18                  18.18       17.50  1.04x     n/a        n/a |          3.88  0.16
    mobilenet_v2               6.50        4.26  1.53x     n/a        n/a |          5.58  0.02
    mobilenet_v2_blocks        0.66        0.36  1.81x     n/a        n/a |          0.63  0.00
    encoder                    1.42        1.53  0.93x     n/a        n/a |          0.90  0.01
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

import numpy as np
from machine import cpu_model, import_tvm, median_ms, random_inputs

MODELS = ("resnet18", "mobilenet_v2", "mobilenet_v2_blocks", "encoder")


def _build(name: str) -> Any:
    from tensorforge.compiler.frontend import onnx_builders as ob

    if name == "resnet18":
        return ob.resnet18(224)
    if name == "mobilenet_v2":
        return ob.mobilenet_v2(224)
    if name == "mobilenet_v2_blocks":
        return ob.mobilenet_v2_block(56)
    if name == "encoder":
        return ob.transformer_encoder(seq=128, dim=256, heads=4, ffn=1024)
    raise ValueError(f"model must be one of {', '.join(MODELS)}, not {name!r}")


def _tensorforge(model: Any, inputs: dict, repeat: int) -> tuple[float, float, list]:
    import tensorforge

    start = time.perf_counter()
    module = tensorforge.compile(model)
    compile_s = time.perf_counter() - start
    outputs = list(module.run(inputs).values())
    return compile_s, median_ms(lambda: module.run(inputs), repeat), outputs


THREADS: int | None = None  # --threads: the same thread count for every framework


def _onnxruntime(model: Any, inputs: dict, repeat: int) -> tuple[float, float, list]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if THREADS:
        options.intra_op_num_threads = THREADS
    start = time.perf_counter()
    sess = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    compile_s = time.perf_counter() - start
    outputs = sess.run(None, inputs)
    return compile_s, median_ms(lambda: sess.run(None, inputs), repeat), outputs


def _tvm(model: Any, inputs: dict, repeat: int) -> tuple[float, float] | None:
    tvm = import_tvm()
    if tvm is None:
        return None
    import llvmlite.binding as llvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    llvm.initialize_native_target()
    target = tvm.target.Target({"kind": "llvm", "mcpu": llvm.get_host_cpu_name()})
    start = time.perf_counter()
    executable = tvm.compile(from_onnx(model, keep_params_in_input=False), target=target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    compile_s = time.perf_counter() - start
    args = [tvm.runtime.tensor(v) for v in inputs.values()]
    return compile_s, median_ms(lambda: vm["main"](*args), repeat, warmup=1)


def _torch_model(name: str) -> tuple[Any, tuple] | None:
    try:
        import torch
        import torchvision
    except ImportError:
        return None
    if name == "resnet18":
        return torchvision.models.resnet18(), (torch.randn(1, 3, 224, 224),)
    if name == "encoder":
        layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True, activation="gelu")
        return layer, (torch.randn(1, 128, 256),)
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(), (torch.randn(1, 3, 224, 224),)
    from torchvision.models.mobilenetv2 import InvertedResidual

    blocks = torch.nn.Sequential(InvertedResidual(16, 16, 1, 6), InvertedResidual(16, 24, 2, 6))
    return blocks, (torch.randn(1, 16, 56, 56),)


def _torch(name: str, repeat: int) -> float | None:
    built = _torch_model(name)
    if built is None:
        return None
    import torch

    module, args = built
    if THREADS:
        torch.set_num_threads(THREADS)
    module.eval()
    with torch.no_grad():
        return median_ms(lambda: module(*args), repeat)


def machine() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cpus": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "load": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def bench(name: str, repeat: int) -> dict[str, Any]:
    """TensorForge, onnxruntime and torch on one model (apache-tvm runs later, see `main`)."""
    model = _build(name)
    inputs = random_inputs(model)
    tf_compile, tf_ms, ours = _tensorforge(model, inputs, repeat)
    ort_compile, ort_ms, want = _onnxruntime(model, inputs, repeat)
    err = max(
        float(np.abs(o - w).max() / max(np.abs(w).max(), 1e-12))
        for o, w in zip(ours, want, strict=True)
    )
    return {
        "model": name,
        "tensorforge_ms": tf_ms,
        "onnxruntime_ms": ort_ms,
        "torch_ms": _torch(name, repeat),
        "tvm_ms": None,
        "tensorforge_compile_s": tf_compile,
        "onnxruntime_compile_s": ort_compile,
        "tvm_compile_s": None,
        "max_rel_error": err,
    }


def add_tvm(row: dict[str, Any], repeat: int) -> None:
    model = _build(row["model"])
    result = _tvm(model, random_inputs(model), repeat)
    if result is not None:
        row["tvm_compile_s"], row["tvm_ms"] = result


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'model':<19} {'tensorforge':>11} {'onnxruntime':>11} {'ratio':>6} {'torch':>7} "
        f"{'apache-tvm':>10} | {'compile s: tf':>13} {'ort':>5} {'tvm':>6} | {'rel err':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio = r["tensorforge_ms"] / r["onnxruntime_ms"]
        lines.append(
            f"{r['model']:<19} {r['tensorforge_ms']:>11.2f} {r['onnxruntime_ms']:>11.2f} "
            f"{ratio:>5.2f}x {_fmt(r['torch_ms'], '7.2f'):>7} {_fmt(r['tvm_ms'], '10.1f'):>10} | "
            f"{r['tensorforge_compile_s']:>13.2f} {r['onnxruntime_compile_s']:>5.2f} "
            f"{_fmt(r['tvm_compile_s'], '6.1f'):>6} | {r['max_rel_error']:>8.1e}"
        )
    lines.append("(median ms per batch-1 inference; ratio = tensorforge / onnxruntime)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-tvm", action="store_true", help="skip apache-tvm even if present")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="threads for every framework")
    args = parser.parse_args()
    global THREADS
    if args.threads:
        from tensorforge.runtime.device.cpu import set_num_threads

        THREADS = args.threads
        set_num_threads(args.threads)
        os.environ["TVM_NUM_THREADS"] = str(args.threads)
    info = machine()
    threads = args.threads or "default"
    print(
        f"machine: {info['cpu']}, {info['cpus']} CPUs, load {info['load']}, {info['platform']}; "
        f"threads: {threads}"
    )
    rows = [bench(n, args.repeat) for n in args.models.split(",")]
    if not args.no_tvm:  # last: apache-tvm's thread pool keeps spinning after its runs
        for row in rows:
            add_tvm(row, max(2, args.repeat // 8))
    print(json.dumps({"machine": info, "rows": rows}, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
