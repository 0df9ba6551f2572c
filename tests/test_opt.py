"""Kernel optimizations as data (plugrad.codegen.opt): every Opt on every kernel shape class gives
numpy's answer on PYTHON and CPU, a plan that does not fit is an OptError, and the heuristic's
choice for given capabilities is pinned per case."""
from dataclasses import replace
from typing import Callable

import numpy as np
import pytest

from plugrad import Tensor, dtypes
from plugrad.codegen.lowerer import kernel_features, lower
from plugrad.codegen.opt import Opt, OptError, OptOps
from plugrad.codegen.opt.heuristic import hand_coded_optimizations
from plugrad.codegen.opt.search import PlanCache, beam_search, neighbours, plan_key
from plugrad.config import Config
from plugrad.testing import assert_close
from plugrad.device import Capabilities
from plugrad.engine.compile import _plan_cache, _plan_caches, searched_plan
from plugrad.registry import Registry, get_registry, set_registry
from plugrad.scheduler import mark_done
from plugrad.spec import check_program
from plugrad.testing import available_devices, run_lowered
from plugrad.uops import Ops

U, V, R, G, L, O, B = OptOps.UPCAST, OptOps.VECTORIZE, OptOps.UNROLL, OptOps.GROUP, OptOps.LANES, OptOps.OUTER, OptOps.BLOCK
AVX512 = Capabilities(max_vector_bytes=64, vector_ops=True)  # the vector registers are left at the default 16
AVX2 = Capabilities(max_vector_bytes=32, vector_ops=True)
SCALAR = Capabilities(max_vector_bytes=32)
ORDERED = replace(AVX512, ordered_launch=True)  # launch loops that run in order, as the CPU plugin's
GPU = Capabilities(launch_dims=3, max_local_size=(1024, 1024, 64), max_workgroup_threads=1024, local_memory=48 * 1024)


def _devices() -> list[str]:
  return [d for d in ("PYTHON", "CPU") if d in available_devices()]


def run_with(out: Tensor, device: str, plan: Callable[[int], tuple[Opt, ...]], *siblings: Tensor
             ) -> tuple[np.ndarray, list]:
  """Realize `out` (and `siblings` with it: one kernel of several outputs where they fuse) on `device`, lowering its
  last kernel with the plan `plan(0)` (the others with the heuristic's), through the device's own renderer, compiler
  and runtime."""
  dev = get_registry().device(device)
  items = [it for it in out.schedule(*siblings) if not it.is_copy]
  progs = []
  for i, item in enumerate(items):
    prog = lower(item.ast, dev.caps, dev.rewrite_rules, opts=plan(0) if i == len(items) - 1 else None)
    check_program(prog)
    progs.append(prog)
    runner = dev.runtime.load(prog.name, dev.compiler.compile(dev.renderer.render(prog))[0])
    runner(*(b.raw for b in item.bufs), global_size=prog.global_size, local_size=prog.local_size)
    mark_done(item.kernel)
  return out.numpy(), progs


def _x(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# (name, numpy inputs, build(tensors), reference(arrays), plans that apply)
CASES = [
  # b read transposed keeps the two axes apart (contiguous operands merge them into one: the next case)
  ("elementwise", [(37, 19), (19, 37)], lambda a, b: (a * b.transpose() + 1).relu(),
   lambda a, b: np.maximum(a * b.T + 1, 0), [(), (Opt(U, 0, 19),), (Opt(U, 1, 37),), (Opt(U, 0, 19), Opt(O, 0, 1))]),
  ("elementwise_merged", [(37, 19), (37, 19)], lambda a, b: (a * b + 1).relu(), lambda a, b: np.maximum(a * b + 1, 0),
   [(), (Opt(U, 0, 19),), (Opt(U, 0, 37), Opt(O, 0, 1))]),
  ("row_sum", [(12, 40)], lambda a: a.sum(axis=1), lambda a: a.sum(axis=1, keepdims=False),
   [(), (Opt(U, 0, 4),), (Opt(U, 0, 4), Opt(R, 0, 8)), (Opt(R, 0, 40),), (Opt(R, 0, 5),), (Opt(L, 0, 4),),
    (Opt(L, 0, 8), Opt(U, 0, 3)), (Opt(L, 0, 4), Opt(R, 0, 5)), (Opt(L, 0, 4), Opt(R, 0, 2), Opt(U, 0, 3)),
    (Opt(L, 0, 8), Opt(R, 0, 5))]),
  ("exp_sum", [(6, 64)], lambda a: (a - 1).exp().sum(axis=1), lambda a: np.exp(a.astype(np.float64) - 1).sum(axis=1),
   [(), (Opt(L, 0, 4),), (Opt(L, 0, 16),), (Opt(L, 0, 2), Opt(U, 0, 2)), (Opt(L, 0, 16), Opt(R, 0, 2)),
    (Opt(L, 0, 4), Opt(R, 0, 4), Opt(U, 0, 3))]),
  ("col_max", [(40, 12)], lambda a: a.max(axis=0), lambda a: a.max(axis=0),
   [(), (Opt(V, 0, 4),), (Opt(U, 0, 3),), (Opt(V, 0, 4), Opt(R, 0, 2)), (Opt(R, 0, 40),), (Opt(V, 0, 8),),
    (Opt(V, 0, 16), Opt(R, 0, 2))]),
  ("matmul", [(24, 36), (36, 20)], lambda a, b: a @ b, lambda a, b: a @ b,
   [(), (Opt(V, 0, 4), Opt(U, 1, 8)), (Opt(U, 0, 5), Opt(U, 1, 3)), (Opt(V, 0, 4), Opt(U, 0, 5), Opt(U, 1, 4)),
    (Opt(V, 0, 2), Opt(U, 0, 2), Opt(R, 0, 3)), (Opt(V, 0, 4), Opt(U, 1, 2), Opt(R, 0, 4)),
    (Opt(U, 0, 2), Opt(R, 0, 9)), (Opt(V, 0, 4), Opt(U, 1, 2), Opt(O, 0, 1)), (Opt(V, 0, 8), Opt(U, 1, 8)),
    (Opt(V, 0, 16), Opt(U, 1, 4), Opt(O, 0, 1)), (Opt(V, 0, 4), Opt(U, 1, 4), Opt(R, 0, 4))]),
  # a linear layer's x @ W.T reads both operands along the sum: lanes on it, a tile of outputs on the launch dims
  ("linear", [(6, 48), (12, 48)], lambda x, w: x @ w.transpose(), lambda x, w: x @ w.T,
   [(), (Opt(L, 0, 16),), (Opt(L, 0, 16), Opt(U, 0, 4), Opt(U, 1, 2)), (Opt(L, 0, 8), Opt(U, 0, 2), Opt(U, 1, 3)),
    (Opt(L, 0, 16), Opt(U, 0, 4), Opt(U, 1, 2), Opt(R, 0, 3)), (Opt(L, 0, 4), Opt(U, 0, 12), Opt(U, 1, 6))]),
  ("conv", [(2, 3, 9, 9), (4, 3, 3, 3)], lambda x, w: x.conv2d(w, padding=1),
   lambda x, w: _conv_ref(x, w), [(), (Opt(R, 1, 3), Opt(R, 2, 3)), (Opt(U, 0, 3), Opt(R, 0, 3)), (Opt(U, 1, 3),),
                                  (Opt(U, 1, 3), Opt(O, 0, 1)), (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 4), Opt(U, 2, 4)),
                                  (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 16), Opt(U, 1, 3)),
                                  (Opt(V, 0, 16), Opt(U, 1, 3), Opt(R, 1, 3)),  # kernel rows beside image rows
                                  (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 16), Opt(U, 2, 2))]),
  # lanes along the output channels, which the weight's copy has innermost (Tensor._channels_innermost)
  ("channel_lanes_conv", [(2, 5, 7, 7), (32, 5, 3, 3)], lambda x, w: x.conv2d(w, padding=1),
   lambda x, w: _conv_ref(x, w),
   [(Opt(V, 2, 16), Opt(U, 0, 7)), (Opt(V, 2, 16), Opt(U, 2, 2), Opt(U, 0, 7)),
    (Opt(V, 2, 8), Opt(U, 2, 4), Opt(U, 1, 7)), (Opt(V, 2, 4),), (Opt(V, 2, 4), Opt(U, 0, 7), Opt(R, 0, 5)),
    (Opt(V, 2, 2), Opt(U, 2, 2), Opt(U, 0, 7), Opt(R, 1, 3))]),
  ("strided_conv", [(1, 3, 12, 12), (4, 3, 3, 3)], lambda x, w: x.conv2d(w, stride=2, padding=1),
   lambda x, w: _conv_ref(x, w)[:, :, ::2, ::2],
   [(), (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 2), Opt(U, 1, 2)), (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 3))]),
  ("pooled_conv", [(1, 4, 8, 6), (8, 4, 3, 3)], lambda x, w: x.conv2d(w, padding=1).relu().mean((2, 3)),
   lambda x, w: np.maximum(_conv_ref(x, w), 0).mean((2, 3)),
   [(), (Opt(L, 4, 2), Opt(U, 0, 8)), (Opt(L, 4, 3), Opt(U, 0, 4)), (Opt(L, 4, 2), Opt(U, 0, 2), Opt(R, 1, 3)),
    (Opt(R, 1, 3), Opt(R, 2, 3), Opt(L, 4, 6), Opt(U, 0, 8))]),
  ("cumsum", [(6, 33)], lambda a: a.cumsum(axis=1), lambda a: np.cumsum(a, axis=1),
   [(), (Opt(U, 0, 3),), (Opt(U, 0, 11), Opt(U, 1, 2))]),
  # the copy of the nested max that reads row 1 of the cat has its gate folded to false: it leaves the sum's loop,
  # the other copy stays in it, and each needs a loop of its own
  ("upcast_copy_hoisted", [(5, 9, 8), (5, 9, 8)], lambda a, b: a.max(axis=0, keepdim=True).cat(b).sum(axis=1),
   lambda a, b: np.concatenate([a.max(axis=0, keepdims=True), b]).sum(axis=1),
   [(), (Opt(V, 0, 4), Opt(U, 1, 2)), (Opt(V, 0, 4), Opt(U, 0, 2), Opt(U, 1, 2))]),
  # x @ w1 inside the loop of the matmul with w2 and again after it: its vector accumulator starts before both
  ("reduction_inside_and_after_a_loop", [(64,), (64, 1), (65, 1), (1, 2)],
   lambda x, w1, w2, w3: ((x @ w1).cat(x) @ w2 - x @ w1) @ w3,
   lambda x, w1, w2, w3: ((np.concatenate([x @ w1, x]) @ w2) - x @ w1) @ w3,
   [(), (Opt(L, 0, 4),), (Opt(L, 0, 4), Opt(R, 0, 4))]),
]


