"""The allocator role: 64-byte aligned host memory, kept by size between realizes.

Blocks are numpy byte arrays (numpy asks the kernel for transparent huge pages on large ones),
over-allocated by the alignment and sliced to an aligned start. Freed blocks go to the core's
LRU cache, so a loop that realizes the same shapes again reuses warm pages instead of paying a
page fault per 4 KiB each time.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from plugrad.plugin import LRUAllocator

from plugrad_cpu_llvm.pool import UNFINISHED

ALIGNMENT = 64  # a cache line and an AVX-512 register


class CPUBuffer:
  """Aligned host memory: `mem` is the numpy byte view, `addr` its address (what kernels get), `shared` whether the
  host may read or write it at any time (an array's memory, or a view of it handed out): a run that uses it is
  never left going (`pool.Unfinished`)."""
  __slots__ = ("mem", "addr", "nbytes", "shared")

  def __init__(self, nbytes: int, mem: np.ndarray | None = None):
    self.shared = mem is not None  # an array's memory (`_from_host`)
    if mem is None:
      base = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
      off = -base.ctypes.data % ALIGNMENT
      mem = base[off:off + nbytes]
    self.mem = mem
    self.addr: int = self.mem.ctypes.data
    self.nbytes = nbytes

  def __repr__(self) -> str: return f"<CPUBuffer {self.nbytes} bytes at {self.addr:#x}>"


class CPUAllocator(LRUAllocator):
  """Host memory for the CPU device. Freed blocks kept for reuse are bounded by a share of the host's
  memory (PLUGRAD_ALLOC_CACHE; see LRUAllocator).

  :param cache_limit: bytes, or a MemoryBound (None: the default share).
  """

  def _alloc(self, nbytes: int, options: Any) -> CPUBuffer: return CPUBuffer(nbytes)
  def _free(self, raw: CPUBuffer, nbytes: int, options: Any) -> None: pass  # numpy frees it with the last reference

  def free(self, raw: CPUBuffer, nbytes: int, options: Any = None) -> None:
    raw.shared = False  # no view of it is left: each holds its Buffer (`Buffer.host_view`), which is being freed
    super().free(raw, nbytes, options)

  # a run left going may read or write any block: what touches one waits for it (see pool.Unfinished)
  def _copyin(self, raw: CPUBuffer, src: memoryview) -> None:
    UNFINISHED.wait()
    n = min(len(src), raw.nbytes)
    if n: ctypes.memmove(raw.addr, np.frombuffer(src, dtype=np.uint8).ctypes.data, n)

  def _as_host(self, raw: CPUBuffer, nbytes: int) -> memoryview:
    UNFINISHED.wait()
    raw.shared = True  # the view may outlive this call: from now on, runs over this block finish before they return
    return memoryview(raw.mem[:nbytes])

  # kernels assume only element alignment (see the renderer), so any host array can be a buffer in place
  def _from_host(self, mem: np.ndarray) -> CPUBuffer: return CPUBuffer(mem.nbytes, mem)

  def _copyout(self, dest: memoryview, raw: CPUBuffer) -> None:
    UNFINISHED.wait()
    n = min(len(dest), raw.nbytes)
    if n: ctypes.memmove(np.frombuffer(dest, dtype=np.uint8).ctypes.data, raw.addr, n)
