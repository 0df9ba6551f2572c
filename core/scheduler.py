"""The scheduler: decide which nodes of a tensor graph become buffers, fuse the rest into kernels,
and order the kernels.

`kernelize` rewrites a tensor graph so that every realized node becomes
`ASSIGN(BUFFER, KERNEL(inputs...))`: the KERNEL holds the kernel's AST (a SINK of a STORE into
PARAM 0 of a value computed from PARAM loads, movement ops, ALU ops and reductions) and its
sources are the buffers it reads. `create_schedule` then lists the pending KERNELs as
ScheduleItems in an order that respects data dependencies and assign hazards, fusing sibling kernels
horizontally: independent kernels over one iteration space that read a common input through the same
view become one kernel storing each of their outputs (a SINK of several STOREs), reading that input once.

A node is realized (gets its own buffer) when it is
- an output, a CONTIGUOUS, a COPY (and the copy's source), or an ASSIGN;
- a reduction that reaches its kernel through an expand (fusing would recompute it per element);
- a node holding a reduction that more than one kernel reads (it is computed once, not per reader);
- a reduction another reduction reads through a pad that a reshape regroups (a windowed view's gradient);
- an expression its kernel would evaluate at many more positions than it has (read through an expand or a wide
  pad) where that costs more than reading it back (a GELU read by a matmul, the matmuls of a split's gradient);
- a cut that keeps a kernel within the device's buffer limit.
Everything else is fused into the kernel of the realized node that reads it.
"""
from __future__ import annotations

import functools
import itertools
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable

from plugrad.alu import fold_constant
from plugrad.device import Buffer, ImageSpec
from plugrad.dtype import DType
from plugrad.shape import prod, smax  # smax: scheduling decisions hold for every value of the Variables
from plugrad.uops import GroupOp, KeyRef, Ops, PatternMatcher, UOp, UPat, graph_rewrite, toposort


@dataclass(eq=False, frozen=True)
class Kernel:
  """What a KERNEL node runs: a compute AST, or a copy between devices (`ast` is None). Whether it
  has run is kept outside the graph (`mark_done`), so the graph stays a value.

  :param out: the BUFFER node of the buffer the kernel writes.
  :param seq: when the kernel was made: writes into one buffer are made in program order (an assign's
    target, the previous version, is kernelized before it), so this orders them in a schedule."""
  ast: UOp | None
  device: str
  out: UOp
  seq: int = field(default_factory=itertools.count().__next__)

  @property
  def is_copy(self) -> bool: return self.ast is None
  @property
  def buffer(self) -> Buffer: return buffer_of(self.out)

  def __repr__(self) -> str: return f"<Kernel {'copy' if self.is_copy else 'compute'} {self.device} -> {self.buffer}>"


@dataclass(eq=False)
class ScheduleItem:
  """One step of a schedule: a compute kernel (ast is a SINK) or a copy (ast is None).

  A compute kernel may write several buffers (horizontal fusion: sibling kernels over one iteration
  space read their shared inputs once): its AST is a SINK of `outs` STOREs, into PARAMs 0..outs-1.

  :param bufs: the buffers the step touches in PARAM order: the `outs` written ones first, then the inputs.
  :param kernel: the graph's Kernel for the first output; `siblings` those of the others, in order. None for a
    step of a cached schedule run at once (no graph node waits for it: see plugrad.engine.schedule_cache).
  :param frees: buffers whose last use is this step and that nothing outside the schedule holds.
  :param var_vals: the values of the Variables (DEFINE_VAR) of the realize that made it; its kernel takes them
    at launch.
  """
  ast: UOp | None
  device: str
  bufs: tuple[Buffer, ...]
  kernel: Kernel | None
  frees: list[Buffer] = field(default_factory=list)
  outs: int = 1
  siblings: tuple[Kernel, ...] = ()
  var_vals: dict[UOp, int] = field(default_factory=dict)

  @property
  def is_copy(self) -> bool: return self.ast is None

  @property
  def kernels(self) -> tuple[Kernel, ...]:
    """Every graph Kernel this step runs (one per output); the engine marks each done after it."""
    return () if self.kernel is None else (self.kernel,) + self.siblings

  def __repr__(self) -> str:
    kind = "copy" if self.is_copy else "kernel"
    return f"<ScheduleItem {kind} {self.device} bufs={[f'{b.size}x{b.dtype.name}' for b in self.bufs]}>"


# ---------------------------------------------------------------- node classification

_done: weakref.WeakSet[Kernel] = weakref.WeakSet()  # kernels that have run: a finished kernel reads as its buffer


def mark_done(kernel: Kernel) -> None:
  """Record that `kernel` ran (the engine calls this after launching it)."""
  _done.add(kernel)


def pending_kernel(u: UOp) -> Kernel | None:
  """The Kernel of an ASSIGN(BUFFER, KERNEL) node that has not run yet."""
  if u.op is Ops.ASSIGN and u.src[1].op is Ops.KERNEL and u.src[1].arg not in _done: return u.src[1].arg
  return None


def is_buffer_node(u: UOp) -> bool:
  """A node whose value is exactly a buffer's contents: BUFFER, or a kernelized ASSIGN (ASSIGN(BUFFER, KERNEL),
  with a third source when an earlier write into the buffer was pending as it was made)."""
  return u.op is Ops.BUFFER or (u.op is Ops.ASSIGN and u.src[1].op is Ops.KERNEL)


# buffer uid -> its Buffer. A BUFFER node's arg names its buffer by value, (uid, device, size), so a graph holds
# no live memory; the Buffer stays here as long as its node lives (a finalizer drops it with the node), like a
# graph that held it itself. Keyed by the uid, so the many lookups of a realize are plain dict lookups.
_buffers: dict[int, Buffer] = {}


# buffer uid -> a weak reference to its BUFFER node, keyed by the uid, whose death drops the buffer from `_buffers`
# (a plain reference with a callback: weakref.finalize costs three times as much, and every realize makes buffer
# nodes); the dict keeps each reference alive until its callback runs
_node_refs: dict[int, KeyRef] = {}


def _drop_buffer(ref: KeyRef) -> None:
  _buffers.pop(ref.key, None)
  _node_refs.pop(ref.key, None)


def buffer_node(buf: Buffer) -> UOp:
  """The BUFFER node of `buf` (one node per buffer while it lives: UOps are hash-consed)."""
  u = UOp(Ops.BUFFER, buf.dtype, (), (buf.uid, buf.device, buf.size))
  if buf.uid not in _buffers:
    _buffers[buf.uid] = buf
    ref = _node_refs[buf.uid] = KeyRef(u, _drop_buffer)
    ref.key = buf.uid
  return u


def buffer_of(u: UOp) -> Buffer:
  """The Buffer of a buffer node (BUFFER, or the ASSIGN(BUFFER, KERNEL) a kernel writes)."""
  return _buffers[(u if u.op is Ops.BUFFER else u.src[0]).arg[0]]


def contiguous_base(u: UOp) -> UOp | None:
  """The buffer node under a chain of reshapes, when the node is just that buffer's data."""
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u if is_buffer_node(u) else None


def is_pending_assign(u: UOp) -> bool:
  """An ASSIGN the scheduler has not made a kernel for yet (a write still to be applied)."""
  return u.op is Ops.ASSIGN and u.src[1].op is not Ops.KERNEL


def version_base(u: UOp) -> UOp | None:
  """The node under a chain of reshapes when it is a version of a buffer: the buffer's contents
  (a buffer node) or a pending write into it (an ASSIGN). Assigning to such a node writes in place."""
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u if is_buffer_node(u) or is_pending_assign(u) else None


def assigned_buffer(u: UOp) -> Buffer | None:
  """The buffer whose version `u` is (through reshapes and pending assigns), None for other nodes."""
  while (base := version_base(u)) is not None and is_pending_assign(base): u = base.src[0]
  return buffer_of(base) if base is not None else None


# pending ASSIGN -> the kernelized node it became. Each `Tensor.assign` makes a distinct ASSIGN (its arg is
# unique), so a graph still holding one after its write was scheduled reads it as that write's buffer and
# never applies the write a second time. Kept outside the graph, like `_done`; an entry lives as long as
# some graph holds the ASSIGN.
_applied: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def record_applied(becomes: dict[UOp, UOp]) -> None:
  """Remember what each pending ASSIGN in `becomes` became (see `_applied`)."""
  for old, new in becomes.items():
    if is_pending_assign(old) and contiguous_base(new) is not None: _applied[old] = new


