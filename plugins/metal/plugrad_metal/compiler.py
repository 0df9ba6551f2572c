"""MSL source -> "binary" for the Metal runtime.

On macOS the source is compiled with `newLibraryWithSource:options:error:` (fast math off), so a
kernel that does not compile fails here with Metal's diagnostics. Metal has no public way to
serialise a compiled library for later loading, so the cached "binary" is the validated source
behind a magic header; the runtime builds the pipeline from it (the system's shader cache makes
that second compile cheap). The cache key includes the GPU's name and the macOS version.

Elsewhere compiling raises CompileError saying Metal needs macOS, unless the syntax check is on
(PLUGRAD_METAL_SYNTAX_CHECK=1): then `_compile` runs clang against the Metal shim instead
(plugrad_metal.syntax_check), caches nothing, and counts what it checked. (Kernels with a dtype
Metal lacks, float64, never get here: the core refuses them before lowering, and the shadow run
counts them as skipped.)
"""
from __future__ import annotations

import atexit
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from plugrad.plugin import CompileError, Compiler

from plugrad_metal.runtime import SOURCE_MAGIC, is_macos, metal_context

#: What a syntax-checked kernel "compiles" to; the runtime refuses it.
SYNTAX_CHECKED = b"plugrad-metal: syntax-checked only, not compiled\0"


@dataclass
class SyntaxCheckStats:
  """What the syntax-checking compilers of this process did."""
  checked: int = 0
  failed: int = 0

  def summary(self) -> str:
    return f"plugrad-metal syntax check: {self.checked} kernels passed clang, {self.failed} failed"


STATS = SyntaxCheckStats()
_summary_registered = False


def _print_summary() -> None:
  if STATS.checked or STATS.failed: print(STATS.summary(), file=sys.stderr)


class MetalCompiler(Compiler):
  """Compiles MSL with the Metal framework (macOS), or syntax-checks it with clang (elsewhere,
  when `syntax_checker` is given).

  :param device: the device string ("METAL", "METAL:1").
  :param syntax_checker: a plugrad_metal.syntax_check.SyntaxChecker to use instead of Metal.
  """

  def __init__(self, device: str, cache_dir: Path | None = None, syntax_checker=None) -> None:
    global _summary_registered
    super().__init__(None if syntax_checker is not None else cache_dir)  # a check is not a binary: never cached
    self.device, self.syntax_checker = device, syntax_checker
    if syntax_checker is not None and not _summary_registered:
      atexit.register(_print_summary)
      _summary_registered = True

  def identity(self) -> str:
    if self.syntax_checker is not None: return f"metal-syntax-check {' '.join(self.syntax_checker.command())}"
    if not is_macos(): return f"metal (unavailable on {platform.system()})"
    ctx = metal_context(self.device)
    return f"metal {ctx.device.name()} macOS {platform.mac_ver()[0]} safe-math"

  def _compile(self, src: str) -> bytes:
    if self.syntax_checker is not None: return self._syntax_check(src)
    if not is_macos():
      raise CompileError(f"compiling Metal Shading Language needs macOS (this is {platform.system()}); to check kernels "
                         f"here, set PLUGRAD_METAL_SYNTAX_CHECK=1 (a clang syntax check against a Metal shim)")
    metal_context(self.device).new_library(src)  # raises CompileError with Metal's diagnostics
    return SOURCE_MAGIC + src.encode()

  def _syntax_check(self, src: str) -> bytes:
    try:
      self.syntax_checker.check(src)
    except CompileError:
      STATS.failed += 1
      raise
    STATS.checked += 1
    return SYNTAX_CHECKED


__all__ = ["MetalCompiler", "STATS", "SyntaxCheckStats", "SYNTAX_CHECKED"]
