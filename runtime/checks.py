"""Run-time checks of a compiled model: conditions under which onnxruntime refuses a run and
that a kernel cannot raise from inside. An index outside its axis is the one kind today: the
kernels clamp such an index so that they never read or write outside the data, and the check
turns the silent clamp into the error onnxruntime (and torch) give.

A check is a value the model computes like any other, a uint8 scalar that is 1 when the
condition holds, carried as an extra output of the graph and held apart from the model's own
outputs by the `Module` (`Module.checks`). Its name carries its message (`check_name`), so it
survives every graph pass and a saved module unchanged. `Module.run` and the graph's reference
executor raise `CheckFailed` (an `IndexError`) naming the node when a check is 0, and never
return outputs computed from a clamped index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote

import numpy as np

PREFIX = "tf.check:"
SHOWN = 4  # failed checks named in one error


class CheckFailed(IndexError):
    """A run-time check of the model failed (an index outside its axis); the message names
    the node, its input and the valid range."""


def check_name(serial: int, message: str) -> str:
    """The value name of check number `serial` (unique in its graph) that fails with `message`:
    percent-encoded, so the name holds only letters, digits and `%._-~`."""
    return f"{PREFIX}{serial}:{quote(message, safe='')}"


def is_check(name: str) -> bool:
    return name.startswith(PREFIX)


def check_message(name: str) -> str:
    """The message a check named `name` fails with."""
    _, _, encoded = name[len(PREFIX) :].partition(":")
    return unquote(encoded)


def split_outputs(names: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the model's own outputs, its checks) of a graph's output list."""
    names = tuple(names)
    return tuple(n for n in names if not is_check(n)), tuple(n for n in names if is_check(n))


def raise_failed(values: Mapping[str, np.ndarray], checks: Iterable[str]) -> None:
    """Raise `CheckFailed` listing the checks of `checks` whose value in `values` is 0 (the
    first `SHOWN`, then how many more: an unrolled loop repeats its node's check)."""
    failed = [check_message(name) for name in checks if not int(np.asarray(values[name]))]
    if failed:
        more = f"; and {len(failed) - SHOWN} more" if len(failed) > SHOWN else ""
        raise CheckFailed("; ".join(failed[:SHOWN]) + more)
