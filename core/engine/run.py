"""Running a schedule: launch each kernel, copy between devices, free buffers after their last use,
tell the observers; and the list of launches a JIT captures and replays."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping

from plugrad.config import GRAPH
from plugrad.device import Buffer, DeviceError, GraphLaunch
from plugrad.engine.compile import CompiledKernel, compile_for, prepare_kernels
from plugrad.engine.counters import GlobalCounters, work_of
from plugrad.registry import Registry
from plugrad.scheduler import ScheduleItem, mark_done, plan_memory
from plugrad.uops import UOp


@dataclass(frozen=True)
class Launch:
  """One step that ran: a compiled kernel on its buffers (the `outs` written ones first), or a copy between
  devices (`kernel` None, `bufs` = (dest, src))."""
  kernel: CompiledKernel | None
  device: str
  bufs: tuple[Buffer, ...]
  outs: int = 1
  var_vals: Mapping[UOp, int] = field(default_factory=dict)  # the Variables' values it ran with


class Capture:
  """Records the launches of every schedule run inside `with Capture() as cap:`, for a JIT to replay.
  While it records, buffers the memory planner would free stay allocated: a replay writes them again."""
  active: ClassVar[Capture | None] = None

  def __init__(self) -> None:
    self.launches: list[Launch] = []

  def __enter__(self) -> Capture:
    if Capture.active is not None: raise RuntimeError("a TinyJit capture is already running: jitted functions do not nest")
    Capture.active = self
    return self

  def __exit__(self, *exc: object) -> None: Capture.active = None


def run_schedule(items: list[ScheduleItem], registry: Registry, started: float | None = None) -> None:
  """Run every item in order; buffers listed in an item's `frees` are released after it. `started`:
  when the realize began (perf_counter), so observers get its whole time, scheduling included."""
  capture = Capture.active
  timing = registry.wants_timing()
  st = time.perf_counter() if started is None else started
  # for the observers only (none by default); before running, as it asks which buffers are allocated yet
  plan = plan_memory(items, frees=capture is None) if registry.observed("plugrad_schedule_ran") else None
  kernels = copies = 0
  # lowering the next kernels while the first compile (only kernels not compiled yet: a first run)
  prepare_kernels([(registry.device(it.device), it.ast) for it in items if not it.is_copy and it.ast is not None])
  for it in items:
    if it.is_copy:
      dest, src = it.bufs
      _copy(dest, src, registry)
      copies += 1
      if capture is not None: capture.launches.append(Launch(None, dest.device, (dest, src)))
    else:
      device = registry.device(it.device)
      ck = compile_for(device, it.ast)
      _launch(ck, device.name, it.bufs, registry, timing, it.var_vals)
      kernels += 1
      if capture is not None: capture.launches.append(Launch(ck, device.name, it.bufs, it.outs, it.var_vals))
    for k in it.kernels: mark_done(k)
    if capture is None:
      for b in it.frees: b.deallocate(final=True)
  if timing:
    for name in {it.device for it in items if not it.is_copy}: registry.device(name).runtime.synchronize()
  if plan is not None:
    registry.notify("plugrad_schedule_ran", kernels=kernels, copies=copies, seconds=time.perf_counter() - st,
                    bytes_read=plan.bytes_read, bytes_written=plan.bytes_written, peak_bytes=plan.peak_bytes)


@dataclass(frozen=True)
class Traffic:
  """What a list of launches moves, for the observers of each replay (the same every time it runs), and what its
  kernels count in GlobalCounters (their estimated operations and bytes)."""
  kernels: int
  copies: int
  bytes_read: int
  bytes_written: int
  ops: int = 0
  mem: int = 0


def traffic_of(launches: list[Launch]) -> Traffic:
  copies = sum(1 for ln in launches if ln.kernel is None)
  ops, mem = work_of(ln.kernel.program for ln in launches if ln.kernel is not None)
  return Traffic(len(launches) - copies, copies, sum(b.nbytes for ln in launches for b in ln.bufs[ln.outs:]),
                 sum(b.nbytes for ln in launches for b in ln.bufs[:ln.outs]), ops, mem)


class NativeReplay:
  """A captured launch list as its device's graph role prepared it: one call runs every launch."""

  def __init__(self, run: Callable[[list[Any]], None], buffers: list[Buffer]):
    self.run, self.buffers = run, buffers

  def __call__(self, subs: dict[Buffer, Buffer]) -> None:
    raws = [subs.get(b, b).raw for b in self.buffers] if subs else [b.raw for b in self.buffers]
    # where the device may leave the run going (see Graph.prepare), the replay returns while it runs
    if (start := getattr(self.run, "start", None)) is None: self.run(raws)
    else: start(raws)()


