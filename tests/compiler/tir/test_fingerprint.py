"""`tir.fingerprint.fingerprint`: equal for loop-IR functions equal but for their name and the
identity of their variables and buffers, different wherever a field differs. Oracle: the
functions built here, which differ in exactly one field (or in nothing but identities)."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from tensorforge.compiler import te
from tensorforge.compiler.schedule.stage import ForKind
from tensorforge.compiler.tir import Buffer, BufferLoad, BufferStore, For, PrimFunc
from tensorforge.compiler.tir.fingerprint import fingerprint
from tensorforge.compiler.tir.stmt import AttrStmt


def _scale(
    name: str = "f",
    factor: float = 2.0,
    kind: ForKind = ForKind.SERIAL,
    extent: int = 8,
    dtype: str = "float32",
    scope: str = "global",
) -> PrimFunc:
    """`Y[i] = X[i] * factor` over `extent`, with new buffers and a new loop variable."""
    x, y = Buffer("X", dtype, (extent,), scope), Buffer("Y", dtype, (extent,))
    i = te.var("i")
    value = BufferLoad(x, (i,), dtype) * te.const(factor, dtype)
    body = For(i, te.const(0), te.const(extent), kind, BufferStore(y, value, (i,)))
    return PrimFunc(name, (x, y), body, ((extent,), (extent,)))


def test_equal_functions_but_for_names_and_identities_share_a_fingerprint() -> None:
    a, b = _scale("tf_k0_mul"), _scale("tf_k7_mul")
    assert a.params[0] is not b.params[0] and a.body.var is not b.body.var
    assert fingerprint(a) == fingerprint(b) is not None


@pytest.mark.parametrize(
    "other",
    [
        {"factor": 0.5},  # a constant folded into the code
        {"kind": ForKind.VECTORIZED},  # how a loop runs
        {"kind": ForKind.PARALLEL},
        {"extent": 16},  # shapes and trip counts
        {"dtype": "float64"},
        {"scope": "local"},
    ],
)
def test_a_field_that_differs_gives_another_fingerprint(other: dict) -> None:
    assert fingerprint(_scale(**other)) != fingerprint(_scale())


def test_floats_are_told_apart_by_their_bits() -> None:
    """Negative zero and NaNs of other sign or payload print alike (repr), but are other code."""
    neg_nan = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]
    assert math.isnan(neg_nan) and repr(neg_nan) == repr(math.nan)
    assert fingerprint(_scale(factor=-0.0)) != fingerprint(_scale(factor=0.0))
    assert fingerprint(_scale(factor=neg_nan)) != fingerprint(_scale(factor=math.nan))


def test_which_variable_is_read_where_counts_not_only_how_many() -> None:
    """Y[i] = X[j] inside loops i, j against Y[j] = X[i]: the same nodes, bound otherwise."""

    def nest(swap: bool) -> PrimFunc:
        x, y = Buffer("X", "float32", (4,)), Buffer("Y", "float32", (4,))
        i, j = te.var("i"), te.var("j")
        store = BufferStore(y, BufferLoad(x, (i if swap else j,), "float32"), (j if swap else i,))
        body = For(i, te.const(0), te.const(4), ForKind.SERIAL,
                   For(j, te.const(0), te.const(4), ForKind.SERIAL, store))  # fmt: skip
        return PrimFunc("f", (x, y), body, ((4,), (4,)))

    assert fingerprint(nest(False)) != fingerprint(nest(True))
    assert fingerprint(nest(False)) == fingerprint(nest(False))


def test_a_value_it_cannot_vouch_for_gives_no_fingerprint() -> None:
    """An annotation holding an array (its repr would elide values): never shared."""
    func = _scale()
    odd = func.with_body(AttrStmt("pragma_table", np.arange(2000), func.body))
    assert fingerprint(odd) is None
