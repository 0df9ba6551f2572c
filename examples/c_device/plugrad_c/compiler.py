"""C source -> shared object bytes, with the system C compiler."""
import os
import shutil
import subprocess
import tempfile

from plugrad.plugin import CompileError, Compiler, ConfigOption

CC_OPTION = ConfigOption("CC", "cc", "the C compiler of the C device (gcc and clang are tried when it is missing)")


def find_cc(requested: str) -> str | None:
  """The C compiler to use: `requested` (the CC option), else gcc or clang on PATH."""
  return shutil.which(requested) or shutil.which("gcc") or shutil.which("clang")


class CCompiler(Compiler):
  # -fwrapv: integer overflow wraps, as plugrad defines it; no FMA contraction, so results match the reference
  flags = ("-O2", "-shared", "-fPIC", "-fwrapv", "-ffp-contract=off", "-std=gnu11", "-w")

  def __init__(self, cache_dir, cc: str | None):
    super().__init__(cache_dir)
    self.cc = cc

  def identity(self) -> str:
    version = subprocess.run([self.cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1] if self.cc else []
    return f"{self.cc} {' '.join(self.flags)} {version}"

  def _compile(self, src: str) -> bytes:
    if self.cc is None: raise CompileError("no C compiler found (set CC, or install gcc or clang)")
    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, "kernel.so")
      res = subprocess.run([self.cc, *self.flags, "-x", "c", "-", "-o", out, "-lm"], input=src, capture_output=True, text=True)
      if res.returncode != 0: raise CompileError(f"cc failed:\n{res.stderr}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()
