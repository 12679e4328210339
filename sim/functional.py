"""Functional simulator: bit-exact execution of an instruction stream, with the token protocol.

The model follows the hardware's structure (vta_facts.md §2.1) without its timing: fetch routes
instructions in order into three bounded command queues (load, compute, store); each stage runs
its queue in order, popping dependency tokens before an instruction and pushing them after it.
A program whose tokens cannot be satisfied is reported as a deadlock naming each stage's waiting
instruction and queue; it never hangs. Data semantics are those documented in hw/isa.py.

Example:
    >>> from tensorforge.hw.config import HWConfig
    >>> from tensorforge.hw.isa import FinishInsn
    >>> from tensorforge.sim.memory import DeviceMemory
    >>> sim = FunctionalSim(HWConfig.preset("tiny"), DeviceMemory(1 << 16))
    >>> sim.execute([FinishInsn()]).insn_count
    1
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..hw.config import HWConfig
from ..hw.isa import (
    DEP_FLAGS,
    INSN_BYTES,
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    Insn,
    MemInsn,
    MemType,
    Opcode,
    Stage,
    alu_apply,
    decode_program,
    decode_uop_array,
    describe,
    elem_bytes,
    requant_apply,
    stage_of,
    wrap,
)
from ..hw.tokens import STAGE_FLAGS, TOKEN_QUEUES, pop_queues, push_queues
from .memory import DeviceMemory, DeviceMemoryError

GEMM_CHUNK = 4096  # micro-op steps per vectorized GEMM batch (bounds temporary memory)
# GEMM/ALU steps (one micro-op at one loop iteration) a run may take before it is stopped: far
# above any compiled layer (ResNet-18's largest takes under 2**20 per instruction), low enough
# that index arrays stay under a GiB and a run under a minute. `FunctionalSim(max_steps=)`,
# the sim/cyclesim devices' `max_steps` option and `sim run --max-steps` raise it.
DEFAULT_MAX_STEPS = 1 << 25
SEQUENTIAL_COST = 16  # ALU steps reading an earlier step's result run one by one: 16x the cost


class SimError(RuntimeError):
    """An instruction that cannot execute: out-of-range SRAM/DRAM access, bad fields, bad flags."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class SimBudgetError(SimError):
    """A program would take more GEMM/ALU steps than the run's budget (a runaway loop)."""


class DeadlockError(SimError):
    """No stage can make progress and FINISH has not run."""


class SramRangeError(SimError):
    """An SRAM index beyond a buffer's depth."""


class DramRangeError(SimError):
    """A DMA access outside device memory (the bus would answer with an error response)."""


class DepFlagError(SimError):
    """A dependency flag naming a stage that the instruction's stage does not have."""


@dataclass
class SimStats:
    """Counters as VTA's fsim keeps them (vta_facts.md §3.1), plus instruction counts."""

    inp_load_nbytes: int = 0
    wgt_load_nbytes: int = 0
    acc_load_nbytes: int = 0
    uop_load_nbytes: int = 0
    out_store_nbytes: int = 0
    gemm_counter: int = 0
    alu_counter: int = 0
    insn_count: int = 0
    load_insns: int = 0
    compute_insns: int = 0
    store_insns: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def check_dep_flags(insn: Insn, index: int) -> None:
    """Reject dependency flags that name a stage the instruction's stage does not have."""
    stage = stage_of(insn)
    for flag in DEP_FLAGS:
        if getattr(insn, flag) and flag not in STAGE_FLAGS[stage]:
            side = "previous" if flag.endswith("prev") else "next"
            raise DepFlagError(
                f"instruction {index} ({describe(insn)}) sets {flag}, but the "
                f"{stage.name.lower()} stage has no {side} stage",
                index,
            )


def validate_program(insns: Sequence[Insn]) -> None:
    """Checks every model makes before running: flags, and FINISH last and only last."""
    if not insns:
        raise SimError("the program is empty: it needs at least a FINISH instruction")
    for i, insn in enumerate(insns):
        check_dep_flags(insn, i)
        if isinstance(insn, FinishInsn) and i != len(insns) - 1:
            raise SimError(
                f"instruction {i} is FINISH but {len(insns) - 1 - i} instruction(s) follow "
                "it; FINISH must be the last instruction",
                i,
            )
    if not isinstance(insns[-1], FinishInsn):
        raise SimError(
            f"the program's last instruction ({len(insns) - 1}, {describe(insns[-1])}) "
            "must be FINISH"
        )


