"""Every dtype and ALU op on CPU agrees with the PYTHON reference device (the executable
definition of the ops in plugrad.alu), including the edge cases C leaves undefined."""
import numpy as np
import pytest

from plugrad import Tensor, dtypes
from plugrad.dtype import bf16_to_f32

INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
ALL = [dtypes.bool, *INTS, *FLOATS]


def both(fn, *arrays, dtype=None):
  """fn applied to Tensors of `arrays` on CPU and on PYTHON, as numpy arrays."""
  outs = []
  for dev in ("CPU", "PYTHON"):
    ts = [Tensor(a, device=dev, dtype=dtype) for a in arrays]
    outs.append(fn(*ts).numpy())
  return outs


def same(got, want, exact):
  assert got.dtype == want.dtype and got.shape == want.shape
  if exact: np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=1e-6, equal_nan=True)


def sample(dt, n=40, seed=0):
  rng = np.random.default_rng(seed)
  if dt == dtypes.bool: return rng.random(n) < 0.5
  if dt.is_int:
    info = np.iinfo(dt.np)
    edges = [info.min, info.max, 0, 1, info.min + 1, 2] + ([-1, -2] if dt.kind == "i" else [3, 4])
    return np.concatenate([np.array(edges, dtype=dt.np), rng.integers(info.min, info.max, n - len(edges), endpoint=True,
                                                                       dtype=dt.np)])
  special = np.array([0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, 3.0e4], dtype=np.float32)
  return np.concatenate([special, rng.standard_normal(n - len(special)).astype(np.float32) * 100]).astype(dt.np)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_binary_ops(dt):
  a, b = sample(dt, seed=1), sample(dt, seed=2)
  exact = not dt.is_float
  ops = [lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x.maximum(y), lambda x, y: x.minimum(y),
         lambda x, y: x < y, lambda x, y: x == y, lambda x, y: x != y, lambda x, y: (x < y).where(x, y)]
  if dt != dtypes.bool: ops.append(lambda x, y: x - y)
  if dt.is_float: ops.append(lambda x, y: x / y)
  if not dt.is_float: ops += [lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x ^ y]
  for op in ops: same(*both(op, a, b, dtype=dt), exact=exact)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_int_division_never_traps(dt):
  # x // 0, x % 0 and INT_MIN // -1 are defined by plugrad.alu; on x86 a raw idiv would SIGFPE
  a, b = sample(dt, seed=3), sample(dt, seed=4)
  b[:6] = 0
  if dt.kind == "i": a[6], b[6] = np.iinfo(dt.np).min, -1
  from plugrad.uops import Ops
  for op in (Ops.IDIV, Ops.MOD):
    same(*both(lambda x, y: x._alu(op, y), a, b, dtype=dt), exact=True)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_shifts_use_low_bits(dt):
  a = sample(dt, seed=5)
  amounts = (np.arange(len(a)) * 7 % 70).astype(dt.np)
  same(*both(lambda x, y: x << y, a, amounts, dtype=dt), exact=True)
  same(*both(lambda x, y: x >> y, a, amounts, dtype=dt), exact=True)


@pytest.mark.parametrize("dt", [d for d in ALL if d != dtypes.bool], ids=lambda d: d.name)
def test_unary_ops(dt):
  a = sample(dt, seed=6)
  same(*both(lambda x: -x, a, dtype=dt), exact=not dt.is_float)
  if dt.is_float:
    for fn in (Tensor.sqrt, Tensor.exp2, Tensor.log2, Tensor.sin, Tensor.trunc, Tensor.reciprocal):
      same(*both(fn, np.abs(a) if fn in (Tensor.sqrt, Tensor.log2) else a, dtype=dt), exact=False)


def test_bool_ops():
  a, b = sample(dtypes.bool, seed=7), sample(dtypes.bool, seed=8)
  for op in (lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x ^ y,
             lambda x, y: x.logical_not(), lambda x, y: x < y, lambda x, y: x.maximum(y)):
    same(*both(op, a, b, dtype=dtypes.bool), exact=True)


@pytest.mark.parametrize("src", ALL, ids=lambda d: d.name)
def test_casts(src):
  a = sample(src, seed=9)
  for dst in ALL:
    same(*both(lambda x: x.cast(dst), a, dtype=src), exact=True)


