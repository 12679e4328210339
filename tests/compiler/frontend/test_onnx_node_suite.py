"""The ONNX backend node tests shipped in the onnx package, through import + reference executor.

The onnx wheel ships the test generators (onnx.backend.test.case.node), not the data files, so
the cases are generated once per session (about 4 s). Integer inputs that decide shapes (Reshape's
shape, Slice's starts, ...) are bound as constants, since the graph layer's shapes are static.
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from tensorforge.compiler.frontend import UnsupportedDtypeError, UnsupportedOpError, from_onnx
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.registry import get_op, is_registered

ISSUE_OPS = (
    "Conv ConvTranspose Gemm MatMul BatchNormalization Relu LeakyRelu Sigmoid Tanh Gelu Erf "
    "HardSwish Clip Add Sub Mul Div Pow Sqrt Exp Log Softmax LayerNormalization MaxPool "
    "AveragePool GlobalAveragePool Reshape Flatten Transpose Concat Split Slice Gather Squeeze "
    "Unsqueeze Expand Pad Shape ReduceMean ReduceSum ReduceMax Cast Where Constant "
    "QuantizeLinear DequantizeLinear QLinearConv QLinearMatMul"
).split()
# further ops the importer supports (common in exported models)
EXTRA_OPS = (
    "Identity Dropout Neg Abs Max Min ReduceMin ReduceProd LogSoftmax GlobalMaxPool "
    "HardSigmoid Resize ConstantOfShape Range Equal Less Greater LessOrEqual GreaterOrEqual "
    "Not And Or Xor Mod ScatterND Tile CumSum Trilu Sign Reciprocal Floor Ceil Round "
    "CastLike Size Einsum LSTM GRU RNN PRelu Softplus Softsign Mish Elu Selu Celu "
    "ThresholdedRelu Shrink IsNaN IsInf Sum Mean Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh "
    "Acosh Atanh DynamicQuantizeLinear ConvInteger MatMulInteger TopK GatherND GridSample "
    "InstanceNormalization GroupNormalization LpNormalization MeanVarianceNormalization LRN "
    "ReduceL1 ReduceL2 ReduceSumSquare ReduceLogSum ReduceLogSumExp ArgMax ArgMin Hardmax "
    "DepthToSpace SpaceToDepth OneHot GatherElements ScatterElements EyeLike Loop "
    "BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitShift Col2Im AffineGrid"
).split()
# classic ops of the standard domain, most as composites or folded at compile time
CLASSIC_OPS = (
    "LpPool NonZero Compress Unique NonMaxSuppression DFT STFT HannWindow HammingWindow "
    "BlackmanWindow MelWeightMatrix RoiAlign Scan CenterCropPad MaxUnpool Det "
    "OptionalHasElement OptionalGetElement DeformConv Upsample If"
).split()
# the standard domain's newer ops for transformers and sequences (opsets 22 to 28), losses,
# and Scatter (opsets 9 and 10, upgraded to ScatterElements)
NEWER_OPS = (
    "Attention RMSNormalization RotaryEmbedding Swish CumProd ReverseSequence TensorScatter "
    "NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss Scatter BitCast SwiGLU CausalConvWithState "
    "LinearAttention FlexAttention"
).split()
SUPPORTED = ISSUE_OPS + EXTRA_OPS + CLASSIC_OPS + NEWER_OPS
RECORDED = Path(__file__).resolve().parent / "node_suite_compiled.txt"


@functools.cache
def _cases() -> dict[str, list]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    by_op: dict[str, list] = {}
    for case in cases:
        if "_expanded" in case.name:  # function-expanded variants test other ops
            continue
        by_op.setdefault(case.model.graph.node[0].op_type, []).append(case)
    return by_op


@functools.cache
def expanded_cases() -> dict[str, list]:
    """op -> its cases' function-expanded variants (`test_softmax_axis_0_expanded`,
    `test_elu_expanded_ver18`): the op's definition as a graph of primitive ops, with the
    same inputs and outputs. For the compiled suite (`node_suite_compiled`), where they are
    multi-op graphs through fusion, layouts and memory planning that no single case makes."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    plain = {c.name: c for c in cases if "_expanded" not in c.name}
    by_op: dict[str, list] = {}
    for case in cases:
        base = plain.get(case.name.partition("_expanded")[0])
        if "_expanded" in case.name and base is not None:
            by_op.setdefault(base.model.graph.node[0].op_type, []).append(case)
            _PLAIN_MODEL[case.name] = base.model
    return by_op


