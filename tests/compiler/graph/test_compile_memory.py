"""compile_graph's memory: a weight whose packed copy is built is freed during the compile, and
the compiled results do not change (oracles: the same compile with the graph kept alive, and
the reference executor)."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import numpy as np
import pytest

from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import OnnxModelBuilder, mlp
from tensorforge.compiler.graph import compile as compile_mod
from tensorforge.compiler.graph.compile import (
    compile_graph,
    drop_constants,
    kernel_garbage_collection,
    last_readers,
)
from tensorforge.compiler.graph.ir import GraphBuilder
from tensorforge.compiler.graph.ops.layout import pack_weight
from tensorforge.compiler.graph.passes import group_order, optimize
from tensorforge.compiler.graph.passes.alter_layout import CPU_BLOCK
from tensorforge.compiler.graph.reference import run_graph
from tensorforge.compiler.topi.x86.dense import pack_panels
from tensorforge.runtime import ndarray as nd

X = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)


def _first_weight(graph) -> str:
    """The weight of the first Gemm (read by the first kernel alone, packed there)."""
    return next(n for n in graph.nodes if n.op == "Gemm").inputs[1]


def test_a_packed_weight_is_freed_before_the_last_kernel_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graphs = [from_onnx(mlp())]
    weight = _first_weight(graphs[0])
    alive = weakref.ref(graphs[0].constants[weight])
    seen: list[bool] = []
    real = compile_mod.build_cpu_group

    def build(graph, group, k, *args):  # noqa: ANN001, ANN202  (records, then builds)
        seen.append(alive() is not None)
        return real(graph, group, k, *args)

    monkeypatch.setattr(compile_mod, "build_cpu_group", build)
    compiled = compile_graph(graphs.pop(), progress=False)
    assert seen[0] and not seen[-1]  # read by the first kernel, gone before the last
    assert weight not in compiled.constants  # the module holds its packed copy instead
    kept = from_onnx(mlp())
    want = compile_graph(kept, progress=False).run({"x": X})
    got = compiled.run({"x": X})
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])  # bit-identical
        np.testing.assert_allclose(got[name], run_graph(kept, {"x": X})[name], rtol=1e-5)


def test_tensorforge_compile_hands_the_graph_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through `tensorforge.compile` too (which imports the model and keeps its tail), the
    first weight is gone before the last kernel is built: no frame on the way holds the
    imported graph (one did, and ResNet-18's compile peaked 42 MiB higher)."""
    import tensorforge
    from tensorforge.compiler import frontend

    alive: list[weakref.ref] = []
    seen: list[bool] = []
    real_import, real_build = frontend.from_onnx_split, compile_mod.build_cpu_group

    def imported(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202  (records, then imports)
        graph, tail = real_import(*args, **kwargs)
        alive.append(weakref.ref(graph.constants[_first_weight(graph)]))
        return graph, tail

    def build(graph, group, k, *args):  # noqa: ANN001, ANN202
        seen.append(alive[0]() is not None)
        return real_build(graph, group, k, *args)

    monkeypatch.setattr(frontend, "from_onnx_split", imported)
    monkeypatch.setattr(compile_mod, "build_cpu_group", build)
    module = tensorforge.compile(mlp())
    assert seen[0] and not seen[-1]
    want = run_graph(from_onnx(mlp()), {"x": X})
    got = module.run({"x": X})
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5)


