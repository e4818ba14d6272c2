"""Makes tests/ir's shared helpers (numpy_oracle) importable under pytest's importlib mode."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
