"""Compile quantized conv2d and dense to accelerator program images, and run them.

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> cfg = HWConfig.preset("tiny")
    >>> rng = np.random.default_rng(0)
    >>> w = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    >>> k = dense(cfg, 4, w, shift=6, relu=True, vthreads=2)
    >>> a = rng.integers(-128, 128, (4, 8), dtype=np.int8)
    >>> out, _ = k.run(a)
    >>> bool(np.array_equal(out, k.reference(a)))
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....hw.config import HWConfig
from ....runtime.device.vta import LoadedProgram, RunResult, open_device
from ....runtime.program import ProgramImage
from ...codegen.vta import generate_program
from ...codegen.vta_tile import TileProgram
from .conv2d import INPUT, OUTPUT, conv2d_tile_program
from .layout import pack_bias, pack_nchw, pack_oihw, unpack_nchw
from .reference import conv2d_reference, dense_reference
from .schedule import Conv2dSchedule, Conv2dWorkload, default_schedule

__all__ = ["VtaKernel", "conv2d", "dense"]


@dataclass
class VtaKernel:
    """A compiled conv2d or dense: its program image and what it needs to run and check."""

    config: HWConfig
    op: str  # "conv2d" or "dense"
    workload: Conv2dWorkload
    schedule: Conv2dSchedule
    tile_program: TileProgram
    image: ProgramImage
    weight: np.ndarray
    bias: np.ndarray | None
    shift: int
    relu: bool

    def pack(self, x: np.ndarray) -> np.ndarray:
        """Data in the user's layout (NCHW, or (M, K) for dense) -> the packed input slot."""
        x = np.asarray(x)
        wl = self.workload
        want = (wl.n, wl.ic) if self.op == "dense" else (wl.n, wl.ic, wl.h, wl.w)
        if x.shape != want or x.dtype != np.int8:
            raise ValueError(
                f"{self.op} input must be int8 of shape {want}, not {x.dtype} {x.shape}"
            )
        return pack_nchw(self.config, x.reshape(wl.n, wl.ic, wl.h, wl.w))

    def unpack(self, y: np.ndarray) -> np.ndarray:
        """The packed output slot -> NCHW (or (M, N) for dense)."""
        out = unpack_nchw(self.config, y, self.workload.n, self.workload.oc)
        return out.reshape(out.shape[:2]) if self.op == "dense" else out

    def reference(self, x: np.ndarray) -> np.ndarray:
        """The numpy int8 reference of the same quantized computation."""
        wl = self.workload
        if self.op == "dense":
            return dense_reference(x, self.weight, self.bias, self.shift, self.relu)
        return conv2d_reference(
            x, self.weight, self.bias, (wl.stride_h, wl.stride_w), (wl.pad_h, wl.pad_w),
            self.shift, self.relu,
        )  # fmt: skip

    def run(
        self, x: np.ndarray, backend: str = "sim", **options: object
    ) -> tuple[np.ndarray, RunResult]:
        """Run on a device backend (``sim``, ``cyclesim``): (int8 output, the run's result)."""
        device = open_device(backend, self.config, **options)
        try:
            prog = LoadedProgram.load(device, self.image)
            outputs, result = prog.run({INPUT: self.pack(x)})
        finally:
            device.close()
        return self.unpack(outputs[OUTPUT]), result


def _pair(v: int | tuple[int, int], what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    if len(v) != 2:
        raise ValueError(f"{what} must be an int or a pair, not {v!r}")
    return int(v[0]), int(v[1])


def _check_requant(shift: int, weight: np.ndarray) -> None:
    if not isinstance(shift, int) or not 0 <= shift <= 31:
        raise ValueError(f"shift must be an int in [0, 31], not {shift!r}")
    if weight.dtype != np.int8:
        raise ValueError(f"weights must be int8, not {weight.dtype}")


def conv2d(
    cfg: HWConfig,
    data_shape: tuple[int, int, int, int],
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    shift: int = 0,
    relu: bool = False,
    schedule: Conv2dSchedule | None = None,
    vthreads: int = 1,
) -> VtaKernel:
    """Compile ``clip((conv2d(x, weight) + bias) >> shift)`` to int8 for the accelerator.

    Args:
        cfg: the accelerator configuration.
        data_shape: (N, C, H, W) of the int8 input.
        weight: (O, C, KH, KW) int8; packed into the image as a constant.
        bias: (O,) int32 or None.
        stride, padding: per dimension or one int for both; padding is zeros on each side.
        shift: requantization right shift (arithmetic); relu clips at 0 instead of -128.
        schedule: the tiling knobs; default: ``default_schedule(cfg, workload, vthreads)``.

    Raises:
        ValueError: bad shapes or arguments. ScheduleError: a schedule that does not tile
        the workload. LoweringError: a schedule whose buffers overflow an SRAM.
    """
    weight = np.asarray(weight)
    _check_requant(shift, weight)
    n, c, h, w = data_shape
    if weight.ndim != 4 or weight.shape[1] != c:
        raise ValueError(f"conv2d weights must be (O, {c}, KH, KW), not {weight.shape}")
    (sh, sw), (ph, pw) = _pair(stride, "stride"), _pair(padding, "padding")
    o, _, kh, kw = weight.shape
    wl = Conv2dWorkload(n, c, h, w, o, kh, kw, sh, sw, ph, pw)
    return _compile(cfg, "conv2d", wl, weight, bias, shift, relu, schedule, vthreads)


def dense(
    cfg: HWConfig,
    m: int,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    shift: int = 0,
    relu: bool = False,
    schedule: Conv2dSchedule | None = None,
    vthreads: int = 1,
) -> VtaKernel:
    """Compile ``clip((A @ weight.T + bias) >> shift)`` for A (m, K) int8, weight (N, K) int8.

    Dense is the 1x1 conv2d of an (m, K, 1, 1) input; see ``conv2d`` for the arguments.
    """
    weight = np.asarray(weight)
    _check_requant(shift, weight)
    if weight.ndim != 2:
        raise ValueError(f"dense weights must be 2-D (N, K), not shape {weight.shape}")
    nout, k = weight.shape
    wl = Conv2dWorkload(m, k, 1, 1, nout, 1, 1)
    w4 = weight.reshape(nout, k, 1, 1)
    kern = _compile(cfg, "dense", wl, w4, bias, shift, relu, schedule, vthreads)
    kern.weight = weight
    return kern


def _compile(
    cfg: HWConfig,
    op: str,
    wl: Conv2dWorkload,
    weight: np.ndarray,
    bias: np.ndarray | None,
    shift: int,
    relu: bool,
    schedule: Conv2dSchedule | None,
    vthreads: int,
) -> VtaKernel:
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != (wl.oc,) or bias.dtype != np.int32:
            raise ValueError(f"{op} bias must be int32 of shape ({wl.oc},), not {bias.dtype} "
                             f"{bias.shape}")  # fmt: skip
    sched = schedule if schedule is not None else default_schedule(cfg, wl, vthreads)
    w_packed = pack_oihw(cfg, weight)
    b_packed = pack_bias(cfg, bias, wl.oc) if bias is not None else None
    name = f"{op}_{wl.n}x{wl.ic}x{wl.h}x{wl.w}_{wl.oc}k{wl.kh}x{wl.kw}_vt{sched.vthreads}"
    prog = conv2d_tile_program(cfg, wl, sched, w_packed, b_packed, shift, relu, name)
    image = generate_program(prog, cfg)
    return VtaKernel(cfg, op, wl, sched, prog, image, weight, bias, shift, relu)
