"""Kernel AST -> loop program.

The kernel's output shape becomes launch indices (SPECIAL), each reduction gets its own loop
variables (RANGE), and movement ops become index arithmetic on the way down to each PARAM
(`shape.view_index`). Validity from pads gates loads and selects the pad value. The symbolic
rules then clean the index arithmetic, the device's own rules run, and `linearize` orders it all.

The lowering makes no choices: it applies an optimization plan (a tuple of `plugrad.codegen.opt.Opt`),
by default the first plan of `opt.heuristic.hand_coded_optimizations` that applies.

- UNROLL writes a reduce axis (or `amount` consecutive iterations of it) out in the loop body.
- UPCAST (register tiling): a launch dimension computes several neighbouring outputs per thread.
  The upcast index is a placeholder while lowering; each output copy substitutes gidx*factor +
  offset for it.
- VECTORIZE (devices whose Capabilities set `vector_ops`): launch dimension 0 is not copied but
  vectorised (`plugrad.codegen.vectorize`): one copy whose lane-dependent values are vectors, with
  vector loads where neighbouring outputs read neighbouring elements (a matmul's B rows) and one
  vector accumulator per remaining copy. On a device with masked loads the width need not divide the
  dimension: the last vector's extra lanes read nothing and store nothing (masked loads and stores).
- GROUP splits the one reduction across the threads of a work-group (`_group_reduce`); in a kernel with several
  outputs, every reduction over the shared loops, each through its own local memory.
- OUTER renumbers a launch dimension to the highest (the outermost loop); BLOCK runs a long sum's blocks as a
  launch loop inside a group of another dimension's iterations (`_sum_blocks_in_groups`).
"""
from __future__ import annotations

import functools
import itertools
import operator
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

from plugrad.alu import reduce_identity
from plugrad.codegen.linearize import linearize
from plugrad.codegen.opt import KernelFeatures, Opt, OptError, OptOps
from plugrad.codegen.opt.heuristic import hand_coded_optimizations
from plugrad.codegen.program import LoopProgram, Param
from plugrad.codegen.tensor_core import MatmulShape, fragment_index, matmul_shape, paired_loads, usable_tensor_cores
from plugrad.codegen.vectorize import vector_rules, vectorize
from plugrad.device import Capabilities, TensorCore
from plugrad.dtype import DType, dtypes
from plugrad.shape import prod, smax, strides_for, view_index
from plugrad.symbolic import split_terms, symbolic
from plugrad.uops import GroupOp, Ops, PatternMatcher, UOp, graph_rewrite, substitute, toposort

# A float sum's accumulator takes at most this many values; a longer sum becomes a cascade of nested
# accumulators (see `split_accumulators`). Powers of two up to 2**24 keep sums of ones exact in float32. 256 keeps
# a sequential float32 sum within ~1e-5 (4096: 4e-5 for 10**6 times 0.1) and measured no slower on CPU (64 was 7x).
ACC_BLOCK = 256
#: The fewest steps of a tensor core's K that a cascade's inner accumulator adds (`_lower_tensor_core`): a sum whose
#: steps have no divisor from this to ACC_BLOCK (a prime count of steps above it) stays on the plain kernels, which
#: gate their last block
TC_MIN_INNER_STEPS = 32


def reduce_axes(value: UOp) -> list[tuple[UOp, int]]:
  """The kernel's reduce axes in UNROLL's order: (REDUCE_AXIS node, axis) for every reduced axis of
  size other than 1, nodes in topological order, axes in the node's order."""
  return [(n, ax) for n in value.toposort if n.op is Ops.REDUCE_AXIS for ax in n.arg[1] if n.src[0].shape[ax] != 1]


