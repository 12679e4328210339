"""Loop-IR passes (before/expected), the printer's golden form, and the verifier."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.te.expr import BinOp, Op
from tensorforge.compiler.tir import (
    Allocate,
    Buffer,
    BufferLoad,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    VerifyError,
)


def _tiled_matmul():
    A = te.placeholder((10, 8), "float32", name="A")
    B = te.placeholder((8, 12), "float32", name="B")
    k = te.reduce_axis((0, 8), "k")
    C = te.compute((10, 12), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(xo, yo, ko, xi, ki, yi)
    return s, [A, B, C]


GOLDEN_RAW = """\
func matmul(A: float32[10, 8], B: float32[8, 12], C: float32[10, 12]) {
  for i.outer in range(3) {
    for j.outer in range(3) {
      for i.inner in range(4) {
        for j.inner in range(4) {
          if i.outer*4 + i.inner < 10 {
            C[i.outer*4 + i.inner, j.outer*4 + j.inner] = 0.0f
          }
        }
      }
      for k.outer in range(2) {
        for i.inner in range(4) {
          for k.inner in range(4) {
            for j.inner in range(4) {
              if i.outer*4 + i.inner < 10 {
                C[i.outer*4 + i.inner, j.outer*4 + j.inner] = C[i.outer*4 + i.inner, j.outer*4 + j.inner] + A[i.outer*4 + i.inner, k.outer*4 + k.inner]*B[k.outer*4 + k.inner, j.outer*4 + j.inner]
              }
            }
          }
        }
      }
    }
  }
}"""  # noqa: E501

GOLDEN_LOWERED = """\
func matmul(A: float32[80], B: float32[96], C: float32[120]) {
  for i.outer in range(2) {
    for j.outer in range(3) {
      for i.inner in range(4) {
        for j.inner in range(4) {
          C[i.outer*48 + i.inner*12 + j.outer*4 + j.inner] = 0.0f
        }
      }
      for k.outer in range(2) {
        for i.inner in range(4) {
          for k.inner in range(4) {
            for j.inner in range(4) {
              C[i.outer*48 + i.inner*12 + j.outer*4 + j.inner] = C[i.outer*48 + i.inner*12 + j.outer*4 + j.inner] + A[i.outer*32 + i.inner*8 + k.outer*4 + k.inner]*B[k.outer*48 + k.inner*12 + j.outer*4 + j.inner]
            }
          }
        }
      }
    }
  }
  for j.outer in range(3) {
    for i.inner in range(2) {
      for j.inner in range(4) {
        C[i.inner*12 + j.outer*4 + j.inner + 96] = 0.0f
      }
    }
    for k.outer in range(2) {
      for i.inner in range(2) {
        for k.inner in range(4) {
          for j.inner in range(4) {
            C[i.inner*12 + j.outer*4 + j.inner + 96] = C[i.inner*12 + j.outer*4 + j.inner + 96] + A[i.inner*8 + k.outer*4 + k.inner + 64]*B[k.outer*48 + k.inner*12 + j.outer*4 + j.inner]
          }
        }
      }
    }
  }
}"""  # noqa: E501


def test_tiled_matmul_prints_the_golden_loop_ir() -> None:
    s, args = _tiled_matmul()
    assert repr(tir.lower(s, args, name="matmul", passes=[])) == GOLDEN_RAW
    assert repr(tir.lower(s, args, name="matmul")) == GOLDEN_LOWERED


def test_every_pipeline_stage_preserves_results() -> None:
    s, args = _tiled_matmul()
    rng = np.random.default_rng(1)
    a = rng.random((10, 8), dtype=np.float32)
    b = rng.random((8, 12), dtype=np.float32)
    func = tir.lower(s, args, passes=[])
    for p in tir.DEFAULT_PIPELINE:
        func = p(func)
        tir.verify_func(func, p.__name__)
        c = np.zeros((10, 12), "float32")
        tir.interpret(func, [a, b, c])
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)


# ---- one hand-written before/expected per pass ------------------------------------------------

X = Buffer("X", "float32", (8,))
Y = Buffer("Y", "float32", (2, 4))


def _func(body: tir.Stmt, params=(X, Y)) -> PrimFunc:
    return PrimFunc("f", params, body, tuple(b.shape for b in params))


def _loop(var: te.Var, extent: int, body: tir.Stmt, kind: ForKind = ForKind.SERIAL) -> For:
    return For(var, te.const(0), te.const(extent), kind, body)


def _body(func: PrimFunc) -> str:
    return "\n".join(repr(func).splitlines()[1:-1])


def _expect(text: str) -> str:
    return textwrap.indent(textwrap.dedent(text).strip("\n"), "  ")


def test_simplify_folds_indices_drops_proven_guards_and_unit_loops() -> None:
    i, j = te.var("i"), te.var("j")
    store = BufferStore(Y, BufferLoad(X, ((i * 4 + j) % 8,), "float32"), ((i * 4 + j) // 4, j))
    before = _func(_loop(i, 1, _loop(j, 4, IfThenElse(i * 4 + j < 8, store))))
    assert _body(tir.simplify(before)) == _expect("""
        for j in range(4) {
          Y[0, j] = X[j]
        }""")


def test_storage_flatten_makes_buffers_one_dimensional() -> None:
    i, j = te.var("i"), te.var("j")
    before = _func(_loop(i, 2, _loop(j, 4, BufferStore(Y, te.const(0.0), (i, j)))))
    after = tir.simplify(tir.storage_flatten(before))
    assert repr(after).splitlines()[0] == "func f(X: float32[8], Y: float32[8]) {"
    assert _body(after) == _expect("""
        for i in range(2) {
          for j in range(4) {
            Y[i*4 + j] = 0.0f
          }
        }""")


def test_loop_partition_cuts_where_the_guard_starts_to_fail() -> None:
    o, n = te.var("o"), te.var("n")
    store = BufferStore(X, te.const(1.0), (o * 3 + n,))
    before = _func(_loop(o, 3, _loop(n, 3, IfThenElse(o * 3 + n < 8, store))))
    after = tir.simplify(tir.loop_partition(before))
    assert _body(after) == _expect("""
        for o in range(2) {
          for n in range(3) {
            X[o*3 + n] = 1.0f
          }
        }
        for n in range(2) {
          X[n + 6] = 1.0f
        }""")


def test_loop_partition_cuts_where_a_stored_if_then_else_switches() -> None:
    """A Concat's `if_then_else(c >= 2, b, a)`: each part of the loop reads one input."""
    c = te.var("c")
    value = te.if_then_else(c >= 2, te.const(2.0), te.const(1.0))
    before = _func(_loop(c, 5, BufferStore(X, value, (c,))))
    after = tir.simplify(tir.loop_partition(before))
    assert _body(after) == _expect("""
        for c in range(2) {
          X[c] = 1.0f
        }
        for c in range(2, 5) {
          X[c] = 2.0f
        }""")


