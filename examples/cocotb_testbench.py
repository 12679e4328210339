"""A hardware-software test of the exported accelerator with cocotb, as a user writes one.

`tensorforge hw testbench` writes a ready-to-run cocotb project: the exported Verilog, a sample
test built on `tensorforge.cocotb.Testbench` (about ten lines: the int8 matmul program run
through the board driver on the RTL and checked against the functional simulator and the cycle
model) and its runner. This script writes one for the `tiny` config and runs it under Icarus.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from tensorforge.cocotb import write_testbench

folder = write_testbench("tiny", Path(tempfile.mkdtemp(prefix="tf_tb_")) / "tb")
print((folder / "test_accel.py").read_text())
proc = subprocess.run([sys.executable, "run.py", "icarus"], cwd=folder, capture_output=True,
                      text=True)  # fmt: skip
summary = [line for line in proc.stdout.splitlines() if "TESTS=" in line]
assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
print("cocotb:", summary[-1].strip(" *") if summary else "passed")
