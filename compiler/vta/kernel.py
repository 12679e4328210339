"""Compile quantized conv2d and dense to accelerator program images, and run them.

The integer semantics are ``compiler.quantize``'s: ``requant=RequantParams`` gives the ALU
steps after the bias (``shift``/``relu`` are a shorthand for a floor shift clipped to
``[-127, 127]`` or ``[0, 127]``), and ``residual=AddParams`` fuses the residual add of the
quantized graph (``tf.qadd``) after them.

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

from ...hw.config import HWConfig
from ...hw.isa import AluOp
from ...runtime.device.vta import RunResult, run_image
from ...runtime.program import ProgramImage
from ..autotune.dispatch import query as autotune_query
from ..quantize.requant import AluStep, RequantParams
from ..quantize.residual import AddParams, add_int8
from .codegen import generate_program
from .layout import INPUT, OUTPUT, RESIDUAL, pack_bias, pack_grouped, pack_nchw, unpack_nchw
from .operators import conv2d_te
from .reference import conv2d_reference, dense_reference, max_pool2d_reference, shift_requant
from .schedule import Conv2dSchedule, Conv2dWorkload, default_schedule, schedule_from
from .tile import TileProgram

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
    # The ALU steps after the bias (set by conv2d/dense; the bounds are requant.lo/hi).
    requant: RequantParams | None = None
    residual: AddParams | None = None  # a fused residual add (input slot ``R``)

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

    @property
    def output_shape(self) -> tuple[int, ...]:
        """The output's shape in the user's layout: (N, O, OH, OW) (pooled with a fused max
        pooling), or (M, N) for dense."""
        wl = self.workload
        return (wl.n, wl.oc) if self.op == "dense" else (wl.n, wl.oc, wl.ph, wl.pw)

    @property
    def residual_shape(self) -> tuple[int, ...]:
        """The shape of a fused residual add's operand: the conv's output, before pooling."""
        wl = self.workload
        return (wl.n, wl.oc) if self.op == "dense" else (wl.n, wl.oc, wl.oh, wl.ow)

    def reference(self, x: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """The int8 oracle (``compiler.quantize.reference``) of the same computation."""
        wl = self.workload
        rq = self.requant
        if self.op == "dense":
            y = dense_reference(x, self.weight, self.bias, self.shift, self.relu, requant=rq)
            return y if self.residual is None else self._add(y, residual)
        padding = (wl.pad_h, wl.pad_w)
        if not wl.symmetric:  # zeros are exact (0 is the zero point): padded here, then none
            x = np.pad(x, ((0, 0), (0, 0), (wl.pad_h, wl.pad_b), (wl.pad_w, wl.pad_r)))
            padding = (0, 0)
        y = conv2d_reference(
            x, self.weight, self.bias, (wl.stride_h, wl.stride_w), padding,
            self.shift, self.relu, requant=rq, residual=self._residual(residual),
            add=self.residual, groups=wl.groups,
        )  # fmt: skip
        return max_pool2d_reference(y, (wl.pool_h, wl.pool_w)) if wl.pooled else y

    def _add(self, y: np.ndarray, residual: np.ndarray | None) -> np.ndarray:
        return add_int8(y, self._residual(residual), self.residual)

    def _residual(self, r: np.ndarray | None) -> np.ndarray | None:
        if self.residual is None:
            if r is not None:
                raise ValueError(f"this {self.op} kernel has no fused residual add")
            return None
        r = np.asarray(r) if r is not None else None
        if r is None or r.shape != self.residual_shape or r.dtype != np.int8:
            got = "None" if r is None else f"{r.dtype} {r.shape}"
            raise ValueError(
                f"{self.op} residual must be int8 of shape {self.residual_shape}, not {got}"
            )
        return r

    def run(
        self,
        x: np.ndarray,
        backend: str = "sim",
        residual: np.ndarray | None = None,
        **options: object,
    ) -> tuple[np.ndarray, RunResult]:
        """Run on a device backend (``sim``, ``cyclesim``): (int8 output, the run's result).

        ``residual``: the int8 operand of a fused residual add (``residual_shape``: the conv's
        output before any fused pooling).
        """
        outputs, result = run_image(self.image, self.inputs(x, residual), backend, **options)
        return self.unpack(outputs[OUTPUT]), result

    def inputs(self, x: np.ndarray, residual: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The image's input slots for `x` (and a fused residual add's operand), packed: what
        `run` gives the device, and what `LoadedProgram.run` or a cocotb `Testbench` take.
        The output slot is ``Y`` (`unpack` it)."""
        inputs = {INPUT: self.pack(x)}
        r = self._residual(residual)
        if r is not None:
            wl = self.workload
            r4 = r.reshape(wl.n, wl.oc, wl.oh, wl.ow)
            inputs[RESIDUAL] = pack_nchw(self.config, r4, self.config.block_out)
        return inputs


def _pair(v: int | tuple[int, int], what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    if len(v) != 2:
        raise ValueError(f"{what} must be an int or a pair, not {v!r}")
    return int(v[0]), int(v[1])


def _requant(
    cfg: HWConfig,
    op: str,
    shift: int,
    relu: bool,
    requant: RequantParams | None,
    residual: AddParams | None,
    weight: np.ndarray,
) -> RequantParams:
    """The requantization to emit: ``requant``, or the shift/relu shorthand; checked for cfg."""
    if weight.dtype != np.int8:
        raise ValueError(f"{op} weights must be int8, not {weight.dtype}")
    if requant is None:
        requant = shift_requant(shift, relu, cfg)
    elif shift != 0 or relu:
        raise ValueError(
            f"{op}: give either requant or the shift/relu shorthand, not both "
            f"(shift={shift!r}, relu={relu!r})"
        )
    steps: list[tuple[str, AluStep | None]] = [("requant", s) for s in requant.steps]
    if requant.channel_multipliers:
        if len(requant.channel_multipliers) != weight.shape[0]:
            raise ValueError(f"{op}: {len(requant.channel_multipliers)} per-channel multipliers "
                             f"for {weight.shape[0]} output channels")  # fmt: skip
        if not cfg.alu_mul:
            raise ValueError(f"{op} per-channel requant multipliers need the ALU MUL extension, "
                             f"but HWConfig {cfg.name!r} has alu_mul=False")  # fmt: skip
    if requant.acc_width != cfg.acc_width:
        raise ValueError(f"{op} requant acc_width must be {cfg.acc_width} (HWConfig "
                         f"{cfg.name!r}), not {requant.acc_width}")  # fmt: skip
    if residual is not None:
        steps += [("residual lhs", residual.lhs), ("residual rhs", residual.rhs)]
        steps += [("residual requant", s) for s in residual.requant.steps]
    for what, step in steps:
        if step is not None and step.op == AluOp.MUL and step.imm == 0:
            raise ValueError(
                f"{op} {what} step MUL 0 must not reach the accelerator (its ALU stage would be "
                "a constant): leave the operation on the CPU"
            )
        if step is not None and step.op == AluOp.MUL and not cfg.alu_mul:
            raise ValueError(
                f"{op} {what} step MUL {step.imm} needs the ALU MUL extension, but HWConfig "
                f"{cfg.name!r} has alu_mul=False (requantize with mode='shift' and "
                "power-of-two scales)"
            )
    return requant


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
    requant: RequantParams | None = None,
    residual: AddParams | None = None,
    max_pool: int | tuple[int, int] | None = None,
    groups: int = 1,
) -> VtaKernel:
    """Compile ``requant(conv2d(x, weight) + bias)`` to int8 for the accelerator.

    Args:
        cfg: the accelerator configuration.
        data_shape: (N, C, H, W) of the int8 input.
        weight: (O, C / groups, KH, KW) int8; packed into the image as a constant.
        bias: (O,) int32 or None.
        stride, padding: per dimension or one int for both; padding is zeros on each side, or
            (top, left, bottom, right) for different amounts before and after (TensorFlow's
            "same" padding of strided convolutions, torch's even kernels).
        shift, relu: the shorthand requantization ``shift_requant(shift, relu)``: a floor
            arithmetic right shift, then a clip to [-127, 127] ([0, 127] with relu).
        schedule: the tiling knobs (need not divide the dimensions: edge tiles may be
            smaller); default: ``default_schedule(cfg, workload, vthreads)``.
        requant: the requantization (``compiler.quantize.requant_params``), instead of
            shift/relu; its ALU steps are emitted in order (MUL needs ``cfg.alu_mul``).
        residual: fuse ``add_int8(y, r, residual)`` (``compiler.quantize.residual``) after the
            requantization; ``run(x, residual=r)`` then takes the int8 operand r.
        max_pool: fuse a non-overlapping max pooling (window = stride, no padding) after
            everything else; the output is then (N, O, OH // ph, OW // pw).
        groups: a grouped conv (``C`` groups: depthwise) whose groups fit the channel blocks
            (``layout.group_blocks``): each output block's GEMMs reduce only over its groups'
            input blocks, narrow groups as a block-diagonal weight tile.

    The program is the TE operator ``operators.conv2d_te`` (tensorize, DMA and ALU pragmas,
    virtual threads) lowered by ``vta.lower`` and encoded by ``vta.codegen``.

    Raises:
        ValueError: bad shapes or arguments, a MUL step on a config without ``alu_mul``.
        ScheduleError: a schedule that does not tile the workload. LoweringError: a schedule
        whose buffers overflow an SRAM.
    """
    weight = np.asarray(weight)
    requant = _requant(cfg, "conv2d", shift, relu, requant, residual, weight)
    n, c, h, w = data_shape
    if not isinstance(groups, int) or groups < 1 or c % groups:
        raise ValueError(f"conv2d groups must be an int >= 1 dividing C={c}, not {groups!r}")
    if weight.ndim != 4 or weight.shape[1] != c // groups:
        raise ValueError(f"conv2d weights must be (O, {c // groups}, KH, KW), not {weight.shape}")
    sh, sw = _pair(stride, "stride")
    if isinstance(padding, tuple | list) and len(padding) == 4:  # (top, left, bottom, right)
        ph, pw, pb, pr = (int(p) for p in padding)
    else:
        (ph, pw), pb, pr = _pair(padding, "padding"), None, None
    o, _, kh, kw = weight.shape
    pool = (1, 1) if max_pool is None else _pair(max_pool, "max_pool")
    scales = bool(requant.channel_multipliers)
    wl = Conv2dWorkload(n, c, h, w, o, kh, kw, sh, sw, ph, pw, *pool, scales, groups, pb, pr)
    wl.group_blocks(cfg)  # groups that do not fit the blocks: a ValueError naming them
    return _compile(cfg, "conv2d", wl, weight, bias, (shift, relu, requant, residual), schedule,
                    vthreads)  # fmt: skip


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
    requant: RequantParams | None = None,
    residual: AddParams | None = None,
) -> VtaKernel:
    """Compile ``requant(A @ weight.T + bias)`` for A (m, K) int8, weight (N, K) int8.

    Dense is the 1x1 conv2d of an (m, K, 1, 1) input; see ``conv2d`` for the arguments.
    """
    weight = np.asarray(weight)
    requant = _requant(cfg, "dense", shift, relu, requant, residual, weight)
    if weight.ndim != 2:
        raise ValueError(f"dense weights must be 2-D (N, K), not shape {weight.shape}")
    nout, k = weight.shape
    wl = Conv2dWorkload(m, k, 1, 1, nout, 1, 1, channel_scales=bool(requant.channel_multipliers))
    w4 = weight.reshape(nout, k, 1, 1)
    kern = _compile(cfg, "dense", wl, w4, bias, (shift, relu, requant, residual), schedule,
                    vthreads)  # fmt: skip
    kern.weight = weight
    return kern


