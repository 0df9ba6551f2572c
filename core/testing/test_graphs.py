"""The differential fuzzer: random small tensor graphs over every dtype, compared against numpy.

Hypothesis draws a short program (at most 5 steps) over 1-3 inputs of random dtypes (bool, every
signed and unsigned integer, float16, bfloat16, float32, float64; those the device supports). Each
step applies one op to nodes built so far: elementwise arithmetic with broadcasting between any two
nodes (torch's type promotion), comparisons, `where`, unary math, `//` and `%`, bitwise ops,
casts to any dtype, reductions (sum/max/min, prod on integers, over a random axis, keepdim random),
running sums, matmul, concatenation, the movement ops (permute, reshape, expand, pad, shrink, flip,
indexing with steps and ints) and realizes in the middle. Every node is a pair (numpy array, Tensor)
built in lockstep, so any node can be compared at the end. Nodes are reused freely, which gives shared
subexpressions and diamonds in the graph.

The numpy side computes what plugrad defines: each op in its result dtype (float16 in float16,
bfloat16 in float32 rounded to bfloat16 after every op), integers wrapping, sums of integers in
int64 and of halves in float32, float -> int casts truncating. Integer and bool results must be
equal; float results close, within a tolerance for the dtype that grows with the largest magnitude
in the graph (cancellation). Discontinuous ops (`where`, comparisons, float -> int casts) only read
"exact" nodes, whose values cannot differ by a rounding between numpy and plugrad (input copies,
integer arithmetic, max/min/neg/abs/relu of exact values, exact casts), so a rounding can never flip
a branch; float values headed for an integer cast are cleared of NaN and clipped into range first.

The normal run draws 60 graphs per device (a few seconds on PYTHON and CPU); `--fuzz-long` (a
nightly profile) draws 3000 per device from a random seed, up to 8 steps and 1024 elements. The
KERNELS profile (tests/test_random_graphs.py, for the core's codegen) draws kernel-sized programs.
"""

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plugrad import Tensor, dtypes
from plugrad.dtype import DType, bf16_to_f32, f32_to_bf16, promote_types
from plugrad.registry import get_registry

MAX_NDIM = 4
FLOAT_RTOL = {"float16": 1e-2, "bfloat16": 5e-2, "float32": 1e-4, "float64": 1e-9}


@dataclass(frozen=True)
class Profile:
  """How big the drawn programs get."""
  max_steps: int = 5
  max_size: int = 256  # no node grows past this many elements: keeps the reference device fast
  shapes: tuple[tuple[int, ...], ...] = ((3, 4), (2, 3, 4), (4, 1), (2, 1, 3), (4, 4))  # the inputs' shape
  latest: float = 0.0  # how often an op takes the node made last (chains of ops fuse into one kernel)
  max_terms: int = 4096  # the most values a float sum or matmul adds: float32 drifts from numpy with the length
  float32_share: float = 0.0  # inputs in float32 this often (where the device has it), the others' dtype drawn evenly
  even: bool = False  # every choice from the drawn seed, evenly spread, instead of hypothesis's (see Builder.choose)
  fresh: bool = False  # a second operand is a new input half the time (any broadcastable shape, any k of a matmul)


#: Kernel-sized programs (tests/test_random_graphs.py runs them on PYTHON and CPU): odd sizes up to 67 leave vector,
#: tile and unroll remainders, and long chains give the scheduler and the heuristic fused kernels to plan.
_KERNEL_SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 64, 67)
KERNELS = Profile(max_steps=10, max_size=20000, latest=0.75, float32_share=0.5, even=True, fresh=True,
                  shapes=tuple(s for s in itertools.chain.from_iterable(itertools.product(_KERNEL_SIZES, repeat=n)
                                                                        for n in (1, 2, 3)) if math.prod(s) <= 20000))


@dataclass
class Node:
  arr: np.ndarray  # numpy value in dtype.np (bfloat16: float32 values that bfloat16 holds)
  t: Tensor  # the same value, lazily, in plugrad
  exact: bool  # no rounding can make numpy's and plugrad's values differ
  dt: DType


