"""The PYTHON reference device runs a loop program with whole-array numpy operations per loop nest
(plugrad.builtins.loop_interpreter) and keeps the program's sequential meaning: accumulation order
and dtype, loops whose iterations depend on each other, bounds checks. Programs here are written by
hand as the lowering would write them, checked against the program spec, and run through the
device's renderer, compiler and runtime."""
import numpy as np
import pytest

from plugrad import Tensor
from plugrad.codegen.program import LoopProgram, Param
from plugrad.device import CompileError
from plugrad.dtype import bf16_to_f32, dtypes, f32_to_bf16
from plugrad.builtins import loop_interpreter
from plugrad.builtins.python_device import PythonCompiler, PythonRenderer, PythonRuntime
from plugrad.spec import check_program
from plugrad.uops import Ops, UOp

f32, i32 = dtypes.float32, dtypes.int32


def program(*stmts: UOp) -> list[UOp]:
  """The statements in order, each preceded by those of its sources not placed yet (so only the
  control structure needs writing out: accumulators, loops, updates, stores)."""
  out: list[UOp] = []

  def place(u: UOp) -> None:
    if u in out: return
    for s in u.src: place(s)
    out.append(u)
  for st in stmts: place(st)
  return out


def run(uops: list[UOp], *arrays: np.ndarray, check: bool = True) -> np.ndarray:
  """Run the program `uops` with PARAM i bound to a copy of arrays[i]; return PARAM 0's contents."""
  params = tuple(Param(u.arg[0], u.dtype, u.arg[1], u.arg[0] == 0) for u in uops if u.op is Ops.PARAM)
  prog = LoopProgram("test", tuple(uops), params, (), None, 0, 0)
  if check: check_program(prog)
  runner = PythonRuntime().load(prog.name, PythonCompiler().compile(PythonRenderer("PYTHON").render(prog))[0])
  bufs = [np.ascontiguousarray(a).view(np.uint8).copy() for a in arrays]
  runner(*bufs)
  return bufs[0].view(arrays[0].dtype)


def param(index: int, size: int) -> UOp: return UOp(Ops.PARAM, f32, (), (index, size))
def const(x: int | float) -> UOp: return UOp.const(f32 if isinstance(x, float) else i32, x)
def loop(n: int | UOp, ident: int) -> UOp: return UOp(Ops.RANGE, i32, (n if isinstance(n, UOp) else const(n),), ident)
def end(r: UOp) -> UOp: return UOp(Ops.ENDRANGE, None, (r,))
def acc(ident: int) -> UOp: return UOp(Ops.DEFINE_ACC, f32, (const(0.0),), ident)
def add_to(a: UOp, value: UOp) -> UOp: return UOp(Ops.ACCUMULATE, f32, (a, value), Ops.ADD)
def load(buf: UOp, index: UOp, *gate: UOp) -> UOp: return UOp(Ops.LOAD, f32, (buf, index, *gate))
def store(buf: UOp, index: UOp, value: UOp) -> UOp: return UOp(Ops.STORE, None, (buf, index, value))


def tiny_steps(n: int) -> np.ndarray:
  """1.0 then n-1 halves of float32's epsilon: each step of a sequential float32 sum rounds back to
  1.0 (ties to even), while a pairwise sum keeps them (1 + (n-1) * 2**-24)."""
  return np.array([1.0] + [2.0**-24] * (n - 1), np.float32)


@pytest.mark.parametrize("chunk,fold_rows", [(1 << 21, 512), (100, 512), (1000, 512), (1 << 21, 0)])
def test_sum_accumulates_sequentially_in_float32(monkeypatch, chunk, fold_rows):
  # out[0] = sum over i < 64, j < 64 of x[i*64 + j], one accumulator across both loops; small
  # chunk budgets make the outer loop run one iteration (100) or a few (1000) at a time, and
  # fold_rows 0 folds step by step instead of along each output's chain
  monkeypatch.setattr(loop_interpreter, "CHUNK_ELEMENTS", chunk)
  monkeypatch.setattr(loop_interpreter, "FOLD_ROWS", fold_rows)
  out, x, total, i, j = param(0, 1), param(1, 4096), acc(0), loop(64, 0), loop(64, 1)
  prog = program(out, x, total, i, j, add_to(total, load(x, i * const(64) + j)), end(j), end(i),
                 store(out, const(0), total))
  got = run(prog, np.zeros(1, np.float32), tiny_steps(4096))
  assert got[0] == np.float32(1.0)  # what a device's loop gives
  assert np.float32(tiny_steps(4096).sum()) != np.float32(1.0)  # numpy's pairwise sum: 1.000244


def test_bfloat16_accumulates_rounding_after_every_step():
  # 1.0 then 2**-9 64 times: a quarter of bfloat16's spacing at 1.0, so every step rounds back to 1.0
  n, bf16 = 65, dtypes.bfloat16
  out, x, i = UOp(Ops.PARAM, bf16, (), (0, 1)), UOp(Ops.PARAM, bf16, (), (1, n)), loop(n, 0)
  total = UOp(Ops.DEFINE_ACC, bf16, (UOp.const(bf16, 0.0),), 0)
  update = UOp(Ops.ACCUMULATE, bf16, (total, UOp(Ops.LOAD, bf16, (x, i))), Ops.ADD)
  prog = program(out, x, total, i, update, end(i), store(out, const(0), total))
  xs = f32_to_bf16(np.array([1.0] + [2.0**-9] * (n - 1), np.float32))
  assert bf16_to_f32(run(prog, np.zeros(1, np.uint16), xs))[0] == 1.0  # float32 steps would give 1.125


