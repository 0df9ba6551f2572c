"""Per-lane index math and gates as vector ops (`plugrad.codegen.vectorize._lanewise`): a VECTORIZE whose lanes are
one op on constants, broadcasts or such lanes becomes that op on vectors, lanes the simplifier folded included, and
every lane keeps its value."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from plugrad import Tensor
from plugrad.codegen.vectorize import vector_rules
from plugrad.device import Capabilities
from plugrad.dtype import dtypes
from plugrad.symbolic import symbolic
from plugrad.testing import available_devices, run_lowered
from plugrad.uops import GroupOp, Ops, UOp, graph_rewrite

AVX512_MASKED = Capabilities(max_vector_bytes=64, vector_ops=True, masked_loads=True)


def rng(n, i=0): return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), i)
def simp(u): return graph_rewrite(u, symbolic)


def _eval(u, env):
  """The value of an index or gate expression (a list for a vector) with the loop variables in `env`."""
  if u in env: return env[u]
  if u.op is Ops.CONST: return u.arg
  a = [_eval(s, env) for s in u.src]
  if u.op is Ops.VECTORIZE: return a
  if u.op is Ops.GEP: return a[0][u.arg]
  fn = {Ops.ADD: lambda x, y: x + y, Ops.MUL: lambda x, y: x * y, Ops.CMPLT: lambda x, y: x < y,
        Ops.AND: lambda x, y: x and y, Ops.OR: lambda x, y: x or y, Ops.IDIV: lambda x, y: x // y,
        Ops.MOD: lambda x, y: x % y, Ops.CMPNE: lambda x, y: x != y, Ops.CMPEQ: lambda x, y: x == y,
        Ops.XOR: lambda x, y: x ^ y}[u.op]
  if u.dtype.count == 1: return fn(*a)
  return [fn(*(x[k] if isinstance(x, list) else x for x in a)) for k in range(u.dtype.count)]


lane_gates = st.tuples(st.integers(-40, 40), st.integers(-3, 3), st.integers(-40, 40), st.integers(-3, 3),
                       st.sampled_from([Ops.AND, Ops.OR]), st.booleans())


@settings(max_examples=300, deadline=None, derandomize=True)
@given(lane_gates)
def test_lanes_of_gates_become_vector_ops_with_every_lane_unchanged(params):
  # lane k: (c + a*k < i + 16) op (j < d + b*k), simplified per lane as `vectorize` does (some lanes fold to a
  # constant or lose an operand), then put back together as vectors
  c, a, d, b, op, flip = params
  i, j = rng(32, 0), rng(8, 1)
  lanes = []
  for k in range(16):
    left = UOp.const(dtypes.int32, c + a * k).lt(i + 16)
    right = j.lt(UOp.const(dtypes.int32, d + b * k))
    lanes.append(simp(UOp(op, dtypes.bool, (right, left) if flip else (left, right))))
  vec = UOp(Ops.VECTORIZE, dtypes.bool.vec(16), tuple(lanes))
  got = graph_rewrite(vec, symbolic + vector_rules)
  for iv, jv in itertools.product(range(32), range(8)):
    env = {i: iv, j: jv}
    assert _eval(got, env) == [_eval(x, env) for x in lanes], f"i={iv} j={jv}"


window_gates = st.tuples(st.integers(0, 40), st.integers(1, 140), st.integers(0, 20), st.sampled_from([16, 32, 8]))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(window_gates)
def test_window_gates_of_an_index_per_lane_keep_every_lanes_value(params):
  # lane k of vector g reads j = 16g + k: its window's edge (c < j % m + w), the row's end (j < n) and start
  # (j >= p), simplified per lane as `vectorize` does (divisions fold per lane, bounds drop from the lanes they
  # always hold in), then put back together as vectors
  c, n, start, m = params
  g, w = rng(9, 0), rng(32, 1)
  lanes = []
  for k in range(16):
    j = g * 16 + k
    edge, first = UOp.const(dtypes.int32, c).lt(j % m + w), UOp.const(dtypes.int32, start - 1).lt(j)
    gate = edge.logical_and(j.lt(n)).logical_and(first)
    lanes.append(simp(gate))
  vec = UOp(Ops.VECTORIZE, dtypes.bool.vec(16), tuple(lanes))
  got = graph_rewrite(vec, symbolic + vector_rules)
  for gv, wv in itertools.product(range(9), range(32)):
    env = {g: gv, w: wv}
    assert _eval(got, env) == [_eval(x, env) for x in lanes], f"g={gv} w={wv}"


def test_a_gate_folded_in_some_lanes_is_one_vector_compare():
  # lanes k < i for k = 14, 13, ..., -1: the last is always true and folds; unfolded, all 16 are one compare
  i = rng(32)
  lanes = tuple(simp(UOp.const(dtypes.int32, 14 - k).lt(i)) for k in range(16))
  assert lanes[-1].op is Ops.CONST
  got = graph_rewrite(UOp(Ops.VECTORIZE, dtypes.bool.vec(16), lanes), symbolic + vector_rules)
  assert got.op is Ops.CMPLT and got.dtype == dtypes.bool.vec(16)


def test_lanes_of_different_operands_stay_lanes():
  # lane k compares with its own loop variable: as a vector that would be an insert per lane anyway
  loops = [rng(8, k) for k in range(4)]
  lanes = tuple(UOp.const(dtypes.int32, 3).lt(r) for r in loops)
  got = graph_rewrite(UOp(Ops.VECTORIZE, dtypes.bool.vec(4), lanes), symbolic + vector_rules)
  assert got.op is Ops.VECTORIZE and got.src == lanes


def _loop_bodies(prog):
  """The UOps inside each program's loops."""
  depth = 0
  for u in prog.uops:
    if u.op is Ops.ENDRANGE: depth -= 1
    if depth: yield u
    if u.op is Ops.RANGE: depth += 1


