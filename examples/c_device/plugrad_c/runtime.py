"""Shared object bytes -> a ctypes function."""
import ctypes
import os
import tempfile
import time

from plugrad.plugin import Program, Runtime


class CProgram(Program):
  def __init__(self, name: str, binary: bytes):
    # dlopen needs a file: write it, load it, and remove it (the mapping stays valid)
    fd, path = tempfile.mkstemp(suffix=".so")
    try:
      with os.fdopen(fd, "wb") as f: f.write(binary)
      self.lib = ctypes.CDLL(path)
    finally:
      os.unlink(path)
    self.name, self.fn = name, getattr(self.lib, name)

  def __call__(self, *bufs, global_size, local_size, vals=(), wait: bool = False):
    st = time.perf_counter()
    # the buffers, then the Variables' values as C ints (the renderer's `const int var_NAME` parameters)
    self.fn(*(b.ctypes.data_as(ctypes.c_void_p) for b in bufs), *(ctypes.c_int(v) for v in vals))
    return time.perf_counter() - st if wait else None


class CRuntime(Runtime):
  def load(self, name: str, binary: bytes) -> Program: return CProgram(name, binary)