def describe_wait(
    stage: Stage,
    head: tuple[int, Insn] | None = None,
    empty: Sequence[str] = (),
    blocked_push: str | None = None,
) -> str:
    """One stage's part of a deadlock report (the same words in every simulator)."""
    name = f"{stage.name.lower()} stage"
    if blocked_push:
        return f"{name} waits to push a token into {blocked_push}, which is full"
    if head is None:
        return f"{name} is idle"
    index, insn = head
    whom = " and ".join(f"{q} (from {TOKEN_QUEUES[q].producer.name.lower()})" for q in empty)
    return f"{name} waits at instruction {index} ({describe(insn)}) to pop a token from {whom}"


def describe_fetch_block(index: int, insn: Insn, depth: int) -> str:
    return (
        f"fetch is blocked at instruction {index} ({describe(insn)}): the "
        f"{stage_of(insn).name.lower()} queue is full ({depth} entries)"
    )


class FunctionalSim:
    """Executes programs on SRAM state that persists between runs, as the hardware's does.

    Args:
        cfg: the hardware configuration.
        memory: the device DRAM the program's DMA instructions address.
    """

    def __init__(
        self, cfg: HWConfig, memory: DeviceMemory, max_steps: int = DEFAULT_MAX_STEPS
    ) -> None:
        if int(max_steps) < 1:
            raise ValueError(f"max_steps must be at least 1, not {max_steps}")
        self.cfg = cfg
        self.memory = memory
        self.max_steps = int(max_steps)
        self._steps_left = self.max_steps
        self.reset()

    def reset(self) -> None:
        """Clear every SRAM (the state after a bitstream load)."""
        c = self.cfg
        self.uop = np.zeros(c.uop_depth, dtype=np.uint32)
        self.inp = np.zeros((c.inp_depth, c.batch, c.block_in), dtype=np.int8)
        self.wgt = np.zeros((c.wgt_depth, c.block_out, c.block_in), dtype=np.int8)
        self.acc = np.zeros((c.acc_depth, c.batch, c.block_out), dtype=np.int32)
        self.out = np.zeros((c.out_depth, c.batch, c.block_out), dtype=np.int8)

    # ---- running programs -------------------------------------------------------------------
    def fetch(self, insn_addr: int, insn_count: int) -> list[Insn]:
        """Read and decode ``insn_count`` instructions from DRAM at ``insn_addr``."""
        if insn_addr % INSN_BYTES:
            raise SimError(f"instruction address must be {INSN_BYTES}-aligned, not {insn_addr:#x}")
        try:
            raw = self.memory.read(insn_addr, insn_count * INSN_BYTES)
        except DeviceMemoryError as e:
            raise DramRangeError(f"fetch: {e}") from None
        return decode_program(raw, self.cfg)

    def run(self, insn_addr: int, insn_count: int) -> SimStats:
        """Fetch ``insn_count`` instructions from DRAM at ``insn_addr`` and execute them."""
        return self.execute(self.fetch(insn_addr, insn_count))

    def execute(self, insns: Sequence[Insn]) -> SimStats:
        """Execute decoded instructions through the queue and token model."""
        validate_program(insns)
        self._steps_left = self.max_steps
        stats = SimStats()
        _Pipeline(self, insns, stats).run()
        return stats

    # ---- instruction semantics --------------------------------------------------------------
    def exec_insn(self, insn: Insn, index: int, stats: SimStats) -> None:
        stats.insn_count += 1
        if isinstance(insn, MemInsn):
            if insn.opcode == Opcode.LOAD:
                self._load(insn, index, stats)
            else:
                self._store(insn, index, stats)
        elif isinstance(insn, GemmInsn):
            self._gemm(insn, index, stats)
        elif isinstance(insn, AluInsn):
            self._alu(insn, index, stats)

    def _sram(self, mt: MemType) -> tuple[np.ndarray, int, str]:
        """(SRAM array, DRAM element bytes, stats counter) for a LOAD's memory_type."""
        sram, counter = {
            MemType.UOP: (self.uop, "uop_load_nbytes"),
            MemType.INP: (self.inp, "inp_load_nbytes"),
            MemType.WGT: (self.wgt, "wgt_load_nbytes"),
            MemType.ACC: (self.acc, "acc_load_nbytes"),
            MemType.ACC_8BIT: (self.acc, "acc_load_nbytes"),
            MemType.OUT: (self.out, "out_store_nbytes"),
        }[mt]
        return sram, elem_bytes(self.cfg, mt), counter

    def _dram_rows(
        self, insn: MemInsn, elem_bytes: int, index: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(uint8 view of the DRAM span, element offsets of each transferred element in it)."""
        first = insn.dram_base * elem_bytes
        last = insn.dram_base + (insn.y_size - 1) * insn.x_stride + insn.x_size
        nbytes = last * elem_bytes - first
        try:
            span = self.memory.view(first, nbytes, f"DRAM {insn.opcode.name.lower()}")
        except DeviceMemoryError as e:
            raise DramRangeError(f"instruction {index} ({describe(insn)}): {e}", index) from None
        rows = np.arange(insn.y_size)[:, None] * insn.x_stride + np.arange(insn.x_size)[None, :]
        return span.reshape(-1, elem_bytes), rows.reshape(-1)

    def _check_sram(self, insn: Insn, index: int, what: str, lo: int, hi: int, depth: int) -> None:
        if lo < 0 or hi > depth:
            raise SramRangeError(
                f"instruction {index} ({describe(insn)}): {what} indices [{lo}, {hi}) exceed the "
                f"{what} buffer's {depth} entries",
                index,
            )

    def _load(self, insn: MemInsn, index: int, stats: SimStats) -> None:
        if insn.memory_type == MemType.OUT:
            raise SimError(f"instruction {index}: LOAD cannot target the OUT buffer", index)
        sram, eb, counter = self._sram(insn.memory_type)
        if insn.x_size == 0 or insn.y_size == 0:
            return  # a token-only NOP
        ny = insn.y_pad_0 + insn.y_size + insn.y_pad_1
        nx = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        name = insn.memory_type.name if insn.memory_type != MemType.ACC_8BIT else "ACC"
        self._check_sram(insn, index, name, insn.sram_base, insn.sram_base + ny * nx, len(sram))
        span, offsets = self._dram_rows(insn, eb, index)
        data = span[offsets].reshape(insn.y_size, insn.x_size, eb)
        if insn.memory_type == MemType.ACC_8BIT:
            values = data.view(np.int8).astype(np.int32)
        elif insn.memory_type == MemType.UOP:
            values = data.copy().view("<u4")[..., 0]
        else:
            values = (
                data.copy()
                .view(sram.dtype.newbyteorder("<"))
                .reshape(insn.y_size, insn.x_size, *sram.shape[1:])
            )
        tile = np.zeros((ny, nx, *sram.shape[1:]), dtype=sram.dtype)
        tile[
            insn.y_pad_0 : insn.y_pad_0 + insn.y_size, insn.x_pad_0 : insn.x_pad_0 + insn.x_size
        ] = values.reshape(insn.y_size, insn.x_size, *sram.shape[1:])
        sram[insn.sram_base : insn.sram_base + ny * nx] = tile.reshape(ny * nx, *sram.shape[1:])
        setattr(stats, counter, getattr(stats, counter) + insn.x_size * insn.y_size * eb)

    def _store(self, insn: MemInsn, index: int, stats: SimStats) -> None:
        if insn.memory_type != MemType.OUT:
            raise SimError(
                f"instruction {index}: STORE memory_type must be OUT, not {insn.memory_type.name}",
                index,
            )
        if insn.y_pad_0 or insn.y_pad_1 or insn.x_pad_0 or insn.x_pad_1:
            raise SimError(f"instruction {index}: STORE cannot pad (pad fields must be 0)", index)
        if insn.x_size == 0 or insn.y_size == 0:
            return
        n = insn.y_size * insn.x_size
        self._check_sram(insn, index, "OUT", insn.sram_base, insn.sram_base + n, len(self.out))
        eb = self.cfg.out_elem_bytes
        span, offsets = self._dram_rows(insn, eb, index)
        src = self.out[insn.sram_base : insn.sram_base + n].reshape(n, -1).view(np.uint8)
        span[offsets] = src
        stats.out_store_nbytes += n * eb

    def _loop_indices(
        self, insn: GemmInsn | AluInsn, index: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dst, src, wgt) index arrays of every step, in execution order."""
        if insn.uop_end < insn.uop_bgn:
            raise SimError(
                f"instruction {index} ({describe(insn)}): uop_end ({insn.uop_end}) must be >= "
                f"uop_bgn ({insn.uop_bgn})",
                index,
            )
        self._check_sram(insn, index, "UOP", insn.uop_bgn, insn.uop_end, len(self.uop))
        self._charge(insn, index, insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn))
        dst, src, wgt = decode_uop_array(self.uop[insn.uop_bgn : insn.uop_end], self.cfg)
        io = np.arange(insn.iter_out)[:, None, None]
        ii = np.arange(insn.iter_in)[None, :, None]

        def steps(base: np.ndarray, f_out: int, f_in: int) -> np.ndarray:
            return (base[None, None, :] + io * f_out + ii * f_in).reshape(-1)

        wgt_f = (insn.wgt_factor_out, insn.wgt_factor_in) if isinstance(insn, GemmInsn) else (0, 0)
        # A requantizing GEMM's src fields hold its parameters: no src offsets (hw/isa.py).
        requant = isinstance(insn, GemmInsn) and insn.requant
        src_f = (0, 0) if requant else (insn.src_factor_out, insn.src_factor_in)
        return (
            steps(dst, insn.dst_factor_out, insn.dst_factor_in),
            steps(src, *src_f),
            steps(wgt, *wgt_f),
        )

    def _charge(self, insn: Insn, index: int, steps: int) -> None:
        """Take `steps` from the run's budget, before any work or memory is spent on them."""
        if steps > self._steps_left:
            raise SimBudgetError(
                f"instruction {index} ({describe(insn)}): {steps:,} GEMM/ALU steps exceed what "
                f"is left of the run's budget ({self._steps_left:,} of {self.max_steps:,}); "
                "raise it (max_steps=, sim run --max-steps) if the program is meant to be this "
                "long",
                index,
            )
        self._steps_left -= steps

    def _check_steps(self, insn: Insn, index: int, what: str, idx: np.ndarray, depth: int) -> None:
        if idx.size and (idx.min() < 0 or idx.max() >= depth):
            bad = int(idx[(idx < 0) | (idx >= depth)][0])
            raise SramRangeError(
                f"instruction {index} ({describe(insn)}): {what} index {bad} is out of range "
                f"[0, {depth})",
                index,
            )

    def _write_out(self, rows: np.ndarray) -> None:
        rows = np.unique(rows)
        self.out[rows] = self.acc[rows].astype(np.int8)

    def _gemm(self, insn: GemmInsn, index: int, stats: SimStats) -> None:
        dst, src, wgt = self._loop_indices(insn, index)
        self._check_steps(insn, index, "ACC", dst, len(self.acc))
        if insn.reset_reg:
            self.acc[dst] = 0
            self._write_out(dst)
            return
        self._check_steps(insn, index, "INP", src, len(self.inp))
        self._check_steps(insn, index, "WGT", wgt, len(self.wgt))
        if insn.requant:
            if not self.cfg.gemm_requant:
                raise SimError(
                    f"instruction {index} (GEMM): HWConfig {self.cfg.name!r} has no GEMM "
                    "requant (gemm_requant=False)",
                    index,
                )
            self._gemm_requant(insn, index, dst, src, wgt)
            stats.gemm_counter += dst.size
            return
        for lo in range(0, dst.size, GEMM_CHUNK):
            d, s, w = (
                dst[lo : lo + GEMM_CHUNK],
                src[lo : lo + GEMM_CHUNK],
                wgt[lo : lo + GEMM_CHUNK],
            )
            prod = np.einsum(
                "nbk,nok->nbo", self.inp[s].astype(np.int32), self.wgt[w].astype(np.int32)
            )
            # int32 addition wraps, as the hardware's accumulator does; order cannot matter.
            np.add.at(self.acc, d, prod)
        self._write_out(dst)
        stats.gemm_counter += dst.size

    def _gemm_requant(
        self, insn: GemmInsn, index: int, dst: np.ndarray, src: np.ndarray, wgt: np.ndarray
    ) -> None:
        """Each step: OUT[d] = requant_apply(ACC[d] + product), ACC[d] = 0 (hw/isa.py)."""
        cfg = self.cfg

        def requant(values: np.ndarray) -> np.ndarray:
            return requant_apply(values, insn.rq_shift, insn.rq_round, insn.rq_relu,
                                 cfg.acc_width, cfg.out_width).astype(np.int8)  # fmt: skip

        prod = np.einsum("nbk,nok->nbo", self.inp[src].astype(np.int64),
                         self.wgt[wgt].astype(np.int64))  # fmt: skip
        if np.unique(dst).size == dst.size:
            self.out[dst] = requant(wrap(self.acc[dst].astype(np.int64) + prod, cfg.acc_width))
            self.acc[dst] = 0
            return
        self._charge(insn, index, (SEQUENTIAL_COST - 1) * dst.size)
        for k, d in enumerate(dst.tolist()):  # a repeated dst sees the 0 its last step wrote
            self.out[d] = requant(wrap(self.acc[d].astype(np.int64) + prod[k], cfg.acc_width))
            self.acc[d] = 0

    def _alu(self, insn: AluInsn, index: int, stats: SimStats) -> None:
        if insn.alu_opcode == AluOp.MUL and not self.cfg.alu_mul:
            raise SimError(
                f"instruction {index} (ALU MUL): HWConfig {self.cfg.name!r} has no ALU MUL "
                "(alu_mul=False)",
                index,
            )
        dst, src, _ = self._loop_indices(insn, index)
        depth = len(self.acc)
        self._check_steps(insn, index, "ACC", dst, depth)
        stats.alu_counter += dst.size
        if insn.reset_reg:
            self.acc[dst] = 0
            self._write_out(dst)
            return
        if not insn.use_imm:
            self._check_steps(insn, index, "ACC", src, depth)
        if dst.size:
            self._alu_steps(insn, index, dst, src)
            self._write_out(dst)

    def _alu_steps(self, insn: AluInsn, index: int, dst: np.ndarray, src: np.ndarray) -> None:
        """Apply the ALU steps with the result of executing them one after another."""
        op, bits, n = insn.alu_opcode, self.cfg.acc_width, dst.size
        order = np.arange(n)
        # A step reading an ACC entry that an earlier step wrote needs sequential execution.
        first_write = np.full(len(self.acc), n)
        np.minimum.at(first_write, dst, order)
        raw = not insn.use_imm and bool(np.any(first_write[src] < order))
        repeated = np.unique(dst).size < n
        if not raw and not repeated:
            b = insn.imm if insn.use_imm else self.acc[src]
            self.acc[dst] = alu_apply(op, self.acc[dst], b, bits)
        elif not raw and op in _UFUNC_AT:
            # Repeated destinations of an associative, commutative op: ufunc.at applies them in
            # order; ADD and MUL wrap correctly because int64 arithmetic keeps the low bits.
            acc = self.acc.astype(np.int64)
            b = (
                np.broadcast_to(np.int64(insn.imm), (n, *acc.shape[1:]))
                if insn.use_imm
                else (acc[src])
            )
            with np.errstate(over="ignore"):
                _UFUNC_AT[op].at(acc, dst, b)
            self.acc[:] = alu_apply(AluOp.ADD, acc, 0, bits)  # wrap to acc_width bits
        else:
            self._charge(insn, index, (SEQUENTIAL_COST - 1) * n)
            for d, s in zip(dst.tolist(), src.tolist(), strict=True):
                b = insn.imm if insn.use_imm else self.acc[s]
                self.acc[d] = alu_apply(op, self.acc[d], b, bits)


