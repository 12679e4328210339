"""Assemble an int8 matmul by hand, save it, reload it and run it on the functional simulator."""

import tempfile
from pathlib import Path

import numpy as np

from tensorforge import HWConfig, LoadedProgram, ProgramImage, open_device
from tensorforge.demo import build_matmul, pack_inp, unpack_out

cfg = HWConfig.preset("tiny")
kernel = build_matmul(cfg, m=64, k=32, n=16, tile_rows=4, seed=1)
path = Path(tempfile.mkdtemp()) / "matmul.tfp"
kernel.image.save(path)

image = ProgramImage.load(path)
print(f"{image.name}: {image.insn_count} instructions, slots {[s.name for s in image.slots]}")
program = LoadedProgram.load(open_device("sim", cfg), image)
outputs, result = program.run({"A": pack_inp(cfg, kernel.a)})
c = unpack_out(cfg, outputs["C"])
assert np.array_equal(c, kernel.reference()), "simulator and numpy disagree"
print("bit-exact with numpy; counters:", result.stats)
