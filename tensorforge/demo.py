"""A hand-assembled int8 matmul kernel, and the demo that runs it on the simulator.

The kernel computes ``C = min(max((A @ W.T + bias) >> shift, 0), 127)`` with A (M, K) int8,
W (N, K) int8 (weights stored [out][in], as the GEMM core reads them) and bias (N,) int32. It
tiles A's rows, double-buffers the INP and OUT tiles, and synchronises the load, compute and
store stages with dependency tokens, so loads of tile t+1 overlap compute of tile t.

Later issues replace the hand assembly with the compiler; the demo then becomes a model.

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> k = build_matmul(HWConfig.preset("tiny"), m=4, k=8, n=8, seed=0)
    >>> out, result = k.run_on("sim")
    >>> bool(np.array_equal(out, k.reference()))
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .hw.config import HWConfig
from .hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemInsn, MemType, Opcode, Uop
from .runtime.device.vta import LoadedProgram, RunResult, open_device
from .runtime.program import UOP_BLOB, ProgramBuilder, ProgramImage


@dataclass
class MatmulKernel:
    """A built matmul program image with its operands and packing helpers."""

    config: HWConfig
    image: ProgramImage
    a: np.ndarray
    w: np.ndarray
    bias: np.ndarray
    shift: int
    tile_rows: int

    def reference(self) -> np.ndarray:
        """The same computation in plain numpy: the oracle the simulators must match."""
        acc = self.a.astype(np.int64) @ self.w.astype(np.int64).T + self.bias.astype(np.int64)
        acc = ((acc + (1 << 31)) % (1 << 32)) - (1 << 31)  # the accumulator is 32 bits
        return np.clip(acc >> self.shift, 0, 127).astype(np.int8)

    def run_on(self, backend: str = "sim", **options: object) -> tuple[np.ndarray, RunResult]:
        """Run on a device backend; returns C (M, N) int8 and the run's result."""
        device = open_device(backend, self.config, **options)
        try:
            prog = LoadedProgram.load(device, self.image)
            outputs, result = prog.run(self.inputs())
            return unpack_out(self.config, outputs["C"]), result
        finally:
            device.close()

    def inputs(self) -> dict[str, np.ndarray]:
        """The image's input slot ``A`` holding `a`, packed; the output slot is ``C``."""
        return {"A": pack_inp(self.config, self.a)}


