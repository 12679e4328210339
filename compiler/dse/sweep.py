"""Design-space exploration: choose accelerator configs, evaluate each, keep the Pareto front.

`explore(model, space, out_dir)` evaluates the space's presets, then candidates chosen by a
search over the hardware knobs, each with `evaluate.evaluate_candidate` (Yosys area, then the
model's latency with its schedules retuned on ``cyclesim``), and writes into `out_dir`:

- ``results.json`` and ``results.csv``: every candidate (knobs, area, whether it fits, cycles
  with default and with tuned schedules, latency at its clock, GOPS, MAC utilization, and the
  resources it is on the Pareto front of);
- ``pareto.png``: latency against DSP and against BRAM, the front highlighted and the presets
  marked (needs matplotlib: ``pip install 'tensorforge[plot]'``);
- ``candidates/<key>/``: each candidate's HWConfig, tuning log and result (the cache: a second
  run reuses every result whose budget was at least as large, and a larger budget resumes the
  tuning logs); ``synth/``: Yosys results by RTL digest.

The search reuses the auto-tuner's explorers over a `ConfigSpace` of the hardware knobs (the
template ``dse.hwconfig``): ``grid`` walks every valid point, ``xgb`` runs simulated annealing
on an XGBoost model of the knob vector, trained on the latencies measured so far (a candidate
that does not fit counts as a failed trial); ``auto`` (the default) takes grid when the space
has at most `candidates` candidates (points that `area.screen` shows cannot fit the part are
not candidates: they are never synthesized).

Given a Dask cluster, candidates are evaluated on its workers, as many at once as it has
worker threads; otherwise one at a time here, each tuning with a local build pool.

A KeyboardInterrupt stops the sweep: the results measured so far are written, and the result
says it was interrupted.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ...hw.config import HWConfig
from ..autotune.measure import MeasureResult
from ..autotune.space import ConfigSpace
from ..autotune.task import Artifact, Task, TaskError, Template, register
from ..autotune.tuner import make_tuner
from .area import Area
from .evaluate import evaluate_candidate
from .space import RESOURCES, HwSpace, _knob_value, config_key

SEARCHES = ("auto", "grid", "xgb", "random", "ga")
#: the result fields of a candidate that the CSV has after the knobs
CSV_FIELDS = ("fits", "LUT", "FF", "DSP", "BRAM36", "area_source", "cycles_default", "cycles",
              "latency_ms_default", "latency_ms", "gops", "mac_util", "peak_gops", "tasks",
              "trials", "fmax_mhz", "clock_met", "front", "error", "message")  # fmt: skip


# ---- the hardware space as a tuner template ------------------------------------------------------


def _dse_build(workload: dict, values: dict, target: str, seed: int) -> Artifact:
    raise TaskError("dse.hwconfig points are evaluated by compiler.dse.explore, not built")


def _dse_check(workload: dict) -> None:
    HwSpace.from_json(workload)


register(Template("dse.hwconfig", "dse", "s", lambda wl: HwSpace.from_json(wl).config_space(),
                  _dse_build, lambda wl: 0, None, _dse_check))  # fmt: skip


# ---- results -------------------------------------------------------------------------------------


@dataclass
class DseResult:
    """What `explore` measured: one record per candidate (see results.json)."""

    out_dir: Path
    records: list[dict[str, Any]]
    part: str
    interrupted: bool = False
    files: list[Path] = field(default_factory=list)

    @classmethod
    def load(cls, out_dir: str | Path) -> DseResult:
        """The results an earlier `explore` wrote into `out_dir` (its results.json).

        Raises:
            ValueError: `out_dir` has no readable results.json.
        """
        path = Path(out_dir) / "results.json"
        try:
            data = json.loads(path.read_text())
            return cls(Path(out_dir), list(data["candidates"]), str(data["space"]["part"]),
                       bool(data.get("interrupted", False)))  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not the results of tensorforge dse ({exc})") from None

    @property
    def fitting(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("fits") and r.get("latency_ms")]

    def best(self) -> dict[str, Any] | None:
        """The fastest candidate that fits the part (None when none does)."""
        return min(self.fitting, key=lambda r: r["latency_ms"], default=None)

    def preset(self, name: str) -> dict[str, Any] | None:
        return next((r for r in self.records if r.get("preset") == name), None)

    def table(self) -> str:
        """A Markdown table of the candidates with a latency, fastest first."""
        rows = sorted((r for r in self.records if r.get("latency_ms")),
                      key=lambda r: r["latency_ms"])  # fmt: skip
        lines = ["| config | knobs | fits | DSP | BRAM36 | LUT | cycles (default -> tuned) | "
                 "latency ms | GOPS | MAC util | front |", "|" + "---|" * 11]  # fmt: skip
        for r in rows:
            a = r.get("area", {})
            luts = f"{a['luts']:,.0f}" if a.get("source") == "yosys" else "-"
            lines.append(
                f"| {r.get('preset') or r['config']['name']} | {_knob_text(r)} | "
                f"{'yes' if r.get('fits') else 'no'} | {a.get('dsps', 0):g} | "
                f"{a.get('bram36', 0):g} | {luts} | "
                f"{r['cycles_default']:,} -> {r['cycles']:,} | {r['latency_ms']:.2f} | "
                f"{r['gops']:.1f} | {r['mac_util']:.1%} | {','.join(r.get('front', [])) or '-'} |"
            )
        return "\n".join(lines)


def _knob_text(rec: Mapping[str, Any]) -> str:
    return " ".join(f"{k.removeprefix('log_')}={v}" for k, v in rec.get("knobs", {}).items())


def pareto_front(records: list[dict[str, Any]], resource: str) -> list[dict[str, Any]]:
    """The fitting candidates not dominated in (`resource` used, latency): no other uses at most
    as much and is at least as fast, and strictly better in one. Sorted by resource.

    Example:
        >>> recs = [{"fits": True, "latency_ms": l, "area": {"dsps": d}} for d, l in
        ...         [(10, 5.0), (20, 4.0), (30, 4.5), (40, 1.0)]]
        >>> [r["area"]["dsps"] for r in pareto_front(recs, "DSP")]
        [10, 20, 40]
    """
    key = _AREA_KEYS[resource]
    pts = [r for r in records if r.get("fits") and r.get("latency_ms") and "area" in r]
    if resource in ("LUT", "FF"):  # known from Yosys only (the screen bounds DSP and BRAM)
        pts = [r for r in pts if r["area"].get("source") == "yosys"]
    pts.sort(key=lambda r: (r["area"][key], r["latency_ms"]))
    front, best = [], math.inf
    for r in pts:
        if r["latency_ms"] < best:
            front.append(r)
            best = r["latency_ms"]
    return front


_AREA_KEYS = {"LUT": "luts", "FF": "ffs", "DSP": "dsps", "BRAM36": "bram36"}


# ---- the sweep -----------------------------------------------------------------------------------


def model_bytes(model: Any) -> bytes:
    """The ONNX model's bytes (from a path, bytes or a ModelProto): what candidates compile, and
    what the results folder's digest is of."""
    import onnx

    if isinstance(model, str | Path):
        return Path(model).read_bytes()
    if isinstance(model, bytes):
        return model
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    raise TypeError(f"explore takes an ONNX model (a path, its bytes or a ModelProto), not "
                    f"{type(model).__name__}")  # fmt: skip


