"""Explicit vectors for an upcast output dimension (devices whose Capabilities set `vector_ops`).

For a kernel with a reduction on a device that loops over its launch indices, the lowering tiles
the output into registers: a launch dimension (mostly 0, the innermost, contiguous output axis; a convolution's
output channels where its weight has them innermost) computes V neighbouring outputs per thread, V being the
device's vector width (Opt VECTORIZE, chosen by `opt.heuristic`). The same function vectorises a reduce axis
(Opt LANES): its lanes are V consecutive iterations of the reduce loop, and the REDUCE of the vector body is one
vector accumulator. On a device without vector ops every one of those outputs is a separate scalar copy of the
kernel's value graph. `vectorize` instead builds ONE copy in which the values that depend on the lane are
vectors of V lanes (dtype `scalar.vec(V)`):

- a node that does not depend on the lane stays scalar;
- integer and bool arithmetic on lane-dependent indices stays a list of V scalar expressions, one
  per lane (index math, gates); a vector op that needs it gets VECTORIZE(lane 0, ..., lane V-1), which
  `vector_rules` turns into vector ops where the lanes are one op on constants and broadcasts (`_lanewise`);
- a LOAD whose V lane indices simplify to base, base+1, ..., base+V-1 under one gate becomes one
  vector LOAD (dtype scalar.vec(V), index base: lanes read consecutive elements). On a device with
  masked loads (Capabilities.masked_loads) lanes may have gates of their own (a window's edge in a
  padded convolution: a vector of V gates), and indices base, base+s, ..., base+(V-1)s with a small
  stride s become one masked load of the V*s elements from base, every s-th lane kept (a stride-2
  convolution). Any other lane-dependent LOAD becomes VECTORIZE of V scalar LOADs (a gather);
- an ALU op with a vector source, or a float op on lane-dependent values, is a vector op of the
  same op (lane-independent sources are broadcast with VECTORIZE(x, ..., x));
- a REDUCE of a vector is a vector REDUCE: the linearizer gives it one vector accumulator;
- the output STORE at consecutive indices stores the vector; otherwise each lane is stored on its
  own (GEP picks a lane out of a vector).

It gives up (returns None; the lowering raises OptError and the heuristic's next plan is used) when no
LOAD becomes a vector load, unless the output is stored as a vector and some LOAD is shared by every
lane (a strided convolution: gathered inputs, broadcast weights, vector FMAs): a kernel of gathers alone
gains nothing from vectors, and the device's compiler does better with scalar copies.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

from plugrad.dtype import dtypes
from plugrad.symbolic import split_terms
from plugrad.uops import GroupOp, Ops, PatternMatcher, UOp, UPat, toposort

_SCALAR, _LANES, _VECTOR = 0, 1, 2


def _affine(u: UOp) -> tuple[dict[UOp, int], int]:
  """An integer expression as ({term: coefficient}, constant), like terms merged."""
  terms, const = split_terms(u)
  merged: dict[UOp, int] = {}
  for t, c in terms: merged[t] = merged.get(t, 0) + c
  return {t: c for t, c in merged.items() if c}, const


def consecutive(idxs: list[UOp], stride: int = 1) -> bool:
  """Whether the (simplified) indices are base, base+stride, ..., base+(len-1)*stride."""
  terms0, const0 = _affine(idxs[0])
  for k, ix in enumerate(idxs[1:], 1):
    terms, const = _affine(ix)
    if terms != terms0 or const != const0 + k * stride: return False
  return True


# a strided masked load reads stride times the elements it keeps: measured at 2 (a stride-2 convolution's kernel
# 37 -> 21 us), not beyond
MAX_LOAD_STRIDE = 2


def _lane_stride(idxs: list[UOp]) -> int | None:
  """s when the (simplified) indices are base, base+s, ... with 1 <= s <= MAX_LOAD_STRIDE, else None."""
  if len(idxs) < 2: return 1
  terms0, const0 = _affine(idxs[0])
  terms1, const1 = _affine(idxs[1])
  s = const1 - const0
  return s if terms0 == terms1 and 1 <= s <= MAX_LOAD_STRIDE and consecutive(idxs, s) else None


def _masked_load(n: UOp, buf: UOp, idxs: list[UOp], gates: list[UOp | None], stride: int) -> UOp:
  """The lanes of LOAD `n` (lane k at idxs[k] = idxs[0] + k*stride, read where gates[k] holds) as one load of
  the stride*V elements from idxs[0] under a vector of gates, every stride-th lane kept."""
  width, true = len(idxs), UOp.const(dtypes.bool, True)
  mask = [true if g is None else g for g in gates]
  if stride > 1:
    false = UOp.const(dtypes.bool, False)
    mask = [mask[j // stride] if j % stride == 0 else false for j in range(width * stride)]
  lane_gates = UOp(Ops.VECTORIZE, dtypes.bool.vec(len(mask)), tuple(mask))
  wide = UOp(Ops.LOAD, n.dtype.vec(width * stride), (buf, idxs[0], lane_gates))
  if stride == 1: return wide
  return UOp(Ops.VECTORIZE, n.dtype.vec(width), tuple(UOp(Ops.GEP, n.dtype, (wide,), k * stride) for k in range(width)))


def vectorize(value: UOp, index: UOp, lane_of: UOp, lanes: list[UOp], simplify: Callable[[UOp], UOp],
              masked: bool = False, live: list[UOp] | None = None) -> list[tuple[UOp, UOp]] | None:
  """The (index, value) pairs to STORE so that every lane of `lane_of` is computed at once.

  :param value: the output value, a graph in which `lane_of` stands for the upcast index.
  :param index: the output index, in terms of `lane_of` as well.
  :param lane_of: the placeholder of the upcast index.
  :param lanes: what the placeholder is in each lane (gidx*V + lane).
  :param simplify: the lowering's simplifier (symbolic rules), applied to each lane's load index.
  :param masked: the device takes vector loads with a gate per lane (Capabilities.masked_loads).
  :param live: each lane's condition to touch memory at all (the lanes past the end of a dimension the vector
    width does not divide read nothing): added to the gate of every load that moves with the lanes.
  :return: one (base index, vector) pair when the output is stored as a vector, V scalar pairs
    otherwise; None when vectors would not help (see above).
  """
  width = len(lanes)
  kind: dict[UOp, int] = {}
  lane_vals: dict[UOp, list[UOp]] = {}
  vec: dict[UOp, UOp] = {}
  masks: dict[UOp, list[UOp | None]] = {}  # a gated LOAD made a vector load -> each lane's gate (None: none)
  vector_loads = 0

  def lane(s: UOp, k: int) -> UOp:
    if kind[s] == _SCALAR: return s
    if kind[s] == _LANES: return lane_vals[s][k]
    return UOp(Ops.GEP, s.dtype.scalar(), (vec[s],), k)

  def as_vec(s: UOp) -> UOp:
    if kind[s] == _VECTOR: return vec[s]
    srcs = (s,) * width if kind[s] == _SCALAR else tuple(lane_vals[s])
    return UOp(Ops.VECTORIZE, s.dtype.vec(width), srcs)

  for n in toposort([value, index]):
    if n is lane_of:
      kind[n], lane_vals[n] = _LANES, list(lanes)
    elif all(kind[s] == _SCALAR for s in n.src):
      kind[n] = _SCALAR
    elif n.op is Ops.LOAD:
      buf, rest = n.src[0], n.src[1:]
      per_lane = [[simplify(lane(s, k)) for s in rest] for k in range(width)]
      own = [p[1] if len(p) > 1 else None for p in per_lane]  # each lane's gate from the kernel itself
      if live is not None:
        per_lane = [[p[0], live[k] if len(p) == 1 else p[1].logical_and(live[k]), *p[2:]] for k, p in enumerate(per_lane)]
      idxs, gates = [p[0] for p in per_lane], {tuple(p[1:]) for p in per_lane}
      kind[n] = _VECTOR
      one_gate = all(len(p) <= 2 for p in per_lane)  # at most one gate per lane
      stride = _lane_stride(idxs) if masked and kind[n.src[1]] != _VECTOR and one_gate else None
      if kind[n.src[1]] != _VECTOR and len(gates) == 1 and consecutive(idxs):
        vec[n] = UOp(Ops.LOAD, n.dtype.vec(width), (buf, idxs[0], *per_lane[0][1:]))
        if len(per_lane[0]) == 2: masks[n] = [per_lane[0][1]] * width
        vector_loads += 1
      elif stride is not None and n.dtype.scalar() not in (dtypes.bool, dtypes.bfloat16):
        vec[n] = _masked_load(n, buf, idxs, [p[1] if len(p) > 1 else None for p in per_lane], stride)
        masks[n] = own  # a lane not live reads 0 as well, as where(own gate, load, 0) gives
        vector_loads += 1
      else:
        vec[n] = UOp(Ops.VECTORIZE, n.dtype.vec(width), tuple(UOp(Ops.LOAD, n.dtype, (buf, *p)) for p in per_lane))
    elif n.op is Ops.REDUCE:
      kind[n] = _VECTOR
      vec[n] = UOp(Ops.REDUCE, n.dtype.vec(width), (as_vec(n.src[0]), *n.src[1:]), n.arg)
    elif n.op is Ops.WHERE and n.src[1] in masks and n.src[2].op is Ops.CONST and n.src[2].arg == 0 and \
        all(simplify(lane(n.src[0], k)) is (g if g is not None else UOp.const(dtypes.bool, True))
            for k, g in enumerate(masks[n.src[1]])):
      kind[n], vec[n] = _VECTOR, vec[n.src[1]]  # where(gate, load under that gate, 0): a masked lane is 0 already
    elif n.op in GroupOp.ALU:
      if not n.dtype.is_float and all(kind[s] != _VECTOR for s in n.src):
        kind[n] = _LANES  # index math and gates stay per lane
        lane_vals[n] = [n.replace(src=tuple(lane(s, k) for s in n.src)) for k in range(width)]
      else:
        kind[n] = _VECTOR
        vec[n] = UOp(n.op, n.dtype.vec(width), tuple(as_vec(s) for s in n.src), n.arg)
    else:
      return None  # nothing else depends on an output index in a lowered kernel
  idxs = [simplify(lane(index, k)) for k in range(width)]
  stores_vector = kind[value] == _VECTOR and consecutive(idxs)
  # gathers pay when a vector store and a load shared by every lane (a strided convolution's weights,
  # broadcast into the FMAs) come with them
  shared_load = any(n.op is Ops.LOAD and kind[n] == _SCALAR for n in kind)
  if vector_loads == 0 and not (stores_vector and shared_load): return None
  if stores_vector: return [(idxs[0], vec[value])]
  return [(ix, lane(value, k)) for k, ix in enumerate(idxs)]


# how deep `_lanewise` looks for operands that are cheap as vectors (a gate: and(i < c, j < d) is two levels)
LANEWISE_DEPTH = 3


def _same_op(xs: tuple[UOp, ...]) -> bool:
  """Whether the scalars are one ALU op (same op, arg and dtype) on different operands."""
  x0 = xs[0]
  return x0.op in GroupOp.ALU and x0.dtype.count == 1 and \
    all(x.op is x0.op and x.arg == x0.arg and x.dtype == x0.dtype and len(x.src) == len(x0.src) for x in xs)


def _same_value(a: UOp, b: UOp, depth: int = 4) -> bool:
  """Whether two scalars are one value: the same node, or the same ops on the same operands up to the order of a
  commutative op's two (the simplifier orders one lane's i + 16*g and another's 16*g + i as it meets them)."""
  if a is b: return True
  if depth == 0 or a.op is not b.op or a.arg != b.arg or a.dtype != b.dtype or len(a.src) != len(b.src): return False
  if all(_same_value(x, y, depth - 1) for x, y in zip(a.src, b.src)): return True
  return a.op in GroupOp.Commutative and len(a.src) == 2 and \
    _same_value(a.src[0], b.src[1], depth - 1) and _same_value(a.src[1], b.src[0], depth - 1)