def rnd(x, dt: DType) -> np.ndarray:
  """A value converted to `dt` the way plugrad converts: C casts (ints wrap), bfloat16 rounded to nearest even."""
  with np.errstate(all="ignore"):
    x = np.asarray(x)
    if dt == dtypes.bfloat16: return bf16_to_f32(f32_to_bf16(x.astype(np.float32)))
    if dt.is_int and x.dtype.kind == "f":  # float -> int truncates through int64 (values are finite and in range)
      return np.trunc(x).astype(np.int64).astype(dt.np)
    if dt == dtypes.bool: return x != 0
    return x.astype(dt.np)


def opmath(dt: DType) -> type:
  """The numpy type values of `dt` compute in: halves in float32 (torch's opmath), rounded to `dt` once after."""
  return np.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt.np


def sum_dtype(dt: DType) -> DType:
  """What a sum or a running sum of `dt` returns: int64 for integers and bools (torch's), a float its own type."""
  return dt if dt.is_float else dtypes.int64


def compute(fn, dt: DType, *arrs) -> np.ndarray:
  """fn on operands of `dt`, in `dt`'s arithmetic (bfloat16 through float32), the result rounded to `dt`."""
  with np.errstate(all="ignore"):
    return rnd(fn(*arrs), dt)


def broadcastable(a, b):
  try:
    np.broadcast_shapes(a, b)
    return True
  except ValueError:
    return False


