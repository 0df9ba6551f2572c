"""Conformance: the roles of a device plugin behave as the core expects.

Run against any device with `pytest --pyargs plugrad.testing --plugrad-device NAME`. Tests needing a
dtype or op the device declares unsupported skip with that reason; nothing else skips.
"""
from __future__ import annotations

import numpy as np
import pytest

from plugrad import Buffer, CompileError, Tensor, dtypes
from plugrad.device import UnsupportedError
from plugrad.dtype import bf16_to_f32, f32_to_bf16
from plugrad.registry import get_registry
from plugrad.scheduler import count_kernels

ALL = list(dtypes.all())


def dev_of(device):
  return get_registry().device(device)


def random_of(dtype, n, seed=0):
  rng = np.random.default_rng(seed)
  if dtype == dtypes.bool: return rng.random(n) < 0.5
  if dtype.is_int: return rng.integers(max(dtype.min, -100), min(dtype.max, 100) + 1, n).astype(dtype.np)
  return rng.uniform(-4, 4, n).astype(dtype.np)


def require(device, dtype):
  if dtype not in dev_of(device).caps.dtypes: pytest.skip(f"device {device} does not support dtype {dtype.name}")


# ------------------------------------------------------------------ allocator

@pytest.mark.parametrize("nbytes", [0, 1, 7, 4096, 1 << 20])
def test_allocator_copy_round_trip(device, nbytes):
  d = dev_of(device)
  data = np.random.default_rng(nbytes).integers(0, 256, nbytes).astype(np.uint8)
  buf = Buffer(device, nbytes, dtypes.uint8, d.allocator).copyin(data)
  np.testing.assert_array_equal(buf.numpy(), data)
  buf.deallocate()


def test_allocator_accounts_and_reuses(device):
  alloc = dev_of(device).allocator
  base = alloc.stats.in_use
  bufs = [Buffer(device, 1000, dtypes.float32, alloc).ensure_allocated() for _ in range(4)]
  assert alloc.stats.in_use == base + 4 * 4000
  for b in bufs: b.deallocate()
  assert alloc.stats.in_use == base
  again = Buffer(device, 1000, dtypes.float32, alloc).copyin(np.arange(1000, dtype=np.float32))
  np.testing.assert_array_equal(again.numpy(), np.arange(1000, dtype=np.float32))


def test_host_memory_roles_are_the_memory_itself(device):
  # as_host and from_host are optional; where a device has them they must be the memory itself, not a copy
  alloc = dev_of(device).allocator
  buf = Buffer(device, 16, dtypes.float32, alloc).copyin(np.arange(16, dtype=np.float32))
  view = buf.host_view()
  if view is not None:
    np.testing.assert_array_equal(view, np.arange(16, dtype=np.float32))
    view[3] = -1
    assert buf.numpy()[3] == -1, "as_host returned a copy: a write through it did not reach the buffer"
  arr = np.arange(1, 33, dtype=np.float32)[1:]  # an offset of one element: only element alignment holds
  try:
    t = Tensor.from_numpy(arr, device=device)
  except ValueError as e:
    if "cannot use host memory in place" not in str(e): raise
    return  # the device does not offer from_host
  t.assign(t * 2 + 1).realize()
  np.testing.assert_array_equal(arr, np.arange(2, 33, dtype=np.float32) * 2 + 1)


def test_impossible_allocation_is_a_memory_error(device):
  # a MemoryError (not a driver's own exception) is what lets LRUAllocator empty its caches and retry
  alloc = dev_of(device).allocator
  before = alloc.stats.in_use
  with pytest.raises(MemoryError): alloc.alloc(1 << 50)  # a petabyte
  assert alloc.stats.in_use == before
  buf = Buffer(device, 16, dtypes.float32, alloc).copyin(np.arange(16, dtype=np.float32))  # and it still works
  np.testing.assert_array_equal(buf.numpy(), np.arange(16, dtype=np.float32))


def test_copyin_checks_size(device):
  buf = Buffer(device, 4, dtypes.float32, dev_of(device).allocator)
  with pytest.raises(ValueError): buf.copyin(np.zeros(5, np.float32))


def test_zero_size_tensors(device):
  t = Tensor(np.zeros((0, 3), np.float32), device=device)
  assert (t + 1).numpy().shape == (0, 3)
  assert (t.sum(0)).numpy().tolist() == [0.0, 0.0, 0.0]
  # an empty input behind a pad or a cat is never read
  assert t.pad(((1, 1), (0, 0)), value=2).numpy().tolist() == [[2.0] * 3] * 2
  assert t.cat(Tensor.ones(1, 3, device=device)).numpy().tolist() == [[1.0] * 3]


