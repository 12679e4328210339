"""Accelerator kernels from TE: tensorize, dma_copy/alu pragmas and vthreads lowered by
vta.lower, run on the functional simulator against the int8 numpy oracle."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.quantize import conv2d_int8, dense_int8, requant_params
from tensorforge.compiler.quantize.residual import add_int8, add_params
from tensorforge.compiler.tir.stmt import LoweringError
from tensorforge.compiler.vta import Conv2dSchedule, conv2d, dense
from tensorforge.compiler.vta.codegen import generate_program
from tensorforge.compiler.vta.intrin import gemm_intrin
from tensorforge.compiler.vta.lower import VTA_PIPELINE, lower_to_tile_program
from tensorforge.compiler.vta.tile import Gemm, Load, Store
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.vta import run_image

# ResNet-18's 3x3 and 1x1 convolutions after the stem: (C, H, O, K, stride, pad).
RESNET18 = [
    (64, 56, 64, 3, 1, 1),
    (64, 56, 128, 3, 2, 1),
    (64, 56, 128, 1, 2, 0),
    (128, 28, 128, 3, 1, 1),
    (128, 28, 256, 3, 2, 1),
    (128, 28, 256, 1, 2, 0),
    (256, 14, 256, 3, 1, 1),
    (256, 14, 512, 3, 2, 1),
    (256, 14, 512, 1, 2, 0),
    (512, 7, 512, 3, 1, 1),
]


def _shapes(config: str) -> list[tuple[int, ...]]:
    """ResNet-18's layers on pynq; on tiny, the same geometry with 8x fewer channels and 4x
    smaller images (the tiny SRAMs are 16x smaller)."""
    if config == "pynq":
        return RESNET18
    return [(c // 8, max(h // 4, 2), o // 8, k, s, p) for c, h, o, k, s, p in RESNET18]


def _conv(config: str, layer: tuple[int, ...], vthreads: int, seed: int) -> None:
    cfg = HWConfig.preset(config)
    c, h, o, k, s, p = layer
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, c, h, h), dtype=np.int8)
    w = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    b = rng.integers(-3000, 3000, o, dtype=np.int32)
    rq = requant_params(2.0**-10, cfg, mode="shift", relu=True)
    kern = conv2d(cfg, x.shape, w, b, stride=s, padding=p, requant=rq, vthreads=vthreads)
    assert kern.schedule.vthreads == vthreads
    out, _ = kern.run(x, backend="sim")
    want = conv2d_int8(x, w, b, stride=s, padding=p, requant=rq)
    assert np.array_equal(out, want), np.count_nonzero(out != want)
    assert np.unique(want).size > 10  # not all clipped


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("layer", _shapes("tiny"), ids=lambda v: "x".join(map(str, v)))
def test_resnet18_convs_from_te_on_tiny_equal_the_oracle(layer: tuple[int, ...], vthreads: int):
    _conv("tiny", layer, vthreads, seed=sum(layer) + vthreads)


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("layer", RESNET18, ids=lambda v: "x".join(map(str, v)))
def test_resnet18_convs_from_te_on_pynq_equal_the_oracle(layer: tuple[int, ...], vthreads: int):
    _conv("pynq", layer, vthreads, seed=sum(layer) + vthreads)


@pytest.mark.parametrize("config", ["tiny", "pynq"])
@pytest.mark.parametrize("vthreads", [1, 2])
def test_matmul_from_te_equals_the_oracle(config: str, vthreads: int) -> None:
    cfg = HWConfig.preset(config)
    rng = np.random.default_rng(vthreads)
    m, k, n = 8, 512 // (4 if config == "tiny" else 1), 256 // (4 if config == "tiny" else 1)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    b = rng.integers(-5000, 5000, n, dtype=np.int32)
    rq = requant_params(2.0**-11, cfg, mode="shift")
    fc = dense(cfg, m, w, b, requant=rq, vthreads=vthreads)
    out, _ = fc.run(a)
    want = dense_int8(a, w, b, requant=rq)
    assert np.array_equal(out, want) and np.unique(want).size > 10


@pytest.mark.parametrize("vthreads", [1, 2])
def test_residual_add_and_mul_requant_from_te_equal_the_oracle(vthreads: int) -> None:
    cfg = HWConfig.preset("tiny").replace(alu_mul=True)
    rng = np.random.default_rng(11 + vthreads)
    x = rng.integers(-128, 128, (1, 8, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8)
    b = rng.integers(-2000, 2000, 8, dtype=np.int32)
    rq = requant_params(3e-4, cfg, mode="mul", acc_bound=127 * 128 * 72 + 2000)
    add = add_params(0.5, 1.3, cfg, mode="mul", relu=True)
    kern = conv2d(cfg, x.shape, w, b, padding=1, requant=rq, residual=add, vthreads=vthreads)
    r = rng.integers(-127, 128, kern.output_shape, dtype=np.int8)
    out, _ = kern.run(x, residual=r)
    want = add_int8(conv2d_int8(x, w, b, padding=1, requant=rq), r, add)
    assert np.array_equal(out, want) and np.unique(want).size > 10
    loads = [s for s in kern.tile_program.stmts if isinstance(s, Load) and s.acc_8bit]
    assert loads and all(s.tensor == "R" for s in loads)  # the residual, as ACC_8BIT loads


@pytest.mark.parametrize(
    "sched",
    [
        Conv2dSchedule(tile_h=3, tile_oc=2, tile_ic=2),  # 7 rows, 3 oc blocks, 3 ic blocks
        Conv2dSchedule(tile_h=5, tile_oc=2, tile_ic=2, vthreads=2, resident_weights=True),
        Conv2dSchedule(tile_h=4, tile_oc=3, tile_ic=1, vthreads=2),
    ],
)
def test_ragged_edge_tiles_do_only_the_work_of_the_conv(sched: Conv2dSchedule) -> None:
    """A non-dividing split's guards cut the edge tiles' instructions to their own extents: the
    GEMMs do exactly the conv's multiply-adds, the STOREs write each output element once."""
    cfg = HWConfig.preset("tiny")
    n, c, h, o = 2, 11, 7, 10
    w = np.random.default_rng(0).integers(-128, 128, (o, c, 3, 3), dtype=np.int8)
    x = np.random.default_rng(1).integers(-128, 128, (n, c, h, 6), dtype=np.int8)
    kern = conv2d(cfg, x.shape, w, padding=1, shift=8, schedule=sched)
    stmts = kern.tile_program.stmts
    steps = sum(len(s.uops) * np.prod([lp.extent for lp in s.loops]) for s in stmts
                if isinstance(s, Gemm) and not s.reset)  # fmt: skip
    nb, icb, ocb = kern.workload.blocked(cfg)
    assert steps == nb * ocb * icb * 9 * h * 6  # (batch, oc, ic) blocks x window x pixels
    stored = sum(s.y_size * s.x_size for s in stmts if isinstance(s, Store))
    assert stored == nb * ocb * h * 6
    assert np.array_equal(kern.run(x)[0], conv2d_int8(x, w, padding=1, requant=kern.requant))


