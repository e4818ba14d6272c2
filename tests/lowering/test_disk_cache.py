"""The on-disk caches (lowering.disk_cache, lowering.compiler_cache): a second
process gets the same numbers from them, anything that changes the generated
code misses, and a corrupt entry is rebuilt, never used.  Every test points
SYMDIFF_CACHE_DIR at a temporary directory: the user's cache is never touched."""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import sympy
from sympy.functions.elementary.miscellaneous import MinMaxBase

import symdiff as sd
from symdiff.lowering import compiler_cache, disk_cache, library_store
from fake_compiler import FAKE_CXX

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMDIFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SYMDIFF_DISK_CACHE", raising=False)
    for k in disk_cache.stats:
        monkeypatch.setitem(disk_cache.stats, k, 0)
    return tmp_path / "cache"


def make(body: str = "square", shape=(8,), dtype=sd.f32):
    """A new function object each call, same lines: its traces are equal but
    share no in-process cache, as in a second process."""
    spec = dtype[shape]

    def square(x: spec, w: spec):
        return np.sum(x * x * w)

    def cube(x: spec, w: spec):
        return np.sum(x * x * x * w)

    return sd.differentiable_program({"square": square, "cube": cube}[body])


def grads(program, device="numpy", shape=(8,), wrt=None):
    x = np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape)
    w = np.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape)
    value, g = program.value_and_grad(x, w, device=device, wrt=wrt)
    return float(value), {k: np.asarray(v) for k, v in g.items()}


def test_same_graph_hits_and_changes_miss(cache_dir):
    """The backward graph is stored once and found again by an equal trace;
    another program, shape, dtype or wrt is a different key."""
    first = grads(make())
    # stored: the backward graph, and that it passed validation (disk_cache.checked)
    assert disk_cache.stats["misses"] == 1 and disk_cache.stats["stores"] == 2
    again = grads(make())
    assert disk_cache.stats["hits"] == 1 and disk_cache.stats["misses"] == 1
    assert again[0] == first[0] and all(np.array_equal(again[1][k], first[1][k]) for k in first[1])
    for changed in (lambda: grads(make("cube")), lambda: grads(make(shape=(9,)), shape=(9,)),
                    lambda: grads(make(dtype=sd.f64)), lambda: grads(make(), wrt=["x"])):
        misses = disk_cache.stats["misses"]
        changed()
        assert disk_cache.stats["misses"] == misses + 1
    assert disk_cache.stats["hits"] == 1


def test_changed_symdiff_source_misses(cache_dir, monkeypatch, tmp_path):
    """Keys hash symdiff's own source files: editing one changes every key."""
    source = tmp_path / "backward.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(disk_cache, "_package_files", lambda: [source])
    disk_cache.environment.cache_clear()
    try:
        before = disk_cache.key("backward", ["graph"])
        grads(make())
        source.write_text("x = 2\n")
        disk_cache.environment.cache_clear()
        assert disk_cache.key("backward", ["graph"]) != before
        grads(make())
        assert disk_cache.stats == {**disk_cache.stats, "hits": 0, "misses": 2}
    finally:
        disk_cache.environment.cache_clear()


def test_corrupt_or_misplaced_entries_are_rebuilt(cache_dir):
    """A truncated entry, or one holding another key, is deleted and rebuilt."""
    want = grads(make())
    (entry,) = (cache_dir / "lowered" / "backward").rglob("*.pkl")
    entry.write_bytes(entry.read_bytes()[:40])
    got = grads(make())
    assert disk_cache.stats["rejected"] == 1 and disk_cache.stats["hits"] == 0
    assert np.array_equal(got[1]["x"], want[1]["x"])
    grads(make())  # rebuilt and stored again
    assert disk_cache.stats["hits"] == 1

    grads(make("cube"))  # a second entry, then swap the two files' contents
    a, b = sorted((cache_dir / "lowered" / "backward").rglob("*.pkl"))
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    rejected = disk_cache.stats["rejected"]
    got = grads(make())
    assert disk_cache.stats["rejected"] == rejected + 1
    assert np.array_equal(got[1]["x"], want[1]["x"])


