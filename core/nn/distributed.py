"""Data-parallel training across processes: the same script under `mpirun -np N`.

Each process holds the whole model and trains on its slice of the global batch; after `backward` the gradients
are averaged over the processes (`all_reduce_(grads, average=True)`), so every process takes the same optimizer
step. The collectives come from the process group a plugin provides (`plugrad_process_group`: MPI through
plugrad-mpi); without one, plugrad runs as a group of one and these calls change nothing.

    group = distributed.world()
    xb = x[idx[group.rank::group.size]]            # this process's part of the batch
    loss = model(Tensor(xb)).sparse_categorical_crossentropy(Tensor(yb))
    loss.backward()
    distributed.all_reduce_([loss] + [p.grad for p in params], average=True)
    opt.step()
"""
from __future__ import annotations

from typing import Sequence

from plugrad.device import Buffer, Collective
from plugrad.registry import get_registry
from plugrad.scheduler import buffer_of, contiguous_base
from plugrad.tensor import Tensor


def world() -> Collective:
  """The group of processes this one runs in (`rank`, `size`, collectives over one buffer per process)."""
  return get_registry().process_group()


def _own_buffers(tensors: Sequence[Tensor]) -> list[Buffer]:
  """Realize the tensors (together: one schedule) and return each one's buffer, giving a tensor that is a view
  of another's buffer one of its own first, so a collective writing in place changes that tensor only."""
  for t in tensors:
    if isinstance(t.device, tuple):
      raise ValueError("collectives across processes take tensors on one device each; gather a sharded tensor "
                       "first with .to(device)")
  Tensor.realize(*tensors)
  bufs: list[Buffer] = []
  seen: set[int] = set()
  for t in tensors:
    base = contiguous_base(t.uop)
    bufs.append(buffer_of(t._own_buffer(copy=base is not None and id(buffer_of(base)) in seen)))
    seen.add(id(bufs[-1]))
  return bufs


def all_reduce_(tensors: Sequence[Tensor], op: str = "sum", average: bool = False) -> list[Tensor]:
  """Combine each tensor with the same tensor of every other process, in place: each is replaced by op(every
  process's value) (`average`: the sum divided by the number of processes). Tensors of one dtype travel together
  as one flat buffer, so a model's gradients cost one collective per dtype, not one per tensor.

  :param tensors: tensors on one device each, of the same shapes and dtypes in every process, in the same order.
  :param op: "sum", "prod", "max" or "min".
  :return: the tensors.
  """
  group = world()
  if group.size == 1 or not tensors: return list(tensors)
  if average and op != "sum": raise ValueError(f"average=True averages a sum, not {op!r}")
  buckets: dict[tuple, list[Tensor]] = {}
  for t in tensors: buckets.setdefault((t.dtype, t.device), []).append(t)
  flats = [ts[0].flatten().cat(*[t.flatten() for t in ts[1:]]) if len(ts) > 1 else ts[0].flatten()
           for ts in buckets.values()]
  for b in _own_buffers(flats): group.all_reduce([b], op)
  for ts, flat in zip(buckets.values(), flats):
    if average: flat = (flat / group.size).cast(flat.dtype)
    start = 0
    for t in ts:  # each tensor becomes its part of the reduced buffer
      t.uop = flat[start:start + t.numel()].reshape(t.shape).uop
      start += t.numel()
  Tensor.realize(*tensors)
  return list(tensors)


def broadcast_(tensors: Sequence[Tensor], root: int = 0) -> list[Tensor]:
  """Every process's tensors take the values of process `root`'s, in place (make initial weights agree)."""
  group = world()
  if group.size == 1 or not tensors: return list(tensors)
  for b in _own_buffers(tensors): group.broadcast([b], root)
  return list(tensors)


__all__ = ["world", "all_reduce_", "broadcast_"]
