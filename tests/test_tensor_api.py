"""tinygrad 0.14's Tensor API beyond the basics, compared with torch on PYTHON and CPU: math, activations,
scans, sorting and selection, creation, dtype information and the edge cases torch defines (NaN, inf, -0.0,
empty and one-element tensors).

Most tests go through `check`: it makes seeded random float32 inputs (or takes arrays as given), runs the
same function through torch and plugrad and compares values, shapes and dtype kinds:

  check(torch.erf, Tensor.erf, (3, 5), dev=dev)
"""
import ctypes
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plugrad import Tensor, dtypes
from plugrad.uops import Ops


# special values every unary float op meets: zeros of both signs, tiny and huge, infinities and NaN
SPECIAL = np.array([0.0, -0.0, 1e-30, -1e-7, 0.5, -0.5, 1.5, 2.5, -2.5, 30.0, -30.0, 1e20, -1e20,
                    np.inf, -np.inf, np.nan], dtype=np.float32)


def inputs(specs, dtype=np.float32, low=-2.0, high=2.0, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for s in specs:
    if isinstance(s, np.ndarray): out.append(s)
    elif np.dtype(dtype) == np.bool_: out.append(rng.random(s) < 0.5)
    elif np.dtype(dtype).kind in "iu": out.append(rng.integers(low, high, size=s).astype(dtype))
    else: out.append(rng.uniform(low, high, size=s).astype(dtype))
  return out


def to_numpy(x):
  if isinstance(x, torch.Tensor): return x.detach().numpy()
  if isinstance(x, Tensor): return x.numpy()
  return np.asarray(x)


def assert_same(got, want, atol=1e-5, rtol=1e-5):
  got, want = to_numpy(got), to_numpy(want)
  assert got.shape == want.shape, f"shape {got.shape} != torch's {want.shape}"
  kinds = {"b": "b", "i": "iu", "u": "iu", "f": "f"}
  assert got.dtype.kind in kinds[want.dtype.kind], f"dtype {got.dtype} vs torch's {want.dtype}"
  if want.dtype.kind in "biu": np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)


def check(torch_fn, pl_fn, *specs, dev, dtype=np.float32, low=-2.0, high=2.0, atol=1e-5, rtol=1e-5):
  arrays = inputs(specs, dtype, low, high)
  want = torch_fn(*[torch.from_numpy(a.copy()) for a in arrays])
  got = pl_fn(*[Tensor(a, device=dev) for a in arrays])
  if isinstance(want, (tuple, list)):
    for g, w in zip(got, want): assert_same(g, w, atol, rtol)
  else: assert_same(got, want, atol, rtol)


# ------------------------------------------------------------------------------------------------ math

UNARY = [  # (name, torch, plugrad, domain low, high)
  ("acos", torch.acos, Tensor.acos, -1, 1), ("asin", torch.asin, Tensor.asin, -1, 1),
  ("atan", torch.atan, Tensor.atan, -50, 50), ("acosh", torch.acosh, Tensor.acosh, 1, 20),
  ("asinh", torch.asinh, Tensor.asinh, -20, 20), ("atanh", torch.atanh, Tensor.atanh, -0.99, 0.99),
  ("sinh", torch.sinh, Tensor.sinh, -10, 10), ("cosh", torch.cosh, Tensor.cosh, -10, 10),
  ("erf", torch.erf, Tensor.erf, -4, 4), ("erfc", torch.erfc, Tensor.erfc, -4, 9),
  ("log10", torch.log10, Tensor.log10, 0.01, 100),
  ("round", torch.round, Tensor.round, -5, 5),
]


@pytest.mark.parametrize("name,tfn,pfn,low,high", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5)])
def test_unary_math(name, tfn, pfn, low, high, shape, dev):
  check(tfn, pfn, shape, dev=dev, low=low, high=high, atol=2e-6, rtol=2e-5)


@pytest.mark.parametrize("name,tfn,pfn", [u[:3] for u in UNARY], ids=[u[0] for u in UNARY])
def test_unary_math_special_values(name, tfn, pfn, dev):
  with np.errstate(all="ignore"):
    check(tfn, pfn, SPECIAL, dev=dev, atol=1e-6, rtol=2e-5)


def test_erfc_and_exact_gelu_keep_their_digits_in_the_tail(dev):
  # Phi(x) was (1 + erf(x / sqrt 2)) / 2, which cancels to nothing for x < -4 (erf's error is absolute): gelu(-6)
  # came out with the wrong leading digit. Against float64 (torch's float32 gelu is 0 from about -5.6 on)
  x = np.linspace(-13, 6, 1901).astype(np.float32)
  wide = torch.from_numpy(x.astype(np.float64))
  gelu = Tensor(x, device=dev).gelu(approximate="none").numpy()
  np.testing.assert_allclose(gelu, (0.5 * wide * torch.erfc(-wide / np.sqrt(2))).numpy(), rtol=3e-5, atol=0)
  np.testing.assert_allclose(Tensor(x, device=dev).erfc().numpy(), torch.erfc(wide).numpy(), rtol=1e-5, atol=0)


def test_round_halves_to_even(dev):
  x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998, 8388609.0, -3.5000002], dtype=np.float32)
  check(torch.round, Tensor.round, x, dev=dev, atol=0, rtol=0)
  assert Tensor([3, -4], device=dev).round().tolist() == [3, -4]


def test_predicates(dev):
  check(torch.isnan, Tensor.isnan, SPECIAL, dev=dev)
  check(torch.isinf, Tensor.isinf, SPECIAL, dev=dev)
  check(torch.isfinite, Tensor.isfinite, SPECIAL, dev=dev)
  check(torch.isposinf, lambda t: t.isinf(detect_negative=False), SPECIAL, dev=dev)
  check(torch.isneginf, lambda t: t.isinf(detect_positive=False), SPECIAL, dev=dev)
  assert Tensor([1, 2], device=dev).isinf().tolist() == [False, False]


def test_isclose_allclose(dev):
  a = np.array([1.0, 1.0, np.inf, -np.inf, np.nan, 0.0, 1e-9], dtype=np.float32)
  b = np.array([1.0 + 1e-6, 1.1, np.inf, np.inf, np.nan, 1e-9, 0.0], dtype=np.float32)
  check(torch.isclose, Tensor.isclose, a, b, dev=dev)
  check(lambda x, y: torch.isclose(x, y, equal_nan=True), lambda x, y: x.isclose(y, equal_nan=True), a, b, dev=dev)
  check(lambda x, y: torch.isclose(x, y, rtol=0.2), lambda x, y: x.isclose(y, rtol=0.2), a, b, dev=dev)
  x = Tensor([1.0, 2.0], device=dev)
  assert x.allclose(x + 1e-7).item() is True and x.allclose(x + 1e-3).item() is False


