"""Timing shared by the benchmarks: medians of repeated runs, so that a shared machine's bursts of load
count once instead of skewing a mean."""
from __future__ import annotations

import statistics
import sys
import time
from typing import Callable

#: Seconds to wait before timing a function: the worker threads a library leaves spinning after its last call
#: (OpenBLAS's busy-wait about 0.1 s; OpenMP's, and plugrad's own, for less) would otherwise take a core from
#: whatever is timed next. On the 2-core machine, numpy's 1024x1024 matmul just before plugrad's took its time from
#: 6.9 to 9.3 ms; after a 0.05-0.2 s pause it was back to 6.7-7.0 ms.
SETTLE_SECONDS = 0.2
#: Seconds of untimed calls before timing (at least the `warmup` calls asked for): after a pause the 2-core VM's cores
#: take milliseconds to come back to speed. Its 1024x1024 a.exp().realize() took 0.63 ms on the first call after
#: SETTLE_SECONDS, 0.17-0.19 ms for the next twenty, 0.12 ms after 20 ms of calls (torch's exp 0.33 ms and numpy's
#: 0.30 ms either way); with two warm-up calls its median of seven was 0.42 ms.
WARMUP_SECONDS = 0.05


def median_time(fn: Callable[[], object], repeat: int, warmup: int = 2,
                sync: Callable[[], None] | None = None, before: Callable[[], object] | None = None) -> float:
  """The median seconds of `repeat` calls of `fn` after `warmup` untimed ones; `sync` (if given) waits
  for the device after each call, so asynchronous launches are timed to their end; `before` (if given) runs untimed
  right before each timed call (say, a scan of more memory than the caches hold, to time `fn` with its code and data
  evicted, as after a large kernel)."""
  return statistics.median(_samples(fn, repeat, warmup, sync, before))


def _samples(fn: Callable[[], object], repeat: int, warmup: int, sync: Callable[[], None] | None = None,
             before: Callable[[], object] | None = None) -> list[float]:
  """The seconds of `repeat` calls of `fn` after SETTLE_SECONDS and `warmup` untimed calls, and more for
  WARMUP_SECONDS in all (see median_time)."""
  _settle_and_warm_up([fn], warmup, sync)
  times = []
  for _ in range(repeat):
    if before: before()
    st = time.perf_counter()
    fn()
    if sync: sync()
    times.append(time.perf_counter() - st)
  _wait_for_plugrad()
  return times


def _wait_for_plugrad() -> None:
  """Wait for the kernels plugrad's last call left running (a CPU realize returns while its kernels run, as a GPU's
  launch does: each call's time includes waiting for the previous call's, which is a loop's throughput), so that
  they are not timed in what comes next."""
  if (registry := sys.modules.get("plugrad.registry")) is not None: registry.get_registry().device().synchronize()


def _settle_and_warm_up(fns: list[Callable[[], object]], warmup: int, sync: Callable[[], None] | None = None) -> None:
  """Sleep SETTLE_SECONDS, then call the functions in turn (each followed by `sync`, if given) for `warmup` rounds at
  least and WARMUP_SECONDS in all."""
  time.sleep(SETTLE_SECONDS)
  end, rounds = time.perf_counter() + WARMUP_SECONDS, 0
  while rounds < warmup or time.perf_counter() < end:
    for fn in fns:
      fn()
      if sync: sync()
    rounds += 1


def median_times(fns: list[Callable[[], object]], repeat: int, warmup: int = 3) -> list[float]:
  """The median time of each function, timed in alternation so that load from elsewhere on a shared
  machine falls on all of them alike; each call's time includes waiting for the kernels it left running, which
  would otherwise be timed in the next function's call."""
  _settle_and_warm_up(fns, warmup, _wait_for_plugrad)
  times: list[list[float]] = [[] for _ in fns]
  for _ in range(repeat):
    for fn, ts in zip(fns, times):
      st = time.perf_counter()
      fn()
      _wait_for_plugrad()
      ts.append(time.perf_counter() - st)
  return [statistics.median(ts) for ts in times]


def median_times_in_rounds(fns: list[Callable[[], object]], repeat: int, rounds: int = 3) -> list[float]:
  """The median time of each function over about `repeat` calls, taken in `rounds` rounds that time each function in
  turn (a block of calls, warmed up as median_time's). For calls near a library's own: the 2-core machine's memory
  system changes speed from one minute to the next (a 64 MiB row sum took 0.5 ms, then 1.0 ms, for plugrad and torch
  alike), so timing one function's calls and then the other's compares two states; rounds give each function the
  same mix. Blocks, not single calls in alternation, because each library's threads spin for a while after its call
  and would take a core from the other's next call."""
  per_round = max(1, -(-repeat // rounds))
  times: list[list[float]] = [[] for _ in fns]
  for _ in range(rounds):
    for fn, ts in zip(fns, times): ts += _samples(fn, per_round, warmup=2)
  return [statistics.median(ts) for ts in times]
