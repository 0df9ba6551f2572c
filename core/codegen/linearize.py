"""Order a lowered kernel graph into a flat loop program.

Each REDUCE becomes an accumulator defined before its loops, the loops, the body, an ACCUMULATE
and the loop ends; users of the REDUCE read the accumulator (a vector REDUCE gets one vector
accumulator). Anything the body needs that does not depend on the loop's variables is emitted
before the loop (loop-invariant hoisting), broadcasts (VECTORIZE) of loop-invariant values too.
"""
from __future__ import annotations

import sys

from plugrad.alu import reduce_identity
from plugrad.shape import prod
from plugrad.uops import GroupOp, Ops, UOp, substitute, toposort


def linearize(sink: UOp) -> tuple[tuple[UOp, ...], int]:
  """The program's UOps in execution order, and an estimate of its operation count."""
  nodes = toposort([sink])
  deps: dict[UOp, frozenset[UOp]] = {}  # the RANGEs a node's value depends on (a REDUCE: outside its own loops)
  index_only: dict[UOp, bool] = {}
  for n in nodes:
    d = frozenset({n}) if n.op is Ops.RANGE else frozenset().union(*(deps[s] for s in n.src))
    if n.op is Ops.REDUCE: d = d - set(n.src[1:])
    deps[n] = d
    index_only[n] = n.op in (Ops.SPECIAL, Ops.RANGE, Ops.CONST) or (n.op in GroupOp.ALU and all(index_only[s] for s in n.src))
  by_ranges: dict[tuple[UOp, ...], list[UOp]] = {}
  for n in nodes:
    if n.op is Ops.REDUCE: by_ranges.setdefault(n.src[1:], []).append(n)
  if (separated := _separate_loops(sink, nodes, deps, by_ranges)) is not None: return linearize(separated)

  out: list[UOp] = []
  emitted: dict[UOp, UOp] = {}
  launch = prod(n.arg[2] for n in nodes if n.op is Ops.SPECIAL)
  flops = 0
  accs = 0

  def emit(n: UOp, open_ranges: frozenset[UOp], mult: int) -> UOp:
    nonlocal flops, accs
    if n in emitted: return emitted[n]
    if n.op is Ops.REDUCE:
      ranges = n.src[1:]
      # every reduction over the same loops that can run here shares them (one accumulator each)
      group = [m for m in by_ranges[ranges] if m not in emitted and deps[m] <= open_ranges]
      for m in toposort([g.src[0] for g in group]):
        if m in emitted or m.op is Ops.RANGE: continue
        # a nested accumulator's start value (a vector of zeros is an instruction) goes here too: else the loop that
        # first needs it defines it inside itself, and a later copy of that reduction outside the loop reads it there
        if m.op is Ops.REDUCE: emit(reduce_identity(m.arg, m.dtype), open_ranges, mult)
        if deps[m] <= open_ranges: emit(m, open_ranges, mult)
      group_accs = []
      for g in group:
        acc = UOp(Ops.DEFINE_ACC, g.dtype, (emit(reduce_identity(g.arg, g.dtype), open_ranges, mult),), accs)
        accs += 1
        out.append(acc)
        group_accs.append(acc)
      inner_mult = mult
      for r in ranges:
        end = emit(r.src[0], open_ranges, mult)
        emitted[r] = UOp(Ops.RANGE, r.dtype, (end,), r.arg)
        out.append(emitted[r])
        inner_mult *= r.src[0].vmax  # a loop bound by a Variable: counted at its largest
      for g, acc in zip(group, group_accs):
        value = emit(g.src[0], open_ranges | set(ranges), inner_mult)
        out.append(UOp(Ops.ACCUMULATE, g.dtype, (acc, value), g.arg))
        flops += inner_mult * g.dtype.count
      for r in reversed(ranges): out.append(UOp(Ops.ENDRANGE, None, (emitted[r],)))
      for g, acc in zip(group, group_accs): emitted[g] = acc
      return emitted[n]
    new = n.replace(src=tuple(emit(s, open_ranges, mult) for s in n.src))
    if n.op in GroupOp.ALU and not index_only[n]: flops += mult * n.dtype.count
    emitted[n] = new
    out.append(new)
    return new

  # parameters and launch indices come first, in a fixed order
  for n in sorted((n for n in nodes if n.op is Ops.PARAM), key=lambda p: p.arg[0]): emit(n, frozenset(), launch)
  # the integer parameters (Variables) follow the buffers, ordered by name: the launch passes their values so
  for n in sorted((n for n in nodes if n.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0]): emit(n, frozenset(), launch)
  for n in sorted((n for n in nodes if n.op is Ops.DEFINE_LOCAL), key=lambda s: s.arg[0]): emit(n, frozenset(), launch)
  specials = sorted((n for n in nodes if n.op is Ops.SPECIAL), key=lambda s: s.arg[1])
  # symbolic launch sizes before any launch index: a device that loops over them opens every loop at once
  for n in specials:
    for s in n.src: emit(s, frozenset(), launch)
  for n in specials: emit(n, frozenset(), launch)
  old_limit = sys.getrecursionlimit()
  sys.setrecursionlimit(max(old_limit, 20000))
  try:
    for store in sink.src: emit(store, frozenset(), launch)
  finally:
    sys.setrecursionlimit(old_limit)
  return tuple(out), flops


def _separate_loops(sink: UOp, nodes: list[UOp], deps: dict[UOp, frozenset[UOp]],
                    by_ranges: dict[tuple[UOp, ...], list[UOp]]) -> UOp | None:
  """`sink` with fresh RANGEs for the reductions over shared loops that cannot run in one place, or None when every
  group can. The copies of an upcast reduction (and sibling reductions) share their RANGEs so that they run in one
  loop; when simplification has taken an outer loop's index out of one copy (its gate folded to false), that copy is
  hoisted out of the outer loop while the others stay inside it, and one RANGE would open two loops. Reductions that
  depend on the same outer loops run in one place: the first such set keeps the RANGEs, each other gets its own."""
  next_arg = 1 + max((n.arg for n in nodes if n.op is Ops.RANGE), default=-1)
  for ranges, group in by_ranges.items():
    by_deps: dict[frozenset[UOp], list[UOp]] = {}
    for g in group: by_deps.setdefault(deps[g], []).append(g)
    if len(by_deps) == 1: continue
    mapping: dict[UOp, UOp] = {}
    for i, reds in enumerate(list(by_deps.values())[1:]):
      fresh = {r: UOp(Ops.RANGE, r.dtype, r.src, next_arg + i * len(ranges) + k) for k, r in enumerate(ranges)}
      mapping.update({g: substitute(g, fresh) for g in reds})
    # one group at a time: the caller starts over on the new graph, whose nesting may have changed
    return substitute(sink, mapping)
  return None