BINARY = [
  ("copysign", torch.copysign, Tensor.copysign), ("fmod", torch.fmod, Tensor.fmod),
  ("logaddexp", torch.logaddexp, Tensor.logaddexp), ("eq", torch.eq, Tensor.eq), ("ne", torch.ne, Tensor.ne),
]


@pytest.mark.parametrize("name,tfn,pfn", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 1, 3), (4, 1)), ((0, 3), (3,)), ((1,), (1,))])
def test_binary_math(name, tfn, pfn, shapes, dev):
  check(tfn, pfn, *shapes, dev=dev, low=-3, high=3)


def test_binary_math_special_values(dev):
  a, b = SPECIAL, SPECIAL[::-1].copy()
  with np.errstate(all="ignore"):
    for tfn, pfn in [(torch.copysign, Tensor.copysign), (torch.logaddexp, Tensor.logaddexp)]:
      check(tfn, pfn, a, b, dev=dev)
  check(torch.fmod, Tensor.fmod, np.array([5, -5, 5, -5, 7], np.int32), np.array([3, 3, -3, -3, 7], np.int32), dev=dev)


WHERE_VALUES = [  # (x, y) of cond.where(x, y): "a", "b" name (3, 4) float32 tensors, "i" an int32 one, "r" a row (4,)
  ("a", 0), (0, "a"), ("a", "b"), ("a", 1.5), ("a", True), (2, 3.5), ("i", 0.5), ("a", "r"), ("i", "a")]


@pytest.mark.parametrize("x,y", WHERE_VALUES)
def test_where(x, y, dev, monkeypatch):
  """torch's values and dtypes; the common operands (tensors of the condition's shape and one dtype, numbers that
  keep it) build the very node the general path (casts, broadcasts, constant tensors) makes."""
  rng = np.random.default_rng(3)
  arrays = {"a": rng.standard_normal((3, 4)).astype(np.float32), "b": rng.standard_normal((3, 4)).astype(np.float32),
            "i": rng.integers(-5, 5, (3, 4)).astype(np.int32), "r": rng.standard_normal(4).astype(np.float32)}
  cond = rng.standard_normal((3, 4)) > 0
  ours = [Tensor(arrays[v], device=dev) if isinstance(v, str) else v for v in (x, y)]
  theirs = [torch.from_numpy(arrays[v]) if isinstance(v, str) else v for v in (x, y)]
  c = Tensor(cond, device=dev)
  got = c.where(*ours)
  with monkeypatch.context() as m:
    m.setattr(Tensor, "_where_alike", lambda self, x, y: None)
    assert c.where(*ours).uop is got.uop
  want = torch.where(torch.from_numpy(cond), *theirs)
  assert_same(got, want.float() if want.dtype == torch.float64 else want, 1e-6, 1e-6)


def test_lerp(dev):
  check(lambda a, b, w: torch.lerp(a, b, w), Tensor.lerp, (3, 4), (3, 4), (4,), dev=dev)
  check(lambda a, b: torch.lerp(a, b, 0.25), lambda a, b: a.lerp(b, 0.25), (2, 3), (2, 3), dev=dev)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.int64, np.bool_])
def test_bitwise(dtype, dev):
  for tfn, pfn in [(torch.bitwise_and, Tensor.bitwise_and), (torch.bitwise_or, Tensor.bitwise_or),
                   (torch.bitwise_xor, Tensor.bitwise_xor)]:
    check(tfn, pfn, (3, 4), (4,), dev=dev, dtype=dtype, low=0, high=100)
  check(torch.bitwise_not, Tensor.bitwise_not, (5,), dev=dev, dtype=dtype, low=0, high=100)


def test_shifts(dev):
  check(lambda a, b: a << b, Tensor.lshift, (6,), (6,), dev=dev, dtype=np.int32, low=0, high=8)
  check(lambda a, b: a >> b, Tensor.rshift, (6,), (6,), dev=dev, dtype=np.int32, low=0, high=8)
  assert (1 << Tensor([1, 2, 3], device=dev)).tolist() == [2, 4, 8]
  assert (64 >> Tensor([1, 2, 3], device=dev)).tolist() == [32, 16, 8]


def test_integer_wrap(dev):
  # tinygrad's example: a Python int beyond int32 wraps into the tensor's dtype
  assert (Tensor([0], dtype="int", device=dev) | 0xFFFFFFFF).tolist() == [-1]
  assert (Tensor([250], dtype="uchar", device=dev) + Tensor([10], dtype="uchar", device=dev)).tolist() == [4]
  assert (Tensor([2**31 - 1], dtype=dtypes.int32, device=dev) + 1).tolist() == [-2**31]


def test_pow_edge_cases(dev):
  base = np.array([0.0, 0.0, 0.0, -0.0, -2.0, -2.0, -8.0, 1.0, -1.0, np.inf, -np.inf, -np.inf, np.nan, 2.0, 0.5],
                  dtype=np.float32)
  exp = np.array([0.0, -1.0, 0.5, -3.0, 3.0, 0.5, 1 / 3, np.nan, np.inf, 0.0, 3.0, 0.5, 0.0, -np.inf, np.inf],
                 dtype=np.float32)
  with np.errstate(all="ignore"):
    check(torch.pow, Tensor.pow, base, exp, dev=dev)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_integer_pow_is_exact_and_wraps_as_torchs(dtype, dev):
  # float32's exp2(b log2 a) rounded: 10 ** 9 was 999999552, 3 ** 39 (int64) off in its last digits, 7 ** 31 0
  rng = np.random.default_rng(1)
  low = 0 if dtype == "uint8" else -12
  a = np.concatenate([[1, 0, 2, 3, 10, 7], rng.integers(low, 13, 60)]).astype(dtype)
  b = np.concatenate([[5, 0, 7, 39, 9, 31], rng.integers(0 if low == 0 else -3, 70, 60)]).astype(dtype)
  if low: a[:2] = -1  # a negative exponent: 0, but 1 for a base of 1 and +-1 for -1 (torch's)
  check(torch.pow, Tensor.pow, a, b, dev=dev)
  for e in (17, 31, 39, 100):
    check(lambda t, e=e: t ** e, lambda t, e=e: t ** e, a, dev=dev)


