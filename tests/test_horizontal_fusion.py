"""Horizontal fusion: sibling kernels of one realize that loop over the same iteration space and read a common
buffer run as one kernel with several outputs, reading that buffer once. Kernel counts are pinned; results are
compared with numpy on PYTHON and CPU (the `dev` fixture), odd sizes included."""
import dataclasses

import numpy as np
import pytest

from plugrad import Context, Tensor, TinyJit
from plugrad.builtins.python_device import PythonCompiler, PythonRenderer, PythonRuntime
from plugrad.codegen.lowerer import kernel_features, lower
from plugrad.codegen.opt import Opt, OptError, OptOps
from plugrad.codegen.opt.heuristic import hand_coded_optimizations
from plugrad.device import Capabilities
from plugrad.registry import get_registry
from plugrad.scheduler import buffer_of, contiguous_base, count_kernels, mark_done, plan_memory
from plugrad.spec import check_program, kernel_spec
from plugrad.testing import assert_close
from plugrad.dtype import dtypes
from plugrad.uops import Ops, UOp, check_spec


def realized(dev: str, *shape: int, seed: int = 0) -> Tensor:
  rng = np.random.default_rng(seed)
  return Tensor(rng.standard_normal(shape).astype(np.float32), device=dev).realize()


def kernels(*ts: Tensor) -> int:
  return count_kernels(ts[0].schedule(*ts[1:]))


def siblings(x: Tensor) -> list[Tensor]:
  return [x.sum(1), x.max(1), (x * x).sum(1)]


def np_siblings(x: np.ndarray) -> list[np.ndarray]:
  return [x.sum(1), x.max(1), (x * x).sum(1)]


