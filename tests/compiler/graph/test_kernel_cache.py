"""Fused groups that lower to the same code share one kernel (`compile.KernelCache`): each is
a call of it with its own arguments. Oracles: the graph's reference executor and the kernel
count a group-by-group build gives."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph import compile as compile_mod
from tensorforge.compiler.graph.compile import compile_graph
from tensorforge.runtime.module import Module


def _blocks(scales: tuple[float, ...], widths: tuple[int, ...]) -> tuple:
    """Conv -> Relu -> Mul by a constant scalar, one block per scale (and width): the convs'
    weights differ block to block; a block of the same width and scale lowers to the same code."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("blocks")
    y = b.add_input("x", (1, widths[0], 9, 9), "float32")
    c = widths[0]
    for i, (scale, width) in enumerate(zip(scales, widths, strict=True)):
        w = (rng.standard_normal((width, c, 3, 3)) / (3 * np.sqrt(c))).astype(np.float32)
        (y,) = b.add_node("Conv", [y, b.add_constant(f"w{i}", w)], {"pads": [1] * 4})
        (y,) = b.add_node("Relu", [y])
        (y,) = b.add_node("Mul", [y, b.add_constant(f"s{i}", np.float32(scale))])
        c = width
    graph = b.build([y])
    return graph, {"x": rng.standard_normal((1, widths[0], 9, 9)).astype(np.float32)}


_CACHED = compile_mod.KernelCache


def _compile_uncached(graph, monkeypatch: pytest.MonkeyPatch) -> Module:  # noqa: ANN001
    class Uncached(_CACHED):
        def build_lowered(self, func, target, meta):  # noqa: ANN001, ANN202
            return _CACHED().build_lowered(func, target, meta)

    with monkeypatch.context() as m:
        m.setattr(compile_mod, "KernelCache", Uncached)
        return compile_graph(graph, progress=False)


def test_repeated_blocks_share_kernels_and_compute_the_same(monkeypatch) -> None:  # noqa: ANN001
    graph, feed = _blocks((0.5, 0.5, 0.5, 0.5), (16, 16, 16, 16))
    module = compile_graph(graph, progress=False)
    plain = _compile_uncached(graph, monkeypatch)
    assert len(plain.kernels) == len(plain.calls) == len(module.calls)
    assert module.stats["calls"] == len(module.calls)
    assert module.stats["kernels"] == len(module.kernels) < len(module.calls)
    assert {c.kernel for c in module.calls} == {k.name for k in module.kernels}
    want = run_graph(graph, feed)[graph.outputs[0]]
    for m in (module, plain):
        np.testing.assert_allclose(m.run(feed)[graph.outputs[0]], want, rtol=1e-5, atol=1e-6)
    # each call keeps its own label: the profile has a row per call
    assert len(module.profile(feed, repeat=1).rows) == len(module.calls)


def test_what_the_code_holds_keeps_kernels_apart() -> None:
    """A scalar folded into the code (the Mul's scale) or another width is another kernel."""
    graph, feed = _blocks((0.5, 0.25, 0.5, 0.5), (16, 16, 16, 8))
    module = compile_graph(graph, progress=False)
    want = run_graph(graph, feed)[graph.outputs[0]]
    np.testing.assert_allclose(module.run(feed)[graph.outputs[0]], want, rtol=1e-5, atol=1e-6)
    convs = [c for c in module.calls if "Conv" in c.label]  # the four blocks, in order
    assert len(convs) == 4, [c.label for c in module.calls]
    kernels = [c.kernel for c in convs]
    assert kernels[0] == kernels[2]  # 16 -> 16 channels, times 0.5: the same code
    assert len(set(kernels)) == 3  # times 0.25; 16 -> 8 channels: kernels of their own


def test_a_module_with_shared_kernels_saves_and_loads(tmp_path) -> None:  # noqa: ANN001
    graph, feed = _blocks((0.5,) * 5, (16,) * 5)
    module = compile_graph(graph, progress=False)
    assert len(module.kernels) < len(module.calls)
    module.save(tmp_path / "m.tfm")
    again = Module.load(tmp_path / "m.tfm")
    assert [c.kernel for c in again.calls] == [c.kernel for c in module.calls]
    np.testing.assert_array_equal(again.run(feed)[graph.outputs[0]],
                                  module.run(feed)[graph.outputs[0]])  # fmt: skip