def test_an_integer_tensor_to_a_negative_int_power_is_refused_as_torch_refuses_it(dev):
  t = Tensor([2, 3], dtype=dtypes.int32, device=dev)
  with pytest.raises(ValueError, match="negative integer powers are not allowed"): t ** -1
  with pytest.raises(RuntimeError, match="negative integer powers are not allowed"): torch.tensor([2, 3]) ** -1
  np.testing.assert_allclose((t.float() ** -1).numpy(), [0.5, 1 / 3], rtol=1e-7)  # the way out the message names


def test_pow_promotes_as_the_other_binary_ops(dev):
  # an integer tensor to a float power is float (as x * 2.0 is), a bool one to an int power int (as x + 2 is)
  assert (Tensor([3], dtype=dtypes.int32, device=dev) ** 2.0).dtype == dtypes.float32
  assert (Tensor([True, False], device=dev) ** 2).tolist() == [1, 0]
  assert (Tensor([True, False], device=dev) ** 2).dtype == (Tensor([True], device=dev) + 2).dtype


def test_inplace_operators_write_through(dev):
  a = Tensor([1.0, 2.0], device=dev).realize()
  alias = a
  a += 1
  a *= 3
  assert alias is a and alias.tolist() == [6.0, 9.0]
  b = Tensor([12, 5], device=dev)
  b //= 2
  b <<= 1
  assert b.tolist() == [12, 4]


# ------------------------------------------------------------------------------------------------ activations

ACTIVATIONS = [
  ("elu", torch.nn.functional.elu, Tensor.elu),
  ("celu", lambda x: torch.nn.functional.celu(x, 0.7), lambda x: x.celu(0.7)),
  ("selu", torch.nn.functional.selu, Tensor.selu), ("relu6", torch.nn.functional.relu6, Tensor.relu6),
  ("hardsigmoid", torch.nn.functional.hardsigmoid, Tensor.hardsigmoid),
  ("hardswish", torch.nn.functional.hardswish, Tensor.hardswish),
  ("hardtanh", lambda x: torch.nn.functional.hardtanh(x, -0.5, 2), lambda x: x.hardtanh(-0.5, 2)),
  ("mish", torch.nn.functional.mish, Tensor.mish), ("softsign", torch.nn.functional.softsign, Tensor.softsign),
  ("logsigmoid", torch.nn.functional.logsigmoid, Tensor.logsigmoid),
  ("quick_gelu", lambda x: x * torch.sigmoid(1.702 * x), Tensor.quick_gelu),
  ("gelu_tanh", lambda x: torch.nn.functional.gelu(x, approximate="tanh"), Tensor.gelu),
  ("gelu_none", torch.nn.functional.gelu, lambda x: x.gelu(approximate="none")),
  ("softplus", torch.nn.functional.softplus, Tensor.softplus),
  ("softplus_beta", lambda x: torch.nn.functional.softplus(x, beta=2.0), lambda x: x.softplus(2.0)),
  ("softmin", lambda x: torch.nn.functional.softmin(x, -1), Tensor.softmin),
]


@pytest.mark.parametrize("name,tfn,pfn", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activations(name, tfn, pfn, dev):
  check(tfn, pfn, (4, 7), dev=dev, low=-8, high=8, atol=2e-6)
  check(tfn, pfn, (0, 3), dev=dev)


def test_activations_large_inputs(dev):
  x = np.array([-100.0, -30.0, 0.0, 30.0, 100.0], dtype=np.float32)
  for tfn, pfn in [(torch.nn.functional.softplus, Tensor.softplus), (torch.nn.functional.logsigmoid, Tensor.logsigmoid),
                   (torch.nn.functional.mish, Tensor.mish), (torch.nn.functional.elu, Tensor.elu)]:
    check(tfn, pfn, x, dev=dev)


# ------------------------------------------------------------------------------------------------ reductions, scans

@pytest.mark.parametrize("shape,axis", [((3, 4), None), ((3, 4), 1), ((2, 0, 3), 1), ((1,), 0), ((2, 3, 2), (0, 2))])
def test_any_all(shape, axis, dev):
  x = inputs([shape], np.int32, 0, 2)[0]
  tax = tuple(range(len(shape))) if axis is None else axis
  check(lambda t: t.any(dim=tax), lambda t: t.any(axis), x, dev=dev)
  check(lambda t: t.all(dim=tax), lambda t: t.all(axis), x, dev=dev)
  check(lambda t: t.bool().any(dim=tax, keepdim=True), lambda t: t.any(axis, keepdim=True), x, dev=dev)


def test_var_mean_std_mean(dev):
  check(lambda t: torch.var_mean(t, 1), lambda t: t.var_mean(1), (3, 5), dev=dev)
  check(lambda t: torch.std_mean(t, (0, 1), correction=0, keepdim=True),
        lambda t: t.std_mean((0, 1), keepdim=True, correction=0), (3, 5), dev=dev)
  with pytest.warns(UserWarning):  # torch warns about the degrees of freedom; plugrad gives the same NaN
    check(lambda t: torch.std(t, 0), lambda t: t.std(0), (1, 3), dev=dev)


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 0), 1), ((1,), 0), ((), 0)])
def test_cumulative(shape, axis, dev):
  check(lambda t: torch.cumsum(t, axis), lambda t: t.cumsum(axis), shape, dev=dev, atol=1e-5)
  check(lambda t: torch.cumprod(t, axis), lambda t: t.cumprod(axis), shape, dev=dev, low=0.5, high=1.5)
  check(lambda t: torch.logcumsumexp(t, axis), lambda t: t.logcumsumexp(axis), shape, dev=dev, low=-50, high=50)
  if 0 not in shape:
    check(lambda t: tuple(torch.cummax(t, axis)), lambda t: t.cummax(axis), shape, dev=dev)
    check(lambda t: tuple(torch.cummin(t, axis)), lambda t: t.cummin(axis), shape, dev=dev)


