"""The workgroup tile a GPU product's outputs get (``group_tiles``), from the
target's ``Tuning``: ``group_tile`` (64x64 outputs, 4x4 a thread), or, where
the outputs along one axis are at most ``group_narrow`` (an MLP's 10
classes), ``group_narrow_tile`` with its wide side along the wide axis
(256x16, 16x1 a thread): a 64x64 tile over 10 columns leaves 54 of its 64
idle.  Kept apart from ``group_tiles`` so that the planner's split-K
(``split_k``) counts the same tiles without importing the kernel writer."""
from __future__ import annotations

from .. import targets


def workgroup_tile(tuning: targets.Tuning, outer: int, inner: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(outputs, a thread's outputs) of a tile along a product's (outer, inner)
    axes of ``outer`` and ``inner`` outputs."""
    if min(outer, inner) > tuning.group_narrow:
        return tuning.group_tile, tuning.group_thread_tile
    (wide, narrow), (per_wide, per_narrow) = tuning.group_narrow_tile, tuning.group_narrow_thread_tile
    if inner <= outer:
        return (wide, narrow), (per_wide, per_narrow)
    return (narrow, wide), (per_narrow, per_wide)


def check(tuning: targets.Tuning) -> None:
    """A clear error for tile numbers that cannot make a workgroup of ``group_size`` threads."""
    for fields, tile, per in (("group_tile/group_thread_tile", tuning.group_tile, tuning.group_thread_tile),
                              ("group_narrow_tile/group_narrow_thread_tile", tuning.group_narrow_tile,
                               tuning.group_narrow_thread_tile)):
        (bm, bn), (tm, tn) = tile, per
        if bm % tm or bn % tn or (bm // tm) * (bn // tn) != tuning.group_size:
            raise ValueError(f"Tuning {fields} = {tile}/{per}: the tile must split into whole thread blocks, "
                             f"{tuning.group_size} of them (group_size); e.g. group_tile=(64, 64) with "
                             "group_thread_tile=(4, 4), group_narrow_tile=(256, 16) with (16, 1)")
    if tuning.group_tile_k < 1:
        raise ValueError(f"Tuning group_tile_k = {tuning.group_tile_k}: k's staged at a time must be 1 or more")