def test_constants_the_module_keeps_or_later_kernels_read_are_not_dropped() -> None:
    graph = optimize(from_onnx(mlp()))
    order = group_order(graph)
    readers = last_readers(order)
    weight = _first_weight(graph)
    assert weight in readers[0]
    later = [n.inputs[1] for n in graph.nodes if n.op == "Gemm"][1:]
    assert later and not set(later) & set(readers[0])  # read by later kernels only
    # at group 0, only what group 0 was the last to read may go, and not what the module keeps
    after = drop_constants(graph, readers[0], kept={weight: graph.constants[weight]})
    assert weight in after.constants and all(v in after.constants for v in later)
    dropped = drop_constants(graph, readers[0], kept={})
    assert weight not in dropped.constants and all(v in dropped.constants for v in later)
    assert (dropped.groups, dropped.memory_plan) == (graph.groups, graph.memory_plan)
    assert drop_constants(graph, (), kept={}) is graph


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_kernel_garbage_collection_frees_cycles_and_unfreezes() -> None:
    assert gc.get_freeze_count() == 0
    with kernel_garbage_collection() as collect:
        assert gc.get_freeze_count() > 0  # what was alive at entry is left out of each scan
        cycle = _Cycle()
        gone = weakref.ref(cycle)
        del cycle
        collect()
        assert gone() is None
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), kernel_garbage_collection():
        raise RuntimeError("a kernel failed")
    assert gc.get_freeze_count() == 0


def test_kernel_garbage_collection_leaves_a_disabled_collector_alone() -> None:
    gc.disable()
    try:
        with kernel_garbage_collection() as collect:
            assert gc.get_freeze_count() == 0
            cycle = _Cycle()
            kept = weakref.ref(cycle)
            del cycle
            collect()
            assert kept() is not None  # no collection behind the caller's back
    finally:
        gc.enable()
    gc.collect()


@pytest.mark.parametrize(
    ("n", "k", "bn", "layout"), [(32, 5, 16, "NK"), (37, 6, 16, "NK"), (7, 3, 8, "KN")]
)
def test_pack_panels_packs_into_one_aligned_buffer(n: int, k: int, bn: int, layout: str) -> None:
    """The panels are the kernel's constant as they are (nothing else is copied); the oracle is
    numpy's pad-reshape-transpose of the weights."""
    w = np.random.default_rng(n).standard_normal((n, k) if layout == "NK" else (k, n))
    nk = w if layout == "NK" else w.T
    padded = np.zeros((-(-n // bn) * bn, k), w.dtype)
    padded[:n] = nk
    want = padded.reshape(-1, bn, k).transpose(0, 2, 1)
    got = pack_panels(w.astype(np.float32), bn, layout)
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert got.flags.c_contiguous and got.ctypes.data % 64 == 0
    assert nd.aligned(got) is got


def test_a_compile_without_a_progress_bar_never_imports_tqdm_or_openssl(tmp_path) -> None:  # noqa: ANN001
    """tqdm (and the multiprocessing lock a disabled bar still makes) stays out of a process
    that compiles without `progress`, and so does hashlib's OpenSSL (`_hashlib`: only saving or
    loading a module needs it); the outputs are checked against the reference executor. The
    model is a file, as users compile it (building one with onnx's helpers imports hashlib)."""
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "mlp.onnx").write_bytes(mlp().SerializeToString())
    script = (
        "import sys, numpy as np, tensorforge\n"
        "out = tensorforge.compile(sys.argv[3]).run({'x': np.load(sys.argv[1])})\n"
        "np.save(sys.argv[2], out['softmax_12'])\n"
        "print(sorted(m for m in ('tqdm', 'multiprocessing', '_hashlib') if m in sys.modules))\n"
    )
    args = [str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), str(tmp_path / "mlp.onnx")]
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
    want = run_graph(from_onnx(mlp()), {"x": X})["softmax_12"]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-6)


def test_progress_bar_shows_the_kernels_and_leaves_the_results_alone(capsys) -> None:  # noqa: ANN001
    shown = compile_graph(from_onnx(mlp()), progress=True)
    assert "compile" in capsys.readouterr().err  # tqdm writes its bar to stderr
    quiet = compile_graph(from_onnx(mlp()), progress=False)
    assert [k.payload for k in shown.kernels] == [k.payload for k in quiet.kernels]
    np.testing.assert_array_equal(
        shown.run({"x": X})["softmax_12"], quiet.run({"x": X})["softmax_12"]
    )


