"""The compiled-function calling convention: one data pointer per buffer, checked at the call."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import guard
from ...ndarray import NDArray


@dataclass(frozen=True)
class ParamSpec:
    """What a compiled function expects of one argument."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


def _describe(arr: np.ndarray) -> str:
    return f"{arr.dtype}{list(arr.shape)}"


class CPUFunction:
    """A compiled kernel, called with NDArrays or numpy arrays (no copies).

    Each argument's dtype, shape and C-contiguity is checked at the call; a mismatch raises
    `TypeError` (not an array) or `ValueError` naming the function, argument and both types.
    With `guard.enabled()` (``TENSORFORGE_CHECK_WRITES=1``) each call runs on red-zoned copies
    and raises `guard.KernelWriteError` when the kernel writes outside an argument.
    """

    def __init__(self, name: str, address: int, params: Sequence[ParamSpec], owner: Any) -> None:
        self.name, self.params, self.owner = name, tuple(params), owner  # owner keeps code alive
        self.address = address
        self._cfunc = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(self.params)))(address)
        self._checked = guard.enabled()

    def _array(self, index: int, spec: ParamSpec, value: Any) -> np.ndarray:
        where = f"{self.name}: argument {index} ({spec.name})"
        if isinstance(value, NDArray):
            value = value.numpy()
        if not isinstance(value, np.ndarray):
            raise TypeError(
                f"{where} must be an NDArray or numpy array, not {type(value).__name__}"
            )
        if str(value.dtype) != spec.dtype or tuple(value.shape) != spec.shape:
            raise ValueError(f"{where} must be {spec.describe()}, not {_describe(value)}")
        if not value.flags.c_contiguous:
            raise ValueError(f"{where} must be C-contiguous, not a strided view")
        return value

    def __call__(self, *args: Any) -> None:
        if len(args) != len(self.params):
            names = ", ".join(p.name for p in self.params)
            raise TypeError(
                f"{self.name} must be called with {len(self.params)} arrays ({names}), "
                f"not {len(args)}"
            )
        arrays = [
            self._array(i, p, a) for i, (p, a) in enumerate(zip(self.params, args, strict=True))
        ]
        if self._checked:
            guard.checked_call(self.name, [p.name for p in self.params], arrays, self._cfunc)
        else:
            self._cfunc(*(a.ctypes.data for a in arrays))

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        return f"CPUFunction {self.name}({sig})"
