"""Schedules from tensor graphs: kernelize each device's graphs and list the pending kernels, reusing
the schedule of a graph whose structure was scheduled before (see schedule_cache)."""
from __future__ import annotations

import weakref
from typing import Callable, Collection

from plugrad.config import GRAPH, HFUSE
from plugrad.device import Buffer
from plugrad.dtype import DType
from plugrad.codegen.program import LoopProgram
from plugrad.engine.compile import compile_for
from plugrad.engine.counters import GlobalCounters, work_of
from plugrad.engine.run import Capture, prepare_graph
from plugrad.engine.schedule_cache import ScheduleCache, ScheduleTemplate, structure_key
from plugrad.registry import Registry
from plugrad.scheduler import ScheduleItem, create_schedule, kernelize, record_applied
from plugrad.spec import tensor_spec
from plugrad.symbolic import bind_graph, unbind_graph
from plugrad.uops import UOp, check_spec

#: The buffers the caller's live handles hold (read after `Rebind`): they must outlive the schedule.
LiveBuffers = Callable[[], Collection[Buffer]]
#: Points the caller's handles at what their nodes became.
Rebind = Callable[[dict[UOp, UOp]], None]

_caches: weakref.WeakKeyDictionary[Registry, ScheduleCache] = weakref.WeakKeyDictionary()


def new_buffer_on(registry: Registry) -> Callable[..., Buffer]:
  """A factory of (unallocated) buffers on the registry's devices."""
  def new_buffer(device: str, size: int, dtype: DType, options: object = None) -> Buffer:
    return Buffer(device, size, dtype, registry.device(device).allocator, options)
  return new_buffer


def kernelize_roots(roots: list[UOp], devices: list[str], registry: Registry, limit_device: str | None = None,
                    created: list[Buffer] | None = None) -> dict[UOp, UOp]:
  """Kernelize each device's graphs; returns what each node becomes (ASSIGN(BUFFER, KERNEL)).
  `limit_device` takes the buffer limit from another device (to render for it elsewhere); `created`
  collects the buffers made for the kernels' outputs."""
  by_device: dict[str, list[UOp]] = {}
  for r, d in zip(roots, devices): by_device.setdefault(d, []).append(r)
  becomes: dict[UOp, UOp] = {}
  make = new_buffer_on(registry)

  def new_buffer(*args: object) -> Buffer:
    buf = make(*args)
    if created is not None: created.append(buf)
    return buf
  for device, rs in by_device.items():
    becomes.update(kernelize([becomes.get(r, r) for r in rs], device, new_buffer=new_buffer,
                             buffer_limit=lambda dev: registry.render_device(limit_device or dev).buffer_limit) or {})
  return becomes


def schedule(roots: list[UOp], devices: list[str], live: LiveBuffers, rebind: Rebind, registry: Registry,
             limit_device: str | None = None) -> list[ScheduleItem]:
  """The pending kernels (and copies) `roots` need, in order; `rebind` is told what each node became
  before buffers are planned, so `live` then answers for the handles' new nodes. A graph whose
  structure was scheduled before reuses that schedule on its new buffers.

  Bound Variables are unbound first (their values go to every item's `var_vals`), so graphs that differ only
  in those values share one schedule and one compiled kernel; the nodes handed to `rebind` have them bound."""
  return plan(roots, devices, live, rebind, registry, limit_device)[0]


def plan(roots: list[UOp], devices: list[str], live: LiveBuffers, rebind: Rebind, registry: Registry,
         limit_device: str | None = None,
         runs_now: bool = False) -> tuple[list[ScheduleItem], Callable[[], None] | None]:
  """`schedule`, and for a caller that runs the items at once (`runs_now`: a realize) a second value: None, or
  the rebind to call once they ran. A graph whose structure was scheduled before then makes no kernel nodes
  for its steps: its roots are rebound, after the run, to the buffers they then read as."""
  if registry.config.check_spec:
    for r in roots: check_spec(r, tensor_spec, "tensor graph")
  unbound, var_vals = unbind_graph(roots)
  if unbound is roots: return _schedule(roots, devices, live, rebind, registry, limit_device, runs_now, runs_now)
  originals = dict(zip(unbound, roots))

  def rebind_bound(becomes: dict[UOp, UOp]) -> None:
    # a live handle holds a bound graph: only the roots can be mapped back to it
    rebind({originals[old]: bind_graph([new], var_vals)[0] for old, new in becomes.items() if old in originals})
  items, after_run = _schedule(unbound, devices, live, rebind_bound, registry, limit_device, runs_now, False)
  for it in items: it.var_vals = var_vals
  return items, after_run


def _schedule(roots: list[UOp], devices: list[str], live: LiveBuffers, rebind: Rebind, registry: Registry,
              limit_device: str | None, runs_now: bool,
              natively: bool) -> tuple[list[ScheduleItem], Callable[[], None] | None]:
  """`plan` of a graph without bound Variables; `natively`: a cached schedule may be run by the device's graph
  role (no Variables' values to pass): then no items, and the second value runs it and rebinds."""
  if (cache := _caches.get(registry)) is None: cache = _caches[registry] = ScheduleCache()
  found = structure_key(roots, (tuple(devices), limit_device, HFUSE.value))
  if found is not None and (hit := cache.get(found[0])) is not None:
    key, template = hit
    if natively and (run := _native_run(cache, key, template, len(found[1]), registry)) is not None:
      return [], _run_natively(template, run, roots, found[1], registry, rebind)
    items, new_roots = template.instantiate(found[1], new_buffer_on(registry), nodes=not runs_now)

    def apply() -> None: _apply(roots, new_roots, rebind)
    if runs_now: return items, apply
    apply()
    return items, None
  created: list[Buffer] = []
  becomes = kernelize_roots(roots, devices, registry, limit_device, created)
  rebind(becomes)
  new_roots = [becomes.get(r, r) for r in roots]
  items = create_schedule(new_roots, live(), set(created),
                          lambda dev: registry.render_device(limit_device or dev).buffer_limit, fuse=bool(HFUSE))
  if found is not None and (template := ScheduleTemplate.record(found[1], new_roots, items)) is not None:
    cache.put(found[0], template)
  return items, None


