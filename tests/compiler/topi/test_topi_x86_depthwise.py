"""x86 depthwise conv2d in the blocked layout (`depthwise_conv2d_nchwc(blocked=True)`) vs numpy:
register tiles of one vector of channels (`vec`) inside wider blocks, ragged column tiles,
strides, 3x3 and 5x5 taps, bias and epilogue, NCHW input packed in the kernel (padded channels)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te
from tensorforge.compiler.build import build
from tensorforge.compiler.graph.strategy.conv import ConvView, blocked_depthwise_config
from tensorforge.compiler.schedule.primitives import ScheduleError
from tensorforge.compiler.topi.x86.depthwise import (
    COPY_BUDGET,
    DepthwiseConfig,
    depthwise_conv2d_nchwc,
    has_transcendental,
    schedule_depthwise_nchwc,
)


def _numpy_blocked(x: np.ndarray, w: np.ndarray, b: np.ndarray, k: int, stride: int,
                   out: int) -> np.ndarray:  # fmt: skip
    """Depthwise conv of blocked `x` [N, C/cb, H, W, cb] with `w` [C/cb, k, k, cb], padding k//2,
    then + bias and ReLU: the oracle (float64)."""
    pad = k // 2
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad), (0, 0)))
    acc = np.zeros((*x.shape[:2], out, out, x.shape[-1]))
    for r in range(k):
        for s in range(k):
            window = xp[:, :, r : r + stride * out : stride, s : s + stride * out : stride, :]
            acc += window * w[None, :, r, s, None, None, :]
    return np.maximum(acc + b.reshape(x.shape[1], x.shape[-1])[None, :, None, None, :], 0)


CASES = [  # channels, side, taps, stride, block, reg_n, vec
    (64, 14, 3, 1, 32, 8, 8),  # 4 tiles of 8 channels per block, tail of 6 columns
    (64, 14, 5, 2, 32, 7, 8),
    (32, 9, 5, 1, 16, 4, 4),  # 9 columns: tiles of 4 and a tail of 1
    (48, 7, 3, 2, 16, 3, 8),
    (32, 10, 3, 1, 32, 8, 0),  # 0: the whole block in one tile
    (24, 8, 3, 1, 8, 8, 16),  # vec above the block: the block
    (48, 8, 3, 1, 16, 8, 3),  # vec not dividing the block: the block
    (96, 112, 3, 2, 32, 8, 16),  # copies over COPY_BUDGET: 7 row chunks of 3 blocks
    (32, 75, 5, 1, 32, 5, 8),  # 79 padded rows of 32 channels: chunks of 5 rows
]


@pytest.mark.parametrize("case", CASES, ids=[f"c{c[0]}s{c[1]}k{c[2]}st{c[3]}cb{c[4]}v{c[6]}"
                                             for c in CASES])  # fmt: skip
def test_blocked_depthwise_vector_tiles_match_numpy(case) -> None:
    c, side, k, stride, cb, reg_n, vec = case
    out = (side + 2 * (k // 2) - k) // stride + 1
    X = te.placeholder((1, c // cb, side, side, cb), name="X")
    W = te.placeholder((c // cb, k, k, cb), name="W")
    B = te.placeholder((c,), name="B")
    op = depthwise_conv2d_nchwc(X, W, (out, out), (k // 2, k // 2), (stride, stride), (1, 1), B,
                                lambda v, *i: te.max(v, 0.0), blocked=True)  # fmt: skip
    f = build(schedule_depthwise_nchwc(op, DepthwiseConfig(cb, reg_n, True, vec)), op.args,
              name="dw_blocked")  # fmt: skip
    rng = np.random.default_rng(c + side + k)
    x = rng.standard_normal((1, c // cb, side, side, cb)).astype(np.float32)
    w = rng.standard_normal((c // cb, k, k, cb)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    y = np.empty((1, c // cb, out, out, cb), np.float32)
    f(x, w, b, y)
    np.testing.assert_allclose(y, _numpy_blocked(x, w, b, k, stride, out), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("c", "padded", "cb"), [(116, 128, 32), (64, 64, 16)])
def test_blocked_depthwise_packs_nchw_input_with_padded_channels(c, padded, cb) -> None:
    """NCHW data (a chain's first layer) packed block by block inside the blocked kernel; the
    channels past the data's (`alter_layout`'s padding) read zeros: their outputs are the
    bias's ReLU."""
    side, k, stride = 9, 3, 2
    out = (side + 2 * (k // 2) - k) // stride + 1
    X = te.placeholder((1, c, side, side), name="X")
    W = te.placeholder((padded // cb, k, k, cb), name="W")
    B = te.placeholder((padded,), name="B")
    op = depthwise_conv2d_nchwc(X, W, (out, out), (k // 2, k // 2), (stride, stride), (1, 1), B,
                                lambda v, *i: te.max(v, 0.0), blocked=True)  # fmt: skip
    f = build(schedule_depthwise_nchwc(op, DepthwiseConfig(cb, 4, True, 16)), op.args,
              name="dw_from_nchw")  # fmt: skip
    rng = np.random.default_rng(c)
    x = rng.standard_normal((1, c, side, side)).astype(np.float32)
    w = rng.standard_normal((padded // cb, k, k, cb)).astype(np.float32)
    b = rng.standard_normal(padded).astype(np.float32)
    y = np.empty((1, padded // cb, out, out, cb), np.float32)
    f(x, w, b, y)
    xp = np.pad(x, ((0, 0), (0, padded - c), (0, 0), (0, 0)))
    blocked = np.moveaxis(xp.reshape(1, padded // cb, cb, side, side), 2, -1)
    np.testing.assert_allclose(y, _numpy_blocked(blocked, w, b, k, stride, out), rtol=1e-5,
                               atol=1e-5)  # fmt: skip


def test_blocked_depthwise_silu_tile_matches_numpy() -> None:
    """A transcendental epilogue (SiLU) keeps the tile's store loop rolled: same results."""
    c, side, cb = 32, 10, 16
    X = te.placeholder((1, c // cb, side, side, cb), name="X")
    W = te.placeholder((c // cb, 3, 3, cb), name="W")
    op = depthwise_conv2d_nchwc(X, W, (side, side), (1, 1), (1, 1), (1, 1), None,
                                lambda v, *i: v * te.sigmoid(v), blocked=True)  # fmt: skip
    assert has_transcendental(op.out)
    f = build(schedule_depthwise_nchwc(op, DepthwiseConfig(cb, 4, True, 8)), op.args, name="dw")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, c // cb, side, side, cb)).astype(np.float32)
    w = rng.standard_normal((c // cb, 3, 3, cb)).astype(np.float32)
    y = np.empty_like(x)
    f(x, w, y)
    conv = _numpy_blocked(x, w, np.zeros(c, np.float32), 3, 1, side)  # ReLU'd: rebuild it
    pre = _numpy_blocked(-x, w, np.zeros(c, np.float32), 3, 1, side)
    conv = conv - pre  # relu(a) - relu(-a) = a
    np.testing.assert_allclose(y, conv / (1 + np.exp(-conv)), rtol=1e-5, atol=1e-5)


def test_depthwise_vec_knob_is_checked() -> None:
    with pytest.raises(ScheduleError, match="knob vec must be >= 0, not -8"):
        DepthwiseConfig(32, 8, True, -8).check()


@pytest.mark.parametrize("mattr,vec", [("+avx512f,+avx2,+avx", 16), ("+avx2,+avx,+fma", 8),
                                        ("+sse4.2", 4)])  # fmt: skip
def test_blocked_depthwise_tiles_are_one_target_vector_wide(mattr: str, vec: int) -> None:
    view = ConvView((1, 64, 14, 14), (64, 1, 5, 5), (1, 64, 14, 14), (2, 2), (2, 2), (1, 1),
                    (1, 1), 64, False)  # fmt: skip
    config = blocked_depthwise_config(view, "float32", 32, f"llvm -mattr={mattr}")
    assert (config.cb, config.vec) == (32, vec)
    assert blocked_depthwise_config(view, "float64", 32, f"llvm -mattr={mattr}").vec == vec // 2


def test_blocked_depthwise_cuts_large_copies_into_row_chunks(monkeypatch) -> None:
    """A channel block whose padded input exceeds `COPY_BUDGET` per task is cut into more row
    chunks, a divisor of the output rows; results are checked by the cases above."""
    from tensorforge.compiler.topi.x86 import depthwise

    X = te.placeholder((1, 3, 112, 112, 32), name="X")
    W = te.placeholder((3, 3, 3, 32), name="W")
    op = depthwise_conv2d_nchwc(X, W, (56, 56), (1, 1), (2, 2), (1, 1), blocked=True)
    assert depthwise._row_chunks(op, 3) == 7  # 113 rows of 32 x 113 floats: 17 rows a chunk
    assert -(-113 // 7) * 113 * 32 * 4 <= COPY_BUDGET
    monkeypatch.setattr(depthwise, "COPY_BUDGET", 1 << 30)
    assert depthwise._row_chunks(op, 3) == 3
