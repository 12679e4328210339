"""What an RPC server runs, in its worker processes: a module, a program image, a tuning trial.

Each job is a module-level function of plain data (paths in the server's work folder, arrays,
option dicts), run by the server in a crash-proof worker pool (`compiler.autotune.pool`), so a
crash in native code or an accelerator run past its time-out ends the job, not the server.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ...hw.config import HWConfig


def same_hardware(a: HWConfig, b: HWConfig) -> bool:
    """Whether two configs describe the same accelerator (names aside)."""
    da, db = a.to_dict(), b.to_dict()
    da.pop("name")
    db.pop("name")
    return da == db


def check_config(got: HWConfig, want: HWConfig | None, what: str) -> None:
    """Refuse `what` built for `got` on a server whose accelerator is `want` (None: any)."""
    if want is not None and not same_hardware(got, want):
        raise ValueError(
            f"{what} was compiled for HWConfig {got.name!r} ({got.bitstream_name}), but this "
            f"server's accelerator is {want.name!r} ({want.bitstream_name}): recompile it with "
            f"--target 'vta -config={want.name}' or serve the matching config"
        )


def run_module(path: str, inputs: dict[str, np.ndarray], device: str,
               device_options: dict[str, Any], config: dict[str, Any] | None,
               repeat: int) -> dict[str, Any]:  # fmt: skip
    """Load a module file, run it `repeat` times on `device`; outputs of the first run, the wall
    time of each, and the accelerator's cycles per call of the last."""
    from ...runtime.module import Module
    from ...runtime.program import ProgramImage

    module = Module.load(path)
    want = HWConfig.from_dict(config) if config else None
    accel = [k for k in module.kernels if k.kind == "vta"]
    for k in accel:
        check_config(ProgramImage.from_bytes(k.payload, path).config, want, "the module")
    if device == "pynq-model":
        return _on_board_model(path, "module", inputs, device_options, accel)
    if accel:
        module.use_device(device, **device_options)
    walls, outputs = [], None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        out = module.run(inputs)
        walls.append(time.perf_counter() - t0)
        outputs = outputs if outputs is not None else out
    calls = {label: r.cycles for label, r in module.device_results().items()}
    return {"outputs": outputs, "wall_s": walls, "calls": calls}


def run_program(path: str, inputs: dict[str, np.ndarray], device: str,
                device_options: dict[str, Any], config: dict[str, Any] | None
                ) -> dict[str, Any]:  # fmt: skip
    """Run a program image once on a fresh device: its output slots, cycles and counters."""
    from ...runtime.program import ProgramImage
    from ..device.vta import run_image

    with open(path, "rb") as f:
        image = ProgramImage.from_bytes(f.read(), path)
    want = HWConfig.from_dict(config) if config else None
    check_config(image.config, want, "the program image")
    if device == "pynq-model":
        return _on_board_model(path, "program", inputs, device_options, image.config)
    t0 = time.perf_counter()
    outputs, result = run_image(image, inputs, device, **device_options)
    return {"outputs": outputs, "wall_s": [time.perf_counter() - t0], "cycles": result.cycles,
            "stats": {k: int(v) for k, v in result.stats.items()}}  # fmt: skip


def _on_board_model(path: str, kind: str, inputs: dict[str, np.ndarray],
                    device_options: dict[str, Any], what: Any) -> dict[str, Any]:  # fmt: skip
    """The ``pynq-model`` device: the ``pynq`` backend's code on the board model (the RTL).
    Its options: ``simulator`` ("icarus" or "verilator"), ``timeout_s`` (one simulation's
    wall-clock limit, default 600)."""
    from ...runtime.device.vta.pynq_model import run_on_board_model
    from ...runtime.program import ProgramImage

    if kind == "module":
        if not what:
            raise ValueError("the module has no accelerator kernels to run on the board model")
        cfg = ProgramImage.from_bytes(what[0].payload, path).config
    else:
        cfg = what
    with open(path, "rb") as f:
        payload = f.read()
    simulator = str(device_options.get("simulator", "icarus"))
    # a ResNet-18 layer simulates for minutes: the server's run_timeout bounds it from outside
    timeout_s = float(device_options.get("timeout_s", 600.0))
    t0 = time.perf_counter()
    outputs, report = run_on_board_model(cfg, kind, payload, inputs, simulator, timeout_s)
    out: dict[str, Any] = {"outputs": outputs, "wall_s": [time.perf_counter() - t0]}
    if kind == "module":
        out["calls"] = report["calls"]
    else:
        out["cycles"], out["stats"] = report["cycles"], {"flushes": report["flushes"]}
    return out


def measure_artifact(meta: dict[str, Any], arrays: dict[str, np.ndarray],
                     blobs: dict[str, bytes], options: dict[str, Any],
                     config: dict[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    """One tuning trial (the auto-tuner's `run_job`) of an artifact sent as a payload."""
    from ...compiler.autotune.measure import run_job
    from ...compiler.autotune.rpc import artifact_from_payload

    artifact = artifact_from_payload(meta, arrays, blobs)
    if artifact.kind == "vta":
        want = HWConfig.from_dict(config) if config else None
        check_config(HWConfig.from_dict(dict(artifact.hw or {})), want, "the tuning artifact")
    outcome = run_job(artifact, options)
    return {"costs": outcome.costs, "stats": dict(outcome.stats)}
