"""Worker threads that wait in native code, so handing a launch to them costs a store and (at most) one wake-up.

Handing work to Python threads (a queue, a condition, the GIL) costs 25-35 us per launch on the 2-core machine,
more than a small kernel runs. Here each worker is a Python thread parked inside a generated function,
`pool_worker(state)`, which it entered through ctypes (so without the GIL) and leaves only when its pool stops
(dropped, or at exit): it spins a while on the job counter after each job, then sleeps on it with a futex.
`pool_run(state, fn, a, b)` publishes a job, wakes the sleepers, calls `fn(a, b)` itself, and returns once no worker
is still inside the job. A job's function pulls its pieces of work from counters it gets through `a` and `b` (a
kernel's chunks, or a graph run's launches), so a worker that arrives late finds nothing left and the caller never
waits for one to start.

How a worker joins a job safely: it counts itself `inside`, then reads `closed`; the caller, done with its own part,
sets `closed` and waits until `inside` is 0 (both sequentially consistent). A worker that counted itself in before the
close is waited for; one that counts itself in after it sees the job closed and touches nothing of it, so the
caller may free the job's memory as soon as it returns. A worker starts with generation 0 as the last it saw (the
state's own start), not the current one: a thread that reaches its loop after the first job was published (a loaded
machine starts threads late) still takes that job, or finds it closed; reading the current generation, it missed the
job, and a run that counted on it ran alone.

Linux only (futexes): elsewhere `NativePool.create` returns None and the runtime keeps its Python pool.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import platform
import sys
import threading
import weakref
from typing import Any, Callable

from plugrad_cpu_llvm.compiler import _llvm, _llvm_lock, host_target, jit_module

#: futex system call numbers (the syscall is the same on every Linux architecture; its number is not)
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
#: A worker spins this many times (each a pause hint) for the next job before it sleeps: long enough to catch the
#: next launch of a program that launches back to back, short enough that an idle program leaves the cores alone.
WORKER_SPINS = 8000
#: A thread waiting for others (the caller for workers to leave a job, a graph run's threads at each launch's end)
#: spins this many times, then yields its core at every try: the thread it waits for may have been descheduled.
SPINS_BEFORE_YIELD = 4000

# the state: one 8-byte slot each
_GEN, _SLEEPING, _INSIDE, _CLOSED, _FN, _A, _B, _SEATS, _STOP = range(9)
_SLOTS = 9

_JOB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def spin_hint(triple: str) -> tuple[str, str]:
  """(declaration, call) of the instruction that tells the core a thread is spinning, for this target."""
  if triple.startswith(("x86_64", "i686", "i386")): return "declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"
  if triple.startswith(("aarch64", "arm64")): return "declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)"
  return "", ""


def wait_ir(name: str, came_from: str, ptr: str, order: str, value: str | int, then: str, pause: str) -> list[str]:
  """IR of a loop, block `name` entered from block `came_from`, that waits until the i64 at `ptr` (loaded with
  `order`) equals `value` and then branches to `then`: it spins with the `pause` hint, and after
  SPINS_BEFORE_YIELD tries yields its core at every try (the function declares `sched_yield`)."""
  k = f"%{name}.k"
  return [f"{name}:",
          f"  {k} = phi i64 [0, %{came_from}], [{k}1, %{name}.pause], [{k}1, %{name}.yield]",
          f"  %{name}.v = load atomic i64, ptr {ptr} {order}, align 8",
          f"  %{name}.ok = icmp eq i64 %{name}.v, {value}",
          f"  br i1 %{name}.ok, label %{then}, label %{name}.spin",
          f"{name}.spin:",
          f"  {k}1 = add i64 {k}, 1",
          f"  %{name}.long = icmp ugt i64 {k}1, {SPINS_BEFORE_YIELD}",
          f"  br i1 %{name}.long, label %{name}.yield, label %{name}.pause",
          f"{name}.pause:", *([f"  {pause}"] if pause else []), f"  br label %{name}",
          f"{name}.yield:", f"  %{name}.y = call i32 @sched_yield()", f"  br label %{name}"]


def chunk_range_ir(p: str, i: str, outer: str | int, n: str | int) -> list[str]:
  """IR setting `%{p}start` and `%{p}end` (i64) to chunk `i`'s iterations outer*i//n .. outer*(i+1)//n: the pieces
  `runtime._pieces` cuts, whoever runs them."""
  return [f"  %{p}sm = mul i64 {i}, {outer}", f"  %{p}start = udiv i64 %{p}sm, {n}",
          f"  %{p}em = add i64 %{p}sm, {outer}", f"  %{p}end = udiv i64 %{p}em, {n}"]


def home_first_pull_ir(p: str, came_from: str, home: str, groups: str | int, n: str | int,
                       counter: Callable[[str], list[str]], run: Callable[[str], list[str]], then: str) -> list[str]:
  """IR, block `{p}visit` entered from block `came_from`, that runs every piece 0..n-1 of a launch not yet taken
  and then branches to `then`. The pieces are cut into `groups` contiguous groups (group g: pieces
  n*g//groups .. n*(g+1)//groups), each with its own counter of pieces taken; the thread starts with group `home`
  (its own: threads take different homes) and then takes what is left of the others, in turn. So with every
  thread running, each reads one contiguous range, as a static split would (two threads reading one stream
  apiece read memory about 30% faster than two interleaving chunks of one stream: prefetchers and caches follow
  each), and a thread slowed by another process has its pieces taken by the others. `counter(g)` gives lines
  setting `%{p}ctr` to the address of group `g`'s i64 counter (zeroed before the launch); `run(i)`, lines that
  run piece `i` (an i64)."""
  return [f"  br label %{p}visit",
          f"{p}visit:",
          f"  %{p}k = phi i64 [0, %{came_from}], [%{p}k1, %{p}left]",
          f"  %{p}hk = add i64 {home}, %{p}k", f"  %{p}g = urem i64 %{p}hk, {groups}",
          f"  %{p}g1 = add i64 %{p}g, 1",
          f"  %{p}gsm = mul i64 %{p}g, {n}", f"  %{p}gs = udiv i64 %{p}gsm, {groups}",
          f"  %{p}gem = mul i64 %{p}g1, {n}", f"  %{p}ge = udiv i64 %{p}gem, {groups}",
          *counter(f"%{p}g"),
          f"  br label %{p}take",
          f"{p}take:",
          f"  %{p}j = atomicrmw add ptr %{p}ctr, i64 1 monotonic",
          f"  %{p}i = add i64 %{p}gs, %{p}j",
          f"  %{p}more = icmp ult i64 %{p}i, %{p}ge",
          f"  br i1 %{p}more, label %{p}run, label %{p}left",
          f"{p}run:", *run(f"%{p}i"), f"  br label %{p}take",
          f"{p}left:",
          f"  %{p}k1 = add i64 %{p}k, 1",
          f"  %{p}all = icmp uge i64 %{p}k1, {groups}",
          f"  br i1 %{p}all, label %{then}, label %{p}visit"]


def _slot(name: str, k: int) -> str:
  return f"  %{name} = getelementptr inbounds i64, ptr %s, i64 {k}"


def _pool_ir(futex: int, pause_decl: str, pause: str) -> str:
  """`pool_worker(ptr state)`, `pool_run(ptr state, ptr fn, ptr a, ptr b, i64 workers)` (`pool_start`, which
  publishes the job and wakes the sleepers, then `pool_finish`, which calls fn(a, b) and waits for the workers) and
  `pool_stop(ptr state)` (see the module docstring)."""
  slots = "\n".join(_slot(n, k) for n, k in [("gen", _GEN), ("sleeping", _SLEEPING), ("inside", _INSIDE),
                                              ("closed", _CLOSED), ("fnp", _FN), ("ap", _A), ("bp", _B),
                                              ("seats", _SEATS), ("stop", _STOP)])
  pause_line = f"  {pause}" if pause else ""
  caller_wait = "\n".join(wait_ir("check", "run", "%inside", "seq_cst", 0, "exit", pause))
  return f"""\
{pause_decl}
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()

define void @pool_worker(ptr %s) {{
entry:
{slots}
  ; a worker that starts after its pool was stopped sees the stop here (pool_stop sets it before it bumps gen)
  %st0 = load atomic i64, ptr %stop seq_cst, align 8
  %quit0 = icmp ne i64 %st0, 0
  br i1 %quit0, label %exit, label %wait
wait:
  %seen = phi i32 [0, %entry], [%g, %seat], [%g, %leave], [%seen, %slept]
  br label %spin
spin:
  %k = phi i64 [0, %wait], [%k1, %pause]
  %gs = load atomic i32, ptr %gen acquire, align 8
  %news = icmp ne i32 %gs, %seen
  br i1 %news, label %got, label %more
more:
  %k1 = add i64 %k, 1
  %long = icmp ugt i64 %k1, {WORKER_SPINS}
  br i1 %long, label %sleep, label %pause
pause:
{pause_line}
  br label %spin
sleep:
  %sl0 = atomicrmw add ptr %sleeping, i64 1 seq_cst
  %gq = load atomic i32, ptr %gen seq_cst, align 8
  %newq = icmp ne i32 %gq, %seen
  br i1 %newq, label %woke, label %futex
futex:
  %seen64 = zext i32 %seen to i64
  %fr = call i64 (i64, ...) @syscall(i64 {futex}, ptr %gen, i64 {_FUTEX_WAIT_PRIVATE}, i64 %seen64, ptr null, ptr null, i64 0)
  br label %woke
woke:
  %sl1 = atomicrmw sub ptr %sleeping, i64 1 seq_cst
  br label %slept
slept:
  %st = load atomic i64, ptr %stop acquire, align 8
  %quit = icmp ne i64 %st, 0
  br i1 %quit, label %exit, label %wait
got:
  %g = phi i32 [%gs, %spin]
  %st2 = load atomic i64, ptr %stop acquire, align 8
  %quit2 = icmp ne i64 %st2, 0
  br i1 %quit2, label %exit, label %seat
seat:
  %free = atomicrmw sub ptr %seats, i64 1 seq_cst
  %has = icmp sgt i64 %free, 0
  br i1 %has, label %enter, label %wait
enter:
  %in0 = atomicrmw add ptr %inside, i64 1 seq_cst
  %cl = load atomic i64, ptr %closed seq_cst, align 8
  %open = icmp eq i64 %cl, 0
  br i1 %open, label %work, label %leave
work:
  %fn = load atomic ptr, ptr %fnp acquire, align 8
  %a = load atomic ptr, ptr %ap acquire, align 8
  %b = load atomic ptr, ptr %bp acquire, align 8
  call void %fn(ptr %a, ptr %b)
  br label %leave
leave:
  %in1 = atomicrmw sub ptr %inside, i64 1 seq_cst
  br label %wait
exit:
  ret void
}}

define void @pool_stop(ptr %s) {{
entry:
{slots}
  store atomic i64 1, ptr %stop seq_cst, align 8
  %g = atomicrmw add ptr %gen, i32 1 seq_cst
  %wr = call i64 (i64, ...) @syscall(i64 {futex}, ptr %gen, i64 {_FUTEX_WAKE_PRIVATE}, i64 2147483647)
  ret void
}}

define void @pool_start(ptr %s, ptr %fn, ptr %a, ptr %b, i64 %workers) {{
entry:
{slots}
  store atomic ptr %fn, ptr %fnp release, align 8
  store atomic ptr %a, ptr %ap release, align 8
  store atomic ptr %b, ptr %bp release, align 8
  store atomic i64 %workers, ptr %seats seq_cst, align 8
  store atomic i64 0, ptr %closed seq_cst, align 8
  %g = atomicrmw add ptr %gen, i32 1 seq_cst
  %sl = load atomic i64, ptr %sleeping seq_cst, align 8
  %any = icmp sgt i64 %sl, 0
  br i1 %any, label %wake, label %exit
wake:
  %wr = call i64 (i64, ...) @syscall(i64 {futex}, ptr %gen, i64 {_FUTEX_WAKE_PRIVATE}, i64 2147483647)
  br label %exit
exit:
  ret void
}}

define void @pool_finish(ptr %s, ptr %fn, ptr %a, ptr %b) {{
entry:
{slots}
  br label %run
run:
  call void %fn(ptr %a, ptr %b)
  store atomic i64 1, ptr %closed seq_cst, align 8
  br label %check
{caller_wait}
exit:
  ret void
}}

define void @pool_run(ptr %s, ptr %fn, ptr %a, ptr %b, i64 %workers) {{
entry:
  call void @pool_start(ptr %s, ptr %fn, ptr %a, ptr %b, i64 %workers)
  call void @pool_finish(ptr %s, ptr %fn, ptr %a, ptr %b)
  ret void
}}
"""


_CTL_GROUPS = 6  # where the group counters start in a pull function's ctl block (`_pull_ir`)


def pull_ctl(chunks: int, outer: int, address: int, partials: int, groups: int) -> Any:
  """The ctl block a pull function (`_pull_ir`) reads for one launch: `chunks` pieces of `outer` iterations of the
  kernel function at `address`, a split reduction's partials (0: none), `groups` threads' groups of pieces."""
  return (ctypes.c_int64 * (_CTL_GROUPS + groups))(0, chunks, outer, address, partials, groups)


def _pull_ir(nbufs: int, nvars: int, partial: bool) -> str:
  """`pull(ptr args, ptr ctl)`: the chunks of one launch of a kernel function taking `nbufs` buffers, `nvars`
  Variable values and (start, end), pulled (`home_first_pull_ir`) with ctl (`pull_ctl`) = [threads entered, chunks,
  outer iterations, function address, partials, groups, then each group's counter (zeroed)]; chunk i is iterations
  outer*i//n .. outer*(i+1)//n (`chunk_range_ir`). `args` holds the buffers' addresses and then the values,
  8 bytes each. `partial`: the function is a split reduction's piece, which also takes the address of its 8-byte
  slot, partials + 8*i."""
  lines = ["define void @pull(ptr %args, ptr %ctl) {", "entry:"]
  vals = []
  for i in range(nbufs + nvars):
    lines.append(f"  %p{i} = getelementptr inbounds i64, ptr %args, i64 {i}")
    if i < nbufs:
      lines.append(f"  %v{i} = load ptr, ptr %p{i}")
      vals.append(f"ptr %v{i}")
    else:
      lines += [f"  %w{i} = load i64, ptr %p{i}", f"  %v{i} = trunc i64 %w{i} to i32"]
      vals.append(f"i32 %v{i}")

  def run(i: str) -> list[str]:
    return [*chunk_range_ir("", i, "%outer", "%n"),
            f"  %slot = getelementptr inbounds i64, ptr %partials, i64 {i}",
            f"  call void %f({', '.join(vals + ['i64 %start', 'i64 %end'] + (['ptr %slot'] if partial else []))})"]
  lines += [
    "  %np = getelementptr inbounds i64, ptr %ctl, i64 1", "  %n = load i64, ptr %np",
    "  %op = getelementptr inbounds i64, ptr %ctl, i64 2", "  %outer = load i64, ptr %op",
    "  %fp = getelementptr inbounds i64, ptr %ctl, i64 3", "  %f = load ptr, ptr %fp",
    "  %pp = getelementptr inbounds i64, ptr %ctl, i64 4", "  %partials = load ptr, ptr %pp",
    "  %gp = getelementptr inbounds i64, ptr %ctl, i64 5", "  %groups = load i64, ptr %gp",
    "  %ticket = atomicrmw add ptr %ctl, i64 1 monotonic", "  %home = urem i64 %ticket, %groups",
    *home_first_pull_ir("", "entry", "%home", "%groups", "%n",
                        lambda g: [f"  %cg = add i64 {g}, {_CTL_GROUPS}", "  %ctr = getelementptr inbounds i64, ptr %ctl, i64 %cg"],
                        run, "exit"),
    "exit:", "  ret void", "}", ""]
  return "\n".join(lines)


class NativePool:
  """`workers` threads parked in `pool_worker`, started at the first job. One per CPU runtime."""

  _engine: Any = None  # the generated code, shared by every pool and kept for the life of the process
  _engines: list[Any] = []  # the pull functions' code, likewise
  _pulls: dict[tuple[int, int, bool], int] = {}
  _lock = threading.Lock()

  def __init__(self, workers: int) -> None:
    self.workers = workers
    self._state = (ctypes.c_int64 * _SLOTS)()
    self._started = False
    self._threads: list[threading.Thread] = []
    self._busy = threading.Lock()  # one job at a time; a second thread's launch runs on its own thread meanwhile
    self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int64)(NativePool._engine.get_function_address("pool_run"))
    self._start_job = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_int64)(NativePool._engine.get_function_address("pool_start"))
    self._finish_job = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_void_p)(NativePool._engine.get_function_address("pool_finish"))
    self._worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(NativePool._engine.get_function_address("pool_worker"))
    self._stop = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(NativePool._engine.get_function_address("pool_stop"))
    _pools.add(self)

  @classmethod
  def create(cls, workers: int) -> NativePool | None:
    """A pool, or None where this process cannot have one (not Linux, an unknown architecture, no `syscall`)."""
    if workers < 1 or not sys.platform.startswith("linux"): return None
    futex = _SYS_FUTEX.get(platform.machine().lower())
    if futex is None: return None
    with cls._lock:
      if cls._engine is None:
        with _llvm_lock:
          engine = jit_module(_pool_ir(futex, *spin_hint(host_target()[0])))
          # making an MCJIT engine makes the process's own symbols visible to LLVM: only now can it tell whether
          # the C library has the two the code calls (else they resolved to nothing: never run it)
          if not all(_llvm().address_of_symbol(name) for name in ("syscall", "sched_yield")): return None
        cls._engine = engine
    return cls(workers)

  def _forget_threads(self) -> None:
    # a forked child has none of the parent's threads: start its own at its first job
    self._state = (ctypes.c_int64 * _SLOTS)()
    self._started, self._busy, self._threads = False, threading.Lock(), []

  def _start(self) -> None:
    with NativePool._lock:
      if self._started: return
      state, worker = self._state, self._worker

      def park() -> None:  # holds the state: it outlives the pool until the worker has left it
        worker(ctypes.addressof(state))
      self._threads = [threading.Thread(target=park, name=f"plugrad-cpu-{i}", daemon=True) for i in range(self.workers)]
      for t in self._threads: t.start()
      self._started = True

  def stop(self) -> None:
    """Let the workers leave their loop and wait for them (briefly): a dropped pool leaves no threads behind,
    and at exit no worker still runs generated code when the interpreter frees it."""
    if not self._started: return
    self._started = False
    self._stop(ctypes.addressof(self._state))
    for t in self._threads: t.join(timeout=1.0)

  def __del__(self) -> None:
    try:
      self.stop()
    except (AttributeError, TypeError):  # never fully made, or the interpreter is shutting down
      pass

  def run(self, fn: int, a: int, b: int, helpers: int) -> None:
    """Call the job function at address `fn` as fn(a, b) on this thread and on up to `helpers` workers at once;
    return when none of them is still in it."""
    if helpers > 0 and not self._started: self._start()
    # no helpers wanted, or another thread's job holds the workers: this thread runs it alone
    if helpers <= 0 or not self._busy.acquire(blocking=False):
      _JOB(fn)(a, b)
      return
    try:
      self._run(ctypes.addressof(self._state), fn, a, b, min(helpers, self.workers))
    finally:
      self._busy.release()

  def start(self, fn: int, a: int, b: int, helpers: int) -> Callable[[], None]:
    """`run` in two halves: hand fn(a, b) to up to `helpers` workers and return at once; the function returned (call
    it exactly once, soon: the workers stay with this job until then) runs it on this thread too and returns when no
    thread is still in it. Meanwhile this thread may do anything but touch what the job reads or writes; where the
    workers are busy with another thread's job, the returned function runs this one alone."""
    if helpers <= 0 or not self._busy.acquire(blocking=False): return lambda: _JOB(fn)(a, b)
    try:
      if not self._started: self._start()
      state = ctypes.addressof(self._state)
      self._start_job(state, fn, a, b, min(helpers, self.workers))
    except BaseException:
      self._busy.release()
      raise

    def finish() -> None:
      try:
        self._finish_job(state, fn, a, b)
      finally:
        self._busy.release()
    return finish

  @classmethod
  def pull(cls, nbufs: int, nvars: int, partial: bool = False) -> int:
    """The address of the chunk-pulling job function (`_pull_ir`) for kernel functions taking `nbufs` buffers and
    `nvars` values (and a partial's slot), generated at the first use of each such signature."""
    key = (nbufs, nvars, partial)
    if (addr := cls._pulls.get(key)) is not None: return addr
    with cls._lock, _llvm_lock:
      if (addr := cls._pulls.get(key)) is not None: return addr
      engine = jit_module(_pull_ir(nbufs, nvars, partial))
      cls._engines.append(engine)  # the code lives as long as the process
      addr = cls._pulls[key] = engine.get_function_address("pull")
    return addr


_pools: weakref.WeakSet[NativePool] = weakref.WeakSet()


class Unfinished:
  """The runs a realize left going on the workers (`graph._Run.start`): the realize returns while one runs, and the
  Python that builds the next graph overlaps it, as it overlaps a GPU's kernels. The CPU's memory has no stream
  to order what comes after, so everything of the plugin that launches a kernel or touches memory first waits
  for it (`wait`): a launch, a copy in or out, a view handed to the host, a synchronize, a fork, the exit. A run
  whose buffers the host shares (`CPUBuffer.shared`) is never left going: numpy could read them at any time.

  Why: a kernel streaming more than the caches hold leaves the caller's code and data out of cache, and the
  realize's Python after it runs 4x slower than warm (a small sum's realize on the 2-core machine: 31 us warm,
  115-136 us after a 64 MiB scan). Overlapped with the worker's share of the run, a loop of 4096x4096 row sums
  took 0.868 ms a call instead of 0.938 ms (torch 0.920 ms; alternating blocks in one process)."""

  def __init__(self) -> None:
    self._lock = threading.Lock()  # held while runs are waited for: a second thread waits until they are finished
    # (finish, keep) of each run left going: one, unless two threads each left one between waits
    self._left: list[tuple[Callable[[], None], Any]] = []

  def __len__(self) -> int:
    """How many runs are left going."""
    return len(self._left)

  def leave(self, finish: Callable[[], None], keep: Any) -> None:
    """Leave a run going: `finish` joins it and returns when it is over (called exactly once, by `wait`); `keep`
    (its buffers and the tables the workers read) stays alive until then."""
    with self._lock: self._left.append((finish, keep))

  def wait(self) -> None:
    """Return once no run is left going (joining each on this thread, which takes a share of what is left)."""
    if not self._left: return  # the common case: one attribute read
    done = []
    with self._lock:
      while self._left:
        try:
          self._left[0][0]()
        finally:
          done.append(self._left.pop(0))
    del done  # out of the lock: what it frees may run code that waits (a dropped pool's __del__)


#: The runs left going in this process: every CPU device shares the workers (`runtime._POOL`).
UNFINISHED = Unfinished()


def _after_fork_in_child() -> None:
  for pool in list(_pools): pool._forget_threads()


# a child has the parent's memory but not its workers: it would never see a run left going finish
if hasattr(os, "register_at_fork"): os.register_at_fork(before=UNFINISHED.wait, after_in_child=_after_fork_in_child)


def _at_exit() -> None:
  # before the interpreter tears its modules down (and with them the generated code the workers run)
  UNFINISHED.wait()
  for pool in list(_pools): pool.stop()


atexit.register(_at_exit)
