"""Differential op fuzzer: small ONNX graphs compiled for the CPU (LLVM) or a GPU target against
onnxruntime.

For each op the importer supports (the cases in op_fuzz_cases.py, op_fuzz_shape.py and
op_fuzz_nn.py: one op, or a short chain named `chain:...`) it builds graphs over the dtypes the
op's schema allows, unusual shapes and attribute values, runs onnxruntime and
`tensorforge.compile(model).run(feed)` in a worker process (a crash or hang is a finding, the
worker restarts) and classifies each case:

- `match`: same dtypes, shapes and values (integers and bool exactly, floats within a tolerance
  for the dtype, NaN where onnxruntime has NaN);
- `mismatch`: compiled and ran but differs from onnxruntime and from onnx's reference
  evaluator;
- `ort-deviates`: differs from onnxruntime but equals onnx's reference evaluator, where
  onnxruntime departs from the ONNX spec (checked only for a mismatch);
- `refused`: our clear refusal (UnsupportedOpError, OnnxImportError/UnsupportedDtypeError, a
  GraphError or LoweringError whose message names the node);
- `error`: any other exception of ours (TypeError, IndexError, an LLVM error, ...);
- `crash` / `hang`: the worker died or passed `--timeout-s` in our code;
- `ort-skip`: onnxruntime refuses the model (no kernel for the dtype, invalid attributes);
- `compiled`: with `--target cuda`, the CUDA C compiled to PTX by NVRTC (nothing runs without a
  GPU; a rejection by NVRTC is an `error`).

`--target opencl` runs the same cases through the GPU back-end on the local OpenCL device
(PoCL here); `--target cuda` compiles them only.

`--oracle reference` compares the compiled code with the project's own reference executor
(`run_graph`, the numpy kernels other tests use as their oracle) instead of onnxruntime: the two
should agree wherever both run (`ref-error`: the reference executor raised). `--specials` puts
a NaN, +inf and -inf into every float input (at positions drawn from the case), for the rules
on them (NaN in max pools, infinities times zero weights).

Cases are deterministic: `op:seed:index` rebuilds the same model and inputs.

Usage:
    python benchmarks/op_fuzz.py --seed 0 --budget-s 600 [--ops Conv,Add] [--per-op N]
        [--out build/op_fuzz.jsonl] [--target llvm|opencl|cuda]
    python benchmarks/op_fuzz.py --replay Conv:0:12 [--save case.onnx] [--target opencl]
    python benchmarks/op_fuzz.py --oracle reference --specials --per-op 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import subprocess
import sys
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

OUTCOMES = (
    "match", "mismatch", "ort-deviates", "refused", "error", "crash", "hang", "ort-skip",
    "gen-error", "compiled", "ref-error",
)  # fmt: skip
ORACLES = ("onnxruntime", "reference")
TARGETS = ("llvm", "opencl", "cuda")
# (rtol, atol relative to the largest finite expected magnitude, at least 1)
TOLERANCE = {"float16": (4e-3, 2e-3), "float32": (1e-4, 1e-5), "float64": (1e-7, 1e-9)}


def run_onnxruntime(case) -> list[np.ndarray] | str:
    """onnxruntime's outputs, or why it refused the model."""
    import onnxruntime as ort

    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        session = ort.InferenceSession(
            case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
        return session.run(None, case.feed)
    except Exception as exc:  # noqa: BLE001  (any refusal of onnxruntime skips the case)
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def differs(got: np.ndarray, want: np.ndarray) -> str | None:
    """Why `got` is not `want` (dtype, shape, values), or None."""
    got = np.asarray(got)
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.dtype.kind != "f":
        bad = got != want
    else:
        rtol, atol = TOLERANCE[str(want.dtype)]
        g, w = got.astype(np.float64), want.astype(np.float64)
        finite = np.isfinite(w)
        scale = max(1.0, float(np.abs(w[finite]).max())) if finite.any() else 1.0
        close = np.isclose(g, w, rtol=rtol, atol=atol * scale, equal_nan=True)
        bad = ~(close | ((g == w) & ~finite))
    if not bad.any():
        return None
    i = np.argwhere(bad)[0] if bad.ndim else ()
    at = tuple(int(v) for v in i)
    return f"{int(bad.sum())}/{bad.size} differ, first at {at}: got {got[at]!r} want {want[at]!r}"


def _names(case) -> list[str]:
    return [n.name for n in case.model.graph.node]


def run_ours(case, target: str = "llvm") -> tuple[str, str, list[np.ndarray] | None]:
    """(outcome, detail, outputs) of tensorforge on `case` compiled for `target`; outcome is
    refused or error on an exception, compiled for "cuda" (NVRTC only: nothing runs)."""
    import tensorforge
    from tensorforge.compiler.frontend import OnnxImportError
    from tensorforge.compiler.graph.ir import GraphError
    from tensorforge.compiler.graph.registry import UnsupportedOpError
    from tensorforge.compiler.tir.stmt import LoweringError

    try:
        module = tensorforge.compile(case.model, target=target)
        if target == "cuda":
            if not all("ptx" in json.loads(k.payload) for k in module.kernels):
                return "error", "no PTX in a kernel payload: is NVRTC installed?", None
            return "compiled", "", None
        result = module.run(case.feed)
    except Exception as exc:  # noqa: BLE001  (classified below)
        text = f"{type(exc).__name__}: {exc}"
        clear = (UnsupportedOpError, OnnxImportError, GraphError, LoweringError)
        named = any(repr(n) in str(exc) or n in str(exc) for n in _names(case))
        if isinstance(exc, UnsupportedOpError | OnnxImportError) or (
            isinstance(exc, clear) and named
        ):
            return "refused", text[:300], None
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return "error", f"{text[:300]} at {Path(where.filename).name}:{where.lineno}", None
    return "ran", "", [result[o.name] for o in case.model.graph.output]


def check(
    name: str, target: str = "llvm", oracle: str = "onnxruntime", specials: bool = False
) -> dict:
    """Build, run both sides and compare the case `name` (`op:seed:index`) on `target`."""
    from op_fuzz_cases import make_case

    op, seed, index = name.rsplit(":", 2)
    try:
        case = make_case(op, int(seed), int(index))
    except Exception as exc:  # noqa: BLE001  (a bug of the generator: reported, not ours)
        return {"case": name, "outcome": "gen-error", "detail": f"{type(exc).__name__}: {exc}"}
    outcome, detail = compare_with(case, target, oracle, specials, int(index))
    return {"case": name, "outcome": outcome, "detail": detail[:500]}


def compare_with(
    case, target: str, oracle: str = "onnxruntime", specials: bool = False, index: int = 0
) -> tuple[str, str]:
    """`compare` (onnxruntime) or `compare_reference`, on `case` with its float inputs'
    specials put in first when asked (positions drawn from `index`)."""
    if specials:
        case = with_specials(case, index)
    if oracle == "reference":
        return compare_reference(case, target)
    return compare(case, target)


def add_oracle_options(parser: argparse.ArgumentParser) -> None:
    """--oracle and --specials (op_fuzz.py and graph_fuzz.py)."""
    parser.add_argument("--oracle", default="onnxruntime", choices=ORACLES,
                        help="what the compiled code is compared with: onnxruntime, or the "
                        "project's reference executor (run_graph)")  # fmt: skip
    parser.add_argument("--specials", action="store_true",
                        help="a NaN, +inf and -inf in every float input")  # fmt: skip


def oracle_options(args: argparse.Namespace) -> tuple[str, ...]:
    """The worker's command-line options for `add_oracle_options`' values."""
    return ("--oracle", args.oracle, *(("--specials",) if args.specials else ()))


def with_specials(case, index: int):
    """`case` with a NaN, +inf and -inf in each float input (positions drawn from `index`)."""
    import dataclasses

    rng = np.random.default_rng([index, 7])
    feed = {}
    for name, value in case.feed.items():
        if value.dtype.kind == "f" and value.size:
            value = value.copy()
            flat = value.reshape(-1)
            for special in (np.nan, np.inf, -np.inf):
                flat[rng.integers(0, flat.size)] = special
        feed[name] = value
    return dataclasses.replace(case, feed=feed)


def compare_reference(case, target: str = "llvm") -> tuple[str, str]:
    """(outcome, detail) of `case` run by the reference executor (`run_graph`), then by ours."""
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph import run_graph

    try:
        result = run_graph(from_onnx(case.model), case.feed)
        want = [result[o.name] for o in case.model.graph.output]
    except Exception as exc:  # noqa: BLE001  (classified: the oracle's own failure)
        outcome, _, got = run_ours(case, target)
        if outcome == "refused":  # (both refuse the same import: no finding)
            return "refused", f"{type(exc).__name__}: {exc}"[:300]
        where = traceback.extract_tb(exc.__traceback__)[-1]
        text = f"{type(exc).__name__}: {str(exc)[:300]}"
        return "ref-error", f"{text} at {Path(where.filename).name}:{where.lineno}"
    return run_and_compare(case, target, [np.asarray(w) for w in want])[:2]


def run_and_compare(case, target: str, want: list[np.ndarray]) -> tuple[str, str, list | None]:
    """Ours on `case` (announced on stdout to the Driver, so a crash from here on is ours),
    compared with the oracle's outputs `want`: (outcome, detail, our outputs or None)."""
    print(json.dumps({"phase": "ours"}), flush=True)
    outcome, detail, got = run_ours(case, target)
    if got is not None:
        problems = [
            f"{o.name}: {why}"
            for o, g, w in zip(case.model.graph.output, got, want, strict=True)
            if (why := differs(g, w))
        ]
        outcome, detail = ("mismatch", "; ".join(problems)) if problems else ("match", "")
    return outcome, detail, got


def compare(case, target: str = "llvm", reference: bool = True) -> tuple[str, str]:
    """(outcome, detail) of `case` run by onnxruntime, then by ours (announced on stdout to the
    Driver, so a crash from here on is ours); with `reference`, a mismatch equal to onnx's
    reference evaluator is `ort-deviates`."""
    want = run_onnxruntime(case)
    if isinstance(want, str):
        return "ort-skip", want
    outcome, detail, got = run_and_compare(case, target, want)
    if outcome == "mismatch" and reference and matches_reference(case, got):
        outcome = "ort-deviates"
    return outcome, detail


def matches_reference(case, got: list[np.ndarray]) -> bool:
    """Whether our outputs equal onnx's reference evaluator's (where onnxruntime departs from
    the ONNX spec, as ConvTranspose's SAME padding with a kernel shorter than the stride)."""
    from onnx.reference import ReferenceEvaluator

    try:
        want = ReferenceEvaluator(case.model).run(None, case.feed)
    except Exception:  # noqa: BLE001  (no verdict from the reference)
        return False
    return all(differs(g, np.asarray(w)) is None for g, w in zip(got, want, strict=True))


def worker(target: str, oracle: str = "onnxruntime", specials: bool = False) -> None:
    """Reads case names from stdin, writes one JSON result line per case."""
    for line in sys.stdin:
        name = line.strip()
        print(json.dumps({"start": name}), flush=True)
        print(json.dumps(check(name, target, oracle, specials)), flush=True)


class Driver:
    """One worker process at a time, restarted after a crash or a hang."""

    def __init__(
        self, timeout_s: float, target: str = "llvm", script: str = __file__, extra: tuple = ()
    ) -> None:
        self.timeout_s = timeout_s
        self.target = target
        self.script = script  # a fuzzer whose `--worker` reads case names (graph_fuzz.py too)
        self.extra = list(extra)  # more of the worker's options (--oracle, --specials)
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, self.script, "--worker", "--target", self.target, *self.extra]
        self.buffer = b""
        return subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env,
        )  # fmt: skip

    def _line(self, deadline: float) -> bytes | None:
        """The worker's next line (b"" when it died), or None past `deadline`; read from the
        pipe unbuffered, so select sees every line not yet taken."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line + b"\n"

    def run(self, name: str) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        self.proc.stdin.write(name.encode() + b"\n")
        self.proc.stdin.flush()
        ours = False
        deadline = time.monotonic() + self.timeout_s
        while True:
            line = self._line(deadline)
            if line is None:
                self.close()
                return {"case": name, "outcome": "hang" if ours else "ort-skip",
                        "detail": f"no result in {self.timeout_s} s"}  # fmt: skip
            if not line:
                code = self.proc.wait()
                self.proc = None
                return {"case": name, "outcome": "crash" if ours else "ort-skip",
                        "detail": f"worker died, exit {code}"}  # fmt: skip
            if not line.startswith(b"{"):
                continue
            msg = json.loads(line)
            ours = ours or "phase" in msg
            if "outcome" in msg:
                return msg

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def family(result: dict) -> str:
    """A signature grouping findings with one cause: the op, the outcome, the error's type and
    location, or the kind of difference."""
    op = result["case"].rsplit(":", 2)[0]
    detail = result["detail"]
    if result["outcome"] == "error":
        kind = detail.split(":")[0] + " " + detail.rsplit(" at ", 1)[-1]
    elif result["outcome"] == "mismatch":
        kind = " ".join(w for w in detail.split(":")[1].split()[:2])
    else:
        kind = ""
    return f"{result['outcome']} {op} {kind}".strip()


def fuzz(
    ops: list[str], seed: int, budget_s: float, per_op: int, timeout_s: float, out,
    target: str = "llvm", extra: tuple = (),
) -> list:  # fmt: skip
    def report(result: dict) -> None:
        if result["outcome"] not in ("match", "ort-skip", "refused", "compiled"):
            print(f"{result['outcome']:9} {result['case']}: {result['detail'][:160]}")

    names = (f"{op}:{seed}:{index}" for index in range(per_op) for op in ops)
    return run_cases(Driver(timeout_s, target, extra=extra), names, budget_s, out, report)


def run_cases(driver: Driver, names, budget_s: float, out, report) -> list[dict]:
    """Each case of `names` through `driver` (worker processes) until `budget_s` has passed:
    its result written to `out` (a JSON line) when given and handed to `report`; the driver
    closed at the end (op_fuzz.py, graph_fuzz.py and vta_fuzz.py)."""
    results = []
    start = time.monotonic()
    try:
        for name in names:
            if time.monotonic() - start > budget_s:
                break
            result = driver.run(name)
            results.append(result)
            if out:
                out.write(json.dumps(result) + "\n")
                out.flush()
            report(result)
    finally:
        driver.close()
    return results


def summarize(results: list[dict]) -> str:
    counts = Counter(r["outcome"] for r in results)
    lines = [f"{len(results)} cases: " + ", ".join(f"{o} {counts[o]}" for o in OUTCOMES)]
    families: dict[str, list[str]] = defaultdict(list)
    for r in results:
        if r["outcome"] in ("mismatch", "error", "crash", "hang"):
            families[family(r)].append(r["case"])
    for key, cases in sorted(families.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(cases):4}  {key}  e.g. {', '.join(cases[:3])}")
    return "\n".join(lines)


def replay(
    name: str, save: str | None, target: str = "llvm", oracle: str = "onnxruntime",
    specials: bool = False,
) -> None:  # fmt: skip
    from op_fuzz_cases import make_case

    op, seed, index = name.rsplit(":", 2)
    case = make_case(op, int(seed), int(index))
    if save:
        Path(save).write_bytes(case.model.SerializeToString())
    import onnx

    print(onnx.printer.to_text(case.model.graph))
    for k, v in case.feed.items():
        print(k, v.dtype, v.shape, np.array2string(v.ravel()[:16]))
    print(json.dumps(check(name, target, oracle, specials), indent=1))


def main() -> None:
    from op_fuzz_cases import pick_family

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-s", type=float, default=600.0)
    parser.add_argument("--per-op", type=int, default=10**9, help="cases per op at most")
    parser.add_argument("--ops", default="", help="comma-separated; default: every op")
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--out", default="", help="write one JSON line per case here")
    parser.add_argument("--replay", default="", help="run one case (op:seed:index) and show it")
    parser.add_argument("--save", default="", help="with --replay: save the model here")
    parser.add_argument("--target", default="llvm", choices=TARGETS,
                        help="llvm (CPU), opencl (run on the local OpenCL device) or cuda "
                        "(NVRTC compile only)")  # fmt: skip
    add_oracle_options(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    extra = oracle_options(args)
    if args.worker:
        return worker(args.target, args.oracle, args.specials)
    if args.replay:
        return replay(args.replay, args.save or None, args.target, args.oracle, args.specials)
    table = pick_family()
    ops = args.ops.split(",") if args.ops else list(table)
    unknown = [op for op in ops if op not in table]
    if unknown:
        parser.error(f"--ops must be among {', '.join(table)}, not {unknown}")
    with open(args.out, "w") if args.out else contextlib.nullcontext() as out:
        results = fuzz(
            ops, args.seed, args.budget_s, args.per_op, args.timeout_s, out, args.target, extra
        )
    print(summarize(results))


if __name__ == "__main__":
    main()
