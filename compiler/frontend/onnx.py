"""ONNX importer: an ONNX model (file, bytes or ModelProto; opsets 13 to 21) -> a graph IR `Graph`.

Opsets 1 to 12 are upgraded to 13 first with onnx's version converter (`onnx_upgrade`).
Nodes of onnxruntime's contrib domain (`com.microsoft`, as its transformer optimizer writes
them) map to the registry's ops of the qualified name (`registry_name`, `ops/contrib.py`).

Newer opsets, up to the newest the installed onnx package knows, import node by node where
the op's definition (its inputs and outputs) is still opset 21's; a node whose op changed is
listed as unsupported. Before any conversion every node is checked and all unsupported ops are
reported in one `UnsupportedOpError`. A file that is not a valid ONNX model raises
`OnnxImportError` naming the file and the problem. Shapes are static: a symbolic input dim or an
input without a shape needs `input_shapes`, and no tensor may span more than
`MAX_TENSOR_BYTES` (shape arithmetic is exact: a product that would wrap in int64 is caught).
Inputs that an op's ONNX schema types alike (MatMul's A and B) must have one dtype, and every
input a dtype its schema allows, as onnxruntime requires. Large initializers are read from the
file straight into their constants (`onnx_weights`): the weights are held once, not also in the
parsed protobuf. Reading a model is `onnx_load`; the checks before and during the import
(opsets, unsupported ops and variants, attributes, element types) and the errors are
`onnx_checks`; this module converts the checked model node by node.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ...runtime.tail import Tail
from ..graph.ir import DataDependentShapeError, Graph, GraphBuilder, GraphError, check_shape
from ..graph.ops.shape import SHAPE_ONLY_OPS
from ..graph.reference import run_graph
from ..graph.registry import (
    DATA_DEPENDENT_SHAPE_OPS,
    UnsupportedOpError,
    get_op,
)
from .onnx_checks import (
    MIN_OPSET,
    OnnxImportError,
    UnsupportedDtypeError,
    _checked_array,
    _is_training_batch_norm,
    check_node_types,
    check_required_attributes,
    default_opset,
    np_dtype,
    registry_name,
    unsupported_nodes,
    unsupported_ops,
)
from .onnx_dropout import convert_dropout
from .onnx_if import select_branches
from .onnx_index_checks import INDEX_OPS, add_index_check
from .onnx_load import RawWeights, load_model, read_model
from .onnx_loop import SEQUENCE_OPS, convert_sequence_op, unroll_loop
from .onnx_patterns import (
    drop_false_training_modes,
    drop_unread_outputs,
    rewrite_masked_assignments,
    sort_nodes,
)
from .onnx_preview import convert_flex_attention, is_preview_op
from .onnx_scan import is_batched_scan, unroll_batched_scan, unroll_scan
from .onnx_tail import TailSplit, beyond_lowering, build_tail, tail_boundary
from .onnx_upgrade import upgrade

# Reduce ops whose axes were an attribute before opset 18 (ReduceSum moved at 13).
_AXES_ATTR_UNTIL_18 = {
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
    "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
}  # fmt: skip
# Results of up to this many elements computed from constants alone are folded at import (shape
# math): integers, and the bools and floats exporters compute shapes through (Equal -> Where
# before an Expand; Cast to float, Mul by a scale, Floor, Cast back before a Resize).
_FOLD_LIMIT = 64
# Integer results (offsets, positions) up to this many elements fold too: a Loop unrolled at
# import slices by them in each iteration (EmbeddingBag's offsets: one per bag).
_FOLD_LIMIT_INT = 4096


def _fold_limit(dtype: str) -> int:
    return _FOLD_LIMIT_INT if np.dtype(dtype).kind in "iu" else _FOLD_LIMIT


class _Importer:
    def __init__(
        self, model: onnx.ModelProto, where: str, opset: int, weights: RawWeights | None = None
    ) -> None:
        self.model, self.where, self.opset, self.weights = model, where, opset, weights
        self.builder = GraphBuilder(model.graph.name or "main")
        self.scopes: list[dict[str, str]] = []  # the If branches and Loop bodies being inlined
        self.branch_results: set[str] = set()  # outputs of Ifs inlined at import
        self.sequences: dict[str, tuple[str, ...]] = {}  # sequence values: their items' names
        self.optionals: dict[str, str | None] = {}  # optional values: the value held, or None
        self.checks: list[str] = []  # run-time index checks (onnx_index_checks): extra outputs
        self.taken: list[str] = []  # bool scalars: the run-time If branches being converted
        self.evaluate = False  # fold every node of constants, whatever its size (evaluate_onnx)

    def add_inputs(
        self, constant_inputs: Mapping[str, Any], input_shapes: Mapping[str, Any]
    ) -> None:
        for index, init in enumerate(self.model.graph.initializer):
            where = f"{self.where}: initializer {init.name!r}"
            raw = self.weights.array(index, init, where) if self.weights else None
            if raw is not None:  # read into its own aligned buffer: kept, not copied
                self.builder.add_constant(init.name, raw, copy=False)
            else:
                self.builder.add_constant(init.name, _checked_array(init, where))
        for sparse in self.model.graph.sparse_initializer:
            name = sparse.values.name
            where = f"{self.where}: sparse initializer {name!r}"
            self.builder.add_constant(name, _sparse_array(sparse, where))
        for value in self.model.graph.input:
            if value.name in self.builder.types:
                continue
            if value.name in constant_inputs:
                if value.type.tensor_type.elem_type:  # the declared type must be ours too
                    np_dtype(
                        value.type.tensor_type.elem_type, f"{self.where}: input {value.name!r}"
                    )
                self.builder.add_constant(value.name, np.asarray(constant_inputs[value.name]))
                continue
            shape, dtype = self._value_type(value, input_shapes.get(value.name))
            try:
                self.builder.add_input(value.name, shape, dtype)
            except GraphError as exc:
                raise OnnxImportError(f"{self.where}: {exc}") from None

    def _value_type(self, value: onnx.ValueInfoProto, given: Sequence[int] | None) -> tuple:
        where = f"{self.where}: input {value.name!r}"
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            kind = value.type.WhichOneof("value")
            raise UnsupportedDtypeError(f"{where} must be a tensor, not {kind}")
        dtype = np_dtype(tensor.elem_type, where)
        hint = (
            f"pass input_shapes={{{value.name!r}: (d0, d1, ...)}} "
            f"(CLI: --shape {value.name}=d0,d1,...)"
        )
        if given is not None:
            return self._given_shape(value, given, where), dtype
        if not tensor.HasField("shape"):
            raise OnnxImportError(f"{where} must have a shape, not an unknown rank; {hint}")
        dims = []
        for dim in tensor.shape.dim:
            if not dim.HasField("dim_value"):
                raise OnnxImportError(
                    f"{where} must have static dims, not {dim.dim_param or '?'!r}; {hint}"
                )
            dims.append(dim.dim_value)
        return tuple(dims), dtype

    @staticmethod
    def _given_shape(value: onnx.ValueInfoProto, given: Sequence[int], where: str) -> tuple:
        """`input_shapes[name]`, checked against the rank and static dims the model declares."""
        try:
            dims = tuple(operator.index(d) for d in given)
        except TypeError:
            raise OnnxImportError(
                f"{where}: input_shapes must give integer dims, not {given!r}"
            ) from None
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            declared = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
            if len(declared) != len(dims) or any(
                d is not None and d != g for d, g in zip(declared, dims, strict=False)
            ):
                shown = tuple(d if d is not None else "?" for d in declared)
                raise OnnxImportError(
                    f"{where}: input_shapes gives {dims}, which does not fit the declared "
                    f"shape {shown}"
                )
        return dims

    def convert(self, index: int, node: onnx.NodeProto) -> None:
        name = node.name or f"{node.op_type}_{index}"
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        check_required_attributes(node, self.opset, name, self.where)
        if node.op_type == "Constant":
            where = f"{self.where}: Constant node {name!r}"
            self.builder.add_constant(node.output[0], _constant_value(attrs, where))
            return
        if node.op_type == "If":
            self._inline_if(name, node, attrs)
            return
        if node.op_type == "Loop":
            unroll_loop(self, name, node, attrs)
            return
        if node.op_type == "Scan" or is_batched_scan(node):
            (unroll_batched_scan if is_batched_scan(node) else unroll_scan)(self, name, node, attrs)
            return
        if is_preview_op(node):
            convert_flex_attention(self, name, node, attrs)
            return
        if node.op_type in SEQUENCE_OPS:
            convert_sequence_op(self, name, node, attrs)
            return
        if node.op_type == "Identity" and node.input[0] in self.sequences:
            self.sequences[node.output[0]] = self.sequences[node.input[0]]
            return
        types = self.builder.types
        dtypes = [types[i].dtype if i in types else None for i in node.input]
        check_node_types(node, self.opset, name, dtypes, self.where)
        inputs, outputs = list(node.input), list(node.output)
        op = registry_name(node)
        if op == "Dropout":  # inference: identity, the mask all true
            convert_dropout(self, name, node)
            return
        if _is_training_batch_norm(node, self.opset):
            self._refuse_saved_statistics(name, outputs[3:])
            running = outputs[1:3]
            inputs[3:5], outputs = self._batch_statistics(name, inputs, running, attrs), outputs[:1]
            attrs["training_mode"] = 0
        attrs = self._adjust(op, attrs, inputs, outputs, name)
        if op in INDEX_OPS:
            self._check_indices(op, name, inputs, attrs)
        if self._fold(op, name, inputs, outputs, attrs):
            return
        self.builder.add_node(op, inputs, attrs, name=name, outputs=outputs)

    def _check_indices(self, op: str, name: str, inputs: list, attrs: dict) -> None:
        """Refuse constant indices out of range now; check run-time ones at each run."""
        taken = self.taken[-1] if self.taken else None
        check = add_index_check(self.builder, op, name, inputs, attrs, len(self.checks), taken)
        if check is not None:
            self.checks.append(check)

    def _refuse_saved_statistics(self, name: str, saved: list[str]) -> None:
        """BatchNormalization-9's saved mean and variance (for a backward pass) have no
        definition to follow: refused by name when something reads them, else dropped."""
        graph = self.model.graph
        read = {v for n in graph.node for v in n.input} | {v.name for v in graph.output}
        if any(v and v in read for v in saved):
            raise UnsupportedOpError(
                [("BatchNormalization with saved statistics outputs", name, self.opset)],
                where=self.where,
            )

    def _batch_statistics(self, name: str, inputs: list, running: list, attrs: dict) -> list[str]:
        """The per-channel mean and (biased) variance of the input over the batch and spatial
        axes: what a training-mode BatchNormalization normalizes by (torch's BatchNorm with
        `track_running_stats=False`, which uses them in eval mode too, exports so). The
        `running` outputs asked for get ONNX's `input * momentum + batch * (1 - momentum)`."""
        x = inputs[0]
        shape = self.builder.types[x].shape
        axes = self.builder.add_constant(
            self.builder.fresh(f"{name}_axes"), np.array([0, *range(2, len(shape))], np.int64)
        )
        channels = self.builder.add_constant(
            self.builder.fresh(f"{name}_channels"), np.array([shape[1]], np.int64)
        )

        def value(hint: str) -> str:
            return self.builder.fresh(f"{name}_{hint}")

        mean, dev, sq, var = value("mean"), value("dev"), value("sq"), value("var")
        flat_mean, flat_var = value("batch_mean"), value("batch_var")
        self.emit("ReduceMean", [x, axes], [mean], f"{name}/mean", keepdims=1)
        self.emit("Sub", [x, mean], [dev], f"{name}/dev")
        self.emit("Mul", [dev, dev], [sq], f"{name}/sq")
        self.emit("ReduceMean", [sq, axes], [var], f"{name}/var", keepdims=1)
        self.emit("Reshape", [mean, channels], [flat_mean], f"{name}/batch_mean")
        self.emit("Reshape", [var, channels], [flat_var], f"{name}/batch_var")
        dtype = self.builder.types[x].dtype
        keep, take = (
            self.builder.add_constant(value(hint), np.array(v, dtype))
            for hint, v in (("momentum", attrs.get("momentum", 0.9)),
                            ("complement", 1 - attrs.get("momentum", 0.9)))
        )  # fmt: skip
        for out, old, batch in zip(running, inputs[3:5], (flat_mean, flat_var), strict=False):
            if out:
                kept, taken = value("kept"), value("taken")
                self.emit("Mul", [old, keep], [kept], f"{name}/{out}_kept")
                self.emit("Mul", [batch, take], [taken], f"{name}/{out}_taken")
                self.emit("Add", [kept, taken], [out], f"{name}/{out}")
        return [flat_mean, flat_var]

    def _inline_if(self, name: str, node: onnx.NodeProto, attrs: dict[str, Any]) -> None:
        """An If whose condition is known at import (shape tests on static shapes, exporters'
        guards) becomes its taken branch: the branch's nodes, their values renamed apart from
        the graph's, then Identity nodes onto the If's outputs. A condition computed at run
        time selects between both branches (`onnx_if.select_branches`)."""
        cond = self.builder.constants.get(node.input[0]) if node.input else None
        if cond is None or cond.size != 1:
            select_branches(self, name, node, attrs)
            return
        branch = attrs["then_branch" if bool(cond.reshape(())) else "else_branch"]
        missing = unsupported_nodes(branch.node, self.opset)
        if missing:
            raise UnsupportedOpError(missing, where=f"{self.where}: If node {name!r}")
        if len(branch.output) != len(node.output):
            raise OnnxImportError(
                f"{self.where}: If node {name!r} has {len(node.output)} outputs but its branch "
                f"{branch.name!r} {len(branch.output)}"
            )
        results = self.convert_subgraph(branch, name, {})
        for out, result in zip(node.output, results, strict=True):
            if out:
                self.alias(result, out, f"{name}/{out}")
                self.branch_results.add(out)

    def convert_subgraph(self, graph: onnx.GraphProto, prefix: str, renamed: dict) -> list[str]:
        """Convert the nodes of an If branch or one Loop iteration's body, their values renamed
        apart from the graph's (`renamed` starts with the body's inputs bound); the graph names
        of its outputs. Node names are `prefix/name`."""

        def local(value: str) -> str:
            renamed[value] = self.builder.fresh(f"{prefix}/{value}")
            return renamed[value]

        self.scopes.append(renamed)  # nested Ifs and Loops see this one's values
        try:
            for init in graph.initializer:
                where = f"{self.where}: node {prefix!r} initializer {init.name!r}"
                self.builder.add_constant(local(init.name), _checked_array(init, where))
            for index, inner in enumerate(graph.node):
                copy = onnx.NodeProto()
                copy.CopyFrom(inner)
                copy.name = f"{prefix}/{inner.name or f'{inner.op_type}_{index}'}"
                copy.input[:] = [self._resolve(v) for v in inner.input]
                copy.output[:] = [local(v) if v else v for v in inner.output]
                self.convert(index, copy)
            return [self._resolve(r.name) for r in graph.output]
        finally:
            self.scopes.pop()

    def alias(self, value: str, out: str, name: str) -> None:
        """Give `value` (a tensor or a sequence) the further name `out`."""
        outputs = {v.name for v in self.model.graph.output}
        if value in self.sequences:
            self.sequences[out] = self.sequences[value]
        elif value in self.builder.constants and out not in outputs:  # shape math reads it
            self.builder.add_constant(out, self.builder.constants[value])
        else:  # a graph output stays a node's output
            self.builder.add_node("Identity", [value], name=name, outputs=[out])

    def refuse(self, variant: str, name: str) -> None:
        """Raise the UnsupportedOpError of `variant` at node `name`."""
        raise UnsupportedOpError([(variant, name, self.opset)], where=self.where)

    def emit(self, op: str, inputs: list[str], outputs: list[str], name: str, **attrs) -> None:
        """Convert a node the importer writes itself (folded when its inputs are constants)."""
        self.convert(0, helper.make_node(op, inputs, outputs, name=name, **attrs))

    def _resolve(self, value: str) -> str:
        """A value's name in the graph, seen from the innermost If branch being inlined."""
        for scope in reversed(self.scopes):
            if value in scope:
                return scope[value]
        return value

    def _adjust(self, op: str, attrs: dict, inputs: list, outputs: list, name: str) -> dict:
        # (EyeLike's dtype, the signal windows' output_datatype; ConstantOfShape's is below)
        for key in ("to", "output_dtype", "dtype", "output_datatype"):
            if key in attrs and isinstance(attrs[key], int):
                attrs[key] = (
                    np_dtype(attrs[key], f"{self.where}: {op} {key} (node {name!r})")
                    if attrs[key]
                    else None
                )
        if op in _AXES_ATTR_UNTIL_18 and "axes" in attrs:
            axes = self.builder.fresh(f"{name}_axes")
            self.builder.add_constant(axes, np.array(attrs.pop("axes"), np.int64))
            inputs[1:] = [axes]
        if op == "ConstantOfShape" and "value" in attrs:
            attrs.update(_fill_value(attrs["value"], f"{self.where}: {op} node {name!r} value"))
        if op == "Split" and "split" in attrs:
            split = self.builder.fresh(f"{name}_split")
            self.builder.add_constant(split, np.array(attrs.pop("split"), np.int64))
            inputs[1:] = [split]
        if op == "DFT" and self.opset < 20 and "axis" not in attrs:
            attrs["axis"] = 1  # (opset 17's attribute default; opset 20's axis input: -2)
        if op == "RoiAlign" and self.opset < 16:  # (opset 10 samples as output_half_pixel)
            attrs.setdefault("coordinate_transformation_mode", "output_half_pixel")
        if op == "Split" and (len(inputs) < 2 or not inputs[1]) and "num_outputs" not in attrs:
            attrs["num_outputs"] = len(outputs)
        return attrs

    def _fold(self, op: str, name: str, inputs: list, outputs: list, attrs: dict) -> bool:
        """Evaluate shape arithmetic (Shape, Size, small results of ops on constants) right away."""
        consts = self.builder.constants
        present = [i for i in inputs if i]
        if op not in SHAPE_ONLY_OPS and not (present and all(i in consts for i in present)):
            return False
        probe = GraphBuilder()  # (it needs only the node's inputs)
        probe.types = {i: self.builder.types[i] for i in present if i in self.builder.types}
        probe.constants = {i: consts[i] for i in present if i in consts}
        probe.add_node(op, inputs, attrs, name=name, outputs=outputs)
        types = [probe.types[o] for o in outputs if o]
        if not self.evaluate and not all(t.size <= _fold_limit(t.dtype) for t in types):
            return False
        node = probe.nodes[-1]
        if op in SHAPE_ONLY_OPS:
            # only the shape matters: a zero-strided view allocates nothing
            arrays = [np.broadcast_to(np.uint8(0), self.builder.types[inputs[0]].shape)]
        else:
            arrays = [consts[i] if i else None for i in inputs]
        values = get_op(op).run(node, arrays)
        for out, value in zip(outputs, values, strict=False):
            if out:
                if self.evaluate:  # (run by the reference executor only: no aligned copy)
                    self.builder.add_value(out, value)
                else:
                    self.builder.add_constant(out, np.asarray(value))
        return True

    def distinct_outputs(self, declared: Sequence[onnx.ValueInfoProto] | None = None) -> list[str]:
        """The names of the model's outputs (or of those `declared`), a repeated one given its
        own copy (an Identity).

        A module that returns one tensor twice (`return y, y`) exports one value listed as
        two outputs; the compiled Module names each output once, so the copy keeps both.
        """
        names: list[str] = []
        for value in self.model.graph.output if declared is None else declared:
            name = value.name
            if name in self.sequences or name in self.optionals:
                what = "a sequence" if name in self.sequences else "an optional"
                raise UnsupportedOpError(
                    [(f"{what} as a model output", name, self.opset)], where=self.where
                )
            if name in names:
                copy, k = f"{name}_1", 1
                while copy in self.builder.types:
                    k += 1
                    copy = f"{name}_{k}"
                self.builder.add_node("Identity", [name], name=f"{copy}/copy", outputs=[copy])
                name = copy
            names.append(name)
        return names

    def check_outputs(
        self,
        graph: Graph,
        outputs: Sequence[str],
        declared: Sequence[onnx.ValueInfoProto] | None = None,
    ) -> None:
        """Each output has the element type the model declares (onnxruntime refuses a file
        whose types disagree). A declared shape that differs from the computed one is a warning,
        as in onnxruntime: annotations written by onnx's shape inference can be wrong (ceil_mode
        pools, some Slices), and torch's TorchScript exporter declares an If's other branch's
        shape at times (scatter_reduce's guard on a 0-d input declares the flattened shape), so
        an If's outputs are not compared."""
        declared = self.model.graph.output if declared is None else declared
        for value, name in zip(declared, outputs, strict=True):
            tensor = value.type.tensor_type
            declared = np_dtype(tensor.elem_type, self.where) if tensor.elem_type else None
            if declared is not None and declared != graph.types[name].dtype:
                raise OnnxImportError(  # onnxruntime refuses such a file too (a type error)
                    f"{self.where}: output {value.name!r} must have the declared element type "
                    f"{declared}, not the inferred {graph.types[name].dtype}"
                )
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
            if not tensor.HasField("shape") or None in dims or value.name in self.branch_results:
                continue
            ours = graph.types[name]
            if tuple(dims) != ours.shape:  # onnxruntime warns and uses its own shape too
                warnings.warn(
                    f"{self.where}: output {value.name!r} is declared with shape {tuple(dims)} "
                    f"but its ops give {ours.shape}: the computed shape is used (annotations "
                    f"from onnx's shape inference can be wrong, e.g. after a ceil_mode pool)",
                    stacklevel=2,
                )


