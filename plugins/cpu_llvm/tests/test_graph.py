"""The graph role: TinyJit replays of CPU kernels run by generated code, with the results of the Python replay."""
import numpy as np
import pytest

from plugrad import Tensor, TinyJit
from plugrad.config import Context


def _step(x, w):
  # small kernels, then one big enough to be split across threads, then small ones again
  h = (x @ w).relu().contiguous()
  big = (Tensor.ones(1024, 1024, device="CPU").contiguous() * h.sum()).contiguous()
  return (h * 2 + 1).sum(axis=1).contiguous(), big.max()


def _run(native: bool):
  rng = np.random.default_rng(0)
  w = Tensor(rng.standard_normal((16, 8)).astype(np.float32), device="CPU").realize()
  step = TinyJit(_step)
  outs = []
  with Context(GRAPH=int(native)):
    for i in range(5):
      x = Tensor(rng.standard_normal((4, 16)).astype(np.float32) + i, device="CPU").realize()
      a, b = step(x, w)
      outs.append((a.numpy().copy(), b.numpy().copy(), x.numpy()))
  return step, outs, w.numpy()


def test_native_replay_matches_python_replay_and_numpy():
  native, got, w = _run(True)
  python, want, _ = _run(False)
  assert native.captured.native is not None and python.captured.native is None
  for (a, b, x), (a2, b2, _) in zip(got, want):
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    h = np.maximum(x @ w, 0)
    np.testing.assert_allclose(a, (h * 2 + 1).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(b, h.sum(), rtol=1e-5)


def test_a_graph_keeps_threaded_launches_as_program_calls():
  from plugrad.registry import get_registry
  if get_registry().device("CPU").runtime.threads < 2: pytest.skip("one CPU thread: no launch is split across threads")
  step, _, _ = _run(True)
  calls = step.captured.native.run.calls
  assert any(ln is not None for _, ln in calls) and any(ln is None for _, ln in calls)
