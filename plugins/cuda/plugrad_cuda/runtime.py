"""Loading and launching CUDA kernels with pycuda, and the per-GPU context they run in.

pycuda is imported here, lazily: the plugin itself imports without it. Every driver call runs
with the GPU's primary context pushed (and popped after), so "CUDA:0" and "CUDA:1" can be used
from one thread, and no context is left on the stack when Python exits.
"""
from __future__ import annotations

import functools
from typing import Any

from plugrad.plugin import DeviceError, Program, Runtime


class CUDAContext:
  """The primary context of GPU `index`: `with ctx:` makes it current for the calls inside."""

  def __init__(self, index: int):
    import pycuda.driver as cuda
    cuda.init()
    if not 0 <= index < cuda.Device.count():
      raise DeviceError(f"CUDA:{index} does not exist: this machine has {cuda.Device.count()} CUDA GPU(s)")
    self.cuda, self.index = cuda, index
    self.device = cuda.Device(index)
    self.context = self.device.retain_primary_context()

  def __enter__(self) -> Any:
    self.context.push()
    return self.cuda

  def __exit__(self, *exc: Any) -> None: self.cuda.Context.pop()

  def attribute(self, name: str) -> int:
    return self.device.get_attribute(getattr(self.cuda.device_attribute, name))

  @property
  def arch(self) -> str:
    major, minor = self.device.compute_capability()
    return f"sm_{major}{minor}"


@functools.lru_cache(maxsize=None)
def context(index: int) -> CUDAContext:
  """The (one, shared) context of GPU `index`."""
  return CUDAContext(index)


class CUDAProgram(Program):
  """A kernel loaded from PTX or cubin into the GPU's context."""

  def __init__(self, ctx: CUDAContext, name: str, binary: bytes):
    self.ctx, self.name = ctx, name
    # the driver reads PTX as a NUL-terminated string; a cubin is an ELF image
    image = binary if binary.startswith(b"\x7fELF") else binary.rstrip(b"\0") + b"\0"
    with ctx as cuda:
      try:
        self.module = cuda.module_from_buffer(image)
      except cuda.Error as e:
        raise DeviceError(f"CUDA could not load kernel {name} on {ctx.device.name()} ({ctx.arch}): {e}") from e
      self.function = self.module.get_function(name)
    self.prepared = False  # the argument format (one pointer per buffer) is set on the first call

  def __call__(self, *bufs: Any, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    local = tuple(local_size or (1,) * len(global_size))
    grid = tuple(g // l for g, l in zip(global_size, local)) + (1,) * (3 - len(global_size))
    block = local + (1,) * (3 - len(local))
    args = [int(b) for b in bufs] + [int(v) for v in vals]  # the Variables' values (int) follow the buffers
    with self.ctx as cuda:
      if not self.prepared:
        self.function.prepare("P" * len(bufs) + "i" * len(vals))
        self.prepared = True
      if not wait:
        self.function.prepared_call(grid, block, *args)
        return None
      start, end = cuda.Event(), cuda.Event()
      start.record()
      self.function.prepared_call(grid, block, *args)
      end.record()
      end.synchronize()
      return start.time_till(end) * 1e-3


class CUDARuntime(Runtime):
  """Loads compiled kernels into GPU `index`'s context."""

  def __init__(self, index: int):
    self.ctx = context(index)

  def load(self, name: str, binary: bytes) -> Program: return CUDAProgram(self.ctx, name, binary)

  def synchronize(self) -> None:
    with self.ctx as cuda: cuda.Context.synchronize()


__all__ = ["CUDAContext", "CUDAProgram", "CUDARuntime", "context"]
