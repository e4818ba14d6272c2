"""The three inputs issue 31 found crashing inside the library: a 0-d numpy
constant, a reshape of a 0-d argument, and axes given as lists."""
import numpy as np
import pytest

from numpy_oracle import arrays, check, refused


def test_zero_d_constant_from_asarray():
    check(lambda xp, x: x * xp.asarray(2.0) + xp.asarray(0.0), *arrays((3,)))


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_ravel_and_reshape_of_small_arrays(shape):
    check(lambda xp, x: xp.ravel(x) * 2.0 + xp.reshape(x, ()) + x.reshape(1, 1, 1)[0, 0], *arrays(shape))


@pytest.mark.parametrize("axis", [[0, 2], (0, 2), [-1, 1], [3, 0, -3]])
def test_expand_dims_with_an_axis_list(axis):
    check(lambda xp, x: xp.expand_dims(x, axis) * 3.0, *arrays((3, 4)))


@pytest.mark.parametrize("src,dst", [([0, 1], [1, 0]), ([0, 2], [2, 0]), ([-1], [0]), (0, -1), ((1, 2), (0, 1))])
def test_moveaxis_with_axis_lists(src, dst):
    check(lambda xp, x: xp.moveaxis(x, src, dst) * 3.0, *arrays((2, 3, 4)))


def test_sum_over_an_axis_list():
    check(lambda xp, x: xp.sum(x, axis=(0, 2)) + xp.sum(x, axis=[-1, 0]), *arrays((2, 3, 2)))


def test_bad_axis_lists_are_refused_at_the_users_line():
    refused(lambda xp, x: xp.expand_dims(x, [0, 0]), *arrays((3,)), match="repeated axis")
    refused(lambda xp, x: xp.moveaxis(x, [0, 1], [0]), *arrays((3, 4)), match="same number of axes")
    refused(lambda xp, x: xp.sum(x, axis=[5]), *arrays((3, 4)), match="out of range")


def test_a_python_while_on_a_traced_value_shows_the_while_loop_form():
    def loop(xp, x):
        while np.sum(x) > 0.001:
            x = x * 0.5
        return x
    message = refused(loop, *arrays((3,)), match="sd.while_loop")
    assert "max_iters" in message
    refused(lambda xp, x: x if np.sum(x) > 0 else -x, *arrays((3,)), match="np.where")


def test_complex_numbers_are_refused_as_such():
    refused(lambda xp, x: x * (1 + 2j), *arrays((3,)), match="complex numbers are not supported")
    refused(lambda xp, x: x.astype(np.complex128), *arrays((3,)), match="complex numbers are not supported")