# odd sizes, a row longer than the accumulator block (the cascade splits the shared loop), a row the CPU
# vectorises along (LANES), one row, one column
SHAPES = [(37, 53), (3, 1000), (4, 4096), (1, 7), (9, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sibling_reductions_are_one_kernel(dev, shape):
  x = realized(dev, *shape)
  with Context(HFUSE=0): assert kernels(*siblings(x)) == 3
  assert kernels(*siblings(x)) == 1
  outs = siblings(x)
  Tensor.realize(*outs)
  for o, e in zip(outs, np_siblings(x.numpy())): assert_close(o, e, atol=1e-3, rtol=1e-4)


def test_sibling_reductions_share_one_loop(dev):
  x = realized(dev, 8, 300)
  (item,) = x.sum(1).schedule(x.max(1), (x * x).sum(1))
  assert item.outs == 3 and len(item.bufs) == 4 and item.bufs[3] is buffer_of(contiguous_base(x.uop))  # bound once
  check_spec(item.ast, kernel_spec, "kernel AST")
  prog = lower(item.ast, get_registry().device(dev).caps)
  assert [p.written for p in prog.params] == [True, True, True, False]
  # one load of x per iteration (or per vector of iterations), not one per output (a GPU's work-group also loads
  # each output's partial sums from local memory)
  assert sum(1 for u in prog.uops if u.op.name == "LOAD" and u.src[0].op.name == "PARAM") == 1


def test_elementwise_siblings_are_one_kernel(dev):
  a, b = realized(dev, 5, 7, seed=1), realized(dev, 5, 7, seed=2)
  with Context(HFUSE=0): assert kernels(a + b, a * b) == 2
  assert kernels(a + b, a * b) == 1
  outs = [a + b, a * b, (a - b).exp2()]
  Tensor.realize(*outs)
  an, bn = a.numpy(), b.numpy()
  for o, e in zip(outs, [an + bn, an * bn, np.exp2(an - bn)]): assert_close(o, e, rtol=1e-5)


def test_outputs_of_other_dtypes_and_views(dev):
  x = realized(dev, 6, 10)
  # argmax's row max (kept as (6, 1)) fuses with the sums (6,); its second kernel reads that max, so it stays apart
  outs = [x.argmax(1), x.sum(1), (x > 0).sum(1)]
  with Context(HFUSE=0): assert kernels(*outs) == 4
  assert kernels(*outs) == 2
  wide = x.sum(1, keepdim=True).cast("float64")
  Tensor.realize(*outs, wide)
  xn = x.numpy()
  refs = [xn.argmax(1), xn.sum(1), (xn > 0).sum(1)]
  for o, e in zip(outs, refs): assert_close(o, e, rtol=1e-5)
  assert_close(wide, xn.sum(1, keepdims=True).astype(np.float64), rtol=1e-5)
  assert kernels(x.sum(1), x.T.sum(0)) == 2  # other loops (a column sum of the transpose): not fused


def test_dependent_kernels_stay_apart(dev):
  a, b = realized(dev, 4, 4, seed=1), realized(dev, 4, 4, seed=2)
  y = (a + b).contiguous()
  z = y * a  # reads y: it must run after y's kernel
  assert kernels(y, z) == 2
  # through another kernel: w reads y, z2 reads w; y and z2 share a but z2 runs two kernels after y
  y2 = (a - b).contiguous()
  w = y2.sum(1, keepdim=True).contiguous()
  z2 = a * w
  assert kernels(y2, w, z2) == 3
  Tensor.realize(y, z, y2, w, z2)
  an, bn = a.numpy(), b.numpy()
  assert_close(z, (an + bn) * an)
  assert_close(z2, an * (an - bn).sum(1, keepdims=True), rtol=1e-5)


def test_different_iteration_spaces_stay_apart(dev):
  x = realized(dev, 6, 6)
  assert kernels(x.sum(1), x.sum(0)) == 2  # same output shape, other reduce axis
  assert kernels(x.sum(1), x[:, 0] * 2) == 2  # a reduction beside an elementwise kernel


def test_other_views_of_the_shared_input_are_not_fused(dev):
  # x and x.T read in one loop: one of them strided; measured slower fused than as two kernels on CPU
  x = realized(dev, 6, 6)
  assert kernels(x.sum(1), x.T.sum(1)) == 2
  assert kernels(x + 1, x.T * 2) == 2
  assert kernels(x.sum(1), x.T.sum(1), x.max(1)) == 2  # x.max(1) joins the kernel reading x as it does


def test_nothing_shared_is_not_fused(dev):
  x, y = realized(dev, 6, 6, seed=1), realized(dev, 6, 6, seed=2)
  assert kernels(x.sum(1), y.sum(1)) == 2  # no bytes saved


@pytest.mark.parametrize("limit,expected", [(4, 2), (5, 1)])
def test_fusion_respects_the_buffer_limit(monkeypatch, limit, expected):
  dev = get_registry().device("PYTHON")
  monkeypatch.setitem(dev._roles, "plugrad_device_capabilities", dataclasses.replace(dev.caps, max_buffers=limit))
  a, b, c = (realized("PYTHON", limit, 3, seed=i) for i in range(3))  # a shape per limit: no cached schedule
  outs = [a + b + c, a * b * c]  # fused: 2 outputs and 3 inputs
  sched = outs[0].schedule(*outs[1:])
  assert count_kernels(sched) == expected
  assert all(len(it.bufs) <= limit for it in sched)
  outs = [a + b + c, a * b * c]
  Tensor.realize(*outs)
  an, bn, cn = a.numpy(), b.numpy(), c.numpy()
  assert_close(outs[0], an + bn + cn)
  assert_close(outs[1], an * bn * cn)


def test_greedy_merges_the_best_pairs_first():
  # x is big, y small: the two kernels reading x fuse; the third reads only y and joins through y
  x, y = realized("PYTHON", 4, 64, seed=1), realized("PYTHON", 4, 64, seed=2)
  assert kernels(x.sum(1), (x * y).sum(1), y.max(1)) == 1
  outs = [x.sum(1), (x * y).sum(1), y.max(1)]
  Tensor.realize(*outs)
  xn, yn = x.numpy(), y.numpy()
  for o, e in zip(outs, [xn.sum(1), (xn * yn).sum(1), yn.max(1)]): assert_close(o, e, rtol=1e-5, atol=1e-5)


def test_memory_plan_counts_every_output():
  x = realized("PYTHON", 8, 32)
  items = x.sum(1).schedule(x.max(1), (x * x).sum(1))
  plan = plan_memory(items)
  assert plan.bytes_read == 8 * 32 * 4 and plan.bytes_written == 3 * 8 * 4 and plan.peak_bytes == 3 * 8 * 4


def test_debug_1_reports_the_fused_bytes():
  import io
  from plugrad.builtins.debug import DebugPlugin
  from plugrad.config import Config
  stream = io.StringIO()
  reg = get_registry()
  plugin = DebugPlugin(Config(debug=1), stream)
  reg.pm.register(plugin)
  try:
    x = realized("PYTHON", 8, 32)
    Tensor.realize(*siblings(x))
  finally:
    reg.pm.unregister(plugin)
  assert "realized: 1 kernels, 0 copies in" in stream.getvalue()
  assert f"read {8 * 32 * 4} B, wrote {3 * 8 * 4} B" in stream.getvalue()


def test_schedule_cache_reuses_the_fused_schedule(dev):
  for seed in range(3):  # the second and third realize instantiate the cached template on new buffers
    x = realized(dev, 5, 9, seed=seed)
    outs = siblings(x)
    Tensor.realize(*outs)
    for o, e in zip(outs, np_siblings(x.numpy())): assert_close(o, e, rtol=1e-5, atol=1e-5)
    later = outs[0] + outs[1]  # the outputs read as buffers afterwards
    assert kernels(later) == 1
    assert_close(later, x.numpy().sum(1) + x.numpy().max(1), rtol=1e-5)


def test_scheduled_but_not_run_then_realized(dev):
  x = realized(dev, 5, 9)
  outs = siblings(x)
  assert count_kernels(outs[0].schedule(*outs[1:])) == 1  # scheduling runs nothing
  assert_close(outs[1], x.numpy().max(1))  # one output realized alone, from its own kernel
  Tensor.realize(*outs)
  for o, e in zip(outs, np_siblings(x.numpy())): assert_close(o, e, rtol=1e-5, atol=1e-5)


def test_tinyjit_replays_a_multi_output_kernel(dev):
  @TinyJit
  def f(x):
    return x.sum(1), x.max(1), (x * x).sum(1)

  rng = np.random.default_rng(0)
  for _ in range(4):
    xn = rng.standard_normal((7, 11)).astype(np.float32)
    outs = f(Tensor(xn, device=dev))
    for o, e in zip(outs, np_siblings(xn)): assert_close(o, e, rtol=1e-5, atol=1e-5)


def test_sibling_assigns_fuse(dev):
  # an optimizer's two moment updates read the same gradient: one kernel writing both in place
  m, v = realized(dev, 3, 5, seed=1), realized(dev, 3, 5, seed=2)
  g = realized(dev, 3, 5, seed=3)
  mn, vn, gn = m.numpy(), v.numpy(), g.numpy()
  m.assign(m * 0.9 + g * 0.1)
  v.assign(v * 0.99 + g * g * 0.01)
  assert kernels(m, v) == 1
  Tensor.realize(m, v)
  assert_close(m, mn * 0.9 + gn * 0.1, rtol=1e-5)
  assert_close(v, vn * 0.99 + gn * gn * 0.01, rtol=1e-5)


# ---------------------------------------------------------------- plans on a multi-output kernel

AVX2 = Capabilities(max_vector_bytes=32, vector_ops=True)
GPU = Capabilities(launch_dims=3, max_local_size=(1024, 1024, 64), max_workgroup_threads=1024, local_memory=48 * 1024)
U, V, R, G, L = OptOps.UPCAST, OptOps.VECTORIZE, OptOps.UNROLL, OptOps.GROUP, OptOps.LANES


def run_plan(outs: list[Tensor], caps: Capabilities, opts: tuple[Opt, ...] | None) -> list[np.ndarray]:
  """Schedule `outs` (one kernel), lower it for `caps` with `opts` and run it on the PYTHON interpreter."""
  (item,) = outs[0].schedule(*outs[1:])
  prog = lower(item.ast, caps, opts=opts)
  check_program(prog)
  runner = PythonRuntime().load(prog.name, PythonCompiler().compile(PythonRenderer("PYTHON").render(prog))[0])
  runner(*(b.raw for b in item.bufs), global_size=prog.global_size, local_size=prog.local_size)
  for k in item.kernels: mark_done(k)
  return [o.numpy() for o in outs]


PLANS = [
  ("columns VECTORIZE", lambda x: [x.sum(0), x.max(0), (x * x).sum(0)], AVX2, (Opt(V, 0, 8),)),
  ("columns VECTORIZE+UPCAST", lambda x: [x.sum(0), x.max(0)], AVX2, (Opt(V, 0, 8), Opt(U, 0, 2))),
  ("columns UPCAST scalar", lambda x: [x.sum(0), x.max(0)], Capabilities(), (Opt(U, 0, 4),)),
  ("rows LANES", lambda x: [x.sum(1), x.max(1), (x * x).sum(1)], AVX2, (Opt(L, 0, 8), Opt(L, 1, 8), Opt(L, 2, 8))),
  ("rows UNROLL", lambda x: [x.sum(1), x.max(1)], Capabilities(), (Opt(R, 0, 4), Opt(R, 1, 4))),
  ("rows heuristic GPU", lambda x: [x.sum(1), x.max(1)], GPU, None),
  ("rows heuristic AVX2", lambda x: [x.sum(1), x.max(1), (x * x).sum(1)], AVX2, None),
  ("elementwise heuristic GPU", lambda x: [x + 1, x * x], GPU, None),
]


@pytest.mark.parametrize("name,graph,caps,opts", PLANS, ids=[p[0] for p in PLANS])
def test_plans_on_multi_output_kernels(name, graph, caps, opts):
  x = realized("PYTHON", 16, 32)
  got = run_plan(graph(x), caps, opts)
  for o, e in zip(got, [f(x.numpy()) for f in _np_graph(name)]):
    np.testing.assert_allclose(o, e, rtol=1e-5, atol=1e-5)


def _np_graph(name: str) -> list:
  if name.startswith("elementwise"): return [lambda a: a + 1, lambda a: a * a]
  if name.startswith("columns"):
    fs = [lambda a: a.sum(0), lambda a: a.max(0), lambda a: (a * a).sum(0)]
  else:
    fs = [lambda a: a.sum(1), lambda a: a.max(1), lambda a: (a * a).sum(1)]
  n = {"columns VECTORIZE": 3, "rows LANES": 3, "rows heuristic AVX2": 3}.get(name, 2)
  return fs[:n]


@pytest.mark.parametrize("shape", [(4, 256), (3, 1001)], ids=str)
def test_group_splits_every_output_across_a_work_group(shape):
  x = realized("PYTHON", *shape)
  outs = siblings(x)
  (item,) = outs[0].schedule(*outs[1:])
  plans = hand_coded_optimizations(kernel_features(item.ast, GPU), GPU)
  assert any(o.op is G for o in plans[0])  # as a single row sum would be on this device
  got = run_plan(outs, GPU, plans[0])
  for o, e in zip(got, np_siblings(x.numpy())): np.testing.assert_allclose(o, e, rtol=1e-5, atol=1e-4)


def test_group_needs_reductions_that_share_their_loops():
  x = realized("PYTHON", 4, 64)
  (item,) = x.sum(1).schedule((x * 2).sum(1, keepdim=True) * 2)  # one output, one reduction each: shared loops
  lower(item.ast, GPU, opts=(Opt(G, 0, 16),))
  # row sums of a 4x64 and a 4x32 input in one kernel (the scheduler never fuses these): their loops differ
  f32 = dtypes.float32

  def row_sum(out: int, src: int, cols: int) -> UOp:
    rows = UOp(Ops.RESHAPE, f32, (UOp(Ops.PARAM, f32, (), (src, 4 * cols)),), (4, cols))
    total = UOp(Ops.RESHAPE, f32, (UOp(Ops.REDUCE_AXIS, f32, (rows,), (Ops.ADD, (1,))),), (4,))
    return UOp(Ops.STORE, None, (UOp(Ops.PARAM, f32, (), (out, 4)), total))
  ast = UOp(Ops.SINK, None, (row_sum(0, 2, 64), row_sum(1, 3, 32)))
  check_spec(ast, kernel_spec, "kernel AST")
  lower(ast, GPU)  # the heuristic's GROUP plan does not apply: the scalar plan does
  with pytest.raises(OptError):
    lower(ast, GPU, opts=(Opt(G, 0, 16),))