def explore(
    model: Any,
    space: HwSpace | Mapping[str, Any] | str | Path,
    out_dir: str | Path,
    trials: int = 16,
    candidates: int | None = None,
    search: str = "auto",
    calibration: Any = None,
    input_shapes: Mapping[str, Any] | None = None,
    cluster: Any = None,
    seed: int = 0,
    synth: bool = True,
    measure_unfit: bool = False,
    tuner: str = "xgb",
    progress: bool = True,
    plot: bool = True,
    timeout: float = 6 * 3600.0,
    fmax: bool = False,
) -> DseResult:
    """Explore `space` for `model`; see the module's docstring.

    Args:
        model: an ONNX model (path, bytes or ModelProto).
        space: an `HwSpace`, its JSON object or a path to its file.
        out_dir: where results, plots and the cache go (reused: the sweep resumes).
        trials: tuning trials per accelerator task of each candidate (0: default schedules).
        candidates: how many points of the space to evaluate beyond the presets (default: all
            candidates when there are at most 64, else 32).
        search: "auto", "grid", "xgb", "random" or "ga".
        calibration, input_shapes: as for `tensorforge.compile` (calibration inputs for a float
            model's int8 scales; static shapes for symbolic input dimensions).
        cluster: a Dask scheduler address, a `distributed.Client`, or "local" for a
            LocalCluster of two workers; None: evaluate here.
        synth: synthesize with Yosys (False: the screen's DSP and BRAM lower bounds only, for a
            quick look; LUT and FF are then unknown).
        measure_unfit: also tune and measure candidates that do not fit the part.
        tuner: the schedule tuner of each candidate's tasks.
        plot: write pareto.png (skipped with a warning when matplotlib is missing).
        timeout: seconds one candidate may take on a cluster.
        fmax: also place and route each candidate's GEMM core on an ECP5 for its Fmax.

    Raises:
        SpaceFileError: a malformed space (naming the field).
        ValueError: bad options, or a results folder that holds another model's results.
    """
    if not isinstance(space, HwSpace):
        space = HwSpace.from_json(space)
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}, not {search!r}")
    for name, value in (("trials", trials), ("candidates", candidates)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):  # fmt: skip
            raise ValueError(f"{name} must be a non-negative int, not {value!r}")
    data = model_bytes(model)
    digest = hashlib.sha256(data).hexdigest()[:16]  # a folder is never reused for another model
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _check_folder(out, digest)
    cspace = space.config_space()
    task = Task("dse.hwconfig", space.to_json(), "dse")
    n_valid = len(v) if (v := cspace.valid_indices()) is not None else len(cspace)
    if candidates is None:
        candidates = n_valid if n_valid <= 64 else 32
    candidates = min(candidates, n_valid)
    if search == "auto":
        search = "grid" if n_valid <= candidates else "xgb"
    options = {"feature": "knob", "plan_size": 16} if search == "xgb" else {}
    explorer = make_tuner(search, task, seed=seed, **options)

    common = {"part": space.part, "model": data, "calibration": calibration,
              "input_shapes": dict(input_shapes) if input_shapes else None,
              "trials": trials, "limits": space.limits, "area_cache": str(out / "synth"),
              "synth": synth, "measure_unfit": measure_unfit, "tuner": tuner,
              "seed": seed, "fmax": fmax}  # fmt: skip
    records: dict[str, dict[str, Any]] = {}
    interrupted = False
    with contextlib.ExitStack() as stack:
        evaluate = _evaluator(stack, cluster, timeout)
        total = len(space.presets) + candidates
        bar = stack.enter_context(tqdm(total=total, unit="candidate", desc=f"DSE on {space.part}",
                                       disable=not progress))  # fmt: skip

        def run(cfgs: list[tuple[HWConfig, dict[str, Any], str]]) -> list[dict[str, Any]]:
            todo, done = [], []
            for cfg, knobs, preset in cfgs:
                rec = _cached(out, cfg, digest, trials, synth, fmax)
                if rec is None:
                    todo.append((cfg, knobs, preset))
                else:
                    done.append(_finish(rec, cfg, knobs, preset, digest, out, bar, records))
            jobs = [dict(common, config=cfg.to_dict(), work_dir=str(_cand_dir(out, cfg)))
                    for cfg, _, _ in todo]  # fmt: skip

            def finished(k: int, rec: dict[str, Any]) -> None:
                cfg, knobs, preset = todo[k]
                done.append(_finish(rec, cfg, knobs, preset, digest, out, bar, records))

            def started(k: int) -> None:
                bar.set_description(f"DSE on {space.part}: {todo[k][0].name}")

            evaluate(jobs, finished, started)
            return done

        try:
            anchors = [(space.preset_config(p), _knobs_of(space, space.preset_config(p)), p)
                       for p in space.presets]  # fmt: skip
            for rec in run(anchors):
                values = _point_of(space, cspace, rec)
                if values is not None:  # the preset is a point of the space: the search knows it
                    explorer.load_history([_as_trial(task, values, rec)])
            counted = 0
            candidates = min(candidates, n_valid - len(explorer.visited))
            bar.total = len(space.presets) + candidates
            bar.refresh()
            batch = max(1, getattr(evaluate, "parallel", 1))
            while counted < candidates and explorer.has_next():
                picks = explorer.next_batch(min(batch, candidates - counted))
                picks = [i for i in picks if i not in explorer.visited]
                if not picks:
                    break
                cfgs = []
                for i in picks:
                    values = cspace.get(i).values
                    cfgs.append((space.config(values), values, ""))
                by_key = {r["key"]: r for r in run(cfgs)}
                counted += len(picks)
                explorer.tell(picks, [_as_result(values, by_key[config_key(cfg)])
                                      for cfg, values, _ in cfgs])  # fmt: skip
        except KeyboardInterrupt:
            interrupted = True
    result = DseResult(out, list(records.values()), space.part, interrupted)
    _write(result, space, digest, plot)
    return result