#: the `Conv2dWorkload` fields of a tuning workload, in the dataclass's order
SHAPE_FIELDS = ("n", "ic", "h", "w", "oc", "kh", "kw", "stride_h", "stride_w", "pad_h", "pad_w",
                "pool_h", "pool_w")  # fmt: skip


def tuning_workload(cfg: HWConfig, wl: Conv2dWorkload, residual: bool) -> dict:
    """The tuning workload of an accelerator conv2d/dense (``compiler.autotune.templates``):
    the hardware config, the conv2d's shape, whether a residual add is fused and (only when
    set, so earlier logs keep their keys) whether the requantization is per channel, the
    groups and asymmetric padding's bottom and right."""
    shape = {f: getattr(wl, f) for f in SHAPE_FIELDS}
    extra = {"channel_scales": True} if wl.channel_scales else {}
    extra.update({"groups": wl.groups} if wl.groups > 1 else {})
    extra.update({} if wl.symmetric else {"pad_bottom": wl.pad_b, "pad_right": wl.pad_r})
    return {"hw": cfg.to_dict(), **shape, "residual": residual, **extra}


def _compile(
    cfg: HWConfig,
    op: str,
    wl: Conv2dWorkload,
    weight: np.ndarray,
    bias: np.ndarray | None,
    epilogue: tuple[int, bool, RequantParams, AddParams | None],
    schedule: Conv2dSchedule | None,
    vthreads: int,
) -> VtaKernel:
    shift, relu, requant, residual = epilogue
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != (wl.oc,) or bias.dtype != np.int32:
            raise ValueError(f"{op} bias must be int32 of shape ({wl.oc},), not {bias.dtype} "
                             f"{bias.shape}")  # fmt: skip
    has_res = residual is not None
    sched = schedule
    if sched is None:
        tuned = autotune_query("vta.conv2d", tuning_workload(cfg, wl, has_res))
        sched = schedule_from(tuned) if tuned is not None else None
    sched = sched or default_schedule(cfg, wl, vthreads, has_res)
    sched.check(cfg, wl)
    w_packed = pack_grouped(cfg, weight, wl.groups)
    b_packed = pack_bias(cfg, bias, wl.oc) if bias is not None else None
    name = f"{op}_{wl.n}x{wl.ic}x{wl.h}x{wl.w}_{wl.oc}k{wl.kh}x{wl.kw}_vt{sched.vthreads}"
    name += f"_g{wl.groups}" if wl.groups > 1 else ""
    prog = conv2d_te(cfg, wl, sched, w_packed, b_packed, requant=requant, residual=residual,
                     name=name).tile_program()  # fmt: skip
    image = generate_program(prog, cfg)
    return VtaKernel(cfg, op, wl, sched, prog, image, weight, bias, shift, relu, requant,
                     residual)  # fmt: skip
