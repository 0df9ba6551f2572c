"""The scheduler's fusion decisions, pinned as kernel counts for known graphs."""
import dataclasses
import gc
import sys

import numpy as np
import pytest

from plugrad import Context, Tensor
from plugrad.engine import lower_for
from plugrad.registry import get_registry
from plugrad.scheduler import count_kernels
from plugrad.testing import assert_close, available_devices
from plugrad.uops import Ops


def realized(*shape, seed=0):
  rng = np.random.default_rng(seed)
  return Tensor(rng.standard_normal(shape).astype(np.float32), device="PYTHON").realize()


@pytest.fixture
def abc():
  return realized(4, 4, seed=1), realized(4, 4, seed=2), realized(4, 4, seed=3)


def kernels(*ts: Tensor) -> int:
  return count_kernels(ts[0].schedule(*ts[1:]))


def np_softmax(a):
  e = np.exp(a - a.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


# (name, plugrad graph, numpy reference, compute kernels); a, b, c, d are realized 4x4 inputs
KERNEL_COUNTS = [
  ("a+b+c", lambda a, b, c, d: a + b + c, lambda a, b, c, d: a + b + c, 1),
  ("(a*b).sum()", lambda a, b, c, d: (a * b).sum(), lambda a, b, c, d: (a * b).sum(), 1),
  ("(a*b).sum().relu()", lambda a, b, c, d: (a * b).sum().relu(), lambda a, b, c, d: np.maximum((a * b).sum(), 0), 1),
  ("(a+b).permute(1,0)+c", lambda a, b, c, d: (a + b).permute(1, 0) + c, lambda a, b, c, d: (a + b).T + c, 1),
  ("a.sum(0)+b[0]", lambda a, b, c, d: a.sum(0) + b[0], lambda a, b, c, d: a.sum(0) + b[0], 1),
  ("(x+y).contiguous()+z", lambda a, b, c, d: (a + b).contiguous() + c, lambda a, b, c, d: a + b + c, 2),
  ("x.sum(-1)+y.max(-1)", lambda a, b, c, d: a.sum(-1) + b.max(-1), lambda a, b, c, d: a.sum(-1) + b.max(-1), 1),
  ("a@b + c@d", lambda a, b, c, d: a @ b + c @ d, lambda a, b, c, d: a @ b + c @ d, 1),
  ("(a+b).pad(1, value=1).sum()", lambda a, b, c, d: (a + b).pad(((1, 1), (1, 1)), value=1).sum(),
   lambda a, b, c, d: np.pad(a + b, 1, constant_values=1).sum(), 1),
  ("softmax", lambda a, b, c, d: a.softmax(-1), lambda a, b, c, d: np_softmax(a), 3),
  ("(a@b)@c", lambda a, b, c, d: (a @ b) @ c, lambda a, b, c, d: (a @ b) @ c, 2),
  # issue 17: never more kernels than tinygrad 0.14 (its count in each comment)
  ("a.contiguous()", lambda a, b, c, d: a.contiguous(), lambda a, b, c, d: a, 0),  # a buffer already: 0
  ("a.reshape(16).contiguous()", lambda a, b, c, d: a.reshape(16).contiguous(),
   lambda a, b, c, d: a.reshape(16), 0),  # 0
  ("a.T.contiguous()", lambda a, b, c, d: a.T.contiguous(), lambda a, b, c, d: a.T, 1),  # a real copy: 1
  ("(a+b).contiguous().contiguous()", lambda a, b, c, d: (a + b).contiguous().contiguous(),
   lambda a, b, c, d: a + b, 1),  # 1
  ("a.contiguous()+b", lambda a, b, c, d: a.contiguous() + b, lambda a, b, c, d: a + b, 1),  # 1
  # a contiguous range of a buffer is contiguous already: its readers fuse the view (tinygrad 0.14: 1)
  ("a[1:3].contiguous()*2", lambda a, b, c, d: a[1:3].contiguous() * 2, lambda a, b, c, d: a[1:3] * 2, 1),
  ("a[2].contiguous()+b[0]", lambda a, b, c, d: a[2].contiguous() + b[0], lambda a, b, c, d: a[2] + b[0], 1),
  ("a[:, 1:3].contiguous()*2", lambda a, b, c, d: a[:, 1:3].contiguous() * 2, lambda a, b, c, d: a[:, 1:3] * 2, 2),
  ("a.sum(1)+a.max(1)", lambda a, b, c, d: a.sum(1) + a.max(1), lambda a, b, c, d: a.sum(1) + a.max(1), 1),  # 1
  ("a.sum(1)+a.T.sum(0)", lambda a, b, c, d: a.sum(1) + a.T.sum(0), lambda a, b, c, d: a.sum(1) + a.T.sum(0), 1),  # 1
  ("(a+1).sum(1)+(a+1).T.sum(0)", lambda a, b, c, d: (a + 1).sum(1) + (a + 1).T.sum(0),
   lambda a, b, c, d: (a + 1).sum(1) + (a + 1).T.sum(0), 1),  # 1
  ("a.exp().sum(1)+a.sum(1)", lambda a, b, c, d: a.exp().sum(1) + a.sum(1),
   lambda a, b, c, d: np.exp(a).sum(1) + a.sum(1), 1),  # 1
  ("variance: reduce, expand, reduce", lambda a, b, c, d: (a - a.mean(1, keepdim=True)).square().sum(1),
   lambda a, b, c, d: ((a - a.mean(1, keepdims=True)) ** 2).sum(1), 2),  # 2
  ("(a.sum(1,keepdim)*a).sum(1)", lambda a, b, c, d: (a.sum(1, keepdim=True) * a).sum(1),
   lambda a, b, c, d: (a.sum(1, keepdims=True) * a).sum(1), 2),  # 2
  ("pad through elementwise", lambda a, b, c, d: (a + 1).pad(((1, 1), (1, 1))) * 2,
   lambda a, b, c, d: np.pad(a + 1, 1) * 2, 1),  # 1
  ("(a-a.max()).exp().sum(): full reduce, expand, reduce", lambda a, b, c, d: (a - a.max()).exp().sum(),
   lambda a, b, c, d: np.exp(a - a.max()).sum(), 1),  # 1
  ("a.std()", lambda a, b, c, d: a.std(), lambda a, b, c, d: a.std(ddof=1), 1),  # 2
  ("a-a.max(): small, the max fused", lambda a, b, c, d: a - a.max(), lambda a, b, c, d: a - a.max(), 1),  # 1
  ("a*a.sum()", lambda a, b, c, d: a * a.sum(), lambda a, b, c, d: a * a.sum(), 1),  # 1
  ("attention: (a@b.T/2).softmax()@c", lambda a, b, c, d: (a @ b.T / 2).softmax(-1) @ c,
   lambda a, b, c, d: np_softmax(a @ b.T / 2) @ c, 4),  # 4: the exp is recomputed in its sum and the last matmul
  ("layernorm", lambda a, b, c, d: a.layernorm(),
   lambda a, b, c, d: (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5), 3),  # 3
]


@pytest.mark.parametrize("name,fn,ref,count", KERNEL_COUNTS, ids=[k[0] for k in KERNEL_COUNTS])
def test_kernel_count(name, fn, ref, count):
  ins = [realized(4, 4, seed=i) for i in range(4)]
  out = fn(*ins)
  assert kernels(out) == count
  assert_close(out, np.asarray(ref(*(x.numpy() for x in ins))), atol=1e-4, rtol=1e-4)


def test_constant_needs_no_kernel():
  t = Tensor(2, device="PYTHON")
  assert kernels(t) == 0
  assert t.item() == 2


def test_realized_input_needs_no_kernel(abc):
  a, _, _ = abc
  assert kernels(a) == 0
  assert kernels(a.reshape(16)) == 0
  assert kernels(a.permute(1, 0)) == 0  # a view of a realized buffer stays one (tinygrad: no kernel either)
  assert kernels(a.permute(1, 0).contiguous()) == 1


def test_shared_reduce_is_computed_once(abc):
  a, b, c = abc
  s = (a * b).sum(1, keepdim=True)
  out1, out2 = s + c, s * c
  # s feeds two kernels, so it gets a buffer of its own: 3 kernels, not 2 that each redo the sum
  with Context(HFUSE=0): assert kernels(out1, out2) == 3
  # and the two elementwise readers of s and c, independent and of one shape, become one kernel with two outputs
  assert kernels(out1, out2) == 2


def test_shared_elementwise_is_recomputed(abc):
  a, b, c = abc
  s = a * b
  with Context(HFUSE=0): assert kernels(s + c, s - c) == 2
  assert kernels(s + c, s - c) == 1  # the siblings fuse horizontally: a, b and c are read once


def test_reduce_under_expand_is_realized(abc):
  a, _, _ = abc
  # the mean is read by every element of the output: computing it per element would be O(n^2)
  assert kernels(a - a.mean(1, keepdim=True)) == 2


def test_kernelize_then_realize(abc):
  a, b, c = abc
  mul = a * b
  out = mul + c
  out.kernelize()
  assert out.uop.op.name in ("ASSIGN", "RESHAPE")
  child = out + 2
  assert kernels(child) == 2  # out's pending kernel, then child's
  assert_close(child, a.numpy() * b.numpy() + c.numpy() + 2)
  assert kernels(out) == 0  # already realized by the child


def test_buffer_limit_splits_kernel(monkeypatch):
  from plugrad.registry import get_registry
  dev = get_registry().device("PYTHON")
  monkeypatch.setitem(dev._roles, "plugrad_device_capabilities", dataclasses.replace(dev.caps, max_buffers=4))
  xs = [realized(8, seed=i) for i in range(20)]
  out = xs[0]
  for x in xs[1:]: out = out + x
  sched = out.schedule()
  assert count_kernels(sched) > 1
  assert all(len(it.bufs) <= 4 for it in sched)
  assert_close(out, sum(x.numpy() for x in xs), atol=1e-4)


def test_long_chain_memory_is_bounded():
  from plugrad.registry import get_registry
  alloc = get_registry().device("PYTHON").allocator
  x = realized(1024)
  for i in range(30): x = (x * 1.01 + 1).contiguous()
  before = alloc.stats.in_use
  alloc.stats.peak = alloc.stats.in_use
  x.realize()
  # 30 intermediates of 4 KiB each: at most two live at once, plus the output
  assert alloc.stats.peak - before <= 3 * 4096


def test_assign_reads_old_value_first():
  a = Tensor(np.arange(6, dtype=np.float32), device="PYTHON").realize()
  old_view = a + 0
  a.assign(a.flip(0))
  b = old_view * 1
  Tensor.realize(a, b)
  np.testing.assert_array_equal(a.numpy(), np.arange(6)[::-1])
  np.testing.assert_array_equal(b.numpy(), np.arange(6))


def test_copy_between_devices_is_a_copy_item():
  a = Tensor(np.arange(6, dtype=np.float32), device="PYTHON").realize()
  b = (a * 2).to("PYTHON:1")
  sched = (b + 1).schedule()
  assert [it.is_copy for it in sched] == [False, True, False]
  assert sched[1].device == "PYTHON:1" and sched[2].device == "PYTHON:1"
  out = b + 1
  assert out.device == "PYTHON:1"
  np.testing.assert_array_equal(out.numpy(), np.arange(6) * 2 + 1)


def test_mixing_devices_in_one_op_is_an_error():
  a = Tensor([1.0], device="PYTHON")
  b = Tensor([1.0], device="PYTHON:1")
  with pytest.raises(ValueError, match="different devices"): a + b


def test_same_structure_reuses_the_compiled_kernel():
  from plugrad.engine import compile as engine
  x, y = realized(8, seed=1), realized(8, seed=2)
  (x * y + 1).realize()
  before = len(engine._compiled)
  p, q = realized(8, seed=3), realized(8, seed=4)
  out = (p * q + 1).realize()
  assert len(engine._compiled) == before  # new buffers, same graph shape: nothing recompiled
  assert_close(out, p.numpy() * q.numpy() + 1)


def test_large_reduction_runs_in_two_stages():
  x = Tensor(np.ones((512, 256), np.float32), device="PYTHON")
  assert kernels(x.sum()) == 2 and kernels(x.max()) == 2
  assert x.sum().item() == 512 * 256
  assert kernels(x.sum(1)) == 1  # many outputs: already parallel


@pytest.mark.parametrize("shape,axes", [((128, 4, 24, 24), (0, 2, 3)), ((7, 4, 96, 100), (0, 2, 3)),
                                        ((3, 5, 30000), (0, 2))])
def test_two_stage_chunks_hold_whole_rows_of_the_inner_axes(shape, axes):
  # a batch norm's statistics over (N, H, W): the chunks split N (or N*H where N has no divisor to split by), so each
  # reads whole rows of the rest, its innermost loop dividing no index; 128x32x24x24 on CPU, AVX-512: 0.90 -> 0.08 ms
  xn = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  x = Tensor(xn, device="PYTHON")
  first, second = [it for it in x.sum(axes).schedule() if not it.is_copy]  # (every case is large enough to split)
  uops = lower_for(get_registry().device("PYTHON"), first.ast).uops
  inner = [u for u in uops if u.op is Ops.RANGE][-1]
  assert not any(u.op in (Ops.IDIV, Ops.MOD) and inner in u.toposort for u in uops)
  assert_close(x.sum(axes), xn.astype(np.float64).sum(axes), rtol=1e-5, atol=1e-3)
  assert_close(x.max(axes), xn.max(axes))


def test_a_reduction_over_neighbouring_axes_of_contiguous_reads_loops_over_them_as_one():
  # a batch norm's statistics: the sum over (N, H, W) of a buffer, and of its squared distance to a per-channel mean,
  # loop over N x H*W (H*W takes vector lanes on CPU: 128x32x20x20, AVX-512, 1.6 -> 0.05 ms; its backward's three
  # sums, 0.94 -> 0.08 ms); a transposed read's rows are not the buffer's, so its axes stay apart
  from plugrad.codegen.lowerer import kernel_features
  xn = np.random.default_rng(0).standard_normal((6, 3, 5, 4)).astype(np.float32)
  x = Tensor(xn, device="PYTHON").realize()
  mean = x.mean((0, 2, 3), keepdim=True).realize()
  caps = get_registry().device("PYTHON").caps
  def reduce_axes(t: Tensor) -> tuple[int, ...]:
    return kernel_features([it for it in t.schedule() if not it.is_copy][-1].ast, caps).reduce_axes
  assert reduce_axes(x.sum((0, 2, 3))) == (6, 20)
  assert reduce_axes(((x - mean) ** 2).sum((0, 2, 3))) == (6, 20)
  # its backward: a per-channel value computed in the kernel, and ones broadcast through reshapes (a sum's gradient)
  s = Tensor(np.arange(1, 4, dtype=np.float32).reshape(1, 3, 1, 1), device="PYTHON").realize()
  scaled = x * (s + 1e-5).rsqrt() * Tensor.ones(6, 1, 1, device="PYTHON").expand(6, 1, 60).reshape(6, 3, 5, 4)
  assert reduce_axes(scaled.sum((0, 2, 3))) == (6, 20)
  assert_close(scaled.sum((0, 2, 3)), (xn / np.sqrt(np.arange(1, 4) + 1e-5).reshape(1, 3, 1, 1)).sum((0, 2, 3)),
               rtol=1e-5, atol=1e-5)
  assert reduce_axes(x.permute(0, 1, 3, 2).contiguous().sum((2, 3))) == (20,)  # its own buffer, read in rows
  assert reduce_axes(x.permute(0, 1, 3, 2).sum((0, 2, 3))) == (6, 4, 5)
  assert_close(x.sum((0, 2, 3)), xn.sum((0, 2, 3)), rtol=1e-5, atol=1e-5)
  assert_close(((x - mean) ** 2).sum((0, 2, 3)), ((xn - xn.mean((0, 2, 3), keepdims=True)) ** 2).sum((0, 2, 3)),
               rtol=1e-5, atol=1e-5)
  assert_close(x.permute(0, 1, 3, 2).max((0, 2, 3)), xn.max((0, 2, 3)))


def test_a_relu_after_a_convolution_is_written_by_its_kernel_and_its_gradient_reads_that():
  # relu's gradient masks by its output, so nothing else needs the convolution's own values: one kernel computes the
  # convolution and writes relu of it, and the weight gradient reads that buffer (no second pass over the output)
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32), device="PYTHON").realize()
  w = Tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), device="PYTHON", requires_grad=True).realize()
  g = Tensor(rng.standard_normal((2, 4, 6, 6)).astype(np.float32), device="PYTHON").realize()
  y = x.conv2d(w).relu()
  (y * g).sum().backward()
  items = [it for it in Tensor.schedule(y, w.grad) if not it.is_copy]
  outs = [b for it in items for b in it.bufs[:it.outs] if b.size == y.numel()]
  assert len(outs) == 1 and any(outs[0] in it.bufs[it.outs:] for it in items)
  conv = np.stack([np.stack([(np.lib.stride_tricks.sliding_window_view(x.numpy()[n], (3, 3), axis=(1, 2))
                              * w.numpy()[f][:, None, None]).sum((0, 3, 4)) for f in range(4)]) for n in range(2)])
  assert_close(y, np.maximum(conv, 0), rtol=1e-5, atol=1e-5)
  windows = np.lib.stride_tricks.sliding_window_view(x.numpy(), (3, 3), axis=(2, 3))  # (2, 3, 6, 6, 3, 3)
  assert_close(w.grad, np.einsum("nfhw,nchwij->fcij", g.numpy() * (conv > 0), windows), rtol=1e-4, atol=1e-4)


