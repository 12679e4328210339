"""Numpy models and SRAM images for the hw tests: independent of the Amaranth code."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import (
    AluInsn,
    AluOp,
    GemmInsn,
    Uop,
    alu_apply,
    decode_uop,
    encode_uop,
    wrap,
)

# buffer -> (depth attribute, lane shape, numpy dtype)
_BUFFERS = {
    "uop": ("uop_depth", None, "<u4"),
    "inp": ("inp_depth", ("batch", "block_in"), "<i1"),
    "wgt": ("wgt_depth", ("block_out", "block_in"), "<i1"),
    "acc": ("acc_depth", ("batch", "block_out"), "<i4"),
    "out": ("out_depth", ("batch", "block_out"), "<i1"),
}


def buffer_shape(cfg: HWConfig, buf: str) -> tuple[int, ...]:
    depth, lanes, _ = _BUFFERS[buf]
    return (getattr(cfg, depth), *(getattr(cfg, a) for a in lanes or ()))


def pack(row: np.ndarray, buf: str) -> int:
    """One SRAM word: the element's little-endian bytes."""
    return int.from_bytes(np.ascontiguousarray(row, dtype=_BUFFERS[buf][2]).tobytes(), "little")


def unpack(word: int, cfg: HWConfig, buf: str) -> np.ndarray:
    dtype = np.dtype(_BUFFERS[buf][2])
    shape = buffer_shape(cfg, buf)[1:]
    n = int(np.prod(shape)) * dtype.itemsize
    return np.frombuffer(word.to_bytes(n, "little"), dtype=dtype).reshape(shape).astype(np.int64)


@dataclass
class Srams:
    """Numpy contents of the SRAMs (int64 lanes; uop as uint32 words)."""

    cfg: HWConfig
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def random(cls, cfg: HWConfig, rng: np.random.Generator) -> Srams:
        s = cls(cfg)
        s.arrays["uop"] = np.zeros(cfg.uop_depth, dtype=np.int64)
        for buf, (lo, hi) in {"inp": (-128, 128), "wgt": (-128, 128), "out": (-128, 128)}.items():
            s.arrays[buf] = rng.integers(lo, hi, buffer_shape(cfg, buf))
        s.arrays["acc"] = rng.integers(-(1 << 31), 1 << 31, buffer_shape(cfg, "acc"))
        return s

    def set_uops(self, base: int, uops: list) -> None:
        for i, u in enumerate(uops):
            self.arrays["uop"][base + i] = int.from_bytes(encode_uop(u, self.cfg), "little")

    def copy(self) -> Srams:
        return Srams(self.cfg, {k: v.copy() for k, v in self.arrays.items()})


def gemm_model(insn: GemmInsn, srams: Srams) -> int:
    """Execute ``insn`` on ``srams`` one step at a time, in loop order; return the step count."""
    cfg, a = srams.cfg, srams.arrays
    n = 0
    for i_out in range(insn.iter_out):
        for i_in in range(insn.iter_in):
            for k in range(insn.uop_bgn, insn.uop_end):
                u = decode_uop(int(a["uop"][k]).to_bytes(4, "little"), cfg)
                dst = u.dst_idx + i_out * insn.dst_factor_out + i_in * insn.dst_factor_in
                src = u.src_idx + i_out * insn.src_factor_out + i_in * insn.src_factor_in
                wgt = u.wgt_idx + i_out * insn.wgt_factor_out + i_in * insn.wgt_factor_in
                dst %= cfg.acc_depth
                if insn.requant:  # src offsets 0; OUT the requantized sum, ACC 0
                    prod = a["inp"][u.src_idx % cfg.inp_depth] @ a["wgt"][wgt % cfg.wgt_depth].T
                    a["out"][dst] = requant_model(a["acc"][dst] + prod, insn, cfg)
                    a["acc"][dst] = 0
                    n += 1
                    continue
                if insn.reset_reg:
                    a["acc"][dst] = 0
                else:
                    prod = a["inp"][src % cfg.inp_depth] @ a["wgt"][wgt % cfg.wgt_depth].T
                    a["acc"][dst] = wrap(a["acc"][dst] + prod, cfg.acc_width)
                a["out"][dst] = wrap(a["acc"][dst], cfg.out_width)
                n += 1
    return n


