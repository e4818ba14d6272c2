"""gradcheck points at the user's own rule when one is wrong: an
``sd.custom_vjp`` backward (which tasklet partials cannot check) by leaving
each rule out in turn, an ``sd.register_derivative`` rule on the tasklet
line whose partials disagree."""
import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff.registry import unregister_derivative


def _softmax_with(backward):
    @sd.custom_vjp
    def softmax(x):
        e = np.exp(x - np.max(x, axis=-1, keepdims=True))
        return e / np.sum(e, axis=-1, keepdims=True)

    def fwd(x):
        y = softmax(x)
        return y, y

    softmax.defvjp(fwd, backward)
    return softmax


def _loss(softmax):
    def loss(x: sd.f64[2, 3], t: sd.f64[2, 3]):
        return np.sum(softmax(x) * t)
    return sd.differentiable_program(loss)


X = np.array([[0.1, -0.4, 0.3], [1.0, 0.2, -0.5]])
T = np.array([[1.0, 2.0, -1.0], [0.5, -2.0, 1.5]])


def test_a_wrong_custom_vjp_backward_is_named():
    wrong = _softmax_with(lambda y, g: (y * g,))          # forgets the - sum(g * y) term
    with pytest.raises(sd.GradientCheckError) as info:
        sd.gradcheck(_loss(wrong), X, T, wrt=["x"])
    message = str(info.value)
    assert "input 'x'" in message
    assert "backward rule of sd.custom_vjp 'softmax' (call softmax#0" in message, message
    assert "test_gradcheck_custom_rules.py:" in message, message


def test_a_right_custom_vjp_backward_passes():
    right = _softmax_with(lambda y, g: (y * (g - np.sum(g * y, axis=-1, keepdims=True)),))
    grads = sd.gradcheck(_loss(right), X, T, wrt=["x"])
    assert grads["x"].shape == (2, 3)


def test_a_wrong_registered_derivative_is_named():
    sd.register_derivative(sympy.floor, lambda u: (3,))   # floor' is 0 away from integers
    try:
        with pytest.raises(sd.GradientCheckError) as info:
            sd.gradcheck(lambda x: np.sum(np.exp(x) + np.floor(x)), np.array([0.2, 0.7, 1.4]))
    finally:
        unregister_derivative(sympy.floor)
    message = str(info.value)
    assert "uses the derivative registered for floor with sd.register_derivative" in message, message