def test_readers_of_an_expression_also_copied_read_the_copy():
  # conv2d's weight gradient copies the convolution's input (a ReLU of the layer before) into a buffer; the forward
  # convolution, and any other reader of the same expression, then reads that buffer instead of recomputing it
  an = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
  a = Tensor(an, device="PYTHON").realize()
  x = a.relu()
  copy, doubled = x.contiguous(), x * 2
  items = [it for it in Tensor.schedule(copy, doubled) if not it.is_copy]
  assert len(items) == 2 and not any(u.op is Ops.WHERE for u in items[-1].ast.toposort)  # the product reads the copy
  assert_close(doubled, np.maximum(an, 0) * 2)
  assert_close(copy, np.maximum(an, 0))

def _cache():
  from plugrad.registry import get_registry
  from plugrad.engine.schedule import _caches
  return _caches[get_registry()]


def test_a_structure_key_hashes_once_and_the_cache_hands_back_its_own():
  from plugrad.engine.schedule_cache import ScheduleCache, structure_key
  p, q = realized(6, seed=1), realized(6, seed=2)
  k1, _ = structure_key([(p * q + 1).uop], "x")
  k2, _ = structure_key([(q * p + 1).uop], "x")  # another graph of the same structure: an equal key, another object
  assert k1 == k2 and hash(k1) == hash(k2) and k1 is not k2
  cache = ScheduleCache()
  cache.put(k1, "template")  # type: ignore[arg-type]
  assert cache.get(k2) == (k1, "template") and cache.get(k2)[0] is k1  # later lookups find k1 by identity
  assert cache.get(structure_key([(p + q).uop], "x")[0]) is None


