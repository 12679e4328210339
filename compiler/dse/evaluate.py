"""One candidate of a design-space exploration: its area, then its model latency with retuned
schedules.

`evaluate_candidate` is a module-level function of JSON-like arguments, so that it runs in this
process or on a Dask worker alike. For a config it

1. screens it (`area.screen`) and synthesizes the whole top with Yosys for the part
   (`area.synthesize`, cached by the RTL's knobs); where asked, places and routes its GEMM core
   on an ECP5 for an Fmax (`area.ecp5_gemm_fmax`);
2. extracts the model's accelerator tasks for the config and tunes each on the ``cyclesim``
   runner with `trials` trials (`autotune.tune_tasks`; the log is kept in the candidate's folder,
   so a larger budget later resumes it);
3. compiles the model with default and with tuned schedules, runs both on the cycle-accurate
   simulator, and sums the accelerator's cycles over the model's calls: latency at the config's
   clock, GOPS (the tasks' operations per second) and GEMM MAC utilization (cycles in which the
   GEMM core multiplies, over all cycles).

The CPU's share of a model (the layers left on the host) is the same for every candidate and is
not included.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...hw.config import HWConfig
from ...hw.synth import SynthError
from .area import Area, ecp5_gemm_fmax, screen, screen_area, synthesize


def _first_batch(calibration: Any) -> Mapping[str, Any]:
    if isinstance(calibration, Mapping):
        return calibration
    return calibration[0]


# the partition's reasons for a layer that no accelerator tiling fits (`partition.fit_problem`)
_UNFIT = ("needs more SRAM entries", "an instruction field overflows", "no row tiling passes",
          "no tiling of the")  # fmt: skip


def model_cycles(model: Any, target: str, calibration: Any, tuning_log: Path | None,
                 input_shapes: Mapping[str, Any] | None = None) -> dict[str, int]:  # fmt: skip
    """Cycles and GEMM MAC steps of one run of `model`'s accelerator calls on cyclesim."""
    from ... import api

    module = api.compile(model, target, input_shapes=input_shapes, calibration=calibration,
                         tuning_log=tuning_log)  # fmt: skip
    unfit = [f"{node}: {why}" for node, op, where, why in module.stats.get("placement", ())
             if where == "cpu" and any(w in why for w in _UNFIT)]  # fmt: skip
    if unfit:  # its cycles would leave those layers out: not comparable with the others'
        raise ValueError(f"{len(unfit)} layer(s) fit no tiling of this config's SRAMs or "
                         f"instruction fields and would run on the CPU: "
                         f"{'; '.join(unfit)}")  # fmt: skip
    module.run(_first_batch(calibration))
    results = module.device_results().values()
    return {
        "cycles": int(sum(r.cycles or 0 for r in results)),
        "gemm_mac_steps": int(sum(r.stats.get("gemm_mac_steps", 0) for r in results)),
        "calls": len(results),
    }


