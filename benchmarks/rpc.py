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

Usage:
    python benchmarks/rpc.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from machine import describe

from tensorforge.demo import build_matmul, pack_inp, unpack_out
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.rpc import connect
from tensorforge.runtime.rpc.server import RPCServer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    cfg = HWConfig.preset("pynq")
    token = "benchmark-token-123"
    print(f"machine: {describe()}\n")
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
            for _ in range(args.repeat):
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
    board_model_part()


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


if __name__ == "__main__":
    main()