def _fill_value(tensor: onnx.TensorProto, where: str) -> dict[str, Any]:
    """ConstantOfShape's one-element value tensor as the graph op's scalar `value` and `dtype`."""
    array = _checked_array(tensor, where)
    if array.size != 1:
        raise OnnxImportError(f"{where} must hold one element, not {array.size}")
    return {"value": array.reshape(()).item(), "dtype": str(array.dtype)}


def _sparse_array(sparse: onnx.SparseTensorProto, where: str) -> np.ndarray:
    """The dense value of a sparse tensor (a sparse initializer or Constant): its values at
    its indices (linear, or one row of coordinates each), zeros elsewhere; indices checked."""
    values = _checked_array(sparse.values, f"{where} (values)").reshape(-1)
    dense = np.zeros(check_shape(list(sparse.dims), str(values.dtype)), values.dtype)
    indices = _checked_array(sparse.indices, f"{where} (indices)") if values.size else None
    if indices is None:
        return dense
    if indices.ndim == 1 and indices.shape[0] == values.size:
        flat = indices
    elif indices.shape == (values.size, dense.ndim):
        if ((indices < 0) | (indices >= np.array(dense.shape))).any():
            raise OnnxImportError(f"{where}: sparse indices must lie in dims {list(dense.shape)}")
        flat = np.ravel_multi_index(tuple(indices.T), dense.shape) if dense.ndim else indices[:, 0]
    else:
        raise OnnxImportError(
            f"{where}: sparse indices must be [{values.size}] or [{values.size}, {dense.ndim}], "
            f"not {list(indices.shape)}"
        )
    if ((flat < 0) | (flat >= dense.size)).any():
        raise OnnxImportError(f"{where}: sparse indices must lie in dims {list(dense.shape)}")
    dense.reshape(-1)[flat] = values
    return dense


