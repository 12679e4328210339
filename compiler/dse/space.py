"""The hardware design space: which HWConfig knobs vary, over which values, for which FPGA part.

A space is a JSON object (``tensorforge dse --space space.json``)::

    {
      "base": "pynq",                       # a preset name, or a HWConfig JSON object
      "part": "xc7z020",                    # a key of tensorforge.hw.synth.PARTS
      "knobs": {                            # HWConfig field -> the values to try
        "log_block_out": [3, 4, 5],
        "log_inp_buff_size": [15, 16],
        "clock_mhz": [100]
      },
      "limits": {"DSP": 1.0, "BRAM36": 1.0},  # optional: the share of each resource a
                                               # candidate may use (LUT, FF, DSP, BRAM36)
      "presets": ["pynq"]                   # optional: configs evaluated and marked in plots
    }

Every point takes the base's other knobs; its ``board`` is the part's board family (so the
GEMM core packs two MACs per DSP48E1 on the Zynq-7000 parts, as the ``pynq`` preset does), and
its name is ``dse-`` and the first digits of `config_key`. A point whose combination HWConfig
rejects (a buffer too deep for the ISA's fields, say) is not a candidate, nor one that cannot fit
the part whatever synthesis does (`area.screen`: the GEMM core's DSPs or the SRAMs' block RAM
alone exceed it); a value out of a knob's own range is an error naming the knob, and a space
without any candidate is an error.

Virtual threads are a schedule knob (``vthreads`` of the ``vta.conv2d`` template), not a
hardware one: every candidate's schedules are retuned with them.

Example:
    >>> space = HwSpace.from_json({"base": "pynq", "part": "xc7z020",
    ...                            "knobs": {"log_wgt_buff_size": [17, 18]}})
    >>> cs = space.config_space()
    >>> len(cs), space.config(cs.get(0).values).wgt_depth
    (2, 512)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...hw import jsontext
from ...hw.config import PRESETS, TUNABLE_KNOBS, HWConfig, check_knob
from ...hw.synth import PARTS
from ..autotune.space import ConfigSpace, Knob
from .area import screen

#: the board family of each part's candidates (it decides DSP packing and deployment)
PART_BOARDS = {"xc7z010": "pynq", "xc7z020": "pynq", "xczu3eg": "ultra96", "xck26": "kv260"}
#: the resources of a synthesis report a limit may name
RESOURCES = ("LUT", "FF", "DSP", "BRAM36")


class SpaceFileError(ValueError):
    """A space file that is not valid: the message names the field and what it must be."""


def config_key(cfg: HWConfig) -> str:
    """A digest of a config's knobs (not its name): equal hardware and clock, equal key.

    Example:
        >>> pynq = HWConfig.preset("pynq")
        >>> config_key(pynq) == config_key(pynq.replace(name="other"))
        True
    """
    knobs = {k: v for k, v in cfg.to_dict().items() if k != "name"}
    return hashlib.sha256(json.dumps(knobs, sort_keys=True).encode()).hexdigest()[:16]


def _knob_value(value: Any) -> int | bool | str:
    """A knob value as `Knob` holds it: clock frequencies that are not whole numbers as text."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else repr(value)
    return value


def _hw_value(knob: str, value: Any) -> Any:
    if knob == "clock_mhz":  # a float, as in the presets (so equal clocks give equal keys)
        return float(value)
    return value


