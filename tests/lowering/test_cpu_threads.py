"""Worker threads on the CPU device (lowering.threads): kernels whose points are
independent are split over C++ threads, and every result is bit-identical
whatever the thread count; colliding updates and tiny kernels stay on the
calling thread.  Oracles: the IR interpreter in float64 and plain numpy."""
import dataclasses

import numpy as np
import pytest

from symdiff import ir
from symdiff import lowering
from symdiff.lowering import backends, targets, threads
from lowering_graphs import chain, gather, matmul, reduction, strided_sum

import symdiff as sd

pytestmark = pytest.mark.skipif("cpu" not in lowering.available_devices(), reason="no CPU device")

COUNTS = ("1", "2", "3", "7")  # more workers than this machine's cores too


@pytest.fixture
def split_everything(monkeypatch):
    """Split every independent kernel, however small (the tests' sizes are); products
    stay Slang kernels (not the host's BLAS), so that theirs are split too."""
    monkeypatch.setenv("SYMDIFF_DISK_CACHE", "0")  # keyed by source text: a patched module must not be stored
    with backends.targets_changed(lambda target: dataclasses.replace(
            target, host_blas=False, tuning=dataclasses.replace(target.tuning, min_work_per_worker=1))):
        yield


def _per_count(run, monkeypatch) -> dict[str, dict]:
    out = {}
    for n in COUNTS:
        monkeypatch.setenv(threads.WORKERS_ENV, n)
        out[n] = run()
    return out


def _identical(results: dict[str, dict]) -> None:
    first = results[COUNTS[0]]
    for n, got in results.items():
        for name in first:
            assert np.array_equal(np.asarray(got[name]), np.asarray(first[name])), (n, name)


def test_cpu_workers_setting(monkeypatch):
    monkeypatch.setenv(threads.WORKERS_ENV, "5")
    assert threads.cpu_workers() == 5
    monkeypatch.delenv(threads.WORKERS_ENV)
    assert threads.cpu_workers() >= 1
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv(threads.WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=threads.WORKERS_ENV):
            threads.cpu_workers()