def _constant_value(attrs: dict[str, Any], where: str = "Constant") -> np.ndarray:
    if "value" in attrs:
        return _checked_array(attrs["value"], where)
    if "sparse_value" in attrs:
        return _sparse_array(attrs["sparse_value"], where)
    for key, dtype in (
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in attrs:
            return np.array(attrs[key], dtype)
    raise OnnxImportError(
        f"{where} must have value, sparse_value, value_float(s) or value_int(s), not "
        f"{sorted(attrs)}"
    )


def _inline_functions(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    """`model` with its local functions' calls replaced by their bodies (onnx's inliner); the
    initializers, which the in-place weight reader indexes, stay as they are."""
    from onnx import inliner

    names = [t.name for t in model.graph.initializer]
    try:
        inlined = inliner.inline_local_functions(model)
    except Exception as exc:  # noqa: BLE001  (the inliner raises RuntimeError and friends)
        raise OnnxImportError(
            f"{where}: its local functions could not be inlined: {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        ) from None
    if [t.name for t in inlined.graph.initializer] != names:
        raise OnnxImportError(f"{where}: inlining its local functions changed its initializers")
    return inlined


def from_onnx(
    model: str | Path | bytes | onnx.ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constant_inputs: Mapping[str, np.ndarray] | None = None,
) -> Graph:
    """Import an ONNX model into the graph IR.

    Args:
        model: a file path, serialized bytes or a ModelProto.
        input_shapes: static shapes for inputs with symbolic dims or no shape (they must fit
            the declared rank and static dims).
        constant_inputs: graph inputs to bind to fixed values (they become constants).

    Returns:
        A `Graph` whose outputs are the model's outputs, with inferred static types, then its
        run-time index checks (`runtime.checks`, named `tf.check:...`).

    Raises:
        OnnxImportError: malformed file, opset unknown to onnx (1 to 12 are upgraded to 13
            first, `onnx_upgrade`), a failed upgrade, symbolic dims or
            no shape, a shape mismatch, a tensor past MAX_TENSOR_BYTES, mismatched or
            disallowed input dtypes, a bad attribute (node named).
        UnsupportedOpError: listing every unsupported node (op type, node name, opset).
    """
    return _import(model, input_shapes, constant_inputs, split=False)[0]


def from_onnx_split(
    model: str | Path | bytes | onnx.ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constant_inputs: Mapping[str, np.ndarray] | None = None,
) -> tuple[Graph, Tail | None]:
    """`from_onnx` for a model whose later part has shapes known only at run time (a
    detector's box selection: NonZero, NonMaxSuppression, a Reshape to a computed shape).

    Returns:
        The static graph, and the tail (`runtime.tail.Tail`, or None when every shape is
        static): the nodes whose shapes depend on run-time values, with every node that reads
        their results (`onnx_tail`). The graph's outputs are the model's outputs it computes,
        then the values the tail reads, then its run-time checks; `tail.outputs` lists the
        model's outputs in order. `tensorforge.compile` compiles the graph and runs the tail
        after it (`Module.tail`).

    Raises:
        As `from_onnx`, except for a node whose shape depends on run-time values (inside an
        If's branch or a run-time Loop's body too): that node goes into the tail. A sequence
        or optional value the tail would read is refused by name (UnsupportedOpError).
    """
    return _import(model, input_shapes, constant_inputs, split=True)


def evaluate_onnx(
    model: str | Path | bytes | onnx.ModelProto, inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Run `model` on `inputs` with the graph layer's reference ops (numpy), node by node as
    it is imported: every value is computed as soon as its node is read, so a shape that
    depends on values (NonZero, NonMaxSuppression, a Reshape to a computed shape) is known
    when a later node needs it. This runs a data-dependent tail (`runtime.tail`).

    Returns:
        The model's outputs, name -> array.

    Raises:
        As `from_onnx`; CheckFailed (an IndexError) for an index outside its axis.
    """
    graph = _import(model, None, inputs, split=False, evaluate=True)[0]
    return run_graph(graph, {})  # (any node left: one the import does not fold, a run-time Loop)


def _import(
    model: str | Path | bytes | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None,
    constant_inputs: Mapping[str, np.ndarray] | None,
    split: bool,
    evaluate: bool = False,
) -> tuple[Graph, Tail | None]:
    proto, where, weights = read_model(model)
    try:
        if proto.functions:  # model-local functions (exporters' modules): inlined, as by ORT
            proto = _inline_functions(proto, where)
        proto = sort_nodes(proto)  # out of order as graph tools leave them: sorted
        proto = rewrite_masked_assignments(proto)  # x[mask] = v: a Where, not NonZero
        proto = drop_unread_outputs(proto)  # exporters' unread Dropout masks, MaxPool indices
        proto = drop_false_training_modes(proto)  # Dropout(x, ratio, false): inference
        opset = default_opset(proto, where)
        if opset < MIN_OPSET:  # the converter rewrites initializers: read the model whole
            if weights is not None:
                weights.close()
                proto, where, weights = read_model(model, in_place=False)
            proto, opset = upgrade(proto, where, opset, MIN_OPSET), MIN_OPSET
        missing = unsupported_ops(proto, opset)
        if missing:
            raise UnsupportedOpError(missing, where=where)
        _check_input_shapes(input_shapes, proto, where)
        importer = _Importer(proto, where, opset, weights)
        importer.evaluate = evaluate
        importer.add_inputs(constant_inputs or {}, input_shapes or {})
    finally:
        if weights is not None:
            weights.close()
    tail = TailSplit()
    for index, node in enumerate(proto.graph.node):
        name = node.name or f"{node.op_type}_{index}"
        if tail.reads_tail(node) or (split and beyond_lowering(node, importer)):
            tail.add(node, name)
            continue
        mark = TailSplit.mark(importer) if split else ()
        try:
            importer.convert(index, node)
        except GraphError as exc:
            if split and isinstance(exc, DataDependentShapeError):
                TailSplit.undo(importer, mark)
                tail.add(node, name)
                continue
            if getattr(exc, "refusal", None) is not None:  # (a run-time Loop's body's)
                raise exc.refusal from None
            if node.op_type in DATA_DEPENDENT_SHAPE_OPS and "decides the output shape" in str(exc):
                items = _data_dependent_nodes(proto, index, opset)
                raise UnsupportedOpError(items, where=where) from None
            raise OnnxImportError(f"{where}: {exc}") from None
        except UnsupportedOpError as exc:  # a variant the op's type inference refused
            items = [(op, name, opset if v is None else v) for op, name, v in exc.items]
            raise UnsupportedOpError(items, where=where) from None
    if not tail:
        outputs = importer.distinct_outputs()
        graph = importer.builder.build([*outputs, *importer.checks])
        importer.check_outputs(graph, outputs)
        return graph, None
    boundary = tail_boundary(tail, importer)
    static = [v for v in proto.graph.output if v.name not in tail.dynamic]
    outputs = importer.distinct_outputs(static)
    dynamic = [v.name for v in proto.graph.output if v.name in tail.dynamic]
    if len(set(dynamic)) != len(dynamic):
        importer.refuse("an output whose shape is known only at run time, listed twice",
                        tail.names[0])  # fmt: skip
    computed = iter(outputs)
    order = [v.name if v.name in tail.dynamic else next(computed) for v in proto.graph.output]
    given = {*importer.builder.constants, *importer.builder.inputs, *outputs}  # (without a copy)
    read = [b for b in boundary if b not in given]
    graph = importer.builder.build([*outputs, *read, *importer.checks])
    importer.check_outputs(graph, outputs, static)
    return graph, build_tail(tail, importer, boundary, order)


def _data_dependent_nodes(
    proto: onnx.ModelProto, first: int, opset: int
) -> list[tuple[str, str, int | None]]:
    """The node at `first`, whose output shape would depend on run-time values (NonZero of a
    computed mask, ...), and every later node of those ops whose inputs are not all weights:
    one error that names them all and says why (a detector's box selection has hundreds)."""
    weights = {t.name for t in proto.graph.initializer}
    items = []
    for i, node in enumerate(proto.graph.node[first:], start=first):
        if node.op_type not in DATA_DEPENDENT_SHAPE_OPS:
            continue
        if i > first and all(not name or name in weights for name in node.input):
            continue
        items.append((node.op_type, node.name or f"{node.op_type}_{i}", opset))
    return items


def _check_input_shapes(input_shapes: Any, proto: onnx.ModelProto, where: str) -> None:
    """`input_shapes` must map names of the model's inputs (a typo would be ignored)."""
    if input_shapes is None:
        return
    if not isinstance(input_shapes, Mapping):
        raise OnnxImportError(f"{where}: input_shapes must map input names to shapes, not "
                              f"{type(input_shapes).__name__} {input_shapes!r:.60}")  # fmt: skip
    names = [i.name for i in proto.graph.input]
    unknown = sorted(str(k) for k in input_shapes if k not in names)
    if unknown:
        raise OnnxImportError(f"{where}: input_shapes names {unknown}, which the model does not "
                              f"take; its inputs are {names}")  # fmt: skip


def graph_inputs(model: str | Path | bytes | onnx.ModelProto) -> dict[str, list[int | None] | None]:
    """The model's inputs that are not weights, name -> dims (a symbolic dimension is None; an
    input without a shape is None), read without the weights' bytes: what a caller needs to
    name --input arrays and --shape dims before `from_onnx` reads the same file.

    Raises:
        OnnxImportError: as `from_onnx`, for a file that is missing, empty or not ONNX.
    """
    proto, _, weights = read_model(model)
    if weights is not None:
        weights.close()
    initializers = {t.name for t in proto.graph.initializer}
    out: dict[str, list[int | None] | None] = {}
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        out[value.name] = dims if tensor.HasField("shape") else None
    return out


__all__ = [
    "OnnxImportError",
    "UnsupportedDtypeError",
    "UnsupportedOpError",
    "evaluate_onnx",
    "from_onnx",
    "from_onnx_split",
    "graph_inputs",
    "load_model",
    "read_model",
]