def requant_model(total: np.ndarray, insn: GemmInsn, cfg: HWConfig) -> np.ndarray:
    """[+ 2**(shift-1)], arithmetic shift, clip to [-max or 0, max], in int64 arithmetic."""
    x = wrap(total + ((1 << (insn.rq_shift - 1)) if insn.rq_round else 0), cfg.acc_width)
    hi = (1 << (cfg.out_width - 1)) - 1
    return np.clip(x >> insn.rq_shift, 0 if insn.rq_relu else -hi, hi)


def alu_model(insn: AluInsn, srams: Srams) -> int:
    """Execute ``insn`` on ``srams`` one step at a time, in loop order; return the step count."""
    cfg, a = srams.cfg, srams.arrays
    n = 0
    for i_out in range(insn.iter_out):
        for i_in in range(insn.iter_in):
            for k in range(insn.uop_bgn, insn.uop_end):
                u = decode_uop(int(a["uop"][k]).to_bytes(4, "little"), cfg)
                dst = u.dst_idx + i_out * insn.dst_factor_out + i_in * insn.dst_factor_in
                src = u.src_idx + i_out * insn.src_factor_out + i_in * insn.src_factor_in
                dst, src = dst % cfg.acc_depth, src % cfg.acc_depth
                if insn.reset_reg:
                    a["acc"][dst] = 0
                else:
                    b = insn.imm if insn.use_imm else a["acc"][src].copy()
                    a["acc"][dst] = alu_apply(insn.alu_opcode, a["acc"][dst], b, cfg.acc_width)
                a["out"][dst] = wrap(a["acc"][dst], cfg.out_width)
                n += 1
    return n


def random_gemm(rng: np.random.Generator, cfg: HWConfig, srams: Srams, uop_base: int) -> GemmInsn:
    """A random GEMM whose micro-ops (written at ``uop_base``) often hit the same ACC entries."""
    n_uop = int(rng.integers(1, 6))
    uops = [
        Uop(
            dst_idx=int(rng.integers(0, 6)),
            src_idx=int(rng.integers(0, cfg.inp_depth - 16)),
            wgt_idx=int(rng.integers(0, cfg.wgt_depth - 16)),
        )
        for _ in range(n_uop)
    ]
    srams.set_uops(uop_base, uops)
    f = lambda: int(rng.integers(0, 4))  # noqa: E731
    return GemmInsn(
        reset_reg=bool(rng.random() < 0.15),
        uop_bgn=uop_base,
        uop_end=uop_base + n_uop,
        iter_out=int(rng.integers(1, 4)),
        iter_in=int(rng.integers(1, 4)),
        dst_factor_out=f(), dst_factor_in=f(), src_factor_out=f(),
        src_factor_in=f(), wgt_factor_out=f(), wgt_factor_in=f(),
    )  # fmt: skip


def special_acc(rng: np.random.Generator, cfg: HWConfig) -> np.ndarray:
    """ACC values mixing extremes, small shift amounts (both signs) and random words."""
    shape = (cfg.acc_depth, cfg.batch, cfg.block_out)
    pool = np.array([0, 1, -1, 2, -2, 31, 32, 33, -31, -32, -33, 40, -40, 2**31 - 1, -(2**31)])
    acc = rng.integers(-(1 << 31), 1 << 31, shape)
    pick = rng.random(shape) < 0.5
    return np.where(pick, rng.choice(pool, shape), acc)


def random_alu(rng, cfg: HWConfig, srams: Srams, uop_base: int, op: AluOp) -> AluInsn:
    n_uop = int(rng.integers(1, 5))
    uops = [
        Uop(dst_idx=int(rng.integers(0, 6)), src_idx=int(rng.integers(0, 8))) for _ in range(n_uop)
    ]
    srams.set_uops(uop_base, uops)
    use_imm = bool(rng.random() < 0.5)
    imm_pool = [0, 1, 3, 31, 32, 100, -1, -3, -31, -32, -100, 32767, -32768]
    imm = (
        int(rng.choice(imm_pool)) if rng.random() < 0.5 else int(rng.integers(-(1 << 15), 1 << 15))
    )
    return AluInsn(
        reset_reg=bool(rng.random() < 0.1),
        uop_bgn=uop_base,
        uop_end=uop_base + n_uop,
        iter_out=int(rng.integers(1, 3)),
        iter_in=int(rng.integers(1, 3)),
        dst_factor_out=int(rng.integers(0, 3)),
        dst_factor_in=int(rng.integers(0, 3)),
        src_factor_out=int(rng.integers(0, 3)),
        src_factor_in=int(rng.integers(0, 3)),
        alu_opcode=op,
        use_imm=use_imm,
        imm=imm,
    )
