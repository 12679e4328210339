"""Where a compiling process's memory goes: resident memory stage by stage, beside onnxruntime's.

For one zoo model (its ONNX file in build/zoo/, exported by benchmarks/zoo.py), each runtime
runs in a fresh child process that prints its resident memory after each stage: the
high-water mark (`VmHWM`, what zoo.py's memory columns report) and the current resident set
split into anonymous memory (the heap, Python's objects, the weights) and file-backed pages
(the code of the shared libraries that have been touched: libllvmlite.so's most of all).

- tensorforge: `import numpy`, `import onnx`, `import llvmlite.binding` and LLVM's native
  target, `import tensorforge`, the compiler's modules, the model imported (`from_onnx`), the
  first kernel built, every tenth, the module built, one run.
- onnxruntime: `import numpy`, `import onnxruntime`, the session created, one run.

Usage:
    python benchmarks/compile_memory.py [--model mobilenet_v3_small]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

CACHE = Path(__file__).resolve().parent.parent / "build" / "zoo"


def resident() -> dict[str, float]:
    """VmHWM, RssAnon and RssFile of this process, MiB."""
    keys = ("VmHWM", "RssAnon", "RssFile")
    with open("/proc/self/status") as f:
        rows = [line.split() for line in f if line.startswith(keys)]
    return {row[0].rstrip(":"): int(row[1]) / 1024 for row in rows}


def show(stage: str) -> None:
    r = resident()
    print(f"  {stage:<40} {r['VmHWM']:>7.1f} {r['RssAnon']:>7.1f} {r['RssFile']:>7.1f}", flush=True)


def _input(name: str, side: int) -> dict:
    import numpy as np

    return {name: np.random.default_rng(0).standard_normal((1, 3, side, side), np.float32)}


def tensorforge_stages(path: Path, side: int) -> None:
    import numpy  # noqa: F401

    show("import numpy")
    import onnx  # noqa: F401

    show("import onnx")
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    show("import llvmlite.binding, native target")
    import tensorforge  # noqa: F401

    show("import tensorforge (runtime)")
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.graph import compile as compile_mod

    show("compiler modules")
    graphs = [from_onnx(path)]  # handed over below: compile_graph frees what it no longer needs
    show(f"model imported ({sum(a.nbytes for a in graphs[0].constants.values()) / 2**20:.1f} MiB)")
    built = compile_mod.build_cpu_group

    def build(*args: object, **kwargs: object) -> object:
        result = built(*args, **kwargs)
        if args[2] in (0, 1) or args[2] % 10 == 9:
            show(f"kernel {args[2] + 1} built")
        return result

    compile_mod.build_cpu_group = build
    module = compile_mod.compile_graph(graphs.pop(), progress=False)
    show(f"module built ({module.stats['kernels']} kernels)")
    module.run(_input(module.inputs[0], side))
    show("one run")


def onnxruntime_stages(path: Path, side: int) -> None:
    import numpy  # noqa: F401

    show("import numpy")
    import onnxruntime as ort

    show("import onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    show("session created")
    session.run(None, _input(session.get_inputs()[0].name, side))
    show("one run")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v3_small")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)  # runtime, input side
    args = parser.parse_args()
    path = CACHE / f"{args.model}.onnx"
    if args.child:
        runtime, side = args.child[0], int(args.child[1])
        (tensorforge_stages if runtime == "tensorforge" else onnxruntime_stages)(path, side)
        return 0
    from zoo import MODELS  # the parent only: it imports numpy

    if args.model not in MODELS:
        parser.error(f"model must be one of the zoo's: {', '.join(MODELS)}, not {args.model!r}")
    if not path.exists():
        parser.error(f"{path} must exist: export it with benchmarks/zoo.py --models {args.model}")
    for runtime in ("tensorforge", "onnxruntime"):
        title = f"{runtime}, {args.model}: MiB after"
        print(f"  {title:<40} {'VmHWM':>7} {'anon':>7} {'file':>7}")
        side = str(MODELS[args.model][1])
        cmd = [sys.executable, __file__, "--model", args.model, "--child", runtime, side]
        subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
