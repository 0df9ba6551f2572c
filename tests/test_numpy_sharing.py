"""Sharing memory with numpy: `Tensor.from_numpy` (like torch.from_numpy) and `np.asarray(tensor)`."""
import gc

import numpy as np
import pytest

from plugrad import Tensor, dtypes
from plugrad.registry import get_registry
from plugrad.testing import available_devices


@pytest.fixture
def host_dev(dev):
  """The API test device, where its kernels use host memory in place (a GPU's do not: from_numpy refuses there
  and np.asarray copies)."""
  if get_registry().device(dev).allocator.from_host(np.zeros(64, np.uint8)) is None:
    pytest.skip(f"{dev}'s kernels cannot use host memory in place")
  return dev


def test_from_numpy_shares_both_ways(host_dev):
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = Tensor.from_numpy(a, device=host_dev)
  assert t.shape == (3, 4) and t.dtype == dtypes.float32
  a[0, 0] = 100.0                           # a write to the array is what the tensor holds
  np.testing.assert_equal((t * 2).numpy()[0, 0], 200.0)
  t.assign(t + 1).realize()                 # a write into the tensor lands in the array
  np.testing.assert_equal(a[1], [5, 6, 7, 8])
  t += 1                                    # in place, as in tinygrad and torch
  t.realize()
  np.testing.assert_equal(a[2], [10, 11, 12, 13])


def test_from_numpy_reads_when_realized_not_when_built(host_dev):
  a = np.ones(8, dtype=np.int32)
  y = Tensor.from_numpy(a, device=host_dev) * 3
  a[:] = 2
  np.testing.assert_equal(y.numpy(), np.full(8, 6))


def test_from_numpy_keeps_the_array_alive(host_dev):
  t = Tensor.from_numpy(np.full((64,), 7, dtype=np.float32), device=host_dev)
  gc.collect()
  garbage = [Tensor.full((64,), 1.0, device=host_dev).contiguous().realize() for _ in range(4)]  # reuse freed blocks
  np.testing.assert_equal(t.numpy(), np.full(64, 7))
  del garbage


@pytest.mark.parametrize("make, why", [
    (lambda: np.ones((4, 4), np.float32).T, "not C-contiguous"),
    (lambda: np.frombuffer(b"\0" * 17, np.uint8)[1:].view(np.float32), "not aligned"),
    (lambda: np.frombuffer(b"\0" * 16, np.float32), "read-only"),
    (lambda: np.arange(4, dtype=np.dtype(np.int32).newbyteorder("S")), "machine's order"),  # it read garbage
])
def test_from_numpy_refuses_what_it_cannot_share(dev, make, why):
  with pytest.raises(ValueError, match=why): Tensor.from_numpy(make(), device=dev)


def test_from_numpy_refuses_overlapping_arrays(host_dev):
  a = np.zeros(16, np.float32)
  t = Tensor.from_numpy(a[:8], device=host_dev)
  with pytest.raises(ValueError, match="overlaps"): Tensor.from_numpy(a[4:], device=host_dev)
  del t
  gc.collect()
  Tensor.from_numpy(a[4:], device=host_dev)  # the first tensor is gone, so is its claim


def test_asarray_views_the_buffer(host_dev):
  t = (Tensor.arange(6, device=host_dev) * 2).reshape(2, 3).realize()
  v = np.asarray(t)
  np.testing.assert_equal(v, [[0, 2, 4], [6, 8, 10]])
  v[0, 0] = 50                              # a view: the tensor sees the write
  assert t.numpy()[0, 0] == 50
  assert t.numpy() is not t.numpy()          # .numpy() copies, as in tinygrad
  with pytest.raises(ValueError, match="views a plugrad tensor"): Tensor.from_numpy(v, device=host_dev)


def test_asarray_view_outlives_the_tensor(dev):
  v = np.asarray(Tensor.full((256,), 3.0, device=dev).contiguous().realize())
  gc.collect()
  for _ in range(4): Tensor.full((256,), 9.0, device=dev).contiguous().realize()  # would reuse a freed block
  np.testing.assert_equal(v, np.full(256, 3.0))


def test_asarray_of_a_view_is_a_strided_view_and_other_arrays_copy(host_dev):
  t = Tensor.arange(12, device=host_dev).reshape(3, 4).realize()
  s = t[:, 1:3]                             # a view of t's buffer, as in torch: the array views t's memory too
  np.testing.assert_equal(np.asarray(s), np.arange(12).reshape(3, 4)[:, 1:3])
  assert np.shares_memory(np.asarray(s), np.asarray(t))
  p = t.permute(1, 0)
  np.asarray(p, copy=False)[0, 1] = 77      # element (1, 0) of t
  assert p.numpy()[0, 1] == 77 and t.numpy()[1, 0] == 77 and p.numpy().flags.c_contiguous
  np.asarray(t, copy=False)[1, 0] = 4       # back, through the whole buffer's array
  flat = t.T.reshape(12)                    # a reshape numpy can only do as a copy: refused without one
  with pytest.raises(ValueError, match="copy=False"): np.asarray(flat, copy=False)
  np.testing.assert_equal(np.asarray(flat), np.arange(12).reshape(3, 4).T.reshape(12))
  with pytest.raises(ValueError, match="copy=False"): np.asarray(t.cast(dtypes.bfloat16), copy=False)
  np.testing.assert_equal(np.array(t, dtype=np.float64), np.arange(12, dtype=np.float64).reshape(3, 4))
  c = np.array(t)                           # np.array copies
  c[0, 0] = 99
  assert t.numpy()[0, 0] == 0


def test_from_numpy_on_a_device_without_host_memory():
  # a device whose allocator cannot use host memory in place says so and names the copy
  reg = get_registry()
  names = [n for n in available_devices() if reg.device(n).allocator.from_host(np.zeros(4, np.uint8)) is None]
  if not names: pytest.skip("no installed device lacks host memory (the OpenCL plugin with pocl is one that does)")
  with pytest.raises(ValueError, match="cannot use host memory in place"): Tensor.from_numpy(np.ones(4, np.float32), device=names[0])
