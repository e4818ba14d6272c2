"""A stand-in for g++ in the compiler cache's tests: a shell script that logs each run to
``{log}`` and "compiles" by copying the ``.cpp`` it is given to the ``-o`` output."""

FAKE_CXX = """#!/bin/sh
echo run >> "{log}"
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
for a in "$@"; do case "$a" in *.cpp) cat "$a" > "$out";; esac; done
"""
