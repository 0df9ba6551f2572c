"""Tensor ops compared against numpy, on every available device.

Each test builds the same computation twice, once with numpy and once with plugrad, and
compares the results. The `device` fixture (plugrad.testing.pytest_plugin) runs every test once per
available device. Tensors are kept tiny so the whole file stays fast on the reference device.

Most tests go through `check`, which makes seeded random numpy inputs, wraps them in Tensors,
applies both functions and compares shape, dtype kind and values:

  check(np.exp, Tensor.exp, (4, 5), device=device)
  check(np.matmul, lambda a, b: a @ b, (3, 4), (4, 5), device=device, atol=1e-4)
"""

import math

import numpy as np
import pytest

from plugrad import Tensor, dtypes
from plugrad.registry import get_registry

# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def make_input(spec, rng, dtype=np.float32, low=-2, high=2):
  """An ndarray is used as given; a shape tuple becomes seeded random values in [low, high)."""
  if isinstance(spec, np.ndarray):
    return spec
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(spec) < 0.5
  if dtype.kind in "iu":
    return rng.integers(low, high, size=spec).astype(dtype)
  return rng.uniform(low, high, size=spec).astype(dtype)


def check(np_fn, pl_fn, *shapes_or_arrays, device, atol=1e-5, rtol=1e-5, dtype=np.float32,
          low=-2, high=2, out_dtype=None, check_kind=True):
  """Compare `np_fn(*arrays)` with `pl_fn(*tensors).numpy()`.

  shapes_or_arrays: shape tuples (seeded random inputs of `dtype` in [low, high)) or ndarrays.
  out_dtype: when given, the plugrad dtype the result must have.
  check_kind: the result's dtype kind (float, signed int, unsigned int, bool) must match numpy's.
  Returns the plugrad result as an ndarray.
  """
  rng = np.random.default_rng(0)
  arrays = [make_input(s, rng, dtype, low, high) for s in shapes_or_arrays]
  expected = np.asarray(np_fn(*arrays))
  out = pl_fn(*[Tensor(a, device=device) for a in arrays])
  got = out.numpy()
  assert got.shape == expected.shape, f"shape {got.shape} != numpy's {expected.shape}"
  if out_dtype is not None:
    assert out.dtype == out_dtype, f"dtype {out.dtype} != {out_dtype}"
  if check_kind:
    assert got.dtype.kind == expected.dtype.kind, f"dtype {got.dtype} vs numpy's {expected.dtype}"
  if expected.dtype.kind in "biu":
    np.testing.assert_array_equal(got, expected)
  else:
    np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol)
  return got


def same_device(a, b):
  """Device names compare case-insensitively and without a ':0' style suffix."""
  return str(a).upper().split(":")[0] == str(b).upper().split(":")[0]


def np_softmax(a, axis=-1):
  e = np.exp(a - a.max(axis=axis, keepdims=True))
  return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(a, axis=-1):
  shifted = a - a.max(axis=axis, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def np_gelu(a):
  """gelu, tanh approximation (what tinygrad's Tensor.gelu computes)."""
  return 0.5 * a * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (a + np.float32(0.044715) * a ** 3)))


def np_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
  """Reference NCHW conv2d (cross-correlation, like torch): one einsum per kernel tap."""
  pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)
  (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
  x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
  n, _, h, wd = x.shape
  cout, cin_g, kh, kw = w.shape
  cout_g = cout // groups
  oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
  out = np.zeros((n, cout, oh, ow), dtype=np.float64)
  for g in range(groups):
    xg, wg = x[:, g * cin_g:(g + 1) * cin_g], w[g * cout_g:(g + 1) * cout_g]
    for i in range(kh):
      for j in range(kw):
        patch = xg[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
        out[:, g * cout_g:(g + 1) * cout_g] += np.einsum("nchw,oc->nohw", patch, wg[:, :, i, j])
  if bias is not None:
    out += bias.reshape(1, -1, 1, 1)
  return out.astype(np.float32)


# --------------------------------------------------------------------------------------------
# creation
# --------------------------------------------------------------------------------------------


def test_tensor_from_list_default_dtypes(device):
  assert Tensor([1, 2, 3], device=device).dtype == dtypes.int32
  assert Tensor([1.0, 2.5], device=device).dtype == dtypes.float32
  assert Tensor([True, False], device=device).dtype == dtypes.bool
  t = Tensor([[1, 2, 3], [4, 5, 6]], device=device)
  assert t.shape == (2, 3)
  np.testing.assert_array_equal(t.numpy(), np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32))


def test_tensor_from_python_scalar(device):
  t = Tensor(3.5, device=device)
  assert t.shape == () and t.dtype == dtypes.float32
  assert t.numpy() == np.float32(3.5)
  assert Tensor(7, device=device).dtype == dtypes.int32
  assert Tensor(True, device=device).dtype == dtypes.bool


def test_tensor_with_explicit_dtype(device):
  t = Tensor([1, 2, 3], dtype=dtypes.float32, device=device)
  assert t.dtype == dtypes.float32
  np.testing.assert_array_equal(t.numpy(), np.array([1, 2, 3], dtype=np.float32))
  t = Tensor([1.0, 2.0], dtype=dtypes.int8, device=device)
  assert t.dtype == dtypes.int8 and t.numpy().dtype == np.int8


NUMPY_DTYPES = [
  (np.bool_, dtypes.bool), (np.int8, dtypes.int8), (np.int16, dtypes.int16), (np.int32, dtypes.int32),
  (np.int64, dtypes.int64), (np.uint8, dtypes.uint8), (np.uint16, dtypes.uint16),
  (np.uint32, dtypes.uint32), (np.uint64, dtypes.uint64), (np.float16, dtypes.float16),
  (np.float32, dtypes.float32), (np.float64, dtypes.float64),
]


@pytest.mark.parametrize("np_dtype,pl_dtype", NUMPY_DTYPES, ids=lambda d: getattr(d, "__name__", str(d)))
def test_numpy_array_keeps_its_dtype(device, np_dtype, pl_dtype):
  arr = np.array([[0, 1, 2], [3, 4, 5]]).astype(np_dtype)
  t = Tensor(arr, device=device)
  assert t.dtype == pl_dtype
  out = t.numpy()
  assert out.dtype == np_dtype
  np.testing.assert_array_equal(out, arr)


def test_zeros_ones_full_empty(device):
  z = Tensor.zeros((2, 3), device=device)
  assert z.shape == (2, 3) and z.dtype == dtypes.float32
  np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3), np.float32))
  np.testing.assert_array_equal(Tensor.ones((4,), device=device).numpy(), np.ones(4, np.float32))
  o8 = Tensor.ones((2, 2), dtype=dtypes.int8, device=device)
  assert o8.dtype == dtypes.int8
  np.testing.assert_array_equal(o8.numpy(), np.ones((2, 2), np.int8))
  f = Tensor.full((2, 3), 7, device=device)
  assert f.dtype == dtypes.int32
  np.testing.assert_array_equal(f.numpy(), np.full((2, 3), 7, np.int32))
  f = Tensor.full((3,), 2.5, device=device)
  assert f.dtype == dtypes.float32
  np.testing.assert_array_equal(f.numpy(), np.full(3, 2.5, np.float32))
  e = Tensor.empty((3, 2), device=device)
  assert e.shape == (3, 2) and e.dtype == dtypes.float32 and e.numpy().shape == (3, 2)


def test_zeros_like_ones_like_full_like(device):
  t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
  for out, value in [(t.zeros_like(), 0.0), (t.ones_like(), 1.0), (t.full_like(4.5), 4.5)]:
    assert out.shape == (2, 3) and out.dtype == dtypes.float32 and same_device(out.device, device)
    np.testing.assert_array_equal(out.numpy(), np.full((2, 3), value, np.float32))
  ti = Tensor([1, 2], device=device)
  assert ti.zeros_like().dtype == dtypes.int32


