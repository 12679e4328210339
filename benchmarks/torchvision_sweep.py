"""Torchvision sweep: every model torchvision builds, through both of torch's ONNX exporters,
compiled by TensorForge and checked and timed against onnxruntime.

The models are torchvision's own registry (`torchvision.models.list_models`): every classifier,
segmentation, video and optical-flow network, and the backbone (with FPN where it has one) of
every detector, whose box selection needs shapes that depend on the data (refused with that
reason). Random weights (seeded; batch-norm statistics from random batches as in zoo.py, video
networks' too), batch 1, small inputs: 64x64 images (224 where a model's pooling or windows need
it: AlexNet, VGG, MaxViT; ViTs are built for 64), 128x128 for detector backbones and RAFT (4
flow updates), 96x96 for segmentation, 8x64x64 clips (16x224x224 for S3D and MViT, which need
them). Each model is exported twice, by the TorchScript exporter at opset 17 (MHA fast path off,
else ViTs fail) and by the dynamo exporter at opset 18; an export that fails or takes over
`EXPORT_LIMIT_S` is a row saying so. Each file is compiled (`tensorforge.compile`, defaults) in
a child process of its own, its outputs compared with onnxruntime's (the largest error relative
to the output's largest magnitude, over all outputs; a match is at most `MATCH_RTOL`), and both
runtimes timed at one thread (`zoo.interleaved_ms`). Names take an input size as `name@HxW`.

`timm:<name>` runs a model of timm (`pip install timm`, PyTorch Image Models: random weights,
its default input size, batch-norm statistics set the same way); `--models timm` runs
`TIMM_PICKS`, one or two small members of each of 76 timm architecture families that torchvision
does not have (selective-kernel, split-attention and ghost modules, MobileViT, LeViT, XCiT,
CaiT, Swin, PVT, Twins, HRNet, DPN, normalizer-free nets, RepVGG and FastViT, EfficientViT,
MLP-Mixer, gMLP, sequencer LSTMs, halo/lambda/bottleneck attention, EVA-02, Hiera, MaxViT, ...).

Rows are appended to build/torchvision_sweep/rows.jsonl as they finish, and a model already
there is not run again (delete the file to start over), so a long sweep can be resumed.

Needs the `zoo` extra (torch, torchvision, onnxscript, onnxruntime).

Usage:
    python benchmarks/torchvision_sweep.py \
        [--models resnet18,video:r3d_18,detection:fcos_resnet50_fpn]
        [--exporters ts,dynamo] [--list] [--markdown]
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
from zoo import ROOT, interleaved_ms

CACHE = ROOT / "build" / "torchvision_sweep"
ROWS = CACHE / "rows.jsonl"
MATCH_RTOL = 1e-3
EXPORT_LIMIT_S = 120
CHECK_LIMIT_S = 900
FAMILIES = ("", "segmentation", "video", "optical_flow", "detection")  # name prefixes, e.g. video:


#: one or two small members of each timm family that torchvision lacks (`--models timm`)
TIMM_PICKS = """
resnet18d seresnext26d_32x4d skresnet18 res2net50_14w_8s resnest14d ghostnet_100 ghostnetv2_100
lcnet_050 mixnet_s tinynet_e efficientnet_lite0 efficientnetv2_rw_t rexnet_100 hardcorenas_a
fbnetv3_b mobilenetv4_conv_small mobilevit_xxs mobilevitv2_050 edgenext_xx_small
efficientformer_l1 efficientformerv2_s0 levit_128s poolformer_s12 coat_lite_tiny cait_xxs24_224
xcit_nano_12_p16_224 deit_tiny_patch16_224 swin_tiny_patch4_window7_224 pvt_v2_b0
twins_svt_small tresnet_m dla34 dpn68 hrnet_w18_small cspresnet50 ese_vovnet19b_dw selecsls42b
nf_resnet26 gernet_s repvgg_a0 convnextv2_atto fastvit_t8 repvit_m0_9 efficientvit_b0
efficientvit_m0 tiny_vit_5m_224 coatnet_nano_rw_224 gcvit_xxtiny sequencer2d_s
crossvit_tiny_240 eva02_tiny_patch14_224 focalnet_tiny_srf davit_tiny visformer_tiny pit_ti_224
halonet26t lambda_resnet26t gmlp_ti16_224 mixer_s16_224 convit_tiny mvitv2_tiny inception_v4
xception41 botnet26t_256 hgnetv2_b0 starnet_s1 mambaout_femto fasternet_t0 shvit_s1
inception_next_atto rdnet_tiny hiera_tiny_224 maxvit_nano_rw_256 volo_d1_224 resmlp_12_224
nest_tiny_jx
""".split()


def all_models() -> list[str]:
    import torchvision

    names = []
    for family in FAMILIES:
        module = getattr(torchvision.models, family) if family else torchvision.models
        prefix = f"{family}:" if family else ""
        names += [prefix + n for n in torchvision.models.list_models(module=module)]
    return names


def input_shapes(name: str) -> list[tuple[int, ...]]:
    """The example inputs' shapes (without the batch) of `name` (`family:ctor[@HxW]`)."""
    base, _, size = name.partition("@")
    family, _, ctor = base.rpartition(":")
    if family == "timm":
        import timm

        shapes = [tuple(timm.models.get_pretrained_cfg(ctor).input_size)]
    elif family == "video":
        big = ctor == "s3d" or ctor.startswith("mvit")
        shapes = [(3, 16, 224, 224) if big else (3, 8, 64, 64)]
    elif family == "optical_flow":
        shapes = [(3, 128, 128)] * 2
    else:
        big = ctor in ("alexnet", "maxvit_t") or ctor.startswith("vgg")
        side = {"detection": 128, "segmentation": 96}.get(family, 224 if big else 64)
        shapes = [(3, side, side)]
    if size:
        h, w = (int(v) for v in size.split("x"))
        shapes = [(*s[:-2], h, w) for s in shapes]
    return shapes


