"""Packed operands of a vta kernel launch: a tensor already in the accelerator's blocked layout is
bound as it is (no pack, no unpack); NCHW operands are packed and unpacked as before. The oracle
is the int8 max pooling reference (``compiler.quantize``'s semantics) and ``pack_nchw``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.compiler.vta import max_pool2d
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.cpu import ParamSpec
from tensorforge.runtime.device.vta import open_device
from tensorforge.runtime.device.vta.base import DeviceError, LoadedProgram
from tensorforge.runtime.device.vta.launch import AcceleratorLaunch, Operand
from tensorforge.runtime.device.vta.layout import blocked_shape, pack_nchw

TINY = HWConfig.preset("tiny")
CONFIGS = [TINY, HWConfig.preset("pynq"), TINY.replace(name="b2", log_batch=1, log_block_out=3)]
X = np.random.default_rng(0).integers(-128, 128, (2, 6, 5, 5), dtype=np.int8)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(CONFIGS),
    st.tuples(*(st.integers(1, n) for n in (5, 40, 4, 4))),
    st.booleans(),
)
def test_blocked_shape_is_the_shape_pack_nchw_gives(cfg, nchw, output_blocks):
    block = cfg.block_out if output_blocks else cfg.block_in
    assert blocked_shape(cfg, nchw, block) == pack_nchw(cfg, np.zeros(nchw, np.int8), block).shape


def test_blocked_shape_needs_four_dimensions():
    with pytest.raises(ValueError, match=r"shape must be 4-D NCHW, not \(6, 5\)"):
        blocked_shape(TINY, (6, 5), 4)


def test_operand_json_round_trips_and_reads_operands_saved_before_packing():
    packed = Operand("X", (2, 6, 5, 5), 4, packed=True)
    assert Operand.from_json(packed.to_json()) == packed
    old = {"slot": "Y", "nchw": [2, 6, 2, 2], "block": 0}  # a module saved before the flag
    assert Operand.from_json(old) == Operand("Y", (2, 6, 2, 2))
    assert Operand.from_json(old).to_json() == old  # unpacked operands keep the old form
    with pytest.raises(ValueError, match="operand 'X': packed must be a bool, not 'yes'"):
        Operand.from_json({**packed.to_json(), "packed": "yes"})


@pytest.fixture(scope="module")
def pool():
    """A 2x2/2 max pooling of X compiled for tiny, and a sim device."""
    kernel = max_pool2d(TINY, X.shape, 2)
    device = open_device("sim", TINY)
    yield kernel, device
    device.close()


def _launch(pool, packed_in: bool, packed_out: bool) -> tuple[AcceleratorLaunch, ParamSpec]:
    """The pooling launched with X and Y bound NCHW or packed; and Y's parameter."""
    kernel, device = pool
    y_nchw = (2, 6, 2, 2)
    shapes = [
        blocked_shape(TINY, X.shape, TINY.block_out) if packed_in else X.shape,
        blocked_shape(TINY, y_nchw, TINY.block_out) if packed_out else y_nchw,
    ]
    params = [ParamSpec(f"p{i}", "int8", tuple(s)) for i, s in enumerate(shapes)]
    operands = [
        Operand("X", X.shape, TINY.block_out, packed=packed_in),
        Operand("Y", y_nchw, packed=packed_out),
    ]
    program = LoadedProgram.load(device, kernel.image)
    return AcceleratorLaunch(program, params, operands), params[1]


@pytest.mark.parametrize(
    ("packed_in", "packed_out"),
    [(False, False), (True, True), (True, False), (False, True)],
    ids=["nchw-nchw", "packed-packed", "packed-nchw", "nchw-packed"],
)
def test_a_launch_binds_packed_operands_as_they_are(pool, packed_in, packed_out):
    kernel, _ = pool
    launch, y_param = _launch(pool, packed_in, packed_out)
    x = pack_nchw(TINY, X, TINY.block_out) if packed_in else X.copy()
    y = np.full(y_param.shape, 99, np.int8)
    launch(x.ctypes.data, y.ctypes.data)
    want = kernel.reference(X)
    # Packed, the output is the slot as the accelerator stored it: the pooled padding channels
    # of a zero-padded input are zero, so it equals the packed reference exactly.
    assert np.array_equal(y, pack_nchw(TINY, want, TINY.block_out) if packed_out else want)


def test_a_packed_operand_must_have_the_slot_shape(pool):
    kernel, device = pool
    params = [ParamSpec("p0", "int8", X.shape), ParamSpec("p1", "int8", (2, 6, 2, 2))]
    operands = [Operand("X", X.shape, TINY.block_out, packed=True), Operand("Y", (2, 6, 2, 2))]
    program = LoadedProgram.load(device, kernel.image)
    with pytest.raises(
        DeviceError,
        match=r"packed operand p0 of vta kernel '.*' must have the shape of slot 'X', "
        r"\(2, 2, 5, 5, 1, 4\), not \(2, 6, 5, 5\)",
    ):
        AcceleratorLaunch(program, params, operands)