def reshape_candidates(shape):
  """Shapes with the same number of elements: flat, two and three factors, and size-1 axes added."""
  size = math.prod(shape)
  divisors = [d for d in range(1, size + 1) if size % d == 0]
  out = {(size,), shape + (1,), (1,) + shape}
  out |= {(d, size // d) for d in divisors}
  out |= {(d, e, size // (d * e)) for d in divisors for e in divisors if size % (d * e) == 0}
  return sorted(s for s in out if len(s) <= MAX_NDIM and s != shape)


class Builder:
  """Draws ops on the nodes built so far; each op returns a new Node, or None when it does not apply."""

  def __init__(self, draw, device: str, dts: list[DType], profile: Profile):
    self.draw, self.device, self.dts, self.profile = draw, device, dts, profile
    self.nodes: list[Node] = []

  # Each choice is hypothesis's in the default profile (a failure then shrinks to a small program), the seed's
  # generator's where the profile asks for even spread: hypothesis leans to small numbers and first entries.
  def choose(self, options):
    options = list(options)
    return options[self.rng.integers(len(options))] if self.profile.even else self.draw(st.sampled_from(options))

  def integer(self, lo: int, hi: int) -> int:
    return int(self.rng.integers(lo, hi + 1)) if self.profile.even else self.draw(st.integers(lo, hi))

  def coin(self) -> bool: return self.integer(0, 1) == 1

  def pick(self, pred=lambda n: True) -> Node | None:
    choices = [n for n in self.nodes if pred(n)]
    return self.choose(choices) if choices else None

  def operand(self, pred, shape: tuple[int, ...]) -> Node | None:
    """A second operand: a node that `pred` accepts, or (half the time, in a profile with fresh operands) a new
    input of `shape`, whose dtype is drawn like the inputs'."""
    if self.profile.fresh and self.coin(): return self.make_input(shape, self.rng)
    return self.pick(pred)

  def pick_operand(self) -> Node:
    """The node an op starts from: the latest one (profile.latest of the time), else any."""
    if self.rng.random() < self.profile.latest: return self.nodes[-1]
    return self.pick()

  def fits(self, *shapes) -> bool: return math.prod(np.broadcast_shapes(*shapes)) <= self.profile.max_size

  def promoted(self, a: Node, b: Node) -> tuple[DType, np.ndarray, np.ndarray]:
    dt = promote_types(a.dt, b.dt)
    return dt, rnd(a.arr, dt), rnd(b.arr, dt)

  # ---- elementwise

  def broadcast_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against `shape`: itself, its trailing axes, or some of its axes set to 1."""
    return self.choose([shape, shape[1:], shape[-1:], tuple(1 if self.coin() else s for s in shape)])

  def op_binary(self, a):
    b = self.operand(lambda n: broadcastable(n.arr.shape, a.arr.shape), self.broadcast_shape(a.arr.shape))
    if not self.fits(a.arr.shape, b.arr.shape): return None
    dt, x, y = self.promoted(a, b)
    names = ["add", "mul", "maximum", "minimum"] + (["sub"] if dt != dtypes.bool else [])
    name = self.choose(names)
    if dt == dtypes.bool and name in ("add", "mul"):  # bool + is or, * is and
      fn = np.logical_or if name == "add" else np.logical_and
    else:
      fn = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "maximum": np.maximum, "minimum": np.minimum}[name]
    t = {"add": a.t + b.t, "mul": a.t * b.t, "sub": a.t - b.t if name == "sub" else None,
         "maximum": a.t.maximum(b.t), "minimum": a.t.minimum(b.t)}[name]
    exact = a.exact and b.exact and (not dt.is_float or name in ("maximum", "minimum"))
    return Node(compute(fn, dt, x, y), t, exact, dt)

  def op_compare(self, a):
    b = self.pick(lambda n: n.exact and broadcastable(n.arr.shape, a.arr.shape))
    if not a.exact or b is None or not self.fits(a.arr.shape, b.arr.shape): return None
    _, x, y = self.promoted(a, b)
    name = self.choose(["lt", "eq", "ne", "ge"])
    with np.errstate(all="ignore"):
      arr = {"lt": x < y, "eq": x == y, "ne": x != y, "ge": x >= y}[name]
    t = {"lt": a.t < b.t, "eq": a.t == b.t, "ne": a.t != b.t, "ge": a.t >= b.t}[name]
    return Node(np.asarray(arr), t, True, dtypes.bool)

  def op_where(self, a):
    c = self.pick(lambda n: n.exact and broadcastable(n.arr.shape, a.arr.shape))
    if c is None: return None
    b = self.pick(lambda n: broadcastable(n.arr.shape, np.broadcast_shapes(a.arr.shape, c.arr.shape)))
    if not self.fits(a.arr.shape, b.arr.shape, c.arr.shape): return None
    dt, x, y = self.promoted(a, b)
    cond_arr = c.arr if c.dt == dtypes.bool else c.arr > 0
    cond_t = c.t if c.dt == dtypes.bool else c.t > 0
    return Node(np.where(cond_arr, x, y), cond_t.where(a.t, b.t), a.exact and b.exact, dt)

  def op_unary(self, a):
    names = ["abs"] if a.dt == dtypes.bool else ["neg", "abs", "relu", "exp", "sqrt", "tanh", "sin"]
    name = self.choose(names)
    dt = a.dt
    if name in ("exp", "sqrt", "tanh", "sin"):  # integers compute in float32 (default_float)
      dt = a.dt if a.dt.is_float else dtypes.float32
      x = rnd(a.arr, dt)
      if name == "exp":
        # clip as floats: clipping an unsigned tensor at -3 wraps -3 to the type's top (as torch does)
        return Node(compute(lambda v: np.exp(np.clip(v, -3, 3)), dt, x), a.t.cast(dt).clip(-3, 3).exp(), False, dt)
      if name in ("tanh", "sin"):  # bounded by 1, so they also bring large values back into range
        return Node(compute(getattr(np, name), dt, x.astype(opmath(dt))), getattr(a.t.cast(dt), name)(), False, dt)
      mag = rnd(compute(np.abs, a.dt, a.arr), dt)  # abs in the input's dtype: abs(INT_MIN) wraps to INT_MIN
      return Node(compute(np.sqrt, dt, mag), a.t.abs().sqrt(), False, dt)
    # relu keeps NaN (torch's)
    fn = {"neg": np.negative, "abs": np.abs, "relu": lambda v: np.where((v > 0) | (v != v), v, np.zeros_like(v))}[name]
    t = {"neg": -a.t if name == "neg" else None, "abs": a.t.abs(), "relu": a.t.relu()}[name]
    return Node(compute(fn, dt, a.arr), t, a.exact, dt)

  def op_intdiv(self, a):
    """Integer // and % by a tensor divisor in 1..8 (made from a node with & 7 + 1) or a constant."""
    if not a.dt.is_int: return None
    b = self.pick(lambda n: n.dt.is_int and broadcastable(n.arr.shape, a.arr.shape))
    mod = self.coin()
    # uint64 with a signed type promotes to float32 (no int128): such pairs take the constant divisor
    tensor_ok = b is not None and self.fits(a.arr.shape, b.arr.shape) and promote_types(a.dt, b.dt).is_int
    if tensor_ok and self.coin():
      dt, x, y = self.promoted(a, b)
      d_arr, d_t = compute(lambda v: (v & 7) + 1, dt, y), (b.t.cast(dt) & 7) + 1
    else:
      k = self.choose([2, 5, 7] if a.dt.is_unsigned else [2, 5, 7, -3])
      dt, x, d_arr, d_t = a.dt, a.arr, np.asarray(k, a.dt.np), k
    arr = compute(np.mod if mod else np.floor_divide, dt, x, d_arr)
    return Node(arr, a.t % d_t if mod else a.t // d_t, True, dt)

  def op_floatdiv(self, a):
    """Float // and %: discontinuous, so exact operands only; numpy's divmod is torch's (the exact fmod)."""
    b = self.pick(lambda n: n.exact and broadcastable(n.arr.shape, a.arr.shape))
    if not a.exact or b is None or not self.fits(a.arr.shape, b.arr.shape): return None
    dt, x, y = self.promoted(a, b)
    if not dt.is_float: return None
    mod = self.coin()
    # halves compute in float32 and round once (torch's opmath), as plugrad does
    arr = compute(np.mod if mod else np.floor_divide, dt, x.astype(opmath(dt)), y.astype(opmath(dt)))
    return Node(arr, a.t % b.t if mod else a.t // b.t, False, dt)

  def op_bitwise(self, a):
    b = self.pick(lambda n: not n.dt.is_float and broadcastable(n.arr.shape, a.arr.shape))
    if a.dt.is_float or b is None or not self.fits(a.arr.shape, b.arr.shape): return None
    dt, x, y = self.promoted(a, b)
    if dt.is_float: return None  # uint64 with a signed type promotes to float32
    name = self.choose(["and", "or", "xor"])
    fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[name]
    t = {"and": a.t & b.t, "or": a.t | b.t, "xor": a.t ^ b.t}[name]
    return Node(compute(fn, dt, x, y), t, True, dt)

  def op_cast(self, a):
    dt = self.dts[self.rng.integers(len(self.dts))]
    if a.dt.is_float and not dt.is_float and not a.exact: return None  # a rounding would flip a truncation
    arr, t = a.arr, a.t
    if a.dt.is_float and dt.is_int:
      # NaN and out-of-range floats have no defined integer: clear them first, in both
      lo, hi = (0, 100) if dt.is_unsigned or dt == dtypes.uint8 else (-100, 100)
      arr = np.clip(np.where(arr != arr, 0, arr), lo, hi)
      t = (t != t).where(0, t).clip(lo, hi)
    exact = a.exact and (dt.is_float or dt == dtypes.bool or not a.dt.is_float or a.exact)
    return Node(rnd(arr, dt), t.cast(dt), exact, dt)

  # ---- reductions and matmul

  def op_reduce(self, a):
    keepdim = self.coin()
    if a.arr.ndim == 1 and not keepdim: return None  # keep every node at least 1-D
    axis = self.integer(-a.arr.ndim, a.arr.ndim - 1)
    if a.dt.is_float and a.arr.shape[axis] > self.profile.max_terms: return None
    # max and min of nothing have no value: an empty axis (a slice can make one) is summed
    name = self.choose(["sum", "max", "min"] + (["prod"] if a.dt.is_int else [])) if a.arr.shape[axis] else "sum"
    with np.errstate(all="ignore"):
      if name in ("sum", "prod"):
        out_dt = sum_dtype(a.dt)
        arr = rnd(getattr(np, name)(a.arr.astype(opmath(out_dt)), axis=axis, keepdims=keepdim), out_dt)
        return Node(arr, getattr(a.t, name)(axis=axis, keepdim=keepdim), a.exact and not a.dt.is_float, out_dt)
      arr = getattr(a.arr, name)(axis=axis, keepdims=keepdim)
    return Node(arr, getattr(a.t, name)(axis=axis, keepdim=keepdim), a.exact, a.dt)

  def op_matmul(self, a):
    """a @ b for a node of any rank (a vector, a matrix, a batch of them) and a k x m matrix."""
    k = a.arr.shape[-1]
    if a.dt.is_float and k > self.profile.max_terms: return None
    b = self.operand(lambda n: n.arr.ndim == 2 and n.arr.shape[0] == k, (k, self.choose(_KERNEL_SIZES)))
    if b is None and a.arr.ndim == 2: b = Node(a.arr.T, a.t.T, a.exact, a.dt)  # a @ a.T always fits
    if b is None or a.arr.size * b.arr.shape[1] > self.profile.max_size * 4: return None
    dt, x, y = self.promoted(a, b)
    with np.errstate(all="ignore"):
      prods = compute(np.logical_and if dt == dtypes.bool else np.multiply, dt, x[..., None], y)  # (..., k, m)
      if dt == dtypes.bool: arr = prods.any(axis=-2)
      else:  # a matmul keeps its dtype: integers wrap in it, halves accumulate in float32
        arr = rnd(prods.astype(opmath(dt)).sum(axis=-2), dt)
    return Node(arr, a.t @ b.t, a.exact and b.exact and not dt.is_float, dt)

  # ---- movement

  def op_permute(self, a):
    order = tuple(int(i) for i in self.rng.permutation(a.arr.ndim)) if self.profile.even else \
      tuple(self.draw(st.permutations(range(a.arr.ndim))))
    return Node(a.arr.transpose(order), a.t.permute(order), a.exact, a.dt)

  def op_reshape(self, a):
    shape = self.choose(reshape_candidates(a.arr.shape))
    return Node(a.arr.reshape(shape), a.t.reshape(shape), a.exact, a.dt)

  def op_expand(self, a):
    arr, t = a.arr, a.t
    if 1 not in arr.shape:  # make a size-1 axis first
      if arr.ndim >= MAX_NDIM: return None
      axis = self.integer(0, arr.ndim)
      arr, t = np.expand_dims(arr, axis), t.unsqueeze(axis)
    axis = self.choose([i for i, s in enumerate(arr.shape) if s == 1])
    shape = list(arr.shape)
    shape[axis] = self.integer(2, 4)
    if math.prod(shape) > self.profile.max_size: return None
    return Node(np.broadcast_to(arr, shape), t.expand(tuple(shape)), a.exact, a.dt)

  def op_pad(self, a):
    padding = tuple((self.integer(0, 2), self.integer(0, 2)) for _ in a.arr.shape)
    value = self.choose([0, 0, 1.5 if a.dt.is_float else 3 if a.dt != dtypes.bool else True])
    out = np.pad(a.arr, padding, constant_values=rnd(value, a.dt))
    if out.size > self.profile.max_size: return None
    return Node(out, a.t.pad(padding, value=value), a.exact, a.dt)

  def op_shrink(self, a):
    if 0 in a.arr.shape: return None
    arg = []
    for s in a.arr.shape:
      start = self.integer(0, s - 1)
      arg.append((start, self.integer(start + 1, s)))
    return Node(a.arr[tuple(slice(lo, hi) for lo, hi in arg)], a.t.shrink(tuple(arg)), a.exact, a.dt)

  def op_flip(self, a):
    axes = tuple(int(i) for i in self.rng.permutation(a.arr.ndim)[:self.integer(1, a.arr.ndim)]) if self.profile.even else \
      tuple(self.draw(st.lists(st.integers(0, a.arr.ndim - 1), min_size=1, max_size=a.arr.ndim, unique=True)))
    return Node(np.flip(a.arr, axes), a.t.flip(axes), a.exact, a.dt)

  def op_slice(self, a):
    """Basic indexing: a start, stop and step (negative ones too) on each axis, or one axis taken at an int."""
    if self.coin() and a.arr.ndim > 1:
      axis = self.integer(0, a.arr.ndim - 1)
      if not a.arr.shape[axis]: return None
      idx: tuple = (slice(None),) * axis + (self.integer(-a.arr.shape[axis], a.arr.shape[axis] - 1),)
    else:
      parts = []
      for s in a.arr.shape:
        lo, hi = sorted((self.integer(0, s), self.integer(0, s)))
        step = self.choose([1, 2, 3, -1, -2])
        parts.append(slice(lo, hi, step) if step > 0 else slice(hi - 1 if hi else None, lo - 1 if lo else None, step))
      idx = tuple(parts)
    return Node(a.arr[idx], a.t[idx], a.exact, a.dt)

  def op_cat(self, a):
    axis = self.integer(0, a.arr.ndim - 1)
    rest = a.arr.shape[:axis] + a.arr.shape[axis + 1:]
    b = self.operand(lambda n: n.arr.ndim == a.arr.ndim and n.arr.shape[:axis] + n.arr.shape[axis + 1:] == rest,
                     a.arr.shape[:axis] + (self.choose(_KERNEL_SIZES),) + a.arr.shape[axis + 1:])
    if a.arr.size + b.arr.size > self.profile.max_size: return None
    dt, x, y = self.promoted(a, b)
    return Node(np.concatenate([x, y], axis), a.t.cat(b.t, dim=axis), a.exact and b.exact, dt)

  def op_cumsum(self, a):
    """Running sums keep sum's dtypes (integers in int64, halves accumulating in float32)."""
    axis = self.integer(0, a.arr.ndim - 1)
    if a.dt.is_float and a.arr.shape[axis] > self.profile.max_terms: return None
    out_dt = sum_dtype(a.dt)
    with np.errstate(all="ignore"): arr = rnd(np.cumsum(a.arr.astype(opmath(out_dt)), axis=axis), out_dt)
    return Node(arr, a.t.cumsum(axis), a.exact and not a.dt.is_float, out_dt)

  def op_realize(self, a):
    """A buffer in the middle of the graph: what follows reads it instead of fusing the ops before it."""
    return Node(a.arr, a.t.contiguous().realize(), a.exact, a.dt)

  OPS = ("binary", "compare", "where", "unary", "intdiv", "floatdiv", "bitwise", "cast", "reduce", "matmul", "permute",
         "reshape", "expand", "pad", "shrink", "flip", "slice", "cat", "cumsum", "realize")

  def make_input(self, shape, rng) -> Node:
    dt = self.dts[rng.integers(len(self.dts))]  # from the seed, like the op order: evenly spread
    if dtypes.float32 in self.dts and rng.random() < self.profile.float32_share: dt = dtypes.float32
    if dt == dtypes.bool: arr = rng.random(shape) < 0.5
    elif dt.is_int:
      # a few extremes, so arithmetic wraps; as numpy scalars of the dtype (numpy>=2.5 refuses 2**64-1 beside int64)
      arr = rng.integers(0 if dt.is_unsigned else -5, 6, shape).astype(dt.np)
      arr = np.where(rng.random(shape) < 0.1, dt.np.type(dt.max), arr)
      arr = np.where(rng.random(shape) < 0.05, dt.np.type(dt.min), arr)
    else: arr = rnd(rng.uniform(-2, 2, shape), dt)
    return Node(arr, Tensor(arr, device=self.device, dtype=dt), True, dt)

  def build(self) -> list[Node]:
    """Draw inputs and up to max_steps ops; return every node (inputs first, output last)."""
    rng = self.rng = np.random.default_rng(self.draw(st.integers(0, 2 ** 32 - 1)))
    shape = self.profile.shapes[rng.integers(len(self.profile.shapes))]
    for _ in range(self.integer(1, 3)): self.nodes.append(self.make_input(shape, rng))
    # The op order is a shuffle made from the drawn seed: hypothesis' own choices lean towards
    # the first entries of a list, and this spreads the ops evenly over the examples.
    ops = list(rng.permutation(self.OPS))
    for step in range(self.integer(1, self.profile.max_steps)):
      a = self.pick_operand()
      op = self.choose(self.OPS) if self.profile.even else ops[step % len(ops)]  # (even: an op may come twice)
      new = getattr(self, f"op_{op}")(a)
      if new is not None: self.nodes.append(new)
    return self.nodes


def assert_node_matches(node: Node, scale: float, rtol_floor: float = 0.0) -> None:
  """`node`'s Tensor against its numpy value: dtype, shape, then the values (floats within the dtype's tolerance, or
  `rtol_floor` where an inexact value of a less precise type flowed into it)."""
  got = node.t.numpy()
  assert node.t.dtype == node.dt, f"dtype {node.t.dtype} != {node.dt}"
  assert got.shape == node.arr.shape
  if not node.dt.is_float: return np.testing.assert_array_equal(got, node.arr)
  want = node.arr.astype(np.float64)
  # a value at the edge of the dtype's range may overflow on one side only (a sum in another order)
  big = float(np.finfo(np.float32 if node.dt == dtypes.bfloat16 else node.dt.np).max) / 4
  sure = np.isfinite(want) & (np.abs(want) < big)
  rtol = max(FLOAT_RTOL[node.dt.name], rtol_floor)
  np.testing.assert_allclose(got.astype(np.float64)[sure], want[sure], rtol=rtol, atol=rtol * scale)


def device_dtypes(device: str) -> list[DType]:
  caps = get_registry().device(device).caps
  return [d for d in dtypes.all() if d in caps.dtypes]


def check_random_graph(draw, device: str, dts: list[DType], profile: Profile) -> None:
  """Draw one program (`draw`: hypothesis's data.draw) on `device` over `dts` and compare it with numpy: a few of
  its nodes realized together, then its output, then an earlier node."""
  nodes = Builder(draw, device, dts, profile).build()
  # absolute tolerance grows with the largest float intermediate (cancellation in sub/sum)
  floats = [np.abs(n.arr.astype(np.float64)) for n in nodes if n.dt.is_float and n.arr.size]
  scale = max([1.0] + [float(f[np.isfinite(f)].max(initial=0)) for f in floats])
  # a float32 rounding promoted into a float64 node is a float32-sized difference there (nodes do not record their
  # sources: the least precise inexact float of the graph sets the floor)
  floor = max([FLOAT_RTOL[n.dt.name] for n in nodes if n.dt.is_float and not n.exact], default=0.0)
  # some nodes realized together first: siblings of one shape become multi-output kernels
  together = draw(st.lists(st.sampled_from(nodes), max_size=3, unique_by=id))
  if len(together) > 1: Tensor.realize(*(n.t for n in together))
  for n in together: assert_node_matches(n, scale, floor)
  assert_node_matches(nodes[-1], scale, floor)
  # then an earlier node of the same graph, possibly shared with the output just realized
  assert_node_matches(draw(st.sampled_from(nodes)), scale, floor)


def test_random_graph_matches_numpy(device, request):
  long = request.config.getoption("fuzz_long", default=False)
  profile = Profile(max_steps=8, max_size=1024) if long else Profile()
  dts = device_dtypes(device)

  @settings(max_examples=3000 if long else 60, deadline=None, derandomize=not long, database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
  @given(data=st.data())
  def check(data): check_random_graph(data.draw, device, dts, profile)

  check()


@pytest.mark.parametrize("dt", ["int8", "uint8", "int32", "uint64", "float16", "bfloat16"])
def test_wrapping_and_rounding_match_numpy(device, dt):
  """The reference semantics the fuzzer relies on, pinned on a few values: integer ops wrap, halves round."""
  d = dtypes.from_any(dt)
  if d not in get_registry().device(device).caps.dtypes: pytest.skip(f"{device} has no {dt}")
  x = rnd(np.array([d.max if d.is_int else 1000.0, 3, 1]), d)
  got = (Tensor(x, device=device, dtype=d) * Tensor(x, device=device, dtype=d) + 1).numpy()
  np.testing.assert_array_equal(got, compute(lambda v: v * v + rnd(1, d), d, x))


@pytest.mark.parametrize("dt", ["int32", "int64"])
def test_overflow_wraps_where_a_compiler_could_assume_it_away(device, dt):
  """Signed overflow wraps even where a later op lets a C compiler assume it never happens: x + x + x < 0 is not
  x < 0, and the floor division of a wrapped product divides the wrapped value (OpenCL C from plain + and * got both
  wrong on pocl)."""
  d = dtypes.from_any(dt)
  if d not in get_registry().device(device).caps.dtypes: pytest.skip(f"{device} has no {dt}")
  info = np.iinfo(d.np)
  x = np.array([info.max, info.max // 3 + 7, info.min + 5, -12345, 2**20 + 3, -(2**25) + 1, 3], d.np)
  t = Tensor(x, device=device)
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal(((t + t + t) < 0).numpy(), (x + x + x) < 0)
    np.testing.assert_array_equal(((-(t * t)) // 7).numpy(), (-(x * x)) // 7)
    np.testing.assert_array_equal(((t * t * t) % -3).numpy(), (x * x * x) % -3)