def _uniform(xs: tuple[UOp, ...] | list[UOp]) -> bool: return all(_same_value(x, xs[0]) for x in xs)


def _shared_operand(xs: list[UOp]) -> tuple[int, UOp] | None:
  """(position, operand) when every comparison in `xs` compares a constant with one and the same operand."""
  for j in (0, 1):
    if all(x.src[1 - j].op is Ops.CONST for x in xs) and _uniform([x.src[j] for x in xs]): return j, xs[0].src[j]
  return None


def _unfold(x: UOp, like: list[UOp]) -> UOp | None:
  """A lane that the simplifier folded, written again as the op of the other lanes (`like`), or None. A constant
  bool among comparisons of constants with one operand: the comparison with a constant past that operand's range
  (true = c < s where c < s.vmin). A lane of an AND or OR whose neutral operand folded away: op(neutral, x), x where
  the other lanes have the same op on the same operand; a constant there: op(c, c). Each holds for every value the
  operand can take."""
  op = like[0].op
  if x.op is Ops.CONST and x.dtype == dtypes.bool and op is Ops.CMPLT and (shared := _shared_operand(like)) is not None:
    j, v = shared
    lo, hi = v.vmin, v.vmax
    if not v.dtype.is_int or not v.dtype.min < lo <= hi < v.dtype.max: return None
    # j == 1: c < v (true for every v when c < lo); j == 0: v < c (true for every v when hi < c)
    c = (lo - 1 if x.arg else hi) if j == 1 else (hi + 1 if x.arg else lo)
    cst = UOp.const(v.dtype, c)
    return UOp(Ops.CMPLT, dtypes.bool, (cst, v) if j == 1 else (v, cst))
  if op in (Ops.AND, Ops.OR) and x.dtype == dtypes.bool and x.op is Ops.CONST: return UOp(op, dtypes.bool, (x, x))
  if op in (Ops.AND, Ops.OR) and x.dtype == dtypes.bool and x.op is not op:
    for j in (0, 1):
      others = [y.src[j] for y in like]
      def in_every(s: UOp) -> bool: return all(any(_same_value(s, t) for t in o.src) for o in others)
      if all(o.op is x.op for o in others) and any(s.op is not Ops.CONST and in_every(s) for s in x.src):
        neutral = UOp.const(dtypes.bool, op is Ops.AND)
        return UOp(op, dtypes.bool, (x, neutral) if j == 0 else (neutral, x))
  return None


