"""Write a matmul as a tensor expression, schedule it (tile, reorder, vectorize, parallel),
check it on the loop-IR interpreter, then compile it with LLVM and compare with numpy."""

import numpy as np

from tensorforge.compiler import te, tir
from tensorforge.compiler.build import build

n = 96
A = te.placeholder((n, n), name="A")
B = te.placeholder((n, n), name="B")
k = te.reduce_axis((0, n), "k")
C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
s = te.create_schedule(C.op)
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
s[C].reorder(io, jo, k, ii, ji)
s[C].vectorize(ji)
s[C].parallel(io)

a, b = np.random.default_rng(0).random((2, n, n), dtype=np.float32)
func = tir.lower(s, [A, B, C], name="matmul")
print(tir.func_to_str(func).splitlines()[0])
c_interp = np.zeros((n, n), np.float32)
tir.interpret(func, [a, b, c_interp])
f = build(s, [A, B, C], name="matmul")
c = np.empty((n, n), np.float32)
f(a, b, c)
np.testing.assert_allclose(c, a @ b, rtol=1e-5)
np.testing.assert_allclose(c_interp, a @ b, rtol=1e-5)
print("interpreter and native code both match numpy")