# ------------------------------------------------------------------ dtypes

@pytest.mark.parametrize("dtype", ALL, ids=[d.name for d in ALL])
def test_declared_dtype_round_trips_and_computes(device, dtype):
  require(device, dtype)
  x = random_of(dtype, 37)
  t = Tensor(x, device=device, dtype=dtype)
  got = t.numpy()
  expect = x.astype(np.float32) if dtype == dtypes.bfloat16 else x
  if dtype == dtypes.bfloat16: np.testing.assert_allclose(got, expect, rtol=1e-2)
  else: np.testing.assert_array_equal(got, expect)
  if dtype == dtypes.bool:
    np.testing.assert_array_equal((t ^ True).numpy(), ~x)
    return
  # an arithmetic kernel, a reduction and a cast through float32 on this dtype
  ref = got.astype(np.float64) * 2 + 1
  ref = bf16_to_f32(f32_to_bf16(ref.astype(np.float32))) if dtype == dtypes.bfloat16 else ref.astype(dtype.np)
  np.testing.assert_allclose((t * 2 + 1).numpy().astype(np.float64), ref.astype(np.float64), rtol=1e-2)
  np.testing.assert_allclose(t.max().numpy().astype(np.float64), x.astype(np.float64).max(), rtol=1e-2)
  if dtypes.float32 in dev_of(device).caps.dtypes:
    np.testing.assert_allclose(t.cast(dtypes.float32).numpy(), x.astype(np.float32), rtol=1e-2)


def test_undeclared_dtypes_are_refused_clearly(device):
  declared = dev_of(device).caps.dtypes
  for dt in ALL:
    if dt in declared: Tensor(np.zeros(3), device=device, dtype=dt)  # every declared dtype uploads
    else:
      with pytest.raises(UnsupportedError, match=dt.name): Tensor(np.zeros(3), device=device, dtype=dt)


# ------------------------------------------------------------------ scheduling limits

def test_buffer_limit_is_respected(device):
  limit = dev_of(device).buffer_limit
  n = 40 if limit is None else limit + 5
  xs = [Tensor(np.full(16, i, np.float32), device=device) for i in range(n)]
  out = xs[0]
  for x in xs[1:]: out = out + x
  sched = out.schedule()
  if limit is None: assert count_kernels(sched) == 1  # no limit: the whole sum fuses
  else: assert count_kernels(sched) > 1 and all(len(it.bufs) <= limit for it in sched)
  np.testing.assert_allclose(out.numpy(), np.full(16, sum(range(n)), np.float32))


