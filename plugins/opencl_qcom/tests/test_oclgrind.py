"""Memory safety: a small subset of the core op tests (and this plugin's image tests) run on
oclgrind, the OpenCL device simulator, which reports invalid reads and writes in OCLGRIND_LOG
without making pyopencl raise. The test fails when that log is not empty.

oclgrind ships no .icd file; a temporary OCL_ICD_VENDORS directory registers its runtime.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[2]
# small on purpose: CI time; movement ops with gates, reduces, matmuls and convs cover most indexing, and a kernel
# with a Variable its gated threads past a symbolic launch size
SUBSET = "pad or matmul or getitem or conv or shrink or flip or image or variable"


def oclgrind_icd_library() -> str | None:
  exe = shutil.which("oclgrind")
  candidates = [Path(exe).resolve().parent.parent / "lib" / "oclgrind" / "liboclgrind-rt-icd.so"] if exe else []
  candidates += [Path(p) / "oclgrind" / "liboclgrind-rt-icd.so" for p in ("/usr/lib", "/usr/local/lib", "/usr/lib/x86_64-linux-gnu")]
  return next((str(c) for c in candidates if c.exists()), None)


pytestmark = pytest.mark.skipif(oclgrind_icd_library() is None,
                                reason="oclgrind is not installed (Debian package oclgrind: liboclgrind-rt-icd.so)")


def run_under_oclgrind(tmp_path: Path, device: str, targets: list[str], extra_env: dict[str, str]) -> None:
  """Run the op-test subset on `device` with oclgrind as the only OpenCL platform; fail on any report."""
  vendors = tmp_path / "vendors"
  vendors.mkdir()
  (vendors / "oclgrind.icd").write_text(oclgrind_icd_library() + "\n")
  log = tmp_path / "oclgrind.log"
  env = {**os.environ, "OCL_ICD_VENDORS": str(vendors), "OCLGRIND_LOG": str(log),
         "PLUGRAD_CACHE_DIR": str(tmp_path / "cache"), **extra_env}
  res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "plugrad.testing.pytest_plugin",
                        "--plugrad-device", device, "-k", SUBSET, *targets], env=env, capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
  output = res.stdout[-8000:] + res.stderr[-4000:]
  report = log.read_text() if log.exists() else ""
  assert report == "", f"oclgrind found invalid memory accesses:\n{report[:20000]}"
  assert "Oclgrind" in _platforms(env), "the OpenCL platform under test is not oclgrind"
  assert res.returncode == 0 and re.search(r"\d+ passed", output), f"op tests failed under oclgrind:\n{output}"


def _platforms(env: dict[str, str]) -> str:
  code = "import pyopencl as cl; print([p.name for p in cl.get_platforms()])"
  return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout


def test_core_op_subset_on_cl_is_memory_clean(tmp_path):
  run_under_oclgrind(tmp_path, "CL", ["--pyargs", "plugrad.testing"], {})


def test_image_paths_on_qcom_are_memory_clean(tmp_path):
  run_under_oclgrind(tmp_path, "QCOM", [str(HERE / "test_images.py"), "--pyargs", "plugrad.testing"], {"PLUGRAD_QCOM_ANY": "1"})


def test_integer_abs_loads_and_matches_numpy(tmp_path):
  # clang turns `x < 0 ? -x : x` into llvm.abs, which oclgrind cannot load: the renderer uses OpenCL's abs()
  vendors = tmp_path / "vendors"
  vendors.mkdir()
  (vendors / "oclgrind.icd").write_text(oclgrind_icd_library() + "\n")
  env = {**os.environ, "OCL_ICD_VENDORS": str(vendors), "OCLGRIND_LOG": str(tmp_path / "oclgrind.log"),
         "PLUGRAD_CACHE_DIR": str(tmp_path / "cache")}
  script = """
import numpy as np
from plugrad import Tensor
for dt in (np.int8, np.int16, np.int32, np.int64):
  info = np.iinfo(dt)
  a = np.array([info.min, info.min + 1, -7, -1, 0, 1, 7, info.max], dt)
  x = Tensor(a, device="CL")
  np.testing.assert_array_equal(x.abs().numpy(), np.abs(a))  # |min| wraps to min, as numpy's
  np.testing.assert_array_equal((x > 0).where(-x, x).numpy(), -np.abs(a))
  np.testing.assert_array_equal((x.abs() % -3).numpy(), np.abs(a) % -3)  # |min| is min, and min % -3 is -2
print("abs ok")
"""
  res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert "Oclgrind" in _platforms(env), "the OpenCL platform under test is not oclgrind"
  assert res.returncode == 0 and "abs ok" in res.stdout, res.stdout[-4000:] + res.stderr[-4000:]