@dataclass
class _Lowering:
  idx_dtype: DType
  ranges: int = 0
  unroll: dict[tuple[UOp, int], int] = field(default_factory=dict)  # (REDUCE_AXIS, axis) -> iterations written out
  lanes: dict[tuple[UOp, int], int] = field(default_factory=dict)  # (REDUCE_AXIS, axis) -> vector lanes
  masked: bool = False  # the device takes masked vector loads (Capabilities.masked_loads)
  native_cos: bool = True  # the renderer takes COS (Capabilities.optional_ops); else it is made of SINs
  # reductions over the same loops at the same index -> [(the reductions sharing them, their RANGEs)]
  siblings: dict[tuple, list[tuple[list[UOp], list[UOp]]]] = field(default_factory=dict)
  known: dict[UOp, UOp] = field(default_factory=dict)  # kernel AST nodes already lowered (a tensor core's sum)

  def zero(self) -> UOp: return UOp.const(self.idx_dtype, 0)

  def new_range(self, size: int | UOp) -> UOp:
    """A fresh loop variable over 0..size-1 (a symbolic size: a loop bound by the kernel's Variables)."""
    end = size.cast(self.idx_dtype) if isinstance(size, UOp) else UOp.const(self.idx_dtype, size)
    r = UOp(Ops.RANGE, self.idx_dtype, (end,), self.ranges)
    self.ranges += 1
    return r

  def lower(self, n: UOp, idx: tuple[UOp, ...], valid: UOp, memo: dict) -> UOp:
    key = (n, idx, valid)
    if key in memo: return memo[key]
    if n in self.known: return self.known[n]
    if n.op is Ops.PARAM:
      ret = UOp(Ops.LOAD, n.dtype, (n, idx[0]) if valid.op is Ops.CONST and valid.arg else (n, idx[0], valid))
    elif n.op in (Ops.CONST, Ops.DEFINE_VAR): ret = n  # a Variable's value (a symbolic count, as in a mean)
    elif n.op is Ops.ARANGE: ret = idx[0] if idx[0].dtype == n.dtype else idx[0].cast(n.dtype)  # its value: its index
    elif n.op in GroupOp.Movement:
      new_idx, new_valid = view_index(n, idx, valid, self.zero())
      inner = self.lower(n.src[0], new_idx, new_valid, memo)
      ret = inner if new_valid is valid else new_valid.where(inner, UOp.const(n.dtype, n.arg[1]))
    elif n.op is Ops.REDUCE_AXIS and (picked := self._one_hot_pick(n, idx, valid)) is not None: ret = picked
    elif n.op is Ops.REDUCE_AXIS:
      op, axes = n.arg
      src_shape = n.src[0].shape
      inner_idx, ranges, unrolled = list(idx), [], []  # unrolled: (axis, the index of each written-out iteration)
      lane: tuple[UOp, int] | None = None  # the lane placeholder of a LANES axis, and the width
      # a reduction independent of another over the same loops at the same index shares its RANGEs, so the
      # linearizer runs both in one loop and their common loads are read once (x.sum(1) beside x.max(1))
      plan = tuple((self.unroll.get((n, ax), 1), self.lanes.get((n, ax), 1)) for ax in axes)
      loops = (src_shape, axes, idx, valid, plan)
      share = next((sh for sh in self.siblings.get(loops, ()) if all(m not in n.toposort and n not in m.toposort
                                                                    for m in sh[0])), None)
      reuse = iter(share[1]) if share is not None else None
      for ax in axes:
        size = src_shape[ax]
        if size == 1: continue
        if (width := self.lanes.get((n, ax), 1)) > 1:
          # UNROLL on a LANES axis: `amount` vectors per iteration, added to each other before the one accumulator,
          # so the loop-carried chain has one vector add per `amount` loads
          amount = self.unroll.get((n, ax), 1)
          r = self.new_range(size // (width * amount)) if reuse is None else next(reuse)
          ranges.append(r)
          lane = (UOp(Ops.SPECIAL, self.idx_dtype, (), ("lane", r.arg, width)), width)
          if amount == 1: inner_idx[ax] = r * width + lane[0]
          else: unrolled.append((ax, [(r * amount + k) * width + lane[0] for k in range(amount)]))
          continue
        amount = self.unroll.get((n, ax), 1)
        if isinstance(size, int) and amount >= size:  # written out in full
          unrolled.append((ax, [UOp.const(self.idx_dtype, v) for v in range(size)]))
          continue
        r = self.new_range(size // amount if amount > 1 else size) if reuse is None else next(reuse)
        ranges.append(r)
        if amount == 1: inner_idx[ax] = r
        else: unrolled.append((ax, [r * amount + k if k else r * amount for k in range(amount)]))
      if share is not None: share[0].append(n)
      else: self.siblings.setdefault(loops, []).append(([n], ranges))
      if any(src_shape[ax] == 0 for ax in axes): ret = reduce_identity(op, n.dtype)  # reducing nothing
      else:
        body = None
        for values in itertools.product(*(vals for _, vals in unrolled)):
          for (ax, _), v in zip(unrolled, values): inner_idx[ax] = v
          term = self.lower(n.src[0], tuple(inner_idx), valid, memo)
          body = term if body is None else UOp(op, n.dtype, (body, term))
        ret = self._lanes_reduce(op, n.dtype, body, ranges, *lane) if lane else \
          UOp(Ops.REDUCE, n.dtype, (body, *ranges), op) if ranges else body
    elif n.op is Ops.COS and not self.native_cos: ret = cos_from_sin(self.lower(n.src[0], idx, valid, memo))
    elif n.op in GroupOp.ALU:
      ret = UOp(n.op, n.dtype, tuple(self.lower(s, idx, valid, memo) for s in n.src), n.arg)
    else:
      raise ValueError(f"cannot lower {n.op} inside a kernel")
    memo[key] = ret
    return ret

  def _one_hot_pick(self, n: UOp, idx: tuple[UOp, ...], valid: UOp) -> UOp | None:
    """A sum over one axis of where(i == k, x, 0), k the axis's index and i not moving with it (a gather written as a
    one-hot reduction: an embedding lookup, `t[idx]`, `gather`), as the one value it picks: x at k = i, read only
    where i is inside the axis (0 elsewhere). One load instead of a loop over the axis (a 32x128 lookup in a
    10000x256 table, AVX-512: 56 ms -> 0.065 ms), and the value itself: the sum turned a picked -0.0 into 0.0.
    None where the sum is not one, or the plan unrolls or vectorises the axis."""
    op, axes = n.arg
    live = [ax for ax in axes if n.src[0].shape[ax] != 1]
    if op is not Ops.ADD or len(live) != 1 or (n, live[0]) in self.unroll or (n, live[0]) in self.lanes: return None
    size = n.src[0].shape[live[0]]
    if not isinstance(size, int) or not _selects_by_equality(n.src[0]): return None
    k = UOp(Ops.SPECIAL, self.idx_dtype, (), ("pick", -1, size))  # the axis's index, until it is known to be i
    inner = list(idx)
    inner[live[0]] = k
    body = self.lower(n.src[0], tuple(inner), valid, {})
    pick = body.src[0] if body.op is Ops.CAST else body  # an integer sum widens what it adds
    if pick.op is not Ops.WHERE or pick.src[2].op is not Ops.CONST or pick.src[2].arg != 0: return None
    if pick.src[0].op is not Ops.CMPEQ: return None
    a, b = pick.src[0].src
    at = next((i for p, i in ((a, b), (b, a)) if (p is k or (p.op is Ops.CAST and p.src[0] is k))
               and k not in i.toposort), None)
    if at is None: return None
    inside = at.ge(UOp.const(at.dtype, 0)).logical_and(at.lt(UOp.const(at.dtype, size)))
    value = substitute(pick.src[1], {k: at.cast(self.idx_dtype)})
    if k in value.toposort: return None
    # the loads at the picked position read only where it is inside the axis (an index past the table reads nothing)
    value = _gate_loads(value, inside, keep=lambda ld: ld not in at.toposort)
    return inside.where(value.cast(n.dtype), UOp.const(n.dtype, 0))

  def _lanes_reduce(self, op: Ops, dtype: DType, body: UOp, ranges: list[UOp], ph: UOp, width: int) -> UOp:
    """REDUCE of `body` with the lane placeholder `ph` as a vector of `width` lanes: one vector accumulator,
    its lanes combined with `op` after the loop."""
    lanes = [UOp.const(self.idx_dtype, k) for k in range(width)]
    pairs = vectorize(body, ph, ph, lanes, lambda u: graph_rewrite(u, symbolic), self.masked)
    if pairs is None: raise OptError("LANES: no load of the reduction reads neighbouring elements per lane")
    vec = pairs[0][1] if len(pairs) == 1 else UOp(Ops.VECTORIZE, dtype.vec(width), tuple(v for _, v in pairs))
    red = UOp(Ops.REDUCE, dtype.vec(width), (vec, *ranges), op)
    # the lanes combined as a tree (each with the one half the lanes away, and again): after a short loop (softmax of
    # rows of 32, two vectors each) a chain of 15 dependent adds was most of a row's time
    vals = [UOp(Ops.GEP, dtype, (red,), k) for k in range(width)]
    while len(vals) > 1:
      half = len(vals) // 2
      vals = [UOp(op, dtype, (vals[k], vals[k + half])) for k in range(half)] + vals[2 * half:]
    return vals[0]


def cos_from_sin(x: UOp) -> UOp:
  """cos x for a renderer without COS, from SIN and never from a rounded x (sin(pi/2 - x) loses every digit of a
  large x): 1 - 2 sin²(x/2) where |cos x| >= 1/2, and sin(2x) / (2 sin x) near its zeros, where the first is only
  accurate to an absolute 1e-7. Halves compute in float32."""
  w = x.cast(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
  half = (w * 0.5).alu(Ops.SIN)
  c = UOp.const(w.dtype, 1.0) - half * half * 2.0
  twice = w * 2.0
  near_zero = c.maximum(-c).lt(0.5).logical_and(twice.maximum(-twice).lt(float("inf")))  # not at inf or NaN
  return near_zero.where(twice.alu(Ops.SIN).alu(Ops.FDIV, w.alu(Ops.SIN) * 2.0), c).cast(x.dtype)


def _selects_by_equality(u: UOp) -> bool:
  """Whether a reduction's source is, below movement ops and a cast, a WHERE on an equality (what `_one_hot_pick`
  needs before it lowers anything)."""
  while u.op in GroupOp.Movement or u.op is Ops.CAST: u = u.src[0]
  if u.op is not Ops.WHERE: return False
  cond = u.src[0]
  while cond.op in GroupOp.Movement: cond = cond.src[0]
  return cond.op is Ops.CMPEQ


def _live(s: int | UOp) -> bool:
  """Whether an axis of this size is a real one (a symbolic size counts even where it may be 1)."""
  return not isinstance(s, int) or s > 1


def _maybe_lt(a: int | UOp, b: int | UOp) -> bool:
  """a < b where that is known; True (keep the modulo, always correct) where it depends on the Variables."""
  try:
    return bool(a < b)
  except TypeError:
    return True


def _unflatten(flat: UOp, sizes: Sequence[int | UOp], total: int | UOp,
               below: Callable[[int | UOp, int | UOp], bool] = _maybe_lt) -> list[UOp]:
  """The index along each of `sizes` of `flat`, a row-major index below `total` over them: (flat // stride) % size,
  without the division where the stride is 1 or the modulo where stride * size reaches `total` (the outermost).
  `below` decides that; the default keeps the modulo where symbolic sizes leave it open."""
  out = []
  for st, sz in zip(strides_for(tuple(sizes)), sizes):
    v = flat // st if st != 1 else flat
    out.append(v % sz if below(st * sz, total) else v)
  return out


def _outermost(sink: UOp, global_size: tuple, axis: int) -> tuple[UOp, tuple]:
  """Launch dim `axis` renumbered to the highest (the outermost loop of a device that loops over its launch, the
  one its threads split), the dims above it one lower each."""
  order = [d for d in range(len(global_size)) if d != axis] + [axis]  # new dim i is old dim order[i]
  new_dim = {old: new for new, old in enumerate(order)}
  renamed = {u: UOp(Ops.SPECIAL, u.dtype, u.src, (f"gidx{new_dim[u.arg[1]]}", new_dim[u.arg[1]], u.arg[2]))
             for u in sink.toposort if u.op is Ops.SPECIAL and u.arg[0].startswith("gidx")}
  return substitute(sink, renamed), tuple(global_size[d] for d in order)


def _sum_blocks_in_groups(sink: UOp, global_size: tuple, opt: Opt, idx_dtype: DType) -> tuple[UOp, tuple]:
  """BLOCK: the outer loop of every output's sum (the blocks `split_accumulators` cut a long sum into) becomes a
  launch loop inside groups of `opt.amount` iterations of launch dim `opt.axis`. The dims below it stay; dim `axis`
  becomes the position in the group, `axis + 1` the block, `axis + 2` the group, and the dims above `axis` move up
  two. Each block adds its partial sums to what the blocks before it stored, the first to 0: the same additions in
  the same order as the accumulator it replaces, so the same sums to the bit. On a device that runs a thread's
  part of the outermost loop in order (a loop device splits only that one), the blocks of one output run in order.
  A matmul reads one block of B (all its columns) once per group instead of once per row tile (float32 on AVX-512
  with 2 MiB of L2: 1024x1024 by 1024x1024 200 -> 300 GFLOP/s; 256x16384 by 16384x512, whose panels of B do not fit
  for OUTER, 0.48 -> 0.74x numpy)."""
  axis, group = opt.axis, opt.amount
  stores = sink.src
  values = [st.src[2] for st in stores]
  # each value the outer loop of a cascade (`_cascade`): a sum over one loop of the sums of the blocks
  if any(len(st.src) != 3 for st in stores) or len({v.src[1:] for v in values}) != 1 or \
      any(v.op is not Ops.REDUCE or v.arg is not Ops.ADD or len(v.src) != 2 or v.src[0].op is not Ops.REDUCE
          for v in values):
    raise OptError(f"{opt}: the outputs are not one float sum cut into blocks (of more than {ACC_BLOCK} terms, stored "
                   f"as it is, ungated)")
  loop, size = values[0].src[1], global_size[axis]
  if loop.src[0].op is not Ops.CONST or not isinstance(size, int) or size % group:
    raise OptError(f"{opt}: the groups do not divide launch dimension {axis} ({size}), or the blocks are symbolic")
  blocks = loop.src[0].arg
  block = _special(f"gidx{axis + 1}", axis + 1, blocks, idx_dtype)
  index = _special(f"gidx{axis + 2}", axis + 2, size // group, idx_dtype) * group + \
    _special(f"gidx{axis}", axis, group, idx_dtype)
  renamed = {u: index if u.arg[1] == axis else UOp(Ops.SPECIAL, u.dtype, u.src, (f"gidx{u.arg[1] + 2}", u.arg[1] + 2,
                                                                               u.arg[2]))
             for u in sink.toposort if u.op is Ops.SPECIAL and u.arg[0].startswith("gidx") and u.arg[1] >= axis}
  later = block.ne(UOp.const(idx_dtype, 0))  # the blocks before this one stored their sum: a false gate reads 0
  stores = tuple(UOp(Ops.STORE, None, (p, i, UOp(Ops.LOAD, v.dtype, (p, i, later)) + substitute(v.src[0], {loop: block})))
                 for (p, i, _), v in zip((st.src for st in stores), values))
  sizes = global_size[:axis] + (group, blocks, size // group) + global_size[axis + 1:]
  return substitute(UOp(Ops.SINK, None, stores), renamed), sizes


def _special(name: str, dim: int, size: int | UOp, dtype: DType) -> UOp:
  """A launch index; a symbolic size is its source (evaluated at launch) and its largest value the arg's."""
  if isinstance(size, int): return UOp(Ops.SPECIAL, dtype, (), (name, dim, size))
  return UOp(Ops.SPECIAL, dtype, (size.cast(dtype),), (name, dim, smax(size)))


def _symbolic_locals(dims: list[tuple[list[int], int | UOp]], caps: Capabilities) -> dict[int, int]:
  """Work-group sizes for the launch dimensions whose size depends on a Variable (on a device with work-groups):
  the launch rounds such a size up to whole groups and the threads past it are gated off."""
  if not caps.launch_dims or not caps.max_local_size: return {}
  budget, out = caps.max_workgroup_threads, {}
  for d, (_, size) in enumerate(dims):
    if isinstance(size, int): continue
    group = min(caps.max_local_size[d] if d < len(caps.max_local_size) else 1, 32 if d == 0 else 8, budget)
    if group > 1: out[d], budget = group, budget // group
  return out


def symbolic_ast(ast: UOp) -> bool:
  """Whether a kernel AST has a shape that depends on a Variable."""
  return any(isinstance(d, UOp) for n in ast.toposort if n.op not in (Ops.SINK, Ops.STORE) for d in n.shape)


def _launch_dims(shape: tuple[int, ...], caps: Capabilities) -> list[tuple[list[int], int]]:
  """Group the output's axes into launch dimensions: [(axes, size)], innermost axis first."""
  axes = [i for i, s in enumerate(shape) if _live(s)]
  if caps.launch_dims == 0: return [([a], shape[a]) for a in reversed(axes)]
  groups = [[a] for a in reversed(axes)]
  while len(groups) > caps.launch_dims: groups[-2:] = [groups[-1] + groups[-2]]  # merge the outermost
  dims = [(sorted(g), prod(shape[a] for a in g)) for g in groups]
  if any(smax(size) > caps.max_global_size[min(d, len(caps.max_global_size) - 1)] for d, (_, size) in enumerate(dims)):
    dims = [(sorted(axes), prod(shape[a] for a in axes))]  # one flat dimension
    if smax(dims[0][1]) > caps.max_global_size[0]:
      raise ValueError(f"output of {dims[0][1]} elements exceeds the device's launch size")
  return dims


def _local_size(global_size: tuple[int, ...], caps: Capabilities, fixed: dict[int, int] | None = None) \
    -> tuple[int, ...] | None:
  """Work-group sizes that divide the global sizes (so no thread falls outside), largest first
  on the innermost dimension; `fixed` gives those of the dimensions whose size depends on a Variable."""
  if not caps.max_local_size: return None
  budget, local = caps.max_workgroup_threads, []
  for d, g in enumerate(global_size):
    if not isinstance(g, int):  # a size known only at launch, rounded up to whole work-groups of the fixed size
      local.append((fixed or {}).get(d, 1))
      budget //= local[-1]
      continue
    cap = min(caps.max_local_size[d] if d < len(caps.max_local_size) else 1, budget, 256 if d == 0 else 16)
    size = max(x for x in range(1, cap + 1) if g % x == 0) if cap > 0 else 1
    local.append(size)
    budget //= size
  return tuple(local)


def outputs_of(ast: UOp) -> list[tuple[UOp, UOp]]:
  """(output PARAM, value) of each STORE of a kernel AST; every value has the same shape (the launch's)."""
  outs = [(st.src[0], st.src[1]) for st in ast.src]
  if len({v.shape for _, v in outs}) != 1:
    raise ValueError(f"a kernel's outputs differ in shape: {[v.shape for _, v in outs]}")
  return outs


def _index_coefficients(sink: UOp, gids: list[UOp]) -> tuple[list[dict[UOp, int]], set[UOp]]:
  """For a simplified plain lowering: each load index's coefficient of each launch index, and the launch indices
  read some other way (inside a division or a product of indices, in a gate or a select, as a value). A load is
  opaque to the indices around it: its own index is read as one of the loads."""
  wanted = set(gids)

  def reaches(u: UOp) -> set[UOp]:
    found: set[UOp] = set()
    stack, seen = [u], set()
    while stack:
      n = stack.pop()
      if n in seen: continue
      seen.add(n)
      if n in wanted: found.add(n)
      elif n.op is Ops.LOAD: stack.extend(n.src[2:])  # its gate only: the index is checked as a load's
      else: stack.extend(n.src)
    return found
  loads = [n for n in sink.toposort if n.op is Ops.LOAD]
  tangled = reaches(sink)
  coefficients = []
  for ld in loads:
    terms, _ = split_terms(ld.src[1])
    coef: dict[UOp, int] = {}
    for t, k in terms:
      if t in wanted: coef[t] = coef.get(t, 0) + k
      else: tangled |= reaches(t)
    coefficients.append(coef)
  return coefficients, tangled


#: An innermost loop this long fills vectors with little left over: merged further into one flat loop it measured
#: 5-10% slower (x * 2 on 1024x1024 float32, AVX-512: 0.074 -> 0.081 ms), so axes merge only while it is shorter.
MERGE_BELOW = 256


@functools.lru_cache(maxsize=1024)  # asked by kernel_features and lower for the same kernel
def merge_axes(ast: UOp) -> UOp:
  """The kernel with its innermost output axes merged into one where every load reads them as one (each axis moves
  each index by the size of the one inside it times that one's step: the rows of a contiguous tensor, a per-channel
  value broadcast over an image): its values reshaped to the merged shape, which the lowering folds back into plain
  indices. The innermost loop of an image of 20x20 becomes one of 400 that vectors fill (x * 2 on 128x32x20x20
  float32, AVX-512: 0.47 -> 0.07 ms; beautiful_mnist's batch norm passes 0.54-0.94 -> 0.06-0.08 ms). A padded,
  permuted or windowed read keeps its axes apart. Outer axes alone are left as they are: merged above a short inner
  loop they only made the loop nest's counts run-time ones (a max-pool's kernel: 0.087 -> 0.125 ms). Kernels whose
  sizes depend on Variables are kept as they are."""
  outputs = outputs_of(ast)
  shape = outputs[0][1].shape
  if not all(isinstance(s, int) for s in shape): return ast
  live = [a for a, s in enumerate(shape) if s > 1]
  if len(live) < 2: return ast
  # one launch index per live axis, innermost first (as a device that loops over its launch lays them out)
  sink, gids, _ = _plain_lowering(ast, [v for _, v in outputs], [([a], shape[a]) for a in reversed(live)])
  gids.reverse()  # in the axes' order, as `live`
  coefficients, tangled = _index_coefficients(graph_rewrite(sink, symbolic), gids)

  def merges(k: int) -> bool:  # whether live axis k merges with the one inside it
    outer, inner = gids[k], gids[k + 1]
    return outer not in tangled and inner not in tangled and \
      all(c.get(outer, 0) == shape[live[k + 1]] * c.get(inner, 0) for c in coefficients)
  run, inner = 1, shape[live[-1]]  # the innermost axes that merge into one, and its size
  while run < len(live) and inner < MERGE_BELOW and merges(len(live) - run - 1):
    run, inner = run + 1, inner * shape[live[-run - 1]]
  if run == 1: return ast
  merged = tuple(shape[a] for a in live[:-run]) + (prod(shape[a] for a in live[-run:]),)
  return ast.replace(src=tuple(st.replace(src=(st.src[0], UOp(Ops.RESHAPE, st.src[1].dtype, (st.src[1],), merged),
                                               *st.src[2:])) for st in ast.src))


def kernel_name(ast: UOp) -> str:
  """A readable kernel name: r_ for kernels with reductions, E_ for elementwise, then the output shape."""
  value = ast.src[0].src[1]
  kind = "r" if any(n.op is Ops.REDUCE_AXIS for n in ast.toposort) else "E"
  shape = "_".join(str(s) if isinstance(s, int) else "".join(v.arg[0] for v in s.toposort if v.op is Ops.DEFINE_VAR)
                   for s in value.shape) or "1"
  return f"{kind}_{shape}"


def _index_terms(idx: UOp, memo: dict[UOp, list[tuple[UOp, int]]]) -> list[tuple[UOp, int]]:
  """The (term, coefficient) pairs of a load's simplified index, each index simplified once (`memo`)."""
  if (terms := memo.get(idx)) is None: terms = memo[idx] = split_terms(graph_rewrite(idx, symbolic))[0]
  return terms


def _reads_along(idx: UOp, v: UOp, memo: dict[UOp, list[tuple[UOp, int]]]) -> bool | None:
  """Whether a load at `idx` reads neighbouring elements for neighbouring values of `v` (coefficient 1 of `v` as a
  plain term of the simplified index, appearing nowhere else); None where it does not move with `v`."""
  if v not in idx.toposort: return None
  terms = _index_terms(idx, memo)
  coef = sum(c for t, c in terms if t is v)
  return coef == 1 and not any(t is not v and v in t.toposort for t, _ in terms)


def _reduce_loads(out_value: UOp) -> Iterator[tuple[UOp, UOp]]:
  """(reduction, load) for each load inside a reduce loop that moves with the loop: a loop-invariant one (softmax's
  row max) and one outside the loops are read once per output."""
  for red in (n for n in out_value.toposort if n.op is Ops.REDUCE):
    for ld in (n for n in red.src[0].toposort if n.op is Ops.LOAD and any(r in n.src[1].toposort for r in red.src[1:])):
      yield red, ld


def _loop_loads(out_value: UOp) -> list[UOp]:
  """The loads of `_reduce_loads`, each once."""
  return list(dict.fromkeys(ld for _, ld in _reduce_loads(out_value)))


def _innermost_coefficients(out_value: UOp, lane: UOp | None,
                            memo: dict[UOp, list[tuple[UOp, int]]]) -> tuple[list[UOp], bool]:
  """(some load in a reduce loop reads neighbouring elements for neighbouring values of `lane`, every
  load that moves with the innermost loop of its reduction reads neighbouring elements in it)."""
  unit = functools.partial(_reads_along, memo=memo)
  lane_loads, red_ok, red_seen = [], True, False
  for red, ld in _reduce_loads(out_value):
    if (u := unit(ld.src[1], red.src[-1])) is not None:
      red_seen = True
      red_ok = red_ok and u
    if lane is not None and unit(ld.src[1], lane): lane_loads.append(ld)
  return lane_loads, red_ok and red_seen


_TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS})


def kernel_features(ast: UOp, caps: Capabilities) -> KernelFeatures:
  """What the heuristic reads from `ast` (its axes merged, as the lowering merges them) for a device with `caps`."""
  return _merged_features(merge_axes(ast), caps)


def _merged_features(ast: UOp, caps: Capabilities) -> KernelFeatures:
  """`kernel_features` of a kernel whose axes are merged already. The load pattern (contiguous along the output or
  along the reduce loop) is read from a plain lowering only where it matters: on a device that loops over its launch
  indices and has vector ops, and for a reduction on a device with launch indices (whether a work-group's threads
  would read apart)."""
  values = [v for _, v in outputs_of(ast)]
  value, shape = values[0], values[0].shape
  dims = _launch_dims(shape, caps)
  reduces = [n for n in ast.toposort if n.op is Ops.REDUCE_AXIS]
  nested = any(m.op is Ops.REDUCE_AXIS for r in reduces for m in r.src[0].toposort)
  group_ok = caps.launch_dims >= 2
  try:
    if group_ok:
      _launch_dims(shape, replace(caps, launch_dims=caps.launch_dims - 1, max_global_size=caps.max_global_size[1:]))
  except ValueError:
    group_ok = False
  lane_ok = red_ok = False
  reuse: tuple[int, ...] = ()
  contiguous: tuple[int, ...] = ()
  body_ops = 0
  divisors: set[int] = set()
  sliding: tuple[tuple[int, int], ...] = ()
  padded: tuple[int, ...] = ()
  unit_dims: tuple[int, ...] = ()
  lane_strided = False
  cpu_vectors = caps.launch_dims == 0 and caps.vector_ops
  if cpu_vectors or (caps.launch_dims > 0 and reduces):
    sink, gids, lane = _plain_lowering(ast, values, dims)
    terms: dict[UOp, list[tuple[UOp, int]]] = {}  # each load's simplified index, for the readings below
    if reduces:
      lane_loads, red_ok = _innermost_coefficients(sink, lane, terms)
      lane_ok = bool(lane_loads)
  if cpu_vectors and not reduces:
    loads = [u for u in sink.toposort if u.op is Ops.LOAD]
    unit_dims = tuple(d for d, g in enumerate(gids) if any(_reads_along(ld.src[1], g, terms) for ld in loads))
    lane_strided = lane is not None and any(_reads_along(ld.src[1], lane, terms) is False for ld in loads)
  elif cpu_vectors:
    # a dimension the vector loads do not move with: tiling it reuses each loaded vector for several outputs.
    # The vector loads are those in a reduce loop moving with the lanes: contiguous ones, else the gathers (a strided
    # convolution's). A load outside the loops is read once per output (a residual added to a projection, x + h @ W.T:
    # counted, it left the matmul no dim to tile: 193 -> 109 us for 16x32x256 by 64x256, AVX-512)
    vector_loads = lane_loads or [ld for ld in _loop_loads(sink) if lane is not None and lane in ld.src[1].toposort]
    reuse = tuple(d for d, g in enumerate(gids)
                  if d and vector_loads and all(g not in ld.src[1].toposort for ld in vector_loads))
    # ... and those some load reads neighbouring elements along (a convolution's weight laid out with its output
    # channels innermost): vector lanes there load vectors, where lanes along a short image row would idle
    contiguous = tuple(d for d in reuse if len(dims[d][0]) == 1 and _innermost_coefficients(sink, gids[d], terms)[0])
    # (simplified first: a product with 1 goes, and a padded read's select folds into the load's gate)
    body_ops = sum(1 for red in graph_rewrite(sink, symbolic).toposort if red.op is Ops.REDUCE
                   for n in red.src[0].toposort if n.op in GroupOp.ALU and n.dtype.is_float)
    if len(reduces) == 1: sliding, padded = _sliding_axes(sink, gids, terms)
  if cpu_vectors and lane is not None:
    loads = [u for u in sink.toposort if u.op is Ops.LOAD]
    # an elementwise kernel's merged axes divide its index only until it is simplified
    indices = [ld.src[1] if reduces else graph_rewrite(ld.src[1], symbolic) for ld in loads]
    divisors = {int(u.src[1].arg) for ix in indices for u in ix.toposort if u.op in (Ops.IDIV, Ops.MOD)
                and u.src[1].op is Ops.CONST and u.src[1].arg > 1 and lane in u.src[0].toposort}
  axes = reduce_axes(ast)
  last = {r: ax for r, ax in axes}  # the last axis of each reduction (its innermost loop)
  sum_block = 0
  if len(axes) == 1 and axes[0][0].arg[0] is Ops.ADD and axes[0][0].dtype.is_float and \
      isinstance(terms := axes[0][0].src[0].shape[axes[0][1]], int) and terms > ACC_BLOCK:
    lw = _Lowering(dtypes.int32)
    outer = _split_loops((lw.new_range(terms),), lw, ACC_BLOCK)[1][0].src[0].arg  # the outer accumulator loop's trips
    sum_block = -(-terms // outer)
  mm = _matmul_of(ast) if caps.tensor_cores else None
  tcs = usable_tensor_cores(mm, caps)
  tc_steps = mm.sizes[2] // caps.tensor_cores[tcs[0]].dims[2] if mm is not None and tcs else 0
  # a symbolic size reads as its largest value: the heuristic only chooses, `_check_opts` and the lowering refuse
  # an Opt whose amount would have to divide it
  return KernelFeatures(dims=tuple((len(axes), smax(size)) for axes, size in dims), group_dims_ok=group_ok,
                        outputs=len(values),
                        reduce_axes=tuple(smax(r.src[0].shape[ax]) for r, ax in axes), reduces=len(reduces),
                        nested=nested, out_size=smax(prod(shape)), itemsize=value.dtype.itemsize,
                        reduce_itemsize=reduces[0].dtype.itemsize if reduces else 4,
                        lane_contiguous=lane_ok, reduce_contiguous=red_ok,
                        innermost=tuple(i for i, (r, ax) in enumerate(axes) if last[r] == ax), reuse_dims=reuse,
                        contiguous_dims=contiguous, body_ops=body_ops,
                        lane_divisors=tuple(sorted(divisors)), sliding=sliding, padded_taps=padded,
                        unit_dims=unit_dims, lane_strided=lane_strided,
                        computes_sin=any(n.op in (Ops.SIN, Ops.COS) for n in ast.toposort),
                        reduce_transcendental=any(m.op in _TRANSCENDENTAL for r in reduces for m in r.src[0].toposort),
                        sum_block=sum_block, tensor_cores=tcs, tc_cascade=tc_steps > ACC_BLOCK,
                        matmul=(*mm.sizes, mm.batch) if mm is not None else (0, 0, 0, 0))


def _matmul_of(ast: UOp) -> MatmulShape | None:
  """The matmul a kernel (axes merged) computes (`codegen.tensor_core.matmul_shape`), for one output of fixed size."""
  outputs = outputs_of(ast)
  if len(outputs) != 1 or symbolic_ast(ast): return None
  value = outputs[0][1]
  reduces = [n for n in value.toposort if n.op is Ops.REDUCE_AXIS]
  if len(reduces) != 1: return None
  shape = reduces[0].src[0].shape
  lw = _Lowering(_index_dtype(ast))
  places = tuple(UOp(Ops.SPECIAL, lw.idx_dtype, (), (f"axis{a}", -1, s)) for a, s in enumerate(shape))
  reads: dict[UOp, frozenset[UOp]] = {}

  def moves_with(node: UOp, axis: int) -> bool:
    if node not in reads: reads[node] = frozenset(lw.lower(node, places, UOp.const(dtypes.bool, True), {}).toposort)
    return places[axis] in reads[node]
  return matmul_shape(value, moves_with)


def _plain_lowering(ast: UOp, values: list[UOp], dims: list[tuple[list[int], int]]
                    ) -> tuple[UOp, list[UOp], UOp | None]:
  """A kernel's values lowered without a plan, one launch index per launch dimension: (SINK of the values, the
  indices, launch dim 0's index where it is one output axis)."""
  shape = values[0].shape
  lw = _Lowering(_index_dtype(ast))
  idx: list[UOp] = [lw.zero()] * len(shape)
  lane = None
  gids: list[UOp] = []
  for d, (axes, size) in enumerate(dims):
    gid = _special(f"gidx{d}", d, size, lw.idx_dtype)
    gids.append(gid)
    if d == 0 and len(axes) == 1: lane = gid
    # a comparison symbolic sizes leave open raises TypeError here: the heuristic then plans nothing for the kernel
    for a, v in zip(axes, _unflatten(gid, [shape[a] for a in axes], size, operator.lt)): idx[a] = v
  lowered = [lw.lower(v, tuple(idx), UOp.const(dtypes.bool, True), {}) for v in values]
  return UOp(Ops.SINK, None, tuple(lowered)), gids, lane


def _sliding_axes(out_value: UOp, gids: list[UOp], memo: dict[UOp, list[tuple[UOp, int]]]
                  ) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
  """KernelFeatures.sliding and .padded_taps of a kernel with one reduction, from its plain lowering: the loops of
  the (one) REDUCE are its axes in UNROLL's order; a load slides where the axis's loop and a launch index have one
  coefficient."""
  found: set[tuple[int, int]] = set()
  gated: set[int] = set()
  for red in (n for n in out_value.toposort if n.op is Ops.REDUCE):
    for ld in (n for n in red.src[0].toposort if n.op is Ops.LOAD):
      coef: dict[UOp, int] = {}
      for t, c in _index_terms(ld.src[1], memo): coef[t] = coef.get(t, 0) + c
      pairs = {(i, d) for i, r in enumerate(red.src[1:]) for d, g in enumerate(gids)
               if coef.get(r, 0) == coef.get(g) != 0}
      found |= pairs
      if len(ld.src) == 3: gated |= {i for i, _ in pairs}
  return tuple(sorted(found)), tuple(sorted(gated))


def _index_dtype(ast: UOp) -> DType:
  """int32 unless an index the kernel computes can reach 2**31 - 1. What the lowering computes is bounded by: a
  buffer's size (an element offset), an axis's length (a position along it), a reshape's element count (the flat
  offset it goes through) and the count of values a reduction adds per output (its loops merged into one). A broadcast
  intermediate is never indexed whole: a 4096^3 matmul's products (2**36 of them) made every index of its kernel int64
  (a GPU's 64-bit integer ops take two or more instructions; nvcc narrowed most: the float32 kernel's PTX kept 25 of
  them, 12 with int32, and the CPU's 4096 matmul ran at 342 GFLOP/s either way)."""
  bounds = [0]
  for n in ast.toposort:
    if n.op is Ops.PARAM: bounds.append(n.arg[1])
    elif n.op in (Ops.SINK, Ops.STORE): continue
    else:
      bounds += [smax(s) for s in n.shape]
      if n.op is Ops.RESHAPE: bounds.append(smax(prod(n.shape)))
      elif n.op is Ops.REDUCE_AXIS: bounds.append(smax(prod(n.src[0].shape[a] for a in n.arg[1])))
  return dtypes.int64 if max(bounds) >= 2**31 - 1 else dtypes.int32


def _gate_loads(root: UOp, valid: UOp, keep: Callable[[UOp], bool] = lambda n: True) -> UOp:
  """`root` with every LOAD (that `keep` accepts) reading only where `valid` holds (a false gate reads nothing)."""
  return substitute(root, {n: n.replace(src=(n.src[0], n.src[1], n.src[2].logical_and(valid) if len(n.src) > 2 else valid))
                           for n in root.toposort if n.op is Ops.LOAD and keep(n)})


def _group_reduce(lw: _Lowering, values: list[UOp], lid: UOp, threads: int) -> list[UOp]:
  """Rewrite the REDUCEs in `values` (one, or several over the same loops: a multi-output kernel's) into
  per-thread partials combined through local memory, one local buffer and barrier per reduction."""
  reds = [n for n in toposort(values) if n.op is Ops.REDUCE]
  if len({r.src[1:] for r in reds}) != 1: raise OptError("GROUP: the reductions do not share their loops")
  ranges = reds[0].src[1:]
  total = prod(r.src[0].arg for r in ranges)
  loop = UOp(Ops.RANGE, lw.idx_dtype, (UOp.const(lw.idx_dtype, -(-total // threads)),), lw.ranges)
  lw.ranges += 1
  i = loop * threads + lid
  in_range = i.lt(total)
  # each original loop variable from the flat index i, and every load gated so the tail reads nothing
  mapping = dict(zip(ranges, _unflatten(i, [r.src[0].arg for r in ranges], total)))
  j = UOp(Ops.RANGE, lw.idx_dtype, (UOp.const(lw.idx_dtype, threads),), lw.ranges)
  lw.ranges += 1
  finals: dict[UOp, UOp] = {}
  for k, red in enumerate(reds):
    body = substitute(red.src[0], mapping)
    part_body = in_range.where(_gate_loads(body, in_range), reduce_identity(red.arg, red.dtype))
    partial = UOp(Ops.REDUCE, red.dtype, (part_body, loop), red.arg)
    local = UOp(Ops.DEFINE_LOCAL, red.dtype, (), (k, threads))
    barrier = UOp(Ops.BARRIER, red.dtype, (UOp(Ops.STORE, None, (local, lid, partial)),))
    finals[red] = UOp(Ops.REDUCE, red.dtype, (UOp(Ops.LOAD, red.dtype, (barrier, j)), j), red.arg)
  return [substitute(v, finals) for v in values]


@functools.lru_cache(maxsize=None)
def _block_split(size: int, block: int) -> tuple[int, int]:
  """(outer, inner) loop sizes for a loop of `size` > `block`: inner the largest divisor of size in
  [block/8, block] when there is one (outer * inner == size), else block with a padded last block."""
  inner = next((d for d in range(block, block // 8 - 1, -1) if size % d == 0), block)
  return -(-size // inner), inner


_Split = tuple[dict[UOp, UOp], list[UOp], list[UOp], "UOp | None"]


def _split_loops(ranges: tuple[UOp, ...], lw: _Lowering, block: int) -> _Split:
  """(each split loop variable -> its expression in the new loops, the loops after splitting outermost first,
  the new loops, the validity of a padded last block) for reduce loops `ranges`."""
  mapping: dict[UOp, UOp] = {}
  valid: UOp | None = None
  loops: list[UOp] = []  # the loops after splitting, outermost first
  split: list[UOp] = []  # the loops that replace split ones
  for r in ranges:
    size, pieces = r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0], []
    while smax(size) > block:  # split off inner blocks until the outer loop is short too
      if isinstance(size, int):
        outer, inner = _block_split(size, block)
        pieces.insert(0, (inner, outer * inner != size, size))
      else:  # a length known at launch: blocks of `block`, the last one gated
        outer, inner = (size + (block - 1)) // block, block
        pieces.insert(0, (inner, True, size))
      size = outer
    if not pieces:
      loops.append(r)
      continue
    new = [lw.new_range(size)] + [lw.new_range(inner) for inner, _, _ in pieces]
    split += new
    expr = new[0]
    for v, (inner, padded, total) in zip(new[1:], pieces):
      expr = expr * inner + v
      if padded: valid = expr.lt(total) if valid is None else valid.logical_and(expr.lt(total))
    mapping[r] = expr
    loops += new
  return mapping, loops, split, valid


def _cascade(red: UOp, lw: _Lowering, block: int, splits: dict[tuple[UOp, ...], _Split]) -> UOp:
  """One reduction (a float sum, or one sharing its loops with a float sum) as nested reductions of at most
  `block` values each (its loops split where longer). Reductions over the same loops are split alike (`splits`),
  so they keep sharing their loops."""
  body, ranges = red.src[0], tuple(red.src[1:])
  if ranges not in splits: splits[ranges] = _split_loops(ranges, lw, block)
  mapping, loops, split, valid = splits[ranges]
  if not mapping: return red
  body = substitute(body, mapping)
  if valid is not None:  # padded blocks: the tail reads nothing and adds the identity
    body = valid.where(_gate_loads(body, valid, lambda n: any(m in n.toposort for m in split)),
                       reduce_identity(red.arg, red.dtype))
  # group the loops from the innermost, each group's trip count at most `block`: one accumulator per group
  groups: list[list[UOp]] = []
  for r in reversed(loops):
    if groups and prod(x.src[0].vmax for x in groups[-1]) * r.src[0].vmax <= block: groups[-1].insert(0, r)
    else: groups.append([r])
  for g in groups: body = UOp(Ops.REDUCE, red.dtype, (body, *g), red.arg)
  return body


def split_accumulators(value: UOp, lw: _Lowering, block: int = 0) -> UOp:
  """Float sums of more than `block` (default ACC_BLOCK) values as a cascade of accumulators.

  A float32 accumulator that adds n values loses up to n units in the last place (a sum of ones
  stops growing at 2**24), so each accumulator here adds at most `block` values and hands its
  sum to the next level: the error grows with block * levels instead of n, a sum of ones is exact
  (every level adds exact multiples), and it needs no wider type, so devices without float64 get
  it too. A loop longer than `block` is split into an outer loop and an inner one of a divisor of
  its length, or of `block` with the last block gated when the length has no such divisor. A reduction that
  shares its loops with such a sum (a max beside it in a multi-output kernel) is split alike, so both keep
  running in one loop (nesting a max, a min or an integer reduction is exact)."""
  block = block or ACC_BLOCK
  long_sums = {n.src[1:] for n in value.toposort if n.op is Ops.REDUCE and n.arg is Ops.ADD and
               n.dtype.scalar().is_float and prod(r.src[0].vmax for r in n.src[1:]) > block}  # a Variable: its max
  if not long_sums: return value
  new: dict[UOp, UOp] = {}
  splits: dict[tuple[UOp, ...], _Split] = {}
  for n in value.toposort:
    m = n.replace(src=tuple(new[s] for s in n.src))
    if m.op is Ops.REDUCE and m.src[1:] in long_sums: m = _cascade(m, lw, block, splits)
    new[n] = m
  return new[value]


def lower(ast: UOp, caps: Capabilities, extra_rules: list[PatternMatcher] | None = None,
          checker=None, acc_block: int = ACC_BLOCK, opts: Sequence[Opt] | None = None) -> LoopProgram:
  """Lower a kernel AST (SINK of STOREs into PARAMs 0..n-1, n outputs of one shape) to a LoopProgram for a
  device with `caps`.

  :param extra_rules: device rewrite rules, applied with the symbolic rules.
  :param checker: called as checker(graph, stage) after each pass (tests pass the IR spec check).
  :param acc_block: the most values one float-sum accumulator adds (`split_accumulators`).
  :param opts: the optimization plan; None: the first of the heuristic's plans that applies.
  :raises OptError: when `opts` does not apply to the kernel.
  """
  merged = merge_axes(ast)
  prog = _lower_plan(merged, caps, extra_rules, checker, acc_block, opts)
  return prog if merged is ast else replace(prog, name=kernel_name(ast))  # named by the tensor's shape still


def _lower_plan(ast: UOp, caps: Capabilities, extra_rules: list[PatternMatcher] | None, checker, acc_block: int,
                opts: Sequence[Opt] | None) -> LoopProgram:
  """`lower` of a kernel whose axes are merged."""
  if opts is not None: return _lower(ast, caps, tuple(opts), extra_rules, checker, acc_block)
  if symbolic_ast(ast): return _lower_symbolic(ast, caps, extra_rules, checker, acc_block)
  *better, last = hand_coded_optimizations(_merged_features(ast, caps), caps)
  for plan in better:
    try:
      return _lower(ast, caps, plan, extra_rules, checker, acc_block)
    except OptError:
      pass  # e.g. a VECTORIZE whose lanes would only gather: the next plan is the scalar one
  return _lower(ast, caps, last, extra_rules, checker, acc_block)


def _lower_symbolic(ast: UOp, caps: Capabilities, extra_rules: list[PatternMatcher] | None, checker,
                    acc_block: int) -> LoopProgram:
  """`lower` of a kernel with Variables: it serves every value, so only Opts on its concrete sizes apply (an
  amount cannot divide a symbolic size); the first of the heuristic's plans that applies, else the plain one."""
  try:
    plans = hand_coded_optimizations(_merged_features(ast, caps), caps)
  except TypeError:  # a size the heuristic had to compare with a Variable's
    plans = []
  for plan in plans:
    if not plan: break
    try:
      return _lower(ast, caps, plan, extra_rules, checker, acc_block)
    except (OptError, TypeError):
      pass  # an Opt on a symbolic size (undecidable, or an amount that cannot divide it): the next plan
  return _lower(ast, caps, (), extra_rules, checker, acc_block)


def _check_opts(opts: tuple[Opt, ...], axes: list[tuple[UOp, int]], caps: Capabilities) -> None:
  """Raise OptError for an Opt that names no axis, repeats one, or has an amount that cannot apply."""
  seen: set[tuple[OptOps, int]] = set()
  for o in opts:
    if (o.op, o.axis) in seen: raise OptError(f"{o} repeats an axis of the plan")
    seen.add((o.op, o.axis))
    if o.amount < 1 and not (o.op is OptOps.UNROLL and 0 <= o.axis < len(axes) and o.amount == 0):
      raise OptError(f"{o}: the amount must be positive")
    if o.op in (OptOps.LANES, OptOps.UNROLL):
      if o.op is OptOps.LANES and not caps.vector_ops: raise OptError(f"{o}: the device has no vector ops")
      if not 0 <= o.axis < len(axes): raise OptError(f"{o}: the kernel has {len(axes)} reduce axes")
      size = axes[o.axis][0].src[0].shape[axes[o.axis][1]]
    if o.op is OptOps.LANES:
      unroll = next((p.amount for p in opts if p.op is OptOps.UNROLL and p.axis == o.axis), 1)
      if o.amount < 2 or unroll == 0 or size % (o.amount * unroll):  # UNROLL 0: an empty axis, written out
        raise OptError(f"{o}: {o.amount} lanes times {unroll} unrolled do not divide {size}")
    if o.op is OptOps.UNROLL:
      if o.amount != size and (o.amount > size or size % o.amount):
        raise OptError(f"{o}: {o.amount} does not divide {size}")
    elif o.op is OptOps.VECTORIZE and not caps.vector_ops:
      raise OptError(f"{o}: the device has no vector ops")
    elif o.op is OptOps.GROUP and (o.axis != 0 or caps.launch_dims < 2 or caps.local_memory <= 0 or o.amount < 2 or
                                   o.amount > caps.max_workgroup_threads):
      raise OptError(f"{o}: the device has no work-groups of {o.amount} threads with local memory")
    elif o.op is OptOps.OUTER and (caps.launch_dims != 0 or o.amount != 1):
      raise OptError(f"{o}: only a device that loops over its launch dimensions orders them (amount 1)")
    elif o.op is OptOps.BLOCK and not caps.launch_loops_in_order:
      raise OptError(f"{o}: only a device that loops over its launch dimensions in order (Capabilities.ordered_launch) "
                     f"runs a sum's blocks inside them")
  if sum(o.op is OptOps.OUTER for o in opts) > 1: raise OptError("a plan has one OUTER")
  if sum(o.op in (OptOps.OUTER, OptOps.BLOCK) for o in opts) > 1:
    raise OptError("a plan has one BLOCK, and not beside an OUTER (each orders the launch loops its own way)")
  if any(o.op is OptOps.GROUP for o in opts) and any(o.op in (OptOps.UPCAST, OptOps.VECTORIZE) for o in opts):
    raise OptError("a GROUP plan does not also tile its outputs")


def _lower(ast: UOp, caps: Capabilities, opts: tuple[Opt, ...], extra_rules: list[PatternMatcher] | None,
           checker, acc_block: int) -> LoopProgram:
  """`lower` with the plan `opts`."""
  if any(o.op is OptOps.TC for o in opts): return _lower_tensor_core(ast, caps, opts, extra_rules, checker, acc_block)
  if any(o.op is OptOps.LOCAL for o in opts): raise OptError("LOCAL sizes a tensor-core kernel's work-groups: a plan with TC")
  outputs = outputs_of(ast)
  value = outputs[0][1]
  idx_dtype = _index_dtype(ast)
  if idx_dtype != dtypes.int32 and symbolic_ast(ast):
    raise NotImplementedError(f"kernel {kernel_name(ast)}: symbolic shapes with 2**31 elements or more (int64 indices)")
  axes_list = reduce_axes(ast)
  _check_opts(opts, axes_list, caps)
  lw = _Lowering(idx_dtype, unroll={axes_list[o.axis]: o.amount for o in opts if o.op is OptOps.UNROLL},
                 lanes={axes_list[o.axis]: o.amount for o in opts if o.op is OptOps.LANES}, masked=caps.masked_loads,
                 native_cos="COS" in caps.optional_ops)
  shape = value.shape
  threads = next((o.amount for o in opts if o.op is OptOps.GROUP), 0)
  if threads:
    reduces = [n for n in ast.toposort if n.op is Ops.REDUCE_AXIS]
    # one reduction, or in a multi-output kernel several that share their loops (checked once lowered)
    nested = any(m.op is Ops.REDUCE_AXIS for n in reduces for m in n.src[0].toposort)
    if (len(reduces) != 1 and len(outputs) == 1) or nested:
      raise OptError("GROUP needs exactly one reduction (one per output), not nested")
    out_caps = replace(caps, launch_dims=caps.launch_dims - 1, max_global_size=caps.max_global_size[1:])
    try:
      dims = _launch_dims(shape, out_caps)
    except ValueError as e:
      raise OptError(f"GROUP: {e}") from None
  else:
    dims = _launch_dims(shape, caps)
  first = 1 if threads else 0  # with a group reduce, launch dim 0 holds the work-group's threads
  # a launch dimension's outputs per thread: the product of its UPCAST and VECTORIZE (lanes innermost,
  # then the copies of the vector)
  upcasts = [1] * len(dims)
  # a VECTORIZE whose width does not divide launch dim 0 (56 outputs as four vectors of 16): the launch covers the
  # size rounded up and the extra lanes neither read nor write (masked loads and stores); `padded` is the real size
  padded = 0
  for o in opts:
    if o.op not in (OptOps.UPCAST, OptOps.VECTORIZE): continue
    if o.axis >= len(dims) or len(dims[o.axis][0]) != 1:
      raise OptError(f"{o}: launch dimension {o.axis} is not one output axis")
    if dims[o.axis][1] % (upcasts[o.axis] * o.amount):
      if o.op is not OptOps.VECTORIZE or o.axis != 0 or not caps.masked_loads or not isinstance(dims[0][1], int) or \
          any(p.op is OptOps.UPCAST and p.axis == 0 for p in opts):
        raise OptError(f"{o}: the plan's upcasts do not divide launch dimension {o.axis} (only a VECTORIZE alone on "
                       f"dimension 0 of a device with masked loads may leave masked lanes)")
      padded = dims[0][1]
    upcasts[o.axis] *= o.amount
  width = next((o.amount for o in opts if o.op is OptOps.VECTORIZE and o.amount > 1), 0)
  vdim = next((o.axis for o in opts if o.op is OptOps.VECTORIZE and o.amount > 1), 0)  # the dimension of the lanes
  idx: list[UOp] = [lw.zero()] * len(shape)
  # upcast dims get a placeholder now; each output copy substitutes gidx*factor + offset for it
  placeholders: dict[int, tuple[UOp, UOp, int]] = {}
  sym_local = {} if threads else _symbolic_locals(dims, caps)
  launch: list[int | UOp] = [size for _, size in dims]  # threads per launch dimension (before upcasts)
  guards: list[UOp] = []  # gid < size for a dimension rounded up to whole work-groups
  for d, (axes, size) in enumerate(dims):
    if upcasts[d] > 1:
      f = upcasts[d]
      # masked lanes: the launch rounds the size up to whole vectors; the placeholder keeps the size of the output
      if d == 0 and padded: launch[0] = -(-size // f) * f
      gid = _special(f"gidx{d}", d, launch[d] // f, idx_dtype)
      placeholders[axes[0]] = (UOp(Ops.SPECIAL, idx_dtype, (), (f"upcast{d}", d, size)), gid, f)
      idx[axes[0]] = placeholders[axes[0]][0]
      continue
    if (group := sym_local.get(d)) is not None:  # (an upcast dimension went on above)
      launch[d] = (size + (group - 1)) // group * group
    gid = _special(f"gidx{d + first}", d + first, launch[d], idx_dtype)
    if launch[d] is not size: guards.append(gid.lt(size))
    for a, v in zip(axes, _unflatten(gid, [shape[a] for a in axes], size)): idx[a] = v
  memo: dict = {}  # shared by the outputs: what they read alike is lowered (and loaded) once
  out_values = [lw.lower(v, tuple(idx), UOp.const(dtypes.bool, True), memo) for _, v in outputs]
  if padded and guards: raise OptError("a VECTORIZE with masked lanes in a kernel whose sizes depend on Variables")
  gate: tuple[UOp, ...] = ()
  if guards:  # the threads past a symbolic size read and write nothing
    valid = functools.reduce(lambda a, b: a.logical_and(b), guards)
    out_values = list(_gate_loads(UOp(Ops.SINK, None, tuple(out_values)), valid).src)
    gate = (valid,)
  group_reduce = bool(threads) and any(n.op is Ops.REDUCE for n in toposort(out_values))
  # the launch above set dim 0 aside for the work-group's threads: without a loop left to split they would index
  # the outputs with the wrong dimensions
  if threads and not group_reduce: raise OptError("GROUP: no reduce loop is left to split (an UNROLL wrote it out)")
  # split together: reductions that share their loops keep sharing them
  if not group_reduce: out_values = list(split_accumulators(UOp(Ops.SINK, None, tuple(out_values)), lw, acc_block).src)
  out_index = _flat_index(idx, shape, lw.zero())
  rules = _rules(caps, extra_rules)
  if placeholders:
    # (output, index, value, gates) to store
    stored = [(p, out_index, v, gate) for (p, _), v in zip(outputs, out_values)]
    copies = list(placeholders.values())
    ph0, gid0, f0 = placeholders.get(dims[vdim][0][0], (None, None, 1))
    if width:
      # one vector-valued copy of `width` lanes for the innermost upcast dimension instead of width scalar
      # ones; with an UPCAST on it too, `vcopy` numbers the f0 // width vectors a thread computes
      vcopy = UOp(Ops.SPECIAL, idx_dtype, (), (f"upcast{vdim}v", vdim, f0 // width)) if f0 > width else None
      base = gid0 * f0 + vcopy * width if vcopy is not None else gid0 * f0
      lanes = [base + k if k else base for k in range(width)]
      # with masked lanes, the index math is simplified before the lanes are put in, while the placeholder still
      # ranges over the output only: what it folds to holds for every lane inside the output (the lanes outside
      # it compute garbage but read and write nothing: `live` gates their loads and stores)
      live = [ln.lt(padded) for ln in lanes] if padded else None
      if padded: out_index = graph_rewrite(out_index, rules)
      stored = []
      for (p, _), v in zip(outputs, out_values):
        vectorized = vectorize(graph_rewrite(v, rules) if padded else v, out_index, ph0, lanes,
                               lambda u: graph_rewrite(u, rules), caps.masked_loads, live)
        if vectorized is None:
          raise OptError(f"VECTORIZE: no load of {kernel_name(ast)} reads neighbouring elements per lane")
        if live is None: stored += [(p, i, x, gate) for i, x in vectorized]
        elif len(vectorized) == 1:  # a vector store, masked
          stored.append((p, *vectorized[0], (UOp(Ops.VECTORIZE, dtypes.bool.vec(width), tuple(live)),)))
        else: stored += [(p, i, x, (g,)) for (i, x), g in zip(vectorized, live)]
      copies = [c for c in copies if c[0] is not ph0]
      if vcopy is not None: copies.insert(0, (vcopy, None, f0 // width))
    # the dimension with the most copies outermost (stable: the vectors first among equals): an operand that only
    # the inner copies share (a channel tile's weight vectors) stays in registers while each outer copy's (a
    # broadcast input value) is used at once and dropped. The other way round a tile of 12 outputs by 2 vectors kept
    # 12 broadcasts live beside its 24 accumulators and spilled (32 to 32 channels 5x5 at 28x28: 11.5 -> 7.9 ms)
    copies.sort(key=lambda c: -c[2])
    stores = []
    for offsets in itertools.product(*(range(f) for _, _, f in copies)):
      sub = {ph: UOp.const(idx_dtype, off) if gid is None else gid * f + off if off else gid * f
             for (ph, gid, f), off in zip(copies, offsets)}
      stores += [UOp(Ops.STORE, None, (p, *(substitute(u, sub) for u in (i, v, *gs)))) for p, i, v, gs in stored]
    sink = UOp(Ops.SINK, None, tuple(stores))
    global_size = tuple(size // upcasts[d] for d, size in enumerate(launch))
    local_size = _local_size(global_size, caps, sym_local)
  elif group_reduce:
    lid = UOp(Ops.SPECIAL, idx_dtype, (), ("lidx0", 0, threads))
    grouped = _group_reduce(lw, out_values, lid, threads)
    out_values = list(split_accumulators(UOp(Ops.SINK, None, tuple(grouped)), lw, acc_block).src)
    sink = UOp(Ops.SINK, None, tuple(UOp(Ops.STORE, None, (p, out_index, v, lid.alu(Ops.CMPEQ, 0)))
                                     for (p, _), v in zip(outputs, out_values)))
    global_size = (threads,) + tuple(size for _, size in dims)
    local_size: tuple[int, ...] | None = (threads,) + (1,) * len(dims)
  else:
    sink = UOp(Ops.SINK, None, tuple(UOp(Ops.STORE, None, (p, out_index, v) + gate) for (p, _), v in zip(outputs, out_values)))
    global_size = tuple(launch)
    local_size = _local_size(global_size, caps, sym_local)
  if (outer := next((o for o in opts if o.op in (OptOps.OUTER, OptOps.BLOCK)), None)) is not None:
    if outer.axis >= len(global_size): raise OptError(f"{outer}: the kernel has {len(global_size)} launch dimensions")
    sink, global_size = _outermost(sink, global_size, outer.axis) if outer.op is OptOps.OUTER else \
      _sum_blocks_in_groups(sink, global_size, outer, idx_dtype)
  uops, flops, prog_params, nbytes = _linearized(ast, sink, rules, checker, {p.arg[0] for p, _ in outputs})
  if any(isinstance(g, UOp) for g in global_size):
    # the simplifier may have rewritten a symbolic launch size (to a constant, when the Variable's range rounds up
    # to one size of whole work-groups): launch what the program's SPECIALs read
    sizes = {u.arg[1]: u.src[0] if u.src else u.arg[2] for u in uops if u.op is Ops.SPECIAL and u.arg[0].startswith("gidx")}
    global_size = tuple(sizes.get(d, g) for d, g in enumerate(global_size))
  return LoopProgram(kernel_name(ast), uops, prog_params, global_size, local_size, flops, nbytes, opts)


def _rules(caps: Capabilities, extra_rules: list[PatternMatcher] | None) -> PatternMatcher:
  """The rewrite rules a lowered kernel is simplified with: the symbolic ones, the vector ones where the device takes
  vectors, and the device's own."""
  rules = symbolic + vector_rules if caps.vector_ops else symbolic
  for r in extra_rules or []: rules = rules + r
  return rules


def _flat_index(idx: Sequence[UOp], shape: tuple, zero: UOp) -> UOp:
  """The element of a buffer of `shape` (row-major) at the index `idx`."""
  return sum((i * st for i, st, s in zip(idx, strides_for(shape), shape) if _live(s)), start=zero)


def _linearized(ast: UOp, sink: UOp, rules: PatternMatcher, checker, written: set[int]
                ) -> tuple[tuple[UOp, ...], int, tuple[Param, ...], int]:
  """The lowered `sink` simplified with `rules` and linearized (the IR spec checked before and after simplifying, where
  `checker`): its UOps, its operation count, the kernel's buffer parameters (those numbered in `written` are its
  outputs) and the bytes they hold."""
  if checker: checker(sink, "lower")
  sink = graph_rewrite(sink, rules)
  if checker: checker(sink, "simplify")
  uops, flops = linearize(sink)
  params = sorted({n for n in ast.toposort if n.op is Ops.PARAM}, key=lambda p: p.arg[0])
  prog_params = tuple(Param(p.arg[0], p.dtype, p.arg[1], p.arg[0] in written, p.arg[2] if len(p.arg) > 2 else None)
                      for p in params)
  return uops, flops, prog_params, sum(p.size * p.dtype.itemsize for p in prog_params)


def _cascade_inner(steps: int, acc_block: int) -> int | None:
  """The steps of a tensor core's K each tile's fragment adds before a cascade's scalar accumulators take its sum (all
  of them where they are at most `acc_block`); None where the steps have no divisor from TC_MIN_INNER_STEPS (or
  acc_block, if smaller) to acc_block."""
  if steps <= acc_block: return steps
  inner = max(d for d in range(1, acc_block + 1) if steps % d == 0)
  return inner if inner >= min(TC_MIN_INNER_STEPS, acc_block) else None


def _lower_tensor_core(ast: UOp, caps: Capabilities, opts: tuple[Opt, ...], extra_rules: list[PatternMatcher] | None,
                       checker, acc_block: int = ACC_BLOCK) -> LoopProgram:
  """`lower` of a matmul on a tensor core (the TC optimization; `codegen.tensor_core` says which kernels qualify).

  Launch dim 0 holds the warps along the columns, `threads` lanes each, dim 1 the warps along the rows, dim 2 the
  batch. A warp computes UPCAST 1 x UPCAST 0 tiles of the tensor core's (M, N), each in one accumulator fragment
  (a vector): one loop over the sum in steps of the tensor core's K loads the A fragment of each of its tile rows and
  the B fragment of each tile column and accumulates one WMMA per tile. A sum of more than `acc_block` steps is a
  cascade: an outer loop over blocks of steps adds each block's fragment into scalar accumulators, one per element.
  After the loop each thread computes the output's elementwise ops on its fragment elements and stores them."""
  tc_opt = next(o for o in opts if o.op is OptOps.TC)
  tiling = {OptOps.UPCAST, OptOps.LOCAL}
  if len(opts) != len({(o.op, o.axis) for o in opts}) or \
      any(o is not tc_opt and (o.op not in tiling or o.axis not in (0, 1)) for o in opts):
    raise OptError(f"a TC plan takes UPCAST and LOCAL on launch dims 0 and 1 once each, nothing else: {opts}")
  if not 0 <= tc_opt.axis < len(caps.tensor_cores) or tc_opt.amount != 1:
    raise OptError(f"{tc_opt}: the device has {len(caps.tensor_cores)} tensor core(s) (amount 1)")
  tc: TensorCore = caps.tensor_cores[tc_opt.axis]
  mm = _matmul_of(ast)
  if mm is None or tc_opt.axis not in usable_tensor_cores(mm, caps):
    raise OptError(f"{tc_opt}: kernel {kernel_name(ast)} is no matmul of {tc.dtype_in.name} into {tc.dtype_acc.name} "
                   f"whose sizes the tile {tc.dims} divides")
  (out_param, value), = outputs_of(ast)
  idx_dtype = _index_dtype(ast)
  lw = _Lowering(idx_dtype)
  tile_m, tile_n, tile_k = tc.dims
  size_m, size_n, size_k = mm.sizes
  tiles = {d: next((o.amount for o in opts if o.op is OptOps.UPCAST and o.axis == d), 1) for d in (0, 1)}
  warps = {d: next((o.amount for o in opts if o.op is OptOps.LOCAL and o.axis == d), 1) for d in (0, 1)}
  n_warps, m_warps = size_n // (tile_n * tiles[0]), size_m // (tile_m * tiles[1])
  if size_n % (tile_n * tiles[0]) or size_m % (tile_m * tiles[1]) or n_warps % warps[0] or m_warps % warps[1]:
    raise OptError(f"{opts}: the tiles and warps do not divide the {size_m}x{size_n} output")
  # a sum of more than `acc_block` steps is a cascade, as split_accumulators makes of a scalar one: each tile's fragment
  # adds `inner` steps (a divisor of the steps) and hands its elements to scalar accumulators, one per element
  steps = size_k // tile_k
  inner = _cascade_inner(steps, acc_block)
  if inner is None:
    raise OptError(f"TC: a sum of {steps} steps of {tile_k} has no divisor from {min(TC_MIN_INNER_STEPS, acc_block)} "
                   f"to {acc_block}")
  global_size: tuple[int, ...] = (n_warps * tc.threads, m_warps) + ((mm.batch,) if mm.batch > 1 else ())
  local_size = (warps[0] * tc.threads, warps[1]) + ((1,) if mm.batch > 1 else ())
  if warps[0] * tc.threads * warps[1] > caps.max_workgroup_threads or \
      any(g > lim for g, lim in zip(global_size, caps.max_global_size)):
    raise OptError(f"TC: launch {global_size} in work-groups {local_size} exceeds the device's limits")
  gid0 = _special("gidx0", 0, global_size[0], idx_dtype)
  lane, warp_n = gid0 % tc.threads, gid0 // tc.threads
  warp_m = _special("gidx1", 1, global_size[1], idx_dtype)
  src_shape = mm.reduce.src[0].shape
  base = [lw.zero()] * len(src_shape)  # the sum's source index without the rows, columns and summed axis
  if mm.batch > 1:
    batch = _special("gidx2", 2, global_size[2], idx_dtype)
    for a, v in zip(mm.batch_axes, _unflatten(batch, [src_shape[a] for a in mm.batch_axes], mm.batch)): base[a] = v
  step = lw.new_range(inner)
  block = lw.new_range(steps // inner) if inner < steps else None
  true = UOp.const(dtypes.bool, True)
  memo: dict = {}

  def factor(node: UOp, at: dict[int, UOp]) -> UOp:
    """The factor `node` at the sum's source index `base` with the axes in `at` replaced, uncast to the input dtype."""
    idx = list(base)
    for a, v in at.items(): idx[a] = v
    low = lw.lower(node, tuple(idx), true, memo)
    if low.op is not Ops.CAST or low.src[0].dtype != tc.dtype_in:
      raise OptError(f"TC: a factor of kernel {kernel_name(ast)} is not computed in {tc.dtype_in.name}")
    return low.src[0]

  row0 = [warp_m * (tile_m * tiles[1]) + i * tile_m for i in range(tiles[1])]
  col0 = [warp_n * (tile_n * tiles[0]) + j * tile_n for j in range(tiles[0])]
  k0 = (step if block is None else block * inner + step) * tile_k
  rules = _rules(caps, extra_rules)

  def fragment(elements: list[UOp]) -> UOp:
    # neighbouring halves read as one 32-bit load where the device takes vector loads of two (a row-major A's pairs
    # along the sum, a transposed B's): float16 4096 on an H200, the best plan 1.84 -> 1.54 ms
    if tc.pair_loads: elements = paired_loads(elements, lambda u: graph_rewrite(u, rules))
    return UOp(Ops.VECTORIZE, tc.dtype_in.vec(len(elements)), tuple(elements))
  a_frags = [fragment([factor(mm.x, {mm.m_axis: r + fragment_index(tc.a[0], lane, e),
                                     mm.k_axis: k0 + fragment_index(tc.a[1], lane, e)}) for e in range(tc.elements("a"))])
             for r in row0]
  b_frags = [fragment([factor(mm.y, {mm.k_axis: k0 + fragment_index(tc.b[0], lane, e),
                                     mm.n_axis: c + fragment_index(tc.b[1], lane, e)}) for e in range(tc.elements("b"))])
             for c in col0]
  acc_dtype = tc.dtype_acc.vec(tc.elements("c"))
  zero = reduce_identity(Ops.ADD, acc_dtype)
  # the output's axes are the sum's (`matmul_shape`: only reshapes between), those of size 1 left out
  out_axes = [a for a, s in enumerate(value.shape) if s != 1]
  red_axes = [a for a, s in enumerate(mm.reduce.shape) if s != 1]
  out_of = dict(zip(red_axes, out_axes))
  stores = []
  for i, r in enumerate(row0):
    for j, c in enumerate(col0):
      acc = UOp(Ops.REDUCE, acc_dtype, (UOp(Ops.WMMA, acc_dtype, (a_frags[i], b_frags[j], zero), tc.wmma_arg()), step),
                Ops.ADD)
      for e in range(tc.elements("c")):
        at = {mm.m_axis: r + fragment_index(tc.c[0], lane, e), mm.n_axis: c + fragment_index(tc.c[1], lane, e)}
        out_idx = [lw.zero()] * len(value.shape)
        for a in red_axes: out_idx[out_of[a]] = at.get(a, base[a])
        element = UOp(Ops.GEP, tc.dtype_acc, (acc,), e)
        if block is not None: element = UOp(Ops.REDUCE, tc.dtype_acc, (element, block), Ops.ADD)
        lw.known = {mm.reduce: element}
        v = lw.lower(value, tuple(out_idx), true, {})
        stores.append(UOp(Ops.STORE, None, (out_param, _flat_index(out_idx, value.shape, lw.zero()), v)))
  uops, _, prog_params, nbytes = _linearized(ast, UOp(Ops.SINK, None, tuple(stores)), rules, checker, {out_param.arg[0]})
  flops = 2 * size_m * size_n * size_k * mm.batch  # (the linearizer counts a WMMA as one operation per lane)
  return LoopProgram(kernel_name(ast), uops, prog_params, global_size, local_size, flops, nbytes, opts)


__all__ = ["lower", "kernel_name", "outputs_of", "kernel_features", "reduce_axes", "split_accumulators", "symbolic_ast",
           "ACC_BLOCK"]
