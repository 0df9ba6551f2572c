"""GPU memory through pycuda: cuMemAlloc'd blocks, reused by size (the core's LRUAllocator)."""
from __future__ import annotations

from typing import Any

from plugrad.plugin import LRUAllocator

from plugrad_cuda.runtime import context


class CUDAAllocator(LRUAllocator):
  """Device memory of GPU `index`; copies are synchronous (they wait for queued kernels)."""

  def __init__(self, index: int):
    super().__init__()
    self.ctx = context(index)

  def _alloc(self, nbytes: int, options: Any) -> Any:
    with self.ctx as cuda:
      try:
        return cuda.mem_alloc(nbytes)
      except cuda.MemoryError as e:
        raise MemoryError(f"CUDA out of memory allocating {nbytes} bytes on {self.ctx.device.name()}: {e}") from e

  def _free(self, raw: Any, nbytes: int, options: Any) -> None: raw.free()

  def _memory_total(self) -> int: return int(self.ctx.device.total_memory())

  def _copyin(self, raw: Any, src: memoryview) -> None:
    with self.ctx as cuda: cuda.memcpy_htod(raw, src)

  def _copyout(self, dest: memoryview, raw: Any) -> None:
    with self.ctx as cuda: cuda.memcpy_dtoh(dest, raw)


__all__ = ["CUDAAllocator"]