def test_hoist_invariant_guards_unswitches_the_conjuncts_a_loop_does_not_change() -> None:
    """A tile's overrun guard (`t*2 + y < 3`) leaves the vectorized loop and the loop above
    it; the conjunct that reads the vectorized loop's variable stays inside."""
    t, y, c = te.var("t"), te.var("y"), te.var("c")
    cond = BinOp(Op.AND, t * 2 + y < 3, c < 3, "bool")
    store = BufferStore(Y, te.const(1.0), (y, c))
    body = _loop(y, 2, _loop(c, 4, IfThenElse(cond, store), ForKind.VECTORIZED))
    before = _func(_loop(t, 2, body))
    assert _body(tir.hoist_invariant_guards(before)) == _expect("""
        for t in range(2) {
          for y in range(2) {
            if t*2 + y < 3 {
              for c in range(4) vectorized {
                if c < 3 {
                  Y[y, c] = 1.0f
                }
              }
            }
          }
        }""")


def test_hoist_invariant_guards_keeps_guards_that_read_memory_or_have_an_else() -> None:
    """A condition that loads (the loop may store what it reads), an `if` with an else, and
    a parallel loop's body stay where they are."""
    i = te.var("i")
    reads = IfThenElse(BufferLoad(X, (te.const(0),), "float32") > 0.0,
                       BufferStore(X, te.const(1.0), (i,)))  # fmt: skip
    with_else = IfThenElse(te.var("n") < 3, BufferStore(X, te.const(1.0), (i,)),
                           BufferStore(X, te.const(2.0), (i,)))  # fmt: skip
    parallel = IfThenElse(te.var("n") < 3, BufferStore(X, te.const(1.0), (i,)))
    for loop in (_loop(i, 8, reads), _loop(i, 8, with_else),
                 _loop(i, 8, parallel, ForKind.PARALLEL)):  # fmt: skip
        before = _func(loop)
        assert _body(tir.hoist_invariant_guards(before)) == _body(before)


