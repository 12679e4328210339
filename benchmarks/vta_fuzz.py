"""Differential accelerator fuzzer: random small float ONNX models compiled for the VTA-like
accelerator under random hardware configs and target options, against the int8 oracle.

Each case (vta_fuzz_cases.make_case: conv chains, 1-D convs, dense/Gemm/MatMul layers, residual
adds, pools, concat, flatten; a preset or a random valid HWConfig; random -mode, -weights,
-depthwise, -vthreads) is checked on the correctness ladder (DESIGN.md):

1. the oracle: `quantize_for` (the int8 graph the compiler builds, partitioned) run by the
   numpy reference kernels (`run_graph`);
2. `tensorforge.compile(model, target="vta -config=... -device=sim|cyclesim ...",
   calibration=...)` run on the target's device: every output must equal the oracle's bit for
   bit (float ops after a dequantize, LLVM code on the CPU, up to rounding: `ROUNDING`); the
   module saved and loaded again gives the same outputs, and so does the oracle's int8 graph
   compiled as it is;
3. the same module on the other device (`cyclesim` after `sim`, or the reverse): the same
   outputs bit for bit, and cycles for every accelerator call;
4. the float model on onnxruntime: the int8 outputs' error relative to the float outputs' range
   is reported (not asserted).

Outcomes: `match`; `mismatch` (the module vs the oracle, or after save/load),
`device-mismatch` (cyclesim vs sim), `bad-cycles` (no or too few cycles, or counters that
differ between the simulators); `refused` (an invalid target option refused
with a ValueError saying what the case expected); `not-refused` (an invalid option
compiled); `error` (an exception of ours, in the compile, oracle, sim, cyclesim, save-load,
int8-graph or float phase); `crash` / `hang` (the worker died or passed `--timeout-s`:
op_fuzz.Driver runs each case in a worker process and restarts it); `gen-error` (a bug of the
generator). The defects are written to build/vta_fuzz/ as `<seed>_<index>.onnx` with inputs
and calibration in a `.npz` and the target in a `.txt` (beside its HWConfig `.json`).

Usage:
    python benchmarks/vta_fuzz.py --seed 0 --cases 200 [--max-nodes 8] [--budget-s 1800]
        [--timeout-s 120] [--out build/vta_fuzz.jsonl]
    python benchmarks/vta_fuzz.py --replay 0:17 [--save case.onnx]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import op_fuzz  # noqa: E402
from vta_fuzz_cases import VtaCase, make_case  # noqa: E402

OUT_DIR = HERE.parent / "build" / "vta_fuzz"
DEFECTS = ("mismatch", "device-mismatch", "bad-cycles", "not-refused", "error", "crash",
           "hang", "gen-error")  # fmt: skip
# Float CPU ops may round differently from numpy by this share of an output's largest value;
# one int8 step of a dequantized output is at least 1/127 of it.
ROUNDING = 1e-5
LAYERS = ("tf.qconv2d", "tf.qdense", "Conv", "Gemm", "MatMul")


def _where(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno}"


def _first_difference(got: np.ndarray, want: np.ndarray, rounding: float = 0.0) -> str | None:
    """Why `got` is not `want` (dtype, shape, values), or None; float values may differ by
    `rounding` times the largest |want| (0: bit for bit)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}"
    if got.dtype.kind == "f":
        atol = rounding * float(np.abs(want[np.isfinite(want)]).max(initial=0.0))
        same = (np.abs(got.astype(np.float64) - want) <= atol) | (np.isnan(got) & np.isnan(want))
        bad = ~(same | (got == want))
    else:
        bad = got != want
    if not bad.any():
        return None
    at = tuple(int(v) for v in np.argwhere(bad)[0]) if bad.ndim else ()
    return f"{int(bad.sum())}/{bad.size} differ, first at {at}: got {got[at]!r} want {want[at]!r}"


def _differences(names: list[str], got: dict, want: dict, rounding: float = 0.0) -> str:
    return "; ".join(
        f"{n}: {why}" for n in names if (why := _first_difference(got[n], want[n], rounding))
    )


def implausible(sim: dict, cyclesim: dict) -> str | None:
    """Why the cycle-accurate runs of the accelerator calls are not plausible, or None: each
    call needs cycles, at least one per GEMM micro-op, and the functional simulator's counters
    (operations, DMA bytes, instructions) must be the timing model's too."""
    for label, timed in cyclesim.items():
        if not timed.cycles or timed.cycles < timed.stats.get("gemm_counter", 0):
            return f"{label}: {timed.cycles} cycles for {timed.stats.get('gemm_counter')} GEMMs"
        counted = sim[label].stats
        differ = {k: (v, timed.stats.get(k)) for k, v in counted.items() if timed.stats.get(k) != v}
        if differ:
            return f"{label}: counters (sim, cyclesim) differ: {differ}"
    return None