# expanded case -> its plain case's model, whose op decides which inputs are shapes
_PLAIN_MODEL: dict[str, onnx.ModelProto] = {}


def _lift_opset(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """Models written at an opset below 13 move to 13 when the op's definition is unchanged;
    None when it changed (the case tests an opset the importer does not support). A Loop
    (whose definition at 13 only admits sequences) or Scan (whose body the converter upgrades
    with it) stays as written: its body's ops are the importer's to upgrade (`onnx_upgrade`);
    so does Scatter, which exists only below opset 11 and which the upgrade turns into
    ScatterElements; so do Dropout, whose opset 7-11 cases (a ratio attribute) the upgrade
    converts, Upsample (deprecated at opset 10), which the upgrade makes a Resize, and If,
    whose branches the upgrade converts with it."""
    op = model.graph.node[0].op_type
    if op in ("Loop", "Scan", "Scatter", "Dropout", "Upsample", "If"):
        return model
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version < 13:
            if onnx.defs.get_schema(op, 13).since_version > imp.version:
                return None
            imp.version = 13
    return model


def _shape_inputs(model: onnx.ModelProto, inputs: list) -> dict[str, np.ndarray]:
    """Inputs to bind as constants: int64 inputs after an op's first (shapes, axes, indices),
    any input the op's registry entry requires constant (Resize's float scales and roi), a
    Loop's trip count and condition (it is unrolled at import), a Dropout's ratio and
    training_mode (which decide whether it is the identity or a random draw) and an Upsample's
    scales (Resize's, upgraded)."""
    names = [v.name for v in model.graph.input]
    later = {name for node in model.graph.node for name in node.input[1:]}
    deciding = set()
    for node in model.graph.node:
        if node.op_type in ("Loop", "Dropout", "Upsample"):
            deciding.update(node.input[:2] if node.op_type == "Loop" else node.input[1:3])
        if is_registered(node.op_type):
            spec = get_op(node.op_type)
            deciding.update(node.input[i] for i in spec.const_inputs if i < len(node.input))
    return {
        n: v
        for n, v in zip(names, inputs, strict=False)
        if isinstance(v, np.ndarray | np.generic)
        and (n in deciding or (n in later and v.dtype == np.int64))
    }


# Cases whose expected data (onnx's reference evaluator) onnxruntime and torch disagree with:
# these are checked against onnxruntime's outputs instead. A downsampling Resize with
# align_corners to a non-integer length (4 * 0.6 = 2.4): the reference divides by the
# unrounded 1.4, onnxruntime and torch by the output's 1 (its length less one).
ONNXRUNTIME_OVER_REFERENCE = {
    "test_resize_downsample_scales_linear_align_corners",
    "test_resize_downsample_scales_cubic_align_corners",
}


# Cases whose expected data holds float32 rounding noise where the exact value is zero: an inverse
# DFT of arange(100) (outputs up to 50) has an imaginary part of exactly 0 at the Nyquist bin,
# recorded as numpy's complex64 noise of 1.9e-7, past the suite's atol of 1e-7; a transform
# computed any other way (onnxruntime's, ours by products with cosine and sine matrices) has
# other noise. Their atol is the noise float32 allows at outputs of that size.
ATOL_OVER_CASE = {"test_dft_inverse": 1e-5, "test_dft_inverse_opset19": 1e-5}


# bfloat16 Attention: ONNX's reference runs each numpy step (the products, the softmax's exp, sum
# and division) on bfloat16 arrays, rounding after every one; TensorForge computes the op in
# float32 and rounds its result once (as onnxruntime's bfloat16 kernels accumulate in float32).
# The two differ by up to 2 bfloat16 ulps (relative 2**-7 at most); test_narrow_dtypes.py checks
# ours against the float32 op rounded once. Checked at that tolerance instead of rtol 1e-3.
# Their function-expanded graphs (the compiled suite runs them) differ the same way, and so
# does float16's causal one by up to 2 float16 ulps (relative 2**-9).
RTOL_OVER_CASE = {
    f"test_attention_{case}_bf16{expanded}": 2.0**-6
    for case in ("4d_causal", "4d_padded_kv", "4d_causal_padded_kv", "4d_attn_mask_causal",
                 "3d_causal")
    for expanded in ("", "_expanded")
} | {"test_attention_4d_causal_fp16_expanded": 2.0**-9}  # fmt: skip


def _onnxruntime_outputs(model: onnx.ModelProto, inputs: list) -> list:
    import onnxruntime as ort

    names = [v.name for v in model.graph.input]
    session = ort.InferenceSession(model.SerializeToString())
    return session.run(None, dict(zip(names, inputs, strict=False)))


def _array(value: object) -> object:
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return value


def case_graph(case) -> tuple | None:
    """(graph, feed, expected outputs) of a backend case, or None for one written for an opset
    below 13. Raises whatever the importer raises."""
    ((inputs, expected),) = case.data_sets
    inputs, expected = [_array(v) for v in inputs], [_array(v) for v in expected]
    model = _lift_opset(case.model)
    if model is None:
        return None
    if case.name in ONNXRUNTIME_OVER_REFERENCE:
        expected = _onnxruntime_outputs(model, inputs)
    # an expanded case binds the inputs its plain case binds (a window's length, AffineGrid's
    # size, Range's limits: what its op needs as constants, now read by primitive ops)
    consts = _shape_inputs(_PLAIN_MODEL.get(case.name, model), list(inputs))
    graph = from_onnx(model, constant_inputs=consts)
    names = [v.name for v in model.graph.input]
    feed = {n: v for n, v in zip(names, inputs, strict=False) if n not in consts}
    return graph, feed, expected


def mismatch(case, graph, got: dict, expected: list) -> str | None:
    """The first output that differs from the case's (dtype or values), or None."""
    for name, want in zip(graph.model_outputs, expected, strict=True):
        try:
            assert got[name].dtype == want.dtype, f"dtype {got[name].dtype} != {want.dtype}"
            atol = max(case.atol, ATOL_OVER_CASE.get(case.name, 0.0))
            rtol = max(case.rtol, RTOL_OVER_CASE.get(case.name, 0.0))
            np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol)
        except AssertionError as exc:
            return f"output {name!r}: {str(exc).strip()[:300]}"
    return None