def test_hoisted_guards_keep_results_and_vectorize_a_padded_copy() -> None:
    """A 3x3 box filter per channel whose row tiles overrun the padded input (the compute_at
    copy guards the rows past its end): numpy's values in the interpreter and in native code,
    with and without the pass, and no per-element branch left in the copy's vectorized loop."""
    from tensorforge.compiler.build import build

    x = te.placeholder((2, 30, 16, 16), "float32", name="x")  # blocks, rows, columns, lanes
    pad = te.compute(
        (2, 32, 18, 16),
        lambda b, h, w, c: te.if_then_else(
            te.all_of(h >= 1, h <= 30, w >= 1, w <= 16), x[b, h - 1, w - 1, c], 0.0
        ),
        name="pad",
    )
    ry, rx = te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
    out = te.compute(
        (2, 30, 16, 16),
        lambda b, h, w, c: te.sum(pad[b, h + ry, w + rx, c], axis=[ry, rx]),
        name="out",
    )
    s = te.create_schedule(out.op)
    b, h, w, c = out.op.axis
    ho, _ = s[out].split(h, factor=8)  # 30 rows in tiles of 8: the last tile overruns
    fused = s[out].fuse(b, ho)  # as NCHWc kernels do: the guard reads fused % 4
    s[out].parallel(fused)
    s[pad].compute_at(s[out], fused)
    s[pad].vectorize(s[pad].op.axis[3])
    s[out].vectorize(c)  # fmt: skip
    xv = np.random.default_rng(0).standard_normal((2, 30, 16, 16)).astype(np.float32)
    padded = np.pad(xv, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(padded[:, a : a + 30, b : b + 16] for a in range(3) for b in range(3))
    without = [p for p in tir.DEFAULT_PIPELINE if p is not tir.hoist_invariant_guards]
    hoisted = tir.lower(s, [x, out], name="box")
    for func in (hoisted, tir.lower(s, [x, out], name="box", passes=without)):
        got = np.zeros_like(xv)
        tir.interpret(func, [xv, got])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        native = np.zeros_like(xv)
        build(func)(xv, native)
        np.testing.assert_allclose(native, want, rtol=1e-5, atol=1e-5)
    vector_loops = [n for n in tir.walk(hoisted.body)
                    if isinstance(n, For) and n.kind is ForKind.VECTORIZED]  # fmt: skip
    assert vector_loops
    assert not any(isinstance(n, IfThenElse) for v in vector_loops for n in tir.walk(v.body))
    assert any(
        isinstance(n, IfThenElse)
        for n in tir.walk(tir.lower(s, [x, out], name="box", passes=without).body)
    )  # the guard was there


def test_unroll_copies_the_body_per_iteration() -> None:
    j = te.var("j")
    before = _func(
        _loop(j, 2, BufferStore(X, BufferLoad(X, (j + 2,), "float32"), (j,)), ForKind.UNROLLED)
    )
    assert _body(tir.unroll(before)) == _expect("""
        X[0] = X[0 + 2]
        X[1] = X[1 + 2]""")


def test_remove_no_op_drops_empty_loops_self_copies_and_dead_buffers() -> None:
    i = te.var("i")
    T = Buffer("T", "float32", (4,), "local")
    before = _func(
        tir.seq(
            _loop(i, 4, IfThenElse(i < 8, tir.Evaluate(te.const(0)))),
            BufferStore(X, BufferLoad(X, (te.const(0),), "float32"), (te.const(0),)),
            Allocate(T, BufferStore(T, te.const(1.0), (te.const(0),))),
            BufferStore(X, te.const(2.0), (te.const(1),)),
        )
    )
    assert _body(tir.remove_no_op(before)) == _expect("X[1] = 2.0f")


# ---- verifier ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (BufferStore(X, te.const(1.0), (te.var("free"),)), "variable 'free' is used outside"),
        (BufferStore(X, te.const(1), (te.const(0),)), "store of 'int32' into X: float32"),
        (BufferStore(Y, te.const(1.0), (te.const(0),)), "Y has 2 dimension"),
        (
            BufferStore(Buffer("Z", "float32", (2,)), te.const(1.0), (te.const(0),)),
            "buffer 'Z' is written outside its allocation",
        ),
        (IfThenElse(te.const(1), tir.Evaluate(te.const(0))), "if condition must be bool"),
        (
            tir.Evaluate(BinOp(Op.MAX, te.const(True), te.const(False), "bool")),
            "arithmetic max must not be of bool operands",
        ),
        (
            tir.Evaluate(BinOp(Op.ADD, te.const(1), te.const(2), "int64")),
            r"\+ must yield 'int32', not 'int64'",
        ),
        (
            tir.Evaluate(BinOp(Op.BIT_AND, te.const(True), te.const(False), "bool")),
            "arithmetic & must not be of bool operands",
        ),
        (
            tir.Evaluate(BinOp(Op.SHL, te.const(1.0), te.const(2.0), "float32")),
            "bitwise << must be of integer operands, not 'float32'",
        ),
    ],
)
def test_verifier_reports_broken_invariants(body, message) -> None:
    with pytest.raises(VerifyError, match=f"verify after test: {message}"):
        tir.verify_func(_func(body), "test")


