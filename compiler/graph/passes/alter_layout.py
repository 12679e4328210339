"""Layout alteration: 2-D convolutions move to the channel-blocked NCHW[c]c layout (as TVM's
x86 conv2d_NCHWc), elementwise ops, pools, batch norms and channel Concats between them follow,
and LayoutTransform nodes are inserted only where an op needs plain NCHW."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, GraphBuilder, Node
from ..ops.layout import pack_channels_weight, pad_channels, to_blocked
from ..ops.nn import window_geometry
from ..registry import Pattern, get_op
from .eliminate_dead_code import eliminate_dead_code

_BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min"}
_POOLS = ("MaxPool", "AveragePool")

#: the block the CPU compile moves convolution chains to (`compile_graph`): 32 channels, the
#: output-channel block `topi.x86.conv2d.default_config` takes where it divides the channels
#: (two 16-lane vectors per register tile row)
CPU_BLOCK = 32

#: with `chains_only` (the CPU compile), a value of 8 channels or more whose own block
#: (`_block_for`) is not a power of two of at least this many lanes is padded with zero channels
#: up to a multiple of it where that adds at most an eighth (`_padded`): Xception's 728 channels
#: (8-lane blocks) take 736 in blocks of 32, ShuffleNet's 58 and 116 (blocks of 29, NCHW) 64 and
#: 128; 0 turns padding off
PAD_BLOCK = 16


def _block_for(channels: int, block: int) -> int:
    """The block of a value of `channels` channels: its largest power-of-two divisor up to
    `block` when that is at least 8 (whole vectors: 144 channels take 16, not 24), else its
    largest divisor up to `block` (3, 6 or 20 channels: one block of all)."""
    power = max(d for d in (1, 2, 4, 8, 16, 32, 64) if d <= block and channels % d == 0)
    if power >= 8:
        return power
    return max(d for d in range(1, min(block, channels) + 1) if channels % d == 0)


def _padded(channels: int, block: int) -> int:
    """`channels` padded up to a multiple of `PAD_BLOCK` where its own block is narrower and
    the padding at most `channels / 8`: wider padding cost more than the whole vectors gained
    (two separable convs of 24 and 40 channels ran 1.09x and 1.20x the time of their 8-lane
    blocks padded to 32 and 48; 20 channels padded to 32 1.43x their NCHW kernels')."""
    own = _block_for(channels, block)
    if not PAD_BLOCK or channels < 8 or (_is_vector_block(own) and own >= PAD_BLOCK):
        return channels
    padded = -(-channels // PAD_BLOCK) * PAD_BLOCK
    return padded if (padded - channels) * 8 <= channels else channels


#: unary elementwise ops whose result is finite wherever their input is: the padded channels of
#: a value, zeros from a transform or a conv, stay finite through them, so that the zero
#: weights of the next conv's padded input channels cancel them (0 x inf would be NaN)
_PAD_SAFE = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish",
                       "Tanh", "Identity", "Neg", "Abs", "Elu", "Selu", "Celu", "Gelu",
                       "Softsign", "Erf"})  # fmt: skip