def _conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  n, c, h, wd = x.shape
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  out = np.zeros((n, w.shape[0], h, wd), np.float64)
  for i in range(3):
    for j in range(3): out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
  return out


@pytest.mark.parametrize("on", _devices())
@pytest.mark.parametrize("name,shapes,build,ref,plans", CASES, ids=[c[0] for c in CASES])
def test_every_plan_gives_numpys_answer(on, name, shapes, build, ref, plans):
  arrays = [_x(*s, seed=i) for i, s in enumerate(shapes)]
  want = ref(*arrays)
  for plan in plans:
    got, progs = run_with(build(*(Tensor(a, device=on) for a in arrays)), on, lambda _: plan)
    assert progs[-1].opts == plan
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} {plan} on {on}")


@pytest.mark.parametrize("on", _devices())
def test_a_reduction_nested_in_a_sum_over_an_empty_axis_gives_zeros(on):
  # the heuristic's plan for the max inside gave its empty outer axis vector lanes (a division by zero)
  x, w = _x(7), _x(0, 8)
  out = Tensor(x, device=on).max(axis=0, keepdim=True)[1:1] @ Tensor(w, device=on)
  np.testing.assert_array_equal(out.numpy(), np.zeros(8, np.float32))


@pytest.mark.parametrize("plan,why", [
  ((Opt(U, 0, 5),), "divide"), ((Opt(V, 0, 4), Opt(U, 0, 5)), "divide"), ((Opt(U, 2, 2),), "launch dimension"),
  ((Opt(R, 0, 7),), "divide"), ((Opt(L, 0, 7),), "divide"), ((Opt(L, 0, 4), Opt(R, 0, 3)), "4 lanes times 3"),
  ((Opt(R, 3, 2),), "reduce axes"), ((Opt(U, 0, 2), Opt(U, 0, 4)), "repeats"), ((Opt(G, 0, 16),), "work-groups"),
  ((Opt(O, 0, 2),), "amount 1"), ((Opt(O, 2, 1),), "launch dimensions"), ((Opt(O, 0, 1), Opt(O, 1, 1)), "one OUTER"),
])
def test_plans_that_do_not_fit_are_opt_errors(plan, why):
  item = [it for it in (Tensor.empty(12, 40, device="PYTHON") @ Tensor.empty(40, 12, device="PYTHON")).schedule()
          if not it.is_copy][-1]
  with pytest.raises(OptError, match=why): lower(item.ast, get_registry().device("PYTHON").caps, opts=plan)


def _ordered_devices() -> list[str]:
  """The devices whose launch loops run in order (Capabilities.ordered_launch), where BLOCK applies."""
  return [d for d in _devices() if get_registry().device(d).caps.ordered_launch]


# a sum of 600 terms is cut into 3 blocks of 200 (lowerer.split_accumulators), 257 terms into 256 and 1 (the last block
# gated): BLOCK runs them inside groups of rows or columns, adding each block's sums to the outputs
BLOCKED_CASES = [
  ("blocked_matmul", [(16, 600), (600, 32)], lambda a, b: a @ b, lambda a, b: a @ b,
   [(Opt(B, 1, 4),), (Opt(B, 1, 16),), (Opt(B, 1, 1),), (Opt(B, 0, 8),), (Opt(V, 0, 8), Opt(U, 1, 2), Opt(B, 1, 2)),
    (Opt(V, 0, 16), Opt(U, 0, 2), Opt(U, 1, 8), Opt(B, 1, 2)), (Opt(U, 0, 4), Opt(R, 0, 2), Opt(B, 1, 8))]),
  ("blocked_matmul_padded", [(8, 257), (257, 16)], lambda a, b: a @ b, lambda a, b: a @ b,
   [(Opt(B, 1, 2),), (Opt(V, 0, 16), Opt(U, 1, 4), Opt(B, 1, 1))]),
]


@pytest.mark.parametrize("on", _ordered_devices())
@pytest.mark.parametrize("name,shapes,build,ref,plans", BLOCKED_CASES, ids=[c[0] for c in BLOCKED_CASES])
def test_every_block_plan_gives_numpys_answer(on, name, shapes, build, ref, plans):
  arrays = [_x(*s, seed=i) for i, s in enumerate(shapes)]
  for plan in plans:
    got, progs = run_with(build(*(Tensor(a, device=on) for a in arrays)), on, lambda _: plan)
    assert progs[-1].opts == plan
    np.testing.assert_allclose(got, ref(*arrays), rtol=1e-4, atol=1e-4, err_msg=f"{name} {plan} on {on}")


