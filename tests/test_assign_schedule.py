"""Assigns through the scheduler: every pending write into a buffer is applied exactly once and in program
order, a read sees the writes before it, views write through into their buffer, and the memory planner
never frees a buffer a live graph can still read. Each case runs twice: the second run goes through the
structural schedule cache."""
import numpy as np
import pytest

from plugrad import Tensor, TinyJit
from plugrad.scheduler import count_kernels
from plugrad.testing import assert_close

DEV = "PYTHON"


def t(*values) -> Tensor:
  return Tensor(np.array(values, dtype=np.float32), device=DEV).realize()


def twice(case):
  """Run a test body twice (the second time its schedules come from the schedule cache)."""
  def run():
    for _ in range(2): case()
  run.__name__, run.__doc__ = case.__name__, case.__doc__
  return run


@twice
def test_assign_to_a_pending_assign_writes_the_buffer():
  # the nn engineer's case: `loss` holds the first write, which `w.realize()` applies; it must not be applied
  # again, nor its buffer freed, when `loss` is realized later (it reads w's buffer then, as tinygrad does)
  r = np.random.default_rng(0).random((16, 8), dtype=np.float32)
  w = Tensor.empty(8, device=DEV).assign(Tensor.ones(8, device=DEV))
  loss = (Tensor(r, device=DEV) * w).sum()
  w.assign(w * 0.5)
  w.realize()
  assert_close(w, np.full(8, 0.5, np.float32))
  assert loss.item() == pytest.approx((r * 0.5).sum(), rel=1e-5)
  assert_close(w, np.full(8, 0.5, np.float32))


@twice
def test_two_buffers_with_chained_pending_assigns():
  a, b = t(0., 0.), t(1., 1.)
  for _ in range(2):
    x = Tensor([1., 2.], device=DEV)
    a.assign(a + x)
    b.assign(b + x)
  assert_close(Tensor([5., 5.], device=DEV) - a, [3., 1.])
  assert_close(a, [2., 4.])
  assert_close(b, [3., 5.])


@twice
def test_chained_assigns_apply_in_program_order():
  a = t(0., 0.)
  a.assign(a + 1)
  a.assign(a * 3)
  assert count_kernels(a.schedule()) == 2
  assert_close(a, [3., 3.])


@twice
def test_overwriting_assigns_both_run_in_order():
  a = t(5., 5.)
  a.assign(Tensor([1., 2.], device=DEV))
  a.assign(Tensor([7., 8.], device=DEV))
  assert_close(a, [7., 8.])


@twice
def test_read_of_an_older_version_beside_a_newer_one():
  # x reads a before the assign, a + x after it: one kernel needs both versions of one buffer
  a = t(1., 2.)
  x = a * 1
  a.assign(a + 1)
  assert_close(x + a, [3., 5.])
  assert_close(a, [2., 3.])


@twice
def test_assign_reading_an_older_version_than_the_one_it_overwrites():
  a = t(1., 2.)
  x = a * 1
  a.assign(a + 1)
  a.assign(x * 10 + a)
  assert_close(a, [12., 23.])


@twice
def test_reads_realized_with_the_write_see_the_value_before_it():
  w = t(1., 2.)
  loss = (w * 3).sum()
  w.assign(w * 0.5)
  Tensor.realize(loss, w)
  assert loss.item() == 9.0
  assert_close(w, [0.5, 1.])


@twice
def test_kernelized_output_read_by_two_graphs_outlives_its_tensor():
  a = t(1., 2.)
  k = (a + 1).kernelize()
  y, u = k * 2, k * 3
  del k
  assert_close(y, [4., 6.])
  assert_close(u, [6., 9.])


@twice
def test_kernelized_assign_then_another_assign():
  a = t(1., 2.)
  a.assign(a + 1).kernelize()
  y = a * 2
  a.assign(a * 10)
  assert_close(y, [4., 6.])
  assert_close(a, [20., 30.])


def test_self_assign_is_a_no_op():
  a = t(1., 2.)
  assert a.assign(a).uop is a.uop
  assert count_kernels(a.schedule()) == 0


