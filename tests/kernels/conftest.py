"""Make the kernel registry (polybench.py) importable from the kernel tests."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
