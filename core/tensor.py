"""The lazy Tensor: tinygrad's (and so torch's) API over a graph of UOps.

Nothing computes until `realize()` (or `numpy()`, `item()`, `tolist()`): each method only adds
nodes to the graph. Arguments are checked when the method is called, so a shape mismatch is a
ValueError at the line that caused it, never a failure inside a kernel.
"""
from __future__ import annotations

import ctypes
import gzip
import functools
import itertools
import math
import threading
import urllib.request
import weakref
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from plugrad.codegen.opt.heuristic import vector_lanes
from plugrad.config import TRAINING, Context
from plugrad.device import Buffer, check_supported, image_spec_for, pinned_buffer
from plugrad.dtype import DType, dtypes, promote_types, result_type_with_scalar, truncate, f32_to_bf16, bf16_to_f32
from plugrad.engine import kernelize_roots, realize as engine_realize, realized_view, schedule as engine_schedule
from plugrad.engine.jit import note_pending_write
from plugrad.engine.schedule import Rebind
from plugrad.gradient import compute_gradient, custom_gradients
from plugrad import multi as _multi
from plugrad.registry import canonical_device, get_registry
from plugrad.scheduler import (ScheduleItem, _contiguous_range_view, buffer_node, buffer_of, contiguous_base, pending_kernel,
                               version_base)
from plugrad.shape import inverse_permutation, prod, smax
from plugrad.symbolic import sym_infer, symbolic, unbind_graph
from plugrad.uops import GroupOp, Ops, UOp, broadcast, graph_rewrite, toposort

ShapeArg = int | Sequence[int]
#: A device ("CPU:1"), or several for a tensor on each of them (replicated; see `Tensor.shard`)
DeviceArg = str | tuple[str, ...]
# reductions of at least this many elements to at most this many outputs run in two stages
SPLIT_REDUCE_MIN = 1 << 16
SPLIT_REDUCE_MAX_OUTPUT = 64
#: a reduction over leading axes (its outputs along the innermost axis, as sum(0)'s) on a device with launch indices
#: runs as partial results, doubled while outputs x partials stay within COLUMN_SPLIT_THREADS threads each adding at
#: least COLUMN_SPLIT_MIN_TERMS (see `Tensor._column_chunks`)
COLUMN_SPLIT_THREADS, COLUMN_SPLIT_MIN_TERMS = 1 << 16, 256
#: A matmul whose right operand is a row-major buffer of at least this many elements, read by at least PANEL_MIN_ROWS
#: rows, copies it into panels one vector wide first on a device that loops over its outputs with vector ops (see
#: `Tensor._panel_width`).
PANEL_MIN_ELEMENTS, PANEL_MIN_ROWS = 1 << 20, 128
#: A matmul reading its right operand as the transpose of a row-major buffer (a linear layer's x @ W.T) with a sum of
#: at most TRANSPOSED_MAX_K terms, at least TRANSPOSED_MIN_OUTPUTS outputs and at least half as many rows reading each
#: copied matrix as the sum has terms copies it row-major first on such a device (see `Tensor._copies_transposed`).
TRANSPOSED_MAX_K, TRANSPOSED_MIN_OUTPUTS = 128, 1 << 16
#: conv2d's weight gradient sums channels-last where both channel counts per group are at least this
#: (see `_channels_last_weight_gradient`)
CHANNELS_LAST_MIN = 8
#: tanh(x) = x (1 + x² P(x²)) below |x| = TANH_POLY_BELOW: P's coefficients (lowest first) are a least-squares fit of
#: (tanh(x)/x - 1) / x² on Chebyshev nodes of [0, 0.625], weighted for relative error: within 3e-9 of tanh there
TANH_POLY_BELOW = 0.625
TANH_POLY = (-0.3333333134651184, 0.13333211839199066, -0.05394745245575905, 0.021703990176320076,
             -0.00818463321775198, 0.002148957457393408)
# sorts of at most this many elements per row count ranks in one pass; longer ones use a bitonic network
SORT_RANK_MAX = 256
#: a bitonic sort's compare steps within runs of this many are one kernel counting ranks in each run
BITONIC_RUN = 16
#: topk of at most TOPK_PASSES_MAX along an axis of TOPK_PASSES_FROM or more: k passes of a max (`_top_by_passes`)
TOPK_PASSES_MAX, TOPK_PASSES_FROM = 8, 64
#: topk of more than TOPK_PASSES_MAX along an axis longer than SORT_RANK_MAX and at least this many times k: the k-th
#: value by a bisection of its bits (`_top_by_threshold`), O(n k) work instead of a sort's O(n log^2 n) in log^2 n
#: kernels
TOPK_THRESHOLD_FRACTION = 4
#: topk and `_first_reaching` find positions by chunks of this many (`_chunked`, `_chunk_positions`)
TOPK_CHUNK = 32
#: the dtypes whose values map to int32 keys in the same order (the others sort)
_TOPK_KEYED = frozenset({dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.int16, dtypes.int8,
                         dtypes.uint16, dtypes.uint8})
#: what a bitonic network moves: one array, or values with their indices
_Sorted = TypeVar("_Sorted")


def _shape_args(shape: tuple) -> tuple[int, ...]:
  """Accept f(2, 3) and f((2, 3)) alike; an entry may be a bound Variable (a symbolic dimension)."""
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
  for s in shape:
    if _is_sint(s): continue
    if not isinstance(s, (int, np.integer)) or isinstance(s, bool): raise TypeError(f"shape entries must be ints, got {shape!r}")
    if s < 0: raise ValueError(f"negative dimension in shape {shape!r}")
  return tuple(s if isinstance(s, UOp) else int(s) for s in shape)


def _wide_index(index: Tensor) -> Tensor:
  """An integer index tensor in a dtype that holds any axis size: int8, int16 and the unsigned kinds of them as int32
  (an axis of 300 is 44 in int8: positions compared in the index's own dtype wrapped, and one index picked two)."""
  return index.cast(dtypes.int32) if index.dtype.itemsize < 4 else index


def _plain_sizes(xs: Sequence[Any]) -> bool:
  """Whether every entry is a Python int >= 0 (not a bool, a numpy int, a symbolic size or -1)."""
  return all(type(x) is int and x >= 0 for x in xs)


def _is_sint(s: Any) -> bool:
  """Whether `s` is a symbolic dimension: an int expression of bound Variables (`Variable("i", 1, 9).bind(3)`)."""
  if not isinstance(s, UOp): return False
  ops = {n.op for n in s.toposort}
  if Ops.DEFINE_VAR in ops and Ops.BIND not in ops:  # a dimension needs a value: the kernel's launch passes it
    raise ValueError(f"{s!r} is not bound: use it as a dimension through .bind(value)")
  return Ops.BIND in ops and s.dtype == dtypes.int32


def _index_int(x: Any) -> int | UOp:
  """A shrink bound: an int, or a bound Variable expression."""
  return x if _is_sint(x) else int(x)


def _same_size(a: int | UOp, b: int | UOp) -> bool:
  """a == b for every value of the Variables (sizes that are the same expression written differently too)."""
  if isinstance(a, int) and isinstance(b, int): return a == b
  try:
    return bool(a <= b and a >= b)  # type: ignore[operator]
  except TypeError:
    return False


def _concrete(shape: tuple) -> tuple[int, ...]:
  """The shape with each symbolic dimension at its bound value."""
  return tuple(sym_infer(s, {}) for s in shape)


class ArgumentError(ValueError, RuntimeError):
  """A bad argument value: the ValueError plugrad documents, and the RuntimeError tinygrad raises for the same
  mistake, so code written against either catches it."""


class ArgumentTypeError(TypeError, RuntimeError):
  """A bad argument type or dtype: a TypeError that is also tinygrad's RuntimeError for it."""


def _norm_axis(axis: int, ndim: int) -> int:
  if not isinstance(axis, (int, np.integer)): raise TypeError(f"axis must be an int, got {axis!r}")
  lo, hi = -max(ndim, 1), max(ndim, 1) - 1
  if not lo <= axis <= hi: raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
  return int(axis) % max(ndim, 1)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  """The shape several shapes broadcast to (numpy rules); ValueError when they do not."""
  if len(shapes) == 2:  # a binary op's operands, on every op that broadcasts: without a set per axis
    a, b = shapes
    if len(a) != len(b): a, b = (1,) * (len(b) - len(a)) + a, (1,) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b):
      if x == y or y == 1: out.append(x)
      elif x == 1: out.append(y)
      else: raise ValueError(f"shapes {' and '.join(map(str, shapes))} cannot be broadcast together")
    return tuple(out)
  nd = max(len(s) for s in shapes)
  padded = [(1,) * (nd - len(s)) + s for s in shapes]
  out = []
  for dims in zip(*padded):
    sizes = {d for d in dims if d != 1}
    if len(sizes) > 1: raise ValueError(f"shapes {' and '.join(map(str, shapes))} cannot be broadcast together")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


def _sum_dtype(dt: DType) -> DType:
  """The dtype sums and products return, as torch: int64 for bool and every integer type, unsigned ones
  included (uint64's bits wrap into int64); a float type keeps its own (halves accumulate in float32)."""
  return dtypes.int64 if dt == dtypes.bool or dt.is_int else dt


def _may_split(size: Any, device: DeviceArg) -> bool:
  """Whether a reduction of `size` values into each output may run as two (`Tensor._split_reduce`): a long one, of a
  known size, on one device."""
  return isinstance(size, int) and size >= SPLIT_REDUCE_MIN and not isinstance(device, tuple)


def _triangle(rows: int, cols: int, diagonal: int, upper: bool, device: str | tuple[str, ...]) -> Tensor:
  """The bool (rows, cols) mask of the elements on and above (`upper`) or on and below the `diagonal`-th diagonal."""
  r = Tensor.arange(rows, dtype=dtypes.int32, device=device).reshape(rows, 1)
  c = Tensor.arange(cols, dtype=dtypes.int32, device=device).reshape(1, cols)
  return (c - r >= diagonal) if upper else (c - r <= diagonal)


def _check_py_int(value: Any) -> Any:
  """`value`, unless it is a Python int beyond 64 bits: that raises OverflowError, as in torch. Ints that fit in
  int64 or uint64 wrap to the tensor's dtype (int8 + 300 adds 44), as they do in torch and tinygrad."""
  if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < 1 << 64:
    raise OverflowError(f"Python int {value} is too big to convert: tensor values must fit in 64 bits")
  return value


def _wide_int(values: Sequence[int]) -> DType | None:
  """The dtype Python ints beyond the default int's range take when none was asked for: int64, or uint64 for values
  of its upper half (as numpy and torch infer them; they wrapped into int32: [2**40] was [0]); None when they fit the
  default int. OverflowError when no 64-bit type holds them all."""
  lo, hi = min(values), max(values)
  if dtypes.default_int.min <= lo and hi <= dtypes.default_int.max: return None
  if hi < 1 << 63: return dtypes.int64
  if lo >= 0: return dtypes.uint64
  raise OverflowError(f"Python ints from {lo} to {hi} fit no 64-bit integer type; pass a dtype to wrap them into")


def _array_from_py(data: list | tuple, dt: DType, inferred: bool = False) -> np.ndarray:
  """A (nested) list as a numpy array of `dt`'s type; ints out of the dtype's range wrap (numpy refuses them), unless
  the dtype was `inferred`: then they widen it (`_wide_int`)."""
  try:
    return np.array(data, dtype=dt.np)
  except OverflowError:
    obj = np.array(data, dtype=object)
    flat = [_check_py_int(v) for v in obj.ravel()]
    if inferred and dt.is_int and (wide := _wide_int(flat)) is not None:
      return np.array(flat, dtype=wide.np).reshape(obj.shape)
    if not dt.is_int: return np.array(flat, dtype=dt.np).reshape(obj.shape)
    # through uint64: a C cast to a narrower integer keeps the low bits, which is the wrap
    return np.array([int(v) % (1 << 64) for v in flat], dtype=np.uint64).astype(dt.np).reshape(obj.shape)


_BROADCAST_OPS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.CAST})  # what `_broadcast_const` looks through


def _broadcast_const(u: UOp) -> Any:
  """The value of a node that is one constant broadcast to a shape (through reshapes, expands and casts), else None."""
  casts = []
  while u.op in _BROADCAST_OPS:
    if u.op is Ops.CAST: casts.append(u.dtype)
    u = u.src[0]
  if u.op is not Ops.CONST: return None
  value = u.arg
  for dt in reversed(casts): value = truncate(value, dt)  # the innermost cast first
  return value


class _RNG:
  """The random state: a seed and, per device, a counter in a one-element device buffer and the seed's two keys in
  another.

  A draw of n numbers advances the counter by n with an `assign` and hashes (keys, counter + i) on the
  device, so random numbers are computed where they are used, and a TinyJit replay draws new ones as
  eager code does (the counter's update is one of the kernels it replays). `manual_seed` writes both buffers in
  place, so a replay after it draws what eager code draws after it (with the keys as constants in the kernels and
  new counters, a replay kept its first seed's stream going)."""
  lock = threading.Lock()
  seed = 0
  counters: dict[str, Tensor] = {}
  keys: dict[str, Tensor] = {}


def _seed_keys(seed: int) -> tuple[int, int]:
  """Two 32-bit keys from a seed (splitmix64), so nearby seeds give unrelated streams."""
  z = (seed * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) & (2**64 - 1)
  z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
  z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
  z ^= z >> 31
  return z & 0xFFFFFFFF, z >> 32


def _hash32(x: Tensor) -> Tensor:
  """A 32-bit integer hash with full avalanche (Wellons' lowbias32) of a uint32 tensor."""
  x = x ^ (x >> 16)
  x = x * 0x7FEB352D
  x = x ^ (x >> 15)
  x = x * 0x846CA68B
  return x ^ (x >> 16)


def _random_bits(shape: tuple[int, ...], device: str | tuple[str, ...] | None) -> Tensor:
  """Uniform random uint32 values of `shape` (lazy: realize to draw)."""
  if isinstance(device, tuple): return _random_bits(shape, device[0]).shard(device)  # drawn once, copied to each
  device = canonical_device(device) if device else get_registry().default_device()
  n = prod(shape)
  with _RNG.lock:
    if (ctr := _RNG.counters.get(device)) is None:
      # uploaded, not computed: a counter made inside a TinyJit capture must not be reset by its replays
      ctr = _RNG.counters[device] = Tensor(np.zeros(1, np.uint32), device=device)
      _RNG.keys[device] = Tensor(np.array(_seed_keys(_RNG.seed), np.uint32), device=device)
    ctr.assign(ctr + n).realize()  # its own realize: the draw's graph then holds no assign (schedule-cache friendly)
    keys = _RNG.keys[device]
  first = ctr - n  # the counter after this draw's update: the draws are realized before the next one
  index = Tensor.arange(n, dtype=dtypes.uint32, device=device) + first
  return _hash32(_hash32(index ^ keys[0]) + keys[1]).reshape(shape)


