"""C source -> shared object bytes, with the system C compiler."""
import os
import shutil
import subprocess
import tempfile

from plugrad import CompileError, Compiler


def find_cc() -> str | None:
  """The C compiler to use: $CC, else cc, gcc or clang on PATH (found once)."""
  global _CC
  if _CC is None: _CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang") or ""
  return _CC or None


_CC: str | None = None


class CCompiler(Compiler):
  # -fwrapv: integer overflow wraps, as plugrad defines it; no FMA contraction, so results match the reference
  flags = ("-O2", "-shared", "-fPIC", "-fwrapv", "-ffp-contract=off", "-std=gnu11", "-w")

  def identity(self) -> str:
    cc = find_cc() or "cc"
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    return f"{cc} {' '.join(self.flags)} {version}"

  def _compile(self, src: str) -> bytes:
    cc = find_cc()
    if cc is None: raise CompileError("no C compiler found (set CC, or install gcc or clang)")
    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, "kernel.so")
      res = subprocess.run([cc, *self.flags, "-x", "c", "-", "-o", out, "-lm"], input=src, capture_output=True, text=True)
      if res.returncode != 0: raise CompileError(f"cc failed:\n{res.stderr}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()