class _Rewriter:
    def __init__(
        self, graph: Graph, block: int, chains_only: bool = False, keep: frozenset = frozenset()
    ) -> None:
        self.graph, self.block, self.keep = graph, block, keep  # keep: convs that stay NCHW
        self.pad = chains_only  # padding only where the chains decide (the CPU compile)
        self.layouts = _value_layouts(graph, block, self.pad)
        self.flows = _flowing_values(graph, block, self.layouts) if chains_only else None
        self.readers = _readers(graph)
        self.b = GraphBuilder.sharing(graph)
        self.blocked: dict[str, tuple[str, int]] = {}  # NCHW value -> (blocked value, block)
        self.plain: set[str] = set(graph.inputs) | set(graph.constants)
        self.concat_channels = self._padded_concats()

    def _padded_concats(self) -> dict[str, np.ndarray]:
        """Output of each padded Concat -> where its channels lie among the padded ones: each
        input's channels start at the sum of the padded counts before it."""
        found = {}
        for node in self.graph.nodes:
            if not _is_channel_concat(self.graph, node, self.block):
                continue  # another Concat of padded values reads them sliced, in NCHW
            out = node.outputs[0]
            if out in self.layouts and self.is_padded(out):
                starts = np.cumsum([0] + [self.padded(i) for i in node.inputs])
                found[out] = np.concatenate([
                    np.arange(self.graph.types[i].shape[1]) + start
                    for i, start in zip(node.inputs, starts, strict=False)
                ])  # fmt: skip
        return found

    def need_plain(self, name: str) -> str:
        if name in self.concat_channels and name not in self.plain:
            return self._gather_channels(name)
        if name and name not in self.plain:
            blocked, block = self.blocked[name]
            attrs = {"src": "NCHWc", "dst": "NCHW", "block": block}
            if self.padded(name) != self.graph.types[name].shape[1]:
                attrs["channels"] = self.graph.types[name].shape[1]  # the padding sliced off
            self.b.add_node(
                "LayoutTransform", [blocked], attrs, name=f"{name}_to_nchw", outputs=[name]
            )
            self.plain.add(name)
        return name

    def _gather_channels(self, name: str) -> str:
        """A padded Concat's output in NCHW: its padded channels, then its own gathered (the
        Convs that read it scatter their weights instead; this serves a Conv kept NCHW)."""
        blocked, block = self.blocked[name]
        attrs = {"src": "NCHWc", "dst": "NCHW", "block": block}
        (full,) = self.b.add_node("LayoutTransform", [blocked], attrs, name=f"{name}_to_nchw")
        where = self.b.add_constant(self.b.fresh(f"{name}_channels"), self.concat_channels[name])
        self.b.add_node("Gather", [full, where], {"axis": 1}, name=f"{name}_gather", outputs=[name])
        self.plain.add(name)
        return name

    def need_blocked(self, name: str, block: int) -> str:
        if name in self.blocked and self.blocked[name][1] == block:
            return self.blocked[name][0]
        attrs = {"src": "NCHW", "dst": "NCHWc", "block": block}
        if self.padded(name) != self.graph.types[name].shape[1]:
            attrs["channels"] = self.padded(name)
        (out,) = self.b.add_node(
            "LayoutTransform", [self.need_plain(name)], attrs, name=f"{name}_to_nchw{block}c"
        )
        self.blocked[name] = (out, block)
        return out

    def emit_blocked(self, node: Node, op: str, inputs: list[str], attrs: dict, block: int) -> None:
        (out,) = self.b.add_node(
            op, inputs, attrs, name=node.name, outputs=[self.b.fresh(f"{node.outputs[0]}_nchwc")]
        )
        self.blocked[node.outputs[0]] = (out, block)

    def visit(self, node: Node) -> None:
        if node.op == "Conv" and self._conv(node):
            return
        if node.outputs and node.outputs[0] in self.concat_channels:
            self._concat(node)  # its readers' weights expect the padding: blocked from NCHW too
            return
        if self._follow(node):
            return
        inputs = [self.need_plain(i) for i in node.inputs]
        self.b.add_node(node.op, inputs, node.attr_dict, name=node.name, outputs=list(node.outputs))
        self.plain.update(o for o in node.outputs if o)

    def _conv(self, node: Node) -> bool:
        consts = self.graph.constants
        chains = self.block if self.flows is not None else None
        if not _is_candidate(self.graph, node, chains, self.layouts):
            return False
        if node.name in self.keep or (self.flows is not None and not self._continues_chain(node)):
            return False
        in_ch = self.graph.types[node.inputs[0]].shape[1]
        bi, bo = self.block_of(node.inputs[0]), self.block_of(node.outputs[0])
        depthwise = _is_depthwise(self.graph, node)
        if depthwise:  # (C/b, 1, KH, KW, 1, b): each block's channels read their own block
            bi = 1
        out_ch = self.padded(node.outputs[0])
        weight = consts[node.inputs[1]]  # grouped ones are never padded (`_value_layouts`)
        ins = self.padded(node.inputs[0]) if node.attr("group") == 1 else weight.shape[1]
        if node.inputs[0] in self.concat_channels:  # its input channels where the Concat put them
            scattered = np.zeros((weight.shape[0], ins, *weight.shape[2:]), weight.dtype)
            scattered[:, self.concat_channels[node.inputs[0]]] = weight
            scattered.flags.writeable = False
            weight = scattered
        # a view of the OIHW weight, copied into its blocked layout by compile_graph once the
        # imported graph is gone: the weights are held once while the graph is optimized (a
        # padded one: zero filters and input channels, copied once here)
        packed = pack_channels_weight(weight, out_ch, ins, bi, bo)
        w = self.b.add_constant(self.b.fresh(f"{node.name}_w_packed"), packed, view=True)
        x = node.inputs[0]
        if in_ch < 8 and not depthwise and x not in self.blocked and self.flows is not None:
            data = self.need_plain(x)  # an RGB stem packs its input itself (no transform)
        elif depthwise and x not in self.blocked and self.is_padded(x):
            data = self.need_plain(x)  # each task packs (and pads) its NCHW block itself
        else:
            data = self.need_blocked(x, bo if depthwise else bi)
        inputs = [data, w]
        if len(node.inputs) > 2 and node.inputs[2]:
            bias = pad_channels(consts[node.inputs[2]], out_ch, 0).reshape(out_ch // bo, bo)
            inputs.append(self.b.add_constant(self.b.fresh(f"{node.name}_b_packed"), bias))
        # grouped (depthwise too): weights (O/bo, (C/group)/bi, KH, KW, bi, bo), `group` kept
        drop = ("kernel_shape",) if node.attr("group") != 1 else ("group", "kernel_shape")
        attrs = {k: v for k, v in node.attrs if k not in drop}
        if depthwise:
            attrs["group"] = out_ch  # the padded channels are groups of their own
        real = self.graph.types[node.outputs[0]].shape[1]
        if out_ch > real and not depthwise:  # its padded outputs are 0, not 0 x an infinity
            attrs["channels"] = real
        self.emit_blocked(node, "ConvNCHWc", inputs, attrs, bo)
        return True

    def layout_of(self, value: str) -> tuple[int, int]:
        """(channels with padding, block) of 4-D value `value` (`_value_layouts`)."""
        found = self.layouts.get(value)
        return found or _own_layout(self.graph.types[value].shape[1], self.block, self.pad)

    def block_of(self, value: str) -> int:
        return self.layout_of(value)[1]

    def padded(self, value: str) -> int:
        return self.layout_of(value)[0]

    def is_padded(self, value: str) -> bool:
        return self.padded(value) != self.graph.types[value].shape[1]

    def _continues_chain(self, node: Node) -> bool:
        """With `chains_only`: whether the blocked layout flows through convolution `node`. A
        pointwise GEMM reads NCHW as it lies (no pack to save), so it never starts a chain, nor
        ends one with 8-lane blocks out (SqueezeNet's 512->1000 classifier ran 1.4x the GEMM's
        time so; the transform of its input fuses into the Concat kernel before it, 0.04 ms)."""
        flows = node.outputs[0] in self.flows
        if node.inputs[0] in self.blocked:
            out = node.outputs[0]
            narrow = self.block_of(out) < MIN_GROUP_BLOCK or self.is_padded(out)
            ends = narrow and not self._meets_residual(out)
            return flows or not (ends and _is_pointwise_gemm(self.graph, node))
        return flows and not _is_pointwise_gemm(self.graph, node)

    def _meets_residual(self, value: str) -> bool:
        """Whether `value`, through single-operand elementwise ops, meets another activation in
        a binary op (a residual Add, whose other operand may be blocked)."""
        for reader in self.readers.get(value, []):
            operands = [i for i in reader.inputs if i and i not in self.graph.constants]
            if reader.op in _BINARY and len(operands) > 1:
                return True
            if _may_follow(self.graph, reader, self.block) and len(operands) == 1:
                if self._meets_residual(reader.outputs[0]):
                    return True
        return False

    def _follow(self, node: Node) -> bool:
        """Elementwise ops of a blocked value stay blocked (constants are repacked, per-channel
        `[N, C, 1, 1]` values transformed); GlobalAveragePool becomes a ReduceMean over the
        blocked value's rows and columns (its result `[N, C/b, 1, 1, b]`)."""
        spec = get_op(node.op)
        blocked = [i for i in node.inputs if i in self.blocked]
        if not blocked or len(node.outputs) != 1:
            return False
        first = node.inputs[0]
        block = self.blocked[blocked[0]][1]
        out_ty = self.graph.types[node.outputs[0]]
        if any(self.is_padded(i) for i in blocked) and not self._keeps_padding(node):
            return False
        if spec.pattern == Pattern.ELEMWISE and node.op != "Cast" and first in self.blocked:
            rest = node.inputs[1:]
            if all(self.graph.constants.get(i, np.zeros(2)).size == 1 for i in rest if i):
                self.emit_blocked(
                    node, node.op, [self.blocked[first][0], *rest], node.attr_dict, block
                )
                return True
            return False
        if node.op in _BINARY and len(out_ty.shape) == 4:
            padded = self.padded(node.outputs[0])
            inputs = [
                self._operand(i, out_ty.shape, block, padded, divisor=k == 1 and node.op == "Div")
                for k, i in enumerate(node.inputs)
            ]
            if None not in inputs:
                self.emit_blocked(node, node.op, inputs, node.attr_dict, block)  # type: ignore[arg-type]
                return True
        if node.op in _POOLS and len(out_ty.shape) == 4 and node.inputs[0] in self.blocked:
            inputs = [self.blocked[first][0]]
            self.emit_blocked(node, node.op, inputs, _pool_attrs(node), block)
            return True
        if node.op == "Concat" and _is_channel_concat(self.graph, node, self.block):
            self._concat(node)
            return True
        if node.op == "BatchNormalization" and first in self.blocked:
            return self._batch_norm(node, block)
        if _is_global_mean(self.graph, node) and len(out_ty.shape) == 4:
            axes = self.b.add_constant(self.b.fresh("rows_cols"), np.array([2, 3], np.int64))
            inputs = [self.blocked[first][0], axes]
            self.emit_blocked(node, "ReduceMean", inputs, {"keepdims": 1}, block)
            return True
        return False

    def _concat(self, node: Node) -> None:
        block = self.block_of(node.outputs[0])
        inputs = [self.need_blocked(i, block) for i in node.inputs]
        self.emit_blocked(node, "Concat", inputs, {"axis": 1}, block)

    def _keeps_padding(self, node: Node) -> bool:
        """Whether `node` may read and write padded values: finite padded channels stay finite
        (`_PAD_SAFE`, binary ops but a Div by a value, pools, batch norms, global means)."""
        if node.op in _PAD_SAFE or node.op in _POOLS or node.op == "BatchNormalization":
            return True
        if node.op == "Concat":
            return node.outputs[0] in self.concat_channels
        if node.op == "Div":
            return node.inputs[1] in self.graph.constants  # padded with ones
        return node.op in _BINARY or _is_global_mean(self.graph, node)

    def _batch_norm(self, node: Node, block: int) -> bool:
        """An inference batch norm with constant parameters of a blocked value: a Mul and an
        Add by per-channel constants packed to `[1, C/b, 1, 1, b]`."""
        params = [self.graph.constants.get(i) for i in node.inputs[1:]]
        if any(p is None for p in params) or len(self.graph.types[node.inputs[0]].shape) != 4:
            return False
        epsilon = get_op(node.op).full_attrs(node)["epsilon"]
        dtype = self.graph.types[node.inputs[0]].dtype
        scale, shift = (v.astype(dtype) for v in _batch_norm_affine(params, epsilon))
        channels = self.padded(node.inputs[0])
        packed = [
            self.b.add_constant(
                self.b.fresh(f"{node.name}_{what}"), to_blocked(pad_channels(v, channels), block)
            )
            for what, v in (("scale", scale), ("shift", shift))
        ]
        (scaled,) = self.b.add_node(
            "Mul", [self.blocked[node.inputs[0]][0], packed[0]], name=f"{node.name}_scale"
        )
        self.emit_blocked(node, "Add", [scaled, packed[1]], {}, block)
        return True

    def _operand(
        self, name: str, shape: tuple[int, ...], block: int, padded: int, divisor: bool = False
    ) -> str | None:
        """`name` in the blocked layout: a blocked value, a scalar or a per-channel constant (its
        `padded` channels: zeros, ones for a `divisor`)."""
        if name in self.blocked and self.blocked[name][1] == block:
            return self.blocked[name][0]
        value = self.graph.constants.get(name)
        if value is None:  # a per-channel value (a squeeze-excitation gate): a small transform
            ty = self.graph.types[name]
            per_channel = ty.shape == (shape[0], shape[1], 1, 1)
            return self.need_blocked(name, block) if per_channel else None
        if value.size == 1:
            return name
        channels = shape[1]
        if value.size == channels and value.shape[-2:] in ((1, 1),) and value.ndim >= 3:
            flat = pad_channels(value.reshape(1, channels), padded, 1, float(divisor))
            packed = flat.reshape(1, padded // block, 1, 1, block)
            return self.b.add_constant(self.b.fresh(f"{name}_nchwc"), packed)
        return None


def _batch_norm_affine(params: list, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """(scale, shift), float64 of shape `[1, C, 1, 1]`, with `bn(x) = x * scale + shift`."""
    gamma, beta, mean, var = (np.asarray(p, np.float64) for p in params)
    scale = gamma / np.sqrt(var + epsilon)
    return scale.reshape(1, -1, 1, 1), (beta - mean * scale).reshape(1, -1, 1, 1)


def _pool_attrs(node: Node) -> dict:
    """A 2-D pool's attributes as the 3-D pool over (H, W, c) of the blocked layout: a window
    of 1 along c, no padding, stride or dilation there."""
    attrs = get_op(node.op).full_attrs(node)
    kernel = list(attrs["kernel_shape"])
    pads = list(attrs["pads"] or (0, 0, 0, 0))
    return {
        **attrs,
        "kernel_shape": [*kernel, 1],
        "pads": [*pads[:2], 0, *pads[2:], 0],
        "strides": [*(attrs["strides"] or (1, 1)), 1],
        "dilations": [*(attrs["dilations"] or (1, 1)), 1],
    }


def _is_candidate(
    graph: Graph, node: Node, chains_block: int | None, layouts: dict | None = None
) -> bool:
    """Whether `node` is a Conv that `_Rewriter._conv` may move: 2-D, ungrouped or depthwise,
    constant weights (and bias). With `chains_block` (`chains_only`) also float32 with whole
    vectors for blocks (powers of two of 8 and more: ShuffleNet's 116 channels would take
    29-lane blocks, 2x slower kernels), but for an RGB stem's input channels. A tuning log
    does not change the layout: it tunes the blocked kernels themselves (their workloads carry
    the chain's blocks, `strategy.conv.blocked_conv_config`). `layouts` (`_value_layouts`) pads
    such counts to whole vectors: those convs move."""
    if node.op != "Conv" or any(p not in graph.constants for p in node.inputs[1:] if p):
        return False
    x_ty, w_ty = graph.types[node.inputs[0]], graph.types[node.inputs[1]]
    grouped = _is_depthwise(graph, node) or _group_blocks(graph, node) is not None
    if len(w_ty.shape) != 4 or not (node.attr("group") == 1 or grouped):
        return False
    if chains_block is None:
        return True
    layouts = layouts or {}  # chains pad: a value's own layout is padded too
    blocks = [
        layouts.get(v, _own_layout(graph.types[v].shape[1], chains_block, True))[1]
        for v in (node.outputs[0], node.inputs[0])
        if graph.types[v].shape[1] >= 8
    ]
    return x_ty.dtype == "float32" and all(b >= 8 and b & (b - 1) == 0 for b in blocks)


def _is_pointwise_gemm(graph: Graph, node: Node) -> bool:
    from ..strategy.conv import is_pointwise_gemm  # the lowering rules import the passes

    x_ty, w_ty = graph.types[node.inputs[0]], graph.types[node.inputs[1]]
    attrs = get_op("Conv").full_attrs(node)
    begin, end, strides, _, _ = window_geometry(attrs, x_ty.shape[2:], w_ty.shape[2:])
    return is_pointwise_gemm(x_ty.shape, w_ty.shape, (*begin, *end), strides, x_ty.dtype)


#: the smallest block a grouped convolution's group widths must take for it to join a chain,
#: and a pointwise GEMM's output to end one: RegNetY-400MF's groups of 8 channels put 8-lane
#: blocks on the 1x1 convs around them, whose blocked kernels ran 1.3-1.7x the time of their
#: NCHW GEMMs (the model 1.28x slower)
MIN_GROUP_BLOCK = 16


def _group_blocks(graph: Graph, node: Node) -> tuple[int, int] | None:
    """The largest blocks (input, output) of whole vectors (powers of two of `MIN_GROUP_BLOCK`
    and more) that divide a grouped, not depthwise, convolution's group widths; None without
    such blocks."""
    group = node.attr("group")
    out_ch, per_group = graph.types[node.inputs[1]].shape[:2]
    if group == 1 or per_group == 1 or out_ch % group:
        return None
    widths = (per_group, out_ch // group)
    blocks = tuple(max(d for d in (1, 2, 4, 8, 16, 32, 64) if w % d == 0) for w in widths)
    return blocks if min(blocks) >= MIN_GROUP_BLOCK else None  # type: ignore[return-value]


def _is_channel_concat(graph: Graph, node: Node, block: int) -> bool:
    """Whether `node` is a Concat of 4-D values along channels that may stay blocked: every
    input's channels take a block of whole vectors (their Concat's block then divides each)."""
    if node.op != "Concat" or len(graph.types[node.outputs[0]].shape) != 4:
        return False
    if node.attr("axis") not in (1, -3):
        return False
    channels = [graph.types[i].shape[1] for i in node.inputs]
    return all(_is_vector_block(_block_for(c, block)) for c in channels)


def _feeds_only_convs(graph: Graph, value: str, readers: dict[str, list[Node]]) -> bool:
    """Whether every reader of `value` is an ungrouped Conv with constant weights reading it as
    its data (and it is no graph output): such a Conv scatters its weights' input channels to
    where a padded Concat holds them (`_Rewriter.concat_channels`), so the Concat's inputs may
    be padded each (SelecSLS's 144 + 72 + 72 channels: 16-lane blocks for 80 + 80 rather than
    8-lane ones for all)."""
    found = readers.get(value, [])
    return bool(found) and value not in graph.outputs and all(
        n.op == "Conv" and n.inputs[0] == value and n.attr_dict.get("group", 1) == 1
        and len(n.inputs) > 1 and n.inputs[1] in graph.constants
        for n in found
    )  # fmt: skip


def _is_vector_block(block: int) -> bool:
    return block >= 8 and block & (block - 1) == 0


def _own_layout(channels: int, block: int, pad: bool) -> tuple[int, int]:
    """(channels with padding, block) of a value that shares its layout with no other."""
    padded = _padded(channels, block) if pad else channels
    return padded, _block_for(padded, block)


def _value_layouts(graph: Graph, block: int, pad: bool) -> dict[str, tuple[int, int]]:
    """The channels (padded with `pad`: `_padded`) and block of each 4-D value that must share
    its layout with others of other channel counts. Values are joined where one op reads and
    writes one layout: the operands and result of an elementwise op, pool or residual Add, a
    depthwise conv's input and output, the inputs and output of a channel Concat
    (`_is_channel_concat`). A joined set takes the greatest common divisor of its members'
    `_block_for` and of the group-width blocks of the grouped convolutions that read or write
    them (`_group_blocks`), so producers and consumers agree.
    Values in no such set are left out (their block is their own `_block_for`). A set with a
    grouped convolution on it, or a Concat whose output other ops than Convs read, is not
    padded (their channel offsets and group widths are exact); in other sets each member is
    padded alike, a Concat's output holding each input's padding (`_feeds_only_convs`)."""
    parent: dict[str, str] = {}  # every value met, joined or capped

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    def join(a: str, b: str) -> None:
        parent[root(a)] = root(b)

    caps: dict[str, int] = {}
    exact: list[str] = []  # values whose channels take no padding
    concats: list[Node] = []
    readers = _readers(graph)
    for node in graph.nodes:
        out_ty = graph.types.get(node.outputs[0]) if node.outputs else None
        if out_ty is None or len(out_ty.shape) != 4:
            continue
        out = node.outputs[0]
        if _is_channel_concat(graph, node, block):
            for value in node.inputs:
                join(value, out)
            concats.append(node)
            if not (pad and _feeds_only_convs(graph, out, readers)):
                exact.append(out)
        elif node.op == "Conv" and len(node.inputs) > 1 and node.inputs[1] in graph.constants:
            if _is_depthwise(graph, node):
                join(node.inputs[0], out)
            elif (blocks := _group_blocks(graph, node)) is not None:
                for value, cap in zip((node.inputs[0], out), blocks, strict=True):
                    caps[value] = min(caps.get(value, cap), cap)
                    root(value)
                    exact.append(value)
        elif _may_follow(graph, node, block):
            channels = graph.types[out].shape[1]
            for value in node.inputs:
                ty = graph.types.get(value)
                if value not in graph.constants and ty and ty.shape[1:2] == (channels,):
                    join(value, out)
    unpadded = {root(value) for value in exact}
    padded = {
        value: _padded(channels, block) if pad and root(value) not in unpadded else channels
        for value in parent
        for channels in [graph.types[value].shape[1]]
    }  # fmt: skip
    for node in concats:  # a padded Concat holds its inputs' padding where each one ends
        padded[node.outputs[0]] = sum(padded[value] for value in node.inputs)
    blocks: dict[str, int] = {}
    for value in parent:
        own = min(caps.get(value, padded[value]), _block_for(padded[value], block))
        blocks[root(value)] = int(np.gcd(blocks.get(root(value), own), own))
    return {value: (padded[value], blocks[root(value)]) for value in parent}


def _is_depthwise(graph: Graph, node: Node) -> bool:
    out_ch, per_group = graph.types[node.inputs[1]].shape[:2]
    return per_group == 1 and node.attr("group") == out_ch == graph.types[node.inputs[0]].shape[1]


def _readers(graph: Graph) -> dict[str, list[Node]]:
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for value in node.inputs:
            readers.setdefault(value, []).append(node)
    return readers


def _flowing_values(graph: Graph, block: int, layouts: dict) -> set[str]:
    """Values worth producing in the blocked layout: read by a candidate Conv, or by an
    elementwise/binary op whose own output is worth it (visited from the outputs back)."""
    readers = _readers(graph)
    flows: set[str] = set()
    for node in reversed(graph.nodes):
        for value in node.outputs:
            for reader in readers.get(value, []):
                conv = _is_candidate(graph, reader, block, layouts) and reader.inputs[0] == value
                follows = _may_follow(graph, reader, block) and reader.outputs[0] in flows
                if conv or follows:
                    flows.add(value)
    return flows


def _is_global_mean(graph: Graph, node: Node) -> bool:
    """GlobalAveragePool, or the ReduceMean over rows and columns (kept) that the dynamo exporter
    writes for `adaptive_avg_pool2d(x, 1)` and `x.mean((2, 3), keepdim=True)` (MobileNetV3's and
    EfficientNet's squeeze-excitation: each left the blocked layout and came back)."""
    if node.op == "GlobalAveragePool":
        return True
    if node.op != "ReduceMean" or len(graph.types[node.inputs[0]].shape) != 4:
        return False
    attrs = node.attr_dict
    axes = attrs.get("axes")
    if axes is None and len(node.inputs) > 1:
        axes = graph.constants.get(node.inputs[1])
    if axes is None or not attrs.get("keepdims", 1):
        return False
    return sorted(int(a) % 4 for a in np.ravel(axes)) == [2, 3]


def _may_follow(graph: Graph, node: Node, block: int) -> bool:
    """Whether `node` may stay in the blocked layout (`_Rewriter._follow` decides on its
    operands)."""
    spec = get_op(node.op)
    elementwise = spec.pattern == Pattern.ELEMWISE and node.op != "Cast"
    pooled = _is_global_mean(graph, node) or node.op in _POOLS
    others = node.op in _BINARY or node.op == "BatchNormalization"
    concat = _is_channel_concat(graph, node, block)
    return len(node.outputs) == 1 and (elementwise or pooled or others or concat)


def alter_layout(graph: Graph, block: int = 8, chains_only: bool = False) -> Graph:
    """Move 2-D convolutions with constant weights to NCHW[block]c.

    Before: `%c = Conv(%x, %w); %r = Relu(%c); %d = Conv(%r, %w2); return %d`
    After:  `%xb = LayoutTransform(%x); %cb = ConvNCHWc(%xb, %w_packed); %rb = Relu(%cb);
    %db = ConvNCHWc(%rb, %w2_packed); %d = LayoutTransform(%db); return %d`
    Channel counts that `block` does not divide use their largest divisor below it. Values
    that must share a layout (an elementwise op's operands and result, a channel Concat's
    inputs and output, a depthwise conv's input and output) take one block, the gcd of their
    own and of the group-width blocks of grouped convs on them (`_value_layouts`), so producer
    and consumers agree.

    A depthwise convolution (`group` = channels) keeps its channels' block: weights
    `(C/b, 1, KH, KW, 1, b)` and a `group` attribute. A grouped one moves when its group
    widths take blocks of `MIN_GROUP_BLOCK` or more: weights `(O/bo, (C/group)/bi, KH, KW, bi,
    bo)`. A Concat along channels of inputs with whole-vector blocks is a Concat along axis 1
    of the blocked values; a lone BatchNormalization a Mul and an Add by packed constants.

    With `chains_only` (the CPU compile's default) a float convolution moves only where the
    blocked layout then flows: its input is already blocked, or its output reaches another
    moving convolution through elementwise ops, pools and Concats (a pointwise GEMM
    convolution, which packs nothing, never starts a chain, nor ends one with blocks under
    `MIN_GROUP_BLOCK` out). A lone convolution would only trade its kernel's own pack and
    unpack for two transforms.

    With `chains_only` a channel count without a block of `PAD_BLOCK` or more whole-vector
    lanes is padded with zero channels where that adds at most an eighth (`_padded`):
    Before: `%c = Conv(%x, %w)` with `%x: [1, 116, H, W]`, `%w: [116, 116, 3, 3]`
    After:  `%xb = LayoutTransform(%x, channels=128)`, `[1, 4, H, W, 32]`; `%cb =
    ConvNCHWc(%xb, %w_packed)` with `%w_packed: (4, 4, 3, 3, 32, 32)`, zero past 116 on both
    channel axes; `%c = LayoutTransform(%cb, channels=116)` where an NCHW op reads it. Only
    `_PAD_SAFE` ops, binary ops (a Div by a constant), pools, batch norms and global means
    follow a padded value; sets with a grouped conv, or a Concat that other ops than Convs
    read, keep their channels exact (a Concat that only Convs read holds its inputs'
    padding: they read it with zero weights there); a depthwise conv reads a padded value
    that enters the chain as NCHW (its kernel pads it).
    """
    keep: frozenset = frozenset()
    while True:
        rewriter = _Rewriter(graph, block, chains_only, keep)
        for node in graph.nodes:
            rewriter.visit(node)
        outputs = [rewriter.need_plain(o) for o in graph.outputs]
        after = eliminate_dead_code(rewriter.b.build(outputs))
        lone = _lone_convs(after) if chains_only else frozenset()
        if not lone:
            return after
        keep |= lone  # the lookahead was optimistic: their chain ended at the next op


def _lone_convs(graph: Graph) -> frozenset:
    """ConvNCHWc nodes that no other one reaches, nor they another, through blocked values
    (a residual Add whose other operand stayed NCHW ends a chain the lookahead expected)."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.get(name, name) != name:
            name = parent[name]
        return name

    for node in graph.nodes:
        if node.op == "LayoutTransform":
            continue
        for value in node.inputs:
            source = producer.get(value)
            if source is not None and source.op != "LayoutTransform":
                blocked = len(graph.types[value].shape) == 5
                if blocked:
                    parent[root(node.name)] = root(source.name)
    convs: dict[str, list[str]] = {}
    for node in graph.nodes:
        if node.op == "ConvNCHWc":
            convs.setdefault(root(node.name), []).append(node.name)
    return frozenset(names[0] for names in convs.values() if len(names) == 1)


__all__ = ["alter_layout", "to_blocked"]