def test_multi_output_kernels(device):
  """Sibling kernels reading one input run as one kernel writing several buffers (odd sizes: no launch or vector
  width divides them)."""
  limit = dev_of(device).buffer_limit
  x = np.random.default_rng(0).standard_normal((7, 301)).astype(np.float32)
  t = Tensor(x, device=device).realize()
  outs = [t.sum(1), t.max(1), (t * t).sum(1)]
  # a kernel writing k of them binds k + 1 buffers (a limit of 3 fits two in one kernel: 2 kernels, not 3)
  assert count_kernels(outs[0].schedule(*outs[1:])) == (1 if limit is None else -(-3 // max(1, limit - 1)))
  Tensor.realize(*outs)
  for o, e in zip(outs, [x.sum(1), x.max(1), (x * x).sum(1)]):
    np.testing.assert_allclose(o.numpy(), e, rtol=1e-4, atol=1e-4)
  a, b = (Tensor(random_of(dtypes.float32, 1001, seed), device=device).realize() for seed in (1, 2))
  outs = [a + b, a * b, (a - b).maximum(0)]
  Tensor.realize(*outs)
  an, bn = a.numpy(), b.numpy()
  for o, e in zip(outs, [an + bn, an * bn, np.maximum(an - bn, 0)]): np.testing.assert_allclose(o.numpy(), e, rtol=1e-6)


def test_many_inputs_still_correct(device):
  xs = [Tensor(np.full(8, i, np.float32), device=device) for i in range(40)]
  out = xs[0]
  for x in xs[1:]: out = out + x
  np.testing.assert_allclose(out.numpy(), np.full(8, sum(range(40)), np.float32))


@pytest.mark.parametrize("shape", [(3, 70001), (70001, 3), (2, 3, 5, 7, 11), (1 << 18,)])
def test_launch_shapes(device, shape):
  # sizes past the usual 65535 grid limit, many dimensions, and a long flat axis
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  t = Tensor(x, device=device)
  np.testing.assert_allclose((t * 2 - 1).numpy(), x * 2 - 1, rtol=1e-6)
  np.testing.assert_allclose(t.sum(-1).numpy(), x.sum(-1), rtol=1e-4, atol=1e-3)


# ------------------------------------------------------------------ symbolic shapes (Variables)

def test_kernel_with_a_variable_runs_for_every_value(device):
  # one compiled kernel per graph, launched with the Variable's value (`vals`) and the launch sizes it gives
  from plugrad import Variable
  from plugrad.engine import compile as engine
  v = Variable("n", 1, 40)
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((40, 6)).astype(np.float32), rng.standard_normal((40, 6)).astype(np.float32)
  ta, tb = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
  compiled = None
  for k in (1, 7, 40, 13):
    n = v.bind(k)
    x, y = ta[:n], tb.shrink(((0, n), None))
    np.testing.assert_allclose((x * y + 1).numpy(), a[:k] * b[:k] + 1, rtol=1e-6)
    np.testing.assert_allclose(x.sum(0).numpy(), a[:k].sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((x.T @ y).numpy(), a[:k].T @ b[:k], rtol=1e-4, atol=1e-4)
    if compiled is None: compiled = len(engine._compiled)
    assert len(engine._compiled) == compiled, "a new value of the Variable compiled a new kernel"


# ------------------------------------------------------------------ compiler

def test_masked_vectors_where_declared(device):
  # a device declaring masked_loads takes vector LOADs and STOREs gated per lane: 20 column sums as two vectors of
  # 16 (the second one's last 12 lanes read nothing and write nothing), and a padded convolution's edge taps
  from plugrad.codegen.opt import Opt, OptOps
  dev = dev_of(device)
  if not (dev.caps.vector_ops and dev.caps.masked_loads): return
  require(device, dtypes.float32)
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((2, 3, 9, 20)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  conv = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 9, j:j + 20], w[:, :, i, j]) for i in range(3) for j in range(3))
  cases = [(lambda t, _: t.sum(axis=(0, 1, 2)), x.sum(axis=(0, 1, 2)), (Opt(OptOps.VECTORIZE, 0, 16),)),
           (lambda t, k: t.conv2d(k, padding=1), conv, (Opt(OptOps.VECTORIZE, 0, 16), Opt(OptOps.UPCAST, 2, 4)))]
  for build, want, plan in cases:
    out = build(Tensor(x, device=device), Tensor(w, device=device))
    np.testing.assert_allclose(_realized_with_plan(device, out, plan), want, rtol=1e-4, atol=1e-4)


def _realized_with_plan(device: str, out: Tensor, plan: tuple) -> np.ndarray:
  """`out`'s values, its last kernel lowered with `plan` (those before it, a convolution's weight copy, with the
  heuristic's), through the device's own renderer, compiler and runtime."""
  from plugrad.codegen.lowerer import lower
  from plugrad.scheduler import mark_done
  dev = dev_of(device)
  items = [it for it in out.schedule() if not it.is_copy]
  for item in items:
    prog = lower(item.ast, dev.caps, dev.rewrite_rules, opts=plan if item is items[-1] else None)
    runner = dev.runtime.load(prog.name, dev.compiler.compile(dev.renderer.render(prog))[0])
    runner(*(b.raw for b in item.bufs), global_size=prog.global_size, local_size=prog.local_size)
    mark_done(item.kernel)
  return out.numpy()


def test_ordered_launch_where_declared(device):
  # a device declaring ordered_launch runs its launch loops in order: a matmul whose sum of 600 terms is cut into 3
  # blocks, each block a launch loop inside groups of 4 rows, adding its sums to what the block before it stored
  from plugrad.codegen.opt import Opt, OptOps
  dev = dev_of(device)
  if not (dev.caps.launch_dims == 0 and dev.caps.ordered_launch): return
  require(device, dtypes.float32)
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((16, 600)).astype(np.float32), rng.standard_normal((600, 8)).astype(np.float32)
  out = Tensor(a, device=device) @ Tensor(b, device=device)
  np.testing.assert_allclose(_realized_with_plan(device, out, (Opt(OptOps.BLOCK, 1, 4),)), a @ b, rtol=1e-4, atol=1e-4)


def test_tensor_cores_where_declared(device):
  # a device declaring tensor cores computes a WMMA as its TensorCore says: a batched matmul with the second operand
  # transposed and a bias and relu after it, on one tile per warp and on 2x2 tiles per warp in work-groups of 2 warps
  from plugrad.codegen.opt import Opt, OptOps
  dev = dev_of(device)
  rng = np.random.default_rng(0)
  for i, tc in enumerate(dev.caps.tensor_cores):
    require(device, tc.dtype_in)
    m, n, k = tc.dims
    x = Tensor(rng.standard_normal((2, 2 * m, 3 * k), dtype=np.float32), device=device).cast(tc.dtype_in).realize()
    w = Tensor(rng.standard_normal((2, 4 * n, 3 * k), dtype=np.float32), device=device).cast(tc.dtype_in).realize()
    x32, w32 = (t.cast(dtypes.float32).numpy() for t in (x, w))
    want = np.maximum(x32 @ w32.transpose(0, 2, 1) + 1, 0)
    for plan in ((Opt(OptOps.TC, i, 1),), (Opt(OptOps.TC, i, 1), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 2),
                                           Opt(OptOps.LOCAL, 0, 2))):
      out = (x @ w.transpose(1, 2)).cast(tc.dtype_acc) + 1
      got = _realized_with_plan(device, out.relu(), plan)
      np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max(), err_msg=f"{tc.name} {plan}")
    # a sum of 512 steps: a cascade (each fragment adds 256 steps, then scalar accumulators take its elements)
    a = Tensor(rng.standard_normal((m, 512 * k), dtype=np.float32), device=device).cast(tc.dtype_in).realize()
    b = Tensor(rng.standard_normal((512 * k, n), dtype=np.float32), device=device).cast(tc.dtype_in).realize()
    want = a.cast(dtypes.float32).numpy() @ b.cast(dtypes.float32).numpy()
    got = _realized_with_plan(device, (a @ b).cast(tc.dtype_acc), (Opt(OptOps.TC, i, 1),))
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max(), err_msg=f"{tc.name} cascade")


