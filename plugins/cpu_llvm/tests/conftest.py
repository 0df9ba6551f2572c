"""Shared fixtures of the plugrad-cpu-llvm tests: the kernels they compile go to a private
temporary cache (not the user's), and `reference` runs the same computation on PYTHON."""
import os
import sys
import tempfile
from pathlib import Path

# must happen before plugrad builds its process-wide registry (it reads the environment once)
os.environ.setdefault("PLUGRAD_CACHE_DIR", tempfile.mkdtemp(prefix="plugrad-cpu-tests-"))

# the tests import cpu_support by name (pytest runs in importlib mode)
sys.path.insert(0, str(Path(__file__).resolve().parent))
