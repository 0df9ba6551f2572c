"""Sharding: one logical tensor over several devices (tinygrad's `Tensor.shard`).

A sharded tensor's node is `MULTI(shard_0, ..., shard_n-1)` with arg `(devices, axis)`: shard i is an ordinary
tensor graph on `devices[i]`, and `axis` is the axis the shards split the tensor along (None: replicated, every
shard is the whole tensor). Ops on a sharded tensor build the logical graph, with whole shapes, as on any other
tensor: shapes, argument checks and gradient rules are the ordinary ones, and a node made only of constants
(`Tensor.zeros(..., device=devices)`) counts as replicated on every device.

`lower` turns a logical graph into one graph per device when it is realized:

- elementwise ops run shard by shard; a replicated operand is cut to each shard's slice, and an operand sharded
  along another axis is gathered first (a reshard);
- movement ops run shard by shard where they stay within the shards (permute, expand, a reshape that keeps each
  shard's block of the sharded axis, pad/shrink/flip of other axes); pad, shrink and flip of the sharded axis
  gather the shards first (the result is replicated); a reshape that would split a shard is refused;
- reductions run shard by shard; over the sharded axis the partial results are combined by an all-reduce and
  the result is replicated.

Gradients: the logical graph's rules apply; a MULTI node's rule (plugrad.gradient) hands each shard its slice of
the gradient, lowered per device, so gradients also reach a tensor that was sharded.

Inside one process the all-reduce and all-gather are graph nodes: copies (the transfer role, `Registry.transfer`)
and adds, so they stay lazy and the scheduler fuses around them. Collectives over buffers that exist already,
across devices or processes (MPI), go through the collective role (`Collective`, hook `plugrad_collective` and
`plugrad_process_group`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from plugrad.device import Buffer, Collective
from plugrad.dtype import dtypes
from plugrad.ops import GroupOp, Ops
from plugrad.shape import prod
from plugrad.uops import UOp, toposort

Devices = tuple[str, ...]

#: Ops that apply to each shard as they are (same arg): values computed element by element.
_ELEMENTWISE = GroupOp.ALU | {Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD}
#: Nodes bound to one device: a graph holding one cannot be replicated by reusing it on every device.
_DEVICE_BOUND = {Ops.BUFFER, Ops.COPY, Ops.ASSIGN, Ops.KERNEL}


def shard_bounds(size: int, count: int) -> list[tuple[int, int]]:
  """The [start, end) of each of `count` shards of an axis of `size`: nearly equal, the larger ones first."""
  if size < count:
    raise ValueError(f"cannot shard an axis of size {size} over {count} devices: each needs at least one row")
  return [(size * i // count, size * (i + 1) // count) for i in range(count)]


def multi(shards: Sequence[UOp], devices: Devices, axis: int | None) -> UOp:
  """The MULTI node of `shards` (one per device, in the order of `devices`)."""
  if len(shards) != len(devices): raise ValueError(f"{len(shards)} shards for {len(devices)} devices")
  return UOp(Ops.MULTI, shards[0].dtype, tuple(shards), (tuple(devices), axis))


def _shrink_axis(u: UOp, axis: int, start: int, end: int) -> UOp:
  if start == 0 and end == u.shape[axis]: return u
  bounds = tuple((start, end) if i == axis else (0, s) for i, s in enumerate(u.shape))
  return UOp(Ops.SHRINK, u.dtype, (u,), bounds)


def _bound(u: UOp) -> bool:
  return any(n.op in _DEVICE_BOUND for n in u.toposort)


def shard(u: UOp, device: str, devices: Devices, axis: int | None) -> UOp:
  """`u` (a graph on `device`) split over `devices` along `axis` (None: a whole copy on each). The pieces are copied
  lazily; a graph of constants only (bound to no device) is simply built on each."""
  if axis is not None and not 0 <= axis < len(u.shape):
    raise ValueError(f"cannot shard a tensor of shape {u.shape} along axis {axis}")
  bounds = shard_bounds(u.shape[axis], len(devices)) if axis is not None else [(0, 0)] * len(devices)
  free = not _bound(u)
  pieces = []
  for d, (start, end) in zip(devices, bounds):
    piece = u if axis is None else _shrink_axis(u, axis, start, end)
    pieces.append(piece if free or d == device else UOp(Ops.COPY, u.dtype, (piece,), d))
  return multi(pieces, devices, axis)


def split_replicated(u: UOp, devices: Devices, axis: int) -> UOp:
  """The graph `u` of a replicated tensor on `devices` split along `axis`: each device keeps its piece of its own copy,
  so nothing is copied between devices."""
  shards = lower(u, devices).shards
  bounds = shard_bounds(u.shape[axis], len(devices))
  return multi([_shrink_axis(s, axis, start, end) for s, (start, end) in zip(shards, bounds)], devices, axis)


@dataclass(frozen=True)
class Lowered:
  """A logical node as one node per device; `axis` is the sharded axis (None: replicated)."""
  shards: tuple[UOp, ...]
  axis: int | None

  def sizes(self) -> list[int]:
    return [s.shape[self.axis] for s in self.shards] if self.axis is not None else []


def _pad_axis(u: UOp, axis: int, before: int, after: int) -> UOp:
  if not before and not after: return u
  pairs = tuple((before, after) if i == axis else (0, 0) for i in range(len(u.shape)))
  # floats pad with -0.0, the exact identity of the gather's +: a -0.0 shard stays -0.0 (as cat's)
  return UOp(Ops.PAD, u.dtype, (u,), (pairs, False if u.dtype == dtypes.bool else -0.0 if u.dtype.is_float else 0))


def _copy_to(u: UOp, src: str, dest: str) -> UOp:
  return u if src == dest else UOp(Ops.COPY, u.dtype, (u,), dest)


def _fold(pieces: list[UOp], op: Ops) -> UOp:
  """op(op(pieces[0], pieces[1]), ...): the same order on every device, so the replicas are equal to the bit."""
  acc = pieces[0]
  for piece in pieces[1:]: acc = UOp(op, acc.dtype, (acc, piece))
  return acc


def all_gather(x: Lowered, devices: Devices) -> Lowered:
  """Every device gets the whole tensor: the other shards copied in, padded to place and added (in the same
  order on every device, so the replicas are equal to the bit)."""
  if x.axis is None: return x
  sizes, axis = x.sizes(), x.axis
  total, starts = sum(sizes), [sum(sizes[:i]) for i in range(len(sizes))]
  combine = Ops.OR if x.shards[0].dtype == dtypes.bool else Ops.ADD
  return Lowered(tuple(_fold([_pad_axis(_copy_to(s, src, dest), axis, start, total - start - size)
                              for s, src, start, size in zip(x.shards, devices, starts, sizes)], combine)
                       for dest in devices), None)


def all_reduce(x: Lowered, op: Ops, devices: Devices) -> Lowered:
  """Every device gets op(shard_0, shard_1, ...) of the shards (partial results of the same shape), combined in
  device order on each device so the replicas are equal to the bit."""
  out = [_fold([_copy_to(s, src, dest) for s, src in zip(x.shards, devices)], op) for dest in devices]
  return Lowered(tuple(out), None)


def to_axis(x: Lowered, axis: int | None, sizes: list[int], devices: Devices) -> tuple[UOp, ...]:
  """`x` as shards along `axis` with `sizes` (None: replicated)."""
  if x.axis == axis: return x.shards
  whole = all_gather(x, devices)
  if axis is None: return whole.shards
  starts = np.cumsum([0] + sizes[:-1]).tolist()
  return tuple(_shrink_axis(s, axis, b, b + n) for s, b, n in zip(whole.shards, starts, sizes))


def _reshape_axis(old: tuple[int, ...], new: tuple[int, ...], axis: int, sizes: list[int]) -> int | None:
  """The axis of `new` that holds each shard's block of `old`'s sharded axis, when a reshape keeps the shards
  apart (every shard's rows stay whole rows of that axis); None when it mixes them."""
  outer, inner_old = prod(old[:axis]), prod(old[axis + 1:])
  for b in range(len(new)):
    if prod(new[:b]) != outer: continue
    inner = prod(new[b + 1:])
    if prod(new[b:]) == prod(old[axis:]) and inner and all((n * inner_old) % inner == 0 for n in sizes): return b
  return None


def _lower_node(n: UOp, xs: list[Lowered], devices: Devices) -> Lowered:
  op = n.op
  if op is Ops.CUSTOM_GRADIENT: return xs[0]  # the value; gradients are taken on the logical graph
  if op in _ELEMENTWISE or op in (Ops.CAST, Ops.BITCAST):
    ref = next((x for x in xs if x.axis is not None), xs[0])
    srcs = [to_axis(x, ref.axis, ref.sizes(), devices) for x in xs]
    return Lowered(tuple(n.replace(src=tuple(s[i] for s in srcs)) for i in range(len(devices))), ref.axis)
  x = xs[0]
  axis, sizes = x.axis, x.sizes()

  def each(arg_of) -> tuple[UOp, ...]:
    return tuple(n.replace(src=(s,), arg=arg_of(i)) for i, s in enumerate(x.shards))

  if op is Ops.REDUCE_AXIS:
    partial = Lowered(each(lambda i: n.arg), axis)
    return all_reduce(partial, n.arg[0], devices) if axis is not None and axis in n.arg[1] else partial
  if axis is None and op in GroupOp.Movement: return Lowered(each(lambda i: n.arg), None)
  if op is Ops.PERMUTE: return Lowered(each(lambda i: n.arg), n.arg.index(axis))
  if op is Ops.EXPAND: return Lowered(each(lambda i: n.arg[:axis] + (sizes[i],) + n.arg[axis + 1:]), axis)
  if op is Ops.RESHAPE:
    old, new = n.src[0].shape, tuple(n.arg)
    b = _reshape_axis(old, new, axis, sizes)
    if b is None:
      raise NotImplementedError(f"RESHAPE {old} -> {new} of a tensor sharded along axis {axis} over {len(devices)} "
                                f"devices would split its shards; shard along another axis, or gather it first with "
                                f".to(device)")
    inner, inner_old = prod(new[b + 1:]), prod(old[axis + 1:])
    return Lowered(each(lambda i: new[:b] + (sizes[i] * inner_old // inner,) + new[b + 1:]), b)
  if op is Ops.SHRINK and n.arg[axis] == (0, n.src[0].shape[axis]):
    return Lowered(each(lambda i: n.arg[:axis] + ((0, sizes[i]),) + n.arg[axis + 1:]), axis)
  if op is Ops.PAD and n.arg[0][axis] == (0, 0): return Lowered(each(lambda i: n.arg), axis)
  if op is Ops.FLIP and axis not in n.arg: return Lowered(each(lambda i: n.arg), axis)
  if op in (Ops.PAD, Ops.SHRINK, Ops.FLIP):  # it crosses the shards: gather them, then every device does it
    whole = all_gather(x, devices)
    return Lowered(tuple(n.replace(src=(s,)) for s in whole.shards), None)
  raise NotImplementedError(f"{op.name} of a tensor sharded along axis {axis} over {', '.join(devices)} is not "
                            f"supported; gather it onto one device first with .to(device)")


def lower(root: UOp, devices: Devices) -> Lowered:
  """The logical graph `root` of a tensor on `devices` as one graph per device (see the module docstring)."""
  done: dict[UOp, Lowered | None] = {}  # None: a node with no MULTI below, kept as it is
  for n in toposort([root], descend=lambda u: u.op is not Ops.MULTI):
    if n.op is Ops.MULTI:
      if n.arg[0] != devices:
        raise ValueError(f"a tensor sharded over {', '.join(n.arg[0])} meets one on {', '.join(devices)}: shard both "
                         f"over the same devices")
      done[n] = Lowered(n.src, n.arg[1])
    elif all(done[s] is None for s in n.src): done[n] = None
    else: done[n] = _lower_node(n, [_replicated(s, done[s], devices) for s in n.src], devices)
  if (out := done[root]) is None: return _replicated(root, None, devices)
  return out


def _replicated(u: UOp, x: Lowered | None, devices: Devices) -> Lowered:
  if x is not None: return x
  if _bound(u):
    raise ValueError(f"a tensor on one device meets a tensor sharded over {', '.join(devices)}: shard it too "
                     f"(.shard(devices)) or copy it to every device (.to(devices))")
  return Lowered((u,) * len(devices), None)


def gather_numpy(shards: Sequence[np.ndarray], axis: int | None) -> np.ndarray:
  """The whole array from the shards' arrays."""
  return shards[0] if axis is None else np.concatenate(list(shards), axis=axis)


# ---------------------------------------------------------------- collectives over existing buffers

_REDUCE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _host_reduce(bufs: list[Buffer], op: str) -> np.ndarray:
  """The buffers' contents combined by `op` on the host, in buffer order."""
  arrays = [b.numpy() for b in bufs]
  acc = arrays[0].copy()
  for a in arrays[1:]: acc = _REDUCE[op](acc, a).astype(acc.dtype, copy=False)
  return acc


class TransferCollective(Collective):
  """plugrad's fallback for buffers on several devices of this process: everything goes to the host through
  each buffer's allocator (the HostTransfer path), is combined there in buffer order, and is copied back."""

  def _all_reduce(self, bufs: list[Buffer], op: str) -> None:
    acc = _host_reduce(bufs, op)
    for b in bufs: b.copyin(acc)

  def _all_gather(self, dest: list[Buffer], src: list[Buffer]) -> None:
    whole = np.concatenate([b.numpy() for b in src])
    for d in dest: d.copyin(whole)

  def _broadcast(self, bufs: list[Buffer], root: int) -> None:
    data = bufs[root].numpy()
    for i, b in enumerate(bufs):
      if i != root: b.copyin(data)

  def _reduce_scatter(self, dest: list[Buffer], src: list[Buffer], op: str) -> None:
    acc = _host_reduce(src, op)
    start = 0
    for d in dest:
      d.copyin(acc[start:start + d.size])
      start += d.size


class SingleProcess(Collective):
  """The process group of a program that runs alone: rank 0 of 1, every collective leaves the buffer as it is."""

  def _all_reduce(self, bufs: list[Buffer], op: str) -> None: pass
  def _all_gather(self, dest: list[Buffer], src: list[Buffer]) -> None:
    for d, s in zip(dest, src): d.copyin(s.numpy())
  def _broadcast(self, bufs: list[Buffer], root: int) -> None: pass
  def _reduce_scatter(self, dest: list[Buffer], src: list[Buffer], op: str) -> None:
    for d, s in zip(dest, src): d.copyin(s.numpy()[:d.size])


__all__ = ["Lowered", "lower", "shard", "shard_bounds", "multi", "all_gather", "all_reduce", "to_axis", "gather_numpy",
           "TransferCollective", "SingleProcess"]
