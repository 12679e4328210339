"""Compile one int8 conv2d for the accelerator and run it on both simulators: bit-exact against
the numpy reference, and 2 virtual threads against 1 on the cycle-accurate model."""

import numpy as np

from tensorforge.compiler.topi.vta import conv2d
from tensorforge.hw.config import HWConfig

cfg = HWConfig.preset("pynq")
rng = np.random.default_rng(0)
x = rng.integers(-128, 128, (1, 64, 14, 14), dtype=np.int8)
w = rng.integers(-128, 128, (64, 64, 3, 3), dtype=np.int8)
bias = rng.integers(-4000, 4000, 64, dtype=np.int32)
for vthreads in (1, 2):
    kernel = conv2d(cfg, x.shape, w, bias, stride=1, padding=1, shift=10, relu=True,
                    vthreads=vthreads)  # fmt: skip
    y, _ = kernel.run(x, backend="sim")
    assert np.array_equal(y, kernel.reference(x)), "simulator and numpy disagree"
    _, timed = kernel.run(x, backend="cyclesim")
    print(f"{vthreads} vthread(s): {kernel.image.insn_count} instructions, {timed.cycles:,} cycles")
