"""Slang to a target's source text without that target's device, through the
Slang compiler library inside slangpy's wheel (its C API, by ctypes).

slangpy compiles only for the device it runs on, and the wheel ships no
``slangc``; so the CUDA code symdiff generates would be compiled only on a
machine with an NVIDIA GPU.  This front end runs the same Slang compiler up to
CUDA C++ source (the step before nvrtc), so that a test here sees what the
CUDA device would be given: a Slang error for that target, and the atomic
operations it ends up with.  The same for SPIR-V (as assembly text): what a
hardware Vulkan driver would be given, for features lavapipe lacks.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import slangpy

# SlangCompileTarget and SlangStage values (slang.h); "spirv" is SPIR-V assembly text
TARGET_CODES = {"cuda": 17, "cpp": 13, "spirv": 7}
_SOURCE_LANGUAGE_SLANG = 1
_STAGE_COMPUTE = 6


class SlangError(RuntimeError):
    pass


@functools.lru_cache(maxsize=None)
def _library():
    found = sorted(Path(slangpy.__file__).parent.glob("libslang-compiler.so*"))
    if not found:
        return None
    lib = ctypes.CDLL(str(found[-1]))
    p, s, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for name, res, args in [("spCreateSession", p, [s]), ("spCreateCompileRequest", p, [p]),
                            ("spSetCodeGenTarget", None, [p, i]), ("spAddTranslationUnit", i, [p, i, s]),
                            ("spAddTranslationUnitSourceString", None, [p, i, s, s]),
                            ("spAddEntryPoint", i, [p, i, s, i]), ("spCompile", i, [p]),
                            ("spGetDiagnosticOutput", s, [p]), ("spGetEntryPointSource", s, [p, i]),
                            ("spDestroyCompileRequest", None, [p])]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


@functools.lru_cache(maxsize=None)
def _session():
    return _library().spCreateSession(None)


def available() -> bool:
    return _library() is not None


def compile_source(source: str, target: str, entries: list[str]) -> dict[str, str]:
    """``{entry: target source}`` for the compute entry points of a Slang module."""
    lib = _library()
    request = lib.spCreateCompileRequest(_session())
    try:
        lib.spSetCodeGenTarget(request, TARGET_CODES[target])
        unit = lib.spAddTranslationUnit(request, _SOURCE_LANGUAGE_SLANG, b"symdiff")
        lib.spAddTranslationUnitSourceString(request, unit, b"symdiff.slang", source.encode())
        for entry in entries:
            lib.spAddEntryPoint(request, unit, entry.encode(), _STAGE_COMPUTE)
        if lib.spCompile(request) < 0:
            raise SlangError((lib.spGetDiagnosticOutput(request) or b"").decode())
        return {entry: lib.spGetEntryPointSource(request, n).decode() for n, entry in enumerate(entries)}
    finally:
        lib.spDestroyCompileRequest(request)
