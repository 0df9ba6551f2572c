"""Fixtures of the plugrad-cuda tests: the CUDA compiler when one is present, a GPU when one is,
each skipping with the reason when it is not."""
from __future__ import annotations

import functools
import os
from typing import Callable

import pytest

from plugrad_cuda import probe
from plugrad_cuda.compiler import CUDACompiler


@functools.lru_cache(maxsize=None)
def _compiler(arch: str, output: str, backend: str) -> CUDACompiler:
  # no disk cache: every test really compiles
  return CUDACompiler(arch, None, output=output, backend=backend, env=os.environ)


@pytest.fixture
def cuda_compiler() -> Callable[..., CUDACompiler]:
  """compiler(arch="sm_80", output="ptx", backend="auto") -> a CUDACompiler (maybe without a backend)."""
  return lambda arch="sm_80", output="ptx", backend="auto": _compiler(arch, output, backend)


@pytest.fixture
def compiles(cuda_compiler) -> Callable[..., CUDACompiler]:
  """Like `cuda_compiler`, but the test skips when neither NVRTC nor nvcc is available."""
  if not cuda_compiler().available:
    pytest.skip("no CUDA compiler: neither NVRTC (pip install nvidia-cuda-nvrtc) nor nvcc is available")
  return cuda_compiler


@pytest.fixture(scope="session")
def gpu() -> None:
  """Skips the test unless a CUDA GPU can run kernels here."""
  if (reason := probe()) is not None: pytest.skip(f"no CUDA GPU to run on: {reason}")
