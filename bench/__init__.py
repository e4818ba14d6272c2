"""Benchmarks of symdiff against JAX, PyTorch and numpy: run ``python -m bench`` (see docs/benchmarks.md)."""
