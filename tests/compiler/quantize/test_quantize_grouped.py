"""Grouped and depthwise convolutions quantized to int8 and placed on the accelerator: the int8
graph against the float one, the int8 graph's CPU code and the accelerator (sim, cyclesim)
against the int8 graph's reference executor bit for bit, and the partition's MAC share."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.compile import compile_graph
from tensorforge.compiler.graph.compile_vta import compile_graph_vta, quantize_for
from tensorforge.compiler.graph.passes import optimize, partition_graph, partition_report
from tensorforge.compiler.quantize.graph import quantize_graph
from tensorforge.hw.config import HWConfig

PYNQ = HWConfig.preset("pynq")


def _block_graph(groups: int, c: int = 32, stride: int = 1):
    """conv 16 -> c, grouped 3x3 conv (with bias and ReLU), 1x1 conv back to 16: a MobileNet
    inverted-residual block with `groups` groups in the middle."""
    rng = np.random.default_rng(groups)
    b = GraphBuilder(f"g{groups}")
    x = b.add_input("x", (2, 16, 8, 8), "float32")
    w = b.add_constant("w", rng.standard_normal((c, 16, 1, 1)).astype(np.float32) / 4)
    (y,) = b.add_node("Conv", [x, w], name="expand")
    (y,) = b.add_node("Relu", [y])
    gw = rng.standard_normal((c, c // groups, 3, 3)).astype(np.float32) / 3
    gb = rng.standard_normal(c).astype(np.float32) / 4
    attrs = {"pads": (1, 1, 1, 1), "group": groups, "strides": (stride, stride)}
    (y,) = b.add_node("Conv", [y, b.add_constant("gw", gw), b.add_constant("gb", gb)], attrs,
                      name="grouped")  # fmt: skip
    (y,) = b.add_node("Relu", [y])
    pw = b.add_constant("pw", rng.standard_normal((16, c, 1, 1)).astype(np.float32) / 6)
    (y,) = b.add_node("Conv", [y, pw], name="project")
    return b.build([y])


def _x(seed: int, n: int = 2) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((n, 16, 8, 8)).astype(np.float32)}


def _op(graph, name: str):  # type: ignore[no-untyped-def]
    return next(n for n in graph.nodes if n.name == name)


@pytest.mark.parametrize("groups", [32, 4, 2])
def test_grouped_conv_quantizes_close_to_float_and_compiles_bit_exact_for_the_cpu(
    groups: int,
) -> None:
    graph = optimize(_block_graph(groups))
    q = quantize_graph(graph, _x(1, 8), PYNQ, grouped=True)
    node = _op(q, "grouped")
    assert (node.op, node.attr_dict["group"]) == ("tf.qconv2d", groups)
    x = _x(2)
    want, got = run_graph(graph, x)[graph.outputs[0]], run_graph(q, x)[graph.outputs[0]]
    # as close as the ungrouped layers get: 2-3% mean error (2.6% with groups=1)
    assert np.abs(got - want).mean() <= 0.04 * np.abs(want).mean()
    cpu = compile_graph(q, progress=False).run(x)[graph.outputs[0]]  # the int8 ops as LLVM code
    assert np.array_equal(cpu, got)


def test_grouped_convs_stay_float_unless_asked() -> None:
    q = quantize_graph(optimize(_block_graph(32)), _x(1), PYNQ)
    assert _op(q, "grouped").op == "Conv"
    only_wide = quantize_graph(
        optimize(_block_graph(32)), _x(1), PYNQ, grouped=lambda c, o, g: g < c
    )
    assert _op(only_wide, "grouped").op == "Conv"


@pytest.mark.parametrize("groups,stride", [(32, 1), (32, 2), (4, 1), (2, 1)])
def test_grouped_conv_on_the_accelerator_equals_the_int8_graph(groups: int, stride: int) -> None:
    graph = _block_graph(groups, stride=stride)
    target = "vta -config=pynq -depthwise=accel"
    module = compile_graph_vta(graph, target, _x(1, 8), progress=False)
    placement = {row[0]: row[2] for row in module.stats["placement"]}
    assert placement["grouped"] == "vta"
    assert module.stats["offloaded_macs"] == 1.0
    assert module.stats["depthwise"] == "accel"
    q = quantize_for(graph, PYNQ, _x(1, 8), "mul", "per-channel", "accel")
    assert _op(q, "grouped").attr_dict["channel_multipliers"]  # per-channel, the default
    x = _x(3)
    want = run_graph(q, x)[graph.outputs[0]]
    assert np.array_equal(module.run(x)[graph.outputs[0]], want)
    if groups == 32 and stride == 1:
        module.use_device("cyclesim")
        assert np.array_equal(module.run(x)[graph.outputs[0]], want)
        label = next(k for k in module.device_results() if "(grouped)" in k)
        assert module.device_results()[label].cycles > 0


@pytest.mark.parametrize("groups,where", [(32, "cpu"), (4, "vta"), (2, "vta")])
def test_by_default_depthwise_convs_stay_float_and_wider_groups_go_to_the_accelerator(
    groups: int, where: str
) -> None:
    module = compile_graph_vta(_block_graph(groups), "vta", _x(1, 8), progress=False)
    placement = {row[0]: (row[1], row[2]) for row in module.stats["placement"]}
    assert placement["grouped"] == (("Conv", "cpu") if where == "cpu" else ("tf.qconv2d", "vta"))
    assert module.stats["depthwise"] == "cpu"


def test_depthwise_cpu_option_leaves_depthwise_convs_float_on_the_cpu() -> None:
    graph = _block_graph(32)
    module = compile_graph_vta(graph, "vta -depthwise=cpu", _x(1, 8), progress=False)
    placement = {row[0]: (row[1], row[2]) for row in module.stats["placement"]}
    assert placement["grouped"] == ("Conv", "cpu")
    expand, grouped, project = 2 * 64 * 32 * 16, 2 * 64 * 32 * 9, 2 * 64 * 16 * 32
    share = (expand + project) / (expand + grouped + project)
    assert module.stats["offloaded_macs"] == round(share, 4)
    with pytest.raises(ValueError, match="-depthwise must be one of accel, cpu, not 'gpu'"):
        compile_graph_vta(graph, "vta -depthwise=gpu", _x(1, 8), progress=False)


def test_partition_reports_block_diagonal_depthwise_and_refuses_misfit_groups() -> None:
    dw = quantize_graph(optimize(_block_graph(32)), _x(1), PYNQ, grouped=True)
    report = partition_report(dw, PYNQ)
    assert "depthwise: block-diagonal 16x16 weight tiles" in report
    assert "(6.2% of the GEMM's MACs are the conv's)" in report
    assert "offloaded: 3 of 3 conv/dense layers, 100.0% of their MACs" in report
    assert _op(partition_graph(dw, PYNQ, grouped=False), "grouped").attr_dict["target"] == "cpu"
    misfit = quantize_graph(optimize(_block_graph(8, c=48)), _x(1), PYNQ, grouped=True)
    assert _op(partition_graph(misfit, PYNQ), "grouped").attr_dict["target"] == "cpu"
    assert "groups of 6 input -> 6 output channels must fit the channel blocks" in partition_report(
        misfit, PYNQ
    )


def test_grouped_convs_that_fit_no_block_mapping_stay_float_when_compiled() -> None:
    """24-channel groups on pynq's 16-channel blocks: the vta target quantizes only the
    grouped convs the accelerator takes, so this one stays a float Conv on the CPU."""
    graph = _block_graph(2, c=48)
    module = compile_graph_vta(graph, "vta -config=pynq", _x(1, 8), progress=False)
    placement = {row[0]: (row[1], row[2]) for row in module.stats["placement"]}
    assert placement["grouped"] == ("Conv", "cpu")
    assert placement["expand"][1] == placement["project"][1] == "vta"


def test_grouped_conv_whose_last_output_block_holds_too_few_groups_stays_on_the_cpu() -> None:
    """3 groups of 4 -> 1 channels on tiny's 4-channel blocks: a block holds 4 groups, so its
    input span (4 blocks) passes the 3 the input has. Partition placed it on the accelerator
    and the weight packing raised IndexError; it stays a float Conv, equal to the float graph."""
    rng = np.random.default_rng(7)
    b = GraphBuilder("short_groups")
    x = b.add_input("x", (1, 12, 5, 5), "float32")
    w = b.add_constant("w", rng.standard_normal((3, 4, 3, 3)).astype(np.float32) / 4)
    (y,) = b.add_node("Conv", [x, w], {"pads": (1, 1, 1, 1), "group": 3}, name="grouped")
    graph = b.build([b.add_node("Relu", [y])[0]])
    feed = {"x": rng.standard_normal((8, 12, 5, 5)).astype(np.float32)}
    with pytest.warns(UserWarning, match="nothing in this model runs on the accelerator"):
        module = compile_graph_vta(graph, "vta -config=tiny", feed, progress=False)
    placement = {row[0]: (row[1], row[2]) for row in module.stats["placement"]}
    assert placement["grouped"] == ("Conv", "cpu")
    one = {"x": feed["x"][:1]}
    (want,) = run_graph(optimize(graph), one).values()
    np.testing.assert_allclose(module.run(one)[module.outputs[0]], want, rtol=1e-5, atol=1e-5)


def test_qconv2d_with_groups_that_do_not_divide_is_refused_with_the_shapes() -> None:
    from tensorforge.compiler.graph.ops.qnn import requant_attrs
    from tensorforge.compiler.quantize.requant import requant_params

    b = GraphBuilder("bad")
    x = b.add_input("x", (1, 8, 4, 4), "int8")
    w = b.add_constant("w", np.zeros((8, 2, 3, 3), np.int8))
    attrs = {**requant_attrs(requant_params(2.0**-7, PYNQ)), "in_scale": 1.0, "weight_scale": 1.0,
             "out_scale": 1.0}  # fmt: skip
    b.add_node("tf.qconv2d", [x, w], {**attrs, "group": 4}, name="ok")
    with pytest.raises(ValueError, match=r"must agree on C \(C = group 2 x the weight I\)"):
        b.add_node("tf.qconv2d", [x, w], {**attrs, "group": 2}, name="bad")
    w6 = b.add_constant("w6", np.zeros((6, 2, 3, 3), np.int8))
    with pytest.raises(
        ValueError, match="group must be an int >= 1 dividing the weight's O, not 4"
    ):
        b.add_node("tf.qconv2d", [x, w6], {**attrs, "group": 4}, name="bad2")


def test_grouped_conv_with_unequal_strides_compiles_bit_exact_for_the_cpu() -> None:
    """Unequal strides take the CPU's direct reduction, each output channel over its group."""
    rng = np.random.default_rng(7)
    b = GraphBuilder("strided")
    x = b.add_input("x", (2, 16, 8, 8), "float32")
    w = b.add_constant("w", rng.standard_normal((16, 4, 3, 3)).astype(np.float32) / 3)
    attrs = {"pads": (1, 1, 1, 1), "group": 4, "strides": (1, 2)}
    (y,) = b.add_node("Conv", [x, w], attrs, name="grouped")
    q = quantize_graph(b.build([y]), _x(1, 8), PYNQ, grouped=True)
    assert _op(q, "grouped").op == "tf.qconv2d"
    x = _x(2)
    want = run_graph(q, x)[y]
    assert want.shape == (2, 16, 8, 4) and np.unique(want).size > 10
    assert np.array_equal(compile_graph(q, progress=False).run(x)[y], want)
