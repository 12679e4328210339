"""Blocked depthwise kernels (`topi.x86.depthwise_conv2d_nchwc(blocked=True)`) by register tile:
the whole channel block in one tile (the tile before 2026-11-25) at `reg_n` 2, 4 and the default,
against one vector of channels per tile (`vec`, the target's lanes) at the default `reg_n`.

Each kernel alone, with bias and an epilogue (ReLU, or SiLU with `--silu`), one thread; the
variants of a layer are built first and then timed in alternating rounds, each the median of
the thread's CPU time over 10 calls (`time.thread_time`: steadier than wall time on a shared
machine), the median of the rounds printed; every output is checked against numpy first.
Layers: the blocked depthwise layers of MNASNet, MobileNetV2 and EfficientNet-B0 (channels,
side, taps, stride and the chain's block).

Usage:
    python benchmarks/dw_tiles.py [--rounds 7] [--silu]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from tensorforge.compiler import te
from tensorforge.compiler.build import build
from tensorforge.compiler.codegen.llvm_jit import vector_registers
from tensorforge.compiler.topi.x86.depthwise import (
    DepthwiseConfig,
    default_depthwise_config,
    depthwise_conv2d_nchwc,
    schedule_depthwise_nchwc,
)
from tensorforge.runtime.device.cpu import set_num_threads

# channels, side, taps, stride, block
LAYERS = [
    (32, 112, 3, 1, 32), (96, 112, 3, 2, 32), (144, 56, 3, 1, 16), (240, 28, 5, 2, 16),
    (480, 14, 5, 1, 32), (480, 14, 3, 1, 32), (576, 14, 5, 2, 32), (1152, 7, 5, 1, 32),
]  # fmt: skip


def _kernel(layer: tuple, reg_n: int, vec: int, silu: bool) -> tuple:
    c, side, k, stride, cb = layer
    out = (side + 2 * (k // 2) - k) // stride + 1
    X = te.placeholder((1, c // cb, side, side, cb), name="X")
    W = te.placeholder((c // cb, k, k, cb), name="W")
    B = te.placeholder((c,), name="B")
    epilogue = (lambda v, *i: v * te.sigmoid(v)) if silu else (lambda v, *i: te.max(v, 0.0))
    op = depthwise_conv2d_nchwc(X, W, (out, out), (k // 2, k // 2), (stride, stride), (1, 1), B,
                                epilogue, blocked=True)  # fmt: skip
    f = build(schedule_depthwise_nchwc(op, DepthwiseConfig(cb, reg_n, True, vec)), op.args)
    rng = np.random.default_rng(c)
    x = rng.standard_normal((1, c // cb, side, side, cb)).astype(np.float32)
    w = rng.standard_normal((c // cb, k, k, cb)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    y = np.empty((1, c // cb, out, out, cb), np.float32)
    f(x, w, b, y)
    np.testing.assert_allclose(y, _numpy(x, w, b, k, stride, out, silu), rtol=1e-4, atol=1e-4)
    return f, (x, w, b, y)


def _numpy(x, w, b, k, stride, out, silu) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The oracle: blocked depthwise conv, padding k//2, + bias, then ReLU or SiLU."""
    pad = k // 2
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad), (0, 0)))
    acc = np.zeros((*x.shape[:2], out, out, x.shape[-1]))
    for r in range(k):
        for s in range(k):
            window = xp[:, :, r : r + stride * out : stride, s : s + stride * out : stride]
            acc += window * w[None, :, r, s, None, None, :]
    acc += b.reshape(x.shape[1], x.shape[-1])[None, :, None, None, :]
    return acc / (1 + np.exp(-acc)) if silu else np.maximum(acc, 0)


def _cpu_ms(f, args, calls: int = 10) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(calls):
        start = time.thread_time()
        f(*args)
        times.append(time.thread_time() - start)
    return float(np.median(times) * 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--silu", action="store_true", help="SiLU epilogue instead of ReLU")
    args = parser.parse_args()
    set_num_threads(1)
    lanes = vector_registers()[0]
    print(f"load {os.getloadavg()}, {lanes} float lanes; ms of thread CPU time, 1 thread")
    print(f"{'layer':36} {'old r2':>7} {'old r4':>7} {'old dflt':>8} {'vec':>7}")
    for layer in LAYERS:
        c, side, k, stride, cb = layer
        reg_n = default_depthwise_config(c, (side + 2 * (k // 2) - k) // stride + 1).reg_n
        variants = {"r2": (2, 0), "r4": (4, 0), "dflt": (reg_n, 0), "vec": (reg_n, lanes)}
        built = {n: _kernel(layer, r, v, args.silu) for n, (r, v) in variants.items()}
        rounds: dict[str, list[float]] = {n: [] for n in built}
        for _ in range(args.rounds):
            for n, (f, fargs) in built.items():
                rounds[n].append(_cpu_ms(f, fargs))
        m = {n: float(np.median(v)) for n, v in rounds.items()}
        label = f"{c} x {side}, {k}x{k}, s{stride}, NCHW{cb}c, reg_n {reg_n}"
        print(f"{label:36} {m['r2']:7.3f} {m['r4']:7.3f} {m['dflt']:8.3f} {m['vec']:7.3f}")
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