def test_pack_weight_is_a_view_and_the_graph_constant_the_one_copy() -> None:
    """A blocked weight made a constant (without `view=True`) is one aligned read-only copy
    made straight from the OIHW weights (oracle: numpy's reshape-transpose, copied)."""
    w = np.random.default_rng(3).standard_normal((8, 6, 3, 3)).astype(np.float32)
    view = pack_weight(w, 3, 4)
    assert np.shares_memory(view, w)  # no contiguous copy made first
    want = w.reshape(2, 4, 2, 3, 3, 3).transpose(0, 2, 4, 5, 3, 1).copy()
    b = GraphBuilder("g")
    name = b.add_constant("w_packed", view)
    stored = b.constants[name]
    np.testing.assert_array_equal(stored, want)
    assert not np.shares_memory(stored, w) and not stored.flags.writeable
    assert stored.flags.c_contiguous and nd.aligned(stored) is stored


def test_the_heap_is_trimmed_after_every_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(compile_mod, "heap_trimmer", lambda: lambda: trims.append(1))
    module = compile_graph(from_onnx(mlp()), progress=False)
    assert module.stats["kernels"] == module.stats["calls"]  # (each group its own kernel)
    assert len(trims) == module.stats["calls"]
    gc.disable()
    try:
        with kernel_garbage_collection() as collect:
            collect()  # no collection behind the caller's back, but the heap is trimmed
    finally:
        gc.enable()
    assert len(trims) == module.stats["calls"] + 1
    got = module.run({"x": X})["softmax_12"]
    np.testing.assert_allclose(got, run_graph(from_onnx(mlp()), {"x": X})["softmax_12"], rtol=1e-5)


def _conv_chain() -> object:
    """Two 3x3 convolutions with ReLU (no batch norm: the imported weights are the ones that
    alter_layout blocks), global pooling and a dense layer."""
    b = OnnxModelBuilder("conv_chain")
    x = b.op("Relu", [b.conv(b.input("x", (1, 3, 16, 16)), 3, 16, 3)])
    x = b.op("Relu", [b.conv(x, 16, 32, 3, stride=2)])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.model([b.dense(x, 32, 10)])


def test_blocked_weights_are_views_until_optimize_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """alter_layout's blocked weights share the imported OIHW weights' memory (the weights are
    held once while the graph is optimized); compile_graph copies them one by one into aligned
    memory before any kernel is built, and the module keeps those copies. Oracles:
    `pack_weight`'s element order (numpy) and the reference executor on the imported graph."""
    imported = from_onnx(_conv_chain())
    oihw = {n.name: imported.constants[n.inputs[1]] for n in imported.nodes if n.op == "Conv"}
    graph = optimize(imported, CPU_BLOCK, chains_only=True)
    packed = {n.inputs[1]: n for n in graph.nodes if n.op == "ConvNCHWc"}
    assert len(packed) == len(oihw) == 2
    for name, node in packed.items():
        view = graph.constants[name]
        assert np.shares_memory(view, oihw[node.name]) and not view.flags.writeable
        block_in, block_out = view.shape[4], view.shape[5]
        np.testing.assert_array_equal(view, pack_weight(oihw[node.name], block_in, block_out))
    assert compile_mod.view_constants(graph) == list(packed)
    copied: list[str] = []
    real_copy = compile_mod.materialize_view

    def materialize(graph, name):  # noqa: ANN001, ANN202  (records, then copies)
        assert compile_mod.view_constants(graph)[0] == name  # the others are still views
        copied.append(name)
        return real_copy(graph, name)

    views_at_build: list[list[str]] = []
    real_build = compile_mod.build_cpu_group

    def build(graph, *args):  # noqa: ANN001, ANN202  (records, then builds)
        views_at_build.append(compile_mod.view_constants(graph))
        return real_build(graph, *args)

    monkeypatch.setattr(compile_mod, "materialize_view", materialize)
    monkeypatch.setattr(compile_mod, "build_cpu_group", build)
    module = compile_graph(graph, progress=False)
    assert copied == list(packed) and not any(views_at_build)
    for name, node in packed.items():
        kept = module.constants[name]
        assert kept.flags.c_contiguous and nd.aligned(kept) is kept and not kept.flags.writeable
        assert not np.shares_memory(kept, oihw[node.name])
        np.testing.assert_array_equal(kept, graph.constants[name])
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = run_graph(imported, {"x": x})
    got = module.run({"x": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5)


def test_a_view_constant_must_be_a_read_only_view() -> None:
    b = GraphBuilder("g")
    w = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="constant 'w' must be a read-only view"):
        b.add_constant("w", w, view=True)  # a new array: no view
    with pytest.raises(ValueError, match="constant 't' must be a read-only view"):
        b.add_constant("t", w.T, view=True)  # a view of a writable array
    w.setflags(write=False)
    b.add_constant("t", w.T, view=True)
    assert np.shares_memory(b.constants["t"], w)


