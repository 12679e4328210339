"""RPC: the overhead per call on loopback, and the laptop-to-board path on the board model.

Part 1, overhead: a program image run through `tensorforge rpc serve` on loopback, against the
same run measured by the server itself.

For inputs of about 4 KB, 64 KB and 1 MB (the demo's int8 matmul with more rows), each call's
round trip on the client minus the run's wall time on the server is the RPC's overhead: the
HTTP request, the `.npz` payloads both ways, the hand-off to the server's worker process and
back. The upload of the image happens once per session and is timed apart. Outputs are checked
against numpy on every call. Medians over `--repeat` calls; the server runs in this process's
thread (loopback, one machine).

Part 2, the board path without a board: the digits CNN (the demo's model, int8, 4 images,
`tiny`) sent over RPC to a server whose device is ``pynq-model`` (the ``pynq`` backend's own
code on the board model: the exported Verilog under Icarus). Outputs are compared with `sim` and
each accelerator call's CYCLES with `cyclesim` (the RAM model's latencies, buffers placed as the
board places them).

Part 3, one ResNet-18 layer on the board model: C12 (layer4.1.conv1: 3x3, 512 -> 512 channels,
7x7, stride 1, padding 1, ReLU; full size, nothing shrunk) as the compiler quantizes it: the
int8 graph of `onnx_builders.resnet18(224)` (its fixed random weights) by `quantize_graph`'s
defaults on `pynq` (mode mul, per-channel weight scales: one int32 multiplier per output channel,
applied by a tensor-tensor ALU MUL), its input the int8 activation that graph computes for one
random image. `compiler.vta.conv2d` compiles the layer for `pynq` (16x16 GEMM, 2 virtual
threads); its program image is uploaded over RPC to a ``pynq-model`` server simulating under
Verilator. The output is compared with `sim`, the kernel's numpy `.reference` and the int8
graph's own node; CYCLES with `cyclesim` under `matched_timing` and `PAGE_PLACEMENT`.

Usage:
    python benchmarks/rpc.py [--repeat 20] [--parts 1,2,3] [--simulator verilator]

Part 3 as run on 2026-11-25 (``--parts 3``; Intel Xeon, 2 CPUs shared with other jobs, load
1.8-2.8; the RTL board model, not a board; the `pynq` top's Verilator build, 82 s, cached):

    C12 (conv_151: 512->512, 3x3, 7x7): 512 per-channel multipliers, image of 2.37 MB; output
    bit-exact with sim: True, reference: True, int8 graph: True

    | layer | config | board-model cycles | cyclesim cycles | equal | round trip s | server simulation s |
    |---|---|---|---|---|---|---|
    | C12 (conv_151: 512->512, 3x3, 7x7) | pynq (1x16_i8w8a32_15_15_18_17), verilator | 474,064 | 474,064 | True | 112.2 | 112.0 |

"Server simulation" is the server's wall time of the run: the simulator's start, the image's
upload into the RAM model and 474,064 simulated cycles (about 4,200 per second).
"""  # noqa: E501 - the table as printed

from __future__ import annotations

import argparse
import statistics
import time
from typing import TYPE_CHECKING

import numpy as np
from machine import describe

from tensorforge.demo import build_matmul, pack_inp, unpack_out
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.rpc import connect
from tensorforge.runtime.rpc.server import RPCServer

if TYPE_CHECKING:
    from tensorforge.compiler.graph import Graph, Node


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--parts", default="1,2,3", help="which parts to run (1: overhead, "
                    "2: digits on the board model, 3: a ResNet-18 layer on it)")  # fmt: skip
    ap.add_argument("--simulator", default="verilator", choices=("icarus", "verilator"),
                    help="part 3's simulator")  # fmt: skip
    args = ap.parse_args()
    parts = {int(p) for p in args.parts.split(",")}
    print(f"machine: {describe()}\n")
    if 1 in parts:
        overhead_part(args.repeat)
    if 2 in parts:
        board_model_part()
    if 3 in parts:
        resnet_layer_part(args.simulator)


def overhead_part(repeat: int) -> None:
    cfg = HWConfig.preset("pynq")
    token = "benchmark-token-123"
    print("| input | output | upload (once) | round trip | server run | RPC overhead |")
    print("|---|---|---|---|---|---|")
    with RPCServer("sim", port=0, token=token) as server:
        remote = connect(*server.address, token=token)
        for rows in (16, 256, 4096):  # x 256 int8 columns: 4 KB, 64 KB, 1 MB of input
            k = build_matmul(cfg, rows, 256, 16, seed=0)
            inputs = {"A": pack_inp(cfg, k.a)}
            t0 = time.perf_counter()
            remote.upload(k.image.to_bytes())
            upload = time.perf_counter() - t0
            trips, walls = [], []
            for _ in range(repeat):
                t0 = time.perf_counter()
                out, meta = remote.run_program(k.image, inputs)
                trips.append(time.perf_counter() - t0)
                walls.append(meta["wall_s"][0])
                assert np.array_equal(unpack_out(cfg, out["C"]), k.reference())
            trip, wall = statistics.median(trips), statistics.median(walls)
            over = statistics.median(t - w for t, w in zip(trips, walls, strict=True))
            print(f"| {inputs['A'].nbytes / 1024:,.0f} KB | {out['C'].nbytes / 1024:,.1f} KB | "
                  f"{upload * 1e3:.1f} ms | {trip * 1e3:.1f} ms | {wall * 1e3:.1f} ms | "
                  f"{over * 1e3:.1f} ms |")  # fmt: skip


