"""Metal buffers in shared storage: CPU and GPU see the same memory, so copies are memcpys into
the buffer's contents after the GPU has finished with it (macOS only)."""
from __future__ import annotations

from typing import Any

from plugrad.plugin import LRUAllocator

from plugrad_metal.runtime import metal_context


class MetalAllocator(LRUAllocator):
  """MTLBuffers with MTLResourceStorageModeShared, reused by size."""

  def __init__(self, device: str) -> None:
    super().__init__()
    self.device = device

  def _alloc(self, nbytes: int, options: Any) -> Any:
    ctx = metal_context(self.device)
    buf = ctx.device.newBufferWithLength_options_(nbytes, ctx.Metal.MTLResourceStorageModeShared)
    if buf is None: raise MemoryError(f"Metal could not allocate {nbytes} bytes on {self.device}")
    return buf

  def _free(self, raw: Any, nbytes: int, options: Any) -> None:
    # command buffers retain the buffers they use, so dropping our reference is safe even in flight
    del raw

  def _memory_total(self) -> int:
    # what Metal lets one process keep resident (below the unified memory's size)
    return int(metal_context(self.device).device.recommendedMaxWorkingSetSize())

  def _copyin(self, raw: Any, src: memoryview) -> None:
    metal_context(self.device).synchronize()  # a kernel still running may read this (reused) buffer
    raw.contents().as_buffer(raw.length())[:len(src)] = src

  def _copyout(self, dest: memoryview, raw: Any) -> None:
    metal_context(self.device).synchronize()  # wait for the kernels that write it
    dest[:] = raw.contents().as_buffer(raw.length())[:len(dest)]


__all__ = ["MetalAllocator"]
