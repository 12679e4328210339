"""A small run of the differential graph fuzzer (benchmarks/graph_fuzz.py): random ONNX DAGs
compiled for the CPU in a worker process against onnxruntime must all match (or be refused
clearly); its cases are deterministic and mix the ops and output kinds it promises."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks"))

import graph_fuzz  # noqa: E402


def test_graph_cases_are_deterministic_dags_of_the_promised_ops() -> None:
    first, again = graph_fuzz.make_case(5, 3, 20), graph_fuzz.make_case(5, 3, 20)
    assert first.model.SerializeToString() == again.model.SerializeToString()
    assert all(np.array_equal(first.feed[k], again.feed[k]) for k in first.feed)
    ops: Counter[str] = Counter()
    outputs: Counter[str] = Counter()
    for index in range(40):
        case = graph_fuzz.make_case(0, index, 30)
        nodes = case.model.graph.node
        assert 5 <= len(nodes) <= 30 + 4  # a generator step may add up to 5 nodes
        ops.update(n.op_type for n in nodes)
        names = [o.name for o in case.model.graph.output]
        inits = {i.name for i in case.model.graph.initializer}
        produced = {o for n in nodes for o in n.output}
        read = {i for n in nodes for i in n.input}
        outputs["input"] += any(n in case.feed for n in names)
        outputs["initializer"] += any(n in inits for n in names)
        outputs["twice"] += len(set(names)) < len(names)
        outputs["read later"] += any(n in produced and n in read for n in names)
    wanted = {"Conv", "BatchNormalization", "Relu", "Concat", "Split", "Slice", "Reshape",
              "Transpose", "MatMul", "Softmax", "Where", "Cast", "Resize", "Pad"}  # fmt: skip
    assert wanted <= set(ops), wanted - set(ops)
    assert all(outputs[k] for k in ("input", "initializer", "twice", "read later")), outputs


def test_a_short_graph_fuzz_run_finds_nothing() -> None:
    results = graph_fuzz.fuzz(seed=11, cases=20, max_nodes=30, timeout_s=120, keep=False)
    assert len(results) == 20
    bad = [r for r in results if r["outcome"] in graph_fuzz.DEFECTS]
    assert not bad, graph_fuzz.summarize(results)
    assert sum(r["outcome"] == "match" for r in results) >= 16
