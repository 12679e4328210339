"""Wrong-typed or out-of-range arguments to the runtime's public API (found by fuzzing the API)
raise a TypeError/ValueError/DeviceError that names the argument, never an error from inside
(pathlib, dataclasses, numpy), and never act on them: an int given as a path is not opened as a
file descriptor, an int given as bytes is not allocated."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import mlp
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.vta import DeviceError, open_device
from tensorforge.runtime.module import Module
from tensorforge.runtime.program import ProgramImage

X = np.ones((2, 64), np.float32)


@pytest.fixture(scope="module")
def module() -> Module:
    return tensorforge.compile(mlp(), progress=False)


@pytest.mark.parametrize("load", [Module.load, ProgramImage.load])
def test_an_int_path_is_refused_and_its_descriptor_left_alone(load):
    read_end, write_end = os.pipe()
    os.close(write_end)
    try:
        with pytest.raises(TypeError, match="must be a str or os.PathLike, not int"):
            load(read_end)
        os.fstat(read_end)  # open(read_end) would have read and closed it
    finally:
        os.close(read_end)


def test_save_to_a_non_path_is_a_type_error(module):
    with pytest.raises(TypeError, match="must be a str or os.PathLike, not int"):
        module.save(5)


@pytest.mark.parametrize("data", ["TFMOD", None, 1 << 20, [1, 2]])
@pytest.mark.parametrize(
    ("parse", "kind"), [(Module.from_bytes, "module"), (ProgramImage.from_bytes, "program image")]
)
def test_from_bytes_of_a_non_buffer_is_a_type_error(parse, kind, data):
    # ProgramImage.from_bytes(1 << 20) made bytes(1 << 20); 1 << 40 would allocate a TiB
    with pytest.raises(TypeError, match=f"a {kind} is read from bytes"):
        parse(data)


@pytest.mark.parametrize("repeat", [0, -1, float("nan"), 2.0, "3", True])
def test_profile_repeat_must_be_a_positive_int(module, repeat):
    # 0 returned a profile of no runs, -1 numpy's "negative dimensions", "3" a TypeError
    with pytest.raises(ValueError, match="repeat must be an int of at least 1"):
        module.profile({"x": X}, repeat=repeat)
    assert module.profile({"x": X}, repeat=np.int64(2)) is not None


@pytest.mark.parametrize("backend", ["sim", "cyclesim"])
def test_an_option_the_backend_does_not_take_is_a_device_error(backend):
    with pytest.raises(DeviceError, match=rf"'{backend}' takes the options .*not \['bogus'\]"):
        open_device(backend, HWConfig.preset("tiny"), bogus=1)
    open_device(backend, HWConfig.preset("tiny"), min_align=128).close()


def test_use_device_on_a_module_without_device_kernels_is_refused(module):
    # it was accepted and silently ignored: every kernel kept running on the host CPU
    with pytest.raises(ValueError, match="has none: all its kernels run on the host CPU"):
        module.use_device("cyclesim")
    assert module.run({"x": X})  # the module is unchanged


def test_use_device_names_an_unknown_accelerator_backend_at_once():
    from tensorforge.compiler.frontend.onnx_builders import small_cnn

    model = small_cnn(16)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    name = model.graph.input[0].name
    module = tensorforge.compile(model, "vta -config=tiny -device=sim", calibration={name: x})
    want = module.run({name: x})
    # "cycle-sim" was taken and failed only at the next run, from inside the loader
    with pytest.raises(
        ValueError, match=r"one of \('sim', 'cyclesim', 'rtl', 'pynq'\), not 'cycle-sim'"
    ):
        module.use_device("cycle-sim")
    np.testing.assert_array_equal(
        module.use_device("cyclesim").run({name: x})[module.outputs[0]], want[module.outputs[0]]
    )