def test_same_structure_reuses_the_schedule():
  def step(seed):
    p, q = realized(6, seed=seed), realized(6, seed=seed + 10)
    out = (p * q + 1).realize()
    assert_close(out, p.numpy() * q.numpy() + 1)
  step(1)
  misses = _cache().misses
  for seed in range(3, 6): step(seed)  # new buffers, same graph shape: nothing is scheduled anew
  assert _cache().misses == misses


def test_a_cached_realize_leaves_buffers_and_frees_its_intermediates():
  from plugrad.registry import get_registry
  stats = get_registry().device("PYTHON").allocator.stats
  a = realized(64, 64, seed=1)
  # a + 1 (16 KiB) dies in its row sums, before the second 16 KiB intermediate is made
  def step() -> Tensor: return ((a + 1).contiguous().sum(1, keepdim=True) + a).contiguous().sum(1).realize()
  step()
  gc.collect()  # earlier tests' garbage freed now, not during the step measured below
  hits, stats.peak, in_use = _cache().hits, stats.in_use, stats.in_use
  out = step()
  assert _cache().hits == hits + 1
  assert out.uop.op is Ops.BUFFER  # its kernels ran before it was rebound: no kernel node is left in its graph
  assert stats.in_use == in_use + out.nbytes()
  assert stats.peak - in_use < 2 * a.nbytes()  # one 16 KiB intermediate alive at a time
  ref = ((a.numpy() + 1).sum(1, keepdims=True) + a.numpy()).sum(1)
  assert_close(out, ref, rtol=1e-5)