@pytest.mark.parametrize("each", ["1", "0"])
def test_pipeline_verifies_after_each_pass_or_after_the_last(monkeypatch, each) -> None:
    """A pass that breaks an invariant is caught either way: named with
    TENSORFORGE_VERIFY_EACH_PASS=1 (the suite's setting), after the last pass without it."""
    from tensorforge.compiler.tir.passes import VERIFY_EACH_PASS_ENV, run_pipeline

    def breaks_types(func):
        return func.with_body(BufferStore(X, te.const(1), (te.const(0),)))

    def keeps(func):
        return func

    monkeypatch.setenv(VERIFY_EACH_PASS_ENV, each)
    where = "breaks_types" if each == "1" else f"the passes .set {VERIFY_EACH_PASS_ENV}=1"
    with pytest.raises(VerifyError, match=f"verify after {where}.*store of 'int32' into X"):
        run_pipeline(_func(tir.Evaluate(te.const(0))), [breaks_types, keeps])
    body = BufferStore(X, te.const(2.0), (te.const(0),))
    assert run_pipeline(_func(body), [keeps, keeps]).body is body


def test_verifier_rejects_a_loop_variable_redefined_in_its_loop() -> None:
    i = te.var("i")
    body = _loop(i, 2, _loop(i, 2, BufferStore(X, te.const(1.0), (i,))))
    with pytest.raises(VerifyError, match="loop variable 'i' is redefined inside its own loop"):
        tir.verify_func(_func(body))


def test_printer_disambiguates_variables_that_share_a_name() -> None:
    a, b = te.var("i"), te.var("i")
    body = tir.seq(
        _loop(a, 2, BufferStore(X, te.const(1.0), (a,))),
        _loop(b, 2, BufferStore(X, te.const(2.0), (b,))),
    )
    text = repr(_func(body))
    assert "for i in range(2)" in text and "for i_1 in range(2)" in text
    assert "X[i_1] = 2.0f" in text
