"""Whole torchvision detectors: the backbone and heads compiled, the box selection run as the
module's data-dependent tail (docs/compile.md, "Data-dependent shapes"), against onnxruntime.

Each detector is exported once by torch's TorchScript exporter (opset 17, random weights seeded,
batch 1, a square image of the size given) to build/detectors/<name>.onnx, then compiled by
`tensorforge.compile` in a child process of its own, run on one random image and compared with
onnxruntime output by output: the shapes (how many boxes were kept) must agree and the values
match within `MATCH_RTOL` of each output's largest magnitude. Both runtimes are timed at one
thread (`zoo.interleaved_ms`), and so is the compiled part alone, so the table shows what the
tail costs. With random weights every candidate box passes the detectors' score thresholds, so
NMS sees thousands of boxes: a harder case for the tail than a trained model's.

Needs the `zoo` extra (torch, torchvision, onnxruntime).

Usage:
    python benchmarks/detectors.py [--models ssdlite320_mobilenet_v3_large,fcos_resnet50_fpn]
        [--repeat 6] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from machine import cpu_model
from zoo import ROOT, interleaved_ms

CACHE = ROOT / "build" / "detectors"
MATCH_RTOL = 1e-3
CHILD_LIMIT_S = 1800
#: detector -> image side (torchvision's detection models resize to their own minimum size,
#: 320 for the *_320_* ones; the others are run at 320 too, to keep the benchmark short)
MODELS = {
    "ssdlite320_mobilenet_v3_large": 320,
    "fasterrcnn_mobilenet_v3_large_320_fpn": 320,
    "fcos_resnet50_fpn": 320,
    "retinanet_resnet50_fpn": 320,
    "ssd300_vgg16": 300,
    "maskrcnn_resnet50_fpn": 320,
}


def export(name: str, side: int, path: Path) -> None:
    import torch
    import torchvision

    torch.manual_seed(0)
    build = getattr(torchvision.models.detection, name)
    resized = name.startswith(("fasterrcnn", "maskrcnn", "keypointrcnn", "retinanet", "fcos"))
    extra = {"min_size": side, "max_size": side} if resized else {}
    model = build(weights=None, weights_backbone=None, **extra).eval()
    x = torch.rand(1, 3, side, side)
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(path), opset_version=17, input_names=["images"],
                          dynamo=False)  # fmt: skip


def check(path: Path, repeat: int) -> dict[str, Any]:
    """Compile `path`, compare every output with onnxruntime's, time both at one thread."""
    import onnx
    import onnxruntime as ort

    import tensorforge
    from tensorforge.runtime.device.cpu import set_num_threads

    model = onnx.load(str(path), load_external_data=False)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).uniform(0, 1, dims).astype(np.float32)
    feeds = {model.graph.input[0].name: x}
    start = time.perf_counter()
    module = tensorforge.compile(str(path))
    compile_s = time.perf_counter() - start
    set_num_threads(1)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = module.run(feeds)
    worst, shapes_agree = 0.0, True
    for value, expected in zip(got.values(), want, strict=True):
        if value.shape != expected.shape:
            shapes_agree = False
            continue
        scale = float(np.abs(expected).max()) if expected.size else 1.0
        error = float(np.abs(value.astype(np.float64) - expected).max()) if value.size else 0.0
        worst = max(worst, error / max(scale, 1e-30))
    tail_nodes = len(onnx.load_from_string(module.tail.model).graph.node) if module.tail else 0
    ours, theirs = interleaved_ms(lambda: module.run(feeds), lambda: session.run(None, feeds),
                                  repeat)  # fmt: skip
    tail, module.tail = module.tail, None
    part, _ = interleaved_ms(lambda: module.run(feeds), lambda: None, max(2, repeat // 2), 2)
    module.tail = tail
    return {
        "nodes": len(model.graph.node),
        "tail_nodes": tail_nodes,
        "handed": len(tail.inputs) if tail else 0,
        "boxes": int(next(iter(got.values())).shape[0]),
        "match": shapes_agree and worst <= MATCH_RTOL,
        "error": worst,
        "compile_s": compile_s,
        "ours_ms": ours,
        "part_ms": part,
        "ort_ms": theirs,
    }


def row(name: str, side: int, repeat: int) -> dict[str, Any]:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{name}_{side}.onnx"
    if not path.exists():
        try:
            export(name, side, path)
        except Exception as exc:  # noqa: BLE001  (an export failure is a row, not a crash)
            return {"model": name, "status": f"export failed: {type(exc).__name__}: {exc}"[:200]}
    command = [sys.executable, __file__, "--child", str(path), "--repeat", str(repeat)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        return {"model": name, "status": f"over {CHILD_LIMIT_S} s"}
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"model": name, "status": "failed: " + (lines[-1] if lines else "?")[:200]}
    return {"model": name, "side": side, "status": "ok", **json.loads(done.stdout.splitlines()[-1])}


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| detector | nodes | tail nodes | values handed over | boxes | matches ORT | "
            "compile s | TF ms | compiled part ms | ORT ms | TF/ORT |")  # fmt: skip
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['model']} | {r['status']} |" + " |" * 9)
            continue
        lines.append(
            f"| {r['model']} {r['side']}x{r['side']} | {r['nodes']} | {r['tail_nodes']} | "
            f"{r['handed']} | {r['boxes']} | {'yes' if r['match'] else 'NO'} "
            f"({r['error']:.1e}) | {r['compile_s']:.0f} | {r['ours_ms']:.0f} | "
            f"{r['part_ms']:.0f} | {r['ort_ms']:.0f} | {r['ours_ms'] / r['ort_ms']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=6)
    parser.add_argument("--markdown", action="store_true", help="print only the table")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(check(Path(args.child), args.repeat)))
        return 0
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"--models names {unknown}; known: {', '.join(MODELS)}")
    rows = []
    for name in names:
        if not args.markdown:
            print(f"{name} ...", file=sys.stderr, flush=True)
        rows.append(row(name, MODELS[name], args.repeat))
    if not args.markdown:
        print(f"machine: {cpu_model()}; one thread each; batch 1; random weights")
    print(table(rows))
    return 0 if all(r["status"] == "ok" and r["match"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