@pytest.mark.parametrize("on", _ordered_devices())
def test_block_of_sibling_sums_gives_numpys_answer(on):
  # two sums fused into one kernel of two outputs (horizontal fusion): each store adds its own block's sums
  x = _x(16, 600)
  for plan in ((Opt(B, 0, 4),), (Opt(U, 0, 2), Opt(B, 0, 2))):
    t = Tensor(x, device=on)
    squares = (t * t).sum(1)
    got, progs = run_with(t.sum(1), on, lambda _: plan, squares)
    assert progs[-1].opts == plan and len(progs[-1].params) == 3  # two outputs and the input: one kernel
    assert progs[-1].global_size[1] == 3  # the 3 blocks of 200
    np.testing.assert_allclose(got, x.sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(squares.numpy(), (x * x).sum(1), rtol=1e-4, atol=1e-4)


def test_block_needs_launch_loops_that_run_in_order():
  # the PYTHON device computes a launch as whole-grid arrays, where no block would see the one before it
  item = [it for it in (Tensor.empty(16, 600, device="PYTHON") @ Tensor.empty(600, 8, device="PYTHON")).schedule()
          if not it.is_copy][-1]
  assert not get_registry().device("PYTHON").caps.ordered_launch
  for caps in (get_registry().device("PYTHON").caps, GPU, replace(GPU, ordered_launch=True)):
    with pytest.raises(OptError, match="in order"): lower(item.ast, caps, opts=(Opt(B, 1, 2),))


@pytest.mark.parametrize("build,plan,why", [
  (lambda a, b: a @ b, (Opt(B, 1, 3),), "do not divide"), (lambda a, b: a @ b, (Opt(B, 2, 2),), "launch dimensions"),
  (lambda a, b: a @ b, (Opt(B, 1, 2), Opt(O, 0, 1)), "not beside an OUTER"),
  (lambda a, b: a @ b, (Opt(B, 1, 2), Opt(B, 0, 2)), "one BLOCK"),
  (lambda a, b: (a @ b).relu(), (Opt(B, 1, 2),), "stored as it is"),  # the relu applies to the whole sum only
  (lambda a, b: (a * 2).max(axis=1), (Opt(B, 0, 2),), "cut into blocks"),  # a max is not cut
  (lambda a, b: a[:, :40] @ b[:40], (Opt(B, 1, 2),), "cut into blocks"),  # a sum of 40 terms has one accumulator
  (lambda a, b: a @ b, (Opt(R, 0, 4), Opt(B, 1, 2)), "cut into blocks"),  # ... and so has a loop of 150 steps
  (lambda a, b: a @ b, (Opt(V, 0, 8), Opt(B, 0, 2)), "do not divide"),  # 2 groups of 8 columns: 16 vectors of 8
])
def test_block_plans_that_do_not_fit_are_opt_errors(build, plan, why):
  a, b = Tensor.empty(16, 600, device="PYTHON"), Tensor.empty(600, 8, device="PYTHON")
  item = [it for it in build(a, b).schedule() if not it.is_copy][-1]
  with pytest.raises(OptError, match=why): lower(item.ast, ORDERED, opts=plan)


@pytest.mark.parametrize("on", _ordered_devices())
def test_block_gives_the_same_sums_to_the_bit(on):
  # each block adds its sums to what the blocks before it stored, the first to 0: the accumulator's own additions
  a, b = _x(32, 1000, seed=1), _x(1000, 48, seed=2)
  plain, _ = run_with(Tensor(a, device=on) @ Tensor(b, device=on), on, lambda _: (Opt(U, 1, 4),))
  blocked, progs = run_with(Tensor(a, device=on) @ Tensor(b, device=on), on, lambda _: (Opt(U, 1, 4), Opt(B, 1, 2)))
  assert progs[-1].global_size == (48, 2, 4, 4)  # columns, row tiles in a group, the 4 blocks of 250, the groups
  np.testing.assert_array_equal(blocked.view(np.int32), plain.view(np.int32))


def test_a_group_whose_reduce_loop_is_unrolled_away_is_an_opt_error():
  # GROUP sets launch dim 0 aside for the work-group; with the loop written out nothing used it, and the outputs
  # were indexed by dimensions the launch did not have (a beam-search plan on OpenCL left most outputs unwritten)
  item = [it for it in Tensor.empty(67, 16, 4, device="PYTHON").max(axis=1).schedule() if not it.is_copy][-1]
  lower(item.ast, GPU, opts=(Opt(G, 0, 16),))  # the loop split across 16 threads: fine
  with pytest.raises(OptError, match="no reduce loop"): lower(item.ast, GPU, opts=(Opt(G, 0, 16), Opt(R, 0, 16)))


def test_vectorize_that_only_gathers_is_an_opt_error_and_the_heuristic_falls_back():
  # a row sum's outputs are a row apart: lanes along them would only gather
  item = [it for it in Tensor.empty(8, 64, device="PYTHON").sum(axis=1).schedule() if not it.is_copy][-1]
  with pytest.raises(OptError, match="neighbouring"): lower(item.ast, AVX512, opts=(Opt(V, 0, 8),))
  assert lower(item.ast, replace(AVX512, vector_ops=False)).opts == (Opt(U, 0, 8),)


@pytest.mark.parametrize("stride,size", [(1, 16), (2, 16), (2, 15)])
def test_masked_loads_read_window_edges_and_strides_as_vectors(stride, size):
  # a padded convolution's taps at the image edge, and a stride-2 convolution's every other element: lanes with
  # gates of their own, or indices two apart, are one masked load (the last element of a stride-2 window
  # of an odd-sized image lies past the buffer's end: masked off, never read)
  # (three output channels: no whole vector of them, so the weight is read as it is, in one kernel)
  x, w = _x(1, 3, size, size), _x(3, 3, 3, 3, seed=1)
  want = _conv_ref(x, w)[:, :, ::stride, ::stride]
  plan = (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 8), Opt(U, 1, 4))  # 8 outputs of a row as one vector
  def lowered(masked: bool):
    t = Tensor(x, device="PYTHON").conv2d(Tensor(w, device="PYTHON"), stride=stride, padding=1)
    return run_lowered(t, replace(AVX512, masked_loads=masked), opts=plan)
  got, progs = lowered(True)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  loads = [u for u in progs[-1].uops if u.op is Ops.LOAD]
  masked = [u for u in loads if len(u.src) == 3 and u.src[2].dtype.count > 1]
  assert masked and all(u.dtype.count == 8 * stride for u in masked)
  assert not any(u.dtype.count == 1 and u.src[0].arg[0] == 1 for u in loads)  # no lane of the image gathered
  gathered, progs = lowered(False)
  np.testing.assert_allclose(gathered, want, rtol=1e-4, atol=1e-4)
  assert not any(u.op is Ops.LOAD and len(u.src) == 3 and u.src[2].dtype.count > 1 for u in progs[-1].uops)


@pytest.mark.parametrize("on", _devices())
@pytest.mark.parametrize("dtype", ["float32", "bool", "bfloat16"])
def test_a_vector_wider_than_what_is_left_masks_its_extra_lanes(on, dtype):
  # 20 column sums as two vectors of 16: the second one's last 12 lanes read nothing and store nothing (on PYTHON
  # a live lane out of bounds raises); bool and bfloat16 outputs are stored lane by lane behind their gates
  x = _x(3, 20)
  build = {"float32": lambda t: t.sum(axis=0), "bool": lambda t: t.sum(axis=0) > 0,
           "bfloat16": lambda t: t.cast("bfloat16").sum(axis=0)}[dtype]
  want = build(Tensor(x, device="PYTHON")).numpy()
  got, progs = run_with(build(Tensor(x, device=on)), on, lambda _: (Opt(V, 0, 16),))
  np.testing.assert_array_equal(got, want)
  assert progs[-1].global_size[0] == 2
  stores = [u for u in progs[-1].uops if u.op is Ops.STORE]
  assert stores and all(len(u.src) == 4 and u.src[3].dtype.count == 16 for u in stores)
  assert all(len(u.src) == 3 for u in progs[-1].uops if u.op is Ops.LOAD)  # every load of x gated per lane


def test_masked_lanes_need_a_device_with_masked_loads():
  item = [it for it in Tensor.empty(3, 20, device="PYTHON").sum(axis=0).schedule() if not it.is_copy][-1]
  with pytest.raises(OptError, match="masked loads"): lower(item.ast, AVX512, opts=(Opt(V, 0, 16),))
  with pytest.raises(OptError, match="do not divide"):  # only a VECTORIZE alone on dim 0 leaves lanes masked
    lower(item.ast, replace(AVX512, masked_loads=True), opts=(Opt(V, 0, 8), Opt(U, 0, 2)))
  assert lower(item.ast, replace(AVX512, masked_loads=True), opts=(Opt(V, 0, 16),)).global_size[0] == 2


def _plans(out: Tensor, caps: Capabilities) -> list[tuple[Opt, ...]]:
  item = [it for it in out.schedule() if not it.is_copy][-1]
  return hand_coded_optimizations(kernel_features(item.ast, caps), caps)


def test_a_stride_2_gather_upcasts_by_2_so_its_divisions_fold():
  # the max-pool input gradient reads dim 0 as x // 2 and x % 2 and its vectors would only gather: two outputs per
  # thread make both constants in each copy; after the vector plans, before the scalar one
  xn = np.random.default_rng(0).standard_normal((2, 4, 12, 12)).astype(np.float32)
  x = Tensor(xn, device="PYTHON").requires_grad_(True)
  x.max_pool2d(2).square().sum().backward()
  asts = [it.ast for it in x.grad.schedule() if not it.is_copy]
  gather = next(a for a in asts if 2 in kernel_features(a, AVX512).lane_divisors)
  plans = hand_coded_optimizations(kernel_features(gather, AVX512), AVX512)
  assert plans[-2:] == [(Opt(R, 0, 3), Opt(U, 0, 2)), (Opt(R, 0, 3),)]
  assert lower(gather, AVX512).opts == (Opt(R, 0, 3), Opt(U, 0, 2))
  windows = xn.reshape(2, 4, 6, 2, 6, 2)
  top = windows.max(axis=(3, 5), keepdims=True)
  assert_close(x.grad, (2 * top * (windows == top)).reshape(xn.shape), atol=1e-5)


