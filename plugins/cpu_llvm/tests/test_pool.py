"""The runtime's workers (plugrad_cpu_llvm.pool): a launch cut into chunks runs each chunk exactly once, whichever
threads take them, from any Python thread, in a forked child, and through the Python pool where there are no
native workers, each thread first from its own contiguous group; a job started runs while its caller does other
work, until the caller finishes it; a dropped pool's workers leave."""
import ctypes
import gc
import os
import threading
import time
import weakref

import numpy as np
import pytest
from cpu_support import check_in_forked_child

from plugrad import Tensor
from plugrad.engine.compile import compile_for
from plugrad.registry import get_registry
from plugrad_cpu_llvm import runtime as rt
from plugrad_cpu_llvm.compiler import _llvm_lock, jit_module
from plugrad_cpu_llvm.pool import NativePool


def _loaded(t: Tensor, threads: int):
  """The kernel that realizes `t` (its inputs realized), loaded by a runtime of `threads` threads, and its buffers."""
  item = t.schedule()[-1]
  device = get_registry().device(item.device)
  ck = compile_for(device, item.ast)
  prog = rt.CPURuntime(threads).load(ck.program.name, ck.binary)
  for b in item.bufs: b.ensure_allocated()
  return prog, item.bufs


def _counter(threads: int):
  """A launch of x += 1 on a fresh x of zeros, by a runtime of `threads` threads: (launch it, read x, its chunks).
  A chunk run twice (or never) shows in the counts."""
  x = Tensor.zeros(600, 2000).contiguous().realize()
  prog, bufs = _loaded(x.assign(x + 1), threads)
  out = next(b for b in bufs if b.size == 600 * 2000)
  return lambda: prog(*(b.raw for b in bufs)), lambda: out.numpy().reshape(600, 2000), len(prog.chunks)


def _increment(threads: int, times: int) -> tuple[np.ndarray, int]:
  launch, read, chunks = _counter(threads)
  for _ in range(times): launch()
  return read(), chunks


def test_a_split_launch_runs_every_chunk_exactly_once():
  got, chunks = _increment(threads=4, times=50)
  assert chunks > 4  # several chunks per thread
  np.testing.assert_array_equal(got, np.full((600, 2000), 50, np.float32))


def test_a_split_reduction_gives_the_same_bits_whichever_threads_ran_its_pieces():
  z = Tensor(np.arange(60000, dtype=np.float32) * 1e-4).realize()
  wave = ((z * 0.5).sin().exp().sin().exp() * z.cos().exp().cos().exp()).sum()  # costly enough to split
  prog, bufs = _loaded(wave, threads=4)
  assert prog.reduce_chunks is not None
  results = set()
  for _ in range(20):
    prog(*(b.raw for b in bufs))
    results.add(bufs[0].numpy()[0])
  assert len(results) == 1  # the pieces, not the threads that ran them, decide the order of the sum
  zn = np.arange(60000, dtype=np.float32) * 1e-4
  want = (np.exp(np.sin(np.exp(np.sin(zn * 0.5)))) * np.exp(np.cos(np.exp(np.cos(zn))))).sum()
  np.testing.assert_allclose(results.pop(), want, rtol=1e-4)


class _Recorder:
  """A stand-in kernel function of one buffer (a ctypes callback) that records which thread ran which piece; each
  thread's first piece waits until `threads` threads have taken one, so all of them take a first piece."""

  def __init__(self, threads: int) -> None:
    self.ran: dict[int, list[int]] = {}
    self.meet = threading.Barrier(threads, timeout=60)
    self.fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(self._run)
    self.address = ctypes.cast(self.fn, ctypes.c_void_p).value
    self.nparams, self.nvars, self.threads = 1, 0, threads  # what run_pulled reads of a program

  def _run(self, buf, start: int, end: int) -> None:
    mine = self.ran.setdefault(threading.get_ident(), [])
    mine.append(start)
    if len(mine) == 1: self.meet.wait()


@pytest.mark.parametrize("native", [True, False], ids=["native workers", "python pool"])
def test_each_thread_takes_its_own_contiguous_group_of_chunks_first(native, monkeypatch):
  # with every thread running, each streams through one contiguous range (as a static split would), not every
  # other chunk of the whole launch
  pool = rt._Pool()
  if not native: monkeypatch.setattr(rt._Pool, "native", lambda self: None)
  elif pool.native() is None: pytest.skip("no native workers in this process (not Linux on x86-64 or arm64)")
  rec = _Recorder(threads=2)
  pool.run_pulled(rec, [0], rt._pieces(12, 6), rec.fn, rec.address)  # pieces start at 0, 2, .., 10
  assert sorted(s for ran in rec.ran.values() for s in ran) == [0, 2, 4, 6, 8, 10]
  assert sorted(ran[0] for ran in rec.ran.values()) == [0, 6]  # the first piece of each thread's own group


