"""onnxruntime's blockwise weight-only quantized ops (`com.microsoft` domain), as
`onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer` and onnxruntime-genai's
model builder write them into decoder LLMs: MatMulNBits (a MatMul by 2-, 4- or 8-bit weights
quantized in blocks along K) and GatherBlockQuantized with packed uint8 data (a quantized
embedding table, rows gathered, blocks along the columns; int4/uint4 data, which
MatMulNBitsQuantizer writes for a Gather, is refused by name: the graph has no 4-bit dtype).

Composites: the weights are unpacked (low bits first), less their zero points, times their
scales, with ops the back-ends compile (BitShift, BitwiseAnd, Cast, Sub, Mul), then MatMul or
Gather. With constant weights (every quantizer's output) constant folding dequantizes them at
compile time into float weights for the dense kernels: fast, but the compiled module holds the
weights in float32, 8 times the bytes of 4-bit ones. onnxruntime's `accuracy_level` 4
(A quantized to int8 per block inside its kernel) is computed in float here: the results
differ from onnxruntime's by A's int8 rounding. The deprecated `g_idx` input is refused by
name.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import REQUIRED, Pattern, register
from .contrib import MS, refuse
from .emit import Emitter

_BITS = (2, 4, 8)


def _check_bits(op: str, bits: int, block: int, zero_block_ok: bool = False) -> None:
    if bits not in _BITS:
        raise refuse(op, f"with bits={bits} (built: {', '.join(map(str, _BITS))})")
    if not (zero_block_ok and block == 0) and (block < 16 or block & (block - 1)):
        raise ValueError(f"{MS}{op} block_size must be a power of 2 of at least 16, not {block}")


# ---- unpacking -------------------------------------------------------------------------------


def _unpack_np(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 [..., n] -> uint8 [..., n * 8 / bits], the low bits of each byte first."""
    if bits == 8:
        return packed
    mask = (1 << bits) - 1
    parts = [(packed >> (bits * i)) & mask for i in range(8 // bits)]
    return np.stack(parts, axis=-1).reshape(*packed.shape[:-1], -1)


def _unpack(e: Emitter, packed: str, bits: int) -> str:
    """`_unpack_np` as graph ops."""
    if bits == 8:
        return packed
    shape = e.shape(packed)
    mask = e.const((1 << bits) - 1, "mask", "uint8")
    parts = []
    for i in range(8 // bits):
        shifted = packed
        if i:
            amount = e.const(bits * i, "shift", "uint8")
            shifted = e.add("BitShift", [packed, amount], {"direction": "RIGHT"})
        parts.append(e.add("BitwiseAnd", [shifted, mask]))
    return e.reshape(e.stack(parts, len(shape)), (*shape[:-1], shape[-1] * (8 // bits)))


def _dequantize_np(codes: np.ndarray, scales: np.ndarray, zp: Any, bits: int) -> np.ndarray:
    """float64 [rows, blocks * block] of uint8 `codes` [rows, blocks, block]: (code - zero
    point) * scale per block; `zp` packed uint8 rows, float, or None (`2^(bits-1)`)."""
    rows, blocks, _ = codes.shape
    if zp is None:
        z = np.full((rows, blocks, 1), 2.0 ** (bits - 1))
    elif zp.dtype == np.uint8:
        z = _unpack_np(zp.reshape(rows, -1), bits)[:, :blocks, None].astype(np.float64)
    else:
        z = zp.reshape(rows, blocks, 1).astype(np.float64)
    w = (codes.astype(np.float64) - z) * scales.reshape(rows, blocks, 1)
    return w.reshape(rows, -1)


def _dequantize(e: Emitter, codes: str, scales: str, zp: str, bits: int, dtype: str) -> str:
    """`_dequantize_np` as graph ops, in `dtype`."""
    rows, blocks, block = e.shape(codes)
    codes = e.add("Cast", [codes], {"to": dtype})
    if not zp:
        zero = e.const(2.0 ** (bits - 1), "zero_point", dtype)
    elif e.dtype(zp) == "uint8":
        per_row = e.reshape(zp, (rows, math.prod(e.shape(zp)) // rows))
        zero = e.slice(_unpack(e, per_row, bits), 1, 0, blocks)
        zero = e.reshape(e.add("Cast", [zero], {"to": dtype}), (rows, blocks, 1))
    else:
        zero = e.reshape(zp, (rows, blocks, 1))
    w = e.add("Mul", [e.add("Sub", [codes, zero]), e.reshape(scales, (rows, blocks, 1))])
    return e.reshape(w, (rows, blocks * block))


# ---- MatMulNBits -----------------------------------------------------------------------------

_NBITS = MS + "MatMulNBits"
_NBITS_ATTRS = {
    "K": REQUIRED,
    "N": REQUIRED,
    "bits": 4,
    "block_size": REQUIRED,
    "accuracy_level": 0,
    "weight_prepacked": 0,
}


def _nbits_layout(attrs: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(K, N, bits, block size, blocks per column) of a MatMulNBits node."""
    k, n, bits, block = attrs["K"], attrs["N"], attrs["bits"], attrs["block_size"]
    _check_bits("MatMulNBits", bits, block)
    if k < 1 or n < 1:
        raise ValueError(f"{_NBITS} K and N must be positive, not {k} and {n}")
    return k, n, bits, block, -(-k // block)


def _nbits_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    a, b, scales = types[:3]
    zp, g_idx, bias = (*types[3:], None, None, None)[:3]
    if attrs["weight_prepacked"]:
        raise refuse("MatMulNBits", f"with weight_prepacked={attrs['weight_prepacked']}")
    if g_idx is not None:
        raise refuse("MatMulNBits", "with g_idx (deprecated: act-order weights)")
    k, n, bits, block, blocks = _nbits_layout(attrs)
    if not np.issubdtype(np.dtype(a.dtype), np.floating):
        raise ValueError(f"{_NBITS} A must be a floating-point tensor, not {a.dtype}")
    if not a.shape or a.shape[-1] != k:
        raise ValueError(f"{_NBITS} A must have K={k} as its last dim, not shape {a.shape}")
    want = (n, blocks, block * bits // 8)
    if b.dtype != "uint8" or b.shape != want:
        raise ValueError(f"{_NBITS} B must be uint8 of shape {want}, not {b.dtype} {b.shape}")
    if scales.dtype != a.dtype or scales.shape not in ((n, blocks), (n * blocks,)):
        raise ValueError(
            f"{_NBITS} scales must be {a.dtype} of shape ({n}, {blocks}), not "
            f"{scales.dtype} {scales.shape}"
        )
    if zp is not None:
        packed = (n, -(-blocks * bits // 8))
        ok = (zp.dtype == "uint8" and zp.shape in (packed, (packed[0] * packed[1],))) or (
            zp.dtype == a.dtype and zp.shape in ((n, blocks), (n * blocks,))
        )
        if not ok:
            raise ValueError(
                f"{_NBITS} zero_points must be uint8 of shape {packed} or {a.dtype} of shape "
                f"({n}, {blocks}), not {zp.dtype} {zp.shape}"
            )
    if bias is not None and bias.shape != (n,):
        raise ValueError(f"{_NBITS} bias must have shape ({n},), not {bias.shape}")
    return [TensorType((*a.shape[:-1], n), a.dtype)]


def _nbits_weights_np(attrs: dict[str, Any], b: np.ndarray, scales: np.ndarray, zp: Any) -> Any:
    """The dequantized weights [K, N] in float64."""
    k, n, bits, block, blocks = _nbits_layout(attrs)
    codes = _unpack_np(b, bits).reshape(n, blocks, block)
    return _dequantize_np(codes, scales, zp, bits)[:, :k].T


def _matmul_nbits(
    attrs: dict[str, Any], a: np.ndarray, b: np.ndarray, scales: np.ndarray, *rest: Any
) -> np.ndarray:
    zp, _, bias = (*rest, None, None, None)[:3]
    y = a.astype(np.float64) @ _nbits_weights_np(attrs, b, scales, zp)
    if bias is not None:
        y = y + bias
    return y.astype(a.dtype)


def _expand_nbits(b: GraphBuilder, node: Node) -> None:
    """Unpack B to [N, blocks, block] codes, dequantize per block, cut the padding past K,
    transpose to [K, N]; MatMul and the bias."""
    e = Emitter(b, node)
    a, packed, scales = node.inputs[:3]
    zp, _, bias = (*node.inputs[3:], "", "", "")[:3]
    k, n, bits, block, blocks = _nbits_layout(node.attr_dict)
    codes = e.reshape(_unpack(e, packed, bits), (n, blocks, block))
    w = e.slice(_dequantize(e, codes, scales, zp, bits, e.dtype(a)), 1, 0, k)
    y = e.add("MatMul", [a, e.transpose(w, (1, 0))], outputs=None if bias else [node.outputs[0]])
    if bias:
        e.add("Add", [y, bias], outputs=[node.outputs[0]])


register(
    _NBITS,
    Pattern.OUT_ELEMWISE_FUSABLE,
    _nbits_type,
    _matmul_nbits,
    inputs=(3, 6),
    attrs=_NBITS_ATTRS,
    expand=_expand_nbits,
)


# ---- GatherBlockQuantized --------------------------------------------------------------------

_GATHER = MS + "GatherBlockQuantized"
_GATHER_ATTRS = {"bits": 4, "block_size": 128, "gather_axis": 0, "quantize_axis": 1}


def _gather_layout(attrs: dict[str, Any], data: tuple, scales: tuple) -> tuple[int, int, int]:
    """(bits, block size, unpacked columns) of a GatherBlockQuantized of uint8 `data`
    [rows, packed columns], as the model builder writes quantized (tied) embeddings."""
    bits, block = attrs["bits"], attrs["block_size"]
    _check_bits("GatherBlockQuantized", bits, block)
    if len(data) != 2 or attrs["gather_axis"] % 2 != 0 or attrs["quantize_axis"] % 2 != 1:
        raise refuse(
            "GatherBlockQuantized",
            f"with {len(data)}-D data, gather_axis={attrs['gather_axis']}, quantize_axis="
            f"{attrs['quantize_axis']} (built: 2-D data, rows gathered, blocks along the columns)",
        )
    cols = data[1] * (8 // bits)
    want = (data[0], -(-cols // block))
    if scales != want:
        raise ValueError(f"{_GATHER} scales must have shape {want}, not {scales}")
    return bits, block, cols


def _gather_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    data, indices, scales = types[:3]
    zp = types[3] if len(types) > 3 else None
    if data.dtype != "uint8":
        raise refuse("GatherBlockQuantized", f"with {data.dtype} data (built: packed uint8)")
    _, _, cols = _gather_layout(attrs, data.shape, scales.shape)
    if not np.issubdtype(np.dtype(scales.dtype), np.floating):
        raise ValueError(f"{_GATHER} scales must be floating-point, not {scales.dtype}")
    if indices.dtype not in ("int32", "int64"):
        raise ValueError(f"{_GATHER} indices must be int32 or int64, not {indices.dtype}")
    if zp is not None and (zp.dtype != "uint8" or zp.shape[0] != data.shape[0]):
        raise ValueError(f"{_GATHER} zero_points must be uint8 with the data's rows, not {zp}")
    return [TensorType((*indices.shape, cols), scales.dtype)]


def _gather_np(attrs: dict[str, Any], data: np.ndarray, indices: np.ndarray, scales: np.ndarray,
               zp: Any = None) -> np.ndarray:  # fmt: skip
    bits, block, cols = _gather_layout(attrs, data.shape, scales.shape)
    rows, blocks = scales.shape
    codes = np.pad(_unpack_np(data, bits), ((0, 0), (0, blocks * block - cols)))
    table = _dequantize_np(codes.reshape(rows, blocks, block), scales, zp, bits)[:, :cols]
    return table[indices].astype(scales.dtype)


def _expand_gather(b: GraphBuilder, node: Node) -> None:
    """Dequantize the whole table (folded at compile time for a constant one), then Gather."""
    e = Emitter(b, node)
    data, indices, scales = node.inputs[:3]
    zp = node.inputs[3] if len(node.inputs) > 3 else ""
    bits, block, cols = _gather_layout(node.attr_dict, e.shape(data), e.shape(scales))
    rows, blocks = e.shape(scales)
    codes = _unpack(e, data, bits)
    if blocks * block > cols:
        pads = e.ints([0, 0, 0, blocks * block - cols], "pads")
        codes = e.add("Pad", [codes, pads])
    codes = e.reshape(codes, (rows, blocks, block))
    table = e.slice(_dequantize(e, codes, scales, zp, bits, e.dtype(scales)), 1, 0, cols)
    e.add("Gather", [table, indices], {"axis": 0}, outputs=[node.outputs[0]])


register(
    _GATHER,
    Pattern.INJECTIVE,
    _gather_type,
    _gather_np,
    inputs=(3, 4),
    attrs=_GATHER_ATTRS,
    expand=_expand_gather,
)

__all__: list[str] = []
