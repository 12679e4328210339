"""Differential graph fuzzer: random ONNX DAGs of 5-30 nodes compiled for the CPU against
onnxruntime.

The op fuzzer (op_fuzz.py) checks one op or a short chain; the whole-graph passes (constant
folding, the blocked NCHWc layout, fusion, memory planning) only meet most op combinations in
graphs nobody wrote a test for. Each case here is a DAG over float32 values mixing
convolutions (groups, strides, pads, dilations), BatchNormalization, activations, pools,
broadcasting arithmetic (per-channel constants, scalars, other branches), Concat, Split,
Slice, Reshape/Flatten, Transpose, Squeeze/Unsqueeze, reductions, MatMul/Gemm, Softmax,
Where, Cast, Resize and Pad, with several graph inputs, values read by many branches
(residual, squeeze-excite, channel shuffle, concat-heavy) and several outputs, among them a
graph input, an initializer, one value twice and an intermediate that is read later.

The models come from graph_fuzz_cases.py. Each case runs in a worker process (op_fuzz.Driver:
a crash or hang is a finding and the worker restarts): onnxruntime first, then
`tensorforge.compile(model).run(feed)` (op_fuzz.compare); outcomes are op_fuzz's (`match`,
`mismatch`, `ort-deviates`, `refused`, `error`, `crash`, `hang`, `ort-skip`, `gen-error`).
The defects (mismatch, error, crash, hang) are written to build/graph_fuzz/ as
`<seed>_<index>_<max_nodes>.onnx` with their inputs in a `.npz` of the same name.

Cases are deterministic: `seed:index:max_nodes` rebuilds the same model and inputs.

Usage:
    python benchmarks/graph_fuzz.py --seed 0 --cases 200 [--max-nodes 30] [--budget-s 1800]
        [--out build/graph_fuzz.jsonl] [--target llvm|opencl]
        [--oracle reference] [--specials]   (op_fuzz.py's: the reference executor, NaN/inf)
    python benchmarks/graph_fuzz.py --replay 0:17[:30] [--save case.onnx]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import op_fuzz  # noqa: E402
from graph_fuzz_cases import make_case  # noqa: E402

OUT_DIR = HERE.parent / "build" / "graph_fuzz"
DEFECTS = ("mismatch", "error", "crash", "hang", "gen-error")


def check(
    name: str, target: str = "llvm", oracle: str = "onnxruntime", specials: bool = False
) -> dict:
    """Build, run both sides and compare the case `name` (`seed:index:max_nodes`)."""
    seed, index, max_nodes = (int(p) for p in name.split(":"))
    try:
        case = make_case(seed, index, max_nodes)
    except Exception as exc:  # noqa: BLE001  (a bug of the generator: reported, not ours)
        return {"case": name, "outcome": "gen-error", "detail": f"{type(exc).__name__}: {exc}"}
    outcome, detail = op_fuzz.compare_with(case, target, oracle, specials, index)
    ops = sorted({n.op_type for n in case.model.graph.node})
    return {"case": name, "outcome": outcome, "detail": detail[:500], "ops": ops,
            "nodes": len(case.model.graph.node)}  # fmt: skip


def worker(target: str, oracle: str = "onnxruntime", specials: bool = False) -> None:
    """Reads case names from stdin, writes one JSON result line per case."""
    for line in sys.stdin:
        name = line.strip()
        print(json.dumps({"start": name}), flush=True)
        print(json.dumps(check(name, target, oracle, specials)), flush=True)


def family(result: dict) -> str:
    """Groups defects with one likely cause: the outcome and the error's type and location, or
    the op making the first output that differs (outputs are named `<op>_<n>`) and how."""
    detail = result["detail"]
    if result["outcome"] == "error":
        return f"error {detail.split(':')[0]} at {detail.rsplit(' at ', 1)[-1]}"
    if result["outcome"] == "refused":
        return "refused " + detail.split(":")[0] + ": " + " ".join(detail.split()[1:6])
    if result["outcome"] == "mismatch":
        output, how = detail.split(":", 1)
        kind = "values" if "differ" in how.split(",")[0] else how.split()[0]
        return f"mismatch {output.rsplit('_', 1)[0]} {kind}"
    return result["outcome"]


def save(name: str) -> Path:
    """Write case `name`'s model and inputs to build/graph_fuzz/."""
    seed, index, max_nodes = (int(p) for p in name.split(":"))
    case = make_case(seed, index, max_nodes)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stem = OUT_DIR / name.replace(":", "_")
    onnx.save(case.model, f"{stem}.onnx")
    np.savez(f"{stem}.npz", **case.feed)
    return Path(f"{stem}.onnx")


