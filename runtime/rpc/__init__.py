"""Remote run and remote tuning over RPC (docs/deploy.md).

`server.RPCServer` (``tensorforge rpc serve``) runs modules, program images and tuning trials
on a machine's accelerator device; `client.connect` reaches it from elsewhere; the auto-tuner's
``rpc`` runner (`compiler.autotune.rpc.RPCRunner`) measures on one or more servers.
"""

from __future__ import annotations

from .client import RemoteSession, RPCError, connect, parse_address

__all__ = ["RPCError", "RemoteSession", "connect", "parse_address"]
