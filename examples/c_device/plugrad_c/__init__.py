"""The C example device: the smallest complete plugrad device plugin.

Renderer: the core's C-style renderer as it is. Compiler: `cc -O2 -shared -fPIC`. Runtime: ctypes.
Allocator: host memory held in numpy arrays, reused between realizes.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np

from plugrad import (CONTRACT_VERSION, Capabilities, CompileError, Compiler, DeviceDecl, LRUAllocator, Program, Runtime,
                     hookimpl)
from plugrad.codegen.cstyle import CStyleRenderer

NAME = "C"


def _cc() -> str | None:
  return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")


class CRenderer(CStyleRenderer):
  """Plain C: every default of the base renderer; the kernel loops over its launch indices."""


class CCompiler(Compiler):
  """C source -> shared object bytes, with the system C compiler."""
  flags = ("-O2", "-shared", "-fPIC", "-fwrapv", "-ffp-contract=off", "-std=gnu11", "-w")

  def identity(self) -> str:
    cc = _cc() or "cc"
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    return f"{cc} {' '.join(self.flags)} {version}"

  def _compile(self, src: str) -> bytes:
    cc = _cc()
    if cc is None: raise CompileError("no C compiler found (set CC or install gcc or clang)")
    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, "kernel.so")
      res = subprocess.run([cc, *self.flags, "-x", "c", "-", "-o", out, "-lm"], input=src, capture_output=True, text=True)
      if res.returncode != 0: raise CompileError(f"cc failed:\n{res.stderr}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()


class CAllocator(LRUAllocator):
  def _alloc(self, nbytes: int, options) -> np.ndarray: return np.empty(nbytes, dtype=np.uint8)
  def _copyin(self, raw: np.ndarray, src: memoryview) -> None: raw[:len(src)] = np.frombuffer(src, dtype=np.uint8)
  def _copyout(self, dest: memoryview, raw: np.ndarray) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = raw[:len(dest)]


class CProgram(Program):
  def __init__(self, name: str, binary: bytes):
    # dlopen needs a file; keep it until the library is loaded
    fd, path = tempfile.mkstemp(suffix=".so")
    try:
      with os.fdopen(fd, "wb") as f: f.write(binary)
      self.lib = ctypes.CDLL(path)
    finally:
      os.unlink(path)
    self.fn = getattr(self.lib, name)

  def __call__(self, *bufs: np.ndarray, global_size=None, local_size=None, wait: bool = False) -> float | None:
    st = time.perf_counter()
    self.fn(*(b.ctypes.data_as(ctypes.c_void_p) for b in bufs))
    return time.perf_counter() - st if wait else None


class CRuntime(Runtime):
  def load(self, name: str, binary: bytes) -> Program: return CProgram(name, binary)


class CPlugin:
  PLUGRAD_CONTRACT = CONTRACT_VERSION

  def _mine(self, device: str) -> bool: return device.split(":")[0] == NAME

  @hookimpl
  def plugrad_declare_devices(self, config):
    return [DeviceDecl(NAME, priority=10, probe=lambda: None if _cc() else "no C compiler (cc) on PATH",
                       install_hint="install gcc or clang, or set CC", description="C compiled with the system compiler")]

  @hookimpl
  def plugrad_device_capabilities(self, device, config):
    return Capabilities() if self._mine(device) else None

  @hookimpl
  def plugrad_renderer(self, device, config):
    return CRenderer(device) if self._mine(device) else None

  @hookimpl
  def plugrad_compiler(self, device, config):
    return CCompiler(config.cache_dir / "c") if self._mine(device) else None

  @hookimpl
  def plugrad_allocator(self, device, config):
    return CAllocator() if self._mine(device) else None

  @hookimpl
  def plugrad_runtime(self, device, config):
    return CRuntime() if self._mine(device) else None


plugin = CPlugin()