def board_model_part() -> None:
    import tensorforge
    from tensorforge.digits import load_digits_assets
    from tensorforge.runtime.device.vta.pynq_model import PAGE_PLACEMENT
    from tensorforge.runtime.device.vta.rtl import matched_timing

    onnx_path, split = load_digits_assets()
    x = split["images"][:4]
    calib = {"input": split["calib_images"][:4]}
    module = tensorforge.compile(str(onnx_path), "vta -config=tiny -device=sim",
                                 input_shapes={"input": x.shape}, calibration=calib)  # fmt: skip
    want = module.run({"input": x})
    token = "benchmark-token-123"
    with RPCServer("pynq-model", port=0, token=token, run_timeout=900) as server:
        remote = connect(*server.address, token=token, timeout=1200)
        t0 = time.perf_counter()
        out, meta = remote.run_module(module, {"input": x})
        trip = time.perf_counter() - t0
    exact = all(np.array_equal(out[k], v) for k, v in want.items())
    tiny = HWConfig.preset("tiny")
    module.use_device("cyclesim", timing=matched_timing(tiny), **PAGE_PLACEMENT).run({"input": x})
    model = {k: r.cycles for k, r in module.device_results().items()}
    print("\n| accelerator call | board model (RTL) cycles | cyclesim cycles | equal |")
    print("|---|---|---|---|")
    for call, cycles in meta["calls"].items():
        print(f"| {call} | {cycles:,} | {model[call]:,} | {cycles == model[call]} |")
    print(f"\ndigits CNN (4 images, tiny) over RPC on the board model: outputs bit-exact with sim: "
          f"{exact}; {trip:.1f} s round trip ({meta['wall_s'][0]:.1f} s simulating on the "
          "server)")  # fmt: skip


def resnet18_c12(cfg: HWConfig) -> tuple[Node, dict[str, np.ndarray], Graph]:
    """ResNet-18's C12 as `quantize_graph` makes it for `cfg`: the int8 conv node of
    layer4.1.conv1 (the first 3x3 512 -> 512 conv with a ReLU), the int8 graph's values up to
    its input for one random 224x224 image, and that graph."""
    from tensorforge.compiler.frontend import from_onnx
    from tensorforge.compiler.frontend.onnx_builders import resnet18
    from tensorforge.compiler.graph.passes import optimize
    from tensorforge.compiler.graph.reference import run_node
    from tensorforge.compiler.quantize.graph import quantize_graph

    graph = optimize(from_onnx(resnet18(224)))
    image = {"x": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    q = quantize_graph(graph, image, cfg)  # the compiler's defaults: mode mul, per channel
    env: dict[str, np.ndarray] = {**q.constants, **image}
    for node in q.nodes:
        w = q.constants.get(node.inputs[1]) if node.op == "tf.qconv2d" else None
        a = node.attr_dict
        if w is not None and w.shape == (512, 512, 3, 3) and a["out_lo"] == 0:
            return node, env, q
        env.update(run_node(q, node, env))
    raise LookupError("ResNet-18's int8 graph has no 3x3 512 -> 512 conv with a ReLU")


def resnet_layer_part(simulator: str) -> None:
    from tensorforge.compiler.graph.ops.qnn import requant_from_attrs
    from tensorforge.compiler.graph.reference import run_node
    from tensorforge.compiler.vta import conv2d
    from tensorforge.compiler.vta.layout import INPUT, OUTPUT
    from tensorforge.runtime.device.vta.pynq_model import PAGE_PLACEMENT
    from tensorforge.runtime.device.vta.rtl import build_rtl, matched_timing

    cfg = HWConfig.preset("pynq")
    node, env, q = resnet18_c12(cfg)
    a = node.attr_dict
    x, weight, bias = (env[i] for i in node.inputs)
    kernel = conv2d(cfg, x.shape, weight, bias, stride=a["strides"], padding=a["pads"][:2],
                    requant=requant_from_attrs(a), vthreads=2)  # fmt: skip
    graph_out = run_node(q, node, env)[node.outputs[0]]
    sim_out, _ = kernel.run(x, "sim")
    _, timed = kernel.run(x, "cyclesim", timing=matched_timing(cfg), **PAGE_PLACEMENT)
    build_rtl(cfg, simulator)  # built (or found in the cache) before the clock starts
    token = "benchmark-token-123"
    options = {"simulator": simulator, "timeout_s": 3600}
    with RPCServer("pynq-model", port=0, token=token, run_timeout=3700,
                   device_options=options) as server:  # fmt: skip
        remote = connect(*server.address, token=token, timeout=3800)
        t0 = time.perf_counter()
        out, meta = remote.run_program(kernel.image, {INPUT: kernel.pack(x)})
        trip = time.perf_counter() - t0
    got = kernel.unpack(out[OUTPUT])
    exact = {"sim": np.array_equal(got, sim_out),
             "reference": np.array_equal(got, kernel.reference(x)),
             "int8 graph": np.array_equal(got, graph_out)}  # fmt: skip
    wl = kernel.workload
    layer = f"C12 ({node.name}: {wl.ic}->{wl.oc}, {wl.kh}x{wl.kw}, {wl.h}x{wl.w})"
    print(f"\n{layer}: {len(a['channel_multipliers'])} per-channel multipliers, image of "
          f"{len(kernel.image.to_bytes()) / 1e6:.2f} MB; output bit-exact with "
          + ", ".join(f"{k}: {v}" for k, v in exact.items()))  # fmt: skip
    print("\n| layer | config | board-model cycles | cyclesim cycles | equal | round trip s | "
          "server simulation s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    print(f"| {layer} | {cfg.name} ({cfg.bitstream_name}), {simulator} | {meta['cycles']:,} | "
          f"{timed.cycles:,} | {meta['cycles'] == timed.cycles} | {trip:.1f} | "
          f"{meta['wall_s'][0]:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
