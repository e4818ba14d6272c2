"""A backend module as a new device kind would be written: the IR interpreter
registered under another name (loaded by test_registry.py, not collected)."""
from symdiff.lowering.backends.interpreter import InterpreterBackend
from symdiff.lowering.backends.registry import register

BACKEND = register(InterpreterBackend("fake_interpreter"))
