"""NDArray: aligned allocation, zero-copy numpy and DLPack exchange, validation."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.runtime import ndarray as nd


@pytest.mark.parametrize("dtype", ["float32", "int8", "float64", "bool"])
@pytest.mark.parametrize("shape", [(1,), (3, 5), (7, 1, 3), (0,)])
def test_empty_is_aligned_with_the_requested_shape(shape, dtype) -> None:
    a = nd.empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype
    assert a.data_ptr % nd.ALIGNMENT == 0 and a.is_aligned


def test_custom_alignment_and_bad_alignment() -> None:
    assert nd.empty((5,), "float32", alignment=4096).data_ptr % 4096 == 0
    with pytest.raises(ValueError, match="alignment must be a power of two, not 48"):
        nd.empty((5,), alignment=48)


def test_from_numpy_and_numpy_share_memory() -> None:
    src = np.arange(12, dtype="float32").reshape(3, 4)
    a = nd.from_numpy(src)
    assert np.shares_memory(a.numpy(), src)
    a.numpy()[1, 2] = -1.0
    assert src[1, 2] == -1.0


def test_array_copies_into_aligned_memory() -> None:
    src = np.arange(10, dtype="int32")
    a = nd.array(src)
    assert not np.shares_memory(a.numpy(), src) and a.is_aligned
    np.testing.assert_array_equal(a.numpy(), src)


def test_dlpack_export_is_zero_copy() -> None:
    a = nd.array(np.arange(6, dtype="float32"))
    b = np.from_dlpack(a)
    assert np.shares_memory(a.numpy(), b)
    b[0] = 42.0
    assert a.numpy()[0] == 42.0


def test_dlpack_import_is_zero_copy() -> None:
    src = np.arange(8, dtype="float64")
    a = nd.from_dlpack(src)
    assert np.shares_memory(a.numpy(), src)
    assert a.__dlpack_device__() == src.__dlpack_device__()


def test_strided_views_are_refused() -> None:
    with pytest.raises(ValueError, match="C-contiguous"):
        nd.from_numpy(np.zeros((4, 4))[:, ::2])
    with pytest.raises(TypeError, match="must wrap a numpy array, not list"):
        nd.NDArray([1, 2])


def test_copyfrom_checks_the_shape() -> None:
    a = nd.empty((2, 3), "float32")
    a.copyfrom(np.ones((2, 3)))
    assert (a.numpy() == 1).all()
    with pytest.raises(ValueError, match=r"copyfrom: source shape must be \(2, 3\), not \(3, 2\)"):
        a.copyfrom(np.ones((3, 2)))


def test_aligned_keeps_an_aligned_array_and_copies_any_other() -> None:
    a = nd.empty((4, 3), "float32").numpy()
    a[...] = np.arange(12).reshape(4, 3)
    a.setflags(write=False)  # read-only arrays are kept as they are, not copied
    assert nd.aligned(a) is a
    for other in (a.reshape(-1)[1:], a.T):  # 4 bytes past the boundary; not C-contiguous
        copy = nd.aligned(other)
        assert not np.shares_memory(copy, a)
        assert copy.flags.c_contiguous and copy.ctypes.data % nd.ALIGNMENT == 0
        np.testing.assert_array_equal(copy, other)