def pack_inp(cfg: HWConfig, a: np.ndarray) -> np.ndarray:
    """(M, K) -> INP elements (M/BATCH, K/BLOCK_IN, BATCH, BLOCK_IN)."""
    m, k = a.shape
    return np.ascontiguousarray(
        a.reshape(m // cfg.batch, cfg.batch, k // cfg.block_in, cfg.block_in).transpose(0, 2, 1, 3)
    )


def pack_wgt(cfg: HWConfig, w: np.ndarray) -> np.ndarray:
    """(N, K) -> WGT elements (N/BLOCK_OUT, K/BLOCK_IN, BLOCK_OUT, BLOCK_IN)."""
    n, k = w.shape
    blocks = w.reshape(n // cfg.block_out, cfg.block_out, k // cfg.block_in, cfg.block_in)
    return np.ascontiguousarray(blocks.transpose(0, 2, 1, 3))


def unpack_out(cfg: HWConfig, c: np.ndarray) -> np.ndarray:
    """OUT elements (M/BATCH, N/BLOCK_OUT, BATCH, BLOCK_OUT) -> (M, N)."""
    mb, nb, b, bo = c.shape
    return np.ascontiguousarray(c.transpose(0, 2, 1, 3).reshape(mb * b, nb * bo))


def _check_dims(cfg: HWConfig, m: int, k: int, n: int) -> None:
    for name, value, unit, knob in (
        ("m", m, cfg.batch, "BATCH"),
        ("k", k, cfg.block_in, "BLOCK_IN"),
        ("n", n, cfg.block_out, "BLOCK_OUT"),
    ):
        if value <= 0 or value % unit:
            raise ValueError(
                f"matmul {name} must be a positive multiple of {knob} ({unit}) for HWConfig "
                f"{cfg.name!r}, not {value}"
            )


def _pick_tile_rows(cfg: HWConfig, mb: int, kb: int, nb: int, tile_rows: int | None) -> int:
    """The most row groups per tile that fit two INP tiles and two OUT tiles (and divide M)."""
    if nb * kb > cfg.wgt_depth:
        raise ValueError(
            f"the matmul kernel keeps all weights on chip: {nb * kb} WGT elements do not fit "
            f"the WGT buffer's {cfg.wgt_depth}"
        )
    fits = [
        t
        for t in range(1, mb + 1)
        if mb % t == 0
        and 2 * t * kb <= cfg.inp_depth
        and nb + 2 * t * nb <= cfg.acc_depth
        and t < 1 << 14
    ]
    if tile_rows is not None:
        if tile_rows not in fits:
            raise ValueError(
                f"tile_rows must divide M/BATCH ({mb}) and fit the buffers; candidates: {fits}, "
                f"not {tile_rows}"
            )
        return tile_rows
    if not fits:
        raise ValueError(f"no row tile of the matmul fits the INP/ACC buffers of {cfg.name!r}")
    return max(fits)


def build_matmul(
    cfg: HWConfig,
    m: int,
    k: int,
    n: int,
    *,
    shift: int = 8,
    tile_rows: int | None = None,
    seed: int = 0,
    a: np.ndarray | None = None,
    w: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> MatmulKernel:
    """Assemble the tiled int8 matmul for ``cfg`` (random operands from ``seed`` unless given).

    Args:
        m, k, n: A is (m, k), W is (n, k); multiples of BATCH, BLOCK_IN, BLOCK_OUT.
        shift: the requantization right shift.
        tile_rows: row groups (of BATCH rows) per tile; default: the most that fit.

    Raises:
        ValueError: bad dimensions, or operands that do not fit on chip.
    """
    _check_dims(cfg, m, k, n)
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8) if a is None else a
    w = rng.integers(-128, 128, (n, k), dtype=np.int8) if w is None else w
    bias = rng.integers(-(1 << 12), 1 << 12, n, dtype=np.int32) if bias is None else bias
    mb, kb, nb = m // cfg.batch, k // cfg.block_in, n // cfg.block_out
    tm = _pick_tile_rows(cfg, mb, kb, nb, tile_rows)
    tiles = mb // tm
    nslots = 2 if tiles > 1 else 1

    b = ProgramBuilder(cfg, name=f"matmul_{m}x{k}x{n}")
    b.slot("A", "input", (mb, kb, cfg.batch, cfg.block_in))
    b.slot("C", "output", (mb, nb, cfg.batch, cfg.block_out))
    b.blob("W", pack_wgt(cfg, w))
    acc_bias = np.broadcast_to(bias.astype(np.int32).reshape(nb, 1, cfg.block_out),
                               (nb, cfg.batch, cfg.block_out))  # fmt: skip
    b.blob("bias", np.ascontiguousarray(acc_bias))

    inp_base = [s * tm * kb for s in range(nslots)]
    out_base = [nb + s * tm * nb for s in range(nslots)]  # ACC: bias first, then OUT tiles
    gemm_uops = [b.add_uops([Uop(out_base[s], inp_base[s] + j, j) for j in range(kb)])
                 for s in range(nslots)]  # fmt: skip
    tile_uop = [b.add_uops([Uop(out_base[s], 0, 0)]) for s in range(nslots)]
    loops = dict(iter_out=tm, iter_in=nb, dst_factor_out=nb, dst_factor_in=1)

    # Compute stage: micro-ops and bias into the chip; load stage: every weight.
    b.emit(MemInsn(Opcode.LOAD, MemType.UOP, 0, 0, 1, len(b.uops), len(b.uops)), reloc=UOP_BLOB)
    b.emit(MemInsn(Opcode.LOAD, MemType.ACC, 0, 0, 1, nb, nb), reloc="bias")
    b.emit(MemInsn(Opcode.LOAD, MemType.WGT, 0, 0, 1, nb * kb, nb * kb), reloc="W")
    for t in range(tiles):
        s = t % nslots
        reuse = t >= nslots  # this tile's INP/OUT slot held tile t - nslots
        frees = t + nslots < tiles  # a later tile reuses this tile's slots
        b.emit(
            MemInsn(Opcode.LOAD, MemType.INP, inp_base[s], t * tm * kb, tm, kb, kb,
                    pop_next=reuse, push_next=True),
            reloc="A",
        )  # fmt: skip
        one = tile_uop[s]
        b.emit(GemmInsn(reset_reg=True, uop_bgn=one, uop_end=one + 1, **loops,
                        pop_prev=True, pop_next=reuse))  # fmt: skip
        g = gemm_uops[s]
        b.emit(GemmInsn(uop_bgn=g, uop_end=g + kb, **loops, src_factor_out=kb, wgt_factor_in=kb,
                        push_prev=frees))  # fmt: skip
        b.emit(AluInsn(uop_bgn=one, uop_end=one + 1, **loops, src_factor_in=1,
                       alu_opcode=AluOp.ADD))  # fmt: skip
        for op, imm in ((AluOp.SHR, shift), (AluOp.MAX, 0)):
            b.emit(AluInsn(uop_bgn=one, uop_end=one + 1, **loops, alu_opcode=op, use_imm=True,
                           imm=imm))  # fmt: skip
        b.emit(AluInsn(uop_bgn=one, uop_end=one + 1, **loops, alu_opcode=AluOp.MIN, use_imm=True,
                       imm=127, push_next=True))  # fmt: skip
        b.emit(
            MemInsn(Opcode.STORE, MemType.OUT, out_base[s], t * tm * nb, tm, nb, nb,
                    pop_prev=True, push_prev=frees or t == tiles - 1),
            reloc="C",
        )  # fmt: skip
    b.emit(FinishInsn(pop_next=True))  # waits for the last store
    return MatmulKernel(cfg, b.build(), a, w, bias, shift, tm)


def demo_kernel(cfg: HWConfig) -> MatmulKernel:
    """The demo's matmul, sized to the config: 256 x 16 blocks @ 16 x 8 blocks."""
    return build_matmul(cfg, 256 * cfg.batch, 16 * cfg.block_in, 8 * cfg.block_out, seed=0)


def run_demo(
    config: str | HWConfig = "pynq",
    save: str | None = None,
    backend: str = "sim",
    **options: object,
) -> bool:
    """Assemble, run on a simulator backend, check against numpy, print a report."""
    cfg = HWConfig.load(config)
    kernel = demo_kernel(cfg)
    (m, k), n = kernel.a.shape, kernel.w.shape[0]
    out, result = kernel.run_on(backend, **options)
    ref = kernel.reference()
    ok = bool(np.array_equal(out, ref))
    s = result.stats
    print(f"TensorForge demo: int8 matmul {m}x{k} @ {k}x{n} + bias, >>{kernel.shift}, clip [0,127]")
    print(f"  HWConfig {cfg.name!r} ({cfg.bitstream_name}), backend {result.backend}")
    print(
        f"  program: {kernel.image.insn_count} instructions, "
        f"{m // cfg.batch // kernel.tile_rows} row tile(s) of {kernel.tile_rows * cfg.batch} rows, "
        "double-buffered"
    )
    timing = getattr(result, "timing", None)
    # The timing model's own counters are summarized by its table below, not listed one by one.
    hidden = timing.counters() if timing is not None else {}
    print(f"  {'counter':<18}{'value':>12}")
    for name, value in s.items():
        if name not in hidden:
            print(f"  {name:<18}{value:>12,}")
    if timing is not None:
        print(timing.summary())
    if "trace" in options:
        print(f"  trace written to {options['trace']} (open it in https://ui.perfetto.dev)")
    print(f"  simulated in {result.wall_s * 1e3:.1f} ms")
    mism = int(np.count_nonzero(out != ref))
    verdict = "bit-exact" if ok else f"MISMATCH in {mism} of {out.size} elements"
    print(f"  vs numpy: {verdict}")
    if save:
        kernel.image.save(save)
        print(f"  program image saved to {save} (run it with: tensorforge sim run {save})")
    return ok
