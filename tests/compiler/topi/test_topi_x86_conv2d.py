"""x86 conv2d (NCHWc blocked layout with packing) vs a numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te
from tensorforge.compiler.build import build
from tensorforge.compiler.graph.ops.layout import from_blocked, to_blocked
from tensorforge.compiler.schedule.primitives import ScheduleError
from tensorforge.compiler.topi.x86 import Conv2dConfig, conv2d_nchwc, schedule_conv2d_nchwc
from tensorforge.compiler.topi.x86.conv2d import (
    MIN_COLUMNS,
    _tile_split,
    default_config,
    kernel_blocks,
    pack_kernel,
    register_tile,
)


def conv2d_ref(a: np.ndarray, w: np.ndarray, stride: int, pad: int, dil: int) -> np.ndarray:
    """Direct NCHW convolution in float64 (an oracle independent of the blocked layout)."""
    k, _, r, s = w.shape
    x = np.pad(a.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (x.shape[2] - dil * (r - 1) - 1) // stride + 1
    ow = (x.shape[3] - dil * (s - 1) - 1) // stride + 1
    out = np.zeros((a.shape[0], k, oh, ow))
    for ry in range(r):
        for rx in range(s):
            ys, xs = ry * dil, rx * dil
            patch = x[
                :,
                :,
                ys : ys + stride * (oh - 1) + 1 : stride,
                xs : xs + stride * (ow - 1) + 1 : stride,
            ]
            out += np.einsum("nchw,kc->nkhw", patch, w[:, :, ry, rx].astype(np.float64))
    return out


# (n, c, h, w, k, r, stride, pad, dilation): ones, primes, blocks that do not divide
CASES = [
    (1, 1, 1, 1, 1, 1, 1, 0, 1),
    (1, 3, 7, 7, 5, 3, 1, 1, 1),
    (2, 6, 9, 11, 4, 3, 2, 0, 1),
    (1, 32, 13, 13, 48, 3, 1, 1, 1),
    (1, 17, 10, 10, 19, 1, 1, 0, 1),
    (1, 16, 15, 15, 32, 3, 2, 1, 1),
    (1, 8, 12, 12, 16, 3, 1, 2, 2),
    (1, 4, 11, 11, 8, 7, 2, 3, 1),
]
CONFIGS = [
    Conv2dConfig(),
    Conv2dConfig(ic_bn=4, oc_bn=8, reg_n=3, pack_data=True, parallel=False),
]


def _run(case, config, bias=False, epilogue=None):
    n, c, h, w, k, r, stride, pad, dil = case
    A = te.placeholder((n, c, h, w), name="A")
    W = te.placeholder((k, c, r, r), name="W")
    B = te.placeholder((k,), name="bias") if bias else None
    op = conv2d_nchwc(A, W, stride, pad, dil, bias=B, epilogue=epilogue, config=config)
    f = build(schedule_conv2d_nchwc(op, config), op.args, name="conv")
    rng = np.random.default_rng(sum(case))
    arrays = [rng.uniform(-1, 1, t.shape).astype("float32") for t in op.args[:-1]]
    out = np.zeros(op.out.shape, "float32")
    f(*arrays, out)
    return arrays, out, (stride, pad, dil)


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "small-blocks-serial"])
@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_conv2d_nchwc_matches_numpy(case, config) -> None:
    (a, w), out, geom = _run(case, config)
    np.testing.assert_allclose(out, conv2d_ref(a, w, *geom), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES[1:4], ids=[str(c) for c in CASES[1:4]])
def test_int8_conv2d_accumulates_in_int32_bit_exactly(case) -> None:
    n, c, h, w, k, r, stride, pad, dil = case
    A = te.placeholder((n, c, h, w), "int8", name="A")
    W = te.placeholder((k, c, r, r), "int8", name="W")
    op = conv2d_nchwc(A, W, stride, pad, dil)
    f = build(schedule_conv2d_nchwc(op), op.args, name="qconv")
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, A.shape).astype("int8")
    wt = rng.integers(-128, 128, W.shape).astype("int8")
    out = np.zeros(op.out.shape, "int32")
    f(a, wt, out)
    expected = conv2d_ref(a, wt, stride, pad, dil)  # exact in float64 at these sizes
    np.testing.assert_array_equal(out, expected.astype(np.int64))


def test_prepacked_kernel_gives_the_same_result() -> None:
    case = CASES[3]
    (a, w), out, geom = _run(case, Conv2dConfig())
    n, c, h, wd, k, r, stride, pad, dil = case
    wp = pack_kernel(w, *kernel_blocks(c, k))
    A = te.placeholder(a.shape, name="A")
    op = conv2d_nchwc(A, te.placeholder(wp.shape, name="Wp"), stride, pad, dil)
    packed_out = np.zeros_like(out)
    build(schedule_conv2d_nchwc(op), op.args, name="conv_packed")(a, wp, packed_out)
    np.testing.assert_array_equal(packed_out, out)


def test_bias_and_relu_are_fused_into_the_unpack() -> None:
    relu = lambda v, *idx: te.max(v, te.const(0.0, v.dtype))  # noqa: E731
    (a, w, b), out, geom = _run(CASES[3], Conv2dConfig(), bias=True, epilogue=relu)
    expected = np.maximum(conv2d_ref(a, w, *geom) + b[None, :, None, None], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_channel_mismatch_and_bad_knobs_are_named() -> None:
    A, W = te.placeholder((1, 3, 5, 5), name="A"), te.placeholder((4, 2, 3, 3), name="W")
    with pytest.raises(ValueError, match="kernel channels must equal data channels \\(3\\), not 2"):
        conv2d_nchwc(A, W)
    with pytest.raises(ScheduleError, match="knob reg_n must be a positive int, not 0"):
        Conv2dConfig(reg_n=0).check()


def test_grouped_mismatch_is_named() -> None:
    A, W = te.placeholder((1, 12, 5, 5), name="A"), te.placeholder((8, 3, 3, 3), name="W")
    with pytest.raises(ValueError, match="kernel channels x groups must equal data channels"):
        conv2d_nchwc(A, W, groups=3)  # 3 x 3 != 12


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "small-blocks-serial"])
@pytest.mark.parametrize("case", CASES[1:], ids=[str(c) for c in CASES[1:]])
def test_blocked_in_and_out_matches_numpy(case, config) -> None:
    """`blocked=True`: the input already in NCHW[ic_bn]c, the output left in NCHW[oc_bn]c with
    the bias and an epilogue applied at the blocked index."""
    n, c, h, w, k, r, stride, pad, dil = case
    ic_bn, oc_bn = kernel_blocks(c, k, config)
    rng = np.random.default_rng(sum(case))
    a = rng.uniform(-1, 1, (n, c, h, w)).astype("float32")
    wt = rng.uniform(-1, 1, (k, c, r, r)).astype("float32")
    b = rng.uniform(-1, 1, k).astype("float32")
    ab, wp = to_blocked(a, ic_bn), pack_kernel(wt, ic_bn, oc_bn)
    A, W = te.placeholder(ab.shape, name="A"), te.placeholder(wp.shape, name="W")
    B = te.placeholder((k,), name="bias")
    scale = te.placeholder((k // oc_bn, oc_bn), name="scale")  # the epilogue reads it blocked

    def epilogue(v, nn, ko, y, x, ki):
        return te.max(v * scale[ko, ki], te.const(0.0, v.dtype))

    op = conv2d_nchwc(A, W, stride, pad, dil, B, epilogue, config, blocked=True)
    assert [int(d) for d in op.out.shape[1::3]] == [k // oc_bn, oc_bn]
    f = build(schedule_conv2d_nchwc(op, config), [*op.args[:-1], scale, op.out], name="conv_b")
    sc = rng.uniform(0.5, 2, k).astype("float32")
    out = np.zeros(op.out.shape, "float32")
    f(ab, wp, b, sc.reshape(k // oc_bn, oc_bn), out)
    ref = conv2d_ref(a, wt, stride, pad, dil) + b[None, :, None, None]
    want = np.maximum(ref * sc[None, :, None, None], 0)
    np.testing.assert_allclose(from_blocked(out), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "config",
    [
        Conv2dConfig(ic_bn=16, oc_bn=32, reg_n=5),
        Conv2dConfig(ic_bn=8, oc_bn=16, reg_n=4, oc_tile=8),
    ],
    ids=["5-columns-of-13", "half-block-tiles"],
)
def test_blocked_silu_epilogue_matches_numpy(config) -> None:
    """A transcendental epilogue (SiLU) on a blocked conv stores its tile with the column loop
    rolled: ragged last tiles (13 columns in tiles of 5) and tiles of part of a block keep every
    value; large activations (|x| ~ 100, where e^-x once went subnormal) too."""
    c, h, k = 16, 13, 64
    ic_bn, oc_bn = kernel_blocks(c, k, config)
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (1, c, h, h)).astype("float32")
    wt = (rng.uniform(-1, 1, (k, c, 3, 3)) * 8).astype("float32")
    b = rng.uniform(-1, 1, k).astype("float32")
    ab, wp = to_blocked(a, ic_bn), pack_kernel(wt, ic_bn, oc_bn)
    A, W = te.placeholder(ab.shape, name="A"), te.placeholder(wp.shape, name="W")
    B = te.placeholder((k,), name="bias")
    op = conv2d_nchwc(A, W, 1, 1, 1, B, lambda v, *_: v * te.sigmoid(v), config, blocked=True)
    f = build(schedule_conv2d_nchwc(op, config), op.args, name="conv_silu")
    out = np.zeros(op.out.shape, "float32")
    f(ab, wp, b, out)
    ref = conv2d_ref(a, wt, 1, 1, 1) + b[None, :, None, None]
    assert np.abs(ref).max() > 60
    want = ref / (1 + np.exp(-ref))
    np.testing.assert_allclose(from_blocked(out), want, rtol=1e-4, atol=1e-4)


def test_blocked_data_must_match_the_packed_kernel() -> None:
    A = te.placeholder((1, 2, 5, 5, 8), name="A")
    W = te.placeholder((1, 4, 3, 3, 4, 16), name="W")  # packed for 4-channel input blocks
    with pytest.raises(
        ValueError, match="blocked data must be \\[N, C/b, H, W, b\\] with a kernel"
    ):
        conv2d_nchwc(A, W, padding=1, blocked=True)


def test_nchw_data_with_blocked_output_packs_it_inside() -> None:
    """An RGB stem in a blocked chain: NCHW in (packed by the kernel), NCHW[oc_bn]c out."""
    n, c, h, w, k, r, stride, pad, dil = CASES[1]  # 3 channels
    ic_bn, oc_bn = kernel_blocks(c, k)
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (n, c, h, w)).astype("float32")
    wt = rng.uniform(-1, 1, (k, c, r, r)).astype("float32")
    wp = pack_kernel(wt, ic_bn, oc_bn)
    A, W = te.placeholder(a.shape, name="A"), te.placeholder(wp.shape, name="W")
    op = conv2d_nchwc(A, W, stride, pad, dil, blocked=True)
    out = np.zeros(op.out.shape, "float32")
    build(schedule_conv2d_nchwc(op), op.args, name="stem_b")(a, wp, out)
    want = conv2d_ref(a, wt, stride, pad, dil)
    np.testing.assert_allclose(from_blocked(out), want, rtol=1e-4, atol=1e-4)


# ---- register tiles over several output-channel blocks, or part of one (oc_tile) ----------

# (case, config): odd channels, strides, padding, dilation; tiles of 2 and 3 blocks whose
# block count leaves a tail, half and a quarter of a block, wider than all the filters
TILE_CASES = [
    ((1, 17, 10, 10, 48, 3, 1, 1, 1), Conv2dConfig(ic_bn=8, oc_bn=16, reg_n=3, oc_tile=32)),
    ((1, 6, 9, 11, 40, 3, 2, 0, 1), Conv2dConfig(ic_bn=3, oc_bn=8, reg_n=4, oc_tile=24)),
    ((2, 8, 12, 12, 32, 3, 1, 2, 2), Conv2dConfig(ic_bn=8, oc_bn=32, reg_n=5, oc_tile=16)),
    ((1, 16, 15, 15, 32, 1, 2, 0, 1), Conv2dConfig(ic_bn=16, oc_bn=32, reg_n=6, oc_tile=8)),
    ((1, 4, 11, 11, 16, 7, 2, 3, 1), Conv2dConfig(oc_bn=8, reg_n=2, oc_tile=64, parallel=False)),
]


@pytest.mark.parametrize("case, config", TILE_CASES, ids=[str(c[1].oc_tile) for c in TILE_CASES])
def test_oc_tile_register_tiles_match_numpy(case, config) -> None:
    (a, w), out, geom = _run(case, config)
    np.testing.assert_allclose(out, conv2d_ref(a, w, *geom), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("oc_tile", [8, 64])
def test_oc_tile_in_the_blocked_layout_and_grouped_matches_numpy(oc_tile) -> None:
    """A chain's kernel (blocked in and out) with a tile of part of a block, or of two blocks
    that belong to different groups (each reads its own group's input blocks)."""
    n, c, h, w, k, groups = 1, 32, 9, 9, 64, 2
    ic_bn, oc_bn = 8, 16
    config = Conv2dConfig(ic_bn=ic_bn, oc_bn=oc_bn, reg_n=4, oc_tile=oc_tile)
    rng = np.random.default_rng(oc_tile)
    a = rng.uniform(-1, 1, (n, c, h, w)).astype("float32")
    wt = rng.uniform(-1, 1, (k, c // groups, 3, 3)).astype("float32")
    ab, wp = to_blocked(a, ic_bn), pack_kernel(wt, ic_bn, oc_bn)
    A, W = te.placeholder(ab.shape, name="A"), te.placeholder(wp.shape, name="W")
    op = conv2d_nchwc(A, W, 1, 1, 1, config=config, groups=groups, blocked=True)
    out = np.zeros(op.out.shape, "float32")
    build(schedule_conv2d_nchwc(op, config), op.args, name="conv_t")(ab, wp, out)
    half = k // groups
    want = np.concatenate([conv2d_ref(a[:, g * 16 : g * 16 + 16], wt[g * half : (g + 1) * half],
                                      1, 1, 1) for g in range(groups)], axis=1)  # fmt: skip
    np.testing.assert_allclose(from_blocked(out), want, rtol=1e-4, atol=1e-4)


def test_oc_tile_in_a_3d_convolution_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (1, 8, 5, 6, 7)).astype("float32")
    wt = rng.uniform(-1, 1, (32, 8, 3, 3, 3)).astype("float32")  # 4 blocks in tiles of 2
    config = Conv2dConfig(ic_bn=8, oc_bn=8, reg_n=3, oc_tile=16)
    A, W = te.placeholder(a.shape, name="A"), te.placeholder(wt.shape, name="W")
    op = conv2d_nchwc(A, W, 1, 1, config=config)
    out = np.zeros(op.out.shape, "float32")
    build(schedule_conv2d_nchwc(op, config), op.args, name="conv3d_t")(a, wt, out)
    x = np.pad(a.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1), (1, 1)))
    view = np.lib.stride_tricks.sliding_window_view(x, (3, 3, 3), axis=(2, 3, 4))
    want = np.einsum("ncdhwtrs,kctrs->nkdhw", view, wt.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_a_tile_of_blocks_divides_the_blocks() -> None:
    """3 blocks are never tiled 2 at a time (the last tile would read weights past the packed
    kernel's end); 4 blocks are, and a tile never exceeds the blocks there are."""
    assert _tile_split(8, 3, 16) == (1, 8)
    assert _tile_split(8, 4, 16) == (2, 8)
    assert _tile_split(8, 6, 32) == (3, 8)
    assert _tile_split(8, 2, 32) == (2, 8)
    assert _tile_split(16, 5, 8) == (1, 8)


def test_an_oc_tile_that_splits_no_block_is_named() -> None:
    A, W = te.placeholder((1, 8, 6, 6), name="A"), te.placeholder((32, 8, 3, 3), name="W")
    config = Conv2dConfig(oc_bn=16, oc_tile=24)
    op = conv2d_nchwc(A, W, config=config)
    with pytest.raises(ScheduleError, match="oc_tile must be 0, a multiple or a divisor of "
                                            "oc_bn \\(16\\), not 24"):  # fmt: skip
        schedule_conv2d_nchwc(op, config)
    with pytest.raises(ScheduleError, match="oc_tile must be >= 0, not -1"):
        Conv2dConfig(oc_tile=-1).check()


REGISTERS = {"avx2": (8, 16), "avx512": (16, 32)}


@pytest.mark.parametrize("isa", REGISTERS)
@pytest.mark.parametrize("ow", [1, 2, 3, 7, 14, 17, 28, 35, 56, 112])
@pytest.mark.parametrize(
    "oc_bn, filters", [(32, 256), (16, 48), (8, 8), (32, 32), (16, 208), (16, 112), (16, 176)]
)
def test_default_register_tile_fits_the_vector_registers(isa, ow, oc_bn, filters) -> None:
    """The tile's accumulators, its weight vectors and one broadcast value fit the registers,
    it splits no block unevenly, covers the row evenly and spans at most the filters; a tile of
    several weight vectors serves MIN_COLUMNS columns at least (or the whole row): 13 blocks
    of 16 (208 filters: a prime count) took 1 column x 13 vectors, 3.6x slower."""
    lanes, count = REGISTERS[isa]
    reg_n, oc_tile = register_tile(ow, oc_bn, filters, (lanes, count))
    if oc_bn < lanes:  # a block narrower than a vector: one block, the old 8 columns at most
        assert (reg_n, oc_tile) == (min(8, ow), 0)
        return
    chans = oc_tile or oc_bn
    vecs = chans // lanes
    assert chans % lanes == 0 and (chans % oc_bn == 0 or oc_bn % chans == 0) and chans <= filters
    assert 1 <= reg_n <= ow and reg_n * vecs + vecs + 1 <= count
    tiles = -(-ow // reg_n)
    assert reg_n * tiles - ow < tiles  # the row's tiles differ by at most one column
    assert _tile_split(oc_bn, filters // oc_bn, oc_tile)[0] * oc_bn >= min(chans, oc_bn)
    if chans > oc_bn:  # whole blocks that divide the filters' blocks: `_tile_split` keeps them
        assert (filters // oc_bn) % (chans // oc_bn) == 0
    if vecs > 1:
        assert reg_n >= min(MIN_COLUMNS, ow)


def test_default_register_tile_on_avx2_halves_32_channel_blocks() -> None:
    """16 ymm registers: 6 columns x 2 vectors (12 accumulators), not 32 channels x 8
    columns (32); a 7-column row as 4 + 3."""
    assert register_tile(56, 32, 256, REGISTERS["avx2"]) == (6, 16)
    assert register_tile(7, 32, 512, REGISTERS["avx2"]) == (4, 16)
    assert register_tile(28, 32, 128, REGISTERS["avx512"]) == (14, 0)
    config = default_config(64, 128, (28, 28), REGISTERS["avx2"])
    assert (config.oc_bn, config.reg_n, config.oc_tile) == (32, 6, 16)


def test_default_register_tile_on_avx512_keeps_one_block_on_narrow_rows() -> None:
    """32 zmm registers, 32-channel blocks: a 7- or 8-wide row takes one block by the whole
    row (14 or 16 accumulators), not 4 columns x 3 blocks (measured 1.3-1.4x slower); a tile
    spans several 16-channel blocks only in counts that divide the filters' blocks (5 of 5,
    3 of 3; 2 of 5 would be cut to 1 by `_tile_split`)."""
    avx512 = REGISTERS["avx512"]
    assert register_tile(7, 32, 512, avx512) == (7, 0)
    assert register_tile(8, 32, 384, avx512) == (8, 0)
    assert register_tile(14, 32, 256, avx512) == (14, 0)
    assert register_tile(14, 16, 80, avx512) == (5, 80)
    assert register_tile(28, 16, 48, avx512) == (7, 48)
    assert register_tile(7, 16, 256, avx512) == (7, 32)


def test_vector_registers_follow_the_target_features() -> None:
    from tensorforge.compiler.codegen.llvm_jit import vector_registers

    assert vector_registers("llvm -mattr=+avx2,+avx512f,+fma") == (16, 32)
    assert vector_registers("llvm -mattr=+avx2,+fma") == (8, 16)
    assert vector_registers("llvm -mtriple=aarch64-linux-gnu") == (4, 32)
    assert vector_registers("llvm -mtriple=armv7a-linux-gnueabihf -mattr=+neon") == (4, 16)
    assert vector_registers() in ((16, 32), (8, 16), (4, 16), (4, 32))


def test_a_config_moved_to_a_chains_blocks_keeps_its_tile_width() -> None:
    """A grouped layer's config, chosen for its own blocks, on the chain's: the tile keeps its
    channels (one 16-channel block is half of a 32-channel one), or is chosen again."""
    from tensorforge.compiler.topi.x86.conv2d import with_blocks

    moved = with_blocks(Conv2dConfig(ic_bn=16, oc_bn=16, reg_n=6), (32, 32), 28, 64)
    assert (moved.ic_bn, moved.oc_bn, moved.reg_n, moved.oc_tile) == (32, 32, 6, 16)
    moved = with_blocks(Conv2dConfig(oc_bn=32, reg_n=6, oc_tile=16), (8, 8), 4, 64)
    assert (moved.oc_bn, moved.reg_n, moved.oc_tile) == (8, 4, 16)
    moved = with_blocks(Conv2dConfig(oc_bn=16, reg_n=6, oc_tile=48), (32, 32), 28, 64)
    assert moved.oc_bn == 32 and moved.oc_tile in (0, 8, 16, 64)


# ---- the int8 kernels' options: words, rows-inner packing, the epilogue on the tile ----------


@pytest.mark.parametrize("case, config", TILE_CASES, ids=[str(c[1].oc_tile) for c in TILE_CASES])
def test_rows_inner_and_tile_epilogue_match_numpy(case, config) -> None:
    """Input packed `[N, C/ic_bn, H', ic_bn, W']` and bias + epilogue applied on the register
    tile before its transpose to NCHW, for tiles of several blocks, part of one and the rest."""
    relu = lambda v, *idx: te.max(v, te.const(0.0, v.dtype))  # noqa: E731
    n, c, h, w, k, r, stride, pad, dil = case
    A = te.placeholder((n, c, h, w), name="A")
    W = te.placeholder((k, c, r, r), name="W")
    B = te.placeholder((k,), name="bias")
    op = conv2d_nchwc(A, W, stride, pad, dil, B, relu, config, rows_inner=True,
                      tile_epilogue=True)  # fmt: skip
    f = build(schedule_conv2d_nchwc(op, config), op.args, name="conv_tile")
    rng = np.random.default_rng(sum(case))
    a, wt, b = (rng.uniform(-1, 1, t.shape).astype("float32") for t in op.args[:-1])
    out = np.zeros(op.out.shape, "float32")
    f(a, wt, b, out)
    want = np.maximum(conv2d_ref(a, wt, stride, pad, dil) + b.reshape(1, -1, 1, 1), 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "case, config", TILE_CASES[:3], ids=[str(c[1].oc_tile) for c in TILE_CASES[:3]]
)
def test_words_of_four_channels_with_a_dot_product_are_exact(case, config) -> None:
    """int32 words of four uint8 channels (data) and int8 channels (kernel) summed by
    `te.dot_u8i8x4`, the padding a word of one byte value repeated: the int32 convolution of
    the bytes, bit for bit."""
    n, c, h, w, k, r, stride, pad, dil = case
    rng = np.random.default_rng(k)
    cw = -(-c // 4)
    u = np.zeros((n, cw * 4, h, w), np.uint8)
    u[:, :c] = rng.integers(0, 256, (n, c, h, w))
    s = np.zeros((k, cw * 4, r, r), np.int8)
    s[:, :c] = rng.integers(-128, 128, (k, c, r, r))
    words = np.ascontiguousarray(np.moveaxis(u.reshape(n, cw, 4, h, w), 2, -1)).view("<i4")[..., 0]
    wwords = np.ascontiguousarray(np.moveaxis(s.reshape(k, cw, 4, r, r), 2, -1)).view("<i4")[..., 0]
    fill = 7  # the padding's byte value
    ic_bn = max(d for d in range(1, config.ic_bn + 1) if cw % d == 0)
    oc_bn = max(d for d in range(1, config.oc_bn + 1) if k % d == 0)
    config = Conv2dConfig(ic_bn=ic_bn, oc_bn=oc_bn, reg_n=config.reg_n, oc_tile=config.oc_tile)
    A = te.placeholder(words.shape, "int32", name="A")
    W = te.placeholder(pack_kernel(wwords, ic_bn, oc_bn).shape, "int32", name="W")
    op = conv2d_nchwc(A, W, stride, pad, dil, None, None, config, "int32", product=te.dot_u8i8x4,
                      pad_value=te.const(fill * 0x01010101, "int32"), rows_inner=True,
                      tile_epilogue=True)  # fmt: skip
    f = build(schedule_conv2d_nchwc(op, config), op.args, name="conv_words")
    out = np.zeros(op.out.shape, "int32")
    f(words, pack_kernel(wwords, ic_bn, oc_bn), out)
    padded = np.pad(u.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)),
                    constant_values=fill)  # fmt: skip
    want = conv2d_ref(padded, s.astype(np.int64), stride, 0, dil)  # exact in float64 here
    np.testing.assert_array_equal(out, want.astype(np.int64))