def applied_as(u: UOp) -> UOp | None:
  """The kernelized node a pending ASSIGN already became, None if it was never scheduled."""
  return _applied.get(u) if u.op is Ops.ASSIGN else None


def device_of(u: UOp, default: str) -> str:
  """The device a tensor-graph node computes on: that of the buffers or copy it reads."""
  stack, seen = [u], set()
  while stack:  # the nearest buffer or copy decides; never look behind a copy
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    if n.op is Ops.BUFFER: return n.arg[1]
    if n.op is Ops.COPY: return n.arg
    if n.op is Ops.ASSIGN and n.src[1].op is Ops.KERNEL: return n.src[1].arg.device
    stack.extend(n.src)
  return default


def _device_map(nodes: Iterable[UOp]) -> dict[UOp, str]:
  """`device_of` for every node of a graph at once (in toposort order: each node after its sources), so
  kernelizing a graph with many kernels does not walk it once per kernel. Nodes with no buffer or copy
  below them are left out (they compute on the default device)."""
  devices: dict[UOp, str] = {}
  for n in nodes:
    if n.op is Ops.BUFFER: devices[n] = n.arg[1]
    elif n.op is Ops.COPY: devices[n] = n.arg
    elif n.op is Ops.ASSIGN and n.src[1].op is Ops.KERNEL: devices[n] = n.src[1].arg.device
    elif (d := next((devices[x] for x in reversed(n.src) if x in devices), None)) is not None: devices[n] = d
  return devices


def _expands(u: UOp) -> bool:
  return u.op is Ops.EXPAND and smax(prod(u.shape)) > smax(prod(u.src[0].shape))


# ---------------------------------------------------------------- choosing what to realize

def _find_realizes(roots: list[UOp], nodes: tuple[UOp, ...], buffer_limit: Callable[[UOp], int | None]) -> set[UOp]:
  """The nodes under `roots` (`nodes`: their toposort) that get buffers of their own."""
  realized: set[UOp] = {r for r in roots if not _needs_no_kernel(r)}
  for n in nodes:
    if n.op in (Ops.CONTIGUOUS, Ops.COPY) or (n.op is Ops.ASSIGN and n.src[1].op is not Ops.KERNEL): realized.add(n)
    if n.op is Ops.COPY and contiguous_base(n.src[0]) is None: realized.add(n.src[0])
    if n.op is Ops.ASSIGN and n.src[1].op is not Ops.KERNEL and _assign_hazard(n): realized.add(n.src[1])
  shared: set[UOp] = set()  # nodes realized only because several kernels read the reduction they hold
  while True:
    shared |= _group(nodes, realized)
    # one realized before the reduction under it got a buffer of its own no longer holds a reduction, so its
    # readers may recompute it (softmax's exp, read by its sum and by the division): give its buffer back
    holds = _holds_reduce(nodes, realized)
    if stale := {n for n in shared if not holds[n]}:
      realized -= stale
      shared -= stale
      shared |= _group(nodes, realized)  # sharing below the freed nodes only grows: this adds, never undoes
    split = _split_for_limit(nodes, realized, buffer_limit) | _split_for_depth(nodes, realized) | \
      _split_for_views(nodes, realized) | _split_for_shared_reads(nodes, realized) | \
      _split_for_recomputed_chains(nodes, realized) | _split_for_regrouped_pads(nodes, realized) | \
      _split_for_costly_recomputes(nodes, realized)
    if not split: return realized
    realized |= split


def _needs_no_kernel(u: UOp) -> bool:
  # a realized buffer viewed as-is, or a scalar constant, has nothing to compute
  if contiguous_base(u) is not None: return True
  # a view of a write made anyway (an assign through a view): the root stays that view of the written buffer
  base = u
  while base.op in GroupOp.Movement: base = base.src[0]
  if base is not u and is_pending_assign(base): return True
  if smax(prod(u.shape)) > 1: return u.op is Ops.CONST
  return _broadcast_const(u)


def _broadcast_const(u: UOp) -> bool:
  """Whether `u` is a constant, reshaped and expanded (one value everywhere)."""
  while u.op in (Ops.RESHAPE, Ops.EXPAND): u = u.src[0]
  return u.op is Ops.CONST


#: leaves that hold no buffer: each kernel that reads one computes its value
_COMPUTED_LEAVES = frozenset({Ops.CONST, Ops.ARANGE})


def _is_leaf(u: UOp, realized: set[UOp]) -> bool:
  return is_buffer_node(u) or u in realized or u.op in _COMPUTED_LEAVES


# most element operations a full reduction fused into an elementwise kernel may cost: each output recomputes
# it. tinygrad 0.14 fuses up to 2**24 (`a - a.max()` of 64x64), but the lowering does not hoist the reduction
# out of the output loop, and at 64x64 the fused kernel measured 25x slower than two kernels on CPU
RECOMPUTE_BUDGET = 1 << 16


def _cheap_to_recompute(reduce: UOp, kernels: Collection[UOp]) -> bool:
  """Whether a reduction read through an expand may stay fused into the kernels reading it. Only a full
  reduction (one value) qualifies: it depends on no output index, so a kernel of one element runs it as
  one loop before the other (a logsumexp, the std of a tensor; tinygrad 0.14 fuses these too), and a small
  elementwise kernel may compute it per output (RECOMPUTE_BUDGET). Anything bigger is read from a buffer."""
  if prod(reduce.shape) != 1: return False
  size = prod(reduce.src[0].shape)
  return all(prod(k.shape) == 1 or smax(prod(k.shape) * size) <= RECOMPUTE_BUDGET for k in kernels)


def _holds_reduce(nodes: tuple[UOp, ...], realized: set[UOp]) -> dict[UOp, bool]:
  """Whether each node's fused expression holds a reduction (one behind an expand mostly gets its own
  buffer, so it does not count)."""
  holds: dict[UOp, bool] = {}
  for n in nodes:
    if is_buffer_node(n) or n.op is Ops.CONST or _expands(n): holds[n] = False
    else: holds[n] = n.op is Ops.REDUCE_AXIS or any(holds[s] for s in n.src if s not in realized)
  return holds


def _group(nodes: tuple[UOp, ...], realized: set[UOp]) -> set[UOp]:
  """Walk from consumers to sources; add to `realized` the reductions that would be recomputed (read
  through an expand, or read by several kernels). Returns the nodes it realized because several kernels
  read them."""
  readers: dict[UOp, set[UOp]] = {}
  under_expand: dict[UOp, bool] = {}
  has_reduce = _holds_reduce(nodes, realized)
  shared: set[UOp] = set()
  for n in reversed(nodes):
    if _is_leaf(n, realized) and n not in realized: continue
    if n not in realized:
      kernels = readers.get(n, set())
      shared_costly = len(kernels) > 1 and has_reduce[n] and n.op not in GroupOp.Movement  # views pass sharing down
      recomputed = n.op is Ops.REDUCE_AXIS and under_expand.get(n, False) and not _cheap_to_recompute(n, kernels)
      if recomputed or shared_costly: realized.add(n)
      if shared_costly and not recomputed: shared.add(n)
    if n in realized: mine, expand_flag = {n}, False
    else: mine, expand_flag = readers.get(n, set()), under_expand.get(n, False)
    if n.op is Ops.KERNEL: continue
    for s in n.src:
      readers.setdefault(s, set()).update(mine)
      under_expand[s] = under_expand.get(s, False) or expand_flag or _expands(n)
  return shared


def _kernel_inputs(root: UOp, realized: set[UOp]) -> set[UOp]:
  """The buffers a kernel rooted at `root` would bind (its realized or buffer leaves)."""
  out: set[UOp] = set()
  stack, seen = [root], set()
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    for s in n.src:
      if is_buffer_node(s) or (s in realized): out.add(s)
      elif s.op is not Ops.CONST: stack.append(s)
  return out