def test_a_worker_that_starts_after_the_first_job_was_published_still_takes_it(monkeypatch):
  # on a loaded machine a worker thread may reach its loop late: taking the generation it then saw as its last, it
  # missed the job already published, and a run needing two threads (the recorder's first pieces meet) ran alone
  pool = rt._Pool()
  if pool.native() is None: pytest.skip("no native workers in this process (not Linux on x86-64 or arm64)")
  start, late = threading.Thread.start, []
  monkeypatch.setattr(threading.Thread, "start", lambda self: late.append(self))  # the workers: started below
  rec = _Recorder(threads=2)
  rec.meet = threading.Barrier(2, timeout=10)
  start(threading.Timer(0.3, lambda: [start(t) for t in late]))  # while this thread waits in its first piece
  pool.run_pulled(rec, [0], rt._pieces(12, 6), rec.fn, rec.address)
  assert len(late) == pool.native().workers and len(rec.ran) == 2
  assert sorted(s for ran in rec.ran.values() for s in ran) == [0, 2, 4, 6, 8, 10]


def test_launches_from_two_threads_at_once_are_each_complete():
  # one thread's launch may find the workers busy with the other's: it runs its chunks alone
  counters = [_counter(threads=4) for _ in range(2)]

  def count(launch) -> None:
    for _ in range(40): launch()
  workers = [threading.Thread(target=count, args=(launch,)) for launch, _, _ in counters]
  for w in workers: w.start()
  for w in workers: w.join(120)
  assert not any(w.is_alive() for w in workers)
  for _, read, _ in counters: np.testing.assert_array_equal(read(), np.full((600, 2000), 40, np.float32))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_split_launches_without_the_parents_workers():
  _increment(threads=4, times=1)  # the parent's workers exist before the fork
  check_in_forked_child(lambda: bool((_increment(threads=4, times=3)[0] == 3).all()))


def test_without_native_workers_the_python_pool_runs_the_chunks(monkeypatch):
  monkeypatch.setattr(rt._Pool, "native", lambda self: None)
  got, chunks = _increment(threads=4, times=20)
  assert chunks >= 4
  np.testing.assert_array_equal(got, np.full((600, 2000), 20, np.float32))


def test_a_dropped_pool_lets_its_workers_leave():
  pool = NativePool.create(3)
  if pool is None: pytest.skip("no native workers in this process (not Linux on x86-64 or arm64)")
  with _llvm_lock: engine = jit_module("define void @job(ptr %a, ptr %b) {\n  ret void\n}\n")
  pool.run(engine.get_function_address("job"), 0, 0, helpers=3)
  workers = list(pool._threads)
  assert len(workers) == 3 and all(w.is_alive() for w in workers)
  dropped = weakref.ref(pool)
  del pool
  gc.collect()
  assert dropped() is None
  for w in workers: w.join(30)
  assert not any(w.is_alive() for w in workers)


def test_workers_stopped_before_they_enter_their_loop_still_leave():
  # pools stopped right after they start their workers, while both cores are busy: some workers have not reached
  # their wait loop when the stop comes
  if NativePool.create(1) is None: pytest.skip("no native workers in this process (not Linux on x86-64 or arm64)")
  busy = threading.Event()

  def load() -> None:
    m = np.ones((256, 256), np.float32)
    while not busy.is_set(): m @ m
  loaders = [threading.Thread(target=load) for _ in range(2)]
  for t in loaders: t.start()
  workers = []
  try:
    for _ in range(100):
      pool = NativePool.create(2)
      pool._start()
      workers += pool._threads
      pool.stop()
  finally:
    busy.set()
    for t in loaders: t.join()
  for w in workers: w.join(10)
  assert not any(w.is_alive() for w in workers)


def test_a_started_job_runs_while_the_caller_does_other_work_and_finishes_with_its_part():
  # NativePool.start hands the job to the workers and returns; the caller's finish() runs its own part and waits.
  # Each thread that enters adds 1 at a, and the first spins until a second has entered too: the worker provably ran
  # while the caller was away, and finish() returned only after every thread left
  pool = NativePool.create(1)
  if pool is None: pytest.skip("no native workers in this process (not Linux on x86-64 or arm64)")
  with _llvm_lock: engine = jit_module(
    "define void @job(ptr %a, ptr %b) {\nentry:\n  %n = atomicrmw add ptr %a, i64 1 seq_cst\n  %first = icmp eq i64 %n, 0\n"
    "  br i1 %first, label %wait, label %exit\nwait:\n  %k = phi i64 [0, %entry], [%k1, %wait]\n"
    "  %c = load atomic i64, ptr %a seq_cst, align 8\n  %k1 = add i64 %k, 1\n  %both = icmp sge i64 %c, 2\n"
    "  %long = icmp ugt i64 %k1, 100000000\n  %stop = or i1 %both, %long\n  br i1 %stop, label %exit, label %wait\n"
    "exit:\n  ret void\n}\n")
  job = engine.get_function_address("job")
  counts = (ctypes.c_int64 * 2)()
  finish = pool.start(job, ctypes.addressof(counts), 0, helpers=1)
  deadline = time.time() + 30
  while counts[0] == 0 and time.time() < deadline: time.sleep(0.001)  # the worker entered on its own
  assert counts[0] == 1
  finish()
  assert counts[0] == 2
  # the workers are free again: a second job runs with them, and one started while a job is out runs alone
  finish = pool.start(job, ctypes.addressof(counts), 0, helpers=1)
  while counts[0] == 2 and time.time() < deadline: time.sleep(0.001)
  alone = (ctypes.c_int64 * 2)(1, 0)
  pool.run(job, ctypes.addressof(alone), 0, helpers=1)  # the workers are busy: this thread alone, no deadlock
  assert alone[0] == 2
  finish()
  assert counts[0] == 4
