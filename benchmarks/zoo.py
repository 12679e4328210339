"""Model zoo: TensorForge against onnxruntime on torchvision architectures, CPU speed and memory.

Every model is a torchvision architecture with random weights (seeded), exported by torch's
standard ONNX exporter (TorchScript-based; the dynamo exporter only where that fails) at opset
17, batch 1, float32, and cached under build/zoo/. For each model:

- TensorForge compiles it (`tensorforge.compile`, default options, untuned) and its outputs are
  checked against onnxruntime's: the largest absolute error relative to the output's largest
  magnitude, and whether the top-1 class agrees (classifiers; per-pixel classes for the
  segmentation model). A model that does not compile, or does not match, is a row with the
  error's first line: every model appears.
- The median run time of both runtimes at 1 and at 2 threads, timed side by side in this process
  (TensorForge: `runtime.device.cpu.set_num_threads`; onnxruntime: `intra_op_num_threads`).
- The peak resident memory (ru_maxrss) of each runtime in a child process of its own that loads
  the model from the ONNX file (TensorForge: compile; onnxruntime: session creation) and runs it
  once. Python, numpy and the runtime's own libraries count in both. When apache-tvm imports
  (installed, or from the folder named by `TVM_PYTHONPATH`), its compile's peak (Relax
  frontend, `tvm.compile`, untuned) is measured as a third peer, a compiler's figure beside a
  compiler's: the `--memory-only` table prints it, a full run's `--json` rows hold it.

Needs the `zoo` extra (torch, torchvision, onnxscript, onnxruntime): `pip install
'tensorforge[zoo]'`. torch only exports: the timing and memory processes never import it.

Usage:
    python benchmarks/zoo.py [--models resnet18,vit_b_16] [--repeat 10] [--json]
                             [--profile] [--skip-memory]
    python benchmarks/zoo.py --memory-only [--models ...]   # the peak-memory columns alone
    python benchmarks/zoo.py --load results.json [--markdown]   # a saved --json run again

`--profile` adds, per model, TensorForge's time by op family (Module.profile, 1 thread) beside
onnxruntime's (its node profiler), the families where the gap is largest first.

Runs on the development machine: 2 vCPUs of an AMD EPYC shared with other jobs, so the medians
move by up to 2x between runs and the 2-thread column is the noisiest. Results: README, "CPU
performance".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from machine import cpu_model, import_tvm, random_inputs

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "zoo"
OPSET = 17
THREADS = (1, 2)
MATCH_RTOL = 1e-3  # largest |tf - ort| / largest |ort| of a model that matches

# name -> (torchvision constructor, input side); a constructor not in torchvision.models is in
# torchvision.models.segmentation.
MODELS: dict[str, tuple[str, int]] = {
    "resnet18": ("resnet18", 224),
    "resnet50": ("resnet50", 224),
    "mobilenet_v2": ("mobilenet_v2", 224),
    "mobilenet_v3_small": ("mobilenet_v3_small", 224),
    "mobilenet_v3_large": ("mobilenet_v3_large", 224),
    "efficientnet_b0": ("efficientnet_b0", 224),
    "regnet_y_400mf": ("regnet_y_400mf", 224),
    "shufflenet_v2_x1_0": ("shufflenet_v2_x1_0", 224),
    "densenet121": ("densenet121", 224),
    "inception_v3": ("inception_v3", 299),
    "squeezenet1_1": ("squeezenet1_1", 224),
    "googlenet": ("googlenet", 224),
    "mnasnet1_0": ("mnasnet1_0", 224),
    "convnext_tiny": ("convnext_tiny", 224),
    "vit_b_16": ("vit_b_16", 224),
    "lraspp_mobilenet_v3_large": ("lraspp_mobilenet_v3_large", 256),
}


def progress(message: str) -> None:
    print(f"[zoo {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- export (in a child process: torch stays out of the timed process) ----------------------


def _torch_model(name: str) -> Any:
    import torch
    import torchvision

    ctor, _ = MODELS[name]
    torch.manual_seed(0)
    if hasattr(torchvision.models, ctor):
        kwargs = {"init_weights": True} if name in ("inception_v3", "googlenet") else {}
        model = getattr(torchvision.models, ctor)(weights=None, **kwargs)
    else:
        seg = getattr(torchvision.models.segmentation, ctor)
        model = _OutOnly(seg(weights=None, weights_backbone=None))
    if name == "vit_b_16":  # torchvision zeroes the head: every class would score 0
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
        torch.nn.init.normal_(model.heads.head.bias, std=0.02)
    calibrate_batch_norm(model, MODELS[name][1])
    return model.eval()


def calibrate_batch_norm(model: Any, side: int) -> None:
    """Set every batch norm's running statistics from random batches, as training would. With
    torchvision's initial statistics (mean 0, variance 1) the activations of the deeper models
    shrink layer by layer (MobileNetV2's logits are ~1e-9, EfficientNet's ~1e-14) or die
    (GoogLeNet's logits are the classifier's bias alone): comparing such outputs says little."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(4, 3, side, side))


