"""The op families; importing this package registers every op in `registry.OPS`."""

from __future__ import annotations

from . import (  # noqa: F401
    affine_grid,
    col2im,
    crop_unpool,
    data_dependent,
    deform_conv,
    contrib,
    contrib_attention,
    contrib_fused,
    einsum,
    elemwise,
    gather_nd,
    grid_sample,
    indexing,
    layout,
    lp_pool,
    nn,
    normalization,
    qnn,
    quant,
    reduce_extra,
    resize,
    rnn,
    roi_align,
    scatter_elements,
    shape,
    signal,
    space,
    topk,
)