def _torch_model(name: str) -> Any:
    import torch
    import torchvision

    family, _, ctor = name.partition("@")[0].rpartition(":")
    torch.manual_seed(0)
    if family == "timm":
        import timm

        model = timm.create_model(ctor, pretrained=False)
        for layer in model.get_classifier().modules():  # a Linear or a head holding one
            if isinstance(layer, torch.nn.Linear) and not layer.weight.any():
                # timm zeroes some heads (MLP-Mixer, Sequencer): every logit would be the bias
                torch.nn.init.normal_(layer.weight, std=0.02)
        _calibrate_batch_norm(model, input_shapes(name)[0])
        return _Outputs(model, family)
    module = getattr(torchvision.models, family) if family else torchvision.models
    kwargs: dict[str, Any] = {}
    if family in ("segmentation", "detection"):
        kwargs = {"weights_backbone": None}
    if ctor.startswith("vit_"):
        kwargs["image_size"] = 64
    if ctor in ("googlenet", "inception_v3"):
        kwargs.update(init_weights=True, aux_logits=False)
    model = getattr(module, ctor)(weights=None, **kwargs)
    if hasattr(model, "heads"):  # torchvision zeroes ViT's head: every class would score 0
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    if family in ("", "segmentation", "video"):
        _calibrate_batch_norm(model, input_shapes(name)[0])
    return _Outputs(model.backbone if family == "detection" else model, family)


def _calibrate_batch_norm(model: Any, shape: tuple[int, ...]) -> None:
    """zoo.calibrate_batch_norm for inputs of any shape (video clips too): without it S3D's
    logits hardly depend on its input (1e-8 apart for two clips), and the check says little."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the calibration batches
    if norms:
        model.train()
        with torch.no_grad():
            for _ in range(2):
                model(torch.randn(2, *shape))


def _Outputs(model: Any, family: str) -> Any:  # noqa: N802 - a class factory: torch is lazy
    import torch

    class Outputs(torch.nn.Module):
        """The model's tensors as a tuple (dicts' values; RAFT's last flow, 4 updates)."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, *xs: Any) -> Any:
            if family == "optical_flow":
                return self.inner(*xs, num_flow_updates=4)[-1]
            out = self.inner(*xs)
            return tuple(out.values()) if isinstance(out, dict) else out

    return Outputs().eval()