def test_cumulative_ints_and_ties(dev):
  x = np.array([[1, 1, 3, 3, 2, 3], [5, 4, 4, 6, 0, 6]], dtype=np.int32)
  check(lambda t: tuple(torch.cummax(t, 1)), lambda t: t.cummax(1), x, dev=dev)  # the latest index among ties
  check(lambda t: tuple(torch.cummin(t, 1)), lambda t: t.cummin(1), x, dev=dev)
  check(lambda t: torch.cumsum(t, 1), lambda t: t.cumsum(1), x.astype(np.int8), dev=dev)
  check(lambda t: torch.cumsum(t, 0), lambda t: t.cumsum(0), np.array([True, False, True]), dev=dev)
  extremes = np.array([5, -128, 3, 127, -128], np.int8)  # -x would overflow at -128
  check(lambda t: tuple(torch.cummin(t, 0)), lambda t: t.cummin(0), extremes, dev=dev)
  # a NaN is the running max from where it comes on, at the latest NaN's index (== never held for it: -1)
  nans = np.array([[1, np.nan, 3, 0, np.nan, 2], [np.nan, 1, 2, 3, 4, 5], [3, 1, np.nan, 0, 7, 7]], np.float32)
  check(lambda t: tuple(torch.cummax(t, 1)), lambda t: t.cummax(1), nans, dev=dev)
  check(lambda t: tuple(torch.cummin(t, 1)), lambda t: t.cummin(1), nans, dev=dev)


def test_cumsum_long_axis_in_chunks():
  # more than 64 elements: scanned in chunks of 32 plus a scan of the chunk totals (twice over for 1300)
  check(lambda t: torch.cumsum(t, 1), lambda t: t.cumsum(1), (2, 1300), dev="CPU", atol=1e-3)
  check(lambda t: torch.cummax(t, 0)[0], lambda t: t.cummax(0)[0], (700,), dev="CPU")
  # along an axis other than the last, with one after it and a remainder chunk
  check(lambda t: torch.cumsum(t, 1), lambda t: t.cumsum(1), (3, 100, 5), dev="CPU", atol=1e-4)
  check(lambda t: torch.cumprod(t, 0), lambda t: t.cumprod(0), (65, 4), dev="CPU", low=0.9, high=1.1, atol=1e-5)


@pytest.mark.parametrize("dtype,n", [("bool", 1300), ("int8", 1300), ("uint8", 300), ("int16", 70000), ("uint16", 700)])
def test_cumsum_of_small_ints_sums_in_int32_where_it_fits(dtype, n, dev):
  # bools and 8- or 16-bit ints whose running sums fit int32 accumulate in int32 (int16 along 70000: not, int64),
  # and the result is int64 as torch's; values at the dtype's extremes
  rng = np.random.default_rng(6)
  info = np.iinfo(np.int64 if dtype == "bool" else dtype)
  x = (rng.random((2, n)) < 0.5) if dtype == "bool" else rng.integers(info.min, info.max, (2, n), endpoint=True)
  x = x.astype(dtype)
  if dtype != "bool": x[0, :40], x[1, :40] = info.max, info.min
  got = Tensor(x, device=dev).cumsum(1)
  assert got.dtype == dtypes.int64
  np.testing.assert_array_equal(got.numpy(), np.cumsum(x.astype(np.int64), 1))


def test_a_scan_is_written_in_the_tensors_layout():
  # the windows are put back in place before the reduction: its kernel writes (rows, columns), its loads run along
  # the columns, and no kernel copies a transposed result back
  t = Tensor.empty(64, 48, device="PYTHON").cumsum(0)
  items = [it for it in t.schedule() if not it.is_copy]
  assert len(items) == 1 and items[0].ast.src[0].src[1].shape == (64, 48)
  check(lambda t: torch.cumsum(t, 0), lambda t: t.cumsum(0), np.ones(1000, np.int32), dev="CPU")


# ------------------------------------------------------------------------------------------------ sorting, selection

