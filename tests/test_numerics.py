"""No silent wrong answers: accumulation accuracy, sum dtypes, `//` and `%`, special values (NaN,
inf, -0.0) and Python int conversion, each checked against torch's own result."""
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from plugrad import Device, Tensor, dtypes
from plugrad.codegen.lowerer import ACC_BLOCK, lower
from plugrad.device import Capabilities
from plugrad.registry import get_registry
from plugrad.testing import available_devices, run_lowered
from plugrad.uops import Ops

# every class of float: signed zeros, infinities, NaN, tiny, huge, exact and inexact fractions
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0, 5.0, 0.2, -0.2, 7.5, 100.0, -100.0, 1e-30, -1e-30,
           1e30, -1e30, 1e-45, math.inf, -math.inf, math.nan]
TORCH_DTYPES = {name: getattr(torch, name) for name in ("float16", "bfloat16", "float32", "float64", "bool", "int8", "int16",
                                                       "int32", "int64", "uint8", "uint16", "uint32", "uint64")}


def pairs(values, dtype=np.float32):
  """Every (a, b) combination of `values` as two flat arrays."""
  a = np.array([x for x in values for _ in values], dtype)
  b = np.array([y for _ in values for y in values], dtype)
  return a, b


def to_torch(arr: np.ndarray, dtype: str) -> torch.Tensor: return torch.tensor(arr).to(TORCH_DTYPES[dtype])


