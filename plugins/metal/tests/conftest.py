"""Fixtures of plugrad-metal's tests; shared helpers live in metal_support.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the tests import metal_support and metal_kernel_collector by name (pytest runs in importlib mode)
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def clang_checker():
  """A SyntaxChecker, or a skip saying what is missing."""
  from plugrad_metal.syntax_check import SyntaxChecker
  checker = SyntaxChecker()
  if (why := checker.unavailable()) is not None: pytest.skip(f"Metal syntax check unavailable: {why}")
  return checker
