"""Split-K: how many slices a GPU product's contraction is cut into.

A product with few outputs over a long contraction (an MLP's weight
gradient: 512x10 outputs summed over 65536 rows) fills a handful of
workgroup tiles (``group_tiles``: 8 of 64x64), each looping over all 65536
rows, while an H100 has 132 multiprocessors.  Cut into slices instead, the
first stage (``rewrites.split_large_reductions``, which asks ``slices``) sums
each slice's partial products into a scratch buffer of ``slices`` x outputs,
one batch of workgroup tiles per slice; the second sums each output's
partial results over the slices, in the slices' order (or the workgroup
tree's fixed order): the same bits on every run, no float atomics.

The slices are equal and divide the contraction exactly, so the first stage
has no bound to test per element and stays a product ``group_tiles`` stages
through groupshared memory (its operands read ``A[c * L + r, i]``).  A
contraction with no such divisor is left whole.  The numbers are the
target's ``Tuning`` (``split_k_*``)."""
from __future__ import annotations

import math

from .. import targets
from . import tile_shapes


def slices(target: targets.Target | None, rows: int, cols: int, batch: int, length: int) -> int:
    """Slices to cut the contraction (``length``) of a ``rows`` x ``cols``
    product, ``batch`` times, into; 1 for none.  Only on a target whose
    workgroups run together, over a contraction at least
    ``split_k_min_length`` long: about ``split_k_target_workgroups``
    workgroups in all (each slice as many as the product has tiles of
    ``tile_shapes.workgroup_tile``), so none where the tiles alone fill half of them; each
    slice at least ``split_k_min_slice`` long; the largest such count dividing
    ``length``."""
    if target is None or not target.workgroup_reductions:
        return 1
    tuning = target.tuning
    if length < tuning.split_k_min_length:
        return 1
    (bm, bn), _ = tile_shapes.workgroup_tile(tuning, rows, cols)
    tiles = math.ceil(rows / bm) * math.ceil(cols / bn) * batch
    most = min(tuning.split_k_target_workgroups // tiles, length // tuning.split_k_min_slice)
    return next((n for n in range(most, 1, -1) if length % n == 0), 1)
