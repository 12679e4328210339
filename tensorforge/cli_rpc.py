"""``tensorforge rpc serve``: serve this machine's accelerator device to remote clients.

tensorforge rpc serve --device cyclesim|sim|rtl|pynq|pynq-model [--bitstream tf.bit]
                      [--config pynq]
                      [--host 127.0.0.1] [--port 9091]
                      [--token T | TF_RPC_TOKEN] [--work-dir D] [--run-timeout 120]
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rpc", help="remote run and remote tuning (docs/deploy.md)")
    rsub = p.add_subparsers(dest="rpc_command", required=True)
    s = rsub.add_parser("serve", help="serve this machine's accelerator device over RPC")
    s.add_argument(
        "--device",
        default="cyclesim",
        help="sim, cyclesim, rtl, pynq (on a board) or pynq-model (the pynq backend on the "
        "RTL board model); default cyclesim",
    )
    s.add_argument("--bitstream", default=None, help="pynq: the .bit (its .hwh beside it)")
    s.add_argument("--config", default=None,
                   help="the accelerator's HWConfig (preset or JSON): uploads built for another "
                   "config are refused (default: any)")  # fmt: skip
    s.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (default 127.0.0.1: this machine only; "
                   "0.0.0.0 to serve the network)")  # fmt: skip
    s.add_argument("--port", type=int, default=9091, help="the port (default 9091)")
    s.add_argument(
        "--token",
        default=None,
        help="the shared secret (default: TF_RPC_TOKEN, else a random one, printed)",
    )
    s.add_argument("--work-dir", default=None, help="where uploads are kept")
    s.add_argument("--run-timeout", type=float, default=120.0,
                   help="seconds per run (pynq-model: also each RTL simulation's limit; a "
                   "full-size ResNet-18 layer simulates for about 2 minutes)")  # fmt: skip
    s.add_argument("--simulator", choices=("icarus", "verilator"), default=None,
                   help="rtl and pynq-model devices: the Verilog simulator")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from .runtime.rpc.server import RPCServer

    token = args.token or os.environ.get("TF_RPC_TOKEN")
    options: dict[str, Any] = {"simulator": args.simulator} if args.simulator else {}
    if args.device == "pynq-model":  # the simulation stops at the run's own limit
        options["timeout_s"] = args.run_timeout
    if args.bitstream:
        options["bitstream"] = args.bitstream
    server = RPCServer(args.device, args.config, args.host, args.port, token, args.work_dir,
                       run_timeout=args.run_timeout, device_options=options)  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    host, port = server.address
    print(f"tensorforge rpc: serving device {args.device} on {host}:{port}")
    if token is None:
        print(f"token: {server.token}   (clients: TF_RPC_TOKEN={server.token})")
    print("Ctrl-C stops the server", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nstopped")
    return 0