def test_heuristic_choices_are_pinned():
  mm = Tensor.empty(64, 64, device="PYTHON") @ Tensor.empty(64, 64, device="PYTHON")
  assert _plans(mm, AVX512) == [(Opt(V, 0, 16), Opt(U, 1, 8)), (Opt(U, 0, 8), Opt(U, 1, 4))]  # 16 registers
  # with 32 registers 2 x 8 vectors; a sum of 128 terms or more written out 4 steps an iteration (16 registers: not
  # measured)
  assert _plans(mm, replace(AVX512, vector_registers=32))[0] == (Opt(V, 0, 16), Opt(U, 0, 2), Opt(U, 1, 8))
  long_sum = Tensor.empty(64, 128, device="PYTHON") @ Tensor.empty(128, 64, device="PYTHON")
  assert _plans(long_sum, replace(AVX512, vector_registers=32))[0] == \
    (Opt(V, 0, 16), Opt(U, 0, 2), Opt(U, 1, 8), Opt(R, 0, 4))
  # ... only where the rows reuse the loads: an embedding's lookup, a one-hot sum the lowering reads as one load per
  # value, unrolled would sum the whole vocabulary again
  lookup = Tensor.empty(1000, 64, device="PYTHON")[Tensor.zeros(8, 32, dtype=dtypes.int32, device="PYTHON")]
  assert _plans(lookup, replace(AVX512, vector_registers=32))[0] == (Opt(V, 0, 16), Opt(U, 0, 2), Opt(U, 1, 8))
  assert _plans(mm, AVX2) == [(Opt(V, 0, 8), Opt(U, 1, 8)), (Opt(U, 0, 8), Opt(U, 1, 4))]
  assert _plans(mm, SCALAR) == [(Opt(U, 0, 8), Opt(U, 1, 4))]
  # GPU: groups of 32-256 threads adding at least 64 values each, four loads in flight when the loop is long (its
  # innermost loop, where the sum runs over several axes); not where neighbouring outputs read neighbouring elements
  # and the sum reads strided (a column sum, a small matmul's columns of B: a thread per output, loads side by side);
  # outputs too many to group get 4 x 8 tiles whose long sums run two terms an iteration, and large elementwise
  # kernels 4 outputs per thread
  assert _plans(mm, GPU) == [()]
  assert _plans(Tensor.empty(4096, 4096, device="PYTHON").sum(axis=1), GPU) == [(Opt(G, 0, 64),), ()]
  assert _plans(Tensor.empty(4096, 4096, device="PYTHON").sum(axis=0), GPU) == [()]
  assert _plans(Tensor.empty(256, 65536, device="PYTHON").sum(axis=1), GPU) == [(Opt(G, 0, 256), Opt(R, 0, 4)), ()]
  chain = [it for it in (Tensor.empty(4096, 4096, device="PYTHON") * 2).sum().schedule() if not it.is_copy][0]
  assert kernel_features(chain.ast, GPU).reduce_axes == (16, 4096)  # 256 partial sums over (16, 4096) each
  assert hand_coded_optimizations(kernel_features(chain.ast, GPU), GPU) == [(Opt(G, 0, 256), Opt(R, 1, 4)), ()]
  big = Tensor.empty(1024, 1024, device="PYTHON")
  assert _plans(big @ big, GPU) == [(Opt(U, 0, 4), Opt(U, 1, 8), Opt(R, 0, 2)), ()]
  assert _plans(big * 2, GPU) == [(Opt(U, 1, 4),), ()]
  assert _plans(Tensor.empty(4096, 8, 8, device="PYTHON") * 2, GPU) == [(Opt(U, 0, 4),), ()]  # merged into one axis
  with pytest.raises(OptError, match="loops over"):
    lower([it for it in (big @ big).schedule() if not it.is_copy][-1].ast, GPU, opts=(Opt(O, 0, 1),))
  # a matmul whose B does not stay in cache whole (half of it: 1 MiB of 2) loops over B's columns outermost where the
  # tile's panel of B (32 columns over the sum) fits, and there are 8 column tiles or more
  tile, l2 = (Opt(V, 0, 16), Opt(U, 0, 2), Opt(U, 1, 8)), replace(ORDERED, vector_registers=32, cache_bytes=2 << 20)
  unroll = Opt(R, 0, 4)  # the sum written out 4 steps an iteration, last (not with BLOCK)
  def mm(n: int, k: int, m: int) -> Tensor: return Tensor.empty(n, k, device="PYTHON") @ Tensor.empty(k, m, device="PYTHON")
  assert _plans(big @ big, l2)[0] == (*tile, Opt(O, 0, 1), unroll)  # B 4 MiB, a panel 128 KiB
  assert _plans(mm(64, 1024, 1024), l2)[0] == (*tile, Opt(O, 0, 1), unroll)
  assert _plans(mm(256, 4096, 4096), l2)[0] == (*tile, Opt(O, 0, 1), unroll)  # a panel 512 KiB
  assert _plans(mm(1024, 512, 512), l2)[0] == (*tile, unroll)  # B 1 MiB stays in cache
  assert _plans(mm(1024, 8192, 128), l2)[0] == (*tile, unroll)  # 4 column tiles
  # ... measured against the cache the device declares (1 MiB when it does not say)
  assert _plans(mm(1024, 512, 512), replace(l2, cache_bytes=0))[0] == (*tile, Opt(O, 0, 1), unroll)
  assert _plans(big @ big, replace(l2, cache_bytes=16 << 20))[0] == (*tile, unroll)
  # ... where the panel does not fit either, a sum cut into blocks of 256 whose block of B (256 rows, all columns) fits
  # runs the blocks inside groups of 8 row tiles, or of 4 where that leaves 4 groups or more; only where the launch
  # loops run in order
  assert _plans(mm(256, 16384, 512), l2)[0] == (*tile, Opt(B, 1, 8))  # a panel 2 MiB; 32 row tiles: 4 groups of 8
  assert _plans(mm(128, 16384, 512), l2)[0] == (*tile, Opt(B, 1, 4))  # 16 row tiles: 4 groups of 4 (no unroll)
  assert _plans(mm(64, 16384, 512), l2)[0] == (*tile, unroll)  # 8 row tiles
  assert _plans(mm(256, 16384, 2048), l2)[0] == (*tile, unroll)  # a block of 2 MiB
  assert _plans(mm(256, 16384, 512), replace(l2, ordered_launch=False))[0] == (*tile, unroll)
  assert _plans(Tensor.empty(64, 64, device="PYTHON") * 2, GPU) == [()]  # too few threads would be left
  # contiguous along the reduce loop, not along the outputs: vector accumulators along the reduce axis
  # ... four vectors loaded per step where the axis has two such steps or more
  assert _plans(Tensor.empty(64, 256, device="PYTHON").sum(axis=1), AVX512) == [(Opt(L, 0, 16), Opt(R, 0, 4)), ()]
  assert _plans(Tensor.empty(64, 256, device="PYTHON").sum(axis=1), AVX2) == [(Opt(L, 0, 8), Opt(R, 0, 4)), ()]
  assert _plans(Tensor.empty(64, 64, device="PYTHON").sum(axis=1), AVX512) == [(Opt(L, 0, 16),), ()]
  assert _plans(Tensor.empty(64, 24, device="PYTHON").sum(axis=1), AVX512) == [()]  # 16 does not divide 24
  softmax_sum = (Tensor.empty(64, 1024, device="PYTHON") - 1).exp().sum(axis=1)
  assert _plans(softmax_sum, AVX512) == [(Opt(L, 0, 16), Opt(R, 0, 4)), ()]
  # ... but a short loop whose terms compute a transcendental is left to the compiler's vectoriser, which interleaves
  # several iterations' polynomials (rows of 256: 32 vectors of 16 would be needed, of 8 on AVX2)
  assert _plans((Tensor.empty(64, 256, device="PYTHON") - 1).exp().sum(axis=1), AVX512) == [()]
  assert _plans((Tensor.empty(64, 256, device="PYTHON") - 1).exp().sum(axis=1), AVX2) == [(Opt(L, 0, 8), Opt(R, 0, 4)), ()]
  assert _plans(Tensor.empty(64, 256, device="PYTHON").sum(axis=1), SCALAR) == [(Opt(U, 0, 8),)]
  # ... and where those loads are reused across outputs (x @ W.T: W's rows across x's rows, x's across W's), a tile
  # of outputs, one vector accumulator each, in at most half the vector registers
  linear = Tensor.empty(64, 784, device="PYTHON") @ Tensor.empty(256, 784, device="PYTHON").transpose()
  assert _plans(linear, replace(AVX512, vector_registers=32)) == \
    [(Opt(L, 0, 16), Opt(U, 0, 4), Opt(U, 1, 4)), (Opt(L, 0, 16),), ()]
  assert _plans(linear, AVX2)[0] == (Opt(L, 0, 8), Opt(U, 0, 2), Opt(U, 1, 4))  # 16 registers: 8 accumulators
  assert _plans(linear, replace(AVX512, vector_registers=1))[0] == (Opt(L, 0, 16),)  # no room for a tile
  # ... with a residual added after the sum too (x + h @ W.T): read once per output, outside the loop, it takes no
  # dim from the tile
  residual = Tensor.empty(64, 256, device="PYTHON") + \
    Tensor.empty(64, 784, device="PYTHON") @ Tensor.empty(256, 784, device="PYTHON").transpose()
  assert _plans(residual, replace(AVX512, vector_registers=32))[0] == (Opt(L, 0, 16), Opt(U, 0, 4), Opt(U, 1, 4))
  narrow = Tensor.empty(64, 256, device="PYTHON") @ Tensor.empty(10, 256, device="PYTHON").transpose()
  assert _plans(narrow, replace(AVX512, vector_registers=32))[0] == (Opt(L, 0, 16), Opt(U, 0, 2), Opt(U, 1, 4))
  # ... a sum of at most 8 vectors: two rows per thread and no lanes, the sum left to the compiler's vectoriser (each
  # output's lanes added together at its end cost more than the tile saves there); 160 terms keep the tile, and so
  # does AVX2's 16 registers, where it was not measured (256 rows: from 2**16 outputs the frontend copies W row-major)
  short = Tensor.empty(256, 64, device="PYTHON") @ Tensor.empty(192, 64, device="PYTHON").transpose()
  assert _plans(short, replace(AVX512, vector_registers=32)) == [(Opt(U, 1, 2),), (Opt(L, 0, 16),), ()]
  assert _plans(short, AVX512)[0] == (Opt(L, 0, 16), Opt(U, 0, 2), Opt(U, 1, 4))
  longer = Tensor.empty(512, 160, device="PYTHON") @ Tensor.empty(64, 160, device="PYTHON").transpose()
  assert _plans(longer, replace(AVX512, vector_registers=32))[0] == (Opt(L, 0, 16), Opt(U, 0, 4), Opt(U, 1, 4))
  matvec = Tensor.empty(1, 64, device="PYTHON") @ Tensor.empty(256, 64, device="PYTHON").transpose()
  assert _plans(matvec, replace(AVX512, vector_registers=32))[0] == (Opt(L, 0, 16),)  # no row reuses a load
  # a column sum: vectors along the outputs, several per thread (up to 8), each its own accumulator
  assert _plans(Tensor.empty(256, 64, device="PYTHON").sum(axis=0), AVX512)[0] == (Opt(V, 0, 16), Opt(U, 0, 4))
  assert _plans(Tensor.empty(4096, 4096, device="PYTHON").max(axis=0), AVX512)[0] == (Opt(V, 0, 16), Opt(U, 0, 8))
  matvec = Tensor.empty(1, 1024, device="PYTHON") @ Tensor.empty(1024, 4096, device="PYTHON")
  assert _plans(matvec, AVX512)[0] == (Opt(V, 0, 16), Opt(U, 0, 8))
  assert _plans(Tensor.empty(4096, 1000, device="PYTHON").sum(axis=0), AVX512)[0] == (Opt(V, 0, 8),)  # 16 do not divide
  assert _plans(Tensor.empty(64, 64, device="PYTHON") + 1, AVX512) == [()]  # elementwise: left to the compiler
  # ... unless it reads across dim 0 and along another dim (a transpose): 8 outputs per thread along that one
  big = Tensor.empty(1024, 1024, device="PYTHON")
  assert _plans(big.T + 1, AVX512) == _plans(big.T + big, AVX512) == [(Opt(U, 1, 8),), ()]
  to_channels_last = Tensor.empty(128, 32, 20, 20, device="PYTHON").permute(0, 2, 3, 1) * 2
  assert _plans(to_channels_last, AVX512) == [(Opt(U, 1, 4),), ()]  # a row of 20: 4 per thread divide it
  assert _plans(Tensor.empty(64, 64, device="PYTHON").T + 1, AVX512) == [()]  # too small to gain
  assert _plans(big + Tensor.empty(1024, 1, device="PYTHON"), AVX512) == [()]  # a broadcast is no transpose
  # ... or computes a sin (whose branch for far arguments keeps the compiler's loop vectoriser out): vectors along
  # dim 0, a whole masked one where the width does not divide it; not where dim 0 reads nothing contiguous
  assert _plans(Tensor.empty(64, 64, device="PYTHON").sin(), AVX512) == [(Opt(V, 0, 16),), ()]
  assert _plans(Tensor.empty(64, 64, device="PYTHON").sin(), AVX2) == [(Opt(V, 0, 8),), ()]
  assert _plans(Tensor.empty(1000, device="PYTHON").sin() * 2, replace(AVX512, masked_loads=True)) == \
    [(Opt(V, 0, 16),), ()]
  assert _plans(Tensor.empty(1000, device="PYTHON").sin(), AVX512) == [(Opt(V, 0, 8),), ()]
  assert _plans(Tensor.empty(6, device="PYTHON").sin(), AVX512) == [(Opt(V, 0, 2),), ()]
  # ... or reads along dim 0 and divides it (a bitonic sort's step, each half against the other): vectors along dim 0,
  # whose index math folds per lane
  x = Tensor.empty(64, 64, device="PYTHON")
  assert _plans(x.reshape(64, 2, 32).flip(1).reshape(64, 64) + x, AVX512) == [(Opt(V, 0, 16),), ()]
  # a group of 16 outputs reading the same 16 values (a rank sort's pick of each run of 16): 16 per thread
  runs = Tensor.empty(8, 4, 16, dtype=dtypes.int64, device="PYTHON")
  hits = (runs.unsqueeze(-2) < runs.unsqueeze(-1)).sum(-1, dtype=dtypes.int32)._index_hits(16)
  assert _plans(Tensor._masked_pick(runs.unsqueeze(-1), hits, -2).reshape(8, 64), AVX512)[0] == (Opt(U, 0, 16),)
  assert _plans(big.T.sin(), AVX512) == [(Opt(U, 1, 8),), ()]
  assert _plans(Tensor.empty(64, 64, device="PYTHON").sin(), SCALAR) == [()]
  conv = Tensor.empty(2, 8, 16, 16, device="PYTHON").conv2d(Tensor.empty(16, 8, 3, 3, device="PYTHON"), padding=1)
  # the input's vector loads do not move with the output channel (launch dim 2): the tile's rows go there
  assert _plans(conv, AVX512)[0] == (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 16), Opt(U, 2, 8))
  # 56-wide rows take one 8-lane vector, no second one: with 32 registers the tile grows 16 channels deep instead
  conv56 = Tensor.empty(1, 8, 56, 56, device="PYTHON").conv2d(Tensor.empty(16, 8, 3, 3, device="PYTHON"), padding=1)
  assert _plans(conv56, replace(AVX512, vector_registers=32))[0] == (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 8), Opt(U, 2, 16))
  assert _plans(conv56, AVX512)[0] == (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 8), Opt(U, 2, 8))  # 16 registers
  # a convolution pooled in the same kernel (nested): its taps unrolled, a whole pooled row as lanes, 16 channels
  # per thread
  pooled = Tensor.empty(1, 64, 8, 8, device="PYTHON").conv2d(Tensor.empty(64, 64, 3, 3, device="PYTHON"), padding=1)
  assert _plans(pooled.relu().mean((2, 3)), AVX512)[0] == (Opt(R, 1, 3), Opt(R, 2, 3), Opt(L, 4, 8), Opt(U, 0, 16))
  # stride 2: the input is read contiguously only along the unrolled kernel width, so there are no lanes;
  # the outputs are tiled, their vectors gathering the input and broadcasting the weights, the tile's rows along
  # the output channels, which the gathers do not move with (a 32->64 channel 16x16 conv: 88 -> 43-58 us, not rows)
  strided = Tensor.empty(1, 16, 32, 32, device="PYTHON").conv2d(Tensor.empty(32, 16, 3, 3, device="PYTHON"), stride=2,
                                                                padding=1)
  assert _plans(strided, AVX512)[0] == (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 16), Opt(U, 2, 8))
  # a convolution's rows are its output channels; a step loads a vector per vector and a weight per channel, so
  # 16 accumulators (32 registers) are two vectors covering a 32-wide row by 8 channels, not one by 16; with the
  # whole row in the tile, the 3x3 taps stay loops and the 8 input channels are written out instead
  conv32 = Tensor.empty(1, 8, 32, 32, device="PYTHON").conv2d(Tensor.empty(16, 8, 3, 3, device="PYTHON"), padding=1)
  assert _plans(conv32, replace(AVX512, vector_registers=32))[0] == (Opt(R, 0, 8), Opt(V, 0, 32), Opt(U, 2, 8))
  # ... three input channels, written out already (short), and the taps loops; a 40-wide row in vectors of 16 that do
  # not cover it keeps its taps written out (measured 0.75x as loops: their padding gates move with the vector)
  conv3 = Tensor.empty(1, 3, 32, 32, device="PYTHON").conv2d(Tensor.empty(16, 3, 3, 3, device="PYTHON"), padding=1)
  assert _plans(conv3, replace(AVX512, vector_registers=32))[0] == (Opt(R, 0, 3), Opt(V, 0, 32), Opt(U, 2, 8))
  conv40 = Tensor.empty(1, 24, 40, 40, device="PYTHON").conv2d(Tensor.empty(48, 24, 3, 3, device="PYTHON"), padding=1)
  assert _plans(conv40, replace(AVX512, vector_registers=32, masked_loads=True))[0] == \
    (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 16), Opt(U, 2, 16))
  # ... 8 accumulators (AVX2's 16 registers): a 16-wide row as two vectors of 8, by 4 channels
  conv16 = Tensor.empty(2, 8, 16, 16, device="PYTHON").conv2d(Tensor.empty(16, 8, 3, 3, device="PYTHON"), padding=1)
  assert _plans(conv16, AVX2)[0] == (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 16), Opt(U, 2, 4))
  # with masked loads, a whole vector over a dimension it does not divide: 56 as four vectors of 16 (8 lanes masked)
  # rather than seven of 8 (16 channels deep, as unmasked), then the vectors that divide, then scalars
  masked = replace(AVX512, vector_registers=32, masked_loads=True)
  assert _plans(conv56, masked) == [(Opt(R, 0, 8), Opt(V, 0, 64), Opt(U, 2, 4)),
                                    (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 8), Opt(U, 2, 16)),
                                    (Opt(R, 1, 3), Opt(R, 2, 3), Opt(U, 0, 8), Opt(U, 1, 4))]
  # ... a row of 20 as two vectors of 16 (the second masked); a row of 66 stays vectors of 16, as four would leave
  # more lanes empty (62 of 128, against 14 of 80)
  conv20 = Tensor.empty(2, 32, 24, 24, device="PYTHON").conv2d(Tensor.empty(32, 32, 5, 5, device="PYTHON"))
  assert _plans(conv20, masked)[1] == (Opt(V, 0, 32), Opt(U, 2, 8))
  conv66 = Tensor.empty(2, 32, 68, 68, device="PYTHON").conv2d(Tensor.empty(32, 32, 3, 3, device="PYTHON"))
  assert _plans(conv66, masked)[0] == (Opt(R, 1, 3), Opt(R, 2, 3), Opt(V, 0, 16), Opt(U, 2, 16))
  odd = Tensor.empty(200, 200, device="PYTHON") @ Tensor.empty(200, 200, device="PYTHON")
  assert _plans(odd, masked)[0] == (Opt(V, 0, 16), Opt(U, 1, 8), Opt(R, 0, 4))
  # a scan's window (cumsum's chunks of 32, sliding along the row, no load reused across rows): two vectors along the
  # row and the window written out 8 steps an iteration, or, where the row takes one vector (50257 wide), 8 rows
  assert _plans(Tensor.empty(1024, 1024, device="PYTHON").cumsum(1), masked)[0] == (Opt(V, 0, 16), Opt(U, 0, 2), Opt(R, 0, 8))
  assert _plans(Tensor.empty(8, 50257, device="PYTHON").cumsum(1), masked)[0] == (Opt(V, 0, 16), Opt(U, 1, 8), Opt(R, 0, 8))
  # too few output channels to tile: the tile's rows are image rows, along which the kernel's rows slide (ky, axis
  # 1; kx slides along the vectorised columns): written out, neighbouring output rows share their input rows
  def features(t: Tensor): return kernel_features([it for it in t.schedule() if not it.is_copy][-1].ast, AVX512)
  few = Tensor.empty(1, 16, 38, 38, device="PYTHON").conv2d(Tensor.empty(3, 16, 7, 7, device="PYTHON"))
  assert (features(few).sliding, features(few).padded_taps) == (((1, 1), (2, 0)), ())
  assert _plans(few, AVX512)[0] == (Opt(V, 0, 16), Opt(U, 1, 8), Opt(R, 1, 7))
  assert _plans(few, replace(AVX512, vector_registers=32))[0] == (Opt(V, 0, 16), Opt(U, 0, 2), Opt(U, 1, 8), Opt(R, 1, 7))
  # ... not beside a tile of output channels (5x5, 16 -> 32 channels): those share each load already
  many = Tensor.empty(1, 16, 28, 28, device="PYTHON").conv2d(Tensor.empty(32, 16, 5, 5, device="PYTHON"))
  assert _plans(many, replace(AVX512, vector_registers=32))[1] == (Opt(V, 0, 8), Opt(U, 2, 16))
  # padded: every tap written out beside a tile of either kind, so each copy's gates are known when it compiles
  few_padded = Tensor.empty(1, 16, 32, 32, device="PYTHON").conv2d(Tensor.empty(3, 16, 7, 7, device="PYTHON"), padding=3)
  assert features(few_padded).padded_taps == (1, 2)
  assert _plans(few_padded, AVX512)[0] == (Opt(R, 1, 7), Opt(R, 2, 7), Opt(V, 0, 16), Opt(U, 1, 8))
  many_padded = Tensor.empty(1, 16, 24, 24, device="PYTHON").conv2d(Tensor.empty(32, 16, 5, 5, device="PYTHON"), padding=2)
  assert _plans(many_padded, AVX512)[0] == (Opt(R, 1, 5), Opt(R, 2, 5), Opt(V, 0, 8), Opt(U, 2, 8))
  # ... with 32 vector registers only the taps along the lanes (kx, axis 2), whose gates differ per lane: a kernel
  # row's gate is the same in every lane, and its loop keeps the body small; beside image rows, ky is written out
  # as a tap sliding along them
  assert _plans(many_padded, replace(AVX512, vector_registers=32))[1] == (Opt(R, 2, 5), Opt(V, 0, 8), Opt(U, 2, 16))
  # conv2d reads its weight from a copy with the output channels innermost (on a device that loops with vector ops,
  # as the reference device does): with 32 registers, rows of up to two vectors take lanes along the channels
  # instead, the accumulators for R outputs along the row by up to 4 vectors of channels (R the largest divisor of
  # the row that fits 24 of them), the taps a loop; first, before the plans with lanes along the row
  r32 = replace(AVX512, vector_registers=32)
  # (between equal counts, about 5 outputs of the row per vector of channels; the padded taps along the row written
  # out, so each copy's gates are constants)
  conv32c = Tensor.empty(1, 32, 32, 32, device="PYTHON").conv2d(Tensor.empty(16, 32, 3, 3, device="PYTHON"), padding=1)
  assert features(conv32c).contiguous_dims == (2,)
  assert _plans(conv32c, r32)[:2] == [(Opt(V, 2, 16), Opt(U, 0, 16)), _plans(conv32, r32)[0]]
  assert _plans(conv20, masked)[0] == (Opt(V, 2, 16), Opt(U, 2, 2), Opt(U, 0, 10))
  assert _plans(many_padded, r32)[0] == (Opt(R, 2, 5), Opt(V, 2, 16), Opt(U, 2, 2), Opt(U, 0, 12))
  c4 = Tensor.empty(4, 64, 8, 8, device="PYTHON").conv2d(Tensor.empty(64, 64, 3, 3, device="PYTHON"))
  assert _plans(c4, r32)[0] == (Opt(V, 2, 16), Opt(U, 2, 2), Opt(U, 0, 6))  # 2 vectors of channels by 6, not 4
  # ... not with 16 registers (AVX2's, as measured), a row wider than two vectors, or a sum below 256 (one input
  # channel, 5x5; eight, 3x3: its scattered stores would cost more than its lanes save)
  assert _plans(c4, AVX2)[0][-1] == Opt(U, 2, 8) and _plans(conv56, r32)[0][2] == Opt(V, 0, 8)
  c1 = Tensor.empty(4, 1, 28, 28, device="PYTHON").conv2d(Tensor.empty(32, 1, 5, 5, device="PYTHON"))
  assert _plans(c1, r32)[0] == (Opt(V, 0, 8), Opt(U, 2, 16))
  # ... nor where the loop computes more than the product: a ReLU fused into the read would run once per broadcast
  # value instead of once per vector (a padded read's select is folded into its load: it does not count)
  fused = Tensor.empty(4, 64, 8, 8, device="PYTHON").relu().conv2d(Tensor.empty(64, 64, 3, 3, device="PYTHON"))
  assert (features(fused).body_ops, features(c4).body_ops, features(conv32c).body_ops) == (2, 1, 1)
  assert all(o.axis == 0 for o in _plans(fused, r32)[0] if o.op is V)
  # an input gradient (a transposed convolution, its input padded by the kernel's size less one) has only the product
  # once simplified (its reads' selects fold into their gates, a product with 1 away): lanes along its channels
  xg = Tensor.empty(2, 32, 10, 10, device="PYTHON").requires_grad_(True)
  (xg.conv2d(Tensor.empty(64, 32, 3, 3, device="PYTHON")) * Tensor.empty(2, 64, 8, 8, device="PYTHON")).sum().backward()
  assert features(xg.grad).body_ops == 1 and _plans(xg.grad, r32)[0][0] == Opt(V, 2, 16)
  assert _plans(few_padded, replace(AVX512, vector_registers=32))[0] == \
    (Opt(R, 2, 7), Opt(V, 0, 16), Opt(U, 0, 2), Opt(U, 1, 8), Opt(R, 1, 7))