@pytest.mark.parametrize("src", [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64], ids=lambda d: d.name)
def test_cast_chains_in_an_unrolled_kernel(src):
  # a signed value through a wider unsigned type into floats, in a concatenation's kernel whose remainder loop
  # LLVM's SLP vectoriser takes: LLVM 22 narrowed uitofp(sext i8 to i64) to 32 bits there (-2 -> 2**32 - 2)
  x = sample(src, n=24, seed=3).reshape(3, 8)
  for mid in (dtypes.uint16, dtypes.uint32, dtypes.uint64):
    if mid.itemsize <= src.itemsize: continue
    for dst in (dtypes.float32, dtypes.float64):
      same(*both(lambda t: t.cast(mid).cast(dst).cat(t.cast(dst), dim=1), x, dtype=src), exact=True)


def test_float_to_int_cast_edge_cases():
  a = np.array([np.nan, np.inf, -np.inf, 3.99, -3.99, 1e30, -1e30, 2.0**31, -(2.0**31) - 1, 2.0**63, 300.7], dtype=np.float32)
  for src in (dtypes.float32, dtypes.float64, dtypes.float16):  # noqa: B007
    with np.errstate(over="ignore"): x = a.astype(src.np)  # 1e30 overflows float16 to inf on purpose
    for dst in INTS: same(*both(lambda t: t.cast(dst), x, dtype=src), exact=True)


@pytest.mark.parametrize("a_dt,b_dt", [(dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.float32),
                                        (dtypes.float16, dtypes.int16), (dtypes.bfloat16, dtypes.uint16),
                                        (dtypes.uint16, dtypes.bfloat16), (dtypes.float64, dtypes.int64)],
                         ids=lambda d: d.name)
def test_bitcast(a_dt, b_dt):
  a = sample(a_dt, seed=10)
  same(*both(lambda x: x.bitcast(b_dt), a, dtype=a_dt), exact=True)


def test_bfloat16_rounds_after_every_op():
  # 1 + 2**-9 is not a bfloat16: each op must round (nearest even), not only the final store
  a = np.full(8, 1.0, np.float32)
  got, want = both(lambda x: ((x + 2.0**-9) + 2.0**-9) * 3, a, dtype=dtypes.bfloat16)
  same(got, want, exact=True)
  t = Tensor(np.array([1.0, 1.00390625, 1.01171875, np.nan], np.float32), device="CPU").cast(dtypes.bfloat16)
  assert t.uop is not None
  raw = (t + 0.0).numpy()
  np.testing.assert_array_equal(raw[:3], bf16_to_f32(np.array([0x3F80, 0x3F80, 0x3F82], np.uint16)))
  assert np.isnan(raw[3])


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_reductions(dt):
  a = sample(dt, n=48, seed=11).reshape(6, 8)
  if dt.is_float: a = np.nan_to_num(a, nan=1.0, posinf=2.0, neginf=-2.0)
  fns = [lambda x: x.sum(axis=1), lambda x: x.max(axis=0)]
  if dt != dtypes.bfloat16: fns += [lambda x: x.min(), lambda x: x.max(), lambda x: x.sum()]
  for fn in fns: same(*both(fn, a, dtype=dt), exact=not dt.is_float)


def test_bfloat16_full_reduction_matches_reference():
  a = sample(dtypes.bfloat16, n=48, seed=11).reshape(6, 8)
  a = np.nan_to_num(a, nan=1.0, posinf=2.0, neginf=-2.0)
  for fn in (lambda x: x.min(), lambda x: x.sum()): same(*both(fn, a, dtype=dtypes.bfloat16), exact=False)


def test_bfloat16_full_reduction():
  a = np.array([[1.0, 2.5, -3.0], [8.0, 0.5, 0.25]], np.float32)
  t = Tensor(a, device="CPU", dtype=dtypes.bfloat16)
  assert t.sum().item() == 9.25 and t.max().item() == 8.0 and t.min().item() == -3.0


def test_max_propagates_nan():
  a = np.arange(64, dtype=np.float32).reshape(8, 8)
  a[3, 5] = np.nan
  got, want = both(lambda x: x.max(axis=1), a)
  same(got, want, exact=True)
  assert np.isnan(Tensor(a, device="CPU").max().item())
  assert np.isnan(Tensor(a, device="CPU").maximum(0).numpy()[3, 5])


def test_padded_loads_are_gated():
  # reading outside the buffer through a pad must not touch memory (the gate), and yields the pad value
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  got, want = both(lambda x: x.pad(((2, 3), (1, 5))) * 2 + 1, a)
  same(got, want, exact=True)
  got, want = both(lambda x: x.pad(((1, 1), (1, 1))).sum(axis=0), a)
  same(got, want, exact=True)
