"""The graph role: TinyJit replays of CPU kernels run by generated code, with the results of the Python replay."""
import numpy as np
import pytest

from plugrad import Tensor, TinyJit
from plugrad.config import Context


def _step(x, w, z):
  # small kernels, then one big enough to be split across threads, then small ones and a split reduction
  h = (x @ w).relu().contiguous()
  big = (Tensor.ones(1024, 1024, device="CPU").contiguous() * h.sum()).contiguous()
  # one value from a long, costly loop: a kernel that splits its reduction into partial sums
  wave = ((z * h.mean()).sin().exp().sin().exp() * z.cos().exp().cos().exp()).sum()
  return (h * 2 + 1).sum(axis=1).contiguous(), big.max(), wave


def _run(native: bool):
  rng = np.random.default_rng(0)
  w = Tensor(rng.standard_normal((16, 8)).astype(np.float32), device="CPU").realize()
  z = Tensor(np.arange(60000, dtype=np.float32) * 1e-4, device="CPU").realize()
  step = TinyJit(_step)
  outs = []
  with Context(GRAPH=int(native)):
    for i in range(5):
      x = Tensor(rng.standard_normal((4, 16)).astype(np.float32) + i, device="CPU").realize()
      a, b, c = step(x, w, z)
      outs.append((a.numpy().copy(), b.numpy().copy(), c.numpy().copy(), x.numpy()))
  return step, outs, w.numpy()


def test_native_replay_matches_python_replay_and_numpy():
  native, got, w = _run(True)
  python, want, _ = _run(False)
  assert native.captured.native is not None and python.captured.native is None
  for (a, b, c, x), (a2, b2, c2, _) in zip(got, want):
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    np.testing.assert_array_equal(c, c2)
    h = np.maximum(x @ w, 0)
    np.testing.assert_allclose(a, (h * 2 + 1).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(b, h.sum(), rtol=1e-5)
    z = np.arange(60000, dtype=np.float32) * 1e-4
    wave = np.exp(np.sin(np.exp(np.sin(z * h.mean())))) * np.exp(np.cos(np.exp(np.cos(z))))
    np.testing.assert_allclose(c, wave.sum(), rtol=1e-4)


def test_a_graph_shares_its_runs_between_threads_and_calls_split_reductions():
  from plugrad.registry import get_registry
  threads = get_registry().device("CPU").runtime.threads
  if threads < 2: pytest.skip("one CPU thread: no launch is split across threads")
  step, _, _ = _run(True)
  calls = step.captured.native.run.calls
  runs = [fn for fn, ln in calls if ln is None]
  assert runs and max(r.threads for r in runs) == threads  # the 1024x1024 product: chunks for every thread
  assert any(ln is not None and ln.program.reduce_chunks for _, ln in calls)  # the wave's sum: a Program call
