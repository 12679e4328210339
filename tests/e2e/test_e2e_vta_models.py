"""Whole models compiled for the accelerator (`tensorforge.compile(..., target="vta ...")`):
int8 conv/dense layers (with fused residual adds and max pooling) as program images on the
behavioural and cycle-accurate simulators, everything else as native CPU code. The oracle is the
int8 graph's numpy reference executor (`run_graph`, compiler.quantize's integer semantics): the
module's outputs must equal it bit for bit, so every rung in between (LLVM kernels for the CPU
share, program images on the functional simulator) is checked at once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import tensorforge
from tensorforge.cli import main
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import resnet18
from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.compile_vta import compile_graph_vta, quantize_for
from tensorforge.compiler.graph.passes import optimize
from tensorforge.digits import load_digits_assets
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.module import Module

PYNQ, TINY = HWConfig.preset("pynq"), HWConfig.preset("tiny")


def _digits(images: int):
    model, split = load_digits_assets()
    graph = optimize(from_onnx(str(model), input_shapes={"input": (images, 1, 8, 8)}))
    inputs = {"input": split["images"][:images]}
    return graph, inputs, {"input": split["calib_images"]}, split["labels"][:images]


def _kinds(module: Module) -> list[str]:
    by_name = {k.name: k.kind for k in module.kernels}
    return [by_name[c.kernel] for c in module.calls]


def _vta_labels(module: Module) -> list[str]:
    """The labels of the module's accelerator calls, in call order."""
    return [c.label for c, kind in zip(module.calls, _kinds(module), strict=True) if kind == "vta"]


def _check_bit_exact(module: Module, q, inputs) -> np.ndarray:
    got = module.run(inputs)[module.outputs[0]]
    want = run_graph(q, inputs)[q.outputs[0]]
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} outputs differ"
    return got


@pytest.mark.parametrize(
    ("cfg", "images", "vthreads", "mode"),
    [(PYNQ, 450, 1, "shift"), (TINY, 16, 2, "shift"), (PYNQ, 64, 2, "mul")],
    ids=["pynq-450-1vt-shift", "tiny-16-2vt-shift", "pynq-64-2vt-mul"],
)
def test_digits_on_the_accelerator_equals_the_int8_graph(cfg, images, vthreads, mode):
    graph, inputs, calib, labels = _digits(images)
    q = quantize_for(graph, cfg, calib, mode)
    target = f"vta -vthreads={vthreads} -mode={mode}"
    module = compile_graph_vta(q, target, progress=False, config=cfg)
    labels_of = {c.label: kind for c, kind in zip(module.calls, _kinds(module), strict=True)}
    assert [label for label, kind in labels_of.items() if kind == "vta"] == [
        "tf.qconv2d+tf.qmaxpool (conv2)", "tf.qconv2d (conv3)", "tf.qdense (dense)",
    ]  # fmt: skip
    logits = _check_bit_exact(module, q, inputs)
    if mode == "mul":  # per-channel multipliers (mode mul's default) really reach the ALU
        assert all(n.attr_dict["channel_multipliers"] for n in q.nodes if n.op == "tf.qconv2d")
    if images == 450:
        float_acc = np.mean(run_graph(graph, inputs)[graph.outputs[0]].argmax(1) == labels)
        assert np.mean(logits.argmax(1) == labels) >= float_acc - 0.02


@pytest.mark.parametrize("mode", ["shift", "mul"])  # mul: the default on pynq
def test_resnet18_on_the_accelerator_equals_the_int8_graph(mode):
    rng = np.random.default_rng(0)
    calib = [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(4)]
    q = quantize_for(optimize(from_onnx(resnet18(32))), PYNQ, calib, mode)
    module = tensorforge.compile(q, target="vta -config=pynq")
    vta = _vta_labels(module)
    # every conv but the 3-channel stem and the classifier; each block's add fused into a conv
    assert len(vta) == 20 and sum("+tf.qadd" in label for label in vta) == 8
    assert module.stats["offloaded_macs"] > 0.9
    _check_bit_exact(module, q, {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)})