def _evaluator(stack: contextlib.ExitStack, cluster: Any, timeout: float) -> Callable:
    """A function (jobs, on_result, on_start) that evaluates candidate jobs here or on a Dask
    cluster (where on_start is not called: the jobs start as workers free up)."""
    if cluster is None:
        from ..autotune.measure import Builder, SimRunner

        builder = Builder()
        stack.callback(builder.close)
        runner = stack.enter_context(SimRunner("cyclesim"))

        def here(jobs: list[dict[str, Any]], on_result: Callable, on_start: Callable) -> None:
            for k, job in enumerate(jobs):
                on_start(k)
                on_result(k, evaluate_candidate(**job, measurers=(builder, runner)))

        here.parallel = 1  # type: ignore[attr-defined]
        return here
    from ..autotune.cluster import _Cluster, local_cluster

    address = cluster
    if cluster == "local":
        address = stack.enter_context(local_cluster(2))
    conn = _Cluster(address, connect_timeout=30.0)
    stack.callback(conn.close)

    def there(jobs: list[dict[str, Any]], on_result: Callable, on_start: Callable) -> None:
        def ended(k: int, res: Any) -> None:
            if res.status == "ok":
                on_result(k, res.value)
            else:
                on_result(k, {"config": jobs[k]["config"], "part": jobs[k]["part"],
                              "trials": jobs[k]["trials"], "fits": None,
                              "error": f"cluster_{res.status}",
                              "message": res.message})  # fmt: skip

        conn.map(_job, [(job,) for job in jobs], timeout, ended)

    there.parallel = conn.wait_for_threads()  # type: ignore[attr-defined]
    return there


