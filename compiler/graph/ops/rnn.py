"""The recurrent ops LSTM, GRU and RNN (ONNX semantics: gate orders iofc / zrh, forward, reverse
or bidirectional, either layout, biases, initial states, LSTM peepholes, clip, the Sigmoid /
Tanh / Relu activations), with a numpy reference and an expansion (`passes.expand_composites`)
that unrolls the sequence, which the graph's shapes make static, into MatMul and element-wise
ops: one MatMul of the whole input sequence by W (its bias folded in), then per time step one
MatMul of the hidden state by R and the gates' element-wise arithmetic, which fusion merges
into a few kernels a step.

`sequence_lens` (variable-length batches) masks each step: an entry whose length a step is past
keeps its state and outputs zeros there (in reverse, its recurrence starts at its own last
element). Refused by name (a `GraphError` at import): LSTM's `input_forget` and activation
functions other than Sigmoid, Tanh and Relu.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, get_op, register
from .emit import Emitter

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
_NUMPY_ACTS = {
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Tanh": np.tanh,
    "Relu": lambda x: np.maximum(x, 0.0),
}
_ATTRS: dict[str, Any] = {
    "activation_alpha": None,
    "activation_beta": None,
    "activations": None,
    "clip": None,
    "direction": "forward",
    "hidden_size": None,
    "layout": 0,
}


def _directions(attrs: dict[str, Any]) -> int:
    direction = attrs["direction"]
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"direction must be forward, reverse or bidirectional, not {direction!r}")
    return 2 if direction == "bidirectional" else 1


def _activations(kind: str, attrs: dict[str, Any], dirs: int) -> list[tuple[str, ...]]:
    """The activation names of each direction."""
    default = DEFAULT_ACTS[kind]
    acts = tuple(attrs["activations"] or default * dirs)
    if len(acts) != len(default) * dirs:
        raise ValueError(
            f"activations must name {len(default) * dirs} functions, not {len(acts)}: {acts}"
        )
    bad = sorted({a for a in acts if a not in _NUMPY_ACTS})
    if bad or attrs["activation_alpha"] or attrs["activation_beta"]:
        raise ValueError(
            f"activations must be among {sorted(_NUMPY_ACTS)} without alpha/beta, not {bad or acts}"
        )
    n = len(default)
    return [acts[d * n : (d + 1) * n] for d in range(dirs)]


def _geometry(kind: str, attrs: dict[str, Any], types: list, consts: list) -> dict[str, int]:
    """Sequence, batch, input and hidden sizes and directions, every input's shape checked."""
    dirs = _directions(attrs)
    _activations(kind, attrs, dirs)
    if kind == "LSTM" and attrs.get("input_forget"):
        raise ValueError("input_forget=1 (coupled input and forget gates) is not supported")
    x, w, r = (t.shape for t in types[:3])
    if len(x) != 3:
        raise ValueError(f"X must have rank 3, not shape {x}")
    seq, batch = (x[1], x[0]) if attrs["layout"] else (x[0], x[1])
    g = GATES[kind]
    hidden = attrs["hidden_size"] or (r[-1] if len(r) == 3 else 0)
    want = {
        "W": (dirs, g * hidden, x[2]),
        "R": (dirs, g * hidden, hidden),
        "B": (dirs, 2 * g * hidden),
        "initial_h": (batch, dirs, hidden) if attrs["layout"] else (dirs, batch, hidden),
        "initial_c": (batch, dirs, hidden) if attrs["layout"] else (dirs, batch, hidden),
        "P": (dirs, 3 * hidden),
    }
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h"]
    names += ["initial_c", "P"] if kind == "LSTM" else []
    for name, ty in zip(names, types, strict=False):
        if ty is not None and name in want and ty.shape != want[name]:
            raise ValueError(f"{name} must have shape {want[name]}, not {ty.shape}")
    if len(types) > 4 and types[4] is not None and types[4].shape != (batch,):
        raise ValueError(f"sequence_lens must have shape ({batch},), not {types[4].shape}")
    return {"seq": seq, "batch": batch, "input": x[2], "hidden": hidden, "dirs": dirs}