@pytest.mark.parametrize("shape,dim", [((9,), 0), ((3, 6), 1), ((4, 3), 0), ((1,), 0), ((2, 0), 1), ((5, 1), 1)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(shape, dim, descending, dev):
  x = inputs([shape], np.float32, -3, 3)[0]
  check(lambda t: torch.sort(t, dim=dim, descending=descending, stable=True),
        lambda t: t.sort(dim, descending), x, dev=dev)
  check(lambda t: torch.argsort(t, dim=dim, descending=descending, stable=True),
        lambda t: t.argsort(dim, descending), x, dev=dev)


def test_sort_ties_nan_and_ints(dev):
  x = np.array([3.0, np.nan, 1.0, 3.0, -np.inf, 1.0, np.nan, 0.0], dtype=np.float32)
  for desc in (False, True):
    check(lambda t: torch.sort(t, descending=desc, stable=True), lambda t: t.sort(descending=desc), x, dev=dev)
  check(lambda t: torch.sort(t, stable=True), Tensor.sort, np.array([5, -1, 5, 2, -1], np.int8), dev=dev)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16", "int8", "float64"])
def test_sort_long_axis_bitonic(descending, dtype):
  # past SORT_RANK_MAX elements the sort is a bitonic network, on one int64 per element (its order key above its
  # position) for values of 32 bits or fewer, on (value, index) pairs for the others: still stable (many ties), NaN
  # the largest, -0.0 equal to 0.0; 1500 pads to 2048, whose stages compare mirrored halves and then plain ones
  x = np.random.default_rng(1).integers(-30, 30, (2, 1500)).astype(dtype)
  if dtype.startswith("float"): x[0, ::7], x[1, ::11], x[0, 1::9], x[1, 2::9] = np.nan, -np.inf, -0.0, 0.0
  check(lambda t: torch.sort(t, dim=1, descending=descending, stable=True), lambda t: t.sort(1, descending), x,
        dev="CPU")
  p = Tensor.randperm(1000, device="CPU").numpy()
  assert sorted(p.tolist()) == list(range(1000))


@pytest.mark.parametrize("k", [1, 5, 8])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_a_few_along_a_long_axis(k, largest, dev):
  # k passes of a max (TOPK_PASSES_FROM values or more): the values torch gives and the stable sort's first k
  # positions, with NaN (the largest), -inf, inf and ties
  x = np.random.default_rng(2).integers(0, 30, (3, 300)).astype(np.float32)
  x[0, ::7], x[1, ::11], x[2, 5] = np.nan, -np.inf, np.inf
  for d, a in ((1, x), (0, np.ascontiguousarray(x.T))):
    values, idx = Tensor(a, device=dev).topk(k, d, largest)
    sorted_idx = Tensor(a, device=dev).sort(d, descending=largest)[1].numpy()
    np.testing.assert_array_equal(values.numpy(), torch.topk(torch.from_numpy(a), k, d, largest=largest).values.numpy())
    np.testing.assert_array_equal(idx.numpy(), sorted_idx[:, :k] if d == 1 else sorted_idx[:k])
  xi = np.random.default_rng(3).integers(-128, 128, (4, 200)).astype(np.int8)
  values, _ = Tensor(xi, device=dev).topk(k, 1, largest)
  np.testing.assert_array_equal(values.numpy(), torch.topk(torch.from_numpy(xi), k, 1, largest=largest).values.numpy())


@pytest.mark.parametrize("k,dtype", [(9, "float32"), (75, "float32"), (40, "float16"), (40, "int32")])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_many_along_a_long_axis(k, dtype, largest, dev):
  # more than TOPK_PASSES_MAX of at least 4k values: the k-th value by a bisection of its order key's bits, then only
  # those k sorted; the values torch gives and the stable sort's first k positions, with NaN (the largest), infinities,
  # -0.0 beside 0.0 (equal values: by position) and ties at the threshold
  rng = np.random.default_rng(4)
  x = np.round(rng.standard_normal((3, 300)) * (4 if dtype == "int32" else 2)) / (1 if dtype == "int32" else 2)
  if dtype != "int32": x[0, ::9], x[1, ::13], x[2, 5], x[2, 7:40:3], x[2, 8:40:3] = np.nan, -np.inf, np.inf, -0.0, 0.0
  a = x.astype(dtype)
  for d, arr in ((1, a), (0, np.ascontiguousarray(a.T))):
    values, idx = Tensor(arr, device=dev).topk(k, d, largest)
    # torch's stable sort orders as plugrad's: NaN the largest, equal values (-0.0 and 0.0 too) by position
    want = torch.sort(torch.from_numpy(arr), stable=True, dim=d, descending=largest)
    keep = (slice(None), slice(0, k)) if d == 1 else (slice(0, k), slice(None))
    np.testing.assert_array_equal(idx.numpy(), want.indices.numpy()[keep])
    np.testing.assert_array_equal(values.numpy(), want.values.numpy()[keep])


def test_topk_whose_passes_count_by_a_split_sum(monkeypatch):
  # an axis of SPLIT_REDUCE_MIN or more: each threshold pass counts through sum, which splits it in two kernels (the
  # limit lowered here to reach it with 32768 values); the same values and positions as torch's stable sort, ties at
  # the threshold included
  import plugrad.tensor
  monkeypatch.setattr(plugrad.tensor, "SPLIT_REDUCE_MIN", 1 << 14)
  x = np.round(np.random.default_rng(6).standard_normal((2, 1 << 15)) * 2).astype(np.float32)
  t = Tensor(x, device="CPU")
  assert sum(u.op is Ops.CONTIGUOUS for u in t.topk(30)[0].uop.toposort) > 32  # each pass's partial counts
  values, idx = t.topk(30)
  want = torch.sort(torch.from_numpy(x), stable=True, dim=1, descending=True)
  np.testing.assert_array_equal(values.numpy(), want.values.numpy()[:, :30])
  np.testing.assert_array_equal(idx.numpy(), want.indices.numpy()[:, :30])


@pytest.mark.parametrize("n,k", [(300, 75), (64, 64), (33, 1), (1000, 37)])
def test_the_r_th_counted_position_is_found_by_chunks(n, k, dev):
  # topk's positions from its running count of elements taken: chunks of TOPK_CHUNK whose last count is at or below
  # r, then the positions within the next one; plateaus (nothing taken) across chunk ends, a count reaching k only at
  # the last position, and a length no multiple of the chunk
  rng = np.random.default_rng(5)
  taken = np.zeros((3, n), np.int32)
  for row in taken: row[np.sort(rng.choice(n, k, replace=False))] = 1
  taken[2] = 0
  taken[2, n - k:] = 1
  running = np.cumsum(taken, 1).astype(np.int32)
  want = np.stack([np.searchsorted(r, np.arange(k), side="right") for r in running])
  np.testing.assert_array_equal(Tensor._first_reaching(Tensor(running, device=dev), k).numpy(), want)
  # sorted ids of an embedding's tokens: values that stop short of k - 1 (every chunk is then <= the last r's)
  ids = np.sort(rng.integers(0, max(k // 2, 1), (2, n)), axis=1).astype(np.int32)
  want = np.stack([np.searchsorted(r, np.arange(k), side="right") for r in ids])
  np.testing.assert_array_equal(Tensor._first_reaching(Tensor(ids, device=dev), k).numpy(), want)


@pytest.mark.parametrize("k,dim,largest", [(1, -1, True), (3, -1, False), (2, 0, True), (0, 1, True)])
def test_topk(k, dim, largest, dev):
  check(lambda t: torch.topk(t, k, dim, largest=largest), lambda t: t.topk(k, dim, largest), (4, 5), dev=dev)
  with pytest.raises(ValueError, match="out of range"): Tensor.ones(2, 3, device=dev).topk(4)


def test_gather(dev):
  x = inputs([(3, 4)])[0]
  idx = np.array([[0, 3, 3], [1, 0, 2]], dtype=np.int64)
  check(lambda t, i: torch.gather(t, 1, i), lambda t, i: t.gather(1, i), x, idx, dev=dev)
  idx0 = np.array([[2, 0, 1, 1]], dtype=np.int64)
  check(lambda t, i: torch.gather(t, 0, i), lambda t, i: t.gather(0, i), x, idx0, dev=dev)
  check(lambda t, i: torch.gather(t, 1, i), lambda t, i: t.gather(1, i), np.arange(6, dtype=np.int8).reshape(2, 3),
        np.array([[2], [0]]), dev=dev)
  with pytest.raises(ValueError, match="dimensions"): Tensor(x, device=dev).gather(0, Tensor([0, 1], device=dev))


def test_scatter(dev):
  x = inputs([(3, 5)])[0]
  src = inputs([(2, 5)], seed=1)[0]
  idx = np.array([[0, 1, 2, 0, 1], [2, 0, 0, 1, 2]], dtype=np.int64)
  check(lambda t, i, s: t.scatter(0, i, s), lambda t, i, s: t.scatter(0, i, s), x, idx, src, dev=dev)
  check(lambda t, i: t.scatter(0, i, 2.5), lambda t, i: t.scatter(0, i, 2.5), x, idx, dev=dev)
  add = lambda t, i: t.scatter(0, i, 2.0, reduce="add")  # noqa: E731  (the same call in torch and plugrad)
  check(add, add, x, idx, dev=dev)
  idx1 = np.array([[4, 0], [1, 1]], dtype=np.int64)
  check(lambda t, i, s: t.scatter(1, i, s), lambda t, i, s: t.scatter(1, i, s), x, idx1, src, dev=dev)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self, dev):
  x, src = inputs([(3, 4), (4, 4)], low=0.5, high=2)
  idx = np.array([[0, 1, 0, 0], [0, 0, 1, 1], [2, 0, 0, 1], [0, 2, 1, 1]], dtype=np.int64)
  check(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=include_self),
        lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=include_self), x, idx, src, dev=dev)


def test_masked_fill_select_nonzero(dev):
  x = inputs([(3, 4)])[0]
  mask = x > 0.3
  check(lambda t, m: t.masked_fill(m, -1.0), lambda t, m: t.masked_fill(m, -1.0), x, mask, dev=dev)
  check(torch.masked_select, Tensor.masked_select, x, mask, dev=dev)
  check(torch.masked_select, Tensor.masked_select, x, np.array([True, False, False, True]), dev=dev)
  check(torch.masked_select, Tensor.masked_select, x, np.zeros((3, 4), bool), dev=dev)
  check(lambda t: torch.nonzero(t).int(), Tensor.nonzero, (x > 0).astype(np.int32), dev=dev)
  check(lambda t: torch.nonzero(t).int(), Tensor.nonzero, np.zeros((2, 3), np.float32), dev=dev)
  # with size the result shape is known without running anything: padded with fill_value
  got = Tensor(x, device=dev).masked_select(Tensor(mask, device=dev), size=12, fill_value=9.0).numpy()
  np.testing.assert_allclose(got, np.concatenate([x[mask], np.full(12 - mask.sum(), 9.0)]), rtol=1e-6)
  assert Tensor([0, 3, 0, 5], device=dev).nonzero(size=3, fill_value=-1).tolist() == [[1], [3], [-1]]


def test_multinomial(dev):
  Tensor.manual_seed(3)
  w = Tensor([0.0, 1.0, 3.0, 0.0], device=dev)
  draws = w.multinomial(400, replacement=True).numpy()
  assert draws.shape == (400,) and set(draws.tolist()) <= {1, 2}
  assert 0.65 < (draws == 2).mean() < 0.85  # 0.75 expected
  rows = Tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 1.0]], device=dev).multinomial(3)
  assert sorted(rows.numpy()[0].tolist()) == [0, 1, 2] and rows.numpy()[1, 0] == 2
  with pytest.raises(ValueError, match="without replacement"): w.multinomial(5)


