"""Loading and launching CUDA kernels through the driver API, and the per-GPU context they run in.

Every driver call runs with the GPU's primary context pushed (and popped after), so "CUDA:0" and
"CUDA:1" can be used from one thread, and no context is left on the stack when Python exits.
Kernels go to the legacy default stream, so copies (synchronous) wait for them.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any

from plugrad.plugin import DeviceError, Program, Runtime

from plugrad_cuda.driver import ATTRIBUTES, Driver, DriverError, device_count, driver, kernel_args


class CUDAContext:
  """The primary context of GPU `index`: `with ctx as drv:` makes it current for the driver calls inside."""

  def __init__(self, index: int):
    self.drv = drv = driver()
    if not 0 <= index < (count := device_count()):
      raise DeviceError(f"CUDA:{index} does not exist: this machine has {count} CUDA GPU(s)")
    self.index, self.device = index, ctypes.c_int()
    drv.cuDeviceGet(ctypes.byref(self.device), index)
    self.context = ctypes.c_void_p()
    drv.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device)
    name = ctypes.create_string_buffer(256)
    drv.cuDeviceGetName(name, len(name), self.device)
    self.name = name.value.decode()

  def __enter__(self) -> Driver:
    self.drv.cuCtxPushCurrent_v2(self.context)
    return self.drv

  def __exit__(self, *exc: Any) -> None: self.drv.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

  def attribute(self, name: str) -> int:
    value = ctypes.c_int()
    self.drv.cuDeviceGetAttribute(ctypes.byref(value), ATTRIBUTES[name], self.device)
    return value.value

  @functools.cached_property
  def total_memory(self) -> int:
    size = ctypes.c_size_t()
    self.drv.cuDeviceTotalMem_v2(ctypes.byref(size), self.device)
    return size.value

  @functools.cached_property
  def arch(self) -> str:
    return f"sm_{self.attribute('COMPUTE_CAPABILITY_MAJOR')}{self.attribute('COMPUTE_CAPABILITY_MINOR')}"


@functools.lru_cache(maxsize=None)
def context(index: int) -> CUDAContext:
  """The (one, shared) context of GPU `index`."""
  return CUDAContext(index)


def launch_dims(global_size: tuple[int, ...], local_size: tuple[int, ...] | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """(grid, block), three each: the lowering makes every global size a whole number of work-groups."""
  local = tuple(local_size or (1,) * len(global_size))
  grid = tuple(g // loc for g, loc in zip(global_size, local)) + (1,) * (3 - len(global_size))
  return grid, local + (1,) * (3 - len(local))


class CUDAProgram(Program):
  """A kernel loaded from PTX or cubin into the GPU's context."""

  def __init__(self, ctx: CUDAContext, name: str, binary: bytes):
    self.ctx, self.name = ctx, name
    # the driver reads PTX as a NUL-terminated string; a cubin is an ELF image
    image = binary if binary.startswith(b"\x7fELF") else binary.rstrip(b"\0") + b"\0"
    self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
    with ctx as drv:
      try:
        drv.cuModuleLoadData(ctypes.byref(self.module), image)
        drv.cuModuleGetFunction(ctypes.byref(self.function), self.module, name.encode())
      except DriverError as e:
        raise DeviceError(f"CUDA could not load kernel {name} on {ctx.name} ({ctx.arch}): {e}") from e

  def __del__(self) -> None:
    # the module goes with the program (pycuda unloaded it on collection too); at exit the driver may be gone
    try:
      if self.module:
        with self.ctx as drv: drv.cuModuleUnload(self.module)
    except Exception:
      pass

  def args(self, bufs: tuple[Any, ...], vals: tuple[int, ...] = ()) -> tuple[Any, Any]:
    """The launch's (storage, kernelParams): a pointer per buffer, then the Variables' int32 values."""
    return kernel_args([ctypes.c_uint64(int(b)) for b in bufs] + [ctypes.c_int32(int(v)) for v in vals])

  def __call__(self, *bufs: Any, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    grid, block = launch_dims(global_size, local_size)
    _storage, params = self.args(bufs, vals)
    try:
      return self._launch(grid, block, params, wait)
    except DriverError as e:
      raise DeviceError(f"CUDA kernel {self.name} (grid {grid}, block {block}) failed on {self.ctx.name}: {e}") from e

  def _launch(self, grid: tuple[int, ...], block: tuple[int, ...], params: Any, wait: bool) -> float | None:
    with self.ctx as drv:
      if not wait:
        drv.cuLaunchKernel(self.function, *grid, *block, 0, None, params, None)
        return None
      start, end = ctypes.c_void_p(), ctypes.c_void_p()
      drv.cuEventCreate(ctypes.byref(start), 0)
      drv.cuEventCreate(ctypes.byref(end), 0)
      try:
        drv.cuEventRecord(start, None)
        drv.cuLaunchKernel(self.function, *grid, *block, 0, None, params, None)
        drv.cuEventRecord(end, None)
        drv.cuEventSynchronize(end)
        ms = ctypes.c_float()
        drv.cuEventElapsedTime(ctypes.byref(ms), start, end)
      finally:
        drv.cuEventDestroy_v2(start)
        drv.cuEventDestroy_v2(end)
      return ms.value * 1e-3


class CUDARuntime(Runtime):
  """Loads compiled kernels into GPU `index`'s context."""

  def __init__(self, index: int):
    self.ctx = context(index)

  def load(self, name: str, binary: bytes) -> Program: return CUDAProgram(self.ctx, name, binary)

  def synchronize(self) -> None:
    with self.ctx as drv: drv.cuCtxSynchronize()


__all__ = ["CUDAContext", "CUDAProgram", "CUDARuntime", "context", "launch_dims"]