def test_resnet18_keeps_tensors_between_accelerator_kernels_in_the_blocked_layout():
    rng = np.random.default_rng(1)
    calib = [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(2)]
    q = quantize_for(optimize(from_onnx(resnet18(32))), PYNQ, calib, "shift")
    module = tensorforge.compile(q, target="vta -config=pynq")
    kernels = {k.name: k for k in module.kernels}
    kinds: dict[str, set[str]] = {}  # value -> the kinds of the kernels that write or read it
    for call in module.calls:
        for value in call.args:
            kinds.setdefault(value, set()).add(kernels[call.kernel].kind)
    packed = []
    for call in (c for c in module.calls if kernels[c.kernel].kind == "vta"):
        for value, operand in zip(call.args, kernels[call.kernel].meta["operands"], strict=True):
            between_kernels = kinds[value] == {"vta"} and value not in module.outputs
            assert operand.get("packed", False) == between_kernels, (call.label, value)
            packed.append(between_kernels)
    # Only the stem's pooled output (a conv's input and a residual), the last block's output and
    # the classifier's input and output cross to the CPU in NCHW.
    assert (sum(packed), len(packed)) == (43, 48)
    for value in module.stats["packed_tensors"]:
        n, c, h, w = q.types[value].shape
        assert module.tensors[value].shape == (n, c // 16, h, w, 1, 16)
    x = {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    _check_bit_exact(module, q, x)
    _check_bit_exact(Module.from_bytes(module.to_bytes()), q, x)


def _pool_and_skip_graph():
    """conv -> relu -> 3x3/1 max pool (overlapping: a standalone pool kernel) -> conv, and a
    dense whose output is added to a skip connection (a dense kernel with a fused add)."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("pool_and_skip")
    x = b.add_input("x", (2, 16, 7, 7), "float32")
    w1 = b.add_constant("w1", rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1)
    w2 = b.add_constant("w2", rng.standard_normal((32, 16, 1, 1)).astype(np.float32) * 0.1)
    (y,) = b.add_node("Conv", [x, w1], {"pads": (1, 1, 1, 1)})
    (y,) = b.add_node("Relu", [y])
    (y,) = b.add_node("MaxPool", [y], {"kernel_shape": (3, 3), "strides": (1, 1)})
    (y,) = b.add_node("Conv", [y, w2])
    (y,) = b.add_node("Flatten", [y])  # (2, 800)
    wd = b.add_constant("wd", rng.standard_normal((800, 800)).astype(np.float32) * 0.02)
    (d,) = b.add_node("MatMul", [y, wd])
    (y,) = b.add_node("Add", [d, y])
    return b.build([y]), {"x": rng.standard_normal((2, 16, 7, 7)).astype(np.float32)}


def test_a_standalone_pool_and_a_dense_with_a_residual_add_are_bit_exact():
    graph, inputs = _pool_and_skip_graph()
    q = quantize_for(optimize(graph), TINY, inputs, "shift")
    module = compile_graph_vta(q, "vta -vthreads=2", progress=False, config=TINY)
    vta = _vta_labels(module)
    assert any(label.startswith("tf.qmaxpool") for label in vta), vta
    assert any(label.startswith("tf.qdense+tf.qadd") for label in vta), vta
    _check_bit_exact(module, q, inputs)


def test_saved_module_runs_on_cyclesim_with_cycles_and_a_trace(tmp_path):
    graph, inputs, calib, _ = _digits(4)
    module = tensorforge.compile(graph, "vta -config=tiny", calibration=calib)
    want = module.run(inputs)
    assert all(r.cycles is None for r in module.device_results().values())  # sim counts none
    module.save(tmp_path / "digits.tfm")
    loaded = Module.load(tmp_path / "digits.tfm").use_device("cyclesim")
    got = loaded.run(inputs)
    assert np.array_equal(got[loaded.outputs[0]], want[module.outputs[0]])
    results = loaded.device_results()
    assert len(results) == 3 and all(r.cycles > 0 for r in results.values())
    trace = json.loads(loaded.write_trace(tmp_path / "t.json").read_text())
    layers = [e for e in trace["traceEvents"] if e.get("cat") == "layer"]
    assert [e["name"] for e in layers] == list(results)
    assert trace["otherData"]["cycles"] == sum(r.cycles for r in results.values())


def test_errors_name_what_is_missing_or_wrong():
    graph, inputs, calib, _ = _digits(2)
    with pytest.raises(ValueError, match="needs calibration inputs"):
        tensorforge.compile(graph, "vta")
    with pytest.raises(ValueError, match="-device must be one of sim, cyclesim, rtl, not 'fpga'"):
        tensorforge.compile(graph, "vta -device=fpga", calibration=calib)
    with pytest.raises(ValueError, match="calibration belongs to vta targets"):
        tensorforge.compile(graph, "llvm", calibration=calib)
    module = tensorforge.compile(graph, "vta -config=tiny", calibration=calib)
    module.run(inputs)
    with pytest.raises(ValueError, match="write_trace needs a run .* on the cyclesim device"):
        module.write_trace("never.json")


def test_cli_runs_an_onnx_model_on_the_accelerator_with_a_trace(tmp_path, capsys):
    model, split = load_digits_assets()
    x = tmp_path / "x.npy"
    np.save(x, split["images"][:1])
    trace = tmp_path / "trace.json"
    code = main(["run", str(model), "--target", "vta -config=tiny", "--input", str(x),
                 "--trace", str(trace)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "calibrating the int8 scales on the --input arrays" in out
    assert "on the accelerator: 3 of 4 conv/dense layers" in out
    assert "tf.qconv2d+tf.qmaxpool (conv2)" in out and "of accelerator time at 100 MHz" in out
    assert json.loads(trace.read_text())["otherData"]["layers"] == 3


def test_cli_compiles_with_calibration_then_runs_the_module_on_another_device(tmp_path, capsys):
    model, split = load_digits_assets()
    calib, x, out = tmp_path / "calib.npy", tmp_path / "x.npy", tmp_path / "digits.tfm"
    np.save(calib, split["calib_images"])
    np.save(x, split["images"][:1])
    args = ["compile", str(model), "-o", str(out), "--target", "vta -config=tiny", "--no-progress"]
    assert main([*args, "--calibrate", str(calib)]) == 1  # the batch dimension is symbolic
    assert "input 'input' has symbolic dimensions; give its shape: --shape input=" in (
        capsys.readouterr().err
    )
    assert main([*args, "--calibrate", str(calib), "--shape", "1,1,8,8"]) == 0
    printed = capsys.readouterr().out
    assert "3 accelerator kernels (tiny)" in printed
    assert "requantization: mul (multiply+shift)" in printed  # tiny has the ALU MUL too
    assert main(["run", str(out), "--input", str(x), "--device", "cyclesim"]) == 0
    printed = capsys.readouterr().out  # the mode is saved with the module
    assert " cycles = " in printed and "requantization: mul (multiply+shift)" in printed
    assert main(["run", str(out), "--input", str(x), "--device", "rtl", "--trace", "t.json"]) == 1
    assert "--trace needs the cyclesim device" in capsys.readouterr().err


def test_the_accelerator_compile_guide_example_runs(tmp_path):
    doc = Path(__file__).resolve().parents[2] / "docs" / "compile_vta.md"
    code = re.search(r"```python\n(.*?)```", doc.read_text(), re.S)
    assert code is not None
    source = code.group(1).replace("/tmp/", f"{tmp_path}/")
    namespace: dict = {}
    exec(compile(source, str(doc), "exec"), namespace)  # noqa: S102  (our own doc)
    assert json.loads((tmp_path / "digits_trace.json").read_text())["otherData"]["layers"] == 3


def _beyond_the_srams_graph():
    """On tiny: a 7x7 conv whose input rows fit INP for one virtual thread, not two; 1x1 convs
    over 200 columns that fit alone but not with a fused residual add (a second ACC tile);
    then 768 columns (no tile fits INP) and a dense with 1100 outputs (its bias vector
    alone overflows ACC)."""
    rng = np.random.default_rng(5)

    def weight(*shape):
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    b = GraphBuilder("beyond_the_srams")
    x = b.add_input("x", (1, 16, 15, 15), "float32")
    (y,) = b.add_node("Conv", [x, b.add_constant("w7", weight(16, 16, 7, 7))],
                      {"strides": (2, 2), "pads": (3, 3, 3, 3)})  # fmt: skip
    (y,) = b.add_node("Relu", [y])  # (1, 16, 8, 8)
    (y,) = b.add_node("Reshape", [y, b.add_constant("s64", np.array([1, 16, 1, 64]))])
    (y,) = b.add_node("Tile", [y, b.add_constant("t", np.array([1, 1, 1, 3]))])  # 192 columns
    (z,) = b.add_node("Conv", [y, b.add_constant("w1", weight(16, 16, 1, 1))])
    (y,) = b.add_node("Relu", [b.add_node("Add", [z, y])[0]])
    (y,) = b.add_node("Tile", [y, b.add_constant("t3", np.array([1, 1, 1, 4]))])  # 768
    (y,) = b.add_node("Conv", [y, b.add_constant("w2", weight(16, 16, 1, 1))])
    (y,) = b.add_node("Flatten", [b.add_node("GlobalAveragePool", [y])[0]])
    (y,) = b.add_node("MatMul", [y, b.add_constant("wd", weight(1100, 16).T.copy())])
    return b.build([y]), {"x": rng.standard_normal((1, 16, 15, 15)).astype(np.float32)}


def test_layers_beyond_the_srams_use_one_thread_stay_unfused_or_run_on_the_cpu():
    graph, inputs = _beyond_the_srams_graph()
    q = quantize_for(optimize(graph), TINY, inputs, "shift")
    module = compile_graph_vta(q, "vta -vthreads=2", progress=False, config=TINY)
    vta = _vta_labels(module)
    assert len(vta) == 2 and not any("+" in label for label in vta), vta  # 7x7; 1x1 unfused
    cpu = {node: why for node, op, where, why in module.stats["placement"] if where == "cpu"}
    assert sum("needs more SRAM entries than HWConfig 'tiny' has" in w for w in cpu.values()) == 2
    _check_bit_exact(module, q, inputs)


def test_an_overlapping_max_pool_whose_rows_overflow_acc_runs_on_the_cpu():
    rng = np.random.default_rng(6)
    b = GraphBuilder("wide_pool")
    x = b.add_input("x", (1, 16, 4, 200), "float32")
    w = b.add_constant("w", (rng.standard_normal((16, 16, 1, 1)) / 4).astype(np.float32))
    (y,) = b.add_node("Relu", [b.add_node("Conv", [x, w])[0]])  # 200 columns fit INP and ACC
    (y,) = b.add_node("MaxPool", [y], {"kernel_shape": (3, 3), "strides": (1, 1)})
    inputs = {"x": rng.standard_normal((1, 16, 4, 200)).astype(np.float32)}
    q = quantize_for(optimize(b.build([y])), TINY, inputs, "shift")
    module = compile_graph_vta(q, "vta -vthreads=2", progress=False, config=TINY)
    assert _kinds(module).count("vta") == 1  # the conv; 3 rows of 200 columns overflow ACC
    (why,) = [why for _, op, _, why in module.stats["placement"] if op == "tf.qmaxpool"]
    assert why.startswith("no tiling of the 4x200 max pooling fits HWConfig 'tiny'"), why
    _check_bit_exact(module, q, inputs)


def test_an_add_whose_smaller_operand_rounds_away_runs_on_the_cpu():
    """A residual add whose operands' scales are 2**17 apart: in mode mul the smaller one's
    multiplier rounds to 0 (the add is the larger operand, requantized), which the conv's
    fused epilogue cannot emit; the add stays a CPU kernel, bit-exact."""
    rng = np.random.default_rng(7)
    b = GraphBuilder("vanishing_skip")
    x = b.add_input("x", (1, 16, 5, 5), "float32")
    big = (rng.standard_normal((16, 16, 3, 3)) * 1e4).astype(np.float32)
    small = (rng.standard_normal((16, 16, 1, 1)) / 4).astype(np.float32)
    (y,) = b.add_node("Conv", [x, b.add_constant("big", big)], {"pads": (1, 1, 1, 1)})
    (s,) = b.add_node("Relu", [b.add_node("Conv", [x, b.add_constant("small", small)])[0]])
    (y,) = b.add_node("Relu", [b.add_node("Add", [y, s])[0]])
    inputs = {"x": rng.standard_normal((1, 16, 5, 5)).astype(np.float32)}
    q = quantize_for(optimize(b.build([y])), TINY, inputs, "mul")
    (add,) = [n for n in q.nodes if n.op == "tf.qadd"]
    assert ("MUL", 0) in [
        (add.attr(f"{side}_op"), add.attr(f"{side}_imm")) for side in ("lhs", "rhs")
    ]
    module = compile_graph_vta(q, "vta", progress=False, config=TINY)
    labels = [
        c.label for c, kind in zip(module.calls, _kinds(module), strict=True) if kind == "vta"
    ]
    assert len(labels) == 2 and not any("tf.qadd" in label for label in labels), labels
    _check_bit_exact(module, q, inputs)