def assert_same_values(got: np.ndarray, want: np.ndarray, inputs: tuple, rtol: float = 0.0) -> None:
  """Equal values including the sign of zeros (NaN equals NaN); with rtol, close values but still the same
  infinities, NaNs and zero signs."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  assert got.shape == want.shape
  if rtol == 0: ok = (got == want) & (np.signbit(got) == np.signbit(want))
  else:
    with np.errstate(invalid="ignore"):  # inf - inf in the closeness test; infinities are compared below
      ok = np.isclose(got, want, rtol=rtol, atol=0) | (np.abs(got - want) <= rtol * 1e-3)
    ok &= (np.isinf(got) == np.isinf(want)) & ((want != 0) | (np.signbit(got) == np.signbit(want)))
  ok |= np.isnan(got) & np.isnan(want)
  bad = np.nonzero(~ok)[0]
  rows = [f"inputs {tuple(float(x[i]) for x in inputs)}: got {got[i]!r}, torch {want[i]!r}" for i in bad[:8]]
  assert not len(bad), f"{len(bad)} values differ from torch:\n" + "\n".join(rows)


# ---------------------------------------------------------------- accumulation


def accumulator_trip_counts(prog) -> list[int]:
  """For every float ADD accumulator: how many values it adds (the trip counts of the loops opened between its
  definition and its update)."""
  open_loops, defined_at, counts = [], {}, []
  for u in prog.uops:
    if u.op is Ops.RANGE: open_loops.append(u.src[0].arg)
    elif u.op is Ops.ENDRANGE: open_loops.pop()
    elif u.op is Ops.DEFINE_ACC: defined_at[u] = len(open_loops)
    elif u.op is Ops.ACCUMULATE and u.arg is Ops.ADD and u.dtype.scalar().is_float:
      counts.append(math.prod(open_loops[defined_at[u.src[0]]:]))
  return counts


CPU_LIKE = Capabilities(launch_dims=0)
GPU_LIKE = Capabilities(launch_dims=3, max_local_size=(1024, 1024, 64), max_workgroup_threads=1024,
                        local_memory=48 * 1024)


@pytest.mark.parametrize("caps", [CPU_LIKE, GPU_LIKE], ids=["loops", "gpu"])
@pytest.mark.parametrize("build", [
  lambda x: x.reshape(-1)[:37].sum(),                          # 37: no divisor, the last block is gated
  lambda x: x.reshape(-1)[:48].sum(),                          # 48 = 3 x 16
  lambda x: x.reshape(-1).sum(),                               # 1200: three levels
  lambda x: x.reshape(10, 120).exp().sum(1),                   # exp(0) is 1: a gated tail must add 0, not exp(0)
  lambda x: x.reshape(3, 4, 100).sum((0, 2)),                  # several reduce axes grouped into accumulators
  lambda x: x.reshape(40, 30).pad(((0, 0), (5, 6))).sum(1),   # pad validity and block gating together
  lambda x: x.reshape(30, 40) @ x.reshape(40, 30),             # matmul, K = 40 (register tiles on loops devices)
], ids=["gated", "exact", "levels", "exp", "axes", "pad", "matmul"])
def test_cascaded_sums_match_numpy(caps, build):
  x = np.random.default_rng(0).standard_normal(1200).astype(np.float32)
  got, progs = run_lowered(build(Tensor(x, device="PYTHON")), caps, acc_block=16)
  want = build(Tensor(x, device="PYTHON")).numpy()  # default lowering: these sums are short enough for one accumulator
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
  counts = [c for p in progs for c in accumulator_trip_counts(p)]
  assert counts and max(counts) <= 16, f"an accumulator adds {max(counts)} values, more than the block of 16"


def test_long_float_sum_uses_short_accumulators():
  x = Tensor.empty(3, 10**6 + 3, device="PYTHON")  # 1000003 is prime: no block divides it
  for item in x.sum(1).schedule():
    counts = accumulator_trip_counts(lower(item.ast, get_registry().device("PYTHON").caps))
    assert len(counts) >= 2 and max(counts) <= ACC_BLOCK


def test_half_accumulator_holds_more_than_2048(device):
  # a float16 accumulator stops at 2048 (2049 is not a half); torch accumulates halves in float32
  assert Tensor.ones(5000, dtype=dtypes.float16, device=device).sum(dtype=dtypes.float16).item() == 5000
  assert Tensor.ones(100_000, dtype=dtypes.float16, device=device).mean().item() == 1.0  # the sum passes 65504
  assert Tensor.full((70_000,), 3.0, dtype=dtypes.bfloat16, device=device).var().item() == 0.0


def test_sum_of_a_broadcast_constant_is_exact(device):
  # a constant broadcast to any size reduces to c * n, rounded once, without a kernel
  assert Tensor.ones(10**12, device=device).sum().item() == np.float32(1e12)
  assert Tensor.full((3, 10**9), 0.1, device=device).sum(1).tolist() == [np.float32(0.1 * 10**9)] * 3
  assert Tensor.full((300,), 1, dtype=dtypes.int8, device=device).sum(dtype=dtypes.int8).item() == 44  # wraps
  assert Tensor.ones(3, 10**6, dtype=dtypes.float16, device=device).sum(1).tolist() == [math.inf] * 3  # as torch


@pytest.mark.skipif("CPU" not in available_devices(), reason="needs the CPU device (plugrad-cpu-llvm and llvmlite)")
def test_long_sum_of_a_buffer_is_exact():
  # float32 partial sums stop growing at 2**24; the accumulator cascade keeps every level exact (128 MB of ones,
  # whose length 5 * 6710887 the split reduction cannot cut into chunks)
  assert Tensor.ones(2**25 + 3, device="CPU").contiguous().sum().item() == np.float32(2**25 + 3)


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
def test_sum_and_prod_dtypes_follow_torch(device, dtype):
  x = np.array([1, 0, 1, 1], dtype=np.float32)
  t, ref = Tensor(x, device=device).cast(dtype), to_torch(x, dtype)
  for op in ("sum", "prod"):
    assert getattr(t, op)().dtype.name == str(getattr(ref, op)().dtype).removeprefix("torch.")
    assert getattr(t, op)(dtype=dtypes.int8).dtype == dtypes.int8


def test_int_sums_accumulate_in_int64(device):
  big = Tensor([2**31 - 1] * 4, dtype=dtypes.int32, device=device)
  assert big.sum().item() == 4 * (2**31 - 1)
  assert Tensor([200] * 3, dtype=dtypes.uint8, device=device).sum().item() == 600
  # sum(dtype=) casts first and sums in that type (wrapping, as torch); a matmul keeps its dtype
  assert Tensor([100, 100, 100], dtype=dtypes.int8, device=device).sum(dtype=dtypes.int8).item() == 44
  assert (big.reshape(2, 2) @ Tensor([[1], [1]], dtype=dtypes.int32, device=device)).dtype == dtypes.int32


# ---------------------------------------------------------------- // and %


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("op", ["floordiv", "mod"])
def test_float_floordiv_and_mod_equal_torch(device, dtype, op):
  a, b = pairs(SPECIAL)
  f = (lambda x, y: x // y) if op == "floordiv" else (lambda x, y: x % y)
  # torch element by element: its vectorised CPU loop gives NaN for 1 % 1e-45 (a/b overflows) where its scalar
  # code, the definition the vector code approximates, gives the exact 0
  ta, tb = to_torch(a, dtype), to_torch(b, dtype)
  want = np.array([f(ta[i:i + 1], tb[i:i + 1]).item() for i in range(len(a))])
  got = f(Tensor(a, device=device).cast(dtype), Tensor(b, device=device).cast(dtype)).cast(dtypes.float64).numpy()
  assert_same_values(got, want, (a, b))


def test_float_floordiv_examples(device):
  x = Tensor([5.0, math.inf, 1.0, -1.0, -1.0], device=device)
  y = Tensor([0.2, 2.0, math.inf, math.inf, 2.0], device=device)
  np.testing.assert_array_equal((x // y).numpy(), np.float32([24, math.nan, 0, -1, -1]))
  np.testing.assert_allclose((x % y).numpy(), np.float32([0.2, math.nan, 1, math.inf, 1]), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])  # the integer types torch divides
def test_int_floordiv_and_mod_equal_torch(device, dtype):
  info = np.iinfo(dtype)
  values = [0, 1, 2, 7, 100, info.max, info.max - 1] + ([-1, -2, -7, -100, info.min, info.min + 1] if info.min else [])
  a, b = pairs(values, np.dtype(dtype))
  nz = b != 0
  ta, tb = torch.tensor(a[nz]), torch.tensor(b[nz])
  pa, pb = Tensor(a, device=device), Tensor(b, device=device)
  np.testing.assert_array_equal((pa // pb).numpy()[nz], (ta // tb).numpy())
  np.testing.assert_array_equal((pa % pb).numpy()[nz], (ta % tb).numpy())
  # integer x // 0 and x % 0 are 0 (numpy's answer; torch raises), never a trap
  assert not (pa // pb).numpy()[~nz].any() and not (pa % pb).numpy()[~nz].any()


# ---------------------------------------------------------------- special values in elementwise ops


UNARY = {  # name: (plugrad, torch, rtol); rtol 0 means the same bits (up to NaN payloads)
  "neg": (Tensor.neg, torch.neg, 0), "abs": (Tensor.abs, torch.abs, 0), "sign": (Tensor.sign, torch.sign, 0),
  "relu": (Tensor.relu, torch.relu, 0), "trunc": (Tensor.trunc, torch.trunc, 0),
  "floor": (Tensor.floor, torch.floor, 0),
  "ceil": (Tensor.ceil, torch.ceil, 0), "square": (Tensor.square, torch.square, 0),
  "reciprocal": (Tensor.reciprocal, torch.reciprocal, 0), "sqrt": (Tensor.sqrt, torch.sqrt, 1e-6),
  "exp": (Tensor.exp, torch.exp, 1e-5), "log": (Tensor.log, torch.log, 1e-5), "log2": (Tensor.log2, torch.log2, 1e-5),
  "sin": (Tensor.sin, torch.sin, 1e-5), "cos": (Tensor.cos, torch.cos, 1e-5), "tan": (Tensor.tan, torch.tan, 1e-5),
  "sigmoid": (Tensor.sigmoid, torch.sigmoid, 1e-5), "tanh": (Tensor.tanh, torch.tanh, 1e-5),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_special_values_equal_torch(device, name):
  fn, ref, rtol = UNARY[name]
  x = np.array(SPECIAL + [np.pi / 2, 3 * np.pi / 2, 4000.3, -1e-6], np.float32)
  assert_same_values(fn(Tensor(x, device=device)).numpy(), ref(torch.tensor(x)).numpy(), (x,), rtol)


def test_tanh_is_within_two_ulp_everywhere_and_its_gradient_is_torchs(device):
  # 2 sigmoid(2x) - 1 cancelled for small x (900 ulps of error at 0.001, 15 at 0.5): a polynomial below 0.625
  mags = np.concatenate([np.geomspace(1e-8, 20, 20000), np.linspace(0.6, 0.65, 2001)]).astype(np.float32)
  x = np.concatenate([mags, -mags])
  got, want = Tensor(x, device=device).tanh().numpy(), np.tanh(x.astype(np.float64))
  ulp = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
  assert ulp.max() <= 2, (ulp.max(), x[ulp.argmax()])
  xs = np.array([-60, -3, -0.5, -1e-3, 0, 0.3, 0.62, 0.63, 2, 60], np.float32)
  t, tt = Tensor(xs, device=device, requires_grad=True), torch.tensor(xs, requires_grad=True)
  t.tanh().sum().backward()
  torch.tanh(tt).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_log1p_based_functions_keep_their_digits(device):
  # log(1 + e^-|x|) lost what 1 + e^-|x| rounded away: softplus had relative errors of 6e-4 near x = -9
  x = np.linspace(-30, 30, 60001, dtype=np.float32)
  xd = x.astype(np.float64)
  for got, want in [(Tensor(x, device=device).softplus(), np.logaddexp(0, xd)),
                    (Tensor(x, device=device).logsigmoid(), -np.logaddexp(0, -xd)),
                    (Tensor(x, device=device).logaddexp(Tensor(x[::-1].copy(), device=device)), np.logaddexp(xd, xd[::-1])),
                    (Tensor(x, device=device).mish(), xd * np.tanh(np.logaddexp(0, xd)))]:
    np.testing.assert_allclose(got.numpy(), want, rtol=4e-6, atol=1e-30)
  t, tt = Tensor(x[::500], device=device, requires_grad=True), torch.tensor(x[::500], requires_grad=True)
  t.softplus().sum().backward()
  torch.nn.functional.softplus(tt).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-6, atol=1e-12)


def test_hyperbolic_functions_keep_their_digits(device):
  # sinh and cosh took exp(|x| - ln 2), whose argument rounded (10 ulps at |x| = 10, more further out); asinh, acosh
  # and atanh took log of a value near 1 (15, 8 and 8 ulps): now log1p of what exceeds 1
  x = np.concatenate([np.linspace(-89.4, 89.4, 40001), np.geomspace(1e-6, 2, 5000)]).astype(np.float32)
  xd = x.astype(np.float64)
  u = np.linspace(-0.999, 0.999, 20001, dtype=np.float32)
  c = 1 + np.abs(x)  # acosh's domain, from 1 on
  for got, want, rtol in [(Tensor(x, device=device).sinh(), np.sinh(xd), 4e-7),
                          (Tensor(x, device=device).cosh(), np.cosh(xd), 4e-7),
                          (Tensor(x * 1000, device=device).asinh(), np.arcsinh(xd * 1000), 4e-7),
                          (Tensor(u, device=device).atanh(), np.arctanh(u.astype(np.float64)), 4e-7),
                          (Tensor(c, device=device).acosh(), np.arccosh(c.astype(np.float64)), 4e-7)]:
    if device != "CPU": rtol = max(rtol, 8e-6)  # exp2 of the rounded x log2 e: |x| ulps at most (the CPU reduces x)
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=0)
  # past 1.7e38, 2|x| overflowed: log|x| + ln 2
  huge = np.array([3.4e38, -3.4e38, 1e30], np.float32)
  np.testing.assert_allclose(Tensor(huge, device=device).asinh().numpy(), np.arcsinh(huge.astype(np.float64)), rtol=4e-7)
  np.testing.assert_allclose(Tensor(huge[[0, 2]], device=device).acosh().numpy(), np.arccosh(huge[[0, 2]].astype(np.float64)),
                             rtol=4e-7)
  # the gradients are torch's up to where the functions overflow (89.4): no inf or NaN from a branch not taken
  xs = np.array([-89.3, -50, -3, -0.4, 0, 0.3, 0.6, 2, 87.9, 88.1, 89.3, 90], np.float32)
  for name in ("sinh", "cosh"):
    t, tt = Tensor(xs, device=device, requires_grad=True), torch.tensor(xs, requires_grad=True)
    getattr(t, name)().sum().backward()
    getattr(torch, name)(tt).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=4e-7 if device == "CPU" else 8e-6)


def test_square_roots_by_pow_are_torchs(device):
  # x ** 0.5 and x ** -0.5 are sqrt and 1 / sqrt, as torch's: exp2(0.5 log2 x) was off by up to 4 ulps, and gave
  # IEEE pow's +0.0 and inf at -0.0 and -inf where torch gives -0.0 and NaN
  x = np.array([-0.0, 0.0, -np.inf, np.inf, -1.0, 4.0, np.nan, 2.0, 1e-40, 3e38], np.float32)
  for e in (0.5, -0.5):
    got, want = (Tensor(x, device=device) ** e).numpy(), (torch.from_numpy(x) ** e).numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1.2e-7)
    assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok]))
  y = np.geomspace(1e-30, 1e30, 20001, dtype=np.float32)
  got, want = (Tensor(y, device=device) ** 0.5).numpy(), np.sqrt(y.astype(np.float64))
  assert (np.abs(got - want) / np.spacing(want.astype(np.float32))).max() <= 0.5


def test_relu_gradient_at_special_values_equals_torch(device):
  # 0 where the output is ±0, the incoming gradient elsewhere: NaN inputs pass it on, as torch's threshold_backward
  x = np.array(SPECIAL, np.float32)
  for g in (1.0, -2.5, np.inf, np.nan):
    grad = np.full_like(x, g)
    t = Tensor(x, device=device, requires_grad=True)
    t.relu().backward(Tensor(grad, device=device))
    tt = torch.tensor(x, requires_grad=True)
    torch.relu(tt).backward(torch.tensor(grad))
    assert_same_values(t.grad.numpy(), tt.grad.numpy(), (x,), 0)


BINARY = {
  "add": (Tensor.add, torch.add), "sub": (Tensor.sub, torch.sub), "mul": (Tensor.mul, torch.mul),
  "div": (Tensor.div, torch.div), "maximum": (Tensor.maximum, torch.maximum),
  "minimum": (Tensor.minimum, torch.minimum),
  "lt": (Tensor.__lt__, torch.lt), "gt": (Tensor.__gt__, torch.gt), "le": (Tensor.__le__, torch.le),
  "ge": (Tensor.__ge__, torch.ge), "eq": (Tensor.__eq__, torch.eq), "ne": (Tensor.__ne__, torch.ne),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_special_values_equal_torch(device, name):
  fn, ref = BINARY[name]
  a, b = pairs(SPECIAL)
  if name in ("maximum", "minimum"):  # which zero max(-0.0, 0.0) returns is the operand order's, in torch too
    keep = ~((a == 0) & (b == 0))
    a, b = a[keep], b[keep]
  want = ref(torch.tensor(a), torch.tensor(b)).numpy()
  assert_same_values(fn(Tensor(a, device=device), Tensor(b, device=device)).numpy(), want, (a, b))


# ---------------------------------------------------------------- Python ints


@pytest.mark.parametrize("make", [
  lambda: Tensor([1], dtype=dtypes.int64, device="PYTHON") + 2**64,
  lambda: Tensor([1], dtype=dtypes.int64, device="PYTHON") - (-2**63 - 1),
  lambda: Tensor([1.0], device="PYTHON") * 2**70,
  lambda: Tensor(2**64, device="PYTHON"),
  lambda: Tensor([[1, 2], [3, 2**64]], dtype=dtypes.uint64, device="PYTHON"),
  lambda: Tensor.full((2,), 2**70, device="PYTHON"),
  lambda: Tensor([1], device="PYTHON").pad(((1, 1),), value=2**65),
], ids=["add", "sub", "float-mul", "scalar", "list", "full", "pad"])
def test_ints_beyond_64_bits_raise_overflow_error(make):
  with pytest.raises(OverflowError, match="64 bits"):
    make()


def test_ints_within_64_bits_wrap_like_torch(device):
  one = torch.tensor([1], dtype=torch.int64)
  assert (Tensor([1], dtype=dtypes.int64, device=device) + 2**63).tolist() == (one + 2**63).tolist()
  assert (Tensor([1], dtype=dtypes.int64, device=device) + (2**64 - 1)).tolist() == (one + (2**64 - 1)).tolist()
  small = torch.tensor([1], dtype=torch.int8)
  assert (Tensor([1], dtype=dtypes.int8, device=device) + 300).tolist() == (small + 300).tolist()
  assert (Tensor([1], dtype=dtypes.uint8, device=device) - 2).tolist() == [255]
  assert Tensor([300, -1], dtype=dtypes.int8, device=device).tolist() == [44, -1]
  assert Tensor([2**63 + 5], dtype=dtypes.uint64, device=device).tolist() == [2**63 + 5]


def test_python_ints_past_int32_make_a_64_bit_tensor_when_no_dtype_is_given(device):
  # they wrapped into the default int32: Tensor([2**40, 1]) was [0, 1], Tensor.full((2,), 2**40) [0, 0]
  for data, dt in [([2**40, 1], dtypes.int64), ([[1, -2**40]], dtypes.int64), ([2**63, 5], dtypes.uint64),
                   (2**40, dtypes.int64), ([1, 2], dtypes.int32)]:
    t = Tensor(data, device=device)
    assert t.dtype == dt and t.tolist() == data
  assert Tensor.full((2,), 2**40, device=device).tolist() == [2**40] * 2
  assert Tensor([2**40], dtype=dtypes.int32, device=device).tolist() == [0]  # a dtype given: they wrap into it
  with pytest.raises(OverflowError, match="no 64-bit"): Tensor([-1, 2**63], device=device)


@pytest.mark.parametrize("src", ["float32", "float64"])
def test_floats_to_uint64_convert_their_upper_half_exactly(device, src):
  # they went through int64, whose range ends at 2**63: 1.8e19 became 2**63. Negatives and values from 2**64 on are
  # undefined in C (a C renderer's device may differ): the host devices wrap the first through int64 and give 0 for
  # the others, as torch and numpy
  host = [-1.0, -3.7, 2e19, 1e30] if device in ("CPU", "PYTHON") else []
  x = np.array([1.8e19, 2.0**63, 9.2e18, 3.7] + host, src)
  want = torch.from_numpy(x).to(torch.uint64).tolist()
  assert Tensor(x, device=device).cast(dtypes.uint64).tolist() == want


@pytest.mark.parametrize("dtype,rtol", [("float16", 2e-3), ("bfloat16", 1.6e-2)])  # about one unit in the last place
@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sigmoid", "reciprocal",
                                  "sinh", "cosh", "asinh", "acosh", "atanh", "selu", "hardswish", "atan", "asin",
                                  "acos"])
def test_half_math_rounds_once_like_torch(device, dtype, rtol, name):
  # torch computes halves in float32 and rounds the result once; a half x / ln 2 alone is already off by 0.5%, and
  # in half, sinh(11.5) and asinh(300) overflowed inside (a^2) and hardswish(2e4) in x * 6
  x = np.concatenate([np.linspace(-10, 10, 401), np.linspace(0.01, 60000, 100), [-0.01, 1e-3, 11.5, -11.5, 300]])
  x = x.astype(np.float32)
  tx = torch.tensor(x).to(TORCH_DTYPES[dtype])
  want = (getattr(torch, name, None) or getattr(torch.nn.functional, name))(tx).float().numpy()
  out = getattr(Tensor(tx.float().numpy(), device=device).cast(dtype), name)()
  assert out.dtype == getattr(dtypes, dtype)  # atan, asin and acos came back float32
  got = out.cast(dtypes.float32).numpy()
  ok = np.isclose(got, want, rtol=rtol, atol=1e-3) | (np.isnan(got) & np.isnan(want)) | (got == want)
  assert ok.all(), f"{name} differs from torch at {tx.float().numpy()[~ok][:5]}: {got[~ok][:5]} vs {want[~ok][:5]}"


@pytest.mark.parametrize("dtype,rtol", [("float16", 2e-3), ("bfloat16", 1.6e-2)])
def test_half_pow_is_half_and_rounds_once_like_torch(device, dtype, rtol):
  # it came back float32 (the special values' constants promoted it)
  a = np.abs(np.linspace(-3, 3, 61, dtype=np.float32)) + 0.01
  b = np.linspace(-2.5, 2.5, 61, dtype=np.float32)
  ta, tb = (torch.from_numpy(v).to(TORCH_DTYPES[dtype]) for v in (a, b))
  for got, want in [(Tensor(a, device=device).cast(dtype) ** Tensor(b, device=device).cast(dtype), ta ** tb),
                    (Tensor(a, device=device).cast(dtype) ** 2.5, ta ** 2.5)]:
    assert got.dtype == getattr(dtypes, dtype)
    np.testing.assert_allclose(got.cast(dtypes.float32).numpy(), want.float().numpy(), rtol=rtol, atol=1e-3)


@pytest.mark.parametrize("caps", [CPU_LIKE, GPU_LIKE], ids=["loops", "gpu"])
def test_cos_on_a_renderer_without_cos_is_made_of_sins(caps):
  # COS is an optional op: a device whose Capabilities do not list it never sees one, and gets cos from three sins
  # that never round x (sin(pi/2 - x) lost every digit of a large x); halves compute in float32
  x = np.concatenate([np.random.default_rng(5).standard_normal(61) * 30,
                      [0.0, -0.0, 1e-8, np.pi / 2, 4000.3, -1e4 - 0.7, 3e7, np.inf, -np.inf, np.nan]]).astype(np.float32)
  got, progs = run_lowered(Tensor(x, device="PYTHON").cos(), caps)
  ops = [u.op for p in progs for u in p.uops]
  assert Ops.COS not in ops and ops.count(Ops.SIN) == 3, ops
  finite = np.isfinite(x)
  np.testing.assert_allclose(got[finite], np.cos(x[finite].astype(np.float64)), rtol=1e-6, atol=1e-7)
  assert np.isnan(got[~finite]).all()
  got16, _ = run_lowered(Tensor(x[finite][:64].astype(np.float16), device="PYTHON").cos(), caps)
  assert got16.dtype == np.float16
  np.testing.assert_allclose(got16, np.cos(x[finite][:64].astype(np.float16).astype(np.float64)), rtol=1e-3, atol=1e-3)
  # a device that lists it renders it as it is
  _, progs = run_lowered(Tensor(x, device="PYTHON").cos(), replace(caps, optional_ops=frozenset({"COS"})))
  ops = [u.op for p in progs for u in p.uops]
  assert Ops.COS in ops and Ops.SIN not in ops


def test_capabilities_refuse_an_optional_op_plugrad_does_not_know():
  with pytest.raises(ValueError, match="TAN, which plugrad does not know; the optional ops are COS"):
    Capabilities(optional_ops=frozenset({"TAN", "COS"}))


def test_half_matmul_and_composites_round_once_as_torch():
  # products rounded to a half each before the float32 sum left 114 of 256 outputs off the correctly rounded value;
  # softmax, silu and gelu rounded after each step (2344, 1023 and 1402 of 4096 off torch's)
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((16, 256)).astype(np.float16), rng.standard_normal((256, 16)).astype(np.float16)
  exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
  got = (Tensor(a) @ Tensor(b)).numpy()
  if get_registry().device(Device.DEFAULT).caps.tensor_cores:
    # on tensor cores the float32 sum is the hardware's, as cuBLAS's is (an H200 left 1 of 256 one unit off)
    ulps = np.abs(got.view(np.int16).astype(np.int32) - exact.view(np.int16).astype(np.int32))
    assert ulps.max() <= 1 and (ulps > 0).sum() <= 4
  else: np.testing.assert_array_equal(got, exact)
  x = rng.standard_normal((64, 64)).astype(np.float16)
  for ours, theirs in [(Tensor.softmax, torch.softmax), (Tensor.silu, torch.nn.functional.silu),
                       (Tensor.mish, torch.nn.functional.mish)]:
    got = ours(Tensor(x), -1) if ours is Tensor.softmax else ours(Tensor(x))
    want = theirs(torch.from_numpy(x), -1) if theirs is torch.softmax else theirs(torch.from_numpy(x))
    # a float32 step one unit off torch's may still flip a rare rounding
    assert got.dtype == dtypes.float16 and (got.numpy() != want.numpy()).sum() <= 4
  wide = x.astype(np.float64) - x.astype(np.float64).max(-1, keepdims=True)
  exact = (wide - np.log(np.exp(wide).sum(-1, keepdims=True))).astype(np.float16)
  assert (Tensor(x).log_softmax(-1).numpy() != exact).sum() <= 4  # torch's: hundreds of 4096 off
  assert Tensor(x).softmax(-1, dtype="float32").dtype == dtypes.float32