def _split_for_limit(nodes: tuple[UOp, ...], realized: set[UOp], buffer_limit: Callable[[UOp], int | None]) -> set[UOp]:
  """For each kernel binding more buffers than its device allows, pick a fused node to realize:
  the one reading the most buffers while still fitting the limit itself."""
  cuts: set[UOp] = set()
  for root in [n for n in nodes if n in realized and n.op not in (Ops.COPY,)]:
    limit = buffer_limit(root)
    if limit is None or len(_kernel_inputs(root, realized)) + 1 <= limit: continue
    if limit < 3: raise ValueError(f"a device buffer limit of {limit} cannot fit a binary op (output and two inputs)")
    best, best_n = None, 0
    for n in root.toposort:
      if n is root or _is_leaf(n, realized) or n.op in GroupOp.Movement: continue
      k = len(_kernel_inputs(n, realized))
      if best_n < k <= limit - 1: best, best_n = n, k
    if best is None or best_n < 2: raise ValueError(f"cannot split a kernel to fit a buffer limit of {limit}")
    cuts.add(best)
  return cuts


MAX_KERNEL_DEPTH = 256  # longest chain of ops fused into one kernel; deeper chains get a buffer midway


def _split_for_depth(nodes: tuple[UOp, ...], realized: set[UOp]) -> set[UOp]:
  """Nodes to realize so that no kernel's expression is deeper than MAX_KERNEL_DEPTH: a chain of
  thousands of ops would otherwise make every later pass (and the device compiler) recurse that deep."""
  depth: dict[UOp, int] = {}
  cuts: set[UOp] = set()
  for n in nodes:
    if _is_leaf(n, realized) or n.op is Ops.KERNEL:
      depth[n] = 0
      continue
    d = 1 + max((0 if s in realized or s in cuts else depth.get(s, 0) for s in n.src), default=0)
    if d > MAX_KERNEL_DEPTH and n.op not in GroupOp.Movement:
      cuts.add(n)
      d = 0
    depth[n] = d
  return cuts


MAX_INDEX_VIEWS = 32  # most ways one fused node may be indexed in a kernel; beyond it the node gets a buffer


def _split_for_views(nodes: tuple[UOp, ...], realized: set[UOp]) -> set[UOp]:
  """Nodes to realize so that no fused node is read through more than MAX_INDEX_VIEWS different views.

  A node read through two different pads or shrinks is computed once per view, and a chain of such
  diamonds (`x = x.pad(...).shrink(...) + x.shrink(...)`, repeated) doubles the count at each step: fused, the
  kernel's expression (and the time to lower it) would grow exponentially with the chain. The count is
  estimated top-down: the views a node is read through are the most any elementwise reader passes on (they
  index it alike) plus the views each movement reader makes (each indexes it in its own way)."""
  alike: dict[UOp, int] = {}
  moved: dict[UOp, int] = {}
  cuts: set[UOp] = set()
  for n in reversed(nodes):
    if n.op is Ops.KERNEL or (_is_leaf(n, realized) and n not in realized): continue
    views = 1 if n in realized else alike.get(n, 0) + moved.get(n, 0)
    if views > MAX_INDEX_VIEWS and n.op not in GroupOp.Movement:
      cuts.add(n)
      views = 1
    for s in set(n.src):
      if s in realized or _is_leaf(s, realized): continue
      if n.op in GroupOp.Movement and n.op is not Ops.RESHAPE: moved[s] = moved.get(s, 0) + views
      else: alike[s] = max(alike.get(s, 0), views)
  return cuts


def _regroups(u: UOp) -> bool:
  """A reshape that merges or splits axes (not one that only adds or drops axes of size 1)."""
  return u.op is Ops.RESHAPE and tuple(d for d in u.shape if d != 1) != tuple(d for d in u.src[0].shape if d != 1)


def _split_for_regrouped_pads(nodes: tuple[UOp, ...], realized: set[UOp]) -> set[UOp]:
  """Reductions that another reduction reads through a pad whose padded axis a reshape then merges or splits.

  This is the gradient of a windowed view (a convolution's or a pooling's input gradient, col2im): fused, the
  outer reduction would find each value of the inner one through divisions and remainders of its index, under
  a gate, and run the inner reduction inside its own loops, so no vector lanes can take either (a 64x8x13x13
  conv input gradient: 2.1 ms fused, 0.5 ms as a reduction kernel and gathers). A pad of a reduction read
  elementwise stays fused. Walks consumers first; the state a node gets from the movement ops reading it: 1 a
  reduction reads it, 2 through a regrouping reshape, 3 through a pad under that reshape."""
  state: dict[UOp, int] = {}
  cuts: set[UOp] = set()
  for n in reversed(nodes):
    if n.op is Ops.KERNEL or (_is_leaf(n, realized) and n not in realized): continue
    if n.op is Ops.REDUCE_AXIS:
      if n not in realized and state.get(n, 0) == 3: cuts.add(n)
      mine = 1
    elif n.op in GroupOp.Movement and n not in realized:
      mine = state.get(n, 0)
      if mine >= 1 and _regroups(n): mine = max(mine, 2)
      elif mine >= 2 and n.op is Ops.PAD: mine = 3
    else: mine = 0
    for src in n.src: state[src] = max(state.get(src, 0), mine)
  return cuts


SHARED_READS = 4          # buffers a big node fused into several kernels may read before it gets a buffer of its own
SHARED_READS_SMALL = 8    # the same for a node of fewer than SMALL_NODE elements, where a launch costs more than
SMALL_NODE = 4096         # reading a few small buffers again: only an unbounded chain (a recurrence) is cut


def _split_for_shared_reads(nodes: tuple[UOp, ...], realized: set[UOp]) -> set[UOp]:
  """Nodes to realize because each of the several kernels fusing them would read all their inputs again.

  Fused into k kernels, a node reading r buffers costs k*r reads; with a buffer of its own, r reads, one
  write and k reads, less once r >= 4 (PyTorch Inductor's threshold for the same choice). An elementwise
  recurrence (an LSTM's cell state, unrolled) is the case that needs it: each step's state reads every
  earlier step's gates, so without a cut the kernels and their work grow with the square of the steps."""
  readers: dict[UOp, set[UOp]] = {}
  for n in reversed(nodes):
    if n.op is Ops.KERNEL or (_is_leaf(n, realized) and n not in realized): continue
    mine = {n} if n in realized else readers.get(n, set())
    for s in n.src: readers.setdefault(s, set()).update(mine)
  return _cut_wide_reads(nodes, realized, lambda n: frozenset() if n.op in _COMPUTED_LEAVES else frozenset({n}),
                         lambda n: SHARED_READS if smax(prod(n.shape)) >= SMALL_NODE else SHARED_READS_SMALL,
                         lambda n: len(readers.get(n, ())) > 1)


def _cut_wide_reads(nodes: tuple[UOp, ...], realized: set[UOp], leaf_reads: Callable[[UOp], frozenset[UOp]],
                    limit: Callable[[UOp], int], wanted: Callable[[UOp], bool]) -> set[UOp]:
  """The fused nodes (sources first) whose expression reads at least `limit(n)` of what `leaf_reads` counts at the
  leaves (and kernels) under them, where `wanted(n)`; each cut is read as one thing by what is above it. Read sets
  are kept only up to the limit (all the test needs), so the walk stays linear. Movement ops pass the choice to
  what they view, and a reduction is _group's choice."""
  reads: dict[UOp, frozenset[UOp]] = {}
  cuts: set[UOp] = set()
  for n in nodes:
    if _is_leaf(n, realized) or n.op is Ops.KERNEL:
      reads[n] = leaf_reads(n)
      continue
    most = limit(n)
    got: set[UOp] = set()
    for s in n.src:
      got |= reads[s]
      if len(got) >= most: break
    if len(got) >= most and n.op not in GroupOp.Movement and n.op is not Ops.REDUCE_AXIS and wanted(n):
      cuts.add(n)
      got = {n}
    reads[n] = frozenset(got)
  return cuts


EXPANDED_RESULTS = 6  # results of this schedule's kernels an expression read through an expand may combine


