"""GPU back-end benchmark: GEMM (fp32, fp16 tensor cores) and ResNet-18, TensorForge vs its peers.

One run, peers side by side, medians of repeated runs, the machine and the device first:

* GEMM float32 N^3 (N = 4096 on CUDA, 512 on OpenCL; `--gemm-size`): TensorForge's tiled
  shared-memory dense kernel (`compiler.topi.gpu.dense`, default config or `--gemm-configs`),
  built once, its buffers allocated and filled on the device once, then timed device-side: the
  program's kernels launched on those buffers and the device synchronized, median of
  `--repeat` runs, no host<->device copies. Peers: `torch.matmul` (cuBLAS, TF32 off) on the
  same GPU when the device is CUDA and torch has CUDA, timed the same way; numpy (OpenBLAS) on
  the CPU as a reference row. Every result is checked against numpy.
* GEMM float16 on tensor cores: on CUDA, `compiler.topi.gpu.tensorcore` when that module exists
  with `dense_fp16(A, B) -> C` and `schedule_dense_tensorcore(s, C)` (else "not built"),
  against torch half `matmul`; without CUDA "pending a GPU".
* ResNet-18 (`onnx_builders.resnet18`, 224x224 on CUDA, 64x64 on OpenCL; `--resnet-size`;
  `--batch 1,32`): `tensorforge.compile(model, target)` with the device's target; the sum of
  `module.profile`'s per-call device medians (each call launched and synchronized alone) and
  the wall time of `module.run` (input and output copies included); onnxruntime on the CPU;
  torch (on the GPU when it has CUDA, else the CPU) with the model converted from the same
  ONNX by onnx2torch when that is installed (else skipped, said in a note).
* Grouped convolution (`--parts grouped`): RegNetY-400MF's 3x3 grouped layers (group width 8,
  batch 1, at a 224x224 input) by the generic schedule (`schedule_auto` of the one-reduction
  compute, what grouped convolutions got before their template) and by the GPU conv template
  the strategy picks (its default config), timed device-side like the GEMM; onnxruntime on the
  CPU as a reference row and the oracle of both.

Each table is followed by its goal from the GPU back-end issue (fp32 SIMT GEMM >= 0.7x cuBLAS,
fp16 WMMA GEMM >= 0.5x cuBLAS, tuned ResNet-18 <= 1.25x torch), with "pending a GPU" where the
device is not CUDA. With PoCL (OpenCL on the CPU) every "GPU" figure is this CPU running
OpenCL kernels: a correctness and plumbing check, not a GPU figure; the script says so.

Usage:
    python benchmarks/gpu.py [--device auto|cuda|opencl] [--quick] [--gemm-size N]
                             [--gemm-configs default,16x16x4x8] [--resnet-size S] [--batch 1,32]
                             [--repeat 20] [--parts gemm,fp16,resnet,grouped] [--tuning-log LOG]
                             [--json]

`--quick`: GEMM 256^3 (1024^3 on CUDA), ResNet-18 at 32x32 (112x112 on CUDA), 5 repeats.
`--gemm-configs default,16x16x4x8` times more dense configs side by side (a config the target
refuses is reported as failed). The CUDA paths are untested: the development machine (2 vCPUs
of a Xeon with AVX-512, shared with other jobs, PoCL 3.1, no GPU) has no CUDA device; there
`--quick` takes about 4 s and the defaults about 11 s. One run of the defaults there, 2026-11-24
(PoCL: a plumbing check, not GPU figures):

    GEMM float32 512^3               on         ms  GFLOP/s  x numpy  rel err
    tensorforge dense 16x16 vt2 k8   opencl  18.086     14.8    0.04x  8.9e-07
    numpy @ (scipy-openblas 0.3.31)  cpu      0.793    338.3    1.00x  0.0e+00
    ResNet-18 1x3x64x64: tf device 78.00 ms, tf wall 78.36 ms, onnxruntime (CPU) 1.77 ms

`--parts grouped --repeat 40` there, 2026-11-25, three runs under a load of about 3 (PoCL on
the CPU, not GPU figures; generic / template ms, device-side):

    104x28x28 g13 s1   5.2-9.5 / 4.4-7.8   1.02-1.37x   (onnxruntime on the CPU 0.37 ms)
    208x14x14 g26 s1   3.2-3.7 / 2.3-2.6   1.39-1.43x   (0.12-0.24 ms)
    208x28x28 g26 s2   2.6-3.0 / 2.5-3.0   0.98-1.02x   (0.16-0.38 ms)
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import importlib
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np
from machine import cpu_model, describe, median_ms

GOALS = {  # the GPU back-end issue's acceptance figures
    "gemm_fp32": ("fp32 SIMT GEMM vs cuBLAS", ">=", 0.7),
    "gemm_fp16": ("fp16 WMMA GEMM vs cuBLAS", ">=", 0.5),
    "resnet18": ("tuned ResNet-18 time vs torch", "<=", 1.25),
}
PARTS = ("gemm", "fp16", "resnet", "grouped")


# ---- device and versions ---------------------------------------------------------------------


def open_gpu(kind: str) -> Any:
    """The device of `kind`; "auto" is CUDA where it opens, else OpenCL."""
    from tensorforge.runtime.device.gpu import GPUError, open_device

    if kind == "auto":
        try:
            return open_device("cuda")
        except GPUError:
            kind = "opencl"
    return open_device(kind)


def target_of(dev: Any) -> str:
    """The compile target for `dev`: "opencl", or "cuda -arch=sm_NN" for the newest arch NVRTC
    knows that the device runs."""
    if dev.kind != "cuda":
        return "opencl"
    from tensorforge.runtime.device.gpu import nvrtc

    cc = int(dev.arch[3:])
    best = max([a for a in nvrtc.supported_archs() if a <= cc], default=cc)
    return f"cuda -arch=sm_{best}"


def is_cpu_opencl(dev: Any) -> bool:
    """Whether an OpenCL device is a CPU (PoCL and the like)."""
    if dev.kind != "opencl":
        return False
    return bool(dev.device.type & dev.cl.device_type.CPU)


def _cuda_driver_version() -> str:
    try:
        lib, v = ctypes.CDLL("libcuda.so.1"), ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return f"{v.value // 1000}.{v.value % 1000 // 10}"
    except OSError:
        pass
    return "n/a"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_cuda(dev: Any) -> Any:
    """torch, when the device is CUDA and torch has CUDA; else None."""
    torch = _torch()
    if dev.kind == "cuda" and torch is not None and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 for cuBLAS too
        torch.backends.cudnn.allow_tf32 = False
        return torch
    return None


def _blas() -> str:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas['version']}"
    except Exception:
        return "unknown BLAS"


def environment(dev: Any) -> dict[str, Any]:
    """The machine, the device and every library version, recorded with each figure."""
    from tensorforge.runtime.device.gpu import nvrtc

    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpus": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "device_kind": dev.kind,
        "device": dev.info.name,
        "max_threads": dev.info.max_threads,
        "max_shared": dev.info.max_shared,
        "cpu_opencl": is_cpu_opencl(dev),
    }
    if dev.kind == "opencl":
        plat = dev.device.platform
        info["opencl_platform"] = f"{plat.name.strip()}: {plat.version.strip()}"
        info["driver"] = (
            f"{plat.version.split('  ')[0].strip()}, driver {dev.device.driver_version.strip()}"
        )
    else:
        info["driver"] = f"CUDA driver {_cuda_driver_version()}, {dev.arch}"
    versions = {"numpy": f"{np.__version__} ({_blas()})"}
    try:
        import pyopencl

        versions["pyopencl"] = pyopencl.VERSION_TEXT
    except ImportError:
        versions["pyopencl"] = "not installed"
    try:
        versions["nvrtc"] = ".".join(map(str, nvrtc.version()))
    except nvrtc.NVRTCError:
        versions["nvrtc"] = "not found"
    import onnxruntime

    versions["onnxruntime"] = onnxruntime.__version__
    torch = _torch()
    if torch is None:
        versions["torch"] = "not installed"
    else:
        cuda = torch.version.cuda or "no CUDA"
        cudnn = torch.backends.cudnn.version() if torch.cuda.is_available() else None
        versions["torch"] = f"{torch.__version__} (CUDA {cuda}, cuDNN {cudnn})"
    try:
        onnx2torch = importlib.import_module("onnx2torch")
        versions["onnx2torch"] = getattr(onnx2torch, "__version__", "installed")
    except ImportError:
        versions["onnx2torch"] = "not installed"
    info["versions"] = versions
    return info


def print_environment(env: dict[str, Any]) -> None:
    print(f"machine: {describe()}, {env['platform']}")
    limits = f"{env['max_threads']} threads/block, {env['max_shared'] // 1024} KiB shared"
    print(f"device: {env['device_kind']}: {env['device']} ({env['driver']}; {limits})")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    if env["cpu_opencl"]:
        print(
            "NOTE: this OpenCL device is a CPU (PoCL): the 'GPU' is this machine's CPU running "
            "OpenCL kernels,\n      so its figures are a correctness/plumbing check, not a GPU "
            "figure."
        )


# ---- timing ----------------------------------------------------------------------------------


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    want = np.asarray(want, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


class DeviceRun:
    """A `build_gpu` function's kernels bound to device buffers allocated and filled once:
    `run()` launches every kernel and synchronizes (no copies); `read(i, out)` copies array
    argument `i` back."""

    def __init__(self, f: Any, arrays: list[np.ndarray]) -> None:
        self.dev, self.program = f.device, f.program
        hosts, self.arrays, buffers = iter(arrays), [], []
        for spec in f.payload["buffers"]:  # the order the kernels' argument indices refer to
            item = np.dtype(spec["dtype"]).itemsize
            if spec["workspace"]:
                buffers.append((self.dev.alloc(spec["size"] * item), 0, item))
                continue
            host = np.ascontiguousarray(next(hosts))
            buf = self.dev.alloc(host.nbytes)
            self.dev.write(buf, 0, host)
            buffers.append((buf, 0, item))
            self.arrays.append(buf)
        self.launches = [
            (k["name"], tuple(k["grid"]), tuple(k["block"]), [buffers[i] for i in k["args"]])
            for k in f.payload["kernels"]
        ]
        self.dev.synchronize()

    def run(self) -> None:
        for name, grid, block, args in self.launches:
            self.dev.launch(self.program, name, grid, block, args)
        self.dev.synchronize()

    def read(self, index: int, out: np.ndarray) -> np.ndarray:
        self.dev.read(self.arrays[index], 0, out)
        self.dev.synchronize()
        return out


# ---- GEMM fp32 -------------------------------------------------------------------------------


def parse_config(text: str, n: int, max_threads: int) -> Any:
    from tensorforge.compiler.topi.gpu.dense import DenseGPUConfig, default_config

    if text == "default":
        return default_config(n, n, max_threads)
    ty, tx, v, k = (int(x) for x in text.lower().split("x"))
    return DenseGPUConfig(ty, tx, v, k)


def config_name(cfg: Any) -> str:
    return f"{cfg.ty}x{cfg.tx} vt{cfg.vthread} k{cfg.k_tile}"


def tf_gemm(dev: Any, target: str, a: np.ndarray, b: np.ndarray, cfg: Any, repeat: int) -> dict:
    from tensorforge.compiler import te
    from tensorforge.compiler.build import build_gpu
    from tensorforge.compiler.topi.gpu.dense import matmul, schedule_dense

    n = a.shape[0]
    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    C = matmul(A, B)
    s = schedule_dense(te.create_schedule(C.op), C, None, cfg)
    f = build_gpu(s, [A, B, C], target, name="gemm")
    run = DeviceRun(f, [a, b, np.zeros((n, n), np.float32)])
    run.run()  # first launch: the OpenCL/PTX JIT, outside the timing
    got = run.read(2, np.empty((n, n), np.float32))
    ms = median_ms(run.run, repeat)
    return {"ms": ms, "got": got, "blocks": [k["block"] for k in f.payload["kernels"]]}


def torch_gemm(torch: Any, a: np.ndarray, b: np.ndarray, repeat: int) -> tuple[float, np.ndarray]:
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc = torch.empty_like(ta)

    def run() -> None:
        torch.matmul(ta, tb, out=tc)
        torch.cuda.synchronize()

    run()
    return median_ms(run, repeat), tc.float().cpu().numpy()


def bench_gemm(dev: Any, target: str, n: int, configs: list[str], repeat: int) -> dict:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    want = a @ b
    flops = 2.0 * n**3
    rows = []
    from tensorforge.compiler.codegen.gpu import Limits
    from tensorforge.compiler.target import Target

    threads = min(dev.info.max_threads, Limits.of(Target.parse(target)).max_threads)
    for text in configs:
        cfg = parse_config(text, n, threads)
        row = {"impl": f"tensorforge dense {config_name(cfg)}", "on": dev.kind}
        try:
            r = tf_gemm(dev, target, a, b, cfg, repeat)
            row.update(ms=r["ms"], err=rel_err(r["got"], want))
        except Exception as e:  # a config the device refuses: reported, not fatal
            row.update(ms=None, err=None, failed=f"{type(e).__name__}: {str(e)[:120]}")
        rows.append(row)
    torch = _torch_cuda(dev)
    if torch is not None:
        ms, got = torch_gemm(torch, a, b, repeat)
        rows.append({"impl": "torch.matmul (cuBLAS)", "on": "cuda", "ms": ms,
                     "err": rel_err(got, want), "peer": "cublas"})  # fmt: skip
    ms = median_ms(lambda: a @ b, repeat)
    rows.append(
        {"impl": f"numpy @ ({_blas()})", "on": "cpu", "ms": ms, "err": 0.0, "peer": "numpy"}
    )
    for row in rows:
        row["gflops"] = flops / row["ms"] / 1e6 if row["ms"] else None
    return {"n": n, "repeat": repeat, "rows": rows}


def _best_tf(rows: list[dict]) -> dict | None:
    ours = [r for r in rows if r["impl"].startswith("tensorforge") and r["ms"]]
    return min(ours, key=lambda r: r["ms"]) if ours else None


def _peer(rows: list[dict], name: str) -> dict | None:
    return next((r for r in rows if r.get("peer") == name), None)


def _f(value: float | None, spec: str, width: int, suffix: str = "") -> str:
    return ("n/a" if value is None else format(value, spec) + suffix).rjust(width)


def goal_line(key: str, measured: float | None, dev: Any, note: str = "") -> str:
    what, sense, bound = GOALS[key]
    head = f"goal: {what} {sense} {bound:.2f}x:"
    if dev.kind != "cuda":
        return f"{head} pending a GPU (no CUDA device here)"
    if measured is None:
        return f"{head} not measured{note}"
    met = measured >= bound if sense == ">=" else measured <= bound
    return f"{head} {measured:.2f}x -> {'met' if met else 'NOT met'}{note}"


def print_gemm(result: dict, dev: Any, title: str = "float32", goal: str = "gemm_fp32") -> None:
    n, rows = result["n"], result["rows"]
    cublas, npy = _peer(rows, "cublas"), _peer(rows, "numpy")
    print(f"\nGEMM {title}, {n}^3: median of {result['repeat']} runs; GPU rows timed device-side "
          "(launch + synchronize, no host<->device copies)")  # fmt: skip
    head = (
        f"{'implementation':<38} {'on':<6} {'ms':>9} {'GFLOP/s':>9} {'x cuBLAS':>9} "
        f"{'x numpy':>8} {'rel err':>8}"
    )
    print(head + "\n" + "-" * len(head))
    for r in rows:
        if r.get("failed"):
            print(f"{r['impl']:<38} {r['on']:<6} failed: {r['failed']}")
            continue
        vs_cublas = r["gflops"] / cublas["gflops"] if cublas else None
        vs_numpy = r["gflops"] / npy["gflops"] if npy else None
        print(
            f"{r['impl']:<38} {r['on']:<6} {r['ms']:>9.3f} {r['gflops']:>9.1f} "
            f"{_f(vs_cublas, '.2f', 9, 'x')} {_f(vs_numpy, '.2f', 8, 'x')} {_f(r['err'], '.1e', 8)}"
        )
    best = _best_tf(rows)
    ratio = best["gflops"] / cublas["gflops"] if best and cublas else None
    note = "" if cublas or dev.kind != "cuda" else " (torch with CUDA not installed: no cuBLAS)"
    print(goal_line(goal, ratio, dev, note))


# ---- GEMM fp16 on tensor cores ---------------------------------------------------------------


def bench_fp16(dev: Any, target: str, n: int, repeat: int) -> dict:
    """TensorForge's WMMA dense against torch's half matmul (CUDA only)."""
    if dev.kind != "cuda":
        return {"status": "pending a GPU"}
    try:
        tc = importlib.import_module("tensorforge.compiler.topi.gpu.tensorcore")
    except ImportError:
        return {"status": "not built (no compiler/topi/gpu/tensorcore.py)"}
    if not all(hasattr(tc, k) for k in ("dense_fp16", "schedule_dense_tensorcore")):
        return {"status": "not built (tensorcore.py lacks dense_fp16/schedule_dense_tensorcore)"}
    from tensorforge.compiler import te
    from tensorforge.compiler.build import build_gpu

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float16) for _ in range(2))
    want = a.astype(np.float32) @ b.astype(np.float32)
    flops, rows = 2.0 * n**3, []
    row: dict[str, Any] = {"impl": "tensorforge WMMA dense_fp16", "on": "cuda"}
    try:
        A = te.placeholder((n, n), "float16", name="A")
        B = te.placeholder((n, n), "float16", name="B")
        C = tc.dense_fp16(A, B)
        C = C[-1] if isinstance(C, tuple) else C
        s = te.create_schedule(C.op)
        s = tc.schedule_dense_tensorcore(s, C) or s
        f = build_gpu(s, [A, B, C], target, name="gemm_fp16")
        run = DeviceRun(f, [a, b, np.zeros((n, n), C.dtype)])
        run.run()
        got = run.read(2, np.empty((n, n), C.dtype))
        row.update(ms=median_ms(run.run, repeat), err=rel_err(got, want))
    except Exception as e:
        row.update(ms=None, err=None, failed=f"{type(e).__name__}: {str(e)[:120]}")
    rows.append(row)
    torch = _torch_cuda(dev)
    if torch is not None:
        ms, got = torch_gemm(torch, a, b, repeat)
        rows.append({"impl": "torch.matmul half (cuBLAS)", "on": "cuda", "ms": ms,
                     "err": rel_err(got, want), "peer": "cublas"})  # fmt: skip
    for r in rows:
        r["gflops"] = flops / r["ms"] / 1e6 if r["ms"] else None
    return {"n": n, "repeat": repeat, "rows": rows}


def print_fp16(result: dict, dev: Any) -> None:
    if "status" in result:
        print(f"\nGEMM float16 on tensor cores (WMMA): {result['status']}")
        print(goal_line("gemm_fp16", None, dev))
        return
    print_gemm(result, dev, "float16 on tensor cores (WMMA)", "gemm_fp16")


# ---- ResNet-18 -------------------------------------------------------------------------------


def resnet(size: int, batch: int) -> Any:
    import onnx

    from tensorforge.compiler.frontend.onnx_builders import resnet18

    model = resnet18(size=size, classes=1000)
    if batch != 1:  # the builder's graph has batch 1; nothing in it fixes the batch but the ends
        for v in (*model.graph.input, *model.graph.output):
            v.type.tensor_type.shape.dim[0].dim_value = batch
        del model.graph.value_info[:]
        onnx.checker.check_model(model)
    return model


def torch_resnet(model: Any, x: np.ndarray, dev: Any, repeat: int) -> dict:
    """The ONNX model in torch through onnx2torch (GPU when torch has CUDA), or why not."""
    torch = _torch()
    if torch is None:
        return {"note": "torch not installed"}
    try:
        from onnx2torch import convert
    except ImportError:
        return {"note": "onnx2torch not installed (needed to run the same ONNX model in torch)"}
    on_gpu = _torch_cuda(dev) is not None
    net = convert(model).eval()
    tx = torch.from_numpy(x)
    if on_gpu:
        net, tx = net.cuda(), tx.cuda()

    def run() -> Any:
        y = net(tx)
        if on_gpu:
            torch.cuda.synchronize()
        return y

    with torch.no_grad():
        out = run().float().cpu().numpy()
        ms = median_ms(run, repeat)
    return {"ms": ms, "on": "cuda" if on_gpu else "cpu", "out": out}


def bench_resnet(
    dev: Any, target: str, size: int, batch: int, repeat: int, tuning_log: str | None
) -> dict:
    import onnxruntime as ort

    import tensorforge

    model = resnet(size, batch)
    x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
    feeds = {model.graph.input[0].name: x}
    start = time.perf_counter()
    module = tensorforge.compile(model, target=target, tuning_log=tuning_log)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    (ours,) = module.run(feeds).values()  # the first run builds the device programs
    load_s = time.perf_counter() - start
    wall_ms = median_ms(lambda: module.run(feeds), repeat)
    prof = module.profile(feeds, repeat=repeat)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    ort_ms = median_ms(lambda: sess.run(None, feeds), repeat)
    row = {
        "size": size,
        "batch": batch,
        "tf_device_ms": prof.total_ms,
        "tf_wall_ms": wall_ms,
        "tf_calls": len(prof.rows),
        "tf_compile_s": compile_s,
        "tf_first_run_s": load_s,
        "tf_err": rel_err(ours, want),
        "tuning": module.stats.get("tuning"),
        "ort_ms": ort_ms,
        "top": [(r.label, r.median_ms) for r in sorted(prof.rows, key=lambda r: -r.median_ms)[:3]],
    }
    t = torch_resnet(model, x, dev, repeat)
    row["torch_ms"], row["torch_on"], row["torch_note"] = t.get("ms"), t.get("on"), t.get("note")
    row["torch_err"] = rel_err(t["out"], want) if "out" in t else None
    return row


def print_resnet(rows: list[dict], dev: Any, repeat: int) -> None:
    print(f"\nResNet-18 float32 (classes 1000), median ms of {repeat} runs; tensorforge on "
          f"{dev.kind}: 'device' = sum of per-call device medians (module.profile), 'wall' = "
          "module.run with copies")  # fmt: skip
    head = (
        f"{'input':>13} | {'tf device':>9} {'tf wall':>9} | {'ORT cpu':>9} {'torch':>9} "
        f"{'torch on':>8} | {'tf/ORT':>7} {'tf/torch':>8} | {'compile s':>9} {'1st run s':>9} | "
        f"{'rel err':>8}"
    )
    print(head + "\n" + "-" * len(head))
    for r in rows:
        tf_torch = r["tf_device_ms"] / r["torch_ms"] if r["torch_ms"] else None
        shape = f"{r['batch']}x3x{r['size']}x{r['size']}"
        print(
            f"{shape:>13} | {r['tf_device_ms']:>9.2f} "
            f"{r['tf_wall_ms']:>9.2f} | {r['ort_ms']:>9.2f} {_f(r['torch_ms'], '.2f', 9)} "
            f"{r['torch_on'] or 'n/a':>8} | {r['tf_device_ms'] / r['ort_ms']:>6.2f}x "
            f"{_f(tf_torch, '.2f', 8, 'x')} | {r['tf_compile_s']:>9.2f} "
            f"{r['tf_first_run_s']:>9.2f} | {r['tf_err']:>8.1e}"
        )
    for r in rows:
        top = ", ".join(f"{label} {ms:.2f}" for label, ms in r["top"])
        print(f"  batch {r['batch']}: {r['tf_calls']} device calls; slowest (ms): {top}")
        if r["tuning"]:
            t = r["tuning"]
            print(f"  batch {r['batch']}: tuning log applied to {t['applied']} kernels, "
                  f"{t['default']} on defaults")  # fmt: skip
    print("  (tf/ORT, tf/torch: ratios of tf device time; compile s: tensorforge.compile; "
          "1st run s: the first module.run, which builds the device programs)")  # fmt: skip
    notes = {r["torch_note"] for r in rows if r["torch_note"]}
    for note in sorted(notes):
        print(f"  torch skipped: {note}")
    tuned = all(r["tuning"] for r in rows)
    gpu_rows = [r for r in rows if r["torch_ms"] and r["torch_on"] == "cuda"]
    ratio = max((r["tf_device_ms"] / r["torch_ms"] for r in gpu_rows), default=None)
    note = "" if tuned else " (untuned defaults: pass --tuning-log for the tuned figure)"
    if dev.kind == "cuda" and not gpu_rows:
        note += " (no torch with CUDA and onnx2torch: no peer)"
    print(goal_line("resnet18", ratio, dev, note))


# ---- grouped convolution ---------------------------------------------------------------------

# RegNetY-400MF's 3x3 grouped convolutions (group width 8) at a 224x224 input: (channels, H=W,
# stride); batch 1, padding 1
REGNET_LAYERS = ((104, 28, 1), (208, 14, 1), (208, 28, 2))


def _generic_grouped_conv(x: Any, w: Any, groups: int, stride: int) -> Any:
    """The convolution as one reduction over NCHW, the compute the graph strategy lowered a
    grouped conv to before its GPU template (`strategy.nn.direct_conv_taps`), padding read as a
    guarded, clamped load; `schedule_auto`'s schedule (what such a group got)."""
    from tensorforge.compiler import te
    from tensorforge.compiler.graph.strategy.nn import direct_conv_taps
    from tensorforge.compiler.topi.gpu import GPUScheduleConfig, schedule_auto

    (nb, _, h, wd), (k, _, r, _) = x.shape, w.shape
    axes, taps = direct_conv_taps(w.shape, groups, (1, 1), (stride, stride), (1, 1))
    oh = (int(h) + 2 - int(r)) // stride + 1
    ow = (int(wd) + 2 - int(r)) // stride + 1

    def body(n: Any, kk: Any, y: Any, xx: Any) -> Any:
        c, (iy, ix), ci, (ry, rx) = taps(kk, y, xx)
        inside = te.all_of(iy >= 0, iy < h, ix >= 0, ix < wd)
        clamped = x[n, c, te.min(te.max(iy, 0), h - 1), te.min(te.max(ix, 0), wd - 1)]
        return te.sum(te.select(inside, clamped, te.const(0, x.dtype)) * w[kk, ci, ry, rx], axes)

    out = te.compute((nb, k, oh, ow), body, name="conv")
    return out, schedule_auto([out], GPUScheduleConfig(threads=256))