def _infer(kind: str):
    def infer(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
        geo = _geometry(kind, attrs, types, consts)
        seq, batch, hidden, dirs = geo["seq"], geo["batch"], geo["hidden"], geo["dirs"]
        dtype = types[0].dtype
        if attrs["layout"]:
            y, state = (batch, seq, dirs, hidden), (batch, dirs, hidden)
        else:
            y, state = (seq, dirs, batch, hidden), (dirs, batch, hidden)
        outs = [TensorType(y, dtype), TensorType(state, dtype)]
        return outs + [TensorType(state, dtype)] if kind == "LSTM" else outs

    return infer


def _reference(kind: str):
    """The recurrence in float64, step by step, as the ONNX operator's equations state it."""

    def compute(attrs: dict[str, Any], x, w, r, b=None, lens=None, h0=None, c0=None, p=None):
        dirs = _directions(attrs)
        acts = _activations(kind, attrs, dirs)
        dtype = x.dtype
        f64 = [None if a is None else a.astype(np.float64) for a in (x, w, r, b, h0, c0, p)]
        x, w, r, b, h0, c0, p = f64
        if attrs["layout"]:
            x = x.transpose(1, 0, 2)
            h0 = None if h0 is None else h0.transpose(1, 0, 2)
            c0 = None if c0 is None else c0.transpose(1, 0, 2)
        seq, batch = x.shape[:2]
        hidden = r.shape[-1]
        lens = np.full(batch, seq) if lens is None else lens.astype(np.int64)
        g = GATES[kind]
        clip = attrs["clip"]
        ys, hs, cs = [], [], []
        for d in range(dirs):
            fa, *rest = (_NUMPY_ACTS[a] for a in acts[d])
            wb = b[d, : g * hidden] if b is not None else np.zeros(g * hidden)
            rb = b[d, g * hidden :] if b is not None else np.zeros(g * hidden)
            h = h0[d] if h0 is not None else np.zeros((batch, hidden))
            c = c0[d] if c0 is not None else np.zeros((batch, hidden))
            pi, po, pf = p[d].reshape(3, hidden) if p is not None else np.zeros((3, hidden))
            reverse = attrs["direction"] == "reverse" or d == 1
            y = np.zeros((seq, batch, hidden))
            for t in range(seq - 1, -1, -1) if reverse else range(seq):
                h_prev, c_prev = h, c
                xw = x[t] @ w[d].T + wb
                hr = h @ r[d].T + rb

                def cut(v: np.ndarray, k: int) -> np.ndarray:
                    part = v[:, k * hidden : (k + 1) * hidden]
                    return np.clip(part, -clip, clip) if clip is not None else part

                if kind == "LSTM":
                    ga, ha = rest
                    pre = xw + hr
                    i = fa(cut(pre + np.tile(pi * c, (1, 4)), 0))
                    f = fa(cut(pre + np.tile(pf * c, (1, 4)), 2))
                    cc = ga(cut(pre, 3))
                    c = f * c + i * cc
                    o = fa(cut(pre + np.tile(po * c, (1, 4)), 1))
                    h = o * ha(c)
                elif kind == "GRU":
                    (ga,) = rest
                    z = fa(cut(xw + hr, 0))
                    rr = fa(cut(xw + hr, 1))
                    if attrs["linear_before_reset"]:
                        ht = ga(cut(xw + np.tile(rr, (1, 3)) * hr, 2))
                    else:
                        rh = (rr * h) @ r[d][2 * hidden :].T + rb[2 * hidden :]
                        ht = ga(cut(xw + np.tile(rh, (1, 3)), 2))
                    h = (1.0 - z) * ht + z * h
                else:
                    h = fa(cut(xw + hr, 0))
                live = (t < lens)[:, None]  # entries whose sequence reaches step t
                h, c = np.where(live, h, h_prev), np.where(live, c, c_prev)
                y[t] = np.where(live, h, 0.0)
            ys.append(y)
            hs.append(h)
            cs.append(c)
        y, yh, yc = np.stack(ys, 1), np.stack(hs), np.stack(cs)
        if attrs["layout"]:
            y, yh, yc = y.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
        outs = tuple(np.ascontiguousarray(a.astype(dtype)) for a in (y, yh, yc))
        return outs if kind == "LSTM" else outs[:2]

    return compute


class _Unroll(Emitter):
    def act(self, name: str, value: str) -> str:
        return self.add(name, [value])

    def clipped(self, value: str, clip: float | None) -> str:
        if clip is None:
            return value
        dt = self.dtype(value)
        lo, hi = self.const(-clip, "clip_lo", dt), self.const(clip, "clip_hi", dt)
        return self.add("Clip", [value, lo, hi])

    def gate(self, value: str, k: int, hidden: int, clip: float | None) -> str:
        return self.clipped(self.slice(value, 1, k * hidden, (k + 1) * hidden), clip)

    def binary(self, op: str, a: str, b: str) -> str:
        return self.add(op, [a, b])

    def live(self, lens: str, t: int, batch: int) -> str:
        """`[batch, 1]` booleans: whether each entry's sequence reaches step `t`."""
        step = self.const(t, "step", self.dtype(lens))
        return self.reshape(self.add("Less", [step, lens]), [batch, 1])

    def emit(self, kind: str) -> None:
        node = self.node
        attrs = get_op(kind).full_attrs(node)
        ins = list(node.inputs) + [""] * (8 - len(node.inputs))
        types = [self.b.types[n] if n else None for n in ins]
        consts = [self.b.constants.get(n) if n else None for n in ins]
        geo = _geometry(kind, attrs, [t for t in types[: len(node.inputs)]], consts)
        seq, batch, hidden, dirs = geo["seq"], geo["batch"], geo["hidden"], geo["dirs"]
        acts = _activations(kind, attrs, dirs)
        g, clip, dt = GATES[kind], attrs["clip"], types[0].dtype
        x, w, r, b, lens, h0, c0, p = ins
        if lens and lens in self.b.constants and np.all(self.b.constants[lens] == seq):
            lens = ""  # every entry runs the whole sequence: no masks
        if attrs["layout"]:
            x = self.transpose(x, [1, 0, 2])
            h0 = self.transpose(h0, [1, 0, 2]) if h0 else ""
            c0 = self.transpose(c0, [1, 0, 2]) if c0 else ""
        flat = self.reshape(x, [seq * batch, geo["input"]])
        ys, hs, cs = [], [], []
        for d in range(dirs):
            fa, *rest = acts[d]
            wt = self.transpose(self.take(w, 0, d), [1, 0])  # [input, g * hidden]
            rt = self.transpose(self.take(r, 0, d), [1, 0])  # [hidden, g * hidden]
            xw = self.add("MatMul", [flat, wt])
            rb = ""
            if b:
                bd = self.take(b, 0, d)
                wb, rb = (
                    self.slice(bd, 0, 0, g * hidden),
                    self.slice(bd, 0, g * hidden, 2 * g * hidden),
                )
                if kind != "GRU":  # both biases before the gates; GRU's rb_h sits inside
                    wb, rb = self.binary("Add", wb, rb), ""
                xw = self.binary("Add", xw, wb)
            xw = self.reshape(xw, [seq, batch, g * hidden])
            zeros = np.zeros((batch, hidden), dt)
            h = self.take(h0, 0, d) if h0 else self.const(zeros, "h0")
            c = self.take(c0, 0, d) if c0 else self.const(zeros, "c0")
            peep = (
                [self.slice(self.take(p, 0, d), 0, k * hidden, (k + 1) * hidden) for k in range(3)]
                if p
                else []
            )
            reverse = attrs["direction"] == "reverse" or d == 1
            steps: dict[int, str] = {}
            xts = self.unstack(xw, 0)  # each step's kernels the same code, reading its own xt
            for t in range(seq - 1, -1, -1) if reverse else range(seq):
                h_prev, c_prev = h, c
                xt = xts[t]
                hr = self.add("MatMul", [h, rt])
                if rb:
                    hr = self.binary("Add", hr, rb)
                if kind == "LSTM":
                    ga, ha = rest
                    pre = self.binary("Add", xt, hr)
                    i_in, o_in = self.gate(pre, 0, hidden, None), self.gate(pre, 1, hidden, None)
                    f_in, c_in = self.gate(pre, 2, hidden, None), self.gate(pre, 3, hidden, None)
                    if peep:
                        i_in = self.binary("Add", i_in, self.binary("Mul", peep[0], c))
                        f_in = self.binary("Add", f_in, self.binary("Mul", peep[2], c))
                    i = self.act(fa, self.clipped(i_in, clip))
                    f = self.act(fa, self.clipped(f_in, clip))
                    cc = self.act(ga, self.clipped(c_in, clip))
                    c = self.binary("Add", self.binary("Mul", f, c), self.binary("Mul", i, cc))
                    if peep:
                        o_in = self.binary("Add", o_in, self.binary("Mul", peep[1], c))
                    o = self.act(fa, self.clipped(o_in, clip))
                    h = self.binary("Mul", o, self.act(ha, c))
                elif kind == "GRU":
                    (ga,) = rest
                    pre = self.binary("Add", xt, hr)
                    z = self.act(fa, self.gate(pre, 0, hidden, clip))
                    rr = self.act(fa, self.gate(pre, 1, hidden, clip))
                    xh = self.gate(xt, 2, hidden, None)
                    if attrs["linear_before_reset"]:
                        inner = self.binary("Mul", rr, self.gate(hr, 2, hidden, None))
                    else:
                        rh_t = self.slice(rt, 1, 2 * hidden, 3 * hidden)
                        inner = self.add("MatMul", [self.binary("Mul", rr, h), rh_t])
                        if rb:
                            inner = self.binary(
                                "Add", inner, self.slice(rb, 0, 2 * hidden, 3 * hidden)
                            )
                    ht = self.act(ga, self.clipped(self.binary("Add", xh, inner), clip))
                    # (1 - z) * ht + z * h, as ht + z * (h - ht)
                    h = self.binary("Add", ht, self.binary("Mul", z, self.binary("Sub", h, ht)))
                else:
                    h = self.act(fa, self.clipped(self.binary("Add", xt, hr), clip))
                if lens:  # entries past their length keep their state and output zeros
                    live = self.live(lens, t, batch)
                    h = self.add("Where", [live, h, h_prev])
                    c = self.add("Where", [live, c, c_prev]) if kind == "LSTM" else c
                    steps[t] = self.add("Where", [live, h, self.const(zeros, "zeros")])
                    continue
                steps[t] = h
            ys.append(self.stack([steps[t] for t in range(seq)], 0))  # [seq, batch, hidden]
            hs.append(h)
            cs.append(c)
        y, yh, yc = self.stack(ys, 1), self.stack(hs, 0), self.stack(cs, 0)
        if attrs["layout"]:
            y = self.transpose(y, [2, 0, 1, 3])
            yh, yc = self.transpose(yh, [1, 0, 2]), self.transpose(yc, [1, 0, 2])
        for name, value in zip(node.outputs, (y, yh, yc), strict=False):
            if name:
                self.rename(value, name)


def _expand(kind: str):
    def expand(b: GraphBuilder, node: Node) -> None:
        _Unroll(b, node).emit(kind)

    return expand


for _kind, _extra, _n_in in (
    ("LSTM", {"input_forget": 0}, 8),
    ("GRU", {"linear_before_reset": 0}, 6),
    ("RNN", {}, 6),
):
    register(
        _kind,
        Pattern.OPAQUE,
        _infer(_kind),
        _reference(_kind),
        inputs=(3, _n_in),
        outputs=(0, 3 if _kind == "LSTM" else 2),
        attrs={**_ATTRS, **_extra},
        expand=_expand(_kind),
    )

__all__ = ["DEFAULT_ACTS", "GATES"]
