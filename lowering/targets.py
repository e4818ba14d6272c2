"""What each backend kind can do, stated once: the code generator asks these
questions in Python and emits only the form the target needs.

Generated Slang never chooses between forms itself (no ``__target_switch``):
which case of a switch a backend takes follows Slang's capability names, and a
switch that picked the CPU device's unsynchronised read-modify-write on a GPU
would give silently wrong sums there.  So every per-target difference in the
generated code is a field below, and tests check the generated text of every
kind, present on the machine or not (tests/lowering/test_targets.py).

Facts behind the fields (slangpy 0.43.1, Slang 2026.12; ``shared/notes/slangpy.md``):

* slangpy's CPU device compiles Slang to C++ and runs all threads of a
  dispatch one after another on the calling thread, holding the GIL (several
  Python threads or devices do not run dispatches side by side: measured); it
  has no float atomics (a compile error), and a plain ``buf[i] += v`` is exact
  there.  Its generated C++ may start threads of its own (``worker_threads``).
* Vulkan (lavapipe here, any GPU driver) and CUDA run threads concurrently:
  colliding updates need atomics.  Both have float atomic add (``InterlockedAdd``
  on float/double).  Float atomic max/min exist on Vulkan
  (``VK_EXT_shader_atomic_float2``) but not in CUDA (nvrtc has no float
  ``atomicMax``), and where they exist they follow IEEE maxNum, dropping a NaN
  that numpy's ``np.maximum.at`` keeps: so max, min and product updates are a
  compare-and-swap loop on every concurrent target.
* lavapipe's double-precision ``exp``/``sin``/``log``/``pow``/``tanh`` return
  garbage; hardware Vulkan and CUDA compute them correctly.
* Vulkan and CUDA run a workgroup's threads together with ``groupshared``
  memory and ``GroupMemoryBarrierWithGroupSync``; lavapipe runs that code too
  (so CI checks the cooperative kernels of ``lowering.workgroups``).  slangpy's
  CPU device runs threads one after another: a barrier there cannot work.

The ``Target`` of each kind lives in its backend module (``lowering.backends.cpu``,
``.vulkan`` with lavapipe's, ``.cuda``), which registers it here (``of``).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    """The numbers the planner and the code generator size things by, each
    measured on a machine (the comment says which) and held by a ``Target``
    (``Target.tuning``): a target whose hardware differs states its own with
    ``dataclasses.replace``.  Code planning without a target uses ``TUNING``.
    These change how fast code runs and how it is split, never what it
    computes (sums keep a fixed order for given numbers)."""

    # -- two-stage reductions (lowering.rewrites.split_large_reductions) --
    # A reduction at least ``split_reduction_min`` long, with fewer parallel points
    # than ``split_parallel_limit``, is split in two stages: one thread summing
    # millions of elements would leave every other core (or GPU lane) idle.
    split_reduction_min: int = 4096
    split_parallel_limit: int = 4096
    # One thread a chunk: about this many chunks' threads in all, each chunk at least this long.
    split_target_threads: int = 8192
    split_min_chunk: int = 256
    # Where workgroups share each chunk's loop (lowering.workgroups), about as many
    # workgroups as a large GPU holds at once (an H100: 132 SMs x 8 of 256 threads):
    # 1024 chunks of a single sum, each a workgroup's; 32768 points (chunks x
    # outputs) of a reduction with many outputs, 32 a workgroup; and chunks long
    # enough to give every lane 16 elements or more.
    split_target_workgroups: int = 1024
    split_target_workgroup_points: int = 32768
    split_min_workgroup_chunk: int = 4096

    # -- threads (lowering.threads) --
    # Threads of a workgroup (``[numthreads]`` of every kernel, and the lanes and
    # groupshared scratch of a workgroup tree), and most workgroups along one
    # dispatch dimension (Vulkan's and CUDA's limit).
    group_size: int = 256
    max_groups: int = 65535
    # A sequential target's thread loops over up to this many consecutive points
    # (~20 ns of call overhead a thread against ~1 ns of work a simple element)...
    cpu_points_per_thread: int = 1024
    # ... but no fewer threads than this where there are that many points: the
    # worker threads split a kernel by whole threads (a matmul's 256 tiles were one
    # thread of 1024 points, work no second core could share).
    cpu_min_threads: int = 256
    # Independent partial sums of a reduction's loop inside one CPU thread
    # (lowering.kernels.thread_loop): g++ may not reorder float additions, so one
    # accumulator is a loop-carried dependency it cannot vectorise; 8 double lanes
    # fill two AVX registers.  A loop that also stores elementwise values (a row
    # kernel's group over a first stage's chunk) takes as many lanes as a vector
    # holds floats, its lane loop left to g++'s vectoriser.
    cpu_reduction_lanes: int = 8
    cpu_storing_lanes: int = 16
    # Fewest points of a CPU thread for its column sums to run rows outer, the
    # points inner (lowering.kernels.columns): fewer than a vector's worth of
    # neighbouring loads gains g++ nothing to vectorise across.
    cpu_column_points: int = 8
    # Rows at least this long make a CPU thread's points that cross rows two loops,
    # its rows outer and their points inner (lowering.kernels.writer's ``frame``): an
    # inner loop over a shorter row holds less than a vector of float32 and pays its
    # bounds per row.
    cpu_row_loop_min: int = 16
    # Run-time alias checks g++ may add to vectorise one loop (its
    # ``vect-max-version-for-alias-checks``, default 10; ``compiler_args``): a kernel's
    # buffers are separate pointers it cannot prove apart, and a fused forward and
    # backward elementwise loop storing 3 buffers and loading 3 needs 12 checks.  Past
    # the limit g++ leaves the loop scalar (tanh(x + b): 20 ms against 2).
    cpu_alias_checks: int = 100
    # Least work (points times their loop lengths) per worker thread for a kernel
    # to be split: below it the pool's wake-up and join cost more than they save
    # (measured crossover: docs/design.md "The CPU device's cores").
    min_work_per_worker: int = 1 << 15

    # -- workgroups sharing a point's loops (lowering.workgroups) --
    # A shorter loop gives too few points a lane to pay for the combining tree.
    workgroup_min_loop: int = 64
    # Fewer points than this leave most of a GPU idle at one thread each: their
    # loops are shared along the loop even where it does not read memory in order.
    workgroup_few_points: int = 2048
    # Points a workgroup covers when its lanes share loops across points: a warp's
    # worth of neighbouring elements, read together (``group_size // 32`` lanes each).
    workgroup_across_points: int = 32

    # -- rows (lowering.rowfusion, ``Target.max_row``) --
    # One thread looping over a longer row loses its SIMD neighbours (measured on
    # lavapipe before workgroup rows); a workgroup's 256 threads each take every
    # 256th point, so a row of 16k is 64 points a thread.
    row_of_a_thread: int = 256
    row_of_a_workgroup: int = 16384

    # -- register-tiled products (lowering.matmul; its docstring has the measurements) --
    # Outputs per thread along (outer, inner) axis where threads run side by side
    # (lavapipe: every loop unrolled, 5 GFLOP/s against 0.9).
    vector_tile: tuple[int, int] = (8, 4)
    # The CPU device's micro-kernel: sums of a rows x columns block of outputs over
    # a block of k, one vector FMA of an inner-operand row per output row and k.
    # With AVX-512's 32 registers 8x32 (16 zmm of float32 sums) measured fastest at
    # 512^3 (8x16, 12x16, 16x16, 6x32, 12x32, 4x64 and 8x48 were 10-40% slower), but
    # its 256 unrolled FMAs take Slang and g++ about twice as long as the loops
    # before it; a product under ``cpu_wide_micro_work`` multiply-adds (256^3: well
    # under a millisecond either way) gets ``cpu_micro_narrow``, which also fits
    # AVX2's 16 registers (12 of sums, the row, the broadcast).
    cpu_micro: tuple[int, int] = (8, 32)
    cpu_micro_narrow: tuple[int, int] = (6, 16)
    cpu_wide_micro_work: int = 1 << 24
    # Below this many multiply-adds (160^3) a CPU product takes the plain tiles of
    # every target: a 256x64x64 MLP layer runs in ~0.1 ms either way, and the
    # micro-kernel's unrolled blocks made the small MLP's first compile 1.97 -> 4.87 CPU s.
    cpu_micro_min_work: int = 1 << 22
    # A thread's tile where the inner operand runs along the inner axis (A B, A^T B):
    # one row of blocks, at most this many outputs long (the outer operand's rows
    # packed per k block: read in place they were what g++ vectorised, along k).
    cpu_tile_columns: int = 512
    cpu_k_block: int = 128
    # ... and where it runs along k (A B^T) or such tiles would pass the box's edge:
    # both operands packed per k block, a square tile sharing each packed element
    # (packing then costs ~1/64 of the products where one row of blocks paid ~1/8).
    cpu_packed_tile: tuple[int, int] = (64, 64)
    cpu_packed_k_block: int = 64
    # Outputs per CPU thread of a vector-matrix product (one row of sums, kept in
    # doubles as every in-thread float32 sum is: lowering.codegen.WIDE_ACCUMULATORS).
    cpu_vector_row: int = 256
    # Fewer outputs than this leave too few tiles for the cores: a long reduction is
    # then better split in two stages (rewrites.split_large_reductions).
    min_tiled_outputs: int = 256
    # A register tile's loop over the inner operand's elements is unrolled up to
    # this length (lowering.kernels.register_tiles); a longer one is left rolled,
    # to the backend compiler's vectoriser.
    unrolled_tile_row: int = 8
    # Multiply-adds from which a product runs on the host's BLAS rather than as a
    # generated micro-kernel, on a target with ``host_blas`` (lowering.host_products).
    # numpy's call (~2 us at 16x64x64) costs less than a Slang launch, and the
    # product's kernel is not compiled at all (g++ over its unrolled blocks: seconds),
    # so the host wins from 16^3 up (bench/host_products.py: value_and_grad of one
    # product level at 16^3-128^3, first calls 2-4x shorter; the small Elman RNN's
    # 16x64x64 steps: 8.3 ms a call against 3.2, its first call 12.9 s against 1.3).
    # Below, neither wins measurably and a tiny kernel compiles fast.
    host_blas_min_work: int = 1 << 12

    # -- planning and sharing (lowering.sibling_reductions, shared_code, in_place) --
    # Most values one merged tasklet of sibling reductions sums: on the CPU device
    # each keeps ``cpu_reduction_lanes`` double accumulators (two AVX registers), so
    # four outputs hold half of AVX2's 16 vector registers.
    max_sibling_outputs: int = 4
    # Kernels of at most this much work (points times loop lengths) may share one
    # function whose integer literals differ, passed as parameters: a larger
    # kernel's loops run faster with constant bounds and strides.
    lift_max_work: int = 1 << 16
    # Most points of a domain whose touched elements ``share_versions`` enumerates to
    # prove two accesses disjoint (numpy arrays of the points: planning time and
    # memory); a larger one counts as touching every element, which is safe.
    max_enumerated_points: int = 1 << 20

    # -- scans (lowering.library_kernels.scans; workgroups of ``group_size`` threads) --
    # Threads of a workgroup of the kernels giving each line, or each piece of a
    # line, its own thread (no barriers, so no need for a full workgroup).
    scan_line_group: int = 64
    # Bytes of a workgroup scan's block tile in groupshared memory: with the
    # threads' partial states it stays within Vulkan's guaranteed 16 KiB.
    scan_tile_bytes: int = 8192
    # Fewer lines than this, each longer than two workgroups, take the workgroup
    # scan: a thread per line would leave most of a GPU idle.
    scan_few_lines: int = 2048
    # lavapipe (no cheap barriers): elements of a thread's piece of a long line
    # (the workgroup scan's barriers made a 16M cumsum take 1.8 s there).
    scan_gpu_chunk: int = 256
    # The CPU device: contiguous lines of at least ``scan_on_workers`` elements in
    # all go to the worker threads, in about ``scan_cpu_pieces`` pieces of at least
    # ``scan_cpu_chunk`` elements (two passes over the input: it pays only with more
    # than two workers, and the pieces do not depend on the worker count).
    scan_on_workers: int = 1 << 20
    scan_cpu_pieces: int = 64
    scan_cpu_chunk: int = 1 << 15

    # -- np.linalg kernels (lowering.library_kernels.linalg) --
    # Largest matrix one workgroup takes: one workgroup per matrix leaves a GPU
    # idle on one large matrix, and no blocked multi-workgroup kernel is written,
    # so a larger one is a host step (numpy's LAPACK).
    linalg_max_n: int = 64
    # ... and on a target with ``host_blas`` (LAPACK in place on the buffers), where
    # one thread per matrix loses past tiny sizes (value_and_grad, 1 BLAS thread:
    # solve 64 x 32 x 32 5.2 ms against LAPACK's 2.1).
    linalg_host_lapack_n: int = 16
    # Largest matrix of the Jacobi eigh/svd kernels, one thread's sweeps a matrix
    # (eigvalsh on lavapipe, one 64 x 64: 39.7 ms against the host's 1.3; 16 x 16:
    # 1.6 against 1.0), and on a ``host_blas`` target (64 x 8 x 8: 0.82 against 0.74).
    linalg_jacobi_n: int = 16
    linalg_host_lapack_jacobi_n: int = 8
    # A workgroup's threads cooperating on a matrix (two NVIDIA warps, eight lavapipe
    # waves), and matrices to a workgroup of one thread each (lavapipe: four of its
    # 8-wide waves).
    linalg_threads: int = 64
    linalg_matrices: int = 32

    # -- store versus recompute (lowering.cost_model) --
    # Most operations of an elementwise value that a GPU recomputes where it is
    # read rather than store it: it does tens of flops in the time one element
    # crosses memory (layer norm's ``(x - m) / s * g + b``).
    recompute_ops: int = 24
    # Most operations a reader's body may reach by recomputing values in it.  A chain
    # of gathers recomputed into gathers grows as the product of their reads: ludcmp's
    # reverse pass on lavapipe grew one tasklet to 27k operations, and planning took
    # 12 s instead of 0.9.
    max_recomputed_ops: int = 8 * 24
    # Fewest elements of a value worth a second plan that recomputes it on the CPU
    # device, or recomputing as an expansion of its inputs on any target: a smaller
    # value stays in cache, and the trial's second plan cost the unrolled NPBench
    # kernels (values of at most 64 elements) 0.2-0.4 s of a cold call.
    trial_min_elements: int = 4096
    expansion_min_elements: int = 4096
    # Plans made again for values free to recompute that a plan still buffers
    # (each round's recomputation may buffer the next value down a chain).
    free_recompute_rounds: int = 3

    # -- groupshared-tile products on GPU targets (lowering.kernels.group_tiles) --
    # A workgroup's tile of outputs along the product's (outer, inner) axes, staged
    # through groupshared memory ``group_tile_k`` k's at a time; each of its
    # ``group_size`` threads sums a (outer, inner) ``group_thread_tile`` of it in
    # registers, so group_tile / group_thread_tile must hold group_size threads.
    # Not yet timed on a GPU: these are the usual SGEMM starting point (64x64 tile,
    # k tiles of 16, 4x4 a thread: 8 KiB of groupshared memory, 16 sums a thread);
    # bench.gpu_session's sweep stage times the alternatives.
    group_tile: tuple[int, int] = (64, 64)
    group_tile_k: int = 16
    group_thread_tile: tuple[int, int] = (4, 4)
    # A product with at most ``group_narrow`` outputs along one axis (an MLP's 10
    # classes) takes ``group_narrow_tile`` (wide axis, narrow axis) instead, a
    # thread summing ``group_narrow_thread_tile`` of it: 64x64 would idle 54 of 64.
    group_narrow: int = 16
    group_narrow_tile: tuple[int, int] = (256, 16)
    group_narrow_thread_tile: tuple[int, int] = (16, 1)
    # Register double buffering of both product forms' tiles (group_tiles, tensor_tiles):
    # each thread reads its share of the next k tile into registers before summing
    # the staged one, so global memory's latency hides behind the sums, for as many
    # registers more (16 floats a thread at the default tiles).  Off until a GPU
    # times it: bench.gpu_session's sweep has it on in a variant.
    group_prefetch: bool = False
    # -- split-K (lowering.kernels.split_k) --
    # A product whose output tiles are too few for a GPU, over a contraction at least
    # ``split_k_min_length`` long (an MLP's weight gradients: 512x10 outputs, 8 tiles,
    # and 512x512, 64 tiles, over 65536 rows), has its contraction cut into slices,
    # each slice's partial products stored, then summed over the slices in a fixed
    # order: about ``split_k_target_workgroups`` workgroups in all (an H100 has 132
    # SMs: two a multiprocessor), slices at least ``split_k_min_slice`` long.
    split_k_min_length: int = 4096
    split_k_target_workgroups: int = 264
    split_k_min_slice: int = 512
    # -- TF32 tensor-core products (lowering.kernels.tensor_tiles) --
    # A workgroup's tile of outputs along the product's (outer, inner) axes and its
    # warps along them: each warp sums a (tile / warps) block as 16x8 mma.sync
    # fragments, staged through groupshared memory ``tensor_tile_k`` k's at a time
    # (a multiple of the instruction's 8).  Not yet timed on a GPU: 128x128 over
    # 2x4 warps (64x32 a warp, 16 mma's a staged 8 k's, 64 sums a thread) is the
    # usual Ampere/Hopper mma.sync starting point; bench.gpu_session's sweep times
    # others.  Products with at most ``group_narrow`` outputs along one axis take
    # ``tensor_narrow_tile`` over ``tensor_narrow_warps`` (wide axis, narrow axis).
    tensor_tile: tuple[int, int] = (128, 128)
    tensor_warps: tuple[int, int] = (2, 4)
    tensor_tile_k: int = 16
    tensor_narrow_tile: tuple[int, int] = (256, 16)
    tensor_narrow_warps: tuple[int, int] = (8, 1)

    @property
    def row_threads(self) -> int:
        """Most threads in one row of a dispatch."""
        return self.group_size * self.max_groups


TUNING = Tuning()


# The instruction families a target's matrix units are reached by (``TensorCores.instructions``).
MMA_SYNC = "mma_sync"  # PTX ``mma.sync`` on per-lane fragments (CUDA): lowering.kernels.tensor_tiles
COOPERATIVE_MATRIX = "cooperative_matrix"  # Slang ``linalg.CoopMat`` (VK_KHR_cooperative_matrix): .coop_tiles


@dataclass(frozen=True)
class TensorCores:
    """A target's matrix units, as its products may use them.

    ``operands``: the formats they multiply ("tf32" for float32 products at
    ``matmul_precision="tf32"``, "float16", "bfloat16"); sums are float32.
    CUDA's ``mma.sync`` takes all three; a Vulkan GPU's cooperative matrices
    are claimed for float16 only (``backends.vulkan.cooperative_matrices``:
    the extension has no TF32, so a TF32 product there stays exact, and
    whether a driver's take bfloat16 is not something slangpy reports).

    ``stand_in``: the cooperative-matrix form with its 16x16x16 products,
    loads and stores written in plain Slang instead (threads summing from
    groupshared memory, by the layouts the extension defines), so that a device
    without matrix units runs every other part of the form: lavapipe, under
    test.  (The ``mma.sync`` form needs no such switch: its instruction has a
    plain-Slang case wherever the target is not CUDA.)"""

    instructions: str
    operands: frozenset[str]
    stand_in: bool = False


@dataclass(frozen=True)
class Target:
    """A backend kind's capabilities, as far as code generation depends on them."""

    name: str  # the device kind of the backend stating it (lowering.backends)
    # All threads of a dispatch run one after another: plain read-modify-writes
    # are exact, a thread should loop over many points (call overhead), and one
    # entry point can run the whole program in a single dispatch.
    sequential: bool
    # Atomic add on float and double buffers (``InterlockedAdd``); without it a
    # colliding sum must be sequential or owner-computes.
    float_atomic_add: bool
    # float32 exp, log, sin, cos, tanh, arctan and arctan2 as inline polynomials
    # (lowering.cpu_math's ``VECTORISED``) rather than the built-ins: g++
    # vectorises loops calling them (CPU), and lavapipe's own are far less accurate.
    polynomial_math: bool
    # The double-precision transcendentals (exp, sin, log, pow, tanh) are right.
    float64_transcendentals: bool = True
    # The float32 built-ins are as accurate as numpy's; where not, every float32
    # transcendental comes from lowering.cpu_math (lavapipe's arcsin was 3800 ulp
    # off, arctan 270, pow 60).  The CPU device keeps glibc's for the functions
    # outside ``polynomial_math``: its own pow, log2 or arcsinh, computed partly in
    # double, ran 1.2-4x slower there.
    accurate_builtins: bool = True
    # The compiler applies float identities that change rounding: Slang's SPIR-V
    # optimiser (any level >= 1, any floating-point mode) folds (x + K) - K and
    # (1 + x) - 1 to x, so rounding tricks need lowering.cpu_math's ``unfolded``.
    folds_float_identities: bool = False
    # A workgroup's threads run together and share memory and barriers: a long
    # reduction or a row is split over the threads of one workgroup and their
    # partial results combined in a fixed tree (lowering.workgroups).
    workgroup_reductions: bool = False
    # Recomputing an elementwise value with transcendentals (exp, log1p, tanh)
    # costs less than storing it and reading it back: a GPU does tens of flops
    # in the time one element crosses memory; a CPU's vectorised exp does not
    # (lowering.reduce_fusion folds only arithmetic producers there).
    recompute_transcendentals: bool = False
    # Wave (subgroup) shuffles (``WaveReadLaneAt``, ``WaveGetLaneCount``): the last
    # steps of a workgroup's combining tree, those within one wave, run in
    # registers instead of groupshared memory and barriers (lowering.kernels.workgroup_tree's
    # ``combine_lanes``; same tree, same bits).  Vulkan 1.1 and CUDA have them
    # (lavapipe: waves of 8, lanes numbered as the threads).
    wave_operations: bool = False
    # A device-scope memory fence and an integer atomic add on a buffer: a long
    # reduction's workgroups count themselves done, and the last one sums every
    # workgroup's partial result in the same kernel (lowering.last_workgroup),
    # instead of a second kernel.  Vulkan and CUDA have both; lavapipe too.
    single_pass_reductions: bool = False
    # Kernels whose points are independent may be split over worker threads that
    # the generated code starts itself (lowering.threads): slangpy's CPU device
    # holds the GIL through a dispatch and runs it on the calling thread.
    worker_threads: bool = False
    # The backend compiler (g++ for the CPU device) may use every instruction of
    # this machine (``compiler_args``, added by lowering.compiler_cache's g++
    # wrapper: slangpy drops downstream arguments): AVX-512 here instead of SSE2; a hand-written
    # 512^3 matmul kernel went 9.2 -> 18.7 GFLOP/s, the generated ones 1.1-1.4x
    # (bench.matmul_kernels), results bit-identical (g++ contracts nothing into FMA).
    native_instructions: bool = False
    # Loops over a tile's contraction, a row or a reduction are marked ``[loop]``
    # (SPIR-V DontUnroll): lavapipe compiles a shader at its first dispatch and
    # unrolls constant-trip loops with their inlined maths, so the first call of
    # a 256x64-64-10 MLP spent 15 s compiling (the softmax row kernel alone 4.7 s,
    # 0.22 s with ``[loop]``; a matmul kernel's loop over its 8x4 tile of
    # outputs 2.0 s, 0.34 with it).
    keep_loops: bool = False
    # Buffers are host memory the generated code and numpy share: large matrix
    # products run as numpy.matmul (the host's BLAS) on them between the Slang
    # launches of a call (lowering.host_products).
    host_blas: bool = False
    # Matrix units for products (``TensorCores``; None: every product sums in
    # the threads' own arithmetic).
    tensor_cores: TensorCores | None = None
    # The numbers plans and kernels are sized by (split sizes, thread and row
    # limits, tile sizes).
    tuning: Tuning = TUNING

    @property
    def max_row(self) -> int:
        """Longest row a row kernel (lowering.rowfusion) may loop over: a
        thread's own loop on a sequential target, a workgroup's on a GPU."""
        return self.tuning.row_of_a_workgroup if self.workgroup_reductions else self.tuning.row_of_a_thread

    @property
    def concurrent_updates(self) -> bool:
        """Threads may update one element at the same time (so colliding
        updates need atomics or a compare-and-swap loop)."""
        return not self.sequential


# Each backend module (``lowering.backends``) states its own ``Target`` and registers
# it here under its device name, so that planning and code generation can be asked
# for a kind by name (``of``) without knowing which kinds exist.
TARGETS: dict[str, Target] = {}


def register(target: Target) -> None:
    """Make ``target`` what ``of(target.name)`` returns (``lowering.backends.registry.register``)."""
    TARGETS[target.name] = target


def of(device: "str | Target") -> Target:
    """The target a backend registered for a device kind, as on hardware (a
    ``Target`` is returned as it is; ``Backend.target()`` tells lavapipe apart)."""
    if isinstance(device, Target):
        return device
    try:
        return TARGETS[device]
    except KeyError:
        raise ValueError(f"no Slang target for device {device!r}: expected one of {sorted(TARGETS)}") from None


def tuning_of(target: "Target | None") -> Tuning:
    """``target``'s numbers; ``TUNING`` for a plan made for every target (no target)."""
    return TUNING if target is None else target.tuning


# Set to 0 to compile CPU-device code for any x86-64 (g++'s default) instead of this machine.
NATIVE_ENV = "SYMDIFF_CPU_NATIVE"


def compiler_args(target: Target) -> list[str]:
    """Extra arguments for a target's backend compiler: for native instructions,
    what ``g++ -march=native`` means on this machine, spelled out (its
    ``-march``, ``-m`` and ``--param`` flags): the same library on another CPU
    then has other arguments, so a compiled-library cache keyed by them
    (``lowering.compiler_cache``) never hands one machine's code to another.
    ``$SYMDIFF_CPU_NATIVE=0`` (or no g++ found) leaves g++'s default
    instructions.  A sequential target's compiler may also add more run-time
    alias checks to vectorise a loop (``Tuning.cpu_alias_checks``)."""
    checks = [f"--param=vect-max-version-for-alias-checks={target.tuning.cpu_alias_checks}"] if target.sequential else []
    if not target.native_instructions or os.environ.get(NATIVE_ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        return checks
    return list(_native_flags()) + checks


@functools.lru_cache(maxsize=None)
def _native_flags() -> tuple[str, ...]:
    gxx = shutil.which("g++")
    if gxx is None:
        return ()
    try:
        run = subprocess.run([gxx, "-march=native", "-E", "-v", "-x", "c++", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ()
    line = next((ln for ln in run.stderr.splitlines() if "cc1plus" in ln and "-march=" in ln), None)
    if line is None:
        return ()
    words, flags = line.split(), []
    for n, w in enumerate(words):
        if w.startswith("-march=") or w.startswith("-mtune=") or (w.startswith("-m") and flags):
            flags.append(w)
        elif w == "--param" and n + 1 < len(words):
            flags.append(f"--param={words[n + 1]}")
    return tuple(flags)
