"""compiler: frontends, the graph layer, quantization, tensor expressions, schedules, loop IR,
code generators and operator libraries.

Guides: docs/graph.md, docs/compile.md, docs/tensor_expressions.md, docs/cpu_backend.md,
docs/quantization.md, docs/vta_compiler.md.
"""