def run_case(case) -> tuple[str, str]:
    """('pass' | 'fail' | 'unsupported', detail) for one backend test case."""
    try:
        prepared = case_graph(case)
        if prepared is None:
            return "unsupported", "written for an opset below 13"
        graph, feed, expected = prepared
        outputs = run_graph(graph, feed)
    except (UnsupportedOpError, UnsupportedDtypeError) as exc:
        return "unsupported", str(exc).splitlines()[0]
    except Exception as exc:  # any other failure is a failing case, reported by name
        return "fail", f"{type(exc).__name__}: {exc}"
    wrong = mismatch(case, graph, outputs, expected)
    return ("fail", wrong) if wrong else ("pass", "")


@functools.cache
def results(op: str) -> list[tuple[str, str, str]]:
    """(case name, status, detail) of every backend case of `op`."""
    return [(case.name, *run_case(case)) for case in _cases().get(op, [])]


@pytest.mark.parametrize("op", SUPPORTED)
def test_backend_node_cases_of_supported_op_pass(op: str) -> None:
    cases = results(op)
    failed = [f"{name}: {detail}" for name, status, detail in cases if status == "fail"]
    assert not failed, "\n".join(failed)
    assert any(status == "pass" for _, status, _ in cases), f"no case of {op} passes: {cases}"


def test_backend_node_suite_summary(capsys: pytest.CaptureFixture[str]) -> None:
    counts = Counter(status for op in SUPPORTED for _, status, _ in results(op))
    skipped_ops = sorted(set(_cases()) - set(SUPPORTED))
    skipped = sum(len(_cases()[op]) for op in skipped_ops)
    with capsys.disabled():
        print(
            f"\nONNX backend node tests: {counts['pass']} passed, {counts['fail']} failed, "
            f"{counts['unsupported']} with unsupported dtypes/variants, over {len(SUPPORTED)} "
            f"supported ops; {skipped} cases of {len(skipped_ops)} unsupported ops skipped"
        )
    assert counts["fail"] == 0
    # Exactly the recorded set passes (node_suite_compiled.txt: every case that passes here also
    # passes through compiled code), so a regression fails and so does an unrecorded gain. (The
    # function-expanded variants it also records run through compiled code only.)
    passing = {name for op in SUPPORTED for name, status, _ in results(op) if status == "pass"}
    recorded = {name for name in RECORDED.read_text().split() if "_expanded" not in name}
    assert passing == recorded, (
        f"newly failing: {sorted(recorded - passing)}; newly passing (record them with "
        f"`python node_suite_compiled.py --update`): {sorted(passing - recorded)}"
    )
