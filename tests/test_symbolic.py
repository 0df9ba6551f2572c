"""Simplification of index arithmetic, and a property test that it never changes a value."""
import itertools

from hypothesis import given, settings, strategies as st

from plugrad.dtype import dtypes
from plugrad.symbolic import symbolic
from plugrad.uops import Ops, UOp, graph_rewrite


def rng(n, i=0): return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), i)
def simp(u): return graph_rewrite(u, symbolic)


def test_identities():
  x = rng(8)
  assert simp(x + 0) is x
  assert simp(x * 1) is x
  assert simp(x * 0).arg == 0
  assert simp(x // 1) is x
  assert simp(x % 1).arg == 0
  assert simp(UOp.const(dtypes.int32, 3) * 4 + 2).arg == 14


def test_reshape_round_trip_folds_away():
  # (i*m + j) // m -> i and (i*m + j) % m -> j when 0 <= j < m
  i, j = rng(5, 0), rng(7, 1)
  flat = i * 7 + j
  assert simp(flat // 7) is i
  assert simp(flat % 7) is j


def test_divmod_by_bounds():
  x = rng(6)
  assert simp(x // 6).arg == 0
  assert simp(x % 6) is x
  assert simp((x + 12) // 6) is simp(x // 6 + 2)


def test_divmod_of_a_multiple_plus_a_smaller_offset():
  # 16g + k with 0 <= k < 16, in chunks of 32: chunk g // 2 at offset (g % 2)*16 + k for every k (vector lane k of
  # the g-th vector of 16), not a form of its own per k
  g = rng(100)
  for k in range(16):
    assert simp((g * 16 + k) // 32) is simp(g // 2)
    assert simp((g * 16 + k) % 32) is simp((g % 2) * 16 + k)
  for g_val in range(100):
    for k in (0, 5, 15, 17, 31):
      assert _eval(simp((g * 16 + k) % 32), {g: g_val}) == (g_val * 16 + k) % 32
      assert _eval(simp((g * 16 + k) // 32), {g: g_val}) == (g_val * 16 + k) // 32


def test_nested_div_and_mod():
  x = rng(100)
  assert simp((x // 4) // 5) is simp(x // 20)
  assert simp((x % 12) % 4) is simp(x % 4)


def test_like_terms_combine():
  x, y = rng(4, 0), rng(4, 1)
  assert simp(x * 2 + y + x * 3) is simp(x * 5 + y)


def test_divmod_pairs_rejoin():
  # (x // n)*n + x % n -> x, scaled too: a reshape that splits a loop and merges it again reads it directly
  r, g = rng(65536), rng(8, 1)
  assert simp(g * 65536 + (r // 4096) * 4096 + r % 4096) is simp(g * 65536 + r)
  assert simp((r // 4096) * 8192 + (r % 4096) * 2 + 1) is simp(r * 2 + 1)
  assert simp((r // 4096) * 4096 + (r % 2048)).op is Ops.ADD  # different divisors: left alone


def test_merged_axes_split_again_rejoin():
  # ((x // n) % m)*n + x % n -> x % (n*m): the per-axis indices of axes merged into one read the merged index
  r = rng(1638400)
  assert simp((r // 12800) * 12800 + ((r // 400) % 32) * 400 + ((r // 20) % 20) * 20 + r % 20) is r
  assert simp(((r // 20) % 20) * 40 + (r % 20) * 2 + 7) is simp((r % 400) * 2 + 7)
  assert simp(((r // 20) % 20) * 20 + r % 10).op is Ops.ADD  # a remainder of another divisor: left alone


def test_comparisons_decided_by_bounds():
  x = rng(4)
  assert simp(x.lt(4)).arg is True
  assert simp(x.lt(0)).arg is False
  assert simp(UOp.const(dtypes.bool, True).where(x, rng(3, 1))) is x


def test_size_one_range_is_zero():
  assert simp(rng(1) + 5).arg == 5


exprs = st.deferred(lambda: st.one_of(
  st.just("i"), st.just("j"), st.integers(0, 9).map(str),
  st.tuples(exprs, st.sampled_from(["+", "*"]), exprs).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
  st.tuples(exprs, st.sampled_from(["//", "%"]), st.integers(1, 9)).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(exprs)
def test_simplification_keeps_values(expr):
  i, j = rng(6, 0), rng(5, 1)
  zero = UOp.const(dtypes.int32, 0)
  u = simp(zero + eval(expr, {"i": i, "j": j}))  # nonnegative expressions: // and % agree with C there
  for iv, jv in itertools.product(range(6), range(5)):
    expected = eval(expr, {"i": iv, "j": jv})
    assert _eval(u, {i: iv, j: jv}) == expected, f"{expr} at i={iv} j={jv}"


def _eval(u, env):
  if u in env: return env[u]
  if u.op is Ops.CONST: return u.arg
  a = [_eval(s, env) for s in u.src]
  return {Ops.ADD: lambda: a[0] + a[1], Ops.MUL: lambda: a[0] * a[1], Ops.IDIV: lambda: int(a[0] / a[1]),
          Ops.MOD: lambda: a[0] - a[1] * int(a[0] / a[1]), Ops.SUB: lambda: a[0] - a[1], Ops.NEG: lambda: -a[0],
          Ops.CMPLT: lambda: a[0] < a[1], Ops.WHERE: lambda: a[1] if a[0] else a[2]}[u.op]()


def test_relu_lowers_to_one_compare_and_select():
  # relu is where(x < 0, 0, x): torch's value at every x (-0.0 and NaN pass through, as test_numerics checks), its
  # gradient taken from the output by a rule of its own
  from plugrad import Tensor
  from plugrad.codegen.lowerer import lower
  from plugrad.device import Capabilities
  item = [it for it in (Tensor.empty(4, 4, device="PYTHON") + 1).relu().schedule() if not it.is_copy][-1]
  ops = [u.op for u in lower(item.ast, Capabilities()).uops if u.dtype in (dtypes.float32, dtypes.bool)]
  assert (ops.count(Ops.CMPLT), ops.count(Ops.WHERE), ops.count(Ops.MUL)) == (1, 1, 0)