def _job(job: dict[str, Any]) -> dict[str, Any]:
    """One candidate on a cluster worker."""
    return evaluate_candidate(**job)


def _cand_dir(out: Path, cfg: HWConfig) -> Path:
    return out / "candidates" / config_key(cfg)


def _check_folder(out: Path, digest: str) -> None:
    meta = out / "results.json"
    if meta.exists():
        try:
            old = json.loads(meta.read_text()).get("model_digest")
        except (ValueError, AttributeError):
            old = None
        if old not in (None, digest):
            raise ValueError(f"{out} holds the results of another model (digest {old}); give "
                             "another output folder")  # fmt: skip


def _cached(out: Path, cfg: HWConfig, digest: str, trials: int, synth: bool, fmax: bool
            ) -> dict[str, Any] | None:  # fmt: skip
    path = _cand_dir(out, cfg) / "result.json"
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
    except ValueError:
        return None
    if not isinstance(rec, dict) or rec.get("model_digest") != digest:
        return None
    if rec.get("error") == "synth_error" or rec.get("error", "").startswith("cluster_"):
        return None  # a tool or a cluster that failed: try again (a compile error stands)
    if rec.get("area", {}).get("source") == "screen" and synth and rec.get("error") != (
            "does_not_fit"):  # fmt: skip
        return None
    if rec.get("latency_ms") is not None and rec.get("trials", -1) < trials:
        return None  # a larger budget: resume its tuning
    if fmax and "fmax_mhz" not in rec and rec.get("error") != "does_not_fit":
        return None  # the Fmax is asked for now (synthesis and tuning are cached)
    return rec


