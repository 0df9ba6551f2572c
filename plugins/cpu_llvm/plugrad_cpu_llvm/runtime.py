"""The runtime role: load object files with LLVM's MCJIT and call kernels through ctypes.

Every kernel is `void kernel(ptr buf0, ..., ptr bufN-1, i64 start, i64 end)`: it runs the
iterations start..end-1 of its outermost launch loop. ctypes releases the GIL during the call, so
a launch big enough to be worth it is cut into contiguous chunks (up to CHUNKS_PER_THREAD per
thread, each worth at least SPLIT_THRESHOLD of work) that the calling thread and a persistent pool
pull from a shared counter: a thread whose core is busy with another process takes fewer chunks
instead of stalling the launch with a fixed share, and a pool thread that has not started by the
time the chunks are gone is cancelled, not waited for. The chunk boundaries depend only on the
kernel and the thread count, never on timing, so results are the same run to run.
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

from plugrad_cpu_llvm.compiler import _llvm, _llvm_lock, host_target, unpack_binary
from plugrad_cpu_llvm.support import check_symbols, install_helpers

#: A launch whose estimated cost (bytes moved + operations) is below this runs on one thread: handing
#: chunks to the pool costs 25-35 us (measured on the 2-core machine: a 1M-flop matmul ran in 10 us on
#: one thread and 38 us cut in four), which only a launch of about 2M cost units or more wins back.
SPLIT_THRESHOLD = 1 << 21
#: The most chunks per thread a launch is cut into: enough that a slowed thread's share is small,
#: few enough that each ctypes call (about a microsecond) stays negligible.
CHUNKS_PER_THREAD = 8


def _chunk_count(outer: int, cost: float, threads: int, threshold: float = SPLIT_THRESHOLD) -> int:
  """How many chunks a launch of `outer` iterations and estimated `cost` is cut into, each worth at least
  `threshold` (what handing out a chunk costs decides it: see SPLIT_THRESHOLD, graph.GRAPH_SPLIT_THRESHOLD)."""
  if threads <= 1 or cost < threshold: return 1
  return max(1, min(outer, threads * CHUNKS_PER_THREAD, max(threads, int(cost // threshold))))


def _run_pulled(fn: Any, args: list[int], pieces: list[tuple[int, int]], threads: int, pool: _Pool,
                extra: Any = None) -> None:
  """Run fn(*args, start, end[, extra(i)]) for every piece, on the calling thread and up to `threads` - 1
  pool threads, each pulling the next piece from a shared counter until none is left."""
  counter = itertools.count()  # next() on it is atomic under the GIL

  def work() -> None:
    while (i := next(counter)) < len(pieces):
      s, e = pieces[i]
      if extra is None: fn(*args, s, e)
      else: fn(*args, s, e, extra(i))
  run_on_threads(work, min(len(pieces), threads), pool)


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
  """A lazily started pool of (cores - 1) worker threads: one per runtime, so one per CPU device."""

  def __init__(self) -> None:
    self._pool: ThreadPoolExecutor | None = None
    self._lock = threading.Lock()

  def get(self, workers: int) -> ThreadPoolExecutor:
    if self._pool is None:
      with self._lock:
        if self._pool is None: self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="plugrad-cpu")
    return self._pool


_POOL_WORKERS = max(1, cpu_count() - 1)


class CPUProgram(Program):
  """A loaded kernel. `threads` caps how many chunks a launch is split into."""

  def __init__(self, name: str, meta: dict[str, Any], fns: dict[str, Any], engine: Any, threads: int, pool: _Pool):
    self.name, self.meta, self._engine = name, meta, engine  # the engine owns the code: keep it alive
    self.pool = pool
    self.fn, self.threads = fns["full"], threads
    self.nparams: int = meta["nparams"]
    self.nvars: int = meta.get("nvars", 0)
    self.outer: int = meta["outer"]  # iterations of the outermost launch loop (1: no launch loop)
    self.chunks = _pieces(self.outer, _chunk_count(self.outer, meta["cost"], threads) if meta["splittable"] else 1)
    # a one-element reduction big enough to split: pieces of its outer reduce loop write partials `fin` combines
    split = meta.get("reduce_split")
    pieces = _pieces(split["outer"], _chunk_count(split["outer"], meta["cost"], threads)) if split else []
    self.reduce_chunks = pieces if len(pieces) > 1 else None
    self._partials_type = ctypes.c_int64 * len(self.reduce_chunks) if self.reduce_chunks else None
    self.part, self.fin = fns.get("part"), fns.get("fin")
    self.address: int = ctypes.cast(self.fn, ctypes.c_void_p).value or 0  # where the graph role calls the kernel

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] | None = None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    if len(bufs) != self.nparams:
      raise DeviceError(f"CPU kernel {self.name} takes {self.nparams} buffers, got {len(bufs)}")
    if len(vals) != self.nvars:
      raise DeviceError(f"CPU kernel {self.name} takes {self.nvars} Variable value(s), got {len(vals)}")
    st = time.perf_counter() if wait else 0.0
    ptrs = [b.addr for b in bufs] + list(vals)  # the Variables' values follow the buffers
    fn, chunks = self.fn, self.chunks
    if self.nvars and self.meta["outer_dim"] is not None:  # the outer launch loop's length may depend on a Variable
      outer = global_size[self.meta["outer_dim"]]
      chunks = _pieces(outer, _chunk_count(outer, self.meta["cost"], self.threads) if self.meta["splittable"] else 1)
    if self.reduce_chunks is not None:
      pieces = self.reduce_chunks
      partials = self._partials_type()  # one 8-byte slot per piece: the sum's order never depends on who ran it
      base = ctypes.addressof(partials)
      _run_pulled(self.part, ptrs, pieces, self.threads, self.pool, lambda i: base + 8 * i)
      self.fin(*ptrs, base, len(pieces))
    elif len(chunks) == 1:
      fn(*ptrs, *chunks[0])
    else:
      _run_pulled(fn, ptrs, chunks, self.threads, self.pool)
    return time.perf_counter() - st if wait else None


class CPURuntime(Runtime):
  """Loads binaries made by LLVMCompiler into MCJIT engines.

  :param threads: most threads one launch uses (default: the cores this process may use).
  """

  def __init__(self, threads: int | None = None) -> None:
    self.threads = threads or cpu_count()
    # each CPU device (CPU:0, CPU:1) has its own runtime and so its own worker threads: two devices' launches
    # from two threads (sharded work) never wait on one pool
    self.pool = _Pool()

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
      install_helpers(llvm, _jit_target_machine)
      check_symbols(llvm, obj, name)
      tm = _jit_target_machine()
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
    return CPUProgram(name, meta, fns, engine, self.threads, self.pool)


def _jit_target_machine() -> Any:
  """The host's target machine for MCJIT."""
  triple, cpu, feats = host_target()
  return _llvm().Target.from_triple(triple).create_target_machine(cpu=cpu, features=feats, opt=0, reloc="pic",
                                                                   codemodel="default", jit=True)


def _pieces(n: int, parts: int) -> list[tuple[int, int]]:
  """0..n cut into at most `parts` contiguous (start, end) pieces of nearly equal size."""
  parts = max(1, min(parts, n))
  return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]