def test_a_cached_realize_whose_launch_fails_leaves_the_tensor_lazy(monkeypatch):
  import sys
  from plugrad.device import DeviceError
  run = sys.modules["plugrad.engine.run"]
  a, b = realized(8, seed=1), realized(8, seed=2)
  (a * b + 1).realize()  # the structure is cached from here on
  out = a * b + 1
  launch = run._launch

  def failing(*args, **kwargs):
    raise DeviceError("the device went away")
  monkeypatch.setattr(run, "_launch", failing)
  with pytest.raises(DeviceError, match="went away"): out.realize()
  assert out.uop.op is Ops.ADD  # not rebound to a buffer no kernel wrote
  monkeypatch.setattr(run, "_launch", launch)
  assert_close(out, a.numpy() * b.numpy() + 1)


def test_schedule_cache_tells_a_shared_leaf_from_two_leaves():
  a, b = realized(5, seed=1), realized(5, seed=2)
  assert_close((a + b).realize(), a.numpy() + b.numpy())
  assert_close((a + a).realize(), a.numpy() * 2)  # same ops, but one buffer read twice: another structure
  assert_close((b + a).realize(), a.numpy() + b.numpy())


def test_assign_repeated_through_the_schedule_cache():
  counter = Tensor(np.zeros(4, np.float32), device="PYTHON").realize()
  for _ in range(5): counter.assign(counter + 1).realize()
  np.testing.assert_array_equal(counter.numpy(), np.full(4, 5, np.float32))