@twice
def test_assign_through_a_shrink_writes_the_buffer():
  b = t(0., 0., 0., 0., 0., 0.)
  v = b.shrink(((0, 4),)).assign(Tensor([1., 2., 3., 4.], device=DEV))
  assert count_kernels(v.schedule()) == 1  # one store, as a plain assign
  v.realize()  # runs the kernel schedule() made
  assert_close(b, [1., 2., 3., 4., 0., 0.])
  assert_close(v, [1., 2., 3., 4.])


VIEWS = [  # (name, view of a realized 3x4 buffer, value written, numpy index of the same positions)
  ("permute", lambda b: b.T, np.full((4, 3), -1, np.float32), (slice(None),)),
  ("columns", lambda b: b[:, 1:3], np.array([[7., 8.]], np.float32), (slice(None), slice(1, 3))),
  ("row of a reshape", lambda b: b.reshape(12)[4:8], np.arange(4, dtype=np.float32) + 90, (1,)),
  ("strided", lambda b: b.reshape(12)[::3].reshape(2, 2), -np.ones((2, 2), np.float32), None),
  ("flip", lambda b: b.flip(1)[0], np.array([1., 2., 3., 4.], np.float32), (0, slice(None, None, -1))),
]


@pytest.mark.parametrize("name,view,value,where", VIEWS, ids=[v[0] for v in VIEWS])
def test_assign_through_a_view_writes_the_buffer(name, view, value, where):
  for _ in range(2):
    start = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = Tensor(start, device=DEV).realize()
    view(b).assign(Tensor(value, device=DEV)).realize()
    want = start.copy()
    if where is None: want.reshape(12)[::3] = value.reshape(4)
    elif name == "permute": want[...] = value.T
    else: want[where] = value
    assert_close(b, want)


@twice
def test_assign_through_a_view_reading_the_same_buffer():
  b = t(0., 1., 2., 3., 4., 5., 6., 7.)
  b[1:8].assign(b[0:7]).realize()  # overlapping: the old values are read before any is written
  assert_close(b, [0., 0., 1., 2., 3., 4., 5., 6.])


def test_assign_into_an_expanded_view_is_an_error():
  b = t(1.)
  with pytest.raises(ValueError, match="expanded view"): b.expand(3).assign(Tensor([1., 2., 3.], device=DEV))


def test_jit_replays_chained_and_view_assigns():
  w, v = t(0., 0.), t(0., 0.)

  @TinyJit
  def step(x):
    w.assign(w + x)
    w.assign(w * 2)
    v[0:1].assign(v[0:1] + x[0:1]).realize()
    return (w * 1).sum()

  outs = [step(Tensor([1., 1.], device=DEV)).item() for _ in range(4)]
  assert outs == [4., 12., 28., 60.]
  assert_close(w, [30., 30.])
  assert_close(v, [4., 0.])


def test_contiguous_of_a_contiguous_range_is_that_view_and_the_view_writes_through():
  # x[1:3] is contiguous already: contiguous() returns it, sharing a's memory (torch; tinygrad 0.14 prints the
  # same ones for w), and the view it was made from still writes into a
  a = Tensor.zeros(4, 4, device=DEV).contiguous().realize()
  v = a[1:3]
  w = v.contiguous().realize()
  assert w.schedule() == []
  v.assign(Tensor.ones(2, 4, device=DEV)).realize()
  assert_close(a, np.array([[0] * 4, [1] * 4, [1] * 4, [0] * 4], np.float32))
  assert_close(w, np.ones((2, 4), np.float32))
  s = a[:, 1:3].contiguous().realize()  # not one range: a copy of its own, which later writes leave alone
  a.assign(a * 0).realize()
  assert_close(s, np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.float32))


@twice
def test_assigns_that_each_read_what_the_other_writes():
  # y *= x reads the old x, and x.assign(y - y*0) the old y: each must run before the other's write, which the
  # scheduler reported as a cycle; one of them now reads a copy made before the other writes
  x, y = t(1.0, 2.0), t(3.0, 4.0)
  c = y - y * 0
  y *= x
  x.assign(c)
  Tensor.realize(x, y)
  assert x.tolist() == [3.0, 4.0] and y.tolist() == [3.0, 8.0]
  a, b = t(1.0, 2.0), t(5.0, 6.0)
  product = a * b
  b.assign(a + b)
  a.assign(product)
  Tensor.realize(a, b)
  assert a.tolist() == [5.0, 12.0] and b.tolist() == [6.0, 8.0]
