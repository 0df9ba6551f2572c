"""Tensor cores (Capabilities.tensor_cores, the TC optimization, WMMA): which matmuls qualify, the fragment layouts,
and the lowered kernels run on the PYTHON reference interpreter (its WMMA is the definition) against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from plugrad import Tensor, dtypes
from plugrad.builtins.python_device import PythonCompiler, PythonRenderer, PythonRuntime
from plugrad.codegen.lowerer import ACC_BLOCK, kernel_features, lower
from plugrad.codegen.opt import Opt, OptError, OptOps
from plugrad.codegen.opt.heuristic import hand_coded_optimizations
from plugrad.device import Capabilities, TensorCore, fragment_positions
from plugrad.scheduler import mark_done
from plugrad.spec import check_program, program_spec
from plugrad.uops import Ops, check_spec

# NVIDIA's mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), as the CUDA plugin declares it
M16N8K16 = dict(dims=(16, 8, 16), dtype_acc=dtypes.float32, threads=32,
                a=(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1", "e2")), b=(("e0", "l0", "l1", "e1"), ("l2", "l3", "l4")),
                c=(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1")))
HALF = TensorCore("mma_f16", dtype_in=dtypes.float16, **M16N8K16)
BF16 = TensorCore("mma_bf16", dtype_in=dtypes.bfloat16, **M16N8K16)
TC_GPU = Capabilities(launch_dims=3, max_local_size=(1024, 1024, 64), max_workgroup_threads=1024, local_memory=48 * 1024,
                      tensor_cores=(HALF, BF16))
TC, UP, LOCAL = OptOps.TC, OptOps.UPCAST, OptOps.LOCAL


def run_on_interpreter(out: Tensor, opts: tuple[Opt, ...] | None, acc_block: int = ACC_BLOCK) -> np.ndarray:
  """Schedule `out` (one kernel), lower it for TC_GPU with `opts` (None: the heuristic's) and `acc_block`, check the
  IR after every pass and run it on the PYTHON interpreter."""
  (item,) = out.schedule()
  prog = lower(item.ast, TC_GPU, opts=opts, acc_block=acc_block,
               checker=lambda g, stage: check_spec(g, program_spec, stage))
  check_program(prog)
  runner = PythonRuntime().load(prog.name, PythonCompiler().compile(PythonRenderer("PYTHON").render(prog))[0])
  runner(*(b.raw for b in item.bufs), global_size=prog.global_size, local_size=prog.local_size)
  for k in item.kernels: mark_done(k)
  return out.numpy()


def test_fragment_layouts_place_every_element_once():
  # lane 5 is thread 1 of group 1: A's elements at rows 1 and 9, columns 2, 3, 10, 11 (the PTX table)
  a = fragment_positions(HALF.a, 32, HALF.elements("a"))
  assert a[5].tolist() == [[1, 2], [1, 3], [9, 2], [9, 3], [1, 10], [1, 11], [9, 10], [9, 11]]
  assert fragment_positions(HALF.b, 32, 4)[5].tolist() == [[2, 1], [3, 1], [10, 1], [11, 1]]  # (k, n)
  assert fragment_positions(HALF.c, 32, 4)[5].tolist() == [[1, 2], [1, 3], [9, 2], [9, 3]]
  for layout, (rows, cols) in ((HALF.a, (16, 16)), (HALF.b, (16, 8)), (HALF.c, (16, 8))):
    pos = fragment_positions(layout, 32, rows * cols // 32).reshape(-1, 2)
    assert len({tuple(p) for p in pos.tolist()}) == rows * cols and pos.max(0).tolist() == [rows - 1, cols - 1]


def test_a_layout_must_name_every_bit_once():
  with pytest.raises(ValueError, match="names each of"):
    TensorCore("bad", dims=(16, 8, 16), dtype_in=dtypes.float16, dtype_acc=dtypes.float32, threads=32,
               a=(("l2", "l3", "l4", "e1"), ("e0", "l0", "l0", "e2")), b=HALF.b, c=HALF.c)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
@pytest.mark.parametrize("opts", [
  (Opt(TC, 0, 1),),
  (Opt(TC, 0, 1), Opt(UP, 0, 2), Opt(UP, 1, 2), Opt(LOCAL, 0, 3)),  # 2x2 tiles per warp, three warps per group
  None,  # the heuristic's
], ids=["one tile", "tiles and warps", "heuristic"])
def test_matmul_on_tensor_cores_equals_numpy(dtype, opts):
  rng = np.random.default_rng(0)
  a = Tensor(rng.standard_normal((64, 96), dtype=np.float32), device="PYTHON").cast(dtype).realize()
  b = Tensor(rng.standard_normal((96, 48), dtype=np.float32), device="PYTHON").cast(dtype).realize()
  if opts is not None: opts = tuple(Opt(o.op, 1, 1) if o.op is TC and dtype == dtypes.bfloat16 else o for o in opts)
  got = run_on_interpreter((a @ b).cast(dtypes.float32), opts)
  # the products of halves are exact in float32 and only the order of the float32 sum differs: the result rounded to
  # the dtype is the reference's, or one unit in its last place away where the sum lies at a rounding boundary
  ref = Tensor(a.cast(dtypes.float32).numpy() @ b.cast(dtypes.float32).numpy(), device="PYTHON").cast(dtype)
  ulp = 2.0 ** -10 if dtype == dtypes.float16 else 2.0 ** -7
  np.testing.assert_allclose(got, ref.cast(dtypes.float32).numpy(), rtol=ulp, atol=ulp)


def test_batched_transposed_matmul_with_bias_and_relu():
  # the output's elementwise ops run on each thread's fragment elements after the loop; the batch is launch dim 2
  rng = np.random.default_rng(1)
  a = Tensor(rng.standard_normal((3, 32, 64), dtype=np.float32), device="PYTHON").cast(dtypes.float16).realize()
  w = Tensor(rng.standard_normal((3, 24, 64), dtype=np.float32), device="PYTHON").cast(dtypes.float16).realize()
  bias = Tensor(rng.standard_normal((24,), dtype=np.float32), device="PYTHON").cast(dtypes.float16).realize()
  out = (a @ w.transpose(1, 2) + bias).relu()
  (item,) = out.schedule()
  assert kernel_features(item.ast, TC_GPU).matmul == (32, 24, 64, 3)
  got = run_on_interpreter(out, (Opt(TC, 0, 1), Opt(UP, 1, 2)))
  a32, w32, b32 = (t.cast(dtypes.float32).numpy() for t in (a, w, bias))
  ref = np.maximum((a32 @ w32.transpose(0, 2, 1)).astype(np.float16).astype(np.float32) + b32, 0)
  np.testing.assert_allclose(got.astype(np.float32), ref, rtol=2e-3, atol=2e-3)


def test_which_kernels_a_tensor_core_computes():
  def features(out: Tensor):
    (item,) = out.schedule()
    return kernel_features(item.ast, TC_GPU)
  h = lambda *s, dtype=dtypes.float16: Tensor.empty(*s, dtype=dtype, device="PYTHON")  # noqa: E731
  assert features(h(64, 32) @ h(32, 48)).tensor_cores == (0,)
  assert features(h(64, 32) @ h(32, 48)).matmul == (64, 48, 32, 1)
  assert features(h(64, 32, dtype=dtypes.bfloat16) @ h(32, 48, dtype=dtypes.bfloat16)).tensor_cores == (1,)
  assert features(h(64, 30) @ h(30, 48)).tensor_cores == ()  # K not a multiple of 16
  assert features(h(60, 32) @ h(32, 48)).tensor_cores == ()  # M not a multiple of 16
  f32 = Tensor.empty(64, 32, device="PYTHON") @ Tensor.empty(32, 48, device="PYTHON")
  assert features(f32).tensor_cores == ()  # no float32 tensor core declared
  assert features(h(64, 32).sum(1)).tensor_cores == ()  # a sum, no product
  assert features((h(64, 32) @ h(32, 48)).transpose().contiguous()).tensor_cores == ()  # a permute after the sum
  assert features((h(64, 32) @ h(32, 48) + 1).relu()).tensor_cores == (0,)  # elementwise ops after it
  assert kernel_features((h(64, 32) @ h(32, 48)).schedule()[0].ast, Capabilities()).tensor_cores == ()  # none declared


def test_heuristic_puts_a_large_half_matmul_on_tensor_cores():
  big = Tensor.empty(4096, 4096, dtype=dtypes.float16, device="PYTHON")
  (item,) = (big @ big).schedule()
  plans = hand_coded_optimizations(kernel_features(item.ast, TC_GPU), TC_GPU)
  assert plans[0] == (Opt(TC, 0, 1), Opt(UP, 0, 4), Opt(UP, 1, 8), Opt(LOCAL, 0, 4), Opt(LOCAL, 1, 1))
  assert all(o.op is not TC for plan in plans[1:] for o in plan)  # the fallbacks compute without them
  # a small matmul keeps enough warps busy with smaller blocks per warp
  small = Tensor.empty(64, 64, dtype=dtypes.float16, device="PYTHON")
  (item,) = (small @ small).schedule()
  assert hand_coded_optimizations(kernel_features(item.ast, TC_GPU), TC_GPU)[0][:3] == (Opt(TC, 0, 1), Opt(UP, 0, 1),
                                                                                         Opt(UP, 1, 1))


def test_plans_that_do_not_apply_are_refused():
  h = lambda *s: Tensor.empty(*s, dtype=dtypes.float16, device="PYTHON")  # noqa: E731
  (item,) = (h(64, 32) @ h(32, 48)).schedule()
  with pytest.raises(OptError, match="tensor core"): lower(item.ast, TC_GPU, opts=(Opt(TC, 2, 1),))
  with pytest.raises(OptError, match="do not divide"): lower(item.ast, TC_GPU, opts=(Opt(TC, 0, 1), Opt(UP, 1, 3)))
  with pytest.raises(OptError, match="nothing else"): lower(item.ast, TC_GPU, opts=(Opt(TC, 0, 1), Opt(OptOps.UNROLL, 0, 2)))
  with pytest.raises(OptError, match="no matmul of bfloat16"): lower(item.ast, TC_GPU, opts=(Opt(TC, 1, 1),))
  with pytest.raises(OptError, match="a plan with TC"): lower(item.ast, TC_GPU, opts=(Opt(LOCAL, 0, 2),))
  (f32,) = (Tensor.empty(64, 32, device="PYTHON") @ Tensor.empty(32, 48, device="PYTHON")).schedule()
  with pytest.raises(OptError, match="no matmul"): lower(f32.ast, TC_GPU, opts=(Opt(TC, 0, 1),))
  # a sum longer than one accumulator takes (256 steps of 16) whose steps have no divisor for a cascade (257 is prime)
  # falls back to the plans without tensor cores
  (prime,) = (h(16, 16 * 257) @ h(16 * 257, 8)).schedule()
  with pytest.raises(OptError, match="no divisor"): lower(prime.ast, TC_GPU, opts=(Opt(TC, 0, 1),))
  assert not any(o.op is TC for o in lower(prime.ast, TC_GPU).opts)


def test_a_sum_longer_than_one_accumulator_takes_is_a_cascade():
  # each tile's fragment adds `acc_block` steps, then hands its elements to scalar accumulators (here 12 steps of 16 in
  # 3 blocks of 4: two nested loops); the heuristic gives such a sum fewer tiles per warp (their registers)
  rng = np.random.default_rng(2)
  a = Tensor(rng.standard_normal((32, 192), dtype=np.float32), device="PYTHON").cast(dtypes.float16).realize()
  b = Tensor(rng.standard_normal((192, 16), dtype=np.float32), device="PYTHON").cast(dtypes.float16).realize()
  out, plan = (a @ b).cast(dtypes.float32), (Opt(TC, 0, 1), Opt(UP, 0, 2))
  prog = lower(out.schedule()[0].ast, TC_GPU, opts=plan, acc_block=4)
  assert [u.src[0].arg for u in prog.uops if u.op is Ops.RANGE] == [3, 4]
  got = run_on_interpreter(out, plan, acc_block=4)
  ref = Tensor(a.cast(dtypes.float32).numpy() @ b.cast(dtypes.float32).numpy(), device="PYTHON").cast(dtypes.float16)
  np.testing.assert_allclose(got, ref.cast(dtypes.float32).numpy(), rtol=2.0 ** -10, atol=2.0 ** -10)
  with pytest.raises(OptError, match="no divisor from 4 to 4"):  # 7 steps: prime
    lower((a[:, :112] @ b[:112]).schedule()[-1].ast, TC_GPU, opts=(Opt(TC, 0, 1),), acc_block=4)
  h = lambda *s: Tensor.empty(*s, dtype=dtypes.float16, device="PYTHON")  # noqa: E731
  (long,) = (h(1024, 8192) @ h(8192, 1024)).schedule()
  assert kernel_features(long.ast, TC_GPU).tc_cascade
  assert hand_coded_optimizations(kernel_features(long.ast, TC_GPU), TC_GPU)[0][:3] == (Opt(TC, 0, 1), Opt(UP, 0, 4),
                                                                                         Opt(UP, 1, 4))


def test_wmma_is_rendered_into_its_accumulator():
  # the loop's acc += A·B (a WMMA with C = 0 under ACCUMULATE) is one instruction with the accumulator as C
  (item,) = (Tensor.empty(32, 32, dtype=dtypes.float16, device="PYTHON") @
             Tensor.empty(32, 32, dtype=dtypes.float16, device="PYTHON")).schedule()
  prog = lower(item.ast, TC_GPU, opts=(Opt(TC, 0, 1),))
  accs = [u for u in prog.uops if u.op is Ops.ACCUMULATE]
  assert len(accs) == 1 and accs[0].src[1].op is Ops.WMMA and accs[0].src[1].arg == HALF.wmma_arg()
  assert prog.global_size == (4 * 32, 2) and prog.local_size == (32, 1)
  assert prog.flops == 2 * 32 * 32 * 32


def test_neighbouring_fragment_elements_are_read_as_pairs():
  # with pair_loads, A's pairs along the sum (row-major) and a transposed B's are one load of two halves each; B's
  # pairs of a row-major B lie a row apart and stay two loads
  import dataclasses
  paired = dataclasses.replace(TC_GPU, tensor_cores=(dataclasses.replace(HALF, pair_loads=True),))
  rng = np.random.default_rng(2)
  a = Tensor(rng.standard_normal((32, 64), dtype=np.float32), device="PYTHON").cast(dtypes.float16).realize()
  w = Tensor(rng.standard_normal((16, 64), dtype=np.float32), device="PYTHON").cast(dtypes.float16).realize()
  row_major = w.transpose().contiguous().realize()
  for out, pairs in ((a @ w.transpose(), 4 + 2), (a @ row_major, 4)):  # of A's 8 elements and B's 4
    (item,) = out.schedule()
    prog = lower(item.ast, paired, opts=(Opt(TC, 0, 1),))
    check_program(prog)
    assert sum(u.op is Ops.LOAD and u.dtype == dtypes.float16.vec(2) for u in prog.uops) == pairs
    runner = PythonRuntime().load(prog.name, PythonCompiler().compile(PythonRenderer("PYTHON").render(prog))[0])
    runner(*(b.raw for b in item.bufs), global_size=prog.global_size, local_size=prog.local_size)
    for k in item.kernels: mark_done(k)
    ref = (a.cast(dtypes.float32).numpy() @ w.cast(dtypes.float32).numpy().T).astype(np.float16)
    np.testing.assert_allclose(out.numpy().astype(np.float32), ref.astype(np.float32), rtol=2 ** -10, atol=2 ** -10)


def test_multiple_of_reads_the_index_arithmetic():
  from plugrad.codegen.tensor_core import multiple_of
  from plugrad.uops import UOp
  i = UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 0, 64))
  assert multiple_of(i * 4 + 8) == 4 and multiple_of((i % 4) * 2 + i * 6) == 2 and multiple_of(i * 2 + 1) == 1
  assert multiple_of((i * 8) % 12) == 4 and multiple_of(i // 2 * 2) == 2 and multiple_of(i // 2) == 1