def test_a_tile_computes_its_copies_along_the_larger_upcast_outermost():
  # 2 vectors along dim 0 by 8 rows: each row's broadcast of A feeds the row's two vectors one after the other (and
  # is dropped), while the two vectors of B stay in registers across the rows
  mm = Tensor.empty(64, 64, device="PYTHON") @ Tensor.empty(64, 64, device="PYTHON")
  item = [it for it in mm.schedule() if not it.is_copy][-1]
  prog = lower(item.ast, AVX512, opts=(Opt(V, 0, 16), Opt(U, 0, 2), Opt(U, 1, 8)))
  terms = [u.src[1] for u in prog.uops if u.op is Ops.ACCUMULATE]
  assert len(terms) == 16 and all(t.op is Ops.MUL for t in terms)
  broadcast = [next(s for s in t.src if s.op is Ops.VECTORIZE) for t in terms]
  assert all(len(set(b.src)) == 1 for b in broadcast)  # splats of one element of A
  assert [len({id(b) for b in broadcast[i:i + 2]}) for i in range(0, 16, 2)] == [1] * 8  # one per row, used twice
  assert len({id(b) for b in broadcast}) == 8


def test_lowering_with_the_heuristic_records_its_plan():
  item = [it for it in (Tensor.empty(16, 16, device="PYTHON") @ Tensor.empty(16, 16, device="PYTHON")).schedule()
          if not it.is_copy][-1]
  prog = lower(item.ast, AVX512)
  assert prog.opts == (Opt(V, 0, 16), Opt(U, 1, 8)) and "opts=[Opt(VECTORIZE, 0, 16)" in str(prog)


