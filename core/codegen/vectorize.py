"""Explicit vectors for the upcast innermost output dimension (devices whose Capabilities set
`vector_ops`).

For a kernel with a reduction on a device that loops over its launch indices, the lowering tiles
the output into registers: launch dimension 0 (the innermost, contiguous output axis) computes V
neighbouring outputs per thread, V being the device's vector width (Opt VECTORIZE, chosen by
`opt.heuristic`). The same function vectorises a reduce axis (Opt LANES): its lanes are V consecutive
iterations of the reduce loop, and the REDUCE of the vector body is one vector accumulator. On
a device without vector ops every one of those outputs is a separate scalar copy of the kernel's
value graph. `vectorize` instead builds ONE copy in which the values that depend on the lane are
vectors of V lanes (dtype `scalar.vec(V)`):

- a node that does not depend on the lane stays scalar;
- integer and bool arithmetic on lane-dependent indices stays a list of V scalar expressions, one
  per lane (index math, gates); a vector op that needs it gets VECTORIZE(lane 0, ..., lane V-1);
- a LOAD whose V lane indices simplify to base, base+1, ..., base+V-1 under one gate becomes one
  vector LOAD (dtype scalar.vec(V), index base: lanes read consecutive elements); any other
  lane-dependent LOAD becomes VECTORIZE of V scalar LOADs (a gather);
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

from typing import Callable

from plugrad.symbolic import split_terms
from plugrad.uops import GroupOp, Ops, PatternMatcher, UOp, UPat, toposort

_SCALAR, _LANES, _VECTOR = 0, 1, 2


def _affine(u: UOp) -> tuple[dict[UOp, int], int]:
  """An integer expression as ({term: coefficient}, constant), like terms merged."""
  terms, const = split_terms(u)
  merged: dict[UOp, int] = {}
  for t, c in terms: merged[t] = merged.get(t, 0) + c
  return {t: c for t, c in merged.items() if c}, const


def consecutive(idxs: list[UOp]) -> bool:
  """Whether the (simplified) indices are base, base+1, ..., base+len-1."""
  terms0, const0 = _affine(idxs[0])
  for k, ix in enumerate(idxs[1:], 1):
    terms, const = _affine(ix)
    if terms != terms0 or const != const0 + k: return False
  return True


def vectorize(value: UOp, index: UOp, lane_of: UOp, lanes: list[UOp],
              simplify: Callable[[UOp], UOp]) -> list[tuple[UOp, UOp]] | None:
  """The (index, value) pairs to STORE so that every lane of `lane_of` is computed at once.

  :param value: the output value, a graph in which `lane_of` stands for the upcast index.
  :param index: the output index, in terms of `lane_of` as well.
  :param lane_of: the placeholder of the upcast index.
  :param lanes: what the placeholder is in each lane (gidx*V + lane).
  :param simplify: the lowering's simplifier (symbolic rules), applied to each lane's load index.
  :return: one (base index, vector) pair when the output is stored as a vector, V scalar pairs
    otherwise; None when vectors would not help (see above).
  """
  width = len(lanes)
  kind: dict[UOp, int] = {}
  lane_vals: dict[UOp, list[UOp]] = {}
  vec: dict[UOp, UOp] = {}
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
      idxs, gates = [p[0] for p in per_lane], {tuple(p[1:]) for p in per_lane}
      kind[n] = _VECTOR
      if kind[n.src[1]] != _VECTOR and len(gates) == 1 and consecutive(idxs):
        vec[n] = UOp(Ops.LOAD, n.dtype.vec(width), (buf, idxs[0], *per_lane[0][1:]))
        vector_loads += 1
      else:
        vec[n] = UOp(Ops.VECTORIZE, n.dtype.vec(width), tuple(UOp(Ops.LOAD, n.dtype, (buf, *p)) for p in per_lane))
    elif n.op is Ops.REDUCE:
      kind[n] = _VECTOR
      vec[n] = UOp(Ops.REDUCE, n.dtype.vec(width), (as_vec(n.src[0]), *n.src[1:]), n.arg)
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


# the lowering adds these to its simplifier on devices with vector ops
vector_rules = PatternMatcher([
  # gep(vectorize(x0, ..., xn), k) -> xk
  (UPat(Ops.GEP, name="g", src=(UPat(Ops.VECTORIZE, name="v"),)), lambda g, v: v.src[g.arg]),
  # vectorize(gep(v, 0), ..., gep(v, n-1)) -> v
  (UPat(Ops.VECTORIZE, name="v"), lambda v: v.src[0].src[0] if all(
    s.op is Ops.GEP and s.arg == k and s.src[0] is v.src[0].src[0] for k, s in enumerate(v.src))
    and v.src[0].src[0].dtype == v.dtype else None),
])

__all__ = ["vectorize", "consecutive", "vector_rules"]
