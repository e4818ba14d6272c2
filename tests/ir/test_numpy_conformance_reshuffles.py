"""Index reshuffles (issue 31) against jax.numpy float64: value and VJP on
the numpy device, over numpy's argument forms (negative and tuple axes,
0-d and size-1 axes, every pad mode)."""
import numpy as np
import pytest

from numpy_oracle import arrays, check, refused

X3, X34, X234 = arrays((3,), (3, 4), (2, 3, 4))
X1, X14, X0 = arrays((1,), (1, 4), ())

CASES = {
    "roll_flat": (lambda xp, x: xp.roll(x, 5), X34),
    "roll_axis": (lambda xp, x: xp.roll(x, -2, axis=1), X34),
    "roll_negative_axis": (lambda xp, x: xp.roll(x, 7, axis=-3), X234),
    "roll_tuple": (lambda xp, x: xp.roll(x, (1, -1), axis=(0, 2)), X234),
    "roll_same_axis_twice": (lambda xp, x: xp.roll(x, (1, 2), axis=(1, 1)), X234),
    "roll_size1": (lambda xp, x: xp.roll(x, 3, axis=0), X14),
    "roll_0d": (lambda xp, x: xp.roll(x, 1), X0),
    "flip_all": (lambda xp, x: xp.flip(x), X234),
    "flip_axis": (lambda xp, x: xp.flip(x, -1), X234),
    "flip_tuple": (lambda xp, x: xp.flip(x, (0, 2)), X234),
    "fliplr": (lambda xp, x: xp.fliplr(x), X34),
    "flipud": (lambda xp, x: xp.flipud(x), X3),
    "rot90": (lambda xp, x: xp.rot90(x), X34),
    "rot90_k2": (lambda xp, x: xp.rot90(x, 2), X34),
    "rot90_k3_axes": (lambda xp, x: xp.rot90(x, -1, axes=(2, 0)), X234),
    "tile_int": (lambda xp, x: xp.tile(x, 3), X34),
    "tile_tuple": (lambda xp, x: xp.tile(x, (2, 1, 3)), X34),
    "tile_short_reps": (lambda xp, x: xp.tile(x, (2,)), X234),
    "tile_size1": (lambda xp, x: xp.tile(x, (3, 2)), X14),
    "tile_0d": (lambda xp, x: xp.tile(x, 4), X0),
    "repeat_flat": (lambda xp, x: xp.repeat(x, 2), X34),
    "repeat_axis": (lambda xp, x: xp.repeat(x, 3, axis=-1), X34),
    "repeat_counts": (lambda xp, x: xp.repeat(x, [2, 0, 3], axis=0) if xp is np else
                      xp.repeat(x, xp.array([2, 0, 3]), axis=0, total_repeat_length=5), X34),
    "repeat_0d": (lambda xp, x: xp.repeat(x, 3), X0),
    "diag_of_matrix": (lambda xp, x: xp.diag(x), X34),
    "diag_offset": (lambda xp, x: xp.diag(x, 1) + xp.diag(x, -2)[0], X34),
    "diag_of_vector": (lambda xp, x: xp.diag(x), X3),
    "diag_of_vector_offset": (lambda xp, x: xp.diag(x, -2), X3),
    "diagflat": (lambda xp, x: xp.diagflat(x, 1), arrays((2, 2))[0]),
    "diagonal_axes": (lambda xp, x: xp.diagonal(x, 1, -1, 0), X234),
    "diagonal_negative": (lambda xp, x: xp.diagonal(x, -1, axis1=1, axis2=2), X234),
    "trace": (lambda xp, x: xp.trace(x), X34),
    "trace_offset_axes": (lambda xp, x: xp.trace(x, -1, 2, 1), X234),
    "triu": (lambda xp, x: xp.triu(x), X34),
    "triu_k": (lambda xp, x: xp.triu(x, -1), X234),
    "tril_k": (lambda xp, x: xp.tril(x, 2), X34),
    "tril_vector": (lambda xp, x: xp.tril(x if xp is np else xp.broadcast_to(x, (3, 3))), X3),  # JAX: 2-d only
    "atleast_1d": (lambda xp, x: xp.atleast_1d(x), X0),
    "atleast_2d": (lambda xp, x: xp.atleast_2d(x), X3),
    "atleast_3d_vector": (lambda xp, x: xp.atleast_3d(x), X3),
    "atleast_3d_matrix": (lambda xp, x: xp.atleast_3d(x), X34),
    "atleast_3d_0d": (lambda xp, x: xp.atleast_3d(x), X0),
    "atleast_2d_several": (lambda xp, x: tuple(xp.atleast_2d(x, x[0], x[:2]))[2], X3),
    "pad_int": (lambda xp, x: xp.pad(x, 2), X34),
    "pad_pairs": (lambda xp, x: xp.pad(x, ((1, 0), (0, 2)), constant_values=1.5), X34),
    "pad_pair": (lambda xp, x: xp.pad(x, (2, 1), mode="edge"), X34),
    "pad_edge_size1": (lambda xp, x: xp.pad(x, 2, mode="edge"), X14),
    "pad_reflect": (lambda xp, x: xp.pad(x, ((2, 3), (1, 2)), mode="reflect"), X34),
    "pad_reflect_long": (lambda xp, x: xp.pad(x, (7, 5), mode="reflect"), X3),
    "pad_symmetric": (lambda xp, x: xp.pad(x, ((2, 3), (4, 1)), mode="symmetric"), X34),
    "pad_symmetric_long": (lambda xp, x: xp.pad(x, (7, 4), mode="symmetric"), X3),
    "pad_wrap": (lambda xp, x: xp.pad(x, ((1, 2), (5, 0)), mode="wrap"), X34),
    "pad_wrap_long": (lambda xp, x: xp.pad(x, (7, 4), mode="wrap"), X3),
    "broadcast_arrays": (lambda xp, x, y: tuple(xp.broadcast_arrays(x, y)), X34[:, :1], X3[None, :1] * 0 + X34[0]),
    "meshgrid_xy": (lambda xp, x, y: tuple(xp.meshgrid(x, y)), X3, X34[0]),
    "meshgrid_ij": (lambda xp, x, y, z: tuple(xp.meshgrid(x, y, z, indexing="ij")), X3, X34[0], X1),
    "meshgrid_sparse": (lambda xp, x, y: tuple(xp.meshgrid(x, y, sparse=True)), X3, X34[0]),
    "vstack": (lambda xp, x, y: xp.vstack([x, y, x[:1]]), X34, X34 * 2),
    "vstack_vectors": (lambda xp, x, y: xp.vstack((x, y)), X3, X3 * 2),
    "hstack": (lambda xp, x, y: xp.hstack([x, y]), X34, X34[:, :2]),
    "hstack_vectors": (lambda xp, x, y: xp.hstack([x, y]), X3, X34[0]),
    "dstack": (lambda xp, x, y: xp.dstack([x, y]), X34, X34 * 2),
    "column_stack": (lambda xp, x, y: xp.column_stack([x, y]), X3, X34[:, :2]),
    "stack_negative_axis": (lambda xp, x, y: xp.stack([x, y], axis=-1), X34, X34 * 2),
    "split": (lambda xp, x: tuple(xp.split(x, 2, axis=-1)), X34),
    "split_points": (lambda xp, x: tuple(xp.split(x, [1, -1] if xp is np else [1, 2])), X234[1]),
    "array_split": (lambda xp, x: tuple(xp.array_split(x, 3, axis=1)), X34),
    "hsplit": (lambda xp, x: tuple(xp.hsplit(x, [3])), X34),
    "vsplit": (lambda xp, x: tuple(xp.vsplit(x, 3)), X34),
    "dsplit": (lambda xp, x: tuple(xp.dsplit(x, 2)), X234),
    "add_outer": (lambda xp, x, y: xp.add.outer(x, y), X3, X34),
    "multiply_outer": (lambda xp, x, y: xp.multiply.outer(x, y), X34, X3),
    "subtract_outer_0d": (lambda xp, x, y: xp.subtract.outer(x, y), X0, X3),
    "vander": (lambda xp, x: xp.vander(x), X3),
    "vander_increasing": (lambda xp, x: xp.vander(x, 5, increasing=True), X3),
    "roll_of_view_then_math": (lambda xp, x: xp.roll(x.T[::-1], 1, 0) * xp.flip(x.T, 1) ** 2, X34),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reshuffle_matches_jax(name):
    body, *inputs = CASES[name]
    check(body, *inputs)


def test_take_along_axis_with_an_argsorted_index():
    idx = np.argsort(X34, axis=1).astype(np.int32)
    check(lambda xp, x, i: xp.take_along_axis(x, i, axis=1), X34, idx)
    check(lambda xp, x, i: xp.take_along_axis(x, i, axis=-2), X34, idx[:2, :1] % 3)
    check(lambda xp, x, i: xp.take_along_axis(x, i, axis=None), X34, np.array([11, 0, 5], np.int32))


def test_indices_dense_and_sparse():
    check(lambda xp, x: x * xp.indices((3, 4))[1] + xp.indices((3, 4), sparse=True)[0], X34)


def test_flip_is_a_writable_view_as_in_numpy():
    def body(xp, x):
        y = x * 1.0
        if xp is np:
            xp.flip(y, 0)[0] = 0.0   # writes y's last row
            return y
        return y.at[-1].set(0.0)
    check(body, X34)


def test_views_of_copies_are_read_only_with_a_message():
    def writes_into_roll(xp, x):
        y = xp.roll(x, 1)
        y[0] = 1.0
        return y
    message = refused(writes_into_roll, X3, match="the result of numpy.roll")
    assert ".copy()" in message


def test_bad_arguments_are_refused():
    refused(lambda xp, x: xp.pad(x, 1, mode="median"), X3, match="mode='median'")
    refused(lambda xp, x: xp.split(x, 2), X3, match="equal division")
    refused(lambda xp, x: xp.roll(x, x[0]), X3, match="shift must be a Python int")
    refused(lambda xp, x: xp.repeat(x, (x > 0).astype(np.int32)), X3, match="repeats must be Python ints")


def _copies_then_update(xp, x):
    """numpy's roll, tile, repeat and diag return copies: a later in-place
    update of the base must not show through them (the tracer's index maps
    become copies when the base is written; fuzz seed 90)."""
    z = x * 1.0
    kept = (xp.roll(z, 1, axis=0), xp.tile(z, (1, 2)), xp.repeat(z, 2, axis=1), xp.diag(z[:3, :3]))
    if xp is np:
        z[0] += 10.0
        z[:, 1] *= 3.0
    else:
        z = z.at[0].add(10.0)
        z = z.at[:, 1].multiply(3.0)
    return kept + (z,)


def test_copies_keep_their_values_when_the_base_changes():
    check(_copies_then_update, arrays((3, 4), seed=91)[0])
