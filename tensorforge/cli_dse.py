"""``tensorforge dse``: sweep accelerator configs for a model, with retuned schedules and area.

tensorforge dse MODEL.onnx --space space.json [--trials 16] [--candidates N] [-o dse/]
                [--search auto|grid|xgb|random|ga] [--cluster tcp://host:8786|local]
                [--no-synth] [--ecp5-fmax] [--measure-unfit] [--calibrate FILE.npy]
tensorforge dse --example-space [PART]      (prints a space file to start from)
"""

from __future__ import annotations

import argparse
import json
from typing import Any

#: a space to start from, per part (printed by --example-space)
EXAMPLE_KNOBS = {
    "log_block_in": [3, 4, 5],
    "log_block_out": [3, 4, 5],
    "log_inp_buff_size": [14, 15],
    "log_wgt_buff_size": [17, 18],
    "log_acc_buff_size": [16, 17],
    "clock_mhz": [100],
}


def add_parser(sub: argparse._SubParsersAction, shape_arg: Any, calibrate_arg: Any) -> None:
    from .cli import positive_int

    p = sub.add_parser(
        "dse",
        help="design-space exploration: sweep accelerator configs (Yosys area, schedules "
        "retuned on the cycle model), write results.csv/json and the Pareto front's plot",
    )
    p.add_argument("model", nargs="?", help="the ONNX model")
    p.add_argument("--space", help="the space file (JSON; see --example-space and docs/dse.md)")
    p.add_argument(
        "--trials",
        type=positive_int,
        default=16,
        help="tuning trials per accelerator task of each candidate (default: 16)",
    )
    p.add_argument("--candidates", type=positive_int, default=None,
                   help="points of the space to evaluate besides the presets (default: all when "
                   "there are at most 64, else 32)")  # fmt: skip
    p.add_argument(
        "--search",
        choices=("auto", "grid", "xgb", "random", "ga"),
        default="auto",
        help="how candidates are chosen (default: grid for small spaces, else xgb)",
    )
    p.add_argument("-o", "--output", default="dse", help="the results folder (default: dse/; "
                   "a second run there resumes)")  # fmt: skip
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="evaluate candidates on a Dask cluster (tcp://host:8786), or 'local'",
    )
    p.add_argument(
        "--no-synth",
        action="store_true",
        help="skip Yosys: DSP and BRAM lower bounds only (a quick look)",
    )
    p.add_argument("--ecp5-fmax", action="store_true",
                   help="also place and route each candidate's GEMM core on an ECP5 (open flow) "
                   "and report its Fmax against the clock knob")  # fmt: skip
    p.add_argument(
        "--measure-unfit",
        action="store_true",
        help="also measure the latency of candidates that do not fit the part",
    )
    p.add_argument("--seed", type=int, default=0, help="the searches' random seed")
    p.add_argument(
        "--example-space",
        nargs="?",
        const="xc7z020",
        metavar="PART",
        help="print an example space file for PART (default xc7z020) and exit",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    calibrate_arg(p, "calibration inputs for a float model (default: random normal inputs)")
    shape_arg(p)


def run(args: argparse.Namespace, load_arrays: Any, load_shapes: Any) -> int:
    if args.example_space:
        print(json.dumps(example_space(args.example_space), indent=2))
        return 0
    if not args.model or not args.space:
        raise ValueError("dse needs a MODEL and --space FILE (tensorforge dse --example-space "
                         "prints one to start from)")  # fmt: skip
    from .cli_tune import _input_names
    from .compiler.dse import HwSpace, explore

    space = HwSpace.from_json(args.space)  # errors name the field before anything runs
    names = _input_names(args.model)
    shapes = load_shapes(names, args.shape) or None
    calibration = load_arrays(names, args.calibrate, "--calibrate") or None
    if calibration is None:
        calibration = _random_inputs(args.model, shapes or {})
        print("note: calibrating on random normal inputs (--calibrate to give real ones)")
    print(f"exploring {space.describe()}")
    result = explore(args.model, space, args.output, trials=args.trials,
                     candidates=args.candidates, search=args.search, calibration=calibration,
                     input_shapes=shapes,
                     cluster=args.cluster, seed=args.seed, synth=not args.no_synth,
                     measure_unfit=args.measure_unfit, fmax=args.ecp5_fmax,
                     progress=not args.no_progress)  # fmt: skip
    print(result.table())
    for r in result.records:
        if r.get("error"):
            print(f"{r.get('preset') or r['config']['name']}: {r['error']}: "
                  f"{r['message'].splitlines()[0][:160] if r['message'] else ''}")  # fmt: skip
    best = result.best()
    if not result.fitting:
        print(f"\nno measured candidate fits {space.part} (see results.csv for why each does "
              "not)")  # fmt: skip
    elif best is not None:
        print(f"\nfastest fitting: {best.get('preset') or best['config']['name']}, "
              f"{best['latency_ms']:.2f} ms; its HWConfig: "
              f"{args.output}/candidates/{best['key']}/hwconfig.json")  # fmt: skip
    print(f"wrote {', '.join(str(f) for f in result.files)}")
    if result.interrupted:
        print("interrupted: the candidates measured so far are in the results; run again to "
              "resume")  # fmt: skip
        return 130
    return 0


def example_space(part: str) -> dict[str, Any]:
    from .compiler.dse.space import PART_BOARDS
    from .hw.synth import PARTS

    if part not in PARTS:
        raise ValueError(f"--example-space: part must be one of {sorted(PARTS)}, not {part!r}")
    base = {"pynq": "pynq", "ultra96": "ultra96", "kv260": "kv260"}[PART_BOARDS[part]]
    return {"base": base, "part": part, "knobs": EXAMPLE_KNOBS,
            "limits": {"DSP": 1.0, "BRAM36": 1.0}, "presets": [base]}  # fmt: skip


def _random_inputs(model: str, shapes: dict[str, Any]) -> dict[str, Any]:
    """Seeded standard-normal inputs of the model's input shapes (float32)."""
    import numpy as np
    import onnx

    proto = onnx.load(model, load_external_data=False)
    weights = {t.name for t in proto.graph.initializer}
    rng = np.random.default_rng(0)
    out = {}
    for v in proto.graph.input:
        if v.name in weights:
            continue
        dims = shapes.get(v.name) or [d.dim_value for d in v.type.tensor_type.shape.dim]
        if any(not isinstance(d, int) or d < 1 for d in dims):
            raise ValueError(f"{model}: input {v.name!r} has a symbolic shape {list(dims)}; give "
                             "it with --shape or give --calibrate arrays")  # fmt: skip
        out[v.name] = rng.standard_normal(dims).astype(np.float32)
    return out
