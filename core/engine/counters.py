"""GlobalCounters: the work of the kernels run since the last `reset()`, counted as tinygrad counts it (its name and
fields), so a tinygrad program that prints or resets them runs unchanged."""
from __future__ import annotations

from typing import ClassVar, Iterable

from plugrad.codegen.program import LoopProgram
from plugrad.registry import get_registry


def work_of(programs: Iterable[LoopProgram]) -> tuple[int, int]:
  """(operations, bytes) that running each of `programs` once adds to GlobalCounters' global_ops and global_mem."""
  ops = mem = 0
  for p in programs: ops, mem = ops + p.flops, mem + p.bytes_moved
  return ops, mem


class _CountersMeta(type):
  @property
  def mem_used(cls) -> int:
    """Bytes that live buffers hold now, on every device in use (not reset: it is a state, not a count)."""
    return get_registry().memory_in_use()


class GlobalCounters(metaclass=_CountersMeta):
  """Counts over every kernel launch of every realize and TinyJit replay since the last `reset()`: `kernel_count`,
  `global_ops` (the kernels' estimated operations), `global_mem` (the bytes their buffers hold, an estimate of the
  traffic) and `time_sum_s` (kernel seconds, counted only while kernels are timed: DEBUG=2 or an observer that asks).
  `mem_used`: bytes live buffers hold now."""
  global_ops: ClassVar[int] = 0
  global_mem: ClassVar[int] = 0
  time_sum_s: ClassVar[float] = 0.0
  kernel_count: ClassVar[int] = 0

  @staticmethod
  def reset() -> None:
    """Start counting from zero."""
    GlobalCounters.global_ops = GlobalCounters.global_mem = GlobalCounters.kernel_count = 0
    GlobalCounters.time_sum_s = 0.0

  @staticmethod
  def count(kernels: int, ops: int, mem: int, seconds: float | None = None) -> None:
    """Add launches the engine ran (`seconds`: their measured time, None when not timed)."""
    GlobalCounters.kernel_count += kernels
    GlobalCounters.global_ops += ops
    GlobalCounters.global_mem += mem
    if seconds: GlobalCounters.time_sum_s += seconds