@pytest.mark.parametrize("n", [64, 1001])
def test_a_padded_windows_gates_are_vector_compares(n):
  # a cumsum sums windows padded before each chunk: each lane's window starts elsewhere, so each has its own gate;
  # in the loop those are vector compares and ands, no scalar bool op
  x = np.random.default_rng(0).standard_normal((3, n)).astype(np.float32)
  got, progs = run_lowered(Tensor(x, device="PYTHON").cumsum(1), AVX512_MASKED)
  np.testing.assert_allclose(got, np.cumsum(x, 1), rtol=1e-4, atol=1e-4)
  window = progs[0]
  assert any(u.op is Ops.LOAD and len(u.src) == 3 and u.src[2].dtype.count > 1 for u in window.uops)  # masked loads
  scalar_gates = [u for u in _loop_bodies(window) if u.op in GroupOp.ALU and u.dtype == dtypes.bool]
  assert not scalar_gates, scalar_gates


@pytest.mark.parametrize("on", [d for d in ("PYTHON", "CPU") if d in available_devices()])
@pytest.mark.parametrize("case", ["cumsum", "cumsum_int", "avg_pool_pad", "conv_pad", "pad_sum"])
def test_kernels_with_gates_per_lane_give_numpys_answer(on, case):
  # odd sizes: the last vector of a row has lanes past its end as well as lanes in the padding
  rng_ = np.random.default_rng(1)
  x = rng_.standard_normal((2, 3, 19, 21)).astype(np.float32)
  w = rng_.standard_normal((5, 3, 3, 3)).astype(np.float32)
  build = {
    "cumsum": lambda t, _: t.reshape(6, 399).cumsum(1),
    "cumsum_int": lambda t, _: (t * 10).cast("int32").reshape(6, 399).cumsum(1),
    "avg_pool_pad": lambda t, _: t.avg_pool2d(kernel_size=(3, 3), stride=1, padding=1),
    "conv_pad": lambda t, wt: t.conv2d(wt, padding=2),
    "pad_sum": lambda t, _: t.pad(((0, 0), (0, 0), (2, 3), (5, 1))).sum(axis=2),
  }[case]
  want = build(Tensor(x, device="PYTHON"), Tensor(w, device="PYTHON")).numpy()
  got = build(Tensor(x, device=on), Tensor(w, device=on)).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
