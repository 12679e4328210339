"""Accelerator devices: one protocol, several backends (sim, cyclesim, rtl, pynq)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import numpy as np

from ....hw.config import HWConfig
from .base import Device, DeviceError, LoadedProgram, RunResult

if TYPE_CHECKING:
    from ...program import ProgramImage

BACKENDS = ("sim", "cyclesim", "rtl", "pynq")
_NOT_BUILT: dict[str, str] = {}


def open_device(backend: str = "sim", config: str | HWConfig = "pynq", **options: object) -> Device:
    """Open an accelerator device.

    Args:
        backend: one of ``BACKENDS``.
        config: a HWConfig, a preset name or a JSON file path.
        options: backend options (``sim``: ``memory_bytes``, ``min_align``, ``max_steps``
            (the GEMM/ALU steps a run may take, `sim.functional.DEFAULT_MAX_STEPS`);
            ``cyclesim``: those and ``timing`` (a ``sim.timing.TimingParams``), ``trace`` (a
            Chrome trace path), ``min_align`` (4096 places buffers as a PYNQ board does);
            ``rtl``: ``simulator`` ("icarus" or "verilator"), ``memory_bytes``, ``cache_dir``,
            ``max_cycles``, ``timeout_s``; ``pynq``: ``bitstream`` or ``overlay``, ``ip_name``,
            ``timeout_s``, ``pynq_module``).

    Raises:
        DeviceError: for an unknown backend, one that is not built yet, or an option the
            backend does not take.
    """
    cfg = HWConfig.load(config)
    cls = _backend_class(backend)
    params = inspect.signature(cls.__init__).parameters
    takes = [p for p in list(params)[2:] if params[p].kind == inspect.Parameter.KEYWORD_ONLY
             or params[p].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]  # fmt: skip
    unknown = sorted(k for k in options if k not in takes)
    if unknown and not any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
        raise DeviceError(f"device backend {backend!r} takes the options {takes}, not {unknown}")
    return cls(cfg, **options)


def _backend_class(backend: str) -> type:
    if backend == "sim":
        from .sim import SimDevice

        return SimDevice
    if backend == "cyclesim":
        from .cyclesim import CycleSimDevice

        return CycleSimDevice
    if backend == "rtl":
        from .rtl import RtlDevice

        return RtlDevice
    if backend == "pynq":
        from .pynq import PynqDevice

        return PynqDevice
    if backend in _NOT_BUILT:
        raise DeviceError(
            f"device backend {backend!r} is not built yet: it needs {_NOT_BUILT[backend]}"
        )
    raise DeviceError(f"device backend must be one of {BACKENDS}, not {backend!r}")


def run_image(
    image: ProgramImage,
    inputs: dict[str, np.ndarray] | None = None,
    backend: str = "sim",
    *,
    seed: int = 0,
    **options: object,
) -> tuple[dict[str, np.ndarray], RunResult]:
    """Run a program image once on a fresh device of `backend` built for the image's config,
    then close the device. Input slots not given get seeded random values of their dtype (the
    timing models' cycles do not depend on data). `options` go to `open_device`.

    Returns:
        the output slots and the run's result (on ``cyclesim``, ``result.timing`` holds the
        whole timing).
    """
    given = inputs or {}
    wanted = {s.name for s in image.slots if s.kind == "input"}
    if not wanted <= set(given):
        given = {**image.random_inputs(seed), **given}
    device = open_device(backend, image.config, **options)
    try:
        return LoadedProgram.load(device, image).run(given)
    finally:
        device.close()


__all__ = [
    "BACKENDS",
    "Device",
    "DeviceError",
    "LoadedProgram",
    "RunResult",
    "open_device",
    "run_image",
]