def _bitcast_resized(x: Tensor, dt: DType) -> Tensor:
  """`x.bitcast(dt)` where dt's item size differs: through unsigned integers of each size, cut with right shifts and
  truncating casts, or joined with left shifts and ors (ops every device has), lowest byte first (numpy's `view` on
  the little-endian hosts and GPUs plugrad runs on)."""
  old, new = x.dtype.itemsize, dt.itemsize
  what = f"bitcast from {x.dtype.name} to {dt.name}"
  if x.ndim == 0: raise ValueError(f"{what} of a 0-d tensor: the item size changes the last axis, and it has none")
  last = x.shape[-1]
  if not isinstance(last, int): raise ValueError(f"{what}: the last axis's length {last} is symbolic")
  if last * old % new: raise ValueError(f"{what}: the last axis ({last} x {old} bytes) does not split into {new}-byte items")
  u = x.bitcast(_UINT_OF_SIZE[old])
  if new > old:  # `rate` old items, lowest first, make one new item
    rate = new // old
    parts = u.reshape(*x.shape[:-1], last // rate, rate).cast(_UINT_OF_SIZE[new])
    joined = functools.reduce(lambda a, b: a | b, (parts[..., i] << (8 * old * i) for i in range(rate)))
    return joined.bitcast(dt)
  pieces = [u >> (8 * new * i) if i else u for i in range(old // new)]
  return Tensor.stack(*pieces, dim=-1).flatten(-2).cast(_UINT_OF_SIZE[new]).bitcast(dt)


#: the unsigned integer dtype of each item size, which a bitcast between sizes goes through
_UINT_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def _unit_uniform(shape: tuple[int, ...], dt: DType, device: str | None) -> Tensor:
  """Uniform values in [0, 1) of float dtype `dt`: as many random bits as `dt` holds exactly, so a
  value never rounds up to 1."""
  bits = {dtypes.float16: 11, dtypes.bfloat16: 8}.get(dt, 24)
  return (_random_bits(shape, device) >> (32 - bits)).cast(dt) * (2.0 ** -bits)


class _Handles:
  """Live tensors indexed by the node each points at, and how many hold each buffer, so a realize
  touches only the tensors its graph reaches (walking every live tensor made each realize cost grow
  with the size of the program). Maintained by `Tensor.uop`'s setter and `Tensor.__del__`."""

  def __init__(self) -> None:
    self.at: dict[UOp, dict[int, weakref.ref[Tensor]]] = {}
    self.held: dict[Buffer, int] = {}
    self.kernelized: set[UOp] = set()  # nodes handles were rebound to whose kernels may not have run yet

  def move(self, t: Tensor, old: UOp | None, new: UOp | None) -> None:
    if old is not None: self.drop(t, old)
    if new is not None: self.add(t, new)

  # add and drop run for every tensor made and freed: the common node (a computation, not a buffer or a view
  # of one, not sharded) is told apart inline, without building its tuple of bases
  def add(self, t: Tensor, u: UOp) -> None:
    if (refs := self.at.get(u)) is None: refs = self.at[u] = {}
    refs[id(t)] = weakref.ref(t)
    if u.op in _HOLDING_OPS:
      for base in _bases(u):
        b = buffer_of(base)
        self.held[b] = self.held.get(b, 0) + 1

  def drop(self, t: Tensor, u: UOp) -> None:
    refs = self.at[u]
    del refs[id(t)]
    if not refs: del self.at[u]
    if u.op in _HOLDING_OPS:
      for base in _bases(u):
        b = buffer_of(base)
        if (n := self.held[b] - 1): self.held[b] = n
        else: del self.held[b]

  def tensors_at(self, u: UOp) -> list[Tensor]:
    return [t for r in list(self.at.get(u, {}).values()) if (t := r()) is not None]

  def rebind(self, becomes: dict[UOp, UOp]) -> None:
    """Point every live tensor at what its node became."""
    for old, new in becomes.items():
      if old in self.at:
        _cut_gradients.note(old, new)
        for t in self.tensors_at(old): t.uop = new
        if (base := contiguous_base(new)) is not None and pending_kernel(base) is not None: self.kernelized.add(new)

  def finish(self) -> None:
    """Tensors whose kernels ran now point at their buffers."""
    for u in list(self.kernelized):
      if u in self.at and pending_kernel(contiguous_base(u)) is not None: continue  # kernelized, not run yet
      self.kernelized.discard(u)
      if (view := realized_view(u)) is not None:
        if u in _cut_gradients.nodes: _cut_gradients.nodes.add(view)
        for t in self.tensors_at(u): t.uop = view


#: the ops of nodes that can hold buffers (`_bases`): a buffer node, a reshape of one, or a sharded tensor's MULTI
_HOLDING_OPS = frozenset({Ops.BUFFER, Ops.ASSIGN, Ops.RESHAPE, Ops.MULTI})


def _bases(u: UOp) -> tuple[UOp, ...]:
  """The buffer nodes a tensor's node holds: its own, or each shard's of a sharded tensor."""
  if u.op is not Ops.MULTI:  # the common case, on every tensor made: no list built
    base = contiguous_base(u)
    return () if base is None else (base,)
  return tuple(b for n in u.src if (b := contiguous_base(n)) is not None)


_handles = _Handles()


class _CutGradients:
  """The nodes realizes made of graphs computed from tensors that require a gradient (requires_grad True), weakly.
  A realize keeps a graph's values, not the graph: a loss built on such a node has no gradient path through it, which
  backward reports (`check`) instead of leaving those gradients out. Unreported, logging a model's accuracy from its
  logits with .numpy() before backward (the logits, a live tensor, became their buffer) left every weight's gradient
  None, and training silently changed nothing; torch keeps the graph behind a value it reads."""

  def __init__(self) -> None:
    self.leaves_exist = False  # whether any tensor has had requires_grad True: until then nothing is noted
    self.nodes: weakref.WeakSet[UOp] = weakref.WeakSet()
    # the .grad tensors backward made: realized by an optimizer's step, they are read as values, not differentiated
    # (not walking their graphs: a tiny LM's eager step noted 30 rebinds over 18000 nodes, 3% of its time)
    self.grads: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()  # by id (== is elementwise)

  def note(self, old: UOp, new: UOp) -> None:
    """Remember `new`, what a realize made of `old`, when old is a float computation (not an assign: an optimizer's
    update writes a parameter in place) whose value depends on a tensor requiring a gradient other than through
    detach."""
    if not self.leaves_exist or old.op is Ops.ASSIGN or old.dtype is None or not old.dtype.is_float or \
       contiguous_base(old) is not None: return
    held, nodes, detach = _handles.at, self.nodes, Ops.DETACH
    if all((t := r()) is None or self.grads.get(id(t)) is t for r in held[old].values()): return
    stack, seen = [old], set()
    while stack:  # depth first, stopping at the first such tensor (usually a few nodes from a loss)
      n = stack.pop()
      if n in seen: continue
      seen.add(n)
      if n in nodes or ((refs := held.get(n)) is not None and any((t := r()) is not None and t._requires_grad
                                                                 for r in refs.values())):
        nodes.add(new)
        return
      if n.op is not detach: stack.extend(n.src)

  def check(self, root: UOp) -> None:
    """Raise if the graph of `root` reads a noted node other than through detach (one a tensor holds with
    requires_grad True is a leaf the gradient is meant for)."""
    if not self.nodes: return
    for n in toposort([root], descend=lambda n: n.op is not Ops.DETACH):
      if n in self.nodes and not any(t._requires_grad for t in _handles.tensors_at(n)):
        raise RuntimeError(
          f"this graph reads a value of shape {n.shape} that was realized (by .numpy(), .item(), .tolist() or .realize() "
          "of it, or of a tensor computed from it) after being computed from tensors that require gradients: a "
          "realize keeps values, not graphs, so no gradient can flow through it. Call backward() before reading "
          "values of the graph (out.argmax(1).numpy() after loss.backward()), or detach() it where no gradient is "
          "meant to flow")


_cut_gradients = _CutGradients()


class _BackwardOutputs:
  """The live tensors the `backward` calls since the last optimizer step saw (the losses, the values they were
  computed from, such as the logits), held weakly.

  A step writes the parameters in place, and a lazy graph reads a buffer as it is when it runs: a loss, a
  logits tensor or a gradient still a graph after the step would be the updated model's. So a step realizes,
  with its updates, those of their values and those gradients of tensors with requires_grad True (the
  parameters, and what the user asked gradients of) that are still graphs (`take_pending`): read after
  `opt.step()` they are what backward saw, as in PyTorch. The gradients of tensors with requires_grad None
  (tinygrad's default: a batch, a dataset, a frozen layer) still graphs are cleared instead (`.grad` None, as
  zero_grad does): computing them would cost a backward pass nobody asked for (a dataset's is a scatter into
  all of it), and kept, they would read the updated parameters and, added to at every step, grow into a graph
  of every step that keeps every step's buffers."""

  def __init__(self) -> None:
    self.seen: dict[int, weakref.ref[Tensor]] = {}

  def add(self, seen: list[Tensor]) -> None:
    for t in seen:
      if id(t) not in self.seen: self.seen[id(t)] = weakref.ref(t, functools.partial(self._forget, id(t)))

  def _forget(self, key: int, ref: weakref.ref[Tensor]) -> None:
    if self.seen.get(key) is ref: del self.seen[key]

  def take_pending(self) -> list[Tensor]:
    """The values and wanted gradients still graphs, to realize with a step; clears the other gradients still
    graphs, and forgets every tensor."""
    pending: list[Tensor] = []
    for r in self.seen.values():
      if (t := r()) is None: continue
      if not _views_a_buffer(t.uop): pending.append(t)
      if (g := t.grad) is None or _views_a_buffer(g.uop): continue
      if t.requires_grad: pending.append(g)
      elif t.requires_grad is None: t.grad = None
    self.seen.clear()
    return pending


_backward_outputs = _BackwardOutputs()
_assign_ids = itertools.count()  # the arg of each ASSIGN node `Tensor.assign` makes


def _halves_in_float32(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
  """A float function whose halves (float16, bfloat16) compute in float32 and round once, as torch's opmath: a
  half's intermediates overflowed or lost digits inside (the reason each use names)."""
  @functools.wraps(fn)
  def wrapped(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    x = self._float()
    if x.dtype != (w := x._wide()).dtype: return fn(w, *args, **kwargs).cast(x.dtype)
    return fn(self, *args, **kwargs)
  return wrapped


class _TensorMeta(type):
  # `Tensor.training` reads and sets the TRAINING context variable: the one record of training mode
  @property
  def training(cls) -> bool: return bool(TRAINING.value)
  @training.setter
  def training(cls, mode: bool) -> None: TRAINING.value = int(mode)


class Tensor(metaclass=_TensorMeta):
  """A lazily evaluated n-dimensional array on a device.

  :param data: a Python scalar, a (nested) list, a numpy array, or a UOp (internal).
  :param device: a device name such as "CPU" or "CUDA:1"; the default device when None.
  :param dtype: the element type; inferred from the data when None.
  :param requires_grad: True: `backward` fills `.grad`; False: never; None (default): filled when
    the tensor is reached by `backward` (tinygrad's rule), and cleared by an optimizer step if still unread.
  """
  __slots__ = ("_uop", "device", "grad", "_requires_grad", "__weakref__")
  #: a device name ("CPU:1"), or a tuple of them for a tensor sharded (or replicated) over several devices
  device: str | tuple[str, ...]
  __hash__ = object.__hash__

  @property
  def uop(self) -> UOp:
    """The node of the graph this tensor is (a buffer once realized)."""
    return self._uop

  @uop.setter
  def uop(self, u: UOp) -> None:
    _handles.move(self, getattr(self, "_uop", None), u)
    self._uop = u

  def __del__(self) -> None:
    try:
      _handles.drop(self, self._uop)
    except (AttributeError, KeyError, TypeError):  # never fully made, or the interpreter is shutting down
      pass

  def __init__(self, data: Any, device: DeviceArg | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None):
    self.grad: Tensor | None = None
    self._requires_grad: bool | None = None
    dt = dtypes.from_any(dtype) if dtype is not None else None
    if isinstance(device, (tuple, list)):  # several devices: made on the first, then copied to every one
      devices = _canonical_devices(device)
      if isinstance(data, (list, tuple, np.ndarray)):
        made = Tensor(data, device=devices[0], dtype=dtype).shard(devices)
        self.uop, self.device = made.uop, made.device
        if requires_grad is not None: self.requires_grad_(requires_grad)
        return
      # a scalar (a constant) has no device: its graph is on every device as it is (replicated)
      device, spread = (devices[0], None) if len(devices) == 1 else (None, devices)
    else: spread = None
    self.device = canonical_device(device) if device else get_registry().default_device()
    if isinstance(data, UOp):
      self.uop = data if dt is None or data.dtype == dt else data.cast(dt)
    elif isinstance(data, Tensor):
      if device is not None and data.device != self.device: data = data.to(self.device)  # a copy, as torch.tensor
      self.uop = data.uop if dt is None else data.uop.cast(dt)
      self.device = data.device
    elif isinstance(data, (bool, int, float, np.generic)) and not isinstance(data, np.ndarray):
      if dt is None and isinstance(data, int) and not isinstance(data, bool):
        dt = _wide_int([_check_py_int(data)])
      dt = dt or (dtypes.from_any(data.dtype) if isinstance(data, np.generic) else dtypes.from_py(data))
      self.uop = UOp.const(dt, data.item() if isinstance(data, np.generic) else _check_py_int(data))
    elif isinstance(data, (bytes, bytearray, memoryview)):
      # raw bytes read as `dtype` (uint8 by default), as tinygrad reads a file's contents
      raw, want = bytes(data), dt or dtypes.uint8
      if want == dtypes.bfloat16: raise TypeError("bytes as bfloat16: make a uint16 tensor, then .bitcast(dtypes.bfloat16)")
      if len(raw) % want.itemsize: raise ValueError(f"{len(raw)} bytes are no whole number of {want.name} elements")
      self.uop = _upload(np.frombuffer(raw, dtype=want.np), want, self.device)
    elif isinstance(data, (list, tuple, np.ndarray)):
      if isinstance(data, np.ndarray): arr = data
      else:
        inferred, dt = dt is None, dt or dtypes.from_py(data)
        try:
          arr = _array_from_py(data, dt, inferred)
        except ValueError as e:
          what = "a ragged or mixed list" if "inhomogeneous" in str(e) or "sequence" in str(e) else "this list"
          raise ValueError(f"cannot make a {dt.name} tensor from {what}: {e}") from None
        if inferred and dt.is_int: dt = dtypes.from_any(arr.dtype)  # widened for ints past the default's range
      if arr.dtype == object: raise TypeError("cannot make a tensor from an array of Python objects")
      dt = dt or dtypes.from_any(arr.dtype)
      self.uop = _upload(arr, dt, self.device)
    else:
      raise TypeError(f"cannot make a Tensor from {type(data).__name__}")
    if spread is not None:
      if contiguous_base(self.uop) is not None or self.uop.op is Ops.MULTI:
        raise TypeError(f"a tensor on several devices is made from data or from a constant, not from "
                        f"{type(data).__name__}")
      self.device = spread
    _check_dtype_on(self.device, self.uop.dtype)  # ops on a tensor take its dtype as supported (Tensor._new)
    if requires_grad is not None: self.requires_grad_(requires_grad)

  @staticmethod
  def from_numpy(arr: np.ndarray, device: str | None = None) -> Tensor:
    """A tensor whose buffer is `arr`'s own memory, like `torch.from_numpy`: nothing is copied, a write
    through either is seen by the other, and the array stays alive while the tensor does. The tensor is
    lazy like any other: graphs built on it read the array when they are realized, not when they are built.

    Needs a device whose kernels can use host memory in place (PYTHON and CPU can; a GPU cannot) and a
    writeable, C-contiguous, aligned array of a dtype the device supports, not overlapping an array
    another live tensor already shares; anything else raises ValueError saying which. `Tensor(arr)` copies.
    """
    if not isinstance(arr, np.ndarray): raise TypeError(f"from_numpy takes a numpy array, not {type(arr).__name__}")
    dev_name = canonical_device(device) if device else get_registry().default_device()
    dt = dtypes.from_any(arr.dtype)
    if arr.size == 0: return Tensor(arr, device=dev_name)  # no memory to share
    why = ("its bytes are not in the machine's order (arr.astype(arr.dtype.newbyteorder('=')) makes a copy that is)"
           if not arr.dtype.isnative else
           "it is not C-contiguous (np.ascontiguousarray makes a copy that is)" if not arr.flags.c_contiguous else
           "it is not aligned to its element size" if not arr.flags.aligned else
           "it is read-only (kernels may write into a tensor's buffer)" if not arr.flags.writeable else
           "it views a plugrad tensor's memory (from np.asarray): use that tensor" if pinned_buffer(arr) else None)
    if why: raise ValueError(f"from_numpy cannot share this array: {why}; Tensor(arr) copies it")
    dev = get_registry().device(dev_name)
    check_supported(dev_name, dev.caps, {dt})
    if image_spec_for(tuple(arr.shape), dt, dev.caps) is not None:
      raise ValueError(f"from_numpy cannot share this array: {dev_name} keeps {dt.name} tensors of this shape in an image "
                       "layout; Tensor(arr) copies it")
    buf = Buffer.from_host(dev_name, dt, dev.allocator, arr)
    if buf is None:
      raise ValueError(f"from_numpy cannot share this array: {dev_name}'s kernels cannot use host memory in place; "
                       f"Tensor(arr, device={dev_name!r}) copies it")
    return Tensor._from(_reshape(buffer_node(buf), tuple(arr.shape)), dev_name)

  @staticmethod
  def _from(uop: UOp, device: str | tuple[str, ...]) -> Tensor:
    _check_dtype_on(device, uop.dtype)
    return Tensor._make(uop, device)

  @staticmethod
  def _make(uop: UOp, device: str | tuple[str, ...]) -> Tensor:
    t = object.__new__(Tensor)
    _handles.add(t, uop)  # what the uop setter does for a tensor that had no node yet
    t._uop, t.device, t.grad, t._requires_grad = uop, device, None, None
    return t

  @property
  def requires_grad(self) -> bool | None:
    """True: `backward` fills `.grad`; False: never; None: when reached (tinygrad's rule)."""
    return self._requires_grad

  @requires_grad.setter
  def requires_grad(self, value: bool | None) -> None:
    if value: _cut_gradients.leaves_exist = True
    self._requires_grad = value

  def _new(self, uop: UOp) -> Tensor:
    if uop.dtype is self._uop.dtype: return Tensor._make(uop, self.device)  # this device holds that dtype already
    return Tensor._from(uop, self.device)

  # ------------------------------------------------------------------ several devices (plugrad.multi)

  def shard(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
    """This tensor split over `devices` along `axis` (None: a whole copy on each device, replicated), as tinygrad's
    `shard`. Ops on the result run on every device on its shard; `.device` is the tuple of devices."""
    devs = _canonical_devices(devices)
    if axis is not None: axis = _norm_axis(axis, self.ndim)
    if isinstance(self.device, tuple):
      if self.device == devs and (current := self.shard_axis) == axis: return self
      if self.device == devs and current is None:  # replicated: each device keeps its piece, nothing is copied
        return Tensor._from(_multi.split_replicated(self.uop, devs, axis), devs)
      return self.to(devs[0]).shard(devs, axis)  # resharding: gathered on one device, split again
    return Tensor._from(_multi.shard(self.uop, self.device, devs, axis), devs)

  def shard_(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
    """`shard` in place: this tensor becomes the sharded one (for parameters: shard them, then train)."""
    out = self.shard(devices, axis)
    self.uop, self.device = out.uop, out.device
    return self

  def shard_like(self, y: Tensor) -> Tensor:
    """This tensor sharded as `y` is (same devices and axis); unchanged when `y` is on one device."""
    if not isinstance(y.device, tuple): return self.to(y.device)
    return self.shard(y.device, y.shard_axis)

  @property
  def shard_axis(self) -> int | None:
    """The axis a sharded tensor is split along (None: replicated, or on one device)."""
    if not isinstance(self.device, tuple): return None
    if self.uop.op is Ops.MULTI: return self.uop.arg[1]
    return _multi.lower(self.uop, self.device).axis

  # ------------------------------------------------------------------ properties

  # _uop, not the uop property: these are read on every op
  @property
  def shape(self) -> tuple[int, ...]:
    """The size of each axis."""
    return self._uop.shape
  @property
  def dtype(self) -> DType:
    """The element type."""
    return self._uop.dtype
  @property
  def ndim(self) -> int:
    """The number of axes."""
    return len(self._uop.shape)
  def numel(self) -> int:
    """The number of elements."""
    return prod(self._uop.shape)
  def size(self, dim: int | None = None) -> tuple[int, ...] | int:
    """The shape, or the size of axis `dim`."""
    return self.shape if dim is None else self.shape[_norm_axis(dim, self.ndim)]
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str: return f"<Tensor {self.shape} {self.dtype.name} on {self.device}>"
  def __bool__(self) -> bool:
    raise TypeError("the truth value of a Tensor is ambiguous; use .item() (this would realize it) or .numpy()")

  # ------------------------------------------------------------------ creation

  @staticmethod
  def empty(*shape: ShapeArg, dtype: DType | str | None = None, device: DeviceArg | None = None,
            requires_grad: bool | None = None) -> Tensor:
    """An uninitialised tensor (a fresh buffer)."""
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    shape = _shape_args(shape)
    if isinstance(device, (tuple, list)):  # a fresh buffer on each device (replicated: only its shape is defined)
      devs = _canonical_devices(device)
      parts = [Tensor.empty(*shape, dtype=dt, device=d).uop for d in devs]
      return Tensor._from(_multi.multi(parts, devs, None), devs).requires_grad_(requires_grad)
    dev = canonical_device(device) if device else get_registry().default_device()
    # a symbolic shape gets a buffer for the Variables' largest values
    buf = Buffer(dev, smax(prod(shape)), dt, get_registry().device(dev).allocator)
    return Tensor._from(_reshape(buffer_node(buf), shape), dev).requires_grad_(requires_grad)

  @staticmethod
  def full(shape: ShapeArg, fill_value: Any, dtype: DType | str | None = None, device: DeviceArg | None = None,
           requires_grad: bool | None = None) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (lazy: a broadcast constant)."""
    shape = _shape_args((shape,) if isinstance(shape, int) else tuple(shape))
    c = Tensor(fill_value, device=device, dtype=dtype)
    return (c.reshape((1,) * len(shape)).expand(shape) if shape else c).requires_grad_(requires_grad)

  @staticmethod
  def zeros(*shape: ShapeArg, dtype: DType | str | None = None, device: DeviceArg | None = None,
            requires_grad: bool | None = None) -> Tensor:
    """A tensor of zeros of `shape` (float32 unless `dtype`)."""
    return Tensor.full(_shape_args(shape), 0, dtype=dtype or dtypes.default_float, device=device, requires_grad=requires_grad)

  @staticmethod
  def ones(*shape: ShapeArg, dtype: DType | str | None = None, device: DeviceArg | None = None,
           requires_grad: bool | None = None) -> Tensor:
    """A tensor of ones of `shape` (float32 unless `dtype`)."""
    return Tensor.full(_shape_args(shape), 1, dtype=dtype or dtypes.default_float, device=device, requires_grad=requires_grad)

  def _sharded_alike(self, t: Tensor, device: DeviceArg | None) -> Tensor:
    """`t`, made on this tensor's devices for a *_like (no other `device` given), split as this tensor is."""
    if device is not None or not isinstance(self.device, tuple) or (axis := self.shard_axis) is None: return t
    return t.shard(self.device, axis)

  def full_like(self, fill_value: Any, dtype: DType | str | None = None, device: DeviceArg | None = None) -> Tensor:
    """A tensor of this shape (and dtype and device unless given, sharded alike) filled with `fill_value`."""
    return self._sharded_alike(Tensor.full(self.shape, fill_value, dtype=dtype or self.dtype, device=device or self.device),
                               device)
  def zeros_like(self, dtype: DType | str | None = None, device: DeviceArg | None = None) -> Tensor:
    """A tensor of zeros of this shape (and dtype and device unless given)."""
    return self.full_like(0, dtype, device)
  def ones_like(self, dtype: DType | str | None = None, device: DeviceArg | None = None) -> Tensor:
    """A tensor of ones of this shape (and dtype and device unless given)."""
    return self.full_like(1, dtype, device)
  def empty_like(self, dtype: DType | str | None = None, device: DeviceArg | None = None) -> Tensor:
    """A tensor of this shape (and dtype and device unless given, sharded alike) whose values are not set."""
    return self._sharded_alike(Tensor.empty(self.shape, dtype=dtype or self.dtype, device=device or self.device), device)
  def rand_like(self, dtype: DType | str | None = None, device: DeviceArg | None = None) -> Tensor:
    """Uniform random values in [0, 1) of this shape (and dtype and device unless given, sharded alike)."""
    return self._sharded_alike(Tensor.rand(self.shape, dtype=dtype or self.dtype, device=device or self.device), device)

  @staticmethod
  def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
             dtype: DType | str | None = None, device: DeviceArg | None = None) -> Tensor:
    """Values from start (inclusive) to stop (exclusive) by step, like numpy.arange. Integer start and step with
    every value exact in the dtype give a lazy tensor whose kernels compute start + i * step (tinygrad's arange is
    lazy too); other ranges are computed in float64 on the host and uploaded."""
    if stop is None: start, stop = 0, start
    if isinstance(start, UOp) or isinstance(stop, UOp) or isinstance(step, UOp):
      # bounds that are Variables: the first `count` of 0, 1, 2, ... (its largest count uploaded), times step, + start
      if step not in (1, -1) or isinstance(step, UOp):
        raise NotImplementedError(f"arange({start}, {stop}, {step}) with a Variable takes a step of 1 or -1")
      count = stop - start if step == 1 else start - stop
      dt = dtypes.from_any(dtype) if dtype is not None else dtypes.int32
      if isinstance(count, UOp) and (count := count.ssimplify()) is not None and isinstance(count, UOp):
        idx = Tensor.arange(max(int(count.vmax), 0), dtype=dt, device=device)[:count]
      else: idx = Tensor.arange(max(int(count), 0), dtype=dt, device=device)
      first = Tensor._from(start, idx.device).cast(dt) if isinstance(start, UOp) else start
      return idx * step + first
    if step == 0: raise ValueError("arange step must not be zero")
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
    n = max(0, math.ceil((stop - start) / step))
    if dtype is None and dt.is_int and n and not dt.min <= min(start, start + (n - 1) * step) <= \
        max(start, start + (n - 1) * step) <= dt.max:
      dt = dtypes.int64  # an integer range int32 cannot hold, as tinygrad
    last, exact = start + (n - 1) * step, dt.exact_int_max
    # (i * step reaches |step| * (n - 1) before start is added; start and step are themselves values of `dt`)
    if n > 1 and (dt.is_int or dt.is_float) and all(float(v).is_integer() for v in (start, step)) and \
        abs(step) * (n - 1) <= exact and all(dt.min <= v and abs(v) <= exact for v in (start, step, last)):
      # lazy: the kernels that read it compute i * step + start from their index (no buffer, nothing uploaded;
      # random numbers and one-hot encodings fuse into their kernels), in `dt`, where every value is exact
      idx = Tensor(UOp(Ops.ARANGE, dt, (), n), device=device)
      idx = idx if step == 1 else idx * int(step)
      return idx if start == 0 else idx + int(start)
    return Tensor(start + np.arange(n, dtype=np.float64 if dt.is_float else np.int64) * step, device=device, dtype=dt)

  @staticmethod
  def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: DeviceArg | None = None) -> Tensor:
    """The n x m identity matrix (lazy: ones on the diagonal made from a pad and a reshape)."""
    m = n if m is None else m
    if n < 0 or m < 0: raise ValueError(f"eye needs nonnegative sizes, got {n}, {m}")
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    if n == 0 or m == 0: return Tensor.zeros(n, m, dtype=dt, device=device)
    # a row of [1, 0 * m] repeated, read with a stride of m+1 lands on the diagonal
    k = min(n, m)
    diag = Tensor.ones(k, 1, dtype=dt, device=device).pad(((0, 0), (0, m))).flatten()[:k * m].reshape(k, m)
    return diag.pad(((0, n - k), (0, 0))) if n > k else diag

  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Seed the random numbers of every device: after the same seed, the same program draws the same numbers."""
    with _RNG.lock:
      _RNG.seed = int(seed)
      for device, ctr in _RNG.counters.items():  # in place: TinyJit's replays read these buffers (see _RNG)
        ctr.assign(Tensor(np.zeros(1, np.uint32), device=device)).realize()
        _RNG.keys[device].assign(Tensor(np.array(_seed_keys(_RNG.seed), np.uint32), device=device)).realize()

  @staticmethod
  def rand(*shape: ShapeArg, dtype: DType | str | None = None, device: DeviceArg | None = None,
           requires_grad: bool | None = None) -> Tensor:
    """Uniform random values in [0, 1)."""
    return Tensor.uniform(*shape, low=0.0, high=1.0, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def uniform(*shape: ShapeArg, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None,
              device: DeviceArg | None = None, requires_grad: bool | None = None) -> Tensor:
    """Uniform random values in [low, high), drawn on the device."""
    shape, dt = _shape_args(shape), dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    if not dt.is_float: raise TypeError(f"uniform draws floats; use randint for {dt.name}")
    u = _unit_uniform(shape, dt, device)
    out = u if (low, high) == (0.0, 1.0) else (u * (high - low) + low).cast(dt)
    out = out.realize()
    out.requires_grad = requires_grad
    return out

  @staticmethod
  def randn(*shape: ShapeArg, dtype: DType | str | None = None, device: DeviceArg | None = None,
            requires_grad: bool | None = None) -> Tensor:
    """Standard normal random values."""
    return Tensor.normal(*shape, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def normal(*shape: ShapeArg, mean: float = 0.0, std: float = 1.0, dtype: DType | str | None = None,
             device: DeviceArg | None = None, requires_grad: bool | None = None) -> Tensor:
    """Normal random values with `mean` and `std` (Box-Muller on the device, computed in float32)."""
    shape, dt = _shape_args(shape), dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    if not dt.is_float: raise TypeError(f"normal draws floats, not {dt.name}")
    u = _unit_uniform((2, *shape), dtypes.float32, device)
    z = ((1 - u[0]).log() * -2).sqrt() * (u[1] * (2 * math.pi)).cos()  # 1 - u is in (0, 1]: log is finite
    out = (z * std + mean).cast(dt).realize()
    out.requires_grad = requires_grad
    return out

  @staticmethod
  def randint(*shape: ShapeArg, low: int = 0, high: int = 10, dtype: DType | str | None = None,
              device: DeviceArg | None = None) -> Tensor:
    """Random integers in [low, high), drawn on the device."""
    shape, dt = _shape_args(shape), dtypes.from_any(dtype) if dtype is not None else dtypes.default_int
    if not (isinstance(low, (int, np.integer)) and isinstance(high, (int, np.integer))):
      raise TypeError(f"randint takes integer bounds, got low={low!r}, high={high!r}")
    if not 0 < high - low <= 2**32: raise ValueError(f"randint needs low < high within 2**32, got low={low}, high={high}")
    if dt.is_int and not dt.min <= low <= high - 1 <= dt.max:  # as torch: the values would wrap
      raise ValueError(f"randint [{low}, {high}) does not fit {dt.name} ({dt.min}..{dt.max})")
    bits = _random_bits(shape, device)
    offset = bits if high - low == 2**32 else bits % (high - low)  # modulo bias below 2**-32 * (high - low)
    return (offset.cast(dtypes.int64) + low).cast(dt).realize() if dt.itemsize == 8 or low < 0 else \
      (offset.cast(dt) + low).realize()

  # ------------------------------------------------------------------ realizing

  def schedule(self, *others: Tensor) -> list[ScheduleItem]:
    """The kernels (and copies) that realizing these tensors would run, in order; runs nothing."""
    return _schedule([self, *others])

  def kernelize(self, *others: Tensor) -> Tensor:
    """Decide the kernels for these tensors without running them: each tensor's graph becomes
    ASSIGN(BUFFER, KERNEL); later graphs read its buffer instead of fusing it."""
    tensors = [self, *others]
    roots, devices, rebind = graph_roots(tensors)
    if unbind_graph(roots)[1]:  # the kernels would lose the values they are bound to
      raise NotImplementedError("kernelize of a graph with bound Variables: realize() or schedule() it instead")
    rebind(kernelize_roots(roots, devices, get_registry()))
    return self

  def realize(self, *others: Tensor) -> Tensor:
    """Run everything these tensors need; afterwards each is a buffer, or a view of one: a view of a buffer
    (`b[2:6]`, `b.T`, a reshape or expand of it) stays that view, as in tinygrad and torch, so it shows what
    later writes into `b` put there. On a device that orders its work (a GPU's stream, the CPU's workers) the kernels
    may still be running when it returns: reading the values waits for them (`Device[d].synchronize()` waits too)."""
    tensors: list[Tensor] = []
    views: list[tuple[Tensor, UOp, UOp, Tensor]] = []  # a view of a pending assign: the assign is realized, not the view
    for t in (self, *others):
      base = _view_base(t.uop)
      if base is not None and base.op is Ops.BUFFER: continue  # a realized buffer or a view of one: nothing to run
      if base is not None and base is not t.uop and base.op is Ops.ASSIGN and not isinstance(t.device, tuple):
        views.append((t, t.uop, base, target := Tensor._from(base, t.device)))
        tensors.append(target)
      else: tensors.append(t)
    if not tensors: return self
    roots, devices, rebind = graph_roots(tensors)
    engine_realize(roots, devices, _handles.held.keys, rebind, get_registry())
    _handles.finish()
    _finish_sharded(tensors)
    for t, view, base, target in views:
      if t.uop is view: t.uop = _rebase(view, base, target.uop)
    return self

  def numpy(self) -> np.ndarray:
    """The values as a numpy array (bfloat16 comes back as float32)."""
    shape = _concrete(self.shape)  # a symbolic shape: at the values its Variables are bound to
    if prod(shape) == 0: return np.zeros(shape, dtype=self.dtype.np)  # no values: nothing to run or read
    if isinstance(self.device, tuple):  # every shard's values, side by side (a replicated tensor: the first copy)
      self.realize()
      u, devs = self.uop, self.device
      shards, axis = (u.src, u.arg[1]) if u.op is Ops.MULTI else ((u,), None)
      first = shards if axis is not None else shards[:1]
      return _multi.gather_numpy([Tensor._from(s, d).numpy() for s, d in zip(first, devs)], axis)
    self.realize()
    u = self.uop
    while u.op in (Ops.RESHAPE, Ops.EXPAND): u = u.src[0]
    if u.op is Ops.CONST: return np.full(shape, u.arg, dtype=self.dtype.np)
    if (base := contiguous_base(self.uop)) is None:  # a view of a buffer: its elements in order, as a copy
      if (view := self._host_view()) is not None: return np.array(view, order="C")
      return Tensor._from(self.uop, self.device)._copy().numpy()
    raw = buffer_of(base).numpy()
    arr = bf16_to_f32(raw) if self.dtype == dtypes.bfloat16 else raw
    # a buffer made for the Variables' largest values holds this shape's elements at its start
    return arr[:prod(shape)].reshape(shape) if arr.size != prod(shape) else arr.reshape(shape)

  def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    """numpy's conversion. `np.asarray(t)` (copy=None) returns an array over the realized buffer's own
    memory where that is possible (a device whose memory the host sees, a tensor that is its whole
    buffer in order, a dtype numpy has), so writes through it change the tensor, like `Tensor.numpy()`
    in torch; otherwise, and for `np.array(t)` (copy=True), a copy. copy=False raises where a copy
    would be needed. `.numpy()` always copies, as in tinygrad."""
    view = None if copy else self._host_view()
    if view is None:
      if copy is False: raise ValueError(f"np.asarray(..., copy=False): {self!r} cannot be viewed without a copy")
      view = self.numpy()
    if dtype is None or np.dtype(dtype) == view.dtype: return view
    if copy is False: raise ValueError(f"np.asarray(..., copy=False): a {view.dtype} tensor as {np.dtype(dtype)} needs a copy")
    return view.astype(dtype)

  def _host_view(self) -> np.ndarray | None:
    """The realized values as an array over the buffer's memory (a view of a buffer as a strided array, as
    torch's `.numpy()` of a view), or None where that is not possible."""
    if self.numel() == 0 or self.dtype == dtypes.bfloat16: return None  # bfloat16: numpy sees float32 copies
    if isinstance(self.device, tuple): return None  # the shards' buffers are no one array
    self.realize()
    if (base := contiguous_base(self.uop)) is not None: u, node = None, base
    elif (node := _view_base(self.uop)) is not None and node.op is Ops.BUFFER: u = self.uop
    else: return None
    buf = buffer_of(node)
    view = buf.host_view() if buf.options is None else None  # an image layout is not the flat order
    if view is None or u is None: return None if view is None else view.reshape(self.shape)
    if not _plain_view(u): return None  # bounds bound to Variables' values: numpy slices need ints (a copy reads it)
    arr = _numpy_view(u, view)
    return arr if np.may_share_memory(arr, view) else None  # a reshape of a strided view is a copy in numpy

  def item(self) -> Any:
    """The single value of a one-element tensor as a Python scalar."""
    if self.numel() != 1: raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    return self.numpy().reshape(()).item()

  def tolist(self) -> Any:
    """The values as (nested) Python lists."""
    return self.numpy().tolist()

  def data(self) -> memoryview:
    """The values as a memoryview of a numpy array."""
    return memoryview(np.ascontiguousarray(self.numpy()))

  def to(self, device: str | Sequence[str]) -> Tensor:
    """This tensor on `device` (a copy is scheduled when the device differs); a tuple of devices gives a copy on
    each (replicated, `shard(devices)`); a sharded tensor `.to` one device gathers its shards there."""
    if isinstance(device, (tuple, list)):
      return self.shard(device) if _canonical_devices(device) != self.device else self
    device = canonical_device(device)
    if device == self.device: return self
    if isinstance(self.device, tuple):  # the shards copied to `device` and put side by side
      low = _multi.lower(self.uop, self.device)
      parts = [Tensor._from(s, d).to(device) for s, d in zip(low.shards, self.device)]
      return parts[0] if low.axis is None else parts[0].cat(*parts[1:], dim=low.axis)
    get_registry().device(device)  # fail now, with the reason, if the device cannot run here
    return Tensor._from(UOp(Ops.COPY, self.dtype, (self.uop,), device), device)

  def contiguous(self) -> Tensor:
    """A tensor that will be realized into a buffer of its own (a fusion boundary). One that is contiguous already,
    a realized buffer or one contiguous range of it (`x[2:6]`, `x[3]`), is returned as it is, as in torch: it shares
    the buffer's memory and costs no kernel (tinygrad 0.14 makes it a view of the buffer too)."""
    if not isinstance(self.device, tuple) and _views_a_buffer(self.uop) and \
       (contiguous_base(self.uop) is not None or _contiguous_range_view(self.uop)): return self
    return self._copy()

  def _copy(self) -> Tensor:
    """The values realized into a buffer of their own, even where `contiguous()` would return this tensor."""
    return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

  def _own_buffer(self, copy: bool = False) -> UOp:
    """The buffer node of this realized tensor. A view of another buffer (realize keeps views), or any tensor when
    `copy`, becomes a buffer of its own first: what binds whole buffers needs one (a TinyJit capture, which would
    otherwise keep reading the buffer of the call that made the view; a collective writing in place)."""
    if copy or (base := contiguous_base(self.uop)) is None:
      self.uop = self._copy().realize().uop
      if (base := contiguous_base(self.uop)) is None: raise RuntimeError(f"internal error: {self!r} is no buffer after a copy")
    return base

  def assign(self, x: Tensor | Any) -> Tensor:
    """Write `x` (broadcast and cast to this tensor's shape and dtype) into this tensor's buffer."""
    x = x if isinstance(x, Tensor) else Tensor(x, device=self.device, dtype=self.dtype)
    if x.device != self.device: raise ValueError(f"assign from device {x.device} into a tensor on {self.device}")
    if broadcast_shape(x.shape, self.shape) != self.shape:
      raise ValueError(f"cannot assign a tensor of shape {x.shape} to one of shape {self.shape}")
    value = x.cast(self.dtype)._broadcast_to(self.shape)
    if value.uop is self.uop: return self  # writing a tensor into itself changes nothing
    if isinstance(self.device, tuple):
      if self.uop.op is not Ops.MULTI and (through := self._write_through(value)) is not None:
        # a view of the shards' buffers: the whole sharded tensor written in place, this tensor the same view of it
        # (replacing the view's value left the buffers as they were: cache[:, a:b].assign(...) wrote nothing)
        base, whole, chain = through
        node = Tensor._from(base, self.device).assign(Tensor._from(whole, self.device)).uop
        for op in reversed(chain): node = op.replace(src=(node,))
        self.uop = node
        return self
      axis = self.shard_axis
      low = _multi.lower(value.uop, self.device)
      shards = _multi.lower(value.shard(self.device, axis).uop, self.device).shards if low.axis != axis else low.shards
      if self.uop.op is Ops.MULTI and all(version_base(s) is not None for s in self.uop.src):
        # each shard's buffer is written in place, as a one-device tensor's is: graphs built before read the new value
        shards = tuple(UOp(Ops.ASSIGN, self.dtype, (old, new), next(_assign_ids))
                       for old, new in zip(self.uop.src, shards))
      self.uop = _multi.multi(shards, self.device, axis)  # else nothing aliases it: the new value replaces it
      return self
    # each assign is its own node (a unique arg): the scheduler records which writes it applied (see
    # scheduler._applied), and two assigns of equal values at different times are two writes
    if version_base(self.uop) is not None:  # a buffer, or a pending write into one: write in place
      self.uop = UOp(Ops.ASSIGN, self.dtype, (self.uop, value.uop), next(_assign_ids))
      note_pending_write(self)  # a TinyJit replay reading the buffer realizes it first
    elif (through := self._write_through(value)) is not None:
      base, whole, chain = through
      node = UOp(Ops.ASSIGN, base.dtype, (base, whole), next(_assign_ids))
      for op in reversed(chain): node = op.replace(src=(node,))  # this tensor stays the same view of the buffer
      self.uop = node
      note_pending_write(self)
    else:
      self.uop = value.uop  # nothing aliases an unrealized tensor: the new value simply replaces it
    return self

  def _write_through(self, value: Tensor) -> tuple[UOp, UOp, list[UOp]] | None:
    """For a tensor that is a view (movement ops) of a buffer: the buffer's version under the view, the
    buffer's whole new value (`value` where the view reads, the old contents elsewhere) and the view's
    movement ops from the top down; None when this tensor is no view of a buffer."""
    chain, u = [], self.uop
    while version_base(u) is None and not (u.op is Ops.MULTI and all(version_base(s) is not None for s in u.src)):
      if u.op not in GroupOp.Movement: return None
      chain.append(u)
      u = u.src[0]
    v, mask = value, Tensor.full(self.shape, True, dtype=dtypes.bool, device=self.device)
    for op in chain:  # carry the value and where it goes from the view's shape back to the buffer's
      shape = op.src[0].shape
      if op.op is Ops.RESHAPE: v, mask = v.reshape(shape), mask.reshape(shape)
      elif op.op is Ops.PERMUTE:
        inverse = inverse_permutation(op.arg)
        v, mask = v.permute(inverse), mask.permute(inverse)
      elif op.op is Ops.FLIP: v, mask = v.flip(op.arg), mask.flip(op.arg)
      elif op.op is Ops.SHRINK:
        pads = tuple((b, s - e) for (b, e), s in zip(op.arg, shape))
        v, mask = v.pad(pads), mask.pad(pads)  # outside the view: the mask is False
      elif op.op is Ops.PAD:  # the padding is no part of the buffer: what is written there is dropped
        keep = tuple((b, b + s) for (b, _), s in zip(op.arg[0], shape))
        v, mask = v.shrink(keep), mask.shrink(keep)
      else: raise ValueError(f"cannot assign into an expanded view {self.shape} of a tensor of shape {shape}: "
                             "several positions of the view are one element of the buffer")
    return u, mask.where(v, Tensor._from(u, self.device)).uop, chain

  # ------------------------------------------------------------------ gradients

  @staticmethod
  def train(mode: bool = True) -> Context:
    """Training mode for a block (`with Tensor.train(): ...`, or as a decorator): dropout is active and
    BatchNorm uses batch statistics. The same switch as `Context(TRAINING=1)` and `Tensor.training`."""
    return Context(TRAINING=int(mode))

  @property
  def is_param(self) -> bool:
    """tinygrad 0.14's name for "an optimizer updates it": `requires_grad` is not False."""
    return self.requires_grad is not False

  @is_param.setter
  def is_param(self, value: bool) -> None: self.requires_grad_(bool(value))

  def is_param_(self, is_param: bool = True) -> Tensor:
    """tinygrad 0.14's `requires_grad_`: False keeps an optimizer from updating it (a BatchNorm's running statistics),
    and takes no gradient."""
    return self.requires_grad_(bool(is_param))

  def requires_grad_(self, requires_grad: bool | None = True) -> Tensor:
    """Set `requires_grad` in place (PyTorch's habit) and return this tensor.

    True or False also makes the tensor a leaf: unless it already is a buffer, it gets one of its own,
    filled by the next realize. Two tensors built alike (two `Tensor.zeros(3)`) are one node of the
    graph, so without this two parameters would share their gradient and, once realized, their buffer."""
    if requires_grad is not None and isinstance(self.device, tuple):
      if self.uop.op is not Ops.MULTI or any(contiguous_base(s) is None for s in self.uop.src):
        low = _multi.lower(self.uop, self.device)  # each shard gets a buffer of its own
        self.uop = _multi.multi([_leaf(s, d) for s, d in zip(low.shards, self.device)], self.device, low.axis)
    elif requires_grad is not None and (leaf := _leaf(self.uop, self.device)) is not self.uop:
      self.uop = leaf
    self.requires_grad = requires_grad
    return self

  def _with_gradient(self, rule: str, *inputs: Tensor, params: tuple = ()) -> Tensor:
    """This value, differentiated with respect to `inputs` by `gradient.custom_gradients[rule]` (CUSTOM_GRADIENT)."""
    return self._new(UOp(Ops.CUSTOM_GRADIENT, self.dtype, (self.uop, *(t.uop for t in inputs)), (rule, *params)))

  def detach(self) -> Tensor:
    """The same values, cut off from the graph: no gradient flows through the result."""
    out = self._new(UOp(Ops.DETACH, self.dtype, (self.uop,)))
    out.requires_grad = False  # not requires_grad_(False): the result is no leaf of its own
    return out

  def contiguous_backward(self) -> Tensor:
    """The same values; the gradient that flows back through here is realized into its own buffer."""
    return self._new(UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self.uop,)))

  def _check_root_gradient(self, gradient: Tensor | None) -> Tensor:
    if not self.dtype.is_float: raise TypeError(f"only float tensors have gradients, this one is {self.dtype.name}")
    if contiguous_base(self.uop) is not None and self.requires_grad is not True:
      # realize() (also numpy(), item()) turns a tensor into its buffer: the graph behind it is gone
      raise RuntimeError(f"this tensor (shape {self.shape}) is already realized, so the graph it was computed "
                         "from is gone; call backward()/gradient() before .realize(), .numpy() or .item()")
    if gradient is None:
      if self.numel() != 1:  # one element of any shape, as torch's
        raise ValueError(f"backward of a tensor of shape {self.shape} needs `gradient` (dL/dself, of that shape); "
                         "without it, call backward on a scalar such as a loss or .sum()")
      return Tensor.full(self.shape, 1.0, dtype=self.dtype, device=self.device)
    if not isinstance(gradient, Tensor): raise TypeError(f"gradient must be a Tensor, got {type(gradient).__name__}")
    if gradient.shape != self.shape:
      raise ValueError(f"gradient has shape {gradient.shape} but the tensor it is for has shape {self.shape}")
    if gradient.device != self.device: raise ValueError(f"gradient is on {gradient.device}, the tensor on {self.device}")
    return gradient

  def gradient(self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: bool = False) -> list[Tensor]:
    """The gradients of this tensor with respect to `targets`, as new lazy tensors (nothing runs, no
    `.grad` changes).

    :param gradient: dL/d(self); may be left out only for a scalar (then it is 1).
    :param materialize_grads: zeros for a target this tensor does not depend on (else ValueError).
    """
    root_grad = self._check_root_gradient(gradient)
    for t in targets:
      if not isinstance(t, Tensor): raise TypeError(f"gradient targets must be Tensors, got {type(t).__name__}")
      if not t.dtype.is_float: raise TypeError(f"only float tensors have gradients, a target is {t.dtype.name}")
    grads = compute_gradient(self.uop, root_grad.uop, [t.uop for t in targets])
    out = []
    for i, t in enumerate(targets):
      if (g := grads.get(t.uop)) is not None: out.append(Tensor._from(g, t.device))
      elif materialize_grads: out.append(t.zeros_like())
      else: raise ValueError(f"target {i} (shape {t.shape}) is not used to compute this tensor, or only through "
                             "integer values or detach(); pass materialize_grads=True for zeros")
    return out

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Add the gradient of this tensor to `.grad` of every float tensor it was computed from whose
    `requires_grad` is not False (tinygrad's rule: None counts as wanted). Lazy: the gradients run
    when realized, usually by an optimizer's step, which also realizes this tensor and clears the gradients of
    tensors with requires_grad None that are still graphs (see `_BackwardOutputs`).

    :param gradient: dL/d(self); may be left out only for a scalar (then it is 1).
    """
    root_grad = self._check_root_gradient(gradient)
    _cut_gradients.check(self.uop)
    held = _handles.at  # most nodes of the graph have no tensor: skip them without a list each
    seen = [t for u in self.uop.toposort if u in held for t in _handles.tensors_at(u)]  # this tensor among them
    wanted = [t for t in seen if t.requires_grad is not False and t.dtype.is_float]
    grads = compute_gradient(self.uop, root_grad.uop, [t.uop for t in wanted])
    for t in wanted:
      g = Tensor._from(grads[t.uop], t.device) if t.uop in grads else t.zeros_like()
      if t.grad is None:
        t.grad = g
        _cut_gradients.grads[id(g)] = g
      else: t.grad.assign(t.grad + g)
    _backward_outputs.add(seen)
    return self

  # ------------------------------------------------------------------ movement

  def reshape(self, *shape: ShapeArg) -> Tensor:
    """The same data with another shape; one entry may be -1 (inferred), None keeps that axis's size."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if _plain_sizes(shape) and _plain_sizes(cur := self._uop.shape) and prod(shape) == prod(cur):
      # the common case (sizes that are ints >= 0, the element count kept): nothing to infer or check further
      return self if shape == cur else self._new(UOp(Ops.RESHAPE, self.dtype, (self._uop,), tuple(shape)))
    if None in shape:  # as tinygrad: the size of this tensor's axis at that position
      if any(s is None and i >= self.ndim for i, s in enumerate(shape)):
        raise ValueError(f"reshape {shape}: None needs an axis of {self.shape} at its position")
      shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
    if any(_is_sint(s) for s in shape) or any(isinstance(s, UOp) for s in self.shape):
      return self._reshape_symbolic(tuple(shape))
    if any(not isinstance(s, (int, np.integer)) or s < -1 for s in shape): raise ValueError(f"invalid shape {shape!r}")
    if list(shape).count(-1) > 1: raise ValueError(f"only one dimension can be -1 in {shape!r}")
    if -1 in shape:
      known = prod(s for s in shape if s != -1)
      if known == 0 or self.numel() % known: raise ValueError(f"cannot reshape {self.shape} to {shape}")
      shape = tuple(self.numel() // known if s == -1 else s for s in shape)
    shape = tuple(int(s) for s in shape)
    if prod(shape) != self.numel():
      raise ValueError(f"cannot reshape a tensor of shape {self.shape} ({self.numel()} elements) to {shape}")
    # no folding into a reshape below: that node may be another tensor, which gradients must find in
    # the graph (the scheduler folds chains of reshapes when it builds kernels)
    return self if shape == self.shape else self._new(UOp(Ops.RESHAPE, self.dtype, (self.uop,), shape))

  def _reshape_symbolic(self, shape: tuple) -> Tensor:
    """reshape where a size is a bound Variable: the element counts equal for every value of the Variables; a -1
    is inferred where the count divides exactly for every value."""
    if list(shape).count(-1) == 1:
      # cancel the symbolic sizes given against this shape's, then divide what is left
      rest, den = list(self.shape), 1
      for s in shape:
        if isinstance(s, UOp):
          if not any(r is s for r in rest):
            raise NotImplementedError(f"reshape {self.shape} to {shape}: a -1 next to a symbolic size not in the shape")
          rest.pop(next(i for i, r in enumerate(rest) if r is s))
        elif s != -1: den *= int(s)
      num = prod(rest)
      if isinstance(num, int) or den == 0: size = num // den if den and num % den == 0 else None
      else:
        size = graph_rewrite(num // den, symbolic) if den != 1 else num
        if any(n.op is Ops.IDIV for n in size.toposort): size = None
      if size is None: raise NotImplementedError(f"reshape {self.shape} to {shape}: the -1 does not divide exactly")
      shape = tuple(size if isinstance(s, int) and s == -1 else s for s in shape)
    if any(not _is_sint(s) and (not isinstance(s, (int, np.integer)) or s < 0) for s in shape):
      raise ValueError(f"invalid shape {shape!r}")
    shape = tuple(s if isinstance(s, UOp) else int(s) for s in shape)
    if not _same_size(prod(shape), self.numel()):
      raise ValueError(f"cannot reshape a tensor of shape {self.shape} to {shape}: the element counts differ")
    return self if shape == self.shape else self._new(UOp(Ops.RESHAPE, self.dtype, (self.uop,), shape))

  def view(self, *shape: ShapeArg) -> Tensor:
    """The same data with another shape (reshape's other name, as torch)."""
    return self.reshape(*shape)

  def permute(self, *order: int | Sequence[int]) -> Tensor:
    """Reorder the axes: output axis i is input axis order[i]."""
    if len(order) == 1 and isinstance(order[0], (tuple, list)): order = tuple(order[0])
    ndim = len(self._uop.shape)
    if _plain_sizes(order) and sorted(order) == list(range(ndim)): norm = tuple(order)  # the common case: as it is
    else:
      norm = tuple(_norm_axis(o, ndim) for o in order)
      if sorted(norm) != list(range(ndim)): raise ValueError(f"{order} is not a permutation of {ndim} axes")
    if norm == tuple(range(ndim)): return self
    return self._new(UOp(Ops.PERMUTE, self.dtype, (self.uop,), norm))

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    """Swap two axes."""
    order = list(range(self.ndim))
    a, b = _norm_axis(dim0, self.ndim), _norm_axis(dim1, self.ndim)
    if self.ndim == 0: return self  # axis 0 or -1 of a scalar, as torch
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Tensor:
    """The tensor with its axes reversed (a transpose for 2-D)."""
    return self.permute(tuple(range(self.ndim))[::-1])

  def expand(self, *shape: ShapeArg) -> Tensor:
    """Broadcast size-1 axes to `shape` (-1 keeps an axis); new leading axes may be added."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if len(shape) < self.ndim: raise ValueError(f"cannot expand {self.shape} to fewer dimensions {shape}")
    old = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(o if s == -1 else s for s, o in zip(shape, old))
    for o, n in zip(old, new):
      if o != n and o != 1: raise ValueError(f"cannot expand {self.shape} to {shape}: only size-1 axes can grow")
    return self._broadcast_to(new)

  def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
    if self.shape == shape: return self
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    if len(padded) != len(shape) or any(o != n and o != 1 for o, n in zip(padded, shape)):
      raise ValueError(f"cannot broadcast {self.shape} to {shape}")
    return self._new(broadcast(self.uop, shape))

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge axes start_dim..end_dim into one."""
    if self.ndim == 0: return self.reshape(1)
    s, e = _norm_axis(start_dim, self.ndim), _norm_axis(end_dim, self.ndim)
    if s > e: raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
    """Axis `dim` split into `sizes` (their product is its size)."""
    d = _norm_axis(dim, self.ndim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

  def unsqueeze(self, dim: int) -> Tensor:
    """Insert a size-1 axis at `dim`."""
    d = _norm_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def squeeze(self, dim: int | None = None) -> Tensor:
    """Drop size-1 axes (only `dim` when given; a `dim` that is not size 1 is left alone)."""
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    d = _norm_axis(dim, self.ndim)
    return self if self.ndim == 0 or self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

  def pad(self, padding: Sequence, mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad with `value` (mode 'constant') or with the tensor's own values: 'reflect' (mirror without the edge),
    'replicate' (repeat the edge), 'circular' (wrap around). `padding` is ((before, after), ...) per axis (None
    for none), or torch's flat (left, right, top, bottom, ...) starting from the last axis. Negative amounts crop."""
    if not isinstance(mode, str): raise TypeError(f"pad mode must be a string (pass the fill as value=), got {mode!r}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
      raise ValueError(f"pad mode must be 'constant', 'reflect', 'replicate' or 'circular', not {mode!r}")
    padding = tuple(padding)
    if any(isinstance(q, UOp) for p in padding for q in (p if isinstance(p, (tuple, list)) else (p,))):
      return self._pad_symbolic(padding, mode, value)
    if all(isinstance(p, (int, np.integer)) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim: raise ValueError(f"invalid flat padding {padding} for {self.shape}")
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2): pairs[self.ndim - 1 - i] = (int(padding[2 * i]), int(padding[2 * i + 1]))
    else:
      if len(padding) != self.ndim: raise ValueError(f"padding {padding} needs one entry per axis of {self.shape}")
      pairs = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]
    if any(b < 0 or a < 0 for b, a in pairs):  # negative padding crops: first, or after a reflection (torch's orders)
      crop = lambda x: x.shrink(tuple((max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(pairs, x.shape)))  # noqa: E731
      grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
      # reflect mirrors about the edges before the crop ([0, 1, 2] by (-1, 2): [1, 2, 1, 0]; cropped first, [1, 2] was
      # too short to reflect by 2); circular wraps what is left
      return crop(self.pad(grow, mode)) if mode in ("reflect", "replicate") else crop(self).pad(grow, mode, value)
    if mode == "circular": return self._pad_circular(pairs)
    if mode != "constant": return self._pad_reflect_replicate(pairs, mode)
    if all(b == 0 and a == 0 for b, a in pairs): return self
    arg = (tuple(pairs), truncate(_check_py_int(value), self.dtype))
    return self._new(UOp(Ops.PAD, self.dtype, (self.uop,), arg))

  def _pad_symbolic(self, padding: tuple, mode: str, value: float) -> Tensor:
    """A constant pad by bound Variables (a write through a symbolic view pads by them): ((before, after), ...)
    per axis, each amount nonnegative for every value."""
    if mode != "constant" or len(padding) != self.ndim or any(p is not None and len(p) != 2 for p in padding):
      raise NotImplementedError(f"pad by a Variable takes ((before, after), ...) per axis in mode 'constant': {padding}")
    pairs = tuple((0, 0) if p is None else (_index_int(p[0]), _index_int(p[1])) for p in padding)
    for b, a in pairs:
      try:
        ok = b >= 0 and a >= 0
      except TypeError:
        ok = False
      if not ok: raise ValueError(f"pad {padding} may be negative for some value of its Variables")
    return self._new(UOp(Ops.PAD, self.dtype, (self.uop,), (pairs, truncate(_check_py_int(value), self.dtype))))

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    """Keep [start, end) of each axis (None keeps the whole axis)."""
    if len(arg) != self.ndim: raise ValueError(f"shrink {arg} needs one entry per axis of {self.shape}")
    bounds = tuple((0, s) if a is None else (_index_int(a[0]), _index_int(a[1])) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(bounds, self.shape):
      try:
        ok = 0 <= b <= e <= s
      except TypeError:  # a Variable's range reaches outside the axis
        ok = False
      if not ok: raise ValueError(f"shrink {arg} is out of bounds for shape {self.shape} (for some value of a Variable)")
    if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape)): return self
    return self._new(UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds))

  def flip(self, axis: int | Sequence[int], *more: int) -> Tensor:
    """Reverse the order of elements along `axis` (an int or several: flip(0, 1) or flip((0, 1)))."""
    if more: axis = ((axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)) + more
    axes = tuple(sorted({_norm_axis(a, self.ndim) for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis)}))
    axes = tuple(a for a in axes if self.ndim and (isinstance(self.shape[a], UOp) or self.shape[a] > 1))
    return self._new(UOp(Ops.FLIP, self.dtype, (self.uop,), axes)) if axes else self

  def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
    """Join tensors along `dim` (call as a.cat(b, c), Tensor.cat(a, b, c) or Tensor.cat([a, b, c]))."""
    ts = [*self, *others] if isinstance(self, (list, tuple)) else [self, *others]
    if not ts: raise ValueError("cat needs at least one tensor")
    if ts[0] is not self: return ts[0].cat(*ts[1:], dim=dim)
    d = _norm_axis(dim, self.ndim)
    if any(t.ndim == 0 for t in ts): raise ValueError("cat of a 0-d tensor: it has no axis to join along; use stack")
    for t in ts:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ValueError(f"cat: shapes {[t.shape for t in ts]} differ outside dimension {dim}")
      if t.device != self.device: raise ValueError(f"cat: tensors on devices {self.device} and {t.device}")
    dt = ts[0].dtype
    for t in ts[1:]: dt = promote_types(dt, t.dtype)
    if any(isinstance(t.shape[d], UOp) for t in ts):
      raise NotImplementedError(f"cat along a symbolic dimension (a bound Variable) is not supported: {[t.shape for t in ts]}")
    total, offset, out = sum(t.shape[d] for t in ts), 0, None
    for t in ts:
      pads = [(0, 0)] * self.ndim
      pads[d] = (offset, total - offset - t.shape[d])
      offset += t.shape[d]
      # floats pad with -0.0, the exact identity of +: a -0.0 part stays -0.0 (0.0 + -0.0 is 0.0)
      p = t.cast(dt).pad(tuple(pads), value=-0.0 if dt.is_float else 0)
      out = p if out is None else out + p
    return out

  def stack(self, *others: Tensor, dim: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis `dim` (Tensor.stack(a, b) or Tensor.stack([a, b]))."""
    ts = [*self, *others] if isinstance(self, (list, tuple)) else [self, *others]
    if not ts: raise ValueError("stack needs at least one tensor")
    if ts[0] is not self: return ts[0].stack(*ts[1:], dim=dim)
    if any(t.shape != self.shape for t in ts): raise ValueError(f"stack needs equal shapes, got {[t.shape for t in ts]}")
    d = _norm_axis(dim, self.ndim + 1)
    return Tensor.cat(*[t.unsqueeze(d) for t in ts], dim=d)

  def repeat(self, *repeats: int) -> Tensor:
    """Tile the tensor `repeats[i]` times along each axis."""
    if len(repeats) == 1 and isinstance(repeats[0], (tuple, list)): repeats = tuple(repeats[0])
    if len(repeats) < self.ndim: raise ValueError(f"repeat needs at least {self.ndim} counts, got {repeats}")
    x = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    if isinstance(x.device, tuple) and (axis := x.shard_axis) is not None and repeats[axis] > 1:
      # along the sharded axis as copies side by side (the reshape below would split the shards), split alike again
      x = Tensor.cat(*[x] * repeats[axis], dim=axis).shard(x.device, axis)
      repeats = tuple(1 if i == axis else r for i, r in enumerate(repeats))
    inter = sum(((1, s) for s in x.shape), ())
    expanded = sum(((r, s) for r, s in zip(repeats, x.shape)), ())
    return x.reshape(inter).expand(expanded).reshape(tuple(r * s for r, s in zip(repeats, x.shape)))

  # ------------------------------------------------------------------ elementwise

  def _const_like(self, value: Any, dtype: DType | None = None) -> Tensor:
    return Tensor._from(_const_at(dtype or self.dtype, value, self.shape), self.device)

  def _binary_operands(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    """The operands of a binary op (self first, unless `reverse`) in their common dtype and shape."""
    if isinstance(other, Tensor) and other.dtype == self.dtype and other.shape == self.shape and \
        other.device == self.device:
      return (other, self) if reverse else (self, other)  # the common case: the tensors themselves
    a, b = self._operand_nodes(other, reverse)
    return Tensor._make(a, self.device), Tensor._make(b, self.device)

  def _operand_nodes(self, other: Any, reverse: bool = False) -> tuple[UOp, UOp]:
    """The nodes of `_binary_operands`, cast and broadcast without a tensor for each step (a step of eager code makes
    many: a bias added, a norm's statistics applied, an optimizer's learning rate)."""
    if isinstance(other, Tensor):
      if other.device != self.device:
        fix = ("shard both over the same devices (.shard(devices, axis), or .to(devices) for a copy on each)"
               if isinstance(self.device, tuple) or isinstance(other.device, tuple) else "move one with .to()")
        raise ValueError(f"operands are on different devices ({self.device} and {other.device}); {fix}")
      dt, y = promote_types(self.dtype, other.dtype), other._uop
      if dt != self.dtype and dt != other.dtype: _check_dtype_on(self.device, dt)
    elif isinstance(other, (bool, int, float, np.generic)):
      dt = result_type_with_scalar(self.dtype, other)
      value = other.item() if isinstance(other, np.generic) else _check_py_int(other)
      if dt != self.dtype: _check_dtype_on(self.device, dt)
      # the constant is made at the operand's shape at once: no reshape and expand of it
      y = _const_at(dt, value, self.shape)
    else:
      raise TypeError(f"unsupported operand type {type(other).__name__} for a Tensor operation")
    x = self._uop
    if x.dtype != dt: x = UOp(Ops.CAST, dt, (x,))
    if y.dtype != dt: y = UOp(Ops.CAST, dt, (y,))
    if x.shape != y.shape:
      out = broadcast_shape(x.shape, y.shape)
      x, y = broadcast(x, out), broadcast(y, out)
    return (y, x) if reverse else (x, y)

  def _alu(self, op: Ops, *srcs: Tensor, dtype: DType | None = None) -> Tensor:
    return self._new(UOp(op, dtype or self.dtype, (self._uop, *[s._uop for s in srcs])))

  def _bin(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
    if type(other) in (int, float) and (dt := result_type_with_scalar(self.dtype, other)) is self.dtype:
      # `x * 2` in the dtype of x, the commonest op of eager code: the constant joins the node, no tensor is made for it
      c = _const_at(dt, _check_py_int(other), self.shape)
      srcs = (c, self._uop) if reverse else (self._uop, c)
      return self._new(UOp(op, dtypes.bool if op in GroupOp.Comparison else dt, srcs))
    a, b = self._operand_nodes(other, reverse)
    return self._new(UOp(op, dtypes.bool if op in GroupOp.Comparison else a.dtype, (a, b)))

  def cast(self, dtype: DType | str) -> Tensor:
    """Convert values to `dtype`."""
    dt = dtypes.from_any(dtype)
    return self if dt == self.dtype else self._new(UOp(Ops.CAST, dt, (self.uop,)))

  def bitcast(self, dtype: DType | str) -> Tensor:
    """Reinterpret the bits as `dtype`, as numpy's `view(dtype)`. With another item size the last axis changes
    length: its items are cut into `dtype`'s, or joined from them, in little-endian order (a float32 row of 4 becomes
    16 uint8; 2 float16 become one float32). The last axis's bytes must split into whole items of `dtype`."""
    dt = dtypes.from_any(dtype)
    if dt == self.dtype: return self
    if dt.itemsize == self.dtype.itemsize: return self._new(UOp(Ops.BITCAST, dt, (self.uop,)))
    return _bitcast_resized(self, dt)

  def float(self) -> Tensor:
    """A cast to float32."""
    return self.cast(dtypes.float32)
  def half(self) -> Tensor:
    """A cast to float16."""
    return self.cast(dtypes.float16)
  def int(self) -> Tensor:
    """A cast to int32 (floats truncate toward zero)."""
    return self.cast(dtypes.int32)
  def bool(self) -> Tensor:
    """A cast to bool (nonzero is True)."""
    return self.cast(dtypes.bool)
  def double(self) -> Tensor:
    """A cast to float64."""
    return self.cast(dtypes.float64)
  def bfloat16(self) -> Tensor:
    """A cast to bfloat16."""
    return self.cast(dtypes.bfloat16)
  def long(self) -> Tensor:
    """A cast to int64 (floats truncate toward zero)."""
    return self.cast(dtypes.int64)
  def short(self) -> Tensor:
    """A cast to int16 (floats truncate toward zero)."""
    return self.cast(dtypes.int16)

  def _float(self) -> Tensor: return self if self.dtype.is_float else self.cast(dtypes.default_float)
  def _wide(self) -> Tensor: return self.cast(dtypes.float32) if self.dtype in (dtypes.float16, dtypes.bfloat16) else self

  def add(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise self + x (broadcast, promoted as torch); `reverse` computes x + self."""
    return self._bin(Ops.ADD, x, reverse)
  def sub(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise self - x (broadcast, promoted as torch); `reverse` computes x - self."""
    a, b = self._operand_nodes(x, reverse)
    if a.dtype == dtypes.bool: raise TypeError("subtraction of bool tensors is not supported; use ^ or logical_not")
    return self._new(UOp(Ops.SUB, a.dtype, (a, b)))
  def mul(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise self * x (broadcast, promoted as torch); `reverse` computes x * self."""
    return self._bin(Ops.MUL, x, reverse)

  def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (integers give float32); rounding_mode 'trunc' or 'floor' rounds the quotient."""
    if rounding_mode is None:  # the common case: one node over the operands' (no tensor for a cast)
      a, b = self._operand_nodes(x, reverse)
      if not a.dtype.is_float: a, b = UOp(Ops.CAST, dtypes.default_float, (a,)), UOp(Ops.CAST, dtypes.default_float, (b,))
      return self._new(UOp(Ops.FDIV, a.dtype, (a, b)))
    if rounding_mode not in ("trunc", "floor"):
      raise ValueError(f"rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
    a, b = self._binary_operands(x, reverse)
    if rounding_mode == "floor": return a._floordiv(b)
    return a._alu(Ops.IDIV, b) if a.dtype.is_int else a._alu(Ops.FDIV, b).trunc()

  def _floordiv(self, b: Tensor) -> Tensor:
    if self.dtype.is_float: return self._float_floordiv(b)
    if self.dtype == dtypes.bool: raise TypeError("floor division of bool tensors is not supported")
    q = self._alu(Ops.IDIV, b)
    if self.dtype.is_unsigned: return q
    # truncation rounds toward zero; floor differs when the signs differ and there is a remainder
    fix = (self._alu(Ops.MOD, b)._bin(Ops.CMPNE, 0)) & ((self < 0) ^ (b < 0))
    return q - fix.cast(q.dtype)

  def _float_floordiv(self, b: Tensor) -> Tensor:
    """torch's div_floor_floating: the quotient from the exact fmod remainder, so an exact multiple is not
    rounded up (5. // 0.2 is 24, since 0.2 is a little more than 1/5), x // 0 is the IEEE a / b, inf // x NaN."""
    if self.dtype.itemsize < 4: return self.float()._float_floordiv(b.float()).cast(self.dtype)  # torch: in float
    mod = self._alu(Ops.MOD, b)
    div = (self - mod)._alu(Ops.FDIV, b)
    div = ((mod != 0) & ((b < 0) ^ (mod < 0))).where(div - 1, div)
    fl = div.floor()
    fl = ((div - fl) > 0.5).where(fl + 1, fl)
    q = self._alu(Ops.FDIV, b)
    # a zero quotient keeps the sign of a / b (finite here, so q * 0 is that signed zero)
    return (b == 0).where(q, (div != 0).where(fl, q * 0.0))

  def floordiv(self, x: Any, reverse: bool = False) -> Tensor:
    """Floor division (Python's //); on floats exactly torch.floor_divide's values."""
    a, b = self._binary_operands(x, reverse)
    return a._floordiv(b)

  def mod(self, x: Any, reverse: bool = False) -> Tensor:
    """Remainder with the sign of the divisor (Python's and numpy's %)."""
    a, b = self._binary_operands(x, reverse)
    if a.dtype.is_float:
      if a.dtype.itemsize < 4: return a.float().mod(b.float()).cast(a.dtype)  # torch computes halves in float
      # torch's remainder: the exact fmod, moved into the divisor's sign (x % 0 is NaN, 1 % inf is 1, -1 % inf is inf)
      r = a._alu(Ops.MOD, b)
      return ((r != 0) & ((b < 0) ^ (r < 0))).where(r + b, r)
    if a.dtype == dtypes.bool: raise TypeError("modulo of bool tensors is not supported")
    r = a._alu(Ops.MOD, b)
    if a.dtype.is_unsigned: return r
    fix = (r._bin(Ops.CMPNE, 0)) & ((r < 0) ^ (b < 0))
    return fix.where(r + b, r)

  def pow(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise power; integer exponents of float bases multiply exactly, negative bases work, and x ** 0.5 and
    x ** -0.5 are sqrt and 1 / sqrt, as torch's (within half an ulp where exp2(b log2 x) was off by up to 4; -0.0 and
    -inf give torch's -0.0 and NaN, -inf and NaN). Integer tensors to integer powers are exact and wrap as torch's;
    a negative Python int power of an integer tensor is refused, as torch and tinygrad refuse it (an integer tensor
    of exponents follows torch: 0, or +-1 for a base of +-1)."""
    if not reverse and isinstance(x, float) and x in (0.5, -0.5): return self.sqrt() if x > 0 else self.rsqrt()
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and self.dtype != dtypes.bool:
      if self.dtype.is_int and isinstance(x, int):  # exact for any exponent (a float one promotes, as x * 2.0 does)
        if x < 0:
          raise ValueError(f"an integer tensor ({self.dtype.name}) to the negative power {x}: integers to negative integer "
                           f"powers are not allowed (as in torch); cast to a float first (t.float() ** {x})")
        return self._square_and_multiply(x)
      if self.dtype.is_float and float(x).is_integer() and abs(x) <= 16:
        acc = self._square_and_multiply(int(abs(x)))
        return acc if x >= 0 else acc.reciprocal()
    a, b = self._binary_operands(x, reverse)
    if a.dtype == dtypes.bool: return a.cast(dtypes.int32)._int_pow(b.cast(dtypes.int32)).cast(dtypes.bool)
    if a.dtype.is_int: return a._int_pow(b)
    if a.dtype != (w := a._wide()).dtype: return w.pow(b._wide()).cast(a.dtype)  # halves in float32, as torch
    # |a|**b via exp2/log2, then the sign for negative bases with odd integer exponents, NaN for other negative bases
    # at a == 0, log2 sees 1 and |a|**b is chosen directly (0, inf or NaN): the gradient stays finite there
    zero = a == 0
    at_zero = (b < 0).where(float("inf"), (b > 0).where(0.0, float("nan")))
    mag = zero.where(at_zero, (b * zero.where(1, a.abs()).log2()).exp2())
    b_int = b.trunc() == b
    odd = b_int & ((b.abs() * 0.5).trunc() * 2 != b.abs())
    neg = a < 0
    out = neg.where(b_int.where(odd.where(-mag, mag), float("nan")), mag)
    out = ((a == float("-inf")) | ((a == 0) & (a.reciprocal() < 0))).where(odd.where(-mag, mag), out)  # -inf and -0.0
    # only where the formula gave NaN: a constant 1 elsewhere would cut the gradient (d/da at a == 1 is b)
    one = (b == 0) | (a == 1) | ((a == -1) & (b.abs() == float("inf")))
    return (one & (out != out)).where(1.0, out)

  def _square_and_multiply(self, n: int) -> Tensor:
    """self ** n for a Python int n >= 0: log2(n) multiplications, exact for integers (wrapping as torch's)."""
    acc, p = None, self
    while n:
      if n & 1: acc = p if acc is None else acc * p
      p, n = p * p, n >> 1
    return acc if acc is not None else self.ones_like()

  def _int_pow(self, b: Tensor) -> Tensor:
    """self ** b for integer tensors of one dtype, exact (wrapping as torch's): square and multiply over every bit of
    the exponent, which float32's exp2(b log2 a) rounded (10 ** 9 was 999999552). A negative exponent gives torch's
    0, except 1 for a base of 1 and +-1 for -1."""
    acc, p = self.ones_like(), self
    signed = not b.dtype.is_unsigned
    e = (b < 0).where(0, b) if signed else b
    for _ in range(b.dtype.itemsize * 8 - signed):
      acc = (e & 1).cast(dtypes.bool).where(acc * p, acc)
      p, e = p * p, e >> 1
    if not signed: return acc
    at_negative = (self == 1).where(1, (self == -1).where((b & 1).cast(dtypes.bool).where(-1, 1), 0))
    return (b < 0).where(at_negative.cast(acc.dtype), acc)

  def round_half_away(self) -> Tensor:
    """Elementwise rounding to the nearest integer, halves away from 0."""
    return (self < 0).where(-((-self) + 0.5).trunc(), (self + 0.5).trunc())

  def __add__(self, x): return self.add(x)
  def __radd__(self, x): return self.add(x, True)
  def __sub__(self, x): return self.sub(x)
  def __rsub__(self, x): return self.sub(x, True)
  def __mul__(self, x): return self.mul(x)
  def __rmul__(self, x): return self.mul(x, True)
  def __truediv__(self, x): return self.div(x)
  def __rtruediv__(self, x): return self.div(x, True)
  def __floordiv__(self, x): return self.floordiv(x)
  def __rfloordiv__(self, x): return self.floordiv(x, True)
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, True)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, True)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return Tensor(x, device=self.device).matmul(self) if not isinstance(x, Tensor) else x.matmul(self)
  def __neg__(self): return self.neg()
  def __abs__(self): return self.abs()
  def __and__(self, x): return self._logic(Ops.AND, x)
  def __rand__(self, x): return self._logic(Ops.AND, x, True)
  def __or__(self, x): return self._logic(Ops.OR, x)
  def __ror__(self, x): return self._logic(Ops.OR, x, True)
  def __xor__(self, x): return self._logic(Ops.XOR, x)
  def __rxor__(self, x): return self._logic(Ops.XOR, x, True)
  def __lshift__(self, x): return self._logic(Ops.SHL, x)
  def __rshift__(self, x): return self._logic(Ops.SHR, x)
  def __invert__(self) -> Tensor:
    if self.dtype.is_float: raise TypeError("~ is only defined for bool and integer tensors")
    return self.logical_not() if self.dtype == dtypes.bool else self ^ -1 if not self.dtype.is_unsigned else self ^ self.dtype.max
  def __lt__(self, x): return self._bin(Ops.CMPLT, x)
  def __gt__(self, x): return self._bin(Ops.CMPLT, x, True)
  def __le__(self, x): return self._cmp_or_equal(x, True)
  def __ge__(self, x): return self._cmp_or_equal(x, False)

  def _cmp_or_equal(self, x: Any, reverse: bool) -> Tensor:
    """a <= b (reverse) or a >= b: not(b < a) for integers; on floats (b < a) or a == b, since NaN
    compares false with everything (NaN >= 1 is False, not "not less")."""
    a, b = self._operand_nodes(x)
    lo, hi = (a, b) if reverse else (b, a)
    less = UOp(Ops.CMPLT, dtypes.bool, (hi, lo) if not a.dtype.is_float else (lo, hi))
    if not a.dtype.is_float: return self._new(UOp(Ops.CMPNE, dtypes.bool, (less, _const_at(dtypes.bool, True, less.shape))))
    return self._new(UOp(Ops.OR, dtypes.bool, (less, UOp(Ops.CMPEQ, dtypes.bool, (a, b)))))
  def __eq__(self, x): return self._bin(Ops.CMPEQ, x)  # type: ignore[override]
  def __ne__(self, x): return self._bin(Ops.CMPNE, x)  # type: ignore[override]

  def _logic(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._operand_nodes(x, reverse)
    if a.dtype.is_float: raise TypeError(f"{op.name.lower()} is only defined for bool and integer tensors, not {a.dtype.name}")
    return self._new(UOp(op, a.dtype, (a, b)))

  def logical_not(self) -> Tensor:
    """True where the value is zero/False."""
    return self.cast(dtypes.bool)._bin(Ops.CMPNE, True)
  def logical_and(self, x: Any) -> Tensor:
    """Elementwise and of truth values (a bool tensor)."""
    return self.cast(dtypes.bool) & (x.cast(dtypes.bool) if isinstance(x, Tensor) else bool(x))
  def logical_or(self, x: Any) -> Tensor:
    """Elementwise or of truth values (a bool tensor)."""
    return self.cast(dtypes.bool) | (x.cast(dtypes.bool) if isinstance(x, Tensor) else bool(x))

  def neg(self) -> Tensor:
    """Elementwise -x."""
    if self.dtype == dtypes.bool: raise TypeError("negation of a bool tensor is not supported; use logical_not")
    return self._alu(Ops.NEG)
  def abs(self) -> Tensor:
    """Elementwise absolute value (+0.0 for both zeros, as torch)."""
    if self.dtype.is_unsigned or self.dtype == dtypes.bool: return self
    # floats: a zero (also -0.0) becomes the constant +0.0, as torch's abs, whose gradient there is 0, as torch's
    if self.dtype.is_float: return (self == 0).where(0.0, (self < 0).where(-self, self))
    return (self < 0).where(-self, self)
  def sign(self) -> Tensor:
    """-1, 0 or 1 (0 for NaN); a bool is its own sign, as in torch."""
    if self.dtype == dtypes.bool: return self
    out = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
    return out._with_gradient("constant", self) if self.dtype.is_float else out  # made of compares: zeros, as torch
  def reciprocal(self) -> Tensor:
    """Elementwise 1 / x."""
    return self._float()._alu(Ops.RECIP)
  def sqrt(self) -> Tensor:
    """Elementwise square root (NaN below 0)."""
    return self._float()._alu(Ops.SQRT)
  def rsqrt(self) -> Tensor:
    """Elementwise 1 / sqrt(x)."""
    return self.sqrt().reciprocal()
  def exp2(self) -> Tensor:
    """Elementwise 2**x."""
    return self._float()._alu(Ops.EXP2)
  def log2(self) -> Tensor:
    """Elementwise base-2 logarithm (-inf at 0, NaN below)."""
    return self._float()._alu(Ops.LOG2)
  # composite math on halves runs in float32 and rounds once (torch's opmath): a half x / ln 2 alone is off by 0.5%
  def exp(self) -> Tensor:
    """Elementwise e**x."""
    x = self._float()
    return (x._wide() * (1 / math.log(2))).exp2().cast(x.dtype)
  def log(self) -> Tensor:
    """Elementwise natural logarithm (-inf at 0, NaN below)."""
    x = self._float()
    return (x._wide().log2() * math.log(2)).cast(x.dtype)
  def sin(self) -> Tensor:
    """Elementwise sine (radians)."""
    return self._float()._alu(Ops.SIN)
  def cos(self) -> Tensor:
    """cos: the device's own where its renderer takes COS (the CPU's is one polynomial after the reduction, as its sin),
    else made of sins without rounding x first (`plugrad.codegen.lowerer.cos_from_sin`)."""
    return self._float()._alu(Ops.COS)
  def tan(self) -> Tensor:
    """Elementwise tangent (radians)."""
    return self.sin() / self.cos()
  def trunc(self) -> Tensor:
    """Elementwise rounding toward zero (integers unchanged)."""
    return self if not self.dtype.is_float else self._alu(Ops.TRUNC)
  def floor(self) -> Tensor:
    """Elementwise floor (integers unchanged)."""
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    """Elementwise ceiling (integers unchanged)."""
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def square(self) -> Tensor:
    """Elementwise x * x."""
    return self * self
  def sigmoid(self) -> Tensor:
    """Elementwise 1 / (1 + e**-x)."""
    x = self._float()
    xw = x._wide()
    # differentiated as s(1 - s): the chain rule through 1/(1 + e^-x) multiplies 0 by e^-x = inf below x = -88
    return (1 + (-xw).exp()).reciprocal()._with_gradient("sigmoid", xw).cast(x.dtype)
  def tanh(self) -> Tensor:
    """tanh within 2 ulp (torch's: 0.5): x (1 + x² P(x²)) below |x| = TANH_POLY_BELOW (P a fit of tanh(x)/x),
    1 - 2 / (e^2|x| + 1) with x's sign above, where the result is at least 0.55 (2 sigmoid(2x) - 1 cancelled: 900
    ulps of error at x = 0.001). Differentiated as 1 - tanh², from the output."""
    f = self._float()
    x = f._wide()
    big = 1 - 2 / ((2 * x.abs()).exp() + 1)  # e^2|x| = inf above 44: exactly 1
    # x * (...), not x + x * (...): -0.0 stays -0.0
    out = (x.abs() < TANH_POLY_BELOW).where(x._odd_series([1, *TANH_POLY]), (x < 0).where(-big, big))
    return out._with_gradient("tanh", x).cast(f.dtype)
  # a where, not maximum(x, 0) (whose gradient splits at the tie); differentiated by core/gradient.py's "relu" rule
  def relu(self) -> Tensor:
    """max(x, 0) as torch: NaN and -0.0 pass through (0 only where x < 0). The gradient is torch's too: 0 where the
    output is 0 (x <= 0), the incoming one elsewhere (NaN included); taken from the output, so a kernel that makes x
    can write relu(x) alone (a convolution followed by relu: no second pass over x for the gradient's mask)."""
    if not self.dtype.is_float: return (self > 0).where(self, 0)
    return (self < 0).where(0, self)._with_gradient("relu", self)
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
    """x above 0, neg_slope * x elsewhere (so the gradient at 0 is neg_slope, as torch's)."""
    return (self > 0).where(self, self * neg_slope)
  @_halves_in_float32  # x * sigmoid(x) rounded twice: 1023 of 4096 float16 results off torch's
  def silu(self) -> Tensor:
    """Elementwise x * sigmoid(x)."""
    return self * self.sigmoid()
  swish = silu
  @_halves_in_float32  # as silu (1402 of 4096 off)
  def gelu(self, approximate: str = "tanh") -> Tensor:
    """GELU: the tanh approximation by default (as tinygrad), the exact x * Phi(x) with approximate='none'."""
    x = self._float()
    # Phi(x) as erfc(-x/sqrt 2)/2, not (1 + erf)/2: that cancels to nothing for x < -4 (erf's error is absolute)
    if approximate == "none": return 0.5 * x * (x * (-1 / math.sqrt(2))).erfc()
    if approximate != "tanh": raise ArgumentError(f"gelu approximate must be 'tanh' or 'none', not {approximate!r}")
    # 0.5 x (1 + tanh z) is x sigmoid(2z): half the ops of tanh's form, and no 1 + tanh z cancelling to a few bits
    # for negative x (relative error 1.3e-6 against 5e-5 for torch's, which computes that form)
    return x * ((2 * math.sqrt(2 / math.pi)) * (x + 0.044715 * x * x * x)).sigmoid()
  def softplus(self, beta: float = 1.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, as max(bx, 0) + log1p(exp(-|bx|)): no overflow for large inputs."""
    bx = self._float() * beta
    # maximum, not relu: its tie at 0 gives the gradient sigmoid(0) = 1/2 there, as torch's
    return (bx.maximum(0) + (-bx.abs()).exp()._log1p()) * (1 / beta)

  def maximum(self, x: Any) -> Tensor:
    """Elementwise maximum with x (NaN if either is NaN, as torch)."""
    return self._bin(Ops.MAX, x)
  def minimum(self, x: Any) -> Tensor:
    """Elementwise minimum with x (NaN if either is NaN, as torch)."""
    return self._bin(Ops.MIN, x)
  def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
    """Limit values to [min_, max_] (either may be None)."""
    if min_ is None and max_ is None: raise ValueError("clip needs at least one of min_ and max_")
    # wheres, not maximum/minimum: the gradient is 1 on the bounds too, as torch's (a tie would halve it)
    x = self if min_ is None else (self < min_).where(min_, self)
    return x if max_ is None else (x > max_).where(max_, x)
  clamp = clip

  def where(self, x: Any, y: Any) -> Tensor:
    """Elementwise `x if self else y` (self is used as a condition)."""
    cond = self.cast(dtypes.bool)
    if (alike := cond._where_alike(x, y)) is not None: return alike
    if isinstance(x, Tensor): (xs, ys), device = x._operand_nodes(y), x.device
    elif isinstance(y, Tensor): (ys, xs), device = y._operand_nodes(x), y.device
    else:
      dt = promote_types(dtypes.from_py(x), dtypes.from_py(y))
      xs, ys, device = Tensor(x, device=self.device, dtype=dt).uop, Tensor(y, device=self.device, dtype=dt).uop, self.device
    if device != self.device: raise ValueError(f"where: condition on {self.device}, values on {device}")
    out = broadcast_shape(cond.shape, xs.shape)
    return cond._new(UOp(Ops.WHERE, xs.dtype, (broadcast(cond.uop, out), broadcast(xs, out), broadcast(ys, out))))

  def _where_alike(self, x: Any, y: Any) -> Tensor | None:
    """`where` on the bool tensor self when the values are tensors of its shape and device and of one dtype, or
    Python numbers that stay in that dtype (relu's `where(x, 0)`): the node those operands make, built at once
    without tensors for casts, broadcasts and constants. None for any other operands."""
    ref = x if isinstance(x, Tensor) else y
    if not isinstance(ref, Tensor) or isinstance(self.device, tuple): return None
    srcs = [self._uop]
    for v in (x, y):
      if isinstance(v, Tensor):
        if v.dtype is not ref.dtype or v.device != self.device or v.shape != self.shape: return None
        srcs.append(v._uop)
      elif type(v) in (int, float, bool) and result_type_with_scalar(ref.dtype, v) is ref.dtype:
        srcs.append(_const_at(ref.dtype, _check_py_int(v), self.shape))
      else: return None
    return ref._new(UOp(Ops.WHERE, ref.dtype, tuple(srcs)))

  # ------------------------------------------------------------------ reductions

  def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    ndim = len(self._uop.shape)
    if axis is None: return tuple(range(ndim))
    if type(axis) is int and -ndim <= axis < ndim: return (axis % ndim,)  # the common case, without _norm_axis
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    norm = tuple(_norm_axis(a, ndim) for a in axes)
    if len(set(norm)) != len(norm): raise ValueError(f"repeated axis in {axis}")
    return tuple(sorted(norm)) if ndim else ()

  def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
    axes = self._axes(axis)
    if not axes: return self
    u = self._uop
    n = prod(map(u.shape.__getitem__, axes))
    if op is not Ops.MUL and isinstance(n, int) and (u.op in _BROADCAST_OPS or u.op is Ops.CONST) and \
        (c := _broadcast_const(u)) is not None:
      # a constant broadcast (ones(10**12).sum()) reduces to c*n or c, rounded once: no kernel, on any device
      value = (c and n > 0 if self.dtype == dtypes.bool else c * n) if op is Ops.ADD else c
      r = Tensor.full(tuple(1 if i in axes else s for i, s in enumerate(self.shape)), truncate(value, self.dtype),
                      dtype=self.dtype, device=self.device).uop
    elif _may_split(n, self.device) and (split := self._split_reduce(op, axes, n)) is not None: r = split.uop
    elif (chunks := self._column_chunks(axes, n)) > 1: r = self._split_columns(op, axes, chunks).uop
    else: r = UOp(Ops.REDUCE_AXIS, self.dtype, (u,), (op, axes))
    if keepdim: return self._new(r)
    out = tuple(s for i, s in enumerate(self.shape) if i not in axes)
    if any(isinstance(s, UOp) for s in out): return self._new(r).reshape(out)  # a symbolic size: reshape checks it
    # the node reshape() makes, without a tensor for the reduction or checks of a shape right by construction
    return self._new(UOp(Ops.RESHAPE, self.dtype, (r,), out) if r.shape != out else r)

  def _split_reduce(self, op: Ops, axes: tuple[int, ...], size: int) -> Tensor | None:
    """A large reduction to a few values, as two: `chunks` partial results (realized, so devices
    run the chunks in parallel), then their reduction. None when the reduction is not worth it. `size`: the count
    reduced into each value, at least SPLIT_REDUCE_MIN (the caller checks)."""
    if isinstance(self.numel(), UOp): return None  # one kernel for every value of a Variable
    if self.numel() // size > SPLIT_REDUCE_MAX_OUTPUT: return None
    keep = [i for i in range(self.ndim) if i not in axes]
    kept = tuple(self.shape[i] for i in keep)
    x = self.permute(keep + list(axes))
    # the chunks are the first reduced axes whole and a divisor of the next one, so each chunk holds whole rows of
    # the rest and its inner loop reads them contiguously (a batch norm's statistics over (N, H, W): N in chunks,
    # each H*W row in vectors); chunks cut across rows divided every element's index (128x32x24x24 over (0, 2, 3)
    # on CPU: 0.90 -> 0.08 ms). Only where no axis splits so, chunks of the flattened reduction.
    red = [self.shape[i] for i in axes]
    for p, size_p in enumerate(red):
      whole, rest = prod(red[:p]), prod(red[p + 1:])
      d = next((d for d in range(256 // whole, 0, -1)
                if size_p % d == 0 and 16 <= whole * d and size // (whole * d) >= 1024), None)
      if d is not None:
        x = x.reshape(kept + tuple(red[:p]) + (d, size_p // d) + ((rest,) if rest > 1 else ()))
        chunk_axes = tuple(range(len(kept), len(kept) + p + 1))
        break
    else:
      chunks = next((k for k in range(256, 15, -1) if size % k == 0 and size // k >= 1024), None)
      if chunks is None: return None
      x, chunk_axes = x.reshape(kept + (chunks, size // chunks)), (len(kept),)
    return self._reduce_in_two(x, op, tuple(range(chunk_axes[-1] + 1, x.ndim)), chunk_axes, axes)

  def _reduce_in_two(self, x: Tensor, op: Ops, within: tuple[int, ...], across: tuple[int, ...],
                     axes: tuple[int, ...]) -> Tensor:
    """This tensor reduced over `axes` as `x` (a view of it with those axes cut into chunks) reduced over `within` each
    chunk, realized (so devices run the chunks in parallel), then over the chunks `across`; in the keepdim layout."""
    partial = x._new(UOp(Ops.REDUCE_AXIS, x.dtype, (x.uop,), (op, within))).contiguous()
    total = partial._new(UOp(Ops.REDUCE_AXIS, x.dtype, (partial.uop,), (op, across)))
    # back to the keepdim layout: the kept axes in place, 1 where axes were reduced
    return total.reshape(tuple(1 if i in axes else s for i, s in enumerate(self.shape)))

  def _column_chunks(self, axes: tuple[int, ...], size: Any) -> int:
    """Partial results per output (4 or more, else 1) for a reduction over leading axes on a device with launch
    indices, where its outputs alone are too few threads. Each thread then reads down a column beside its
    neighbours' (sum(0) of 4096x4096 float32 on an H200: one thread per column or a work-group per column
    110-116 us)."""
    if not isinstance(size, int) or size < 4 * COLUMN_SPLIT_MIN_TERMS or axes != tuple(range(len(axes))) or \
        len(axes) == self.ndim or isinstance(self.device, tuple) or not isinstance(numel := self.numel(), int):
      return 1
    if not get_registry().device(self.device).caps.launch_dims: return 1
    out, chunks = numel // size, 1
    while out * chunks * 2 <= COLUMN_SPLIT_THREADS and size % (chunks * 2) == 0 and \
        size // (chunks * 2) >= COLUMN_SPLIT_MIN_TERMS:
      chunks *= 2
    return chunks if chunks >= 4 else 1

  def _split_columns(self, op: Ops, axes: tuple[int, ...], chunks: int) -> Tensor:
    """The reduction over the leading `axes` as two: `chunks` partial results per output (realized, laid out
    (chunks, outputs) so neighbouring threads write and read neighbouring elements), then their reduction."""
    return self._reduce_in_two(self.reshape((chunks, -1) + self.shape[len(axes):]), op, (1,), (0,), axes)

  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Sum over `axis` (all axes when None). Bools and integers sum as int64 (torch's rule), halves accumulate
    in float32 and return their own dtype; `dtype` casts the input first and sums in that type."""
    return self._accumulate(Ops.ADD, axis, keepdim, dtype)

  def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Product over `axis`, with sum's dtype rules."""
    return self._accumulate(Ops.MUL, axis, keepdim, dtype)

  def _accumulate(self, op: Ops, axis, keepdim: bool, dtype: DType | str | None) -> Tensor:
    # torch: the input is cast to `dtype` (default: int64 for ints, itself for floats); half floats, whether
    # the input's or the asked-for type, accumulate in float32 and round once at the end
    out_dt = dtypes.from_any(dtype) if dtype is not None else _sum_dtype(self.dtype)
    if out_dt is self.dtype and out_dt not in (dtypes.float16, dtypes.bfloat16):  # nothing to cast (float32, int64)
      return self._reduce(op, axis, keepdim)
    acc = dtypes.float32 if out_dt in (dtypes.float16, dtypes.bfloat16) else out_dt
    return self.cast(out_dt).cast(acc)._reduce(op, axis, keepdim).cast(out_dt)

  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Largest value over `axis`."""
    self._check_nonempty(axis, "max")
    return self._reduce(Ops.MAX, axis, keepdim)

  def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Smallest value over `axis`."""
    self._check_nonempty(axis, "min")
    return self._reduce(Ops.MIN, axis, keepdim)

  def _check_nonempty(self, axis, name: str) -> None:
    if any(self.shape[a] == 0 for a in self._axes(axis)): raise ValueError(f"{name} of an empty axis has no identity")

  def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Mean over `axis` (integers give float32)."""
    x = self._float()
    n = prod(self.shape[a] for a in self._axes(axis))
    s = x._wide().sum(axis, keepdim)  # halves: the sum may pass 65504 when the mean does not
    if isinstance(n, UOp): return (s / Tensor._from(n, self.device).cast(s.dtype)).cast(x.dtype)  # a count known at launch
    return (s * (1 / n) if n else s * float("nan")).cast(x.dtype)

  def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """Variance over `axis` with `correction` (1: the unbiased estimate, like torch)."""
    x = self._float()._wide()  # halves in float32 (torch's opmath): squares overflow half long before the variance
    n = prod(self.shape[a] for a in self._axes(axis))
    sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    if isinstance(n, UOp): return (sq / Tensor._from(n - correction, self.device).cast(sq.dtype)).cast(self._float().dtype)
    # no degrees of freedom left: a division by 0 (inf, or NaN for constant values), as torch and tinygrad
    return (sq * (1 / (n - correction)) if n - correction > 0 else sq * math.inf).cast(self._float().dtype)

  def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """Standard deviation over `axis`; its gradient is 0 where it is 0 (torch's; the chain rule gives 0 * inf)."""
    v = self.var(axis, keepdim, correction)
    zero = v == 0
    return zero.where(0.0, zero.where(1.0, v).sqrt())

  def _arg_best(self, axis: int | None, keepdim: bool, best: Tensor) -> Tensor:
    if axis is None:
      return self.flatten()._arg_best(0, False, best.flatten()).reshape((1,) * self.ndim if keepdim else ())
    ax = _norm_axis(axis, self.ndim)
    n = self.shape[ax]
    if n == 0: raise ValueError("argmax/argmin of an empty axis")
    # the first position holding the best value: positions count down from n, the largest wins. Built as nodes, one
    # tensor before the max (an accuracy's argmax on every eager step: 76 -> 31 us to build)
    x, b, i32 = self._uop, broadcast(best._uop, self.shape), dtypes.int32
    hit = UOp(Ops.CMPEQ, dtypes.bool, (x, b))
    if self.dtype.is_float:  # a NaN is the max (and min), like numpy
      nan = UOp(Ops.AND, dtypes.bool, (UOp(Ops.CMPNE, dtypes.bool, (x, x)), UOp(Ops.CMPNE, dtypes.bool, (b, b))))
      hit = UOp(Ops.OR, dtypes.bool, (hit, nan))
    if isinstance(n, UOp):  # a symbolic length: its positions and its value at launch
      countdown, total = Tensor.arange(n, 0, -1, dtype=i32, device=self.device).uop, Tensor._from(n, self.device)
    else: countdown, total = UOp(Ops.SUB, i32, (_const_at(i32, n, (n,)), UOp(Ops.ARANGE, i32, (), n))), n
    countdown = broadcast(UOp(Ops.RESHAPE, i32, (countdown,), (n,) + (1,) * (self.ndim - ax - 1)), self.shape)
    score = Tensor._from(UOp(Ops.WHERE, i32, (hit, countdown, _const_at(i32, 0, self.shape))), self.device)
    return (total - score.max(ax, keepdim)).cast(i32)

  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first largest value along `axis` (of the flattened tensor when None)."""
    best = self.max(axis, keepdim=True) if axis is not None else self.max()
    return self._arg_best(axis, keepdim, best)

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first smallest value along `axis`."""
    best = self.min(axis, keepdim=True) if axis is not None else self.min()
    return self._arg_best(axis, keepdim, best)

  def softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, computed stably (in `dtype` when given; halves in float32)."""
    x = self._float() if dtype is None else self.cast(dtype)
    # rounded to a half after each step, 2344 of 4096 float16 results were off torch's
    if x.dtype != (w := x._wide()).dtype: return w.softmax(axis).cast(x.dtype)
    if 0 in x.shape: return x  # no values: nothing to normalize (the max of an empty axis has no identity)
    # the shift by the max cancels, so no gradient flows through it (as tinygrad): two kernels fewer in backward
    e = (x - x.max(axis, keepdim=True).detach()).exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
    """log(softmax(x)) along `axis`, computed stably (in `dtype` when given; halves in float32)."""
    x = self._float() if dtype is None else self.cast(dtype)
    if x.dtype != (w := x._wide()).dtype: return w.log_softmax(axis).cast(x.dtype)  # as softmax (627 of 4096 off)
    if 0 in x.shape: return x  # as softmax
    m = x - x.max(axis, keepdim=True).detach()  # the shift cancels: no gradient through it, as in softmax
    return m - m.exp().sum(axis, keepdim=True).log()

  def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over `axis` (all axes when None, as tinygrad), shifted by the max so it cannot overflow."""
    x = self._float()
    # the log of an empty sum, as torch's (the max that shifts it has no identity there)
    if (empty := x._empty_reduction(axis, keepdim, -math.inf, x.dtype)) is not None: return empty
    m = x.max(axis, keepdim=True)
    m = m.isinf().where(0.0, m)  # an infinite max would make x - m NaN
    out = (x - m).exp().sum(axis, keepdim=True).log() + m
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in x._axes(axis)))

  # ------------------------------------------------------------------ linear algebra and convolution

  def dot(self, w: Tensor, dtype: DType | str | None = None) -> Tensor:
    """Matrix product with numpy's rules for 1-D operands and broadcast batch dimensions; with `dtype` the
    operands are multiplied and summed in, and returned as, that dtype."""
    if not isinstance(w, Tensor): raise TypeError(f"matmul needs a Tensor, got {type(w).__name__}")
    if self.ndim == 0 or w.ndim == 0: raise ValueError("matmul does not take 0-d tensors; use *")
    x, y = self, w
    if x.device != y.device: raise ValueError(f"matmul operands on {x.device} and {y.device}")
    if x.shape[-1] != y.shape[-2 if y.ndim > 1 else -1]:
      raise ValueError(f"matmul shape mismatch: {self.shape} @ {w.shape} (inner sizes {x.shape[-1]} and "
                       f"{y.shape[-2 if y.ndim > 1 else -1]} differ)")
    dt = promote_types(x.dtype, y.dtype) if dtype is None else dtypes.from_any(dtype)
    x, y = x.cast(dt), y.cast(dt)
    if dtype is None and dt in (dtypes.float16, dtypes.bfloat16):
      # halves multiply and add in float32 (each product exact there) and round once, as torch: products rounded to
      # a half each left 114 of 256 outputs of a 16x256 @ 256x16 off the correctly rounded value
      return x.cast(dtypes.float32).dot(y.cast(dtypes.float32)).cast(dt)
    x1 = x.ndim == 1
    y1 = y.ndim == 1
    if x1: x = x.reshape(1, -1)
    if y1: y = y.reshape(-1, 1)
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2])
    n, k, m = x.shape[-2], x.shape[-1], y.shape[-1]
    # a matmul sums in its dtype (torch): integers accumulate in their own width; halves come here only with an
    # explicit dtype (multiplied in it, summed as sum(dtype=half) sums: in float32)
    if x._copies_transposed(y): y = y.contiguous()
    if (width := x._panel_width(y)) is not None:
      # (k, m) -> (m/width, k, width): each output vector's loads of y walk one panel contiguously
      panels = y.reshape(k, m // width, width).permute(1, 0, 2).contiguous()
      prods = x.reshape(x.shape[:-2] + (n, 1, k, 1)) * panels.reshape(1, m // width, k, width)
      out = prods.sum(-2, dtype=dt).reshape(x.shape[:-2] + (n, m))
    elif isinstance(x.device, tuple) or dt in (dtypes.float16, dtypes.bfloat16) or \
        any(isinstance(d, UOp) for d in x.shape + y.shape) or k >= SPLIT_REDUCE_MIN:
      xe = x.reshape(x.shape[:-2] + (n, 1, k))
      ye = y.transpose(-1, -2).reshape(y.shape[:-2] + (1, m, k))
      out = (xe._broadcast_to(batch + (n, m, k)) * ye._broadcast_to(batch + (n, m, k))).sum(-1, dtype=dt)
    else:
      # the nodes the branch above makes, built directly (no tensor for each step: an eager linear layer's forward
      # builds in half the time); what it does differently (sharded operands, halves summed in float32, a long sum
      # split in two, symbolic sizes) takes the branch above
      full = batch + (n, m, k)
      xe = broadcast(UOp(Ops.RESHAPE, dt, (x.uop,), x.shape[:-2] + (n, 1, k)), full)
      order = tuple(range(y.ndim - 2)) + (y.ndim - 1, y.ndim - 2)
      ye = broadcast(UOp(Ops.RESHAPE, dt, (UOp(Ops.PERMUTE, dt, (y.uop,), order),), y.shape[:-2] + (1, m, k)), full)
      summed = UOp(Ops.REDUCE_AXIS, dt, (UOp(Ops.MUL, dt, (xe, ye)),), (Ops.ADD, (len(full) - 1,)))
      out = x._new(UOp(Ops.RESHAPE, dt, (summed,), full[:-1]))
    if x1: out = out.squeeze(-2)
    if y1: out = out.squeeze(-1)
    return out

  def _copies_transposed(self, y: Tensor) -> bool:
    """Whether `self @ y` copies y row-major first, y being the transpose of a row-major buffer (a linear layer's
    weight, W.T). Read as it is, each output sums k products along y's rows in vector lanes and then adds the lanes
    together, which a short sum does not pay for; row-major, the outputs themselves are the lanes, as in any matmul.
    Worth it on a device that loops over its outputs with vector ops, for a short sum and many outputs (float32 on
    AVX-512, copy included: 2048 rows by 64 -> 1024 2.0 -> 0.75 ms, 512 by 64 -> 256 189 -> 133 us, 512 by 64 -> 192 154
    -> 116 us, 1024 by 64 -> 64 119 -> 112 us, while 256 by 64 -> 192 lost, 107 -> 117 us; batched, attention's
    scores of 16x8 heads of 128 by 64: 1.95 -> 0.90 ms; with a sum of 512 or 1024 terms, or 64 rows by 784 -> 256, the
    copy costs more than it saves), read by at least k/2 rows of x per copied matrix: the copy costs once per element
    of y, the lanes' sums once per output, so a few rows over a large vocabulary lose (under TinyJit: 4 rows by 64 ->
    50257, a language model's head while it generates, 0.27 -> 1.63 ms copied; 2 by 64 -> 100000 0.47 -> 3.1 ms; 16 by
    128 -> 32000 1.9 -> 3.9 ms; a decoding step's scores, one query per head of 64x8 over 256 cached keys of 64, 0.84
    -> 3.7 ms)."""
    if isinstance(self.device, tuple) or y.ndim < 2 or y.uop.op is not Ops.PERMUTE: return False
    # only the last two axes swapped: attention's q @ k.transpose(-1, -2) as much as a layer's W.T
    if y.uop.arg != tuple(range(y.ndim - 2)) + (y.ndim - 1, y.ndim - 2): return False
    if contiguous_base(y.uop.src[0]) is None or not y.dtype.is_float: return False
    rows, copies, (k, m) = prod(self.shape[:-1]), prod(y.shape[:-2]), y.shape[-2:]
    if not all(isinstance(d, int) for d in (rows, copies, k, m)) or k > TRANSPOSED_MAX_K or \
        rows * m < TRANSPOSED_MIN_OUTPUTS or 2 * (rows // copies) < k:
      return False
    return _loops_with_vector_ops(self.device)

  def _panel_width(self, y: Tensor) -> int | None:
    """The panel width for `self @ y` (see dot), or None to read y as it is. A row-major y is read a row per step
    of the sum, its rows far apart in memory (a 4096-wide float32 row is 16 KiB: each step a new page); copied
    into panels one vector wide, each output vector reads one panel from start to end. Worth it on a device that
    loops over its outputs with vector ops, for a large y read by many rows (float32 on AVX-512, 4096: 110 -> 243
    GFLOP/s; 1024: 9.8 -> 5.2 ms, the copy included; at 512 the copy costs more than it saves). A y that is the
    transpose of a row-major buffer (a linear layer's W.T) with a sum longer than TRANSPOSED_MAX_K is copied into
    panels too, where each output otherwise adds a vector of lanes along the sum: x @ W.T at 1024x1024 by 1024x1024
    19.0 -> 7.5 ms, 512x768 by 3072x768 22.7 -> 12.5 ms, 128x512 by 2048x512 4.1 -> 3.2 ms (AVX-512, 2 MiB of L2)."""
    if isinstance(self.device, tuple) or y.ndim != 2: return None
    transposed = y.uop.op is Ops.PERMUTE and y.uop.arg == (1, 0) and contiguous_base(y.uop.src[0]) is not None
    if contiguous_base(y.uop) is None and not transposed: return None
    n, (k, m) = self.shape[-2], y.shape
    if not all(isinstance(d, int) for d in (n, k, m)) or n < PANEL_MIN_ROWS or k * m < PANEL_MIN_ELEMENTS: return None
    if transposed and k <= TRANSPOSED_MAX_K: return None
    if not y.dtype.is_float or not _loops_with_vector_ops(self.device): return None
    width = get_registry().device(self.device).caps.max_vector_bytes // y.dtype.itemsize
    return width if width > 1 and m % width == 0 else None

  def matmul(self, x: Tensor, reverse: bool = False, dtype: DType | str | None = None) -> Tensor:
    """self @ x (x @ self with reverse), summed in `dtype` when given."""
    return x.dot(self, dtype) if reverse else self.dot(x, dtype)

  def linear(self, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
    """self @ weight (+ bias); weight has shape (in, out) as in tinygrad, and a 1-D weight scales elementwise."""
    if dtype is not None:
      return self.cast(dtype).linear(weight.cast(dtype), None if bias is None else bias.cast(dtype))
    out = self * weight if weight.ndim == 1 else self @ weight
    return out if bias is None else out + bias

  def _pool_last(self, k: int, stride: int, dilation: int) -> Tensor:
    """Sliding windows over the last axis: (..., i) -> (..., o, k), made only of movement ops."""
    i = self.shape[-1]
    o = (i - dilation * (k - 1) - 1) // stride + 1
    if o <= 0: raise ValueError(f"a window of {k} (dilation {dilation}) does not fit an axis of size {i}")
    pre = self.shape[:-1]
    i2 = max(i, stride * o - dilation)
    # repeat the axis e times; row a of the (k, i2+d) view then starts at offset a*d
    e = -(-k * (i2 + dilation) // i2)
    keep = tuple((0, s) for s in pre)
    steps = ([(Ops.PAD, (((0, 0),) * len(pre) + ((0, i2 - i),), truncate(0, self.dtype)))] if i2 > i else []) + [
      (Ops.RESHAPE, pre + (1, i2)), (Ops.EXPAND, pre + (e, i2)), (Ops.RESHAPE, pre + (e * i2,)),
      (Ops.SHRINK, keep + ((0, k * (i2 + dilation)),)), (Ops.RESHAPE, pre + (k, i2 + dilation)),
      (Ops.SHRINK, keep + ((0, k), (0, stride * o))), (Ops.RESHAPE, pre + (k, o, stride)),
      (Ops.SHRINK, keep + ((0, k), (0, o), (0, 1))), (Ops.RESHAPE, pre + (k, o)),
      (Ops.PERMUTE, tuple(range(len(pre))) + (len(pre) + 1, len(pre)))]
    if any(isinstance(d, UOp) for d in self.shape):  # symbolic sizes: each step through the checked Tensor op
      x = self
      for op, arg in steps:
        x = (x.pad(arg[0]) if op is Ops.PAD else x.shrink(arg) if op is Ops.SHRINK else
             x.permute(arg) if op is Ops.PERMUTE else x.expand(arg) if op is Ops.EXPAND else x.reshape(arg))
      return x
    # sizes right by construction: the view nodes alone, no tensor for each (a convolution makes ten per axis), each
    # step the node the Tensor op would make (none where it changes nothing)
    u = self._uop
    for op, arg in steps:
      unchanged = (op is Ops.SHRINK and all(lo == 0 and hi == d for (lo, hi), d in zip(arg, u.shape))) or \
                  (op in (Ops.RESHAPE, Ops.EXPAND) and arg == u.shape)
      if not unchanged: u = UOp(op, u.dtype, (u,), arg)
    return self._new(u)

  def _pool(self, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
    """Sliding windows over the last len(kernel) axes: (..., i1..in) -> (..., o1..on, k1..kn), movement ops only."""
    n = len(kernel)
    pre = self.ndim - n
    x = self
    # pool the spatial axes first to last; each moves to the end and leaves (o, k) there
    for k, st, dl in zip(kernel, stride, dilation):
      x = x.permute(tuple(range(pre)) + tuple(range(pre + 1, x.ndim)) + (pre,))._pool_last(k, st, dl)
    # now (..., o1, k1, ..., on, kn)
    return x.permute(tuple(range(pre)) + tuple(pre + 2 * i for i in range(n)) + tuple(pre + 2 * i + 1 for i in range(n)))

  def _pool2d(self, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> Tensor:
    """(..., H, W) -> (..., oh, ow, kh, kw) windows."""
    return self._pool(kernel, stride, dilation)

  @staticmethod
  def _conv_pads(padding: int | Sequence[int] | str, n: int, name: str, kernel: Sequence[int] = (),
                 dilation: Sequence[int] = (), stride: Sequence[int] = ()) -> tuple[tuple[int, int], ...]:
    """(before, after) per spatial axis from an int, one int per axis, torch's flat order (last axis first), or
    (given the kernel, dilation and stride) torch's 'valid' (none) and 'same' (an output as large as the input,
    stride 1 only; an odd total puts the extra one after)."""
    if isinstance(padding, (int, np.integer)): return ((int(padding), int(padding)),) * n
    if isinstance(padding, str):
      if not kernel or padding.lower() not in ("same", "valid"):
        raise ValueError(f"{name} padding must be an int or ints{', or same or valid' if kernel else ''}, not {padding!r}")
      if padding.lower() == "valid": return ((0, 0),) * n
      if any(s != 1 for s in stride): raise ValueError(f"{name} padding='same' needs stride 1, got {tuple(stride)}")
      return tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation))
    padding = tuple(int(p) for p in padding)
    if len(padding) == n: return tuple((p, p) for p in padding)
    if len(padding) == 2 * n: return tuple((padding[2 * i], padding[2 * i + 1]) for i in reversed(range(n)))
    raise ValueError(f"{name} padding must be an int, {n} ints or {2 * n} ints, got {padding}")

  @staticmethod
  def _tuple_arg(v: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    out = (int(v),) * n if isinstance(v, (int, np.integer)) else tuple(int(x) for x in v)
    if len(out) != n: raise ValueError(f"{what} needs 1 or {n} values, got {v}")
    if any(x < 1 for x in out): raise ValueError(f"{what} must be positive, got {v}")
    return out

  def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
             dtype: DType | str | None = None) -> Tensor:
    """Convolution (cross-correlation, as torch) over any number of spatial axes despite the name
    (tinygrad's): input (N, Cin, *spatial), weight (Cout, Cin/groups, *kernel); 1-D, 2-D and 3-D all work.

    :param padding: an int, one int per spatial axis, torch's flat (left, right, top, bottom, ...) order, or torch's
      "same" (stride 1) and "valid".
    :param dtype: the dtype the products are summed in (as `sum`'s).
    """
    n = weight.ndim - 2
    if n < 1 or self.ndim != n + 2:
      raise ValueError(f"conv2d needs input (N, Cin, *spatial) and weight (Cout, Cin/groups, *kernel) with as many "
                       f"spatial axes, got {self.shape} and {weight.shape}")
    bs, cin = self.shape[:2]
    cout, cin_g = weight.shape[:2]
    ks = weight.shape[2:]
    if groups < 1 or cin % groups or cout % groups or cin // groups != cin_g:
      raise ValueError(f"conv2d: input channels {cin} and weight {weight.shape} do not match groups={groups}")
    st, dl = self._tuple_arg(stride, n, "conv2d stride"), self._tuple_arg(dilation, n, "conv2d dilation")
    pads = self._conv_pads(padding, n, "conv2d", ks, dl, st)
    x = self._conv_windows(ks, groups, cout // groups, st, dl, pads)
    out = x.shape[3:3 + n]
    w = self._channels_innermost(weight, groups).reshape((1, groups, cout // groups) + (1,) * n + (cin_g,) + ks)
    prods = x * w
    if dtype is None and prods.dtype.is_int: dtype = prods.dtype  # integers keep their dtype, as in matmul
    ret = prods.sum(tuple(range(-1 - n, 0)), dtype=dtype).reshape((bs, cout) + out)
    whole = dtype is None and self.dtype == weight.dtype and self.dtype.is_float and all(s == 1 for s in st)
    if whole and isinstance(self.device, str) and weight.device == self.device and \
       all(isinstance(d, int) for d in self.shape + weight.shape):
      # differentiated as a whole (_conv_gradient): the input's gradient is one transposed convolution. Not for a
      # stride: its transposed convolution would multiply zeros between the outputs too (4x the work at stride 2)
      ret = ret._with_gradient("conv", self, weight, params=(self.device, groups, st, dl, pads))
    return ret if bias is None else ret + bias.reshape((1, cout) + (1,) * n)

  def _channels_innermost(self, weight: Tensor, groups: int) -> Tensor:
    """conv2d's weight (Cout, Cin, *kernel) read from a copy laid out (Cin, *kernel, Cout), on a device that loops
    over its outputs with vector ops where the output channels fill whole vectors: the kernel then takes its vector
    lanes along the channels, every lane computing (heuristic `_channel_tile`), where lanes along a short image row
    left many idle (beautiful_mnist's convolutions and their input gradients 1.2-2.9x faster, kernels alone). The
    copy is the weight's size, one small kernel."""
    cout, n = weight.shape[0], weight.ndim - 2
    if groups != 1 or isinstance(self.device, tuple) or weight.device != self.device or not weight.dtype.is_float or \
        not all(isinstance(d, int) for d in weight.shape) or not _loops_with_vector_ops(self.device): return weight
    lanes = vector_lanes(get_registry().device(self.device).caps, weight.dtype.itemsize)  # the heuristic's width
    if lanes < 2 or cout % lanes: return weight
    return weight.permute(tuple(range(1, n + 2)) + (0,)).contiguous().permute((n + 1,) + tuple(range(n + 1)))

  def _conv_windows(self, ks: tuple[int, ...], groups: int, rc: int, st: tuple[int, ...], dl: tuple[int, ...],
                    pads: tuple[tuple[int, int], ...]) -> Tensor:
    """conv2d's view of this input (bs, cin, *spatial): every window beside every output channel of its group,
    (bs, groups, rc, *out, cin/groups, *k), the reduced axes last; movement ops only."""
    n = len(ks)
    bs, cin = self.shape[:2]
    x = self.pad(((0, 0), (0, 0)) + pads)._pool(ks, st, dl)  # (bs, cin, *out, *k)
    out = x.shape[2:2 + n]
    x = x.reshape((bs, groups, cin // groups, 1) + out + ks).expand((bs, groups, cin // groups, rc) + out + ks)
    return x.permute((0, 1, 3) + tuple(range(4, 4 + n)) + (2,) + tuple(range(4 + n, 4 + 2 * n)))

  def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                       stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                       padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
    """Transposed convolution (conv2d's gradient with respect to its input, as torch's) over any
    number of spatial axes: input (N, Cin, *spatial), weight (Cin, Cout/groups, *kernel)."""
    n = weight.ndim - 2
    if n < 1 or self.ndim != n + 2:
      raise ValueError(f"conv_transpose2d needs input (N, Cin, *spatial) and weight (Cin, Cout/groups, *kernel), "
                       f"got {self.shape} and {weight.shape}")
    if groups < 1 or weight.shape[0] % groups or self.shape[1] != weight.shape[0]:
      raise ValueError(f"conv_transpose2d: input channels {self.shape[1]} and weight {weight.shape} "
                       f"do not match groups={groups}")
    ks = weight.shape[2:]
    st = self._tuple_arg(stride, n, "conv_transpose2d stride")
    dl = self._tuple_arg(dilation, n, "conv_transpose2d dilation")
    op = (int(output_padding),) * n if isinstance(output_padding, (int, np.integer)) else tuple(output_padding)
    if len(op) != n or any(not 0 <= o < max(s, d) for o, s, d in zip(op, st, dl)):
      raise ValueError(f"conv_transpose2d output_padding {output_padding} must be below stride or dilation")
    pads = self._conv_pads(padding, n, "conv_transpose2d")
    if any(s > 1 for s in st) and all(d == 1 for d in dl) and all(b >= 0 for b, _ in pads):
      out = self._conv_transpose_phases(weight, groups, st, pads, op)
      return out if bias is None else out + bias.reshape((1, -1) + (1,) * n)
    # the equivalent convolution: a (Cout, Cin/groups, *kernel) weight flipped in space, over the input
    # with stride-1 zeros between its elements and the padding that makes the sizes come out right
    cin_g, cout_g = weight.shape[0] // groups, weight.shape[1]
    w = weight.reshape((groups, cin_g, cout_g) + ks).transpose(1, 2).flip(tuple(range(3, 3 + n)))
    w = w.reshape((groups * cout_g, cin_g) + ks)
    conv_pads = tuple(((k - 1) * d - b, (k - 1) * d - a + o) for k, d, (b, a), o in zip(ks, dl, pads, op))
    x = self
    if any(s > 1 for s in st):
      # (N, C, i) -> (N, C, i, 1) -> padded to (N, C, i, s) -> (N, C, i*s) -> without the zeros after the last element
      nc, sp = x.shape[:2], x.shape[2:]
      x = x.reshape(nc + sum(((i, 1) for i in sp), ()))
      x = x.pad(((0, 0), (0, 0)) + sum((((0, 0), (0, s - 1)) for s in st), ()))
      x = x.reshape(nc + tuple(i * s for i, s in zip(sp, st)))
      x = x.shrink(((0, nc[0]), (0, nc[1])) + tuple((0, i * s - (s - 1)) for i, s in zip(sp, st)))
    flat = sum((conv_pads[i] for i in reversed(range(n))), ())
    return x.conv2d(w, bias, groups=groups, dilation=dl, padding=flat)

  def _conv_transpose_phases(self, weight: Tensor, groups: int, st: tuple[int, ...], pads: tuple[tuple[int, int], ...],
                             op: tuple[int, ...]) -> Tensor:
    """A strided transposed convolution (dilation 1) as one stride-1 transposed convolution per output phase: the
    outputs o with (o + pad) % s == r take only the kernel taps r, r + s, ... (out[q*s + r - pad] = sum over m of
    x[q - m] * w[r + s*m]), so each phase convolves the input with that slice of the kernel and the phases are
    interleaved. The zeros a stride-1 convolution over the spread-out input multiplied go (stride 2, 64 -> 32 channels
    4x4 on 16 16x16 images: 4.0 -> 1.4 ms; torch 2.6 ms)."""
    n = len(st)
    spatial, ks = self.shape[2:], weight.shape[2:]
    size = tuple((i - 1) * s - b - a + k + o for i, s, (b, a), k, o in zip(spatial, st, pads, ks, op))
    q = tuple(-(-(b + o) // s) for (b, _), o, s in zip(pads, size, st))  # outputs per phase, the padding's included
    lead = (self.shape[0], weight.shape[1] * groups)

    def phase(rs: tuple[int, ...]) -> Tensor:
      sub = weight[(slice(None), slice(None)) + tuple(slice(r, None, s) for r, s in zip(rs, st))]
      # a stride longer than the kernel leaves phases no tap reaches
      if 0 in sub.shape[2:]: return Tensor.zeros(lead + q, dtype=self.dtype, device=self.device)
      y = self.conv_transpose2d(sub, groups=groups)
      y = y.pad(((0, 0), (0, 0)) + tuple((0, max(0, k - y.shape[2 + i])) for i, k in enumerate(q)))
      return y.shrink((None, None) + tuple((0, k) for k in q))

    def stacked(prefix: tuple[int, ...]) -> Tensor:  # (s_i, ..., N, C, *q) for the phases below `prefix`
      if len(prefix) == n: return phase(prefix)
      return Tensor.stack(*(stacked(prefix + (r,)) for r in range(st[len(prefix)])), dim=0)
    # (s_1..s_n, N, C, q_1..q_n) -> (N, C, q_1, s_1, ..., q_n, s_n): output q*s + r is phase r's q-th
    order = (n, n + 1) + sum(((n + 2 + i, i) for i in range(n)), ())
    z = stacked(()).permute(order).reshape(lead + tuple(k * s for k, s in zip(q, st)))
    return z.shrink((None, None) + tuple((b, b + o) for (b, _), o in zip(pads, size)))


  # ------------------------------------------------------------------ training: initialisers, layers' math, losses

  @staticmethod
  def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    # (fan_in, fan_out) as tinygrad counts them: shape[1:] in, shape[0] out
    if not shape: raise ValueError("an initialiser needs at least one dimension")
    return prod(shape[1:]), shape[0]

  @staticmethod
  def glorot_uniform(*shape: ShapeArg, dtype: DType | str | None = None, device: DeviceArg | None = None,
                     requires_grad: bool | None = None) -> Tensor:
    """Glorot (Xavier) uniform: U(-b, b) with b = sqrt(6 / (shape[0] + prod(shape[1:])))."""
    fan_in, fan_out = Tensor._fans(_shape_args(shape))
    b = math.sqrt(6 / (fan_in + fan_out))
    return Tensor.uniform(*shape, low=-b, high=b, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def kaiming_uniform(*shape: ShapeArg, a: float = 0.01, dtype: DType | str | None = None,
                      device: DeviceArg | None = None,
                      requires_grad: bool | None = None) -> Tensor:
    """Kaiming (He) uniform for a leaky ReLU of slope `a`: U(-b, b), b = sqrt(6 / ((1 + a²) prod(shape[1:])))."""
    fan_in, _ = Tensor._fans(_shape_args(shape))
    b = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan_in)
    return Tensor.uniform(*shape, low=-b, high=b, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def kaiming_normal(*shape: ShapeArg, a: float = 0.01, dtype: DType | str | None = None,
                     device: DeviceArg | None = None,
                     requires_grad: bool | None = None) -> Tensor:
    """Kaiming (He) normal for a leaky ReLU of slope `a`: N(0, 2 / ((1 + a²) prod(shape[1:])))."""
    fan_in, _ = Tensor._fans(_shape_args(shape))
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan_in)
    return Tensor.normal(*shape, mean=0.0, std=std, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def scaled_uniform(*shape: ShapeArg, dtype: DType | str | None = None, device: DeviceArg | None = None,
                     requires_grad: bool | None = None) -> Tensor:
    """U(-1, 1) scaled by 1/sqrt(number of elements)."""
    b = prod(_shape_args(shape)) ** -0.5
    return Tensor.uniform(*shape, low=-b, high=b, dtype=dtype, device=device, requires_grad=requires_grad)

  def sequential(self, ll: Sequence[Any]) -> Tensor:
    """Apply each callable of `ll` in turn: ll[-1](...ll[0](self))."""
    x = self
    for f in ll: x = f(x)
    return x

  def dropout(self, p: float = 0.5) -> Tensor:
    """Zero each element with probability `p` and scale the rest by 1/(1-p), in training mode only
    (`Tensor.train()`); the identity otherwise."""
    if not 0 <= p <= 1: raise ValueError(f"dropout probability {p} is not in [0, 1]")
    if not Tensor.training or p == 0: return self
    if p == 1: return self.zeros_like()
    keep = Tensor.rand(self.shape, device=self.device, requires_grad=False) >= p
    return keep.where(self, 0) * (1.0 / (1.0 - p))

  @_halves_in_float32  # the mean and variance of halves, as torch's opmath
  def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over `axis` (biased variance, as torch's LayerNorm); no scale or shift."""
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

  def batchnorm(self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                axis: int | Sequence[int] = 1) -> Tensor:
    """(x - mean) * invstd * weight + bias, the statistics given per element of `axis` (channels by default)
    and broadcast over the others."""
    axes = self._axes(axis)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return ret if bias is None else ret + bias.reshape(shape)

  def _one_hot_along_dim(self, num_classes: int, dim: int = -1) -> Tensor:
    # bool: True where the value equals the position along `dim` (which has size 1 here)
    offset = self.ndim - _norm_axis(dim, self.ndim) - 1
    return self == Tensor.arange(num_classes, device=self.device, dtype=self.dtype).reshape((num_classes,) + (1,) * offset)

  def one_hot(self, num_classes: int = -1) -> Tensor:
    """A new last axis of `num_classes` holding 1 at each value's position and 0 elsewhere (int32).
    With -1, the number of classes is the largest value + 1 (this realizes the tensor)."""
    if not self.dtype.is_int: raise TypeError(f"one_hot needs an integer tensor, this one is {self.dtype.name}")
    if num_classes == -1: num_classes = int(self.max().item()) + 1 if self.numel() else 0
    if num_classes < 0: raise ValueError(f"num_classes must be -1 or nonnegative, got {num_classes}")
    return self.unsqueeze(-1)._one_hot_along_dim(num_classes).where(1, 0).cast(dtypes.int32)

  def logsigmoid(self) -> Tensor:
    """log(sigmoid(x)), without overflow for any x: x - log(1 + e^x) below 0, -log(1 + e^-x) from 0 on.
    Each branch sees only its own half of x, so neither overflows, nor does its gradient."""
    x = self._float()
    neg = x < 0
    xn, xp = neg.where(x, 0), neg.where(0, x)
    return neg.where(xn - xn.exp()._log1p(), -(-xp).exp()._log1p())

  @staticmethod
  def _check_reduction(reduction: str) -> None:
    if reduction not in ("none", "sum", "mean"): raise ValueError(f"reduction must be 'none', 'sum' or 'mean', not {reduction!r}")

  def _do_reduction(self, reduction: str = "mean") -> Tensor:
    Tensor._check_reduction(reduction)
    return self if reduction == "none" else self.sum() if reduction == "sum" else self.mean()

  def _check_labels(self, Y: Tensor, class_axis: int, name: str) -> None:
    if not isinstance(Y, Tensor): raise TypeError(f"{name} needs a Tensor of targets, got {type(Y).__name__}")
    if not Y.dtype.is_int: raise TypeError(f"{name} needs integer class indices, got {Y.dtype.name}")
    want = self.shape[:class_axis] + self.shape[class_axis + 1:]
    if Y.shape != want:
      raise ValueError(f"{name}: targets of shape {Y.shape} do not match input {self.shape} (want {want})")

  def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross entropy of logits (..., classes) against integer classes Y (...).

    :param ignore_index: targets equal to it add nothing and are left out of the mean (-1: none, tinygrad's default).
    :param label_smoothing: mix the one-hot target with the uniform distribution by this much.
    :param reduction: 'mean', 'sum' or 'none'.
    """
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    Tensor._check_reduction(reduction)
    self._check_labels(Y, self.ndim - 1, "sparse_categorical_crossentropy")
    log_probs = self.log_softmax(-1)
    hit = Y.unsqueeze(-1)._one_hot_along_dim(self.shape[-1])
    mask = (Y != ignore_index) if ignore_index != -1 else None
    if mask is not None: hit = hit & mask.unsqueeze(-1)
    unreduced = -hit.where(log_probs, 0).sum(-1)
    # the smoothing term is left out without smoothing, not multiplied by 0: a class masked with a -inf logit makes
    # the mean over classes -inf, and 0 * -inf NaN
    if label_smoothing:
      spread = log_probs.mean(-1) if mask is None else mask.where(log_probs.mean(-1), 0)
      unreduced = (1 - label_smoothing) * unreduced - label_smoothing * spread
    if reduction != "mean": return unreduced._do_reduction(reduction)
    # the mean counts only the targets not ignored (all of them, a count known here unless a Variable sets it)
    if mask is None: return unreduced.sum() / n if isinstance(n := Y.numel(), int) else unreduced.mean()
    return unreduced.sum() / mask.sum()

  def cross_entropy(self, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits (N, C, ...) (or (C,)) against class indices (N, ...) or probabilities of
    the logits' shape, as torch.nn.functional.cross_entropy."""
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    Tensor._check_reduction(reduction)
    cdim = 0 if self.ndim == 1 else 1
    if Y.shape != self.shape:  # class indices: sparse_categorical_crossentropy with the classes moved last
      self._check_labels(Y, cdim, "cross_entropy")
      classes_last = self if cdim == 0 else self.permute(0, *range(2, self.ndim), 1)
      return classes_last.sparse_categorical_crossentropy(Y, label_smoothing=label_smoothing, reduction=reduction)
    Y = (1 - label_smoothing) * Y + label_smoothing / self.shape[cdim]
    return (-(self.log_softmax(cdim) * Y).sum(cdim))._do_reduction(reduction)

  def nll_loss(self, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
               reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities (N, C, ...) at classes Y (N, ...), as torch's
    nll_loss: optional per-class `weight`; the mean divides by the summed weights of the targets kept."""
    Tensor._check_reduction(reduction)
    cdim = 0 if self.ndim == 1 else 1
    self._check_labels(Y, cdim, "nll_loss")
    hit = Y.unsqueeze(cdim)._one_hot_along_dim(self.shape[cdim], dim=cdim)
    if weight is None: w = Y.ones_like(dtype=self.dtype)
    else:
      if weight.shape != (self.shape[cdim],): raise ValueError(f"nll_loss weight needs shape {(self.shape[cdim],)}, got {weight.shape}")
      w = hit.where(weight.reshape((-1,) + (1,) * (self.ndim - cdim - 1)), 0).sum(cdim)
    if ignore_index is not None: w = (Y != ignore_index).where(w, 0)
    # a target weighted 0 (ignored) is selected away, not multiplied by 0: when every target is, the mean is 0 / 0
    # (NaN, as torch's) and its gradient 1 / 0 would make the product's gradient 0 * inf (NaN; torch's is 0)
    nll = (w != 0).where(-hit.where(self, 0).sum(cdim) * w, 0)
    return nll.sum() / w.sum() if reduction == "mean" else nll._do_reduction(reduction)

  def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
    """-(Y log p + (1-Y) log(1-p)) of probabilities p = self; each log is clamped at -100, as torch's.
    At p = 0 or 1 the clamped log is a constant, so the gradient stays finite."""
    Tensor._check_reduction(reduction)

    def clamped_log(p: Tensor) -> Tensor:
      pos = p > 0
      return pos.where(pos.where(p, 1).log().maximum(-100), -100)
    return (-(Y * clamped_log(self) + (1 - Y) * clamped_log(1 - self)))._do_reduction(reduction)

  def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """binary_crossentropy of sigmoid(self), computed stably from the logits (torch's
    binary_cross_entropy_with_logits); `pos_weight` scales the positive term."""
    Tensor._check_reduction(reduction)
    pos = Y * self.logsigmoid()
    if pos_weight is not None: pos = pos * pos_weight
    return (-(pos + (1 - Y) * (-self).logsigmoid()))._do_reduction(reduction)


  # ------------------------------------------------------------------ indexing

  def _index_plan(self, index: Any) -> tuple[list[tuple], list]:
    """Parse an index into one entry per axis of self, ("int", i), ("slice", start, step, n) or ("adv", tensor of
    positions), and the output layout: per output dim, an axis number or None (a new axis of size 1)."""
    entries = list(index) if isinstance(index, tuple) else [index]
    parsed: list = []  # (kind, value, number of axes it uses)
    for e in entries:
      if e is None or e is Ellipsis: parsed.append((e, e, 0))
      elif isinstance(e, (int, np.integer)): parsed.append(("int", int(e), 1))
      elif isinstance(e, slice):
        for part in (e.start, e.stop, e.step):
          if part is not None and (not isinstance(part, (int, np.integer)) or isinstance(part, bool)):
            raise TypeError(f"slice parts must be ints or None, got {e!r}")
        if e.step == 0: raise ValueError(f"slice step cannot be zero in {e!r}")
        parsed.append(("slice", e, 1))
      elif isinstance(e, (Tensor, list, np.ndarray)):
        host = None if isinstance(e, Tensor) else Tensor._index_array(e)
        t = e if host is None else Tensor(host, device=self.device)
        if t.device != self.device: raise ArgumentError(f"index tensor on {t.device}, indexed tensor on {self.device}")
        if t.dtype == dtypes.bool:  # a mask stands for the coordinates of its True entries, one index per axis
          cols = t.nonzero()
          parsed.append(("mask", ([cols[:, k] for k in range(t.ndim)], t.shape), t.ndim))
        elif t.dtype.is_int: parsed.append(("adv", (_wide_index(t), host), 1))
        else: raise IndexError(f"tensors used as indices must be integer or bool, not {t.dtype.name}")
      else: raise TypeError(f"invalid index {e!r} of type {type(e).__name__}")
    if sum(1 for k, _, _ in parsed if k is Ellipsis) > 1: raise IndexError("an index can only have one ellipsis")
    used = sum(n for _, _, n in parsed)
    if used > self.ndim: raise IndexError(f"too many indices ({used}) for a tensor with {self.ndim} dimensions")
    at = next((i for i, (k, _, _) in enumerate(parsed) if k is Ellipsis), len(parsed))
    parsed[at:at + 1] = [("slice", slice(None), 1)] * (self.ndim - used)
    plan: list[tuple] = []
    layout: list = []
    for kind, val, _ in parsed:
      if kind is None:
        layout.append(None)
        continue
      if kind == "mask" and val[1] != self.shape[len(plan):len(plan) + len(val[1])]:
        raise IndexError(f"a mask of shape {val[1]} does not match axes {len(plan)}.. of shape {self.shape}")
      for t in (val[0] if kind == "mask" else [val]):
        axis, size = len(plan), self.shape[len(plan)]
        if kind == "int":
          if not -size <= t < size: raise IndexError(f"index {t} is out of bounds for axis {axis} with size {size}")
          plan.append(("int", t % size))
          continue
        if kind == "slice":
          start, stop, step = t.indices(size)
          plan.append(("slice", start, step, len(range(start, stop, step))))
        else:
          t, host = t if kind == "adv" else (t, None)
          if host is not None and host.size and not (-size <= host.min() and host.max() < size):
            bad = host.min() if host.min() < -size else host.max()
            raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {size}")
          plan.append(("adv", (t < 0).where(t + size, t)))
        layout.append(axis)
    return plan, layout

  def _basic_view(self, plan: list[tuple]) -> Tensor:
    """Apply the int and slice entries of a plan (advanced axes kept whole); int axes stay as size 1."""
    x, shrinks, flips, steps = self, [], [], []
    for axis, p in enumerate(plan):
      size = self.shape[axis]
      if p[0] == "int": shrinks.append((p[1], p[1] + 1)); steps.append(1)
      elif p[0] == "adv": shrinks.append((0, size)); steps.append(1)
      else:
        _, start, step, n = p
        if step < 0:  # walk the flipped axis forward
          flips.append(axis)
          start, step = size - 1 - start, -step
        shrinks.append((start, min(size, start + (n - 1) * step + 1)) if n else (0, 0))
        steps.append(step)
    if flips: x = x.flip(flips)
    x = x.shrink(tuple(shrinks))
    if x.numel() == 0:  # nothing to stride over: straight to the result's shape
      return x.reshape(tuple(1 if p[0] == "int" else p[3] if p[0] == "slice" else self.shape[a]
                             for a, p in enumerate(plan)))
    if any(s > 1 for s in steps):
      # a stride is a pad to a multiple of the step, a reshape to (n, step) and keeping column 0
      x = x.pad(tuple((0, (-sz) % st) for sz, st in zip(x.shape, steps)))
      split = sum(((sz // st, st) for sz, st in zip(x.shape, steps)), ())
      x = x.reshape(split).shrink(tuple((0, s) if k % 2 == 0 else (0, 1) for k, s in enumerate(split)))
      x = x.reshape(split[::2])
    return x

  def __getitem__(self, index: Any) -> Tensor:
    """Indexing as torch: ints, slices (any step, empty ones too), None, Ellipsis, integer tensors, lists or
    arrays (advanced indexing: several broadcast together; their dims replace theirs when they are adjacent,
    else come first) and bool masks (a 0-d one, True, False or a tensor, adds an axis of size 1 or 0). An
    out-of-range position in an index tensor gives 0 (it cannot be checked without running it); in a list or array
    it raises IndexError."""
    if (basic := self._basic_index(index)) is not None: return basic
    if (sym := self._symbolic_slice(index)) is not None: return sym
    if (scalar := self._scalar_mask(index)) is not None:
      plain, at, keep = scalar
      out = self[plain]
      if keep: return out
      # the axis it added holds nothing: the output dims before it are those of the slices, Nones and Ellipsis
      spanned = self.ndim - sum(1 for e in plain if e is not None and e is not Ellipsis)
      axis = sum(0 if isinstance(e, (int, np.integer)) else spanned if e is Ellipsis else 1 for e in plain[:at])
      return out.shrink(tuple((0, 0) if k == axis else None for k in range(out.ndim)))
    return self._read_plan(*self._index_plan(index))

  @staticmethod
  def _scalar_mask(index: Any) -> tuple[tuple, int, bool] | None:
    """For an index holding a 0-d bool (True, False, or a 0-d bool tensor or array, whose value is read here): the
    index with None in its place, its position and its value; None for any other index. As in torch and numpy, it
    adds an axis, of size 1 for True and 0 for False: a 0-d mask selects everything or nothing (as a mask of no axes,
    it indexed none and selected everything either way)."""
    entries = list(index) if isinstance(index, tuple) else [index]
    at = [i for i, e in enumerate(entries) if isinstance(e, (bool, np.bool_)) or
          (isinstance(e, (Tensor, np.ndarray)) and e.dtype in (dtypes.bool, np.bool_) and e.ndim == 0)]
    if not at: return None
    if len(at) > 1 or any(isinstance(e, (Tensor, list, np.ndarray)) for i, e in enumerate(entries) if i != at[0]):
      raise IndexError("a 0-d bool index cannot be combined with another one or with index tensors, lists or arrays")
    value = entries[at[0]]
    entries[at[0]] = None
    return tuple(entries), at[0], bool(value.item() if isinstance(value, (Tensor, np.ndarray)) else value)

  def _basic_index(self, index: Any) -> Tensor | None:
    """The common index (Python ints, slices of step 1 with int or no bounds, None, one Ellipsis) of a tensor of plain
    sizes: the shrink and reshape the general plan gives, without building the plan (`logits[:, -1]` on every token:
    13 -> 6 us). None for any other index, which the general path takes (and reports errors of)."""
    entries = index if type(index) is tuple else (index,)
    used, ellipsis = 0, False
    for e in entries:
      if type(e) is int: used += 1
      elif type(e) is slice:
        if e.step not in (None, 1) or any(p is not None and type(p) is not int for p in (e.start, e.stop)): return None
        used += 1
      elif e is Ellipsis:
        if ellipsis: return None
        ellipsis = True
      elif e is not None: return None
    shape = self._uop.shape
    if used > len(shape) or not _plain_sizes(shape): return None

    def at(i: int, size: int, axis: int) -> tuple[int, int]:
      if not -size <= i < size: raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
      return i % size, i % size + 1

    def within(e: slice, size: int) -> tuple[int, int]:
      start, stop, _ = e.indices(size)
      return (start, stop) if stop > start else (0, 0)
    bounds, layout = Tensor._basic_bounds(entries, shape, used, at, within)
    # the nodes shrink() and reshape() make, without their checks of bounds right by construction
    u = self._uop
    if any(b != (0, size) for b, size in zip(bounds, shape)): u = UOp(Ops.SHRINK, u.dtype, (u,), tuple(bounds))
    out = tuple(1 if a is None else bounds[a][1] - bounds[a][0] for a in layout)
    if out != u.shape: u = UOp(Ops.RESHAPE, u.dtype, (u,), out)
    return self if u is self._uop else self._new(u)

  def _symbolic_slice(self, index: Any) -> Tensor | None:
    """Basic indexing (ints, slices of step 1, None, Ellipsis) where a bound is a Variable (x[:, :v]) or an axis
    is symbolic: a shrink and a reshape. None when neither is symbolic."""
    entries = list(index) if isinstance(index, tuple) else [index]
    if not any(isinstance(e, slice) and (_is_sint(e.start) or _is_sint(e.stop)) for e in entries) and \
       not any(isinstance(s, UOp) for s in self.shape): return None
    def basic(e: Any) -> bool:
      if e is None or e is Ellipsis: return True
      if isinstance(e, slice): return e.step in (None, 1)
      return isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_))
    if not all(basic(e) for e in entries):
      raise NotImplementedError(f"indexing with a Variable takes ints, slices of step 1, None and Ellipsis, got {index!r}")
    if entries.count(Ellipsis) > 1: raise IndexError("an index can only have one ellipsis")
    used = sum(1 for e in entries if e is not None and e is not Ellipsis)
    if used > self.ndim: raise IndexError(f"too many indices ({used}) for a tensor of {self.ndim} dimensions")

    def wrap(p: Any, size: Any) -> Any:  # a negative int counts from the end (of a symbolic size too)
      return size + int(p) if isinstance(p, (int, np.integer)) and p < 0 else (p if isinstance(p, UOp) else int(p))

    def at(i: Any, size: Any, axis: int) -> tuple:  # out of range: shrink says so
      return wrap(i, size), wrap(i, size) + 1

    def within(e: slice, size: Any) -> tuple:
      return 0 if e.start is None else wrap(e.start, size), size if e.stop is None else wrap(e.stop, size)
    bounds, layout = Tensor._basic_bounds(entries, self.shape, used, at, within)
    x = self.shrink(tuple(bounds))
    return x.reshape(tuple(1 if a is None else x.shape[a] for a in layout))

  @staticmethod
  def _basic_bounds(entries: Sequence[Any], shape: tuple, used: int, at: Callable[[Any, Any, int], tuple],
                    within: Callable[[slice, Any], tuple]) -> tuple[list[tuple], list[int | None]]:
    """The shrink bounds of a basic index (ints, slices of step 1, None, one Ellipsis, `used` of them taking an axis)
    and per output dim the axis it keeps, or None for a new axis of size 1: an int's bounds from `at(i, size, axis)`,
    a slice's from `within(slice, size)`, the Ellipsis's axes and those after the index whole."""
    bounds: list[tuple] = []
    layout: list[int | None] = []

    def whole() -> None:
      layout.append(len(bounds))
      bounds.append((0, shape[len(bounds)]))
    for e in entries:
      if e is None: layout.append(None)
      elif e is Ellipsis:
        for _ in range(len(shape) - used): whole()
      elif isinstance(e, slice):
        layout.append(len(bounds))
        bounds.append(within(e, shape[len(bounds)]))
      else: bounds.append(at(e, shape[len(bounds)], len(bounds)))
    while len(bounds) < len(shape): whole()
    return bounds, layout

  def _read_plan(self, plan: list[tuple], layout: list) -> Tensor:
    """The values an index plan selects (see _index_plan)."""
    x = self._basic_view(plan)  # still one axis per axis of self
    adv = [a for a in range(self.ndim) if plan[a][0] == "adv"]
    if not adv: return x.reshape(tuple(1 if a is None else x.shape[a] for a in layout))
    # the advanced axes become one flattened axis, read at one linear position per index element
    idx, sizes = [plan[a][1] for a in adv], [x.shape[a] for a in adv]
    big = broadcast_shape(*(t.shape for t in idx))
    lin, valid, stride = None, None, 1
    for t, s in zip(reversed(idx), reversed(sizes)):
      term, ok = t.cast(dtypes.int64 if self.numel() >= 2**31 else dtypes.int32) * stride, (t >= 0) & (t < s)
      lin, valid = (term, ok) if lin is None else (lin + term, valid & ok)
      stride *= s
    lin = valid.where(lin, -1)._broadcast_to(big)
    others = [a for a in range(self.ndim) if a not in adv]
    flat = x.permute(adv + others).reshape((1,) * len(big) + (stride,) + tuple(x.shape[a] for a in others))
    hits = lin._index_hits(stride).reshape(big + (stride,) + (1,) * len(others))
    rest = [a for a in layout if a is None or a not in adv]
    out = Tensor._masked_pick(flat, hits, len(big)).reshape(big + tuple(1 if a is None else x.shape[a] for a in rest))
    # torch's placement: adjacent advanced indices put their dims where they stood, others put them first; a 0-d
    # index tensor places no dims and counts as an int there, as in torch (numpy counts it as an advanced index)
    placed = [a for a in adv if plan[a][1].ndim] or adv[:1]
    order = [a for a in layout if a is None or a not in adv or a in placed]
    first = order.index(placed[0])
    if order[first:first + len(placed)] != placed: return out
    nb, before = len(big), sum(1 for a in order[:first] if a is None or a not in adv)
    return out.permute(list(range(nb, nb + before)) + list(range(nb)) + list(range(nb + before, out.ndim)))

  def __setitem__(self, index: Any, value: Any) -> None:
    """Write `value` (broadcast, cast to this dtype) where `self[index]` reads; any index a read accepts.
    A realized tensor is written in place (like assign); with repeated positions the last value wins."""
    v = value if isinstance(value, Tensor) else Tensor(value, device=self.device, dtype=self.dtype)
    if v.device != self.device: raise ValueError(f"setitem of a tensor on {v.device} into one on {self.device}")
    v = v.cast(self.dtype)
    if (scalar := self._scalar_mask(index)) is not None:  # True: write where the index without it reads; False: nothing
      if scalar[2]: self[scalar[0]] = v
      return
    plan, layout = self._index_plan(index)
    if any(p[0] == "adv" for p in plan): new = self._setitem_advanced(plan, layout, v)
    else: new = self._setitem_basic(plan, layout, v)
    if new is not None: self.assign(new)

  def _setitem_basic(self, plan: list[tuple], layout: list, v: Tensor) -> Tensor | None:
    view_shape = tuple(1 if a is None else self.shape[a] if plan[a][0] != "slice" else plan[a][3] for a in layout)
    if broadcast_shape(v.shape, view_shape) != view_shape:
      raise ValueError(f"cannot set a value of shape {v.shape} into a selection of shape {view_shape}")
    if 0 in view_shape: return None
    # v laid out with one axis per axis of self (size 1 for int entries), then spread to its positions
    v = v._broadcast_to(view_shape).reshape(tuple(1 if p[0] == "int" else p[3] for p in plan))
    mask = Tensor.full(v.shape, True, dtype=dtypes.bool, device=self.device)
    for axis, p in enumerate(plan):
      size = self.shape[axis]
      if p[0] == "int": start, step, n = p[1], 1, 1
      else: _, start, step, n = p
      if step < 0:  # the same positions walked forward
        v, mask = v.flip(axis), mask.flip(axis)
        start, step = start + (n - 1) * step, -step
      v, mask = v._spread(axis, start, step, size), mask._spread(axis, start, step, size)
    return mask.where(v, self)

  def _spread(self, axis: int, start: int, step: int, size: int) -> Tensor:
    """Place the n entries of `axis` at start, start + step, ... of an axis of `size`, zeros between."""
    n = self.shape[axis]
    x = self
    if step > 1 and n > 1:
      x = x.unsqueeze(axis + 1).pad(tuple((0, step - 1) if i == axis + 1 else (0, 0) for i in range(x.ndim + 1)))
      x = x.flatten(axis, axis + 1)
      x = x.shrink(tuple((0, (n - 1) * step + 1) if i == axis else None for i in range(x.ndim)))
    end = start + x.shape[axis]
    return x.pad(tuple((start, size - end) if i == axis else (0, 0) for i in range(x.ndim)))

  def _setitem_advanced(self, plan: list[tuple], layout: list, v: Tensor) -> Tensor | None:
    # the flat positions the index selects, found by reading a tensor of positions with the same plan, counted from 1:
    # an out-of-range index reads 0, so it selects position -1, which is none (from 0, it wrote into element 0)
    pos_dt = dtypes.int64 if self.numel() >= 2**31 else dtypes.int32
    ones = Tensor.arange(1, self.numel() + 1, dtype=pos_dt, device=self.device).reshape(self.shape)
    pos = ones._read_plan(plan, layout) - 1
    if broadcast_shape(v.shape, pos.shape) != pos.shape:
      raise ValueError(f"cannot set a value of shape {v.shape} into a selection of shape {pos.shape}")
    nr, n = pos.numel(), self.numel()
    if nr == 0 or n == 0: return None
    hits = pos.reshape(nr)._index_hits(n)                                   # (nr, n)
    order = Tensor.arange(1, nr + 1, dtype=dtypes.int32, device=self.device).reshape(nr, 1)
    last = (hits.cast(dtypes.int32) * order).max(0)                          # the last write to each position
    pick = hits & (order == last.reshape(1, n))
    val = Tensor._masked_pick(v._broadcast_to(pos.shape).reshape(nr, 1), pick, 0)
    return (last > 0).where(val, self.flatten()).reshape(self.shape)

  def _index_hits(self, n: int) -> Tensor:
    """For an integer tensor: a bool tensor with a new last axis of size n, True where the value equals the position."""
    x = _wide_index(self) if self.dtype.is_int else self
    return x.unsqueeze(-1) == Tensor.arange(n, dtype=x.dtype if x.dtype.is_int else dtypes.int32, device=self.device)

  # ------------------------------------------------------------------ math (tinygrad 0.14's names)

  def eq(self, x: Any) -> Tensor:
    """Elementwise ==, as a method."""
    return self == x
  def ne(self, x: Any) -> Tensor:
    """Elementwise !=, as a method."""
    return self != x
  def bitwise_and(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise & of bool or integer tensors."""
    return self._logic(Ops.AND, x, reverse)
  def bitwise_or(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise | of bool or integer tensors."""
    return self._logic(Ops.OR, x, reverse)
  def bitwise_xor(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise ^ of bool or integer tensors."""
    return self._logic(Ops.XOR, x, reverse)
  def bitwise_not(self) -> Tensor:
    """Elementwise ~ (logical not for bool)."""
    return ~self
  def lshift(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise << of integer tensors."""
    return self._logic(Ops.SHL, x, reverse)
  def rshift(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise >> of integer tensors (arithmetic for signed types)."""
    return self._logic(Ops.SHR, x, reverse)
  def __rlshift__(self, x): return self.lshift(x, True)
  def __rrshift__(self, x): return self.rshift(x, True)

  # in-place operators write into this tensor (like assign), so other references see the new value, as in tinygrad
  def __iadd__(self, x): return self.assign(self + x)
  def __isub__(self, x): return self.assign(self - x)
  def __imul__(self, x): return self.assign(self * x)
  def __itruediv__(self, x): return self.assign(self / x)
  def __ifloordiv__(self, x): return self.assign(self // x)
  def __ipow__(self, x): return self.assign(self ** x)
  def __imatmul__(self, x): return self.assign(self @ x)
  def __iand__(self, x): return self.assign(self & x)
  def __ior__(self, x): return self.assign(self | x)
  def __ixor__(self, x): return self.assign(self ^ x)
  def __ilshift__(self, x): return self.assign(self << x)
  def __irshift__(self, x): return self.assign(self >> x)
  def __delitem__(self, index) -> None: raise TypeError("a Tensor does not support deleting items")

  def _log1p(self) -> Tensor:
    """log(1 + x) within a few ulp for every x >= -1: log(w) * (x / (w - 1)) with w = 1 + x rounded (Goldberg's
    trick: the rounding of 1 + x cancels out), x itself where w rounds to 1, inf at inf. log(1 + x) alone lost the
    digits of x that 1 + x rounded away (softplus: 8000 ulps of error near x = -9)."""
    x = self._float()
    w = 1 + x
    one = w == 1
    return one.where(x, (x == math.inf).where(x, w.log() * (x / one.where(1, w - 1))))

  def _odd_series(self, coeffs: Sequence[float]) -> Tensor:
    """x * (c0 + c1 x^2 + c2 x^4 + ...): the Taylor series of an odd function near 0."""
    z, acc = self * self, None
    for c in reversed(coeffs): acc = c if acc is None else acc * z + c
    return self * acc

  def log10(self) -> Tensor:
    """Base-10 logarithm."""
    return self.log2() * math.log10(2)

  def _half_exp_pair(self) -> tuple[Tensor, Tensor]:
    """(e^a / 2, e^-a / 2) for a = |x| >= 0, finite wherever cosh is: e^a overflows from a = 88.7, cosh only from
    89.4, so from 88 on e^a / 2 is e^(a - 88) (e^88 / 2) (a - 88 exact), and e^-a / 2 that of 88 (under 1e-76 of the
    other). exp(a - ln 2) rounded a - ln 2 first: |a| ulps of error."""
    a = self._float().abs()
    # e^a of a clamped below 88: an inf in the branch not taken would make its gradient 0 * inf = NaN
    e = a.minimum(88).exp()
    return (a < 88).where(e * 0.5, (a - 88).exp() * (math.exp(88) / 2)), 0.5 / e

  @_halves_in_float32  # e^x overflows a half at 11
  def sinh(self) -> Tensor:
    """Hyperbolic sine: its Taylor series below |x| = 0.5 (no cancellation), (e^|x| - e^-|x|) / 2 with x's sign
    above, finite wherever the result is."""
    x = self._float()
    up, down = x._half_exp_pair()
    series = x._odd_series([1, 1 / 6, 1 / 120, 1 / 5040, 1 / 362880, 1 / 39916800])
    return (x.abs() < 0.5).where(series, (x < 0).where(down - up, up - down))

  @_halves_in_float32  # as sinh
  def cosh(self) -> Tensor:
    """Hyperbolic cosine, finite wherever the result is."""
    up, down = self._half_exp_pair()
    return up + down

  @_halves_in_float32  # a^2 overflows a half at 256
  def asinh(self) -> Tensor:
    """Inverse hyperbolic sine."""
    x = self._float()
    a = x.abs()
    # log|x| + ln 2 past 1e9, where |x|^2 + 1 would overflow or round to |x|^2 (log(2|x|) overflowed past 1.7e38);
    # below, log1p(a + a^2 / (1 + sqrt(1 + a^2))) (log(a + sqrt(a^2 + 1)) near 1 lost digits: 15 ulps)
    big = (a > 1e9).where(a.log() + math.log(2), (a + a * a / (1 + (a * a + 1).sqrt()))._log1p())
    return (a < 0.1).where(x._odd_series([1, -1 / 6, 3 / 40, -5 / 112]), x.sign() * big)

  @_halves_in_float32  # as asinh
  def acosh(self) -> Tensor:
    """Inverse hyperbolic cosine (NaN below 1)."""
    x = self._float()
    # log1p(t + sqrt(t) sqrt(x + 1)) with t = x - 1 (exact near 1): log(x + sqrt(x^2 - 1)) lost digits there (8 ulps);
    # sqrt(t) is NaN below 1 (the product t (x + 1) is positive again below -1)
    t = x - 1
    return (x > 1e9).where(x.log() + math.log(2), (t + t.sqrt() * (x + 1).sqrt())._log1p())

  @_halves_in_float32  # as asinh
  def atanh(self) -> Tensor:
    """Inverse hyperbolic tangent (+-inf at +-1, NaN outside [-1, 1])."""
    x = self._float()
    # log1p(2a / (1 - a)) / 2 with x's sign, a = |x|: log((1 + x) / (1 - x)) rounded the quotient near 1 (8 ulps),
    # and for x < 0 the quotient 2x / (1 - x) nears -1, where log1p magnifies its rounding
    a = x.abs()
    big = (2 * a / (1 - a))._log1p() * 0.5
    return (a < 0.1).where(x._odd_series([1, 1 / 3, 1 / 5, 1 / 7, 1 / 9]), (x < 0).where(-big, big))

  @_halves_in_float32  # its constants made a half's result float32
  def atan(self) -> Tensor:
    """Inverse tangent: Cephes' range reduction to |x| <= tan(pi/8) and its minimax polynomial."""
    x = self._float()
    a = x.abs()
    big, mid = a > 2.414213562373095, a > 0.4142135623730950
    r = big.where(-1 / a, mid.where((a - 1) / (a + 1), a))
    base = big.where(math.pi / 2, mid.where(math.pi / 4, 0.0))
    z = r * r
    poly = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * r + r
    # differentiated as 1 / (1 + x²): through |x| and sign(x), which have no slope at 0, the gradient there was 0
    return (x.sign() * (base + poly))._with_gradient("atan", x)

  @_halves_in_float32  # as atan
  def asin(self) -> Tensor:
    """Inverse sine (NaN outside [-1, 1])."""
    x = self._float()
    return (x / ((1 - x) * (1 + x)).sqrt()).atan()

  @_halves_in_float32  # as atan
  def acos(self) -> Tensor:
    """Inverse cosine (NaN outside [-1, 1])."""
    x = self._float()
    return ((1 - x) / (1 + x)).sqrt().atan() * 2

  def erf(self) -> Tensor:
    """The error function: its Taylor series below 0.5, Abramowitz and Stegun 7.1.26 above (error < 2e-7)."""
    x = self._float()
    a = x.abs()
    # the series sees only its own range: at |x| = 1e4 its x^13 would be inf, and its zero gradient NaN
    series = (a < 0.5).where(x, 0.0)._odd_series([1, -1 / 3, 1 / 10, -1 / 42, 1 / 216, -1 / 1320, 1 / 9360]) * \
      (2 / math.sqrt(math.pi))
    t = 1 / (1 + 0.3275911 * a)
    poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
    return (a < 0.5).where(series, x.sign() * (1 - poly * (-a * a).exp()))

  @_halves_in_float32  # e^(-x^2) underflows a half at 3.3
  def erfc(self) -> Tensor:
    """1 - erf(x) with small relative error where it is tiny (x large): Numerical Recipes' erfcc, relative error
    below 1.2e-7 (1 - erf loses every digit there: erf's own error is absolute)."""
    x = self._float()
    a = x.abs()
    t = 1 / (1 + 0.5 * a)
    poly = 1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (
      -1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))
    tail = t * (t * poly - 1.26551223 - a * a).exp()  # erfc(|x|)
    return (x < 0).where(2 - tail, tail)

  def round(self) -> Tensor:
    """Round to the nearest integer, halves to even (like torch and numpy); integers are unchanged."""
    if not self.dtype.is_float: return self
    t = self.trunc()
    frac, half_t = self - t, t * 0.5
    away = t + self.sign()
    t_even = half_t.trunc() == half_t
    return (frac.abs() > 0.5).where(away, ((frac.abs() == 0.5) & t_even.logical_not()).where(away, t))

  def copysign(self, other: Any) -> Tensor:
    """|self| with the sign of `other` (including the sign of -0.0)."""
    a, b = self._float()._binary_operands(other)
    b = b._float()
    mag = a.abs()
    return ((b < 0) | (b.reciprocal() < 0)).where(-mag, mag)

  def fmod(self, x: Any) -> Tensor:
    """Remainder with the sign of the dividend (C's fmod, torch.fmod); integer x % 0 is 0."""
    a, b = self._binary_operands(x)
    if a.dtype == dtypes.bool: raise TypeError("fmod of bool tensors is not supported")
    if a.dtype.is_int: return a._alu(Ops.MOD, b)
    return a - (a / b).trunc() * b

  def lerp(self, end: Tensor, weight: Tensor | float) -> Tensor:
    """self + (end - self) * weight."""
    return self + (end - self) * weight

  def logaddexp(self, other: Any) -> Tensor:
    """log(exp(self) + exp(other)), computed without overflow."""
    a, b = self._float()._binary_operands(other)
    a, b = a._float(), b._float()
    m = a.maximum(b)
    return (a == b).where(a + math.log(2), m + (-(a - b).abs()).exp()._log1p())

  def isnan(self) -> Tensor:
    """True where the value is NaN."""
    return self != self
  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """True where the value is +inf (detect_positive) or -inf (detect_negative)."""
    if not self.dtype.is_float: return self.full_like(False, dtype=dtypes.bool)
    pos = (self == float("inf")) if detect_positive else self.full_like(False, dtype=dtypes.bool)
    return (pos | (self == float("-inf"))) if detect_negative else pos
  def isfinite(self) -> Tensor:
    """True where the value is neither infinite nor NaN."""
    return (self.isinf() | self.isnan()).logical_not()

  def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other| elementwise; infinities are close only to themselves."""
    a, b = self._binary_operands(other)
    if not a.dtype.is_float: return a == b
    close = a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs())
    close = close | ((a.isinf() | b.isinf()) & (a == b))
    return close | (a.isnan() & b.isnan()) if equal_nan else close

  def allclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """A 0-d bool tensor: isclose everywhere (a Tensor, as in tinygrad; `.item()` gives the bool)."""
    return self.isclose(other, rtol, atol, equal_nan).all()

  # ------------------------------------------------------------------ activations

  def elu(self, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    x = self._float()
    return (x > 0).where(x, alpha * (x._below_zero().exp() - 1))
  def celu(self, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    x = self._float()
    # torch's gradient: 1 above 0, e^(x/alpha) from 0 down (a min/max tie would halve it where e^x - 1 rounds to 0)
    return (x > 0).where(x, alpha * ((x._below_zero() / alpha).exp() - 1))
  @_halves_in_float32  # e^x - 1 of a half lost digits
  def selu(self, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Tensor:
    """gamma * (x for x > 0, alpha * (exp(x) - 1) otherwise), with torch's constants."""
    x = self._float()
    return gamma * (x > 0).where(x, alpha * (x._below_zero().exp() - 1))
  def _below_zero(self) -> Tensor:
    # x where x <= 0, else 0: what an exp(x) branch of a where sees, so that the branch not taken stays finite
    # (e^100 = inf would make its zero gradient 0 * inf = NaN)
    return (self > 0).where(0.0, self)
  def relu6(self) -> Tensor:
    """min(max(x, 0), 6)."""
    return self.hardtanh(0, 6)
  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """clip(alpha * x + beta, 0, 1)."""
    return (alpha * self._float() + beta).hardtanh(0, 1)
  @_halves_in_float32  # x * 6 overflows a half past 10922
  def hardswish(self) -> Tensor:
    """x * relu6(x + 3) / 6."""
    x = self._float()
    return x * (x + 3).relu6() * (1 / 6)
  def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Tensor:
    """clip(x, min_val, max_val), whose gradient is 0 on the bounds (torch's; clip's is 1 there)."""
    return self.clip(min_val, max_val)._with_gradient("hardtanh", self, params=(float(min_val), float(max_val)))
  @_halves_in_float32  # as silu
  def mish(self) -> Tensor:
    """x * tanh(softplus(x))."""
    return self * self.softplus().tanh()
  def softsign(self) -> Tensor:
    """x / (1 + |x|)."""
    x = self._float()
    return x / (1 + x.abs())
  @_halves_in_float32  # as silu
  def quick_gelu(self) -> Tensor:
    """x * sigmoid(1.702 x)."""
    return self * (self * 1.702).sigmoid()
  def softmin(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
    """softmax(-x) along `axis`."""
    return (-self._float()).softmax(axis, dtype)

  # ------------------------------------------------------------------ reductions and scans (tinygrad 0.14's names)

  def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """True where any value over `axis` is nonzero (False over an empty axis)."""
    if (empty := self._empty_reduction(axis, keepdim, False, dtypes.bool)) is not None: return empty
    return (self != 0).cast(dtypes.int32).max(axis, keepdim).cast(dtypes.bool)

  def _empty_reduction(self, axis: int | Sequence[int] | None, keepdim: bool, value: Any, dtype: DType) -> Tensor | None:
    """A reduction over `axis` where a reduced axis is empty: `value` (the reduction of nothing) in the shape the
    reduction gives; None where every reduced axis has elements (for reductions whose max has no identity there)."""
    axes = self._axes(axis)
    if not any(self.shape[a] == 0 for a in axes): return None
    shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape) if keepdim or i not in axes)
    return Tensor.full(shape, value, dtype=dtype, device=self.device)

  def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """True where every value over `axis` is nonzero (True over an empty axis)."""
    return self.logical_not().any(axis, keepdim).logical_not()

  def var_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
               correction: int = 1) -> tuple[Tensor, Tensor]:
    """(var, mean) over `axis`."""
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  def std_mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
               correction: int = 1) -> tuple[Tensor, Tensor]:
    """(std, mean) over `axis`."""
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  def _cum(self, ax: int, op: Ops, acc: DType | None = None) -> Tensor:
    """The running `op` (ADD, MUL or MAX) along axis `ax`: every output is the reduction of a window of the input
    padded before it with the identity. The windows are made on the axis moved last and put back in place before the
    reduction, so the kernel writes the result in this tensor's layout and reads along its contiguous axis (a scan of
    1024x1024 along axis 0, transposed there and back, read rows 1024 floats apart: 51 ms -> 1.3 ms). Axes longer than
    64 are scanned in chunks of 32 and the chunk totals scanned again (recursively), so the work stays near n * 32, not
    n^2 (chunks of 256 measured 3-6x slower: 1024x1024 along axis 1 2.1 -> 0.64 ms, along axis 0 1.3 -> 0.22 ms). The
    totals are each chunk's own reduction, read along it, not the chunk scans' last column, one element in 32 of their
    output (4096x4096 along rows: 20.7 -> 10 ms; 1024x1024 1.6-2.9 -> 0.7-1.2 ms). The axis is padded at its end to
    whole chunks, so a vector of outputs lies in one chunk (8x50257: padded at the start its lanes straddled chunks
    and read them as gathers; 1.1 -> 0.73 ms with the lanes' index math folded, see codegen.vectorize). `acc`: the
    dtype a running sum accumulates in (the sum's own by default)."""
    n = self.shape[ax]
    ident = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: self.dtype.min}[op]
    reduce = {Ops.ADD: lambda t, a: t.sum(a, dtype=acc), Ops.MUL: Tensor.prod, Ops.MAX: Tensor.max}[op]

    def pad(x: Tensor, before: int, after: int) -> Tensor:
      return x.pad(tuple((before, after) if i == ax else (0, 0) for i in range(x.ndim)), value=ident)
    if n <= 64:
      return reduce(pad(self, n - 1, 0).transpose(ax, -1)._pool_last(n, 1, 1).transpose(ax, -2), -1)
    chunk = 32
    full = -(-n // chunk) * chunk
    x = pad(self, 0, full - n)
    x = x.reshape(x.shape[:ax] + (full // chunk, chunk) + x.shape[ax + 1:])
    inner = x._cum(ax + 1, op, acc)
    # what the earlier chunks contribute: the scan of the chunks' totals, shifted by one chunk
    totals = reduce(x, ax + 1)
    before = pad(totals._cum(ax, op, acc), 1, -1).unsqueeze(ax + 1)
    out = inner._bin(op, before).flatten(ax, ax + 1)
    return out.shrink(tuple((0, n) if i == ax else None for i in range(out.ndim)))

  def _cumulative(self, axis: int, op: Ops) -> Tensor:
    """The running `op` along `axis`, in the dtype the matching reduction returns."""
    if self.ndim == 0: return self.reshape(1)._cumulative(0, op).reshape(())
    ax = _norm_axis(axis, self.ndim)
    if self.shape[ax] == 0:
      halves = (dtypes.float16, dtypes.bfloat16)
      return self if op is Ops.MAX or self.dtype in halves else self.cast(_sum_dtype(self.dtype))
    if op is Ops.ADD and _sum_dtype(self.dtype) == dtypes.int64 and self.dtype.itemsize <= 2 and \
        self.shape[ax] * max(abs(self.dtype.min), self.dtype.max) < 2**31:
      # bools and small ints whose running sums fit int32 (a mask's cumsum: positions) sum in int32, twice the lanes
      # of int64 (8x50257 bools: 1.5-1.8 -> 0.9 ms, 1024x1024 2.0 -> 0.86 ms), and the result is int64 as torch's
      # (bools as int32 in a buffer first: a window's gated loads of bools take no vector lanes)
      x = self.cast(dtypes.int32).contiguous() if self.dtype == dtypes.bool else self
      return x._cum(ax, op, dtypes.int32).cast(dtypes.int64)
    return self._cum(ax, op)

  def cumsum(self, axis: int = 0) -> Tensor:
    """Running sum along `axis`, in sum's dtype (bools and integers give int64, as torch)."""
    return self._cumulative(axis, Ops.ADD)

  def cumprod(self, axis: int) -> Tensor:
    """Running product along `axis`."""
    return self._cumulative(axis, Ops.MUL)

  def cummax(self, axis: int = 0) -> tuple[Tensor, Tensor]:
    """(running max, index of it) along `axis`; among equal values the latest index, as torch."""
    if self.ndim == 0: return self, Tensor.zeros((), dtype=dtypes.int32, device=self.device)
    ax = _norm_axis(axis, self.ndim)
    values = self._cumulative(ax, Ops.MAX)
    n = self.shape[ax]
    if n == 0: return values, self.zeros_like(dtype=dtypes.int32)
    x, v = self.transpose(ax, -1), values.transpose(ax, -1)
    # hit[i, j]: input i (at or before j) equals the running max at j; the largest such i is the index. A NaN is
    # the running max from where it comes on, and the latest NaN its index (torch's; == never held for it: -1)
    hit = x.unsqueeze(-1) == v.unsqueeze(-2)
    if self.dtype.is_float: hit = hit | (x.isnan().unsqueeze(-1) & v.isnan().unsqueeze(-2))
    hit = hit & _triangle(n, n, 0, True, self.device)
    pos = Tensor.arange(1, n + 1, dtype=dtypes.int32, device=self.device).reshape(n, 1)
    idx = (hit.cast(dtypes.int32) * pos).max(-2) - 1
    return values, idx.transpose(ax, -1)

  def cummin(self, axis: int = 0) -> tuple[Tensor, Tensor]:
    """(running min, index of it) along `axis`: the running max of the order-reversed values (-x for floats,
    ~x for integers and bools, which, unlike -x, cannot overflow at the type's minimum)."""
    flip = (lambda t: -t) if self.dtype.is_float else (lambda t: ~t)
    values, idx = flip(self).cummax(axis)
    return flip(values), idx

  def logcumsumexp(self, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along `axis`, shifted by the running max so neither end overflows or underflows."""
    x = self._float()
    if x.ndim == 0: return x
    ax = _norm_axis(axis, x.ndim)
    n = x.shape[ax]
    if n == 0: return x
    xt = x.transpose(ax, -1)
    m = xt.cummax(-1)[0]
    m = m.isinf().where(0.0, m)  # an infinite running max would turn x - m into NaN
    keep = _triangle(n, n, 0, False, self.device)  # keep[j, i]: i <= j
    # exp of -inf where not kept: exp(x_i - m_j) for a later, larger x_i would be inf, and its zero gradient NaN
    terms = keep.where(xt.unsqueeze(-2) - m.unsqueeze(-1), -math.inf).exp()
    return (terms.sum(-1).log() + m).transpose(ax, -1)

  # ------------------------------------------------------------------ sorting and selection

  def sort(self, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along `dim`; stable (equal values keep their order), NaN sorts as the largest.
    Up to SORT_RANK_MAX elements each one's rank is counted in one pass (n^2 work per row); longer axes go
    through a bitonic network (n log^2 n work, one kernel per compare step) on one int64 per element (its value's
    order key above its position) where the values have 32 bits or fewer, else on (value, index) pairs."""
    if self.ndim == 0: return self, Tensor.zeros((), dtype=dtypes.int32, device=self.device)
    d = _norm_axis(dim, self.ndim)
    n = self.shape[d]
    if n <= 1: return self, self.zeros_like(dtype=dtypes.int32)
    x = self.transpose(d, -1)
    if n <= SORT_RANK_MAX: values, idx = x._sort_by_rank(descending)
    elif self.dtype in _TOPK_KEYED:
      # one int64 per element, its order key above its position: the network compares and moves one array of
      # distinct values, equal keys going by position by themselves, and the values are gathered by position at the
      # end (1024x1024 along rows: 19 -> 15 ms, 11.5 with its runs' picks 16 outputs per thread; argsort of 4096
      # 6.0 -> 3.2 ms)
      p = 1 << (n - 1).bit_length()
      key = x._order_key()
      key = (~key if descending else key).pad(((0, 0),) * (x.ndim - 1) + ((0, p - n),), value=2**31 - 1)
      pos = Tensor.arange(p, dtype=dtypes.int64, device=self.device)
      # (times 2**32, not << 32: a C-style device's shift of a negative value is undefined; the padding sorts last)
      packed = Tensor._bitonic_network(key.cast(dtypes.int64) * 2**32 + pos)
      idx = (packed.shrink((None,) * (x.ndim - 1) + ((0, n),)) & 0xFFFFFFFF).cast(dtypes.int32)
      values = x.gather(-1, idx)
    else: values, idx = x._sort_bitonic(descending)
    return values.transpose(d, -1), idx.transpose(d, -1)

  @staticmethod
  def _goes_first(va: Tensor, ia: Tensor, vb: Tensor, ib: Tensor, descending: bool) -> Tensor:
    """Whether (va, ia) sorts before (vb, ib): by value (NaN largest), ties by index, so the order is stable."""
    first = (va > vb) if descending else (va < vb)
    same = va == vb
    if va.dtype.is_float:
      na, nb = va.isnan(), vb.isnan()
      first = first | ((na & nb.logical_not()) if descending else (nb & na.logical_not()))
      same = same | (na & nb)
    return first | (same & (ia < ib))

  def _sort_by_rank(self, descending: bool, idx: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Sort the last axis: each element goes to the count of elements that sort before it. Equal values go by `idx`,
    each element's index carried along (its position by default), which comes back in the new order."""
    n = self.shape[-1]
    if idx is None: idx = Tensor.arange(n, dtype=dtypes.int32, device=self.device)
    # [i, j]: element j sorts before element i
    before = Tensor._goes_first(self.unsqueeze(-2), idx.unsqueeze(-2), self.unsqueeze(-1), idx.unsqueeze(-1),
                                descending)
    # [i, r]: element i goes to r (counted in int32: int64 counts halved the lanes; 1024x1024 sorted 26 -> 19 ms)
    hits = before.sum(-1, dtype=dtypes.int32)._index_hits(n)
    return Tensor._masked_pick(self.unsqueeze(-1), hits, -2), Tensor._masked_pick(idx.unsqueeze(-1), hits, -2)

  def _sort_bitonic(self, descending: bool) -> tuple[Tensor, Tensor]:
    """Sort the last axis with a bitonic network carrying each value's index (padded to a power of two with
    values that sort last). For each block size b: compare element j of every 2b block with element 2b-1-j,
    then with j + b/2, j + b/4, ..., 1: every comparison puts the pair in the same direction."""
    lead, n = self.shape[:-1], self.shape[-1]
    p = 1 << (n - 1).bit_length()
    if self.dtype.is_float: fill = float("-inf") if descending else float("nan")
    else: fill = self.dtype.min if descending else self.dtype.max
    nolead = ((0, 0),) * len(lead)
    v = self.pad(nolead + ((0, p - n),), value=fill)
    i = Tensor.arange(p, dtype=dtypes.int32, device=self.device)._broadcast_to(lead + (p,))

    # row 0 of each block's two halves keeps the one of its pair that goes first, row 1 the other
    second = Tensor.arange(2, dtype=dtypes.int32, device=self.device).reshape(2, 1) == 1

    def step(v: Tensor, i: Tensor, half: int, mirror: bool) -> tuple[Tensor, Tensor]:
      # each element against its partner in the other half (the mirrored one: the other half reversed), all at once:
      # built with a third of the ops of picking the halves and stacking them again (float32, before it sorted packed
      # keys: argsort of 4096 13.7 -> 5.8 ms in all, 11.3 -> 4.6 ms building it; 1024x1024 along rows 52 -> 36 ms)
      shape = lead + (p // (2 * half), 2, half)
      vs, is_ = v.reshape(shape), i.reshape(shape)
      axes = (-2, -1) if mirror else (-2,)
      pv, pi = vs.flip(axes), is_.flip(axes)
      keep = Tensor._goes_first(vs, is_, pv, pi, descending) != second  # indices differ: exactly one goes first
      return keep.where(vs, pv).reshape(lead + (p,)).contiguous(), keep.where(is_, pi).reshape(lead + (p,)).contiguous()

    def runs_sorted(v: Tensor, i: Tensor) -> tuple[Tensor, Tensor]:
      # every run of BITONIC_RUN sorted at once by rank, the carried indices breaking ties
      shape = lead + (p // run, run)
      vs, is_ = v.reshape(shape)._sort_by_rank(descending, i.reshape(shape))
      return vs.reshape(lead + (p,)).contiguous(), is_.reshape(lead + (p,)).contiguous()

    run = min(p, BITONIC_RUN)
    v, i = Tensor._bitonic_stages(p, run, (v, i), lambda vi, half, mirror: step(*vi, half, mirror),
                                  lambda vi: runs_sorted(*vi))
    keep = (None,) * len(lead) + ((0, n),)
    return v.shrink(keep), i.shrink(keep)

  @staticmethod
  def _bitonic_stages(p: int, run: int, arrays: _Sorted, step: Callable[[_Sorted, int, bool], _Sorted],
                      runs_sorted: Callable[[_Sorted], _Sorted]) -> _Sorted:
    """The bitonic network's schedule over `arrays` (p elements along the last axis): the compare steps within a run
    of `run` (the first log2(run) stages whole, and each later stage's last log2(run) steps) are one kernel sorting
    every run (`runs_sorted`), the others `step(arrays, half, mirror)`. 1024x1024 along rows took 55 kernels and
    75-92 ms with a kernel per step, and 28 and 56-60 ms so (runs of 32: 65-80 ms, their kernel counting 32 pairs per
    pair)."""
    arrays = runs_sorted(arrays)
    block = run
    while block < p:
      arrays = step(arrays, block, True)
      half = block // 2
      while half >= run:
        arrays = step(arrays, half, False)
        half //= 2
      arrays = runs_sorted(arrays)  # each run is bitonic now, and in place among the others: sorting it ends the stage
      block *= 2
    return arrays

  @staticmethod
  def _bitonic_network(x: Tensor) -> Tensor:
    """`x` (distinct values, a power of two along the last axis) sorted ascending along its last axis: each step keeps
    the smaller of a pair in the first half, each run of BITONIC_RUN ranked by counting the values below each."""
    lead, p = x.shape[:-1], x.shape[-1]
    second = Tensor.arange(2, dtype=dtypes.int32, device=x.device).reshape(2, 1) == 1

    def step(v: Tensor, half: int, mirror: bool) -> Tensor:
      vs = v.reshape(lead + (p // (2 * half), 2, half))
      pv = vs.flip((-2, -1) if mirror else (-2,))
      return ((vs < pv) != second).where(vs, pv).reshape(lead + (p,)).contiguous()

    def runs_sorted(v: Tensor) -> Tensor:
      vs = v.reshape(lead + (p // run, run))
      rank = (vs.unsqueeze(-2) < vs.unsqueeze(-1)).sum(-1, dtype=dtypes.int32)  # the values below each
      return Tensor._masked_pick(vs.unsqueeze(-1), rank._index_hits(run), -2).reshape(lead + (p,)).contiguous()
    run = min(p, BITONIC_RUN)
    return Tensor._bitonic_stages(p, run, x, step, runs_sorted)

  def argsort(self, dim: int = -1, descending: bool = False) -> Tensor:
    """The indices that sort `dim` (stable)."""
    return self.sort(dim, descending)[1]

  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (or smallest) along `dim`, in sorted order."""
    d = _norm_axis(dim, self.ndim)
    n = self.shape[d] if self.ndim else 1
    if not isinstance(k, (int, np.integer)) or not 0 <= k <= n:
      raise ValueError(f"topk k={k!r} is out of range for dimension {dim} of size {n}")
    if 1 <= k <= TOPK_PASSES_MAX and n >= TOPK_PASSES_FROM and self.dtype != dtypes.bool:
      return self._top_by_passes(d, k, largest)
    if k > TOPK_PASSES_MAX and n > SORT_RANK_MAX and k * TOPK_THRESHOLD_FRACTION <= n and self.dtype in _TOPK_KEYED:
      return self._top_by_threshold(d, k, largest)
    values, idx = self.sort(d, descending=largest)
    if self.ndim == 0: return values, idx
    keep = tuple((0, k) if i == d else None for i in range(self.ndim))
    return values.shrink(keep), idx.shrink(keep)

  def _top_by_passes(self, d: int, k: int, largest: bool) -> tuple[Tensor, Tensor]:
    """topk of a few along a long axis: k passes, each taking the first position of the best value still left (NaN
    counts as the largest, equal values go by position: the stable sort's order) and leaving it out of the next.
    k reductions over the axis instead of sorting it (1024x1024, k = 5: 60 -> 0.83 ms; torch 0.65 ms)."""
    n = self.shape[d]
    pos = Tensor.arange(n, dtype=dtypes.int32, device=self.device).reshape((n,) + (1,) * (self.ndim - d - 1))
    if self.dtype.is_float: worst = -math.inf if largest else math.inf
    else: worst = self.dtype.min if largest else self.dtype.max
    left = Tensor.full(self.shape, True, dtype=dtypes.bool, device=self.device)
    nan = self.isnan() if self.dtype.is_float else None
    values, idxs = [], []
    for _ in range(k):
      ordered = left if nan is None else left & nan.logical_not()
      best = ordered.where(self, worst)
      best = best.max(d, keepdim=True) if largest else best.min(d, keepdim=True)
      pick = ordered & (self == best)
      if nan is not None:  # NaNs left come before every number (largest) or after them all
        nans = left & nan
        if largest: pick = nans.any(d, keepdim=True).where(nans, pick)
        else: pick = ordered.any(d, keepdim=True).where(pick, nans)
      i = pick.cast(dtypes.int32).argmax(d, keepdim=True)
      values.append(self.gather(d, i))
      idxs.append(i)
      left = left & (pos != i)
    return Tensor.cat(*values, dim=d), Tensor.cat(*idxs, dim=d)

  def _top_by_threshold(self, d: int, k: int, largest: bool) -> tuple[Tensor, Tensor]:
    """topk of many along a long axis without sorting it: each element's value as an int32 key in the same order, the
    k-th largest key found bit by bit (32 passes over the axis: the largest key that at least k elements reach), the
    elements above it and the first ones equal to it taken (k exactly, in position order), their positions found from
    the counts of chunks of the axis (`_taken_positions`), and only those k sorted (values, then positions: the stable
    sort's order). 8x50257, k = 50: 114-283 ms as a bitonic sort then, 4.5 ms so (3 of them building the graph of the
    32 passes; torch: 0.18-0.27 ms); 1.9-2.0 ms by 2026-11-28, 0.28-0.32 ms under TinyJit (0.78 ms with a running
    count along the whole axis and the keys computed in every pass)."""
    x = self.transpose(d, -1)
    # the keys in a buffer that every pass reads (computed from the values in each pass: 8x50257, k = 50, under TinyJit
    # 0.52-0.54 -> 0.31-0.34 ms, eager 3.14-3.15 -> 2.94-2.96 ms)
    key = (x._order_key() if largest else ~x._order_key()).contiguous()
    # the threshold t, bit by bit from the top of (key - INT_MIN): a pass's candidate, t with its bit set, is kept when
    # k or more keys reach it, that is when fewer than `below` lie below it (a count of key < cand needs no not: eager
    # 2.79-2.83 -> 2.70-2.76 ms). One candidate a pass: two bits a pass, three candidates counted in one kernel, took
    # 0.37 ms under TinyJit and 3.3 ms eager, no fewer nodes to build; four bits, 8 passes of 0.32 ms against 32 of
    # 0.03 ms. Each pass's nodes are built directly (topk's graph built in 1.74-1.76 -> 1.14 ms), the count too
    # unless the axis is long enough for sum to split it.
    below = key.shape[-1] - k + 1
    i32, full, one = dtypes.int32, key.shape, key.shape[:-1] + (1,)
    splits = _may_split(full[-1], self.device)
    t = _const_at(i32, -2**31, one)
    for bit in range(31, -1, -1):
      cand = UOp(Ops.XOR, i32, (t, _const_at(i32, -2**31 if bit == 31 else 1 << bit, one)))
      lt = UOp(Ops.CMPLT, dtypes.bool, (key.uop, broadcast(cand, full)))
      if splits: count = Tensor._from(lt, self.device).sum(-1, keepdim=True, dtype=i32).uop
      else: count = UOp(Ops.REDUCE_AXIS, i32, (UOp(Ops.CAST, i32, (lt,)),), (Ops.ADD, (len(full) - 1,)))
      t = UOp(Ops.WHERE, i32, (UOp(Ops.CMPLT, dtypes.bool, (count, _const_at(i32, below, one))), cand, t))
    threshold = Tensor._from(t, self.device)
    pos = Tensor._taken_positions(key > threshold, key == threshold, k)
    values, order = x.gather(-1, pos).sort(-1, descending=largest)
    return values.transpose(d, -1), pos.gather(-1, order).transpose(d, -1)

  def _order_key(self) -> Tensor:
    """Each value (a _TOPK_KEYED dtype) as an int32 in the same order: equal values one key (-0.0 and 0.0 too), NaN
    the largest."""
    if not self.dtype.is_float: return self.cast(dtypes.int32)
    f = self.cast(dtypes.float32)
    bits = (f == 0).where(0.0, f).bitcast(dtypes.int32)
    # the negatives' magnitude bits run backwards
    return f.isnan().where(2**31 - 1, bits ^ ((bits >> 31) & 0x7FFFFFFF))

  @staticmethod
  def _taken_positions(above: Tensor, tied: Tensor, k: int) -> Tensor:
    """The positions along the last axis, in order, of the k elements topk takes: every one `above` its threshold and
    the first ones `tied` with it, as many as k leaves (at least that many are tied). Counted by chunks of TOPK_CHUNK:
    the running totals of the chunks' counts say which chunk holds the r-th element taken, and only that chunk is
    counted element by element (`_chunk_positions`, as for `_first_reaching`'s running count), so no scan runs along
    the whole axis (8x50257, k = 50: the scan of both counts took 0.25 ms of topk's 0.96 ms of kernels)."""
    # each element's flags as one int32, above in the low 16 bits and tied in the high (a chunk's counts fit both), so
    # one sum, one gather and one scan serve both (topk's graph built in 1.51-1.53 -> 1.34-1.36 ms)
    flags = Tensor._chunked(above.cast(dtypes.int32) + (tied.cast(dtypes.int32) << 16), 0)
    counts = flags.sum(-1, dtype=dtypes.int32)
    # the running totals of the chunks in one scan, above in the low 32 bits and tied in the high
    packed = (counts & 0xFFFF).cast(dtypes.int64) + ((counts >> 16).cast(dtypes.int64) << 32)
    both = packed.cumsum(-1)
    a_run, t_run = (both & 0xFFFFFFFF).cast(dtypes.int32), (both >> 32).cast(dtypes.int32)
    need = k - a_run[..., -1:]  # how many tied ones are taken

    def taken(at: Tensor, picked: Tensor) -> Tensor:  # (..., k, chunk): taken up to each element of chunk `at`
      before = (both - packed).gather(-1, at).unsqueeze(-1)  # (..., k, 1): the totals before that chunk
      inside = picked.cumsum(-1)  # and in it
      above_n, tied_n = (before & 0xFFFFFFFF) + (inside & 0xFFFF), (before >> 32) + (inside >> 16)
      return above_n + tied_n.minimum(need.unsqueeze(-1))
    return Tensor._chunk_positions(flags, a_run + t_run.minimum(need), k, taken)

  @staticmethod
  def _first_reaching(running: Tensor, k: int) -> Tensor:
    """For nondecreasing values below k along the last axis (a running count), how many are <= r, for r = 0..k-1 (for
    a count: the position of the r-th element counted; for sorted ids: where the ids past r start). Counted in chunks
    of TOPK_CHUNK: the chunks whose last value is <= r, then the values within the next chunk (gathered; the last
    chunk when every chunk is), so the work is k per chunk and k * TOPK_CHUNK, not k per position (topk of 8x50257,
    k = 50: one kernel of 0.6 ms -> two of 0.03 ms)."""
    blocks = Tensor._chunked(running, k)
    return Tensor._chunk_positions(blocks, blocks[..., TOPK_CHUNK - 1], k)

  @staticmethod
  def _chunked(x: Tensor, fill: int) -> Tensor:
    """The last axis in chunks of TOPK_CHUNK, (..., n) -> (..., chunks, TOPK_CHUNK), the last one padded with `fill`."""
    n, chunk = x.shape[-1], TOPK_CHUNK
    full = -(-n // chunk) * chunk
    return x.pad(((0, 0),) * (x.ndim - 1) + ((0, full - n),), value=fill).reshape(x.shape[:-1] + (full // chunk, chunk))

  @staticmethod
  def _chunk_positions(blocks: Tensor, ends: Tensor, k: int,
                       within: Callable[[Tensor, Tensor], Tensor] | None = None) -> Tensor:
    """For nondecreasing values in chunks (`_chunked`), `ends` (..., chunks) each chunk's last one, how many are <= r
    for r = 0..k-1: the chunks whose end is <= r, then the values within the next chunk (the last when every chunk's
    is), its block gathered, or `within(at, block)` of it where the blocks hold what the values are made from."""
    chunks, chunk = blocks.shape[-2:]
    slots = Tensor.arange(k, dtype=dtypes.int32, device=blocks.device).reshape(k, 1)
    at = (ends.unsqueeze(-2) <= slots).sum(-1, dtype=dtypes.int32).minimum(chunks - 1)  # (..., k): the r-th one's chunk
    block = blocks.gather(-2, at.unsqueeze(-1).expand(at.shape + (chunk,)))  # (..., k, chunk)
    return at * chunk + ((block if within is None else within(at, block)) <= slots).sum(-1, dtype=dtypes.int32)

  def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
    """`value` where `mask` is True, self elsewhere (dtype of self)."""
    return mask.where(value, self).cast(self.dtype)

  def gather(self, dim: int, index: Tensor) -> Tensor:
    """out[..., i, ...] = self[..., index[..., i, ...], ...] along `dim` (index.shape[k] <= self.shape[k] elsewhere)."""
    if not isinstance(index, Tensor): raise TypeError(f"gather index must be a Tensor, got {type(index).__name__}")
    if index.device != self.device: raise ArgumentError(f"gather index on {index.device}, tensor on {self.device}")
    if not index.dtype.is_int:
      raise ArgumentTypeError(f"gather index must be an integer tensor, not {index.dtype.name}")
    if index.ndim != self.ndim:
      raise ArgumentError(f"gather index {index.shape} and tensor {self.shape} differ in dimensions")
    d = _norm_axis(dim, self.ndim)
    if self.ndim == 0: return self.reshape(1).gather(0, index.reshape(1)).reshape(())  # a scalar's one value
    if any(i > s for k, (s, i) in enumerate(zip(self.shape, index.shape)) if k != d):
      raise ValueError(f"gather index {index.shape} is larger than {self.shape} outside dimension {dim}")
    index = _wide_index(index)
    if not (_plain_sizes(self.shape) and _plain_sizes(index.shape)) or isinstance(self.device, tuple):
      x = self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
      x = x.unsqueeze(-1).transpose(-1, d)  # the gathered axis moves last, size 1 left in its place
      return Tensor._masked_pick(x, index._index_hits(self.shape[d]), -1)
    # the same one-hot pick with its shrink, moves, compare and where as nodes, one tensor before the sum (60 -> 31 us)
    n, full = self.shape[d], index.shape + (self.shape[d],)
    x, bounds = self._uop, tuple((0, s) if k == d else (0, i) for k, (s, i) in enumerate(zip(self.shape, index.shape)))
    if bounds != tuple((0, s) for s in self.shape): x = UOp(Ops.SHRINK, x.dtype, (x,), bounds)
    order = list(range(self.ndim + 1))
    order[d], order[-1] = order[-1], order[d]
    x = UOp(Ops.PERMUTE, x.dtype, (UOp(Ops.RESHAPE, x.dtype, (x,), x.shape + (1,)),), tuple(order))
    at = Tensor.arange(n, dtype=index.dtype, device=self.device).uop
    hits = UOp(Ops.CMPEQ, dtypes.bool, (broadcast(UOp(Ops.RESHAPE, index.dtype, (index.uop,), index.shape + (1,)), full),
                                        broadcast(at, full)))
    picked = UOp(Ops.WHERE, self.dtype, (hits, broadcast(x, full), _const_at(self.dtype, 0, full)))
    return self._new(picked).sum(-1).cast(self.dtype)

  def _scatter_parts(self, dim: int, index: Tensor, src: Tensor) -> tuple[int, Tensor, Tensor]:
    """For scatter: (dim, src, mask), both shaped self.shape + (m,): mask[..., p, ..., j] says that source
    element j (along dim) goes to position p."""
    if not isinstance(index, Tensor) or not index.dtype.is_int:
      raise ArgumentTypeError("scatter index must be an integer Tensor")
    if index.device != self.device or src.device != self.device:
      raise ArgumentError(f"scatter: tensor on {self.device}, index on {index.device}, src on {src.device}")
    if not index.ndim == self.ndim == src.ndim:
      raise ValueError(f"scatter: tensor {self.shape}, index {index.shape} and src {src.shape} differ in dimensions")
    d = _norm_axis(dim, self.ndim)
    for k, (s, i, r) in enumerate(zip(self.shape, index.shape, src.shape)):
      if i > r or (k != d and i > s):
        raise ValueError(f"scatter: index {index.shape} must fit in src {src.shape} and in {self.shape} "
                         f"outside dim {dim}")
    if src.dtype != self.dtype:
      raise ArgumentTypeError(f"scatter: src dtype {src.dtype.name} differs from {self.dtype.name}")
    n = self.shape[d]
    src = src.shrink(tuple((0, i) for i in index.shape)).unsqueeze(-1).transpose(-1, d)
    src = src._broadcast_to(src.shape[:d] + (n,) + src.shape[d + 1:])
    mask = index._index_hits(n).transpose(-1, d)
    grow = tuple((0, s - i) if k != d else (0, 0) for k, (s, i) in enumerate(zip(self.shape, index.shape))) + ((0, 0),)
    return d, src.pad(grow), mask.pad(grow)

  def scatter(self, dim: int, index: Tensor, src: Tensor | float | int | bool, reduce: str | None = None) -> Tensor:
    """A copy of self with src[...] written at index[...] along `dim` (the last write wins on repeats);
    reduce 'add' or 'multiply' combines instead (a scalar src only, as torch)."""
    if reduce not in (None, "add", "multiply"):
      raise ValueError(f"scatter reduce must be None, 'add' or 'multiply', not {reduce!r}")
    if not isinstance(src, Tensor):
      src = Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
    elif reduce is not None: raise TypeError("scatter with reduce takes a scalar src; use scatter_reduce for tensors")
    if reduce is not None: return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
    _, src, mask = self._scatter_parts(dim, index, src)
    if index.numel() == 0: return self
    m = mask.shape[-1]
    order = Tensor.arange(1, m + 1, dtype=dtypes.int32, device=self.device)
    last = (mask.cast(dtypes.int32) * order).max(-1, keepdim=True)
    return (last > 0).squeeze(-1).where(Tensor._masked_pick(src, mask & (order == last), -1), self)

  def scatter_reduce(self, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
    """Combine src into self at index along `dim` with reduce 'sum', 'prod', 'mean', 'amax' or 'amin';
    include_self=False leaves self's value out wherever something is scattered."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise ArgumentError(f"scatter_reduce reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', not {reduce!r}")
    _, src, mask = self._scatter_parts(dim, index, src)
    if index.numel() == 0: return self  # nothing scattered: every reduction leaves self as it is
    untouched = mask.any(-1).logical_not()
    base = lambda ident: self if include_self else untouched.where(self, ident)  # noqa: E731
    if reduce == "sum": return (mask.where(src, 0).sum(-1) + base(0)).cast(self.dtype)
    if reduce == "prod": return (mask.where(src, 1).prod(-1) * base(1)).cast(self.dtype)
    if reduce == "amax": return mask.where(src, self.dtype.min).max(-1).maximum(base(self.dtype.min)).cast(self.dtype)
    if reduce == "amin": return mask.where(src, self.dtype.max).min(-1).minimum(base(self.dtype.max)).cast(self.dtype)
    count = mask.cast(dtypes.int32).sum(-1) + (1 if include_self else untouched.cast(dtypes.int32))
    total = mask.where(src, 0).sum(-1) + base(0)
    if self.dtype.is_float: return (total / count.maximum(1)).cast(self.dtype)
    return total.div(count.maximum(1), rounding_mode="floor").cast(self.dtype)

  def _flat_slots(self, size: int | None) -> tuple[Tensor, int]:
    """For a flat bool mask: each True entry's output slot (its count among the Trues before it, -1 for False),
    and the number of slots (the count of Trues, which realizes it, unless `size` is given)."""
    m = self.cast(dtypes.int32)
    n = int(m.sum().item()) if size is None else int(size)
    return self.where(m.cumsum() - 1, -1), n

  def masked_select(self, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """The values where `mask` (broadcast to self) is True, as a 1-D tensor. Its length depends on the data, so
    without `size` the mask's count is computed first; with `size` the result has that length (padded with
    fill_value or cut) and nothing runs."""
    if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool:
      raise ArgumentTypeError("masked_select needs a bool mask Tensor")
    shape = broadcast_shape(self.shape, mask.shape)
    x, m = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
    slots, n = m._flat_slots(size)
    if n == 0: return Tensor.zeros(0, dtype=self.dtype, device=self.device)
    out = Tensor._masked_pick(x.unsqueeze(-1), slots._index_hits(n), 0)
    if size is None: return out
    filled = Tensor.arange(n, dtype=dtypes.int32, device=self.device) < m.cast(dtypes.int32).sum()
    return filled.where(out, fill_value).cast(self.dtype)

  def nonzero(self, size: int | None = None, fill_value: int = 0) -> Tensor:
    """The coordinates of the nonzero values, shape (count, ndim), int32, in row-major order. Like
    masked_select, the count is computed first unless `size` is given."""
    m = (self != 0).flatten()
    slots, n = m._flat_slots(size)
    if self.ndim == 0: return Tensor.zeros(n, 0, dtype=dtypes.int32, device=self.device)
    if n == 0 or self.numel() == 0: return Tensor.zeros(n, self.ndim, dtype=dtypes.int32, device=self.device)
    coords = [Tensor.arange(s, dtype=dtypes.int32, device=self.device).reshape(
      tuple(s if k == i else 1 for k in range(self.ndim)))._broadcast_to(self.shape).flatten()
      for i, s in enumerate(self.shape)]
    coords = Tensor.stack(*coords, dim=-1)                                       # (numel, ndim)
    out = Tensor._masked_pick(coords.unsqueeze(1), slots._index_hits(n).unsqueeze(-1), 0)  # (n, ndim)
    if size is None: return out
    filled = (Tensor.arange(n, dtype=dtypes.int32, device=self.device) < m.cast(dtypes.int32).sum()).unsqueeze(-1)
    return filled.where(out, fill_value).cast(dtypes.int32)

  def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """Sample indices by these (unnormalized) weights: 1-D -> (num_samples,), 2-D -> (rows, num_samples)."""
    if not 1 <= self.ndim <= 2: raise ValueError(f"multinomial needs 1-D or 2-D weights, got shape {self.shape}")
    if num_samples <= 0: raise ValueError(f"multinomial needs num_samples > 0, got {num_samples}")
    w = (self.unsqueeze(0) if self.ndim == 1 else self)._float()
    rows, n = w.shape
    if not replacement and num_samples > n:
      raise ValueError(f"cannot draw {num_samples} samples without replacement from {n} categories")
    if replacement or num_samples == 1:
      cw = w.cumsum(1)
      cdf = cw / cw[:, -1:]
      u = Tensor.rand(rows, num_samples, 1, device=self.device)
      idx = (u >= cdf.unsqueeze(1)).sum(2, dtype=dtypes.int32).minimum(n - 1)
    else:
      # weighted sampling without replacement: the k largest log(u) / w (Efraimidis and Spirakis)
      idx = (Tensor.rand(rows, n, device=self.device).log() / w).topk(num_samples, dim=1)[1]
    return (idx.squeeze(0) if self.ndim == 1 else idx).cast(dtypes.int32)

  # ------------------------------------------------------------------ shape (tinygrad 0.14's names)

  def pad_to(self, *shape: int | None | Sequence[int | None], value: Any = 0) -> Tensor:
    """Pad at the end of each axis up to `shape` (None keeps an axis)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if len(shape) != self.ndim: raise ValueError(f"pad_to {shape} needs one entry per axis of {self.shape}")
    for s, n in zip(self.shape, shape):
      if n is not None and n < s: raise ValueError(f"pad_to {shape} is smaller than {self.shape}")
    return self.pad(tuple((0, 0 if n is None else n - s) for s, n in zip(self.shape, shape)), value=value)

  def shrink_to(self, *shape: int | None | Sequence[int | None]) -> Tensor:
    """Keep the first `shape[i]` entries of each axis (None keeps an axis)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if len(shape) != self.ndim: raise ValueError(f"shrink_to {shape} needs one entry per axis of {self.shape}")
    return self.shrink(tuple(None if n is None else (0, n) for n in shape))

  def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces along `dim`: of `sizes` each (the last may be smaller) or of the listed sizes."""
    d = _norm_axis(dim, self.ndim)
    n = self.shape[d]
    if isinstance(sizes, (int, np.integer)):
      if sizes <= 0: raise ValueError(f"split size must be positive, got {sizes}")
      sizes = [min(int(sizes), n - i) for i in range(0, max(n, 1), int(sizes))]
    if sum(sizes) != n: raise ValueError(f"split sizes {list(sizes)} do not add up to {n}, the size of dimension {dim}")
    offsets = [0]
    for s in sizes: offsets.append(offsets[-1] + s)
    return tuple(self.shrink(tuple((b, e) if i == d else None for i in range(self.ndim)))
                 for b, e in zip(offsets, offsets[1:]))

  def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
    """`chunks` pieces of ceil(size / chunks) along `dim` (fewer when the size runs out), as torch."""
    if chunks <= 0: raise ValueError(f"chunk needs a positive number of chunks, got {chunks}")
    d = _norm_axis(dim, self.ndim)
    n = self.shape[d]
    return list(self.split(-(-n // chunks), d)) if n else [self] * chunks

  def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Rotate elements along `dims` by `shifts` (of the flattened tensor when dims is None)."""
    if dims is None: return self.flatten().roll(shifts, 0).reshape(self.shape)
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    shifts = (shifts,) if isinstance(shifts, (int, np.integer)) else tuple(shifts)
    if len(dims) != len(shifts): raise ArgumentError(f"roll needs as many shifts as dims, got {shifts} and {dims}")
    x = self
    for d, s in zip(dims, shifts):
      d = _norm_axis(d, self.ndim)
      n = self.shape[d]
      if n == 0 or s % n == 0: continue
      k = n - s % n  # the rolled axis starts at k of the axis repeated twice
      if isinstance(x.device, tuple) and x.shard_axis == d:
        # its two pieces side by side (repeating along the sharded axis would split the shards), split alike again
        piece = [tuple((a, b) if i == d else None for i in range(self.ndim)) for a, b in ((k, n), (0, k))]
        x = Tensor.cat(x.shrink(piece[0]), x.shrink(piece[1]), dim=d).shard(x.device, d)
        continue
      x = x.repeat(tuple(2 if i == d else 1 for i in range(self.ndim))).shrink(
        tuple((k, k + n) if i == d else None for i in range(self.ndim)))
    return x

  def _tri_mask(self, diagonal: int, upper: bool) -> Tensor:
    return _triangle(self.shape[-2], self.shape[-1], diagonal, upper, self.device)

  def triu(self, diagonal: int = 0) -> Tensor:
    """Zero below the `diagonal`-th diagonal of the last two axes."""
    if self.ndim < 2: raise ValueError(f"triu needs at least 2 dimensions, got shape {self.shape}")
    return self._tri_mask(diagonal, True).where(self, self._const_like(0))
  def tril(self, diagonal: int = 0) -> Tensor:
    """Zero above the `diagonal`-th diagonal of the last two axes."""
    if self.ndim < 2: raise ValueError(f"tril needs at least 2 dimensions, got shape {self.shape}")
    return self._tri_mask(diagonal, False).where(self, self._const_like(0))

  def diag(self) -> Tensor:
    """The square matrix with this 1-D tensor on its diagonal."""
    if self.ndim != 1: raise ValueError(f"diag needs a 1-D tensor, got shape {self.shape}")
    n = self.shape[0]
    if n == 0: return self.reshape(0, 0)
    # each value followed by n zeros, read with a row length of n lands on the diagonal
    return self.unsqueeze(-1).pad(((0, 0), (0, n))).flatten().shrink(((0, n * n),)).reshape(n, n)

  def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of axes dim1 and dim2 (shifted right by `offset`), as a new last axis."""
    d1, d2 = _norm_axis(dim1, self.ndim), _norm_axis(dim2, self.ndim)
    if d1 == d2: raise ArgumentError(f"diagonal needs two different dimensions, got {dim1} and {dim2}")
    x = self.permute([i for i in range(self.ndim) if i not in (d1, d2)] + [d1, d2])
    r, c = x.shape[-2:]
    lead = (None,) * (x.ndim - 2)
    x = x.shrink(lead + (None, (min(offset, c), c))) if offset >= 0 else x.shrink(lead + ((min(-offset, r), r), None))
    n = min(x.shape[-2:])
    if n == 0: return x.reshape(x.shape[:-2] + (0,))
    x = x.shrink(lead + ((0, n), (0, n))).flatten(-2)
    # n^2 values padded to n*(n+1), read as rows of n+1: the diagonal is column 0
    return x.pad(((0, 0),) * len(lead) + ((0, n),)).reshape(x.shape[:-1] + (n, n + 1))[..., 0]

  def meshgrid(self, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors (indexing 'ij' or 'xy', as torch and numpy)."""
    if indexing not in ("ij", "xy"): raise ArgumentError(f"indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = (self, *args)
    if len(ts) == 1: return ts
    flat = [t.flatten() for t in ts]
    shape = tuple(t.shape[0] for t in flat)
    if indexing == "xy": shape = (shape[1], shape[0]) + shape[2:]
    out = []
    for i, t in enumerate(flat):
      axis = (1 if i == 0 else 0 if i == 1 else i) if indexing == "xy" else i
      out.append(t.reshape(tuple(-1 if k == axis else 1 for k in range(len(ts))))._broadcast_to(shape))
    return tuple(out)

  def repeat_interleave(self, repeats: int, dim: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `dim` (of the flattened tensor when None)."""
    if not isinstance(repeats, (int, np.integer)) or repeats < 0:
      raise ValueError(f"repeat_interleave needs a nonnegative int count, got {repeats!r}")
    x, d = (self.flatten(), 0) if dim is None else (self, _norm_axis(dim, self.ndim))
    s = x.shape
    x = x.unsqueeze(d + 1).expand(s[:d + 1] + (int(repeats),) + s[d + 1:])
    return x.reshape(s[:d] + (s[d] * repeats,) + s[d + 1:])

  def unfold(self, dim: int, size: int, step: int) -> Tensor:
    """Windows of `size` every `step` along `dim`: that axis becomes the window count, a new last axis the window."""
    d = _norm_axis(dim, self.ndim)
    if size < 0: raise ArgumentError(f"unfold size must be >= 0, got {size}")
    if step <= 0: raise ArgumentError(f"unfold step must be > 0, got {step}")
    if self.ndim == 0: return self.reshape(1).unfold(0, size, step).reshape(size)  # as torch: one window of <= 1
    if size > self.shape[d]:
      raise ArgumentError(f"unfold size {size} is larger than dimension {dim} of shape {self.shape}")
    order = [i for i in range(self.ndim) if i != d] + [d]
    x = self.permute(order)
    if size == 0: x = Tensor.zeros(x.shape[:-1] + (x.shape[-1] // step + 1, 0), dtype=self.dtype, device=self.device)
    else: x = x._pool_last(size, step, 1)
    back = [0] * self.ndim
    for i, o in enumerate(order): back[o] = i
    return x.permute(back + [self.ndim])

  def rearrange(self, formula: str, **sizes: int) -> Tensor:
    """einops-style rearrange: 'b (h w) c -> b h w c' with h=...; names, parentheses, '...' and 1."""
    if formula.count("->") != 1: raise ValueError(f"rearrange needs exactly one '->' in {formula!r}")
    lhs_s, rhs_s = formula.split("->")
    lhs, rhs = Tensor._rearrange_side(lhs_s, formula), Tensor._rearrange_side(rhs_s, formula)
    names = lambda side: [n for grp in side for n in grp]  # noqa: E731
    ln, rn = names(lhs), names(rhs)
    if sorted(ln) != sorted(rn) or len(set(ln)) != len(ln):
      raise ValueError(f"rearrange: both sides of {formula!r} must name the same axes once each")
    for k in sizes:
      if k not in ln: raise ValueError(f"rearrange: size given for {k!r}, which {formula!r} does not use")
    if "..." in ln:
      if any("..." in g and g != ["..."] for g in lhs):
        raise ValueError(f"rearrange: '...' cannot be grouped on the left of {formula!r}")
      ell = [f"...{i}" for i in range(max(self.ndim - (len(lhs) - 1), 0))]
      lhs = [h for g in lhs for h in ([[e] for e in ell] if g == ["..."] else [g])]
      grouped = lambda g: [e for n in g for e in (ell if n == "..." else [n])]  # noqa: E731
      rhs = [h for g in rhs for h in ([[e] for e in ell] if g == ["..."] else [grouped(g)])]
      ln, rn = names(lhs), names(rhs)
    if len(lhs) != self.ndim: raise ValueError(f"rearrange: {lhs_s.strip()!r} has {len(lhs)} axes, shape {self.shape}")
    dims: dict[str, int] = {}
    for grp, s in zip(lhs, self.shape):
      known = [sizes.get(n) for n in grp]
      if known.count(None) > 1: raise ValueError(f"rearrange: cannot infer the sizes of {grp} from {s}; give them")
      rest = prod(k for k in known if k is not None)
      for n, k in zip(grp, known): dims[n] = k if k is not None else (s // rest if rest else 0)
      if prod(dims[n] for n in grp) != s: raise ValueError(f"rearrange: sizes of {grp} do not multiply to {s}")
    x = self.reshape(tuple(dims[n] for n in ln))
    x = x.permute([ln.index(n) for n in rn])
    return x.reshape(tuple(prod(dims[n] for n in grp) for grp in rhs))

  def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """self / max(||self||_p over `dim`, eps), as torch.nn.functional.normalize."""
    x = self._float()
    norm = (x != 0).cast(x.dtype).sum(dim, keepdim=True) if p == 0 else x.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
    return x / norm.maximum(eps)

  def clone(self, device: DeviceArg | None = None) -> Tensor:
    """A copy in a buffer of its own (on `device` when given), made now, as torch's: writes to either never show in
    the other. (Left lazy, it read the source when realized: an assign to the source realized first showed in it.)"""
    src = self if device is None else self.to(device)
    return Tensor.empty(src.shape, dtype=src.dtype, device=src.device).assign(src).realize()

  def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
    """Resize the last len(size) axes: mode 'linear' (torch's linear/bilinear/trilinear), 'nearest' or
    'nearest-exact'."""
    if not isinstance(size, (tuple, list)) or not 0 < len(size) <= self.ndim or \
        any(not isinstance(s, int) or s <= 0 for s in size):
      raise ValueError(f"interpolate size must be a tuple of up to {self.ndim} positive ints, got {size!r}")
    if mode not in ("linear", "nearest", "nearest-exact"):
      raise ArgumentError(f"interpolate mode must be 'linear', 'nearest' or 'nearest-exact', got {mode!r}")
    if align_corners and mode != "linear": raise ArgumentError("align_corners only applies to mode='linear'")
    x = self
    for i in range(-1, -len(size) - 1, -1):
      n_in, n_out = self.shape[i], size[i]
      shape = [1] * self.ndim
      shape[i] = n_out
      target = list(x.shape)
      target[i] = n_out
      pos = Tensor.arange(n_out, dtype=dtypes.float32, device=self.device)
      if mode == "linear":
        if align_corners: src = pos * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
        else: src = ((pos + 0.5) * (n_in / n_out) - 0.5).maximum(0)
        lo = src.floor().cast(dtypes.int32).minimum(n_in - 1)
        hi = (lo + 1).minimum(n_in - 1)
        w = (src - lo.cast(dtypes.float32)).reshape(shape)._broadcast_to(tuple(target))
        a = x.gather(i, lo.reshape(shape)._broadcast_to(tuple(target)))
        b = x.gather(i, hi.reshape(shape)._broadcast_to(tuple(target)))
        x = a._float().lerp(b._float(), w)
      else:
        src = (pos + 0.5) * (n_in / n_out) if mode == "nearest-exact" else pos * (n_in / n_out)
        idx = src.floor().cast(dtypes.int32).minimum(n_in - 1).reshape(shape)._broadcast_to(tuple(target))
        x = x.gather(i, idx)
    return x.cast(self.dtype) if self.dtype.is_float or mode != "linear" else x.round().cast(self.dtype)

  def _pad_reflect_replicate(self, pairs: list[tuple[int, int]], mode: str) -> Tensor:
    x = self
    for d, (b, a) in enumerate(pairs):
      n = x.shape[d]
      if b == 0 and a == 0: continue
      pieces = []
      if mode == "reflect":
        if max(b, a) >= n:
          raise ValueError(f"reflect padding ({b}, {a}) must be smaller than dimension {d} of size {n}")
        if b > 0: pieces.append(x.shrink(tuple((1, b + 1) if i == d else None for i in range(x.ndim))).flip(d))
        pieces.append(x)
        if a > 0: pieces.append(x.shrink(tuple((n - 1 - a, n - 1) if i == d else None for i in range(x.ndim))).flip(d))
      else:
        if (b > 0 or a > 0) and n == 0: raise ValueError(f"replicate padding of dimension {d} of size 0")
        def edge(lo: int, k: int) -> Tensor:  # the slice at `lo`, repeated k times
          one = x.shrink(tuple((lo, lo + 1) if i == d else None for i in range(x.ndim)))
          return one.expand(tuple(k if i == d else -1 for i in range(x.ndim)))
        if b > 0: pieces.append(edge(0, b))
        pieces.append(x)
        if a > 0: pieces.append(edge(n - 1, a))
      x = Tensor.cat(*pieces, dim=d) if len(pieces) > 1 else x
    return x

  def _pad_circular(self, pairs: list[tuple[int, int]]) -> Tensor:
    x = self
    for d, (b, a) in enumerate(pairs):
      n = x.shape[d]
      if max(b, a) > n:
        raise ValueError(f"circular padding ({b}, {a}) wraps more than once around dimension {d} of size {n}")
      if b == 0 and a == 0: continue
      reps = 1 + (b > 0) + (a > 0)
      x = x.repeat(tuple(reps if i == d else 1 for i in range(x.ndim)))
      start = n - b if b > 0 else 0
      x = x.shrink(tuple((start, start + n + b + a) if i == d else None for i in range(x.ndim)))
    return x

  # ------------------------------------------------------------------ pooling with padding, dilation and ceil_mode

  def _pool_args(self, kernel_size, stride, dilation, padding, ceil_mode: bool):
    """Normalised pooling arguments: kernel, stride, dilation and the (before, after) pads of each pooled axis,
    the after pads grown for ceil_mode (torch's rule: the last window must start inside input or left pad)."""
    k = self._tuple_arg(kernel_size, 2, "pool kernel_size") if isinstance(kernel_size, (int, np.integer)) else \
      self._tuple_arg(kernel_size, len(kernel_size), "pool kernel_size")
    n = len(k)
    s = k if stride is None else self._tuple_arg(stride, n, "pool stride")
    d = self._tuple_arg(dilation, n, "pool dilation")
    if self.ndim < n: raise ValueError(f"a {n}-D pool needs at least {n} dimensions, got shape {self.shape}")
    pads = self._conv_pads(padding, n, "pool")
    extra = []
    for i, kk, ss, dd, (pb, pa) in zip(self.shape[-n:], k, s, d, pads):
      span = dd * (kk - 1) + 1
      o = (i + pb + pa - span) // ss + 1
      if ceil_mode:  # a last window that hangs over the end counts, as long as it starts inside
        o = -(-(i + pb + pa - span) // ss) + 1
        if (o - 1) * ss >= i + pb: o -= 1
      if o < 1:
        raise ValueError(f"a window of {kk} (dilation {dd}) does not fit an axis of {i} padded by {pb + pa}")
      extra.append(max(0, (o - 1) * ss + span - (i + pb + pa)))
    return k, s, d, pads, extra

  def max_pool2d(self, kernel_size: int | tuple[int, ...] = (2, 2), stride: int | tuple[int, ...] | None = None,
                 dilation: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0, ceil_mode: bool = False,
                 return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Max over windows of the last len(kernel_size) axes (2 for an int), padded with -inf. `padding` is an int,
    one per axis, or torch's flat (left, right, top, bottom). return_indices adds each max's flat position in
    the pooled axes of the input (int32, the first on ties), for max_unpool2d."""
    k, s, d, pads, extra = self._pool_args(kernel_size, stride, dilation, padding, ceil_mode)
    n = len(k)
    full = ((0, 0),) * (self.ndim - n) + tuple((pb, pa + e) for (pb, pa), e in zip(pads, extra))
    pooled = self.pad(full, value=self.dtype.min)._pool(k, s, d)
    axes = tuple(range(-n, 0))
    out = pooled.max(axes)
    if not return_indices: return out
    spatial = self.shape[-n:]
    total = prod(spatial)
    # positions count down from total so that max() of the matches finds the first one
    countdown = Tensor.arange(total, 0, -1, dtype=dtypes.int32, device=self.device).reshape(spatial)
    cd = countdown.pad(full[-n:])._pool(k, s, d)
    hit = pooled == out.reshape(out.shape + (1,) * n)
    first = (total - (hit.cast(dtypes.int32) * cd).max(axes)).cast(dtypes.int32)
    if not self.dtype.is_float: return out, first
    # a window with a NaN has it as its max, at the last NaN's position (torch's; == never held for it: `total`)
    last_nan = (pooled.isnan().cast(dtypes.int32) * (total + 1 - cd)).max(axes) - 1
    return out, out.isnan().where(last_nan, first).cast(dtypes.int32)

  def avg_pool2d(self, kernel_size: int | tuple[int, ...] = (2, 2), stride: int | tuple[int, ...] | None = None,
                 dilation: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Tensor:
    """Mean over windows of the last len(kernel_size) axes (2 for an int), padded with zeros. The divisor counts
    the padding when count_include_pad (never the extra cells ceil_mode adds), as torch."""
    k, s, d, pads, extra = self._pool_args(kernel_size, stride, dilation, padding, ceil_mode)
    n = len(k)
    lead = ((0, 0),) * (self.ndim - n)
    axes = tuple(range(-n, 0))
    x = self._float()
    sums = x.pad(lead + tuple((pb, pa + e) for (pb, pa), e in zip(pads, extra)))._pool(k, s, d).sum(axes)
    if count_include_pad and not any(extra): return sums * (1 / prod(k))
    ones = Tensor.ones(self.shape[-n:], dtype=x.dtype, device=self.device)
    if count_include_pad: ones = ones.pad(tuple(pads), value=1).pad(tuple((0, e) for e in extra))
    else: ones = ones.pad(tuple((pb, pa + e) for (pb, pa), e in zip(pads, extra)))
    return sums / ones._pool(k, s, d).sum(axes)

  def max_unpool2d(self, indices: Tensor, kernel_size: int | tuple[int, ...] = (2, 2),
                   stride: int | tuple[int, ...] | None = None,
                   dilation: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0,
                   output_size: Sequence[int] | None = None) -> Tensor:
    """The inverse of max_pool2d with return_indices: each value put back at its index, zeros elsewhere."""
    if self.shape != indices.shape:
      raise ValueError(f"max_unpool2d values {self.shape} and indices {indices.shape} differ")
    if self.ndim < 3: raise ValueError(f"max_unpool2d needs (N, C, *spatial) input, got shape {self.shape}")
    bs, c, *spatial = self.shape
    n = len(spatial)
    if output_size is None:
      k = self._tuple_arg(kernel_size, n, "max_unpool2d kernel_size")
      s = k if stride is None else self._tuple_arg(stride, n, "max_unpool2d stride")
      d = self._tuple_arg(dilation, n, "max_unpool2d dilation")
      pads = self._conv_pads(padding, n, "max_unpool2d")
      output_size = tuple((i - 1) * ss - (pb + pa) + dd * (kk - 1) + 1
                          for i, kk, ss, dd, (pb, pa) in zip(spatial, k, s, d, pads))
    else: output_size = tuple(output_size)[-n:]
    total = prod(output_size)
    hits = indices.reshape(bs, c, -1)._index_hits(total)  # (bs, c, in, total)
    return Tensor._masked_pick(self.reshape(bs, c, -1, 1), hits, 2).reshape((bs, c) + tuple(output_size))

  # ------------------------------------------------------------------ creation (tinygrad 0.14's names)

  @staticmethod
  def linspace(start: int | float, stop: int | float, steps: int, dtype: DType | str | None = None,
               device: DeviceArg | None = None) -> Tensor:
    """`steps` evenly spaced values from start to stop, both included (float32 unless dtype is given)."""
    if not isinstance(steps, (int, np.integer)) or steps < 0:
      raise ValueError(f"linspace needs steps >= 0, got {steps!r}")
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    if dt == dtypes.bool: raise ValueError("linspace with a bool dtype is not supported")
    vals = np.linspace(start, stop, int(steps), dtype=np.float64)
    return Tensor(vals if dt.is_float else np.trunc(vals), device=device, dtype=dt)

  def randn_like(self, dtype: DType | str | None = None, device: DeviceArg | None = None) -> Tensor:
    """Standard normal values of this shape (and dtype and device unless given, sharded alike)."""
    return self._sharded_alike(Tensor.randn(self.shape, dtype=dtype or (self.dtype if self.dtype.is_float else
                                                                       dtypes.default_float),
                                            device=device or self.device), device)

  @staticmethod
  def randperm(n: int, device: DeviceArg | None = None, dtype: DType | str = dtypes.int32) -> Tensor:
    """A random permutation of 0..n-1 (from the generator manual_seed seeds)."""
    if not isinstance(n, (int, np.integer)) or n < 0: raise ValueError(f"randperm needs n >= 0, got {n!r}")
    return Tensor.rand(int(n), device=device).argsort().cast(dtype).realize()

  def const_like(self, b: Any, dtype: DType | str | None = None) -> Tensor:
    """A constant of this shape and device (dtype of self unless given); costs no memory."""
    return self._const_like(b, dtypes.from_any(dtype) if dtype is not None else self.dtype)

  @staticmethod
  def from_blob(ptr: int, shape: tuple[int, ...], dtype: DType | str | None = None,
                device: DeviceArg | None = None) -> Tensor:
    """A tensor holding a copy of prod(shape) values at host address `ptr` (tinygrad aliases the memory; plugrad
    copies it, since its buffers belong to device allocators)."""
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    shape = _shape_args(shape)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * (prod(shape) * dt.itemsize)).from_address(ptr)) if prod(shape) else \
      np.zeros(0, np.uint8)
    arr = raw.view(dt.storage_np).reshape(shape)
    return Tensor(bf16_to_f32(arr) if dt == dtypes.bfloat16 else arr.copy(), device=device, dtype=dt)

  # ------------------------------------------------------------------ dtype and info (tinygrad 0.14's names)

  def is_floating_point(self) -> bool:
    """True for float16, bfloat16, float32 and float64."""
    return self.dtype.is_float
  def element_size(self) -> int:
    """Bytes per element."""
    return self.dtype.itemsize
  def nbytes(self) -> int:
    """Bytes of all elements."""
    return self.numel() * self.dtype.itemsize
  @property
  def max_shape(self) -> tuple[int, ...]:
    """The largest shape this tensor can have (its shape: plugrad shapes are concrete)."""
    return self.shape
  def max_numel(self) -> int:
    """prod(max_shape)."""
    return prod(self.max_shape)

  def replace(self, x: Tensor) -> Tensor:
    """Make this tensor refer to x's graph (same shape), without copying."""
    if x.shape != self.shape: raise ValueError(f"replace needs the same shape, got {x.shape} for {self.shape}")
    self.uop, self.device = x.uop, x.device
    return self

  def to_(self, device: str) -> Tensor:
    """Move this tensor to `device` in place."""
    return self.replace(self.to(device))

  def alu(self, op: Ops, *src: Tensor) -> Tensor:
    """Apply one IR op to same-shaped tensors as they are (no broadcasting or promotion)."""
    for s in src:
      if s.shape != self.shape: raise ValueError(f"alu {op.name} needs equal shapes, got {self.shape} and {s.shape}")
    return self._alu(op, *src, dtype=dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else None)

  def ufix(self, x: Any) -> Tensor:
    """x as a tensor on this device: a Python scalar takes this tensor's dtype when it fits, as in tinygrad."""
    if isinstance(x, Tensor): return x
    dt = self.dtype if not (isinstance(x, float) and not self.dtype.is_float) else dtypes.default_float
    return Tensor(x, device=self.device, dtype=dt)

  def usum(self, *others: Tensor) -> Tensor:
    """self + others[0] + ... (broadcast)."""
    out = self
    for o in others: out = out + o
    return out

  def uprod(self, *others: Tensor) -> Tensor:
    """self * others[0] * ... (broadcast)."""
    out = self
    for o in others: out = out * o
    return out

  @staticmethod
  def const(b: Any, dtype: DType | str | None = None, device: DeviceArg | None = None) -> Tensor:
    """A 0-d constant tensor."""
    return Tensor(b, device=device, dtype=dtype)

  @staticmethod
  def from_url(url: str, gunzip: bool = False, dtype: DType | str | None = None,
               device: DeviceArg | None = None) -> Tensor:
    """The bytes at `url` (http(s), file, ...) as a 1-D uint8 tensor (or reinterpreted as `dtype`); gunzip
    decompresses them first. tinygrad caches the download on disk; plugrad reads it each call."""
    with urllib.request.urlopen(url) as response: data = response.read()
    if gunzip: data = gzip.decompress(data)
    raw = np.frombuffer(data, dtype=np.uint8)
    if dtype is None: return Tensor(raw.copy(), device=device, dtype=dtypes.uint8)
    dt = dtypes.from_any(dtype)
    if len(raw) % dt.itemsize:
      raise ValueError(f"{len(raw)} bytes from {url} are not a whole number of {dt.name} values")
    vals = raw.view(dt.storage_np)
    return Tensor(bf16_to_f32(vals) if dt == dtypes.bfloat16 else vals.copy(), device=device, dtype=dt)

  # ------------------------------------------------------------------ linear algebra and attention

  @staticmethod
  def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: DType | str | None = None) -> Tensor:
    """Einstein summation, as numpy and torch: 'ij,jk->ik', implicit output ('ij,jk'), '...', repeated
    indices within an operand (its diagonal)."""
    xs = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    if not all(isinstance(x, Tensor) for x in xs): raise TypeError("einsum operands must be Tensors")
    formula = formula.replace(" ", "")
    lhs, rhs = formula.split("->") if "->" in formula else (formula, None)
    inputs = lhs.split(",")
    if len(inputs) != len(xs): raise ValueError(f"einsum {formula!r} names {len(inputs)} operands, got {len(xs)}")
    if "..." in formula:
      free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in formula]
      n_ell = [x.ndim - (len(s) - 3) if "..." in s else 0 for s, x in zip(inputs, xs)]
      width = max(n_ell)
      ell = "".join(free[:width])
      inputs = [s.replace("...", ell[width - k:]) for s, k in zip(inputs, n_ell)]
      if rhs is not None: rhs = rhs.replace("...", ell)
      elif width: rhs = ell + "".join(sorted(c for c in lhs if c.isalpha() and lhs.count(c) == 1))
    if rhs is None: rhs = "".join(sorted(c for c in lhs if c.isalpha() and lhs.count(c) == 1))
    for s, x in zip(inputs, xs):
      if len(s) != x.ndim: raise ValueError(f"einsum term {s!r} names {len(s)} axes, its operand has shape {x.shape}")
    sizes: dict[str, int] = {}
    terms = []
    for s, x in zip(inputs, xs):
      while (c := next((c for c in s if s.count(c) > 1), None)) is not None:  # a repeated index reads a diagonal
        i, j = s.index(c), s.index(c, s.index(c) + 1)
        x, s = x.diagonal(0, i, j), "".join(ch for k, ch in enumerate(s) if k not in (i, j)) + c
      for c, n in zip(s, x.shape):
        if sizes.get(c, 1) != 1 and n != 1 and sizes[c] != n:
          raise ValueError(f"einsum: index {c!r} has sizes {sizes[c]} and {n}")
        if n != 1 or c not in sizes: sizes[c] = n
      terms.append((s, x))
    letters = sorted(sizes)
    if any(c not in sizes for c in rhs): raise ValueError(f"einsum output {rhs!r} names an index no input has")
    # each operand's axes in alphabetical order, size 1 for the letters it lacks, so they all broadcast
    aligned = [x.permute([s.index(c) for c in sorted(s)]).reshape(tuple(x.shape[s.index(c)] if c in s else 1
                                                                        for c in letters)) for s, x in terms]
    prod_all = aligned[0]
    for a in aligned[1:]: prod_all = prod_all * a
    summed = [i for i, c in enumerate(letters) if c not in rhs]
    out = prod_all._broadcast_to(tuple(sizes[c] for c in letters))
    if dtype is None and out.dtype.is_int: dtype = out.dtype  # integers keep their dtype, as in matmul and torch's
    out = out.sum(summed, dtype=dtype) if summed else (out.cast(dtype) if dtype is not None else out)
    kept = [c for c in letters if c in rhs]
    return out.permute([kept.index(c) for c in rhs])

  def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                   dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T / sqrt(d) + mask) @ v, with self as the queries (..., L, d); a bool mask keeps where True;
    is_causal masks the future; enable_gqa repeats key/value heads (axis -3) to the query's head count."""
    if enable_gqa:
      key = key.repeat_interleave(self.shape[-3] // key.shape[-3], dim=-3)
      value = value.repeat_interleave(self.shape[-3] // value.shape[-3], dim=-3)
    # scores in float32 at least (halves multiply and sum in it, as tinygrad), softmax there, then back
    acc = promote_types(promote_types(self.dtype, key.dtype), dtypes.float32)
    qk = self.matmul(key.transpose(-2, -1), dtype=acc) * (1 / math.sqrt(self.shape[-1]))
    if is_causal:
      if attn_mask is not None:
        raise ArgumentError("scaled_dot_product_attention takes attn_mask or is_causal, not both")
      # the future's scores set to -inf where torch adds a -inf mask (the same for every finite score): two nodes
      qk = qk._tri_mask(0, False).where(qk, float("-inf"))
    elif attn_mask is not None:
      qk = qk + (attn_mask.where(0.0, float("-inf")) if attn_mask.dtype == dtypes.bool else attn_mask)
    weights = qk.softmax(-1).cast(self.dtype if self.dtype.is_float else qk.dtype)
    if dropout_p > 0: weights = weights.dropout(dropout_p)
    return weights @ value

  def qr(self) -> tuple[Tensor, Tensor]:
    """(Q, R) of the last two axes by Householder reflections: Q (..., m, m) orthogonal, R (..., m, n) upper
    triangular, self = Q @ R (torch's mode='complete'; signs may differ from LAPACK's)."""
    if self.ndim < 2: raise ValueError(f"qr needs at least 2 dimensions, got shape {self.shape}")
    x = self._float()
    batch, (m, n) = x.shape[:-2], x.shape[-2:]
    r, q = x, Tensor.eye(m, dtype=x.dtype, device=self.device)._broadcast_to(batch + (m, m))
    rows = Tensor.arange(m, dtype=dtypes.int32, device=self.device)
    for i in range(min(m - 1, n) if m > 1 else 0):
      col = (rows >= i).where(r[..., :, i], 0.0)                     # column i from the diagonal down
      norm = col.square().sum(-1, keepdim=True).sqrt()
      x0 = r[..., i:i + 1, i]                                         # the diagonal entry
      alpha = -(x0 >= 0).where(norm, -norm)                           # reflect to -sign(x0) * |x|, no cancellation
      v = col - (rows == i).where(alpha, 0.0)
      vv = v.square().sum(-1, keepdim=True)
      tau = (vv > 0).where(2 / vv.maximum(1e-30), 0.0).unsqueeze(-1)  # H = I - tau v v^T (I for a zero column)
      v = v.unsqueeze(-1)
      r = r - tau * v @ (v.transpose(-2, -1) @ r)
      q = q - (q @ v) @ (tau * v.transpose(-2, -1))
    return q, r

  def svd(self, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """(U, S, Vh) of the last two axes, self = U @ diag(S) @ Vh, S descending: a QR, then one-sided Jacobi
    sweeps on R's columns in round-robin order (n/2 disjoint column pairs rotated at once, n-1 rounds a
    sweep, so every pair meets once per sweep); full_matrices as torch."""
    if self.ndim < 2: raise ValueError(f"svd needs at least 2 dimensions, got shape {self.shape}")
    m, n = self.shape[-2:]
    if m < n:
      u, s, vh = self.transpose(-2, -1).svd(full_matrices)
      return vh.transpose(-2, -1), s, u.transpose(-2, -1)
    batch, k = self.shape[:-2], n
    q, r = self._float().qr()
    kk = k + k % 2  # an odd count gets a zero column, which never turns (its products are all zero)
    a = r[..., :k, :].pad(((0, 0),) * (len(batch) + 1) + ((0, kk - k),))
    v = Tensor.eye(kk, dtype=a.dtype, device=self.device)._broadcast_to(batch + (kk, kk))
    # round-robin by position: columns at i and h + i meet; after each round the same fixed shuffle of
    # positions brings the next round's pairs there, so every round is the same kernel (compiled once)
    h = kk // 2
    layout = lambda players: players[:h] + players[h:][::-1]  # noqa: E731
    start = layout(list(range(kk)))
    turned = layout([0, kk - 1] + list(range(1, kk - 1)))    # the players after one turn of the circle
    shuffle = [start.index(c) for c in turned]
    a, v = a._take_cols(start), v._take_cols(start)
    for _ in range((max(6, kk.bit_length() + 4) if k > 1 else 0) * (kk - 1)):  # sweeps: quadratic convergence
      left, right = a[..., :h], a[..., h:]
      alpha, beta, gamma = left.square().sum(-2), right.square().sum(-2), (left * right).sum(-2)
      rot = gamma.abs() > 1e-30
      zeta = (beta - alpha) / (2 * rot.where(gamma, 1.0))
      t = rot.where((zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta.square()).sqrt()), 0.0)
      cs = (1 / (1 + t.square()).sqrt()).unsqueeze(-2)
      sn = cs * t.unsqueeze(-2)
      a = a._rotate_halves(cs, sn)._take_cols(shuffle).contiguous()
      v = v._rotate_halves(cs, sn)._take_cols(shuffle).contiguous()
    # whole sweeps bring every column back to its starting position
    back = sorted(range(kk), key=start.__getitem__)
    a, v = a._take_cols(back), v._take_cols(back)
    s = a.square().sum(-2).sqrt()                       # column norms are the singular values
    s_sorted, order_t = s.sort(-1, descending=True)     # the zero pad column sorts last (stable on ties)
    s_sorted, order_t = s_sorted[..., :k], order_t[..., :k]
    u_small = a[..., :k, :].gather(-1, order_t.unsqueeze(-2)._broadcast_to(batch + (k, k)))
    u_small = u_small / (s_sorted != 0).where(s_sorted, 1.0).unsqueeze(-2)
    v = v[..., :k, :].gather(-1, order_t.unsqueeze(-2)._broadcast_to(batch + (k, k)))
    if not full_matrices or m == k: u_full = q[..., :, :k] @ u_small
    else:  # complete U with the last m - k columns of Q: Q @ [[u_small, 0], [0, I]]
      grow = ((0, m - k), (0, m - k))
      eye = lambda size: Tensor.eye(size, dtype=a.dtype, device=self.device)  # noqa: E731
      rest = eye(m) - eye(k).pad(grow)
      u_full = q @ (u_small.pad(((0, 0),) * len(batch) + grow) + rest)
    return u_full, s_sorted, v.transpose(-2, -1)

  def _take_cols(self, order: Sequence[int]) -> Tensor:
    """The columns (last axis) in `order`, a static list: movement ops only."""
    return Tensor.cat(*[self[..., c:c + 1] for c in order], dim=-1)

  def _rotate_halves(self, cs: Tensor, sn: Tensor) -> Tensor:
    """Givens rotations of column i of the left half with column i of the right half:
    (x_l, x_r) -> (cs x_l - sn x_r, sn x_l + cs x_r), cs and sn one per pair."""
    h = self.shape[-1] // 2
    left, right = self[..., :h], self[..., h:]
    return Tensor.cat(cs * left - sn * right, sn * left + cs * right, dim=-1)

  def newton_schulz(self, steps: int, params: Sequence[float], eps: float = 1e-07) -> Tensor:
    """Approximate orthogonalisation of the last two axes (Muon's step): G = self / ||self||, then `steps` times
    G = sum_i params[i] * (G G^T)^i G."""
    if self.ndim < 2: raise ValueError(f"newton_schulz needs at least 2 dimensions, got shape {self.shape}")
    if self.shape[-2] > self.shape[-1]:
      return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
    g = self / (self.square().sum((-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
      gram, term, total = g @ g.transpose(-2, -1), g, None
      for i, p in enumerate(params):
        if i: term = gram @ term
        total = p * term if total is None else total + p * term
      g = total if total is not None else g.zeros_like()
    return g

  # ------------------------------------------------------------------ helpers of the indexing and shape methods

  @staticmethod
  def _masked_pick(values: Tensor, hits: Tensor, axis: int) -> Tensor:
    """The value at the (at most one) hit along `axis`, 0 where none: a gather written as a one-hot reduction."""
    return hits.where(values, 0).sum(axis).cast(values.dtype)

  @staticmethod
  def _index_array(e: Any) -> np.ndarray:
    """A list or array used as an index, as an int32/int64 or bool numpy array."""
    arr = np.asarray(e)
    if arr.size == 0 and arr.dtype.kind not in "biu": arr = arr.astype(np.int32)
    if arr.dtype.kind == "b": return arr
    if arr.dtype.kind not in "iu": raise IndexError(f"index {e!r} holds non-integer values")
    if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31): return arr.astype(np.int64)
    return arr.astype(np.int32)

  @staticmethod
  def _rearrange_side(side: str, formula: str) -> list[list[str]]:
    """One side of a rearrange formula as axis groups: 'b (h w) 1 ...' -> [['b'], ['h', 'w'], [], ['...']]."""
    tokens = side.replace("…", "...").replace("(", " ( ").replace(")", " ) ").split()
    groups: list[list[str]] = []
    open_group: list[str] | None = None
    for tok in tokens:
      if tok == "(":
        if open_group is not None: raise ValueError(f"rearrange: nested parentheses in {formula!r}")
        open_group = []
      elif tok == ")":
        if open_group is None: raise ValueError(f"rearrange: unbalanced parentheses in {formula!r}")
        groups.append(open_group)
        open_group = None
      elif tok == "1":
        if open_group is None: groups.append([])
      elif tok == "..." or tok.isidentifier():
        if open_group is None: groups.append([tok])
        else: open_group.append(tok)
      else: raise ValueError(f"rearrange: invalid axis name {tok!r} in {formula!r}")
    if open_group is not None: raise ValueError(f"rearrange: unbalanced parentheses in {formula!r}")
    return groups


# ---------------------------------------------------------------- helpers

def _reshape(u: UOp, shape: tuple[int, ...]) -> UOp:
  if u.shape == shape: return u
  if u.op is Ops.RESHAPE: u = u.src[0]  # reshape of a reshape is one reshape
  return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), shape)


def _upload(arr: np.ndarray, dt: DType, device: str) -> UOp:
  """A realized BUFFER node holding `arr` converted to `dt` on `device`."""
  if dt == dtypes.bfloat16: raw = f32_to_bf16(np.asarray(arr, dtype=np.float32))
  else:
    with np.errstate(all="ignore"): raw = np.asarray(arr).astype(dt.np, copy=False)
  dev = get_registry().device(device)
  check_supported(device, dev.caps, {dt})
  buf = Buffer(device, raw.size, dt, dev.allocator, image_spec_for(tuple(arr.shape), dt, dev.caps))
  buf.copyin(raw)
  return _reshape(buffer_node(buf), tuple(arr.shape))


def _canonical_devices(devices: Sequence[str]) -> tuple[str, ...]:
  devs = tuple(canonical_device(d) for d in devices)
  if not devs: raise ValueError("a tensor needs at least one device")
  if len(set(devs)) != len(devs): raise ValueError(f"devices {devs} name one device twice")
  for d in devs: get_registry().device(d)  # fail now, with the reason, if a device cannot run here
  return devs


@functools.lru_cache(maxsize=4096)
def _const_node(dt: DType, shape: tuple, value: Any, text: str) -> UOp:
  return broadcast(UOp.const(dt, value), shape)


def _conv_gradient(ctx: UOp, node: UOp) -> tuple[UOp, UOp]:
  """conv2d's derivative (gradient.custom_gradients["conv"]). The input's gradient is the transposed convolution of
  ctx, one kernel as in torch; the generic rules would write every window's share (bs x cin x out x k values) to a
  buffer and then sum the overlapping ones (5x5, 32 channels, 128 x 24x24 images: 80 ms against 21 ms on CPU). The
  weight's gradient is what the generic rules make of the windowed product: the windows times ctx, summed, with the
  output channels innermost where vector lanes run better along them (`_channels_last_weight_gradient`)."""
  _, device, groups, st, dl, pads = node.arg
  g, x, w = (Tensor._from(u, device) for u in (ctx, node.src[1], node.src[2]))
  n, ks, out = len(st), w.shape[2:], g.shape[2:]
  # output_padding: the input sizes a strided convolution's outputs cannot tell apart from smaller ones
  extra = tuple(i - ((o - 1) * s - b - a + d * (k - 1) + 1)
                for i, o, s, d, k, (b, a) in zip(x.shape[2:], out, st, dl, ks, pads))
  dx = g.conv_transpose2d(w, groups=groups, stride=st, dilation=dl, padding=sum(reversed(pads), ()),
                          output_padding=extra)
  bs, rc = x.shape[0], w.shape[0] // groups
  if all(k == 1 for k in ks) and all(p == (0, 0) for p in pads):
    # pointwise: the windows are the input itself, so its spatial axes flatten into one reduce axis that vector
    # lanes divide (56x56 outputs are 196 vectors of 16; 56 alone is no multiple of 16)
    hw = prod(out)
    xs, gs = x.reshape((bs, groups, 1, w.shape[1], hw)), g.reshape((bs, groups, rc, 1, hw))
    return dx.uop, (gs * xs).sum((0, 4)).reshape(w.shape).uop
  last = _channels_last_weight_gradient(device, rc, w.shape[1], g.dtype)
  # (bs, groups, rc, *out, cin/groups, *k); channels-last, x is computed once (a relu before the conv), as the sum
  # reads each of its values once per kernel tap
  windows = (x.contiguous() if last else x)._conv_windows(ks, groups, rc, st, dl, pads)
  gw, outs = g.reshape((bs, groups, rc) + out + (1,) * (1 + n)), tuple(range(3, 3 + n))  # outs: the output axes
  if last:
    # the output channels innermost: g copied channels-last, so vector lanes run along the channels (one load per
    # vector of them, each window value broadcast); the gradient is written channels-last, then permuted back
    order = (0, 1) + tuple(range(3, 4 + 2 * n)) + (2,)
    windows, gw, outs = windows.permute(order), gw.permute(order).contiguous(), tuple(range(2, 2 + n))
  dw = (gw.expand(windows.shape) * windows).sum((0,) + outs, keepdim=True)
  if last: dw = dw.contiguous().permute(inverse_permutation(order))
  return dx.uop, dw.reshape(w.shape).uop


def _loops_with_vector_ops(device: str) -> bool:
  """Whether `device` loops over a kernel's outputs with vector ops (a CPU), where the layout choices of the matmul
  (`Tensor._panel_width`, `Tensor._copies_transposed`) and of conv2d's weight gradient pay."""
  caps = get_registry().device(device).caps
  return caps.launch_dims == 0 and caps.vector_ops


def _channels_last_weight_gradient(device: DeviceArg, rc: int, cin_g: int, dtype: DType) -> bool:
  """Whether conv2d's weight gradient sums with the output channels innermost (see _conv_gradient). On a device that
  loops over its outputs with vector ops, the weight's own layout leaves the lanes along the kernel's columns (3-7
  of a vector's 8-16); channels-last they run along the output channels (AVX-512, 128 24x24 images, 5x5, 32 -> 32
  channels: 20 -> 7 ms, the copies included; 3x3 64 -> 64: 4.0 -> 1.3 ms; 2 groups of 16: 9.3 -> 0.8 ms). Not for
  a few output channels per group (depthwise: 0.90 -> 1.03 ms) or a few input ones, whose channels-last tile has
  no second axis to reuse each load along (1 -> 32 channels, 5x5: 1.2 -> 3.3 ms; 3 -> 64, 7x7: 11.6 -> 15.4 ms).
  tinygrad's beautiful_mnist step (TinyJit, batch 128): 83 -> 58 ms."""
  if isinstance(device, tuple) or rc < CHANNELS_LAST_MIN or cin_g < CHANNELS_LAST_MIN or not dtype.is_float: return False
  return _loops_with_vector_ops(device)


custom_gradients["conv"] = _conv_gradient


def _check_dtype_on(device: str | tuple[str, ...], dtype: DType) -> None:
  """UnsupportedError, at the call that makes a tensor, when its device (or one of them) cannot hold `dtype`."""
  for d in device if isinstance(device, tuple) else (device,):
    caps = get_registry().device(d).caps
    if dtype.scalar() not in caps.dtypes: check_supported(d, caps, {dtype.scalar()})


def _const_at(dt: DType, value: Any, shape: tuple) -> UOp:
  """The constant `value` broadcast to `shape`. Eager code makes the same few (`x + 1`, `lr * g`) every step: they
  are kept, so each is three nodes made once, not on every op. `repr` tells -0.0 from 0.0 (equal as keys)."""
  if any(isinstance(d, UOp) for d in shape): return broadcast(UOp.const(dt, value), shape)  # holds a Variable
  return _const_node(dt, shape, value, repr(value))


#: movement ops that only rearrange or repeat a buffer's elements: a view of a buffer, not a computation
_VIEW_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP})


def _view_base(u: UOp) -> UOp | None:
  """The node `u` is a view of (through view ops alone; `u` itself when it is no view); None for a view whose
  shape depends on a Variable (realize gives it a buffer of the largest size, as any symbolic result)."""
  while u.op in _VIEW_OPS:
    if any(isinstance(d, UOp) for d in u.shape): return None
    u = u.src[0]
  return u


def _plain_view(u: UOp) -> bool:
  """Whether a view of a buffer node has plain ints in every argument down to the buffer (no symbolic size)."""
  def plain(a: Any) -> bool: return all(map(plain, a)) if isinstance(a, tuple) else not isinstance(a, UOp)
  while u.op is not Ops.BUFFER:
    if not plain(u.arg): return False
    u = u.src[0]
  return True


def _numpy_view(u: UOp, flat: np.ndarray) -> np.ndarray:
  """The view `u` of a buffer node applied to its flat host array: numpy views of its memory (no copy)."""
  if u.op is Ops.BUFFER: return flat
  x = _numpy_view(u.src[0], flat)
  if u.op is Ops.RESHAPE: return x.reshape(u.arg)  # of a strided view numpy may copy: _host_view checks
  if u.op is Ops.PERMUTE: return x.transpose(u.arg)
  if u.op is Ops.EXPAND: return np.broadcast_to(x, u.arg)  # read-only: one element stands for several
  if u.op is Ops.SHRINK: return x[tuple(slice(b, e) for b, e in u.arg)]
  assert u.op is Ops.FLIP, u.op
  return x[tuple(slice(None, None, -1) if i in u.arg else slice(None) for i in range(x.ndim))]


def _views_a_buffer(u: UOp) -> bool:
  """Whether `u` is a realized buffer or a view of one, or a sharded tensor's node whose every shard is (nothing to
  run: realize leaves it as it is)."""
  if u.op is Ops.MULTI: return all(map(_views_a_buffer, u.src))
  return (base := _view_base(u)) is not None and base.op is Ops.BUFFER


def _rebase(view: UOp, base: UOp, new: UOp) -> UOp:
  """The view `view` of `base` taken of `new` instead (same shape)."""
  return new if view is base else view.replace(src=(_rebase(view.src[0], base, new), *view.src[1:]))


def _leaf(u: UOp, device: str) -> UOp:
  """`u` as a buffer of its own on `device` (its value written into it by the next realize)."""
  if contiguous_base(u) is not None and u.op is not Ops.CONST: return u
  buf = Buffer(device, prod(u.shape), u.dtype, get_registry().device(device).allocator)
  return UOp(Ops.ASSIGN, u.dtype, (_reshape(buffer_node(buf), u.shape), u))


def graph_roots(tensors: list[Tensor]) -> tuple[list[UOp], list[str], Rebind]:
  """The graphs to schedule for `tensors` and their devices: a sharded tensor's graph lowered to one graph per
  device (plugrad.multi). The rebind it returns also points each sharded tensor at what its shards became, before
  the memory planner runs, so the shards' buffers count as held."""
  roots: list[UOp] = []
  devices: list[str] = []
  sharded: list[tuple[Tensor, _multi.Lowered]] = []
  for t in tensors:
    if isinstance(t.device, tuple):
      low = _multi.lower(t.uop, t.device)
      sharded.append((t, low))
      roots.extend(low.shards)
      devices.extend(t.device)
    else:
      roots.append(t.uop)
      devices.append(t.device)

  def rebind(becomes: dict[UOp, UOp]) -> None:
    _handles.rebind(becomes)
    for t, low in sharded:
      assert isinstance(t.device, tuple)
      t.uop = _multi.multi([becomes.get(s, s) for s in low.shards], t.device, low.axis)
  return roots, devices, rebind


def _finish_sharded(tensors: list[Tensor]) -> None:
  """Sharded tensors whose kernels ran now point at their shards' buffers."""
  for t in tensors:
    if isinstance(t.device, tuple) and t.uop.op is Ops.MULTI:
      views = [v if (v := realized_view(s)) is not None else s for s in t.uop.src]
      t.uop = _multi.multi(views, t.device, t.uop.arg[1])


def _schedule(tensors: list[Tensor], limit_device: DeviceArg | None = None) -> list[ScheduleItem]:
  """Kernelize the tensors and list their pending kernels (rebinding them); `limit_device` takes the
  buffer limit from another device (to render for it elsewhere)."""
  tensors = [t for t in tensors if not _views_a_buffer(t.uop)]  # realize leaves these as they are: no kernels
  if not tensors: return []
  roots, devices, rebind = graph_roots(tensors)
  return engine_schedule(roots, devices, _handles.held.keys, rebind, get_registry(), limit_device)


__all__ = ["Tensor", "broadcast_shape", "graph_roots"]
