"""The accelerator's timing as the RTL has it: per-block latencies and cycle formulas.

The one statement of the hardware's cycle counts, as hw/regmap.py is of its registers: the
Amaranth blocks (hw/core) are built to these numbers and tested against these formulas, and the
timing model (sim/latency.py ``TimingParams``) takes its defaults from them.

Example:
    >>> gemm_cycles(24), gemm_cycles(0)
    (29, 1)
    >>> alu_cycles(6, alu_ii(use_imm=False)), alu_cycles(6, alu_ii(use_imm=True))
    (16, 11)
"""

from __future__ import annotations

#: An AXI burst never crosses a 4 KiB page.
PAGE_BYTES = 4096
#: Beats of the longest burst (AXI3's 16, what Zynq-7000's HP ports take).
BURST_BEATS = 16
#: Bursts of instructions fetch buffers (hw/core/fetch.py).
FETCH_BUFFER_BURSTS = 2
#: Cycles from a GEMM step's issue (its UOP read) to its ACC/OUT write (hw/core/gemm.py).
GEMM_LATENCY = 4
#: Cycles from an ALU step's issue (its UOP read) to its ACC/OUT write (hw/core/alu.py).
ALU_LATENCY = 4


def gemm_cycles(n_steps: int, latency: int = GEMM_LATENCY) -> int:
    """Cycles from accepting a GEMM instruction to being ready for the next one.

    ``n_steps = iter_out * iter_in * max(0, uop_end - uop_bgn)``; one step per cycle (II = 1),
    then the pipeline drains. An empty instruction takes one cycle.
    """
    return n_steps + latency + 1 if n_steps > 0 else 1


def alu_ii(use_imm: bool, reset_reg: bool = False) -> int:
    """ALU initiation interval: 2 when the operand is ACC[src] (one ACC read port), else 1."""
    return 1 if use_imm or reset_reg else 2


def alu_cycles(n_steps: int, ii: int, latency: int = ALU_LATENCY) -> int:
    """Cycles from accepting an ALU instruction to being ready for the next one.

    Steps issue every ``ii`` cycles (``alu_ii``), then the pipeline drains; an empty
    instruction takes one cycle.
    """
    return (n_steps - 1) * ii + latency + 2 if n_steps > 0 else 1
