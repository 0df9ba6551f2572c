"""Shapes of tensor-graph nodes, and how movement ops map an output index to an input index.

Movement ops never copy: the lowering composes `view_index` from the kernel's loop variables
down to each buffer, and the symbolic rules clean the resulting index arithmetic.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from plugrad.ops import GroupOp, Ops

if TYPE_CHECKING:
  from plugrad.uops import UOp

Shape = tuple  # of ints, or symbolic ints (UOps that depend on a Variable)


def prod(xs) -> int: return math.prod(xs)


def smax(size: int | UOp) -> int:
  """A size, or the largest value a symbolic one (a Variable's expression) takes."""
  return size if isinstance(size, int) else int(size.vmax)


def inverse_permutation(order: tuple[int, ...]) -> tuple[int, ...]:
  """The permutation that undoes `order` (a PERMUTE's arg)."""
  inv = [0] * len(order)
  for i, o in enumerate(order): inv[o] = i
  return tuple(inv)


def strides_for(shape: Shape) -> tuple[int, ...]:
  """Row-major strides in elements."""
  out, acc = [], 1
  for s in reversed(shape):
    out.append(acc)
    acc *= s
  return tuple(reversed(out))


def _sint(x):
  # a size whose Variables cancel (a pad undoing a symbolic shrink: n + (8 - n)) is a plain int again
  return x if isinstance(x, int) else x.ssimplify()


#: the ops whose value has their first source's shape (the common case, tested first: every tensor op asks)
_SHAPE_OF_SOURCE = GroupOp.ALU | {Ops.FLIP, Ops.CONTIGUOUS, Ops.COPY, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD,
                                  Ops.CUSTOM_GRADIENT, Ops.ASSIGN}


def infer_shape(u: UOp) -> Shape:
  """The shape of a tensor-graph node (movement ops carry their output shape or enough to derive it)."""
  op, arg = u.op, u.arg
  if op in _SHAPE_OF_SOURCE: return u.src[0].shape
  if op is Ops.RESHAPE or op is Ops.EXPAND: return tuple(arg)
  if op is Ops.BUFFER: return (arg[2],)  # arg: (uid, device, size)
  if op is Ops.KERNEL: return (arg.out.arg[2],)
  if op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND): return ()
  if op is Ops.ARANGE: return (arg,)
  if op is Ops.PARAM: return (arg[1],)
  if op is Ops.MULTI:  # the whole tensor: shards side by side along the sharded axis (all alike when replicated)
    first, axis = u.src[0].shape, arg[1]
    if axis is None: return first
    return first[:axis] + (sum(s.shape[axis] for s in u.src),) + first[axis + 1:]
  src = u.src[0].shape
  if op is Ops.PERMUTE: return tuple(src[i] for i in arg)
  if op is Ops.PAD: return tuple(_sint(s + b + a) for s, (b, a) in zip(src, arg[0]))
  if op is Ops.SHRINK: return tuple(_sint(e - b) for b, e in arg)
  if op is Ops.REDUCE_AXIS: return tuple(1 if i in arg[1] else s for i, s in enumerate(src))
  raise ValueError(f"{op} has no tensor shape")


def view_index(u: UOp, idx: tuple[UOp, ...], valid: UOp, zero: UOp) -> tuple[tuple[UOp, ...], UOp]:
  """Given the index `idx` into the output of movement op `u` (and the condition `valid` under
  which the element is real), the index into u's source and the new validity. PAD is the only op
  that narrows validity; the caller substitutes the pad value where it does not hold. `zero` is
  the constant 0 of the index dtype."""
  src_shape = u.src[0].shape
  if u.op is Ops.RESHAPE: return reshape_index(idx, u.shape, src_shape, zero), valid
  if u.op is Ops.PERMUTE:
    inv = [0] * len(u.arg)
    for out_axis, in_axis in enumerate(u.arg): inv[in_axis] = out_axis
    return tuple(idx[inv[i]] for i in range(len(inv))), valid
  if u.op is Ops.EXPAND:
    return tuple(i if s == o else zero for i, s, o in zip(idx, src_shape, u.shape)), valid
  if u.op is Ops.SHRINK: return tuple(i + b if b else i for i, (b, _) in zip(idx, u.arg)), valid
  if u.op is Ops.FLIP:
    # s - 1 - i; a symbolic size s is already an index expression
    return tuple(((s - 1 if isinstance(s, int) else (s - 1).cast(i.dtype)) - i) if ax in u.arg else i
                 for ax, (i, s) in enumerate(zip(idx, src_shape))), valid
  if u.op is Ops.PAD:
    new_idx = []
    for i, s, (b, a) in zip(idx, src_shape, u.arg[0]):
      if b or a:
        j = i - b if b else i
        valid = valid.logical_and(j.ge(0)).logical_and(j.lt(s))
        new_idx.append(j)
      else: new_idx.append(i)
    return tuple(new_idx), valid
  raise ValueError(f"{u.op} is not a movement op")


