"""The accelerator partition's layout transformation (``accel_kernels.packed_tensors``): tensors
that flow only between accelerator kernels stay in the blocked layout, the rest stay NCHW. The
oracle for every module is the int8 graph's reference executor (``run_graph``), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.accel_kernels import packed_tensors
from tensorforge.compiler.graph.compile_vta import compile_graph_vta, quantize_for, storage_graph
from tensorforge.compiler.graph.passes import fuse_ops, optimize, plan_memory
from tensorforge.compiler.graph.passes.fuse_accel import fuse_accelerator_ops
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.vta.layout import blocked_shape
from tensorforge.runtime.module import Module

TINY = HWConfig.preset("tiny")  # 1x4x4: the 6 channels below pad to 8
WIDE = TINY.replace(name="wide", log_block_out=3)  # BLOCK_IN 4, BLOCK_OUT 8


def _weight(b: GraphBuilder, name: str, channels: int, rng: np.random.Generator) -> str:
    shape = (channels, channels, 3, 3)
    return b.add_constant(name, rng.standard_normal(shape).astype(np.float32) * 0.2)


def _conv(b: GraphBuilder, x: str, w: str, out: str) -> str:
    (y,) = b.add_node("Conv", [x, w], {"pads": (1, 1, 1, 1)})
    return b.add_node("Relu", [y], outputs=[out])[0]


def _chain():
    """conv -> a -> 3x3/1 pool (a lone pool kernel) -> p -> conv -> c -> conv (+ c) -> d."""
    rng = np.random.default_rng(1)
    b = GraphBuilder("chain")
    x = b.add_input("x", (1, 6, 7, 7), "float32")
    w = [_weight(b, f"w{i}", 6, rng) for i in range(3)]
    a = _conv(b, x, w[0], "a")
    (p,) = b.add_node("MaxPool", [a], {"kernel_shape": (3, 3), "strides": (1, 1)}, outputs=["p"])
    c = _conv(b, p, w[1], "c")
    (d,) = b.add_node("Conv", [c, w[2]], {"pads": (1, 1, 1, 1)})
    (d,) = b.add_node("Add", [d, c])
    (d,) = b.add_node("Relu", [d], outputs=["d"])
    return b.build([d]), {"x": rng.standard_normal((1, 6, 7, 7)).astype(np.float32)}


def _fan_out(channels: int):
    """a = conv(x) feeds a conv on the accelerator and a padded max pooling on the CPU; the
    pooling's result comes back as the conv's residual operand."""
    rng = np.random.default_rng(2)
    b = GraphBuilder("fan_out")
    x = b.add_input("x", (1, channels, 5, 5), "float32")
    w = [_weight(b, f"w{i}", channels, rng) for i in range(2)]
    a = _conv(b, x, w[0], "a")
    z = b.add_node("MaxPool", [a], {"kernel_shape": (3, 3), "strides": (1, 1),
                                    "pads": (1, 1, 1, 1)}, outputs=["z"])[0]  # fmt: skip
    c = _conv(b, a, w[1], "c")
    (y,) = b.add_node("Add", [c, z])
    return b.build([y]), {"x": rng.standard_normal((1, channels, 5, 5)).astype(np.float32)}


def _compile(graph, inputs, cfg: HWConfig):
    q = quantize_for(optimize(graph), cfg, inputs, "shift")
    return q, inputs, compile_graph_vta(q, "vta -vthreads=2", progress=False, config=cfg)


def _bindings(module: Module) -> dict[str, list[bool]]:
    """value -> the packed flag of every vta kernel operand bound to it."""
    kernels = {k.name: k for k in module.kernels}
    found: dict[str, list[bool]] = {}
    for call in (c for c in module.calls if kernels[c.kernel].kind == "vta"):
        operands = kernels[call.kernel].meta["operands"]
        for value, operand in zip(call.args, operands, strict=True):
            found.setdefault(value, []).append(bool(operand.get("packed", False)))
    return found


def _check_bit_exact(module: Module, q, inputs) -> None:
    got = module.run(inputs)[module.outputs[0]]
    want = run_graph(q, inputs)[q.outputs[0]]
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} outputs differ"


def test_packed_tensors_are_the_hand_offs_between_accelerator_kernels():
    graph, inputs = _chain()
    q = fuse_accelerator_ops(fuse_ops(quantize_for(optimize(graph), TINY, inputs, "shift")))
    assert packed_tensors(q, TINY) == {  # d_q is read by the CPU (dequantize): NCHW
        "a_q": (1, 2, 7, 7, 1, 4),
        "p_q": (1, 2, 5, 5, 1, 4),
        "c_q": (1, 2, 5, 5, 1, 4),  # a conv's input and the next conv's residual operand
    }


def test_blocked_hand_offs_are_planned_bound_packed_and_bit_exact():
    q, inputs, module = _compile(*_chain(), TINY)
    assert module.stats["packed_tensors"] == ["a_q", "p_q", "c_q"]
    for value in ("a_q", "p_q", "c_q"):
        nchw = q.types[value].shape
        assert module.tensors[value].shape == blocked_shape(TINY, nchw, TINY.block_out)
        assert module.tensors[value].nbytes > q.types[value].nbytes  # 6 channels pad to 8
    bindings = _bindings(module)
    assert bindings["a_q"] == [True, True] and bindings["c_q"] == [True, True, True]
    assert bindings["x_q"] == [False] and bindings["d_q"] == [False]  # CPU boundaries
    _check_bit_exact(module, q, inputs)
    again = Module.from_bytes(module.to_bytes())  # packed operands survive save/load
    assert _bindings(again) == bindings
    _check_bit_exact(again, q, inputs)


def test_the_memory_plan_sizes_packed_tensors_for_the_blocked_shape():
    graph, inputs = _chain()
    q = fuse_accelerator_ops(fuse_ops(quantize_for(optimize(graph), TINY, inputs, "shift")))
    stored = plan_memory(storage_graph(q, packed_tensors(q, TINY)))
    assert stored.memory_plan is not None and not stored.memory_plan.problems(stored)
    slot = stored.memory_plan.slot("c_q")
    assert slot.nbytes >= int(np.prod(blocked_shape(TINY, (1, 6, 5, 5), 4))) == 200
    assert stored.types["d_q"] == q.types["d_q"]  # NCHW tensors keep their type


def test_a_conv_input_stays_nchw_when_block_in_differs_from_block_out():
    q, inputs, module = _compile(*_chain(), WIDE)
    # Only the pooling reads its input with BLOCK_OUT, the producer's blocks; every conv input
    # would need BLOCK_IN channel blocks, so p_q and c_q cross in NCHW.
    assert module.stats["packed_tensors"] == ["a_q"]
    assert module.tensors["a_q"].shape == (1, 1, 7, 7, 1, 8)
    assert module.tensors["c_q"].shape == q.types["c_q"].shape
    assert _bindings(module)["c_q"] == [False, False, False]
    _check_bit_exact(module, q, inputs)


@pytest.mark.parametrize(
    ("cfg", "channels"), [(TINY, 6), (HWConfig.preset("pynq"), 16)], ids=["tiny", "pynq"]
)
def test_a_tensor_read_by_an_accelerator_and_a_cpu_kernel_stays_nchw(cfg, channels):
    q, inputs, module = _compile(*_fan_out(channels), cfg)
    kinds = {c.label: k.kind for c in module.calls for k in module.kernels if k.name == c.kernel}
    assert kinds["tf.qconv2d (conv)"] == kinds["tf.qconv2d+tf.qadd (conv_1)"] == "vta"
    assert kinds["tf.qmaxpool (maxpool)"] == "llvm"  # padded: no accelerator kernel
    assert module.stats["packed_tensors"] == []
    assert module.tensors["a_q"].shape == q.types["a_q"].shape == (1, channels, 5, 5)
    assert _bindings(module)["a_q"] == [False, False]  # conv's output, conv_1's input
    assert _bindings(module)["z_q"] == [False]  # a CPU result as the residual operand
    _check_bit_exact(module, q, inputs)


def test_packed_tensors_needs_a_fused_graph():
    graph, inputs = _chain()
    q = quantize_for(optimize(graph), TINY, inputs, "shift").replace(groups=None)
    with pytest.raises(ValueError, match="packed_tensors needs a fused graph .*'chain'"):
        packed_tensors(q, TINY)