def float_error(case: VtaCase, got: dict[str, np.ndarray]) -> float | None:
    """The largest |int8 - float| over the float output's largest magnitude (onnxruntime)."""
    want = op_fuzz.run_onnxruntime(case)
    if isinstance(want, str):
        return None
    worst = 0.0
    for o, w in zip(case.model.graph.output, want, strict=True):
        scale = max(float(np.abs(w).max(initial=0.0)), 1e-6)
        diff = float(np.abs(got[o.name].astype(np.float64) - w).max(initial=0.0))
        worst = max(worst, diff / scale)
    return round(worst, 4)


def run_case(case: VtaCase, workdir: str) -> dict:
    """Run `case` through the ladder; the result's outcome, detail and facts."""
    import tensorforge
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph import run_graph
    from tensorforge.compiler.graph.compile_vta import quantize_for
    from tensorforge.hw.config import HWConfig
    from tensorforge.runtime.module import Module

    path = None
    if case.preset is None:  # the knobs as drawn (a bad one when the case expects a refusal)
        path = Path(workdir) / "config.json"
        path.write_text(json.dumps(case.config), encoding="utf-8")
    target = case.target(str(path) if path else None)
    names = [o.name for o in case.model.graph.output]
    facts: dict = {"target": target}
    phase = "compile"
    try:
        module = tensorforge.compile(case.model, target=target, calibration=case.calibration)
        if case.expect_refusal:
            return {"outcome": "not-refused", "detail": f"expected: {case.expect_refusal}", **facts}
        facts["accel_kernels"] = module.stats.get("accelerator_kernels", 0)
        facts["offloaded_macs"] = module.stats.get("offloaded_macs", 0.0)
        kinds = {k.name: k.kind for k in module.kernels}
        facts["vta_calls"] = sorted({c.label.split(" (")[0] for c in module.calls
                                     if kinds[c.kernel] == "vta"})  # fmt: skip
        facts["cpu_layers"] = sorted({why for _, op, where, why in module.stats["placement"]
                                      if where == "cpu" and op in LAYERS})  # fmt: skip
        phase = "oracle"
        cfg = HWConfig.from_dict(case.config)
        q = quantize_for(from_onnx(case.model), cfg, case.calibration, case.options["mode"],
                         case.options["weights"], case.options["depthwise"])  # fmt: skip
        want = run_graph(q, case.feed)
        phase = case.options["device"]  # the device the target names runs first
        got = module.run(case.feed)
        # int8 work is bit-exact; float ops after a dequantize run as LLVM code on the CPU,
        # equal to the numpy kernels up to rounding (FMA contraction: docs/cpu_backend.md)
        if why := _differences(names, got, want, ROUNDING):
            return {"outcome": "mismatch", "detail": why, **facts}
        facts["float_rounding"] = bool(_differences(names, got, want))
        phase = "save-load"
        module.save(Path(workdir) / "case.tfm")
        if why := _differences(names, Module.load(Path(workdir) / "case.tfm").run(case.feed), got):
            return {"outcome": "mismatch", "detail": f"after save/load: {why}", **facts}
        phase = "int8-graph"  # the oracle's own graph, compiled as it is (docs/compile_vta.md)
        given = tensorforge.compile(q, target=target).run(case.feed)
        if why := _differences(names, given, want, ROUNDING):
            return {"outcome": "mismatch", "detail": f"the int8 graph compiled: {why}", **facts}
        if not facts["accel_kernels"]:  # every layer on the CPU: no device to select
            return {"outcome": "match", "detail": "", **facts}
        phase = "cyclesim" if case.options["device"] == "sim" else "sim"
        first = module.device_results()
        again = module.use_device(phase).run(case.feed)
        if why := _differences(names, again, got):
            return {"outcome": "device-mismatch", "detail": why, **facts}
        runs = {case.options["device"]: first, phase: module.device_results()}
        facts["cycles"] = sum(r.cycles or 0 for r in runs["cyclesim"].values())
        if why := implausible(runs["sim"], runs["cyclesim"]):
            return {"outcome": "bad-cycles", "detail": why[:300], **facts}
        phase = "float"
        facts["float_error"] = float_error(case, got)
    except Exception as exc:  # noqa: BLE001  (classified: a clear refusal, or a defect)
        text = f"{type(exc).__name__}: {exc}"
        if (case.expect_refusal and phase == "compile" and isinstance(exc, ValueError)
                and case.expect_refusal in str(exc)):  # fmt: skip
            return {"outcome": "refused", "detail": text[:300], **facts}
        return {"outcome": "error", "detail": f"[{phase}] {text[:300]} at {_where(exc)}", **facts}
    return {"outcome": "match", "detail": "", **facts}


def check(name: str, max_nodes: int = 8) -> dict:
    """Build and run the case `name` (`seed:index`)."""
    seed, index = (int(p) for p in name.split(":")[:2])
    try:
        case = make_case(seed, index, max_nodes)
    except Exception as exc:  # noqa: BLE001  (a bug of the generator: reported, not ours)
        return {"case": name, "outcome": "gen-error", "detail": f"{type(exc).__name__}: {exc}"}
    print(json.dumps({"phase": "ours"}), flush=True)  # from here on a crash is ours
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        result = run_case(case, workdir)
    result["seconds"] = round(time.perf_counter() - start, 2)
    ops = sorted({n.op_type for n in case.model.graph.node})
    return {"case": name, **result, "ops": ops, "nodes": len(case.model.graph.node)}


