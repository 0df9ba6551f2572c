"""Timing shared by the benchmarks: medians of repeated runs, so that a shared machine's bursts of load
count once instead of skewing a mean."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def median_time(fn: Callable[[], object], repeat: int, warmup: int = 2,
                sync: Callable[[], None] | None = None) -> float:
  """The median seconds of `repeat` calls of `fn` after `warmup` untimed ones; `sync` (if given) waits
  for the device after each call, so asynchronous launches are timed to their end."""
  for _ in range(warmup):
    fn()
    if sync: sync()
  times = []
  for _ in range(repeat):
    st = time.perf_counter()
    fn()
    if sync: sync()
    times.append(time.perf_counter() - st)
  return statistics.median(times)


def median_time_after(fn: Callable[[], object], before: Callable[[], object], repeat: int, warmup: int = 2) -> float:
  """The median seconds of `repeat` calls of `fn`, each right after an untimed call of `before` (say, a scan of
  more memory than the caches hold, to time `fn` with its code and data evicted, as after a large kernel)."""
  for _ in range(warmup): fn()
  times = []
  for _ in range(repeat):
    before()
    st = time.perf_counter()
    fn()
    times.append(time.perf_counter() - st)
  return statistics.median(times)


def median_times(fns: list[Callable[[], object]], repeat: int, warmup: int = 3) -> list[float]:
  """The median time of each function, timed in alternation so that load from elsewhere on a shared
  machine falls on all of them alike."""
  for _ in range(warmup):
    for fn in fns: fn()
  times: list[list[float]] = [[] for _ in fns]
  for _ in range(repeat):
    for fn, ts in zip(fns, times):
      st = time.perf_counter()
      fn()
      ts.append(time.perf_counter() - st)
  return [statistics.median(ts) for ts in times]