def test_small_spent_constants_wait_and_weights_go_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """drop_spent: scalars wait (a drop copies the graph's mappings), until a weight of
    DROP_BYTES or more is spent too, or DROP_BATCH of them wait; what the module keeps stays."""
    b = GraphBuilder("g")
    x = b.add_input("x", (4,), "float32")
    small = [b.add_constant(f"s{i}", np.full(4, i, np.float32)) for i in range(3)]
    big = b.add_constant("w", np.ones(compile_mod.DROP_BYTES // 4, np.float32))
    b.add_node("Add", [x, small[0]], name="a", outputs=["y"])
    graph = b.build(["y"])
    pending: set[str] = set()
    after = compile_mod.drop_spent(graph, pending, small[:2], kept={})
    assert after is graph and pending == {"s0", "s1"}
    after = compile_mod.drop_spent(graph, pending, [small[2], big], kept={"s2": None})
    assert not pending and set(after.constants) == {"s2"}
    monkeypatch.setattr(compile_mod, "DROP_BATCH", 2)
    after = compile_mod.drop_spent(graph, pending, small[:2], kept={})
    assert not pending and set(after.constants) == {"s2", "w"}


def test_each_oihw_weight_is_freed_as_its_blocked_copy_is_made(monkeypatch) -> None:  # noqa: ANN001
    """The passes leave reference cycles that hold the graph they were given (fuse_ops'
    recursive closures over its partitioner); compile_graph collects them before copying the
    blocked weights, so each OIHW weight is freed as its copy is made, whenever the automatic
    collector would have come by (off here: without the collection, every weight lived on
    beside its copy, ResNet-50's compile peak 294 MiB against 251). Oracle: weak references
    to the imported weights, and the reference executor."""
    imported = from_onnx(_conv_chain())
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = run_graph(imported, {"x": x})

    def memory(array: np.ndarray) -> np.ndarray:  # the array that owns a weight's memory
        while isinstance(array.base, np.ndarray):
            array = array.base
        return array

    weights = [weakref.ref(memory(imported.constants[n.inputs[1]])) for n in imported.nodes
               if n.op == "Conv"]  # fmt: skip
    alive_at_copy: list[int] = []
    real_copy = compile_mod.materialize_view

    def materialize(graph, name):  # noqa: ANN001, ANN202  (records, then copies)
        alive_at_copy.append(sum(w() is not None for w in weights))
        return real_copy(graph, name)

    monkeypatch.setattr(compile_mod, "materialize_view", materialize)
    handed = [imported]
    del imported
    gc.disable()
    try:
        module = compile_graph(handed.pop(), progress=False)
    finally:
        gc.enable()
    assert alive_at_copy == [2, 1]  # the first copy made, the first OIHW weight is gone
    got = module.run({"x": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5)
