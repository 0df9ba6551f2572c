"""Which matmuls a tensor core computes, and where each thread's fragment elements sit.

A kernel qualifies for a `TensorCore` (the TC optimization, `lowerer._lower_tensor_core`) when its one output is an
elementwise function (through reshapes) of one sum over one axis of a product x*y, where x and y are values of the
tensor core's input dtype cast to its accumulator dtype (a float16 matmul, which plugrad computes in float32), and:

- x moves with one output axis that y does not (the rows, M), y with one that x does not (the columns, N), both
  with the summed axis (K); any other output axis moves both or neither (a batch);
- the tensor core's (M, N, K) divide the sizes, so every warp computes whole tiles and nothing is gated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from plugrad.device import Capabilities, TensorCore
from plugrad.dtype import DType
from plugrad.shape import prod
from plugrad.uops import GroupOp, Ops, UOp


@dataclass(frozen=True)
class MatmulShape:
  """A kernel's sum of products as a matmul: the reduction, its two factors and its axes (in its source's shape)."""
  reduce: UOp
  x: UOp  # the factor that moves with the rows (cast from the input dtype)
  y: UOp  # the factor that moves with the columns
  m_axis: int
  n_axis: int
  k_axis: int
  batch_axes: tuple[int, ...]

  @property
  def sizes(self) -> tuple[int, int, int]:
    """(M, N, K)."""
    shape = self.reduce.src[0].shape
    return shape[self.m_axis], shape[self.n_axis], shape[self.k_axis]

  @property
  def batch(self) -> int:
    shape = self.reduce.src[0].shape
    return prod(shape[a] for a in self.batch_axes)


def _uncast(x: UOp, dtype_in: DType, dtype_acc: DType) -> bool:
  """Whether the factor `x` is a value of `dtype_in` cast to `dtype_acc` (below movement ops)."""
  while x.op in GroupOp.Movement: x = x.src[0]
  return x.op is Ops.CAST and x.dtype == dtype_acc and x.src[0].dtype == dtype_in


def matmul_shape(value: UOp, moves_with: Callable[[UOp, int], bool]) -> MatmulShape | None:
  """The matmul `value` (a kernel's one output value, its axes merged) computes, or None.

  :param moves_with: moves_with(node, axis) says whether a node inside the reduction's source depends on the index
    of that source's axis (the lowering answers it by lowering with placeholder indices).
  """
  reduces = [n for n in value.toposort if n.op is Ops.REDUCE_AXIS]
  if len(reduces) != 1: return None
  red = reduces[0]
  op, axes = red.arg
  shape = red.src[0].shape
  live = [a for a in axes if shape[a] != 1]
  if op is not Ops.ADD or len(live) != 1 or red.src[0].op is not Ops.MUL: return None
  if any(not isinstance(s, int) for s in shape): return None
  # between the output and the sum only elementwise ops and reshapes: the output's axes are the sum's
  above = {red}  # the sum and what is computed from it, in one pass (sources come first)
  for n in value.toposort:
    if n is red or not any(x in above for x in n.src): continue
    if n.op not in GroupOp.ALU and n.op is not Ops.RESHAPE: return None
    above.add(n)
  if [s for s in value.shape if s != 1] != [s for s in red.shape if s != 1]: return None
  k_axis = live[0]
  x, y = red.src[0].src
  others = [a for a in range(len(shape)) if a != k_axis and shape[a] != 1]
  dx = {a for a in others + [k_axis] if moves_with(x, a)}
  dy = {a for a in others + [k_axis] if moves_with(y, a)}
  if k_axis not in dx or k_axis not in dy: return None
  rows, cols = sorted(dx - dy), sorted(dy - dx)
  if len(rows) != 1 or len(cols) != 1: return None
  if any((a in dx) != (a in dy) for a in others if a not in rows + cols): return None
  return MatmulShape(red, x, y, rows[0], cols[0], k_axis, tuple(a for a in others if a not in rows + cols))


def fits(mm: MatmulShape, tc: TensorCore) -> bool:
  """Whether `tc` computes the matmul: its dtypes, and its tile dividing the sizes."""
  if mm.reduce.dtype != tc.dtype_acc or not all(_uncast(f, tc.dtype_in, tc.dtype_acc) for f in (mm.x, mm.y)):
    return False
  return all(size % t == 0 for size, t in zip(mm.sizes, tc.dims))


def usable_tensor_cores(mm: MatmulShape | None, caps: Capabilities) -> tuple[int, ...]:
  """The positions in `caps.tensor_cores` of those that compute the matmul `mm`."""
  if mm is None: return ()
  return tuple(i for i, tc in enumerate(caps.tensor_cores) if fits(mm, tc))


def fragment_index(bits: tuple[str, ...], lane: UOp, element: int) -> UOp:
  """A fragment element's row or column (`TensorCore`: its bits, lowest first) for the thread at `lane` of its warp:
  runs of consecutive lane bits become one (lane // 2**first) % 2**length, element bits a constant."""
  value = UOp.const(lane.dtype, 0)
  pos = 0
  while pos < len(bits):
    bit = bits[pos]
    if bit[0] == "e":
      if (element >> int(bit[1:])) & 1: value = value + (1 << pos)
      pos += 1
      continue
    first = int(bit[1:])
    run = 1
    while pos + run < len(bits) and bits[pos + run] == f"l{first + run}": run += 1
    part = (lane // (1 << first) if first else lane) % (1 << run)  # (the simplifier drops a modulo the lane's range makes moot)
    value = value + (part * (1 << pos) if pos else part)
    pos += run
  return value


def multiple_of(u: UOp) -> int:
  """A number every value of the integer expression `u` is a multiple of (1 where nothing better is known)."""
  if u.op is Ops.CONST: return abs(int(u.arg)) or 1 << 30
  if u.op in (Ops.ADD, Ops.SUB): return math.gcd(multiple_of(u.src[0]), multiple_of(u.src[1]))
  if u.op is Ops.MUL: return multiple_of(u.src[0]) * multiple_of(u.src[1])
  if u.op is Ops.MOD and u.src[1].op is Ops.CONST: return math.gcd(multiple_of(u.src[0]), abs(int(u.src[1].arg)) or 1)
  if u.op is Ops.CAST and u.dtype.is_int and u.src[0].dtype.is_int: return multiple_of(u.src[0])
  return 1


def paired_loads(elements: list[UOp], simplify: Callable[[UOp], UOp]) -> list[UOp]:
  """A fragment's elements with each pair (2i, 2i + 1) that reads neighbouring elements of one buffer from an even
  index read as one vector of two (a 32-bit load of two halves, where the buffer starts aligned, as every buffer
  does): its lanes taken out with GEPs."""
  out = list(elements)
  for i in range(0, len(out) - 1, 2):
    a, b = out[i], out[i + 1]
    if a.op is not Ops.LOAD or b.op is not Ops.LOAD or len(a.src) != 2 or len(b.src) != 2 or a.src[0] is not b.src[0]:
      continue
    step = simplify(b.src[1] - a.src[1])
    if step.op is not Ops.CONST or step.arg != 1 or multiple_of(a.src[1]) % 2: continue
    pair = UOp(Ops.LOAD, a.dtype.vec(2), a.src)
    out[i], out[i + 1] = UOp(Ops.GEP, a.dtype, (pair,), 0), UOp(Ops.GEP, a.dtype, (pair,), 1)
  return out


__all__ = ["MatmulShape", "multiple_of", "paired_loads", "matmul_shape", "fits", "usable_tensor_cores", "fragment_index"]
