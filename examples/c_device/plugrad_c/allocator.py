"""Host memory held in numpy arrays (ctypes passes their addresses to the kernels)."""
import numpy as np

from plugrad.plugin import LRUAllocator


class CAllocator(LRUAllocator):
  def _alloc(self, nbytes: int, options) -> np.ndarray: return np.empty(nbytes, dtype=np.uint8)
  def _copyin(self, raw: np.ndarray, src: memoryview) -> None: raw[:len(src)] = np.frombuffer(src, dtype=np.uint8)
  def _copyout(self, dest: memoryview, raw: np.ndarray) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = raw[:len(dest)]
  # optional: host memory the host reads in place (transfers) and arrays kernels use in place (Tensor.from_numpy)
  def _as_host(self, raw: np.ndarray, nbytes: int) -> memoryview: return memoryview(raw[:nbytes])
  def _from_host(self, mem: np.ndarray) -> np.ndarray: return mem
