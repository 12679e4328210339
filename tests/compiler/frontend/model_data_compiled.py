"""The model files the onnx package ships with its backend tests (onnx/backend/test/data), each
through `tensorforge.compile` and native code, in worker processes (`node_suite_compiled`'s
driver: a crash is a failing case, not a lost run).

- `pytorch-converted/*`, `pytorch-operator/*`: torch modules and operators exported at opset 6
  (IR 3) by an early torch.onnx, with torch's outputs on recorded inputs;
- `simple/*`: small hand-written models (sequences, Expand, Shrink, Sign, StringNormalizer...);
- `light/*`: the classic model zoo CNNs (AlexNet, DenseNet-121, Inception v1/v2, ResNet-50,
  ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) at opset 9 with their weights replaced by
  ConstantOfShape nodes, and onnx's reference outputs for its own dummy input.

Run as a script it is the worker (`python model_data_compiled.py CASE...`); `--update` rewrites
model_data_compiled.txt, the set of passing cases the test asserts exactly. Statuses as in
node_suite_compiled.py: pass, refused (a clear error of ours), wrong, error, crash.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "model_data_compiled.txt"
KINDS = ("pytorch-converted", "pytorch-operator", "simple", "light")
# the tolerances onnx's own runner applies to these models (onnx.backend.test.loader)
RTOL, ATOL = 1e-3, 1e-7


@functools.cache
def data_root() -> Path:
    import onnx.backend.test

    return Path(onnx.backend.test.__file__).parent / "data"


def cases() -> list[str]:
    """`kind/name` of every model: a directory (model.onnx and test_data_set_*) or, for
    light, a `light_*.onnx` file with its `*_output_*.pb`."""
    root, found = data_root(), []
    for kind in KINDS:
        if kind == "light":
            found += [f"light/{p.stem}" for p in sorted((root / kind).glob("light_*.onnx"))]
        else:
            found += [f"{kind}/{p.name}" for p in sorted((root / kind).iterdir()) if p.is_dir()]
    return found


def _tensor(path: Path) -> np.ndarray:
    import onnx
    from onnx import numpy_helper

    proto = onnx.TensorProto()
    proto.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(proto)


def _numbered(folder: Path, prefix: str) -> list[Path]:
    return sorted(folder.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))


def model_path(case: str) -> Path:
    kind, name = case.split("/", 1)
    return data_root() / kind / (f"{name}.onnx" if kind == "light" else f"{name}/model.onnx")


def _data_sets(case: str, model) -> list[tuple[dict, list]]:
    """The (feed, expected outputs) pairs of `case`, whose ModelProto is `model`."""
    kind, name = case.split("/", 1)
    root = data_root() / kind
    weights = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in weights]
    if kind == "light":
        from onnx.backend.test.runner import Runner

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            feed = {
                v.name: Runner.generate_dummy_data(v, seed=0, name=name, random=False)
                for v in model.graph.input
                if v.name not in weights
            }
        outputs = [_tensor(p) for p in _numbered(root, f"{name}_output")]
        return [(feed, outputs)]
    sets = []
    for folder in sorted((root / name).glob("test_data_set_*")):
        inputs = [_tensor(p) for p in _numbered(folder, "input")]
        sets.append(
            (
                dict(zip(names, inputs, strict=True)),
                [_tensor(p) for p in _numbered(folder, "output")],
            )
        )
    return sets


def _run_one(case: str) -> tuple[str, str]:
    import onnx

    import tensorforge
    from tensorforge.compiler.frontend import OnnxImportError
    from tensorforge.compiler.graph.ir import GraphError
    from tensorforge.compiler.graph.registry import UnsupportedOpError
    from tensorforge.compiler.tir.stmt import LoweringError

    path = model_path(case)
    sets = _data_sets(case, onnx.load(path))
    try:
        module = tensorforge.compile(str(path))
    except (UnsupportedOpError, OnnxImportError, LoweringError, GraphError) as exc:
        return (
            "refused",
            f"{type(exc).__name__}: {str(exc).split(': ', 1)[-1].splitlines()[0][:200]}",
        )
    except Exception as exc:  # noqa: BLE001  (anything else is a bug, reported by name)
        return "error", f"{type(exc).__name__}: {str(exc)[:300]}"
    for feed, expected in sets:
        try:
            got = module.run(feed)
        except Exception as exc:  # noqa: BLE001
            return "error", f"run: {type(exc).__name__}: {str(exc)[:300]}"
        for out, want in zip(module.model_outputs, expected, strict=True):
            try:
                assert got[out].dtype == want.dtype, f"dtype {got[out].dtype} != {want.dtype}"
                np.testing.assert_allclose(got[out], want, rtol=RTOL, atol=ATOL)
            except AssertionError as exc:
                return "wrong", f"output {out!r}: {str(exc).strip()[:300]}"
    return "pass", ""


def _worker(names: list[str]) -> None:
    from tensorforge.runtime import guard

    checks = os.environ.get(guard.ENV, "")
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        # the light CNNs hold 60-140 M weights: the test suite's kernel write checks
        # (TENSORFORGE_CHECK_WRITES, runtime/guard.py) copy enough per call to take 6 GB for
        # VGG-19, which two test workers at once ran out of memory on; the others keep them
        os.environ[guard.ENV] = "0" if name.startswith("light/") else checks
        status, detail = _run_one(name)
        print(json.dumps({"case": name, "status": status, "detail": detail}), flush=True)


def run_all() -> dict[str, tuple[str, str]]:
    sys.path.insert(0, str(HERE))
    from node_suite_compiled import run_isolated

    return run_isolated(cases(), script=__file__)


@functools.cache
def expected_passing() -> frozenset[str]:
    sys.path.insert(0, str(HERE))
    from node_suite_compiled import recorded

    return recorded(EXPECTED)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--update"]:
        results = run_all()
        passing = sorted(n for n, (status, _) in results.items() if status == "pass")
        EXPECTED.write_text("\n".join(passing) + "\n")
        print(f"{len(passing)} passing cases of {len(results)} written to {EXPECTED}")
        for name, (status, detail) in sorted(results.items()):
            if status != "pass":
                print(f"  {name}: {status} {detail[:150]}")
    else:
        _worker(sys.argv[1:])