def _regular(xs: tuple[UOp, ...]) -> tuple[UOp, ...] | None:
  """The lanes as one ALU op each (the other lanes unfolded into it, trying the most common op first), or None."""
  for op, _ in Counter(x.op for x in xs if x.op is not Ops.CONST).most_common():
    like = [x for x in xs if x.op is op]
    if not _same_op(tuple(like)): continue
    if len(like) == len(xs): return xs
    out = tuple(x if x.op is op else _unfold(x, like) for x in xs)
    if all(x is not None for x in out) and _same_op(out): return out  # type: ignore[arg-type]
  return None


def _offset_lanes(xs: tuple[UOp, ...]) -> tuple[UOp, tuple[int, ...]] | None:
  """(b, (c0, c1, ...)) when lane k is the integer b + ck (a lane whose ck is 0 is b itself, as the simplifier leaves
  it), not every ck alike: an index per lane, one broadcast plus a constant vector."""
  if not xs[0].dtype.is_int: return None
  parts = [(x.src[0], x.src[1].arg) if x.op is Ops.ADD and x.src[1].op is Ops.CONST else (x, 0) for x in xs]
  if len({c for _, c in parts}) == 1 or not _uniform([b for b, _ in parts]): return None
  return parts[0][0], tuple(c for _, c in parts)


