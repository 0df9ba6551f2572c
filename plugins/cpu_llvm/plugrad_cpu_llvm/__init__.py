"""plugrad-cpu-llvm: the CPU device, kernels compiled by LLVM (llvmlite) for the host CPU.

The one plugin object is `plugin`; the entry point `CPU` in the group `plugrad.devices` names it.
Its roles live in `renderer` (loop program -> LLVM IR), `compiler` (IR -> optimised object
file, cached on disk), `allocator` (aligned host memory, reused by size) and `runtime` (MCJIT
loading, ctypes calls split across cores).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import plugrad
from plugrad import Allocator, Capabilities, Compiler, DeviceDecl, Runtime, hookimpl
from plugrad.codegen.renderer import Renderer
from plugrad.config import Config, ConfigOption

__version__ = "0.1.0"

NAME = "CPU"
#: PLUGRAD_CPU_THREADS caps the threads one kernel launch uses (default: every core this process may use).
THREADS = ConfigOption("PLUGRAD_CPU_THREADS", "", "most threads one CPU kernel launch uses (default: all usable cores)")


def _probe() -> str | None:
  try:
    import llvmlite.binding  # noqa: F401
  except ImportError as e:
    return f"llvmlite cannot be imported ({e})"
  return None


def _ours(device: str) -> bool: return device.split(":")[0].upper() == NAME


class CPULLVMPlugin:
  """The hook implementations of the CPU device. Roles are built once per device and config:
  the allocator's cache and the loaded kernels are shared by every user of the device."""
  PLUGRAD_CONTRACT = plugrad.CONTRACT_VERSION

  @hookimpl
  def plugrad_declare_devices(self, config: Config) -> list[DeviceDecl]:
    return [DeviceDecl(NAME, priority=100, probe=_probe, install_hint="pip install llvmlite",
                       description="host CPU, LLVM via llvmlite, split across cores")]

  @hookimpl
  def plugrad_config_options(self) -> list[ConfigOption]:
    return [THREADS]

  @hookimpl
  def plugrad_device_capabilities(self, device: str, config: Config) -> Capabilities | None:
    if not _ours(device): return None
    from plugrad_cpu_llvm.compiler import host_vector_bytes
    return Capabilities(max_buffers=None, launch_dims=0, max_vector_bytes=host_vector_bytes(), vector_ops=True)

  @hookimpl
  def plugrad_renderer(self, device: str, config: Config) -> Renderer | None:
    if not _ours(device): return None
    from plugrad_cpu_llvm.renderer import LLVMRenderer
    return LLVMRenderer(device)

  @hookimpl
  def plugrad_compiler(self, device: str, config: Config) -> Compiler | None:
    return _compiler(Path(config.cache_dir) / "cpu_llvm") if _ours(device) else None

  @hookimpl
  def plugrad_allocator(self, device: str, config: Config) -> Allocator | None:
    if not _ours(device): return None
    from plugrad_cpu_llvm.allocator import CPUAllocator
    return CPUAllocator()

  @hookimpl
  def plugrad_runtime(self, device: str, config: Config) -> Runtime | None:
    if not _ours(device): return None
    from plugrad_cpu_llvm.runtime import CPURuntime
    raw = config.option(THREADS).strip()
    try:
      threads = int(raw) if raw else None
    except ValueError:
      raise ValueError(f"PLUGRAD_CPU_THREADS={raw!r} must be a positive integer") from None
    if threads is not None and threads < 1: raise ValueError(f"PLUGRAD_CPU_THREADS={raw!r} must be a positive integer")
    return CPURuntime(threads)


@lru_cache(maxsize=None)
def _compiler(cache_dir: Path) -> Compiler:
  from plugrad_cpu_llvm.compiler import LLVMCompiler
  return LLVMCompiler(cache_dir)


#: The plugin object the entry point names.
plugin = CPULLVMPlugin()

__all__ = ["plugin", "CPULLVMPlugin", "NAME", "THREADS"]