# ------------------------------------------------------------------ search

def _features(out: Tensor, caps: Capabilities):
  item = [it for it in out.schedule() if not it.is_copy][-1]
  return item.ast, kernel_features(item.ast, caps)


def test_beam_search_is_deterministic_given_the_timings():
  ast, k = _features(Tensor.empty(64, 64, device="PYTHON") @ Tensor.empty(64, 64, device="PYTHON"), AVX512)
  start = hand_coded_optimizations(k, AVX512)
  fast = (Opt(V, 0, 16), Opt(U, 1, 4))  # one change away from the heuristic's first plan

  def fake(plan):  # the fake timer: every plan 1 s, one neighbour 0.5 s, plans with an UNROLL refused
    if any(o.op is R for o in plan): raise OptError("refused")
    return 0.5 if plan == fast else 1.0
  assert beam_search(start, k, fake, width=2) == fast
  assert beam_search(start, k, fake, width=2) == fast  # again: same answer
  assert beam_search(start, k, lambda p: 1.0, width=3) == start[0]  # ties keep the heuristic's plan
  calls = []
  beam_search(start, k, lambda p: calls.append(p) or 1.0, width=1, rounds=1)
  assert len(calls) == len(set(calls))  # no plan timed twice
  assert all(p in neighbours(start[0], k) or p in start for p in calls)