def reshape_index(idx: tuple[UOp, ...], out_shape: Shape, in_shape: Shape, zero: UOp) -> tuple[UOp, ...]:
  """Index into `in_shape` for the element at `idx` of the same data viewed as `out_shape`.

  Axes that the reshape leaves alone (a common prefix and suffix, and size-1 axes) are passed
  through untouched so that the index math stays small; the rest goes through the flat index."""
  if out_shape == in_shape: return idx
  symbolic = any(not isinstance(s, int) for s in out_shape + in_shape)
  if not symbolic and prod(in_shape) == 0: return (zero,) * len(in_shape)  # only ever reached behind a false pad gate
  # drop size-1 axes of the output: their index is always 0
  live = [(i, s) for i, s in zip(idx, out_shape) if s != 1]
  live_shape = tuple(s for _, s in live)
  in_live = tuple(s for s in in_shape if s != 1)
  if live_shape == in_live:
    it = iter(i for i, _ in live)
    return tuple(next(it) if s != 1 else zero for s in in_shape)
  if symbolic: return _reshape_index_symbolic(idx, out_shape, in_shape, zero)
  # match whole groups of axes whose products agree, splitting/merging within each group
  out: list[UOp] = []
  oi = ii = 0
  while ii < len(in_shape) or oi < len(out_shape):
    og, ig = [oi], [ii]
    po, pi = (out_shape[oi] if oi < len(out_shape) else 1), (in_shape[ii] if ii < len(in_shape) else 1)
    oi, ii = oi + 1, ii + 1
    while po != pi:
      if po < pi:
        po *= out_shape[oi]; og.append(oi); oi += 1  # noqa: E702
      else:
        pi *= in_shape[ii]; ig.append(ii); ii += 1  # noqa: E702
    og = [a for a in og if a < len(out_shape)]
    ig = [a for a in ig if a < len(in_shape)]
    # flat index within the group, then unflatten into the input group's axes
    flat = None
    for a in og:
      if out_shape[a] == 1: continue
      flat = idx[a] if flat is None else flat * out_shape[a] + idx[a]
    if flat is None: flat = zero
    sub_strides = strides_for(tuple(in_shape[a] for a in ig))
    for a, st in zip(ig, sub_strides):
      if in_shape[a] == 1: out.append(zero)
      else:
        v = flat // st if st != 1 else flat
        out.append(v % in_shape[a] if st * in_shape[a] < pi else v)
  return tuple(out)


def _reshape_index_symbolic(idx: tuple[UOp, ...], out_shape: Shape, in_shape: Shape, zero: UOp) -> tuple[UOp, ...]:
  """reshape_index when a size is symbolic: through the flat index. The input may hold more elements than the
  output (a buffer allocated for the variables' maximum viewed with their bound values): the view is its start."""
  flat = zero
  for i, st, s in zip(idx, strides_for(out_shape), out_shape):
    if not (isinstance(s, int) and s == 1): flat = flat + i * st
  out: list[UOp] = []
  for a, (st, s) in enumerate(zip(strides_for(in_shape), in_shape)):
    if isinstance(s, int) and s == 1: out.append(zero)
    else:
      v = flat // st
      out.append(v if a == 0 else v % s)
  return tuple(out)
