"""A tuning log that has a config for none of a model's workloads (stale, or written for
another model or target) compiles with the defaults and says so with a warning."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest

import tensorforge
from tensorforge.compiler.autotune.driver import extract_tasks
from tensorforge.compiler.autotune.log import TuningLog
from tensorforge.compiler.autotune.measure import MeasureResult
from tensorforge.compiler.frontend.onnx_builders import mobilenet_v2_block, small_cnn


def test_a_log_matching_no_workload_warns_and_compiles_with_the_defaults(tmp_path) -> None:
    other = tmp_path / "block.onnx"
    other.write_bytes(mobilenet_v2_block().SerializeToString())
    log = tmp_path / "other.jsonl"
    with TuningLog(log) as out:
        for task in extract_tasks(str(other), "llvm"):
            out.write(task, MeasureResult(task.space.default.values, 1e-6, [1e-6]), 0)
    model = small_cnn()
    with pytest.warns(UserWarning, match=r"has a config for none of the \d+ tunable workloads"):
        module = tensorforge.compile(model, tuning_log=log)
    assert module.stats["tuning"]["applied"] == 0 and module.stats["tuning"]["untuned"]
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(module.run(x)[module.outputs[0]], want, rtol=1e-4, atol=1e-5)


def test_a_matching_log_does_not_warn(tmp_path) -> None:
    model = small_cnn()
    path = tmp_path / "small.onnx"
    path.write_bytes(model.SerializeToString())
    log = tmp_path / "own.jsonl"
    with TuningLog(log) as out:
        task = extract_tasks(str(path), "llvm")[0]
        out.write(task, MeasureResult(task.space.default.values, 1e-6, [1e-6]), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = tensorforge.compile(str(path), tuning_log=log)
    assert module.stats["tuning"]["applied"] >= 1


@pytest.mark.parametrize("log", [5, [b"x.jsonl"], {"a": 1}])
def test_a_tuning_log_that_is_not_a_path_is_a_type_error(log) -> None:
    # found by fuzzing the API: an int was "'int' object is not iterable" from inside
    with pytest.raises(TypeError, match="tuning_log must be a log's path or a list of paths"):
        tensorforge.compile(small_cnn(), tuning_log=log)