def bench_grouped(dev: Any, target: str, repeat: int) -> list[dict]:
    """Each RegNetY layer by the generic schedule and by the GPU conv template (its default
    config), device-side medians of runs alternated between the two, against onnxruntime on
    the CPU (time and values)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from tensorforge.compiler import te
    from tensorforge.compiler.build import build_gpu
    from tensorforge.compiler.codegen.gpu import Limits
    from tensorforge.compiler.target import Target
    from tensorforge.compiler.topi.gpu import conv2d as gpu_conv

    rng, rows = np.random.default_rng(0), []
    limit = Limits.of(Target.parse(target)).max_threads
    for ch, size, stride in REGNET_LAYERS:
        groups, out_hw = ch // 8, (size - 1) // stride + 1
        xv = rng.standard_normal((1, ch, size, size), dtype=np.float32)
        wv = rng.standard_normal((ch, 8, 3, 3), dtype=np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], group=groups, pads=[1] * 4,
                                strides=[stride] * 2)  # fmt: skip
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
            n, TensorProto.FLOAT, v.shape) for n, v in (("x", xv), ("w", wv))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        ort_run = functools.partial(sess.run, None, {"x": xv, "w": wv})
        (want,) = ort_run()
        row = {"layer": f"{ch}x{size}x{size} g{groups} s{stride}", "groups": groups,
               "ort_ms": median_ms(ort_run, repeat)}  # fmt: skip
        x, w = te.placeholder(xv.shape, name="x"), te.placeholder(wv.shape, name="w")
        geo = gpu_conv.Geometry((1, 1), (stride, stride), (1, 1), (out_hw, out_hw), groups)
        template = gpu_conv.template_for(wv.shape, groups, geo.out)
        config = gpu_conv.default_of(template, wv.shape, geo, limit)
        builds = {"generic": _generic_grouped_conv(x, w, groups, stride),
                  template: gpu_conv.conv2d(template, x, w, geo, config)}  # fmt: skip
        runs = {}
        for name, (out, s) in builds.items():
            f = build_gpu(s, [x, w, out], target, name="grouped_conv")
            runs[name] = DeviceRun(f, [xv, wv, np.zeros(want.shape, np.float32)])
            runs[name].run()  # first launch: the OpenCL/PTX JIT, outside the timing
            got = runs[name].read(2, np.empty(want.shape, np.float32))
            row[name] = {"err": rel_err(got, want), "times": []}
        for _ in range(repeat):  # alternated: a shared machine's load drifts alike for both
            for name, run in runs.items():
                row[name]["times"].append(median_ms(run.run, 1, warmup=1))
        for name in runs:
            row[name]["ms"] = float(np.median(row[name].pop("times")))
        row["template"], row["config"] = template, config
        rows.append(row)
    return rows


def print_grouped(rows: list[dict], dev: Any, repeat: int) -> None:
    print(f"\nGrouped conv 3x3 float32 (RegNetY-400MF layers, group width 8, batch 1), median ms "
          f"of {repeat} device-side runs on {dev.kind}; 'generic' = schedule_auto (the path "
          "before the template)")  # fmt: skip
    head = (f"{'layer':>20} | {'generic':>9} {'template':>9} {'speedup':>8} | {'ORT cpu':>8} | "
            f"{'rel err':>8} | template (default config)")  # fmt: skip
    print(head + "\n" + "-" * len(head))
    for r in rows:
        g, t = r["generic"], r[r["template"]]
        err = max(g["err"], t["err"])
        print(f"{r['layer']:>20} | {g['ms']:>9.3f} {t['ms']:>9.3f} {g['ms'] / t['ms']:>7.2f}x | "
              f"{r['ort_ms']:>8.3f} | {err:>8.1e} | {r['template']} {r['config']}")  # fmt: skip


# ---- driver ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cuda", "opencl"), default="auto")
    parser.add_argument("--quick", action="store_true", help="small sizes, 5 repeats (< 1 min)")
    parser.add_argument("--gemm-size", type=int, help="N of the N^3 GEMMs (4096 CUDA, 512 OpenCL)")
    parser.add_argument(
        "--gemm-configs",
        default="default",
        help="TensorForge dense configs, comma-separated: 'default' or TYxTXxVTHREADxKTILE",
    )
    parser.add_argument("--resnet-size", type=int, help="input H=W (224 CUDA, 64 OpenCL)")
    parser.add_argument("--batch", default="1", help="ResNet-18 batch sizes, e.g. 1,32")
    parser.add_argument("--repeat", type=int, help="timed runs per figure (20; 5 with --quick)")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="which of gemm,fp16,resnet,grouped"
    )
    parser.add_argument("--tuning-log", help="a `tensorforge tune` log for the ResNet-18 compile")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    if unknown := [p for p in parts if p not in PARTS]:
        parser.error(f"--parts must name parts of {', '.join(PARTS)}, not {', '.join(unknown)}")
    start = time.time()
    from tensorforge.runtime.device.gpu import GPUError

    try:
        dev = open_gpu(args.device)
    except GPUError as e:
        parser.exit(2, f"gpu.py: no {args.device} device: {e}\n")
    cuda = dev.kind == "cuda"
    target = target_of(dev)
    n = args.gemm_size or ((1024 if cuda else 256) if args.quick else (4096 if cuda else 512))
    size = args.resnet_size or ((112 if cuda else 32) if args.quick else (224 if cuda else 64))
    repeat = args.repeat or (5 if args.quick else 20)
    env = environment(dev)
    print_environment(env)
    print(f"target: {target}")
    results: dict[str, Any] = {"machine": env, "target": target}
    if "gemm" in parts:
        results["gemm_fp32"] = bench_gemm(dev, target, n, args.gemm_configs.split(","), repeat)
        print_gemm(results["gemm_fp32"], dev)
    if "fp16" in parts:
        results["gemm_fp16"] = bench_fp16(dev, target, n, repeat)
        print_fp16(results["gemm_fp16"], dev)
    if "resnet" in parts:
        rows = [
            bench_resnet(dev, target, size, int(b), repeat, args.tuning_log)
            for b in args.batch.split(",")
        ]
        results["resnet18"] = rows
        print_resnet(rows, dev, repeat)
    if "grouped" in parts:
        results["grouped_conv"] = bench_grouped(dev, target, repeat)
        print_grouped(results["grouped_conv"], dev, repeat)
    if env["cpu_opencl"]:
        print("\n(OpenCL ran on PoCL, i.e. on this CPU: no figure above is a GPU figure)")
    print(f"\n(total {time.time() - start:.0f} s)")
    if args.json:
        for key in ("gemm_fp32", "gemm_fp16"):  # every figure carries the machine it ran on
            for row in results.get(key, {}).get("rows", []):
                row["machine"] = env
        for row in (*results.get("resnet18", []), *results.get("grouped_conv", [])):
            row["machine"] = env
        print(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
