"""The graph role: a TinyJit capture replayed by generated code instead of a Python call per kernel.

A run of launches becomes one LLVM function `run(ptr table, ptr counters)` that loads its buffers'
addresses from the table and runs each launch in order, on every thread of the device at once: the
threads pull the launch's chunks (contiguous pieces of its outermost loop), each first those of its own
contiguous group (the same group of every launch, so what a thread wrote in one launch it mostly reads in
the next), then what is left of the others' (`pool.home_first_pull_ir`); they count the chunks they finish
and wait, spinning, until all of a launch's chunks are done before the next launch starts (it may read what
this one wrote). So the runtime's workers are handed work once per run of launches, not once per launch (a
thread that waits long yields its core, in case the one it waits for lost its own): even the native workers'
hand-off and wake-up cost microseconds, which a convolution of a small image would otherwise pay at every
launch. A thread that starts late finds the chunks taken and returns; which thread runs a chunk never changes
what it computes, so results do not depend on timing.

A launch whose kernel splits a one-element reduction into partial sums (`reduce_split`) stays a call of
its Program between runs. A replay fills the table with the buffers it is given and hands each run to the
workers with one call.
"""
from __future__ import annotations

import ctypes
import operator
from typing import Any, Callable

from plugrad.plugin import Graph, GraphLaunch

from plugrad_cpu_llvm.compiler import _llvm_lock, host_target, jit_module
from plugrad_cpu_llvm.pool import UNFINISHED, chunk_range_ir, home_first_pull_ir, spin_hint, wait_ir
from plugrad_cpu_llvm.runtime import CPUProgram, _chunk_count, run_on_threads

_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_ADDRESS = operator.attrgetter("addr")  # a raw CPU buffer's address (a function of C, called for every replay)

#: A launch inside a run is cut into chunks worth at least this much work (cost units: operations + bytes
#: moved). Below the runtime's SPLIT_THRESHOLD: the threads are already running, and a chunk costs an
#: atomic add and a call (well under a microsecond), not a hand-off to the workers.
GRAPH_SPLIT_THRESHOLD = 1 << 17
#: A run is shared with the runtime's workers when its launches cut into chunks hold at least this much work:
#: the one hand-off per run and a barrier per launch must be won back. With the native workers (a hand-off of a
#: few microseconds) a small transformer's step (6M units) runs shared in 0.08 ms, alone in 0.12 ms.
RUN_SPLIT_THRESHOLD = 1 << 20
#: The same with the Python pool (a hand-off of 25-35 us): that transformer step ran slower shared, a small
#: CNN's (50M) twice as fast.
PYTHON_POOL_RUN_SPLIT_THRESHOLD = 1 << 23


def _chunks(prog: CPUProgram) -> int:
  if not prog.meta["splittable"]: return 1
  return _chunk_count(prog.outer, prog.meta["cost"], prog.threads, GRAPH_SPLIT_THRESHOLD)


def _run_ir(name: str, run: _Run, spin: str) -> str:
  """`void name(ptr table, ptr counters)`: counters (zeroed by the caller) = [threads entered, then per launch k
  (`_Run.counter`): chunks done, then each thread group's chunks taken]; each launch starts once the one before it
  is done."""
  launches, groups = run.launches, run.threads
  lines = [f"define void @{name}(ptr %t, ptr %c) {{", "entry:"]
  loaded: dict[int, str] = {}
  for ln in launches:
    for i in ln.buffers:
      if i not in loaded:
        loaded[i] = f"%b{i}"
        lines += [f"  %p{i} = getelementptr inbounds ptr, ptr %t, i64 {i}", f"  %b{i} = load ptr, ptr %p{i}"]
  lines += ["  %ticket = atomicrmw add ptr %c, i64 1 monotonic", f"  %home = urem i64 %ticket, {groups}",
            "  br label %l0.pull"]
  for k, ln in enumerate(launches):
    prog = ln.program
    assert isinstance(prog, CPUProgram)
    n, outer = run.chunks[k], prog.outer
    args = ", ".join(f"ptr {loaded[i]}" for i in ln.buffers)
    nxt = f"l{k + 1}.pull" if k + 1 < len(launches) else "exit"

    # both are called at once, in this iteration
    def counter(g: str) -> list[str]:
      return [f"  %l{k}.cg = add i64 {g}, {run.counter(k, 0)}",
              f"  %l{k}.ctr = getelementptr inbounds i64, ptr %c, i64 %l{k}.cg"]

    def chunk(i: str) -> list[str]:
      return [*chunk_range_ir(f"l{k}.", i, outer, n), f"  %f{k} = inttoptr i64 {prog.address} to ptr",
              f"  call void %f{k}({args}, i64 %l{k}.start, i64 %l{k}.end)",
              f"  %r{k} = atomicrmw add ptr %done{k}, i64 1 release"]
    lines += [
      f"l{k}.pull:",
      f"  %done{k} = getelementptr inbounds i64, ptr %c, i64 {run.counter(k, None)}",
      *home_first_pull_ir(f"l{k}.", f"l{k}.pull", "%home", groups, n, counter, chunk, f"l{k}.wait"),
      # every chunk of this launch done (a thread whose chunk is late may have lost its core: see wait_ir)
      *wait_ir(f"l{k}.wait", f"l{k}.left", f"%done{k}", "acquire", n, nxt, spin),
    ]
  return "\n".join(lines + ["exit:", "  ret void", "}", ""])


