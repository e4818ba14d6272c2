"""Writes through reshaped views on every Slang device: numpy's values, JAX's
gradients (the program is tests/reshaped_writes.py)."""
import symdiff as sd
from reshaped_writes import check


def test_writes_through_reshaped_views_values_like_numpy_gradients_like_jax(device):
    check(sd, device)