def test_graph_role_replays_like_the_engine(device):
  # the graph role is optional; where a device has one, TinyJit's replays through it give numpy's results
  from plugrad import TinyJit
  if dev_of(device).graph is None: return
  rng = np.random.default_rng(0)
  wn = rng.standard_normal((8, 5)).astype(np.float32)
  xs = [rng.standard_normal((3, 8)).astype(np.float32) for _ in range(5)]
  w = Tensor(wn, device=device).realize()
  step = TinyJit(lambda x: ((x @ w).relu().contiguous() * 2 + x.sum()).contiguous().sum(axis=0))
  for x in xs:
    got = step(Tensor(x, device=device).realize()).numpy()
    np.testing.assert_allclose(got, (np.maximum(x @ wn, 0) * 2 + x.sum()).sum(axis=0), rtol=1e-4, atol=1e-4)
  assert step.captured is not None and step.captured.native is not None, "the graph role prepared nothing to replay"


def test_compile_cache_hits_and_survives_corruption(device, tmp_path):
  from plugrad.engine import render_for
  d = dev_of(device)
  a = Tensor(np.ones(8, np.float32), device=device)
  (item,) = [it for it in (a * 3 + 1).schedule() if not it.is_copy]
  _, src = render_for(d, item.ast)
  compiler = d.compiler
  if compiler.cache_dir is None:  # no disk cache: compiling is at least deterministic
    assert compiler.compile(src) == compiler.compile(src) and not compiler.compile(src)[1]
    return
  saved = compiler.cache_dir
  compiler.cache_dir = tmp_path
  try:
    first, cached1 = compiler.compile(src)
    again, cached2 = compiler.compile(src)
    assert not cached1 and cached2 and again == first
    for f in tmp_path.rglob("*"):
      if f.is_file(): f.write_bytes(f.read_bytes()[:10])  # truncate every entry
    third, cached3 = compiler.compile(src)
    assert not cached3 and third == first
  finally:
    compiler.cache_dir = saved


def test_compile_error_reports_the_source(device):
  compiler = dev_of(device).compiler
  bad = "this is not a kernel in any language @@@ }{"
  with pytest.raises(CompileError) as e:
    saved, compiler.cache_dir = compiler.cache_dir, None
    try:
      compiler.compile(bad)
    finally:
      compiler.cache_dir = saved
  assert bad in str(e.value)


def test_capabilities_are_consistent(device):
  caps = dev_of(device).caps
  assert caps.dtypes, "a device must support at least one dtype"
  if caps.launch_dims:
    assert len(caps.max_global_size) >= caps.launch_dims
    assert not caps.max_local_size or caps.max_workgroup_threads >= 1
