"""Subprocess side of the fuzzer: read a pickled list of (program, device) jobs
on stdin, judge each, print one JSON line per job as soon as it is known.

A job that kills this process (segfault, abort) leaves no result line; the
runner charges it to its seed by re-running the batch's remaining jobs one at a
time.  Before symdiff runs, a ``{"key": k, "stage": "reference"}`` line says the
JAX oracle finished, so a death before it is the oracle's, not symdiff's.
"""
from __future__ import annotations

import json
import os
import pickle
import sys


def main() -> None:
    jobs = pickle.loads(sys.stdin.buffer.read())
    from .check import check
    out = os.fdopen(os.dup(1), "w")   # results only: kernels' own prints go to the real stdout
    os.dup2(2, 1)
    for key, prog, device in jobs:
        def reference_known(key=key):
            out.write(json.dumps({"key": key, "stage": "reference"}) + "\n")
            out.flush()
        result = check(prog, device, reference_known).as_dict()
        result["key"] = key
        out.write(json.dumps(result) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
