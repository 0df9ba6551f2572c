"""CUDA C -> PTX or cubin, with NVRTC (in process, through ctypes) or nvcc (a subprocess).

NVRTC comes from the `nvidia-cuda-nvrtc` wheel (a dependency of plugrad-cuda on Linux and
Windows) or a CUDA toolkit; the headers for half and bfloat16 (cuda_fp16.h, cuda_bf16.h) from the
`nvidia-cuda-runtime` wheel or the toolkit's include directory. The binary is cached on disk by
the core's Compiler under a key of the source and `identity()`: compiler and version, target
architecture, output kind, flags and the header directory.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping

from plugrad.plugin import CompileError, Compiler

#: flags both compilers get: C++17, and every float operation rounded as written, as the reference device
#: defines it: no a*b+c contracted into one FMA (--fmad=false); IEEE division and square root and no
#: flush-to-zero are NVRTC's and nvcc's defaults already
FLAGS = ("-std=c++17", "--fmad=false")


def normalize_arch(arch: str) -> str:
  """'sm_80', 'compute_80', '80', '8.0' -> 'sm_80'; raises ValueError for anything else."""
  a = arch.strip().lower()
  m = re.fullmatch(r"(?:sm_|compute_)?(\d+)([af]?)|(\d+)\.(\d+)", a)
  if m is None: raise ValueError(f"CUDA architecture {arch!r} is not of the form sm_80 (PLUGRAD_CUDA_ARCH)")
  return f"sm_{m.group(1)}{m.group(2)}" if m.group(1) else f"sm_{m.group(3)}{m.group(4)}"


# ---------------------------------------------------------------- finding the toolchain

def _nvidia_wheel_dirs() -> list[Path]:
  """The folders of the `nvidia` namespace package that NVIDIA's pip wheels install into."""
  import importlib.util
  spec = importlib.util.find_spec("nvidia")
  return [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []


def _toolkit_dirs(env: Mapping[str, str]) -> list[Path]:
  """CUDA toolkit roots: CUDA_HOME / CUDA_PATH, the one nvcc belongs to, /usr/local/cuda."""
  roots = [Path(env[k]) for k in ("CUDA_HOME", "CUDA_PATH") if env.get(k)]
  if (nvcc := shutil.which("nvcc", path=env.get("PATH"))) is not None:
    roots.append(Path(nvcc).resolve().parent.parent)
  roots.append(Path("/usr/local/cuda"))
  return roots


def find_include_dir(env: Mapping[str, str]) -> Path | None:
  """A directory holding cuda_fp16.h (and cuda_bf16.h), or None."""
  candidates = [d / sub / "include" for d in _nvidia_wheel_dirs() for sub in ("cu13", "cuda_runtime", "cu12")]
  candidates += [r / "include" for r in _toolkit_dirs(env)] + [r / "targets" / "x86_64-linux" / "include" for r in _toolkit_dirs(env)]
  return next((c for c in candidates if (c / "cuda_fp16.h").is_file()), None)


def _find_nvrtc(env: Mapping[str, str]) -> Path | None:
  if sys.platform == "win32":
    names, dirs = ["nvrtc64_*.dll"], [d / sub / "bin" for d in _nvidia_wheel_dirs() for sub in ("cu13", "cuda_nvrtc", "cu12")]
    dirs += [r / "bin" for r in _toolkit_dirs(env)]
  else:
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    dirs = [d / sub / "lib" for d in _nvidia_wheel_dirs() for sub in ("cu13", "cuda_nvrtc", "cu12")]
    dirs += [r / lib for r in _toolkit_dirs(env) for lib in ("lib64", "lib")]
  for d in dirs:
    for name in names:
      found = sorted(d.glob(name), reverse=True)
      if found: return found[0]
  return None


class NVRTC:
  """The NVRTC library loaded through ctypes (only the handful of calls a compile needs)."""

  def __init__(self, path: Path):
    # libnvrtc dlopens its builtins library by name: load it first from the same folder so it is found
    for builtins in sorted(path.parent.glob("libnvrtc-builtins.so*"), reverse=True):
      if not builtins.name.startswith("libnvrtc-builtins.alt"):
        ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
        break
    self.path = path
    self.lib = ctypes.CDLL(str(path))
    self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    major, minor = ctypes.c_int(), ctypes.c_int()
    self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    self.version = (major.value, minor.value)

  def _check(self, status: int, what: str) -> None:
    if status != 0:
      raise CompileError(f"NVRTC {what} failed: {self.lib.nvrtcGetErrorString(status).decode()}")

  def compile(self, src: str, name: str, options: list[str], cubin: bool) -> tuple[bytes | None, str]:
    """(the PTX or cubin, or None on a compile error; the compiler log)."""
    prog = ctypes.c_void_p()
    self._check(self.lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), f"{name}.cu".encode(), 0, None, None),
                "nvrtcCreateProgram")
    try:
      opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
      status = self.lib.nvrtcCompileProgram(prog, len(options), opts)
      size = ctypes.c_size_t()
      self._check(self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
      log = ctypes.create_string_buffer(size.value)
      self._check(self.lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
      if status != 0: return None, log.value.decode(errors="replace")
      get_size, get = (self.lib.nvrtcGetCUBINSize, self.lib.nvrtcGetCUBIN) if cubin else \
                      (self.lib.nvrtcGetPTXSize, self.lib.nvrtcGetPTX)
      self._check(get_size(prog, ctypes.byref(size)), "get output size")
      out = ctypes.create_string_buffer(size.value)
      self._check(get(prog, out), "get output")
      data = out.raw[:size.value]
      return (data if cubin else data.rstrip(b"\0")), log.value.decode(errors="replace")
    finally:
      self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


@functools.lru_cache(maxsize=None)
def _load_nvrtc(path: Path) -> NVRTC: return NVRTC(path)


def load_nvrtc(env: Mapping[str, str]) -> NVRTC | None:
  """NVRTC from the pip wheel or a CUDA toolkit, or None when there is none (or it cannot load)."""
  path = _find_nvrtc(env)
  if path is None: return None
  try:
    return _load_nvrtc(path)
  except (OSError, CompileError):
    return None


def find_nvcc(env: Mapping[str, str]) -> str | None:
  return shutil.which("nvcc", path=env.get("PATH")) or next(
    (str(r / "bin" / "nvcc") for r in _toolkit_dirs(env) if (r / "bin" / "nvcc").is_file()), None)


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
  out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
  return out[-1] if out else "unknown"


# ---------------------------------------------------------------- the compiler role

def numbered(src: str) -> str:
  """The source with line numbers, matching the line numbers in compiler messages."""
  return "\n".join(f"{i:4} | {line}" for i, line in enumerate(src.splitlines(), 1))


class CUDACompiler(Compiler):
  """CUDA C -> PTX (`output="ptx"`, loaded by the driver's JIT) or cubin (`"cubin"`, ready to run
  on exactly `arch`).

  :param arch: the target, e.g. "sm_80".
  :param backend: "nvrtc", "nvcc", or "auto" (NVRTC when it loads, else nvcc).
  :param env: the environment snapshot from the Config (CUDA_HOME, CUDA_PATH, PATH).
  """

  def __init__(self, arch: str, cache_dir: Path | None = None, output: str = "ptx", backend: str = "auto",
               env: Mapping[str, str] | None = None):
    super().__init__(cache_dir)
    if output not in ("ptx", "cubin"): raise ValueError(f"CUDA output must be 'ptx' or 'cubin', not {output!r}")
    if backend not in ("auto", "nvrtc", "nvcc"):
      raise ValueError(f"PLUGRAD_CUDA_COMPILER={backend!r} must be auto, nvrtc or nvcc")
    self.arch, self.output, self.env = normalize_arch(arch), output, dict(env if env is not None else os.environ)
    self.include_dir = find_include_dir(self.env)
    self.nvrtc = load_nvrtc(self.env) if backend in ("auto", "nvrtc") else None
    self.nvcc = find_nvcc(self.env) if backend == "nvcc" or (backend == "auto" and self.nvrtc is None) else None
    self.backend = "nvrtc" if self.nvrtc is not None else "nvcc" if self.nvcc is not None else None

  @property
  def available(self) -> bool: return self.backend is not None

  def _missing(self) -> str:
    return ("no CUDA compiler: NVRTC not found (pip install nvidia-cuda-nvrtc nvidia-cuda-runtime, both come with "
            "plugrad-cuda on Linux) and nvcc not on PATH (install the CUDA toolkit or set CUDA_HOME)")

  def identity(self) -> str:
    if self.backend == "nvrtc": version = f"nvrtc {self.nvrtc.version[0]}.{self.nvrtc.version[1]} {self.nvrtc.path.name}"
    elif self.backend == "nvcc": version = f"nvcc {nvcc_version(self.nvcc)}"
    else: version = "none"
    return f"plugrad-cuda 1 {version} {self.arch} {self.output} {' '.join(FLAGS)} include={self.include_dir}"

  def _includes(self) -> list[str]: return [f"-I{self.include_dir}"] if self.include_dir is not None else []

  def _compile(self, src: str) -> bytes:
    if self.backend is None: raise CompileError(self._missing())
    name = _kernel_name(src)
    if self.backend == "nvrtc":
      target = self.arch if self.output == "cubin" else self.arch.replace("sm_", "compute_")
      binary, log = self.nvrtc.compile(src, name, [f"--gpu-architecture={target}", *FLAGS, *self._includes()],
                                       self.output == "cubin")
      what = f"NVRTC {self.nvrtc.version[0]}.{self.nvrtc.version[1]} for {target}"
    else:
      binary, log = self._nvcc(src, name)
      what = f"nvcc for {self.arch}"
    if binary is None:
      raise CompileError(f"CUDA kernel {name} failed to compile ({what}):\n{log.strip()}\n--- source ---\n{numbered(src)}")
    return binary

  def _nvcc(self, src: str, name: str) -> tuple[bytes | None, str]:
    with tempfile.TemporaryDirectory() as tmp:
      cu, out = Path(tmp) / f"{name}.cu", Path(tmp) / f"{name}.{self.output}"
      cu.write_text(src)
      res = subprocess.run([self.nvcc, f"--{self.output}", f"-arch={self.arch}", *FLAGS, *self._includes(), str(cu), "-o", str(out)],
                           capture_output=True, text=True, cwd=tmp)
      if res.returncode != 0: return None, (res.stderr + res.stdout).replace(f"{tmp}/", "")
      return out.read_bytes(), res.stderr


def _kernel_name(src: str) -> str:
  m = re.search(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)", src)
  return m.group(1) if m else "kernel"


__all__ = ["CUDACompiler", "NVRTC", "load_nvrtc", "find_nvcc", "find_include_dir", "normalize_arch", "numbered"]