# ---- what the lowering rejects, by name ------------------------------------------------------


def _blocked_add(cfg: HWConfig, pragma: bool, op=lambda a: te.shift_right(a, 1)):  # type: ignore[no-untyped-def]
    """Y = int8(op(A)) over one accumulator tile; the copies and the ALU stage scheduled."""
    shape = (2, cfg.batch, cfg.block_out)
    A = te.placeholder(shape, "int32", name="A")
    B = te.compute(shape, lambda *i: op(A[i]), name="B")
    Y = te.compute(shape, lambda *i: te.cast(B[i], "int8"), name="Y")
    s = te.create_schedule(Y.op)
    ab = s.cache_read(A, "local.acc_buffer", [B])
    s[B].set_scope("local.acc_buffer")
    s[ab].pragma(s[ab].op.axis[0], "dma_copy")
    s[Y].pragma(s[Y].op.axis[0], "dma_copy")
    if pragma:
        s[B].pragma(s[B].op.axis[0], "alu")
    return tir.lower(s, [A, Y], name="alu_kernel", passes=VTA_PIPELINE)


def test_an_alu_only_kernel_runs_and_its_errors_name_the_statement() -> None:
    cfg = HWConfig.preset("tiny")
    func = _blocked_add(cfg, pragma=True, op=lambda a: te.max(te.shift_right(a, 0) + 0, 3))
    with pytest.raises(LoweringError, match=r"alu `B\[.*max\(shift_right.*first operand must be"):
        lower_to_tile_program(func, cfg)  # max(shift_right(a, 0), 3): two ALU ops in one stage
    func = _blocked_add(cfg, pragma=True, op=lambda a: te.shift_right(a, 2))
    prog = lower_to_tile_program(func, cfg)
    a = np.arange(-4, 4, dtype=np.int32).reshape(2, cfg.batch, cfg.block_out) * 37
    outs, _ = run_image(generate_program(prog, cfg), {"A": a})
    assert np.array_equal(outs["Y"], (a >> 2).astype(np.int8))
    with pytest.raises(LoweringError, match="not an accelerator operation: .*pragma alu"):
        lower_to_tile_program(_blocked_add(cfg, pragma=False), cfg)
    vta = cfg.replace(alu_mul=False)
    with pytest.raises(LoweringError, match="MUL needs the ALU MUL extension"):
        lower_to_tile_program(_blocked_add(vta, True, op=lambda a: a * 3), vta)