def _lstm(seq: int):  # noqa: ANN202
    """A bidirectional LSTM over `seq` steps (input 8, hidden 16, batch 2)."""
    from onnx import TensorProto, helper

    from tensorforge.compiler.frontend import from_onnx

    rng = np.random.default_rng(seq)
    weights = {
        "W": rng.standard_normal((2, 64, 8)),
        "R": rng.standard_normal((2, 64, 16)),
        "B": rng.standard_normal((2, 128)),
    }
    inits = [helper.make_tensor(k, TensorProto.FLOAT, v.shape, (v / 4).ravel().tolist())
             for k, v in weights.items()]  # fmt: skip
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "yh", "yc"], hidden_size=16,
                            direction="bidirectional")  # fmt: skip
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 2, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "yh", "yc")],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return from_onnx(model), {"x": rng.standard_normal((seq, 2, 8)).astype(np.float32)}


def test_an_lstm_compiles_to_as_many_kernels_whatever_its_length() -> None:
    """Each step reads its own slice of the input projection (one Split), so the steps'
    kernels are the same code: the kernels do not grow with the sequence (they did, one
    slicing kernel per step)."""
    counts = []
    for seq in (4, 9):
        graph, feed = _lstm(seq)
        module = compile_graph(graph, progress=False)
        want = run_graph(graph, feed)
        for name in graph.outputs:
            np.testing.assert_allclose(module.run(feed)[name], want[name], rtol=1e-5,
                                       atol=1e-6)  # fmt: skip
        counts.append(len(module.kernels))
        assert len(module.calls) > 4 * seq  # a few calls a step and direction
    assert counts[0] == counts[1], counts


def test_gpu_groups_of_the_same_code_share_a_kernel_on_opencl() -> None:
    """The same sharing for GPU targets: one OpenCL program built for the repeated blocks."""
    from tensorforge.compiler.graph.compile_gpu import compile_graph_gpu

    graph, feed = _blocks((0.5,) * 4, (16,) * 4)
    try:
        module = compile_graph_gpu(graph, "opencl")
        got = module.run(feed)[graph.outputs[0]]
    except Exception as exc:  # noqa: BLE001 - no OpenCL platform on this machine
        if "OpenCL" not in str(exc):
            raise
        pytest.skip(f"no OpenCL device: {exc}")
    assert len(module.kernels) < len(module.calls) == module.stats["calls"]
    want = run_graph(graph, feed)[graph.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_repeats_skip_the_pass_pipeline(monkeypatch) -> None:  # noqa: ANN001
    """Outside the suite's check mode, a group whose loop IR has an earlier group's fingerprint
    (`tir.fingerprint`) takes that kernel before the pass pipeline: the pipeline runs once per
    kernel, not once per call, and the module computes the same."""
    graph, feed = _blocks((0.5,) * 4, (16,) * 4)
    runs = []
    real = compile_mod.run_pipeline
    monkeypatch.setattr(compile_mod, "run_pipeline", lambda f, p: runs.append(f.name) or real(f, p))
    monkeypatch.setenv(compile_mod.CHECK_CACHE_ENV, "0")
    module = compile_graph(graph, progress=False)
    assert len(runs) == len(module.kernels) < len(module.calls)
    want = run_graph(graph, feed)[graph.outputs[0]]
    np.testing.assert_allclose(module.run(feed)[graph.outputs[0]], want, rtol=1e-5, atol=1e-6)


def test_the_check_mode_catches_a_fingerprint_that_misses_a_difference(monkeypatch) -> None:  # noqa: ANN001
    """With TENSORFORGE_CHECK_KERNEL_CACHE=1 (the suite's setting) a repeat is built anyway and
    must come to the earlier kernel's code: a fingerprint blind to the Mul's scale (0.5 against
    0.25, folded into the code) is caught, not shared."""
    monkeypatch.setattr(compile_mod, "fingerprint", lambda func: (0, 0, 0))
    monkeypatch.setenv(compile_mod.CHECK_CACHE_ENV, "1")
    graph, _ = _blocks((0.5, 0.25), (16, 16))
    with pytest.raises(compile_mod.KernelCacheError, match="has the fingerprint of"):
        compile_graph(graph, progress=False)