def test_cached_schedule_with_a_live_intermediate():
  a, b, c = (realized(4, 4, seed=i) for i in range(3))
  for _ in range(3):  # the second and third runs come from the cache
    s = (a * b).sum(1, keepdim=True)
    out1, out2 = s + c, s * c
    Tensor.realize(out1, out2)
    ref = (a.numpy() * b.numpy()).sum(1, keepdims=True)
    assert_close(out1, ref + c.numpy(), atol=1e-5)
    assert_close(out2, ref * c.numpy(), atol=1e-5)
    assert_close(s, ref, atol=1e-5)


needs_cpu = pytest.mark.skipif("CPU" not in available_devices(), reason="plugrad-cpu-llvm is not installed")


def _native_runs() -> dict:
  from plugrad.registry import get_registry
  cache = sys.modules["plugrad.engine.schedule"]._caches.get(get_registry())
  return {} if cache is None else cache.natives


@needs_cpu
def test_a_cached_schedule_of_several_kernels_runs_natively_from_its_third_reuse():
  """Realized again and again (an eager training step), a cached schedule is one call into the device's graph
  role from its third reuse on, with fresh outputs each time and its intermediates freed after the run."""
  from plugrad.registry import get_registry
  stats = get_registry().device("CPU").allocator.stats
  rng = np.random.default_rng(0)
  a = Tensor(rng.standard_normal((32, 48)).astype(np.float32), device="CPU").realize()
  def step(b: Tensor) -> Tensor: return ((a + 1).contiguous() * b).sum(1).realize()  # two kernels
  before = set(_native_runs())
  outs = []
  for i in range(5):
    b = Tensor(rng.standard_normal((32, 48)).astype(np.float32), device="CPU").realize()
    if i == 4:
      gc.collect()
      in_use = stats.in_use
    outs.append((step(b), ((a.numpy() + 1) * b.numpy()).sum(1)))
  assert [key for key in set(_native_runs()) - before if _native_runs()[key] is not None]  # prepared for it
  assert stats.in_use - in_use == outs[-1][0].nbytes()  # the run's intermediate was freed, its output kept
  for out, ref in outs: assert_close(out, ref, rtol=1e-5, atol=1e-5)


@needs_cpu
def test_a_native_run_is_waited_for_even_when_the_rebind_during_it_fails(monkeypatch):
  """A cached schedule's native run is under way while the tensors are told what they became; if that fails, the
  run is still waited for (the workers freed), and the next realize gives the right values."""
  schedule = sys.modules["plugrad.engine.schedule"]
  an = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
  a = Tensor(an, device="CPU").realize()  # large enough that the run is shared with the workers
  for _ in range(3): (a * 3).sum(1).realize()  # natively from here on
  started = []
  def broken(*args): started.append(True); raise RuntimeError("rebind failed")
  with monkeypatch.context() as m:
    m.setattr(schedule, "_apply", broken)
    with pytest.raises(RuntimeError, match="rebind failed"): (a * 3).sum(1).realize()
  assert started
  for _ in range(2): assert_close((a * 3).sum(1).realize(), (an * 3).sum(1), rtol=1e-4, atol=1e-3)


@needs_cpu
def test_only_large_intermediates_keep_a_cached_schedule_from_running_natively(monkeypatch):
  """A single kernel runs natively too (its Python launch cost more than the graph role's call), however large its
  output: a run from Python keeps the outputs as well. A schedule whose intermediate is larger than NATIVE_MAX_BYTES
  keeps running from Python, which frees it after its last use."""
  monkeypatch.setattr(sys.modules["plugrad.engine.schedule"], "NATIVE_MAX_BYTES", 1024)
  a = Tensor(np.arange(64 * 48, dtype=np.float32).reshape(64, 48), device="CPU").realize()  # 12 KiB

  def prepared(step, ref) -> list:
    before = set(_native_runs())
    for _ in range(4): assert_close(step(), ref)
    return [run is not None for key, run in _native_runs().items() if key not in before]
  assert prepared(lambda: (a * 3 + 1).realize(), a.numpy() * 3 + 1) == [True]  # one kernel, a 12 KiB output
  assert prepared(lambda: ((a + 1).contiguous() * 2).sum(1).realize(), ((a.numpy() + 1) * 2).sum(1)) == [False]