def _OutOnly(model: Any) -> Any:  # noqa: N802 - a class factory: torch is imported lazily
    import torch

    class OutOnly(torch.nn.Module):
        """A segmentation model's "out" map alone (torchvision returns a dict)."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: Any) -> Any:
            return self.inner(x)["out"]

    return OutOnly()


def export_torch(model: Any, x: Any, path: Path, name: str, torchscript: bool = True) -> str:
    """Export `model` on example input `x` to `path` at opset `OPSET`: the TorchScript exporter
    first (unless `torchscript` is False), the dynamo one where it fails; returns the one used."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        if torchscript:
            try:
                torch.onnx.export(
                    model, (x,), str(path), opset_version=OPSET, dynamo=False,
                    input_names=["input"], output_names=["output"],
                )  # fmt: skip
                return "torchscript"
            except Exception as exc:  # noqa: BLE001 - any exporter failure: try the other one
                progress(f"{name}: TorchScript export failed ({_first_line(exc)}), trying dynamo")
        program = torch.onnx.export(model, (x,), dynamo=True, opset_version=OPSET)
        program.save(str(path))
    return "dynamo"


def export(name: str, path: Path) -> str:
    """Export zoo model `name` to `path`; returns the exporter used."""
    import torch

    side = MODELS[name][1]
    return export_torch(_torch_model(name), torch.randn(1, 3, side, side), path, name)


def ensure_exported(name: str) -> Path:
    path = CACHE / f"{name}.onnx"
    if not path.exists():
        progress(f"{name}: exporting")
        cmd = [sys.executable, __file__, "--export", name]
        subprocess.run(cmd, check=True, stdout=sys.stderr)
    return path


# ---- checking and timing ---------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:160]


def _ort_session(path: Path, threads: int, profile: bool = False) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.enable_profiling = profile
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def compare(ours: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(largest error relative to the largest magnitude, share of agreeing top-1 classes)."""
    err = float(np.abs(ours - want).max() / max(float(np.abs(want).max()), 1e-12))
    agree = float(np.mean(ours.argmax(axis=1) == want.argmax(axis=1)))
    return err, agree


WARM_UP_S = 0.1  # of each block: longer than onnxruntime's worker threads spin after a run


def interleaved_ms(ours: Any, theirs: Any, repeat: int, rounds: int = 4) -> tuple[float, float]:
    """Median ms of `ours()` and of `theirs()`, timed in alternating blocks of calls (`rounds`
    blocks each, the order swapped every round, each block after `WARM_UP_S` of warm-up calls)
    so that the other jobs on a shared machine slow both alike. Blocks, not single calls in
    turn: a runtime's worker threads spin for a while after each run (onnxruntime's do by
    default), and a call right after the other runtime's finds its second core taken. One
    warm-up call was not enough: with 3 calls per block, TensorForge's MobileNetV2 at 2 threads
    took 8.0 ms right after onnxruntime's block, 3.8 ms alone (2026-11-25)."""
    ours_ms, theirs_ms, _ = interleaved_paired(ours, theirs, repeat, rounds)
    return ours_ms, theirs_ms


