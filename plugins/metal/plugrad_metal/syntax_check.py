"""A syntax and type check of Metal Shading Language with clang, for machines without Metal.

This is a test utility, not the compiler: it proves a kernel is well-formed C++17 against a
header that models Metal's address spaces, vector types, attributes and built-ins
(`plugrad_metal/shim/metal_shim.h`, shipped with the plugin), plus a few MSL rules clang cannot see (the
31-buffer argument table, kernel-scope `threadgroup` arrays). It does not prove Apple's compiler
accepts the kernel, nor that it computes the right thing.

    checker = SyntaxChecker()
    checker.check(src)            # raises MetalSyntaxError with clang's diagnostics
    checker.check_many(sources)   # [None or the error message] per source, checked in batches
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from plugrad.plugin import CompileError

from plugrad_metal.renderer import MAX_BUFFERS

#: Where the shim lives: package data, so an installed plugin checks kernels as a source checkout does.
SHIM_DIR = Path(__file__).resolve().parent / "shim"

#: Warnings made errors beyond -Werror's default set: float silently promoted to double, and
#: implicit float narrowing the renderer should have written as a cast.
WARNINGS = ("-Wall", "-Wdouble-promotion", "-Wimplicit-float-conversion")

_BUFFER_ATTR = re.compile(r"\[\[\s*buffer\(\s*(\d+)\s*\)\s*\]\]")


class MetalSyntaxError(CompileError):
  """A kernel failed the Linux syntax check of Metal Shading Language."""


def find_clang(preferred: str = "") -> str | None:
  """The clang++ to use: `preferred` (a name or path) if given, else the first clang on PATH."""
  for name in ([preferred] if preferred else ["clang++", "clang"] + [f"clang++-{v}" for v in range(20, 13, -1)]):
    if path := shutil.which(name): return path
  return None


class SyntaxChecker:
  """Runs clang on MSL source against the Metal shim.

  :param clang: clang++ executable (default: found on PATH).
  :param shim_dir: folder holding metal_shim.h and include/metal_stdlib (default: the plugin's shim/).
  """

  def __init__(self, clang: str = "", shim_dir: Path | None = None) -> None:
    self.clang = find_clang(clang)
    self.shim_dir = Path(shim_dir) if shim_dir is not None else SHIM_DIR

  def unavailable(self) -> str | None:
    """Why the check cannot run here, or None."""
    if self.clang is None: return "clang is not installed (Debian: apt-get install clang)"
    if not (self.shim_dir / "metal_shim.h").is_file() or not (self.shim_dir / "include" / "metal_stdlib").is_file():
      return (f"the Metal shim is not at {self.shim_dir}/metal_shim.h "
              f"(the syntax check runs from a source checkout of plugrad-metal)")
    return None

  def command(self) -> list[str]:
    """The clang command line; the source comes on stdin."""
    return [self.clang or "clang++", "-x", "c++", "-std=c++17", "-fsyntax-only", "-nostdinc", "-nostdinc++",
            "--target=arm64-apple-macos11", "-I", str(self.shim_dir / "include"), "-Werror", *WARNINGS,
            "-ferror-limit=50", "-fno-color-diagnostics", "-"]

  def check(self, src: str) -> None:
    """Raise MetalSyntaxError unless `src` passes clang and the MSL structure checks."""
    if (why := self.unavailable()) is not None: raise MetalSyntaxError(f"the Metal syntax check cannot run: {why}")
    problems = structure_problems(src)
    res = subprocess.run(self.command(), input=src, capture_output=True, text=True)
    if res.returncode != 0 or problems:
      raise MetalSyntaxError("Metal syntax check failed:\n" + "\n".join(problems + [res.stderr.strip()]).strip() +
                             "\n--- source ---\n" + _numbered(src))

  def check_many(self, sources: list[str], batch: int = 64, workers: int | None = None) -> list[str | None]:
    """Check many kernels fast: each batch is one clang run over the kernels wrapped in their own
    namespaces (so names and helpers do not collide); a batch that fails is re-checked kernel by
    kernel, so every error is reported against its own kernel. Returns None (passed) or the
    error message, per source."""
    if (why := self.unavailable()) is not None: raise MetalSyntaxError(f"the Metal syntax check cannot run: {why}")
    chunks = [list(range(i, min(i + batch, len(sources)))) for i in range(0, len(sources), batch)]
    results: list[str | None] = [None] * len(sources)

    def run_chunk(idx: list[int]) -> None:
      tu = ["#include <metal_stdlib>"]
      for i in idx:
        body = sources[i].replace("#include <metal_stdlib>\n", "", 1)
        tu += [f"namespace plugrad_kernel_{i} {{", body, f"}}  // namespace plugrad_kernel_{i}"]
      res = subprocess.run(self.command(), input="\n".join(tu), capture_output=True, text=True)
      for i in idx:
        if res.returncode != 0 or structure_problems(sources[i]):
          try:
            self.check(sources[i])
          except MetalSyntaxError as e:
            results[i] = str(e)

    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool: list(pool.map(run_chunk, chunks))
    return results


def structure_problems(src: str) -> list[str]:
  """MSL rules about a kernel's shape that clang with the shim cannot see."""
  problems = []
  slots = [int(n) for n in _BUFFER_ATTR.findall(src)]
  if len(slots) > MAX_BUFFERS: problems.append(f"the kernel binds {len(slots)} buffers; Metal allows {MAX_BUFFERS}")
  if len(set(slots)) != len(slots): problems.append(f"buffer indices repeat: {sorted(slots)}")
  if any(n >= MAX_BUFFERS for n in slots):
    problems.append(f"buffer index {max(slots)} is past Metal's last slot {MAX_BUFFERS - 1}")
  depth = 0
  for no, line in enumerate(src.split("\n"), 1):
    code = line.split("//")[0]
    if code.lstrip().startswith("threadgroup ") and depth != 1:
      problems.append(f"line {no}: threadgroup memory must be declared at kernel scope, not inside a block")
    depth += code.count("{") - code.count("}")
  return problems


def _numbered(src: str) -> str:
  return "\n".join(f"{i:4} | {s}" for i, s in enumerate(src.split("\n"), 1))


__all__ = ["SyntaxChecker", "MetalSyntaxError", "find_clang", "structure_problems", "SHIM_DIR"]
