"""A view of a realized buffer (a slice, a transpose, a reshape or expand of it) stays a view when it is
realized, as in tinygrad and torch: it costs no kernel and shows what later writes into the buffer put there."""
import numpy as np

from plugrad import Tensor


def test_realizing_a_view_runs_nothing_and_later_writes_show_through(dev):
  b = Tensor(np.arange(8, dtype=np.float32), device=dev).realize()
  v, t = b[2:6], b.reshape(2, 4).T
  assert v.schedule() == [] and t.schedule() == []  # nothing to run
  v.realize(), t.realize()
  b.assign(Tensor(np.full(8, 9, np.float32), device=dev)).realize()
  np.testing.assert_equal(v.numpy(), np.full(4, 9))  # tinygrad 0.14 gives the same
  b.assign(Tensor.arange(8, device=dev).float()).realize()
  np.testing.assert_equal(t.numpy(), np.arange(8).reshape(2, 4).T)
  assert t.numpy().flags.c_contiguous


def test_a_view_of_a_pending_assign_realizes_the_assign_and_stays_a_view(dev):
  b = Tensor(np.arange(8, dtype=np.float32), device=dev).realize()
  b.assign(b * 2)
  v = b[2:6]
  np.testing.assert_equal(v.realize().numpy(), [4, 6, 8, 10])
  np.testing.assert_equal(b.numpy(), np.arange(8) * 2)  # the assign ran, once
  b.assign(b + 1).realize()
  np.testing.assert_equal(v.numpy(), [5, 7, 9, 11])  # tinygrad 0.14 gives the same


def test_views_of_views_and_expands_read_in_order(dev):
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  x = Tensor(a, device=dev).realize()
  cases = [(x.permute(2, 0, 1)[1:3, :, ::-1], a.transpose(2, 0, 1)[1:3, :, ::-1]),
           (x[:, 1:2].expand(2, 5, 4), np.broadcast_to(a[:, 1:2], (2, 5, 4))),
           (x.flip(0).reshape(6, 4)[::2], a[::-1].reshape(6, 4)[::2])]
  for view, want in cases:
    np.testing.assert_equal(view.realize().numpy(), want)
    np.testing.assert_equal((view + 0).numpy(), want)  # a kernel reading the view agrees


def test_computed_results_still_get_buffers_of_their_own(dev):
  b = Tensor(np.arange(8, dtype=np.float32), device=dev).realize()
  c = (b[2:6] * 2).realize()  # computed: its own buffer, which later writes into b do not change
  b.assign(b * 0).realize()
  np.testing.assert_equal(c.numpy(), [4, 6, 8, 10])


def test_contiguous_of_what_is_contiguous_already_is_itself(dev):
  x = Tensor(np.arange(8, dtype=np.float32), device=dev).realize()
  assert x.contiguous() is x and x[2:6].contiguous().schedule() == []  # torch's rule; tinygrad runs no kernel either
  c = x[2:6].contiguous().realize()
  x.assign(x * 10).realize()
  np.testing.assert_equal(c.numpy(), [20, 30, 40, 50])  # tinygrad 0.14 gives the same
  assert len(x[::2].contiguous().schedule()) == 1  # strided: a copy


def test_sliding_windows_match_numpy_for_every_stride_and_dilation():
  # the windowed view under conv2d and the poolings, built as view nodes alone, against numpy's
  from numpy.lib.stride_tricks import sliding_window_view
  xn = np.arange(2 * 3 * 11, dtype=np.int32).reshape(2, 3, 11)
  x = Tensor(xn, device="PYTHON")
  for k, stride, dilation in [(1, 1, 1), (3, 1, 1), (3, 2, 1), (2, 3, 1), (3, 1, 2), (2, 2, 3), (4, 3, 2)]:
    span = dilation * (k - 1) + 1
    want = sliding_window_view(xn, span, axis=-1)[..., ::stride, ::dilation]
    got = x._pool((k,), (stride,), (dilation,))
    assert got.shape == want.shape and (got.numpy() == want).all(), (k, stride, dilation)