def _split_for_recomputed_chains(nodes: tuple[UOp, ...], realized: set[UOp]) -> set[UOp]:
  """Elementwise nodes read through an expand (so recomputed at every position it makes: every output of a
  matmul) whose expression combines EXPANDED_RESULTS or more results of other kernels of this schedule.

  An unrolled LSTM is the case: its cell state reads each step's gates, so fused into the next step's matmul it
  recomputes the recurrence so far for every output, and only the shared-reads cut (every seventh step) bounded
  it. With this cut 16 steps of a 16-wide LSTM made 23 kernels, as in tinygrad 0.14, and a quarter less work (the
  ONNX LSTM of bench_onnx: 1.35 -> 1.04 ms); since its gates' transcendentals give every step's state a buffer
  (`_split_for_costly_recomputes`), this cut bounds recurrences of cheap operations. What this cut leaves fused: a
  softmax read by a matmul (three results: the logits, their max and their sum; `_split_for_costly_recomputes`
  decides on its exp), a layernorm (two), and anything over buffers realized before (`(a*b + c*d) @ w`), as
  tinygrad fuses them too."""
  expanded: set[UOp] = set()
  for n in reversed(nodes):  # consumers first: what is read through an expand, directly or through elementwise ops
    if n.op is Ops.KERNEL or (_is_leaf(n, realized) and n not in realized): continue
    if _expands(n) or (n in expanded and n not in realized): expanded.update(n.src)
  # what counts: the results of this schedule's kernels (realized nodes, not buffers realized before)
  return _cut_wide_reads(nodes, realized, lambda n: frozenset({n}) if n in realized and not is_buffer_node(n) else frozenset(),
                         lambda n: EXPANDED_RESULTS, expanded.__contains__)


#: the costly element operations, in cheap ones (an add, a compare, a select): a vector exp2 or log2 is a polynomial
#: of about ten instructions, sin a longer one, a division or square root has the throughput of several multiplies.
#: Cheap operations count nothing: a matmul evaluates what it reads once per tile of outputs, where they vanish
_OP_COST = {Ops.EXP2: 10, Ops.LOG2: 10, Ops.SIN: 20, Ops.COS: 20, Ops.SQRT: 4, Ops.RECIP: 4, Ops.FDIV: 4, Ops.IDIV: 8,
            Ops.MOD: 8}
RECOMPUTE_READ_COST = 8  # a value read back from a buffer, in cheap operations (a load and its share of the write)
RECOMPUTE_MIN_SAVED = 1 << 17  # operations a cut must save to pay for the launch it adds
_COST_CAP = 1 << 20  # a fused expression's cost is counted up to this (shared subexpressions count once per use)
_RESIZING = frozenset({Ops.EXPAND, Ops.PAD, Ops.SHRINK})  # the views with more or fewer elements than their source


def _split_for_costly_recomputes(nodes: tuple[UOp, ...], realized: set[UOp]) -> set[UOp]:
  """Expressions their kernel evaluates at more positions than they have (through an expand, or a pad: the
  lowering gates a padded value, it still computes it) where that costs more than reading them back from a buffer.
  A GELU read by the next layer's matmul evaluates its exp2 and division once per output column, attention's
  softmax weights once per column of the values; the gradient of a split (q, k, v of one projection) pads each
  part's matmul to the whole width and adds them, running every matmul over all three thirds.

  A node's cost per element is what its fused expression's costly operations cost (`_OP_COST`; a reduction: its
  count times one more than its source's), its evaluations per element `_evaluations`. The topmost node whose
  recomputation costs more than RECOMPUTE_READ_COST per read and saves RECOMPUTE_MIN_SAVED in all gets a buffer;
  what is below it is then computed once, in its kernel. Cheap expressions stay fused (a layernorm, or a bias and
  ReLU, read by a matmul), as do small pads (a convolution's border) and full reductions (`_cheap_to_recompute`
  decides those)."""
  factor = _evaluations(nodes, realized)
  under = [n for n in nodes if factor.get(n, 1.0) > 1 and not _is_leaf(n, realized) and n.op is not Ops.KERNEL]
  if not any(n.op in GroupOp.ALU or n.op is Ops.REDUCE_AXIS for n in under): return set()
  cost: dict[UOp, float] = {}  # sources first; a source of a node in `under` is in it too, or a leaf
  for n in under:
    if n.op is Ops.REDUCE_AXIS:
      count = smax(prod(n.src[0].shape)) // max(1, smax(prod(n.shape)))
      cost[n] = min(_COST_CAP, count * (1 + cost.get(n.src[0], 0)))
    elif n.op in GroupOp.Movement: cost[n] = cost.get(n.src[0], 0)
    else: cost[n] = min(_COST_CAP, _OP_COST.get(n.op, 0) + sum(cost.get(s, 0) for s in n.src))
  cuts: set[UOp] = set()

  def costly(n: UOp, f: float) -> bool:
    c, size = cost.get(n, 0), smax(prod(n.shape))
    if not c or not (n.op in GroupOp.ALU or (n.op is Ops.REDUCE_AXIS and size > 1)): return False
    if (f - 1) * c <= f * RECOMPUTE_READ_COST or size * (f - 1) * c < RECOMPUTE_MIN_SAVED: return False
    cuts.add(n)
    return True
  _evaluations(nodes, realized, costly)
  return cuts


def _resize(n: UOp) -> float:
  """How many elements a resizing view (expand, pad, shrink) has for each of its source's."""
  return smax(prod(n.shape)) / max(1, smax(prod(n.src[0].shape)))


def _evaluations(nodes: tuple[UOp, ...], realized: set[UOp],
                 cut: Callable[[UOp, float], bool] | None = None) -> dict[UOp, float]:
  """How often its kernel evaluates each element of each fused node: the product of the size ratios of the views
  between it and the kernel's root (expands and pads grow it, shrinks take it back; a reduction evaluates its
  source once per element), the most over its readers. `cut(n, f)`, asked consumers first of each node evaluated
  more than once: whether it gets a buffer instead (then it is evaluated once, and what is below it as often as
  its own kernel says)."""
  factor: dict[UOp, float] = {}
  for n in reversed(nodes):  # consumers first
    if n.op is Ops.KERNEL or (_is_leaf(n, realized) and n not in realized): continue
    f = 1.0 if n in realized else factor.get(n, 1.0)
    if cut is not None and f > 1 and cut(n, f): f = 1.0
    if n.op in _RESIZING: f *= _resize(n)
    for s in n.src: factor[s] = max(factor.get(s, 0.0), f)
  return factor


def _assign_hazard(assign: UOp) -> bool:
  """Whether the assigned value reads its own target at other positions than it writes, so that
  writing in place could clobber elements still to be read."""
  target = assigned_buffer(assign.src[0])
  if target is None: return False
  # (node, moved) pairs: each is visited once, so shared subgraphs cost nothing extra
  stack, seen = [(assign.src[1], False)], set()
  while stack:
    n, moved = stack.pop()
    if (n, moved) in seen: continue
    seen.add((n, moved))
    # any version of the target (its buffer, or an earlier pending write into it) is read from the buffer;
    # another assign is a kernel of its own, so what it reads is no read of this kernel
    if is_buffer_node(n) or n.op is Ops.ASSIGN:
      if moved and assigned_buffer(n) is target: return True
      continue
    step = moved or (n.op in GroupOp.Movement and n.op is not Ops.RESHAPE) or n.op is Ops.REDUCE_AXIS
    stack.extend((s, step) for s in n.src)
  return False


# ---------------------------------------------------------------- building kernels

def kernelize(roots: list[UOp], default_device: str, new_buffer: Callable[[str, int, DType], Buffer],
              buffer_limit: Callable[[str], int | None]) -> dict[UOp, UOp]:
  """Rewrite the graphs under `roots` into kernelized form.

  :param new_buffer: makes an (unallocated) output buffer for a device, size and dtype.
  :param buffer_limit: the buffer limit of a device, None for unlimited.
  :return: a map from every realized node to its replacement; the caller updates tensors with it.
  """
  originals, stripped = roots, _normalize(roots)
  if stripped: roots = [stripped[r] for r in roots]
  nodes = toposort(roots)
  devices = _device_map(nodes)
  realized = _find_realizes(roots, nodes, lambda r: buffer_limit(devices.get(r, default_device)))
  new: dict[UOp, UOp] = {}
  becomes: dict[UOp, UOp] = {}
  for n in nodes:
    if n.op is Ops.KERNEL or is_buffer_node(n): new[n] = n
    elif n in realized:
      new[n] = becomes[n] = _make_kernel(n, new, devices.get(n, default_device), new_buffer)
    else:
      new[n] = n.replace(src=tuple(new[s] for s in n.src))
  for r in roots:
    if r not in becomes and new[r] is not r: becomes[r] = new[r]
  # tensors hold the graphs before normalizing: map those nodes too
  for o in (toposort(originals, descend=lambda n: applied_as(n) is None) if stripped else ()):
    if (s := stripped[o]) is not o and (b := becomes.get(s, s if o in originals else None)) is not None: becomes[o] = b
  record_applied(becomes)
  return becomes


