"""HWConfig: the accelerator's knobs, and every quantity derived from them.

Everything downstream (ISA field widths, simulators, RTL, compiler tiling) reads a HWConfig;
nothing hard-codes 16. Knob names follow VTA's config JSON in lower case (vta_facts.md §2.2).

Example:
    >>> cfg = HWConfig.preset("pynq")
    >>> cfg.block_in, cfg.inp_depth, cfg.wgt_elem_bytes
    (16, 2048, 256)
    >>> HWConfig.from_json(cfg.to_json()) == cfg
    True
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import jsontext


@dataclass(frozen=True)
class HWConfig:
    """The VTA-like accelerator's parameters (all sizes are log2 unless named otherwise).

    Args:
        name: a label used in bitstream names and reports.
        log_batch: log2 of BATCH, the rows of the GEMM core's input tile.
        log_block_in: log2 of BLOCK_IN, the reduction width of one GEMM step.
        log_block_out: log2 of BLOCK_OUT, the output channels of one GEMM step.
        log_inp_width, log_wgt_width, log_acc_width: log2 of the element bit widths.
        log_uop_buff_size, log_inp_buff_size, log_wgt_buff_size, log_acc_buff_size:
            log2 of the on-chip buffer sizes in bytes.
        axi_data_width: bits of the AXI memory bus.
        clock_mhz: target clock frequency.
        alu_mul: whether the tensor ALU has our MUL extension (VTA's hardware lacked it).
        insn_queue_depth: entries of each command queue (load, compute, store).
        dep_queue_depth: entries of each dependency-token queue.
        max_outstanding_reads: AXI read bursts a LOAD engine keeps in flight (addresses issued
            ahead of the data, which returns in order on one ID). 1, VTA's and the presets'
            choice, pays the DRAM read latency once per burst; more hides it behind the
            earlier bursts' data (docs/hardware.md "Load engine").
        gemm_requant: whether a GEMM instruction may requantize on writeback (``requant``,
            hw/isa.py): its steps write OUT with the accumulator shifted (with rounding),
            clipped to the int8 range (or [0, max] with ReLU) and clear ACC, so a conv's
            bias step also ends its epilogue (no ALU passes, no reset). Off in the presets
            (VTA's GEMM); it needs one spare bit in the GEMM word 0 (``log_uop_buff_size``
            at most 15) and ``log_inp_buff_size`` with room for the parameters
            (docs/hardware.md "GEMM core").
        board: the board family this config targets (for deployment), or "sim".

    Raises:
        ValueError: naming the knob, when a knob or a derived quantity is out of range.
    """

    name: str = "pynq"
    log_batch: int = 0
    log_block_in: int = 4
    log_block_out: int = 4
    log_inp_width: int = 3
    log_wgt_width: int = 3
    log_acc_width: int = 5
    log_uop_buff_size: int = 15
    log_inp_buff_size: int = 15
    log_wgt_buff_size: int = 18
    log_acc_buff_size: int = 17
    axi_data_width: int = 64
    clock_mhz: float = 100.0
    alu_mul: bool = True
    insn_queue_depth: int = 512
    dep_queue_depth: int = 1024
    max_outstanding_reads: int = 1
    gemm_requant: bool = False
    board: str = "pynq"

    def __post_init__(self) -> None:
        _validate(self)

    # ---- shapes -------------------------------------------------------------------------
    @property
    def batch(self) -> int:
        return 1 << self.log_batch

    @property
    def block_in(self) -> int:
        return 1 << self.log_block_in

    @property
    def block_out(self) -> int:
        return 1 << self.log_block_out

    # ---- element bit widths ---------------------------------------------------------------
    @property
    def inp_width(self) -> int:
        return 1 << self.log_inp_width

    @property
    def wgt_width(self) -> int:
        return 1 << self.log_wgt_width

    @property
    def acc_width(self) -> int:
        return 1 << self.log_acc_width

    @property
    def out_width(self) -> int:
        """OUT holds ACC values truncated to the input width (as VTA's LOG_OUT_WIDTH)."""
        return self.inp_width

    # ---- element (tensor) sizes in bytes --------------------------------------------------
    @property
    def inp_elem_bytes(self) -> int:
        return self.batch * self.block_in * self.inp_width // 8

    @property
    def wgt_elem_bytes(self) -> int:
        return self.block_out * self.block_in * self.wgt_width // 8

    @property
    def acc_elem_bytes(self) -> int:
        return self.batch * self.block_out * self.acc_width // 8

    @property
    def acc8_elem_bytes(self) -> int:
        """An ACC_8BIT load element: BATCH x BLOCK_OUT values of 8 bits, sign-extended."""
        return self.batch * self.block_out

    @property
    def out_elem_bytes(self) -> int:
        return self.batch * self.block_out * self.out_width // 8

    @property
    def uop_elem_bytes(self) -> int:
        return 4  # 32-bit micro-ops (hw.isa.UOP_BYTES)

    # ---- buffer sizes and depths ----------------------------------------------------------
    @property
    def uop_buff_size(self) -> int:
        return 1 << self.log_uop_buff_size

    @property
    def inp_buff_size(self) -> int:
        return 1 << self.log_inp_buff_size

    @property
    def wgt_buff_size(self) -> int:
        return 1 << self.log_wgt_buff_size

    @property
    def acc_buff_size(self) -> int:
        return 1 << self.log_acc_buff_size

    @property
    def out_buff_size(self) -> int:
        return self.out_depth * self.out_elem_bytes

    @property
    def log_uop_depth(self) -> int:
        return self.log_uop_buff_size - 2

    @property
    def log_inp_depth(self) -> int:
        return self.log_inp_buff_size - (
            self.log_batch + self.log_block_in + self.log_inp_width - 3
        )

    @property
    def log_wgt_depth(self) -> int:
        bits = self.log_block_out + self.log_block_in + self.log_wgt_width - 3
        return self.log_wgt_buff_size - bits

    @property
    def log_acc_depth(self) -> int:
        bits = self.log_batch + self.log_block_out + self.log_acc_width - 3
        return self.log_acc_buff_size - bits

    @property
    def uop_depth(self) -> int:
        return 1 << self.log_uop_depth

    @property
    def inp_depth(self) -> int:
        return 1 << self.log_inp_depth

    @property
    def wgt_depth(self) -> int:
        return 1 << self.log_wgt_depth

    @property
    def acc_depth(self) -> int:
        return 1 << self.log_acc_depth

    @property
    def out_depth(self) -> int:
        """OUT shares ACC's indices."""
        return self.acc_depth

    # ---- performance ----------------------------------------------------------------------
    @property
    def macs_per_cycle(self) -> int:
        return self.batch * self.block_in * self.block_out

    @property
    def peak_gops(self) -> float:
        """Peak GEMM throughput: two ops per MAC, one GEMM micro-op per cycle."""
        return 2 * self.macs_per_cycle * self.clock_mhz / 1000.0

    @property
    def bitstream_name(self) -> str:
        """VTA's naming scheme, e.g. ``1x16_i8w8a32_15_15_18_17``."""
        return (
            f"{self.batch}x{self.block_in}_i{self.inp_width}w{self.wgt_width}a{self.acc_width}"
            f"_{self.log_uop_buff_size}_{self.log_inp_buff_size}"
            f"_{self.log_wgt_buff_size}_{self.log_acc_buff_size}"
        )

    # ---- serialization --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every knob, except a knob added later (``LATER_KNOBS``) at its default: so configs,
        tuning-log keys and cache digests written before it existed stay valid."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if LATER_KNOBS.get(f.name, _NONE) != getattr(self, f.name)
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HWConfig:
        if not isinstance(data, dict):  # a ValueError: bad input, as every other knob check
            raise ValueError(f"a HWConfig must be a JSON object, not {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown HWConfig knob(s) {unknown}; known knobs: {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> HWConfig:
        return cls.from_dict(jsontext.loads(text))

    def replace(self, **changes: Any) -> HWConfig:
        return self.from_dict({**dataclasses.asdict(self), **changes})

    @classmethod
    def preset(cls, name: str) -> HWConfig:
        """A named preset: one of ``PRESETS``."""
        try:
            return PRESETS[name]
        except KeyError:
            raise ValueError(
                f"unknown HWConfig preset {name!r}; presets: {sorted(PRESETS)}"
            ) from None

    @classmethod
    def load(cls, spec: str | Path | HWConfig) -> HWConfig:
        """A preset name, a path to a JSON file, or a HWConfig (returned as is)."""
        if isinstance(spec, HWConfig):
            return spec
        if not isinstance(spec, str | Path):  # an int would open that file descriptor
            raise TypeError(f"a HWConfig must be given as a preset name, a JSON file path or a "
                            f"HWConfig, not {type(spec).__name__} {spec!r:.40}")  # fmt: skip
        if isinstance(spec, str) and spec in PRESETS:
            return PRESETS[spec]
        path = Path(spec)
        if path.suffix == ".json" or path.exists():
            try:
                return cls.from_json(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON: {e}") from None
            except UnicodeDecodeError as e:  # a binary file given by mistake
                raise ValueError(f"{path}: not a JSON HWConfig (byte {e.start} is not "
                                 "UTF-8 text)") from None  # fmt: skip
            except ValueError as e:  # a knob out of range, unknown or of the wrong type
                raise ValueError(f"{path}: {e}") from None
        return cls.preset(str(spec))


#: knobs added after tuning logs and DSE results were first written -> their default, which
#: ``to_dict`` leaves out (an older file means that default)
LATER_KNOBS: dict[str, Any] = {"max_outstanding_reads": 1, "gemm_requant": False}
_NONE = object()

_INT_RANGES: dict[str, tuple[int, int]] = {
    "log_batch": (0, 4),
    "log_block_in": (0, 6),
    "log_block_out": (0, 6),
    "log_inp_width": (3, 3),
    "log_wgt_width": (3, 3),
    "log_acc_width": (5, 5),
    "log_uop_buff_size": (2, 20),
    "log_inp_buff_size": (0, 24),
    "log_wgt_buff_size": (0, 24),
    "log_acc_buff_size": (0, 24),
    "insn_queue_depth": (1, 1 << 16),
    "dep_queue_depth": (1, 1 << 16),
    "max_outstanding_reads": (1, 16),
}
_WIDTH_NOTE = {
    "log_inp_width": "only 8-bit inputs are supported",
    "log_wgt_width": "only 8-bit weights are supported",
    "log_acc_width": "only 32-bit accumulators are supported",
}


#: the knobs a design-space exploration may vary (every field but the labels)
TUNABLE_KNOBS = (*_INT_RANGES, "axi_data_width", "clock_mhz", "alu_mul", "gemm_requant")
AXI_DATA_WIDTHS = (32, 64, 128, 256, 512)


def check_knob(knob: str, value: Any) -> None:
    """Check one knob's value on its own (ranges and types; combinations are checked by
    HWConfig itself).

    Raises:
        ValueError: naming the knob, its allowed range and the value.

    Example:
        >>> check_knob("log_block_in", 7)
        Traceback (most recent call last):
        ...
        ValueError: HWConfig.log_block_in must be an int in [0, 6], not 7
    """
    if knob in _INT_RANGES:
        lo, hi = _INT_RANGES[knob]
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            note = f" ({_WIDTH_NOTE[knob]})" if knob in _WIDTH_NOTE else ""
            raise ValueError(f"HWConfig.{knob} must be an int in [{lo}, {hi}], not {value!r}{note}")
    elif knob == "axi_data_width":
        if isinstance(value, bool) or value not in AXI_DATA_WIDTHS:
            raise ValueError(
                f"HWConfig.axi_data_width must be one of {', '.join(map(str, AXI_DATA_WIDTHS))}, "
                f"not {value!r}"
            )
    elif knob == "clock_mhz":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 2000:
            raise ValueError(f"HWConfig.clock_mhz must be in (0, 2000], not {value!r}")
    elif knob in ("alu_mul", "gemm_requant"):
        if not isinstance(value, bool):
            raise ValueError(f"HWConfig.{knob} must be a bool, not {value!r}")
    elif knob in ("name", "board"):
        if not isinstance(value, str) or not value:
            raise ValueError(f"HWConfig.{knob} must be a non-empty string, not {value!r}")
    else:
        known = sorted(f.name for f in dataclasses.fields(HWConfig))
        raise ValueError(f"unknown HWConfig knob {knob!r}; known knobs: {known}")


def _validate(cfg: HWConfig) -> None:
    for f in dataclasses.fields(cfg):
        check_knob(f.name, getattr(cfg, f.name))
    # Every buffer must hold at least one element.
    for buf in ("inp", "wgt", "acc"):
        if getattr(cfg, f"log_{buf}_depth") < 0:
            raise ValueError(
                f"HWConfig.log_{buf}_buff_size must be at least "
                f"log2({getattr(cfg, f'{buf}_elem_bytes')}) (one {buf} element), "
                f"not {getattr(cfg, f'log_{buf}_buff_size')}"
            )
    # The ISA encodes SRAM indices; its own checks (field widths vs 128 bits) live in hw.isa.
    from .isa import check_config_fits

    check_config_fits(cfg)


PRESETS: dict[str, HWConfig] = {
    # VTA's default (vta_facts.md §2.2): 1x16x16 int8, 15/15/18/17, 100 MHz, 64-bit AXI.
    "pynq": HWConfig(name="pynq", board="pynq"),
    # Small enough for fast RTL simulation: 1x4x4, 256-entry INP/WGT/ACC, 1024 micro-ops.
    "tiny": HWConfig(
        name="tiny",
        log_block_in=2,
        log_block_out=2,
        log_uop_buff_size=12,
        log_inp_buff_size=10,
        log_wgt_buff_size=12,
        log_acc_buff_size=12,
        insn_queue_depth=32,
        dep_queue_depth=32,
        board="sim",
    ),
    # Zynq UltraScale+ boards: VTA's ultra96 target uses a 128-bit bus (vta_facts.md §2.3).
    "ultra96": HWConfig(name="ultra96", axi_data_width=128, clock_mhz=333.0, board="ultra96"),
    "kv260": HWConfig(name="kv260", axi_data_width=128, clock_mhz=250.0, board="kv260"),
}
