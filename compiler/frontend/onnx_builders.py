"""Small ONNX models with fixed random weights, written with onnx.helper: an MLP, a small CNN,
ResNet-18, MobileNetV2 (and two of its blocks alone), EfficientNet-B0 (and one MBConv block
alone), a 1-D audio CNN, video ResNet (r3d) blocks, a transformer encoder layer and a quantized
CNN (tests and benchmarks).

>>> model = mlp()
>>> [i.name for i in model.graph.input]
['x']
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8  # onnxruntime 1.31 rejects the IR version 14 that onnx 1.23 writes by default


class OnnxModelBuilder:
    """Accumulates nodes and initializers; `model()` returns a checked ModelProto."""

    def __init__(self, name: str, seed: int = 0, opset: int = 17) -> None:
        self.name, self.opset = name, opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def input(self, name: str, shape: Sequence[int], elem: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, shape: Sequence[int], fan_in: int | None = None, hint: str = "w") -> str:
        fan_in = fan_in or int(np.prod(shape[1:]))
        value = self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)
        return self.const(value.astype(np.float32), hint)

    def op(self, op_type: str, inputs: Sequence[str], outputs: int = 1, **attrs: object) -> str:
        name = self.fresh(op_type.lower())
        outs = [name] if outputs == 1 else [f"{name}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs  # type: ignore[return-value]

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        k: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        group: int = 1,
        bias: bool = False,
        dims: int = 2,
    ) -> str:
        """A Conv over `dims` spatial axes (1-3), "same" padding (k // 2 each side); `k` and
        `stride` one for all axes or one per axis."""
        ks = [k] * dims if isinstance(k, int) else list(k)
        strides = [stride] * dims if isinstance(stride, int) else list(stride)
        w = self.weight((cout, cin // group, *ks))
        inputs = [x, w] + (
            [self.const(self.rng.standard_normal(cout).astype(np.float32) * 0.1)] if bias else []
        )
        return self.op(
            "Conv",
            inputs,
            kernel_shape=ks,
            strides=strides,
            pads=[t // 2 for t in ks] * 2,
            group=group,
        )

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        params = [
            r.uniform(0.5, 1.5, c),
            r.standard_normal(c) * 0.1,
            r.standard_normal(c) * 0.1,
            r.uniform(0.5, 1.5, c),
        ]
        names = [self.const(p.astype(np.float32), "bn") for p in params]
        return self.op("BatchNormalization", [x, *names], epsilon=1e-5)

    def conv_bn(
        self,
        x: str,
        cin: int,
        cout: int,
        k: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        group: int = 1,
        act: str | None = "Relu",
        dims: int = 2,
    ) -> str:
        y = self.bn(self.conv(x, cin, cout, k, stride, group, dims=dims), cout)
        if act == "Relu":
            return self.op("Relu", [y])
        if act == "Relu6":
            return self.op("Clip", [y, self.const(np.float32(0)), self.const(np.float32(6))])
        return y

    def dense(self, x: str, n_in: int, n_out: int) -> str:
        w = self.weight((n_out, n_in))
        b = self.const((self.rng.standard_normal(n_out) * 0.1).astype(np.float32))
        return self.op("Gemm", [x, w, b], transB=1)

    def model(self, outputs: Sequence[str]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            self.name,
            self.inputs,
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            initializer=self.inits,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", self.opset)],
            ir_version=IR_VERSION,
            producer_name="tensorforge",
        )
        # output shapes come from ONNX's own shape inference, so importing checks ours against it
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(model)
        return model


def mlp(batch: int = 2, sizes: Sequence[int] = (64, 128, 64, 10)) -> onnx.ModelProto:
    """Gemm + Relu layers ending in Softmax."""
    b = OnnxModelBuilder("mlp")
    x = b.input("x", (batch, sizes[0]))
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
        x = b.dense(x, n_in, n_out)
        x = b.op("Relu", [x]) if i < len(sizes) - 2 else b.op("Softmax", [x], axis=-1)
    return b.model([x])


def small_cnn(size: int = 32) -> onnx.ModelProto:
    """conv-bn-relu, max pool, conv-bn-relu, average pool, global pool, flatten, dense."""
    b = OnnxModelBuilder("small_cnn")
    x = b.input("x", (1, 3, size, size))
    x = b.conv_bn(x, 3, 16, 3)
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.conv_bn(x, 16, 32, 3, stride=2)
    x = b.op("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.model([b.dense(x, 32, 10)])


def _basic_block(b: OnnxModelBuilder, x: str, cin: int, cout: int, stride: int) -> str:
    y = b.conv_bn(x, cin, cout, 3, stride)
    y = b.conv_bn(y, cout, cout, 3, act=None)
    skip = b.conv_bn(x, cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else x
    return b.op("Relu", [b.op("Add", [y, skip])])


def resnet18(size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """ResNet-18 (basic blocks 2-2-2-2, widths 64-512), batch 1, NCHW input 3 x size x size."""
    b = OnnxModelBuilder("resnet18")
    x = b.input("x", (1, 3, size, size))
    x = b.conv_bn(x, 3, 64, 7, stride=2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        x = _basic_block(b, x, cin, cout, stride)
        x = _basic_block(b, x, cout, cout, 1)
        cin = cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.model([b.dense(x, 512, classes)])


def _inverted_residual(
    b: OnnxModelBuilder, x: str, cin: int, cout: int, stride: int, expand: int
) -> str:
    """Expansion 1x1 (absent when `expand` is 1), depthwise 3x3, linear projection 1x1; the
    residual add where the stride is 1 and the channels match."""
    hidden = cin * expand
    y = b.conv_bn(x, cin, hidden, 1, act="Relu6") if expand != 1 else x
    y = b.conv_bn(y, hidden, hidden, 3, stride, group=hidden, act="Relu6")
    y = b.conv_bn(y, hidden, cout, 1, act=None)
    return b.op("Add", [y, x]) if stride == 1 and cin == cout else y


def mobilenet_v2_block(size: int = 28) -> onnx.ModelProto:
    """Two MobileNetV2 inverted-residual blocks (expand 6, depthwise 3x3, ReLU6): one with the
    residual add, one with stride 2."""
    b = OnnxModelBuilder("mobilenet_v2_block")
    x = b.input("x", (1, 16, size, size))
    x = _inverted_residual(b, x, 16, 16, 1, 6)
    return b.model([_inverted_residual(b, x, 16, 24, 2, 6)])


def silu(b: OnnxModelBuilder, x: str) -> str:
    """x * Sigmoid(x) (SiLU/Swish, as exporters write it)."""
    return b.op("Mul", [x, b.op("Sigmoid", [x])])


def squeeze_excitation(b: OnnxModelBuilder, x: str, c: int, squeeze: int) -> str:
    """EfficientNet's squeeze-excitation: GlobalAveragePool, 1x1 conv to `squeeze` channels +
    SiLU, 1x1 conv back to `c` + Sigmoid, the result scaling x per channel."""
    s = silu(b, b.conv(b.op("GlobalAveragePool", [x]), c, squeeze, 1, bias=True))
    return b.op("Mul", [x, b.op("Sigmoid", [b.conv(s, squeeze, c, 1, bias=True)])])


def mbconv_block(size: int = 14, c: int = 40, k: int = 3, squeeze: int = 10) -> onnx.ModelProto:
    """One EfficientNet MBConv block, batch 1, `c` channels of size x size: expansion 1x1 to
    6c + batch norm + SiLU, depthwise k x k + batch norm + SiLU, squeeze-excitation, projection
    1x1 back to c + batch norm, the residual add."""
    b = OnnxModelBuilder("mbconv")
    x = b.input("x", (1, c, size, size))
    hidden = 6 * c
    y = silu(b, b.bn(b.conv(x, c, hidden, 1), hidden))
    y = silu(b, b.bn(b.conv(y, hidden, hidden, k, group=hidden), hidden))
    y = squeeze_excitation(b, y, hidden, squeeze)
    return b.model([b.op("Add", [b.bn(b.conv(y, hidden, c, 1), c), x])])


def regnet_y_block(
    size: int = 14, cin: int = 24, cout: int = 48, stride: int = 2, group_width: int = 8
) -> onnx.ModelProto:
    """Two RegNetY blocks (Radosavovic et al. 2020), batch 1, `cin` channels of size x size:
    1x1 conv + batch norm + ReLU, a 3x3 grouped conv of `group_width` channels per group +
    batch norm + ReLU, squeeze-excitation (ReLU, Sigmoid; a quarter of the block's input
    channels), 1x1 conv + batch norm, the residual add (a 1x1 projection in the first block,
    which has the stride) and ReLU."""
    b = OnnxModelBuilder("regnet_y_block")
    x = b.input("x", (1, cin, size, size))
    for c_in, s in ((cin, stride), (cout, 1)):
        y = b.conv_bn(x, c_in, cout, 1)
        y = b.conv_bn(y, cout, cout, 3, s, group=cout // group_width)
        se = b.op("Relu", [b.conv(b.op("GlobalAveragePool", [y]), cout, c_in // 4, 1, bias=True)])
        y = b.op("Mul", [y, b.op("Sigmoid", [b.conv(se, c_in // 4, cout, 1, bias=True)])])
        y = b.conv_bn(y, cout, cout, 1, act=None)
        skip = b.conv_bn(x, c_in, cout, 1, s, act=None) if s != 1 or c_in != cout else x
        x = b.op("Relu", [b.op("Add", [y, skip])])
    return b.model([x])


# MobileNetV2's bottlenecks (Sandler et al. 2018, Table 2): expansion t, channels c, repeats n,
# stride s of the first repeat.
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def audio_cnn_1d(length: int = 16000, classes: int = 12, width: int = 32) -> onnx.ModelProto:
    """A keyword-spotting 1-D CNN on raw audio (M5-like: a wide strided first conv, then 3-tap
    conv-bn-relu stages with max pooling), with a depthwise-separable stage (Conformer's conv
    module: pointwise, depthwise 15 taps, pointwise, residual); global average pool, dense."""
    b = OnnxModelBuilder("audio_cnn_1d")
    x = b.input("x", (1, 1, length))
    x = b.conv_bn(x, 1, width, 80, stride=4, dims=1)
    x = b.op("MaxPool", [x], kernel_shape=[4], strides=[4])
    for cin, cout in ((width, width), (width, 2 * width), (2 * width, 2 * width)):
        x = b.conv_bn(x, cin, cout, 3, dims=1)
        x = b.op("MaxPool", [x], kernel_shape=[2], strides=[2])
    c = 2 * width
    y = b.conv_bn(x, c, 2 * c, 1, dims=1)
    y = b.conv_bn(y, 2 * c, 2 * c, 15, group=2 * c, dims=1)
    x = b.op("Add", [b.conv_bn(y, 2 * c, c, 1, act=None, dims=1), x])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.model([b.dense(x, c, classes)])


def r3d_block(frames: int = 8, size: int = 28, c: int = 64) -> onnx.ModelProto:
    """Video ResNet blocks as torchvision's r3d_18 has them: a basic block of two 3x3x3
    conv-bn(-relu) with the residual add, then a downsampling one (stride 2 in time and space,
    the 1x1x1 strided projection on the skip path); NCDHW input `[1, c, frames, size, size]`."""
    b = OnnxModelBuilder("r3d_block")
    x = b.input("x", (1, c, frames, size, size))
    y = b.conv_bn(b.conv_bn(x, c, c, 3, dims=3), c, c, 3, act=None, dims=3)
    x = b.op("Relu", [b.op("Add", [y, x])])
    y = b.conv_bn(b.conv_bn(x, c, 2 * c, 3, stride=2, dims=3), 2 * c, 2 * c, 3, act=None, dims=3)
    skip = b.conv_bn(x, c, 2 * c, 1, stride=2, act=None, dims=3)
    return b.model([b.op("Relu", [b.op("Add", [y, skip])])])


def _divisible(channels: float, divisor: int = 8) -> int:
    """A width-scaled channel count rounded to a multiple of 8, never below 90% of it (the
    reference implementation's `_make_divisible`)."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded


def mobilenet_v2(size: int = 224, classes: int = 1000, width: float = 1.0) -> onnx.ModelProto:
    """MobileNetV2, batch 1, NCHW input 3 x size x size: a 3x3/2 stem conv to 32 channels, the 17
    inverted-residual blocks of `MOBILENET_V2_BLOCKS` (batch norm after every conv, ReLU6 as
    Clip 0..6), a 1x1 conv to 1280, global average pooling and the classifier Gemm. `width`
    scales every channel count (the last conv's only above 1)."""
    b = OnnxModelBuilder("mobilenet_v2")
    x = b.input("x", (1, 3, size, size))
    cin = _divisible(32 * width)
    x = b.conv_bn(x, 3, cin, 3, stride=2, act="Relu6")
    for expand, channels, repeats, stride in MOBILENET_V2_BLOCKS:
        cout = _divisible(channels * width)
        for k in range(repeats):
            x = _inverted_residual(b, x, cin, cout, stride if k == 0 else 1, expand)
            cin = cout
    last = _divisible(1280 * max(1.0, width))
    x = b.conv_bn(x, cin, last, 1, act="Relu6")
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.model([b.dense(x, last, classes)])


# EfficientNet-B0's MBConv stages (Tan and Le 2019, Table 1): expansion t, kernel k, stride s
# of the first repeat, channels c, repeats n.
EFFICIENTNET_B0_STAGES = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)


def _mbconv(b: OnnxModelBuilder, x: str, cin: int, cout: int, k: int, stride: int, t: int) -> str:
    """An MBConv block as torchvision writes it: expansion 1x1 + batch norm + SiLU (absent when
    `t` is 1), depthwise k x k + batch norm + SiLU, squeeze-excitation to a quarter of the
    block's input channels, projection 1x1 + batch norm, the residual add where shapes allow."""
    hidden = cin * t
    y = silu(b, b.bn(b.conv(x, cin, hidden, 1), hidden)) if t != 1 else x
    y = silu(b, b.bn(b.conv(y, hidden, hidden, k, stride, group=hidden), hidden))
    y = squeeze_excitation(b, y, hidden, max(1, cin // 4))
    y = b.bn(b.conv(y, hidden, cout, 1), cout)
    return b.op("Add", [y, x]) if stride == 1 and cin == cout else y


def efficientnet_b0(size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """EfficientNet-B0, batch 1, NCHW input 3 x size x size: a 3x3/2 stem to 32 channels +
    batch norm + SiLU, the 16 MBConv blocks of `EFFICIENTNET_B0_STAGES`, a 1x1 conv to 1280 +
    batch norm + SiLU, global average pooling and the classifier Gemm."""
    b = OnnxModelBuilder("efficientnet_b0")
    x = b.input("x", (1, 3, size, size))
    x = silu(b, b.bn(b.conv(x, 3, 32, 3, stride=2), 32))
    cin = 32
    for t, k, stride, cout, repeats in EFFICIENTNET_B0_STAGES:
        for r in range(repeats):
            x = _mbconv(b, x, cin, cout, k, stride if r == 0 else 1, t)
            cin = cout
    x = silu(b, b.bn(b.conv(x, cin, 1280, 1), 1280))
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.model([b.dense(x, 1280, classes)])


def transformer_encoder(
    seq: int = 16, dim: int = 64, heads: int = 4, ffn: int = 256
) -> onnx.ModelProto:
    """A BERT-style post-norm encoder layer: multi-head attention (reshape sizes computed with
    Shape/Gather/Concat as exporters write them), residual + LayerNorm, an Erf-GELU FFN."""
    b = OnnxModelBuilder("transformer_encoder")
    x = b.input("x", (1, seq, dim))
    head = dim // heads
    batch = b.op(
        "Unsqueeze",
        [
            b.op("Gather", [b.op("Shape", [x]), b.const(np.int64(0))]),
            b.const(np.array([0], np.int64)),
        ],
    )
    split = b.op("Concat", [batch, b.const(np.array([-1, heads, head], np.int64))], axis=0)

    def project(t: str) -> str:
        return b.op(
            "Add",
            [
                b.op("MatMul", [t, b.weight((dim, dim), dim)]),
                b.const((b.rng.standard_normal(dim) * 0.1).astype(np.float32)),
            ],
        )

    def heads_of(t: str, perm: list[int]) -> str:
        return b.op("Transpose", [b.op("Reshape", [project(t), split])], perm=perm)

    q, k, v = heads_of(x, [0, 2, 1, 3]), heads_of(x, [0, 2, 3, 1]), heads_of(x, [0, 2, 1, 3])
    scores = b.op("Div", [b.op("MatMul", [q, k]), b.const(np.float32(math.sqrt(head)))])
    ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    ctx = b.op(
        "Reshape",
        [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), b.const(np.array([1, seq, dim], np.int64))],
    )
    x = _layer_norm(b, b.op("Add", [project(ctx), x]), dim)
    h = b.op(
        "Add", [b.op("MatMul", [x, b.weight((dim, ffn), dim)]), b.const(np.zeros(ffn, np.float32))]
    )
    gelu = b.op(
        "Mul",
        [
            b.op("Mul", [h, b.const(np.float32(0.5))]),
            b.op(
                "Add",
                [
                    b.op("Erf", [b.op("Div", [h, b.const(np.float32(math.sqrt(2)))])]),
                    b.const(np.float32(1)),
                ],
            ),
        ],
    )
    out = b.op("MatMul", [gelu, b.weight((ffn, dim), ffn)])
    return b.model([_layer_norm(b, b.op("Add", [out, x]), dim)])


def _layer_norm(b: OnnxModelBuilder, x: str, dim: int) -> str:
    scale = b.const(b.rng.uniform(0.5, 1.5, dim).astype(np.float32))
    bias = b.const((b.rng.standard_normal(dim) * 0.1).astype(np.float32))
    return b.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)


def quantized_cnn(size: int = 10) -> onnx.ModelProto:
    """uint8/int8 quantized ops at opset 21: QuantizeLinear, QLinearConv (per-channel weight
    scales, int32 bias), QLinearMatMul, DequantizeLinear; outputs the dequantized logits and the
    dequantized conv activations."""
    b = OnnxModelBuilder("quantized_cnn", opset=21)
    r = b.rng

    def scalar(value: float, dtype: type = np.float32) -> str:
        return b.const(np.array(value, dtype))

    x = b.input("x", (1, 8, size, size))
    q = b.op("QuantizeLinear", [x, scalar(0.05), scalar(128, np.uint8)])
    conv_inputs = [
        q,
        scalar(0.05),
        scalar(128, np.uint8),
        b.const(r.integers(-60, 60, (16, 8, 3, 3)).astype(np.int8)),
        b.const(r.uniform(0.002, 0.01, 16).astype(np.float32)),
        b.const(np.zeros(16, np.int8)),
        scalar(0.2),
        scalar(100, np.uint8),
        b.const(r.integers(-500, 500, 16).astype(np.int32)),
    ]
    y = b.op("QLinearConv", conv_inputs, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    flat = b.op("Flatten", [y], axis=1)
    mm_inputs = [
        flat,
        scalar(0.2),
        scalar(100, np.uint8),
        b.const(r.integers(-100, 100, (16 * size * size, 10)).astype(np.int8)),
        scalar(0.01),
        scalar(0, np.int8),
        scalar(0.5),
        scalar(128, np.uint8),
    ]
    logits = b.op("QLinearMatMul", mm_inputs)
    out = b.op("DequantizeLinear", [logits, scalar(0.5), scalar(128, np.uint8)])
    act = b.op("DequantizeLinear", [y, scalar(0.2), scalar(100, np.uint8)])
    return b.model([out, act])


MODELS = {
    "mlp": mlp,
    "small_cnn": small_cnn,
    "resnet18": resnet18,
    "mobilenet_v2_block": mobilenet_v2_block,
    "mobilenet_v2": mobilenet_v2,
    "transformer_encoder": transformer_encoder,
}