def test_searched_plans_come_back_from_disk(tmp_path):
  ast, _ = _features(Tensor.empty(8, 8, device="PYTHON").sum(axis=1), AVX512)
  key = plan_key(ast, "CPU", AVX512)
  assert key == plan_key(ast, "CPU", AVX512) != plan_key(ast, "CPU", AVX2)
  plan = (Opt(U, 0, 2), Opt(R, 0, 4))
  PlanCache(tmp_path).put(key, plan)
  assert PlanCache(tmp_path).get(key) == plan and PlanCache(tmp_path).get(plan_key(ast, "X", AVX512)) is None


def test_plugrad_beam_searches_once_and_the_next_process_reads_the_plan(tmp_path):
  reg = Registry(Config.from_env({"PLUGRAD_BEAM": "1", "PLUGRAD_CACHE_DIR": str(tmp_path)}))
  prev = set_registry(reg)
  try:
    a, b = _x(8, 12), _x(12, 8, seed=1)
    out = Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")
    item = [it for it in out.schedule() if not it.is_copy][-1]
    plan = searched_plan(reg.device("PYTHON"), item.ast)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)
    _plan_caches.clear()  # as a new process: only the disk is left
    assert searched_plan(reg.device("PYTHON"), item.ast) == plan and any((tmp_path / "plans").rglob("*"))
  finally:
    set_registry(prev)
    _plan_caches.clear()


@pytest.mark.parametrize("on", _devices())
def test_transposes_under_the_heuristic_give_numpys_answer(on):
  # the transpose tile (8 outputs per thread along the dim the reads run along), with rows it divides or not
  a, b, x = _x(1024, 520), _x(520, 1024, seed=1), _x(8, 24, 20, 20, seed=2)
  got = Tensor(a, device=on).transpose() + Tensor(b, device=on)
  item = [it for it in got.schedule() if not it.is_copy][-1]
  assert lower(item.ast, AVX512).opts == (Opt(U, 1, 8),)
  np.testing.assert_array_equal(got.numpy(), a.T + b)
  np.testing.assert_array_equal(Tensor(x, device=on).permute(0, 2, 3, 1).contiguous().numpy(), x.transpose(0, 2, 3, 1))
  np.testing.assert_array_equal((Tensor(a[:, :519], device=on).transpose() * 2).numpy(), a[:, :519].T * 2)


@pytest.mark.parametrize("on", _devices())
def test_a_projection_with_a_residual_tiles_under_the_heuristic_and_gives_numpys_answer(on):
  # x + h @ W.T (a transformer block's output projection): the residual, read once per output, leaves the tile
  x, h, w = _x(4, 6, 64), _x(4, 6, 256, seed=1), _x(64, 256, seed=2)
  got = Tensor(x, device=on) + Tensor(h, device=on) @ Tensor(w, device=on).T
  item = [it for it in got.schedule() if not it.is_copy][-1]
  assert any(o.op is U for o in lower(item.ast, AVX512).opts)
  np.testing.assert_allclose(got.numpy(), x + h @ w.T, rtol=1e-4, atol=1e-4)


def test_a_cached_plan_that_no_longer_applies_is_searched_again(tmp_path):
  # a plan saved by an earlier build that numbered the kernel's launch dims otherwise (before contiguous axes merged)
  reg = Registry(Config.from_env({"PLUGRAD_BEAM": "1", "PLUGRAD_CACHE_DIR": str(tmp_path)}))
  prev = set_registry(reg)
  try:
    a = _x(8, 12)
    out = Tensor(a, device="PYTHON") * 2
    item = [it for it in out.schedule() if not it.is_copy][-1]
    dev = reg.device("PYTHON")
    _plan_cache(dev).put(plan_key(item.ast, dev.name, dev.caps), (Opt(U, 1, 4),))
    plan = searched_plan(dev, item.ast)
    assert plan != (Opt(U, 1, 4),)
    lower(item.ast, dev.caps, opts=plan)
    np.testing.assert_allclose(out.numpy(), a * 2)
  finally:
    set_registry(prev)
    _plan_caches.clear()