@pytest.mark.parametrize("args", [(5,), (2, 7), (1, 10, 3), (5, 0, -1), (0.0, 1.0, 0.25)], ids=str)
def test_arange(device, args):
  t = Tensor.arange(*args, device=device)
  expected = np.arange(*args)
  assert t.dtype == (dtypes.float32 if expected.dtype.kind == "f" else dtypes.int32)
  np.testing.assert_allclose(t.numpy(), expected)


def test_eye(device):
  t = Tensor.eye(4, device=device)
  assert t.dtype == dtypes.float32
  np.testing.assert_array_equal(t.numpy(), np.eye(4, dtype=np.float32))


def test_rand_is_seeded_and_in_range(device):
  Tensor.manual_seed(42)
  a = Tensor.rand(3, 4, device=device).numpy()
  b = Tensor.rand(3, 4, device=device).numpy()
  Tensor.manual_seed(42)
  a_again = Tensor.rand(3, 4, device=device).numpy()
  assert a.shape == (3, 4) and a.dtype == np.float32
  assert ((0 <= a) & (a < 1)).all()
  np.testing.assert_array_equal(a, a_again)  # same seed, same numbers
  assert not np.array_equal(a, b)  # the next draw differs


def test_randn_statistics(device):
  Tensor.manual_seed(0)
  x = Tensor.randn(32, 32, device=device).numpy()
  assert x.shape == (32, 32) and x.dtype == np.float32
  assert abs(x.mean()) < 0.15 and 0.85 < x.std() < 1.15


def test_uniform_bounds(device):
  Tensor.manual_seed(1)
  x = Tensor.uniform(8, 8, low=-3.0, high=-1.0, device=device).numpy()
  assert x.shape == (8, 8)
  assert ((-3.0 <= x) & (x < -1.0)).all()
  assert x.max() - x.min() > 1.0  # actually spread over the interval


# --------------------------------------------------------------------------------------------
# elementwise math
# --------------------------------------------------------------------------------------------

UNARY = [  # id, numpy, plugrad, low, high, rtol
  ("neg", np.negative, lambda t: -t, -2, 2, 1e-6),
  ("neg_method", np.negative, Tensor.neg, -2, 2, 1e-6),
  ("abs", np.abs, Tensor.abs, -2, 2, 1e-6),
  ("exp", np.exp, Tensor.exp, -4, 4, 1e-5),
  ("exp2", np.exp2, Tensor.exp2, -4, 4, 1e-5),
  ("log", np.log, Tensor.log, 0.05, 8, 1e-5),
  ("log2", np.log2, Tensor.log2, 0.05, 8, 1e-5),
  ("sqrt", np.sqrt, Tensor.sqrt, 0, 8, 1e-5),
  ("rsqrt", lambda a: 1 / np.sqrt(a), Tensor.rsqrt, 0.05, 8, 1e-5),
  ("sin", np.sin, Tensor.sin, -10, 10, 2e-5),
  ("cos", np.cos, Tensor.cos, -10, 10, 2e-5),
  ("tanh", np.tanh, Tensor.tanh, -4, 4, 1e-5),
  ("sigmoid", lambda a: 1 / (1 + np.exp(-a)), Tensor.sigmoid, -6, 6, 1e-5),
  ("relu", lambda a: np.maximum(a, 0), Tensor.relu, -2, 2, 1e-6),
  ("gelu", np_gelu, Tensor.gelu, -4, 4, 1e-5),
]


@pytest.mark.parametrize("np_fn,pl_fn,low,high,rtol", [u[1:] for u in UNARY], ids=[u[0] for u in UNARY])
def test_unary(device, np_fn, pl_fn, low, high, rtol):
  check(np_fn, pl_fn, (4, 5), device=device, low=low, high=high, rtol=rtol, atol=2e-6,
          out_dtype=dtypes.float32)


def _nonzero(shape, seed=1):
  """Values in [0.5, 2] with random signs: safe denominators."""
  rng = np.random.default_rng(seed)
  return (rng.uniform(0.5, 2, shape) * rng.choice([-1, 1], shape)).astype(np.float32)