def test_reading_an_accumulator_inside_its_loop_sees_the_running_value():
  # out[i] = x[0] + ... + x[i]: the store inside the loop reads the accumulator the loop updates
  n = 300
  out, x, total, i = param(0, n), param(1, n), acc(0), loop(n, 0)
  prog = program(out, x, total, i, add_to(total, load(x, i)), store(out, i, total), end(i))
  xs = np.random.default_rng(0).standard_normal(n).astype(np.float32)
  np.testing.assert_array_equal(run(prog, np.zeros(n, np.float32), xs), np.cumsum(xs, dtype=np.float32))


def test_a_total_across_a_nest_whose_inner_loop_runs_one_at_a_time_keeps_loop_order():
  # out[i*64 + j] = running sum of row i (read inside j: j runs one iteration at a time), and
  # out[256] = the total over all (i, j), whose float32 order then needs i one at a time too
  out, x, row, total, i = param(0, 257), param(1, 256), acc(0), acc(1), loop(4, 0)
  j = loop(64, 1)
  at = i * const(64) + j
  prog = program(out, x, total, i, row, j, add_to(row, load(x, at)), store(out, at, row), add_to(total, load(x, at)),
                 end(j), end(i), store(out, const(256), total))
  xs = np.full(256, 2.0**-24, np.float32)
  xs[1] = 1.0  # in loop order the first tiny step comes before 1.0 and every later one rounds away
  got = run(prog, np.zeros(257, np.float32), xs)
  assert got[256] == np.float32(1.0)  # rows side by side would put 4 tiny steps first: 1.0000002
  np.testing.assert_array_equal(got[:256], np.cumsum(xs.reshape(4, 64), axis=1, dtype=np.float32).reshape(-1))


def test_a_recurrence_through_memory_runs_in_order():
  # out[i+1] = out[i] * 2 + x[i]: each iteration loads what the previous one stored
  n = 20
  out, x, i = param(0, n + 1), param(1, n), loop(n, 0)
  prog = program(out, x, i, store(out, i + const(1), load(out, i) * const(2.0) + load(x, i)), end(i))
  xs = np.arange(n, dtype=np.float32)
  want = np.zeros(n + 1, np.float32)
  for k in range(n): want[k + 1] = want[k] * 2 + xs[k]
  np.testing.assert_array_equal(run(prog, np.zeros(n + 1, np.float32), xs), want)


def test_an_inner_loop_bounded_by_the_outer_variable():
  # out[0] = sum over i < 50 of sum over j < i of x[j] (a triangle)
  n = 50
  out, x, total, i = param(0, 1), param(1, n), acc(0), loop(n, 0)
  j = loop(i, 1)
  prog = program(out, x, total, i, j, add_to(total, load(x, j)), end(j), end(i), store(out, const(0), total))
  xs = np.arange(n, dtype=np.float32)
  assert run(prog, np.zeros(1, np.float32), xs)[0] == sum(xs[:k].sum() for k in range(n))


def test_a_vector_whose_lanes_agree_keeps_every_lane():
  # out[k] = lane k of (1, 1, 1, 1) < (2, 2, 2, 2): the comparison's lanes are all equal
  out = param(0, 4)
  ones, twos = (UOp(Ops.VECTORIZE, i32.vec(4), (const(v),) * 4) for v in (1, 2))
  less = UOp(Ops.CMPLT, dtypes.bool.vec(4), (ones, twos))
  lanes = [UOp(Ops.GEP, dtypes.bool, (less,), k).where(const(1.0), const(0.0)) for k in range(4)]
  prog = program(out, *(store(out, const(k), lane) for k, lane in enumerate(lanes)))
  np.testing.assert_array_equal(run(prog, np.zeros(4, np.float32)), [1, 1, 1, 1])


def test_out_of_bounds_accesses_raise_and_gated_off_ones_read_nothing():
  n = 8
  out, x, i = param(0, n), param(1, n), loop(n, 0)
  nxt = i + const(1)  # x[1], ..., x[8]: the last one past the end
  xs = np.arange(n, dtype=np.float32)
  with pytest.raises(IndexError, match="load out of bounds"):
    run(program(out, x, i, store(out, i, load(x, nxt)), end(i)), np.zeros(n, np.float32), xs)
  gated = program(out, x, i, store(out, i, load(x, nxt, nxt.lt(const(n)))), end(i))
  np.testing.assert_array_equal(run(gated, np.zeros(n, np.float32), xs), [1, 2, 3, 4, 5, 6, 7, 0])
  with pytest.raises(IndexError, match="store out of bounds"):
    run(program(out, x, i, store(out, nxt, const(1.0)), end(i)), np.zeros(n, np.float32), xs)


def test_a_value_used_after_its_loop_is_a_compile_error():
  out, x, i = param(0, 1), param(1, 4), loop(4, 0)
  ld = load(x, i)
  prog = program(out, x, i, ld, end(i), store(out, const(0), ld))
  with pytest.raises(CompileError, match="outside the loop that defines it"):
    run(prog, np.zeros(1, np.float32), np.zeros(4, np.float32), check=False)


def test_fused_reduction_of_a_matmul_matches_numpy_in_any_chunking(monkeypatch):
  rng = np.random.default_rng(0)
  a, b = (rng.standard_normal((96, 80)).astype(np.float32), rng.standard_normal((80, 72)).astype(np.float32))

  def fused() -> Tensor: return (Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")).relu().sum(axis=1)

  assert len(fused().schedule()) == 1  # matmul, relu and row sum in one kernel: a three-deep loop nest
  whole = fused().numpy()
  np.testing.assert_allclose(whole, np.maximum(a @ b, 0).sum(axis=1), rtol=1e-4)
  monkeypatch.setattr(loop_interpreter, "CHUNK_ELEMENTS", 5000)  # the outer loop in small pieces
  np.testing.assert_array_equal(fused().numpy(), whole)  # the same order of operations, so the same bits
