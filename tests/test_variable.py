"""Symbolic shapes: a bound Variable as a dimension gives numpy's answer for every value in its range, one
compiled kernel serves all of them (the kernel takes the value at launch), and TinyJit replays one capture
with new values."""
import numpy as np
import pytest

from plugrad import Tensor, TinyJit, Variable
from plugrad.codegen.lowerer import lower
from plugrad.device import Capabilities
from plugrad.engine import compile as engine
from plugrad.ops import Ops
from plugrad.spec import kernel_spec, program_spec, tensor_spec
from plugrad.uops import SpecError, UOp, check_spec
from plugrad.testing import assert_close

RNG = np.random.default_rng(0)
K = RNG.standard_normal((16, 8)).astype(np.float32)
V = RNG.standard_normal((16, 8)).astype(np.float32)
VALUES = (1, 2, 5, 9, 16)


def _softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


# ---------------------------------------------------------------- the Variable itself

def test_bind_checks_the_range():
  v = Variable("n", 2, 8)
  assert v.bind(2).val == 2 and v.bind(8).unbind() == (v, 8)
  for bad in (1, 9, -3):
    with pytest.raises(ValueError, match="ranges over"): v.bind(bad)
  with pytest.raises(TypeError): v.bind(3.0)


def test_variable_arguments_are_checked():
  with pytest.raises(ValueError): Variable("n", 5, 2)
  with pytest.raises(ValueError): Variable("n", -1, 2)
  with pytest.raises(ValueError): Variable("not a name", 1, 2)


def test_bounds_come_from_min_and_max():
  v = Variable("n", 3, 10)
  assert (v.vmin, v.vmax) == (3, 10)
  b = v.bind(4)
  assert (b.vmin, b.vmax) == (3, 10)  # a bound Variable is still every value of its range to the compiler
  assert ((b * 4 + 1).vmin, (b * 4 + 1).vmax) == (13, 41)


def test_symbolic_comparisons_decide_for_every_value_or_raise():
  n = Variable("n", 1, 10).bind(3)
  assert n * 4 > n and n >= 1 and n <= 10 and not n > 10
  with pytest.raises(TypeError, match="depends on the values"): _ = n < 5


def test_unbound_variable_is_no_dimension():
  with pytest.raises(ValueError, match="not bound"): Tensor.zeros(Variable("n", 1, 4), 2)


def test_shape_holds_the_bound_variable(dev):
  n = Variable("n", 1, 16).bind(5)
  x = Tensor(K, device=dev)[:n]
  assert x.shape == (n, 8) and x.shape[0].val == 5
  assert x.numpy().shape == (5, 8)


# ---------------------------------------------------------------- values for every bound value

