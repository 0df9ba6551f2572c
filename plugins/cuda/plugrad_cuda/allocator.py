"""GPU memory through the driver: cuMemAlloc'd blocks (device pointers, plain ints), reused by size
(the core's LRUAllocator)."""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from plugrad.plugin import LRUAllocator

from plugrad_cuda.driver import DEINITIALIZED, OUT_OF_MEMORY, DriverError
from plugrad_cuda.runtime import context


def _address(mem: memoryview) -> int:
  """The host address of a contiguous buffer (read-only ones too, which ctypes' from_buffer refuses)."""
  return int(np.frombuffer(mem, dtype=np.uint8).ctypes.data) if mem.nbytes else 0


class CUDAAllocator(LRUAllocator):
  """Device memory of GPU `index`; copies are synchronous (they wait for queued kernels)."""

  def __init__(self, index: int):
    super().__init__()
    self.ctx = context(index)

  def _alloc(self, nbytes: int, options: Any) -> Any:
    ptr = ctypes.c_uint64()
    with self.ctx as drv:
      try:
        drv.cuMemAlloc_v2(ctypes.byref(ptr), nbytes)
      except DriverError as e:
        if e.code == OUT_OF_MEMORY: raise MemoryError(f"CUDA out of memory allocating {nbytes} bytes on {self.ctx.name}: {e}") from e
        raise
    return ptr.value

  def _free(self, raw: Any, nbytes: int, options: Any) -> None:
    try:
      with self.ctx as drv: drv.cuMemFree_v2(raw)
    except DriverError as e:
      if e.code != DEINITIALIZED: raise  # at interpreter exit the driver may have torn the context down already

  def _memory_total(self) -> int: return self.ctx.total_memory

  def _copyin(self, raw: Any, src: memoryview) -> None:
    with self.ctx as drv: drv.cuMemcpyHtoD_v2(raw, _address(src), src.nbytes)

  def _copyout(self, dest: memoryview, raw: Any) -> None:
    with self.ctx as drv: drv.cuMemcpyDtoH_v2(_address(dest), raw, dest.nbytes)


__all__ = ["CUDAAllocator"]
