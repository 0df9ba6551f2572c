"""A realize (or TinyJit replay) whose kernels run on the workers returns while they run (pool.Unfinished): what
reads, writes or launches afterwards waits for them, so every answer is the one a realize that waited gives; a run
over memory the host shares (an array's, a view handed out) is never left going; PLUGRAD_CPU_ASYNC=0 waits at every
realize; a forked child and a second thread see the run finished; a run outlives the schedule cache's entry that made
it; training steps left going give the bits that waiting gives."""
import gc
import os
import threading
from contextlib import contextmanager

import numpy as np
import pytest
from cpu_support import check_in_forked_child

from plugrad import Tensor, TinyJit, nn
from plugrad.config import Config
from plugrad.engine.schedule import NATIVE_AFTER_RUNS, _caches
from plugrad.registry import Registry, get_registry, set_registry
from plugrad_cpu_llvm.pool import UNFINISHED

N = 1024  # a 4 MiB matrix: its row sum is split across the workers, and its run handed to them


@contextmanager
def _cpu_async(value: str):
  """Within it, the process's registry is one whose PLUGRAD_CPU_ASYNC is `value`."""
  prev = set_registry(Registry(Config.from_env({**os.environ, "PLUGRAD_CPU_ASYNC": value})))
  try:
    yield
  finally:
    set_registry(prev)


@pytest.fixture(autouse=True, scope="module")
def _runs_may_be_left_going():
  """A registry whose CPU leaves runs going, whatever PLUGRAD_CPU_ASYNC the suite runs with."""
  with _cpu_async("1"): yield