@pytest.mark.parametrize("val", VALUES)
def test_elementwise(dev, val):
  n = Variable("n", 1, 16).bind(val)
  a, b = Tensor(K, device=dev).realize(), Tensor(V, device=dev).realize()
  out = (a[:n] * 2 + b.shrink(((0, n), None)).exp()).relu()
  assert_close(out, np.maximum(K[:val] * 2 + np.exp(V[:val]), 0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("val", VALUES)
def test_reductions_over_the_symbolic_axis(dev, val):
  n = Variable("n", 1, 16).bind(val)
  x = Tensor(K, device=dev).realize()[:n]
  assert_close(x.sum(0), K[:val].sum(0), rtol=1e-5, atol=1e-5)
  assert_close(x.max(0), K[:val].max(0))
  assert_close(x.T.sum(1), K[:val].T.sum(1), rtol=1e-5, atol=1e-5)
  assert_close(x.sum(), K[:val].sum(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("val", VALUES)
def test_matmul_with_a_symbolic_inner_dim(dev, val):
  n = Variable("n", 1, 16).bind(val)
  a = Tensor(K.T.copy(), device=dev).realize()  # (8, 16)
  b = Tensor(V, device=dev).realize()  # (16, 8)
  out = a[:, :n] @ b[:n]
  assert_close(out, K.T[:, :val] @ V[:val], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("val", VALUES)
def test_kv_cache_attention(dev, val):
  """A KV cache read up to the current length: softmax(q @ k.T) @ v over a realized buffer's first n rows."""
  n = Variable("n", 1, 16).bind(val)
  kc, vc = Tensor(K, device=dev).realize(), Tensor(V, device=dev).realize()
  q = RNG.standard_normal((3, 8)).astype(np.float32)
  k, v = kc[:n], vc.shrink(((0, n), None))
  out = (Tensor(q, device=dev) @ k.T / np.sqrt(8)).softmax(-1) @ v
  assert_close(out, _softmax(q @ K[:val].T / np.sqrt(8)) @ V[:val], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("val", (2, 5, 16))
def test_mean_var_and_flip_over_the_symbolic_axis(dev, val):
  n = Variable("n", 1, 16).bind(val)
  x = Tensor(K, device=dev).realize()[:n]
  assert_close(x.mean(0), K[:val].mean(0), rtol=1e-5, atol=1e-6)
  assert_close(x.mean(), K[:val].mean(), rtol=1e-5, atol=1e-6)
  assert_close(x.var(0), K[:val].var(0, ddof=1), rtol=1e-4, atol=1e-6)
  assert_close(x.flip(0), K[:val][::-1])


@pytest.mark.parametrize("val", (1, 4, 7))
def test_creation_and_reshape(dev, val):
  n = Variable("n", 1, 8).bind(val)
  assert_close(Tensor.zeros(n, 3, device=dev) + 2, np.full((val, 3), 2, np.float32))
  assert_close(Tensor.ones(2, n, device=dev).sum(1), np.full(2, val, np.float32))
  x = Tensor(K, device=dev).realize()[:n]
  assert_close(x.reshape(n, 2, 4).sum(1), K[:val].reshape(val, 2, 4).sum(1), rtol=1e-5, atol=1e-6)
  assert_close(x.reshape(n * 8), K[:val].reshape(-1))
  assert_close(x.reshape(-1, 2), K[:val].reshape(-1, 2))  # a -1 inferred as n*4
  assert_close(x.reshape(n, 2, -1).sum(2), K[:val].reshape(val, 2, 4).sum(2), rtol=1e-5, atol=1e-6)
  with pytest.raises(NotImplementedError, match="does not divide"): x.reshape(-1, 3)
  e = Tensor.empty(n, 4, device=dev)
  assert e.shape == (n, 4)


@pytest.mark.parametrize("val", (1, 4, 6))
def test_symbolic_starts_and_square_views(dev, val):
  a = np.arange(64, dtype=np.float32).reshape(8, 8)
  n = Variable("n", 1, 6).bind(val)
  x = Tensor(a, device=dev)
  assert_close(x[n:], a[val:])
  assert_close(x[2:n + 2, n:], a[2:val + 2, val:])
  assert_close(x[:n, :n] @ x[:n, :n], a[:val, :val] @ a[:val, :val])


@pytest.mark.parametrize("val", (1, 6))
def test_a_symbolic_view_of_a_realized_buffer_reads_back(dev, val):
  # numpy()/tolist()/item() took it as a numpy view of the buffer, whose slices need ints (a TypeError)
  a = np.arange(40, dtype=np.float32).reshape(10, 4)
  b, n = Tensor(a, device=dev).realize(), Variable("n", 1, 9).bind(val)
  np.testing.assert_array_equal(b[n - 1:n].numpy(), a[val - 1:val])
  assert b[n - 1:n].tolist() == a[val - 1:val].tolist() and b[n:n + 1, 2:3].item() == a[val, 2]


@pytest.mark.parametrize("val", (1, 6))
def test_gradients_through_a_symbolic_view(dev, val):
  n = Variable("n", 1, 16).bind(val)
  x = Tensor(K, device=dev, requires_grad=True)
  w = Tensor(V[:8, :3], device=dev, requires_grad=True)
  ((x[:n] @ w) * 2).sum().backward()
  gx = np.zeros_like(K)
  gx[:val] = 2 * np.ones((val, 3), np.float32) @ V[:8, :3].T
  assert_close(x.grad, gx, rtol=1e-5, atol=1e-5)
  assert_close(w.grad, 2 * K[:val].T @ np.ones((val, 3), np.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("val", (1, 255, 257, 4097))
def test_long_symbolic_float_sums_cascade_like_concrete_ones(dev, val):
  # a float sum longer than one accumulator's block is split in gated blocks of a length known at launch
  x = Tensor(np.full((5000, 2), 0.1, np.float32), device=dev).realize()
  n = Variable("n", 1, 5000).bind(val)
  s, c = x[:n].sum(0).numpy(), x[:val].sum(0).numpy()
  # as accurate as the concrete sum (whose order differs on a GPU, where work-groups split it)
  exact = np.float32(0.1) * np.float64(val)
  np.testing.assert_allclose(c, exact, rtol=5e-6)
  np.testing.assert_allclose(s, exact, rtol=5e-6)


@pytest.mark.parametrize("nv,mv", [(3, 5), (10, 12), (1, 1), (7, 2)])
def test_two_variables(dev, nv, mv):
  a = RNG.standard_normal((10, 12)).astype(np.float32)
  n, m = Variable("n", 1, 10).bind(nv), Variable("m", 1, 12).bind(mv)
  x, r = Tensor(a, device=dev).realize()[:n, :m], a[:nv, :mv]
  assert x.shape == (n, m)
  assert_close(x + x.sum(1, keepdim=True), r + r.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
  assert_close(x * x.max(0), r * r.max(0), rtol=1e-5, atol=1e-6)
  assert_close(x.T.contiguous(), r.T)
  assert_close(x @ x.T, r @ r.T, rtol=1e-4, atol=1e-4)
  assert_close(x[:, :1] + Tensor.ones(1, m, device=dev), r[:, :1] + np.ones((1, mv)))  # plain slices, symbolic tensor
  assert_close(x[-1], r[-1])
  assert_close(x[None, ..., 0], r[None, ..., 0])
  assert_close(x.unsqueeze(0).expand(2, n, m).sum(0), 2 * r, rtol=1e-6)
  assert_close(x.argmax(1), r.argmax(1))
  assert_close(Tensor.arange(m, device=dev) * 2, np.arange(mv) * 2)


def test_realized_symbolic_tensor_feeds_another_kernel(dev):
  n = Variable("n", 1, 16).bind(6)
  x = (Tensor(K, device=dev)[:n] + 1).realize()
  assert_close((x * x).sum(1), ((K[:6] + 1) ** 2).sum(1), rtol=1e-5, atol=1e-5)


def test_two_values_of_one_variable_in_one_graph_raise(dev):
  v = Variable("n", 1, 16)
  x = Tensor(K, device=dev)
  with pytest.raises(ValueError):
    (x[:v.bind(2)].sum() + x[:v.bind(3)].sum()).numpy()


def test_shrink_past_the_axis_for_some_value_raises(dev):
  n = Variable("n", 1, 20).bind(4)
  with pytest.raises(ValueError, match="out of bounds"): Tensor(K, device=dev)[:n]


def test_unsupported_ops_name_themselves(dev):
  n = Variable("n", 1, 16).bind(4)
  x = Tensor(K, device=dev)
  with pytest.raises(NotImplementedError, match="slices of step 1"): x[:n:2]
  with pytest.raises(NotImplementedError, match="pad by a Variable"): x.pad(((0, n), None), mode="reflect")
  with pytest.raises(NotImplementedError, match="cat along a symbolic"): x[:n].cat(x[:n])
  with pytest.raises(NotImplementedError, match="kernelize"): (x[:n] + 1).kernelize()


# ---------------------------------------------------------------- one kernel for every value

def test_one_kernel_compiled_for_every_value(dev):
  v = Variable("n", 1, 16)
  kc, vc = Tensor(K, device=dev).realize(), Tensor(V, device=dev).realize()
  q = Tensor(RNG.standard_normal((3, 8)).astype(np.float32), device=dev).realize()

  def attend(val: int) -> np.ndarray:
    n = v.bind(val)
    return ((q @ kc[:n].T).softmax(-1) @ vc[:n]).numpy()
  attend(3)
  before = len(engine._compiled)
  for val in (1, 7, 16, 3):
    out = attend(val)
    np.testing.assert_allclose(out, _softmax(q.numpy() @ K[:val].T) @ V[:val], rtol=1e-4, atol=1e-5)
  assert len(engine._compiled) == before  # every value ran the kernels compiled for the first


def test_kernel_source_does_not_hold_the_value(dev):
  from plugrad.registry import get_registry
  v = Variable("n", 1, 16)
  x = Tensor(K, device=dev).realize()
  sched = x[:v.bind(5)].sum(0).schedule()
  (item,) = [it for it in sched if not it.is_copy]
  assert item.var_vals == {v: 5}
  ck = engine.compile_for(get_registry().device(dev), item.ast)
  assert ck.program.vars == (v,)
  # the same kernel is what another value schedules
  sched2 = x[:v.bind(9)].sum(0).schedule()
  assert [it.ast for it in sched2 if not it.is_copy] == [item.ast]


GPU = Capabilities(launch_dims=3, max_local_size=(1024, 1024, 64), max_workgroup_threads=1024, local_memory=48 * 1024)


@pytest.mark.parametrize("val", (1, 13, 37))
def test_gpu_launch_rounds_symbolic_sizes_to_work_groups(val):
  # a symbolic launch dimension gets work-groups of several threads: the launch rounds it up, the extra threads
  # are gated off (the PYTHON interpreter bounds-checks every access, so a read past the data would raise)
  from plugrad.testing import run_lowered
  n = Variable("n", 1, 40).bind(val)
  a, b = Tensor(K, device="PYTHON").realize(), Tensor(V, device="PYTHON").realize()
  got, progs = run_lowered((a.pad(((0, 24), None))[:n] * 2 + b.pad(((0, 24), None))[:n].sum(1, keepdim=True)), GPU)
  want = np.pad(K, ((0, 24), (0, 0)))[:val] * 2 + np.pad(V, ((0, 24), (0, 0)))[:val].sum(1, keepdims=True)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  prog = next(p for p in progs if p.vars)
  (v,) = prog.vars
  glob, local, _ = prog.launch_dims({v: val})
  assert local is not None and max(local) > 1
  assert all(g % lo == 0 for g, lo in zip(glob, local)) and np.prod(glob) >= val


@pytest.mark.parametrize("val", (1, 16))
def test_gpu_symbolic_size_within_one_work_group_folds_to_it(val):
  # n in [1, 16] rounds up to one group of 32 threads whatever its value: the launch size folds to that constant
  # (a launch index whose size is a constant, not a symbolic one, in the spec) and the extra threads stay gated
  from plugrad.testing import run_lowered
  n = Variable("n", 1, 16).bind(val)
  got, progs = run_lowered(Tensor(K, device="PYTHON").realize()[:n].sum(1), GPU)
  np.testing.assert_allclose(got, K[:val].sum(1), rtol=1e-5, atol=1e-5)
  prog = next(p for p in progs if p.vars)
  assert 32 in prog.global_size and prog.launch_dims({prog.vars[0]: val})[0] == prog.global_size


def test_global_size_is_evaluated_at_launch():
  v = Variable("n", 1, 16)
  x = Tensor(K, device="PYTHON").realize()
  (item,) = [it for it in (x[:v.bind(5)] * 2).schedule() if not it.is_copy]
  prog = lower(item.ast, Capabilities(launch_dims=3))
  assert any(isinstance(g, UOp) for g in prog.global_size)
  sizes = [prog.launch_dims({v: k})[0] for k in (3, 11)]
  assert sizes[0] != sizes[1] and np.prod(sizes[0]) == 3 * 8 and np.prod(sizes[1]) == 11 * 8


# ---------------------------------------------------------------- TinyJit

def test_jit_replays_with_new_bound_values(dev):
  v = Variable("n", 1, 16)
  kc, vc = Tensor(K, device=dev).realize(), Tensor(V, device=dev).realize()
  calls = []

  @TinyJit
  def step(q, n):
    calls.append(1)
    return ((q @ kc[:n].T).softmax(-1) @ vc[:n]).realize()

  for val in (4, 6, 1, 16, 9, 4):
    q = RNG.standard_normal((2, 8)).astype(np.float32)
    out = step(Tensor(q, device=dev), v.bind(val))
    eager = ((Tensor(q, device=dev) @ kc[:v.bind(val)].T).softmax(-1) @ vc[:v.bind(val)]).numpy()
    np.testing.assert_allclose(out.numpy(), eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), _softmax(q @ K[:val].T) @ V[:val], rtol=1e-4, atol=1e-5)
  assert len(calls) == 2 and step.cnt == 6


def test_jit_input_with_a_symbolic_shape(dev):
  v = Variable("n", 1, 16)

  @TinyJit
  def f(x):
    return (x * 2 + 1).sum(0).realize()

  for val in (3, 8, 5, 16):
    x = Tensor(K, device=dev).realize()[:v.bind(val)].contiguous().realize()
    out = f(x)
    np.testing.assert_allclose(out.numpy(), (K[:val] * 2 + 1).sum(0), rtol=1e-5, atol=1e-5)
  assert f.captured is not None


def test_jit_returns_a_symbolic_shape_at_the_new_value(dev):
  v = Variable("n", 1, 16)
  kc = Tensor(K, device=dev).realize()

  @TinyJit
  def f(n):
    return (kc[:n] * 3).realize()

  for val in (2, 5, 11):
    out = f(v.bind(val))
    assert out.shape[0].val == val
    np.testing.assert_allclose(out.numpy(), K[:val] * 3, rtol=1e-6)


def test_variable_at_zero_runs_nothing(dev):
  n = Variable("n", 0, 16).bind(0)
  x = Tensor(K, device=dev).realize()[:n]
  assert (x * 2).numpy().shape == (0, 8)
  assert_close(x.sum(0), np.zeros(8, np.float32))


def test_jit_checks_the_variables_it_is_passed(dev):
  v, w = Variable("n", 1, 16), Variable("m", 1, 16)
  kc = Tensor(K, device=dev).realize()

  @TinyJit
  def f(n): return kc[:n].sum(0).realize()
  for val in (2, 3): f(v.bind(val))
  with pytest.raises(TypeError, match="Variables as arguments"): f(w.bind(3))


def test_pad_by_a_variable(dev):
  n = Variable("n", 0, 5)
  x = Tensor(K[:4], device=dev)
  for val in (0, 2, 5):
    out = x.pad(((n.bind(val), 1), None), value=-1.0)
    assert_close(out, np.pad(K[:4], ((val, 1), (0, 0)), constant_values=-1))


def test_jit_kv_cache_write_and_read_at_a_variable_position(dev):
  """tinygrad's KV cache step: write this token's row at position p, attend over rows 0..p."""
  cache = Tensor.zeros(16, 8, device=dev).contiguous().realize()
  p = Variable("p", 0, 15)

  @TinyJit
  def step(row, pos):
    cache[pos:pos + 1].assign(row).realize()
    return (row @ cache[:pos + 1].T).softmax(-1) @ cache[:pos + 1]

  ref = np.zeros((16, 8), np.float32)
  for t in range(7):
    row = K[t:t + 1]
    out = step(Tensor(row, device=dev), p.bind(t))
    ref[t] = row
    np.testing.assert_allclose(cache.numpy(), ref)
    np.testing.assert_allclose(out.numpy(), _softmax(row @ ref[:t + 1].T) @ ref[:t + 1], rtol=1e-4, atol=1e-5)
  assert step.captured is not None and step.cnt == 7


def test_jit_other_concrete_shapes_still_raise(dev):
  @TinyJit
  def f(x): return (x + 1).realize()
  for _ in range(2): f(Tensor(K, device=dev))
  with pytest.raises(ValueError, match="captured with"): f(Tensor(V[:3], device=dev))


# ---------------------------------------------------------------- IR spec

def test_spec_accepts_define_var_and_bind():
  v = Variable("n", 1, 16)
  check_spec(v.bind(4), tensor_spec, "tensor graph")
  check_spec(v, kernel_spec, "kernel AST")
  check_spec(v, program_spec, "program")
  x = Tensor(K, device="PYTHON").realize()[:v.bind(4)]
  check_spec(x.uop, tensor_spec, "tensor graph")


def test_spec_rejects_a_malformed_variable():
  from plugrad.dtype import dtypes
  bad = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("n", 1, 4))
  with pytest.raises(SpecError): check_spec(bad, program_spec, "program")
  out_of_range = UOp(Ops.BIND, dtypes.int32, (Variable("n", 1, 4), UOp.const(dtypes.int32, 9)))
  with pytest.raises(SpecError): check_spec(out_of_range, tensor_spec, "tensor graph")


def test_lowered_kernel_takes_the_variable():
  v = Variable("n", 1, 16)
  x = Tensor(K, device="PYTHON").realize()
  (item,) = [it for it in x[:v.bind(5)].sum(0).schedule() if not it.is_copy]
  prog = lower(item.ast, Capabilities(), checker=lambda g, stage: check_spec(g, program_spec, stage))
  assert prog.vars == (v,) and any(u.op is Ops.RANGE and u.src[0].symbolic for u in prog.uops)


def test_schedule_cache_keys_on_the_unbound_structure(dev):
  from plugrad.engine.schedule import _caches
  from plugrad.registry import get_registry
  v = Variable("n", 1, 16)
  x = Tensor(K, device=dev).realize()
  (x[:v.bind(3)] * 2 + 1).realize()
  cache = _caches[get_registry()]
  for val in (5, 16, 1):
    misses = cache.misses
    out = (x[:v.bind(val)] * 2 + 1).realize()
    assert cache.misses == misses  # every value reuses the first value's schedule
    assert out.shape[0].val == val
    np.testing.assert_allclose(out.numpy(), K[:val] * 2 + 1, rtol=1e-6)
