"""Random numbers are drawn on the device from (seed, counter): reproducible after manual_seed, with the
distribution asked for, on every device."""
import numpy as np
import pytest

from plugrad import Tensor, TinyJit, dtypes


def test_seeded_draws_repeat_and_differ_between_draws(dev):
  Tensor.manual_seed(7)
  a, b = Tensor.rand(1000, device=dev).numpy(), Tensor.rand(1000, device=dev).numpy()
  Tensor.manual_seed(7)
  np.testing.assert_array_equal(Tensor.rand(1000, device=dev).numpy(), a)
  assert not np.array_equal(a, b)
  Tensor.manual_seed(8)
  assert not np.array_equal(Tensor.rand(1000, device=dev).numpy(), a)


def test_a_tinyjit_replay_after_manual_seed_draws_what_eager_code_draws(dev):
  # the captured kernels kept the first seed's keys as constants and the counter it had: reseeding did not reach them
  Tensor.manual_seed(7)
  eager = [Tensor.rand(3, device=dev).numpy() for _ in range(3)]

  @TinyJit
  def noisy(x: Tensor) -> Tensor: return x + Tensor.rand(3, device=dev)
  for _ in range(3):  # capture, then replays
    Tensor.manual_seed(7)
    for want in eager: np.testing.assert_array_equal(noisy(Tensor.zeros(3, device=dev).contiguous()).numpy(), want)


def test_devices_draw_the_same_stream():
  Tensor.manual_seed(3)
  a = Tensor.randn(257, device="PYTHON").numpy()
  Tensor.manual_seed(3)
  np.testing.assert_allclose(Tensor.randn(257, device="CPU").numpy(), a, rtol=1e-5, atol=1e-6)


def test_distributions():
  Tensor.manual_seed(0)
  u = Tensor.rand(200_000).numpy()
  assert u.dtype == np.float32 and 0 <= u.min() and u.max() < 1
  assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
  assert np.histogram(u, 10, (0, 1))[0].min() > 19_000  # no empty or starved bins
  z = Tensor.randn(200_000).numpy()
  assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01 and np.isfinite(z).all()
  assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.005
  n = Tensor.normal(50_000, mean=3.0, std=0.5).numpy()
  assert abs(n.mean() - 3) < 0.01 and abs(n.std() - 0.5) < 0.01
  v = Tensor.uniform(50_000, low=-2.0, high=6.0).numpy()
  assert -2 <= v.min() and v.max() < 6 and abs(v.mean() - 2) < 0.05


def test_randint_covers_its_range_uniformly():
  Tensor.manual_seed(1)
  r = Tensor.randint(70_000, low=-3, high=4).numpy()
  assert r.dtype == np.int32 and r.min() == -3 and r.max() == 3
  assert np.bincount(r + 3).min() > 9_500
  assert Tensor.randint(5, low=0, high=2**32, dtype=dtypes.int64).dtype == dtypes.int64
  with pytest.raises(ValueError, match="low < high"): Tensor.randint(3, low=5, high=5)
  with pytest.raises(TypeError, match="integer bounds"): Tensor.randint(3, high=2.5)
  # bounds the dtype cannot hold raise, as torch's (int8 values of [0, 1000) wrapped into -128..127)
  with pytest.raises(ValueError, match="does not fit int8"): Tensor.randint(3, low=0, high=1000, dtype=dtypes.int8)
  with pytest.raises(ValueError, match="does not fit uint8"): Tensor.randint(3, low=-1, high=5, dtype=dtypes.uint8)


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float64])
def test_low_precision_uniforms_never_round_up_to_one(dt):
  Tensor.manual_seed(2)
  u = Tensor.rand(50_000, dtype=dt)
  assert u.dtype == dt
  vals = u.float().numpy() if dt == dtypes.bfloat16 else u.numpy()
  assert vals.min() >= 0 and vals.max() < 1 and len(np.unique(vals)) > 200


def test_randperm_is_a_permutation():
  Tensor.manual_seed(4)
  p = Tensor.randperm(100).numpy()
  assert sorted(p.tolist()) == list(range(100)) and p.tolist() != list(range(100))