# ------------------------------------------------------------------------------------------------ creation

def test_linspace(dev):
  for args in [(0, 1, 5), (-3.0, 7.5, 11), (2, 2, 1), (0, 1, 0), (10, 0, 4)]:
    assert_same(Tensor.linspace(*args, device=dev), torch.linspace(*args))
  assert_same(Tensor.linspace(0, 10, 4, dtype="int32", device=dev), torch.linspace(0, 10, 4, dtype=torch.int32))
  with pytest.raises(ValueError): Tensor.linspace(0, 1, -1)


def test_random_creation(dev):
  Tensor.manual_seed(0)
  n = Tensor.normal(2000, mean=3.0, std=0.5, device=dev).numpy()
  assert abs(n.mean() - 3.0) < 0.05 and abs(n.std() - 0.5) < 0.05
  r = Tensor.ones(3, 4, dtype="half", device=dev).randn_like()
  assert r.shape == (3, 4) and r.dtype == dtypes.float16
  p = Tensor.randperm(50, device=dev)
  assert p.dtype == dtypes.int32 and sorted(p.tolist()) == list(range(50)) and p.tolist() != list(range(50))
  assert Tensor.randperm(0, device=dev).shape == (0,)


def test_const_like_and_from_blob(dev):
  c = Tensor.ones(2, 3, device=dev).const_like(7, dtype="int8")
  assert c.dtype == dtypes.int8 and c.tolist() == [[7] * 3] * 2
  src = np.arange(6, dtype=np.float32).reshape(2, 3)
  t = Tensor.from_blob(src.ctypes.data_as(ctypes.c_void_p).value, (2, 3), dtype=dtypes.float32, device=dev)
  assert t.tolist() == src.tolist()


def test_arange_dtypes(dev):
  assert_same(Tensor.arange(0, 1, 0.1, device=dev), torch.arange(0, 1, 0.1))
  assert_same(Tensor.arange(5, -3, -2, device=dev), torch.arange(5, -3, -2).int())
  assert Tensor.arange(2**31, 2**31 + 3, device=dev).dtype == dtypes.int64
  assert Tensor.arange(3, dtype="float16", device=dev).dtype == dtypes.float16


def _uploads(t: Tensor) -> int: return sum(n.op is Ops.BUFFER for n in t.uop.toposort)


def test_arange_of_integers_is_computed_by_the_kernels_that_read_it(dev):
  """A range of integers its dtype holds exactly is a lazy node, as in tinygrad: nothing is uploaded, and the kernels
  reading it compute i * step + start from their index (vector lanes and remainders included)."""
  for args, kw in [((37,), {}), ((2, 40, 3), {}), ((10, -5, -1), {}), ((0, 21, 2), {"dtype": "float32"}),
                   ((3, 20), {"dtype": "uint32"}), ((2**31 - 3, 2**31 + 4), {}), ((7,), {"dtype": "float16"})]:
    t = Tensor.arange(*args, device=dev, **kw)
    assert _uploads(t) == 0, args
    np.testing.assert_array_equal(t.numpy(), np.arange(*args, dtype=t.dtype.np))
  a, b = Tensor.arange(5, device=dev).reshape(5, 1), Tensor.arange(7, device=dev)
  np.testing.assert_array_equal((a * 7 + b).numpy(), np.arange(35).reshape(5, 7))
  assert Tensor.arange(1000, device=dev).sum().item() == 499500
  # what its dtype cannot hold exactly is computed in float64 on the host and uploaded, as before
  assert _uploads(Tensor.arange(0, 1, 0.1, device=dev)) == 1 and _uploads(Tensor.arange(3000, dtype="float16")) == 1


def test_a_random_draw_uploads_nothing(dev):
  """Random numbers hash their index on the device (with the generator's counter, the one buffer read)."""
  t = Tensor.rand(64, 33, device=dev)
  assert _uploads(t) == 1 and 0 <= t.numpy().min() and t.numpy().max() < 1


# ------------------------------------------------------------------------------------------------ dtype and info

