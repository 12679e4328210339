"""An int8 model warns when a run's input leaves the range its calibration covered
(`CalibrationRangeWarning`): static quantization clips those values, silently until now. Oracles:
the int8 graph's own input quantization (`tf.quantize`'s scale, numpy's `quantize`), and the
float model's outputs, which the clipped run leaves."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorforge
from tensorforge import CalibrationRangeWarning
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import small_cnn
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.quantize.scheme import quantize

TARGET = "vta -config=pynq"


def _x(scale: float = 1.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (scale * rng.standard_normal((1, 3, 32, 32))).astype(np.float32)


@pytest.fixture(scope="module")
def module() -> tensorforge.Module:
    return tensorforge.compile(small_cnn(), TARGET, calibration=[{"x": _x(seed=s)} for s in (1, 2)])


def _no_warning(module: tensorforge.Module, x: np.ndarray) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationRangeWarning)
        return module.run({"x": x})


def test_the_range_is_where_the_input_quantization_does_not_clip(module) -> None:
    low, high = module.stats["calibrated_ranges"]["x"]
    assert low < 0 < high and np.isclose(-low, high)  # (symmetric int8, no offset here)
    scale = high / 127.5
    inside = np.array([low * 0.999, high * 0.999], np.float32)
    outside = np.array([low * 1.01, high * 1.01], np.float32)
    assert np.abs(quantize(inside, scale).astype(int)).max() == 127  # reaches the ends ...
    assert (np.rint(outside / scale).astype(int) == [-129, 129]).all()  # ... and past them


def test_inputs_like_the_calibration_run_without_a_warning(module) -> None:
    """A fresh draw of the calibration's distribution: a value or two just past the range (its
    tail; 3.89 against 3.77 here) is no reason to warn."""
    x = _x(seed=3)
    low, high = module.stats["calibrated_ranges"]["x"]
    assert 0 < int(((x < low) | (x > high)).sum()) <= 0.01 * x.size
    _no_warning(module, x)


def test_a_few_values_far_past_the_range_warn(module) -> None:
    x = _x(seed=5)
    x[0, 0, 0, :2] = 3 * module.stats["calibrated_ranges"]["x"][1]  # 2 values at 3x the bound
    with pytest.warns(CalibrationRangeWarning, match=r"2 of 3072 values lie outside .* up to 3x"):
        tensorforge.Module.from_bytes(module.to_bytes()).run({"x": x})


def test_an_input_past_the_calibrated_range_warns_once_naming_it(module) -> None:
    x = _x(scale=8.0, seed=4)
    low, high = module.stats["calibrated_ranges"]["x"]
    outside = int(((x < low) | (x > high)).sum())
    assert outside > 0
    with pytest.warns(CalibrationRangeWarning, match=rf"input 'x': {outside} of 3072 values lie"):
        clipped = module.run({"x": x})
    again = _no_warning(module, x)  # once per module and input
    np.testing.assert_array_equal(again[next(iter(again))], clipped[next(iter(clipped))])
    # what the warning is for: the clipped run is far from the float model
    graph = from_onnx(small_cnn())
    want = run_graph(graph, {"x": x})[graph.outputs[0]]
    error = np.abs(clipped[graph.outputs[0]] - want).max() / np.abs(want).max()
    assert error > 0.1, error


def test_a_saved_module_keeps_its_ranges_and_warns_too(module, tmp_path) -> None:
    module.save(tmp_path / "m.tfm")
    loaded = tensorforge.load(tmp_path / "m.tfm")
    assert loaded.stats["calibrated_ranges"] == module.stats["calibrated_ranges"]
    with pytest.warns(CalibrationRangeWarning, match="input 'x'"):
        loaded.run({"x": _x(scale=8.0)})


def test_float_modules_have_no_ranges() -> None:
    float_module = tensorforge.compile(small_cnn())
    assert "calibrated_ranges" not in float_module.stats
    _no_warning(float_module, _x(scale=100.0))


@pytest.mark.parametrize(
    "bad",
    [
        {"y": [-1.0, 1.0]},  # not an input
        {"x": [1.0, -1.0]},  # low above high
        {"x": [-1.0, float("inf")]},
        {"x": ["-1", "1"]},
        {"x": [-1.0]},
        [["x", -1.0, 1.0]],  # not a mapping
    ],
)
def test_damaged_ranges_are_refused_as_the_module_loads(module, bad) -> None:
    """A module file whose ranges are not [low, high] of one of its inputs (damaged or made by
    hand) is refused by name when it loads, not with a TypeError at its first run."""
    names = "target inputs outputs tensors kernels calls slots arena_bytes constants checks tail"
    fields = {k: getattr(module, k) for k in names.split()}
    with pytest.raises(ValueError, match="module stats 'calibrated_ranges'"):
        tensorforge.Module(**fields, stats={**module.stats, "calibrated_ranges": bad})


def test_an_int8_graph_compiled_for_the_cpu_warns_too_and_names_infinities() -> None:
    """A `tf.quantize` of the input compiled for the CPU (int8 graphs on the CPU): the same
    range, offset +- 127.5 x scale, and an infinite input (the accelerator refuses those) named
    as such."""
    from tensorforge.compiler.graph import GraphBuilder
    from tensorforge.compiler.graph.compile import compile_graph

    b = GraphBuilder("q")
    x = b.add_input("x", (64,), "float32")
    (y,) = b.add_node("tf.quantize", [x], {"scale": 0.5})
    module = compile_graph(b.build([y]), progress=False)
    assert module.stats["calibrated_ranges"] == {"x": [-63.75, 63.75]}
    values = np.linspace(-63, 63, 64).astype(np.float32)
    _no_warning(module, values)
    values[3] = -np.inf
    with pytest.warns(CalibrationRangeWarning, match=r"1 of 64 values lie outside .*, infinities"):
        got = module.run({"x": values})[y]
    np.testing.assert_array_equal(got, quantize(values, 0.5))  # clipped, as numpy clips