def fuzz(seed: int, cases: int, max_nodes: int = 30, budget_s: float = 1e9,
         timeout_s: float = 120.0, out=None, keep: bool = True,
         target: str = "llvm", extra: tuple = ()) -> list[dict]:  # fmt: skip
    """Run cases 0..`cases`-1 of `seed`, one worker process at a time, compiled for `target`
    ("llvm", or "opencl": the GPU back-end on the local OpenCL device); `extra`: the worker's
    oracle options (`op_fuzz.oracle_options`)."""

    def report(result: dict) -> None:
        if result["outcome"] in DEFECTS:
            if keep and result["outcome"] != "gen-error":
                save(result["case"])
            print(f"{result['outcome']:9} {result['case']}: {result['detail'][:200]}")

    driver = op_fuzz.Driver(timeout_s, target, script=__file__, extra=extra)
    names = (f"{seed}:{index}:{max_nodes}" for index in range(cases))
    return op_fuzz.run_cases(driver, names, budget_s, out, report)


def summarize(results: list[dict]) -> str:
    """A table of the outcomes, then one line per group of non-matching cases (defects by
    family, refusals by reason, onnxruntime's skips and deviations)."""
    counts = Counter(r["outcome"] for r in results)
    defects = sum(counts[o] for o in DEFECTS)
    lines = [
        "| cases | ok | refused | ort-skip | ort-deviates | defects |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {len(results)} | {counts['match']} | {counts['refused']} | {counts['ort-skip']} "
        f"| {counts['ort-deviates']} | {defects} |",
    ]
    groups: dict[str, list[str]] = defaultdict(list)
    for r in results:
        if r["outcome"] in ("ort-skip", "ort-deviates"):
            groups[f"{r['outcome']} {r['detail'][:60]}"].append(r["case"])
        elif r["outcome"] != "match":
            groups[family(r)].append(r["case"])
    for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(names):4}  {key[:150]}  e.g. {', '.join(names[:3])}")
    return "\n".join(lines)


def replay(
    name: str, save_to: str | None, target: str = "llvm", oracle: str = "onnxruntime",
    specials: bool = False,
) -> None:  # fmt: skip
    seed, index, max_nodes = (int(p) for p in (name.split(":") + ["30"])[:3])
    case = make_case(seed, index, max_nodes)
    if save_to:
        onnx.save(case.model, save_to)
    print(onnx.printer.to_text(case.model.graph))
    for k, v in case.feed.items():
        print(k, v.dtype, v.shape)
    print(json.dumps(check(f"{seed}:{index}:{max_nodes}", target, oracle, specials), indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--max-nodes", type=int, default=30)
    parser.add_argument("--budget-s", type=float, default=1e9)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--out", default="", help="write one JSON line per case here")
    parser.add_argument("--replay", default="", help="run one case (seed:index[:max_nodes])")
    parser.add_argument("--save", default="", help="with --replay: save the model here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--target", default="llvm", choices=("llvm", "opencl"),
                        help="llvm (CPU) or opencl (the local OpenCL device)")  # fmt: skip
    op_fuzz.add_oracle_options(parser)
    args = parser.parse_args()
    if args.worker:
        return worker(args.target, args.oracle, args.specials)
    if args.replay:
        return replay(args.replay, args.save or None, args.target, args.oracle, args.specials)
    with open(args.out, "w") if args.out else contextlib.nullcontext() as out:
        results = fuzz(args.seed, args.cases, args.max_nodes, args.budget_s, args.timeout_s, out,
                       target=args.target, extra=op_fuzz.oracle_options(args))  # fmt: skip
    print(summarize(results))


if __name__ == "__main__":
    main()
