"""The dependency-token queues between the pipeline stages: the one table every layer reads.

A queue carries tokens from a producer stage, which pushes one after an instruction that sets the
push flag, to a consumer stage, which pops one before an instruction that sets the pop flag
(vta_facts.md §2.1). Queues are named by their stages' initials: ``l2g`` is load -> compute
("g" for the gemm/compute stage). The Amaranth top wires one ``TokenQueue`` per entry, fetch
flags any other dependency flag as BAD_FLAGS, both simulators step them
(sim/functional.py ``TokenStepper``) and the compiler places and verifies them
(compiler/vta/passes.py).

Example:
    >>> from tensorforge.hw.isa import GemmInsn
    >>> pop_queues(GemmInsn(uop_bgn=0, uop_end=1, pop_prev=True, pop_next=True))
    ['l2g', 's2g']
"""

from __future__ import annotations

from dataclasses import dataclass

from .isa import DEP_FLAGS, Insn, Stage, stage_of


@dataclass(frozen=True)
class TokenLink:
    """Who pushes into a token queue (stage and flag) and who pops from it."""

    producer: Stage
    push: str
    consumer: Stage
    pop: str


TOKEN_QUEUES: dict[str, TokenLink] = {
    "l2g": TokenLink(Stage.LOAD, "push_next", Stage.COMPUTE, "pop_prev"),
    "g2l": TokenLink(Stage.COMPUTE, "push_prev", Stage.LOAD, "pop_next"),
    "g2s": TokenLink(Stage.COMPUTE, "push_next", Stage.STORE, "pop_prev"),
    "s2g": TokenLink(Stage.STORE, "push_prev", Stage.COMPUTE, "pop_next"),
}
#: stage -> {pop flag: queue} and {push flag: queue}
POP_QUEUES = {s: {k.pop: q for q, k in TOKEN_QUEUES.items() if k.consumer == s} for s in Stage}
PUSH_QUEUES = {s: {k.push: q for q, k in TOKEN_QUEUES.items() if k.producer == s} for s in Stage}
#: The dependency flags a stage has a queue for; any other is BAD_FLAGS.
STAGE_FLAGS = {s: tuple(f for f in DEP_FLAGS if f in POP_QUEUES[s] | PUSH_QUEUES[s]) for s in Stage}
#: (producer, consumer) -> the queue between them, where there is one
LINKS = {(k.producer, k.consumer): k for k in TOKEN_QUEUES.values()}


def pop_queues(insn: Insn) -> list[str]:
    """The token queues an instruction pops before it runs."""
    return [q for flag, q in POP_QUEUES[stage_of(insn)].items() if getattr(insn, flag)]


def push_queues(insn: Insn) -> list[str]:
    """The token queues an instruction pushes after it runs."""
    return [q for flag, q in PUSH_QUEUES[stage_of(insn)].items() if getattr(insn, flag)]
