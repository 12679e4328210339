"""One module run from several Python threads at once gives every thread its own correct
outputs (the runs take turns over the module's one arena); inputs the int8 path cannot
represent are refused."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import small_cnn

RNG = np.random.default_rng(0)
INPUTS = [RNG.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(8)]


@pytest.mark.parametrize("target", ["llvm", "vta -config=pynq"])
def test_runs_from_many_threads_equal_runs_one_after_another(target) -> None:
    calibration = {"x": INPUTS[0]} if target.startswith("vta") else None
    module = tensorforge.compile(small_cnn(), target, calibration=calibration)
    (name,) = module.outputs
    want = [module.run({"x": x})[name] for x in INPUTS]  # one after another: the oracle
    jobs = [INPUTS[k % len(INPUTS)] for k in range(48)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(lambda x: module.run({"x": x})[name], jobs))
    for k, out in enumerate(got):
        np.testing.assert_array_equal(out, want[k % len(INPUTS)])


def test_nan_inputs_to_int8_layers_are_refused_naming_the_input() -> None:
    module = tensorforge.compile(small_cnn(), "vta -config=pynq", calibration={"x": INPUTS[0]})
    x = INPUTS[1].copy()
    x[0, 0, 0, :3] = np.nan
    with pytest.raises(ValueError, match="input 'x' holds 3 NaN or infinite value"):
        module.run({"x": x})
