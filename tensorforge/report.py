"""Text reports of a compiled accelerator module: where each layer runs, and what each
accelerator call did in the last run (counters, DRAM bytes, cycles)."""

from __future__ import annotations

from typing import Any

from .compiler.quantize.requant import MODE_NAMES, WEIGHT_SCALES


def placement_table(module: Any) -> str:
    """Every node of the int8 graph, where it runs and why (``module.stats["placement"]``)."""
    rows = module.stats.get("placement", [])
    if not rows:
        return "(no placement: not an accelerator module)"
    width = max(len(r[0]) for r in rows)
    op_width = max(len(r[1]) for r in rows)
    lines = [f"{'layer':<{width}}  {'op':<{op_width}}  runs on  why"]
    lines += [f"{n:<{width}}  {op:<{op_width}}  {where:<7}  {why}" for n, op, where, why in rows]
    share = module.stats.get("offloaded_macs", 0.0)
    vta = sum(1 for r in rows if r[2] == "vta")
    done, layers = module.stats.get("offloaded_layers", _int8_layers(rows))
    lines.append(f"on the accelerator: {done} of {layers} conv/dense layers ({share:.1%} of "
                 f"their MACs), {vta} of {len(rows)} nodes")  # fmt: skip
    if "requant_mode" in module.stats:  # modules saved before it was recorded lack it
        lines.append(requant_line(module.stats["requant_mode"], module.stats.get("weight_scales")))
    return "\n".join(lines)


def _int8_layers(rows: list[list[str]]) -> tuple[int, int]:
    """(offloaded, all) int8 conv/dense rows: the count of modules saved before
    ``offloaded_layers`` (which counts the float ones too) was recorded."""
    layers = [r for r in rows if r[1] in ("tf.qconv2d", "tf.qdense")]
    return sum(1 for r in layers if r[2] == "vta"), len(layers)


def requant_line(mode: str, weights: str | None = None) -> str:
    """Which requantization the int8 graph uses (``module.stats["requant_mode"]`` and
    ``["weight_scales"]``, which modules saved before it was recorded lack)."""
    if mode not in MODE_NAMES:
        return "int8 requantization: as in the given int8 graph"
    if weights in WEIGHT_SCALES:
        return (f"int8 requantization: {MODE_NAMES[mode]}, {weights} weight scales; the target "
                "options -mode=shift|mul and -weights=per-channel|per-tensor choose")  # fmt: skip
    return f"int8 requantization: {MODE_NAMES[mode]}; the target option -mode=shift|mul chooses"


def dram_bytes(counters: dict[str, int]) -> int:
    """Bytes the accelerator's DMA moved (the functional simulator's ``*_nbytes`` counters)."""
    return sum(v for k, v in counters.items() if k.endswith("_nbytes"))


def device_table(results: dict[str, Any], clock_mhz: float | None = None) -> str:
    """One row per accelerator call of the last run (``module.device_results()``): GEMM and
    ALU operations, DRAM bytes and cycles (where the device counts them), and a total."""
    if not results:
        return "(no accelerator calls have run)"
    width = max([len(label) for label in results] + [17])
    lines = [f"{'accelerator call':<{width}}  {'GEMM ops':>12}  {'ALU ops':>10}  "
             f"{'DRAM bytes':>12}  {'cycles':>12}"]  # fmt: skip
    totals = [0, 0, 0, 0]
    for label, r in results.items():
        c = r.stats
        row = [c.get("gemm_counter", 0), c.get("alu_counter", 0), dram_bytes(c), r.cycles]
        cycles = f"{row[3]:,}" if row[3] is not None else "-"
        lines.append(f"{label:<{width}}  {row[0]:>12,}  {row[1]:>10,}  {row[2]:>12,}  "
                     f"{cycles:>12}")  # fmt: skip
        totals = [t + (v or 0) for t, v in zip(totals, row, strict=True)]
    timed = all(r.cycles is not None for r in results.values())
    cycles = f"{totals[3]:,}" if timed else "-"
    lines.append(f"{'total':<{width}}  {totals[0]:>12,}  {totals[1]:>10,}  {totals[2]:>12,}  "
                 f"{cycles:>12}")  # fmt: skip
    if timed and clock_mhz:
        lines.append(f"{totals[3]:,} cycles = {totals[3] / clock_mhz / 1e3:.3f} ms of "
                     f"accelerator time at {clock_mhz:g} MHz")  # fmt: skip
    if not timed:
        backend = next(iter(results.values())).backend or "this"
        lines.append(f"cycles '-': the {backend} device does not count cycles (cyclesim and "
                     "rtl do)")  # fmt: skip
    return "\n".join(lines)
