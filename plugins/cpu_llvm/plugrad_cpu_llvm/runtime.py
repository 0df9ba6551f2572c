"""The runtime role: load object files with LLVM's MCJIT and call kernels through ctypes.

Every kernel is `void kernel(ptr buf0, ..., ptr bufN-1, i64 start, i64 end)`: it runs the
iterations start..end-1 of its outermost launch loop. A launch big enough to be worth it is cut into
contiguous chunks (up to CHUNKS_PER_THREAD per thread, each worth at least the pool's split threshold)
that the calling thread and the runtime's workers pull: each thread first the chunks of its own contiguous
group, then what is left of the others' (`pool.home_first_pull_ir`). So a thread whose core is busy with
another process takes fewer chunks instead of stalling the launch with a fixed share, a worker that arrives
after the chunks are gone is not waited for, and with every core free each thread streams through one
contiguous range. The workers wait in native code
(`pool.NativePool`: a hand-off costs a few microseconds); where a process cannot have those, a Python
thread pool does the same through ctypes, which releases the GIL during each call (25-35 us a hand-off).
The chunk boundaries depend only on the kernel and the thread count, never on timing, so results are the
same run to run.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from plugrad.plugin import DeviceError, Program, Runtime

from plugrad_cpu_llvm.compiler import _llvm, _llvm_lock, host_target, jit_target_machine, unpack_binary
from plugrad_cpu_llvm.pool import UNFINISHED, NativePool, pull_ctl
from plugrad_cpu_llvm.support import check_symbols, install_helpers

#: A launch whose estimated cost (bytes moved + operations) is below this runs on one thread; above it, each
#: chunk is worth at least this much. With the native pool a hand-off costs a few microseconds (2-core machine:
#: a 96x96 matmul, 1.8M units, 8.2 us on one thread and 6.5 us split; a 64x64 one, 0.55M, 3.2 us and 3.8 us).
SPLIT_THRESHOLD = 1 << 20
#: The same with the Python pool, whose hand-off costs 25-35 us (a 1M-flop matmul ran in 10 us on one thread and
#: 38 us cut in four): only a launch of about 2M cost units or more wins it back.
PYTHON_POOL_SPLIT_THRESHOLD = 1 << 21
#: The most chunks per thread a launch is cut into: enough that a slowed or late thread's share is small, few enough
#: that each ctypes call (about a microsecond) stays negligible. A realize left going (`pool.Unfinished`) has the
#: caller join late, after the next graph's Python: with 8 (a 4096x4096 row sum's chunks of 4 MiB, 150 us on a core
#: of the 2-core Xeon, which streams at most 28.5 GB/s alone) the two threads still ended up to a chunk apart, and the
#: overlap saved nothing; with 32, 1.275 -> 1.245 ms a call (torch 1.19).
CHUNKS_PER_THREAD = 32


def _chunk_count(outer: int, cost: float, threads: int, threshold: float) -> int:
  """How many chunks a launch of `outer` iterations and estimated `cost` is cut into, each worth at least
  `threshold` (what handing out a chunk costs decides it: see SPLIT_THRESHOLD, graph.GRAPH_SPLIT_THRESHOLD)."""
  if threads <= 1 or cost < threshold: return 1
  return max(1, min(outer, threads * CHUNKS_PER_THREAD, max(threads, int(cost // threshold))))


def _run_pulled(fn: Any, args: list[int], pieces: list[tuple[int, int]], threads: int, pool: _Pool,
                extra: Any = None) -> None:
  """Run fn(*args, start, end[, extra(i)]) for every piece, on the calling thread and up to `threads` - 1
  pool threads, each taking its own contiguous group of pieces first and then what is left of the others
  (as `pool.home_first_pull_ir` does in native code)."""
  groups = min(len(pieces), threads)
  bounds = [len(pieces) * g // groups for g in range(groups + 1)]
  taken = [itertools.count(bounds[g]) for g in range(groups)]  # next() on a count is atomic under the GIL
  tickets = itertools.count()

  def work() -> None:
    home = next(tickets)
    for k in range(groups):
      g = (home + k) % groups
      while (i := next(taken[g])) < bounds[g + 1]:
        s, e = pieces[i]
        if extra is None: fn(*args, s, e)
        else: fn(*args, s, e, extra(i))
  run_on_threads(work, groups, pool)


def run_on_threads(work: Callable[[], None], threads: int, pool: _Pool) -> None:
  """Run `work` on the calling thread and on up to `threads` - 1 pool threads at once; return when every
  one that started has finished. `work` must finish whatever is left on its own: a pool thread may start
  late, or not at all (it is then cancelled, not waited for)."""
  executor = pool.get(max(_POOL_WORKERS, threads - 1))
  futs = [executor.submit(work) for _ in range(threads - 1)]
  work()
  for f in futs:
    if not f.cancel(): f.result()  # a worker that never started has nothing left to do


def cpu_count() -> int:
  """Cores this process may run on."""
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except AttributeError:  # not Linux
    return max(1, os.cpu_count() or 1)


class _Pool:
  """The worker threads, started lazily: (cores - 1) workers parked in native code (`pool.NativePool`), or where
  the process cannot have those, a Python thread pool. One per process (`_POOL`), shared by every CPU device."""

  def __init__(self) -> None:
    self._pool: ThreadPoolExecutor | None = None
    self._native: NativePool | None | bool = False  # False: not made yet
    self._lock = threading.Lock()

  def get(self, workers: int) -> ThreadPoolExecutor:
    if self._pool is None:
      with self._lock:
        if self._pool is None: self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="plugrad-cpu")
    return self._pool

  def native(self) -> NativePool | None:
    """The native workers, or None where this process cannot have them (then `get` is the pool)."""
    if self._native is False:
      with self._lock:
        if self._native is False: self._native = NativePool.create(_POOL_WORKERS)
    return self._native  # type: ignore[return-value]

  def split_threshold(self) -> int:
    """The work below which a launch stays on one thread (SPLIT_THRESHOLD: what one hand-off costs decides it)."""
    return SPLIT_THRESHOLD if self.native() is not None else PYTHON_POOL_SPLIT_THRESHOLD

  def run_pulled(self, program: CPUProgram, ptrs: list[int], pieces: list[tuple[int, int]], fn: Any, address: int,
                 partials: int | None = None) -> None:
    """Run the kernel function `fn` (at `address`) over every piece, on the calling thread and up to
    program.threads - 1 workers pulling pieces (`pool.home_first_pull_ir`); a split reduction's piece i also gets the
    address of its 8-byte slot, partials + 8*i."""
    native = self.native()
    if native is None:
      _run_pulled(fn, ptrs, pieces, program.threads, self, None if partials is None else lambda i: partials + 8 * i)
      return
    pull = NativePool.pull(program.nparams, program.nvars, partials is not None)
    args = (ctypes.c_int64 * max(len(ptrs), 1))(*ptrs)
    threads = min(len(pieces), program.threads)
    ctl = pull_ctl(len(pieces), pieces[-1][1], address, partials or 0, threads)  # the pieces cut 0..outer
    native.run(pull, ctypes.addressof(args), ctypes.addressof(ctl), threads - 1)


_POOL_WORKERS = max(1, cpu_count() - 1)
#: The workers every CPU device's runtime hands its launches to. The devices (CPU:0, CPU:1) are the same cores: a set
#: of workers per device oversubscribed them, the idle set spinning on the core the other needed (a step sharded
#: over CPU:0 and CPU:1, five runs each: 1.10-1.52 ms with a pool per device, 1.02-1.07 ms with one). A launch made
#: while another thread's launch holds the workers runs on its own thread, so two devices' launches from two
#: threads still never wait for each other.
_POOL = _Pool()


class CPUProgram(Program):
  """A loaded kernel. `threads` caps how many chunks a launch is split into; `asynchronous`: whether a graph run of
  it may be left going (`pool.Unfinished`; a call of the program itself always returns finished)."""

  def __init__(self, name: str, meta: dict[str, Any], fns: dict[str, Any], engine: Any, threads: int, pool: _Pool,
               asynchronous: bool = True):
    self.name, self.meta, self._engine = name, meta, engine  # the engine owns the code: keep it alive
    self.pool, self.asynchronous = pool, asynchronous
    self.fn, self.threads = fns["full"], threads
    self.nparams: int = meta["nparams"]
    self.nvars: int = meta.get("nvars", 0)
    self.outer: int = meta["outer"]  # iterations of the outermost launch loop (1: no launch loop)
    # which workers (and so which threshold) only matters for a launch worth splitting at all: a small program never
    # makes the workers' code
    big = threads > 1 and meta["cost"] >= min(SPLIT_THRESHOLD, PYTHON_POOL_SPLIT_THRESHOLD)
    self.threshold = pool.split_threshold() if big else SPLIT_THRESHOLD
    self.chunks = _pieces(self.outer, self._chunk_count(self.outer) if meta["splittable"] else 1)
    # a one-element reduction big enough to split: pieces of its outer reduce loop write partials `fin` combines
    split = meta.get("reduce_split")
    pieces = _pieces(split["outer"], self._chunk_count(split["outer"])) if split else []
    self.reduce_chunks = pieces if len(pieces) > 1 else None
    self._partials_type = ctypes.c_int64 * len(self.reduce_chunks) if self.reduce_chunks else None
    self.part, self.fin = fns.get("part"), fns.get("fin")
    self.address: int = ctypes.cast(self.fn, ctypes.c_void_p).value or 0  # where the graph role calls the kernel
    self.part_address: int = (ctypes.cast(self.part, ctypes.c_void_p).value or 0) if self.part is not None else 0

  def _chunk_count(self, outer: int) -> int:
    return _chunk_count(outer, self.meta["cost"], self.threads, self.threshold)

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] | None = None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    if len(bufs) != self.nparams:
      raise DeviceError(f"CPU kernel {self.name} takes {self.nparams} buffers, got {len(bufs)}")
    if len(vals) != self.nvars:
      raise DeviceError(f"CPU kernel {self.name} takes {self.nvars} Variable value(s), got {len(vals)}")
    UNFINISHED.wait()  # a run left going may write what this reads
    st = time.perf_counter() if wait else 0.0
    ptrs = [b.addr for b in bufs] + list(vals)  # the Variables' values follow the buffers
    fn, chunks = self.fn, self.chunks
    if self.nvars and self.meta["outer_dim"] is not None:  # the outer launch loop's length may depend on a Variable
      outer = global_size[self.meta["outer_dim"]]
      chunks = _pieces(outer, self._chunk_count(outer) if self.meta["splittable"] else 1)
    if self.reduce_chunks is not None:
      partials = self._partials_type()  # one 8-byte slot per piece: the sum's order never depends on who ran it
      base = ctypes.addressof(partials)
      self.pool.run_pulled(self, ptrs, self.reduce_chunks, self.part, self.part_address, base)
      self.fin(*ptrs, base, len(self.reduce_chunks))
    elif len(chunks) == 1:
      fn(*ptrs, *chunks[0])
    else:
      self.pool.run_pulled(self, ptrs, chunks, fn, self.address)
    return time.perf_counter() - st if wait else None


class CPURuntime(Runtime):
  """Loads binaries made by LLVMCompiler into MCJIT engines.

  :param threads: most threads one launch uses (default: the cores this process may use).
  """

  def __init__(self, threads: int | None = None, asynchronous: bool = True) -> None:
    self.threads = threads or cpu_count()
    self.pool, self.asynchronous = _POOL, asynchronous

  def synchronize(self) -> None:
    UNFINISHED.wait()

  def load(self, name: str, binary: bytes) -> Program:
    try:
      meta, obj = unpack_binary(binary)
    except ValueError as e:
      # not from the compile cache (it only returns entries this user's plugrad signed): the caller passed other bytes
      raise DeviceError(f"cannot load CPU kernel {name}: {e}; load only what LLVMCompiler.compile returned in this "
                        f"plugrad-cpu-llvm version") from e
    llvm = _llvm()
    triple = host_target()[0]
    with _llvm_lock:
      install_helpers(llvm, jit_target_machine)
      check_symbols(llvm, obj, name)
      tm = jit_target_machine()
      empty = llvm.parse_assembly("")
      empty.triple = triple
      engine = llvm.create_mcjit_compiler(empty, tm)
      engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
      engine.finalize_object()
      addr = engine.get_function_address(meta["fn"])
      if not addr: raise DeviceError(f"CPU kernel {name}: symbol {meta['fn']} not found in its object file")
      bufs = [ctypes.c_void_p] * meta["nparams"] + [ctypes.c_int32] * meta.get("nvars", 0)
      fns = {"full": ctypes.CFUNCTYPE(None, *bufs, ctypes.c_int64, ctypes.c_int64)(addr)}
      if (split := meta.get("reduce_split")) is not None:
        fns["part"] = ctypes.CFUNCTYPE(None, *bufs, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)(
          engine.get_function_address(split["part"]))
        fns["fin"] = ctypes.CFUNCTYPE(None, *bufs, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address(split["fin"]))
    return CPUProgram(name, meta, fns, engine, self.threads, self.pool, self.asynchronous)


def _pieces(n: int, parts: int) -> list[tuple[int, int]]:
  """0..n cut into at most `parts` contiguous (start, end) pieces of nearly equal size."""
  parts = max(1, min(parts, n))
  return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]