def prepare_native(launches: list[Launch], registry: Registry) -> NativeReplay | None:
  """The native replay of `launches` when they are kernels without Variables on one device whose plugin has
  a graph role that takes them (`Graph.prepare`); None otherwise (they are replayed from Python)."""
  if not launches or any(ln.kernel is None or ln.var_vals for ln in launches): return None
  if len(devices := {ln.device for ln in launches}) != 1: return None
  index: dict[Buffer, int] = {}
  numbered = [(ln.kernel, tuple(index.setdefault(b, len(index)) for b in ln.bufs)) for ln in launches if ln.kernel]
  run = prepare_graph(registry, devices.pop(), numbered, len(index))
  return None if run is None else NativeReplay(run, list(index))


def prepare_graph(registry: Registry, device: str, launches: list[tuple[CompiledKernel, tuple[int, ...]]],
                  nbuffers: int) -> Callable[[list[Any]], None] | None:
  """`device`'s graph role's run of kernels without Variables, each given with the numbers of its buffers (in
  PARAM order) among the `nbuffers` raw buffers the run is called with; None where the device has no graph role,
  it declines, or Context(GRAPH=0)."""
  if not GRAPH or (graph := registry.device(device).graph) is None: return None
  return graph.prepare([GraphLaunch(ck.runner, bufs, ck.program.global_size, ck.program.local_size)
                        for ck, bufs in launches], nbuffers)


def replay(launches: list[Launch], subs: dict[Buffer, Buffer], registry: Registry, traffic: Traffic | None = None,
           var_vals: Mapping[UOp, int] | None = None, native: NativeReplay | None = None) -> None:
  """Run captured launches again, with each buffer in `subs` replaced by its value (new inputs). `traffic`:
  `traffic_of(launches)`, computed once by the caller that replays the same list again and again. `var_vals`:
  new values of the Variables (None: those of the capture). `native`: `prepare_native(launches)`, used unless
  an observer wants each kernel timed (DEBUG=2)."""
  timing = registry.wants_timing()
  st = time.perf_counter()
  t = traffic or traffic_of(launches)
  if native is not None and not timing:
    native(subs)
    GlobalCounters.count(t.kernels, t.ops, t.mem)
  else:
    for ln in launches:
      bufs = tuple(subs.get(b, b) for b in ln.bufs) if subs else ln.bufs
      if ln.kernel is None: _copy(bufs[0], bufs[1], registry)
      else: _launch(ln.kernel, ln.device, bufs, registry, timing,
                    ln.var_vals if var_vals is None else {**ln.var_vals, **var_vals})
  if timing:
    for name in {ln.device for ln in launches if ln.kernel is not None}: registry.device(name).runtime.synchronize()
  # a replay allocates nothing: every buffer it writes was kept from the capture
  registry.notify("plugrad_schedule_ran", kernels=t.kernels, copies=t.copies, seconds=time.perf_counter() - st,
                  bytes_read=t.bytes_read, bytes_written=t.bytes_written, peak_bytes=0)


def _copy(dest: Buffer, src: Buffer, registry: Registry) -> None:
  t0 = time.perf_counter()
  registry.transfer(src.device, dest.device).copy(dest, src)
  registry.notify("plugrad_copy_ran", src_device=src.device, dest_device=dest.device, nbytes=dest.nbytes,
                  seconds=time.perf_counter() - t0)


def _launch(ck: CompiledKernel, device: str, bufs: tuple[Buffer, ...], registry: Registry, timing: bool,
            var_vals: Mapping[UOp, int]) -> None:
  raws: list[Any] = [b.raw for b in bufs]
  prog = ck.program
  # a kernel with Variables takes their values after the buffers, and its launch sizes may depend on them
  global_size, local_size, vals = prog.launch_dims(var_vals)
  if vals and 0 in global_size: return  # a Variable at 0 left no thread to run (GPU APIs refuse empty launches)
  try:
    if vals: seconds = ck.runner(*raws, global_size=global_size, local_size=local_size, vals=vals, wait=timing)
    else: seconds = ck.runner(*raws, global_size=global_size, local_size=local_size, wait=timing)
  except DeviceError:
    raise
  except Exception as e:
    raise DeviceError(f"kernel {prog.name} failed on {device}: {type(e).__name__}: {e}") from e
  GlobalCounters.count(1, prog.flops, prog.bytes_moved, seconds)
  registry.notify("plugrad_kernel_ran", device=device, name=prog.name, seconds=seconds, flops=prog.flops,
                  bytes_moved=prog.bytes_moved, global_size=global_size, local_size=local_size)
