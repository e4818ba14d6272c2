"""Products the host's BLAS computes, as statements of the CPU device's program.

A product run on the host between launches (``lowering.host_products``) splits
a call into a Slang launch before it and one after: an unrolled RNN's 159
products made 254 launches a call, each ~9 us of slangpy (binding every
buffer again), 2.2 ms a call against JAX's 0.6.  Where numpy's OpenBLAS is
found (``host_blas.library``) and the product's views are matrices BLAS reads
as they are (``HostProduct.gemms``), the program entry (``lowering.codegen``)
calls its GEMM itself, on the buffers' memory, between the kernels before and
after it: a call is one dispatch.  The routine is looked up once per module
with ``dlopen``/``dlsym`` on the library numpy has loaded (the same library and
thread pool as ``host_blas``'s calls, so OpenBLAS's threads, not the module's
worker pool, run it).  Everything but the pointers is known when the module is
generated: sizes, transposes, leading dimensions, offsets, the loops' strides;
``alpha`` is the product's coefficient times its one-element factors (the
reverse pass's seed), read from their buffers, and ``beta`` is 1 where it adds
into its output, else 0 (the output is not read).
"""
from __future__ import annotations

from . import compiler_cache
from .host_blas import LETTERS, NO_TRANS, ROW_MAJOR, TRANS, Library
from .host_products import Gemms, HostProduct
from .kernels.writer import STORAGE_TYPES, buffer_name
from .printer import SLANG_TYPES, SlangPrinter


def _prelude(library: Library) -> str:
    """C++ before the module: each dtype's GEMM, found in ``library`` on first use."""
    integer = "int64_t" if library.wide else "int"
    routines = []
    for dtype, letter in LETTERS.items():
        real = STORAGE_TYPES[dtype]
        routines.append(
            f"typedef void (*{letter}gemm_t)(int, int, int, {integer}, {integer}, {integer}, {real}, const {real}*, "
            f"{integer}, const {real}*, {integer}, {real}, {real}*, {integer});\n"
            f"static void {letter}gemm(int ta, int tb, int m, int n, int k, {real} alpha, const {real}* a, int lda, "
            f"const {real}* b, int ldb, {real} beta, {real}* c, int ldc)\n{{\n"
            f"    static {letter}gemm_t f = ({letter}gemm_t)routine(\"{library.symbols[dtype]}\");\n"
            f"    f({ROW_MAJOR}, ta ? {TRANS} : {NO_TRANS}, tb ? {TRANS} : {NO_TRANS}, m, n, k, alpha, a, lda, b, ldb, beta, "
            f"c, ldc);\n}}\n")
    return (compiler_cache.OWN_PRELUDE + " (lowering.blas_calls: the GEMM routines)"  # after the shared header
            + f"\n#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n#include <dlfcn.h>\n\n"
            f"namespace symdiff_blas {{\n"
            f"static void* routine(const char* name)\n{{\n"
            f"    void* lib = dlopen(\"{library.path}\", RTLD_NOW | RTLD_LOCAL);  // numpy's, loaded: its handle\n"
            f"    void* f = lib ? dlsym(lib, name) : nullptr;\n"
            f"    if (!f) {{ std::fprintf(stderr, \"symdiff: no %s in numpy's OpenBLAS\\n\", name); std::abort(); }}\n"
            f"    return f;\n}}\n\n" + "\n".join(routines) + "}\n")


def declarations(library: Library, dtypes: set[str]) -> list[str]:
    """The Slang functions the program's GEMM statements call, one a dtype of ``dtypes``."""
    out = []
    for dtype in sorted(dtypes):
        real, letter = STORAGE_TYPES[dtype], LETTERS[dtype]
        buffer = f"RWStructuredBuffer<{real}>"
        out.append(
            f"// C = alpha A B + beta C on buffers' memory, by numpy's OpenBLAS (lowering.blas_calls)\n"
            f"void {letter}gemm(int ta, int tb, int m, int n, int k, {real} alpha, {buffer} a, int ao, int lda, "
            f"{buffer} b, int bo, int ldb, {real} beta, {buffer} c, int co, int ldc)\n{{\n"
            f"    __target_switch\n    {{\n    case cpp:\n"
            f"        __requirePrelude(R\"({_prelude(library)})\");\n"
            f"        __intrinsic_asm \"symdiff_blas::{letter}gemm($0, $1, $2, $3, $4, $5, $6.data + $7, $8, "
            f"$9.data + $10, $11, $12, $13.data + $14, $15)\";\n    }}\n}}")
    return out


def statement(product: HostProduct, gemms: Gemms) -> str:
    """The program entry's lines running ``product`` as ``gemms``: one GEMM, or
    one a point of its loops (``Gemms.loops``) in loops over them."""
    form = gemms.layout
    printer = SlangPrinter(SLANG_TYPES[product.dtype])
    alpha = " * ".join([printer.literal(product.coeff)] + [f"{buffer_name(s.access)}[{s.offset}]"
                                                           for s in product.scalars])
    beta = printer.literal(1.0 if product.accumulate else 0.0)
    offsets = list(map(str, gemms.offsets))
    loops, reduced = [], []
    for axis, (extent, *strides, over_k) in enumerate(gemms.loops):
        loops.append(f"for (int b{axis} = 0; b{axis} < {extent}; b{axis}++)")
        offsets = [o + (f" + b{axis} * {s}" if s else "") for o, s in zip(offsets, strides)]
        reduced += [f"b{axis}"] if over_k else []
    if reduced and not product.accumulate:  # the first GEMM over the reduced loops overwrites, the others add
        beta = f"({' + '.join(reduced)} == 0 ? {beta} : {printer.literal(1.0)})"
    first, second, out = (buffer_name(a) for a in gemms.accesses)
    letter = LETTERS[product.dtype]
    call = (f"{letter}gemm({int(form.trans_a)}, {int(form.trans_b)}, {form.m}, {form.n}, {form.k}, {alpha}, "
            f"{first}, {offsets[0]}, {form.lda}, {second}, {offsets[1]}, {form.ldb}, {beta}, "
            f"{out}, {offsets[2]}, {form.ldc});")
    body = [" " * 4 * (n + 1) + line for n, line in enumerate(loops + [call])]
    return "\n".join(["{", *body, "}"]) if loops else call