@pytest.mark.parametrize("on", _devices())
def test_a_padded_conv_of_a_transcendental_gives_numpys_answer_under_the_heuristic(on):
  # a tanh's gradient fused into a padded, dilated, grouped transposed 3x5 convolution (a conv2d backward), with
  # both kernel axes written out beside a tile of 16 lanes by 2 rows: on CPU the two lanes past each row's end came
  # out wrong while the renderer built each tap's gate lane by lane (LLVM's X86 code generation, see the next test)
  def build(device: str) -> Tensor:
    a, b = Tensor(_x(3, 10, 16, 10, seed=1) * 10, device=device), Tensor(_x(3, 10, 16, 10, seed=2), device=device)
    y = a * b
    return ((1 - y.tanh() ** 2) * b).conv_transpose2d(Tensor(_x(10, 1, 3, 5, seed=3), device=device), groups=2,
                                                       dilation=(2, 1), padding=(3, 2))
  np.testing.assert_allclose(build(on).numpy(), build("PYTHON").numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("on", _devices())
def test_padded_taps_written_out_beside_a_row_tile_give_numpys_answer(on):
  # the smallest reproduction of the case above: exp() of a buffer through a padded 3x5 convolution, 16 lanes by 2
  # rows, every tap written out. Its gates (the row's bound at run time, the column's per lane) were built lane by
  # lane, 239 mask instructions with spills on AVX-512; LLVM's optimised X86 code then added exp(0) * w in the two
  # lanes past each interior row's end (the same IR was right with unoptimised code generation)
  def build(device: str) -> Tensor:
    x, w = Tensor(_x(2, 2, 16, 10, seed=1), device=device), Tensor(_x(1, 2, 3, 5, seed=2), device=device)
    return x.exp().conv2d(w, padding=(1, 2))
  got, _ = run_with(build(on), on, lambda _: (Opt(R, 1, 3), Opt(R, 2, 5), Opt(V, 0, 16), Opt(U, 1, 2)))
  np.testing.assert_allclose(got, build("PYTHON").numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif("CPU" not in available_devices(), reason="needs the CPU plugin (llvmlite): masked vector loads")
@pytest.mark.parametrize("plan", [(Opt(V, 0, 32), Opt(U, 2, 8)), (Opt(R, 2, 5), Opt(V, 0, 32), Opt(U, 2, 4)),
                                  (Opt(R, 2, 5), Opt(V, 0, 64), Opt(U, 2, 4)), (Opt(R, 2, 5), Opt(V, 0, 16), Opt(U, 2, 8))])
def test_rows_covered_by_several_masked_vectors_give_numpys_answer(plan):
  # `_conv_tile`'s plans on a padded 5x5 convolution of 20-wide rows: two vectors of 16 (or one of 64) cover each
  # row, the last lanes masked, with only the taps along the lanes (kx) written out and the kernel rows a loop
  def build(device: str) -> Tensor:
    x, w = Tensor(_x(2, 3, 7, 20, seed=1), device=device), Tensor(_x(8, 3, 5, 5, seed=2), device=device)
    return x.conv2d(w, padding=2)
  got, progs = run_with(build("CPU"), "CPU", lambda _: plan)
  assert progs[-1].opts == plan
  np.testing.assert_allclose(got, build("PYTHON").numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("on", _devices())
def test_a_conv_and_its_input_gradient_give_numpys_answer_under_the_heuristic(on):
  # 5x5 on 24-wide rows (20-wide outputs: two vectors, the second masked, on AVX-512) and the padded convolution
  # of its input gradient (24-wide, kx written out); a 66-wide row stays vectors of 16
  def grads(device: str, size: int, k: int) -> list[np.ndarray]:
    x = Tensor(_x(2, 4, 9, size, seed=6), device=device, requires_grad=True)
    w = Tensor(_x(16, 4, k, k, seed=7), device=device, requires_grad=True)
    y = x.conv2d(w)
    (y * Tensor(_x(*y.shape, seed=8), device=device)).sum().backward()
    return [y.numpy(), x.grad.numpy(), w.grad.numpy()]
  for size, k in ((24, 5), (68, 3)):
    for got, want in zip(grads(on, size, k), grads("PYTHON", size, k)):
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _weight_gradient(device: str, k: int = 5) -> Tensor:
  # a convolution's weight gradient from 3 input channels: the k x k kernel's columns are launch dim 0, the image
  # rows (8 wide) the sum's contiguous innermost loop, the 8 filters a dim the row loads do not move with
  x, g = Tensor(_x(4, 3, 7 + k, 7 + k, seed=9), device=device), Tensor(_x(4, 8, 8, 8, seed=10), device=device)
  w = Tensor.zeros(8, 3, k, k, device=device, requires_grad=True)
  return (x.conv2d(w) * g).sum().gradient(w)[0]


@pytest.mark.parametrize("on", _devices())
@pytest.mark.parametrize("plan", [(Opt(L, 2, 8), Opt(U, 0, 5), Opt(U, 3, 4)), (Opt(L, 2, 4), Opt(U, 0, 5)),
                                  (Opt(L, 2, 8), Opt(U, 0, 5), Opt(U, 3, 8), Opt(U, 1, 5))])
def test_a_weight_gradient_with_lanes_along_the_image_rows_gives_numpys_answer(on, plan):
  windows = np.lib.stride_tricks.sliding_window_view(_x(4, 3, 12, 12, seed=9), (5, 5), axis=(2, 3))
  want = np.einsum("nfyx,ncyxij->fcij", _x(4, 8, 8, 8, seed=10), windows)
  got, progs = run_with(_weight_gradient(on), on, lambda _: plan)
  assert progs[-1].opts == plan
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_weight_gradient_from_few_channels_takes_lanes_along_the_image_rows():
  # a 5-wide kernel row fills a third of a 16-lane vector: the lanes go along the summed image rows instead (8 wide),
  # by all the kernel's columns and 4 filters (32 registers: 20 accumulators); a 7-wide one by 2 filters (3 do not
  # divide 8); the 4 images are written out
  r32 = replace(AVX512, vector_registers=32)
  assert _plans(_weight_gradient("PYTHON"), r32)[0] == (Opt(R, 0, 4), Opt(L, 2, 8), Opt(U, 0, 5), Opt(U, 3, 4))
  assert _plans(_weight_gradient("PYTHON", 7), r32)[0] == (Opt(R, 0, 4), Opt(L, 2, 8), Opt(U, 0, 7), Opt(U, 3, 2))
  assert _plans(_weight_gradient("PYTHON"), AVX2)[0][0] != Opt(L, 2, 8)  # 5 columns are more than half of 8 lanes


@pytest.mark.parametrize("on", _devices())
def test_the_gradient_of_a_strided_3d_conv_gives_numpys_answer_under_the_heuristic(on):
  # a tanh's gradient through a 3-D convolution of stride 2 and dilation 2: its window-sum kernel computes two outputs
  # per step along the last axis (its loads index it as (x + 7) // 8), and LLVM's loop vectoriser, putting those
  # steps into vector lanes again, made most of them wrong on CPU (NaN in some): that loop now stays scalar
  def grad(device: str) -> np.ndarray:
    x = Tensor(_x(3, 2, 7, 3, 6, seed=4) * 2, device=device, requires_grad=True)
    w = Tensor(_x(2, 1, 3, 3, 2, seed=5), device=device)
    y = x.tanh().conv2d(w, stride=2, dilation=2, padding=(0, 3, 4), groups=2).tanh()
    (y * y).sum().backward()
    return x.grad.numpy()
  np.testing.assert_allclose(grad(on), grad("PYTHON"), rtol=1e-4, atol=1e-5)


def test_a_device_that_times_nothing_warns_the_search_once(monkeypatch):
  # a Program returning None under wait=True left PLUGRAD_BEAM keeping the heuristic's plans without a word
  from plugrad.engine import compile as compile_module
  from plugrad.registry import get_registry
  device = get_registry().device("PYTHON")
  item = [it for it in (Tensor.ones(8, device="PYTHON") * 2).schedule() if not it.is_copy][0]
  real_load = device.runtime.load
  monkeypatch.setattr(device.runtime, "load", lambda name, binary: (lambda *a, **k: None) if real_load(name, binary) else None)
  monkeypatch.setattr(compile_module, "_untimed", set())
  with pytest.warns(UserWarning, match="PYTHON's kernels return no time when launched with wait=True"):
    assert compile_module._time_plan(device, item.ast, ()) == compile_module.INFEASIBLE
