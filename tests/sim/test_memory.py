"""Device DRAM model: allocation, alignment, free/coalesce, bounds."""

import numpy as np
import pytest

from tensorforge.sim.memory import DeviceMemory, DeviceMemoryError


def test_alloc_aligns_and_never_overlaps():
    mem = DeviceMemory(1 << 16)
    blocks = [mem.alloc(n, align) for n, align in [(3, 1), (100, 64), (7, 256), (1, 4096)]]
    for b, (_, align) in zip(blocks, [(3, 1), (100, 64), (7, 256), (1, 4096)], strict=True):
        assert b.addr % align == 0
    spans = sorted((b.addr, b.end) for b in blocks)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))
    assert all(mem.base <= b.addr and b.end <= mem.base + mem.size for b in blocks)


def test_free_coalesces_so_the_whole_memory_is_allocatable_again():
    mem = DeviceMemory(1 << 14)
    blocks = [mem.alloc(1000) for _ in range(10)]
    for b in blocks[::2] + blocks[1::2]:
        mem.free(b)
    assert mem.free_bytes == mem.size and mem.largest_free == mem.size
    assert mem.alloc(mem.size, 4096).addr == mem.base


def test_errors_name_the_problem():
    mem = DeviceMemory(4096)
    b = mem.alloc(100)
    with pytest.raises(DeviceMemoryError, match="cannot allocate 8192 bytes"):
        mem.alloc(8192)
    mem.free(b)
    with pytest.raises(DeviceMemoryError, match="not allocated"):
        mem.free(b)
    with pytest.raises(DeviceMemoryError, match=r"read of 8 bytes at 0x10000ffc is outside"):
        mem.read(mem.base + 4092, 8)
    with pytest.raises(DeviceMemoryError, match="outside device memory"):
        mem.write(mem.base - 1, b"x")
    with pytest.raises(ValueError, match="alignment must be a power of two, not 48"):
        mem.alloc(1, 48)


def test_read_write_round_trip_and_views():
    mem = DeviceMemory(1 << 12)
    b = mem.alloc(64)
    data = np.arange(16, dtype=np.int32)
    mem.write(b.addr, data)
    assert np.array_equal(np.frombuffer(mem.read(b.addr, 64), dtype=np.int32), data)
    mem.view(b.addr, 4)[:] = 0
    assert mem.read(b.addr, 4) == bytes(4)
