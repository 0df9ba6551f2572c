"""Reusing schedules by structure.

A training step or a serving loop realizes the same graph again and again on new buffers. The
graph's structure (ops, dtypes, arguments, shapes, and which leaves are the same buffer) decides
the whole schedule, so the first realize records it as a template and later ones only make fresh
output buffers and new KERNEL nodes. The result is the schedule kernelize and create_schedule
would have made, except that intermediate results are never handed to live tensors that
happen to hold the same graph (they recompute them if realized later: correct, rarely seen).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Collection, Hashable

from plugrad.device import Buffer
from plugrad.dtype import DType
from plugrad.scheduler import (Kernel, ScheduleItem, _plan_frees, applied_as, buffer_node, buffer_of, contiguous_base,
                               output_ast, pending_kernel)
from plugrad.uops import Ops, UOp, _key_arg, toposort

# a buffer of a template: ("leaf", i) is the i-th distinct input buffer, ("out", j) the j-th one it creates
Ref = tuple[str, int]


def structure_key(roots: list[UOp], extra: Hashable) -> tuple[Hashable, list[Buffer]] | None:
  """A key equal for graphs of the same structure, and the distinct leaf buffers in the order the
  key numbers them; None for graphs holding kernelized nodes or an assign that is not a root (not cached)."""
  ids: dict[UOp, int] = {}
  reps: list[tuple] = []
  leaves: list[Buffer] = []
  leaf_index: dict[Buffer, int] = {}
  root_set = set(roots)
  for n in toposort(roots, descend=lambda n: n.op is not Ops.BUFFER):
    if n.op is Ops.KERNEL: return None
    # an assign inside the graph may be held by a live tensor that only a full schedule rebinds: reusing
    # a template would leave that tensor pointing at the assign, and a later realize would apply it again
    if n.op is Ops.ASSIGN and (n not in root_set or applied_as(n) is not None): return None
    if n.op is Ops.BUFFER:
      buf = buffer_of(n)
      if buf not in leaf_index:
        leaf_index[buf] = len(leaves)
        leaves.append(buf)
      rep: tuple = ("BUFFER", leaf_index[buf], buf.dtype, buf.size, buf.device, buf.options)
    else:
      # an ASSIGN's arg only tells one assign from another: equal graphs differ in it every step
      rep = (n.op, n.dtype, None if n.op is Ops.ASSIGN else _key_arg(n.arg), tuple(ids[s] for s in n.src))
    ids[n] = len(reps)
    reps.append(rep)
  return (tuple(reps), tuple(ids[r] for r in roots), extra), leaves


@dataclass(frozen=True)
class _Step:
  ast: UOp | None
  device: str
  outs: tuple[Ref, ...]  # one per STORE of a multi-output kernel
  ins: tuple[Ref, ...]
  out_asts: tuple[UOp | None, ...]  # each output's own single-output kernel (made once, at record)


@dataclass(frozen=True)
class ScheduleTemplate:
  """A schedule with its buffers replaced by references, and what each root becomes."""
  steps: tuple[_Step, ...]
  outputs: tuple[tuple[str, int, DType, object], ...]  # (device, size, dtype, options) of each created buffer
  roots: tuple[tuple[Ref, tuple[int, ...]] | None, ...]  # per root: the buffer it becomes and its shape

  @staticmethod
  def record(leaves: list[Buffer], new_roots: list[UOp], items: list[ScheduleItem]) -> ScheduleTemplate | None:
    """The template of a schedule just made; None when it uses buffers it cannot name."""
    refs: dict[Buffer, Ref] = {b: ("leaf", i) for i, b in enumerate(leaves)}
    outputs, steps = [], []
    for it in items:
      for out in it.bufs[:it.outs]:  # not it.kernel.buffer: a kernel may have been made to write in place
        if out not in refs:
          refs[out] = ("out", len(outputs))
          outputs.append((out.device, out.size, out.dtype, out.options))
      if any(b not in refs for b in it.bufs[it.outs:]): return None
      # each output's graph node gets a kernel of its own, which alone would compute it from every input
      out_asts = (it.ast,) if it.outs == 1 or it.ast is None else tuple(output_ast(it.ast, j) for j in range(it.outs))
      steps.append(_Step(it.ast, it.device, tuple(refs[b] for b in it.bufs[:it.outs]),
                         tuple(refs[b] for b in it.bufs[it.outs:]), out_asts))
    roots = []
    for r in new_roots:
      base = contiguous_base(r)
      if base is None: roots.append(None)
      # a root already a buffer needs no kernel; kernelize may still have changed it (a DETACH taken off)
      elif pending_kernel(base) is None:
        roots.append((refs[buffer_of(base)], r.shape) if buffer_of(base) in refs else None)
      elif buffer_of(base) not in refs: return None
      else: roots.append((refs[buffer_of(base)], r.shape))
    return ScheduleTemplate(tuple(steps), tuple(outputs), tuple(roots))

  def instantiate(self, leaves: list[Buffer], new_buffer: Callable[[str, int, DType, object], Buffer],
                  live: Collection[Buffer]) -> tuple[list[ScheduleItem], list[UOp | None]]:
    """The schedule on these leaves with fresh outputs, and each root's new node (None: unchanged)."""
    created = [new_buffer(*spec) for spec in self.outputs]
    buffer = {("leaf", i): b for i, b in enumerate(leaves)} | {("out", j): b for j, b in enumerate(created)}
    node: dict[Ref, UOp] = {ref: buffer_node(b) for ref, b in buffer.items()}
    items = []
    for st in self.steps:
      srcs = tuple(node[r] for r in st.ins)
      kernels = []
      for j, ref in enumerate(st.outs):
        out = buffer[ref]
        kernels.append(kernel := Kernel(st.out_asts[j], st.device, buffer_node(out)))
        k = UOp(Ops.KERNEL, None, srcs, kernel)
        # a step writing a buffer an earlier step wrote (in place) runs after it, even when it binds no input
        after = (node[ref],) if node[ref].op is Ops.ASSIGN else ()
        node[ref] = UOp(Ops.ASSIGN, out.dtype, (kernel.out, k) + after)
      items.append(ScheduleItem(st.ast, st.device, tuple(buffer[r] for r in st.outs + st.ins), kernels[0],
                                outs=len(st.outs), siblings=tuple(kernels[1:])))
    _plan_frees(items, live, set(created) - {buffer[r[0]] for r in self.roots if r is not None})
    roots = []
    for r in self.roots:
      if r is None: roots.append(None)
      else:
        n = node[r[0]]
        roots.append(n if n.shape == r[1] else UOp(Ops.RESHAPE, n.dtype, (n,), r[1]))
    return items, roots


class ScheduleCache:
  """A bounded map from structure keys to schedule templates (least recently used dropped)."""

  def __init__(self, size: int = 512) -> None:
    self.size, self.entries = size, OrderedDict()
    self.hits = self.misses = 0

  def get(self, key: Hashable) -> ScheduleTemplate | None:
    tpl = self.entries.get(key)
    if tpl is None: self.misses += 1
    else:
      self.hits += 1
      self.entries.move_to_end(key)
    return tpl

  def put(self, key: Hashable, tpl: ScheduleTemplate) -> None:
    self.entries[key] = tpl
    if len(self.entries) > self.size: self.entries.popitem(last=False)
