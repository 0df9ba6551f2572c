"""Random small tensor graphs compared against the same computation in numpy.

Hypothesis draws a short program (at most 5 steps) over 1-3 float32 inputs. Each step
applies one op to nodes built so far: elementwise ops (add, mul, sub, maximum, relu, neg,
exp of clipped values, where), reductions (sum/max over a random axis, keepdim random) and
movement ops (permute, reshape, expand, pad, shrink, flip). Every node is a pair
(numpy array, Tensor) built in lockstep, so any node can be compared at the end. Nodes
are reused freely, which gives shared subexpressions and diamonds in the graph.

The only discontinuous op, `where`, takes its condition from an "exact" node: one whose
values are copies of input values (movement ops, neg, relu, maximum, max-reduce), so
float rounding can never flip the condition between numpy and plugrad.
"""

import math
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plugrad import Tensor

MAX_STEPS = 5
MAX_SIZE = 256  # no node grows past this many elements: keeps the reference device fast
MAX_NDIM = 4


@dataclass
class Node:
  arr: np.ndarray  # numpy value (float32)
  t: Tensor  # the same value, lazily, in plugrad
  exact: bool  # values are exact copies of input values (no rounding happened)


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


# --- ops: each takes (draw, nodes, node) and returns a new Node, or None when not applicable ---


def op_binary(draw, nodes, a):
  b = draw(st.sampled_from([n for n in nodes if broadcastable(n.arr.shape, a.arr.shape)]))
  if math.prod(np.broadcast_shapes(a.arr.shape, b.arr.shape)) > MAX_SIZE:
    return None
  name = draw(st.sampled_from(["add", "mul", "sub", "maximum"]))
  if name == "add":
    return Node(a.arr + b.arr, a.t + b.t, False)
  if name == "mul":
    return Node(a.arr * b.arr, a.t * b.t, False)
  if name == "sub":
    return Node(a.arr - b.arr, a.t - b.t, False)
  return Node(np.maximum(a.arr, b.arr), a.t.maximum(b.t), a.exact and b.exact)


def op_unary(draw, nodes, a):
  name = draw(st.sampled_from(["relu", "neg", "exp"]))
  if name == "relu":
    return Node(np.maximum(a.arr, np.float32(0)), a.t.relu(), a.exact)
  if name == "neg":
    return Node(-a.arr, -a.t, a.exact)
  return Node(np.exp(np.clip(a.arr, -3, 3)), a.t.clip(-3, 3).exp(), False)


def op_where(draw, nodes, a):
  conds = [n for n in nodes if n.exact and broadcastable(n.arr.shape, a.arr.shape)]
  if not conds:
    return None
  c = draw(st.sampled_from(conds))
  b = draw(st.sampled_from([n for n in nodes if broadcastable(n.arr.shape, np.broadcast_shapes(a.arr.shape, c.arr.shape))]))
  if math.prod(np.broadcast_shapes(a.arr.shape, b.arr.shape, c.arr.shape)) > MAX_SIZE:
    return None
  return Node(np.where(c.arr > 0, a.arr, b.arr), (c.t > 0).where(a.t, b.t), a.exact and b.exact)


def op_reduce(draw, nodes, a):
  keepdim = draw(st.booleans())
  if a.arr.ndim == 1 and not keepdim:
    return None  # keep every node at least 1-D
  axis = draw(st.integers(-a.arr.ndim, a.arr.ndim - 1))
  if draw(st.booleans()):
    return Node(a.arr.sum(axis=axis, keepdims=keepdim), a.t.sum(axis=axis, keepdim=keepdim), False)
  return Node(a.arr.max(axis=axis, keepdims=keepdim), a.t.max(axis=axis, keepdim=keepdim), a.exact)


def op_permute(draw, nodes, a):
  order = tuple(draw(st.permutations(range(a.arr.ndim))))
  return Node(a.arr.transpose(order), a.t.permute(order), a.exact)


def op_reshape(draw, nodes, a):
  shape = draw(st.sampled_from(reshape_candidates(a.arr.shape)))
  return Node(a.arr.reshape(shape), a.t.reshape(shape), a.exact)


def op_expand(draw, nodes, a):
  arr, t = a.arr, a.t
  if 1 not in arr.shape:  # make a size-1 axis first
    if arr.ndim >= MAX_NDIM:
      return None
    axis = draw(st.integers(0, arr.ndim))
    arr, t = np.expand_dims(arr, axis), t.unsqueeze(axis)
  ones = [i for i, s in enumerate(arr.shape) if s == 1]
  axis = draw(st.sampled_from(ones))
  shape = list(arr.shape)
  shape[axis] = draw(st.integers(2, 4))
  if math.prod(shape) > MAX_SIZE:
    return None
  return Node(np.broadcast_to(arr, shape), t.expand(tuple(shape)), a.exact)


def op_pad(draw, nodes, a):
  padding = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in a.arr.shape)
  value = draw(st.sampled_from([0.0, 0.0, 1.5]))
  out = np.pad(a.arr, padding, constant_values=value)
  if out.size > MAX_SIZE:
    return None
  return Node(out, a.t.pad(padding, value=value), a.exact)


def op_shrink(draw, nodes, a):
  arg = []
  for s in a.arr.shape:
    start = draw(st.integers(0, s - 1))
    arg.append((start, draw(st.integers(start + 1, s))))
  index = tuple(slice(lo, hi) for lo, hi in arg)
  return Node(a.arr[index], a.t.shrink(tuple(arg)), a.exact)


def op_flip(draw, nodes, a):
  axes = tuple(draw(st.lists(st.integers(0, a.arr.ndim - 1), min_size=1, max_size=a.arr.ndim, unique=True)))
  return Node(np.flip(a.arr, axes), a.t.flip(axes), a.exact)


OPS = {
  "binary": op_binary, "unary": op_unary, "where": op_where, "reduce": op_reduce, "permute": op_permute,
  "reshape": op_reshape, "expand": op_expand, "pad": op_pad, "shrink": op_shrink, "flip": op_flip,
}


def build_graph(draw, device):
  """Draw inputs and up to MAX_STEPS ops; return every node (inputs first, output last)."""
  shape = draw(st.sampled_from([(3, 4), (2, 3, 4), (4, 1), (2, 1, 3)]))
  rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
  nodes = []
  for _ in range(draw(st.integers(1, 3))):
    arr = rng.uniform(-2, 2, shape).astype(np.float32)
    nodes.append(Node(arr, Tensor(arr, device=device), True))
  # The op order is a shuffle made from the drawn seed: hypothesis' own choices lean towards
  # the first entries of a list, and this spreads all ten ops evenly over 60 examples.
  op_order = rng.permutation(sorted(OPS))
  for step in range(draw(st.integers(1, MAX_STEPS))):
    a = draw(st.sampled_from(nodes))
    new = OPS[op_order[step]](draw, nodes, a)
    if new is not None:
      nodes.append(new)
  return nodes


def assert_node_close(node, scale):
  got = node.t.numpy()
  assert got.shape == node.arr.shape
  assert got.dtype == np.float32
  np.testing.assert_allclose(got, node.arr, rtol=1e-4, atol=1e-4 * scale)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_graph_matches_numpy(device, data):
  nodes = build_graph(data.draw, device)
  # absolute tolerance grows with the largest intermediate value (cancellation in sub/sum)
  scale = max(1.0, max(float(np.abs(n.arr).max(initial=0)) for n in nodes))
  assert_node_close(nodes[-1], scale)
  # then an earlier node of the same graph, possibly shared with the output just realized
  assert_node_close(data.draw(st.sampled_from(nodes)), scale)
