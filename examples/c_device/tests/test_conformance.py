"""Runs plugrad's conformance suite (allocator, dtypes, ops and graphs against numpy, limits,
compile cache, error paths) against C."""
import subprocess
import sys


def test_conformance_suite_passes():
  cmd = [sys.executable, "-m", "plugrad", "conformance", "C", "-q"]
  res = subprocess.run(cmd, capture_output=True, text=True)
  assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
