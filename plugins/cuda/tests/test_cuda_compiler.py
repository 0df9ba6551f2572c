"""The compiler role: NVRTC and nvcc, errors with numbered source, the disk cache and its key."""
from __future__ import annotations

import os

import pytest

from plugrad import CompileError

import plugrad_cuda.compiler as cc
from plugrad_cuda.compiler import CUDACompiler, normalize_arch

SAXPY = """extern "C" __global__ void __launch_bounds__(256) saxpy(float* __restrict__ data0, const float* __restrict__ data1) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  data0[gidx0] = 2.0f * data1[gidx0] + data0[gidx0];
}
"""
HALF = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(32) h(half* __restrict__ data0, const __nv_bfloat16* __restrict__ data1) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  data0[gidx0] = __hmax_nan(data0[gidx0] * ((half)2.0f), __float2half(__bfloat162float(data1[gidx0])));
}
"""
BROKEN = """extern "C" __global__ void __launch_bounds__(1) broken(float* __restrict__ data0) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  data0[gidx0] = undefined_name;
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_to_ptx(arch: str, compiles) -> None:
  ptx = compiles(arch)._compile(SAXPY)
  assert b".visible .entry saxpy" in ptx and f".target {arch}".encode() in ptx and not ptx.endswith(b"\0")


def test_half_and_bfloat16_headers_found(compiles) -> None:
  c = compiles()
  assert c.include_dir is not None, "cuda_fp16.h not found (pip install nvidia-cuda-runtime, or install the CUDA toolkit)"
  assert b".entry h" in c._compile(HALF)


def test_cubin_for_a_real_gpu(compiles) -> None:
  assert compiles("sm_80", "cubin")._compile(SAXPY).startswith(b"\x7fELF")


def test_compile_error_shows_log_and_numbered_source(compiles) -> None:
  with pytest.raises(CompileError) as e:
    compiles()._compile(BROKEN)
  msg = str(e.value)
  assert "broken.cu(3)" in msg or "broken.cu:3" in msg, msg  # the compiler names the line ...
  assert 'undefined_name' in msg and "   3 |   data0[gidx0] = undefined_name;" in msg  # ... and the source shows it


def test_nvcc_backend(cuda_compiler) -> None:
  c = cuda_compiler(backend="nvcc")
  if c.backend != "nvcc": pytest.skip("nvcc not found (install the CUDA toolkit or put nvcc on PATH)")
  assert c.identity().startswith("plugrad-cuda 1 nvcc ")
  assert b".target sm_80" in c._compile(SAXPY)
  assert b".entry h" in c._compile(HALF)
  with pytest.raises(CompileError, match=r"(?s)undefined_name.*   3 \|"):
    c._compile(BROKEN)


def test_cache_key_holds_arch_output_and_version(tmp_path) -> None:
  c80 = CUDACompiler("sm_80", tmp_path, env=os.environ)
  assert CUDACompiler("sm_90", tmp_path, env=os.environ).cache_key(SAXPY) != c80.cache_key(SAXPY)
  assert CUDACompiler("sm_80", tmp_path, output="cubin", env=os.environ).cache_key(SAXPY) != c80.cache_key(SAXPY)
  assert CUDACompiler("80", tmp_path, env=os.environ).cache_key(SAXPY) == c80.cache_key(SAXPY)
  if c80.backend == "nvrtc": assert f"nvrtc {c80.nvrtc.version[0]}.{c80.nvrtc.version[1]}" in c80.identity()


def test_disk_cache(tmp_path, compiles) -> None:
  c = CUDACompiler("sm_80", tmp_path, env=os.environ)
  first, cached = c.compile(SAXPY)
  assert not cached
  again, cached = c.compile(SAXPY)
  assert cached and again == first


def test_no_compiler_is_a_clear_error(monkeypatch, tmp_path) -> None:
  monkeypatch.setattr(cc, "load_nvrtc", lambda env: None)
  monkeypatch.setattr(cc, "find_nvcc", lambda env: None)
  c = CUDACompiler("sm_80", tmp_path, env={})
  assert not c.available
  with pytest.raises(CompileError, match="no CUDA compiler: NVRTC not found"):
    c.compile(SAXPY)


@pytest.mark.parametrize("arch, want", [("sm_80", "sm_80"), ("compute_90", "sm_90"), ("90", "sm_90"), ("8.6", "sm_86"),
                                        ("SM_90a", "sm_90a")])
def test_normalize_arch(arch: str, want: str) -> None:
  assert normalize_arch(arch) == want


def test_bad_arch_names_the_variable() -> None:
  with pytest.raises(ValueError, match="PLUGRAD_CUDA_ARCH"):
    normalize_arch("ampere")