def _finish(rec: dict[str, Any], cfg: HWConfig, knobs: Mapping[str, Any], preset: str,
            digest: str, out: Path, bar: tqdm, records: dict[str, dict[str, Any]]
            ) -> dict[str, Any]:  # fmt: skip
    rec = dict(rec, key=config_key(cfg), knobs=dict(knobs), model_digest=digest)
    rec["config"] = cfg.to_dict()
    if preset:
        rec["preset"] = preset
    path = _cand_dir(out, cfg) / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1))
    key = rec["key"]
    if key in records and records[key].get("preset") and not preset:
        rec["preset"] = records[key]["preset"]
    records[key] = rec
    bar.update(1)
    fitting = [r["latency_ms"] for r in records.values() if r.get("fits") and r.get("latency_ms")]
    if fitting:
        bar.set_postfix_str(f"best fitting {min(fitting):.2f} ms")
    return rec


def _knobs_of(space: HwSpace, cfg: HWConfig) -> dict[str, Any]:
    """The space's knob values of a config, as its `ConfigSpace` holds them."""
    return {k: _knob_value(getattr(cfg, k)) for k in space.knobs}


def _point_of(space: HwSpace, cspace: ConfigSpace, rec: Mapping[str, Any]
              ) -> dict[str, Any] | None:  # fmt: skip
    """The space's knob values of a record's config, when it is a point of the space."""
    try:
        cfg = HWConfig.from_dict(rec["config"])
        values = cspace.from_values(_knobs_of(space, cfg)).values
    except (ValueError, KeyError):
        return None
    if config_key(space.config(values)) != config_key(cfg):
        return None  # it differs from the base in a knob the space does not vary
    return values


def _as_result(values: Mapping[str, Any], rec: Mapping[str, Any]) -> MeasureResult:
    """A candidate as a tuner trial: its latency when it fits, else a failed trial."""
    ms = rec.get("latency_ms")
    if rec.get("fits") and ms:
        return MeasureResult(dict(values), float(ms), [float(ms)])
    return MeasureResult(dict(values), None, [], rec.get("error") or "does_not_fit",
                         rec.get("message", ""))  # fmt: skip


def _as_trial(task: Task, values: Mapping[str, Any], rec: Mapping[str, Any]) -> dict[str, Any]:
    r = _as_result(values, rec)
    return {"task": task.key, "config": dict(values), "cost": r.cost, "error": r.error,
            "message": r.message}  # fmt: skip


# ---- output --------------------------------------------------------------------------------------


def _write(result: DseResult, space: HwSpace, digest: str, plot: bool) -> None:
    out = result.out_dir
    for r in result.records:
        r["front"] = []
    for res in RESOURCES:
        for r in pareto_front(result.records, res):
            r["front"].append(res)
    meta = {"format": "tensorforge-dse/1", "model_digest": digest, "space": space.to_json(),
            "interrupted": result.interrupted, "candidates": result.records}  # fmt: skip
    (out / "results.json").write_text(json.dumps(meta, indent=1))
    knobs = list(space.knobs)
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "preset", *knobs, "clock_mhz", *CSV_FIELDS])
        for r in result.records:
            a = r.get("area", {})
            row = {"fits": r.get("fits"), "LUT": a.get("luts"), "FF": a.get("ffs"),
                   "DSP": a.get("dsps"), "BRAM36": a.get("bram36"),
                   "area_source": a.get("source"), "front": " ".join(r.get("front", [])),
                   **{k: r.get(k) for k in CSV_FIELDS if k not in _AREA_CSV}}  # fmt: skip
            w.writerow([r["config"]["name"], r.get("preset", ""),
                        *(r["config"].get(k) for k in knobs), r["config"]["clock_mhz"],
                        *(row[k] for k in CSV_FIELDS)])  # fmt: skip
    result.files = [out / "results.json", out / "results.csv"]
    if plot and result.fitting:
        try:
            from .plot import plot_front
        except ImportError as exc:  # pragma: no cover - matplotlib is an extra
            warnings.warn(f"no plot: {exc}", stacklevel=3)
            return
        try:
            result.files.append(plot_front(result, out / "pareto.png"))
        except ImportError as exc:
            warnings.warn(f"no plot (pip install 'tensorforge[plot]'): {exc}", stacklevel=3)


_AREA_CSV = {"fits", "LUT", "FF", "DSP", "BRAM36", "area_source", "front"}

__all__ = ["DseResult", "explore", "pareto_front", "Area"]
