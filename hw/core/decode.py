"""Amaranth views of ISA words whose field positions come from `hw.isa.layouts(cfg)`."""

from __future__ import annotations

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from ..config import HWConfig
from ..isa import INSN_BYTES, Layout, layouts

INSN_BITS = INSN_BYTES * 8


def struct_layout(layout: Layout) -> data.FlexibleLayout:
    """An Amaranth layout with the fields of an ISA ``Layout`` at the ISA's bit positions.

    Signed ISA fields (the ALU immediate) become signed shapes; zero-width fields are kept, so
    every ISA field name exists on the view for every HWConfig.

    Example:
        >>> from tensorforge.hw.config import HWConfig
        >>> from tensorforge.hw.isa import layouts
        >>> lay = struct_layout(layouts(HWConfig.preset("pynq")).gemm)
        >>> lay.size, lay["uop_bgn"].offset, lay["uop_bgn"].width
        (128, 8, 13)
    """
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a hw.isa.Layout, not {layout!r}")
    fields = {
        f.name: data.Field(signed(f.width) if f.signed else unsigned(f.width), f.lsb)
        for f in layout.fields
    }
    return data.FlexibleLayout(layout.width, fields)


def gemm_layout(cfg: HWConfig) -> data.FlexibleLayout:
    """The 128-bit GEMM (and FINISH) instruction format of ``cfg``."""
    return struct_layout(layouts(cfg).gemm)


def alu_layout(cfg: HWConfig) -> data.FlexibleLayout:
    """The 128-bit ALU instruction format of ``cfg``."""
    return struct_layout(layouts(cfg).alu)


def mem_layout(cfg: HWConfig) -> data.FlexibleLayout:
    """The 128-bit LOAD/STORE instruction format of ``cfg``."""
    return struct_layout(layouts(cfg).mem)


def uop_layout(cfg: HWConfig) -> data.FlexibleLayout:
    """The 32-bit micro-op format of ``cfg``."""
    return struct_layout(layouts(cfg).uop)