def test_dtype_strings_and_info(dev):
  for name, want in [("uchar", dtypes.uint8), ("float", dtypes.float32), ("half", dtypes.float16),
                     ("long", dtypes.int64), ("int", dtypes.int32), ("double", dtypes.float64), ("bool", dtypes.bool),
                     ("ushort", dtypes.uint16)]:
    assert Tensor([1], dtype=name, device=dev).dtype == want
  with pytest.raises(TypeError, match="unknown dtype"): Tensor([1], dtype="floaty")
  t = Tensor.ones(2, 3, device=dev)
  assert t.bfloat16().dtype == dtypes.bfloat16 and t.long().dtype == dtypes.int64 and t.short().dtype == dtypes.int16
  assert t.is_floating_point() and not t.int().is_floating_point()
  assert t.element_size() == 4 and t.nbytes() == 24 and t.half().nbytes() == 12
  assert t.max_shape == (2, 3) and t.max_numel() == 6


# bits of every kind: signs, NaN and inf, subnormals, all bytes distinct (a byte order mixed up shows)
_BITS = np.random.default_rng(5).integers(0, 2**64 - 1, (3, 16), dtype=np.uint64, endpoint=True).view(np.uint8)


@pytest.mark.parametrize("src, dst", [(dtypes.float32, dtypes.uint8), (dtypes.uint8, dtypes.float32),
                                      (dtypes.float32, dtypes.float16), (dtypes.float16, dtypes.float32),
                                      (dtypes.float64, dtypes.int16), (dtypes.int8, dtypes.int64),
                                      (dtypes.int64, dtypes.uint32), (dtypes.uint16, dtypes.float64)],
                         ids=lambda d: d.name)
def test_bitcast_between_item_sizes_is_numpys_view(dev, src, dst):
  bits = _BITS.view(src.np)
  got = Tensor(bits, device=dev).bitcast(dst)
  want = bits.view(dst.np)
  assert got.dtype == dst and got.shape == want.shape
  np.testing.assert_array_equal(got.numpy().view(np.uint8), want.view(np.uint8))  # the bits, NaNs included


def test_bitcast_between_item_sizes_of_bfloat16_and_views(dev):
  halves = _BITS.view(np.uint16)
  got = Tensor(halves, device=dev).bitcast(dtypes.bfloat16).bitcast(dtypes.uint8)  # bfloat16 has no numpy dtype
  np.testing.assert_array_equal(got.numpy(), halves.view(np.uint8))
  words = _BITS.view(np.uint32).reshape(3, 4, 8)
  t = Tensor(words, device=dev)
  np.testing.assert_array_equal(t.T.bitcast(dtypes.uint16).numpy(), words.T.copy().view(np.uint16))  # a strided view
  assert t[:, :, :0].bitcast(dtypes.uint8).shape == (3, 4, 0)