class CPUGraph(Graph):
  """Native replay for the CPU device (see the module docstring)."""

  def _prepare(self, launches: list[GraphLaunch], nbuffers: int) -> Callable[[list[Any]], None] | None:
    progs = [ln.program for ln in launches]
    if not all(isinstance(p, CPUProgram) and not p.nvars for p in progs): return None
    # runs of launches, each one native call per thread; a launch with a split reduction between them stays a
    # Program call
    steps: list[list[GraphLaunch] | GraphLaunch] = []
    for ln in launches:
      if ln.program.reduce_chunks is None:  # type: ignore[attr-defined]
        if steps and isinstance(steps[-1], list): steps[-1].append(ln)
        else: steps.append([ln])
      else: steps.append(ln)
    runs = [_Run(s) for s in steps if isinstance(s, list)]
    if not runs: return None
    decl, spin = spin_hint(host_target()[0])
    with _llvm_lock:
      engine = jit_module(f"{decl}\ndeclare i32 @sched_yield()\n" +
                          "".join(_run_ir(f"run{i}", r, spin) for i, r in enumerate(runs)))
      for i, r in enumerate(runs):
        r.address = engine.get_function_address(f"run{i}")
        r.fn = _RUN(r.address)
        r.code = (engine, progs)  # a run left going outlives the replay that made it (a schedule cache evicts it)
    return _Replay(steps, runs, nbuffers, engine, progs)


class _Run:
  """One run of launches: each launch's chunk count, how many threads share its work, and (once generated) the
  function that runs it."""

  def __init__(self, launches: list[GraphLaunch]) -> None:
    first = launches[0].program
    assert isinstance(first, CPUProgram)
    self.launches = launches
    self.fn: Any = None  # set once the module is compiled, with its address and what owns the code it calls
    self.address = 0
    self.code: Any = None
    self.pool, self.asynchronous = first.pool, first.asynchronous
    self.chunks = [_chunks(ln.program) for ln in launches]  # type: ignore[arg-type]
    shared = sum(ln.program.meta["cost"] for ln, n in zip(launches, self.chunks) if n > 1)  # type: ignore[attr-defined]
    threshold = RUN_SPLIT_THRESHOLD if self.pool.native() is not None else PYTHON_POOL_RUN_SPLIT_THRESHOLD
    self.threads = min(first.threads, max(self.chunks)) if shared >= threshold else 1
    self.counters = ctypes.c_int64 * self.counter(len(launches), None)

  def counter(self, k: int, group: int | None) -> int:
    """Where launch k's counter of chunks done (group None) or group `group`'s counter of chunks taken is."""
    return 1 + k * (self.threads + 1) + (0 if group is None else 1 + group)

  def __call__(self, table: Any) -> None:
    UNFINISHED.wait()
    counters = self.counters()
    if self.threads <= 1: self.fn(table, counters)
    elif (native := self.pool.native()) is not None:
      native.run(self.address, ctypes.addressof(table), ctypes.addressof(counters), self.threads - 1)
    else: run_on_threads(lambda: self.fn(table, counters), self.threads, self.pool)

  def start(self, table: Any, raws: list[Any]) -> Callable[[], None]:
    """The run (over `raws`, whose addresses `table` holds) handed to the native workers, and the function that joins
    it and waits (`NativePool.start`); a run the host shares no buffer of is left going (`pool.Unfinished`) and the
    function does nothing. Where there are no workers or the run is one thread's, it runs here and now, and the
    function does nothing."""
    if self.threads > 1 and (native := self.pool.native()) is not None:
      counters = self.counters()
      table_at, counters_at = ctypes.addressof(table), ctypes.addressof(counters)
      # made before waiting for the run left going: from its end to this hand-off no core has work (a loop of
      # 4096x4096 row sums: 7.2 -> 2.8 us from the wait's return to the hand-off)
      UNFINISHED.wait()
      finish = native.start(self.address, table_at, counters_at, self.threads - 1)
      if self.asynchronous and not any(r.shared for r in raws):
        UNFINISHED.leave(finish, (self, table, counters, raws))  # what the workers use lives until it is finished
        return _done

      def join(keep: tuple = (table, counters)) -> None:  # what the workers read stays alive until it is called
        finish()
      return join
    self(table)
    return _done


class _Replay:
  """What `CPUGraph.prepare` returns: called with the raw buffers of one replay."""

  def __init__(self, steps: list, runs: list[_Run], nbuffers: int, engine: Any, progs: list[Any]):
    # the engine owns the generated code and `progs` the kernels it calls: both live as long as this does
    self.engine, self.progs, self.table_type = engine, progs, ctypes.c_void_p * nbuffers
    run_iter = iter(runs)
    self.calls: list[tuple[Any, Any]] = [(next(run_iter), None) if isinstance(s, list) else (s.program, s)
                                         for s in steps]

  def __call__(self, raws: list[Any]) -> None:
    table = self.table_type(*map(_ADDRESS, raws))
    for fn, ln in self.calls:
      if ln is None: fn(table)
      else: fn(*(raws[i] for i in ln.buffers), global_size=ln.global_size, local_size=ln.local_size)

  def start(self, raws: list[Any]) -> Callable[[], None]:
    """The replay, returning once it is under way where it is one run (see `Graph.prepare`): the function returned
    waits for it. A replay of several steps runs here and now."""
    if len(self.calls) != 1 or self.calls[0][1] is not None:
      self(raws)
      return _done
    return self.calls[0][0].start(self.table_type(*map(_ADDRESS, raws)), raws)


def _done() -> None:
  """What `start` returns for a run that finished before it returned."""
