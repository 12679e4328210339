"""Coverage beyond the zoo: architectures benchmarks/zoo.py does not time, compiled and checked
against onnxruntime (no timing), to see that what holds on the zoo holds on models the project
was not tuned on.

The models: torchvision classifiers, segmentation and video networks the zoo leaves out (random
weights, batch norm statistics from random batches as in zoo.py), at reduced input sizes to keep
the run short, and torch.nn building blocks users bring (transformer encoder layers and causal
attention through the dynamo exporter, MultiheadAttention, an `einsum` attention, LSTM and GRU),
all exported by torch at opset 17: TorchScript first, dynamo where that fails or where named.
Each model is exported, compiled by `tensorforge.compile` (defaults) and compared in a child
process of its own, so a crash is a row, not a lost run. A row gives the largest error
relative to the output's magnitude, whether the top-1 class (per position for dense outputs)
agrees, and the compile time; a model matches when its error is at most `MATCH_RTOL` (a
per-pixel argmax may flip where two classes tie within it).

Needs the `zoo` extra (torch, torchvision, onnxscript, onnxruntime).

Usage:
    python benchmarks/coverage.py [--models swin_t,lstm] [--json]
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
from zoo import ROOT, _OutOnly, calibrate_batch_norm, compare, export_torch, machine, progress

CACHE = ROOT / "build" / "coverage"
MATCH_RTOL = 1e-3

# name -> (torchvision constructor or "nn:<block>", input shape without the batch, exporter)
MODELS: dict[str, tuple[str, tuple[int, ...], str]] = {
    "resnext50_32x4d": ("resnext50_32x4d", (3, 160, 160), "torchscript"),
    "wide_resnet50_2": ("wide_resnet50_2", (3, 128, 128), "torchscript"),
    "vgg11_bn": ("vgg11_bn", (3, 224, 224), "torchscript"),
    "alexnet": ("alexnet", (3, 224, 224), "torchscript"),
    "squeezenet1_0": ("squeezenet1_0", (3, 160, 160), "torchscript"),
    "shufflenet_v2_x0_5": ("shufflenet_v2_x0_5", (3, 160, 160), "torchscript"),
    "mnasnet0_5": ("mnasnet0_5", (3, 160, 160), "torchscript"),
    "efficientnet_b1": ("efficientnet_b1", (3, 160, 160), "torchscript"),
    "efficientnet_v2_s": ("efficientnet_v2_s", (3, 160, 160), "torchscript"),
    "regnet_x_400mf": ("regnet_x_400mf", (3, 160, 160), "torchscript"),
    "regnet_y_800mf": ("regnet_y_800mf", (3, 160, 160), "torchscript"),
    "convnext_small": ("convnext_small", (3, 128, 128), "torchscript"),
    "swin_t": ("swin_t", (3, 224, 224), "dynamo"),
    "maxvit_t": ("maxvit_t", (3, 224, 224), "dynamo"),
    "vit_b_32": ("vit_b_32", (3, 224, 224), "torchscript"),
    "deeplabv3_mobilenet_v3_large": (
        "segmentation.deeplabv3_mobilenet_v3_large",
        (3, 160, 160),
        "torchscript",
    ),  # noqa: E501
    "fcn_resnet50": ("segmentation.fcn_resnet50", (3, 128, 128), "torchscript"),
    "r3d_18": ("video.r3d_18", (3, 8, 64, 64), "torchscript"),
    "r2plus1d_18": ("video.r2plus1d_18", (3, 8, 64, 64), "torchscript"),
    "transformer_encoder": ("nn:encoder", (20, 64), "dynamo"),
    "causal_transformer": ("nn:causal", (12,), "dynamo"),
    "multihead_attention": ("nn:mha", (7, 48), "dynamo"),
    "einsum_attention": ("nn:einsum", (8, 5, 16), "dynamo"),
    "lstm": ("nn:lstm", (9, 16), "torchscript"),
    "gru_bidirectional": ("nn:gru", (9, 16), "torchscript"),
    "style_transfer": ("nn:style", (3, 64, 64), "torchscript"),
    "groupnorm_resblock": ("nn:resblock", (64, 16, 16), "dynamo"),
    "espcn_argmax": ("nn:espcn", (1, 32, 32), "torchscript"),
}


def _block(kind: str) -> Any:
    import torch

    nn = torch.nn

    class Causal(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(100, 32)
            self.layer = nn.TransformerEncoderLayer(32, 2, 64, batch_first=True)
            self.head = nn.Linear(32, 100)

        def forward(self, ids: Any) -> Any:
            n = ids.shape[1]
            mask = torch.triu(torch.full((n, n), float("-inf")), 1)
            return self.head(self.layer(self.emb(ids), src_mask=mask))

    class Mha(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(48, 4, batch_first=True)

        def forward(self, x: Any) -> Any:
            return self.attn(x, x, x, need_weights=False)[0]

    class Einsum(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 16, 16) / 4)

        def forward(self, x: Any) -> Any:
            return torch.einsum("bhnd,hde->bhne", x, self.w).softmax(-1)

    class Recurrent(nn.Module):
        def __init__(self, cell: Any) -> None:
            super().__init__()
            self.cell = cell

        def forward(self, x: Any) -> Any:
            return self.cell(x)[0]

    class Style(nn.Module):  # fast style transfer: instance norms, a residual, upsampling
        def __init__(self) -> None:
            super().__init__()
            self.down = nn.Sequential(
                nn.Conv2d(3, 16, 9, padding=4), nn.InstanceNorm2d(16, affine=True), nn.ReLU(),
                nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.InstanceNorm2d(32, affine=True),
                nn.ReLU(),
            )  # fmt: skip
            self.res = nn.Sequential(
                nn.Conv2d(32, 32, 3, padding=1), nn.InstanceNorm2d(32, affine=True), nn.ReLU(),
                nn.Conv2d(32, 32, 3, padding=1), nn.InstanceNorm2d(32, affine=True),
            )  # fmt: skip
            self.up = nn.Sequential(
                nn.Upsample(scale_factor=2), nn.Conv2d(32, 16, 3, padding=1),
                nn.InstanceNorm2d(16, affine=True), nn.ReLU(), nn.Conv2d(16, 3, 9, padding=4),
            )  # fmt: skip

        def forward(self, x: Any) -> Any:
            h = self.down(x)
            return self.up(h + self.res(h))

    class ResBlock(nn.Module):  # a diffusion UNet's: GroupNorm(32), SiLU, convolutions
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.GroupNorm(32, 64), nn.SiLU(), nn.Conv2d(64, 64, 3, padding=1),
                nn.GroupNorm(32, 64), nn.SiLU(), nn.Conv2d(64, 64, 3, padding=1),
            )  # fmt: skip

        def forward(self, x: Any) -> Any:
            return x + self.body(x)

    class Espcn(nn.Module):  # super-resolution by PixelShuffle, then a per-pixel ArgMax
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(1, 32, 5, padding=2), nn.Tanh(), nn.Conv2d(32, 36, 3, padding=1),
                nn.PixelShuffle(3),
            )  # fmt: skip

        def forward(self, x: Any) -> Any:
            y = self.body(x)
            return y, y.argmax(dim=1)

    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, norm_first=True)
    return {
        "encoder": lambda: nn.TransformerEncoder(layer, 2),
        "causal": Causal,
        "mha": Mha,
        "einsum": Einsum,
        "lstm": lambda: Recurrent(nn.LSTM(16, 32, batch_first=True)),
        "gru": lambda: Recurrent(nn.GRU(16, 32, batch_first=True, bidirectional=True)),
        "style": Style,
        "resblock": ResBlock,
        "espcn": Espcn,
    }[kind]()


def _torch_model(name: str) -> tuple[Any, Any]:
    """(model in eval mode, example input) of `name`."""
    import torch
    import torchvision

    ctor, shape, _ = MODELS[name]
    torch.manual_seed(0)
    if ctor.startswith("nn:"):
        model = _block(ctor[3:])
        x = torch.randint(0, 100, (1, *shape)) if ctor == "nn:causal" else torch.randn(1, *shape)
        return model.eval(), x
    module = torchvision.models
    for part in ctor.split(".")[:-1]:
        module = getattr(module, part)
    kwargs = {"weights_backbone": None, "aux_loss": False} if "segmentation." in ctor else {}
    model = getattr(module, ctor.split(".")[-1])(weights=None, **kwargs)
    if hasattr(model, "heads"):  # torchvision zeroes ViT's head: every class would score 0
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    if len(shape) == 3:
        calibrate_batch_norm(model, shape[-1])
    if "segmentation." in ctor:
        model = _OutOnly(model)
    return model.eval(), torch.randn(1, *shape)


def export(name: str, path: Path) -> str:
    model, x = _torch_model(name)
    return export_torch(model, x, path, name, torchscript=MODELS[name][2] == "torchscript")


def check(name: str, path: Path) -> dict[str, Any]:
    """Compile `path` and compare with onnxruntime on one random input (in this process)."""
    import onnx
    import onnxruntime as ort

    import tensorforge

    graph_input = onnx.load(str(path), load_external_data=False).graph.input[0]
    dims = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    if graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT64:
        x = rng.integers(0, 100, dims).astype(np.int64)
    else:
        x = rng.standard_normal(dims).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = session.run(None, {graph_input.name: x})[0]
    start = time.perf_counter()
    module = tensorforge.compile(str(path), progress=False)
    compile_s = time.perf_counter() - start
    got = next(iter(module.run({graph_input.name: x}).values()))
    flat = lambda a: a.reshape(a.shape[0], a.shape[1], -1) if a.ndim > 2 else a  # noqa: E731
    err, agree = compare(flat(got), flat(want))
    return {"rel_error": err, "top1": agree, "compile_s": round(compile_s, 1)}


def _child(step: str, name: str, timeout_s: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, f"--{step}", name]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"{step} took over {timeout_s:.0f} s"}
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()] or ["(no output)"]
        return {"error": f"{step} failed (exit {done.returncode}): {lines[-1][:200]}"}
    return json.loads(done.stdout.strip().splitlines()[-1]) if step == "check" else {}


def run(name: str) -> dict[str, Any]:
    path = CACHE / f"{name}.onnx"
    if not path.exists():
        progress(f"{name}: exporting")
        result = _child("export", name, 900)
        if "error" in result:
            return {"model": name, **result}
    progress(f"{name}: compiling and checking")
    return {"model": name, **_child("check", name, 1800)}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | input | rel. error | top-1 agrees | compile s | result |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for row in rows:
        shape = "x".join(str(d) for d in MODELS[row["model"]][1])
        if "error" in row:
            lines.append(f"| {row['model']} | {shape} | | | | {row['error']} |")
            continue
        ok = row["rel_error"] <= MATCH_RTOL  # a top-1 flip at a near tie is not a mismatch
        lines.append(
            f"| {row['model']} | {shape} | {row['rel_error']:.1e} | {row['top1']:.2%} | "
            f"{row['compile_s']} | {'matches' if ok else 'MISMATCH'} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--check", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export:
        print(export(args.export, CACHE / f"{args.export}.onnx"))
        return 0
    if args.check:
        print(json.dumps(check(args.check, CACHE / f"{args.check}.onnx")))
        return 0
    names = args.models.split(",") if args.models else list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"--models must be among {sorted(MODELS)}, not {unknown}")
    rows = [run(name) for name in names]
    print(f"\nmachine: {machine()}\n")
    print(table(rows))
    if args.json:
        print(json.dumps(rows))
    return 1 if any("error" in r or r["rel_error"] > MATCH_RTOL for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