#: A cached schedule of kernels on one device, reused for the NATIVE_AFTER_RUNS-th time and after, runs as TinyJit's
#: replays do: one call into the device's graph role (a generated function on CPU, a CUDA graph) instead of a Python
#: launch per kernel (8-9 us each on the 2-core CPU, most of an eager training step's launch time). A single kernel
#: gains too: after a kernel that streamed 64 MiB through the caches, `a.sum(axis=1).realize()` of 4096x4096 float32
#: took 1.03-1.15 ms with the Python launch and 0.93-0.98 ms natively (ten interleaved rounds; torch 0.94-1.00 ms).
#: Preparing the run costs once per schedule what the graph role does (on CPU it compiles a small function, 1.6 ms),
#: hence not before the third reuse.
#: Only while nothing observes single launches, and when its intermediates (fresh buffers no root becomes) hold at
#: most NATIVE_MAX_BYTES: a native run allocates them all at once, where a run from Python frees each after its last
#: use, and a schedule with large intermediates spends its time in the kernels anyway.
NATIVE_AFTER_RUNS = 3
NATIVE_MAX_BYTES = 16 << 20


def _native_run(cache: ScheduleCache, key: object, template: ScheduleTemplate, nleaves: int,
                registry: Registry) -> _CountedRun | None:
  """The graph role's run of a cached schedule's kernels, prepared once it is worth it; None to run it from
  Python (also while an observer wants each launch, or a TinyJit captures them)."""
  if not GRAPH or Capture.active is not None or registry.observes_launches(): return None
  if key in cache.natives: return cache.natives[key]
  if (runs := cache.runs.get(key, 0) + 1) < NATIVE_AFTER_RUNS:
    cache.runs[key] = runs
    return None
  run = None
  steps = template.steps
  freed = {ref - nleaves for st in steps for ref in st.frees}  # the intermediates, numbered among the outputs
  intermediate_bytes = sum(size * dt.itemsize for i, (_, size, dt, _) in enumerate(template.outputs) if i in freed)
  if steps and all(st.ast is not None for st in steps) and len(devices := {st.device for st in steps}) == 1 \
      and intermediate_bytes <= NATIVE_MAX_BYTES:
    device = registry.device(devices.pop())
    kernels = [compile_for(device, st.ast) for st in steps]
    graph_run = prepare_graph(registry, device.name, [(ck, st.outs + st.ins) for ck, st in zip(kernels, steps)],
                              nleaves + len(template.outputs))
    if graph_run is not None: run = _CountedRun(graph_run, [ck.program for ck in kernels])
  cache.natives[key] = run
  return run


class _CountedRun:
  """A device graph role's run of a cached schedule that counts its kernels in GlobalCounters, as their launches from
  Python would one by one."""
  __slots__ = ("run", "kernels", "ops", "mem")

  def __init__(self, run: Callable[[list], None], programs: list[LoopProgram]):
    self.run, self.kernels = run, len(programs)
    self.ops, self.mem = work_of(programs)

  def __call__(self, raws: list) -> None:
    self.run(raws)
    GlobalCounters.count(self.kernels, self.ops, self.mem)

  def start(self, raws: list) -> Callable[[], None]:
    """The run under way where the graph role can start it (`Graph.prepare`), and the function that waits for it;
    else run now."""
    if (start := getattr(self.run, "start", None)) is None:
      self(raws)
      return _ran
    finish = start(raws)
    GlobalCounters.count(self.kernels, self.ops, self.mem)
    return finish


def _ran() -> None:
  """What `_CountedRun.start` returns for a run that finished before it returned."""


def _run_natively(template: ScheduleTemplate, run: _CountedRun, roots: list[UOp], leaves: list[UOp],
                  registry: Registry, rebind: Rebind) -> Callable[[], None]:
  """What a realize calls to run a cached schedule natively: fresh buffers, the run, the frees, the rebind."""
  def run_and_rebind() -> None:
    buffer = template.buffers(leaves, new_buffer_on(registry))
    # the tensors are told what they became while the kernels run (after a 64 MiB row sum that Python runs with the
    # caches cold: it was 31 us after the kernel, 4096x4096 float32); nothing reads or frees a buffer before the wait
    finish = run.start([b.raw for b in buffer])
    try:
      _apply(roots, template.root_nodes(leaves, buffer), rebind)
    finally:
      finish()
    for st in template.steps:
      for ref in st.frees: buffer[ref].deallocate(final=True)
  return run_and_rebind


def _apply(roots: list[UOp], new_roots: list[UOp | None], rebind: Rebind) -> None:
  """Tell the caller what the roots of a cached schedule became (None: unchanged), recording the assigns applied."""
  becomes = {old: new for old, new in zip(roots, new_roots) if new is not None}
  record_applied(becomes)
  rebind(becomes)
