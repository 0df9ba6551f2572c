"""Timing shared by the benchmarks: medians of repeated runs, so that a shared machine's bursts of load
count once instead of skewing a mean."""
from __future__ import annotations

import statistics
import time
from typing import Callable

#: Seconds to wait before timing a function: the worker threads a library leaves spinning after its last call
#: (OpenBLAS's busy-wait about 0.1 s; OpenMP's, and plugrad's own, for less) would otherwise take a core from
#: whatever is timed next. On the 2-core machine, numpy's 1024x1024 matmul just before plugrad's took its time from
#: 6.9 to 9.3 ms; after a 0.05-0.2 s pause it was back to 6.7-7.0 ms.
SETTLE_SECONDS = 0.2


def median_time(fn: Callable[[], object], repeat: int, warmup: int = 2,
                sync: Callable[[], None] | None = None, before: Callable[[], object] | None = None) -> float:
  """The median seconds of `repeat` calls of `fn` after `warmup` untimed ones; `sync` (if given) waits
  for the device after each call, so asynchronous launches are timed to their end; `before` (if given) runs untimed
  right before each timed call (say, a scan of more memory than the caches hold, to time `fn` with its code and data
  evicted, as after a large kernel)."""
  time.sleep(SETTLE_SECONDS)
  for _ in range(warmup):
    fn()
    if sync: sync()
  times = []
  for _ in range(repeat):
    if before: before()
    st = time.perf_counter()
    fn()
    if sync: sync()
    times.append(time.perf_counter() - st)
  return statistics.median(times)


def median_times(fns: list[Callable[[], object]], repeat: int, warmup: int = 3) -> list[float]:
  """The median time of each function, timed in alternation so that load from elsewhere on a shared
  machine falls on all of them alike."""
  time.sleep(SETTLE_SECONDS)
  for _ in range(warmup):
    for fn in fns: fn()
  times: list[list[float]] = [[] for _ in fns]
  for _ in range(repeat):
    for fn, ts in zip(fns, times):
      st = time.perf_counter()
      fn()
      ts.append(time.perf_counter() - st)
  return [statistics.median(ts) for ts in times]