@needs_cpu
def test_observers_and_graph_off_see_every_launch_of_a_cached_schedule():
  """A profiler observing single launches, and Context(GRAPH=0) (graph roles off): a cached schedule keeps
  running from Python, each launch told to the observer."""
  from plugrad import hookimpl
  from plugrad.registry import get_registry
  launches = []
  class Profiler:
    @hookimpl
    def plugrad_kernel_ran(self, device, name): launches.append(name)
  a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="CPU").realize()
  ref = (np.arange(12).reshape(3, 4) * 2 + 1).sum(0)
  def step() -> Tensor: return ((a * 2).contiguous() + 1).sum(0).realize()  # two kernels
  for _ in range(4): assert_close(step(), ref)  # natively from the third reuse (the fourth realize)
  assert any(run is not None for run in _native_runs().values())
  reg, profiler = get_registry(), Profiler()
  reg.pm.register(profiler)
  try:
    for _ in range(2): assert_close(step(), ref)
  finally:
    reg.pm.unregister(profiler)
  assert len(launches) == 4
  with Context(GRAPH=0): assert_close(step(), ref)
  assert_close(step(), ref)  # and natively again


def test_very_deep_chain_is_cut_into_kernels():
  from plugrad.scheduler import MAX_KERNEL_DEPTH
  x = realized(4)
  out = x
  for _ in range(3000): out = out + 1  # deeper than any pass should recurse
  n = kernels(out)
  assert 3000 // MAX_KERNEL_DEPTH <= n <= 3000 // MAX_KERNEL_DEPTH + 2
  assert_close(out, x.numpy() + 3000, atol=1e-3)


def test_a_kernel_that_ran_is_recorded_outside_the_graph():
  t = (Tensor([1.0, 2.0], device="PYTHON") * 2).kernelize()
  lazy = t + 1
  kernel = next(n.arg for n in lazy.uop.toposort if n.op is Ops.KERNEL)
  nodes = list(lazy.uop.toposort)
  t.realize()
  assert list(lazy.uop.toposort) == nodes  # the graph is a value: running its kernel changed no node
  with pytest.raises(dataclasses.FrozenInstanceError): kernel.device = "CPU"
  assert lazy.tolist() == [3.0, 5.0]  # and the finished kernel now reads as its buffer


@pytest.mark.parametrize("kind", ["shift diamond", "where diamond"])
def test_deep_pad_shrink_where_chain_schedules_in_linear_time(kind):
  # each step reads x through two different views: fused whole, the kernel's expression would double per
  # step; the scheduler gives a node read through too many views a buffer (a few kernels, each small)
  from plugrad.scheduler import MAX_INDEX_VIEWS
  start = np.arange(8, dtype=np.float32)
  x, ref = Tensor(start, device="PYTHON"), start
  for i in range(60):
    if kind == "shift diamond":
      x = x.pad(((1, 1),)).shrink(((1, 9),)) + x.pad(((2, 0),)).shrink(((0, 8),))
      ref = np.pad(ref, (1, 1))[1:9] + np.pad(ref, (2, 0))[0:8]
    else:
      x = (x > i).where(x.pad(((1, 0),)).shrink(((0, 8),)), x * 0.5)
      ref = np.where(ref > i, np.pad(ref, (1, 0))[0:8], ref * 0.5)
  n = kernels(x)
  assert 1 < n <= 60 // (MAX_INDEX_VIEWS.bit_length() - 1) + 1
  assert_close(x, ref, rtol=1e-5)


def test_planned_peak_is_what_the_allocator_measures():
  from plugrad.engine import run_schedule
  from plugrad.registry import get_registry
  from plugrad.scheduler import plan_memory
  a = realized(64, 64)
  out = (((a + 1).contiguous() * 2).contiguous() - 3).sum(1)
  items = out.schedule()
  plan = plan_memory(items)
  # three kernels; *2 reads a+1 at the index it writes and a+1 dies there, so it runs in place: one 16 KiB
  # intermediate is alive at a time, then the 256-byte output
  assert count_kernels(items) == 3
  assert items[1].bufs[0] is items[0].bufs[0]
  assert plan.peak_bytes == 64 * 64 * 4 + 64 * 4
  assert plan.bytes_written == 2 * 64 * 64 * 4 + 64 * 4 and plan.bytes_read == 2 * 64 * 64 * 4  # in place: no input
  stats = get_registry().device("PYTHON").allocator.stats
  before = stats.in_use
  stats.peak = stats.in_use
  run_schedule(items, get_registry())
  assert stats.peak - before == plan.peak_bytes
  assert_close(out, ((a.numpy() + 1) * 2 - 3).sum(1), rtol=1e-5)


