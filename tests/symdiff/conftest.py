"""Make the hand-built graph helpers (symdiff_graphs.py) importable here."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