def test_a_copy_between_on_chip_buffers_is_rejected() -> None:
    cfg = HWConfig.preset("tiny")
    shape = (1, cfg.block_out, cfg.block_in)  # whole entries of both INP and WGT
    A = te.placeholder(shape, "int8", name="A")
    B = te.compute(shape, lambda *i: A[i], name="B")
    Y = te.compute(shape, lambda *i: B[i], name="Y")
    s = te.create_schedule(Y.op)
    ab = s.cache_read(A, "local.inp_buffer", [B])
    s[B].set_scope("local.wgt_buffer")
    for t in (ab, B, Y):
        s[t].pragma(s[t].op.axis[0], "dma_copy")
    with pytest.raises(LoweringError, match="copies run DRAM -> SRAM or acc -> DRAM, not "
                                            "local.inp_buffer -> local.wgt_buffer"):  # fmt: skip
        lower_to_tile_program(tir.lower(s, [A, Y], passes=VTA_PIPELINE), cfg)


def _matmul(cfg: HWConfig, shifted: bool):  # type: ignore[no-untyped-def]
    """The VTA recipe written by hand (the intrinsic is declared apart from the schedule):
    Y = int8(A . W^T) on blocked operands, 3 reduction blocks, weights constant."""
    mb, kb, nb = 2, 3, 4
    A = te.placeholder((mb, kb, cfg.batch, cfg.block_in), "int8", name="A")
    W = te.placeholder((nb, kb, cfg.block_out, cfg.block_in), "int8", name="W")
    ko, ki = te.reduce_axis((0, kb), "ko"), te.reduce_axis((0, cfg.block_in), "ki")
    C = te.compute(
        (mb, nb, cfg.batch, cfg.block_out),
        lambda m, n, i, j: te.sum(
            te.cast(A[m, ko, i, ki], "int32") * te.cast(W[n, ko, j, ki], "int32"), axis=[ko, ki]
        ),
        name="C",
    )
    value = (lambda i: te.shift_right(C[i], 1)) if shifted else (lambda i: C[i])
    Y = te.compute(C.shape, lambda *i: te.cast(value(i), "int8"), name="Y")
    s = te.create_schedule(Y.op)
    s[C].set_scope("local.acc_buffer")
    s[C].compute_at(s[Y], s[Y].op.axis[0])
    ab, wb = s.cache_read(A, "local.inp_buffer", [C]), s.cache_read(W, "local.wgt_buffer", [C])
    mc, nc, ic, jc = s[C].op.axis
    s[C].reorder(mc, ko, nc, ic, jc, ki)
    for t in (ab, wb):
        s[t].compute_at(s[C], ko)
        s[t].pragma(s[t].op.axis[0], "dma_copy")
    s[C].tensorize(ic, gemm_intrin(cfg))
    s[Y].pragma(s[Y].op.axis[1], "dma_copy")
    return tir.lower(s, [A, W, Y], name="matmul", passes=VTA_PIPELINE)


@pytest.mark.parametrize("config", ["tiny", "pynq"])
def test_a_hand_written_vta_schedule_runs_and_its_errors_name_the_statement(config: str):
    cfg = HWConfig.preset(config)
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (2, 3, cfg.batch, cfg.block_in), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 3, cfg.block_out, cfg.block_in), dtype=np.int8)
    prog = lower_to_tile_program(_matmul(cfg, shifted=False), cfg, {"W": w})
    gemms = [st for st in prog.stmts if isinstance(st, Gemm) and not st.reset]
    assert len(gemms) == 2 * 3  # one GEMM per (row block, reduction block): n folded in loops
    outs, _ = run_image(generate_program(prog, cfg), {"A": a})
    want = np.einsum("mkbi,nkoi->mnbo", a.astype(np.int32), w.astype(np.int32)).astype(np.int8)
    assert np.array_equal(outs["Y"], want)
    with pytest.raises(LoweringError, match=r"dma_copy `Y\[.*shift_right.*must be a load"):
        lower_to_tile_program(_matmul(cfg, shifted=True), cfg, {"W": w})  # no ALU stage
    with pytest.raises(LoweringError, match=r"constants \['V'\] are not parameters"):
        lower_to_tile_program(_matmul(cfg, shifted=False), cfg, {"V": w})
