"""DEBUG output, as a built-in observation plugin.

DEBUG=1: kernels and copies per realize (or TinyJit replay), its time, the bytes its steps read and wrote
and the memory planner's peak. DEBUG=2: also one line per
kernel with its device, time, GFLOP/s and GB/s, and the realize's time split into kernels and the
overhead around them (scheduling, Python, launches). DEBUG=4: also the rendered source of every kernel.
`with Context(DEBUG=n):` sets the level for a block (0 silences it).
"""
from __future__ import annotations

import sys
from typing import TextIO

from plugrad.config import DEBUG, Config
from plugrad.hookspecs import CONTRACT_VERSION, hookimpl


class DebugPlugin:
  """Prints what happens to `stream` (stderr) at the level `config.debug`, or (`follow`: the registry's own) at
  the level of the ContextVar `DEBUG`, which a `Context(DEBUG=n)` block changes."""
  PLUGRAD_CONTRACT = CONTRACT_VERSION

  def __init__(self, config: Config, stream: TextIO | None = None, follow: bool = False):
    self.config_level, self.follow = config.debug, follow
    self.stream = stream
    self._kernel_seconds = 0.0  # measured kernel time since the last realize ended

  @property
  def level(self) -> int: return DEBUG.value if self.follow else self.config_level

  def _print(self, line: str) -> None: print(line, file=self.stream or sys.stderr, flush=True)

  @hookimpl
  def plugrad_wants_timing(self) -> bool | None: return True if self.level >= 2 else None

  @hookimpl
  def plugrad_kernel_compiled(self, device: str, name: str, source: str, seconds: float, cached: bool) -> None:
    if self.level >= 4: self._print(f"// {device} {name} ({'cached' if cached else f'compiled in {seconds*1e3:.2f} ms'})\n{source}")

  @hookimpl
  def plugrad_kernel_ran(self, device, name, seconds, flops, bytes_moved, global_size, local_size) -> None:
    if self.level < 2: return
    self._kernel_seconds += seconds or 0.0
    if seconds:
      perf = f"{seconds*1e6:9.1f} us  {flops/seconds/1e9:8.2f} GFLOP/s  {bytes_moved/seconds/1e9:8.2f} GB/s"
    else:
      perf = "time not measured"
    self._print(f"*** {device:<8} {name:<28} global={global_size} local={local_size}  {perf}")

  @hookimpl
  def plugrad_copy_ran(self, src_device: str, dest_device: str, nbytes: int, seconds: float) -> None:
    if self.level >= 2: self._print(f"*** copy {src_device} -> {dest_device} {nbytes} bytes in {seconds*1e6:.1f} us")

  @hookimpl
  def plugrad_schedule_ran(self, kernels: int, copies: int, seconds: float, bytes_read: int, bytes_written: int,
                           peak_bytes: int) -> None:
    if self.level >= 1:
      # with DEBUG=2 the kernels are timed: the rest of the realize is the Python around them
      split = f" (kernels {self._kernel_seconds*1e3:.2f} ms, overhead {(seconds - self._kernel_seconds)*1e3:.2f} ms)" \
        if self.level >= 2 else ""
      self._print(f"realized: {kernels} kernels, {copies} copies in {seconds*1e3:.2f} ms{split}; read {bytes_read} B, "
                  f"wrote {bytes_written} B, planned peak {peak_bytes} B")
    self._kernel_seconds = 0.0