def worker(max_nodes: int) -> None:
    """Reads case names from stdin, writes one JSON result line per case."""
    for line in sys.stdin:
        name = line.strip()
        print(json.dumps({"start": name}), flush=True)
        print(json.dumps(check(name, max_nodes)), flush=True)


def family(result: dict) -> str:
    """Groups defects with one likely cause: the outcome, and the error's type and location."""
    detail = result["detail"]
    if result["outcome"] == "error":
        return f"error {detail.split(':')[0]} at {detail.rsplit(' at ', 1)[-1]}"
    return result["outcome"]


def save(name: str, max_nodes: int = 8) -> Path:
    """Write case `name`'s model, inputs, calibration, config and target to build/vta_fuzz/."""
    seed, index = (int(p) for p in name.split(":")[:2])
    case = make_case(seed, index, max_nodes)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stem = OUT_DIR / name.replace(":", "_")
    onnx.save(case.model, f"{stem}.onnx")
    calibration = {f"calib{i}_{k}": v for i, b in enumerate(case.calibration) for k, v in b.items()}
    np.savez(f"{stem}.npz", **case.feed, **calibration)
    Path(f"{stem}.json").write_text(json.dumps(case.config, indent=1), encoding="utf-8")
    Path(f"{stem}.txt").write_text(case.target(f"{stem}.json") + "\n", encoding="utf-8")
    return Path(f"{stem}.onnx")


def fuzz(seed: int, cases: int, max_nodes: int = 8, budget_s: float = 1e9,
         timeout_s: float = 120.0, out=None, keep: bool = True,
         first: int = 0) -> list[dict]:  # fmt: skip
    """Run cases `first`..`first + cases - 1` of `seed`, one worker process at a time."""

    def report(result: dict) -> None:
        if result["outcome"] in DEFECTS:
            if keep and result["outcome"] != "gen-error":
                save(result["case"], max_nodes)
            print(f"{result['outcome']:9} {result['case']}: {result['detail'][:200]}")

    driver = op_fuzz.Driver(timeout_s, str(max_nodes), script=__file__)
    names = (f"{seed}:{index}" for index in range(first, first + cases))
    return op_fuzz.run_cases(driver, names, budget_s, out, report)


def summarize(results: list[dict]) -> str:
    """A table of the outcomes, the float error's spread, then one line per group of defects."""
    counts = Counter(r["outcome"] for r in results)
    defects = sum(counts[o] for o in DEFECTS)
    errors = sorted(r["float_error"] for r in results if r.get("float_error") is not None)
    accel = sum(1 for r in results if r.get("accel_kernels"))
    lines = [
        "| cases | match | refused (expected) | defects | with accelerator kernels |"
        " float error median / max |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {len(results)} | {counts['match']} | {counts['refused']} | {defects} | {accel} "
        f"| {np.median(errors) if errors else 0:.3f} / {max(errors, default=0):.3f} |",
    ]
    groups: dict[str, list[str]] = defaultdict(list)
    for r in results:
        if r["outcome"] not in ("match", "refused"):
            groups[family(r)].append(r["case"])
    for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(names):4}  {key[:150]}  e.g. {', '.join(names[:3])}")
    return "\n".join(lines)


def replay(name: str, save_to: str | None, max_nodes: int = 8) -> None:
    """Print case `name`'s graph, config and target, run it and print the result."""
    seed, index = (int(p) for p in name.split(":")[:2])
    case = make_case(seed, index, max_nodes)
    if save_to:
        onnx.save(case.model, save_to)
    print(onnx.printer.to_text(case.model.graph))
    for k, v in case.feed.items():
        print(k, v.dtype, v.shape, "calibration", [b[k].shape for b in case.calibration])
    print("config", json.dumps(case.config))
    print("target", case.target(), "| expect refusal:", case.expect_refusal or "no")
    print(json.dumps(check(name, max_nodes), indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--first", type=int, default=0, help="the first case index")
    parser.add_argument("--max-nodes", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=1e9)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--out", default="", help="write one JSON line per case here")
    parser.add_argument("--replay", default="", help="run one case (seed:index)")
    parser.add_argument("--save", default="", help="with --replay: save the model here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--target", default="", help=argparse.SUPPRESS)  # the worker's max-nodes
    args = parser.parse_args()
    if args.worker:
        return worker(int(args.target or args.max_nodes))
    if args.replay:
        return replay(args.replay, args.save or None, args.max_nodes)
    with open(args.out, "w") if args.out else contextlib.nullcontext() as out:
        results = fuzz(args.seed, args.cases, args.max_nodes, args.budget_s, args.timeout_s, out,
                       first=args.first)  # fmt: skip
    print(summarize(results))


if __name__ == "__main__":
    main()
