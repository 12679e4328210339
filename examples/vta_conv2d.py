"""Compile one int8 conv2d for the accelerator and run it on both simulators: bit-exact against
the numpy reference, and 2 virtual threads against 1 on the cycle-accurate model. The kernel is
written in TE and lowered through tensorize and the loop IR; the end shows that loop IR and the
tile program ``vta.lower`` makes of it."""

import numpy as np

from tensorforge.compiler.vta import Conv2dSchedule, Conv2dWorkload, conv2d
from tensorforge.compiler.vta.layout import pack_oihw
from tensorforge.compiler.vta.operators import conv2d_te
from tensorforge.compiler.vta.tile import format_stmt
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

# The same operator by hand: its TE schedule, loop IR and tile program (first statements).
wl = Conv2dWorkload(1, 64, 14, 14, 64, 3, 3, pad_h=1, pad_w=1)
op = conv2d_te(cfg, wl, Conv2dSchedule(tile_h=7, tile_oc=2, tile_ic=2, vthreads=2),
               pack_oihw(cfg, w))  # fmt: skip
print("\n".join(str(op.lower()).splitlines()[:12]), "\n  ...")
for stmt in op.tile_program().stmts[:6]:
    print(format_stmt(stmt))
