"""ONNX backend node cases through compiled native code, each batch in its own process.

Run as a script it is the worker: `python node_suite_compiled.py CASE...` prints one JSON line
per case, `{"case": ..., "status": ..., "detail": ...}`, after a `{"start": CASE}` line, so the
parent knows which case a crashed process was running. Imported, `run_isolated(cases)` drives
workers (two at a time, a crashed one restarted after the case that killed it) and returns
case -> (status, detail). Statuses:

- `pass`: compiled for this CPU and matched the suite's outputs (values and dtype);
- `refused`: import or compile refused it with a clear error of ours (unsupported op, dtype or
  variant, LoweringError): allowed, and listed so the README can say what is missing;
- `wrong`: compiled but gave a wrong answer; `error`: an exception that is not a clean refusal
  (TypeError, VerifyError, ...); `crash`: the process died (a segfault). Never allowed.

`python node_suite_compiled.py --update` rewrites node_suite_compiled.txt, the expected set of
passing cases that the test asserts exactly; `--update OP...` reruns only the cases of those
ops and rewrites their part of the list (the other ops' recorded cases stay).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "node_suite_compiled.txt"


def _run_one(case) -> tuple[str, str]:
    from test_onnx_node_suite import case_graph, mismatch

    import tensorforge
    from tensorforge.compiler.frontend import OnnxImportError
    from tensorforge.compiler.graph.ir import GraphError
    from tensorforge.compiler.graph.registry import UnsupportedOpError
    from tensorforge.compiler.tir.stmt import LoweringError

    try:
        prepared = case_graph(case)
        if prepared is None:
            return "refused", "written for an opset below 13"
        graph, feed, expected = prepared
        module = tensorforge.compile(graph)
    except (UnsupportedOpError, OnnxImportError, LoweringError, GraphError) as exc:
        return "refused", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    except Exception as exc:  # noqa: BLE001  (anything else is a bug, reported by name)
        return "error", f"{type(exc).__name__}: {str(exc)[:300]}"
    try:
        got = module.run(feed)
    except Exception as exc:  # noqa: BLE001
        return "error", f"run: {type(exc).__name__}: {str(exc)[:300]}"
    wrong = mismatch(case, graph, got, expected)
    return ("wrong", wrong) if wrong else ("pass", "")


def _worker(names: list[str]) -> None:
    by_name = {c.name: c for cases in _all_cases().values() for c in cases}
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        status, detail = _run_one(by_name[name])
        print(json.dumps({"case": name, "status": status, "detail": detail}), flush=True)


def _drive(names: list[str], script: str = __file__) -> dict[str, tuple[str, str]]:
    """Runs `names` in worker processes of `script` (run as `script CASE...`, printing lines as
    `_worker` does) one after another, restarting after a crash."""
    results: dict[str, tuple[str, str]] = {}
    todo = list(names)
    while todo:
        cmd = [sys.executable, script, *todo]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        started = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "start" in msg:
                started = msg["start"]
            else:
                results[msg["case"]] = (msg["status"], msg["detail"])
                started = None
        if started is not None:  # the process died in this case
            results[started] = ("crash", f"exit {proc.returncode}: {proc.stderr[-300:]}")
        elif proc.returncode != 0 and not all(n in results for n in todo):
            raise RuntimeError(f"{script} failed outside a case: {proc.stderr[-2000:]}")
        todo = [n for n in todo if n not in results]
    return results


def run_isolated(
    names: list[str], workers: int = 2, script: str = __file__
) -> dict[str, tuple[str, str]]:
    """case -> (status, detail) for every case in `names`, `workers` processes of `script` at a
    time."""
    chunks = [names[i::workers] for i in range(workers)]
    results: dict[str, tuple[str, str]] = {}
    with ThreadPoolExecutor(workers) as pool:
        for part in pool.map(functools.partial(_drive, script=script), chunks):
            results.update(part)
    return results


def _all_cases() -> dict[str, list]:
    """op -> its cases and their function-expanded variants."""
    sys.path.insert(0, str(HERE))
    from test_onnx_node_suite import _cases, expanded_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain, expanded = _cases(), expanded_cases()
    return {op: plain.get(op, []) + expanded.get(op, []) for op in {*plain, *expanded}}


def supported_cases(ops: list[str] | None = None) -> list[str]:
    """Every case of the ops the importer supports (test_onnx_node_suite.SUPPORTED), or of
    those of `ops`, with the cases' function-expanded variants (`_expanded`: the op written
    as a graph of primitive ops)."""
    sys.path.insert(0, str(HERE))
    from test_onnx_node_suite import SUPPORTED

    unknown = sorted(set(ops or ()) - set(SUPPORTED))
    if unknown:
        raise SystemExit(f"ops must be among test_onnx_node_suite.SUPPORTED, not {unknown}")
    cases = _all_cases()
    return sorted(c.name for op in ops or SUPPORTED for c in cases.get(op, []))


def recorded(path: Path) -> frozenset[str]:
    """The case names listed in `path`, one a line."""
    return frozenset(line.strip() for line in path.read_text().splitlines() if line.strip())


@functools.cache
def expected_passing() -> frozenset[str]:
    return recorded(EXPECTED)


def assert_clean(results: dict[str, tuple[str, str]]) -> None:
    """Every case passed or was refused clearly: none wrong, in error or crashed."""
    bad = [
        f"{n}: {s}: {d}" for n, (s, d) in sorted(results.items()) if s not in ("pass", "refused")
    ]
    assert not bad, "\n".join(bad)


def assert_recorded(
    results: dict[str, tuple[str, str]], expected: frozenset[str], script: str
) -> None:
    """The passing cases are exactly `expected`: a regression fails, and so does an improvement
    nobody recorded (`python script --update`)."""
    passing = {n for n, (s, _) in results.items() if s == "pass"}
    regressed, new = sorted(expected - passing), sorted(passing - expected)
    assert not regressed, f"recorded as passing, now {[(n, results.get(n)) for n in regressed]}"
    assert not new, f"newly passing (record them: python {script} --update): {new}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--update"]:
        ops = sys.argv[2:]
        names = supported_cases(ops or None)
        results = run_isolated(names)
        kept = set(expected_passing()) - set(names) if ops else set()
        passing = sorted(kept | {n for n, (status, _) in results.items() if status == "pass"})
        EXPECTED.write_text("\n".join(passing) + "\n")
        print(f"{len(passing)} passing cases written to {EXPECTED}")
        for name in names:
            print(f"  {name}: {results[name][0]} {results[name][1][:150]}")
    else:
        _worker(sys.argv[1:])