def _conjuncts(x: UOp) -> list[UOp]:
  """The terms of a chain of ANDs, in order (a lone bool is one)."""
  return _conjuncts(x.src[0]) + _conjuncts(x.src[1]) if x.op is Ops.AND else [x]


def _and_groups(xs: tuple[UOp, ...], depth: int) -> tuple[list[tuple[UOp, ...]], list[UOp], list[list[UOp]]] | None:
  """Lanes that are ANDs of gates, gate by gate: (the gates in order, as many in every lane and cheap as vectors: a
  window's edges per lane; the gates the same in every lane that has them: a lane's own bound, `live`, which the
  simplifier dropped from the lanes it always holds in; each lane's gates), or None."""
  if not xs[0].dtype == dtypes.bool or not any(x.op is Ops.AND for x in xs): return None
  lanes = [_conjuncts(x) for x in xs]
  shared: list[UOp] = []  # one scalar in several lanes, in none twice
  for c in (c for ls in lanes for c in ls):
    if c.op is not Ops.CONST and not any(c is s for s in shared) and sum(1 for ls in lanes if c in ls) > 1 and \
        all(sum(1 for d in ls if d is c) <= 1 for ls in lanes):
      shared.append(c)
  rest = [[c for c in ls if not any(c is s for s in shared)] for ls in lanes]
  if len({len(r) for r in rest}) != 1 or not rest[0]: return None
  groups = [tuple(r[j] for r in rest) for j in range(len(rest[0]))]
  return (groups, shared, lanes) if all(_cheap_lanes(g, depth - 1) for g in groups) else None


