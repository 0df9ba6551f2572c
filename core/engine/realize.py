"""The one orchestrator of a realize: schedule (with its structural cache), compile (cached), allocate,
run, and tell the caller what its handles now are. The frontend hands graphs in and rebinds its own
handles to the results; the engine never sees a Tensor."""
from __future__ import annotations

import time

from plugrad.engine.run import run_schedule
from plugrad.engine.schedule import LiveBuffers, Rebind, plan
from plugrad.registry import Registry
from plugrad.scheduler import contiguous_base, pending_kernel
from plugrad.uops import Ops, UOp


def realize(roots: list[UOp], devices: list[str], live: LiveBuffers, rebind: Rebind, registry: Registry) -> None:
  """Run everything `roots` need; `rebind` is told what each node became (afterwards the caller points
  its handles at `realized_view` of those nodes)."""
  started = time.perf_counter()
  items, after_run = plan(roots, devices, live, rebind, registry, runs_now=True)
  # no items but a run to call: the device's graph role runs the schedule (and nothing observes its launches)
  if items or after_run is None: run_schedule(items, registry, started)
  if after_run is not None: after_run()


def realized_view(u: UOp) -> UOp | None:
  """A node whose kernel has run, as the buffer it reads as (reshaped to its shape); None for any
  other node."""
  base = contiguous_base(u)
  if base is None or base.op is not Ops.ASSIGN or pending_kernel(base) is not None: return None
  buf = base.src[0]
  if buf.shape == u.shape: return buf
  return UOp(Ops.RESHAPE, buf.dtype, (buf,), u.shape)
