"""NDArray: an aligned, numpy-backed tensor shared without copies with numpy and DLPack."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

ALIGNMENT = 64  # bytes: one cache line, one AVX-512 register


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype, alignment: int) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    nbytes = max(size, 1) * dtype.itemsize  # never empty, so the view has a data pointer
    raw = np.empty(nbytes + alignment, np.uint8)
    offset = (-raw.ctypes.data) % alignment
    return raw[offset : offset + nbytes].view(dtype)[:size].reshape(shape)


class NDArray:
    """A C-contiguous tensor on the CPU, backed by a numpy array (shared, never copied).

    Create one with `empty`/`array`, or wrap an existing C-contiguous numpy array with
    `from_numpy` (no copy). `numpy()` returns a view of the same memory; `__dlpack__` exports it
    and `from_dlpack` imports any DLPack producer (torch, cupy on CPU, numpy) without a copy.

    Example:
        >>> import numpy as np
        >>> from tensorforge.runtime import ndarray as nd
        >>> a = nd.empty((3, 4), "float32")
        >>> a.data_ptr % nd.ALIGNMENT
        0
        >>> a.numpy()[:] = 1.0
        >>> float(np.from_dlpack(a).sum())
        12.0
    """

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray) -> None:
        if not isinstance(array, np.ndarray):
            raise TypeError(f"NDArray must wrap a numpy array, not {type(array).__name__}")
        if not array.flags.c_contiguous:
            raise ValueError("NDArray must wrap a C-contiguous array, not a strided view")
        self._array = array

    @staticmethod
    def from_numpy(array: np.ndarray) -> NDArray:
        """Wrap `array` without copying (it must be C-contiguous)."""
        return NDArray(array)

    def numpy(self) -> np.ndarray:
        """The same memory as a numpy array (a view, not a copy)."""
        return self._array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._array if dtype is None else self._array.astype(dtype, copy=False)

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def dtype(self) -> str:
        return str(self._array.dtype)

    @property
    def data_ptr(self) -> int:
        """The address of the first element."""
        return self._array.ctypes.data

    @property
    def is_aligned(self) -> bool:
        return self.data_ptr % ALIGNMENT == 0

    def copyfrom(self, source: Any) -> NDArray:
        """Copy `source` (array-like of the same shape) into this array; returns self."""
        src = np.asarray(source)
        if src.shape != self.shape:
            raise ValueError(f"copyfrom: source shape must be {self.shape}, not {src.shape}")
        np.copyto(self._array, src, casting="same_kind")
        return self

    def __repr__(self) -> str:
        return f"NDArray({list(self.shape)}, {self.dtype})"


def empty(shape: Sequence[int], dtype: str = "float32", alignment: int = ALIGNMENT) -> NDArray:
    """A new uninitialised array whose data starts on an `alignment`-byte boundary."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, not {alignment!r}")
    return NDArray(_aligned_empty(tuple(int(s) for s in shape), np.dtype(dtype), alignment))


def array(source: Any, dtype: str | None = None) -> NDArray:
    """A new aligned array holding a copy of `source` (use `from_numpy` to share instead)."""
    src = np.asarray(source, dtype=dtype)
    out = empty(src.shape, str(src.dtype))
    out.numpy()[...] = src
    return out


def aligned(source: np.ndarray, alignment: int = ALIGNMENT) -> np.ndarray:
    """`source` itself when it is C-contiguous and starts on an `alignment`-byte boundary
    (read-only arrays included: nothing is copied), else an aligned C-contiguous copy of it.

    Example:
        >>> import numpy as np
        >>> a = empty((4,), "float32").numpy()
        >>> b = a[1:]  # starts 4 bytes past the boundary
        >>> aligned(a) is a, aligned(b) is b, aligned(b).ctypes.data % ALIGNMENT
        (True, False, 0)
    """
    if source.flags.c_contiguous and source.ctypes.data % alignment == 0:
        return source
    out = empty(source.shape, str(source.dtype), alignment).numpy()
    out[...] = source
    return out


def from_numpy(source: np.ndarray) -> NDArray:
    """Wrap a C-contiguous numpy array without copying."""
    return NDArray.from_numpy(source)


def from_dlpack(producer: Any) -> NDArray:
    """Import a CPU tensor from any DLPack producer without copying."""
    arr = np.from_dlpack(producer)
    if not arr.flags.c_contiguous:
        raise ValueError("from_dlpack: the tensor must be C-contiguous, not strided")
    return NDArray(arr)


def view_at(pointer: int, shape: Sequence[int], dtype: str) -> np.ndarray:
    """A numpy array over `prod(shape)` elements of `dtype` at `pointer`, memory the caller owns
    and keeps alive (a module's arena, as kernels implemented in Python see it)."""
    import ctypes

    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = (ctypes.c_uint8 * (count * dt.itemsize)).from_address(pointer)
    return np.frombuffer(raw, dtype=dt).reshape(tuple(shape))
