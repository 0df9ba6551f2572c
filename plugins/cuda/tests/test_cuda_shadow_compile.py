"""Every kernel the conformance suite (op tests, random graphs) and the core's scheduler and lowering
tests generate, rendered as CUDA C and compiled to PTX for sm_80 and sm_90, with zero failures.

The conformance suite that ships in plugrad (`plugrad.testing`) and the core tests of the scheduler
and the lowering run on the PYTHON reference device with `--plugrad-shadow-device CUDA`: each
kernel it compiles is also lowered for CUDA (its capabilities: work-groups, shared memory),
rendered and compiled for PLUGRAD_CUDA_ARCH. Both architectures run at once in two subprocesses;
NVRTC compiles in process and the disk cache makes reruns cheap.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plugrad_cuda.compiler import CUDACompiler

CORE_TESTS = Path(__file__).resolve().parents[3] / "tests"
# the core tests whose kernels are the compiler's business (the rest repeat these kernels at length)
SHADOWED = ("test_schedule.py", "test_lowering.py", "test_numerics.py")
ARCHS = ("sm_80", "sm_90")
# sm_80 compiles every kernel; sm_90 a slice that covers each kind of kernel (the source is the same, only
# the target differs), which halves the suite's time on two cores
SM90_SLICE = "matmul or sum or max or softmax or half or cast or where or pad or conv or random"
SHADOW_LINE = re.compile(r"plugrad shadow device CUDA: (\d+) kernels rendered and compiled.*?(\d+) failed")


@pytest.fixture(scope="module")
def shadow_runs() -> dict[str, subprocess.Popen]:
  if not CUDACompiler("sm_80", None, env=os.environ).available:
    pytest.skip("no CUDA compiler: neither NVRTC (pip install nvidia-cuda-nvrtc) nor nvcc is available")
  # the conformance suite ships with plugrad; the core's own tests are there in a source checkout
  paths = [str(CORE_TESTS / name) for name in SHADOWED] if CORE_TESTS.is_dir() else []
  procs = {}
  for arch in ARCHS:
    env = {k: v for k, v in os.environ.items() if k != "DEVICE"} | {"PLUGRAD_CUDA_ARCH": arch}
    procs[arch] = subprocess.Popen(
      [sys.executable, "-m", "pytest", *paths, "--pyargs", "plugrad.testing", "-q", "-p", "no:cacheprovider",
       "-p", "plugrad.testing.pytest_plugin", "--plugrad-device", "PYTHON", "--plugrad-shadow-device", "CUDA",
       *(["-k", SM90_SLICE] if arch == "sm_90" else [])],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
      cwd=CORE_TESTS.parent if CORE_TESTS.is_dir() else None)
  yield procs
  for p in procs.values():
    if p.poll() is None: p.kill()


@pytest.mark.parametrize("arch", ARCHS)
def test_every_core_kernel_compiles(arch: str, shadow_runs: dict[str, subprocess.Popen]) -> None:
  out, _ = shadow_runs[arch].communicate(timeout=600)
  tail = "\n".join(out.splitlines()[-40:])
  m = SHADOW_LINE.search(out)
  assert m is not None, f"no shadow summary in the core test run for {arch}:\n{tail}"
  compiled, failed = int(m.group(1)), int(m.group(2))
  assert failed == 0, f"{failed} CUDA kernel(s) failed for {arch}:\n{out[-20000:]}"
  # (a core test failing for reasons of its own is the core's business: only the CUDA kernels count here)
  assert compiled >= (100 if arch == "sm_90" else 500), \
    f"only {compiled} kernels compiled for {arch}: is the shadow device wired up?\n{tail}"
  print(f"{arch}: {m.group(0)}")