def _plain_buffer_view(u: UOp) -> bool:
  base = contiguous_base(u)
  return base is not None and buffer_of(base).options is None  # an image is no plain buffer: copying it changes it


def _contiguous_range_view(u: UOp) -> bool:
  """Whether `u` reads one contiguous range of a plain buffer, in order: reshapes, and shrinks that keep a single
  index on the axes before their first wider one and whole axes after it (`x[2:6]`, `x[3]`, `x[1, 2:6]`)."""
  chain = []
  while u.op in (Ops.RESHAPE, Ops.SHRINK):
    chain.append(u)
    u = u.src[0]
  if not chain or not _plain_buffer_view(u): return False
  for n in chain:
    if n.op is not Ops.SHRINK: continue
    bounds, shape = n.arg, n.src[0].shape
    if not all(isinstance(x, int) for b in bounds for x in b) or not all(isinstance(x, int) for x in shape): return False
    sizes = [hi - lo for lo, hi in bounds]
    first = next((i for i, sz in enumerate(sizes) if sz > 1), len(sizes))
    if any(bounds[i] != (0, shape[i]) for i in range(first + 1, len(shape))): return False
  return True


def _uniform_value(u: UOp) -> Any:
  """The one value every element of `u` holds when it is built from constants by broadcasts, views and
  elementwise ops (a gradient's broadcast seed, say); None otherwise."""
  values: dict[UOp, Any] = {}
  stack: list[tuple[UOp, bool]] = [(u, False)]
  while stack:
    n, ready = stack.pop()
    if n in values: continue
    if n.op is Ops.CONST:
      values[n] = n.arg
    elif n.op in GroupOp.Movement and n.op is not Ops.PAD or n.op in GroupOp.ALU:
      if not ready:
        stack.append((n, True))
        stack.extend((x, False) for x in n.src if x not in values)
        continue
      if n.op in GroupOp.Movement: values[n] = values[n.src[0]]
      else:
        try:
          values[n] = fold_constant(n.op, n.dtype, [values[x] for x in n.src], [x.dtype for x in n.src])
        except (ArithmeticError, ValueError, TypeError, KeyError):  # no exact fold: leave it to the kernel
          return None
    else: return None  # a buffer, a pad, a reduction: its elements may differ
  return values[u]


def _fold_uniform_reduce(u: UOp) -> UOp | None:
  """REDUCE_AXIS of a uniform value v over n elements -> the constant v*n (sum), v**n (product) or v."""
  if u.op is not Ops.REDUCE_AXIS or (v := _uniform_value(u.src[0])) is None: return None
  op, axes = u.arg
  n = prod(u.src[0].shape[a] for a in axes)
  if n == 0 or isinstance(n, UOp): return None  # the identity of an empty reduction is the kernel's to give
  try:
    value = fold_constant(Ops.MUL, u.dtype, [v, n], [u.dtype, u.dtype]) if op is Ops.ADD and u.dtype.is_float else \
      v * n if op is Ops.ADD else v ** n if op is Ops.MUL else v
    c = UOp.const(u.dtype, value)
  except (ArithmeticError, ValueError, TypeError, OverflowError):
    return None
  if not u.shape: return c
  return UOp(Ops.EXPAND, u.dtype, (UOp(Ops.RESHAPE, u.dtype, (c,), (1,) * len(u.shape)),), u.shape)


#: tensor-graph nodes whose value is their first source's: only gradients read them
_GRADIENT_MARKERS = (Ops.DETACH, Ops.CONTIGUOUS_BACKWARD, Ops.CUSTOM_GRADIENT)

# rules applied once to each node, its sources already rewritten; each returns a replacement or None
_SIMPLIFY: list[Callable[[UOp], UOp | None]] = [
  # REDUCE_AXIS(broadcast constant) -> constant: a gradient's seed summed needs no kernel (tinygrad folds it too)
  _fold_uniform_reduce,
  # DETACH(x) -> x, CONTIGUOUS_BACKWARD(x) -> x, CUSTOM_GRADIENT(x, ...) -> x: they only matter to gradients
  lambda u: u.src[0] if u.op in _GRADIENT_MARKERS else None,
  # CONTIGUOUS(x) -> x when x is a buffer or a reshape of one: it is contiguous already (as in tinygrad, the
  # result is that buffer; `clone()` makes a copy)
  lambda u: u.src[0] if u.op is Ops.CONTIGUOUS and _plain_buffer_view(u.src[0]) else None,
  # CONTIGUOUS(CONTIGUOUS(x)) -> CONTIGUOUS(x)
  lambda u: u.src[0] if u.op is Ops.CONTIGUOUS and u.src[0].op is Ops.CONTIGUOUS else None,
]


def _normalize(roots: list[UOp]) -> dict[UOp, UOp]:
  """Every node under `roots` -> the same graph with each ASSIGN an earlier schedule already applied
  replaced by the buffer it wrote, and the `_SIMPLIFY` rules applied; {} when there is nothing to change."""
  nodes = toposort(roots, descend=lambda n: applied_as(n) is None)
  if not any(n.op in _GRADIENT_MARKERS or n.op in (Ops.CONTIGUOUS, Ops.REDUCE_AXIS) or applied_as(n) is not None
             for n in nodes):
    return {}
  out: dict[UOp, UOp] = {}
  root_set = set(roots)
  for n in nodes:
    if (done := applied_as(n)) is not None:
      out[n] = done
      continue
    m = n.replace(src=tuple(out[s] for s in n.src))
    # CONTIGUOUS(x) -> x when x is one contiguous range of a buffer (`x[2:6].contiguous() * 2`): what reads it fuses
    # the view, as in tinygrad. Not for a root: realized, the view itself would become the copy, and so would every
    # tensor that holds the view (writes through it would stop reaching the buffer)
    if m.op is Ops.CONTIGUOUS and n not in root_set and _contiguous_range_view(m.src[0]): out[n] = m.src[0]
    else: out[n] = next((r for rule in _SIMPLIFY if (r := rule(m)) is not None), m)
  return _read_copies(out)


def _read_copies(out: dict[UOp, UOp]) -> dict[UOp, UOp]:
  """`out` with every other reader of an element expression that is also copied into a buffer of its own
  (CONTIGUOUS) reading that buffer: conv2d's weight gradient copies the convolution's input (a ReLU of the layer
  before) once, and the forward convolution then reads the copy instead of recomputing the ReLU per read, which
  keeps its loop to the product (beautiful_mnist's second convolution takes vector lanes along its channels)."""
  copies = {m.src[0]: m for m in out.values() if m.op is Ops.CONTIGUOUS and m.src[0].op in GroupOp.ALU}
  if not copies: return out
  new: dict[UOp, UOp] = {}

  def copy_of(s: UOp) -> UOp:  # the copy's node may come after a reader in the walk: it reads only s
    c = copies[s]
    if c not in new: new[c] = c if new[s] is s else c.replace(src=(new[s],))
    return new[c]
  for m in toposort(list(dict.fromkeys(out.values()))):
    if m in new: continue
    src = tuple(new[s] for s in m.src)
    if m.op is not Ops.CONTIGUOUS: src = tuple(copy_of(s) if s in copies else r for s, r in zip(m.src, src))
    new[m] = m if src == m.src else m.replace(src=src)
  return {n: new[m] for n, m in out.items()}