def evaluate_candidate(
    config: Mapping[str, Any],
    part: str,
    model: Any,
    calibration: Any,
    work_dir: str | Path,
    trials: int,
    limits: Mapping[str, float] | None = None,
    area_cache: str | Path | None = None,
    synth: bool = True,
    measure_unfit: bool = False,
    tuner: str = "xgb",
    seed: int = 0,
    measurers: tuple[Any, Any] | None = None,
    input_shapes: Mapping[str, Any] | None = None,
    fmax: bool = False,
) -> dict[str, Any]:
    """Evaluate one config; returns its result record (see `explore`'s results.json).

    Args:
        config: the HWConfig as a dict.
        part: the FPGA part.
        model, calibration, input_shapes: what `tensorforge.compile` takes for a vta target.
        work_dir: the candidate's folder (its HWConfig JSON and tuning log).
        trials: tuning trials per task (0: default schedules only).
        limits: resource shares of the part a fitting candidate may use.
        area_cache: the synthesis cache folder.
        synth: synthesize with Yosys (False: the screen's lower bounds only).
        measure_unfit: measure latency also for a config that does not fit.
        tuner: the schedule search ("xgb", "ga", "random", "grid").
        measurers: a (Builder, Runner) to use (default: local pools for this candidate).
        fmax: also place and route the GEMM core on an ECP5 for its Fmax (`fmax_mhz`, and
            `clock_met`: whether the config's clock is at most that).

    A failure of one step (Yosys, a compile, a run) is recorded in the result's ``error`` and
    ``message``; it never raises, except KeyboardInterrupt.
    """
    t0 = time.perf_counter()
    cfg = HWConfig.from_dict(dict(config))
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    cfg_path = work / "hwconfig.json"
    cfg_path.write_text(cfg.to_json())
    rec: dict[str, Any] = {"config": cfg.to_dict(), "part": part, "trials": trials,
                           "error": "", "message": ""}  # fmt: skip
    reasons = screen(cfg, part, limits)
    area: Area | None = screen_area(cfg)
    if reasons:
        rec.update(error="does_not_fit", message="; ".join(reasons))
    elif synth:
        try:
            area = synthesize(cfg, part, area_cache)
        except SynthError as exc:
            area = None
            rec.update(error="synth_error", message=str(exc))
    if area is not None:
        rec["area"] = area.to_json()
        over = area.over(part, limits)
        rec["fits"] = not over
        if over and not rec["error"]:
            rec.update(error="does_not_fit", message="; ".join(over))
    else:
        rec["fits"] = None
    if fmax and rec["error"] != "does_not_fit":
        try:
            rec["fmax_mhz"] = round(ecp5_gemm_fmax(cfg, area_cache), 1)
            rec["clock_met"] = cfg.clock_mhz <= rec["fmax_mhz"]
        except SynthError as exc:
            rec["fmax_error"] = str(exc)
    if rec["error"] == "synth_error" or (rec["error"] == "does_not_fit" and not measure_unfit):
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        return rec
    try:
        rec.update(_latency(cfg, cfg_path, model, calibration, input_shapes, work, trials,
                            tuner, seed, measurers))  # fmt: skip
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one candidate's failure never stops the sweep
        if not rec["error"]:
            rec.update(error="latency_error", message=f"{type(exc).__name__}: {exc}")
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    return rec


def _latency(cfg: HWConfig, cfg_path: Path, model: Any, calibration: Any,
             input_shapes: Mapping[str, Any] | None, work: Path, trials: int, tuner: str,
             seed: int, measurers: tuple[Any, Any] | None) -> dict[str, Any]:  # fmt: skip
    from ..autotune.driver import extract_tasks, tune_tasks
    from ..autotune.measure import Builder, SimRunner

    target = f"vta -config={cfg_path} -device=cyclesim"
    tasks = extract_tasks(model, target, input_shapes, calibration)
    log = work / "tune.jsonl"
    t0 = time.perf_counter()
    if trials > 0 and tasks:
        with contextlib.ExitStack() as stack:
            if measurers is None:
                builder = Builder()
                stack.callback(builder.close)
                runner = stack.enter_context(SimRunner("cyclesim"))
            else:
                builder, runner = measurers
            tune_tasks(tasks, trials, builder, runner, log=log, tuner=tuner, seed=seed,
                       progress=False)  # fmt: skip
    tune_s = time.perf_counter() - t0
    default = model_cycles(model, target, calibration, None, input_shapes)
    tuned = model_cycles(model, target, calibration, log if log.exists() else None, input_shapes)
    ops = sum(t.flops * t.weight for t in tasks)
    ms = tuned["cycles"] / (cfg.clock_mhz * 1e3)
    return {
        "tasks": len(tasks),
        "calls": tuned["calls"],
        "cycles_default": default["cycles"],
        "cycles": tuned["cycles"],
        "latency_ms_default": default["cycles"] / (cfg.clock_mhz * 1e3),
        "latency_ms": ms,
        "gops": ops / (ms * 1e-3) / 1e9 if ms > 0 else 0.0,
        "mac_util": tuned["gemm_mac_steps"] / tuned["cycles"] if tuned["cycles"] else 0.0,
        "peak_gops": cfg.peak_gops,
        "tune_s": round(tune_s, 1),
    }