_UFUNC_AT = {
    AluOp.MIN: np.minimum,
    AluOp.MAX: np.maximum,
    AluOp.ADD: np.add,
    AluOp.MUL: np.multiply,
}


class StageStepper:
    """The stepping loop both simulators share: fetch, then each stage until it blocks.

    Compute runs first and each stage runs until it blocks, so FINISH is reached as early as
    the tokens allow: a FINISH that could overtake unfinished work is then caught. Subclasses
    provide ``_fetch`` and ``_step`` (True when something moved), ``_deadlock_report`` and
    set ``done`` when FINISH retires.
    """

    ORDER = (Stage.COMPUTE, Stage.LOAD, Stage.STORE)
    done: bool

    def run(self) -> None:
        while not self.done:
            progress = self._fetch()
            for stage in self.ORDER:
                while not self.done and self._step(stage):
                    progress = True
            if not progress and not self.done:
                raise DeadlockError(self._deadlock_report())

    def _fetch(self) -> bool:
        raise NotImplementedError

    def _step(self, stage: Stage) -> bool:
        raise NotImplementedError

    def _deadlock_report(self) -> str:
        raise NotImplementedError


class TokenStepper(StageStepper):
    """The token protocol without data: fetch, three in-order stages, four bounded token queues.

    A stage pops an instruction together with its tokens, runs it (``_execute``: nothing here),
    then pushes its tokens, waiting while a token queue is full: the RTL's order (pop in cycle S,
    push at E), so popping frees room before pushing needs it. The compiler's ``verify_tokens``
    runs this class; ``FunctionalSim`` runs it with data.

    Raises (from ``run``):
        DeadlockError: naming each stage's waiting instruction and queue.
        SimError: FINISH could run before other instructions, or would leave tokens behind.
    """

    def __init__(self, insns: Sequence[Insn], insn_queue_depth: int, dep_queue_depth: int) -> None:
        self.insns = insns
        self.insn_queue_depth, self.dep_queue_depth = insn_queue_depth, dep_queue_depth
        self.queues: dict[Stage, deque[int]] = {s: deque() for s in Stage}
        self.tokens = dict.fromkeys(TOKEN_QUEUES, 0)
        self.pending: dict[Stage, list[str]] = {s: [] for s in Stage}
        self.fetched = self.executed = 0
        self.done = False

    def _execute(self, insn: Insn, index: int) -> None:
        """Run a popped instruction (the data-less protocol has nothing to do)."""

    def _fetch(self) -> bool:
        depth, moved = self.insn_queue_depth, False
        while self.fetched < len(self.insns):
            stage = stage_of(self.insns[self.fetched])
            if len(self.queues[stage]) >= depth:
                break
            self.queues[stage].append(self.fetched)
            self.fetched += 1
            moved = True
        return moved

    def _push_pending(self, stage: Stage) -> bool:
        moved = False
        while self.pending[stage] and self.tokens[self.pending[stage][0]] < self.dep_queue_depth:
            self.tokens[self.pending[stage].pop(0)] += 1
            moved = True
        return moved

    def _step(self, stage: Stage) -> bool:
        if self.pending[stage]:
            return self._push_pending(stage)
        queue = self.queues[stage]
        if not queue and not (self._fetch() and queue):
            return False
        index = queue[0]
        insn = self.insns[index]
        pops = pop_queues(insn)
        if any(self.tokens[q] == 0 for q in pops):
            return False
        if isinstance(insn, FinishInsn):
            self._check_drained(pops)
        for q in pops:
            self.tokens[q] -= 1
        queue.popleft()
        self._execute(insn, index)
        self.executed += 1
        self.pending[stage] = push_queues(insn)
        self._push_pending(stage)
        if isinstance(insn, FinishInsn):
            self.done = True
        return True

    def _waiting(self, stage: Stage) -> str:
        if self.pending[stage]:
            return describe_wait(stage, blocked_push=self.pending[stage][0])
        if not self.queues[stage]:
            return describe_wait(stage)
        index = self.queues[stage][0]
        insn = self.insns[index]
        empty = [q for q in pop_queues(insn) if not self.tokens[q]]
        return describe_wait(stage, (index, insn), empty)

    def _deadlock_report(self) -> str:
        parts = [self._waiting(s) for s in Stage]
        if self.fetched < len(self.insns):
            nxt = self.insns[self.fetched]
            parts.append(describe_fetch_block(self.fetched, nxt, self.insn_queue_depth))
        return f"deadlock after {self.executed} of {len(self.insns)} instructions: " + "; ".join(
            parts
        )

    def _check_drained(self, finish_pops: list[str]) -> None:
        """FINISH is ready: everything else must have run, and no token may be left over."""
        left = sorted(i for q in self.queues.values() for i in q)[:-1]  # the last is FINISH
        if left or self.fetched < len(self.insns):
            first = left[0] if left else self.fetched
            count = len(left) + len(self.insns) - self.fetched
            raise SimError(
                f"FINISH can run with {count} instruction(s) not yet executed (first: "
                f"instruction {first}, {describe(self.insns[first])}); FINISH must wait for "
                "them with dependency tokens",
                first,
            )
        leftover = {q: n - finish_pops.count(q) for q, n in self.tokens.items()}
        leftover = {q: n for q, n in leftover.items() if n}
        for stage in Stage:
            for q in self.pending[stage]:
                leftover[q] = leftover.get(q, 0) + 1
        if leftover:
            raise SimError(
                f"FINISH would leave tokens in {leftover}; every pushed token must be popped, "
                "or the next program starts out of step"
            )


class _Pipeline(TokenStepper):
    """The token protocol running each instruction on the simulator's SRAMs and DRAM."""

    def __init__(self, sim: FunctionalSim, insns: Sequence[Insn], stats: SimStats) -> None:
        super().__init__(insns, sim.cfg.insn_queue_depth, sim.cfg.dep_queue_depth)
        self.sim, self.stats = sim, stats

    def _execute(self, insn: Insn, index: int) -> None:
        self.sim.exec_insn(insn, index, self.stats)
        counter = f"{stage_of(insn).name.lower()}_insns"
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