def interleaved_paired(
    ours: Any, theirs: Any, repeat: int, rounds: int = 4, per_block: int | None = None
) -> tuple[float, float, float]:
    """`interleaved_ms`'s medians and the paired ratio: the median over rounds of (our block's
    median / their block's median in the same round). Each round's two blocks run back to back,
    so a load that comes and goes between rounds cancels in its ratio; the ratio of the overall
    medians let one busy stretch of a shared host decide a model's row (ShuffleNetV2 2.41x in
    one run, 0.90x and 0.93x in the next two, 2026-11-29)."""
    per_block = per_block or max(1, -(-repeat // rounds))
    times: dict[int, list[float]] = {0: [], 1: []}
    ratios = []
    for r in range(rounds):
        block: dict[int, list[float]] = {0: [], 1: []}
        for which in (0, 1) if r % 2 == 0 else (1, 0):
            fn = (ours, theirs)[which]
            start = time.perf_counter()
            fn()  # warm-up: the other runtime's threads stop spinning meanwhile
            while time.perf_counter() - start < WARM_UP_S:
                fn()
            for _ in range(per_block):
                start = time.perf_counter()
                fn()
                block[which].append(time.perf_counter() - start)
        times[0] += block[0]
        times[1] += block[1]
        ratios.append(float(np.median(block[0]) / np.median(block[1])))
    return (float(np.median(times[0]) * 1e3), float(np.median(times[1]) * 1e3),
            float(np.median(ratios)))  # fmt: skip


def bench(name: str, repeat: int, with_profile: bool = False) -> dict[str, Any]:
    """Compile, check and time one model (both runtimes, 1 and 2 threads); with `with_profile`,
    the row's "profile" is both runtimes' time by op family."""
    import onnx

    import tensorforge
    from tensorforge.runtime.device.cpu import set_num_threads

    row: dict[str, Any] = {"model": name, "input": MODELS[name][1], "error": None}
    try:
        path = ensure_exported(name)
    except subprocess.CalledProcessError as exc:
        row["error"] = f"export failed: {exc}"
        return row
    model = onnx.load(str(path))
    inputs = random_inputs(model)
    row["nodes"] = len(model.graph.node)
    row["input_name"] = model.graph.input[0].name
    start = time.perf_counter()
    try:
        module = tensorforge.compile(model)
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        row["error"] = f"compile: {_first_line(exc)}"
        return row
    row["tf_compile_s"] = time.perf_counter() - start
    module.save(CACHE / f"{name}.tfm")  # for the memory child that loads it
    sessions = {t: _ort_session(path, t) for t in THREADS}
    try:
        ours = next(iter(module.run(inputs).values()))
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"run: {_first_line(exc)}"
        return row
    want = sessions[1].run(None, inputs)[0]
    row["rel_error"], row["top1_agree"] = compare(ours, want)
    if float(np.std(want)) <= 1e-4 * float(np.abs(want).max()):
        row["error"] = "degenerate: onnxruntime's output is constant, the check says nothing"
    elif row["rel_error"] > MATCH_RTOL or row["top1_agree"] < 1.0:
        row["error"] = f"mismatch: rel error {row['rel_error']:.1e}, top-1 {row['top1_agree']:.2f}"
    for t in THREADS:
        set_num_threads(t)
        sess = sessions[t]
        row[f"tf_ms_{t}"], row[f"ort_ms_{t}"], row[f"x_{t}"] = interleaved_paired(
            lambda: module.run(inputs), lambda s=sess: s.run(None, inputs), repeat,
            rounds=max(4, repeat), per_block=3,
        )  # fmt: skip
    set_num_threads(1)
    if with_profile:
        row["profile"] = profile(module, model, path, inputs, repeat)
    return row


# ---- peak memory (each runtime in a child process) -------------------------------------------


def _side_input(name: str, input_name: str) -> dict[str, np.ndarray]:
    """The input of zoo model `name` without loading the ONNX file (its weights count)."""
    side = MODELS[name][1]
    rng = np.random.default_rng(0)
    return {input_name: rng.standard_normal((1, 3, side, side)).astype(np.float32)}


def _peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM) in MiB. Not ru_maxrss: Linux carries that across
    exec, so a child forked from this large process would report the parent's size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _memory_child(runtime: str, name: str, input_name: str) -> None:
    """Load `name` with `runtime`, run it once, print the peak RSS in MiB. Runtimes:
    "tensorforge" compiles the ONNX file, "tensorforge-load" loads the saved module (.tfm),
    "onnxruntime" creates a session from the ONNX file."""
    path = CACHE / f"{name}.onnx"
    inputs = _side_input(name, input_name)
    if runtime.startswith("tensorforge"):
        import tensorforge
        from tensorforge.runtime.device.cpu import set_num_threads

        set_num_threads(1)
        if runtime == "tensorforge":
            module = tensorforge.compile(str(path))
        else:
            module = tensorforge.Module.load(path.with_suffix(".tfm"))
        module.run(inputs)
    elif runtime == "apache-tvm":
        _tvm_compile_and_run(path, inputs)
    else:
        _ort_session(path, 1).run(None, inputs)
    print(_peak_rss_mib())


def _tvm_compile_and_run(path: Path, inputs: dict[str, np.ndarray]) -> None:
    """apache-tvm's compile of the ONNX file (Relax frontend, `tvm.compile` with its default
    pipeline for the host CPU, untuned, as benchmarks/models.py does) and one run, on one thread."""
    os.environ["TVM_NUM_THREADS"] = "1"
    tvm = import_tvm()
    import onnx
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.target.codegen import llvm_get_system_cpu

    target = tvm.target.Target({"kind": "llvm", "mcpu": llvm_get_system_cpu()})
    executable = tvm.compile(from_onnx(onnx.load(str(path))), target=target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    vm["main"](*[tvm.runtime.tensor(v) for v in inputs.values()])


def measure_memory(row: dict[str, Any]) -> None:
    """Add the peak-memory columns to `row`: compiling, onnxruntime, loading the saved module
    (when there is one)."""
    name, input_name = row["model"], row["input_name"]
    row["tf_mib"] = peak_mib("tensorforge", name, input_name)
    row["ort_mib"] = peak_mib("onnxruntime", name, input_name)
    if (CACHE / f"{name}.tfm").exists():
        row["tf_load_mib"] = peak_mib("tensorforge-load", name, input_name)
    if import_tvm() is not None:
        row["tvm_mib"] = peak_mib("apache-tvm", name, input_name)


def memory_row(name: str) -> dict[str, Any]:
    """The peak-memory columns of one model alone (`--memory-only`: no compile or timing in
    this process; the saved module is the one the last full run wrote)."""
    import onnx

    graph = onnx.load(str(ensure_exported(name)), load_external_data=False).graph
    row = {"model": name, "input": MODELS[name][1], "error": None}
    row["input_name"] = graph.input[0].name
    measure_memory(row)
    return row


def memory_table(rows: list[dict[str, Any]]) -> str:
    """The peak-memory columns of `rows` as a text table, with the geometric mean and worst."""
    lines = [
        f"{'model':<26} {'tf':>6} {'tf.tfm':>6} {'ort':>6} {'tvm':>6} {'x':>6} {'x.tfm':>6} "
        f"{'x.tvm':>6}"
    ]
    keys = {"compile": RATIOS["mem compile"], "load": RATIOS["mem load"], "tvm": RATIOS["mem tvm"]}
    ratios: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        x = {k: _ratio(r, *pair) for k, pair in keys.items()}
        for k, v in x.items():
            if v is not None:
                ratios[k].append(v)
        mib = [
            f"{_fmt(r.get(k), '6.1f'):>6}" for k in ("tf_mib", "tf_load_mib", "ort_mib", "tvm_mib")
        ]
        xs = " ".join(f"{_x(x[k]):>6}" for k in keys)
        lines.append(f"{r['model']:<26} {' '.join(mib)} {xs}")
    for title, pick in (("geometric mean", _geomean), ("worst (largest)", max)):
        xs = " ".join(f"{_x(pick(ratios[k])) if ratios[k] else 'n/a':>6}" for k in keys)
        lines.append(f"{title:<26} {'':>27} {xs}")
    lines.append(
        "(peak MiB, VmHWM of a child process per runtime that loads the model and runs it once: "
        "tf compiles the ONNX file, tf.tfm loads the saved module, ort creates a session, tvm "
        "compiles with apache-tvm; x = tf / ort, x.tfm = tf.tfm / ort, x.tvm = tvm / ort)"
    )
    return "\n".join(lines)


def peak_mib(runtime: str, name: str, input_name: str) -> float | None:
    cmd = [sys.executable, __file__, "--memory", runtime, name, input_name]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        progress(f"{name}: {runtime} memory child failed: {done.stderr.strip()[-200:]}")
        return None
    return float(done.stdout.strip().splitlines()[-1])


# ---- profile: where the time goes, by op family ----------------------------------------------


def node_families(model: Any) -> dict[str, str]:
    """ONNX node name -> its op family: the op type, with Conv split into 1x1, depthwise,
    grouped and KxK (they are scheduled differently)."""
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    families = {}
    for node in model.graph.node:
        family = node.op_type
        if node.op_type == "Conv" and node.input[1] in weights:
            attrs = {a.name: a for a in node.attribute}
            group = attrs["group"].i if "group" in attrs else 1
            family = conv_family(group, weights[node.input[1]])
        families[node.name] = family
    return families


def conv_family(group: int, weight: list[int]) -> str:
    """ "Conv depthwise", "Conv grouped", "Conv 1x1" or "Conv KxK" for weights (O, I/group, ...)."""
    if group > 1:
        return "Conv depthwise" if weight[1] == 1 else "Conv grouped"
    return "Conv 1x1" if all(k == 1 for k in weight[2:]) else "Conv KxK"


def _tf_family(label: str, families: dict[str, str]) -> str:
    """The family of a TensorForge call "Op+Op (node name)": its node's, else its first op."""
    ops, _, node = label.partition(" (")
    return families.get(node.rstrip(")"), ops.split("+")[0])


def _ort_family(event: dict[str, Any], families: dict[str, str]) -> str:
    """The family of an onnxruntime node event: its ONNX node's, else its (unfused) op."""
    node = event["name"].removesuffix("_kernel_time")
    op = event["args"]["op_name"]
    shapes = [next(iter(s.values())) for s in event["args"].get("input_type_shape", [])]
    if op in ("Conv", "FusedConv") and len(shapes) > 1 and len(shapes[0]) > 1:
        family = conv_family(shapes[0][1] // shapes[1][1], shapes[1])
        if family == "Conv depthwise" and all(k == 1 for k in shapes[1][2:]):
            return "BatchNormalization"  # a lone batch norm: onnxruntime runs a 1x1 depthwise conv
        return family
    return families.get(node, {"FusedMatMul": "MatMul"}.get(op, op))


def profile(module: Any, model: Any, path: Path, inputs: dict, repeat: int) -> dict[str, Any]:
    """Milliseconds per op family (1 thread) of `module` and of onnxruntime on `path`."""
    from tensorforge.runtime.device.cpu import set_num_threads

    families = node_families(model)
    set_num_threads(1)
    ours: dict[str, float] = defaultdict(float)
    for r in module.profile(inputs, repeat=repeat).rows:
        ours[_tf_family(r.label, families)] += r.median_ms
    sess = _ort_session(path, 1, profile=True)
    for _ in range(repeat + 1):
        sess.run(None, inputs)
    theirs: dict[str, float] = defaultdict(float)
    with open(sess.end_profiling()) as f:
        events = [e for e in json.load(f) if e.get("cat") == "Node" and "op_name" in e["args"]]
    os.remove(f.name)
    for e in events:
        if e["name"].endswith("_kernel_time"):
            theirs[_ort_family(e, families)] += e["dur"] / 1e3 / (repeat + 1)
    return {"tensorforge": dict(ours), "onnxruntime": dict(theirs)}


def profile_table(name: str, prof: dict[str, Any]) -> str:
    ours, theirs = prof["tensorforge"], prof["onnxruntime"]
    families = sorted(
        set(ours) | set(theirs), key=lambda f: -abs(ours.get(f, 0) - theirs.get(f, 0))
    )
    lines = [f"{name}: ms per op family, 1 thread (a fused group counts as its anchor node's)"]
    lines.append(f"  {'family':<24} {'tensorforge':>11} {'onnxruntime':>11}")
    for fam in families[:10]:
        lines.append(f"  {fam:<24} {ours.get(fam, 0.0):>11.2f} {theirs.get(fam, 0.0):>11.2f}")
    lines.append(f"  {'total':<24} {sum(ours.values()):>11.2f} {sum(theirs.values()):>11.2f}")
    return "\n".join(lines)


# ---- report ----------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import onnxruntime

    import tensorforge

    return {
        "cpu": cpu_model(),
        "cpus": len(os.sched_getaffinity(0)),
        "load": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "tensorforge": getattr(tensorforge, "__version__", "?"),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def _ratio(row: dict[str, Any], ours: str, theirs: str) -> float | None:
    """ours / theirs of `row`; for run times, the paired ratio (`interleaved_paired`) where the
    row has one (rows saved before it have only the medians)."""
    paired = row.get(ours.replace("tf_ms_", "x_")) if ours.startswith("tf_ms_") else None
    if paired:
        return paired
    a, b = row.get(ours), row.get(theirs)
    return a / b if a and b else None


# column title -> (tensorforge key, onnxruntime key): the ratios the table shows
RATIOS = {
    "1 thread": ("tf_ms_1", "ort_ms_1"),
    "2 threads": ("tf_ms_2", "ort_ms_2"),
    "mem compile": ("tf_mib", "ort_mib"),
    "mem load": ("tf_load_mib", "ort_mib"),
    "mem tvm": ("tvm_mib", "ort_mib"),  # apache-tvm's compile, when it ran (memory table only)
}


def _x(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio else "n/a"


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a text table, with the geometric mean and the worst of each ratio."""
    head = (
        f"{'model':<26} {'tf ms':>7} {'ort ms':>7} {'x':>5} | {'tf ms':>7} {'ort ms':>7} "
        f"{'x':>5} | {'tf':>5} {'tf.tfm':>6} {'ort':>5} {'x':>5} {'x.tfm':>5} | "
        f"{'rel err':>7} {'compile s':>9}"
    )
    lines = [
        f"{'':<26} {'1 thread':^21} | {'2 threads':^21} | {'peak memory, MiB':^31} |",
        head,
        "-" * len(head),
    ]
    ratios: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("tf_ms_1") is None:
            lines.append(f"{r['model']:<26} FAILS: {r['error']}")
            continue
        x = {k: _ratio(r, *keys) for k, keys in RATIOS.items()}
        for k, v in x.items():
            if v is not None:
                ratios[k].append(v)
        note = f"  ({r['error']})" if r["error"] else ""
        lines.append(
            f"{r['model']:<26} {r['tf_ms_1']:>7.2f} {r['ort_ms_1']:>7.2f} {_x(x['1 thread']):>5} | "
            f"{r['tf_ms_2']:>7.2f} {r['ort_ms_2']:>7.2f} {_x(x['2 threads']):>5} | "
            f"{_fmt(r.get('tf_mib'), '5.0f'):>5} {_fmt(r.get('tf_load_mib'), '6.0f'):>6} "
            f"{_fmt(r.get('ort_mib'), '5.0f'):>5} {_x(x['mem compile']):>5} "
            f"{_x(x['mem load']):>5} | "
            f"{r['rel_error']:>7.1e} {r['tf_compile_s']:>9.1f}{note}"
        )
    lines.append("-" * len(head))
    for title, pick in (("geometric mean", _geomean), ("worst (largest)", max)):
        v = {k: _x(pick(ratios[k])) if ratios[k] else "n/a" for k in RATIOS}
        lines.append(
            f"{title:<26} {'':>15} {v['1 thread']:>5} | {'':>15} {v['2 threads']:>5} | "
            f"{'':>17} {v['mem compile']:>5} {v['mem load']:>5} |"
        )
    lines.append(
        "(median ms per batch-1 inference; x = tensorforge / onnxruntime; peak memory: VmHWM of a "
        "child process that loads the model, tf by compiling the ONNX file, tf.tfm by loading the "
        "saved module, ort by creating a session, and runs it once)"
    )
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (README), failures and mismatches noted in the last column."""
    lines = [
        "| model | 1 thread: TF ms | ORT ms | TF/ORT | 2 threads: TF ms | ORT ms | TF/ORT "
        "| peak MiB: TF | TF .tfm | ORT | TF/ORT | TF .tfm/ORT | rel. error |",
        "|---|" + "---|" * 12,
    ]
    for r in rows:
        if r.get("tf_ms_1") is None:
            lines.append(f"| {r['model']} | fails: {r['error']} |" + " |" * 11)
            continue
        x = {k: _x(_ratio(r, *keys)) for k, keys in RATIOS.items()}
        mib = [_fmt(r.get(k), ".0f") for k in ("tf_mib", "tf_load_mib", "ort_mib")]
        note = f" ({r['error']})" if r["error"] else ""
        lines.append(
            f"| {r['model']} ({r['input']}) | {r['tf_ms_1']:.1f} | {r['ort_ms_1']:.1f} | "
            f"{x['1 thread']} | {r['tf_ms_2']:.1f} | {r['ort_ms_2']:.1f} | {x['2 threads']} | "
            f"{' | '.join(mib)} | {x['mem compile']} | {x['mem load']} | "
            f"{r['rel_error']:.1e}{note} |"
        )
    ratios = {k: [v for r in rows if (v := _ratio(r, *keys))] for k, keys in RATIOS.items()}
    for title, pick in (("geometric mean", _geomean), ("worst", max)):
        v = {k: _x(pick(ratios[k])) if ratios[k] else "n/a" for k in RATIOS}
        lines.append(
            f"| **{title}** | | | **{v['1 thread']}** | | | **{v['2 threads']}** | | | | "
            f"**{v['mem compile']}** | **{v['mem load']}** | |"
        )
    return "\n".join(lines)


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--profile", action="store_true", help="add op-family profiles")
    parser.add_argument("--skip-memory", action="store_true", help="no peak-memory children")
    parser.add_argument(
        "--memory-only", action="store_true", help="only the peak-memory children, no timing"
    )
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--memory", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--load", metavar="JSON", help="print the report of a --json output")
    parser.add_argument("--markdown", action="store_true", help="with --load: a Markdown table")
    args = parser.parse_args()
    if args.load:
        saved = json.loads(Path(args.load).read_text())
        if all("tf_ms_1" not in r and "tf_mib" in r for r in saved["rows"]):  # --memory-only
            print(memory_table(saved["rows"]))
        elif args.markdown:
            print(markdown(saved["rows"]))
        else:
            report(saved["machine"], saved["rows"])
        return 0
    if args.export:
        export(args.export, CACHE / f"{args.export}.onnx")
        return 0
    if args.memory:
        _memory_child(*args.memory)
        return 0
    names = args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; the zoo has {', '.join(MODELS)}")
    missing = [n for n in names if not (CACHE / f"{n}.onnx").exists()]
    if missing and not all(importlib.util.find_spec(m) for m in ("torch", "torchvision")):
        from tensorforge.extras import install_hint

        parser.error(
            f"exporting {', '.join(missing)} needs torch and torchvision: "
            f"{install_hint('torchvision')} (or put the .onnx files in build/zoo/)"
        )
    info = machine()
    if args.memory_only:
        rows = [memory_row(name) for name in names]
        print(json.dumps({"machine": info, "rows": rows}, indent=1) if args.json else
              memory_table(rows))  # fmt: skip
        return 0
    rows = []
    for k, name in enumerate(names):
        progress(f"{name} ({k + 1}/{len(names)})")
        row = bench(name, args.repeat, args.profile)
        if not args.skip_memory and row.get("tf_ms_1") is not None:
            measure_memory(row)
        progress(
            f"{name}: "
            + (row["error"] if row["error"] and "tf_ms_1" not in row else
               f"tf {row['tf_ms_1']:.1f} ms, ort {row['ort_ms_1']:.1f} ms (1 thread)")
        )  # fmt: skip
        rows.append(row)
    if args.json:
        print(json.dumps({"machine": info, "rows": rows}, indent=1))
        return 0
    report(info, rows)
    return 0


def report(info: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Print the machine, the table and the profiles (rows that have one)."""
    print(
        f"machine: {info['cpu']}, {info['cpus']} CPUs (shared), load {info['load']}, "
        f"Python {info['python']}, onnxruntime {info['onnxruntime']}, {info['date']}"
    )
    print(table(rows))
    for row in rows:
        if "profile" in row:
            print()
            print(profile_table(row["model"], row["profile"]))


if __name__ == "__main__":
    raise SystemExit(main())