def _make_kernel(n: UOp, new: dict[UOp, UOp], device: str, new_buffer) -> UOp:
  """The kernelized node for realized node `n` computed on `device` (a COPY goes to its own device)."""
  if n.op is Ops.COPY:
    src = new[n.src[0]]
    base = contiguous_base(src) if contiguous_base(src) is not None else src
    out = buffer_node(new_buffer(n.arg, smax(prod(n.shape)), n.dtype))
    kern = UOp(Ops.KERNEL, None, (base,), Kernel(None, n.arg, out))
    return _reshape(UOp(Ops.ASSIGN, n.dtype, (out, kern)), n.shape)
  if prod(n.shape) == 0 and n.op is not Ops.ASSIGN:  # nothing to compute: an empty buffer
    return _reshape(buffer_node(new_buffer(device, 0, n.dtype)), n.shape)
  if n.op is Ops.ASSIGN:
    previous = contiguous_base(new[n.src[0]])
    target = buffer_of(previous)
    # an earlier write into the buffer that has not run must run first, even when this one does not read it
    after = (previous,) if pending_kernel(previous) is not None else ()
    if isinstance(target.options, ImageSpec):
      # kernels only read images: compute into a plain buffer, then copy that into the image
      tmp = buffer_node(new_buffer(device, target.size, n.dtype))
      ast, inputs = _build_ast(n.src[1], new, tmp)  # the image is no PARAM 0 here: it is read as an input
      computed = UOp(Ops.ASSIGN, n.dtype, (tmp, UOp(Ops.KERNEL, None, tuple(inputs), Kernel(ast, device, tmp))))
      copy = UOp(Ops.KERNEL, None, (computed,), Kernel(None, device, buffer_node(target)))
      return _reshape(UOp(Ops.ASSIGN, n.dtype, (buffer_node(target), copy) + after), n.shape)
    out_node = buffer_node(target)
    value = n.src[1]
  else:
    # a symbolic shape gets a buffer for the Variables' largest values, so one buffer serves them all
    out_node = buffer_node(new_buffer(device, smax(prod(n.shape)), n.dtype))
    value, previous, after = n.src[0] if n.op is Ops.CONTIGUOUS else n, None, ()
  ast, inputs = _build_ast(value, new, out_node, previous)
  kern = UOp(Ops.KERNEL, None, tuple(inputs), Kernel(ast, device, out_node))
  return _reshape(UOp(Ops.ASSIGN, n.dtype, (out_node, kern) + after), n.shape)


def _reshape(u: UOp, shape: tuple[int, ...]) -> UOp:
  return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), shape)


def _version_key(leaf: UOp) -> Buffer | UOp:
  # a buffer's contents now (a BUFFER, a kernel that ran) are one version; each pending write is another
  return leaf if pending_kernel(leaf) is not None else buffer_of(leaf)


def _build_ast(value: UOp, new: dict[UOp, UOp], out_node: UOp, previous: UOp | None = None) -> tuple[UOp, list[UOp]]:
  """The kernel AST computing `value` into PARAM 0, and the buffer nodes bound to PARAM 1...
  Leaves that are buffers (or already-realized nodes) become PARAM loads in first-seen order, one PARAM
  per version of a buffer; `previous`, the version an assign overwrites, is read in place from PARAM 0."""
  # an output buffer made for this kernel has no version to read: only an assign's target has one
  params: dict[Buffer | UOp, int] = {} if previous is None else {_version_key(previous): 0}
  inputs: list[UOp] = []
  memo: dict[UOp, UOp] = {}

  def param_for(leaf: UOp, shape: tuple[int, ...]) -> UOp:
    buf, key = buffer_of(leaf), _version_key(leaf)
    if key not in params:
      params[key] = 1 + len(inputs)
      inputs.append(leaf)
    image = (buf.options.height, buf.options.width) if isinstance(buf.options, ImageSpec) else None
    p = UOp(Ops.PARAM, leaf.dtype, (), (params[key], buf.size) + ((image,) if image else ()))
    return _reshape(p, shape)

  def is_leaf(n: UOp) -> bool:
    m = new.get(n, n)
    return is_buffer_node(m) or m.op is Ops.CONST or (m.op is Ops.RESHAPE and is_buffer_node(m.src[0]) and m is not n)

  # sources come first, so every source is in memo when its user is built; the walk stops at
  # leaves, so the history behind realized nodes is not visited (and no recursive closure: one
  # referring to itself is a cycle that would keep buffers alive)
  for n in toposort([value], descend=lambda n: not is_leaf(n)):
    m = new.get(n, n)
    if is_buffer_node(m): memo[n] = param_for(m, n.shape)
    elif m.op is Ops.RESHAPE and is_buffer_node(m.src[0]) and m is not n: memo[n] = param_for(m.src[0], n.shape)
    elif n.op is Ops.CONST: memo[n] = n
    elif n.op is Ops.RESHAPE:  # a chain of reshapes is one reshape
      src = memo[n.src[0]]
      memo[n] = _reshape(src.src[0] if src.op is Ops.RESHAPE else src, n.shape)
    else: memo[n] = n.replace(src=tuple(memo[s] for s in n.src))
  out = UOp(Ops.PARAM, out_node.dtype, (), (0, out_node.arg[2]))
  store = UOp(Ops.STORE, None, (out, _merge_reduced_rows(memo[value])))
  return UOp(Ops.SINK, None, (store,)), inputs


def _merge_reduced_rows(value: UOp) -> UOp:
  """`value` with each reduction over neighbouring axes of contiguous reads (`_reads_rows`) reducing them as one
  axis: a batch norm's sum over (N, H, W) of 128x32x20x20 loops over 128 x 400, not 128 x 20 x 20, and a loop of 400
  takes vector lanes where one of 20 did not (1.6 -> 0.05 ms on CPU, AVX-512)."""
  return graph_rewrite(value, _MERGE_ROWS)


def _merged_reduce(r: UOp) -> UOp | None:
  """REDUCE_AXIS `r` over its source reshaped so that each run of neighbouring reduced axes is one axis (where
  `_reads_rows` allows), reshaped back to `r`'s shape; None where nothing merges."""
  op, axes = r.arg
  shape = r.src[0].shape
  runs: list[list[int]] = []
  for a in axes:
    if runs and runs[-1][-1] == a - 1: runs[-1].append(a)
    else: runs.append([a])
  merged = [run for run in runs if len(run) > 1 and all(isinstance(shape[a], int) for a in run)]
  if not merged or not _reads_rows(r.src[0], merged): return None
  first = {run[0]: run for run in merged}
  inner = {a for run in merged for a in run[1:]}
  new_shape, new_axes = [], []
  for a, size in enumerate(shape):
    if a in inner: continue
    if a in axes: new_axes.append(len(new_shape))
    new_shape.append(prod(shape[b] for b in first[a]) if a in first else size)
  red = UOp(Ops.REDUCE_AXIS, r.dtype, (_reshape(r.src[0], tuple(new_shape)),), (op, tuple(new_axes)))
  return _reshape(red, r.shape)


def _reads_rows(u: UOp, runs: list[list[int]]) -> bool:
  """Whether `u` reads each run of axes along a buffer's rows, so that one index can run over the run: element
  operations of contiguous buffer reads (a PARAM reshaped), constants (also reshaped and broadcast, as a sum's
  gradient of ones reaches a batch norm's backward), and values broadcast over the whole run (a per-channel mean)."""
  for n in toposort([u], descend=lambda n: n.op in GroupOp.ALU):
    if n.op in GroupOp.ALU or _broadcast_const(n) or (n.op is Ops.RESHAPE and n.src[0].op is Ops.PARAM): continue
    if n.op is Ops.EXPAND and all(n.src[0].shape[a] == 1 for run in runs for a in run): continue
    return False
  return True


_MERGE_ROWS = PatternMatcher([
  # a reshape of a reshape is one reshape (as _build_ast writes chains), so merged sources stay a PARAM reshaped
  (UPat(Ops.RESHAPE, name="r", src=(UPat(Ops.RESHAPE, name="inner"),)),
   lambda r, inner: _reshape(inner.src[0], r.shape)),
  # a reduction over neighbouring axes of contiguous reads reduces them as one axis
  (UPat(Ops.REDUCE_AXIS, name="r"), _merged_reduce),
])


# ---------------------------------------------------------------- ordering

