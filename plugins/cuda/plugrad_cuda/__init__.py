"""plugrad-cuda: NVIDIA GPUs, kernels rendered as CUDA C, compiled by NVRTC or nvcc, run through the driver API.

The one plugin object is `plugin`; the entry point `CUDA` in the group `plugrad.devices` names it.
Its roles live in `renderer` (loop program -> CUDA C), `compiler` (CUDA C -> PTX or cubin,
cached on disk), `allocator` (device memory), `runtime` (module loading and launches) and `graph`
(a TinyJit capture replayed as one CUDA graph); `driver` binds libcuda with ctypes.

Without an NVIDIA driver the device is unavailable with the reason, but kernels still render and
compile (for PLUGRAD_CUDA_ARCH), which is how CUDA code is checked on machines without a GPU.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from plugrad.plugin import (Allocator, Capabilities, Compiler, Config, ConfigOption, DeviceDecl, DevicePlugin, Graph,
                            Renderer, Runtime, TensorCore)
from plugrad_cuda.renderer import TENSOR_CORES

__version__ = "0.1.0"

NAME = "CUDA"
#: compile PTX for this architecture; unset: a present GPU's own (as cubin), else sm_80
ARCH = ConfigOption("PLUGRAD_CUDA_ARCH", "sm_80", "compile PTX for this CUDA architecture (e.g. sm_90); unset: the GPU's own (cubin), "
                    "or sm_80 without a GPU")
#: which CUDA compiler to use
COMPILER = ConfigOption("PLUGRAD_CUDA_COMPILER", "auto", "CUDA compiler: auto (NVRTC if it loads, else nvcc), nvrtc or nvcc")

DRIVER_MISSING = "no NVIDIA driver: libcuda.so.1 not found"

#: what the lowering may assume when no GPU can be asked (an sm_80-class GPU)
DEFAULT_CAPS = Capabilities(max_buffers=None, launch_dims=3, max_global_size=(2**31 - 1, 65535, 65535),
                            max_local_size=(1024, 1024, 64), max_workgroup_threads=1024, local_memory=48 * 1024,
                            max_vector_bytes=16, optional_ops=frozenset({"COS"}), tensor_cores=TENSOR_CORES)


def tensor_cores(arch: str) -> tuple[TensorCore, ...]:
  """The tensor cores the lowering may use on `arch` (mma.m16n8k16 with float16 or bfloat16 needs sm_80)."""
  try:
    major_minor = int(arch.removeprefix("sm_").removeprefix("compute_").rstrip("af"))
  except ValueError:
    return ()
  return TENSOR_CORES if major_minor >= 80 else ()


def probe() -> str | None:
  """None when a CUDA GPU can run kernels here, else why not."""
  if sys.platform == "darwin": return "CUDA needs an NVIDIA GPU and driver, which macOS does not have"
  from plugrad_cuda.driver import device_count
  try:
    count = device_count()
  except OSError:
    return DRIVER_MISSING
  except Exception as e:  # cuInit failing: no GPU, a driver too old for the kernel module, a sandbox
    return f"the CUDA driver did not start: {e}"
  return None if count > 0 else "the NVIDIA driver reports no CUDA GPU"


def gpu_count() -> int:
  """How many CUDA GPUs the driver reports (asked only once `probe` found one)."""
  from plugrad_cuda.driver import device_count
  return device_count()


def _index(device: str) -> int:
  _, _, idx = device.partition(":")
  return int(idx or 0)


@lru_cache(maxsize=None)
def _gpu_caps(index: int) -> tuple[Capabilities, str]:
  """The limits and architecture read from GPU `index`."""
  from plugrad_cuda.runtime import context
  ctx = context(index)
  a = ctx.attribute
  caps = Capabilities(max_buffers=None, launch_dims=3,
                      max_global_size=(min(2**31 - 1, a("MAX_GRID_DIM_X")), a("MAX_GRID_DIM_Y"), a("MAX_GRID_DIM_Z")),
                      max_local_size=(a("MAX_BLOCK_DIM_X"), a("MAX_BLOCK_DIM_Y"), a("MAX_BLOCK_DIM_Z")),
                      max_workgroup_threads=a("MAX_THREADS_PER_BLOCK"), local_memory=a("MAX_SHARED_MEMORY_PER_BLOCK"),
                      max_vector_bytes=16, optional_ops=frozenset({"COS"}), tensor_cores=tensor_cores(ctx.arch))
  return caps, ctx.arch


@lru_cache(maxsize=None)
def _gpu_present() -> bool: return probe() is None


@lru_cache(maxsize=None)
def _compiler(arch: str, output: str, backend: str, cache_dir: Path, env: tuple) -> Compiler:
  from plugrad_cuda.compiler import CUDACompiler
  return CUDACompiler(arch, cache_dir, output=output, backend=backend, env=dict(env))


class CUDAPlugin(DevicePlugin):
  """The hook implementations of the CUDA device. With a GPU, capabilities and the target
  architecture come from it and kernels are compiled to cubin; without one, from DEFAULT_CAPS and
  PLUGRAD_CUDA_ARCH, and kernels are compiled to PTX (nothing runs). Setting PLUGRAD_CUDA_ARCH
  always compiles PTX for it."""
  PLUGRAD_CONTRACT = 2  # the plugin contract this plugin was written against
  names = (NAME,)

  def devices(self, config: Config) -> list[DeviceDecl]:
    return [DeviceDecl(NAME, priority=200, probe=probe, description="NVIDIA GPU: CUDA C via NVRTC/nvcc, run through the driver API",
                       count=gpu_count)]

  def options(self) -> list[ConfigOption]:
    return [ARCH, COMPILER]

  def capabilities(self, device: str, config: Config) -> Capabilities | None:
    caps = _gpu_caps(_index(device))[0] if _gpu_present() else DEFAULT_CAPS
    # kernels compiled for an explicit PLUGRAD_CUDA_ARCH use only what that architecture has
    explicit = config.env.get(ARCH.env, "").strip()
    return replace(caps, tensor_cores=tensor_cores(explicit)) if explicit else caps

  def renderer(self, device: str, config: Config) -> Renderer | None:
    from plugrad_cuda.renderer import CUDARenderer
    return CUDARenderer(device)

  def compiler(self, device: str, config: Config) -> Compiler | None:
    # an explicit PLUGRAD_CUDA_ARCH wins and gives PTX (which the driver JITs for that GPU or newer);
    # else a present GPU's own architecture as cubin; else the default architecture as PTX
    explicit = config.env.get(ARCH.env, "").strip()
    if not explicit and _gpu_present(): arch, output = _gpu_caps(_index(device))[1], "cubin"
    else: arch, output = explicit or ARCH.default, "ptx"
    env = tuple(sorted((k, v) for k, v in config.env.items() if k in ("CUDA_HOME", "CUDA_PATH", "PATH")))
    return _compiler(arch, output, config.option(COMPILER).strip().lower() or "auto", Path(config.cache_dir) / "cuda", env)

  def allocator(self, device: str, config: Config) -> Allocator | None:
    from plugrad_cuda.allocator import CUDAAllocator
    return CUDAAllocator(_index(device))

  def runtime(self, device: str, config: Config) -> Runtime | None:
    from plugrad_cuda.runtime import CUDARuntime
    return CUDARuntime(_index(device))

  def graph(self, device: str, config: Config) -> Graph | None:
    from plugrad_cuda.graph import CUDAGraph
    from plugrad_cuda.runtime import context
    return CUDAGraph(context(_index(device)))


#: The plugin object the entry point names.
plugin = CUDAPlugin()

__all__ = ["plugin", "CUDAPlugin", "NAME", "ARCH", "COMPILER", "DEFAULT_CAPS", "probe", "DRIVER_MISSING"]
