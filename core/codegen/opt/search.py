"""Search: time candidate plans on the device and keep the fastest (PLUGRAD_BEAM=N).

A beam of N plans starts from the heuristic's plans. Each round every plan in the beam grows by one
change (an UPCAST, VECTORIZE, UNROLL or LANES amount doubled or halved, an UPCAST added to launch dim 0 or 1, a
partial UNROLL of a reduce axis, one Opt dropped); every new plan that applies is timed, and the N
fastest plans seen so far form the next beam. The search stops when a round finds nothing faster
(or after `rounds`). Timing is a callback, so the search itself is deterministic given the timings
(tests pass a fake timer); a plan the lowering refuses (OptError) is skipped.

The winner is stored per (kernel, device, capabilities) in a `PlanCache` on disk, so a second process
lowers with it at once and times nothing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Callable

from plugrad.codegen.opt import KernelFeatures, Opt, OptError, OptOps
from plugrad.device import Capabilities
from plugrad.kernel_cache import KernelCache, package_version
from plugrad.uops import UOp

#: a timer that gives this many seconds (or more) refuses the plan
INFEASIBLE = float("inf")


def neighbours(plan: tuple[Opt, ...], k: KernelFeatures) -> list[tuple[Opt, ...]]:
  """The plans one change away from `plan`, in a fixed order (duplicates removed)."""
  out: list[tuple[Opt, ...]] = []
  for i, o in enumerate(plan):
    rest = plan[:i] + plan[i + 1:]
    out.append(rest)  # drop it
    if o.op in (OptOps.UPCAST, OptOps.VECTORIZE, OptOps.UNROLL, OptOps.LANES, OptOps.BLOCK):
      out.append(rest[:i] + (Opt(o.op, o.axis, o.amount * 2),) + rest[i:])
      if o.amount >= 4 and o.amount % 2 == 0: out.append(rest[:i] + (Opt(o.op, o.axis, o.amount // 2),) + rest[i:])
  for axis in range(min(2, len(k.dims))):
    if not any(o.op is OptOps.UPCAST and o.axis == axis for o in plan):
      out += [plan + (Opt(OptOps.UPCAST, axis, f),) for f in (2, 4)]
  for axis, size in enumerate(k.reduce_axes):
    if not any(o.op is OptOps.UNROLL and o.axis == axis for o in plan):
      out += [plan + (Opt(OptOps.UNROLL, axis, f),) for f in (2, 4, 8) if f < size and size % f == 0]
  seen: set[tuple[Opt, ...]] = set()
  return [p for p in out if not (p in seen or seen.add(p))]


def beam_search(start: list[tuple[Opt, ...]], k: KernelFeatures, time_plan: Callable[[tuple[Opt, ...]], float],
                width: int, rounds: int = 4) -> tuple[Opt, ...]:
  """The fastest plan found from the plans `start` (the heuristic's, best first).

  :param time_plan: seconds one launch of the kernel lowered with a plan takes; raises OptError
    (or returns INFEASIBLE) for a plan that does not apply.
  :param width: plans kept per round (PLUGRAD_BEAM).
  """
  timed: dict[tuple[Opt, ...], float] = {}

  def measure(plans: list[tuple[Opt, ...]]) -> None:
    for p in plans:
      if p in timed: continue
      try:
        timed[p] = time_plan(p)
      except OptError:
        timed[p] = INFEASIBLE

  def best(n: int) -> list[tuple[Opt, ...]]:
    # ties keep the earlier plan: the heuristic's order, then the order plans were found in
    order = {p: i for i, p in enumerate(timed)}
    return sorted((p for p in timed if timed[p] < INFEASIBLE), key=lambda p: (timed[p], order[p]))[:n]

  measure(start)
  beam = best(width)
  if not beam: return start[-1]
  for _ in range(rounds):
    before = timed[beam[0]]
    measure([n for p in beam for n in neighbours(p, k)])
    beam = best(width)
    if timed[beam[0]] >= before: break
  return beam[0]


def capabilities_text(caps: Capabilities) -> str:
  """The capabilities as text that is the same in every process, for disk cache keys."""
  # frozensets print in an order that changes from process to process: sort them
  return repr({f.name: sorted(map(str, v)) if isinstance(v := getattr(caps, f.name), frozenset) else v
               for f in dataclasses.fields(caps)})


def plan_key(ast: UOp, device: str, caps: Capabilities) -> str:
  """What a searched plan depends on: the kernel's structure, the device and its capabilities."""
  text = "\n".join([ast.pretty(), device, capabilities_text(caps), package_version("plugrad")])
  return hashlib.sha256(text.encode()).hexdigest()


class PlanCache:
  """Searched plans on disk (under `path`, kept private like the compile cache), by `plan_key`."""

  def __init__(self, path: Path | None) -> None:
    self._cache = KernelCache(path)
    self._header = {"kind": "plugrad searched plan", "plugrad": package_version("plugrad")}

  def get(self, key: str) -> tuple[Opt, ...] | None:
    raw = self._cache.get(key, self._header)
    if raw is None: return None
    try:
      return tuple(Opt(OptOps[op], int(axis), int(amount)) for op, axis, amount in json.loads(raw))
    except (ValueError, KeyError, TypeError):
      return None

  def put(self, key: str, plan: tuple[Opt, ...]) -> None:
    self._cache.put(key, self._header, json.dumps([[o.op.name, o.axis, o.amount] for o in plan]).encode())


__all__ = ["beam_search", "neighbours", "capabilities_text", "plan_key", "PlanCache", "INFEASIBLE"]
