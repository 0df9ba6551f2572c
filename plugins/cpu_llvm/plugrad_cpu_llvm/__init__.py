"""plugrad-cpu-llvm: the CPU device, kernels compiled by LLVM (llvmlite) for the host CPU.

The one plugin object is `plugin`; the entry point `CPU` in the group `plugrad.devices` names it.
Its roles live in `renderer` (loop program -> LLVM IR), `compiler` (IR -> optimised object
file, cached on disk), `allocator` (aligned host memory, reused by size), `runtime` (MCJIT
loading, ctypes calls split across cores) and `graph` (a TinyJit capture replayed by generated code).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from plugrad.plugin import (Allocator, Capabilities, Compiler, Config, ConfigOption, DeviceDecl, DevicePlugin, Graph,
                            Renderer, Runtime)

__version__ = "0.1.0"

NAME = "CPU"
#: PLUGRAD_CPU_THREADS caps the threads one kernel launch uses (default: every core this process may use).
THREADS = ConfigOption("PLUGRAD_CPU_THREADS", "", "most threads one CPU kernel launch uses (default: all usable cores)")
#: PLUGRAD_CPU_ASYNC=0 makes every realize wait for its kernels before it returns. By default a realize whose kernels
#: run on the workers returns while they run, and anything that reads, writes or launches waits for them first
#: (`pool.Unfinished`), as on a GPU: so a loop's Python overlaps its kernels.
ASYNC = ConfigOption("PLUGRAD_CPU_ASYNC", "1", "1: a realize may return while its kernels run on the workers (anything "
                     "that reads, writes or launches waits for them); 0: it waits for them")
#: PLUGRAD_CPU_DEVICES: how many CPU devices (CPU:0 .. CPU:N-1) the plugin declares. Each is its own runtime and
#: allocator over the same cores (and worker threads), so sharding (Tensor.shard) and copies between devices are
#: tested without GPUs.
DEVICES = ConfigOption("PLUGRAD_CPU_DEVICES", "2", "how many CPU devices (CPU:0 .. CPU:N-1) there are, for sharding")


def _probe() -> str | None:
  try:
    import llvmlite.binding  # noqa: F401
  except ImportError as e:
    return f"llvmlite cannot be imported ({e})"
  return None


class CPULLVMPlugin(DevicePlugin):
  """The hook implementations of the CPU device. Roles are built once per device and config:
  the allocator's cache and the loaded kernels are shared by every user of the device."""
  PLUGRAD_CONTRACT = 2  # the plugin contract this plugin was written against
  names = (NAME,)

  def devices(self, config: Config) -> list[DeviceDecl]:
    count = _positive(config, DEVICES)
    return [DeviceDecl(NAME, priority=100, probe=_probe, install_hint="pip install llvmlite",
                       description="host CPU, LLVM via llvmlite, split across cores", count=lambda: count or 2,
                       count_hint=f"set {DEVICES.env}=N for N CPU devices")]

  def options(self) -> list[ConfigOption]:
    return [THREADS, ASYNC, DEVICES]

  def capabilities(self, device: str, config: Config) -> Capabilities | None:
    from plugrad_cpu_llvm.compiler import host_cache_bytes, host_vector_bytes, host_vector_registers
    return Capabilities(max_buffers=None, launch_dims=0, max_vector_bytes=host_vector_bytes(),
                        vector_registers=host_vector_registers(), cache_bytes=host_cache_bytes(), vector_ops=True,
                        masked_loads=True, ordered_launch=True, optional_ops=frozenset({"COS"}))

  def renderer(self, device: str, config: Config) -> Renderer | None:
    from plugrad_cpu_llvm.renderer import LLVMRenderer
    return LLVMRenderer(device)

  def compiler(self, device: str, config: Config) -> Compiler | None:
    return _compiler(Path(config.cache_dir) / "cpu_llvm")

  def allocator(self, device: str, config: Config) -> Allocator | None:
    from plugrad_cpu_llvm.allocator import CPUAllocator
    return CPUAllocator()

  def runtime(self, device: str, config: Config) -> Runtime | None:
    from plugrad_cpu_llvm.runtime import CPURuntime
    return CPURuntime(_positive(config, THREADS), _flag(config, ASYNC))

  def graph(self, device: str, config: Config) -> Graph | None:
    from plugrad_cpu_llvm.graph import CPUGraph
    return CPUGraph()


def _positive(config: Config, opt: ConfigOption) -> int | None:
  """The option's value as a positive integer, None when it is empty."""
  raw = config.option(opt).strip()
  try:
    value = int(raw) if raw else None
  except ValueError:
    raise ValueError(f"{opt.env}={raw!r} must be a positive integer") from None
  if value is not None and value < 1: raise ValueError(f"{opt.env}={raw!r} must be a positive integer")
  return value


def _flag(config: Config, opt: ConfigOption) -> bool:
  """The option's value as a flag: "1" or "0"."""
  raw = config.option(opt).strip()
  if raw not in ("0", "1"): raise ValueError(f"{opt.env}={raw!r} must be 0 or 1")
  return raw == "1"


@lru_cache(maxsize=None)
def _compiler(cache_dir: Path) -> Compiler:
  from plugrad_cpu_llvm.compiler import LLVMCompiler
  return LLVMCompiler(cache_dir)


#: The plugin object the entry point names.
plugin = CPULLVMPlugin()

__all__ = ["plugin", "CPULLVMPlugin", "NAME", "THREADS", "ASYNC", "DEVICES"]