def test_a_check_passed_on_a_keyed_graph_is_not_run_again(cache_dir, monkeypatch):
    """disk_cache.checked: a graph with a key is checked once (a later process loading a
    graph of that key skips it); a graph without one, a refused graph and a cache switched
    off are checked every time."""
    program = make()
    program.value_and_grad(np.ones(8, np.float32), np.ones(8, np.float32), device="numpy")
    keyed = program.backward_graph()
    plain = program.graph
    assert disk_cache.KEY in keyed.derived and disk_cache.KEY not in plain.derived
    runs = []

    def check(graph):
        runs.append(graph)
    for graph in (keyed, keyed, plain, plain):
        disk_cache.checked("test-check", graph, check)
    assert runs == [keyed, plain, plain]

    def refuse(graph):
        runs.append(graph)
        raise ValueError("refused")
    for _ in range(2):
        with pytest.raises(ValueError):
            disk_cache.checked("test-refusal", keyed, refuse)
    assert runs[3:] == [keyed, keyed]
    monkeypatch.setenv("SYMDIFF_DISK_CACHE", "0")
    disk_cache.checked("test-check", keyed, check)
    assert runs[5:] == [keyed]


def test_expression_texts_are_written_once_per_object_and_exactly():
    """_text writes each sympy object's srepr once per graph text, and other objects
    keep their own (0.1 at two precisions: texts that differ only in digits)."""
    x = sympy.Symbol("x")
    e = x * 2 + 1
    coarse, fine = sympy.Float(0.1, 15), sympy.Float(0.1, 30)
    assert sympy.srepr(coarse) != sympy.srepr(fine)
    value = [e, (e, {"k": e}), coarse, fine]
    expected = (f"list({sympy.srepr(e)},tuple({sympy.srepr(e)},{{'k':{sympy.srepr(e)}}}),"
                f"{sympy.srepr(coarse)},{sympy.srepr(fine)})")
    seen = {}
    assert disk_cache._text(value, seen) == expected
    assert set(seen) == {id(e), id(coarse), id(fine)}


def test_uncacheable_graph_is_built_not_stored(cache_dir):
    """A graph holding a Python object without a stable text has no key."""
    g = make().graph
    g.meta["rule"] = lambda v: v
    assert disk_cache.graph_key(g) is None
    assert disk_cache.cached("backward", [disk_cache.graph_key(g)], lambda: 42) == 42
    assert disk_cache.stats["stores"] == 0


def test_graphs_are_stored_without_what_a_process_derived(cache_dir):
    """A graph's ``derived`` (executables with device buffers, here a lambda)
    is not part of an entry: the entry is written, and loads without it."""
    g = make().graph.copy()
    g.derived["executables"] = lambda: None
    assert disk_cache.cached("test", ["graph"], lambda: g) is g
    assert disk_cache.stats["stores"] == 1
    found, loaded = disk_cache.load("test", disk_cache.key("test", ["graph"]))
    assert found and loaded.derived == {} and disk_cache.graph_text(loaded) == disk_cache.graph_text(g)


def test_expressions_load_as_they_were_stored_without_simplifying_again(cache_dir, monkeypatch):
    """Sums, products, maxima and minima are rebuilt from their stored arguments:
    the same expressions (and working ones), and no Max compares its arguments again."""
    x, y = sympy.symbols("x y", integer=True)
    stored = [sympy.Max(x, y + 1, 0), sympy.Min(x - 1, 2 * y), x * y + 3, (x + 1) ** 2 * y,
              sympy.Max(0, sympy.Min(x, 7)) + sympy.Mul(2, x, evaluate=False)]
    disk_cache.store("test", "exprs", stored)
    simplified = []
    original = MinMaxBase._collapse_arguments.__func__
    monkeypatch.setattr(MinMaxBase, "_collapse_arguments",
                        classmethod(lambda cls, *a, **k: simplified.append(cls) or original(cls, *a, **k)))
    found, loaded = disk_cache.load("test", "exprs")
    assert found and simplified == []
    assert [sympy.srepr(e) for e in loaded] == [sympy.srepr(e) for e in stored] and loaded == stored
    assert loaded[0].subs({x: 5, y: 1}) == 5 and loaded[1].subs({x: 0, y: 3}) == -1


def test_switched_off_writes_nothing(cache_dir, monkeypatch):
    monkeypatch.setenv("SYMDIFF_DISK_CACHE", "0")
    grads(make())
    assert not cache_dir.exists() and disk_cache.stats["stores"] == 0


CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import symdiff as sd
    from symdiff.lowering import disk_cache

    @sd.differentiable_program
    def f(x: sd.f32[32], w: sd.f32[32]):
        return np.sum(np.tanh(x * w) ** 2)

    x, w = np.linspace(-1, 1, 32), np.linspace(0.5, 2, 32)
    value, g = f.value_and_grad(x, w, device=sys.argv[1])
    print(json.dumps({"stats": disk_cache.stats, "value": float(value),
                      "grads": {k: np.asarray(v).tolist() for k, v in g.items()}}))
""")


@pytest.mark.parametrize("device", ["cpu", pytest.param("vulkan", marks=pytest.mark.vulkan)])
def test_second_process_hits_and_agrees(device, cache_dir, tmp_path):
    """Two fresh processes: the first stores, the second loads the backward
    graph and the lowered module (and, on the CPU device, g++'s library), and
    both agree with the numpy device."""
    if device not in sd.lowering.available_devices():
        pytest.skip(f"no {device} device here")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, SYMDIFF_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    runs, libraries = [], []
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(script), device], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        deadline = time.monotonic() + 120
        while list((cache_dir / "cpu-binaries").glob(".later-*")):  # the -O3 library compiled in the background
            assert time.monotonic() < deadline, "background compile still running after 120 s"
            time.sleep(0.05)
        libraries.append(sorted((cache_dir / "cpu-binaries").rglob("*.so")))
    # stored: the backward graph, the lowered module and that the graph passed validation (disk_cache.checked)
    assert runs[0]["stats"]["stores"] == 3 and runs[0]["stats"]["hits"] == 0
    assert runs[1]["stats"]["stores"] == 0
    assert runs[1]["stats"]["hits"] == 2 and runs[1]["stats"]["misses"] == 0
    if device == "cpu":  # the module at -O0 and at -O3, and nothing new in the second process
        assert len(libraries[0]) == 2 and libraries[1] == libraries[0]
    x, w = np.linspace(-1, 1, 32).astype(np.float32), np.linspace(0.5, 2, 32).astype(np.float32)
    ref_value, ref = sd.differentiable_program(lambda x, w: np.sum(np.tanh(x * w) ** 2)).value_and_grad(
        x, w, device="numpy")
    for run in runs:
        assert run["value"] == pytest.approx(float(ref_value), rel=1e-5)
        for k in ref:
            np.testing.assert_allclose(run["grads"][k], ref[k], rtol=1e-5, atol=1e-6)
    # the first process ran the module at g++ -O0, the second starts at its -O3 library: the last bits may differ
    assert runs[0]["value"] == pytest.approx(runs[1]["value"], rel=1e-6)
    for k in runs[0]["grads"]:
        np.testing.assert_allclose(runs[0]["grads"][k], runs[1]["grads"][k], rtol=1e-6, atol=1e-7)


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a shell script")
def test_compiler_cache_reuses_libraries(tmp_path, monkeypatch):
    """The g++ wrapper runs the real compiler once per distinct source and
    arguments, copies the stored library otherwise, and rebuilds a library
    whose bytes no longer match their hash."""
    fake = tmp_path / "fake"
    fake.mkdir()
    log = tmp_path / "log"
    (fake / "g++").write_text(FAKE_CXX.format(log=log))
    (fake / "g++").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    store = tmp_path / "binaries"

    def compile_(text: str, flags=("-O3",)) -> bytes:
        src, out = tmp_path / "unknown-abc.cpp", tmp_path / "libslang-generated-xyz.so"
        src.write_text(text)
        out.unlink(missing_ok=True)
        assert compiler_cache.main([str(store), str(tmp_path / "bin"), "g++", *flags, "-shared", "-o", str(out),
                                    str(src)]) == 0
        return out.read_bytes()

    def runs() -> int:
        return len(log.read_text().splitlines())

    assert compile_("int a;") == b"int a;" and runs() == 1
    assert compile_("int a;") == b"int a;" and runs() == 1          # hit
    assert compile_("int b;") == b"int b;" and runs() == 2          # other source
    assert compile_("int a;", ("-O0",)) == b"int a;" and runs() == 3  # other flags
    for lib in store.rglob("*.so"):
        lib.write_bytes(b"garbage")
    assert compile_("int a;") == b"int a;" and runs() == 4          # corrupt: rebuilt
    assert compile_("int a;") == b"int a;" and runs() == 4
    assert compiler_cache.main([str(store), str(tmp_path / "bin"), "g++", "-v"]) == 0 and runs() == 5  # passed on


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a shell script")
def test_compiler_flags_reach_library_compiles_only(tmp_path, monkeypatch):
    """slangpy drops the device's downstream arguments, so the wrapper adds the
    target's flags to each library compile (keyed by them), stores nothing
    when there is no cache directory, and passes any other call on unchanged."""
    fake = tmp_path / "fake"
    fake.mkdir()
    log = tmp_path / "log"
    (fake / "g++").write_text(FAKE_CXX.format(log=log).replace('echo run >>', 'echo "$@" >>'))
    (fake / "g++").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    src, out = tmp_path / "unknown-abc.cpp", tmp_path / "libslang-generated-xyz.so"
    src.write_text("int a;")
    monkeypatch.setenv(library_store.EXTRA_ENV, "-march=test1 -mfoo")
    bin_dir = str(tmp_path / "bin")
    assert compiler_cache.main([library_store.NO_STORE, bin_dir, "g++", "-O3", "-shared", "-o", str(out), str(src)]) == 0
    assert compiler_cache.main([library_store.NO_STORE, bin_dir, "g++", "-v"]) == 0
    calls = log.read_text().splitlines()
    assert calls[0].endswith("-march=test1 -mfoo") and calls[1] == "-v"
    store = tmp_path / "binaries"
    assert compiler_cache.main([str(store), bin_dir, "g++", "-shared", "-o", str(out), str(src)]) == 0
    monkeypatch.setenv(library_store.EXTRA_ENV, "-march=test2")
    assert compiler_cache.main([str(store), bin_dir, "g++", "-shared", "-o", str(out), str(src)]) == 0
    assert len(log.read_text().splitlines()) == 4  # other flags, another library
    assert len(list(store.rglob("*.so"))) == 2


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a shell script")
def test_program_entry_compiles_light(tmp_path, monkeypatch):
    """g++ gets the CPU program entry's runners (``codegen``'s ``<kernel>_over_<w>x<h>``)
    marked noinline and the entry at -O0, its parameters cast once (not a global's), stored
    or not, and every other function as Slang wrote it."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "g++").write_text(FAKE_CXX.format(log=tmp_path / "log"))
    (fake / "g++").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    runner = f"static void k2_add_3{compiler_cache.RUNNER_INFIX}256x1_0(RWStructuredBuffer<float> b_0)"
    kernel = "static void k2_add_3_0(Vector<uint32_t, 3>  tid_0, RWStructuredBuffer<float> b_0)"
    entry = "void _run_program(void* _S19, void* entryPointParams_0, void* _S20)"
    cast, other = "(slang_bit_cast<EntryPointParams_0*>(entryPointParams_0))", "(slang_bit_cast<Other*>(global))"
    calls = [f"    k2_add_3{compiler_cache.RUNNER_INFIX}256x1_0({cast}->b_0);", f"    f({cast}->n_0, {other});"]
    text = "\n".join([kernel, "{", "}", runner, "{", "}", entry, "{", *calls, "}"])
    src = tmp_path / "unknown-abc.cpp"
    src.write_text(text)
    for directory in (library_store.NO_STORE, str(tmp_path / "binaries")):
        out = tmp_path / "libslang-generated-xyz.so"
        assert compiler_cache.main([directory, str(tmp_path / "bin"), "g++", "-O3", "-shared", "-o", str(out),
                                    str(src)]) == 0
        compiled = out.read_text().splitlines()
        hoisted = "    EntryPointParams_0* _symdiff_params_0 = slang_bit_cast<EntryPointParams_0*>(entryPointParams_0);"
        assert compiled == [kernel, "{", "}", f"__attribute__((noinline)) {runner}", "{", "}",
                            f'__attribute__((optimize("O0"))) {entry}', "{", hoisted,
                            *(c.replace(cast, "(_symdiff_params_0)") for c in calls), "}"]


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a shell script")
def test_a_wrapper_storing_nothing_leaves_no_folder_behind():
    """With no cache directory the wrapper lives in a temporary folder of the process's own,
    removed when the process exits."""
    code = ("import os\nfrom symdiff.lowering import compiler_cache\n"
            "with compiler_cache.active(None):\n    print(os.environ['PATH'].split(os.pathsep)[0])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("symdiff-cxx-") and not folder.exists()


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a shell script")
def test_cpu_compiles_go_through_the_wrapper_with_the_targets_flags(monkeypatch):
    """With the disk cache on or off, the CPU device's compiles find our g++
    first on PATH, and it carries ``targets.compiler_args``."""
    from symdiff.lowering import backends, targets
    for enabled in ("1", "0"):
        monkeypatch.setenv("SYMDIFF_DISK_CACHE", enabled)
        with backends.of("cpu").compiling():
            wrapper = Path(os.environ["PATH"].split(os.pathsep)[0]) / "g++"
            text = wrapper.read_text()
        assert library_store.EXTRA_ENV in text and " ".join(targets.compiler_args(backends.cpu.TARGET)) in text
        assert (f'"{library_store.NO_STORE}"' in text.split()) == (enabled == "0")


SOURCE_OF_A_STENCIL = textwrap.dedent("""
    import hashlib
    import numpy as np
    import symdiff as sd
    from symdiff.lowering import backends
    from symdiff.lowering.codegen import generate
    from symdiff.lowering.plan import plan

    def stencil(a: sd.f32[6, 6], w: sd.f32[2]):
        out = np.zeros_like(a)
        for i, j in sd.map[1:5, 1:5]:
            out[i, j] = w[0] * a[i, j] + w[1] * (a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])
        return np.sum(out * out)

    target = backends.of("cpu").target()
    graph = sd.differentiable_program(stencil).backward_graph(wrt=["a", "w"])
    print(hashlib.sha256(generate(plan(graph, {}, target), target).source.encode()).hexdigest())
""")


def test_generated_source_does_not_depend_on_string_hashing():
    """The same program generates the same module in processes with different
    ``PYTHONHASHSEED``s: the order of a stencil's loads once followed a set of
    sympy symbols, so its source (and the g++ cache key) changed per process."""
    digests = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, SYMDIFF_DISK_CACHE="0")
        run = subprocess.run([sys.executable, "-c", SOURCE_OF_A_STENCIL], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True)
        digests.add(run.stdout.strip().splitlines()[-1])
    assert len(digests) == 1


PRELUDE = "#include <vector>\n#include <functional>\nstatic int twice(int x) { return 2 * x; }\n"


@pytest.mark.skipif(os.name != "posix" or shutil.which("g++") is None, reason="needs g++ and the POSIX wrapper")
def test_shared_prelude_is_precompiled_once_and_used(tmp_path, monkeypatch):
    """The first library compile starts a background build of its prelude's
    precompiled header (the text before the first ``#line``); a later module
    with the same prelude compiles through it, to a library computing the same."""
    monkeypatch.delenv(library_store.EXTRA_ENV, raising=False)
    store, bin_dir = tmp_path / "binaries", str(tmp_path / "bin")

    def compile_(own: str) -> ctypes.CDLL:
        src, out = tmp_path / f"unknown-{abs(hash(own))}.cpp", tmp_path / f"lib{abs(hash(own))}.so"
        src.write_text(PRELUDE + '#line 1 "core"\n' + own)
        assert compiler_cache.main([str(store), bin_dir, "g++", "-O1", "-fPIC", "-shared", "-o", str(out),
                                    str(src)]) == 0
        return ctypes.CDLL(str(out))

    assert compile_('extern "C" int f(int x) { return twice(x) + 1; }').f(20) == 41
    header = next(store.glob("pch/*/*/prelude.h"))
    assert header.read_text() == PRELUDE
    deadline = time.monotonic() + 60
    while not Path(f"{header}.gch").exists():  # built by a detached process
        assert time.monotonic() < deadline, "no precompiled header after 60 s"
        time.sleep(0.1)
    included = []
    real_call = subprocess.call

    def call(args, **kwargs):
        sources = [a for a in args if str(a).endswith(".cpp")]
        included.extend(Path(s).read_text().splitlines()[0] for s in sources)
        return real_call(args, **kwargs)
    monkeypatch.setattr(compiler_cache.subprocess, "call", call)
    assert compile_('extern "C" int g(int x) { return twice(x) - 1; }').g(20) == 39
    assert included == [f'#include "{header}"']


@pytest.mark.skipif(os.name != "posix" or shutil.which("g++") is None, reason="needs g++ and the POSIX wrapper")
def test_prelude_is_precompiled_for_both_levels(tmp_path, monkeypatch):
    """The first -O0 compile of a prelude also has its -O3 header built (a header
    precompiled at one level is refused at the other), so the first -O3 module
    compiles through its own, also when it asks for C++ of its own after Slang's prelude."""
    monkeypatch.delenv(library_store.EXTRA_ENV, raising=False)
    store, bin_dir = tmp_path / "binaries", str(tmp_path / "bin")
    src, out = tmp_path / "unknown-a.cpp", tmp_path / "liba.so"
    src.write_text(PRELUDE + '#line 1 "core"\nextern "C" int f(int x) { return twice(x) + 1; }\n')
    assert compiler_cache.main([str(store), bin_dir, "g++", "-O0", "-fPIC", "-shared", "-o", str(out), str(src)]) == 0
    deadline = time.monotonic() + 60
    while len(list(store.glob("pch/*/*/prelude.h.gch"))) < 2:  # built one after the other by a detached process
        assert time.monotonic() < deadline, "no precompiled headers for both levels after 60 s"
        time.sleep(0.1)
    included = []
    real_call = subprocess.call

    def call(args, **kwargs):
        included.extend(Path(a).read_text().splitlines()[0] for a in args if str(a).endswith(".cpp"))
        return real_call(args, **kwargs)
    monkeypatch.setattr(compiler_cache.subprocess, "call", call)
    own = compiler_cache.OWN_PRELUDE + "\nstatic int thrice(int x) { return 3 * x; }\n"  # C++ only this module asks for
    src.write_text(PRELUDE + own + '#line 1 "core"\nextern "C" int g(int x) { return thrice(x) - twice(x); }\n')
    assert compiler_cache.main([str(store), bin_dir, "g++", "-O3", "-fPIC", "-shared", "-o", str(out), str(src)]) == 0
    assert ctypes.CDLL(str(out)).g(20) == 20
    (header,) = [h for h in store.glob("pch/*/*/prelude.h") if f'#include "{h}"' in included]
    assert header.read_text() == PRELUDE


@pytest.mark.skipif(os.name != "posix" or shutil.which("g++") is None, reason="needs g++ and the POSIX wrapper")
def test_a_library_compiled_at_O0_is_compiled_at_O3_later(tmp_path, monkeypatch):
    """With ``LATER_ENV`` set, a -O0 library compile also has its source compiled
    at -O3 in a detached process, stored under the key a -O3 compile of the same
    text looks up, and the mark written: the stored library's path, or ``FAILED`` when that
    compile fails."""
    monkeypatch.delenv(library_store.EXTRA_ENV, raising=False)
    store, bin_dir = tmp_path / "binaries", str(tmp_path / "bin")
    sources = {"works": 'extern "C" int f(int x) { return 2 * x; }\n',
               "fails": '#ifdef __OPTIMIZE__\n#error only at -O0\n#endif\nextern "C" int f(int x) { return x; }\n'}
    for name, text in sources.items():
        src, out, mark = tmp_path / f"unknown-{name}.cpp", tmp_path / f"lib{name}.so", tmp_path / "marks" / name
        src.write_text(text)
        monkeypatch.setenv(library_store.LATER_ENV, str(mark))
        assert compiler_cache.main([str(store), bin_dir, "g++", "-O0", "-fPIC", "-shared", "-o", str(out),
                                    str(src)]) == 0
        src.unlink()  # as Slang does once the compile returns: the later compile has its own copy
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert time.monotonic() < deadline, "no mark after 60 s"
            time.sleep(0.05)
        if name == "works":  # the stored library's path (lowering.direct_program calls it from there)
            assert Path(mark.read_text()).is_file() and Path(mark.read_text()).parent.parent == store
        else:
            assert mark.read_text() == compiler_cache.FAILED
    src = tmp_path / "unknown-again.cpp"
    src.write_text(sources["works"])
    monkeypatch.delenv(library_store.LATER_ENV)
    calls = []
    monkeypatch.setattr(compiler_cache.subprocess, "call", lambda *a, **k: calls.append(a) or 1)
    out = tmp_path / "libagain.so"
    assert compiler_cache.main([str(store), bin_dir, "g++", "-O3", "-fPIC", "-shared", "-o", str(out), str(src)]) == 0
    assert calls == [] and ctypes.CDLL(str(out)).f(21) == 42  # the stored -O3 library: no compiler run
