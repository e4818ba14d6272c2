"""Data-dependent indices are checked in the kernels (lowering.bounds_check):
an out-of-range gather or scatter raises ``IndexOutOfRange`` naming the
tasklet, the user's line and the argument, and never touches memory outside
its array, also with ``check_bounds=False``."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from symdiff import lowering
import symdiff as sd

ALL_DEVICES = ["numpy", *[d for d in ("cpu", "vulkan") if d in lowering.available_devices()]]


def _shifted_gather(e: sd.f32[10, 4], idx: sd.i32[3]):
    return np.sum(np.tanh(e[idx + 5]))


def _gather(e: sd.f32[10, 4], idx: sd.i32[3]):
    return np.sum(np.tanh(e[idx]))


def _hist(v: sd.f32[16], idx: sd.i32[16]):
    out = np.zeros(4, dtype=np.float32)
    np.add.at(out, idx, v)
    return np.sum(out * out)


E = np.linspace(-1, 1, 40, dtype=np.float32).reshape(10, 4)
V = np.linspace(0.5, 2, 16, dtype=np.float32)


@pytest.mark.parametrize("device", ALL_DEVICES)
def test_computed_index_out_of_range_raises_naming_line_and_argument(device):
    p = sd.differentiable_program(_shifted_gather, device=device)
    ok = np.array([1, 4, 0], np.int32)
    np.testing.assert_allclose(p(E, ok), np.sum(np.tanh(E[ok + 5])), rtol=1e-5)
    with pytest.raises(sd.IndexOutOfRange, match=r"test_bounds_check.py:\d+.*index 11 out of range for axis 0 "
                                                 r"of '?e'? \(extent 10\)"):
        p.value_and_grad(E, np.array([1, 4, 6], np.int32))
    np.testing.assert_allclose(p(E, ok), np.sum(np.tanh(E[ok + 5])), rtol=1e-5)  # the next call is clean


@pytest.mark.parametrize("device", ALL_DEVICES[1:])
def test_computed_index_names_the_argument_it_comes_from(device):
    p = sd.differentiable_program(_shifted_gather, device=device)
    with pytest.raises(sd.IndexOutOfRange, match=r"computed from argument 'idx'"):
        p(E, np.array([-6, 0, 0], np.int32))


@pytest.mark.parametrize("device", ALL_DEVICES[1:])
def test_device_array_index_argument_is_checked_in_the_kernel(device):
    p = sd.differentiable_program(_gather, device=device)
    idx = sd.asarray(np.array([1, 40, 6], np.int32), device=device)
    with pytest.raises(sd.IndexOutOfRange, match=r"argument 'idx' holds 40 at idx\[1\].*axis 0 of 'e' \(extent 10\)"
                                                 r" in tasklet getitem \(test_bounds_check.py:\d+\)"):
        p.value_and_grad(E, idx)


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("device", ALL_DEVICES)
def test_out_of_range_scatter_raises(device, deterministic):
    """deterministic=True turns the scatter into owner loops whose condition
    an out-of-range index never meets: it was dropped silently."""
    p = sd.differentiable_program(_hist, device=device, deterministic=deterministic)
    idx = np.arange(16, dtype=np.int32) % 4
    idx[3] = 100000
    with pytest.raises(sd.IndexOutOfRange, match=r"argument 'idx' holds 100000 at idx\[3\]"):
        p(V, idx)
    with pytest.raises(sd.IndexOutOfRange, match=r"argument 'idx' holds 100000 at idx\[3\]"):
        p.value_and_grad(V, sd.asarray(idx, device=device) if device != "numpy" else idx)


@pytest.mark.parametrize("device", ALL_DEVICES[1:])
def test_unchecked_out_of_range_write_is_dropped_and_read_gives_zero(device):
    """check_bounds=False: no error, and numpy's result with the bad points left out."""
    p = sd.differentiable_program(_hist, device=device, check_bounds=False)
    idx = np.arange(16, dtype=np.int32) % 4
    idx[3], idx[5] = 100000, -7
    value, grads = p.value_and_grad(V, idx)
    valid = (idx >= 0) & (idx < 4)
    out = np.zeros(4)
    np.add.at(out, idx[valid], V[valid])
    np.testing.assert_allclose(value, np.sum(out ** 2), rtol=1e-5)
    np.testing.assert_allclose(grads["v"], np.where(valid, 2 * out[np.where(valid, idx, 0)], 0), rtol=1e-5)


def test_programs_without_data_dependent_indices_have_no_checks():
    if "cpu" not in lowering.available_devices():
        pytest.skip("no cpu device here")

    @sd.differentiable_program(device="cpu")
    def f(x: sd.f32[8]):
        return np.sum(x[1:] * x[:-1])

    assert "symdiff_bounds" not in f.slang_source()
    assert "symdiff_bounds" in sd.differentiable_program(_gather, device="cpu").slang_source()


@pytest.mark.skipif("cpu" not in lowering.available_devices(), reason="no cpu device here")
def test_out_of_range_scatter_does_not_corrupt_the_cpu_devices_memory():
    """Unguarded, this scatter wrote far outside its buffer on the CPU device
    and the process aborted at exit ("double free or corruption")."""
    script = textwrap.dedent("""
        import numpy as np, symdiff as sd
        N = 4096
        @sd.differentiable_program(device="cpu", check_bounds=False)
        def hist(v: sd.f32[N], idx: sd.i32[N]):
            out = np.zeros(4, dtype=np.float32)
            np.add.at(out, idx, v)
            return np.sum(out * out)
        idx = (np.arange(N, dtype=np.int32) * 7919) % 200000 - 100000
        for _ in range(3):
            hist.value_and_grad(np.ones(N, np.float32), idx)
        print("survived")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "survived" in run.stdout, run.stderr[-2000:]


def _map_rows(emb: sd.f32[10, 64], idx: sd.i32[6]):
    s = np.zeros(6, dtype=np.float32)
    for i, j in sd.map[0:6, 0:64]:
        s[i] += emb[idx[i], j] * emb[idx[i], j]   # a gather inside a reduction loop
    return np.sum(np.tanh(s))


@pytest.mark.parametrize("device", ALL_DEVICES)
def test_gather_inside_a_reduction_loop_is_checked(device):
    emb = np.linspace(-1, 1, 640, dtype=np.float32).reshape(10, 64)
    p = sd.differentiable_program(_map_rows, device=device)
    ok = np.array([0, 3, 9, 3, 1, 2], np.int32)
    np.testing.assert_allclose(p(emb, ok), np.sum(np.tanh((emb[ok] ** 2).sum(axis=1))), rtol=1e-5)
    bad = ok.copy()
    bad[4] = 10
    with pytest.raises(sd.IndexOutOfRange, match=r"argument 'idx' holds 10 at idx\[4\]"):
        p.value_and_grad(emb, bad)
