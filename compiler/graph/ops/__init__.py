"""The op families; importing this package registers every op in `registry.OPS`."""

from __future__ import annotations

from . import (  # noqa: F401
    affine_grid,
    attention,
    bitcast,
    col2im,
    einsum,
    elemwise,
    gather_nd,
    grid_sample,
    indexing,
    layout,
    losses,
    nn,
    normalization,
    qnn,
    quant,
    reduce_extra,
    resize,
    rnn,
    scan_axis,
    scatter_elements,
    shape,
    space,
    stateful,
    topk,
    transformer,
)