def create_schedule(roots: Iterable[UOp], live: Collection[Buffer] = (), fresh: Collection[Buffer] = (),
                    buffer_limit: Callable[[str], int | None] | None = None, fuse: bool = True) -> list[ScheduleItem]:
  """The pending kernels under kernelized `roots` in an order that respects their data dependencies
  and the order of writes into one buffer (BFS order among the ready). With `fuse`, independent kernels
  over one iteration space that read a common buffer become one kernel with several outputs
  (`_horizontal_groups`).

  A buffer written by several kernels has versions: its contents before the schedule, then after each
  write in program order (`Kernel.seq`). A kernel reading a version runs after the write that made it
  and before the next write into that buffer.

  :param live: buffers held outside the schedule (by tensors).
  :param fresh: buffers the kernelize that made these kernels created; those not `live` are freed after
    their last use. Any other buffer (an assign target, an output of an earlier `kernelize`) may still be
    read by a live graph, so it is left to the garbage collector.
  :param buffer_limit: the buffer limit of a device (None: unlimited); a fused kernel stays within it.
  """
  kern_nodes = [n for n in toposort(list(roots)) if pending_kernel(n) is not None]
  if not kern_nodes: return []
  index = {n: i for i, n in enumerate(kern_nodes)}
  kernels: list[Kernel] = [n.src[1].arg for n in kern_nodes]
  ins: list[list[Buffer]] = [[buffer_of(s) for s in n.src[1].src] for n in kern_nodes]
  # data dependencies: the kernels whose outputs a kernel reads, and the earlier pending write into its buffer
  deps: list[set[int]] = [{index[s] for s in n.src[1].src + n.src[2:] if s in index} for n in kern_nodes]
  writers: dict[Buffer, list[int]] = {}
  for i, k in enumerate(kernels): writers.setdefault(k.buffer, []).append(i)
  position: dict[int, int] = {}  # kernel -> its place among the writers of its buffer
  for ws in writers.values():
    ws.sort(key=lambda i: kernels[i].seq)
    for p, i in enumerate(ws):
      position[i] = p
      if p: deps[i].add(ws[p - 1])
  # what each kernel runs after, as a bit set (toposort put every source before its users)
  after = [0] * len(kern_nodes)
  for i, d in enumerate(deps):
    for j in d:
      if j < i: after[i] |= after[j] | (1 << j)
  snapshots: dict[UOp, int] = {}  # a version that must outlive its buffer's next write -> the step copying it

  def read_before(i: int, w: int) -> None:
    # w runs after i, and so after all i runs after: kept transitive, so that a later read finds that this order
    # already holds (x.assign(y); y.assign(x * y): each reads what the other writes, one of them from a copy)
    deps[w].add(i)
    bits = after[i] | (1 << i)
    for k in range(len(after)):
      if k == w or after[k] >> w & 1: after[k] |= bits

  for i, n in enumerate(kern_nodes):
    for p, s in enumerate(n.src[1].src):
      if s in index: ws, nxt = writers[buffer_of(s)], position[index[s]] + 1
      elif is_buffer_node(s): ws, nxt = writers.get(buffer_of(s), []), 0  # the contents from before the schedule
      else: continue
      if nxt >= len(ws) or ws[nxt] == i: continue
      w = ws[nxt]
      if not after[i] >> w & 1:
        read_before(i, w)  # read this version before it is overwritten
        continue
      # the kernel also needs that next write (it reads two versions of one buffer): read a copy made before it
      if (c := snapshots.get(s)) is None:
        src = buffer_of(s)
        copy = Buffer(src.device, src.size, src.dtype, src.allocator, src.options)
        c = snapshots[s] = len(kernels)
        kernels.append(Kernel(None, src.device, buffer_node(copy)))
        ins.append([src])
        deps.append({index[s]} if s in index else set())
        deps[w].add(c)
        fresh = {*fresh, copy}
      ins[i][p] = kernels[c].buffer
      deps[i].add(c)
  groups = _horizontal_groups(kernels, ins, deps, buffer_limit or (lambda d: None)) if fuse else \
    [[i] for i in range(len(kernels))]
  group_of = {i: g for g, members in enumerate(groups) for i in members}
  users: list[set[int]] = [set() for _ in groups]
  pending = [0] * len(groups)
  for g, members in enumerate(groups):
    for j in {group_of[j] for i in members for j in deps[i]} - {g}:
      users[j].add(g)
      pending[g] += 1
  queue = deque(g for g, p in enumerate(pending) if p == 0)
  order: list[int] = []
  while queue:
    g = queue.popleft()
    order.append(g)
    for u in sorted(users[g]):
      pending[u] -= 1
      if pending[u] == 0: queue.append(u)
  if len(order) != len(groups):
    raise RuntimeError("cycle in the schedule: an assign reads a value that depends on itself")
  items = [_item(groups[g], kernels, ins) for g in order]
  unused = _reuse_in_place(items, live, fresh)
  _plan_frees(items, live, fresh)
  if unused: items[0].frees.extend(unused)  # never written: any later use is an error, not a read of garbage
  return items


def _item(members: list[int], kernels: list[Kernel], ins: list[list[Buffer]]) -> ScheduleItem:
  """The schedule step running `kernels[members]`: the kernel itself, or one kernel storing every member's
  output (PARAMs 0..n-1), its inputs bound once each (PARAMs n...) in first-seen order."""
  first = kernels[members[0]]
  if len(members) == 1: return ScheduleItem(first.ast, first.device, (first.buffer, *ins[members[0]]), first)
  inputs: list[Buffer] = []
  slot: dict[Buffer, int] = {}
  stores: list[UOp] = []
  for m, i in enumerate(members):
    mapping = {0: m}
    for p, b in enumerate(ins[i], 1):
      if b not in slot:
        slot[b] = len(members) + len(inputs)
        inputs.append(b)
      mapping[p] = slot[b]
    ast = kernels[i].ast
    assert ast is not None
    store = _renumber_params(ast.src[0], mapping)
    if stores and (shape := stores[0].src[1].shape) != store.src[1].shape:  # (6, 1) beside (6,): one launch shape
      store = store.replace(src=(store.src[0], UOp(Ops.RESHAPE, store.src[1].dtype, (store.src[1],), shape)))
    stores.append(store)
  outs = tuple(kernels[i].buffer for i in members)
  return ScheduleItem(UOp(Ops.SINK, None, tuple(stores)), first.device, outs + tuple(inputs), first, outs=len(members),
                      siblings=tuple(kernels[i] for i in members[1:]))


def _renumber_params(root: UOp, mapping: dict[int, int]) -> UOp:
  """`root` with each PARAM k read as PARAM mapping[k] (size and image kept)."""
  memo: dict[UOp, UOp] = {}
  for n in root.toposort:
    if n.op is Ops.PARAM: memo[n] = n.replace(arg=(mapping[n.arg[0]],) + n.arg[1:])
    else: memo[n] = n.replace(src=tuple(memo[x] for x in n.src))
  return memo[root]


def output_ast(ast: UOp, j: int) -> UOp:
  """The single-output kernel AST of output `j` of a multi-output AST (SINK of STOREs into PARAMs 0..n-1,
  inputs after them): its own output becomes PARAM 0 and the inputs PARAMs 1..., numbered as in the
  fused kernel, so it binds (output j, every input of the fused kernel)."""
  n = len(ast.src)
  store = ast.src[j]
  params = {p.arg[0] for p in store.toposort if p.op is Ops.PARAM}
  return UOp(Ops.SINK, None, (_renumber_params(store, {k: 0 if k == j else k - n + 1 for k in params}),))


def iteration_space(ast: UOp) -> tuple:
  """What a kernel loops over: its output shape without axes of size 1 (they launch nothing) and the (input
  shape, axes) of each reduction. Kernels with equal iteration spaces can share their launch and reduce loops."""
  value = ast.src[0].src[1]
  reduces = {(n.src[0].shape, n.arg[1]) for n in value.toposort if n.op is Ops.REDUCE_AXIS}
  # a frozenset: symbolic sizes (UOps) compare for equality, not order
  return tuple(s for s in value.shape if not (isinstance(s, int) and s == 1)), frozenset(reduces)


PAIR_WINDOW = 8  # readers of one buffer scored as candidate pairs with each of their next 8 fellow readers