def _and_lanes(groups: list[tuple[UOp, ...]], shared: list[UOp], lanes: list[list[UOp]]) -> UOp:
  """The AND of `_and_groups`' vectors: one per gate in order, one of each shared gate and true (where a lane lacks
  it)."""
  true, vec = UOp.const(dtypes.bool, True), dtypes.bool.vec(len(lanes))
  vectors = [UOp(Ops.VECTORIZE, vec, g) for g in groups] + \
    [UOp(Ops.VECTORIZE, vec, tuple(s if any(c is s for c in ls) else true for ls in lanes)) for s in shared]
  out = vectors[0]
  for v in vectors[1:]: out = UOp(Ops.AND, out.dtype, (out, v))
  return out


def _one_scalar_gate(xs: tuple[UOp, ...]) -> bool:
  """One bool scalar in some lanes, constants in the others: the device selects whole masks (a gate some lanes
  drop)."""
  return len({x for x in xs if x.op is not Ops.CONST}) == 1 and xs[0].dtype == dtypes.bool


def _cheap_operands(ys: tuple[UOp, ...], depth: int) -> bool:
  """Whether every operand of the lanes `ys` (one op each) is cheap as a vector."""
  return all(_cheap_lanes(tuple(y.src[j] for y in ys), depth - 1) for j in range(len(ys[0].src)))


def _cheap_lanes(xs: tuple[UOp, ...], depth: int) -> bool:
  """Whether VECTORIZE(xs) costs no more than one vector instruction per op: the same scalar in every lane (a
  broadcast), a constant in every lane (a constant vector), a vector's lanes in order, or one op on such lanes."""
  if _uniform(xs) or all(x.op is Ops.CONST for x in xs): return True
  # the lanes of one vector in order (an operand already rewritten into a vector op)
  if all(x.op is Ops.GEP and x.arg == k and x.src[0] is xs[0].src[0] for k, x in enumerate(xs)): return True
  if _offset_lanes(xs) is not None or _one_scalar_gate(xs): return True
  if depth > 0 and _and_groups(xs, depth) is not None: return True
  return depth > 0 and (ys := _regular(xs)) is not None and _cheap_operands(ys, depth)