BINARY = [  # id, numpy, plugrad
  ("add", np.add, lambda a, b: a + b),
  ("sub", np.subtract, lambda a, b: a - b),
  ("mul", np.multiply, lambda a, b: a * b),
  ("div", np.divide, lambda a, b: a / b),
  ("floordiv", np.floor_divide, lambda a, b: a // b),
  ("mod", np.mod, lambda a, b: a % b),
  ("maximum", np.maximum, Tensor.maximum),
  ("minimum", np.minimum, Tensor.minimum),
]


@pytest.mark.parametrize("np_fn,pl_fn", [b[1:] for b in BINARY], ids=[b[0] for b in BINARY])
def test_binary(device, np_fn, pl_fn):
  check(np_fn, pl_fn, (4, 5), _nonzero((4, 5)), device=device, out_dtype=dtypes.float32)


def test_pow(device):
  # tensor ** tensor with a positive base
  check(np.power, lambda a, b: a ** b, (3, 4), (3, 4), device=device, low=0.1, high=3, rtol=1e-5)
  # integer exponents work for negative bases too
  check(lambda a: a ** 2, lambda t: t ** 2, (3, 4), device=device)
  check(lambda a: a ** 3, lambda t: t ** 3, (3, 4), device=device, rtol=1e-5)
  check(lambda a: a ** -1, lambda t: t ** -1, _nonzero((3, 4)), device=device)
  check(lambda a: a ** 0.5, lambda t: t ** 0.5, (3, 4), device=device, low=0, high=4)


@pytest.mark.parametrize("np_fn,pl_fn", [
  (lambda a: 2 + a, lambda t: 2 + t),
  (lambda a: 2 - a, lambda t: 2 - t),
  (lambda a: 3 * a, lambda t: 3 * t),
  (lambda a: 1.5 / a, lambda t: 1.5 / t),
  (lambda a: 2.0 ** a, lambda t: 2.0 ** t),
  (lambda a: 3.5 // a, lambda t: 3.5 // t),
  (lambda a: 3.5 % a, lambda t: 3.5 % t),
  (lambda a: a + 0.5, lambda t: t + 0.5),
  (lambda a: a - 0.5, lambda t: t - 0.5),
  (lambda a: a / 4, lambda t: t / 4),
  (lambda a: a // 0.75, lambda t: t // 0.75),
  (lambda a: a % 0.75, lambda t: t % 0.75),
], ids=["radd", "rsub", "rmul", "rtruediv", "rpow", "rfloordiv", "rmod", "add_scalar", "sub_scalar",
    "div_scalar", "floordiv_scalar", "mod_scalar"])
def test_scalar_and_reflected_ops(device, np_fn, pl_fn):
  check(np_fn, pl_fn, _nonzero((3, 4)), device=device, out_dtype=dtypes.float32)


@pytest.mark.parametrize("shape_a,shape_b", [
  ((3, 4), (4,)),
  ((4, 1, 6), (5, 1)),
  ((1, 5), (3, 1)),
  ((), (2, 3)),
  ((2, 3, 4), (1, 1, 1)),
], ids=str)
def test_broadcasting(device, shape_a, shape_b):
  check(np.add, lambda a, b: a + b, shape_a, shape_b, device=device)
  check(np.multiply, lambda a, b: a * b, shape_b, shape_a, device=device)


def test_clip(device):
  check(lambda a: np.clip(a, -0.5, 0.75), lambda t: t.clip(-0.5, 0.75), (4, 5), device=device)


def test_maximum_minimum_with_scalar(device):
  check(lambda a: np.maximum(a, 0.5), lambda t: t.maximum(0.5), (4, 5), device=device)
  check(lambda a: np.minimum(a, -0.5), lambda t: t.minimum(-0.5), (4, 5), device=device)


def test_where(device):
  check(lambda c, a, b: np.where(c, a, b), lambda c, a, b: c.where(a, b),
          make_input((3, 4), np.random.default_rng(5), np.bool_), (3, 4), (3, 4), device=device)


def test_where_broadcast_and_scalar(device):
  check(lambda a, b: np.where(a > 0, a, b), lambda a, b: (a > 0).where(a, b), (3, 4), (4,), device=device)
  check(lambda a: np.where(a > 0, a, np.float32(0.25)), lambda t: (t > 0).where(t, 0.25), (3, 4),
          device=device, out_dtype=dtypes.float32)


def test_mixed_dtypes_in_one_graph(device):
  check(lambda i, f: i * np.float32(0.5) + f, lambda i, f: i * 0.5 + f,
          np.array([[1, -2, 3], [4, 5, -6]], np.int32), (2, 3), device=device, out_dtype=dtypes.float32)
  check(lambda i: 10 - i, lambda t: 10 - t, np.array([1, -2, 30], np.int32), device=device, out_dtype=dtypes.int32)
  check(lambda i: np.where(i > 0, i, np.float32(0.5)), lambda t: (t > 0).where(t, 0.5),
          np.array([1, -2, 3], np.int32), device=device, out_dtype=dtypes.float32)


def test_elementwise_on_4d(device):
  check(lambda a, b: np.exp(a) * b - a, lambda a, b: a.exp() * b - a, (2, 3, 2, 4), (2, 3, 2, 4),
          device=device, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# comparisons and logic
# --------------------------------------------------------------------------------------------

COMPARISONS = [
  ("lt", lambda a, b: a < b), ("le", lambda a, b: a <= b), ("gt", lambda a, b: a > b),
  ("ge", lambda a, b: a >= b), ("eq", lambda a, b: a == b), ("ne", lambda a, b: a != b),
]


@pytest.mark.parametrize("op", [c[1] for c in COMPARISONS], ids=[c[0] for c in COMPARISONS])
def test_comparison(device, op):
  # integer-valued floats so that ties (== and <= on equal values) actually occur
  rng = np.random.default_rng(3)
  a, b = (rng.integers(-2, 3, (4, 5)).astype(np.float32) for _ in range(2))
  check(op, op, a, b, device=device, out_dtype=dtypes.bool)
  check(lambda x: op(x, 1.0), lambda x: op(x, 1.0), a, device=device, out_dtype=dtypes.bool)
  check(lambda x: op(1, x), lambda x: op(1, x), a.astype(np.int32), device=device, out_dtype=dtypes.bool)
  # an int tensor against a float scalar compares as floats: 1 < 1.5 but not 2 < 1.5
  check(lambda x: op(x, 1.5), lambda x: op(x, 1.5), a.astype(np.int32), device=device, out_dtype=dtypes.bool)


@pytest.mark.parametrize("op", [lambda a, b: a & b, lambda a, b: a | b, lambda a, b: a ^ b], ids=["and", "or", "xor"])
def test_logic_ops(device, op):
  check(op, op, (3, 4), (3, 4), device=device, dtype=np.bool_, out_dtype=dtypes.bool)
  check(op, op, (3, 4), (3, 4), device=device, dtype=np.int32, low=-8, high=8, out_dtype=dtypes.int32)


def test_logical_not(device):
  check(np.logical_not, Tensor.logical_not, (3, 4), device=device, dtype=np.bool_, out_dtype=dtypes.bool)


def test_bool_logic_from_comparisons(device):
  check(lambda a: (a > 0) & (a < 1) | (a < -1.5), lambda t: (t > 0) & (t < 1) | (t < -1.5), (4, 5), device=device)


# --------------------------------------------------------------------------------------------
# dtypes: promotion, integer arithmetic, float16, bfloat16, cast, bitcast
# --------------------------------------------------------------------------------------------

PROMOTIONS = [  # id, lhs, rhs (tensor spec or python scalar), expected dtype
  ("int32+float", ([1, 2], dtypes.int32), 1.5, dtypes.float32),
  ("int32+int", ([1, 2], dtypes.int32), 2, dtypes.int32),
  ("int8*float", ([1, 2], dtypes.int8), 2.0, dtypes.float32),
  ("uint8+int", ([1, 2], dtypes.uint8), 1, dtypes.uint8),
  ("int8+uint8", ([1, 2], dtypes.int8), ([100, 200], dtypes.uint8), dtypes.int16),
  ("int32+int64", ([1, 2], dtypes.int32), ([3, 4], dtypes.int64), dtypes.int64),
  ("bool+int32", ([True, False], dtypes.bool), ([3, 4], dtypes.int32), dtypes.int32),
  ("float16+float32", ([1, 2], dtypes.float16), ([3, 4], dtypes.float32), dtypes.float32),
  ("float16+float", ([1, 2], dtypes.float16), 1.5, dtypes.float16),
  ("float32+int", ([1, 2], dtypes.float32), 3, dtypes.float32),
  ("int32+float64", ([1, 2], dtypes.int32), ([3, 4], dtypes.float64), dtypes.float64),
  ("float32+float64", ([1, 2], dtypes.float32), ([3, 4], dtypes.float64), dtypes.float64),
]


@pytest.mark.parametrize("lhs,rhs,expected", [p[1:] for p in PROMOTIONS], ids=[p[0] for p in PROMOTIONS])
def test_dtype_promotion(device, lhs, rhs, expected):
  a = Tensor(lhs[0], dtype=lhs[1], device=device)
  b = Tensor(rhs[0], dtype=rhs[1], device=device) if isinstance(rhs, tuple) else rhs
  b_values = np.array(rhs[0], dtype=np.float64) if isinstance(rhs, tuple) else rhs
  out = a + b
  assert out.dtype == expected
  np.testing.assert_allclose(out.numpy().astype(np.float64), np.array(lhs[0], np.float64) + b_values)


def test_int_true_division_is_float(device):
  a = Tensor([7, -7, 1, 0], device=device)
  b = Tensor([2, 2, 3, 5], device=device)
  out = a / b
  assert out.dtype == dtypes.float32
  np.testing.assert_allclose(out.numpy(), np.array([3.5, -3.5, 1 / 3, 0.0], np.float32), rtol=1e-6)
  assert (a / 2).dtype == dtypes.float32


def test_int_floor_division_and_modulo(device):
  a = Tensor([7, -7, 7, -7, 6, 0], device=device)
  b = Tensor([2, 2, -2, -2, 3, 4], device=device)
  q, r = a // b, a % b
  assert q.dtype == dtypes.int32 and r.dtype == dtypes.int32
  np.testing.assert_array_equal(q.numpy(), [3, -4, -4, 3, 2, 0])  # rounds toward -inf like numpy
  np.testing.assert_array_equal(r.numpy(), [1, 1, -1, -1, 0, 0])  # takes the divisor's sign
  np.testing.assert_array_equal((a // 3).numpy(), np.array([7, -7, 7, -7, 6, 0]) // 3)
  np.testing.assert_array_equal((a % 3).numpy(), np.array([7, -7, 7, -7, 6, 0]) % 3)
  np.testing.assert_array_equal((10 // b).numpy(), 10 // np.array([2, 2, -2, -2, 3, 4]))
  np.testing.assert_array_equal((10 % b).numpy(), 10 % np.array([2, 2, -2, -2, 3, 4]))


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.uint32, dtypes.int64], ids=lambda d: d.name)
def test_int_division_by_zero_is_zero_never_a_crash(device, dtype):
  # C would trap (SIGFPE) or be undefined; plugrad defines x // 0 == x % 0 == 0, numpy's answer
  a = Tensor([7, 0, 5, 1], device=device, dtype=dtype)
  zero = Tensor([0, 0, 0, 0], device=device, dtype=dtype)
  np.testing.assert_array_equal((a // zero).numpy(), [0, 0, 0, 0])
  np.testing.assert_array_equal((a % zero).numpy(), [0, 0, 0, 0])
  np.testing.assert_array_equal((a // 0).numpy(), [0, 0, 0, 0])
  np.testing.assert_array_equal((a % 0).numpy(), [0, 0, 0, 0])


INT_DTYPES = [(np.int8, dtypes.int8), (np.int16, dtypes.int16), (np.int32, dtypes.int32), (np.int64, dtypes.int64),
              (np.uint8, dtypes.uint8), (np.uint16, dtypes.uint16), (np.uint32, dtypes.uint32),
              (np.uint64, dtypes.uint64)]


@pytest.mark.parametrize("np_dtype,pl_dtype", INT_DTYPES, ids=[d[0].__name__ for d in INT_DTYPES])
def test_int_dtype_elementwise(device, np_dtype, pl_dtype):
  low = 0 if np.dtype(np_dtype).kind == "u" else -6
  kw = dict(device=device, dtype=np_dtype, low=low, high=7, out_dtype=pl_dtype)
  check(lambda a, b: a + b, lambda a, b: a + b, (3, 4), (3, 4), **kw)
  check(lambda a, b: a * b, lambda a, b: a * b, (3, 4), (3, 4), **kw)
  check(lambda a, b: np.maximum(a, b) - np.minimum(a, b), lambda a, b: a.maximum(b) - a.minimum(b),
          (3, 4), (3, 4), **kw)
  check(lambda a: a * 3 + 1, lambda t: t * 3 + 1, (3, 4), **kw)  # python ints keep the dtype


def test_int_pow(device):
  check(lambda a: a ** 2, lambda t: t ** 2, np.array([-3, -1, 0, 2, 5], np.int32), device=device,
          out_dtype=dtypes.int32)


def test_int64_and_uint32_large_values(device):
  big = np.array([2 ** 40, -(2 ** 40) + 3, 2 ** 62 // 7], dtype=np.int64)
  check(lambda a: a * 3 + 1, lambda t: t * 3 + 1, big, device=device, out_dtype=dtypes.int64)
  u = np.array([3_000_000_000, 5, 2 ** 32 - 2], dtype=np.uint32)
  check(lambda a: a + 1, lambda t: t + 1, u, device=device, out_dtype=dtypes.uint32)
  check(lambda a: a // 3, lambda t: t // 3, u, device=device, out_dtype=dtypes.uint32)


def test_float16_elementwise(device):
  kw = dict(device=device, dtype=np.float16, atol=1e-2, rtol=1e-2, out_dtype=dtypes.float16)
  check(lambda a, b: a + b, lambda a, b: a + b, (3, 4), (3, 4), **kw)
  check(lambda a, b: a * b - a, lambda a, b: a * b - a, (3, 4), (3, 4), **kw)
  check(lambda a: np.exp(a.astype(np.float32)).astype(np.float16), Tensor.exp, (3, 4), **kw)
  check(lambda a: np.sqrt(a.astype(np.float32)).astype(np.float16), Tensor.sqrt, (3, 4), low=0, high=4, **kw)
  check(lambda a: a.sum(axis=1), lambda t: t.sum(axis=1), (3, 4), **kw)


def test_float64_keeps_precision(device):
  a = np.array([1.0 + 1e-12, 2.0 / 3.0, np.pi], dtype=np.float64)
  check(lambda x: x * 3 - 1, lambda t: t * 3 - 1, a, device=device, rtol=1e-15, atol=0, out_dtype=dtypes.float64)
  check(np.exp, Tensor.exp, a, device=device, rtol=1e-10, atol=0, out_dtype=dtypes.float64)


def test_bfloat16(device):
  t = Tensor([1.0, 2.5, -3.0], dtype=dtypes.bfloat16, device=device)
  assert t.dtype == dtypes.bfloat16
  out = (t + 1).numpy()
  assert out.dtype == np.float32  # numpy has no bfloat16
  np.testing.assert_array_equal(out, [2.0, 3.5, -2.0])  # exactly representable
  third = Tensor([1 / 3, 100.7], device=device).cast(dtypes.bfloat16).numpy()
  np.testing.assert_allclose(third, [1 / 3, 100.7], rtol=1e-2)


@pytest.mark.parametrize("values,np_from,to,np_to", [
  ([-2.7, -0.5, 0.0, 0.5, 2.7], np.float32, dtypes.int32, np.int32),  # truncates toward zero
  ([0.0, 1.5, 200.25, 255.0], np.float32, dtypes.uint8, np.uint8),
  ([0.0, -1.5, 2.0, 0.0], np.float32, dtypes.bool, np.bool_),
  ([-3, 0, 7, 123456], np.int32, dtypes.float32, np.float32),
  ([True, False, True], np.bool_, dtypes.int32, np.int32),
  ([True, False, True], np.bool_, dtypes.float32, np.float32),
  ([0.1, -65504.0, 3.14159, 1e-3], np.float32, dtypes.float16, np.float16),
  ([0.1, -2.5, 1e-7], np.float32, dtypes.float64, np.float64),
  ([-5, 0, 2 ** 31 - 1], np.int64, dtypes.int32, np.int32),
  ([-5, 100, 0], np.int8, dtypes.int64, np.int64),
], ids=["f32->i32", "f32->u8", "f32->bool", "i32->f32", "bool->i32", "bool->f32", "f32->f16", "f32->f64",
    "i64->i32", "i8->i64"])
def test_cast(device, values, np_from, to, np_to):
  check(lambda a: a.astype(np_to), lambda t: t.cast(to), np.array(values, dtype=np_from), device=device,
          out_dtype=to, atol=0, rtol=0)


def test_cast_after_compute(device):
  check(lambda a: (a * 10).astype(np.int32) + 1, lambda t: (t * 10).cast(dtypes.int32) + 1, (3, 4),
          device=device, out_dtype=dtypes.int32)


@pytest.mark.parametrize("values,np_from,to,np_to", [
  ([1.0, -2.5, 0.0, 3.4e38, 1e-40], np.float32, dtypes.int32, np.int32),
  ([0, 1065353216, -1077936128, 2139095040], np.int32, dtypes.float32, np.float32),
  ([1.0, -0.0, 7.5], np.float32, dtypes.uint32, np.uint32),
  ([1.0, -2.0, 0.5], np.float16, dtypes.int16, np.int16),
], ids=["f32->i32", "i32->f32", "f32->u32", "f16->i16"])
def test_bitcast(device, values, np_from, to, np_to):
  arr = np.array(values, dtype=np_from)
  out = Tensor(arr, device=device).bitcast(to)
  assert out.dtype == to
  np.testing.assert_array_equal(out.numpy().view(np.uint8), arr.view(np_to).view(np.uint8))


@pytest.mark.parametrize("to", [dtypes.int16, dtypes.uint16])
def test_bfloat16_bitcasts_go_through_its_16_bits(device, to):
  # a device computing bfloat16 as float must reinterpret its 16 storage bits, not the float's 32 (C read 0 here)
  bits = np.array([0x3F80, 0xBF80, 0x0001, 0x8000, 0x7F80, 0x4049], np.uint16)  # 1, -1, tiny, -0, inf, 3.140625
  if dtypes.bfloat16 not in get_registry().device(device).caps.dtypes: pytest.skip(f"{device} declares no bfloat16")
  t = Tensor(bits.view(to.np), device=device).bitcast(dtypes.bfloat16)
  np.testing.assert_array_equal(t.cast(dtypes.float32).numpy(), (bits.astype(np.uint32) << 16).view(np.float32))
  np.testing.assert_array_equal(t.bitcast(to).numpy().view(np.uint16), bits)
  np.testing.assert_array_equal((t * 2).bitcast(to).numpy().view(np.uint16), [0x4000, 0xC000, 2, 0x8000, 0x7F80, 0x40C9])


def test_bfloat16_bitcasts_keep_a_nans_bits(device):
  # a bitcast moves bits: the sign and payload of a NaN survive it (its store is not a float's rounding to bfloat16)
  if dtypes.bfloat16 not in get_registry().device(device).caps.dtypes: pytest.skip(f"{device} declares no bfloat16")
  bits = np.array([0xFFC1, 0x7F81, 0xFFFF, 0x7FC0, 0x3F80], np.uint16)
  t = Tensor(bits, device=device).bitcast(dtypes.bfloat16)
  np.testing.assert_array_equal(t.bitcast(dtypes.uint16).numpy(), bits)
  np.testing.assert_array_equal(t.contiguous().bitcast(dtypes.uint16).numpy(), bits)


def test_bitcast_after_compute_roundtrip(device):
  arr = make_input((3, 4), np.random.default_rng(0))
  t = (Tensor(arr, device=device) * 2).bitcast(dtypes.int32)
  np.testing.assert_array_equal(t.numpy(), (arr * 2).view(np.int32))
  np.testing.assert_array_equal(t.bitcast(dtypes.float32).numpy(), arr * 2)


def test_cast_every_declared_pair(device):
  # every conversion the device can be asked for, with values every dtype holds exactly (so the
  # expected result is plain: the value, its truncation toward zero, or != 0); a conversion that
  # needs a runtime helper the device lacks fails here instead of in a user's program. One kernel
  # per source dtype: its casts to every dtype, each widened to a common float to compare.
  declared = sorted(get_registry().device(device).caps.dtypes, key=lambda d: d.name)
  common = dtypes.float64 if dtypes.float64 in declared else dtypes.float32
  for src in declared:
    if src == dtypes.bool: values = [True, False, True, True, False, True]
    elif src.is_int: values = [0, 1, 2, 100, 127, -3 if src.kind == "i" else 3]
    else: values = [0.0, 1.0, 2.75, 100.5, 127.0, -3.25]
    signed = Tensor(values, dtype=src, device=device)
    unsigned = Tensor([abs(v) for v in values], dtype=src, device=device)  # negative -> unsigned is out of range
    got = Tensor.stack(*[(unsigned if dst.kind == "u" else signed).cast(dst).cast(common) for dst in declared]).numpy()
    for row, dst in zip(got, declared):
      vals = [abs(v) for v in values] if dst.kind == "u" else values
      want = [bool(v) if dst == dtypes.bool else float(v) if dst.is_float else math.trunc(v) for v in vals]
      np.testing.assert_array_equal(row, np.array(want, dtype=np.float64), err_msg=f"cast {src.name} -> {dst.name}")


# --------------------------------------------------------------------------------------------
# reductions
# --------------------------------------------------------------------------------------------

REDUCE_AXES = [None, 0, 1, -1, (0, 2), (-1, -2), (0, 1, 2)]


@pytest.mark.parametrize("axis", REDUCE_AXES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_reduce(device, op, axis, keepdim):
  check(lambda a: getattr(a, op)(axis=axis, keepdims=keepdim), lambda t: getattr(t, op)(axis=axis, keepdim=keepdim),
          (2, 3, 4), device=device, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("axis", [None, 1, (0, 2)], ids=str)
def test_prod(device, axis):
  check(lambda a: a.prod(axis=axis), lambda t: t.prod(axis=axis), (2, 3, 4), device=device,
          low=0.5, high=1.5, rtol=1e-5)


def test_reduce_default_is_full(device):
  out = check(np.sum, Tensor.sum, (3, 4), device=device, rtol=1e-5)
  assert out.shape == ()


def test_reduce_ints_and_bools(device):
  check(lambda a: a.sum(axis=1), lambda t: t.sum(axis=1), (3, 5), device=device, dtype=np.int32, low=-50, high=50)
  check(lambda a: a.max(axis=0), lambda t: t.max(axis=0), (3, 5), device=device, dtype=np.int32, low=-50, high=50)
  check(lambda a: a.min(), lambda t: t.min(), (3, 5), device=device, dtype=np.int32, low=-50, high=50)
  # sum of a bool tensor counts the True values
  check(lambda a: a.sum(axis=1), lambda t: t.sum(axis=1), (3, 5), device=device, dtype=np.bool_, check_kind=False)


def test_reduce_on_size_one_and_expanded(device):
  check(lambda a: a.sum(axis=1), lambda t: t.sum(axis=1), (4, 1, 3), device=device)
  check(lambda a: np.broadcast_to(a, (4, 5, 3)).sum(axis=1), lambda t: t.expand(4, 5, 3).sum(axis=1), (4, 1, 3),
          device=device, rtol=1e-5)


def test_larger_and_chained_reductions(device):
  check(np.sum, Tensor.sum, (4096,), device=device, rtol=1e-4, atol=1e-3)
  check(lambda a: a.sum(axis=0), lambda t: t.sum(axis=0), (300, 3), device=device, rtol=1e-4, atol=1e-4)
  check(lambda a: a.sum(axis=1).max(), lambda t: t.sum(axis=1).max(), (4, 5), device=device, rtol=1e-5)
  check(lambda a: a - a.max(axis=1, keepdims=True) + a.sum(), lambda t: t - t.max(axis=1, keepdim=True) + t.sum(),
          (3, 4), device=device, rtol=1e-5)


def test_pad_then_reduce(device):
  # the padded area holds the pad value, never f(0) of the padded expression
  check(lambda a: np.pad(np.exp(a), ((1, 1), (0, 0))).sum(axis=0), lambda t: t.exp().pad(((1, 1), (0, 0))).sum(axis=0),
          (3, 4), device=device, rtol=1e-5)
  check(lambda a: np.pad(a - 5, ((0, 2),)).max(), lambda t: (t - 5).pad(((0, 2),)).max(), (4,), device=device)
  check(lambda a: np.pad(a - 5, ((0, 2),), constant_values=-10).max(), lambda t: (t - 5).pad(((0, 2),), value=-10).max(),
          (4,), device=device)


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)], ids=str)
@pytest.mark.parametrize("correction", [1, 0])
def test_var_std(device, axis, correction):
  check(lambda a: a.var(axis=axis, ddof=correction), lambda t: t.var(axis=axis, correction=correction),
          (4, 5), device=device, rtol=1e-5)
  check(lambda a: a.std(axis=axis, ddof=correction), lambda t: t.std(axis=axis, correction=correction),
          (4, 5), device=device, rtol=1e-5)


def test_var_std_default_correction_and_keepdim(device):
  check(lambda a: a.var(ddof=1), Tensor.var, (4, 5), device=device, rtol=1e-5)  # correction=1 like torch
  check(lambda a: a.std(axis=1, ddof=1, keepdims=True), lambda t: t.std(axis=1, keepdim=True), (4, 5),
          device=device, rtol=1e-5)


@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=str)
def test_argmax_argmin(device, axis):
  check(lambda a: np.argmax(a, axis=axis), lambda t: t.argmax(axis=axis), (4, 5), device=device)
  check(lambda a: np.argmin(a, axis=axis), lambda t: t.argmin(axis=axis), (4, 5), device=device)


def test_argmax_keepdim(device):
  check(lambda a: np.argmax(a, axis=1, keepdims=True), lambda t: t.argmax(axis=1, keepdim=True), (3, 4, 2),
          device=device)


def test_argmax_argmin_with_nan_pick_the_first_nan(device):
  a = np.array([[1, np.nan, 3, np.nan], [0, 2, 1, 0]], dtype=np.float32)
  for axis in (None, 1):
    check(lambda x: np.argmax(x, axis=axis), lambda t: t.argmax(axis=axis), a, device=device)
    check(lambda x: np.argmin(x, axis=axis), lambda t: t.argmin(axis=axis), a, device=device)


def test_argmax_ties_pick_first_index(device):
  a = np.array([[1, 3, 3, 2], [0, 0, 0, 0], [5, 1, 5, 1]], dtype=np.float32)
  for axis in (None, 0, 1):
    check(lambda x: np.argmax(x, axis=axis), lambda t: t.argmax(axis=axis), a, device=device)
    check(lambda x: np.argmin(x, axis=axis), lambda t: t.argmin(axis=axis), a, device=device)
  check(np.argmax, Tensor.argmax, np.array([2, 7, 7, 1], np.int32), device=device)


@pytest.mark.parametrize("axis", [-1, 0, 1], ids=str)
def test_softmax_log_softmax(device, axis):
  check(lambda a: np_softmax(a, axis), lambda t: t.softmax(axis), (3, 5), device=device, rtol=1e-5, atol=1e-6)
  check(lambda a: np_log_softmax(a, axis), lambda t: t.log_softmax(axis), (3, 5), device=device,
          rtol=1e-5, atol=1e-5)


def test_softmax_default_axis_and_large_values(device):
  check(np_softmax, Tensor.softmax, (2, 3, 4), device=device, rtol=1e-5, atol=1e-6)
  big = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]], np.float32)  # needs the max shift
  check(np_softmax, Tensor.softmax, big, device=device, rtol=1e-5, atol=1e-6)
  check(np_log_softmax, Tensor.log_softmax, big, device=device, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# movement
# --------------------------------------------------------------------------------------------


def test_reshape(device):
  check(lambda a: a.reshape(6, 4), lambda t: t.reshape(6, 4), (2, 3, 4), device=device)
  check(lambda a: a.reshape(2, -1), lambda t: t.reshape((2, -1)), (2, 3, 4), device=device)
  check(lambda a: a.reshape(()), lambda t: t.reshape(()), (1, 1), device=device)
  check(lambda a: a.reshape(1, 24, 1), lambda t: t.reshape(1, 24, 1), (2, 3, 4), device=device)


def test_permute_transpose(device):
  check(lambda a: a.transpose(2, 0, 1), lambda t: t.permute(2, 0, 1), (2, 3, 4), device=device)
  check(lambda a: a.transpose(1, 2, 0), lambda t: t.permute((1, 2, 0)), (2, 3, 4), device=device)
  check(lambda a: a.T, lambda t: t.transpose(), (3, 4), device=device)  # default dims 1, 0
  check(lambda a: np.swapaxes(a, 0, 2), lambda t: t.transpose(0, 2), (2, 3, 4), device=device)
  check(lambda a: np.swapaxes(a, -1, -2), lambda t: t.transpose(-1, -2), (2, 3, 4), device=device)


def test_expand(device):
  check(lambda a: np.broadcast_to(a, (3, 4)), lambda t: t.expand(3, 4), (3, 1), device=device)
  check(lambda a: np.broadcast_to(a, (2, 3, 4)), lambda t: t.expand((2, 3, 4)), (3, 1), device=device)  # new dim
  check(lambda a: np.broadcast_to(a, (3, 5)), lambda t: t.expand(-1, 5), (3, 1), device=device)  # -1 keeps


def test_flatten_unsqueeze_squeeze(device):
  check(lambda a: a.reshape(-1), Tensor.flatten, (2, 3, 4), device=device)
  check(lambda a: a.reshape(2, -1), lambda t: t.flatten(1), (2, 3, 4), device=device)
  check(lambda a: a.reshape(2, 12, 5), lambda t: t.flatten(1, 2), (2, 3, 4, 5), device=device)
  check(lambda a: a.reshape(6, 4), lambda t: t.flatten(end_dim=-2), (2, 3, 4), device=device)
  check(lambda a: np.expand_dims(a, 0), lambda t: t.unsqueeze(0), (3, 4), device=device)
  check(lambda a: np.expand_dims(a, -1), lambda t: t.unsqueeze(-1), (3, 4), device=device)
  check(lambda a: np.expand_dims(a, 1), lambda t: t.unsqueeze(1), (3, 4), device=device)
  check(np.squeeze, Tensor.squeeze, (3, 1, 4, 1), device=device)
  check(lambda a: a.squeeze(1), lambda t: t.squeeze(1), (3, 1, 4, 1), device=device)
  check(lambda a: a.squeeze(-1), lambda t: t.squeeze(-1), (3, 1, 4, 1), device=device)
  check(lambda a: a, lambda t: t.squeeze(0), (3, 1, 4, 1), device=device)  # size 3: unchanged, like torch


@pytest.mark.parametrize("padding,value", [
  (((1, 2), (0, 1)), 0.0),
  (((0, 0), (3, 0)), 0.0),
  (((2, 1), (1, 1)), 2.5),
  (((1, 1), (0, 0)), -1.0),
], ids=str)
def test_pad(device, padding, value):
  check(lambda a: np.pad(a, padding, constant_values=value), lambda t: t.pad(padding, value=value), (3, 4),
          device=device)


def test_pad_3d_then_compute(device):
  # pad of exp: the padded area must be 0, not exp(0)
  check(lambda a: np.pad(np.exp(a), ((0, 0), (1, 1), (2, 0))) + 1, lambda t: t.exp().pad(((0, 0), (1, 1), (2, 0))) + 1,
          (2, 3, 4), device=device, rtol=1e-5)


def test_shrink(device):
  check(lambda a: a[1:3, :], lambda t: t.shrink(((1, 3), None)), (4, 5), device=device)
  check(lambda a: a[0:1, 2:5, 1:3], lambda t: t.shrink(((0, 1), (2, 5), (1, 3))), (2, 5, 4), device=device)


def test_flip(device):
  check(lambda a: np.flip(a, 0), lambda t: t.flip(0), (2, 3, 4), device=device)
  check(lambda a: np.flip(a, -1), lambda t: t.flip(-1), (2, 3, 4), device=device)
  check(lambda a: np.flip(a, (0, 2)), lambda t: t.flip((0, 2)), (2, 3, 4), device=device)


def test_movement_chain(device):
  check(lambda a: np.flip(np.pad(a.transpose(1, 0, 2), ((1, 0), (0, 0), (0, 2)))[:, 1:2, :], 2).reshape(4, -1),
          lambda t: t.permute(1, 0, 2).pad(((1, 0), (0, 0), (0, 2))).shrink((None, (1, 2), None)).flip(2).reshape(4, -1),
          (2, 3, 4), device=device)


GETITEM = [
  np.s_[1], np.s_[-1], np.s_[1:3], np.s_[::2], np.s_[::-1], np.s_[3:0:-2], np.s_[1, 2], np.s_[1, 2, 3],
  np.s_[:, 1:5:2], np.s_[None], np.s_[..., 0], np.s_[..., None], np.s_[1, ..., ::-2], np.s_[:, None, 2:],
  np.s_[-2:, 1, None, ::3], np.s_[:, -1:-4:-1, 1], np.s_[..., 1:1],
]


@pytest.mark.parametrize("index", GETITEM, ids=str)
def test_getitem(device, index):
  check(lambda a: a[index], lambda t: t[index], (4, 5, 6), device=device)


def test_getitem_then_compute(device):
  check(lambda a: a[1:, ::2] * 2 + a[:-1, 1::2], lambda t: t[1:, ::2] * 2 + t[:-1, 1::2], (4, 6), device=device)


def test_cat(device):
  check(lambda a, b: np.concatenate([a, b], 0), lambda a, b: Tensor.cat(a, b, dim=0), (2, 3), (4, 3), device=device)
  check(lambda a, b: np.concatenate([a, b], 1), lambda a, b: a.cat(b, dim=1), (2, 3), (2, 5), device=device)
  check(lambda a, b, c: np.concatenate([a, b, c], -1), lambda a, b, c: a.cat(b, c, dim=-1), (2, 3, 1), (2, 3, 2),
          (2, 3, 3), device=device)


def test_stack(device):
  check(lambda a, b: np.stack([a, b], 0), lambda a, b: Tensor.stack(a, b), (2, 3), (2, 3), device=device)
  check(lambda a, b, c: np.stack([a, b, c], 1), lambda a, b, c: a.stack(b, c, dim=1), (2, 3), (2, 3), (2, 3),
          device=device)
  check(lambda a, b: np.stack([a, b], -1), lambda a, b: Tensor.stack(a, b, dim=-1), (2, 3), (2, 3), device=device)


# --------------------------------------------------------------------------------------------
# matmul and conv2d
# --------------------------------------------------------------------------------------------

MATMUL_SHAPES = [
  ((3, 4), (4, 5)),
  ((16, 16), (16, 16)),
  ((1, 7), (7, 1)),
  ((2, 3, 4), (4, 5)),  # batch on one side
  ((2, 3, 4), (2, 4, 5)),  # batched
  ((2, 1, 3, 4), (5, 4, 2)),  # broadcast batch dims
  ((4,), (4,)),  # 1-D @ 1-D: a scalar
  ((4,), (4, 3)),  # 1-D @ 2-D
  ((3, 4), (4,)),  # 2-D @ 1-D
  ((4,), (2, 4, 3)),  # 1-D @ batched
]


@pytest.mark.parametrize("shape_a,shape_b", MATMUL_SHAPES, ids=str)
def test_matmul(device, shape_a, shape_b):
  check(np.matmul, lambda a, b: a @ b, shape_a, shape_b, device=device, atol=1e-4, rtol=1e-5)


def test_matmul_dot_methods(device):
  check(np.matmul, Tensor.matmul, (3, 4), (4, 2), device=device, atol=1e-4, rtol=1e-5)
  check(np.dot, Tensor.dot, (3, 4), (4, 2), device=device, atol=1e-4, rtol=1e-5)


def test_matmul_of_transposed_and_sliced_inputs(device):
  check(lambda a, b: a.T @ b, lambda a, b: a.transpose() @ b, (4, 3), (4, 5), device=device, atol=1e-4, rtol=1e-5)
  check(lambda a, b: a[:, ::2] @ b[1:].T, lambda a, b: a[:, ::2] @ b[1:].transpose(), (3, 8), (6, 4),
          device=device, atol=1e-4, rtol=1e-5)


def test_matmul_int(device):
  check(np.matmul, lambda a, b: a @ b, (3, 4), (4, 2), device=device, dtype=np.int32, low=-5, high=5,
          out_dtype=dtypes.int32)


def test_matmul_then_elementwise(device):
  check(lambda a, b, c: np.maximum(a @ b + c, 0), lambda a, b, c: (a @ b + c).relu(), (4, 6), (6, 3), (3,),
          device=device, atol=1e-4, rtol=1e-5)


CONV_CASES = [  # id, x shape, w shape, kwargs
  ("basic", (1, 2, 5, 5), (3, 2, 3, 3), {}),
  ("batch2", (2, 1, 4, 5), (2, 1, 2, 2), {}),
  ("stride2", (1, 2, 6, 6), (2, 2, 3, 3), {"stride": 2}),
  ("padding1", (1, 2, 4, 4), (2, 2, 3, 3), {"padding": 1}),
  ("dilation2", (1, 1, 7, 7), (2, 1, 3, 3), {"dilation": 2}),
  ("groups2", (1, 4, 5, 5), (4, 2, 3, 3), {"groups": 2}),
  ("depthwise", (1, 3, 4, 4), (3, 1, 3, 3), {"groups": 3, "padding": 1}),
  ("1x1", (2, 3, 3, 3), (4, 3, 1, 1), {}),
  ("all", (1, 4, 7, 6), (2, 2, 2, 3), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}),
  ("tuples", (1, 2, 5, 6), (2, 2, 3, 2), {"stride": (1, 2), "padding": (1, 0)}),
]


@pytest.mark.parametrize("x_shape,w_shape,kwargs", [c[1:] for c in CONV_CASES], ids=[c[0] for c in CONV_CASES])
def test_conv2d(device, x_shape, w_shape, kwargs):
  check(lambda x, w: np_conv2d(x, w, **kwargs), lambda x, w: x.conv2d(w, **kwargs), x_shape, w_shape,
          device=device, atol=1e-4, rtol=1e-4)


def test_conv2d_bias(device):
  check(lambda x, w, b: np_conv2d(x, w, b, padding=1), lambda x, w, b: x.conv2d(w, b, padding=1),
          (2, 2, 4, 4), (3, 2, 3, 3), (3,), device=device, atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------------------------
# laziness, realize, assign, data out, devices
# --------------------------------------------------------------------------------------------


def test_shared_subexpression_used_twice(device):
  a = make_input((3, 4), np.random.default_rng(0))
  x = Tensor(a, device=device)
  y = (x * 2 + 1).exp()  # shared by both outputs below
  s, d = y.sum(axis=0), y * y - y
  ey = np.exp(a * 2 + 1)
  np.testing.assert_allclose(s.numpy(), ey.sum(axis=0), rtol=1e-5)
  np.testing.assert_allclose(d.numpy(), ey * ey - ey, rtol=1e-5)
  np.testing.assert_allclose((y + y).numpy(), ey + ey, rtol=1e-5)
  np.testing.assert_allclose(y.numpy(), ey, rtol=1e-5)


def test_realize_then_reuse(device):
  a = make_input((3, 4), np.random.default_rng(0))
  x = Tensor(a, device=device)
  y = (x + 1).realize()
  assert y is not None
  np.testing.assert_allclose(y.numpy(), a + 1)
  np.testing.assert_allclose((y * 2).numpy(), (a + 1) * 2)
  np.testing.assert_allclose((y * 2).numpy(), (a + 1) * 2)  # same graph again
  np.testing.assert_allclose(y.numpy(), a + 1)  # y is unchanged
  np.testing.assert_array_equal(x.numpy(), a)


def test_realize_returns_self_and_numpy_twice(device):
  x = Tensor([1.0, 2.0], device=device) * 3
  assert x.realize() is x
  np.testing.assert_array_equal(x.numpy(), [3.0, 6.0])
  np.testing.assert_array_equal(x.numpy(), [3.0, 6.0])


def test_contiguous(device):
  check(lambda a: a.T.copy(), lambda t: t.transpose().contiguous(), (3, 4), device=device)
  check(lambda a: a.T * 2, lambda t: t.transpose().contiguous() * 2, (3, 4), device=device)


def test_assign(device):
  a = Tensor.zeros((2, 3), device=device).contiguous().realize()
  values = np.arange(6, dtype=np.float32).reshape(2, 3)
  a.assign(Tensor(values, device=device)).realize()
  np.testing.assert_array_equal(a.numpy(), values)
  a.assign(a * 2 + 1).realize()  # the right-hand side reads the old value
  np.testing.assert_array_equal(a.numpy(), values * 2 + 1)
  a.assign(a + 1).realize()
  np.testing.assert_array_equal(a.numpy(), values * 2 + 2)


def test_numpy_of_lazy_graph_on_assigned_tensor(device):
  w = Tensor([1.0, 2.0, 3.0], device=device).contiguous().realize()
  before = (w * 10).numpy()
  w.assign(w - 1).realize()
  np.testing.assert_array_equal(before, [10.0, 20.0, 30.0])
  np.testing.assert_array_equal((w * 10).numpy(), [0.0, 10.0, 20.0])


def test_tolist_and_item(device):
  assert Tensor([[1, 2], [3, 4]], device=device).tolist() == [[1, 2], [3, 4]]
  assert Tensor([True, False], device=device).tolist() == [True, False]
  assert Tensor([0.5, -1.25], device=device).tolist() == [0.5, -1.25]
  assert ((Tensor([[1, 2], [3, 4]], device=device) * 2).tolist()) == [[2, 4], [6, 8]]
  s = Tensor([1.5, 2.0, 0.25], device=device).sum().item()
  assert isinstance(s, float) and s == 3.75
  i = Tensor([[7]], device=device).item()
  assert isinstance(i, int) and i == 7
  b = (Tensor([3], device=device) > 2).item()
  assert b is True


def test_shape_dtype_device_attributes(device):
  t = Tensor(np.zeros((2, 3, 4), np.float32), device=device)
  assert t.shape == (2, 3, 4) and isinstance(t.shape, tuple)
  assert t.dtype == dtypes.float32
  assert same_device(t.device, device)
  assert t.sum(axis=1).shape == (2, 4)
  assert same_device(t.sum(axis=1).device, device)


def test_to_device_roundtrip(device):
  a = make_input((3, 4), np.random.default_rng(0))
  t = Tensor(a, device=device)
  moved = (t * 2).to(device)
  assert same_device(moved.device, device)
  np.testing.assert_array_equal(moved.numpy(), a * 2)
  back = moved.to(t.device) + 1
  np.testing.assert_array_equal(back.numpy(), a * 2 + 1)


# --------------------------------------------------------------------------------------------
# errors: raised when the op is called, not at realize
# --------------------------------------------------------------------------------------------


def test_broadcast_shape_mismatch_raises(device):
  a, b = Tensor.zeros((2, 3), device=device), Tensor.zeros((4,), device=device)
  with pytest.raises(ValueError):
    a + b
  with pytest.raises(ValueError):
    a.maximum(Tensor.zeros((3, 2), device=device))


def test_matmul_shape_mismatch_raises(device):
  with pytest.raises(ValueError):
    Tensor.zeros((2, 3), device=device) @ Tensor.zeros((4, 5), device=device)
  with pytest.raises(ValueError):
    Tensor.zeros((3,), device=device) @ Tensor.zeros((4,), device=device)


def test_reshape_wrong_size_raises(device):
  with pytest.raises(ValueError):
    Tensor.zeros((2, 3), device=device).reshape(4)
  with pytest.raises(ValueError):
    Tensor.zeros((2, 3), device=device).reshape(4, -1)


@pytest.mark.parametrize("op", [
  lambda t: t.sum(axis=2), lambda t: t.sum(axis=-3), lambda t: t.max(axis=5), lambda t: t.mean(axis=(0, 2)),
  lambda t: t.argmax(axis=2), lambda t: t.softmax(axis=2), lambda t: t.flip(2),
  lambda t: t.unsqueeze(4), lambda t: t.cat(t, dim=2), lambda t: t.transpose(0, 2),
], ids=["sum", "sum_neg", "max", "mean_tuple", "argmax", "softmax", "flip", "unsqueeze", "cat", "transpose"])
def test_axis_out_of_range_raises(device, op):
  with pytest.raises(IndexError):
    op(Tensor.zeros((2, 3), device=device))


def test_unknown_dtype_raises(device):
  with pytest.raises((TypeError, ValueError)):
    Tensor([1, 2], dtype="float33", device=device)
  with pytest.raises((TypeError, ValueError)):
    Tensor([1.0], device=device).cast("no_such_dtype")


# --------------------------------------------------------------------------------------------
# tinygrad 0.14's wider API: indexing, scans, sorting, selection, pad modes, pooling options
# (each builds on the ops above, so a device that passes those should pass these too)
# --------------------------------------------------------------------------------------------


def test_advanced_indexing_read_write(device):
  x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  check(lambda a: a[[1, 0], :, [3, 1]], lambda t: t[[1, 0], :, [3, 1]], x, device=device)
  idx = np.array([[2], [0]])
  check(lambda a: a[:, idx, 1:], lambda t: t[:, Tensor(idx, device=device), 1:], x, device=device)
  check(lambda a: a[a[:, :, 0] > 5], lambda t: t[t[:, :, 0] > 5], x, device=device)
  t = Tensor(x, device=device).realize()
  t[:, 1, ::2] = -1.0
  t[[0, 1], [2, 0]] = Tensor([7.0, 8.0, 9.0, 10.0], device=device)
  want = x.copy()
  want[:, 1, ::2] = -1.0
  want[[0, 1], [2, 0]] = [7.0, 8.0, 9.0, 10.0]
  np.testing.assert_array_equal(t.numpy(), want)


def test_scans(device):
  check(lambda a: np.cumsum(a, 1), lambda t: t.cumsum(1), (3, 7), device=device, atol=1e-5)
  check(lambda a: np.cumprod(a, 0), lambda t: t.cumprod(0), (4, 3), device=device, low=0.5, high=1.5)
  check(lambda a: np.maximum.accumulate(a, 1), lambda t: t.cummax(1)[0], (3, 6), device=device)
  check(lambda a: np.cumsum(a, 0), lambda t: t.cumsum(0), (600,), device=device, dtype=np.int32, low=-5, high=5)


def test_sort_topk(device):
  check(lambda a: np.sort(a, 1), lambda t: t.sort(1)[0], (3, 9), device=device)
  check(lambda a: np.argsort(a, 0, kind="stable"), lambda t: t.argsort(0), (7, 2), device=device, dtype=np.int32,
        low=0, high=3, check_kind=False)
  check(lambda a: -np.sort(-a, 1)[:, :2], lambda t: t.topk(2, 1)[0], (4, 5), device=device)


def test_gather_scatter_select(device):
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  idx = np.array([[3, 0], [1, 1], [0, 2]])
  check(lambda a: np.take_along_axis(a, idx, 1), lambda t: t.gather(1, Tensor(idx, device=device)), x, device=device)
  want = x.copy()
  np.put_along_axis(want, idx, -1.0, 1)
  check(lambda a: want, lambda t: t.scatter(1, Tensor(idx, device=device), -1.0), x, device=device)
  check(lambda a: a[a > 4.5], lambda t: t.masked_select(t > 4.5), x, device=device)
  check(np.argwhere, Tensor.nonzero, (x % 3 == 0).astype(np.int32), device=device, check_kind=False)


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
def test_pad_modes(device, mode, np_mode):
  check(lambda a: np.pad(a, ((0, 0), (2, 1), (1, 3)), mode=np_mode), lambda t: t.pad((1, 3, 2, 1), mode=mode),
        (2, 4, 5), device=device)


def test_pool_options(device):
  x = np.random.default_rng(0).uniform(-1, 1, (1, 1, 5, 5)).astype(np.float32)
  # 3x3 windows, stride 2, padding 1: windows at -1, 1, 3 along each axis
  padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  want = np.array([[padded[0, 0, i:i + 3, j:j + 3].max() for j in (0, 2, 4)] for i in (0, 2, 4)])[None, None]
  check(lambda a: want, lambda t: t.max_pool2d(3, 2, padding=1), x, device=device)
  ones = np.pad(np.ones((5, 5)), 1)
  sums = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  avg = np.array([[sums[0, 0, i:i + 3, j:j + 3].sum() / ones[i:i + 3, j:j + 3].sum() for j in (0, 2, 4)]
                  for i in (0, 2, 4)])
  check(lambda a: avg[None, None], lambda t: t.avg_pool2d(3, 2, padding=1, count_include_pad=False), x, device=device,
        atol=1e-6)


def test_einsum(device):
  check(lambda a, b: np.einsum("bij,bkj->bik", a, b), lambda a, b: Tensor.einsum("bij,bkj->bik", a, b),
        (2, 3, 4), (2, 5, 4), device=device, atol=1e-5)
  check(lambda a: np.einsum("ii->i", a), lambda a: Tensor.einsum("ii->i", a), (4, 4), device=device)


def test_special_functions(device):
  erf = np.vectorize(math.erf, otypes=[np.float32])
  check(erf, Tensor.erf, (3, 5), device=device, low=-3, high=3, atol=2e-6)
  check(np.arctan, Tensor.atan, (3, 5), device=device, low=-20, high=20, atol=1e-6)
  check(np.arcsinh, Tensor.asinh, (3, 5), device=device, low=-20, high=20, atol=1e-6)
  check(np.round, Tensor.round, np.array([0.5, 1.5, 2.5, -0.5, -1.7, 3.2], np.float32), device=device)


def test_selection_every_declared_dtype(device):
  # advanced indexing and gather (one-hot reductions), sort (rank counting) and cummax keep the values of
  # every dtype the device declares (small values every dtype holds exactly); one realize per dtype,
  # compared after widening to a common float
  declared = sorted(get_registry().device(device).caps.dtypes, key=lambda d: d.name)
  common = dtypes.float64 if dtypes.float64 in declared else dtypes.float32
  base = np.array([[3, 0, 5, 1], [2, 7, 2, 4], [6, 1, 0, 3]])
  idx = np.array([[2, 0, 1, 2]])
  for dt in declared:
    x = base % 2 if dt == dtypes.bool else base
    t = Tensor(x.tolist(), dtype=dt, device=device)
    cases = [(t[[2, 0], 1:], x[[2, 0], 1:]), (t.gather(0, Tensor(idx, device=device)), np.take_along_axis(x, idx, 0))]
    if dt != dtypes.bool: cases += [(t.sort(1)[0], np.sort(x, 1)), (t.cummax(1)[0], np.maximum.accumulate(x, 1))]
    got = Tensor.cat(*[g.cast(common).flatten() for g, _ in cases]).numpy()
    want = np.concatenate([np.asarray(w, dtype=np.float64).flatten() for _, w in cases])
    np.testing.assert_array_equal(got, want, err_msg=dt.name)