def _rows(seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal((N, N), dtype=np.float32)


def _left_going(make) -> Tensor:
  """`make()` realized as often as it takes to run from the schedule cache natively (the path that hands the run to
  the workers), asserting that the last realize returned with its run left going."""
  for _ in range(NATIVE_AFTER_RUNS): make().realize()
  out = make().realize()
  _skip_without_workers()
  assert len(UNFINISHED) == 1
  return out


def _skip_without_workers() -> None:
  runtime = get_registry().device("CPU").runtime
  if runtime.threads < 2: pytest.skip("one core: no run is handed to workers")
  if runtime.pool.native() is None: pytest.skip("no native workers on this platform (they need Linux futexes)")


def test_a_realize_returns_with_its_run_going_and_reading_the_result_waits_for_it():
  x = Tensor(_rows()).realize()
  s = _left_going(lambda: x.sum(axis=1))
  np.testing.assert_allclose(s.numpy(), _rows().sum(axis=1), rtol=1e-4, atol=1e-3)
  assert len(UNFINISHED) == 0


def test_a_launch_waits_for_the_run_left_going_before_it_writes_what_that_run_reads():
  x = Tensor(_rows()).realize()
  s = _left_going(lambda: x.sum(axis=1))
  x.assign(x * 0).realize()  # overwrites the input the row sum may still be reading
  np.testing.assert_allclose(s.numpy(), _rows().sum(axis=1), rtol=1e-4, atol=1e-3)
  np.testing.assert_array_equal(x.numpy(), 0)


def test_a_launch_reading_a_run_left_goings_output_sees_it_finished():
  x = Tensor(_rows()).realize()
  y = _left_going(lambda: (x * 2).exp2())
  z = (y.sum(axis=1) + y[:, :1].reshape(N)).realize()
  want = np.exp2(_rows() * 2)
  np.testing.assert_allclose(z.numpy(), want.sum(axis=1) + want[:, 0], rtol=1e-4)


def test_a_tinyjit_replay_returns_with_its_run_going_and_its_output_reads_finished():
  step = TinyJit(lambda x: (x * 2).sum(axis=1).realize())
  for seed in range(3): step(Tensor(_rows(seed)).realize())
  out = step(Tensor(_rows(3)).realize())
  left = len(UNFINISHED)
  np.testing.assert_allclose(out.numpy(), _rows(3).sum(axis=1) * 2, rtol=1e-4, atol=1e-3)
  _skip_without_workers()
  assert left == 1


def test_a_run_left_going_keeps_its_code_when_the_schedule_cache_drops_its_replay():
  x = Tensor(_rows()).realize()
  s = _left_going(lambda: x.sum(axis=1))
  cache = _caches[get_registry()]
  cache.natives.clear()  # what a full cache does to its least recently used schedule's native run
  for _ in range(3): gc.collect()
  np.testing.assert_allclose(s.numpy(), _rows().sum(axis=1), rtol=1e-4, atol=1e-3)


def test_a_run_over_host_shared_memory_finishes_before_the_realize_returns():
  arr = _rows()
  shared = Tensor.from_numpy(arr)
  for _ in range(NATIVE_AFTER_RUNS): (shared * 3).realize()
  out = (shared * 3).realize()
  assert len(UNFINISHED) == 0  # numpy may write `arr` as soon as the realize returns
  arr[:] = 0
  np.testing.assert_allclose(out.numpy(), _rows() * 3, rtol=1e-6)
  y = Tensor(_rows()).realize()
  view = np.asarray(y)  # the tensor's own memory: from now on runs writing it finish before they return
  for _ in range(NATIVE_AFTER_RUNS + 1): y.assign(y + 1).realize()
  assert len(UNFINISHED) == 0
  np.testing.assert_allclose(view, _rows() + NATIVE_AFTER_RUNS + 1, rtol=1e-6)


def test_with_async_off_every_realize_waits_for_its_run():
  with _cpu_async("0"):
    x = Tensor(_rows()).realize()
    for _ in range(NATIVE_AFTER_RUNS + 1): s = x.sum(axis=1).realize()
    assert len(UNFINISHED) == 0
    np.testing.assert_allclose(s.numpy(), _rows().sum(axis=1), rtol=1e-4, atol=1e-3)
  with pytest.raises(ValueError, match="PLUGRAD_CPU_ASYNC"):
    Registry(Config.from_env({"PLUGRAD_CPU_ASYNC": "yes"})).device("CPU").runtime


def _trained_weights() -> tuple[list[float], np.ndarray]:
  """Eight SGD steps of a 512-512-10 MLP on a batch of 256 (steps large enough to be handed to the workers), the loss
  read every fourth step: the losses read and the first layer's weights."""
  rng = np.random.default_rng(0)
  w1, w2 = (Tensor(rng.standard_normal(s, dtype=np.float32) * 0.05, requires_grad=True) for s in ((512, 512), (512, 10)))
  x, y = Tensor(rng.standard_normal((256, 512), dtype=np.float32)), Tensor(rng.integers(0, 10, 256).astype(np.int32))
  opt = nn.optim.SGD([w1, w2], lr=0.1)
  losses = []
  with Tensor.train():
    for i in range(8):
      opt.zero_grad()
      loss = (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)
      loss.backward()
      Tensor.realize(loss, *opt.schedule_step())
      if i % 4 == 3: losses.append(loss.item())
  return losses, w1.numpy()


def test_training_whose_runs_are_left_going_gives_the_same_bits_as_waiting():
  left_going = _trained_weights()
  with _cpu_async("0"): waiting = _trained_weights()
  assert left_going[0] == waiting[0]
  np.testing.assert_array_equal(left_going[1], waiting[1])


def test_synchronize_waits_for_the_run_left_going():
  x = Tensor(_rows()).realize()
  _left_going(lambda: x.sum(axis=1))
  get_registry().device("CPU").synchronize()
  assert len(UNFINISHED) == 0


def test_a_child_forked_while_a_run_is_going_reads_it_finished():
  x = Tensor(_rows()).realize()
  s = _left_going(lambda: x.sum(axis=1))
  check_in_forked_child(lambda: len(UNFINISHED) == 0 and
                        np.allclose(s.numpy(), _rows().sum(axis=1), rtol=1e-4, atol=1e-3))


def test_another_thread_reading_a_run_left_going_sees_it_finished():
  x = Tensor(_rows()).realize()
  s = _left_going(lambda: x.sum(axis=1))
  got: list[np.ndarray] = []
  t = threading.Thread(target=lambda: got.append(s.numpy()))
  t.start()
  t.join(timeout=60)
  np.testing.assert_allclose(got[0], _rows().sum(axis=1), rtol=1e-4, atol=1e-3)


def test_threads_realizing_at_once_each_get_their_answers():
  inputs = [Tensor(_rows(seed)).realize() for seed in range(2)]
  errors: list[BaseException] = []

  def work(i: int) -> None:
    try:
      for _ in range(10):
        np.testing.assert_allclose((inputs[i] * (i + 1)).sum(axis=1).numpy(), _rows(i).sum(axis=1) * (i + 1),
                                   rtol=1e-4, atol=1e-3)
        (inputs[1 - i] + 1).sum(axis=0).realize()  # runs left going by this thread, waited for by either
    except BaseException as e:  # noqa: BLE001 (reported below)
      errors.append(e)
  threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
  for t in threads: t.start()
  for t in threads: t.join(timeout=120)
  assert not errors, errors[0]