def _lanewise(v: UOp) -> UOp | None:
  """VECTORIZE(op(a0, b0), op(a1, b1), ...) -> op(VECTORIZE(a0, a1, ...), VECTORIZE(b0, b1, ...)) when every lane
  is one op whose operands are cheap as vectors (lanes the simplifier folded are written as that op again). The index
  math and gates `vectorize` keeps per lane end up here when a vector needs them: a padded window's gate per lane
  (i > 30 - k for lane k) is then one vector compare with a constant vector, not a compare and an insert per lane
  (a cumsum's window kernel of 8x50257 float32: 1.2 -> 0.4 ms; the cumsum 1.9-3.1 -> 1.0-1.3 ms). Lanes b, b + 1, ...
  (an index per lane) are a broadcast plus a constant vector; ANDs of gates are taken gate by gate, a gate that some
  lanes dropped (the row's end, always inside for the lanes before it) a vector of it and true (the same cumsum
  with its rows' ends: its last kernel 492 -> 186 us; avg_pool2d 3x3, padding 1, of 16x16x28x28: 0.47-0.54 -> 0.30
  ms)."""
  if all(x is v.src[0] for x in v.src): return None
  n = len(v.src)
  if _uniform(v.src): return UOp(Ops.VECTORIZE, v.dtype, (v.src[0],) * n)  # one value: a broadcast
  if (offsets := _offset_lanes(v.src)) is not None:
    base, consts = offsets
    return UOp(Ops.ADD, v.dtype, (UOp(Ops.VECTORIZE, v.dtype, (base,) * n),
                                  UOp(Ops.VECTORIZE, v.dtype, tuple(UOp.const(base.dtype, c) for c in consts))))
  if (anded := _and_groups(v.src, LANEWISE_DEPTH)) is not None: return _and_lanes(*anded)
  # (what else makes these lanes cheap, `_cheap_lanes` asks: the cases above were no, and constants or a vector's
  # lanes are no op)
  if (xs := _regular(v.src)) is None or not (_one_scalar_gate(v.src) or _cheap_operands(xs, LANEWISE_DEPTH)):
    return None
  operands = [tuple(x.src[j] for x in xs) for j in range(len(xs[0].src))]
  vectors = tuple(UOp(Ops.VECTORIZE, o[0].dtype.vec(n), (o[0],) * n if _uniform(o) else o) for o in operands)
  return UOp(xs[0].op, xs[0].dtype.vec(n), vectors, xs[0].arg)


# the lowering adds these to its simplifier on devices with vector ops
vector_rules = PatternMatcher([
  # vectorize(op(a0, b0), ..., op(an, bn)) -> op(vectorize(a0, ..., an), vectorize(b0, ..., bn)): see _lanewise
  (UPat(Ops.VECTORIZE, name="v"), _lanewise),
  # gep(vectorize(x0, ..., xn), k) -> xk
  (UPat(Ops.GEP, name="g", src=(UPat(Ops.VECTORIZE, name="v"),)), lambda g, v: v.src[g.arg]),
  # vectorize(gep(v, 0), ..., gep(v, n-1)) -> v
  (UPat(Ops.VECTORIZE, name="v"), lambda v: v.src[0].src[0] if all(
    s.op is Ops.GEP and s.arg == k and s.src[0] is v.src[0].src[0] for k, s in enumerate(v.src))
    and v.src[0].src[0].dtype == v.dtype else None),
])

__all__ = ["vectorize", "consecutive", "vector_rules", "MAX_LOAD_STRIDE"]
