"""OpenCL C -> program binary, with pyopencl, cached on disk by source, device and driver."""
from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from plugrad.plugin import CompileError, Compiler

from plugrad_opencl_qcom.cldevice import CLDevice, DeviceInfo


def build_options(cldev: CLDevice) -> tuple[str, ...]:
  """Build options for the device: OpenCL C 1.2, exact float division and sqrt where allowed.

  No fast-math: NaN and infinity must behave as in the reference device."""
  opts = ["-cl-std=CL1.2"]
  if cldev.info.correctly_rounded_div_sqrt: opts.append("-cl-fp32-correctly-rounded-divide-sqrt")
  return tuple(opts)


class CLCompiler(Compiler):
  """Builds a program for one device and returns its binary (`CL_PROGRAM_BINARIES`)."""

  def __init__(self, cache_dir: Path | None, cldev: CLDevice):
    super().__init__(cache_dir)
    self.cldev = cldev
    self.options = build_options(cldev)

  def identity(self) -> str:
    info = self.cldev.info
    return f"opencl|{info.name}|{info.vendor}|driver {info.driver}|{info.platform}|{' '.join(self.options)}"

  def _compile(self, src: str) -> bytes:
    import pyopencl as cl
    prg = cl.Program(self.cldev.context, src)
    try:
      prg.build(options=list(self.options), devices=[self.cldev.device])
    except cl.Error as e:
      try:
        log = prg.get_build_info(self.cldev.device, cl.program_build_info.LOG)
      except cl.Error:
        log = str(e)
      raise CompileError(f"OpenCL build failed on {self.cldev.info.name}:\n{log.strip() or e}\n--- source ---\n{src}") from None
    binaries = prg.get_info(cl.program_info.BINARIES)
    if not binaries or not binaries[0]: raise CompileError(f"{self.cldev.info.name} returned no program binary\n--- source ---\n{src}")
    return bytes(binaries[0])


class NoDeviceCompiler(Compiler):
  """The compiler of a device whose OpenCL hardware is absent: every compile explains why."""

  def __init__(self, device: str, reason: str):
    super().__init__(None)
    self.device, self.reason = device, reason

  def identity(self) -> str: return f"opencl-unavailable|{self.device}"

  def _compile(self, src: str) -> bytes:
    raise CompileError(f"cannot compile for {self.device}: {self.reason}\n--- source ---\n{src}")


class ProfileCompiler(Compiler):
  """Without OpenCL hardware: compiles for the device profile (generic OpenCL or Adreno) with clang
  to SPIR bitcode, enabling exactly the profile's extensions. It proves the rendered source is
  valid OpenCL C 1.2 for that profile (for `--plugrad-shadow-device` and `kernels --compile`);
  the bitcode is never run."""

  def __init__(self, cache_dir: Path | None, device: str, info: DeviceInfo, clang: str):
    super().__init__(cache_dir)
    self.device, self.info, self.clang = device, info, clang
    self.flags = ("-x", "cl", "-cl-std=CL1.2", "-target", "spir64", "-Xclang", "-finclude-default-header",
                  "-Xclang", clang_extensions_flag(info.extensions), "-emit-llvm", "-c")

  def identity(self) -> str:
    return f"opencl-profile|{self.info.name}|{self.clang} {clang_version(self.clang)}|{' '.join(self.flags)}"

  def _compile(self, src: str) -> bytes:
    res = subprocess.run([self.clang, *self.flags, "-", "-o", "-"], input=src.encode(), capture_output=True)
    if res.returncode != 0:
      raise CompileError(f"OpenCL C for the {self.info.name} profile of {self.device} does not compile (clang):\n"
                         f"{res.stderr.decode(errors='replace').strip()}\n--- source ---\n{src}")
    return res.stdout


@functools.lru_cache(maxsize=None)
def clang_version(clang: str) -> str:
  """The first line of `clang --version` (asked once per process: it is part of every cache key)."""
  out = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.splitlines()
  return out[0] if out else "unknown"


def clang_extensions_flag(extensions: frozenset[str]) -> str:
  """clang's -cl-ext value enabling exactly `extensions`, plus cl_khr_fp16 always: clang 15's
  OpenCL header declares vload_half/vstore_half only with it (half storage is core OpenCL), so a
  profile without it is checked for native half by the real device's build, not by clang."""
  return "-cl-ext=-all" + "".join(f",+{e}" for e in sorted(set(extensions) | {"cl_khr_fp16"}))


def find_clang() -> str | None:
  """A clang that compiles OpenCL C (most do), or None."""
  for name in ("clang", "clang-15", "clang-14", "clang-16", "clang-17", "clang-18"):
    if (path := shutil.which(name)) is not None: return path
  return None