_BITCAST_DTYPES = [dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.float16, dtypes.int32, dtypes.float32, dtypes.uint32,
                   dtypes.int64, dtypes.float64]


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(src=st.sampled_from(_BITCAST_DTYPES), dst=st.sampled_from(_BITCAST_DTYPES), rows=st.integers(0, 3),
       items=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_bitcast_is_numpys_view_for_any_dtypes_and_shape(src, dst, rows, items, seed):
  # a last axis of `items` words of the wider item size, so that both views exist
  width = max(src.itemsize, dst.itemsize) // src.itemsize * items
  data = np.random.default_rng(seed).integers(0, 256, (rows, width * src.itemsize), dtype=np.uint8).view(src.np)
  got = Tensor(data, device="CPU").bitcast(dst)
  np.testing.assert_array_equal(got.numpy().view(np.uint8), data.view(dst.np).view(np.uint8))
  np.testing.assert_array_equal(got.bitcast(src).numpy().view(np.uint8), data.view(np.uint8))  # and back


def test_bitcast_between_item_sizes_refuses_what_numpy_refuses():
  with pytest.raises(ValueError, match="0-d"): Tensor(1.0).bitcast(dtypes.float16)
  with pytest.raises(ValueError, match=r"last axis \(3 x 2 bytes\) does not split into 4-byte"):
    Tensor.ones(2, 3, dtype=dtypes.float16).bitcast(dtypes.float32)


def test_clone_replace_to_(dev):
  a = Tensor([1.0, 2.0], device=dev).realize()
  b = a.clone()
  a += 1
  assert b.tolist() == [1.0, 2.0] and a.tolist() == [2.0, 3.0]
  src = Tensor([4.0, 5.0], device=dev).realize()
  copy = src.clone()  # made now: an assign to the source realized before the copy is read does not show in it
  src.assign(Tensor([0.0, 0.0], device=dev)).realize()
  assert copy.tolist() == [4.0, 5.0]
  c = Tensor([0.0, 0.0], device=dev)
  assert c.replace(a).tolist() == [2.0, 3.0]
  with pytest.raises(ValueError, match="same shape"): c.replace(Tensor.ones(3))
  d = Tensor([5], device=dev)
  assert d.to_("PYTHON") is d and d.device == "PYTHON" and d.tolist() == [5]


def test_from_url(dev, tmp_path):
  import gzip
  path = tmp_path / "blob.bin"
  path.write_bytes(np.array([1.5, -2.0], dtype=np.float32).tobytes())
  assert Tensor.from_url(path.as_uri(), device=dev).tolist() == list(path.read_bytes())
  assert Tensor.from_url(path.as_uri(), dtype="float32", device=dev).tolist() == [1.5, -2.0]
  gz = tmp_path / "blob.gz"
  gz.write_bytes(gzip.compress(b"\x01\x02\x03"))
  assert Tensor.from_url(gz.as_uri(), gunzip=True, device=dev).tolist() == [1, 2, 3]
  with pytest.raises(ValueError, match="whole number"): Tensor.from_url(gz.as_uri(), gunzip=True, dtype="int16")


def test_newton_schulz(dev):
  coeffs = (3.4445, -4.7750, 2.0315)  # Muon's quintic

  def reference(g):
    x = g / (g.norm() + 1e-7)
    for _ in range(5):
      a = x @ x.T
      x = coeffs[0] * x + (coeffs[1] * a + coeffs[2] * a @ a) @ x
    return x
  for shape in [(3, 5), (5, 3)]:
    x = inputs([shape])[0]
    want = reference(torch.from_numpy(x)) if shape[0] <= shape[1] else reference(torch.from_numpy(x).T).T
    assert_same(Tensor(x, device=dev).newton_schulz(5, coeffs), want, atol=1e-5)


def test_argument_forms(dev):
  x = inputs([(2, 3)])[0]
  t = Tensor(x, device=dev)
  assert_same(t.flip(0, 1), torch.from_numpy(x).flip(0, 1))
  assert_same(t.matmul(t.T), x @ x.T)
  assert_same(t.T.matmul(t, reverse=True), x @ x.T)
  i8 = Tensor([[100, 100]], dtype="int8", device=dev)
  assert i8.dot(i8.T, dtype="int32").tolist() == [[20000]]  # multiplied and summed in int32
  assert_same(t.linear(Tensor([1.0, 2.0, 3.0], device=dev), Tensor([0.5], device=dev)), x * [1, 2, 3] + 0.5)
  assert t.linear(t.T, dtype="float16").dtype == dtypes.float16
  assert_same(t.softmax(0, dtype="float64"), torch.from_numpy(x).double().softmax(0))
  assert_same(t.logsumexp(), torch.from_numpy(x).logsumexp((0, 1)))
  assert_same(t.logsumexp((0, 1), keepdim=True), torch.from_numpy(x).logsumexp((0, 1), keepdim=True))


def test_variance_without_degrees_of_freedom_and_the_sign_of_bools_are_torchs(dev):
  # var divides by 0 (inf, NaN for constant values), where it gave NaN; sign of bools raised (a bool subtraction)
  for values, correction in [([1.0, 3.0], 2), ([1.0, 3.0], 3), ([2.0, 2.0], 2)]:
    t, tt = Tensor(values, device=dev), torch.tensor(values)
    with np.errstate(all="ignore"), warnings.catch_warnings():
      warnings.simplefilter("ignore")  # torch warns of the missing degrees of freedom
      assert_same(t.var(correction=correction), tt.var(correction=correction))
      assert_same(t.std(correction=correction), tt.std(correction=correction))
  assert_same(Tensor([True, False], device=dev).sign(), torch.tensor([True, False]).sign())


def test_lists_that_cannot_become_a_tensor_say_why():
  with pytest.raises(ValueError, match="ragged"): Tensor([[1, 2], [3]])
  # a NaN for an int dtype was reported as a ragged or mixed list
  with pytest.raises(ValueError, match="int32 tensor from this list: cannot convert float NaN"):
    Tensor([float("nan")], dtype=dtypes.int32)


def test_a_tensor_made_from_a_tensor_on_another_device_is_a_copy_there():
  # it took the new device's name and kept the other's buffer: the first kernel failed inside the device
  for src, dst in [("CPU", "PYTHON"), ("PYTHON", "CPU")]:
    x = Tensor(Tensor([1.5, 2.5], device=src), device=dst)
    assert x.device == dst and (x + Tensor([1.0, 1.0], device=dst)).tolist() == [2.5, 3.5]


def test_softmax_family_over_an_empty_axis_is_torchs(dev):
  # the max that shifts them has no identity over an empty axis: these raised
  z = np.zeros((2, 0), np.float32)
  for name in ("softmax", "log_softmax", "softmin"):
    assert_same(getattr(Tensor(z, device=dev), name)(1), getattr(torch.nn.functional, name)(torch.from_numpy(z), 1))
  for axis, keepdim in [(1, False), (1, True), (0, False), (None, True)]:
    want = torch.from_numpy(z).logsumexp((0, 1) if axis is None else axis, keepdim=keepdim)
    assert_same(Tensor(z, device=dev).logsumexp(axis, keepdim), want)  # -inf: the log of an empty sum


GRADIENT_CASES = {  # name: (plugrad loss, torch loss) of one (4, 5) input
  "advanced index": (lambda t: t[[0, 2, 2], 1:].sum(), lambda t: t[[0, 2, 2], 1:].sum()),
  "gather": (lambda t: (t.gather(1, Tensor([[0, 0], [1, 4], [2, 2], [3, 1]], device=t.device)) ** 2).sum(),
             lambda t: (t.gather(1, torch.tensor([[0, 0], [1, 4], [2, 2], [3, 1]])) ** 2).sum()),
  "cumsum": (lambda t: (t.cumsum(1) * t).sum(), lambda t: (t.cumsum(1) * t).sum()),
  "sort": (lambda t: (t.sort(1)[0] * Tensor.arange(5, dtype="float32", device=t.device)).sum(),
           lambda t: (t.sort(dim=1, stable=True)[0] * torch.arange(5.0)).sum()),
  "erf atan": (lambda t: (t.erf() + t.atan()).sum(), lambda t: (t.erf() + t.atan()).sum()),
  "reflect pad": (lambda t: (t.pad((1, 2), mode="reflect") ** 2).sum(),
                  lambda t: (torch.nn.functional.pad(t[None], (1, 2), mode="reflect") ** 2).sum()),
  "logcumsumexp": (lambda t: t.logcumsumexp(1).sum(), lambda t: t.logcumsumexp(1).sum()),
}


@pytest.mark.parametrize("name", list(GRADIENT_CASES))
def test_gradients_flow_through_new_ops(name):
  # every op here is built from the core ops, so their derivative rules give its gradient
  pl_loss, torch_loss = GRADIENT_CASES[name]
  x = inputs([(4, 5)])[0]
  t = Tensor(x, device="CPU", requires_grad=True)
  pl_loss(t).backward()
  want = torch.tensor(x, requires_grad=True)
  torch_loss(want).backward()
  assert_same(t.grad, want.grad, atol=2e-6)


def test_low_level_helpers(dev):
  from plugrad.uops import Ops
  a, b = Tensor([1.0, 4.0], device=dev), Tensor([3.0, 2.0], device=dev)
  assert a.alu(Ops.MAX, b).tolist() == [3.0, 4.0] and a.alu(Ops.CMPLT, b).tolist() == [True, False]
  with pytest.raises(ValueError, match="equal shapes"): a.alu(Ops.ADD, Tensor([1.0], device=dev))
  assert a.usum(b, b).tolist() == [7.0, 8.0] and a.uprod(b).tolist() == [3.0, 8.0]
  i = Tensor([1, 2], dtype="int8", device=dev)
  assert i.ufix(3).dtype == dtypes.int8 and i.ufix(0.5).dtype == dtypes.float32 and i.ufix(a) is a
  c = Tensor.const(2.5, device=dev)
  assert c.shape == () and c.item() == 2.5 and Tensor.const(1, dtype="uint8").dtype == dtypes.uint8


def test_a_tensor_from_bytes_reads_them_as_its_dtype():
  # tinygrad's Tensor(b"...") (a file's contents): it raised TypeError
  assert Tensor(b"\x01\x02\xff").tolist() == [1, 2, 255] and Tensor(b"\x01").dtype == dtypes.uint8
  assert Tensor(bytearray(b"\x00\x00\x80\x3f"), dtype=dtypes.float32).tolist() == [1.0]
  with pytest.raises(ValueError, match="3 bytes are no whole number of float32"): Tensor(b"abc", dtype=dtypes.float32)
