"""``auto`` between several GPU kinds: a probe timed on each, once per machine,
kept on disk by the kinds' identities (lowering.backends.choice).  The GPU
kinds here are fakes: lavapipe under other names, claiming to be hardware."""
import functools
import json
from dataclasses import replace

import numpy as np
import pytest

from symdiff import ir, lowering
from symdiff.ir.specs import ArraySpec
from symdiff.lowering import backend_probe, backends
from symdiff.lowering.backends import choice, vulkan
from symdiff.lowering.backends.slangpy_base import SlangpyBackend


class FakeGpu(SlangpyBackend):
    """A GPU kind as ``auto`` sees it (rank, identity), running on lavapipe."""

    def __init__(self, name: str, rank: int, driver: str = "1.0"):
        super().__init__()
        self.name, self.rank, self.driver = name, rank, driver
        self.TARGET = replace(vulkan.LAVAPIPE, name=name)

    def available(self) -> bool:
        return True

    def auto_rank(self) -> int:
        return self.rank

    def is_hardware_gpu(self) -> bool:
        return True

    def identity(self) -> str:
        return f"{self.name}: fake card, driver {self.driver}"

    def device(self):
        return backends.of("vulkan").device()


class Timer:
    """A probe with set times per kind, counting the kinds it ran on."""

    def __init__(self, seconds: dict):
        self.seconds, self.ran = seconds, []

    def __call__(self, kind: str) -> dict:
        self.ran.append(kind)
        if isinstance(self.seconds[kind], Exception):
            raise self.seconds[kind]
        return self.seconds[kind]


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache directory with the disk cache on, no remembered choice,
    and auto's own probe back afterwards."""
    monkeypatch.setenv("SYMDIFF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SYMDIFF_DISK_CACHE", "1")
    choice.forget()
    own = backends.set_probe(None)
    yield tmp_path
    backends.set_probe(own)
    choice.forget()


@pytest.fixture
def gpus():
    """Two GPU kinds ranked ahead of everything: ``first`` by rank, ``second`` after it."""
    made = [backends.register(FakeGpu("first_gpu", -2)), backends.register(FakeGpu("second_gpu", -1))]
    yield made
    for backend in made:
        backends.unregister(backend.name)


def test_the_kind_that_ran_the_probe_faster_wins_over_the_better_rank(fresh, gpus):
    timer = Timer({"first_gpu": {"product": 4e-3, "memory": 1e-3}, "second_gpu": {"product": 2e-3, "memory": 1e-3}})
    backends.set_probe(timer)
    assert backends.auto() == "second_gpu"
    assert sorted(timer.ran) == ["first_gpu", "second_gpu"]
    kept = json.loads((fresh / choice.CHOICE_FILE).read_text())
    [record] = kept.values()
    assert record["chosen"] == "second_gpu" and record["seconds"]["first_gpu"] == {"product": 4e-3, "memory": 1e-3}


def test_one_measurement_per_machine_until_a_driver_changes(fresh, gpus):
    timer = Timer({"first_gpu": {"product": 1e-3}, "second_gpu": {"product": 3e-3}})
    backends.set_probe(timer)
    assert backends.auto() == "first_gpu" and len(timer.ran) == 2
    choice.forget()  # a new process: read from the file
    assert backends.resolve("auto") == "first_gpu" and len(timer.ran) == 2
    gpus[0].driver = "2.0"
    timer.seconds["first_gpu"] = {"product": 9e-3}
    assert backends.auto() == "second_gpu" and len(timer.ran) == 4
    assert len(json.loads((fresh / choice.CHOICE_FILE).read_text())) == 2  # both machines' states kept


def test_with_the_disk_cache_off_the_rank_decides_unmeasured(fresh, gpus, monkeypatch):
    monkeypatch.setenv("SYMDIFF_DISK_CACHE", "0")
    timer = Timer({"first_gpu": {"product": 2e-3}, "second_gpu": {"product": 1e-3}})
    backends.set_probe(timer)
    assert backends.auto() == "first_gpu" and timer.ran == []
    assert not (fresh / choice.CHOICE_FILE).exists()


def test_a_kind_whose_probe_fails_is_not_chosen_and_all_failing_falls_back_on_the_rank(fresh, gpus):
    backends.set_probe(Timer({"first_gpu": RuntimeError("nvrtc: no such intrinsic"), "second_gpu": {"product": 5.0}}))
    assert backends.auto() == "second_gpu"
    [record] = json.loads((fresh / choice.CHOICE_FILE).read_text()).values()
    assert "nvrtc: no such intrinsic" in record["failed"]["first_gpu"]
    choice.forget()
    (fresh / choice.CHOICE_FILE).unlink()
    backends.set_probe(Timer({"first_gpu": RuntimeError("no"), "second_gpu": {"product": float("nan")}}))
    assert backends.auto() == "first_gpu"  # nothing measured: the better rank


def test_an_unreadable_file_is_measured_again(fresh, gpus):
    (fresh / choice.CHOICE_FILE).write_text("{not json")
    timer = Timer({"first_gpu": {"product": 2e-3}, "second_gpu": {"product": 1e-3}})
    backends.set_probe(timer)
    assert backends.auto() == "second_gpu" and len(timer.ran) == 2
    assert json.loads((fresh / choice.CHOICE_FILE).read_text())


def test_one_gpu_kind_and_software_or_cpu_kinds_are_ranked_without_measuring(fresh):
    if any(backends.of(k).is_hardware_gpu() for k in backends.available_devices()):
        pytest.skip("this machine has a hardware GPU kind of its own")
    backends.set_probe(Timer({}))  # a KeyError if it ran
    assert backends.auto() == min((b.auto_rank(), k) for k in backends.available_devices()
                                  if (b := backends.of(k)).auto_rank() is not None)[1]
    only = backends.register(FakeGpu("only_gpu", -1))
    try:
        assert backends.auto() == "only_gpu"
    finally:
        backends.unregister(only.name)
    assert not (fresh / choice.CHOICE_FILE).exists()


def _saxpy(x, y):
    return 3.0 * x + y


@pytest.mark.vulkan
@pytest.mark.skipif("vulkan" not in lowering.available_devices(), reason="no Vulkan driver")
def test_the_real_probe_times_our_own_kernels_and_auto_then_runs_there(fresh, gpus):
    backends.set_probe(functools.partial(backend_probe.time_kind, product_n=48, memory_n=4096))
    chosen = backends.auto()
    assert chosen in ("first_gpu", "second_gpu")
    [record] = json.loads((fresh / choice.CHOICE_FILE).read_text()).values()
    assert record["failed"] == {} and set(record["seconds"]) == {"first_gpu", "second_gpu"}
    assert all(set(times) == {"product", "memory"} and min(times.values()) > 0 for times in record["seconds"].values())
    spec = ArraySpec("float32")[1000]
    exe = lowering.compile(ir.trace(_saxpy, spec, spec))
    x, y = np.linspace(-1, 1, 1000, dtype=np.float32), np.arange(1000, dtype=np.float32)
    assert exe.device == chosen
    np.testing.assert_allclose(next(iter(exe({"x": x, "y": y}).values())), 3.0 * x.astype(np.float64) + y,
                               rtol=1e-6)
