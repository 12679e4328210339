"""Design-space exploration benchmark: ResNet-18 on an FPGA part, against the part's preset.

For ResNet-18 (224x224, batch 1, int8 on the accelerator) and a space of accelerator configs on
a part (xc7z020, the PYNQ-Z1/Z2's, by default), `compiler.dse.explore` synthesizes each
candidate's whole top with Yosys and retunes every accelerator task on ``cyclesim`` with a fixed
trial budget. Printed, with the machine:

- every measured candidate (area, fits, cycles with default and tuned schedules, latency at the
  candidate's clock, GOPS, MAC utilization, the resources it is on the Pareto front of);
- the fastest fitting config against the preset (goal: at least 1.3x faster than ``pynq`` with
  retuned schedules, or evidence that ``pynq`` is on the front);
- for each point of the DSP front: how much of its gain over the preset's default-schedule
  latency comes from the hardware (default schedules on both) and how much from retuning.

Results are cached in ``--out`` (a second run, or a larger budget, resumes); ``pareto.png``
lands there too.

Usage:
    python benchmarks/dse.py [--part xc7z020] [--trials 16] [--candidates 10] [--search auto]
                             [--out build/dse/PART] [--space SPACE.json] [--no-synth]

Parts with a default space: xc7z020 (PYNQ-Z1/Z2, around the pynq preset), xczu3eg (Ultra96,
around the ultra96 preset, with the ALU's MUL extension as a knob) and xck26 (KV260).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from machine import describe

from tensorforge.compiler.dse import explore
from tensorforge.compiler.frontend.onnx_builders import resnet18

#: the default space of each part: around its preset, the clock fixed at the preset's (Yosys
#: gives no Fmax for Xilinx parts, so a faster clock would be a claim the sweep cannot check)
SPACES = {
    "xc7z020": {
        "base": "pynq",
        "part": "xc7z020",
        "knobs": {
            "log_block_in": [3, 4, 5],
            "log_block_out": [3, 4, 5],
            "log_inp_buff_size": [14, 15, 16],
            "log_wgt_buff_size": [17, 18, 19],
            "log_acc_buff_size": [16, 17, 18],
        },
        "presets": ["pynq"],
    },
    "xczu3eg": {
        "base": "ultra96",
        "part": "xczu3eg",
        "knobs": {
            "log_block_in": [3, 4, 5],
            "log_block_out": [3, 4, 5],
            "alu_mul": [True, False],
            "log_wgt_buff_size": [17, 18, 19],
            "log_acc_buff_size": [16, 17, 18],
        },
        "presets": ["ultra96"],
    },
    "xck26": {
        "base": "kv260",
        "part": "xck26",
        "knobs": {
            "log_batch": [0, 1],
            "log_block_in": [4, 5],
            "log_block_out": [4, 5],
            "log_wgt_buff_size": [18, 19],
            "log_acc_buff_size": [16, 17, 18],
        },
        "presets": ["kv260"],
    },
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="xc7z020", choices=sorted(SPACES))
    ap.add_argument("--space", help="a space JSON file instead of the part's default")
    ap.add_argument("--trials", type=int, default=16, help="tuning trials per task")
    ap.add_argument("--candidates", type=int, default=10)
    ap.add_argument("--search", default="auto")
    ap.add_argument("--out", default=None, help="results folder (default build/dse/PART)")
    ap.add_argument("--no-synth", action="store_true", help="screen bounds instead of Yosys")
    args = ap.parse_args()
    space = json.loads(Path(args.space).read_text()) if args.space else SPACES[args.part]
    out = Path(args.out or f"build/dse/{space['part']}")
    model = resnet18()
    rng = np.random.default_rng(0)
    calib = {model.graph.input[0].name: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    t0 = time.perf_counter()
    result = explore(model, space, out, trials=args.trials, candidates=args.candidates,
                     search=args.search, calibration=calib,
                     synth=not args.no_synth)  # fmt: skip
    elapsed = time.perf_counter() - t0
    print(f"\n## Design-space exploration: ResNet-18 on {space['part']}\n")
    print(f"machine: {describe()}")
    stopped = " (interrupted)" if result.interrupted else ""
    area = "screen bounds" if args.no_synth else "Yosys synth_xilinx of the whole top"
    print(f"{len(result.records)} candidates ({args.trials} tuning trials per task, search "
          f"{args.search}) in {elapsed / 60:.1f} min{stopped}; area: {area}\n")  # fmt: skip
    print(result.table())
    report(result, space)
    print(f"\nfiles: {', '.join(str(f) for f in result.files)}")


def report(result, space) -> None:
    presets = [result.preset(p) for p in space.get("presets", [])]
    preset = next((p for p in presets if p and p.get("latency_ms")), None)
    best = result.best()
    if preset is None or best is None:
        print("\nno preset or no fitting candidate with a latency: nothing to compare")
        return
    name = preset["preset"]
    ratio = preset["latency_ms"] / best["latency_ms"]
    print(f"\nfastest fitting config: {best.get('preset') or best['config']['name']} "
          f"({best['latency_ms']:.2f} ms) vs {name} ({preset['latency_ms']:.2f} ms), both with "
          f"tuned schedules: {ratio:.2f}x (goal 1.3x, or {name} on the front)")  # fmt: skip
    on = preset.get("front", [])
    print(f"{name} is on the Pareto front of: {', '.join(on) if on else 'none'}")
    print(
        "\n| front (DSP) | DSP | BRAM36 | latency ms | vs preset default | from hardware | "
        "from retuning |"
    )
    print("|---|---|---|---|---|---|---|")
    base = preset["latency_ms_default"]
    for r in sorted((r for r in result.records if "DSP" in r.get("front", [])),
                    key=lambda r: r["area"]["dsps"]):  # fmt: skip
        hw = base / r["latency_ms_default"]
        tune = r["latency_ms_default"] / r["latency_ms"]
        print(f"| {r.get('preset') or r['config']['name']} | {r['area']['dsps']:g} | "
              f"{r['area']['bram36']:g} | {r['latency_ms']:.2f} | {hw * tune:.2f}x | {hw:.2f}x | "
              f"{tune:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