class HwSpace:
    """A set of accelerator configs to explore on one FPGA part.

    Args:
        base: the config every point starts from (a preset name or a HWConfig).
        part: the FPGA part (a key of `tensorforge.hw.synth.PARTS`).
        knobs: HWConfig field -> the values to try (each checked on its own).
        limits: resource -> the share of the part a fitting candidate may use (default 1.0).
        presets: preset names evaluated as anchors and marked in the plots (default: the base,
            when it is a preset).

    Raises:
        SpaceFileError: naming the field: an unknown part, knob or resource, a value out of its
            knob's range, an empty list, a limit outside (0, 1].
    """

    def __init__(
        self,
        base: str | HWConfig,
        part: str,
        knobs: Mapping[str, list[Any]],
        limits: Mapping[str, float] | None = None,
        presets: list[str] | None = None,
    ) -> None:
        if part not in PARTS:
            raise SpaceFileError(f"space 'part' must be one of {sorted(PARTS)}, not {part!r}")
        self.part = part
        try:
            self.base = HWConfig.preset(base) if isinstance(base, str) else base
        except ValueError as exc:
            raise SpaceFileError(f"space 'base': {exc}") from None
        if not isinstance(self.base, HWConfig):
            raise SpaceFileError(f"space 'base' must be a preset name or a HWConfig, not {base!r}")
        if not isinstance(knobs, Mapping):
            raise SpaceFileError(f"space 'knobs' must be an object of lists, not {knobs!r}")
        self.knobs: dict[str, list[Any]] = {}
        for name, values in knobs.items():
            if name not in TUNABLE_KNOBS:
                raise SpaceFileError(f"space knob {name!r} is not a HWConfig knob a design may "
                                     f"vary; those are {list(TUNABLE_KNOBS)}")  # fmt: skip
            if not isinstance(values, list) or not values:
                raise SpaceFileError(f"space knob {name!r} must be a non-empty list of values, "
                                     f"not {values!r}")  # fmt: skip
            for v in values:
                try:
                    check_knob(name, v)
                except ValueError as exc:
                    raise SpaceFileError(f"space knob {name!r}: {exc}") from None
            if len({json.dumps(v) for v in values}) != len(values):
                raise SpaceFileError(f"space knob {name!r} repeats a value: {values}")
            self.knobs[name] = list(values)
        self.limits = {r: 1.0 for r in RESOURCES}
        for r, share in dict(limits or {}).items():
            if r not in RESOURCES:
                raise SpaceFileError(f"space limit {r!r} must be one of {list(RESOURCES)}")
            if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
                raise SpaceFileError(f"space limit {r!r} must be a share in (0, 1], not "
                                     f"{share!r}")  # fmt: skip
            self.limits[r] = float(share)
        if presets is None:
            presets = [base] if isinstance(base, str) else []
        for name in presets:
            if name not in PRESETS:
                raise SpaceFileError(f"space preset {name!r} is not one of {sorted(PRESETS)}")
        self.presets = list(presets)

    # ---- reading and writing ---------------------------------------------------------------------

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | Path) -> HwSpace:
        """A space from its JSON object, or from a file holding one."""
        where = "space"
        if isinstance(data, str | Path):
            where = str(data)
            try:
                text = Path(data).read_text(encoding="utf-8")
            except OSError as exc:
                raise SpaceFileError(f"{data}: cannot read the space file: {exc}") from None
            except UnicodeDecodeError as exc:  # a binary file given by mistake
                raise SpaceFileError(f"{data}: not a JSON space file (byte {exc.start} is not "
                                     "UTF-8 text)") from None  # fmt: skip
            try:
                data = jsontext.loads(text)
            except json.JSONDecodeError as exc:
                raise SpaceFileError(f"{data}: not valid JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise SpaceFileError(f"{where}: a space must be a JSON object, not "
                                 f"{type(data).__name__}")  # fmt: skip
        unknown = sorted(set(data) - {"base", "part", "knobs", "limits", "presets"})
        if unknown:
            raise SpaceFileError(f"{where}: unknown fields {unknown}; a space has base, part, "
                                 "knobs, limits and presets")  # fmt: skip
        for need in ("part", "knobs"):
            if need not in data:
                raise SpaceFileError(f"{where}: the space misses its {need!r} field")
        base = data.get("base", "pynq")
        if isinstance(base, Mapping):
            try:
                base = HWConfig.from_dict(dict(base))
            except (TypeError, ValueError) as exc:
                raise SpaceFileError(f"{where}: 'base': {exc}") from None
        try:
            return cls(base, data["part"], data["knobs"], data.get("limits"), data.get("presets"))
        except SpaceFileError as exc:
            raise SpaceFileError(f"{where}: {exc}") from None

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base.to_dict(), "part": self.part, "knobs": self.knobs,
                "limits": self.limits, "presets": self.presets}  # fmt: skip

    # ---- points ----------------------------------------------------------------------------------

    @property
    def board(self) -> str:
        return PART_BOARDS.get(self.part, self.base.board)

    def config(self, values: Mapping[str, Any]) -> HWConfig:
        """The HWConfig of a point (knob values; the base's for knobs not given).

        Raises:
            ValueError: HWConfig rejects the combination.
        """
        changes = {k: _hw_value(k, v) for k, v in values.items()}
        cfg = self.base.replace(board=self.board, **changes)
        return cfg.replace(name=f"dse-{config_key(cfg)[:8]}")

    def preset_config(self, name: str) -> HWConfig:
        """A preset on this space's part (its board; its name kept)."""
        return PRESETS[name].replace(board=self.board)

    def why_invalid(self, values: Mapping[str, Any]) -> str | None:
        """Why a point is not a candidate: HWConfig rejects it, or it cannot fit the part
        (`area.screen`); None for a candidate."""
        try:
            cfg = self.config(values)
        except ValueError as exc:
            return str(exc)
        reasons = screen(cfg, self.part, self.limits)
        return f"cannot fit {self.part}: {'; '.join(reasons)}" if reasons else None

    def config_space(self) -> ConfigSpace:
        """The knobs as an auto-tuner `ConfigSpace` (the search runs the tuner's explorers);
        its default is the base's value of each knob where listed, else the first value."""
        knobs = [Knob(name, tuple(_knob_value(v) for v in values))
                 for name, values in self.knobs.items()]  # fmt: skip
        default = {}
        for knob in knobs:
            mine = _knob_value(getattr(self.base, knob.name))
            default[knob.name] = mine if mine in knob.values else knob.values[0]
        if self.why_invalid(default):
            first = next(iter(self._valid_values(knobs)), None)
            if first is None:
                raise SpaceFileError(
                    f"no point of the space is a candidate: none is a valid HWConfig that can "
                    f"fit {self.part} (the base's, {default}: {self.why_invalid(default)})"
                )
            default = first
        return ConfigSpace("dse", knobs, default, self.why_invalid)

    def _valid_values(self, knobs: list[Knob]):
        space = ConfigSpace("dse", knobs, {k.name: k.values[0] for k in knobs})
        for k in range(len(space)):
            values = space.get(k).values
            if self.why_invalid(values) is None:
                yield values

    def __len__(self) -> int:
        return math.prod(len(v) for v in self.knobs.values())

    def describe(self) -> str:
        knobs = ", ".join(f"{k}={v}" for k, v in self.knobs.items())
        return f"{len(self)} points on {self.part} ({knobs})"
