"""The workgroup tile a GPU product's outputs get (``group_tiles``), from the
target's ``Tuning``: ``group_tile`` (64x64 outputs, 4x4 a thread), or, where
the outputs along one axis are at most ``group_narrow`` (an MLP's 10
classes), ``group_narrow_tile`` with its wide side along the wide axis
(256x16, 16x1 a thread): a 64x64 tile over 10 columns leaves 54 of its 64
idle.  A tensor-core product's (``tensor_tiles``) comes the same way from
``tensor_tile`` / ``tensor_narrow_tile`` and the warps along each side.
Kept apart from ``group_tiles`` so that the planner's split-K
(``split_k``) counts the same tiles without importing the kernel writer."""

from __future__ import annotations

from .. import targets

# The mma.sync instruction's output fragment (``tensor_tiles``): 16 rows by 8 columns
# over the 8 k's of one instruction; a warp is 32 threads.
MMA_ROWS, MMA_COLS, MMA_K, WARP = 16, 8, 8, 32
# A cooperative matrix (``coop_tiles``): 16x16 outputs over 16 k's.
COOP_SIDE = 16
# Per instruction family (``targets.TensorCores``): one instruction's output block
# (rows, columns) and a lane's outputs of it (rows, columns).
FRAGMENTS = {targets.MMA_SYNC: ((MMA_ROWS, MMA_COLS), (2, 2)),
             targets.COOPERATIVE_MATRIX: ((COOP_SIDE, COOP_SIDE), (1, COOP_SIDE * COOP_SIDE // WARP))}


def workgroup_tile(tuning: targets.Tuning, outer: int, inner: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(outputs, a thread's outputs) of a tile along a product's (outer, inner)
    axes of ``outer`` and ``inner`` outputs."""
    if min(outer, inner) > tuning.group_narrow:
        return tuning.group_tile, tuning.group_thread_tile
    (wide, narrow), (per_wide, per_narrow) = tuning.group_narrow_tile, tuning.group_narrow_thread_tile
    if inner <= outer:
        return (wide, narrow), (per_wide, per_narrow)
    return (narrow, wide), (per_narrow, per_wide)


def tensor_tile(tuning: targets.Tuning, outer: int, inner: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(outputs, warps) of a tensor-core tile along a product's (outer, inner)
    axes of ``outer`` and ``inner`` outputs (the narrow tile where one axis has
    at most ``group_narrow``, its wide side along the wide axis)."""
    if min(outer, inner) > tuning.group_narrow:
        return tuning.tensor_tile, tuning.tensor_warps
    (wide, narrow), (w_wide, w_narrow) = tuning.tensor_narrow_tile, tuning.tensor_narrow_warps
    return ((wide, narrow), (w_wide, w_narrow)) if inner <= outer else ((narrow, wide), (w_narrow, w_wide))


def check_tensor(tuning: targets.Tuning, instructions: str = targets.MMA_SYNC) -> None:
    """A clear error for tensor-core tile numbers that cannot split into whole
    warp blocks of ``instructions``' fragments."""
    (rows, cols), _ = FRAGMENTS[instructions]
    for fields, tile, warps, swapped in (
            ("tensor_tile/tensor_warps", tuning.tensor_tile, tuning.tensor_warps, False),
            ("tensor_narrow_tile/tensor_narrow_warps", tuning.tensor_narrow_tile, tuning.tensor_narrow_warps, True)):
        (bm, bn), (wm, wn) = tile, warps
        if wm * wn * WARP != tuning.group_size:
            raise ValueError(f"Tuning {fields} = {tile}/{warps}: the warps must make a workgroup of "
                             f"{tuning.group_size} threads (group_size), {tuning.group_size // WARP} warps of {WARP}")
        # a narrow tile may put its wide side on either axis: both orientations must split
        orientations = [((bm, bn), (wm, wn))] + ([((bn, bm), (wn, wm))] if swapped else [])
        for (m, n), (a, b) in orientations:
            if m % (a * rows) or n % (b * cols):
                raise ValueError(f"Tuning {fields} = {tile}/{warps}: each warp's block must be whole "
                                 f"{rows}x{cols} fragments along both orientations; e.g. "
                                 "tensor_tile=(128, 128) with tensor_warps=(2, 4)")
    if tuning.tensor_tile_k < MMA_K or tuning.tensor_tile_k % MMA_K:
        raise ValueError(f"Tuning tensor_tile_k = {tuning.tensor_tile_k}: k's staged at a time must be a "
                         f"multiple of the instruction's {MMA_K}")


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
