"""The GEMM tensor intrinsic from the HWConfig, tensorizing a blocked int8 dense in TE."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.vta import pack_nchw, pack_oihw
from tensorforge.compiler.vta.intrin import GEMM_ATTR, gemm_intrin
from tensorforge.hw.config import HWConfig


def _blocked_dense(cfg: HWConfig, mb: int, kb: int, nb: int):  # type: ignore[no-untyped-def]
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    A = te.placeholder((mb, kb, b, bi), "int8", name="A")
    W = te.placeholder((nb, kb, bo, bi), "int8", name="W")
    k = te.reduce_axis((0, kb * bi), "k")  # one reduction axis, as the intrinsic has
    C = te.compute(
        (mb, nb, b, bo),
        lambda m, n, i, j: te.sum(
            te.cast(A[m, k // bi, i, k % bi], "int32") * te.cast(W[n, k // bi, j, k % bi], "int32"),
            axis=k,
        ),
        name="C",
    )
    return A, W, C


@pytest.mark.parametrize("config", ["tiny", "pynq"])
def test_gemm_intrinsic_tensorizes_a_blocked_dense(config: str) -> None:
    cfg = HWConfig.preset(config)
    A, W, C = _blocked_dense(cfg, 2, 3, 2)
    s = te.create_schedule(C.op)
    m, n, i, j = C.op.axis
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=cfg.block_in)
    s[C].reorder(m, n, ko, i, j, ki)
    s[C].tensorize(i, gemm_intrin(cfg))
    func = tir.lower(s, [A, W, C], name="dense")
    assert repr(func).count(f"attr {GEMM_ATTR} = 2 {{") == 1  # the update, inside k.outer

    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (2 * cfg.batch, 3 * cfg.block_in), dtype=np.int8)
    w = rng.integers(-128, 128, (2 * cfg.block_out, 3 * cfg.block_in), dtype=np.int8)
    a_p = pack_nchw(cfg, a[:, :, None, None])[:, :, 0, 0]
    w_p = pack_oihw(cfg, w[:, :, None, None])[:, :, 0, 0]
    out = np.zeros(C.shape, np.int32)
    tir.interpret(func, [a_p, w_p, out])
    got = out.transpose(0, 2, 1, 3).reshape(2 * cfg.batch, 2 * cfg.block_out)
    assert np.array_equal(got, a.astype(np.int32) @ w.astype(np.int32).T)


def test_gemm_intrinsic_shape_follows_the_config() -> None:
    cfg = HWConfig.preset("tiny").replace(name="b2", log_batch=1, log_block_out=3)
    intrin = gemm_intrin(cfg)
    assert [list(t.shape) for t in intrin.inputs] == [[2, 4], [8, 4]]
    assert list(intrin.op.shape) == [2, 8]
