"""The users' cocotb kit refuses bad stimulus with a clear error, before any simulation.

These need no simulator: the checks run before the bench touches a signal. The oracle is the
documented contract (docs/hardware.md, the `Testbench` API): DRAM is the 32-bit address space of
the AXI masters and registers are 32 bits wide.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("cocotbext.axi")

from tensorforge import cocotb as kit  # noqa: E402

DRAM_BYTES = 1 << 32  # the masters' 32-bit addresses


@pytest.fixture
def tb():
    return kit.Testbench(object(), "tiny")  # named so pytest does not collect it


def test_poke_and_peek_round_trip_at_the_ends_of_dram(tb):
    tb.poke(0, np.arange(4, dtype=np.int8))
    tb.poke(DRAM_BYTES - 3, [7, 8, 9])
    assert tb.peek(0, 4) == bytes([0, 1, 2, 3])
    assert tb.peek(DRAM_BYTES - 3, 3) == bytes([7, 8, 9])


@pytest.mark.parametrize(
    ("addr", "nbytes"), [(-16, 16), (DRAM_BYTES, 1), (DRAM_BYTES - 8, 16), (0x100, -1)]
)
def test_dram_outside_the_address_space_is_refused(tb, addr, nbytes):
    """Before: `poke` raised SparseMemory's `IndexError: slice assignment is wrong size` and
    `peek` returned fewer bytes than asked for (or none) without a word."""
    message = rf"{nbytes} bytes at {addr}: the bytes must lie in the bench's DRAM, addresses 0 "
    with pytest.raises(ValueError, match=f"peek of {message}"):
        tb.peek(addr, nbytes)
    if nbytes >= 0:
        with pytest.raises(ValueError, match=f"poke of {message}"):
            tb.poke(addr, bytes(nbytes))


@pytest.mark.parametrize("value", [-1, 1 << 32, 1.5])
def test_a_register_value_must_be_32_bits(tb, value):
    """Before: cocotbext-axi's `OverflowError: int too big to convert` (or `can't convert
    negative int to unsigned`) from inside the bus model."""
    with pytest.raises(ValueError, match=rf"register INSN_COUNT value must be an int from 0 to "
                                         rf"0xFFFFFFFF, not {value!r}"):  # fmt: skip
        asyncio.run(tb.write_reg("INSN_COUNT", value))
    with pytest.raises(KeyError, match="not 'COUNT'"):
        asyncio.run(tb.write_reg("COUNT", 1))