def _horizontal_groups(kernels: list[Kernel], ins: list[list[Buffer]], deps: list[set[int]],
                       buffer_limit: Callable[[str], int | None]) -> list[list[int]]:
  """Partition the kernels into groups that each run as one kernel (most groups are one kernel).

  Two groups merge when their kernels have the same device and iteration space, neither depends on the other
  (directly or through other kernels: a merge must not make a cycle), and the merged kernel binds no more
  buffers than the device allows. Candidate pairs are scored by the bytes of the input buffers they share (read
  once instead of twice) and merged greedily, best first, as Inductor scores horizontal fusions."""
  n = len(kernels)
  singles = [[i] for i in range(n)]
  space = {i: (k.device, iteration_space(k.ast)) for i, k in enumerate(kernels) if k.ast is not None}
  # kernels reading one buffer through one view index it alike: fused, they load each element once. Through
  # other views (x and x.T) the fused loop would read it in two orders and run slower than the two kernels.
  readers: dict[tuple[Any, Buffer, tuple], list[int]] = {}
  for i, key in space.items():
    for p, views in _param_views(kernels[i].ast).items():
      if p == 0: continue  # an assign's own target: no input
      for view in views: readers.setdefault((key, ins[i][p - 1], view), []).append(i)
  shared: set[tuple[int, int, Buffer]] = set()
  for (_, b, _), rs in readers.items():
    rs = sorted(set(rs))
    # each reader pairs with its next few: merges chain along the list, and a buffer that hundreds of
    # kernels read costs linear time, not a pair for every two of them
    shared.update((a, c, b) for k, a in enumerate(rs) for c in rs[k + 1:k + 1 + PAIR_WINDOW])
  score: dict[tuple[int, int], int] = {}
  for a, c, b in shared: score[(a, c)] = score.get((a, c), 0) + b.nbytes
  if not score: return singles
  # what each kernel runs after (transitively), as a bit set; deps may point forward (snapshot copies)
  users: list[list[int]] = [[] for _ in range(n)]
  for i, d in enumerate(deps):
    for j in d: users[j].append(i)
  pending = [len(d) for d in deps]
  ready = [i for i in range(n) if not pending[i]]
  anc = [0] * n
  for i in ready:  # grows while it is walked: Kahn's order
    anc[i] = functools.reduce(lambda acc, j: acc | anc[j] | (1 << j), deps[i], 0)
    for u in users[i]:
      pending[u] -= 1
      if not pending[u]: ready.append(u)
  if len(ready) != n: return singles  # a cycle: the ordering reports it
  rep = list(range(n))  # each kernel's group, named by its first kernel
  members = {i: [i] for i in range(n)}
  mask = {i: 1 << i for i in range(n)}
  after = dict(enumerate(anc))
  bound = {i: set(ins[i]) for i in range(n)}  # the inputs each group binds
  for (a, c), _ in sorted(score.items(), key=lambda kv: (-kv[1], kv[0])):
    ga, gc = rep[a], rep[c]
    if ga == gc or after[ga] & mask[gc] or after[gc] & mask[ga]: continue
    limit = buffer_limit(kernels[a].device)
    if limit is not None and len(members[ga]) + len(members[gc]) + len(bound[ga] | bound[gc]) > limit: continue
    ga, gc = min(ga, gc), max(ga, gc)
    members[ga] = sorted(members[ga] + members.pop(gc))
    mask[ga] |= mask.pop(gc)
    after[ga] |= after.pop(gc)
    bound[ga] |= bound.pop(gc)
    for i in members[ga]: rep[i] = ga
    # whatever ran after a kernel of the merged group now runs after all of it (the sets stay transitive)
    for g in members:
      if after[g] & mask[ga]: after[g] |= after[ga] | mask[ga]
  return sorted(members.values())


def _param_views(ast: UOp) -> dict[int, set[tuple]]:
  """PARAM index -> the views a kernel reads it through: each the movement ops (op, arg) from the PARAM up to
  the first node that computes with it."""
  views: dict[int, set[tuple]] = {}
  for n in ast.toposort:
    if n.op in GroupOp.Movement or n.op is Ops.PARAM: continue
    for x in n.src:
      chain = []
      while x.op in GroupOp.Movement:
        chain.append((x.op, x.arg))
        x = x.src[0]
      if x.op is Ops.PARAM: views.setdefault(x.arg[0], set()).add(tuple(reversed(chain)))
  return views


def _last_use(items: list[ScheduleItem]) -> dict[Buffer, int]:
  """Each buffer the schedule touches -> the position of the last step that does."""
  return {b: i for i, it in enumerate(items) for b in it.bufs}


def _reuse_in_place(items: list[ScheduleItem], live: Collection[Buffer], fresh: Collection[Buffer]) -> list[Buffer]:
  """Write the output of an elementwise kernel into an input buffer that dies in it (same size and type,
  read at the very index written, made by this schedule and held by no tensor): an elementwise chain of
  realized intermediates then runs in place, and the planned peak drops. Rewrites the items; returns the
  output buffers no longer used."""
  last_use = _last_use(items)
  rename: dict[Buffer, Buffer] = {}
  for i, it in enumerate(items):
    if rename: it.bufs = tuple(rename.get(b, b) for b in it.bufs)
    out = it.bufs[0]
    if it.ast is None or it.outs > 1 or out not in fresh or out in live or out.options is not None: continue
    for k, b in enumerate(it.bufs[1:], 1):
      if b in fresh and b not in live and last_use[b] == i and b is not out and b.options is None and \
          (b.size, b.dtype, b.device) == (out.size, out.dtype, out.device) and _reads_in_place(it.ast, k):
        it.ast = _param_as_output(it.ast, k)
        it.bufs = (b,) + it.bufs[1:k] + it.bufs[k + 1:]
        rename[out] = b
        last_use[b] = last_use[out]  # b now holds out's value, as long as out was used
        break
  return list(rename)


def _reads_in_place(ast: UOp, k: int) -> bool:
  """Whether a kernel AST reads PARAM `k` only at the index it stores to: no reduction, and nothing but
  reshapes between the store and each load of that PARAM."""
  stack, seen = [ast.src[0].src[1]], set()
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    if n.op is Ops.PARAM: continue
    if n.op is Ops.REDUCE_AXIS: return False
    if n.op in GroupOp.Movement and n.op is not Ops.RESHAPE:
      if any(x.op is Ops.PARAM and x.arg[0] == k for x in n.toposort): return False
      continue  # what lies under a view is read elsewhere, but not from PARAM k
    stack.extend(n.src)
  return True


def _param_as_output(ast: UOp, k: int) -> UOp:
  """The AST with PARAM `k` read from PARAM 0 (the output) and the PARAMs after it numbered one lower."""
  params = {n.arg[0] for n in ast.toposort if n.op is Ops.PARAM}
  return _renumber_params(ast, {j: 0 if j == k else j - (j > k) for j in params})


def _plan_frees(items: list[ScheduleItem], live: Collection[Buffer], fresh: Collection[Buffer]) -> None:
  """Free each `fresh` buffer the schedule writes after its last use, unless it is `live`."""
  for b, i in _last_use(items).items():
    if b in fresh and b not in live: items[i].frees.append(b)


@dataclass(frozen=True)
class MemoryPlan:
  """What running a schedule moves and holds.

  :param bytes_read: bytes of the input buffers each step binds, summed over the steps.
  :param bytes_written: bytes of the buffers each step writes, summed over the steps.
  :param peak_bytes: the most bytes that buffers the schedule allocates hold at once: each is allocated at
    its first use and returned after the step that lists it in `frees` (buffers allocated before are not
    counted). It is what the allocator's peak rises by when the schedule runs."""
  bytes_read: int
  bytes_written: int
  peak_bytes: int


def plan_memory(items: list[ScheduleItem], frees: bool = True) -> MemoryPlan:
  """The memory plan of a schedule that has not run yet (see MemoryPlan); `frees` False: run without freeing
  (as a TinyJit capture does)."""
  read = written = held = peak = 0
  counted: set[Buffer] = set()
  for it in items:
    written += sum(b.nbytes for b in it.bufs[:it.outs])
    read += sum(b.nbytes for b in it.bufs[it.outs:])
    for b in it.bufs:
      if b not in counted and not b.is_allocated:
        counted.add(b)
        held += b.nbytes
    peak = max(peak, held)
    if frees: held -= sum(b.nbytes for b in it.frees if b in counted)
  return MemoryPlan(read, written, peak)


def count_kernels(items: list[ScheduleItem]) -> int:
  """The number of compute kernels (copies excluded) in a schedule."""
  return sum(1 for it in items if not it.is_copy)


__all__ = ["Kernel", "ScheduleItem", "MemoryPlan", "kernelize", "create_schedule", "plan_memory", "count_kernels",
           "iteration_space", "output_ast"]