def export(name: str, exporter: str, path: Path) -> None:
    import torch

    model = _torch_model(name)
    xs = tuple(torch.randn(1, *s) for s in input_shapes(name))
    with torch.no_grad():
        if exporter == "ts":
            torch.backends.mha.set_fastpath_enabled(False)  # else _native_multi_head_attention
            torch.onnx.export(model, xs, str(path), opset_version=17, dynamo=False)
        else:
            torch.onnx.export(model, xs, dynamo=True, opset_version=18).save(str(path))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def check(path: Path) -> dict[str, Any]:
    """Compile `path`, compare every output with onnxruntime's, time both at one thread."""
    import onnx
    import onnxruntime as ort

    import tensorforge
    from tensorforge.runtime.device.cpu import set_num_threads

    model = onnx.load(str(path), load_external_data=False)
    weights = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
        for i in model.graph.input
        if i.name not in weights
    }
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    start = time.perf_counter()
    try:
        module = tensorforge.compile(str(path), progress=False)
    except Exception as exc:  # noqa: BLE001 - every failure is a row
        return {"error": f"compile: {_first_line(exc)}"}
    row: dict[str, Any] = {"compile_s": round(time.perf_counter() - start, 1)}
    got = list(module.run(feeds).values())
    row["rel_error"] = max(
        float(np.abs(g - w).max() / max(float(np.abs(w).max()), 1e-12))
        if g.shape == w.shape
        else float("inf")
        for g, w in zip(got, want, strict=True)
    )
    set_num_threads(1)
    start = time.perf_counter()
    session.run(None, feeds)
    repeat = int(min(8, max(2, 3.0 / max(time.perf_counter() - start, 1e-4))))
    row["tf_ms"], row["ort_ms"] = interleaved_ms(
        lambda: module.run(feeds), lambda: session.run(None, feeds), repeat, rounds=2
    )
    return row


def _child(args: list[str], limit_s: float) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, __file__, *args], capture_output=True, text=True, timeout=limit_s
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{args[0][2:]}: over {limit_s:.0f} s"}
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()] or ["(no output)"]
        errors = [ln for ln in lines if "Error" in ln and ":" in ln and not ln.startswith(" ")]
        return {"error": f"{args[0][2:]} (exit {done.returncode}): {(errors or lines)[-1][:300]}"}
    return json.loads(done.stdout.strip().splitlines()[-1]) if args[0] == "--check" else {}


def run(name: str, exporter: str) -> dict[str, Any]:
    path = CACHE / f"{name.replace(':', '_').replace('@', '_')}.{exporter}.onnx"
    row: dict[str, Any] = {"model": name, "exporter": exporter}
    if not path.exists():
        print(f"[sweep] {name} ({exporter}): exporting", file=sys.stderr, flush=True)
        row.update(_child(["--export", name, exporter, str(path)], EXPORT_LIMIT_S))
        if "error" in row:
            return row
    print(f"[sweep] {name} ({exporter}): compiling and checking", file=sys.stderr, flush=True)
    row.update(_child(["--check", str(path)], CHECK_LIMIT_S))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | exporter | compiles | rel. error | TF ms | ORT ms | TF/ORT | note |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "error" in r:
            compiles = "no" if r["error"].startswith("compile") else "-"
            lines.append(f"| {r['model']} | {r['exporter']} | {compiles} | | | | | {r['error']} |")
            continue
        note = "matches" if r["rel_error"] <= MATCH_RTOL else "MISMATCH"
        lines.append(
            f"| {r['model']} | {r['exporter']} | yes | {r['rel_error']:.1e} | {r['tf_ms']:.1f} | "
            f"{r['ort_ms']:.1f} | {r['tf_ms'] / r['ort_ms']:.2f}x | {note} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated names (default: all of torchvision's)")
    parser.add_argument("--exporters", default="ts,dynamo", help="ts, dynamo or both")
    parser.add_argument("--list", action="store_true", help="print the model names and stop")
    parser.add_argument("--markdown", action="store_true", help="print the saved rows' table")
    parser.add_argument("--export", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--check", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export:
        export(args.export[0], args.export[1], Path(args.export[2]))
        return 0
    if args.check:
        print(json.dumps(check(Path(args.check))))
        return 0
    saved = [json.loads(ln) for ln in ROWS.read_text().splitlines()] if ROWS.exists() else []
    if args.markdown:
        print(table(saved))
        return 0
    names = args.models.split(",") if args.models else all_models()
    if names == ["timm"]:
        names = [f"timm:{n}" for n in TIMM_PICKS]
    if args.list:
        print("\n".join(names))
        return 0
    CACHE.mkdir(parents=True, exist_ok=True)
    done = {(r["model"], r["exporter"]) for r in saved}
    rows = []
    for name in names:
        for exporter in args.exporters.split(","):
            if (name, exporter) in done:
                continue
            rows.append(run(name, exporter))
            with ROWS.open("a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
    print(table(rows))
    return 1 if any("error" in r or r["rel_error"] > MATCH_RTOL for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