def test_debug_1_prints_bytes_and_planned_peak():
  import io
  from plugrad.builtins.debug import DebugPlugin
  from plugrad.config import Config
  stream = io.StringIO()
  plugin = DebugPlugin(Config(debug=1), stream)
  plugin.plugrad_schedule_ran(kernels=2, copies=0, seconds=0.001, bytes_read=64, bytes_written=32, peak_bytes=32)
  line = stream.getvalue()
  assert line.startswith("realized: 2 kernels, 0 copies in 1.00 ms; read 64 B, wrote 32 B, planned peak 32 B")


def _grad_graphs():
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((8, 16)).astype(np.float32), device="PYTHON").realize()
  y = Tensor(rng.integers(0, 4, 8).astype(np.int32), device="PYTHON").realize()
  def param(*shape):
    return Tensor(rng.standard_normal(shape).astype(np.float32), device="PYTHON").requires_grad_(True).realize()
  w1, w2 = param(16, 32), param(32, 4)
  xent = lambda out: out.sparse_categorical_crossentropy(y)  # noqa: E731
  yield "mlp + cross entropy", (x @ w1).relu() @ w2, xent, [w1, w2], 9  # 10
  w1, w2 = param(16, 32), param(32, 4)
  yield "log_softmax().mean()", (x @ w1).relu() @ w2, lambda out: out.log_softmax(-1).mean(), [w1, w2], 8  # 8
  a = param(16, 16)
  yield "softmax().square().sum()", a, lambda out: out.softmax(-1).square().sum(), [a], 5  # 5
  a = param(16, 16)
  yield "layernorm().sum()", a, lambda out: out.layernorm().sum(), [a], 6  # 7


