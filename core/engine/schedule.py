"""Schedules from tensor graphs: kernelize each device's graphs and list the pending kernels, reusing
the schedule of a graph whose structure was scheduled before (see schedule_cache)."""
from __future__ import annotations

import weakref
from typing import Callable, Iterable

from plugrad.device import Buffer
from plugrad.dtype import DType
from plugrad.engine.schedule_cache import ScheduleCache, ScheduleTemplate, structure_key
from plugrad.registry import Registry
from plugrad.scheduler import ScheduleItem, buffer_of, contiguous_base, create_schedule, kernelize
from plugrad.uops import UOp

#: What the caller's live handles point at now; their buffers must outlive the schedule.
LiveRoots = Callable[[], Iterable[UOp]]

_caches: weakref.WeakKeyDictionary[Registry, ScheduleCache] = weakref.WeakKeyDictionary()


def new_buffer_on(registry: Registry) -> Callable[..., Buffer]:
  """A factory of (unallocated) buffers on the registry's devices."""
  def new_buffer(device: str, size: int, dtype: DType, options: object = None) -> Buffer:
    return Buffer(device, size, dtype, registry.device(device).allocator, options)
  return new_buffer


def kernelize_roots(roots: list[UOp], devices: list[str], registry: Registry,
                    limit_device: str | None = None) -> dict[UOp, UOp]:
  """Kernelize each device's graphs; returns what each node becomes (ASSIGN(BUFFER, KERNEL)).
  `limit_device` takes the buffer limit from another device (to render for it elsewhere)."""
  by_device: dict[str, list[UOp]] = {}
  for r, d in zip(roots, devices): by_device.setdefault(d, []).append(r)
  becomes: dict[UOp, UOp] = {}
  for device, rs in by_device.items():
    becomes.update(kernelize([becomes.get(r, r) for r in rs], device, new_buffer=new_buffer_on(registry),
                             buffer_limit=lambda dev: registry.render_device(limit_device or dev).buffer_limit) or {})
  return becomes


def live_buffers(nodes: Iterable[UOp]) -> set[Buffer]:
  """The buffers these nodes are views of."""
  return {buffer_of(base) for n in nodes if (base := contiguous_base(n)) is not None}


def schedule(roots: list[UOp], devices: list[str], live: LiveRoots, registry: Registry,
             limit_device: str | None = None) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """The pending kernels (and copies) `roots` need, in order, and what each node becomes; a graph
  whose structure was scheduled before reuses that schedule on its new buffers."""
  if registry.config.check_spec:
    from plugrad.spec import tensor_spec
    from plugrad.uops import check_spec
    for r in roots: check_spec(r, tensor_spec, "tensor graph")
  cache = _caches.setdefault(registry, ScheduleCache())
  found = structure_key(roots, (tuple(devices), limit_device))
  if found is not None and (template := cache.get(found[0])) is not None:
    items, new_roots = template.instantiate(found[1], new_buffer_on(registry), live_buffers(live()))
    return items, {old: new for old, new in zip(roots, new_roots) if new is not None}
  becomes = kernelize_roots(roots, devices, registry, limit_device)
  new_roots = [becomes.get(r, r) for r in roots]
  items = create_schedule(new_roots, live_buffers(becomes.get(n, n) for n in live()))
  if found is not None and (template := ScheduleTemplate.record(found[1], new_roots, items)) is not None:
    cache.put(found[0], template)
  return items, becomes