def test_worker_cap():
    assert threads.worker_cap(10, 100) == 1  # too little work to wake anyone
    least = targets.TUNING.min_work_per_worker
    assert threads.worker_cap(100 * least, 8) == 8  # never more than threads
    assert threads.worker_cap(3 * least, 100) == 3
    assert threads.worker_cap(3 * least, 100, dataclasses.replace(targets.TUNING, min_work_per_worker=least // 2)) == 6


@pytest.mark.parametrize("build", [lambda: chain(n=5000, ops=4), lambda: matmul(67, 45, 300),
                                   lambda: reduction("sum", (37, 3001), 1), lambda: reduction("max", (900, 41), 0)],
                         ids=["chain", "matmul", "row-sum", "column-max"])
def test_split_kernels_agree_with_the_interpreter_for_every_count(build, split_everything, monkeypatch):
    graph, inputs = build()
    exe = lowering.compile(graph, device="cpu")
    results = _per_count(lambda: exe(inputs), monkeypatch)
    assert "_workers(min(workers" in exe.source  # the split form ran
    _identical(results)
    want = ir.run(graph, {k: v.astype(np.float64) for k, v in inputs.items()})
    for name in want:
        np.testing.assert_allclose(results["2"][name], want[name], rtol=2e-5, atol=1e-5, err_msg=name)


def test_gradients_bit_identical_for_every_count(split_everything, monkeypatch):
    @sd.differentiable_program
    def loss(x: sd.f32[70, 33], w: sd.f32[33, 300], y: sd.f32[70, 300]):
        p = np.tanh(x @ w)
        return np.mean((p - y) ** 2) + np.sum(np.max(p, axis=1))

    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((70, 33), (33, 300), (70, 300))]
    monkeypatch.setenv("SYMDIFF_DEVICE", "cpu")
    results = _per_count(lambda: (lambda vg: {"value": vg[0], **vg[1]})(loss.value_and_grad(*args)), monkeypatch)
    _identical(results)
    x, w, y = (a.astype(np.float64) for a in args)
    p = np.tanh(x @ w)
    dp = 2 * (p - y) / p.size + (p == p.max(axis=1, keepdims=True))
    dz = dp * (1 - p * p)
    np.testing.assert_allclose(results["3"]["value"], np.mean((p - y) ** 2) + p.max(axis=1).sum(), rtol=1e-5)
    np.testing.assert_allclose(results["3"]["w"], x.T @ dz, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(results["3"]["x"], dz @ w.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("build", [lambda: strided_sum(6000), lambda: gather(5000, 40)],
                         ids=["colliding-sum", "bounds-checked-gather"])
def test_colliding_updates_and_checked_indices_stay_on_one_thread(build, split_everything, monkeypatch):
    # s[i // 3] += x[i] updates one element from several points (a plain += on the CPU
    # device); a gather records an out-of-range index in the bounds flag: neither is split
    graph, inputs = build()
    exe = lowering.compile(graph, device="cpu")
    results = _per_count(lambda: exe(inputs), monkeypatch)
    assert "_workers" not in exe.source
    _identical(results)
    want = ir.run(graph, inputs)
    for name in want:
        np.testing.assert_allclose(results["2"][name], want[name], rtol=1e-5, err_msg=name)


def test_small_kernels_run_on_the_calling_thread():
    graph, _ = chain(n=1000, ops=3)
    assert "_workers" not in lowering.compile(graph, device="cpu").source


def test_native_compiler_args(monkeypatch):
    assert targets.compiler_args(backends.vulkan.TARGET) == []
    checks = f"--param=vect-max-version-for-alias-checks={backends.cpu.TARGET.tuning.cpu_alias_checks}"
    monkeypatch.setenv(targets.NATIVE_ENV, "0")
    assert targets.compiler_args(backends.cpu.TARGET) == [checks]  # g++'s default instructions
    monkeypatch.delenv(targets.NATIVE_ENV)
    *native, last = targets.compiler_args(backends.cpu.TARGET)
    assert last == checks
    if native:  # g++ found: this machine's -march spelled out (never the word "native", which a cache could share)
        assert native[0].startswith("-march=") and "native" not in " ".join(native)


POOL_DRIVER = r"""
#include <stdio.h>
#include <unistd.h>
static int hits[10][10];  // [n][slice]: how often slice s of an n-slice region ran

int main()
{
    for (int round = 0; round < 3; round++)  // after each pause every worker has ended idle: they start again
    {
        for (int n = 1; n <= 9; n++)
            for (int repeat = 0; repeat < 20; repeat++)
            {
                bool ran = symdiff_parallel(n, [&](int s) { __atomic_add_fetch(&hits[n][s], 1, __ATOMIC_RELAXED); });
                if (ran != (n > 1)) { printf("ran %d for n=%d\n", ran, n); return 1; }
            }
        if (round < 2) usleep(1200 * 1000);
    }
    for (int n = 1; n <= 9; n++)
        for (int s = 0; s < 10; s++)
            if (hits[n][s] != (n > 1 && s < n ? 60 : 0)) { printf("slice %d of %d ran %d times\n", s, n, hits[n][s]); return 1; }
    printf("ok\n");
    return 0;
}
"""


def test_worker_pool_runs_every_slice_and_restarts_after_idling(tmp_path):
    """The C++ pool alone (its text as modules get it): every slice of every parallel region runs, for
    more slices than workers ever started, and again after the idle workers have ended and been joined."""
    import shutil
    import subprocess
    if shutil.which("g++") is None:
        pytest.skip("no g++ here")
    source = tmp_path / "pool.cpp"
    source.write_text(threads.POOL_PRELUDE + POOL_DRIVER)
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(tmp_path / "pool"), str(source)], check=True)
    done = subprocess.run([str(tmp_path / "pool")], capture_output=True, text=True, timeout=20)
    assert (done.returncode, done.stdout.strip()) == (0, "ok")