@pytest.mark.parametrize("case", range(4))
def test_forward_and_backward_kernel_counts(case):
  # a training step's forward and backward together: at most tinygrad 0.14's count (in each comment above).
  # The shift by the max in softmax passes no gradient, and a gradient's broadcast seed summed is a constant.
  name, inner, loss_of, params, count = list(_grad_graphs())[case]
  loss = loss_of(inner)
  loss.backward()
  assert kernels(loss, *[p.grad for p in params]) == count, name


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_input_gradient_reduces_channels_in_a_kernel_of_its_own(stride):
  # a strided convolution's input gradient goes through its windowed view (col2im), which reads the channel
  # reduction through pads its reshapes regroup: that reduction gets a buffer (one kernel more) instead of running,
  # gated, inside the gather for every pixel. At stride 1 conv2d's own rule makes it one transposed convolution
  rng = np.random.default_rng(4)
  xn, wn = rng.standard_normal((2, 3, 6, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  x = Tensor(xn, device="PYTHON").requires_grad_(True).realize()
  w = Tensor(wn, device="PYTHON").realize()
  x.conv2d(w, padding=1, stride=stride).square().sum().backward()
  # the weight's copy with its output channels innermost (Tensor._channels_innermost: the reference device loops with
  # 4-lane vectors) and the forward conv, then (stride 2) the channel reduction and a gather along each spatial axis
  # (2 kernels with them fused), or (stride 1) the transposed convolution
  assert kernels(x.grad) == {1: 3, 2: 5}[stride]
  torch = pytest.importorskip("torch")  # the test extra
  xt = torch.tensor(xn, requires_grad=True)
  torch.nn.functional.conv2d(xt, torch.tensor(wn), padding=1, stride=stride).square().sum().backward()
  assert_close(x.grad, xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_pad_of_a_reduction_stays_fused():
  a = realized(8, 8)
  assert kernels(a.sum(1).pad(((2, 2),)) + 1) == 1
  assert kernels(a.sum(1).pad(((0, 8),)).reshape(4, 4)) == 1  # regrouped, but read by no reduction


def test_a_costly_expression_read_by_a_matmul_gets_a_buffer():
  # fused into the next matmul, GELU's exp2 and division would run once per output column (64 here): it gets a
  # buffer (3 kernels). A bias and ReLU cost no more than reading them back and stay fused (2 kernels), and so does
  # a GELU too small for the work saved to pay for a launch
  x, w1, w2 = realized(64, 32, seed=1), realized(32, 128, seed=2), realized(128, 64, seed=3)
  h = x @ w1
  assert kernels(h.gelu() @ w2) == 3
  assert kernels((h + 1).relu() @ w2) == 2
  a, b, c = realized(4, 4, seed=1), realized(4, 4, seed=2), realized(4, 4, seed=3)
  assert kernels((a @ b).gelu() @ c) == 2
  hn = x.numpy() @ w1.numpy()
  gelu = 0.5 * hn * (1 + np.tanh(np.sqrt(2 / np.pi) * (hn + 0.044715 * hn ** 3)))
  assert_close(h.gelu() @ w2, gelu @ w2.numpy(), rtol=1e-4, atol=1e-3)


def test_attention_weights_wide_enough_get_a_buffer():
  # the softmax's exp is evaluated once per column of the values when fused into the last matmul: at 64x16 the
  # weights get a buffer (one kernel more than the 4x4 case of KERNEL_COUNTS)
  q, k, v = realized(64, 16, seed=4), realized(64, 16, seed=5), realized(64, 16, seed=6)
  out = (q @ k.T / 4).softmax(-1) @ v
  assert kernels(out) == 5
  assert_close(out, np_softmax(q.numpy() @ k.numpy().T / 4) @ v.numpy(), rtol=1e-4, atol=1e-4)


def _split_gradient_work(split: bool) -> int:
  """The operations of the gradient of three matmuls over the thirds of one tensor (`split`) or over three."""
  rng = np.random.default_rng(7)
  x = realized(64, 96, seed=7).requires_grad_(True)
  parts = x.split(32, dim=-1) if split else [realized(64, 32, seed=8 + i).requires_grad_(True) for i in range(3)]
  w = [Tensor(rng.standard_normal((32, 64)).astype(np.float32), device="PYTHON").realize() for _ in range(3)]
  ((parts[0] @ w[0]).sum() + (parts[1] @ w[1]).square().sum() + (parts[2] @ w[2]).relu().sum()).backward()
  items = Tensor.schedule(*([x.grad] if split else [p.grad for p in parts]))
  return sum(lower_for(get_registry().device("PYTHON"), it.ast).flops for it in items if it.ast is not None)


def test_the_gradient_of_a_split_costs_what_three_tensors_cost():
  # q, k, v = x.split(...): each part's gradient is padded to x's width and the three are added; fused into one
  # kernel, every matmul would run over all three thirds (6.0M operations here against 1.7M)
  assert _split_gradient_work(True) < 1.05 * _split_gradient_work(False)


def test_softmax_gradient_skips_the_max_but_stays_exact():
  z = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
  a = Tensor(z, device="PYTHON").requires_grad_(True)
  a.softmax(-1).square().sum().backward()
  s = np_softmax(z)
  assert_close(a.grad, s * (2 * s - (2 * s * s).sum(-1, keepdims=True)), atol=1e-5)


def test_sum_of_a_broadcast_constant_is_a_constant():
  from plugrad.uops import UOp
  seed = Tensor.full((8, 4), 0.25, device="PYTHON")
  neg = Tensor._from(UOp(Ops.NEG, seed.dtype, (seed.uop,)), "PYTHON")  # built as a gradient is: no frontend folding
  total = Tensor._from(UOp(Ops.REDUCE_AXIS, seed.dtype, (neg.uop,), (Ops.ADD, (1,))), "PYTHON")
  b = realized(8, 4)
  out = total.reshape(8, 1).expand(8, 4) * b  # a sum read through an expand would get a kernel of its own
  assert kernels(out) == 1
  assert_close(out, -b.numpy(), atol=1e-6)


def test_elementwise_chain_of_intermediates_runs_in_place():
  from plugrad.scheduler import plan_memory
  a = realized(32, 32)
  for _ in range(2):  # the second time through the schedule cache
    out = (((a + 1).contiguous() * 2).contiguous().exp().contiguous() + a).sum(1)
    items = out.schedule()
    assert len({id(it.bufs[0]) for it in items[:3]}) == 1  # the three intermediates share one buffer
    assert plan_memory(items).peak_bytes == 32 * 32 * 4 + 32 * 4
    out.realize()
    assert_close(out, (np.exp((a.numpy() + 1) * 2) + a.numpy()).sum(1), rtol=1e-5)


def test_no_in_place_write_over_a_view_read_or_a_live_tensor():
  a = realized(8, 8)
  t = (a + 1).contiguous()
  flipped = (t.flip(0) * 2).contiguous()  # reads t at other positions than it writes: a fresh buffer
  items = flipped.schedule()
  assert items[1].bufs[0] is not items[0].bufs[0]
  assert_close(flipped, (a.numpy() + 1)[::-1] * 2)
  from plugrad.scheduler import buffer_of, contiguous_base
  kept = (a * 3).contiguous().realize()
  doubled = (kept * 2).contiguous()
  assert all(it.bufs[0] is not buffer_of(contiguous_base(kept.uop)) for it in doubled.schedule())
  assert_close(doubled, a.numpy() * 6)
  assert_close(kept, a.numpy() * 3)  # a tensor holds it: never overwritten


@pytest.mark.parametrize("dev", ["CL", "CPU"])
def test_a_column_reduction_runs_as_partial_sums_on_a_device_with_launch_indices(dev):
  # sum(0) of 4096 x 64 on a GPU-like device: 64 outputs are too few threads, so (16, 64) partial sums of 256 rows
  # each come first, laid out so neighbouring threads read neighbouring columns; a CPU loops over the rows itself
  if dev not in available_devices(): pytest.skip(f"no {dev} device here (CL: an OpenCL runtime such as pocl)")
  xn = np.random.default_rng(0).standard_normal((4096, 64)).astype(np.float32)
  x = Tensor(xn, device=dev, requires_grad=True)
  kernels = [it for it in x.sum(0).schedule() if not it.is_copy]
  assert len(kernels) == (2 if dev == "CL" else 1)
  np.testing.assert_allclose(x.sum(0).numpy(), xn.sum(0), rtol=1e-4, atol=1e-3)
  np.testing.assert_array_equal(x.max(0).numpy(), xn.max(0))
  np.testing.assert_allclose(x.reshape(64, 64, 64).mean((0, 1), keepdim=True).numpy(),
                             xn.reshape(64, 64, 64).mean((0, 1), keepdims=True), rtol=1e-4, atol=1e-5)
  (x.sum(0) * Tensor(np.arange(64, dtype=np.float32), device=dev)).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), np.broadcast_to(np.arange(64, dtype=np.float32), xn.shape))
